//! The table store: the one `ArcSwap` holding the running routing table.
//!
//! Every write (config load, `PUT /api/v1/table`, `PATCH /api/v1/routes/..`,
//! the rollout engine) builds a complete new table from raw values with the
//! same validation as the config loader, then swaps it in whole. The proxy
//! loads one snapshot per request, so no request ever sees half a change.
//! A rejected write leaves the running table and its version untouched.

use crate::affinity::MIN_VALUE_LEN;
use crate::config::raw::{RawAffinityState, RawRoute, RawTable};
use crate::config::{compile_table, ConfigError, TableSpec};
use crate::metrics::{Metrics, RouteMetrics};
use crate::mirror::MirrorCounters;
use crate::proxy::upstream::{Backend, BackendRegistry};
use crate::stats::RouteStats;
use arc_swap::ArcSwap;
use rand::Rng;
use std::collections::HashMap;
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
    events: broadcast::Sender<TableChanged>,
    /// The app's Prometheus registry; hands out per-route handles.
    metrics: Arc<Metrics>,
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
            if let Ok(filled) = compile_table(&raw) {
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
            events,
            metrics,
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

    /// Backend runtime state by name.
    pub fn backend(&self, name: &str) -> Option<Arc<Backend>> {
        self.backends.get(name)
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
        let spec = compile_table(&raw).map_err(WriteError::Invalid)?;
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
                metrics: self.metrics.route(&r.name),
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

/// A random cookie value: 16 ASCII letters and digits (≥ MIN_VALUE_LEN).
pub fn new_affinity_value(rng: &mut impl Rng) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let len = MIN_VALUE_LEN.max(16);
    (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The cookie values after the weight moves from `old_weight` to
/// `new_weight` (DESIGN §5): a run starts (0 → >0) with new canary and
/// primary values and forgets the last run's; a step (a change between two
/// non-zero weights) gets a new primary value; the run ends (>0 → 0)
/// keeping its canary value as `previousCanaryValue`, expired on sight.
/// The one rule shared by the table store and the rollout engine.
pub fn advance_affinity_state(
    state: &mut RawAffinityState,
    old_weight: i64,
    new_weight: i64,
    rng: &mut impl Rng,
) {
    if old_weight == 0 && new_weight > 0 {
        state.canary_value = Some(new_affinity_value(rng));
        state.primary_value = Some(new_affinity_value(rng));
        state.previous_canary_value = None;
    } else if old_weight > 0 && new_weight > 0 && old_weight != new_weight {
        state.primary_value = Some(new_affinity_value(rng));
        if state.canary_value.is_none() {
            state.canary_value = Some(new_affinity_value(rng));
        }
    } else if old_weight > 0 && new_weight == 0 {
        if let Some(v) = state.canary_value.take() {
            state.previous_canary_value = Some(v);
        }
        state.primary_value = None;
    }
}

/// Fills in the cookie values of routes with session affinity when a write
/// moves the weight and carries no values of its own (DESIGN §5):
/// 0 → >0 starts a run (new canary and primary values, the last run's value
/// forgotten); a weight change during the run starts a step (new primary
/// value); >0 → 0 ends the run (canary value kept as `previous` so that its
/// cookie is deleted on sight). A write that sets values itself (the engine
/// driving a fleet) is left as it is.
pub fn fill_affinity_values(old: &RawTable, new: &mut RawTable, rng: &mut impl Rng) {
    for r in &mut new.routes {
        if r.session_affinity.is_none() {
            continue;
        }
        let prev = old.routes.iter().find(|o| o.name == r.name);
        let old_weight = prev.and_then(|o| o.canary_weight).unwrap_or(0);
        let old_state = prev
            .and_then(|o| o.affinity_state.clone())
            .unwrap_or_default();
        let new_weight = r.canary_weight.unwrap_or(0);
        let state = r
            .affinity_state
            .get_or_insert_with(RawAffinityState::default);
        if *state != old_state {
            continue;
        }
        advance_affinity_state(state, old_weight, new_weight, rng);
        if *state == RawAffinityState::default() {
            r.affinity_state = None;
        }
    }
}
