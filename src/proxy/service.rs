//! The per-request path, as plain functions in phase order:
//! snapshot → route → decide → upstream request → response → record.

use super::body::ProxyBody;
use super::errors::ProxyError;
use super::strip_hop_by_hop;
use super::upstream::{InFlight, UpstreamClient};
use crate::config::ProxySettings;
use crate::control::store::{RouteRuntime, Snapshot, TableStore};
use crate::routing::{decide, normalize_host, Draw, RequestView, Route, Side};
use crate::stats::Role;
use http::header::{HeaderValue, HOST, SET_COOKIE};
use http::{Method, Request, Response, Uri, Version};
use hyper::body::Incoming;
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
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    /// The TCP peer (client address for X-Forwarded-For and `sourceIp`).
    pub peer: SocketAddr,
    /// Whether the connection is TLS (X-Forwarded-Proto).
    pub tls: bool,
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
    let (parts, body) = req.into_parts();

    // Phase: route. HTTP/2 carries the authority in the URI, HTTP/1 in Host.
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
        log_access(&shared, &conn, &parts.method, &host, path, None, 404, start);
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
            &conn,
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
    let log_path = if shared.settings.access_log
        || tracing::enabled!(target: "weir::access", tracing::Level::DEBUG)
    {
        Some(path.to_string())
    } else {
        None
    };
    let host_owned = host.into_owned();
    let mut up = upstream_request(parts, &endpoint.authority, conn, x_forwarded_host, route);
    let up_body = if decision.mirror {
        crate::mirror::dispatch(&shared, &snap, idx, &mut up, body)
    } else {
        ProxyBody::streamed(body)
    };
    let up = up.map(|()| up_body);
    let guard = InFlight::start(endpoint.clone());
    let result = tokio::time::timeout(route.timeout, shared.client.request(up)).await;

    // Phase: response.
    let resp = match result {
        Err(_) => {
            let msg = format!(
                "no response from {} within {:?}",
                endpoint.address, route.timeout
            );
            finish_error(&shared, rt, role, ProxyError::Timeout, &msg, start)
        }
        Ok(Err(e)) => {
            tracing::debug!(target: "weir::upstream", endpoint = %endpoint.address, error = %e, "upstream request failed");
            let msg = if e.is_connect() {
                format!("cannot connect to {}", endpoint.address)
            } else {
                format!("{} broke the exchange", endpoint.address)
            };
            finish_error(&shared, rt, role, ProxyError::Upstream, &msg, start)
        }
        Ok(Ok(resp)) => {
            let (mut rp, rbody) = resp.into_parts();
            strip_hop_by_hop(&mut rp.headers);
            if !route.response_headers.is_empty() {
                route.response_headers.apply(&mut rp.headers);
            }
            if !decision.cookies.is_empty() {
                if let Some(cfg) = &route.affinity {
                    for v in decision.cookies.render(cfg, &route.affinity_state) {
                        rp.headers.append(SET_COOKIE, v);
                    }
                }
            }
            let status = rp.status.as_u16();
            let now = Instant::now();
            let latency = now.duration_since(start);
            rt.stats.record(
                role,
                shared.now_sec(now),
                status >= 500,
                latency.as_micros() as u64,
            );
            Response::from_parts(rp, ProxyBody::streamed(rbody).with_guard(Box::new(guard)))
        }
    };
    if let Some(p) = log_path {
        log_access(
            &shared,
            &conn,
            &method,
            &host_owned,
            &p,
            Some(&route.name),
            resp.status().as_u16(),
            start,
        );
    }
    Ok(resp)
}

/// Builds the request sent upstream: absolute URI to the endpoint, HTTP/1.1
/// (the pool speaks HTTP/1.1 even when the client spoke HTTP/2),
/// hop-by-hop headers stripped, X-Forwarded-* set, the client's Host kept
/// (or added from the HTTP/2 authority), route header edits applied.
fn upstream_request(
    parts: http::request::Parts,
    authority: &http::uri::Authority,
    conn: ConnInfo,
    x_forwarded_host: Option<HeaderValue>,
    route: &Route,
) -> Request<()> {
    let http::request::Parts {
        method,
        uri,
        mut headers,
        version,
        ..
    } = parts;
    strip_hop_by_hop(&mut headers);
    if version == Version::HTTP_2 && !headers.contains_key(HOST) {
        if let Some(a) = uri.authority() {
            if let Ok(v) = HeaderValue::from_str(a.as_str()) {
                headers.insert(HOST, v);
            }
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
    let mut up = Uri::builder().scheme("http").authority(authority.clone());
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
    let now = Instant::now();
    rt.stats.record(
        role,
        shared.now_sec(now),
        true,
        now.duration_since(start).as_micros() as u64,
    );
    err.response(detail)
}

#[allow(clippy::too_many_arguments)]
fn log_access(
    shared: &ProxyShared,
    conn: &ConnInfo,
    method: &Method,
    host: &str,
    path: &str,
    route: Option<&str>,
    status: u16,
    start: Instant,
) {
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    if shared.settings.access_log {
        tracing::info!(target: "weir::access", peer = %conn.peer, %method, host, path, route = route.unwrap_or("-"), status, ms, "request");
    } else {
        tracing::debug!(target: "weir::access", peer = %conn.peer, %method, host, path, route = route.unwrap_or("-"), status, ms, "request");
    }
}

/// Re-exported for the mirror, which builds its own copy of the request.
pub(crate) fn snapshot_route<'a>(snap: &'a Snapshot, idx: usize) -> (&'a Route, &'a RouteRuntime) {
    (&snap.spec.routing.routes[idx], &snap.routes[idx])
}
