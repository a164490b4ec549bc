//! Prometheus metrics of one weir, rendered at `GET /metrics` on the admin
//! listener (text exposition format).
//!
//! Every app owns its own [`Metrics`] (a `metrics-exporter-prometheus`
//! recorder that is never installed globally), so several apps in one
//! process (tests, the demo) never mix their numbers. The request path never
//! looks a label set up: the table store hands every route a
//! [`RouteMetrics`] whose handles were registered when the route appeared,
//! and the per-status-code counters are cached in a small fixed array the
//! first time a code is seen.
//!
//! Series (all documented in `docs/metrics.md`):
//! - `weir_requests_total{route,role,backend,code}`: requests finished, by
//!   status; requests the client broke are here too, under 400, 408 or 499
//!   (and in no other series).
//! - `weir_request_duration_seconds{route,role,backend}`: histogram of the
//!   time to the response head (same measure as the stats window).
//! - `weir_upstream_errors_total{route,role,kind}`: proxy-made failures,
//!   `kind` = `no_endpoint` (503), `timeout` (504), `upstream` (502).
//! - `weir_upstream_connect_errors_total{route,role}`: the part of
//!   `upstream` errors where no connection could be made.
//! - `weir_table_version`: version of the running routing table.
//! - `weir_mirror_requests_total{route}`, `weir_mirror_dropped_total{route,reason}`,
//!   `weir_mirror_in_flight{route}`: shadow traffic (from [`MirrorCounters`]).
//! - `weir_backend_endpoints{backend}`, `weir_upstream_in_flight{backend}`:
//!   endpoints in rotation and requests in flight per backend.
//!
//! The last three groups are read from the live state when `/metrics` is
//! scraped, so they cost the request path nothing.
//!
//! The `backend` label is the backend serving the role when the table was
//! installed: handles are keyed by route *and* slot backends, so a slot swap
//! installs a second set of handles and the request path still does no
//! lookup. Features above this layer (the rollout engine's series) add their
//! own text through [`Metrics::add_section`].
//!
//! [`MirrorCounters`]: super::mirror::MirrorCounters

