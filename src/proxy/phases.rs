//! The request core: the phases of a request (DESIGN §4: route → admit →
//! decide → forward → respond → record) as plain functions, called by both
//! transports — the HTTP/1 fast path (`express`, bytes) and the hyper path
//! (`service`, hyper types). The transports only read and write; what is
//! decided, counted or logged is decided, counted and logged here, so the
//! two cannot drift apart (`tests/it/parity.rs` holds them to the same
//! answers).
//!
//! Per request, in order:
//! 1. [`find_route`] on one table snapshot (404 when nothing matches);
//! 2. the transport's own admission checks (their limits are about its
//!    framing), then [`needs_general_path`] on the fast path;
//! 3. `routing::decide` with [`Draw::from_u64`] of the request's one
//!    random word ([`random_u64`]), then [`choose_side`] and
//!    [`pick_endpoint`] with [`endpoint_draw`] of the same word;
//! 4. forwarding (transport), failures classified by [`UpstreamFailure`];
//! 5. [`feed_outlier`] with the outcome;
//! 6. [`record_answer`] / [`record_error`] / [`record_client_error`]
//!    (stats window and Prometheus) and [`log_access`].
//!
//! The resilience policies (DESIGN §11, `resilience`): [`rate_limit`] and
//! [`body_too_large`] at admission, [`admit_backend`] (circuit breaker)
//! after the side is chosen, and on a route with retries the attempt loop
//! of [`attempts`] (both transports give it only the sending of one
//! attempt), with [`retry_policy`], [`pick_retry_endpoint`] and
//! [`record_retried`], which counts a retried attempt in its side's stats
//! so the analysis judges attempts.

use super::errors::ProxyError;
use super::service::ProxyShared;
use super::upstream::{Backend, Endpoint};
use crate::config::{BackendSpec, UpstreamProtocol};
use crate::dataplane::store::{RouteRuntime, Snapshot};
use crate::routing::{Decision, Route, Side};
use crate::stats::Role;
use http::Method;
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use std::borrow::Cow;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(doc)]
use crate::routing::Draw;

thread_local! {
    /// A fast per-thread RNG for weighted draws (Xoshiro; not for secrets).
    static RNG: RefCell<SmallRng> = RefCell::new(SmallRng::from_rng(&mut rand::rng()));
}

/// The request's one random word: every draw of the request (side, mirror,
/// endpoint) is derived from it, so one RNG step serves the whole request.
pub fn random_u64() -> u64 {
    RNG.with(|r| r.borrow_mut().next_u64())
}

/// The endpoint draw of a request, from its random word `r`.
///
/// [`Draw::from_u64`] reads the high-order bits of each 32-bit half
/// (multiply-shift into 0..100); `Backend::pick` reads each half modulo the
/// endpoint count, i.e. its low-order bits. Rotating the word by 17 puts
/// bits from the middle of the other half there, so which side a request
/// goes to and which endpoint of that side serves it are independent.
#[inline]
pub fn endpoint_draw(r: u64) -> u64 {
    r.rotate_left(17)
}

/// A weir-made answer: its error (status and `x-weir-error` code) and the
/// detail for its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The error: status and `x-weir-error` code.
    pub err: ProxyError,
    /// Why, for the body (`code: detail`): never an address, a backend name or a
    /// cause the client has no business reading.
    pub detail: Cow<'static, str>,
    /// What only the operator reads (the endpoint, the backend, the cause): the log
    /// and the access line, never the client.
    pub cause: Option<String>,
    /// Seconds for a `Retry-After` header (a rate-limited request).
    pub retry_after: Option<u64>,
}

impl Refusal {
    pub(crate) fn new(err: ProxyError, detail: impl Into<Cow<'static, str>>) -> Self {
        Refusal {
            err,
            detail: detail.into(),
            cause: None,
            retry_after: None,
        }
    }

    /// The same refusal with what only the operator may read.
    pub(crate) fn because(mut self, cause: String) -> Self {
        self.cause = Some(cause);
        self
    }

    /// The status sent to the client.
    pub fn status(&self) -> u16 {
        self.err.status().as_u16()
    }
}

/// Phase route: the route for host + path (by `host`, then the longest
/// `pathPrefix`), or the 404 when there is none.
#[inline]
pub fn find_route(snap: &Snapshot, host: &str, path: &str) -> Result<usize, Refusal> {
    snap.spec
        .routing
        .find(host, path)
        .ok_or_else(|| Refusal::new(ProxyError::NoRoute, "no route for this host and path"))
}

/// Phase decide, second half: the backend and stats role of a side. A
/// canary decision on a route whose canary slot is gone goes to the primary
/// (and counts as primary).
#[inline]
pub fn choose_side(side: Side, rt: &RouteRuntime) -> (&Arc<Backend>, Role) {
    match (side, &rt.canary) {
        (Side::Canary, Some(c)) => (c, Role::Canary),
        _ => (&rt.primary, Role::Primary),
    }
}

