//! Serving the admin API: the listener loop (connection slots, shedding idle
//! connections when full, the drain), path matching, the `Host` and
//! cross-site checks, authentication and the capped, timed body read, then the
//! matched handler.

use super::api::{ApiBody, ApiError, ApiRequest, ApiResponse, ApiState, Auth, RouteDef};
use super::api::{HEADER_READ_TIMEOUT, MAX_BODY_BYTES, MAX_CONNECTIONS};
use super::auth::{self, Access, AuthResult};
use super::conns::{Closing, Conns, RequestGuard};
use super::guard;
use bytes::Bytes;
use http::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};

/// Serves the admin API on `listener` until `shutdown` turns true, then
/// waits up to `drain` for open requests (SSE streams end on shutdown).
///
/// At most [`MAX_CONNECTIONS`] connections are open. A connection that arrives
/// when all are taken closes the one idle longest (no request in progress:
/// none sent yet, or between keep-alive requests) and takes its slot; only when
/// every connection is answering a request does it wait.
pub async fn serve(
    listener: TcpListener,
    state: Arc<ApiState>,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let conns = Conns::new();
    // Every connection task holds a sender; the drain ends when all are gone.
    let (alive, mut all_done) = mpsc::channel::<()>(1);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(target: "weir::admin", error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        // A slot: a free one, or one an idle connection gives up. When every
        // connection is busy, wait; a connection turning idle meanwhile is shed
        // then.
        let permit = loop {
            if let Ok(p) = slots.clone().try_acquire_owned() {
                break Some(p);
            }
            let idle_again = conns.idle_again();
            tokio::pin!(idle_again);
            idle_again.as_mut().enable();
            let shed = conns.shed_oldest_idle();
            let (open, idle) = conns.counts();
            tracing::debug!(target: "weir::admin", %peer, open, idle, shed, "admin listener full");
            tokio::select! {
                p = slots.clone().acquire_owned() => break p.ok(),
                _ = idle_again => continue,
                _ = shutdown.changed() => break None,
            }
        };
        let Some(permit) = permit else { break };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_connection(
            stream,
            peer,
            state.clone(),
            conns.clone(),
            shutdown.clone(),
            (permit, alive.clone()),
        ));
    }
    drop(listener);
    drop(alive);
    if tokio::time::timeout(drain, all_done.recv()).await.is_err() {
        tracing::warn!(target: "weir::admin", ?drain, "admin drain timeout reached");
    }
}

/// One admin connection, from accept to close. `held` (its slot and its drain
/// sender) is released when it ends.
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<ApiState>,
    conns: Arc<Conns>,
    mut shutdown: watch::Receiver<bool>,
    held: (tokio::sync::OwnedSemaphorePermit, mpsc::Sender<()>),
) {
    let _held = held;
    let me = conns.register();
    let id = me.id;
    let svc = {
        let conns = conns.clone();
        service_fn(move |req| {
            let guard = conns.request_started(id);
            handle_tracked(state.clone(), peer, req, guard)
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    let mut closing = false;
    // A stream opened while draining is closed like the others.
    let mut draining = *shutdown.borrow_and_update();
    loop {
        if draining && !closing {
            closing = true;
            match conns.closing(id) {
                Closing::Drop => return,
                Closing::Graceful => conn.as_mut().graceful_shutdown(),
            }
        }
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(target: "weir::admin", %peer, error = %e, "admin connection ended with error");
                }
                return;
            }
            _ = me.shed.notified(), if !closing => {
                tracing::debug!(target: "weir::admin", %peer, "idle admin connection closed to make room");
                closing = true;
                match conns.closing(id) {
                    Closing::Drop => return,
                    Closing::Graceful => conn.as_mut().graceful_shutdown(),
                }
            }
            r = shutdown.changed(), if !draining => {
                // A dropped sender also means the app is going away.
                draining = r.is_err() || *shutdown.borrow();
            }
        }
    }
}

/// [`handle`], the connection counting the request as busy until its response
/// body has been sent.
async fn handle_tracked(
    state: Arc<ApiState>,
    peer: SocketAddr,
    req: Request<Incoming>,
    guard: RequestGuard,
) -> Result<ApiResponse, Infallible> {
    let resp = handle(state, peer, req).await?;
    let (parts, body) = resp.into_parts();
    let body = Tracked {
        inner: body,
        _guard: guard,
    };
    Ok(ApiResponse::from_parts(parts, BodyExt::boxed(body)))
}