use super::store::TableStore;
use crate::stats::Role;
use metrics::{Counter, Histogram, Key, KeyName, Label, Level, Metadata, Recorder, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Upper bounds (seconds) of the `weir_request_duration_seconds` buckets.
pub const DURATION_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Name of the request counter.
pub const REQUESTS_TOTAL: &str = "weir_requests_total";
/// Name of the latency histogram.
pub const REQUEST_DURATION: &str = "weir_request_duration_seconds";
/// Name of the proxy-made failure counter.
pub const UPSTREAM_ERRORS: &str = "weir_upstream_errors_total";
/// Name of the connect failure counter.
pub const UPSTREAM_CONNECT_ERRORS: &str = "weir_upstream_connect_errors_total";
/// Name of the table version gauge.
pub const TABLE_VERSION: &str = "weir_table_version";
/// Name of the mirror copies counter.
pub const MIRROR_REQUESTS: &str = "weir_mirror_requests_total";
/// Name of the mirror drop counter.
pub const MIRROR_DROPPED: &str = "weir_mirror_dropped_total";
/// Name of the mirror in-flight gauge.
pub const MIRROR_IN_FLIGHT: &str = "weir_mirror_in_flight";
/// Name of the endpoints-in-rotation gauge.
pub const BACKEND_ENDPOINTS: &str = "weir_backend_endpoints";
/// Name of the upstream in-flight gauge.
pub const UPSTREAM_IN_FLIGHT: &str = "weir_upstream_in_flight";

/// The `kind` label values of [`UPSTREAM_ERRORS`], in the order of the
/// pre-registered handles.
const ERROR_KINDS: [&str; 3] = ["no_endpoint", "timeout", "upstream"];

/// Distinct status codes cached per route and role; codes beyond that (a
/// backend answering dozens of different codes) are still counted, with a
/// registry lookup each.
const CODE_SLOTS: usize = 16;

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// The metrics registry of one app.
pub struct Metrics {
    /// The recorder handles are registered on (shared with every
    /// [`RouteMetrics`] so that status-code counters can be added lazily).
    recorder: Arc<PrometheusRecorder>,
    /// Renders the text format.
    handle: PrometheusHandle,
    /// (route, primary backend, canary backend) → handles; kept across table
    /// swaps so a route keeps its handles (the registry would hand out the
    /// same counters anyway). Two slots swapping back and forth make two
    /// entries, not one per swap.
    routes: Mutex<HashMap<RouteKey, Arc<RouteMetrics>>>,
    /// Text appended to every scrape by features above this layer.
    sections: Mutex<Vec<Arc<dyn ScrapeSection>>>,
}

/// Route name and the backends of its slots.
type RouteKey = (String, String, Option<String>);

/// A label value in the text exposition format: backslash, double quote and
/// newline escaped. For the [`ScrapeSection`]s that render their own lines.
pub fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Series a feature renders itself at scrape time (in the text exposition
/// format, `# HELP` and `# TYPE` included), for series whose label sets come
/// and go, which the recorder cannot forget.
pub trait ScrapeSection: Send + Sync {
    /// Appends this section's series to `out`.
    fn render(&self, out: &mut String);
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// A fresh, empty registry (not installed as the global recorder).
    pub fn new() -> Arc<Self> {
        let builder = PrometheusBuilder::new();
        // The bucket list is a non-empty constant, so this cannot fail; fall
        // back to summaries rather than panic if the crate ever disagrees.
        let builder = match builder.set_buckets(&DURATION_BUCKETS) {
            Ok(b) => b,
            Err(_) => PrometheusBuilder::new(),
        };
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        let describe = |name: &'static str, unit: Option<Unit>, help: &'static str| {
            recorder.describe_counter(KeyName::from_const_str(name), unit, help.into());
        };
        describe(
            REQUESTS_TOTAL,
            None,
            "Requests finished, by route, role (primary|canary|mirror), backend and status code.",
        );
        recorder.describe_histogram(
            KeyName::from_const_str(REQUEST_DURATION),
            Some(Unit::Seconds),
            "Time from request start to the response head, by route, role and backend.".into(),
        );
        describe(
            UPSTREAM_ERRORS,
            None,
            "Responses made by the proxy because the upstream failed: no_endpoint (503), timeout (504), upstream (502).",
        );
        describe(
            UPSTREAM_CONNECT_ERRORS,
            None,
            "Upstream failures where no connection could be made (a subset of kind=upstream).",
        );
        recorder.describe_gauge(
            KeyName::from_const_str(TABLE_VERSION),
            None,
            "Version of the running routing table (the ETag of GET /api/v1/table).".into(),
        );
        describe(MIRROR_REQUESTS, None, "Shadow copies sent to the canary.");
        describe(
            MIRROR_DROPPED,
            None,
            "Shadow copies not sent: busy (maxInFlight reached), too_large (body over maxBodyBytes), incomplete (client body failed).",
        );
        recorder.describe_gauge(
            KeyName::from_const_str(MIRROR_IN_FLIGHT),
            None,
            "Shadow copies in flight.".into(),
        );
        recorder.describe_gauge(
            KeyName::from_const_str(BACKEND_ENDPOINTS),
            None,
            "Endpoints in a backend's rotation.".into(),
        );
        recorder.describe_gauge(
            KeyName::from_const_str(UPSTREAM_IN_FLIGHT),
            None,
            "Requests in flight to a backend's endpoints.".into(),
        );
        Arc::new(Metrics {
            recorder: Arc::new(recorder),
            handle,
            routes: Mutex::new(HashMap::new()),
            sections: Mutex::new(Vec::new()),
        })
    }

    /// The handles of route `name` whose slots hold `primary` and `canary`,
    /// registered on first use (at table install, never per request).
    pub fn route(&self, name: &str, primary: &str, canary: Option<&str>) -> Arc<RouteMetrics> {
        let key = (
            name.to_string(),
            primary.to_string(),
            canary.map(str::to_string),
        );
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        routes
            .entry(key)
            .or_insert_with(|| {
                Arc::new(RouteMetrics::new(
                    self.recorder.clone(),
                    name,
                    primary,
                    canary,
                ))
            })
            .clone()
    }

    /// Adds series rendered by `section` to every scrape.
    pub fn add_section(&self, section: Arc<dyn ScrapeSection>) {
        self.sections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(section);
    }

    /// Reads the scrape-time series from `store` and renders everything in
    /// the Prometheus text format.
    pub fn render(&self, store: &TableStore) -> String {
        let snap = store.load();
        let rec = &*self.recorder;
        rec.register_gauge(&Key::from_static_name(TABLE_VERSION), &METADATA)
            .set(snap.version as f64);
        for (route, rt) in snap.spec.routing.routes.iter().zip(&snap.routes) {
            let m = &rt.mirror;
            let name = route.name.clone();
            let counter = |metric: &'static str, extra: Option<(&'static str, &'static str)>| {
                let mut labels = vec![Label::new("route", name.clone())];
                if let Some((k, v)) = extra {
                    labels.push(Label::new(k, v));
                }
                rec.register_counter(&Key::from_parts(metric, labels), &METADATA)
            };
            counter(MIRROR_REQUESTS, None).absolute(m.sent.load(Ordering::Relaxed));
            counter(MIRROR_DROPPED, Some(("reason", "busy")))
                .absolute(m.dropped_busy.load(Ordering::Relaxed));
            counter(MIRROR_DROPPED, Some(("reason", "too_large")))
                .absolute(m.dropped_too_large.load(Ordering::Relaxed));
            counter(MIRROR_DROPPED, Some(("reason", "incomplete")))
                .absolute(m.dropped_incomplete.load(Ordering::Relaxed));
            rec.register_gauge(
                &Key::from_parts(MIRROR_IN_FLIGHT, vec![Label::new("route", name.clone())]),
                &METADATA,
            )
            .set(m.in_flight.load(Ordering::Relaxed) as f64);
        }
        for name in snap.spec.backends.keys() {
            let Some(b) = store.backend(name) else {
                continue;
            };
            let rotation = b.rotation.load();
            let in_flight: usize = rotation
                .iter()
                .map(|e| e.in_flight.load(Ordering::Relaxed))
                .sum();
            let labels = || vec![Label::new("backend", name.clone())];
            rec.register_gauge(&Key::from_parts(BACKEND_ENDPOINTS, labels()), &METADATA)
                .set(rotation.len() as f64);
            rec.register_gauge(&Key::from_parts(UPSTREAM_IN_FLIGHT, labels()), &METADATA)
                .set(in_flight as f64);
        }
        self.render_resilience(&snap, store);
        let mut text = self.handle.render();
        let sections = self
            .sections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for s in sections {
            s.render(&mut text);
        }
        text
    }

    /// Moves recorded histogram samples into their buckets. Rendering does
    /// this too; the app also calls it every few seconds so an unscraped
    /// weir does not accumulate samples.
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }
}

