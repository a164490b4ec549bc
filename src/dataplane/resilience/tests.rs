//! The retry decision (condition × method × body × budget), the budget
//! window and the token bucket, on passed-in time.

use super::breaker::{Breaker, Overflow};
use super::bucket::{retry_after_secs, TokenBucket};
use super::budget::RetryBudget;
use super::retry::{
    backoff, decide, retry_reason, AttemptOutcome, BodyReplay, RetryDecision, RetryReason,
};
use crate::config::{BudgetSettings, CircuitBreakerLimits, RetryOn, RetryPolicy};
use http::Method;
use std::time::Duration;

fn policy(on: RetryOn) -> RetryPolicy {
    RetryPolicy {
        attempts: 2,
        on,
        status_codes: vec![409],
        per_try_timeout: None,
        backoff_base: Duration::from_millis(25),
        backoff_max: Duration::from_millis(250),
        methods: vec![Method::GET, Method::PUT],
        max_body_bytes: 1024,
        budget: BudgetSettings {
            percent: 20.0,
            min_retries_per_second: 10,
        },
    }
}

fn all_on() -> RetryOn {
    RetryOn {
        connect_failure: true,
        reset: true,
        gateway_error: true,
        server_error: false,
        status_codes: true,
    }
}

#[test]
fn conditions_select_the_outcomes_they_name() {
    use AttemptOutcome::*;
    let only = |f: fn(&mut RetryOn)| {
        let mut on = RetryOn::default();
        f(&mut on);
        policy(on)
    };
    let connect = only(|o| o.connect_failure = true);
    assert_eq!(
        retry_reason(&connect, ConnectFailure),
        Some(RetryReason::ConnectFailure)
    );
    assert_eq!(retry_reason(&connect, Reset), None);
    assert_eq!(retry_reason(&connect, Answered(503)), None);
    let gateway = only(|o| o.gateway_error = true);
    for s in [502, 503, 504] {
        assert_eq!(
            retry_reason(&gateway, Answered(s)),
            Some(RetryReason::GatewayError)
        );
    }
    assert_eq!(retry_reason(&gateway, Answered(500)), None);
    assert_eq!(
        retry_reason(&gateway, PerTryTimeout),
        Some(RetryReason::PerTryTimeout)
    );
    let five = only(|o| o.server_error = true);
    assert_eq!(
        retry_reason(&five, Answered(500)),
        Some(RetryReason::ServerError)
    );
    assert_eq!(retry_reason(&five, Answered(499)), None);
    assert_eq!(
        retry_reason(&five, ConnectFailure),
        Some(RetryReason::ConnectFailure)
    );
    assert_eq!(retry_reason(&five, Reset), Some(RetryReason::Reset));
    let codes = only(|o| o.status_codes = true);
    assert_eq!(
        retry_reason(&codes, Answered(409)),
        Some(RetryReason::StatusCode)
    );
    assert_eq!(retry_reason(&codes, Answered(503)), None);
    // Never processed: always retriable, whatever `on` says.
    assert_eq!(
        retry_reason(&only(|_| {}), Refused),
        Some(RetryReason::RefusedStream)
    );
    assert_eq!(retry_reason(&only(|_| {}), Answered(200)), None);
}

#[test]
fn the_decision_checks_condition_attempts_method_body_then_budget() {
    let p = policy(all_on());
    let mut budget = RetryBudget::new();
    let d = |done, outcome, method: &Method, body, budget: &mut RetryBudget| {
        decide(&p, done, outcome, method, body, budget, 1_000)
    };
    use AttemptOutcome::*;
    use BodyReplay::*;
    assert_eq!(
        d(1, Answered(200), &Method::GET, Empty, &mut budget),
        RetryDecision::NotRetriable
    );
    assert_eq!(
        d(1, ConnectFailure, &Method::GET, Empty, &mut budget),
        RetryDecision::Retry(RetryReason::ConnectFailure)
    );
    assert_eq!(
        d(2, Answered(503), &Method::PUT, Buffered, &mut budget),
        RetryDecision::Retry(RetryReason::GatewayError)
    );
    // attempts: 2 extra → the third attempt is the last.
    assert_eq!(
        d(3, Answered(503), &Method::GET, Empty, &mut budget),
        RetryDecision::Exhausted
    );
    assert_eq!(
        d(1, Answered(503), &Method::POST, Empty, &mut budget),
        RetryDecision::Method
    );
    assert_eq!(
        d(1, Reset, &Method::PUT, Streamed, &mut budget),
        RetryDecision::Body
    );
    // A refused stream ignores the method, not the body.
    assert_eq!(
        d(1, Refused, &Method::POST, Buffered, &mut budget),
        RetryDecision::Retry(RetryReason::RefusedStream)
    );
    assert_eq!(
        d(1, Refused, &Method::POST, Streamed, &mut budget),
        RetryDecision::Body
    );
    // Only the three retries granted above were withdrawn.
    assert_eq!(budget.totals(1_000), (0, 3));
}

