//! Retries on the hyper path: the attempts of one request whose body can
//! be sent again (none, or one read whole within `retries.maxBodyBytes`).
//!
//! Each attempt goes to another endpoint of the same backend when there is
//! one (never to the other side), carries `x-weir-attempt: N` from the
//! second on, and is bounded by `perTryTimeout` within what is left of the
//! route timeout, the overall deadline. An attempt that is retried is
//! counted here (stats, metrics, outlier feedback, `weir_retries_total`);
//! the last one is returned for the request path to answer and record as
//! any other.

use super::request::copy_head;
use super::ProxyShared;
use crate::config::{RetryPolicy, UpstreamProtocol, UpstreamTls};
use crate::dataplane::resilience::retry::{self, AttemptOutcome, BodyReplay, RetryDecision};
use crate::dataplane::resilience::RouteGuards;
use crate::dataplane::store::RouteRuntime;
use crate::proxy::body::ProxyBody;
use crate::proxy::client::{stale_connection, HttpClient};
use crate::proxy::phases::{
    feed_outlier, now_ms, pick_retry_endpoint, random_u64, record_retried, UpstreamFailure,
    ATTEMPT_HEADER,
};
use crate::proxy::upstream::{Backend, Endpoint, InFlight};
use crate::stats::Role;
use bytes::Bytes;
use http::header::HeaderValue;
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What stays the same over the attempts of one request.
pub(super) struct Replay<'a> {
    pub(super) shared: &'a Arc<ProxyShared>,
    pub(super) rt: &'a RouteRuntime,
    pub(super) role: Role,
    pub(super) backend: &'a Backend,
    pub(super) client: &'a HttpClient,
    pub(super) protocol: UpstreamProtocol,
    pub(super) tls: Option<&'a UpstreamTls>,
    pub(super) guards: &'a RouteGuards,
    pub(super) policy: &'a RetryPolicy,
    pub(super) method: Method,
    /// The body, read whole (`None`: no body).
    pub(super) body: Option<Bytes>,
    /// The route timeout: the deadline of all attempts together.
    pub(super) route_timeout: Duration,
}

/// The last attempt of a request.
pub(super) struct Attempted {
    /// Its answer, or why there is none.
    pub(super) outcome: Result<Response<Incoming>, UpstreamFailure>,
    /// The endpoint it went to.
    pub(super) endpoint: Arc<Endpoint>,
    /// Its in-flight count (held until the response body ends).
    pub(super) guard: InFlight,
    /// When it started: the latency the stats record is the attempt's.
    pub(super) started: Instant,
}

/// Sends attempts until one is not retried.
pub(super) async fn run(x: Replay<'_>, head: Request<()>, first: Arc<Endpoint>) -> Attempted {
    let deadline = tokio::time::Instant::now() + x.route_timeout;
    let replay = if x.body.is_some() {
        BodyReplay::Buffered
    } else {
        BodyReplay::Empty
    };
    let mut endpoint = first;
    let mut n = 1u32;
    loop {
        let started = Instant::now();
        let guard = InFlight::start(endpoint.clone());
        let mut req = copy_head(&head);
        point_at(&mut req, &endpoint.authority);
        if n > 1 {
            req.headers_mut()
                .insert(ATTEMPT_HEADER, HeaderValue::from(n));
        }
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let per_try = x
            .policy
            .per_try_timeout
            .map_or(remaining, |p| p.min(remaining));
        let (outcome, kind) = match tokio::time::timeout(per_try, send(&x, req)).await {
            Err(_) if per_try < remaining => (
                Err(UpstreamFailure::Timeout(per_try)),
                AttemptOutcome::PerTryTimeout,
            ),
            // The overall deadline: nothing more can be tried.
            Err(_) => {
                return Attempted {
                    outcome: Err(UpstreamFailure::Timeout(x.route_timeout)),
                    endpoint,
                    guard,
                    started,
                }
            }
            Ok(Ok(r)) if r.status() == StatusCode::SWITCHING_PROTOCOLS => {
                (Err(UpstreamFailure::Broken), AttemptOutcome::Reset)
            }
            Ok(Ok(r)) => {
                let s = r.status().as_u16();
                (Ok(r), AttemptOutcome::Answered(s))
            }
            Ok(Err(e)) => {
                tracing::debug!(target: "weir::upstream", endpoint = %endpoint.address, attempt = n, error = %e, "upstream attempt failed");
                if refused_stream(&e) {
                    (Err(UpstreamFailure::Broken), AttemptOutcome::Refused)
                } else if e.is_connect() {
                    (
                        Err(UpstreamFailure::Connect),
                        AttemptOutcome::ConnectFailure,
                    )
                } else {
                    (Err(UpstreamFailure::Broken), AttemptOutcome::Reset)
                }
            }
        };
        let now = Instant::now();
        let decision = x.guards.with_budget(|b| {
            retry::decide(
                x.policy,
                n,
                kind,
                &x.method,
                replay,
                b,
                now_ms(x.shared, now),
            )
        });
        let reason = match decision {
            RetryDecision::Retry(reason) => reason,
            other => {
                if n > 1 || other != RetryDecision::NotRetriable {
                    tracing::debug!(target: "weir::upstream", attempt = n, verdict = ?other, "not retried");
                }
                return Attempted {
                    outcome,
                    endpoint,
                    guard,
                    started,
                };
            }
        };
        let wait = retry::backoff(x.policy, n, random_u64());
        if tokio::time::Instant::now() + wait >= deadline {
            return Attempted {
                outcome,
                endpoint,
                guard,
                started,
            };
        }
        let answer = outcome
            .as_ref()
            .map(|r| r.status().as_u16())
            .map_err(|f| *f);
        feed_outlier(x.backend, &endpoint, answer.ok());
        record_retried(
            x.shared, x.rt, x.role, answer, started, x.backend, &endpoint,
        );
        x.guards.count_retry(x.role, reason);
        drop(outcome);
        drop(guard);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        // No ready endpoint now: the same one again rather than none.
        if let Ok(next) = pick_retry_endpoint(x.backend, random_u64(), &endpoint) {
            endpoint = next;
        }
        n += 1;
    }
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
        Err(e) if stale_connection(&e) => match x.shared.client.fresh_for(x.protocol, x.tls) {
            Ok(fresh) => fresh.request(again.map(|()| body())).await,
            Err(_) => Err(e),
        },
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
