//! The table store: the one `ArcSwap` holding the running routing table.
//!
//! Every write (config load, `PUT /api/v1/table`, `PATCH /api/v1/routes/..`,
//! the rollout engine) builds a complete new table from raw values with the
//! same validation as the config loader, then swaps it in whole. The proxy
//! loads one snapshot per request, so no request ever sees half a change.
//! A rejected write leaves the running table and its version untouched.

use super::backend::{Backend, BackendRegistry};
use super::metrics::{Metrics, RouteMetrics};
use super::mirror::MirrorCounters;
use super::resilience::RouteGuards;
use crate::config::affinity::fill_affinity_values;
use crate::config::raw::{RawRoute, RawTable};
use crate::config::{compile_table, compile_table_with, ConfigError, TableRules, TableSpec};
use crate::stats::RouteStats;
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// Seconds of per-second stats kept per route (the largest query window).
pub const STATS_CAPACITY_SECS: usize = 600;

/// Runtime handles of one route, resolved once per table install so the
/// request path does no map lookups.
pub struct RouteRuntime {
    /// Windowed stats (kept across swaps by route name).
    pub stats: Arc<RouteStats>,
    /// Primary backend state.
    pub primary: Arc<Backend>,
    /// Canary backend state, if the route has one.
    pub canary: Option<Arc<Backend>>,
    /// Mirror counters and in-flight cap (kept across swaps).
    pub mirror: Arc<MirrorCounters>,
    /// Pre-registered Prometheus handles (kept across swaps by route name).
    pub metrics: Arc<RouteMetrics>,
    /// Retry budget, rate-limit buckets and their counters; `None` when the
    /// route has no resilience policy (kept across swaps while the
    /// route's policies stay the same).
    pub guards: Option<Arc<RouteGuards>>,
}

/// One installed table.
pub struct Snapshot {
    /// Monotonic version, the ETag of `GET /api/v1/table`.
    pub version: u64,
    /// The validated table.
    pub spec: TableSpec,
    /// Parallel to `spec.routing.routes`.
    pub routes: Vec<RouteRuntime>,
}

/// Why a write was refused.
#[derive(Debug)]
pub enum WriteError {
    /// `If-Match` named another version (→ 409).
    Conflict { current: u64 },
    /// The new table does not validate (→ 400/422 naming the field).
    Invalid(Vec<ConfigError>),
    /// The named route does not exist (→ 404).
    NotFound(String),
}

/// A change notification for `/api/v1/events`.
#[derive(Debug, Clone)]
pub struct TableChanged {
    pub old_version: u64,
    pub new_version: u64,
    /// Who made the change (`config`, `api`, `reload`, `engine:<canary>`).
    pub actor: String,
    /// Short description for the audit log.
    pub what: String,
}

/// Holds the current snapshot and serialises writers.
pub struct TableStore {
    current: ArcSwap<Snapshot>,
    /// Writers take this so read-modify-write sequences do not interleave.
    write: Mutex<()>,
    backends: BackendRegistry,
    stats: Mutex<HashMap<String, Arc<RouteStats>>>,
    mirrors: Mutex<HashMap<String, Arc<MirrorCounters>>>,
    guards: Mutex<HashMap<String, Arc<RouteGuards>>>,
    events: broadcast::Sender<TableChanged>,
    /// The app's Prometheus registry; hands out per-route handles.
    metrics: Arc<Metrics>,
    /// A provider fills endpoint lists: a backend that says `provider: docker` may
    /// be empty, and a write giving such a backend no endpoints keeps the list it has.
    provided: AtomicBool,
    /// Endpoint revisions as the providers know them (from labels).
    revisions: super::providers::EndpointRevisions,
    /// `limits.maxTableRegexBytes`: a write whose table's regexes compile to more
    /// is refused.
    max_table_regex_bytes: AtomicUsize,
}

impl TableStore {
    /// Installs the initial table as version 1. Routes that start with a
    /// canary weight and session affinity get their cookie values here.
    pub fn new(spec: TableSpec) -> Arc<Self> {
        Self::with_metrics(spec, Metrics::new())
    }

