//! The proxies a canary drives: the [`DataPlane`] trait, its in-process and remote
//! implementations, and the [`Fleet`] that writes to all of them and sums their stats.
//!
//! The engine never touches a routing table directly: it reads the route, writes a
//! [`RouteChange`] (the same edit, [`apply_change`], for every implementation), reads
//! per-role stats snapshots and reads backends (endpoints and `revisionPath`) through
//! this trait. [`InProcess`] is the [`TableStore`] of this process; [`Remote`] is the
//! control API of another weir (DESIGN §8):
//!
//! | call | remote request |
//! |---|---|
//! | [`DataPlane::read_route`] | `GET /api/v1/routes/{name}` → the raw route, `ETag: "<table version>"` |
//! | [`DataPlane::write_route`] | `PATCH /api/v1/routes/{name}` with the JSON merge patch from the read route to the written one, `If-Match` on the read version (a 409 re-reads and retries) |
//! | [`DataPlane::stats`] | `GET /api/v1/stats?route=R&window=Ns` → `snapshots.{primary,canary,mirror}` (mergeable histograms) |
//! | [`DataPlane::backend`] | `GET /api/v1/backends/{name}` → `configured`, `endpoints[].ready`, `revisionPath` |
//!
//! Revisions are read from the backends' endpoints themselves ([`probe_revision`]: a GET
//! of `revisionPath` on every endpoint; all must answer the same), by the engine.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;

use super::convert::{apply_change, merge_diff, CanaryDef, RouteChange};
use super::http::HttpClient;
use super::machine::SlotDeploy;
use crate::config::raw::RawRoute;
use crate::dataplane::endpoints::rolling::{Phase, RollingStatus};
use crate::dataplane::store::{TableStore, WriteError};
use crate::stats::{Role, WindowSnapshot};
use crate::wire::table::{BackendStatus, EndpointStatus, RouteStats};

mod remote;
pub use remote::{encode, etag_version, parse_backend, parse_stats, Remote};

/// A boxed future, so the trait can be used as `dyn DataPlane`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Timeout of one control-API call to a remote data plane.
pub const REMOTE_TIMEOUT: Duration = Duration::from_secs(5);

/// Timeout of one revision probe of an endpoint.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A route as read from a data plane.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteRead {
    /// The raw definition.
    pub route: RawRoute,
    /// The table version it was read at: a version lower than one seen before means
    /// the proxy restarted from its config file.
    pub version: u64,
}

/// A backend as read from a data plane.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BackendView {
    /// Backend name.
    pub name: String,
    /// The configured endpoint list (`host:port`): the desired state.
    pub endpoints: Vec<String>,
    /// The endpoints in the proxy's rotation and not draining: the actual state (a
    /// rolling update moves it toward `endpoints` one readiness-gated step at a time).
    pub rotation: Vec<String>,
    /// Path answering an endpoint's revision.
    pub revision_path: Option<String>,
    /// Whether every endpoint in rotation is ready (health checks) and none drains.
    pub ready: bool,
    /// The revision a provider (`providers.docker`, from `weir.revision` labels)
    /// knows every configured endpoint to run; `None`: unknown or mixed, and the
    /// revision is read through `revision_path`.
    pub provided_revision: Option<String>,
    /// Its endpoint rolling update's counts and phase (DESIGN §7); `None`: not reported.
    pub update: Option<RollingStatus>,
}

impl BackendView {
    /// Where the slot's deployment stands, for a run on it (see [`SlotDeploy`]).
    pub fn deploy(&self) -> SlotDeploy {
        let Some(u) = &self.update else {
            return SlotDeploy::Ready;
        };
        let counts = || {
            format!(
                "rolling update of backend {}: {} of {} new endpoints in rotation, {} ready, {} old",
                self.name, u.updated, u.desired, u.ready, u.old
            )
        };
        match u.phase {
            Phase::Complete => SlotDeploy::Ready,
            Phase::Progressing => SlotDeploy::Rolling(counts()),
            Phase::Stalled => SlotDeploy::Stalled(counts()),
        }
    }

