//! The per-request path, as plain functions in phase order:
//! snapshot → route → decide → upstream request → response → record.

use super::body::ProxyBody;
use super::errors::ProxyError;
use super::smuggle::ConnGuard;
use super::upload::{self, ClientFault, Limits, Upload, Waited, Watched};
use super::upstream::{InFlight, UpstreamClient};
use super::{grpc, limits, upgrade};
use super::{strip_hop_by_hop, strip_weir_headers};
use crate::config::{ProxySettings, UpstreamProtocol};
use crate::dataplane::store::{RouteRuntime, Snapshot, TableStore};
use crate::routing::{decide, normalize_host, Draw, RequestView, Route, Side};
use crate::stats::Role;
use http::header::{
    HeaderValue, CONNECTION, CONTENT_LENGTH, HOST, SET_COOKIE, TE, TRANSFER_ENCODING, UPGRADE,
};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use std::cell::RefCell;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// Everything the request path shares, built once at start.
pub struct ProxyShared {
    /// The routing table.
    pub store: Arc<TableStore>,
    /// Pooled upstream client.
    pub client: UpstreamClient,
    /// Data-plane settings.
    pub settings: ProxySettings,
    /// Origin of the coarse seconds clock used by the stats window.
    pub started: Instant,
}

impl ProxyShared {
    /// Seconds since start: the stats window's clock.
    pub fn now_sec(&self, now: Instant) -> u64 {
        now.duration_since(self.started).as_secs()
    }
}

/// Per-connection facts the request path needs.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The TCP peer (client address for X-Forwarded-For and `sourceIp`).
    pub peer: SocketAddr,
    /// Whether the connection is TLS (X-Forwarded-Proto).
    pub tls: bool,
    /// Request numbering and smuggling marks of the connection (`None`
    /// when the caller does not track them, e.g. in unit tests).
    pub guard: Option<Arc<ConnGuard>>,
}

thread_local! {
    /// A fast per-thread RNG for weighted draws (Xoshiro; not for secrets).
    static RNG: RefCell<SmallRng> = RefCell::new(SmallRng::from_rng(&mut rand::rng()));
}

/// One random word per request (split into draws by the callers).
pub fn random_u64() -> u64 {
    RNG.with(|r| r.borrow_mut().next_u64())
}

static X_FORWARDED_FOR: http::HeaderName = http::HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: http::HeaderName = http::HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: http::HeaderName = http::HeaderName::from_static("x-forwarded-host");