/// Phase forward, first step: an endpoint of `backend` by the request's
/// random word `r` ([`endpoint_draw`]), or the 503 when none is ready.
#[inline]
pub fn pick_endpoint(backend: &Backend, r: u64) -> Result<Arc<Endpoint>, Refusal> {
    backend.pick(endpoint_draw(r)).ok_or_else(|| {
        Refusal::new(
            ProxyError::NoEndpoint,
            "no ready endpoint to send the request to",
        )
        .because(format!("backend {} has no ready endpoint", backend.name))
    })
}

/// Why the upstream gave no answer that can be forwarded: one table of
/// statuses and `x-weir-error` details for both transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// No TLS client could be set up for the backend (its CA file went
    /// away after validation): 502.
    NoTlsClient,
    /// The connection could not be made (refused, reset, connect timeout): 502.
    Connect,
    /// The connection broke, or the answer cannot be forwarded (an
    /// unparsable head, a 101 nobody asked for): 502.
    Broken,
    /// No response head within the route timeout: 504.
    Timeout(Duration),
}

impl UpstreamFailure {
    /// The answer to the client. A connect failure is also counted in
    /// `weir_upstream_connect_errors_total` of the side.
    pub fn refusal(
        self,
        rt: &RouteRuntime,
        role: Role,
        backend: &Backend,
        endpoint: &Endpoint,
    ) -> Refusal {
        let (addr, name) = (&endpoint.address, &backend.name);
        // The client reads a sentence; the endpoint and the backend go to the log.
        match self {
            UpstreamFailure::NoTlsClient => {
                Refusal::new(ProxyError::Upstream, "the upstream could not be reached")
                    .because(format!("cannot set up TLS to backend {name}"))
            }
            UpstreamFailure::Connect => {
                rt.metrics.record_connect_error(role);
                Refusal::new(ProxyError::Upstream, "the upstream could not be reached")
                    .because(format!("cannot connect to {addr} (backend {name})"))
            }
            UpstreamFailure::Broken => {
                Refusal::new(ProxyError::Upstream, "the upstream broke the exchange")
                    .because(format!("{addr} (backend {name}) broke the exchange"))
            }
            UpstreamFailure::Timeout(within) => Refusal::new(
                ProxyError::Timeout,
                format!("no response from the upstream within {within:?}"),
            )
            .because(format!(
                "no response from {addr} (backend {name}) within {within:?}"
            )),
        }
    }
}

/// Passive outlier detection: the outcome of one exchange with `endpoint`.
/// `answer` is the upstream's status, `None` when there was no usable
/// answer (connect error, broken exchange, timeout). A 5xx or no answer is
/// a failure; what the client broke is never reported here.
#[inline]
pub fn feed_outlier(backend: &Backend, endpoint: &Endpoint, answer: Option<u16>) {
    backend.observe(endpoint, answer.is_none_or(|s| s >= 500));
}

// ---------------------------------------------------------------------------
// Hand-off: what makes a request leave the fast path.
//
// The fast path forwards bodiless clear-text HTTP/1.1 requests as bytes. A
// route feature it does not implement must send the request to the general
// (hyper) path, or it would be silently skipped. `needs_general_path`
// destructures `Route` without `..`: a new route field does not compile
// until it is classified here (and in the unit test below).
// ---------------------------------------------------------------------------

/// Whether requests on `route` must take the general path whatever they
/// are: mirroring (the shadow copy needs the request as hyper types) and
/// header edits (applied to a `HeaderMap`).
#[inline]
pub fn needs_general_path(route: &Route) -> bool {
    let Route {
        // Handled by the fast path: lookup, decision and cookies.
        name: _,
        hosts: _,
        path_prefix: _,
        primary: _,
        canary: _,
        canary_weight: _,
        matches: _,
        affinity: _,
        affinity_state: _,
        pin_cookies: _,
        cookie_probe: _,
        timeout: _,
        // Not handled: hand off.
        mirror,
        request_headers,
        response_headers,
    } = route;
    mirror.is_some() || !request_headers.is_empty() || !response_headers.is_empty()
}

/// Whether this decision must take the general path: a shadow copy.
#[inline]
pub fn decision_needs_general_path(decision: &Decision) -> bool {
    decision.mirror
}

/// Whether the chosen backend must be reached by the general path: TLS or
/// HTTP/2 to its endpoints (the fast path speaks clear-text HTTP/1.1).
#[inline]
pub fn backend_needs_general_path(spec: Option<&BackendSpec>) -> bool {
    spec.is_some_and(|b| b.tls.is_some() || b.protocol == UpstreamProtocol::Http2)
}

// ---------------------------------------------------------------------------
// Record: stats window, Prometheus, access log.
// ---------------------------------------------------------------------------

/// Counts a proxy-made error against the side (stats window and metrics).
pub fn record_error(
    shared: &ProxyShared,
    rt: &RouteRuntime,
    role: Role,
    err: ProxyError,
    start: Instant,
) {
    let now = Instant::now();
    rt.stats.record(
        role,
        shared.now_sec(now),
        true,
        now.duration_since(start).as_micros() as u64,
    );
    rt.metrics
        .record_proxy_error(role, err, now.duration_since(start));
}