    /// The rotation holds exactly the configured endpoints: no deployment in progress.
    pub fn settled(&self) -> bool {
        let mut a = self.endpoints.clone();
        let mut b = self.rotation.clone();
        a.sort();
        a.dedup();
        b.sort();
        b.dedup();
        !a.is_empty() && a == b
    }
}

/// One route's stats for one window, per role.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoleStats {
    /// Requests served by the primary.
    pub primary: WindowSnapshot,
    /// Requests served by the canary.
    pub canary: WindowSnapshot,
    /// Shadow copies sent to the canary.
    pub mirror: WindowSnapshot,
}

impl RoleStats {
    /// Empty stats over `window_secs`.
    pub fn empty(window_secs: u64) -> Self {
        RoleStats {
            primary: WindowSnapshot::empty(window_secs),
            canary: WindowSnapshot::empty(window_secs),
            mirror: WindowSnapshot::empty(window_secs),
        }
    }

    /// One role's snapshot.
    pub fn role(&self, role: Role) -> &WindowSnapshot {
        match role {
            Role::Primary => &self.primary,
            Role::Canary => &self.canary,
            Role::Mirror => &self.mirror,
        }
    }

    /// Adds another proxy's stats (histograms summed, so fleet percentiles are exact).
    pub fn merge(&mut self, other: &RoleStats) {
        self.primary.merge(&other.primary);
        self.canary.merge(&other.canary);
        self.mirror.merge(&other.mirror);
    }
}

/// Why a data-plane call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpError {
    /// Which data plane (`in-process` or its URL).
    pub plane: String,
    /// What went wrong.
    pub reason: String,
}

impl std::fmt::Display for DpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "data plane {}: {}", self.plane, self.reason)
    }
}

/// One proxy the engine drives.
pub trait DataPlane: Send + Sync {
    /// A name for events and errors (`in-process`, or the control API URL).
    fn id(&self) -> &str;

    /// Reads the route's raw definition.
    fn read_route<'a>(&'a self, route: &'a str) -> BoxFuture<'a, Result<RouteRead, DpError>>;

    /// Applies `change` to the route ([`apply_change`]); returns the new table version.
    fn write_route<'a>(
        &'a self,
        route: &'a str,
        change: &'a RouteChange,
        def: &'a CanaryDef,
    ) -> BoxFuture<'a, Result<u64, DpError>>;

    /// The route's stats per role over the last `window_secs` seconds, and with
    /// `max_age_ms` only over the whole seconds that began within that many ms (on the
    /// plane's own clock: the plane knows where its seconds start).
    fn stats<'a>(
        &'a self,
        route: &'a str,
        window_secs: u64,
        max_age_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<RoleStats, DpError>>;

    /// A backend's endpoints, revision path and readiness.
    fn backend<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<BackendView, DpError>>;
}

/// The table store of this process.
pub struct InProcess {
    store: Arc<TableStore>,
    /// Origin of the proxy's stats clock (`ProxyShared::started`).
    started: Instant,
    /// Audit-log actor of the engine's writes (`engine:<canary>`).
    actor: String,
}

impl InProcess {
    /// The in-process data plane; `started` must be the proxy's stats clock origin.
    pub fn new(store: Arc<TableStore>, started: Instant, actor: impl Into<String>) -> Self {
        InProcess {
            store,
            started,
            actor: actor.into(),
        }
    }

    fn err(&self, reason: impl Into<String>) -> DpError {
        DpError {
            plane: self.id().to_string(),
            reason: reason.into(),
        }
    }
}

fn write_error(e: WriteError) -> String {
    match e {
        WriteError::Conflict { current } => format!("version conflict (table is at {current})"),
        WriteError::NotFound(name) => format!("route {name:?} not found"),
        WriteError::Invalid(errors) => {
            let list: Vec<String> = errors
                .iter()
                .map(|e| format!("{}: {}", e.path, e.reason))
                .collect();
            format!("write refused: {}", list.join("; "))
        }
    }
}

impl DataPlane for InProcess {
    fn id(&self) -> &str {
        "in-process"
    }

    fn read_route<'a>(&'a self, route: &'a str) -> BoxFuture<'a, Result<RouteRead, DpError>> {
        Box::pin(async move {
            let snap = self.store.load();
            let r = snap
                .spec
                .raw
                .routes
                .iter()
                .find(|r| r.name == route)
                .ok_or_else(|| self.err(format!("route {route:?} not found")))?;
            Ok(RouteRead {
                route: r.clone(),
                version: snap.version,
            })
        })
    }