#[test]
fn an_empty_budget_refuses_and_a_refused_retry_spends_nothing() {
    let mut p = policy(all_on());
    p.budget = BudgetSettings {
        percent: 0.0,
        min_retries_per_second: 0,
    };
    let mut budget = RetryBudget::new();
    for _ in 0..100 {
        budget.deposit(0);
    }
    assert_eq!(
        decide(
            &p,
            1,
            AttemptOutcome::Reset,
            &Method::GET,
            BodyReplay::Empty,
            &mut budget,
            0
        ),
        RetryDecision::Budget
    );
    assert_eq!(budget.totals(0), (100, 0));
}

#[test]
fn the_budget_allows_the_floor_plus_the_percent_of_requests_in_the_window() {
    let s = BudgetSettings {
        percent: 20.0,
        min_retries_per_second: 1,
    };
    let mut b = RetryBudget::new();
    // 100 requests in second 0: 10 (floor × 10 s) + 20 retries.
    for _ in 0..100 {
        b.deposit(0);
    }
    let granted = (0..100).filter(|_| b.try_withdraw(500, &s)).count();
    assert_eq!(granted, 30);
    // Still inside the window at 9.9 s: nothing more.
    assert!(!b.try_withdraw(9_900, &s));
    // At 10 s second 0 has left the window: only the floor again.
    assert_eq!(b.totals(10_000), (0, 0));
    let granted = (0..100).filter(|_| b.try_withdraw(10_000, &s)).count();
    assert_eq!(granted, 10);
}

#[test]
fn backoff_is_jittered_under_an_exponential_ceiling_capped_at_max() {
    let p = policy(all_on());
    assert_eq!(
        backoff(&p, 1, u64::MAX),
        Duration::from_micros(u64::MAX % 25_001)
    );
    for (n, ceiling_ms) in [(1, 25), (2, 50), (3, 100), (4, 200), (5, 250), (30, 250)] {
        for r in [0u64, 7, 1 << 40, u64::MAX] {
            assert!(
                backoff(&p, n, r) <= Duration::from_millis(ceiling_ms),
                "n={n} r={r}"
            );
        }
        // The largest draw reaches the ceiling.
        let top = ceiling_ms * 1000;
        assert_eq!(backoff(&p, n, top), Duration::from_millis(ceiling_ms));
    }
    assert_eq!(backoff(&p, 1, 0), Duration::ZERO);
}

#[test]
fn a_bucket_allows_its_burst_then_its_rate_and_says_when() {
    let mut b = TokenBucket::default();
    // 2 per second, burst 3.
    for _ in 0..3 {
        assert_eq!(b.take(0, 2.0, 3), Ok(()));
    }
    assert_eq!(b.take(0, 2.0, 3), Err(500));
    assert_eq!(b.take(250, 2.0, 3), Err(250));
    assert_eq!(b.take(500, 2.0, 3), Ok(()));
    // Long idle refills to the burst, never beyond.
    for _ in 0..3 {
        assert_eq!(b.take(60_000, 2.0, 3), Ok(()));
    }
    assert!(b.take(60_000, 2.0, 3).is_err());
    // A clock that steps back never adds tokens.
    assert!(b.take(59_000, 2.0, 3).is_err());
    assert_eq!(retry_after_secs(1), 1);
    assert_eq!(retry_after_secs(1_001), 2);
    assert_eq!(retry_after_secs(0), 1);
}

#[tokio::test(start_paused = true)]
async fn the_breaker_queues_up_to_its_limit_and_refuses_beyond() {
    let b = Breaker::new(CircuitBreakerLimits {
        max_connections: 1,
        max_pending_requests: 1,
        max_requests: 3,
    });
    let first = b.admit().await.unwrap();
    // The second waits for the slot; the third finds the queue full.
    let b2 = b.clone();
    let waiting = tokio::spawn(async move { b2.admit().await.map(|_| ()) });
    tokio::task::yield_now().await;
    assert_eq!(b.admit().await.unwrap_err(), Overflow::MaxPendingRequests);
    drop(first);
    waiting.await.unwrap().unwrap();
    assert_eq!(b.requests(), 0);
    assert_eq!(
        b.overflow_pending
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // maxRequests counts queued and active together.
    let tight = Breaker::new(CircuitBreakerLimits {
        max_connections: 5,
        max_pending_requests: 5,
        max_requests: 1,
    });
    let _held = tight.admit().await.unwrap();
    assert_eq!(tight.admit().await.unwrap_err(), Overflow::MaxRequests);
}
