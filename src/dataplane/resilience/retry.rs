//! PURE: whether an attempt is retried, and how long to wait first.
//!
//! The order of the checks follows Envoy's router: the condition (`on`),
//! then what the request allows (attempts left, method, a replayable body),
//! and the budget last, so a retry that would not happen anyway never
//! spends one.

use super::budget::RetryBudget;
use crate::config::RetryPolicy;
use http::Method;
use std::time::Duration;

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// No connection could be made (refused, connect timeout).
    ConnectFailure,
    /// The connection broke before a whole response head.
    Reset,
    /// No response head within `perTryTimeout`.
    PerTryTimeout,
    /// HTTP/2: the backend refused the stream (`REFUSED_STREAM`) or had sent
    /// GOAWAY before it; it never processed the request.
    Refused,
    /// A response head with this status.
    Answered(u16),
}

/// Why an attempt was retried: the `reason` label of `weir_retries_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryReason {
    /// `connect-failure`.
    ConnectFailure,
    /// `reset`.
    Reset,
    /// A per-try timeout.
    PerTryTimeout,
    /// A refused or GOAWAY'd HTTP/2 stream.
    RefusedStream,
    /// `gateway-error`: 502, 503, 504.
    GatewayError,
    /// `5xx`: another 5xx.
    ServerError,
    /// `retriable-status-codes`.
    StatusCode,
}

impl RetryReason {
    /// Every reason, in label order.
    pub const ALL: [RetryReason; 7] = [
        RetryReason::ConnectFailure,
        RetryReason::Reset,
        RetryReason::PerTryTimeout,
        RetryReason::RefusedStream,
        RetryReason::GatewayError,
        RetryReason::ServerError,
        RetryReason::StatusCode,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryReason::ConnectFailure => "connect-failure",
            RetryReason::Reset => "reset",
            RetryReason::PerTryTimeout => "per-try-timeout",
            RetryReason::RefusedStream => "refused-stream",
            RetryReason::GatewayError => "gateway-error",
            RetryReason::ServerError => "5xx",
            RetryReason::StatusCode => "retriable-status-codes",
        }
    }

    /// Position in [`RetryReason::ALL`].
    pub fn index(self) -> usize {
        RetryReason::ALL
            .iter()
            .position(|r| *r == self)
            .unwrap_or(0)
    }
}

/// What the request's body allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyReplay {
    /// No body: always replayable.
    Empty,
    /// A body kept whole (within `maxBodyBytes`): replayable.
    Buffered,
    /// A body streamed upstream as it came (too large, or of unknown
    /// length beyond the cap): never retried once its first byte left.
    Streamed,
}

/// The verdict on one finished attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Send another attempt.
    Retry(RetryReason),
    /// The attempt is the answer: its outcome is not one the policy retries.
    NotRetriable,
    /// Retriable, but the request has used all its attempts.
    Exhausted,
    /// Retriable, but the method is not in `methods`.
    Method,
    /// Retriable, but the body cannot be sent again.
    Body,
    /// Retriable, but the route's retry budget is spent.
    Budget,
}

/// The condition of `policy` that `outcome` meets, if any. A refused
/// HTTP/2 stream is always retriable (the backend never saw it).
pub fn retry_reason(policy: &RetryPolicy, outcome: AttemptOutcome) -> Option<RetryReason> {
    let on = &policy.on;
    match outcome {
        AttemptOutcome::Refused => Some(RetryReason::RefusedStream),
        AttemptOutcome::ConnectFailure => {
            (on.connect_failure || on.server_error).then_some(RetryReason::ConnectFailure)
        }
        AttemptOutcome::Reset => (on.reset || on.server_error).then_some(RetryReason::Reset),
        AttemptOutcome::PerTryTimeout => {
            (on.reset || on.server_error || on.gateway_error).then_some(RetryReason::PerTryTimeout)
        }
        AttemptOutcome::Answered(s) => {
            if on.status_codes && policy.status_codes.contains(&s) {
                Some(RetryReason::StatusCode)
            } else if on.gateway_error && matches!(s, 502..=504) {
                Some(RetryReason::GatewayError)
            } else if on.server_error && (500..600).contains(&s) {
                Some(RetryReason::ServerError)
            } else {
                None
            }
        }
    }
}

/// Whether to retry after attempt number `done` (1 for the first) ended
/// with `outcome`. Spends from `budget` (at `now_ms`) only when everything
/// else allows the retry. A refused HTTP/2 stream ignores `methods`: the
/// request was never processed, so even a POST is safe to send again.
pub fn decide(
    policy: &RetryPolicy,
    done: u32,
    outcome: AttemptOutcome,
    method: &Method,
    body: BodyReplay,
    budget: &mut RetryBudget,
    now_ms: u64,
) -> RetryDecision {
    let Some(reason) = retry_reason(policy, outcome) else {
        return RetryDecision::NotRetriable;
    };
    if done > policy.attempts {
        return RetryDecision::Exhausted;
    }
    if reason != RetryReason::RefusedStream && !policy.methods.contains(method) {
        return RetryDecision::Method;
    }
    if body == BodyReplay::Streamed {
        return RetryDecision::Body;
    }
    if !budget.try_withdraw(now_ms, &policy.budget) {
        return RetryDecision::Budget;
    }
    RetryDecision::Retry(reason)
}

/// The wait before retry number `n` (1 for the first retry): Envoy's full
/// jitter, uniform in `[0, min(base × 2^(n-1), max)]`, from the random
/// word `r`.
pub fn backoff(policy: &RetryPolicy, n: u32, r: u64) -> Duration {
    let shift = n.saturating_sub(1).min(20);
    let ceiling = policy
        .backoff_base
        .saturating_mul(1u32 << shift)
        .min(policy.backoff_max);
    let micros = ceiling.as_micros() as u64;
    if micros == 0 {
        return Duration::ZERO;
    }
    Duration::from_micros(r % (micros + 1))
}