/// Records an upstream answer (its head) for the side: stats window and metrics.
pub fn record_answer(
    shared: &ProxyShared,
    rt: &RouteRuntime,
    role: Role,
    status: u16,
    failed: bool,
    start: Instant,
) {
    let now = Instant::now();
    let latency = now.duration_since(start);
    rt.stats.record(
        role,
        shared.now_sec(now),
        failed,
        latency.as_micros() as u64,
    );
    rt.metrics.record(role, status, latency);
}

/// Counts a request the client broke: stats window (apart from the success
/// rate) and `weir_requests_total` under its status.
pub fn record_client_error(shared: &ProxyShared, rt: &RouteRuntime, role: Role, status: u16) {
    rt.stats
        .record_client_error(role, shared.now_sec(Instant::now()));
    rt.metrics.record_client_error(role, status);
}

/// What the access log needs of a request, kept only while it is on
/// ([`AccessLine::new`]), so a request without it allocates nothing.
#[derive(Debug, Clone)]
pub struct AccessLine {
    /// The request method.
    pub method: Method,
    /// The normalised host the request was routed by.
    pub host: String,
    /// The path, without the query.
    pub path: String,
}

impl AccessLine {
    /// The request's line, or `None` when access lines are not wanted.
    pub fn new(shared: &ProxyShared, method: &Method, host: &str, path: &str) -> Option<Self> {
        access_log_on(shared).then(|| AccessLine {
            method: method.clone(),
            host: host.to_string(),
            path: path.to_string(),
        })
    }

    /// Writes the line with the final status.
    pub fn log(
        &self,
        shared: &ProxyShared,
        peer: SocketAddr,
        route: Option<&str>,
        status: u16,
        start: Instant,
    ) {
        self.log_with(shared, peer, route, status, None, start);
    }

    /// Writes the line with the final status and, for an answer weir made, the
    /// cause only the operator reads.
    pub fn log_with(
        &self,
        shared: &ProxyShared,
        peer: SocketAddr,
        route: Option<&str>,
        status: u16,
        cause: Option<&str>,
        start: Instant,
    ) {
        log_access(
            shared,
            peer,
            &self.method,
            &self.host,
            &self.path,
            route,
            status,
            cause,
            start,
        );
    }
}

/// Whether access lines are wanted (then the path is kept for the log).
pub fn access_log_on(shared: &ProxyShared) -> bool {
    shared.settings.access_log || tracing::enabled!(target: "weir::access", tracing::Level::DEBUG)
}

/// The access line of one request: at info with `proxy.accessLog`, else
/// at debug under `weir::access`.
#[allow(clippy::too_many_arguments)]
pub fn log_access(
    shared: &ProxyShared,
    peer: SocketAddr,
    method: &Method,
    host: &str,
    path: &str,
    route: Option<&str>,
    status: u16,
    cause: Option<&str>,
    start: Instant,
) {
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let route = route.unwrap_or("-");
    match (shared.settings.access_log, cause) {
        (true, None) => {
            tracing::info!(target: "weir::access", %peer, %method, host, path, route, status, ms, "request")
        }
        (true, Some(cause)) => {
            tracing::info!(target: "weir::access", %peer, %method, host, path, route, status, ms, cause, "request")
        }
        (false, None) => {
            tracing::debug!(target: "weir::access", %peer, %method, host, path, route, status, ms, "request")
        }
        (false, Some(cause)) => {
            tracing::debug!(target: "weir::access", %peer, %method, host, path, route, status, ms, cause, "request")
        }
    }
}

/// Counts and logs a weir-made answer: against its side when it has one
/// (a 404 has none), and its access line.
pub fn account_refusal(
    shared: &ProxyShared,
    peer: SocketAddr,
    counted: Option<(&RouteRuntime, Role)>,
    route: Option<&str>,
    refusal: &Refusal,
    line: Option<&AccessLine>,
    start: Instant,
) {
    if let Some((rt, role)) = counted {
        record_error(shared, rt, role, refusal.err, start);
    }
    log_cause(peer, route, refusal);
    if let Some(l) = line {
        l.log_with(
            shared,
            peer,
            route,
            refusal.status(),
            refusal.cause.as_deref(),
            start,
        );
    }
}

/// The log line of an answer weir made because of an upstream or a backend: what
/// the client's body leaves out.
pub fn log_cause(peer: SocketAddr, route: Option<&str>, refusal: &Refusal) {
    if let Some(cause) = &refusal.cause {
        tracing::info!(target: "weir::upstream", %peer, route = route.unwrap_or("-"), error = refusal.err.code(), cause, "answered by weir");
    }
}

pub mod attempts;
mod resilience;
pub use resilience::{
    admit_backend, body_too_large, now_ms, pick_retry_endpoint, rate_limit, record_retried,
    retry_policy, ATTEMPT_HEADER,
};

#[cfg(test)]
mod tests;