    fn write_route<'a>(
        &'a self,
        route: &'a str,
        change: &'a RouteChange,
        def: &'a CanaryDef,
    ) -> BoxFuture<'a, Result<u64, DpError>> {
        Box::pin(async move {
            // Skip no-op writes: they would bump the version and the audit log.
            let snap = self.store.load();
            if let Some(r) = snap.spec.raw.routes.iter().find(|r| r.name == route) {
                let mut after = r.clone();
                apply_change(&mut after, change, def);
                if after == *r {
                    return Ok(snap.version);
                }
            }
            self.store
                .update_route(route, None, &self.actor, |r| {
                    apply_change(r, change, def);
                    Ok(())
                })
                .map(|s| s.version)
                .map_err(|e| self.err(write_error(e)))
        })
    }

    fn stats<'a>(
        &'a self,
        route: &'a str,
        window_secs: u64,
        max_age_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<RoleStats, DpError>> {
        Box::pin(async move {
            let now_ms = u64::try_from(
                Instant::now()
                    .saturating_duration_since(self.started)
                    .as_millis(),
            )
            .unwrap_or(u64::MAX);
            let window_secs = match max_age_ms {
                Some(age) => crate::stats::seconds_within(now_ms, age, window_secs),
                None => window_secs,
            };
            let Some(stats) = self.store.route_stats(route) else {
                return Ok(RoleStats::empty(window_secs));
            };
            let now = now_ms / 1000;
            Ok(RoleStats {
                primary: stats.snapshot(Role::Primary, now, window_secs),
                canary: stats.snapshot(Role::Canary, now, window_secs),
                mirror: stats.snapshot(Role::Mirror, now, window_secs),
            })
        })
    }

    fn backend<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<BackendView, DpError>> {
        Box::pin(async move {
            let snap = self.store.load();
            let spec = snap
                .spec
                .backends
                .get(name)
                .ok_or_else(|| self.err(format!("backend {name:?} not found")))?;
            let (rotation, ready) = match self.store.backend(name) {
                None => (Vec::new(), false),
                Some(b) => {
                    let rot = b.rotation.load();
                    let serving: Vec<String> = rot
                        .iter()
                        .filter(|e| !e.draining.load(Ordering::Relaxed))
                        .map(|e| e.address.clone())
                        .collect();
                    let ready = !serving.is_empty()
                        && rot
                            .iter()
                            .filter(|e| !e.draining.load(Ordering::Relaxed))
                            .all(|e| e.ready.load(Ordering::Relaxed));
                    (serving, ready)
                }
            };
            Ok(BackendView {
                name: name.to_string(),
                endpoints: spec.endpoints.clone(),
                rotation,
                revision_path: spec.revision_path.clone(),
                ready,
                provided_revision: self.store.revisions().common(name, &spec.endpoints),
                update: self.store.backend(name).map(|b| b.rollout_status()),
            })
        })
    }
}

/// The data planes of one canary: every change goes to all of them, checks are made on
/// the sum of their stats.
#[derive(Clone)]
pub struct Fleet {
    planes: Vec<Arc<dyn DataPlane>>,
}

impl Fleet {
    /// A fleet of these planes (at least one).
    pub fn new(planes: Vec<Arc<dyn DataPlane>>) -> Self {
        Fleet { planes }
    }

    /// The planes, in configuration order.
    pub fn planes(&self) -> &[Arc<dyn DataPlane>] {
        &self.planes
    }

    /// Names of the planes.
    pub fn ids(&self) -> Vec<String> {
        self.planes.iter().map(|p| p.id().to_string()).collect()
    }

    /// The route as every plane has it (all must answer).
    pub async fn read_route(&self, route: &str) -> Result<Vec<RouteRead>, DpError> {
        let mut out = Vec::with_capacity(self.planes.len());
        for p in &self.planes {
            out.push(p.read_route(route).await?);
        }
        Ok(out)
    }

