//! Behaviour of the sequential judge on hand-built windows; the reference values
//! computed independently are in `reference.rs`.

use super::*;
use crate::stats::Histogram;

/// A window of `n` attempts, `failed` of them failures, latencies spread evenly over
/// `[lo_ms, hi_ms]`.
fn window(n: u64, failed: u64, lo_ms: u64, hi_ms: u64) -> WindowSnapshot {
    let mut h = Histogram::new();
    for i in 0..n {
        let ms = lo_ms + (hi_ms - lo_ms) * i / n.max(1);
        h.record(ms * 1000);
    }
    WindowSnapshot {
        requests: n,
        failures: failed,
        window_secs: 60,
        histogram: h,
        ..WindowSnapshot::default()
    }
}

#[test]
fn identical_sides_pass_once_there_is_enough_traffic() {
    let p = SequentialParams::DEFAULT;
    let a = window(20_000, 100, 40, 60);
    let j = compare(&a, &a, &p);
    assert_eq!(j.outcome, Outcome::Pass, "{}", j.describe());
    assert_eq!(j.evidence, 1.0);
    assert_eq!(j.needed, None);
}

#[test]
fn a_large_error_regression_fails() {
    let p = SequentialParams::DEFAULT;
    let canary = window(2_000, 400, 40, 60);
    let primary = window(18_000, 90, 40, 60);
    let j = compare(&canary, &primary, &p);
    assert_eq!(j.outcome, Outcome::Fail, "{}", j.describe());
    assert_eq!(j.quantities[0].outcome, Outcome::Fail);
    assert!(j.quantities[0].lower.is_some_and(|l| l > 0.0));
}

#[test]
fn a_slower_canary_fails_on_latency_alone() {
    let p = SequentialParams::DEFAULT;
    let canary = window(2_000, 0, 60, 90);
    let primary = window(18_000, 0, 40, 60);
    let j = compare(&canary, &primary, &p);
    assert_eq!(j.quantities[0].outcome, Outcome::Pass, "{}", j.describe());
    assert_eq!(j.quantities[1].outcome, Outcome::Fail, "{}", j.describe());
    assert_eq!(j.outcome, Outcome::Fail);
}

#[test]
fn too_little_traffic_is_inconclusive_with_the_requests_missing() {
    let p = SequentialParams::DEFAULT;
    let j = compare(&window(4, 0, 40, 60), &window(400, 0, 40, 60), &p);
    assert_eq!(j.outcome, Outcome::Inconclusive);
    assert_eq!(j.needed, Some(6));
    assert!((j.evidence - 0.4).abs() < 1e-9);
    assert_eq!(j.quantities[0].estimate, None);
}

#[test]
fn a_small_sample_is_inconclusive_and_says_how_much_more_it_needs() {
    let p = SequentialParams::DEFAULT;
    let j = compare(&window(50, 0, 40, 60), &window(450, 1, 40, 60), &p);
    assert_eq!(j.outcome, Outcome::Inconclusive, "{}", j.describe());
    let needed = j.needed.expect("requests still needed");
    assert!(needed > 0);
    assert!(j.evidence > 0.0 && j.evidence < 1.0);
    // With the traffic it asked for, at the same rates, it decides.
    let k = needed + 50;
    let j2 = compare(
        &window(k, 0, 40, 60),
        &window(9 * k, 9 * k / 450, 40, 60),
        &p,
    );
    assert_ne!(j2.outcome, Outcome::Inconclusive, "{}", j2.describe());
}

#[test]
fn errors_against_a_threshold() {
    let p = SequentialParams::DEFAULT;
    let none = WindowSnapshot::default();
    // 0.2 % failures against a 99 % success rate: well below, passes.
    let good = errors(
        &window(5_000, 10, 40, 60),
        Baseline::Threshold(99.0),
        &none,
        &p,
    );
    assert_eq!(good.outcome, Outcome::Pass, "{}", good.describe());
    // 5 % failures: fails.
    let bad = errors(
        &window(2_000, 100, 40, 60),
        Baseline::Threshold(99.0),
        &none,
        &p,
    );
    assert_eq!(bad.outcome, Outcome::Fail, "{}", bad.describe());
}

#[test]
fn latency_against_a_p99_threshold() {
    let p = SequentialParams::DEFAULT;
    let none = WindowSnapshot::default();
    let fast = latency(
        &window(5_000, 0, 10, 50),
        Baseline::Threshold(100.0),
        &none,
        &p,
    );
    assert_eq!(fast.outcome, Outcome::Pass, "{}", fast.describe());
    // A tenth of the requests above 200 ms against a 100 ms P99.
    let slow = latency(
        &window(5_000, 0, 10, 300),
        Baseline::Threshold(100.0),
        &none,
        &p,
    );
    assert_eq!(slow.outcome, Outcome::Fail, "{}", slow.describe());
}

#[test]
fn the_width_shrinks_with_the_variance_and_grows_with_confidence() {
    let w = |v: f64, a: f64| half_width(v, 1e-4, a);
    assert!(w(1e-6, 0.05) < w(1e-5, 0.05));
    assert!(w(1e-6, 0.01) > w(1e-6, 0.05));
    assert!(half_width(0.0, 1e-4, 0.05).is_infinite());
    assert!(half_width(1e-6, 1e-4, 1.5).is_infinite());
}

#[test]
fn the_judgement_round_trips_through_json() {
    let p = SequentialParams::DEFAULT;
    for (c, pr) in [
        (window(4, 0, 40, 60), window(400, 0, 40, 60)),
        (window(2_000, 400, 40, 60), window(18_000, 90, 40, 60)),
    ] {
        let j = compare(&c, &pr, &p);
        let text = serde_json::to_string(&j).expect("serialises");
        let back: Judgement = serde_json::from_str(&text).expect("parses");
        assert_eq!(back, j);
    }
}

#[test]
fn a_short_primary_holds_the_evidence_down_too() {
    let p = SequentialParams::DEFAULT;
    let j = compare(&window(400, 0, 40, 60), &window(4, 0, 40, 60), &p);
    assert_eq!(j.outcome, Outcome::Inconclusive);
    assert_eq!(j.needed, Some(6));
    assert!((j.evidence - 0.4).abs() < 1e-9, "{}", j.evidence);
}

#[test]
fn no_latency_sample_decides_nothing_even_with_min_requests_zero() {
    let p = SequentialParams {
        min_requests: 0,
        ..SequentialParams::DEFAULT
    };
    assert!(half_width(f64::INFINITY, 1e-4, 0.05).is_infinite());
    let q = latency(
        &WindowSnapshot::default(),
        Baseline::Primary,
        &window(900, 0, 40, 60),
        &p,
    );
    assert_eq!(q.outcome, Outcome::Inconclusive, "{}", q.describe());
    assert_eq!((q.estimate, q.lower, q.upper), (None, None, None));
    assert_eq!((q.evidence, q.needed), (0.0, None));
}