/// hyper service entry point. Never fails: every problem becomes a response.
pub async fn handle(
    shared: Arc<ProxyShared>,
    conn: ConnInfo,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let start = Instant::now();
    let snap = shared.store.load();
    let (mut parts, body) = req.into_parts();

    // Phase: admission (the limits and framing checks hyper leaves to us).
    if let Some(refused) = admit(&shared.settings, &conn, &parts) {
        return Ok(refused);
    }
    // An upgrade (WebSocket) keeps its two hop-by-hop headers and takes
    // the client connection over after a 101.
    let upgrade_value = upgrade::requested(parts.version, &parts.headers);
    let mut client_upgrade = match upgrade_value {
        Some(_) => parts.extensions.remove::<OnUpgrade>(),
        None => None,
    };

    // Host is a singleton (RFC 9112 §3.2): two of them are two answers to
    // "which origin", and a proxy must not pick one.
    if parts.headers.get_all(HOST).iter().nth(1).is_some() {
        return Ok(ProxyError::BadRequest.response("more than one Host header"));
    }

    // Phase: route. HTTP/2 carries the authority in the URI, HTTP/1 in Host
    // (or in an absolute-form target, which then replaces Host: RFC 9112
    // §3.2.2; `upstream_request` sends the same authority as Host).
    let host_raw = parts
        .uri
        .authority()
        .map(|a| a.as_str())
        .or_else(|| parts.headers.get(HOST).and_then(|h| h.to_str().ok()));
    let Some(host_raw) = host_raw else {
        return Ok(ProxyError::BadRequest.response("missing Host header"));
    };
    if parts.method == Method::CONNECT {
        return Ok(ProxyError::MethodNotAllowed.response("CONNECT is not proxied"));
    }
    let host = normalize_host(host_raw);
    let path = parts.uri.path();
    let Some(idx) = snap.spec.routing.find(&host, path) else {
        log_access(
            &shared,
            conn.peer,
            &parts.method,
            &host,
            path,
            None,
            404,
            start,
        );
        return Ok(ProxyError::NoRoute.response("no route for this host and path"));
    };
    let route = &snap.spec.routing.routes[idx];
    let rt = &snap.routes[idx];

    // Phase: decide (pure).
    let r = random_u64();
    let decision = {
        let view = RequestView::new(
            &host,
            path,
            parts.uri.query(),
            &parts.method,
            &parts.headers,
            conn.peer.ip(),
        );
        decide(&view, route, Draw::from_u64(r))
    };
    let (backend, role) = match decision.side {
        Side::Primary => (&rt.primary, Role::Primary),
        Side::Canary => match &rt.canary {
            Some(c) => (c, Role::Canary),
            None => (&rt.primary, Role::Primary),
        },
    };

    // Phase: upstream request.
    let Some(endpoint) = backend.pick(r.rotate_left(17)) else {
        let resp = finish_error(
            &shared,
            rt,
            role,
            ProxyError::NoEndpoint,
            &format!("backend {} has no ready endpoint", backend.name),
            start,
        );
        log_access(
            &shared,
            conn.peer,
            &parts.method,
            &host,
            path,
            Some(&route.name),
            503,
            start,
        );
        return Ok(resp);
    };
    let x_forwarded_host = HeaderValue::from_str(host_raw).ok();
    let method = parts.method.clone();
    let log_path = if access_log_on(&shared) {
        Some(path.to_string())
    } else {
        None
    };
    let host_owned = host.into_owned();
    // The backend's protocol and TLS; an upgrade always goes over HTTP/1.1.
    let spec = snap.spec.backends.get(&backend.name);
    let protocol = match (&upgrade_value, spec) {
        (Some(_), _) | (None, None) => UpstreamProtocol::Http1,
        (None, Some(b)) => b.protocol,
    };
    let upstream_tls = spec.and_then(|b| b.tls.as_ref());
    let client = match shared.client.client_for(protocol, upstream_tls) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(target: "weir::upstream", backend = %backend.name, error = %e, "no upstream client");
            let msg = format!("cannot set up TLS to backend {}", backend.name);
            return Ok(finish_error(
                &shared,
                rt,
                role,
                ProxyError::Upstream,
                &msg,
                start,
            ));
        }
    };
    let target = Target {
        authority: &endpoint.authority,
        tls: upstream_tls.is_some(),
        protocol,
        upgrade: upgrade_value,
    };
    let mut up = upstream_request(parts, &target, &conn, x_forwarded_host, route);
    let up_body = if decision.mirror {
        super::mirror::dispatch(&shared, &snap, idx, &mut up, body)
    } else {
        ProxyBody::streamed(body)
    };
    let up_body = idle_limited(up_body, shared.settings.body_idle_timeout);
    // A request with a body: its end starts the route timeout and its
    // faults are the client's. One shared state per such request.
    let upload = (!up_body.is_end_stream()).then(|| Arc::new(Upload::default()));
    let up_body = match &upload {
        Some(u) => ProxyBody::boxed(http_body_util::BodyExt::boxed(Watched::new(
            up_body,
            u.clone(),
        ))),
        None => up_body,
    };
    // An idempotent request without a body may meet a pooled connection the
    // backend has just closed; it then goes once more on a new connection
    // (as the fast path and nginx do), so it needs a copy of its head.
    let again = (upload.is_none() && method.is_idempotent()).then(|| copy_head(&up));
    let up = up.map(|()| up_body);
    let guard = InFlight::start(endpoint.clone());
    let mut abandoned = Abandoned {
        shared: &shared,
        rt,
        role,
        peer: conn.peer,
        route: &route.name,
        log: log_path.map(|p| (method.clone(), host_owned, p)),
        start,
        armed: true,
    };
    let limits = Limits {
        route: route.timeout,
        body_total: shared.settings.request_body_timeout,
        body_idle: shared.settings.body_idle_timeout,
    };
    let exchange = async {
        let first = client.request(up).await;
        match (first, again) {
            (Err(e), Some(req)) if super::client::stale_connection(&e) => {
                tracing::debug!(target: "weir::upstream", endpoint = %endpoint.address, error = %e, "pooled connection closed before an answer; sending again on a new one");
                match shared.client.fresh_for(protocol, upstream_tls) {
                    Ok(fresh) => fresh.request(req.map(|()| ProxyBody::empty())).await,
                    Err(_) => Err(e),
                }
            }
            (r, _) => r,
        }
    };
    let result = match upload::wait_response(exchange, upload.as_deref(), limits).await {
        Waited::Done(r) => Ok(r),
        Waited::TimedOut => Err(None),
        Waited::Client(fault) => Err(Some(fault)),
    };
    // A 101 the client did not ask for cannot be forwarded: an HTTP/1 client
    // would take the connection as switched, and HTTP/2 has no 101 at all
    // (RFC 9113 §8.6). It is the upstream breaking the exchange.
    let unsolicited_switch = client_upgrade.is_none()
        && matches!(&result, Ok(Ok(r)) if r.status() == StatusCode::SWITCHING_PROTOCOLS);
    // Passive outlier detection: a 5xx, a connect error, a broken exchange
    // or a timeout; never what the client broke.
    if !matches!(result, Err(Some(_))) {
        let failed =
            unsolicited_switch || !matches!(&result, Ok(Ok(r)) if !r.status().is_server_error());
        backend.observe(&endpoint, failed);
    }

    // Phase: response.
    let resp = match result {
        Err(Some(fault)) => client_fault(&shared, rt, role, fault),
        Err(None) => {
            let msg = format!(
                "no response from {} within {:?}",
                endpoint.address, route.timeout
            );
            finish_error(&shared, rt, role, ProxyError::Timeout, &msg, start)
        }
        Ok(Ok(_)) if unsolicited_switch => {
            tracing::debug!(target: "weir::upstream", endpoint = %endpoint.address, "101 Switching Protocols without an upgrade request");
            let msg = format!("{} broke the exchange", endpoint.address);
            finish_error(&shared, rt, role, ProxyError::Upstream, &msg, start)
        }
        Ok(Err(e)) => {
            tracing::debug!(target: "weir::upstream", endpoint = %endpoint.address, error = %e, "upstream request failed");
            if e.is_connect() {
                rt.metrics.record_connect_error(role);
            }
            let msg = if e.is_connect() {
                format!("cannot connect to {}", endpoint.address)
            } else {
                format!("{} broke the exchange", endpoint.address)
            };
            finish_error(&shared, rt, role, ProxyError::Upstream, &msg, start)
        }
        Ok(Ok(resp)) => {
            let (mut rp, rbody) = resp.into_parts();
            // A 101 to an upgrade request: both connections become a tunnel.
            let tunnel = match client_upgrade.take() {
                Some(c) if rp.status == StatusCode::SWITCHING_PROTOCOLS => {
                    rp.extensions.remove::<OnUpgrade>().map(|u| (c, u))
                }
                _ => None,
            };
            let switched_to = rp.headers.get(UPGRADE).cloned();
            // Transfer-Encoding overrides Content-Length (RFC 9112 §6.3): with
            // both, hyper would frame the decoded body by the wrong length.
            if rp.headers.contains_key(TRANSFER_ENCODING) {
                rp.headers.remove(CONTENT_LENGTH);
            }
            strip_hop_by_hop(&mut rp.headers);
            if let (Some(_), Some(v)) = (&tunnel, switched_to) {
                upgrade::restore(&mut rp.headers, v);
            }
            if !route.response_headers.is_empty() {
                route.response_headers.apply(&mut rp.headers);
            }
            if !decision.cookies.is_empty() {
                if let Some(cfg) = &route.affinity {
                    for v in decision.cookies.render(cfg, &route.pin_cookies) {
                        rp.headers.append(SET_COOKIE, v);
                    }
                }
            }
            let status = rp.status.as_u16();
            // gRPC fails inside a 200: see `grpc` for the rule.
            let is_grpc = grpc::is_grpc(&rp.headers);
            let grpc_status = rp.headers.get("grpc-status");
            let failed = status >= 500 || (is_grpc && grpc_status.is_some_and(grpc::status_failed));
            let decided_by_trailers = is_grpc && grpc_status.is_none() && status < 500;
            let body = if let Some((client_io, upstream_io)) = tunnel {
                upgrade::splice(
                    client_io,
                    upstream_io,
                    guard,
                    shared.settings.tunnel_idle_timeout,
                );
                ProxyBody::empty()
            } else if decided_by_trailers {
                // Recorded when the trailers arrive (latency = whole call).
                let (stats, metrics, sh) = (rt.stats.clone(), rt.metrics.clone(), shared.clone());
                let on_done: grpc::OnOutcome = Box::new(move |outcome| {
                    let now = Instant::now();
                    let latency = now.duration_since(start);
                    stats.record(
                        role,
                        sh.now_sec(now),
                        outcome == grpc::Outcome::Failed,
                        latency.as_micros() as u64,
                    );
                    metrics.record(role, status, latency);
                });
                let watched = grpc::StatusWatch::new(rbody, on_done);
                idle_limited(
                    ProxyBody::boxed(http_body_util::BodyExt::boxed(watched)),
                    shared.settings.body_idle_timeout,
                )
                .with_guard(Box::new(guard))
            } else {
                idle_limited(
                    ProxyBody::streamed(rbody),
                    shared.settings.body_idle_timeout,
                )
                .with_guard(Box::new(guard))
            };
            if !decided_by_trailers {
                record_answer(&shared, rt, role, status, failed, start);
            }
            Response::from_parts(rp, body)
        }
    };
    abandoned.armed = false;
    if let Some((method, host, path)) = abandoned.log.take() {
        log_access(
            &shared,
            conn.peer,
            &method,
            &host,
            &path,
            Some(&route.name),
            resp.status().as_u16(),
            start,
        );
    }
    Ok(resp)
}