/// A response body that holds its request's [`RequestGuard`].
struct Tracked {
    inner: ApiBody,
    _guard: RequestGuard,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Splits a path into its non-empty segments.
fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

/// Matches `segs` against a template; returns the captured parameters.
pub fn match_template(template: &str, segs: &[&str]) -> Option<Vec<(String, String)>> {
    let tsegs = segments(template);
    if tsegs.len() != segs.len() {
        return None;
    }
    let mut params = Vec::new();
    for (t, s) in tsegs.iter().zip(segs) {
        if let Some(name) = t.strip_prefix('{').and_then(|n| n.strip_suffix('}')) {
            params.push((name.to_string(), percent_decode(s)));
        } else if t != s {
            return None;
        }
    }
    Some(params)
}

/// Percent-decodes one path segment (invalid escapes are kept as written).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The hyper service: every request of the admin listener. Never fails.
pub async fn handle(
    state: Arc<ApiState>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<ApiResponse, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = match dispatch(state, peer, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    tracing::debug!(target: "weir::admin", %peer, %method, path, status = resp.status().as_u16(), "admin request");
    Ok(resp)
}

async fn dispatch(
    state: Arc<ApiState>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<ApiResponse, ApiError> {
    let path = req.uri().path().to_string();
    let segs = segments(&path);
    let mut matched: Option<(&'static RouteDef, Vec<(String, String)>)> = None;
    let mut allowed: Vec<&'static str> = Vec::new();
    let mut needs = Auth::Token;
    for &def in &state.routes {
        if let Some(params) = match_template(def.path, &segs) {
            allowed.push(def.method.as_str());
            if def.method == req.method() {
                needs = def.auth;
                matched = Some((def, params));
            }
        }
    }
    // A name the API is not called by (DNS rebinding) learns nothing, the
    // probes' up-or-ready aside.
    let host_allowed = guard::host_allowed(&state.allowed_hosts, req.uri(), req.headers());
    if !host_allowed && needs != Auth::Probe {
        guard::check_host(&state.allowed_hosts, req.uri(), req.headers())?;
    }
    // Authenticate before telling anything about paths.
    let mut access = Access::Write;
    if !matches!(needs, Auth::Public | Auth::Probe) {
        let token = state.token.as_deref();
        match auth::check_with_peer(
            token,
            state.read_only_token.as_deref(),
            state.peer_token.as_deref(),
            req.headers(),
        ) {
            AuthResult::Allowed(a) => access = a,
            r => {
                let reason = if r == AuthResult::Missing {
                    "missing bearer token (Authorization: Bearer <token>)"
                } else {
                    "wrong bearer token"
                };
                let mut e = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", None, reason);
                e.headers.push((
                    http::header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"weir\""),
                ));
                return Err(e);
            }
        }
    }
    if access == Access::Peer && needs != Auth::TokenOrPeer {
        // Another replica's token opens the data-plane calls and forwarded
        // commands only: a stolen peer token cannot replace the table or read
        // the rest of the API.
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            None,
            format!(
                "the peer token may not {} {path}: it only serves the calls one replica makes to another",
                req.method()
            ),
        ));
    }
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    if access == Access::Read && !reads {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            None,
            format!(
                "the read-only token may not {} {path}: writes need the admin.tokenFile token",
                req.method()
            ),
        ));
    }
    let Some((def, params)) = matched else {
        if allowed.is_empty() {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not-found",
                None,
                format!("no endpoint {path}"),
            ));
        }
        let mut e = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            None,
            format!("{} is not served on {path}", req.method()),
        );
        if let Ok(v) = HeaderValue::from_str(&allowed.join(", ")) {
            e.headers.push((ALLOW, v));
        }
        return Err(e);
    };
    let (parts, body) = req.into_parts();
    let body = if reads {
        Bytes::new()
    } else {
        // A write a page of another site could have sent is refused whatever
        // the token: the token-less API on loopback is the packaged default.
        guard::check_write(&parts.method, &parts.headers)?;
        read_write_body(&parts.method, &parts.headers, body, state.body_timeout).await?
    };
    let api_req = ApiRequest {
        method: parts.method,
        params,
        query: parts.uri.query().map(str::to_string),
        headers: parts.headers,
        body,
        peer,
        access,
        host_allowed,
    };
    (def.handler)(state, api_req).await
}

/// Checks the media type and reads a write's body, capped at
/// [`MAX_BODY_BYTES`] and within `timeout` (408, and the connection closes).
async fn read_write_body(
    method: &Method,
    headers: &HeaderMap,
    body: Incoming,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            None,
            format!("request bodies are limited to {MAX_BODY_BYTES} bytes"),
        )
    };
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let media = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    let unsupported = |m: Option<&str>| {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            Some("Content-Type"),
            format!(
                "writes take application/json (got {})",
                m.unwrap_or("no Content-Type")
            ),
        )
    };
    match media.as_deref() {
        Some(m) if !guard::is_json(method, m) => return Err(unsupported(Some(m))),
        None if matches!(*method, Method::PUT | Method::PATCH) => return Err(unsupported(None)),
        _ => {}
    }
    let read = Limited::new(body, MAX_BODY_BYTES).collect();
    let bytes = match tokio::time::timeout(timeout, read).await {
        Ok(Ok(c)) => c.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
        Ok(Err(_)) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad-request",
                None,
                "the request body could not be read",
            ))
        }
        Err(_) => {
            let mut e = ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request-timeout",
                None,
                format!(
                    "the request body did not arrive within {} (admin.bodyTimeout)",
                    humantime::format_duration(timeout)
                ),
            );
            // The rest of the body is never read: the connection cannot carry
            // another request.
            e.headers
                .push((CONNECTION, HeaderValue::from_static("close")));
            return Err(e);
        }
    };
    if media.is_none() && !bytes.is_empty() {
        return Err(unsupported(None));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_and_capture() {
        let segs = segments("/api/v1/routes/my%2Droute");
        let p = match_template("/api/v1/routes/{name}", &segs).unwrap();
        assert_eq!(p, vec![("name".to_string(), "my-route".to_string())]);
        assert!(match_template("/api/v1/table", &segs).is_none());
        assert_eq!(
            match_template("/healthz", &segments("/healthz/")),
            Some(vec![])
        );
    }

    #[test]
    fn percent_decoding_keeps_bad_escapes() {
        assert_eq!(percent_decode("a%41b"), "aAb");
        assert_eq!(percent_decode("a%4"), "a%4");
        assert_eq!(percent_decode("%zz%"), "%zz%");
    }
}