    /// Applies `change` to every plane; every plane is tried even after a failure, and
    /// the failures are returned together (the change is absolute: a retry re-applies
    /// it where it already holds without effect).
    pub async fn write_route(
        &self,
        route: &str,
        change: &RouteChange,
        def: &CanaryDef,
    ) -> Result<(), Vec<DpError>> {
        let mut errors = Vec::new();
        for p in &self.planes {
            if let Err(e) = p.write_route(route, change, def).await {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The sum of every plane's stats. One plane not answering fails the whole read:
    /// judging a canary on part of the fleet could pass a version that fails elsewhere.
    pub async fn stats(
        &self,
        route: &str,
        window_secs: u64,
        max_age_ms: Option<u64>,
    ) -> Result<RoleStats, DpError> {
        let mut sum: Option<RoleStats> = None;
        for p in &self.planes {
            let one = p.stats(route, window_secs, max_age_ms).await?;
            match &mut sum {
                None => sum = Some(one),
                Some(s) => s.merge(&one),
            }
        }
        Ok(sum.unwrap_or_else(|| RoleStats::empty(window_secs)))
    }

    /// A backend as the first plane that answers has it (backends are shared by the
    /// fleet; their endpoints are probed directly).
    pub async fn backend(&self, name: &str) -> Result<BackendView, DpError> {
        let mut last = None;
        for p in &self.planes {
            match p.backend(name).await {
                Ok(b) => return Ok(b),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(DpError {
            plane: "fleet".into(),
            reason: "no data plane".into(),
        }))
    }
}

/// What the endpoints of a backend report as their revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevisionReport {
    /// The revision, when every endpoint answered the same one.
    pub revision: Option<String>,
    /// Every endpoint answered 2xx with the same revision (and the proxy calls them
    /// ready): what a webhook promotion waits for.
    pub ready: bool,
    /// What each endpoint said, for events.
    pub detail: String,
}

/// GETs `revision_path` on every endpoint in the rotation of `backend` and reads the
/// first line of the answer as the revision. A rolling update in progress, a mixed
/// answer or a failed call reports no revision: no run starts from a half-deployed slot.
pub async fn probe_revision(client: &HttpClient, backend: &BackendView) -> RevisionReport {
    // A provider knows each endpoint's revision from its labels: nothing to poll.
    // Known before the slot settles, so that a run starts on a release at once
    // and waits for it to turn ready (or rolls back when its update stalls).
    if let Some(rev) = &backend.provided_revision {
        let settled = backend.settled();
        return RevisionReport {
            revision: Some(rev.clone()),
            ready: settled && backend.ready,
            detail: format!(
                "backend {}: revision {rev} (from the provider)",
                backend.name
            ),
        };
    }
    let Some(path) = &backend.revision_path else {
        return RevisionReport {
            revision: None,
            ready: backend.ready,
            detail: format!("backend {} has no revisionPath", backend.name),
        };
    };
    if !backend.settled() {
        return RevisionReport {
            revision: None,
            ready: false,
            detail: format!(
                "backend {}: rotation {:?} is not yet the configured {:?}",
                backend.name, backend.rotation, backend.endpoints
            ),
        };
    }
    let mut seen: Vec<Option<String>> = Vec::new();
    let mut detail = Vec::new();
    for ep in &backend.rotation {
        let url = format!("http://{ep}{path}");
        match client.get(&url, &[], PROBE_TIMEOUT).await {
            Ok(r) if (200..300).contains(&r.status) => {
                let text = String::from_utf8_lossy(&r.body);
                let rev: String = text
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim()
                    .chars()
                    .take(128)
                    .collect();
                detail.push(format!("{ep}: {rev}"));
                seen.push((!rev.is_empty()).then_some(rev));
            }
            Ok(r) => {
                detail.push(format!("{ep}: HTTP {}", r.status));
                seen.push(None);
            }
            Err(e) => {
                detail.push(format!("{ep}: {e}"));
                seen.push(None);
            }
        }
    }
    let first = seen.first().cloned().flatten();
    let agree = first.is_some() && seen.iter().all(|s| *s == first);
    RevisionReport {
        revision: if agree { first } else { None },
        ready: agree && backend.ready,
        detail: detail.join(", "),
    }
}

#[cfg(test)]
mod tests;