/// One status code's counter, claimed by the first request with that code.
struct CodeSlot {
    /// The status code, 0 while free.
    code: AtomicU16,
    /// Registered once the slot is claimed.
    counter: OnceLock<Counter>,
}

/// The handles of one route and role.
struct RoleMetrics {
    /// Latency histogram (seconds).
    duration: Histogram,
    /// `weir_upstream_errors_total` per kind, in [`ERROR_KINDS`] order.
    errors: [Counter; 3],
    /// `weir_upstream_connect_errors_total`.
    connect_errors: Counter,
    /// `weir_requests_total` per status code, filled lazily.
    codes: [CodeSlot; CODE_SLOTS],
}

/// Pre-registered metric handles of one route, one set per role. Lives in
/// the route's [`RouteRuntime`](super::store::RouteRuntime).
pub struct RouteMetrics {
    /// For registering status-code counters lazily.
    recorder: Arc<PrometheusRecorder>,
    /// The `route` label value.
    route: String,
    /// The `backend` label value of each role, indexed like [`Role::ALL`]
    /// (the mirror role's copies go to the canary backend; a route without a
    /// canary has `""` there, and never records those roles).
    backends: [String; 3],
    /// Indexed like [`Role::ALL`].
    roles: [RoleMetrics; 3],
}

impl std::fmt::Debug for RouteMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteMetrics")
            .field("route", &self.route)
            .finish_non_exhaustive()
    }
}

