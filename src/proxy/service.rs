//! The hyper transport: one request as hyper types, in phase order
//! (snapshot → admit → route → decide → upstream request → response →
//! record). What is decided, counted and logged comes from `phases`, as on
//! the fast path; this file keeps what only hyper has: admission of what
//! hyper parsed, upgrades, request bodies, gRPC trailers, the 499 of a
//! request whose client went away. The upstream request is built in `request`.

use super::body::ProxyBody;
use super::errors::ProxyError;
use super::phases::{
    self, choose_side, feed_outlier, find_route, pick_endpoint, record_answer, record_client_error,
    AccessLine, Refusal, UpstreamFailure,
};
use super::smuggle::ConnGuard;
use super::strip_hop_by_hop;
use super::upload::{self, ClientFault, Limits, Upload, Waited, Watched};
use super::upstream::{InFlight, UpstreamClient};
use super::{grpc, limits, upgrade};
use crate::config::{ProxySettings, UpstreamProtocol};
use crate::dataplane::store::{RouteRuntime, Snapshot, TableStore};
use crate::routing::{decide, normalize_host, Draw, Headers, RequestView, Route};
use crate::stats::Role;
use http::header::{
    HeaderValue, CONNECTION, CONTENT_LENGTH, HOST, SET_COOKIE, TRANSFER_ENCODING, UPGRADE,
};
use http::{Method, Request, Response, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

mod request;
mod retry;
use request::{copy_head, upstream_request, Target};

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

    /// The same clock in milliseconds: where in its second the stats clock is.
    pub fn now_ms(&self, now: Instant) -> u64 {
        u64::try_from(now.duration_since(self.started).as_millis()).unwrap_or(u64::MAX)
    }
}

/// Per-connection facts the request path needs.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The TCP peer (client address for X-Forwarded-For and `sourceIp`).
    pub peer: SocketAddr,
    /// Whether the connection is TLS (X-Forwarded-Proto, `scheme` matches).
    pub tls: bool,
    /// The listener's port (`port` matches).
    pub port: u16,
    /// The peer is one of the listener's `trustedProxies`: its client-address
    /// headers are passed on (else replaced by the peer's address).
    pub trusted: bool,
    /// Request numbering and smuggling marks of the connection (`None`
    /// when the caller does not track them, e.g. in unit tests).
    pub guard: Option<Arc<ConnGuard>>,
}