    /// Like [`TableStore::new`], registering route metrics in `metrics`.
    pub fn with_metrics(mut spec: TableSpec, metrics: Arc<Metrics>) -> Arc<Self> {
        let mut raw = spec.raw.clone();
        fill_affinity_values(&RawTable::default(), &mut raw, &mut rand::rng());
        if raw != spec.raw {
            // `spec` was validated by its caller (with the rules it needed).
            let rules = TableRules {
                docker_provider: true,
                max_table_regex_bytes: usize::MAX,
            };
            if let Ok(filled) = compile_table_with(&raw, rules) {
                spec = filled;
            }
        }
        let (events, _) = broadcast::channel(1024);
        let store = TableStore {
            current: ArcSwap::from_pointee(Snapshot {
                version: 0,
                spec: empty_spec(),
                routes: Vec::new(),
            }),
            write: Mutex::new(()),
            backends: BackendRegistry::default(),
            stats: Mutex::new(HashMap::new()),
            mirrors: Mutex::new(HashMap::new()),
            guards: Mutex::new(HashMap::new()),
            events,
            metrics,
            provided: AtomicBool::new(false),
            revisions: Default::default(),
            max_table_regex_bytes: AtomicUsize::new(crate::config::DEFAULT_MAX_TABLE_REGEX_BYTES),
        };
        let snap = store.build(spec, 1);
        store.current.store(Arc::new(snap));
        Arc::new(store)
    }

    /// The current snapshot (one atomic load + refcount).
    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Change notifications.
    pub fn subscribe(&self) -> broadcast::Receiver<TableChanged> {
        self.events.subscribe()
    }

    /// The Prometheus registry route handles come from.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Lets providers fill backends (`providers:` configured): from now on a
    /// backend that says `provider: docker` may have no endpoints, and a write that
    /// gives such a backend none (a reload of the file, `PUT /api/v1/table`) keeps
    /// the list it has, so a reload never empties what a provider filled.
    pub fn enable_providers(&self) {
        self.provided.store(true, Ordering::Release);
    }

    /// Sets `limits.maxTableRegexBytes` for the writes from now on (the start, a
    /// reload).
    pub fn set_max_table_regex_bytes(&self, bytes: usize) {
        self.max_table_regex_bytes.store(bytes, Ordering::Release);
    }

    /// `limits.maxTableRegexBytes` as the writes see it.
    pub fn max_table_regex_bytes(&self) -> usize {
        self.max_table_regex_bytes.load(Ordering::Acquire)
    }

    /// Endpoint revisions as the providers know them.
    pub fn revisions(&self) -> &super::providers::EndpointRevisions {
        &self.revisions
    }

    /// Backend runtime state by name.
    pub fn backend(&self, name: &str) -> Option<Arc<Backend>> {
        self.backends.get(name)
    }

    /// The resilience state of a route by name, if it has policies.
    pub fn route_guards(&self, name: &str) -> Option<Arc<RouteGuards>> {
        self.load()
            .spec
            .routing
            .index_of(name)
            .and_then(|i| self.load().routes.get(i).and_then(|r| r.guards.clone()))
    }