fn role_index(role: Role) -> usize {
    match role {
        Role::Primary => 0,
        Role::Canary => 1,
        Role::Mirror => 2,
    }
}

impl RouteMetrics {
    fn new(
        recorder: Arc<PrometheusRecorder>,
        route: &str,
        primary: &str,
        canary: Option<&str>,
    ) -> Self {
        let canary = canary.unwrap_or("").to_string();
        let backends = [primary.to_string(), canary.clone(), canary];
        let roles = Role::ALL.map(|role| {
            let backend = backends[role_index(role)].clone();
            let with_backend = |mut l: Vec<Label>| {
                l.push(Label::new("backend", backend.clone()));
                l
            };
            let labels = |extra: Option<(&'static str, &'static str)>| {
                let mut l = vec![
                    Label::new("route", route.to_string()),
                    Label::new("role", role.as_str()),
                ];
                if let Some((k, v)) = extra {
                    l.push(Label::new(k, v));
                }
                l
            };
            RoleMetrics {
                duration: recorder.register_histogram(
                    &Key::from_parts(REQUEST_DURATION, with_backend(labels(None))),
                    &METADATA,
                ),
                errors: ERROR_KINDS.map(|kind| {
                    recorder.register_counter(
                        &Key::from_parts(UPSTREAM_ERRORS, labels(Some(("kind", kind)))),
                        &METADATA,
                    )
                }),
                connect_errors: recorder.register_counter(
                    &Key::from_parts(UPSTREAM_CONNECT_ERRORS, labels(None)),
                    &METADATA,
                ),
                codes: std::array::from_fn(|_| CodeSlot {
                    code: AtomicU16::new(0),
                    counter: OnceLock::new(),
                }),
            }
        });
        RouteMetrics {
            recorder,
            route: route.to_string(),
            backends,
            roles,
        }
    }

    fn register_code(&self, role: Role, code: u16) -> Counter {
        let key = Key::from_parts(
            REQUESTS_TOTAL,
            vec![
                Label::new("route", self.route.clone()),
                Label::new("role", role.as_str()),
                Label::new("backend", self.backends[role_index(role)].clone()),
                Label::new("code", code.to_string()),
            ],
        );
        self.recorder.register_counter(&key, &METADATA)
    }

    /// Counts one request with `status` in `weir_requests_total` (a cached
    /// handle after the first request with that code).
    fn count_code(&self, role: Role, status: u16) {
        let slots = &self.roles[role_index(role)].codes;
        let start = usize::from(status) % CODE_SLOTS;
        for i in 0..CODE_SLOTS {
            let slot = &slots[(start + i) % CODE_SLOTS];
            let mut code = slot.code.load(Ordering::Acquire);
            if code == 0 {
                code =
                    match slot
                        .code
                        .compare_exchange(0, status, Ordering::AcqRel, Ordering::Acquire)
                    {
                        Ok(_) => status,
                        Err(other) => other,
                    };
            }
            if code == status {
                slot.counter
                    .get_or_init(|| self.register_code(role, status))
                    .increment(1);
                return;
            }
        }
        // Every slot holds another code: count without the cache.
        self.register_code(role, status).increment(1);
    }

    /// Records a finished request (called next to the stats window's record).
    #[inline]
    pub fn record(&self, role: Role, status: u16, latency: Duration) {
        self.count_code(role, status);
        self.roles[role_index(role)]
            .duration
            .record(latency.as_secs_f64());
    }

    /// Records a response the proxy made because the upstream failed: the
    /// request itself (status and latency) and the failure kind.
    pub fn record_proxy_error(&self, role: Role, err: impl AnsweredError, latency: Duration) {
        self.record(role, err.status_code(), latency);
        let kind = match err.upstream_failure() {
            Some(UpstreamFailure::NoEndpoint) => Some(0),
            Some(UpstreamFailure::Timeout) => Some(1),
            Some(UpstreamFailure::Upstream) => Some(2),
            None => None,
        };
        if let Some(k) = kind {
            self.roles[role_index(role)].errors[k].increment(1);
        }
    }