/// Re-exported for the mirror, which draws its own endpoint.
pub use super::phases::random_u64;

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
    let log = AccessLine::new(&shared, &parts.method, &host, path);
    let idx = match find_route(&snap, &host, path) {
        Ok(idx) => idx,
        Err(refusal) => return Ok(refuse(&shared, &conn, None, &refusal, log.as_ref(), start)),
    };
    let route = &snap.spec.routing.routes[idx];
    let rt = &snap.routes[idx];

    // Phase: admission by the route's policies (rate limit, body limit).
    if rt.guards.is_some() {
        let refused = phases::rate_limit(
            &shared,
            rt,
            Headers::Map(&parts.headers),
            conn.peer.ip(),
            start,
        )
        .err()
        .or_else(|| phases::body_too_large(rt, declared_length(&parts.headers)));
        if let Some(refusal) = refused {
            return Ok(refuse(&shared, &conn, None, &refusal, log.as_ref(), start));
        }
    }

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
        )
        .on_listener(host_raw, conn.tls, conn.port);
        decide(&view, route, Draw::from_u64(r))
    };
    let (backend, role) = choose_side(decision.side, rt);
    let counted = Some((rt, role, route.name.as_str()));

    // Phase: the side's circuit breaker.
    let permit = match phases::admit_backend(backend, route.timeout).await {
        Ok(p) => p,
        Err(refusal) => {
            return Ok(refuse(
                &shared,
                &conn,
                counted,
                &refusal,
                log.as_ref(),
                start,
            ));
        }
    };

    // Phase: upstream request.
    let endpoint = match pick_endpoint(backend, r) {
        Ok(ep) => ep,
        Err(refusal) => {
            return Ok(refuse(
                &shared,
                &conn,
                counted,
                &refusal,
                log.as_ref(),
                start,
            ));
        }
    };
    let x_forwarded_host = HeaderValue::from_str(host_raw).ok();
    let method = parts.method.clone();
    let upgrading = upgrade_value.is_some();
    let body_len = declared_length(&parts.headers);
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
            let refusal = UpstreamFailure::NoTlsClient.refusal(rt, role, backend, &endpoint);
            return Ok(refuse(
                &shared,
                &conn,
                counted,
                &refusal,
                log.as_ref(),
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
    // Retries: a request without a body or with one small enough to keep
    // (its declared length within `maxBodyBytes`) may be sent again; a
    // streamed body, an upgrade or a mirrored request is sent once.
    let retry = phases::retry_policy(rt).filter(|_| !upgrading && !decision.mirror);
    if let Some((g, _)) = retry {
        phases::attempts::deposit(&shared, g, start);
    }
    let replayable = retry
        .filter(|(_, p)| body.is_end_stream() || body_len.is_some_and(|n| n <= p.max_body_bytes));
    let mut abandoned = Abandoned {
        shared: &shared,
        rt,
        role,
        peer: conn.peer,
        route: &route.name,
        log,
        start,
        armed: true,
    };
    let (outcome, endpoint, guard, attempt_start) = if let Some((guards, policy)) = replayable {
        let kept = if body.is_end_stream() {
            Ok(None)
        } else {
            read_whole(body, &shared.settings, policy.max_body_bytes)
                .await
                .map(Some)
        };
        match kept {
            Err(fault) => (
                Err(Err(fault)),
                endpoint.clone(),
                InFlight::start(endpoint),
                start,
            ),
            Ok(kept) => {
                let x = retry::Replay {
                    attempts: phases::attempts::Attempts {
                        shared: &shared,
                        rt,
                        role,
                        backend,
                        guards,
                        policy,
                        method: &method,
                        replay: retry::replay_of(kept.as_ref()),
                        route_timeout: route.timeout,
                    },
                    client: &client,
                    protocol,
                    tls: upstream_tls,
                    body: kept,
                };
                // The route timeout counts from here, once a kept body is read (as
                // it counts from a body's end without retries).
                let a = retry::run(x, up, endpoint, Instant::now()).await;
                (a.outcome.map_err(Ok), a.endpoint, a.guard, a.started)
            }
        }
    } else {
        let up_body = if decision.mirror {
            super::mirror::dispatch(&shared, &snap, idx, &mut up, body)
        } else {
            ProxyBody::streamed(body)
        };
        let up_body = match rt
            .guards
            .as_ref()
            .and_then(|g| g.policies.max_request_body_bytes)
        {
            Some(max) if !up_body.is_end_stream() => ProxyBody::boxed(
                http_body_util::BodyExt::boxed(upload::Capped::new(up_body, max)),
            ),
            _ => up_body,
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
        // A request without a body may meet a pooled connection the backend has
        // just closed; it then goes once more on a new connection (as the fast
        // path and nginx do) if it was not written at all, or if it is
        // idempotent and nothing came back. So it needs a copy of its head.
        let idempotent = method.is_idempotent();
        let again = upload.is_none().then(|| copy_head(&up));
        let up = up.map(|()| up_body);
        let guard = InFlight::start(endpoint.clone());
        let limits = Limits {
            route: route.timeout,
            body_total: shared.settings.request_body_timeout,
            body_idle: shared.settings.body_idle_timeout,
        };
        let exchange = async {
            let first = client.request(up).await;
            match (first, again) {
                (Err(e), Some(req))
                    if super::client::unsent(&e)
                        || (idempotent && super::client::stale_connection(&e)) =>
                {
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
        // The exchange's outcome, classified once. A 101 the client did not ask
        // for cannot be forwarded: an HTTP/1 client would take the connection as
        // switched, and HTTP/2 has no 101 at all (RFC 9113 §8.6). It is the
        // upstream breaking the exchange.
        let outcome = match result {
            Err(Some(fault)) => Err(Err(fault)),
            Err(None) => Err(Ok(UpstreamFailure::Timeout(route.timeout))),
            Ok(Ok(r))
                if client_upgrade.is_none() && r.status() == StatusCode::SWITCHING_PROTOCOLS =>
            {
                tracing::debug!(target: "weir::upstream", endpoint = %endpoint.address, "101 Switching Protocols without an upgrade request");
                Err(Ok(UpstreamFailure::Broken))
            }
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                tracing::debug!(target: "weir::upstream", endpoint = %endpoint.address, error = %e, "upstream request failed");
                Err(Ok(if e.is_connect() {
                    UpstreamFailure::Connect
                } else {
                    UpstreamFailure::Broken
                }))
            }
        };
        (outcome, endpoint, guard, start)
    };
    // Passive outlier detection: never what the client broke.
    match &outcome {
        Ok(r) => feed_outlier(backend, &endpoint, Some(r.status().as_u16())),
        Err(Ok(_)) => feed_outlier(backend, &endpoint, None),
        Err(Err(_)) => {}
    }

    // Phase: response.
    let mut cause = None;
    let resp = match outcome {
        Err(Err(fault)) => client_fault(&shared, rt, role, fault),
        Err(Ok(failure)) => {
            let refusal = failure.refusal(rt, role, backend, &endpoint);
            phases::record_error(&shared, rt, role, refusal.err, attempt_start);
            phases::log_cause(conn.peer, Some(&route.name), &refusal);
            cause = refusal.cause.clone();
            refusal.err.response(&refusal.detail)
        }
        Ok(resp) => {
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
                .with_guard(Box::new((guard, permit)))
            } else {
                idle_limited(
                    ProxyBody::streamed(rbody),
                    shared.settings.body_idle_timeout,
                )
                .with_guard(Box::new((guard, permit)))
            };
            if !decided_by_trailers {
                record_answer(&shared, rt, role, status, failed, attempt_start);
            }
            Response::from_parts(rp, body)
        }
    };
    abandoned.armed = false;
    if let Some(l) = abandoned.log.take() {
        l.log_with(
            &shared,
            conn.peer,
            Some(&route.name),
            resp.status().as_u16(),
            cause.as_deref(),
            start,
        );
    }
    Ok(resp)
}

/// A weir-made answer, counted against its side when it has one (route
/// runtime, role, route name) and logged.
fn refuse(
    shared: &ProxyShared,
    conn: &ConnInfo,
    counted: Option<(&RouteRuntime, Role, &str)>,
    refusal: &Refusal,
    log: Option<&AccessLine>,
    start: Instant,
) -> Response<ProxyBody> {
    phases::account_refusal(
        shared,
        conn.peer,
        counted.map(|(rt, role, _)| (rt, role)),
        counted.map(|(_, _, name)| name),
        refusal,
        log,
        start,
    );
    let mut r = refusal.err.response(&refusal.detail);
    if let Some(secs) = refusal.retry_after {
        r.headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
    }
    r
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
    /// The access line (when the log is on).
    log: Option<AccessLine>,
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
        if let Some(l) = &self.log {
            l.log(self.shared, self.peer, Some(self.route), status, self.start);
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
        ClientFault::TooLarge => (
            ProxyError::BodyTooLarge,
            "the request body is larger than the route allows".to_string(),
        ),
    };
    record_client_error(shared, rt, role, err.status().as_u16());
    let mut r = err.response(&detail);
    r.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    r
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

/// The request's declared body length (`Content-Length`), when it has one.
fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// Reads a request body whole for replay (at most `max` bytes, within the
/// body timeouts), or the client's fault.
async fn read_whole(
    body: Incoming,
    settings: &ProxySettings,
    max: u64,
) -> Result<bytes::Bytes, ClientFault> {
    use http_body_util::BodyExt;
    let limited = http_body_util::Limited::new(
        idle_limited(ProxyBody::streamed(body), settings.body_idle_timeout),
        usize::try_from(max).unwrap_or(usize::MAX),
    );
    let read = async {
        limited
            .collect()
            .await
            .map(|c| c.to_bytes())
            .map_err(|e| upload::fault_of(&*e))
    };
    match settings.request_body_timeout {
        Some(t) => tokio::time::timeout(t, read)
            .await
            .unwrap_or(Err(ClientFault::TooSlow)),
        None => read.await,
    }
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

/// Re-exported for the mirror, which builds its own copy of the request.
pub(crate) fn snapshot_route(snap: &Snapshot, idx: usize) -> (&Route, &RouteRuntime) {
    (&snap.spec.routing.routes[idx], &snap.routes[idx])
}