/// Counts and logs a request whose client went away while it was waiting
/// for the upstream (hyper drops the request's future, e.g. on an HTTP/2
/// stream reset): 499, the client's doing, not the backend's.
struct Abandoned<'a> {
    shared: &'a ProxyShared,
    rt: &'a RouteRuntime,
    role: Role,
    peer: SocketAddr,
    route: &'a str,
    /// Method, host and path for the access log (when it is on).
    log: Option<(Method, String, String)>,
    start: Instant,
    /// Cleared once the request has its answer.
    armed: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let status = ProxyError::ClientClosed.status().as_u16();
        record_client_error(self.shared, self.rt, self.role, status);
        if let Some((method, host, path)) = &self.log {
            log_access(
                self.shared,
                self.peer,
                method,
                host,
                path,
                Some(self.route),
                status,
                self.start,
            );
        }
    }
}

/// The answer to a request whose body the client broke: counted as a
/// client error of the side (not in its success rate), connection closed
/// (the rest of the body, if any, cannot be framed or is not coming).
fn client_fault(
    shared: &ProxyShared,
    rt: &RouteRuntime,
    role: Role,
    fault: ClientFault,
) -> Response<ProxyBody> {
    let s = &shared.settings;
    let (err, detail) = match fault {
        ClientFault::Malformed => (
            ProxyError::BadRequest,
            "the request body is malformed".to_string(),
        ),
        ClientFault::Gone => (
            ProxyError::ClientClosed,
            "the client went away during its request body".to_string(),
        ),
        ClientFault::Stalled => (
            ProxyError::RequestTimeout,
            format!("no request body data for {:?}", s.body_idle_timeout),
        ),
        ClientFault::TooSlow => (
            ProxyError::RequestTimeout,
            format!(
                "request body not complete within {:?}",
                s.request_body_timeout.unwrap_or_default()
            ),
        ),
    };
    record_client_error(shared, rt, role, err.status().as_u16());
    let mut r = err.response(&detail);
    r.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    r
}

