//! The resilience phases both transports call (DESIGN §11): rate limit and
//! body limit at admission, the circuit breaker once the side is chosen,
//! and the per-attempt steps of a retry. The decisions themselves are the
//! PURE functions of `dataplane::resilience`; this file passes them the
//! proxy's clock and turns their answers into refusals and records.

use super::{pick_endpoint, Refusal, UpstreamFailure};
use crate::config::{RateKey, RetryPolicy};
use crate::dataplane::resilience::breaker::BreakerPermit;
use crate::dataplane::resilience::{LimitKey, RouteGuards};
use crate::dataplane::store::RouteRuntime;
use crate::proxy::errors::ProxyError;
use crate::proxy::service::ProxyShared;
use crate::proxy::upstream::{Backend, Endpoint};
use crate::routing::Headers;
use crate::stats::Role;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The header a retried request carries upstream: its attempt number
/// (2 for the first retry), as Envoy's `x-envoy-attempt-count`.
pub const ATTEMPT_HEADER: &str = "x-weir-attempt";

/// Milliseconds on the proxy's clock (since it started): the time the
/// budget window and the token buckets are given.
#[inline]
pub fn now_ms(shared: &ProxyShared, now: Instant) -> u64 {
    now.duration_since(shared.started).as_millis() as u64
}

/// Admission: a token of the route's rate limit, by its key, or the 429
/// with the seconds until the next token. Free without a rate limit.
pub fn rate_limit(
    shared: &ProxyShared,
    rt: &RouteRuntime,
    headers: Headers<'_>,
    peer: IpAddr,
    now: Instant,
) -> Result<(), Refusal> {
    let Some(g) = &rt.guards else {
        return Ok(());
    };
    let Some(limit) = &g.policies.rate_limit else {
        return Ok(());
    };
    let first;
    let key = match &limit.key {
        RateKey::Route => LimitKey::Route,
        RateKey::ClientIp => LimitKey::Ip(peer),
        RateKey::Header(name) => {
            first = headers.values(name).next().unwrap_or("");
            LimitKey::Value(first.as_bytes())
        }
    };
    g.admit(key, now_ms(shared, now)).map_err(|wait_ms| {
        let secs = crate::dataplane::resilience::bucket::retry_after_secs(wait_ms);
        Refusal {
            retry_after: Some(secs),
            ..Refusal::new(
                ProxyError::RateLimited,
                format!("over the route's rate limit; retry in {secs}s"),
            )
        }
    })
}

/// Admission: the 413 for a request whose declared length is over the
/// route's `maxRequestBodyBytes` (a body without a length is cut by the
/// transport when it grows past it).
pub fn body_too_large(rt: &RouteRuntime, content_length: Option<u64>) -> Option<Refusal> {
    let max = rt.guards.as_ref()?.policies.max_request_body_bytes?;
    let len = content_length?;
    (len > max).then(|| too_large(max))
}

/// The 413 of a body over `max` bytes.
pub(crate) fn too_large(max: u64) -> Refusal {
    Refusal::new(
        ProxyError::BodyTooLarge,
        format!("the request body is larger than {max} bytes"),
    )
}

/// The route's retry policy and its state, when it has one.
#[inline]
pub fn retry_policy(rt: &RouteRuntime) -> Option<(&Arc<RouteGuards>, &RetryPolicy)> {
    let g = rt.guards.as_ref()?;
    Some((g, g.policies.retries.as_ref()?))
}

/// The circuit breaker of the chosen backend: a permit held until the
/// response ends, the 503 overflow, or a 504 when the request waited in
/// its queue for `within` (the route timeout). `None` without a breaker,
/// at the cost of one load and no timer.
pub async fn admit_backend(
    backend: &Backend,
    within: Duration,
) -> Result<Option<BreakerPermit>, Refusal> {
    let Some(b) = backend.breaker.load().as_ref().clone() else {
        return Ok(None);
    };
    match tokio::time::timeout(within, b.admit()).await {
        Ok(Ok(p)) => Ok(Some(p)),
        Ok(Err(limit)) => Err(Refusal::new(
            ProxyError::Overflow,
            format!(
                "backend {} is over its circuit breaker ({})",
                backend.name,
                limit.as_str()
            ),
        )),
        Err(_) => Err(Refusal::new(
            ProxyError::Timeout,
            format!("no room in backend {} within {within:?}", backend.name),
        )),
    }
}

/// The endpoint of a retry: another endpoint of the same backend than
/// `previous` when there is one (a few draws), else `previous` again.
pub fn pick_retry_endpoint(
    backend: &Backend,
    r: u64,
    previous: &Arc<Endpoint>,
) -> Result<Arc<Endpoint>, Refusal> {
    let mut last = None;
    for k in 0..4u32 {
        let ep = pick_endpoint(backend, r.rotate_left(11 * k + 3))?;
        if !Arc::ptr_eq(&ep, previous) {
            return Ok(ep);
        }
        last = Some(ep);
    }
    Ok(last.unwrap_or_else(|| previous.clone()))
}

/// Counts an attempt that is retried: in the side's stats (an attempt, not
/// a request: its success and latency count, so retries hide nothing),
/// `weir_requests_total` and the retry counter. `answer` is the upstream's
/// status, or the failure that ended the attempt.
pub fn record_retried(
    shared: &ProxyShared,
    rt: &RouteRuntime,
    role: Role,
    answer: Result<u16, UpstreamFailure>,
    attempt_start: Instant,
    backend: &Backend,
    endpoint: &Endpoint,
) {
    let now = Instant::now();
    let latency = now.duration_since(attempt_start);
    let failed = answer.is_err() || answer.is_ok_and(|s| s >= 500);
    rt.stats.record_retried(
        role,
        shared.now_sec(now),
        failed,
        latency.as_micros() as u64,
    );
    match answer {
        Ok(status) => rt.metrics.record(role, status, latency),
        Err(f) => {
            let refusal = f.refusal(rt, role, backend, endpoint);
            rt.metrics.record_proxy_error(role, refusal.err, latency);
        }
    }
}