    /// Stats of a route by name (also for routes removed since, until restart).
    pub fn route_stats(&self, name: &str) -> Option<Arc<RouteStats>> {
        self.stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Replaces the whole table, optionally only if the version is `if_match`.
    pub fn replace(
        &self,
        raw: RawTable,
        if_match: Option<u64>,
        actor: &str,
    ) -> Result<Arc<Snapshot>, WriteError> {
        self.modify(if_match, actor, "replace table", |_| Ok(raw))
    }

    /// Read-modify-write of the whole table, atomic with the engine's own
    /// writes (a `load` then `replace` with If-Match can lose that race and
    /// must retry; this cannot).
    pub fn update_table(
        &self,
        actor: &str,
        what: &str,
        f: impl FnOnce(&mut RawTable),
    ) -> Result<Arc<Snapshot>, WriteError> {
        self.modify(None, actor, what, |cur| {
            let mut raw = cur.spec.raw.clone();
            f(&mut raw);
            Ok(raw)
        })
    }

    /// Read-modify-write of one route's raw definition.
    pub fn update_route(
        &self,
        name: &str,
        if_match: Option<u64>,
        actor: &str,
        f: impl FnOnce(&mut RawRoute) -> Result<(), Vec<ConfigError>>,
    ) -> Result<Arc<Snapshot>, WriteError> {
        let what = format!("update route {name}");
        self.modify(if_match, actor, &what, |cur| {
            let mut raw = cur.spec.raw.clone();
            let Some(r) = raw.routes.iter_mut().find(|r| r.name == name) else {
                return Err(WriteError::NotFound(name.to_string()));
            };
            f(r).map_err(WriteError::Invalid)?;
            Ok(raw)
        })
    }

    fn modify(
        &self,
        if_match: Option<u64>,
        actor: &str,
        what: &str,
        f: impl FnOnce(&Snapshot) -> Result<RawTable, WriteError>,
    ) -> Result<Arc<Snapshot>, WriteError> {
        let _w = self.write.lock().unwrap_or_else(|p| p.into_inner());
        let cur = self.current.load_full();
        if let Some(v) = if_match {
            if v != cur.version {
                return Err(WriteError::Conflict {
                    current: cur.version,
                });
            }
        }
        let mut raw = f(&cur)?;
        fill_affinity_values(&cur.spec.raw, &mut raw, &mut rand::rng());
        let provided = self.provided.load(Ordering::Acquire);
        if provided {
            for (name, b) in raw.backends.iter_mut() {
                if b.endpoints.is_empty() && b.provider.is_some() {
                    if let Some(old) = cur.spec.raw.backends.get(name) {
                        b.endpoints = old.endpoints.clone();
                    }
                }
            }
        }
        let rules = TableRules {
            docker_provider: provided,
            max_table_regex_bytes: self.max_table_regex_bytes.load(Ordering::Acquire),
        };
        let spec = compile_table_with(&raw, rules).map_err(WriteError::Invalid)?;
        let snap = Arc::new(self.build(spec, cur.version + 1));
        self.current.store(snap.clone());
        let names: Vec<String> = snap.spec.backends.keys().cloned().collect();
        self.backends.retain(|n| names.iter().any(|k| k == n));
        tracing::info!(target: "weir::audit", actor, what, old_version = cur.version, new_version = snap.version, "table changed");
        let _ = self.events.send(TableChanged {
            old_version: cur.version,
            new_version: snap.version,
            actor: actor.to_string(),
            what: what.to_string(),
        });
        Ok(snap)
    }

    fn build(&self, spec: TableSpec, version: u64) -> Snapshot {
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        let mut mirrors = self.mirrors.lock().unwrap_or_else(|p| p.into_inner());
        let mut guards = self.guards.lock().unwrap_or_else(|p| p.into_inner());
        let backends: HashMap<&str, Arc<Backend>> = spec
            .backends
            .values()
            .map(|b| (b.name.as_str(), self.backends.sync(b)))
            .collect();
        let routes = spec
            .routing
            .routes
            .iter()
            .map(|r| RouteRuntime {
                stats: stats
                    .entry(r.name.clone())
                    .or_insert_with(|| Arc::new(RouteStats::new(STATS_CAPACITY_SECS)))
                    .clone(),
                // Validation guarantees both names exist.
                primary: backends[r.primary.as_str()].clone(),
                canary: r.canary.as_deref().map(|c| backends[c].clone()),
                mirror: mirrors.entry(r.name.clone()).or_default().clone(),
                metrics: self.metrics.route(&r.name, &r.primary, r.canary.as_deref()),
                guards: spec
                    .policies
                    .get(&r.name)
                    .map(|p| match guards.get(&r.name) {
                        Some(g) if g.policies == *p => g.clone(),
                        _ => {
                            let g = RouteGuards::new(p.clone());
                            guards.insert(r.name.clone(), g.clone());
                            g
                        }
                    }),
            })
            .collect();
        Snapshot {
            version,
            spec,
            routes,
        }
    }
}

fn empty_spec() -> TableSpec {
    compile_table(&RawTable::default()).unwrap_or_else(|_| unreachable!("the empty table is valid"))
}