/// Counts a request the client broke: stats window (apart from the success
/// rate) and `weir_requests_total` under its status.
fn record_client_error(shared: &ProxyShared, rt: &RouteRuntime, role: Role, status: u16) {
    rt.stats
        .record_client_error(role, shared.now_sec(Instant::now()));
    rt.metrics.record_client_error(role, status);
}

/// Refuses what must not be forwarded: a request smuggling attempt (400,
/// connection closed), an HTTP/1 head over `maxHeaderBytes` that hyper's
/// buffer let through (431, connection closed), a request target over
/// `maxUriBytes` (414), more
/// header fields than `maxHeaders` (431; HTTP/1 heads are already checked by
/// hyper, this catches HTTP/2). Numbers every request of the connection.
fn admit(
    settings: &ProxySettings,
    conn: &ConnInfo,
    parts: &http::request::Parts,
) -> Option<Response<ProxyBody>> {
    if let Some(g) = &conn.guard {
        let index = g.next_request();
        if g.is_smuggling(index) {
            let mut r = ProxyError::BadRequest
                .response("both Content-Length and Transfer-Encoding (request smuggling)");
            r.headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            return Some(r);
        }
        if g.is_oversized(index) {
            let mut r = ProxyError::HeadersTooLarge
                .response(&limits::head_too_large(settings.max_header_bytes));
            r.headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            return Some(r);
        }
    }
    if limits::request_target_len(&parts.uri) > settings.max_uri_bytes {
        return Some(ProxyError::UriTooLong.response(&format!(
            "the request target is longer than {} bytes",
            settings.max_uri_bytes
        )));
    }
    if limits::too_many_headers(&parts.headers, settings.max_headers) {
        return Some(
            ProxyError::HeadersTooLarge
                .response(&format!("more than {} header fields", settings.max_headers)),
        );
    }
    None
}