    /// Counts a request the client broke (400 malformed body, 408 stalled
    /// upload, 499 client gone) under its status code only: no latency
    /// sample, so a client cannot move the duration histogram.
    pub fn record_client_error(&self, role: Role, status: u16) {
        self.count_code(role, status);
    }

    /// Counts an upstream connect failure (also counted as kind `upstream`).
    pub fn record_connect_error(&self, role: Role) {
        self.roles[role_index(role)].connect_errors.increment(1);
    }
}

/// Which kind an upstream failure is counted under in
/// `weir_upstream_errors_total` (`kind` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// No usable endpoint (503).
    NoEndpoint,
    /// No response headers in time (504).
    Timeout,
    /// Connect failure or broken exchange (502).
    Upstream,
}

/// What the registry needs of an error the proxy answered for. A trait so
/// that this layer, below the proxy, need not know the proxy's error type
/// (implemented by `proxy::errors::ProxyError`; calls are static).
pub trait AnsweredError: Copy {
    /// The status sent to the client.
    fn status_code(self) -> u16;
    /// The failure kind, for upstream failures; `None` for the others.
    fn upstream_failure(self) -> Option<UpstreamFailure>;
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;

/// Name of the retry counter.
pub const RETRIES_TOTAL: &str = "weir_retries_total";
/// Name of the circuit-breaker refusal counter.
pub const OVERFLOWS_TOTAL: &str = "weir_overflows_total";
/// Name of the rate-limit refusal counter.
pub const RATE_LIMITED_TOTAL: &str = "weir_rate_limited_total";

impl Metrics {
    /// The resilience series (DESIGN §11), read from the live state at
    /// scrape time: `weir_retries_total{route,role,reason}`,
    /// `weir_overflows_total{backend,limit}`, `weir_rate_limited_total{route}`.
    /// Only routes with policies and backends with a breaker have them.
    fn render_resilience(&self, snap: &super::store::Snapshot, store: &TableStore) {
        use super::resilience::breaker::Overflow;
        use super::resilience::retry::RetryReason;
        let rec = &*self.recorder;
        rec.describe_counter(
            KeyName::from_const_str(RETRIES_TOTAL),
            None,
            "Retries sent, by route, role (primary|canary) and reason.".into(),
        );
        rec.describe_counter(
            KeyName::from_const_str(OVERFLOWS_TOTAL),
            None,
            "Requests refused by a backend's circuit breaker (503 overflow), by limit.".into(),
        );
        rec.describe_counter(
            KeyName::from_const_str(RATE_LIMITED_TOTAL),
            None,
            "Requests refused by a route's rate limit (429).".into(),
        );
        for (route, rt) in snap.spec.routing.routes.iter().zip(&snap.routes) {
            let Some(g) = &rt.guards else {
                continue;
            };
            if g.policies.retries.is_some() {
                for role in [Role::Primary, Role::Canary] {
                    for reason in RetryReason::ALL {
                        let labels = vec![
                            Label::new("route", route.name.clone()),
                            Label::new("role", role.as_str()),
                            Label::new("reason", reason.as_str()),
                        ];
                        rec.register_counter(&Key::from_parts(RETRIES_TOTAL, labels), &METADATA)
                            .absolute(g.retries(role, reason));
                    }
                }
            }
            if g.policies.rate_limit.is_some() {
                let labels = vec![Label::new("route", route.name.clone())];
                rec.register_counter(&Key::from_parts(RATE_LIMITED_TOTAL, labels), &METADATA)
                    .absolute(g.rate_limited.load(Ordering::Relaxed));
            }
        }
        for name in snap.spec.backends.keys() {
            let Some(b) = store.backend(name) else {
                continue;
            };
            let breaker = b.breaker.load();
            let Some(br) = &**breaker else {
                continue;
            };
            for (limit, n) in [
                (Overflow::MaxRequests, &br.overflow_requests),
                (Overflow::MaxPendingRequests, &br.overflow_pending),
            ] {
                let labels = vec![
                    Label::new("backend", name.clone()),
                    Label::new("limit", limit.as_str()),
                ];
                rec.register_counter(&Key::from_parts(OVERFLOWS_TOTAL, labels), &METADATA)
                    .absolute(n.load(Ordering::Relaxed));
            }
        }
    }
}
