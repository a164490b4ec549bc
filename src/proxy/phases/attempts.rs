//! The attempts of one request on a route with `retries` (DESIGN §11), for
//! both transports: the transport gives one function that sends a single
//! attempt to an endpoint (its bytes or its hyper request), and this loop
//! decides everything else the same way for both.
//!
//! Each attempt goes to another endpoint of the same backend when there is
//! one (never to the other side), carries `x-weir-attempt: N` from the
//! second on (the transport writes it), and is bounded by `perTryTimeout`
//! within what is left of the route timeout, the overall deadline. An
//! attempt that is retried is counted here (stats, metrics, outlier
//! feedback, `weir_retries_total`); the last one is returned for the
//! transport to answer and record as any other.

use super::{feed_outlier, now_ms, pick_retry_endpoint, random_u64, record_retried};
use super::{ProxyShared, UpstreamFailure};
use crate::config::RetryPolicy;
use crate::dataplane::resilience::retry::{self, AttemptOutcome, BodyReplay, RetryDecision};
use crate::dataplane::resilience::RouteGuards;
use crate::dataplane::store::RouteRuntime;
use crate::proxy::upstream::{Backend, Endpoint, InFlight};
use crate::stats::Role;
use http::Method;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::time::Sleep;

/// What stays the same over the attempts of one request (references and
/// small values: a copy is a few words).
#[derive(Clone, Copy)]
pub struct Attempts<'a> {
    /// The proxy's shared state (clock, settings).
    pub shared: &'a ProxyShared,
    /// The route's runtime (stats, metrics).
    pub rt: &'a RouteRuntime,
    /// The side every attempt counts for.
    pub role: Role,
    /// The side's backend: every attempt goes to one of its endpoints.
    pub backend: &'a Backend,
    /// The route's retry state (budget, counters).
    pub guards: &'a RouteGuards,
    /// The route's retry policy.
    pub policy: &'a RetryPolicy,
    /// The request's method (only the policy's `methods` are retried).
    pub method: &'a Method,
    /// Whether the body can be sent again.
    pub replay: BodyReplay,
    /// The route timeout: the deadline of all attempts together.
    pub route_timeout: Duration,
}

/// One attempt's result as the transport sees it: the answer with its
/// status, or why there is none and how that counts for a retry.
pub type Sent<A> = Result<(A, u16), (UpstreamFailure, AttemptOutcome)>;

/// The last attempt of a request.
pub struct Tried<A> {
    /// Its answer, or why there is none.
    pub outcome: Result<A, UpstreamFailure>,
    /// The endpoint it went to.
    pub endpoint: Arc<Endpoint>,
    /// Its in-flight count (held until the response body ends).
    pub guard: InFlight,
    /// When it started: the latency the stats record is the attempt's.
    pub started: Instant,
}

/// Counts a request of a route with retries into its retry budget (every
/// request counts, retried or not, as Envoy's and Linkerd's budgets do).
#[inline]
pub fn deposit(shared: &ProxyShared, guards: &RouteGuards, now: Instant) {
    guards.with_budget(|b| b.deposit(now_ms(shared, now)));
}

/// Sends attempts through `send(endpoint, n)` (n = 1 for the first) until
/// one is not retried, and returns that one. `start` is when the request
/// began (the route timeout counts from it); `timer` bounds each attempt
/// and is re-armed for every one (a transport may keep one per connection:
/// moving a registered timer costs an atomic store, a new one a wheel
/// insert and removal).
pub async fn run<A, F, Fut>(
    x: Attempts<'_>,
    first: Arc<Endpoint>,
    start: Instant,
    mut timer: Pin<&mut Sleep>,
    mut send: F,
) -> Tried<A>
where
    F: FnMut(Arc<Endpoint>, u32) -> Fut,
    Fut: Future<Output = Sent<A>>,
{
    let deadline = tokio::time::Instant::from_std(start) + x.route_timeout;
    let mut endpoint = first;
    let mut n = 1u32;
    let mut started = start;
    loop {
        let guard = InFlight::start(endpoint.clone());
        let at = tokio::time::Instant::from_std(started);
        let per_try_end = x
            .policy
            .per_try_timeout
            .map_or(deadline, |p| (at + p).min(deadline));
        timer.as_mut().reset(per_try_end);
        let sent = tokio::select! {
            biased;
            r = send(endpoint.clone(), n) => Some(r),
            () = timer.as_mut() => None,
        };
        let (outcome, kind) = match sent {
            None if per_try_end < deadline => (
                Err(UpstreamFailure::Timeout(per_try_end - at)),
                AttemptOutcome::PerTryTimeout,
            ),
            // The overall deadline: nothing more can be tried.
            None => {
                return Tried {
                    outcome: Err(UpstreamFailure::Timeout(x.route_timeout)),
                    endpoint,
                    guard,
                    started,
                }
            }
            Some(Ok((a, status))) => (Ok((a, status)), AttemptOutcome::Answered(status)),
            Some(Err((failure, kind))) => {
                tracing::debug!(target: "weir::upstream", endpoint = %endpoint.address, attempt = n, ?kind, "upstream attempt failed");
                (Err(failure), kind)
            }
        };
        let done = |outcome: Result<(A, u16), UpstreamFailure>, endpoint, guard| Tried {
            outcome: outcome.map(|(a, _)| a),
            endpoint,
            guard,
            started,
        };
        // The common case, an answer the policy does not retry, takes no
        // lock and reads no clock.
        if retry::retry_reason(x.policy, kind).is_none() {
            if n > 1 {
                tracing::debug!(target: "weir::upstream", attempt = n, "not retried: not retriable");
            }
            return done(outcome, endpoint, guard);
        }
        let now = Instant::now();
        let decision = x.guards.with_budget(|b| {
            retry::decide(
                x.policy,
                n,
                kind,
                x.method,
                x.replay,
                b,
                now_ms(x.shared, now),
            )
        });
        let reason = match decision {
            RetryDecision::Retry(reason) => reason,
            other => {
                tracing::debug!(target: "weir::upstream", attempt = n, verdict = ?other, "not retried");
                return done(outcome, endpoint, guard);
            }
        };
        let wait = retry::backoff(x.policy, n, random_u64());
        if tokio::time::Instant::from_std(now) + wait >= deadline {
            return done(outcome, endpoint, guard);
        }
        let answer = outcome.as_ref().map(|(_, s)| *s).map_err(|f| *f);
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
        started = Instant::now();
    }
}