/// Puts the body idle timeout on a body that has anything left to send.
fn idle_limited(body: ProxyBody, after: std::time::Duration) -> ProxyBody {
    if body.is_end_stream() {
        return body;
    }
    ProxyBody::boxed(http_body_util::BodyExt::boxed(limits::IdleTimeout::new(
        body, after,
    )))
}

/// Where and how a request goes upstream.
struct Target<'a> {
    /// The endpoint.
    authority: &'a http::uri::Authority,
    /// TLS to the endpoint (`https` scheme).
    tls: bool,
    /// The backend's protocol (HTTP/1.1 for upgrades).
    protocol: UpstreamProtocol,
    /// The client's `Upgrade` value, kept for the upstream.
    upgrade: Option<HeaderValue>,
}

/// Builds the request sent upstream: absolute URI to the endpoint, version
/// HTTP/1.1 (the client picks the real version per connection: an HTTP/2
/// pool sends it as HTTP/2), hop-by-hop headers stripped (except an
/// upgrade's, and `te: trailers` towards HTTP/2 backends, which gRPC
/// needs), the client's `x-weir-*` headers removed, X-Forwarded-* set, the
/// client's Host kept (replaced by the target's authority when there is one:
/// absolute form, HTTP/2), route header edits applied.
fn upstream_request(
    parts: http::request::Parts,
    target: &Target<'_>,
    conn: &ConnInfo,
    x_forwarded_host: Option<HeaderValue>,
    route: &Route,
) -> Request<()> {
    let http::request::Parts {
        method,
        uri,
        mut headers,
        ..
    } = parts;
    let te_trailers = target.protocol != UpstreamProtocol::Http1
        && headers
            .get_all(TE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("trailers"));
    strip_hop_by_hop(&mut headers);
    if let Some(u) = &target.upgrade {
        upgrade::restore(&mut headers, u.clone());
    }
    if te_trailers {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
    strip_weir_headers(&mut headers);
    // The authority the request was routed by is the Host the upstream gets:
    // an absolute-form target's (RFC 9112 §3.2.2) or HTTP/2's `:authority`,
    // which wins over a differing `host` header (RFC 9113 §8.3.1).
    if let Some(a) = uri.authority() {
        if let Ok(v) = HeaderValue::from_str(a.as_str()) {
            headers.insert(HOST, v);
        }
    }
    append_forwarded_for(&mut headers, conn.peer.ip());
    headers.insert(
        X_FORWARDED_PROTO.clone(),
        HeaderValue::from_static(if conn.tls { "https" } else { "http" }),
    );
    if let Some(h) = x_forwarded_host {
        headers.insert(X_FORWARDED_HOST.clone(), h);
    }
    if !route.request_headers.is_empty() {
        route.request_headers.apply(&mut headers);
    }
    let scheme = if target.tls { "https" } else { "http" };
    let mut up = Uri::builder()
        .scheme(scheme)
        .authority(target.authority.clone());
    up = up.path_and_query(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
    let mut req = Request::new(());
    *req.method_mut() = method;
    // A Uri built from a valid authority and an existing path cannot fail;
    // fall back to the root rather than panic if it ever does.
    *req.uri_mut() = up.build().unwrap_or_else(|_| Uri::from_static("/"));
    *req.version_mut() = Version::HTTP_11;
    *req.headers_mut() = headers;
    req
}

/// A copy of a bodiless upstream request (extensions are not copied: the
/// upstream request carries none).
fn copy_head(req: &Request<()>) -> Request<()> {
    let mut r = Request::new(());
    *r.method_mut() = req.method().clone();
    *r.uri_mut() = req.uri().clone();
    *r.version_mut() = req.version();
    *r.headers_mut() = req.headers().clone();
    r
}

/// Appends the peer to X-Forwarded-For (comma-joined, as nginx's
/// `$proxy_add_x_forwarded_for`).
fn append_forwarded_for(headers: &mut http::HeaderMap, ip: std::net::IpAddr) {
    let joined = match headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(prev) if !prev.trim().is_empty() => format!("{prev}, {ip}"),
        _ => ip.to_string(),
    };
    if let Ok(v) = HeaderValue::from_str(&joined) {
        headers.insert(X_FORWARDED_FOR.clone(), v);
    }
}

/// A proxy-made error that still counts against the side's success rate.
fn finish_error(
    shared: &ProxyShared,
    rt: &RouteRuntime,
    role: Role,
    err: ProxyError,
    detail: &str,
    start: Instant,
) -> Response<ProxyBody> {
    record_error(shared, rt, role, err, start);
    err.response(detail)
}

/// Counts a proxy-made error against the side (stats window and metrics).
pub(super) fn record_error(
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
pub(super) fn record_answer(
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

/// Whether access lines are wanted (then the path is kept for the log).
pub(super) fn access_log_on(shared: &ProxyShared) -> bool {
    shared.settings.access_log || tracing::enabled!(target: "weir::access", tracing::Level::DEBUG)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn log_access(
    shared: &ProxyShared,
    peer: SocketAddr,
    method: &Method,
    host: &str,
    path: &str,
    route: Option<&str>,
    status: u16,
    start: Instant,
) {
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    if shared.settings.access_log {
        tracing::info!(target: "weir::access", %peer, %method, host, path, route = route.unwrap_or("-"), status, ms, "request");
    } else {
        tracing::debug!(target: "weir::access", %peer, %method, host, path, route = route.unwrap_or("-"), status, ms, "request");
    }
}

/// Re-exported for the mirror, which builds its own copy of the request.
pub(crate) fn snapshot_route(snap: &Snapshot, idx: usize) -> (&Route, &RouteRuntime) {
    (&snap.spec.routing.routes[idx], &snap.routes[idx])
}
