//! Retries on the hyper path: how one attempt of a request whose body can
//! be sent again (none, or one read whole within `retries.maxBodyBytes`) is
//! sent as a hyper request. The loop around the attempts (endpoint, budget,
//! timeouts, what is counted) is the shared one of `phases::attempts`.

use super::request::copy_head;
use crate::config::{UpstreamProtocol, UpstreamTls};
use crate::dataplane::resilience::retry::{AttemptOutcome, BodyReplay};
use crate::proxy::body::ProxyBody;
use crate::proxy::client::{stale_connection, unsent, HttpClient};
use crate::proxy::phases::attempts::{self, Attempts, Tried};
use crate::proxy::phases::{UpstreamFailure, ATTEMPT_HEADER};
use crate::proxy::upstream::Endpoint;
use bytes::Bytes;
use http::header::HeaderValue;
use http::{Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use std::sync::Arc;
use std::time::Duration;

/// What stays the same over the attempts of one request: the shared
/// loop's part, and how the hyper path sends one.
pub(super) struct Replay<'a> {
    /// What the shared loop decides and counts with (its `replay` says
    /// whether `body` is kept).
    pub(super) attempts: Attempts<'a>,
    /// The pool the first try of each attempt goes through.
    pub(super) client: &'a HttpClient,
    /// The backend's protocol and TLS setting, for a fresh connection
    /// after a stale pooled one.
    pub(super) protocol: UpstreamProtocol,
    pub(super) tls: Option<&'a UpstreamTls>,
    /// The body, read whole (`None`: no body).
    pub(super) body: Option<Bytes>,
}

/// What a kept body (`None`: no body) allows the shared loop.
pub(super) fn replay_of(body: Option<&Bytes>) -> BodyReplay {
    match body {
        Some(_) => BodyReplay::Buffered,
        None => BodyReplay::Empty,
    }
}

/// Sends attempts (the shared loop, `phases::attempts`) until one is not
/// retried; each one is this request's head, pointed at its endpoint.
pub(super) async fn run(
    x: Replay<'_>,
    head: Request<()>,
    first: Arc<Endpoint>,
    start: std::time::Instant,
) -> Tried<Response<Incoming>> {
    debug_assert_eq!(x.attempts.replay, replay_of(x.body.as_ref()));
    let (x, head) = (&x, &head);
    let timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    attempts::run(x.attempts, first, start, timer, |endpoint, n| {
        let mut req = copy_head(head);
        point_at(&mut req, &endpoint.authority);
        if n > 1 {
            req.headers_mut()
                .insert(ATTEMPT_HEADER, HeaderValue::from(n));
        }
        async move {
            match send(x, req).await {
                Ok(r) if r.status() == StatusCode::SWITCHING_PROTOCOLS => {
                    Err((UpstreamFailure::Broken, AttemptOutcome::Reset))
                }
                Ok(r) => {
                    let s = r.status().as_u16();
                    Ok((r, s))
                }
                Err(e) => {
                    tracing::debug!(target: "weir::upstream", endpoint = %endpoint.address, attempt = n, error = %e, "upstream attempt failed");
                    Err(if refused_stream(&e) {
                        (UpstreamFailure::Broken, AttemptOutcome::Refused)
                    } else if e.is_connect() {
                        (UpstreamFailure::Connect, AttemptOutcome::ConnectFailure)
                    } else {
                        (UpstreamFailure::Broken, AttemptOutcome::Reset)
                    })
                }
            }
        }
    })
    .await
}

/// One attempt; a pooled connection the backend had just closed is
/// replaced once by a new one, as on the first try of any request.
async fn send(
    x: &Replay<'_>,
    req: Request<()>,
) -> Result<Response<Incoming>, hyper_util::client::legacy::Error> {
    let again = copy_head(&req);
    let body = || {
        x.body
            .clone()
            .map_or_else(ProxyBody::empty, ProxyBody::full)
    };
    match x.client.request(req.map(|()| body())).await {
        Err(e) if stale_connection(&e) || unsent(&e) => {
            match x.attempts.shared.client.fresh_for(x.protocol, x.tls) {
                Ok(fresh) => fresh.request(again.map(|()| body())).await,
                Err(_) => Err(e),
            }
        }
        r => r,
    }
}

/// Points the request at `authority` (the attempt's endpoint).
fn point_at(req: &mut Request<()>, authority: &http::uri::Authority) {
    let mut parts = req.uri().clone().into_parts();
    parts.authority = Some(authority.clone());
    if let Ok(u) = Uri::from_parts(parts) {
        *req.uri_mut() = u;
    }
}

/// Whether an HTTP/2 backend never processed the request: it refused the
/// stream (`REFUSED_STREAM`), or it had announced a graceful GOAWAY that
/// left the stream out (RFC 9113 §8.7: both are safe to send again).
fn refused_stream(err: &hyper_util::client::legacy::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            if h2.reason() == Some(h2::Reason::REFUSED_STREAM) {
                return true;
            }
            if h2.is_go_away() && h2.is_remote() && h2.reason() == Some(h2::Reason::NO_ERROR) {
                return true;
            }
        }
        cur = e.source();
    }
    false
}
