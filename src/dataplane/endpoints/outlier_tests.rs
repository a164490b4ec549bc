use super::*;

fn names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("ep{i}:80")).collect()
}

fn detector(n: usize) -> OutlierDetector {
    OutlierDetector::new(OutlierConfig::default(), &names(n))
}

/// Reports `count` failures of `ep` at `now` and returns the last outcome.
fn fail(d: &mut OutlierDetector, ep: &str, count: u32, now: u64) -> Outcome {
    let mut last = Outcome::Recorded;
    for _ in 0..count {
        last = d.on_result(ep, true, now);
    }
    last
}

#[test]
fn defaults() {
    let c = OutlierConfig::default();
    assert_eq!(c.consecutive_failures, 5);
    assert_eq!((c.base_ejection_ms, c.max_ejection_ms), (30_000, 300_000));
    assert_eq!((c.max_ejection_percent, c.interval_ms), (50, 10_000));
    assert!(c.validate().is_empty());
}

#[test]
fn five_consecutive_failures_eject_and_time_readmits() {
    let mut d = detector(4);
    let outcomes: Vec<Outcome> = (0..5).map(|_| d.on_result("ep1:80", true, 1_000)).collect();
    assert_eq!(outcomes[..4], [Outcome::Recorded; 4]);
    assert_eq!(outcomes[4], Outcome::Ejected { until_ms: 31_000 });
    // (now, ejected)
    for (now, ejected) in [
        (1_000, true),
        (30_999, true),
        (31_000, false),
        (90_000, false),
    ] {
        assert_eq!(d.is_ejected("ep1:80", now), ejected, "at {now}");
    }
    assert!(!d.is_ejected("ep2:80", 1_000));
    assert_eq!(d.ejected_count(2_000), 1);
}

#[test]
fn a_success_resets_the_count() {
    let mut d = detector(4);
    assert_eq!(fail(&mut d, "ep1:80", 4, 0), Outcome::Recorded);
    assert_eq!(d.on_result("ep1:80", false, 0), Outcome::Recorded);
    assert_eq!(fail(&mut d, "ep1:80", 4, 0), Outcome::Recorded);
    assert!(!d.is_ejected("ep1:80", 0));
    assert_eq!(
        fail(&mut d, "ep1:80", 1, 0),
        Outcome::Ejected { until_ms: 30_000 }
    );
}

#[test]
fn ejection_grows_with_each_ejection_and_is_capped() {
    let config = OutlierConfig {
        max_ejection_ms: 100_000,
        ..OutlierConfig::default()
    };
    let mut d = OutlierDetector::new(config, &names(4));
    // Fail again right at re-admission each time: no healthy interval, no decay.
    let expected = [30_000, 60_000, 90_000, 100_000, 100_000, 100_000];
    let mut now = 0;
    for (i, &duration) in expected.iter().enumerate() {
        let outcome = fail(&mut d, "ep1:80", 5, now);
        assert_eq!(
            outcome,
            Outcome::Ejected {
                until_ms: now + duration
            },
            "ejection {i}"
        );
        now += duration;
    }
    // The multiplier stops growing at the cap (4 × 30 s > 100 s).
    assert_eq!(d.endpoint("ep1:80").map(|s| s.times_ejected), Some(4));
}

#[test]
fn multiplier_decays_after_healthy_intervals() {
    // Three ejections in a row (30 s, 60 s, 90 s), then the endpoint is re-admitted at
    // `readmit` and healthy for `healthy_ms` before failing again.
    // (healthy_ms, next ejection length)
    let table = [
        (0, 120_000),
        (9_999, 120_000),
        (10_000, 90_000),
        (25_000, 60_000),
        (30_000, 30_000),
        (1_000_000, 30_000),
    ];
    for (healthy_ms, next) in table {
        let mut d = detector(4);
        let mut now = 0;
        for duration in [30_000, 60_000, 90_000] {
            assert_eq!(
                fail(&mut d, "ep1:80", 5, now),
                Outcome::Ejected {
                    until_ms: now + duration
                }
            );
            now += duration;
        }
        let t = now + healthy_ms;
        assert_eq!(
            fail(&mut d, "ep1:80", 5, t),
            Outcome::Ejected { until_ms: t + next },
            "healthy for {healthy_ms} ms"
        );
    }
}

#[test]
fn decay_also_counts_while_serving_traffic() {
    let mut d = detector(4);
    assert_eq!(
        fail(&mut d, "ep1:80", 5, 0),
        Outcome::Ejected { until_ms: 30_000 }
    );
    // Successes every 4 s after re-admission: the decay is applied lazily along the way.
    let mut t = 30_000;
    while t < 45_000 {
        assert_eq!(d.on_result("ep1:80", false, t), Outcome::Recorded);
        t += 4_000;
    }
    assert_eq!(d.endpoint("ep1:80").map(|s| s.times_ejected), Some(0));
    assert_eq!(
        fail(&mut d, "ep1:80", 5, t),
        Outcome::Ejected {
            until_ms: t + 30_000
        }
    );
}

#[test]
fn max_ejection_percent_and_last_endpoint() {
    // (endpoints, max %, how many can be ejected at once)
    let table = [
        (1, 50, 0),
        (1, 100, 0),
        (2, 50, 1),
        (2, 100, 1),
        (3, 50, 1),
        (4, 50, 2),
        (4, 100, 3),
        (5, 0, 0),
        (10, 10, 1),
        (10, 50, 5),
        (9, 10, 0),
    ];
    for (n, pct, max) in table {
        // Bound computed independently: floor(pct × n / 100), and one endpoint stays.
        assert_eq!(max, (pct * n / 100).min(n - 1), "table row {n}/{pct}");
        let config = OutlierConfig {
            max_ejection_percent: pct as u32,
            ..OutlierConfig::default()
        };
        let eps = names(n);
        let mut d = OutlierDetector::new(config, &eps);
        for (i, ep) in eps.iter().enumerate() {
            let outcome = fail(&mut d, ep, 5, 0);
            if i < max {
                assert!(matches!(outcome, Outcome::Ejected { .. }), "{n}/{pct}: {i}");
            } else {
                assert_eq!(outcome, Outcome::EjectionSkipped, "{n}/{pct}: {i}");
            }
        }
        assert_eq!(d.ejected_count(0), max, "{n}/{pct}");
        assert!(d.ejected_count(0) < n, "at least one endpoint is left");
    }
}

#[test]
fn a_skipped_ejection_is_retried_once_capacity_frees_up() {
    let mut d = detector(2);
    assert_eq!(
        fail(&mut d, "ep1:80", 5, 0),
        Outcome::Ejected { until_ms: 30_000 }
    );
    assert_eq!(fail(&mut d, "ep2:80", 5, 1_000), Outcome::EjectionSkipped);
    // The counter was reset: 4 more failures are not enough, the 5th is.
    assert_eq!(fail(&mut d, "ep2:80", 4, 31_000), Outcome::Recorded);
    assert_eq!(
        fail(&mut d, "ep2:80", 1, 31_000),
        Outcome::Ejected { until_ms: 61_000 }
    );
}

#[test]
fn results_while_ejected_and_unknown_endpoints_are_ignored() {
    let mut d = detector(2);
    fail(&mut d, "ep1:80", 5, 0);
    assert_eq!(d.on_result("ep1:80", true, 10), Outcome::Ignored);
    assert_eq!(d.on_result("ep1:80", false, 10), Outcome::Ignored);
    assert_eq!(
        d.endpoint("ep1:80").map(|s| s.consecutive_failures),
        Some(0)
    );
    assert_eq!(d.on_result("nope:1", true, 10), Outcome::Ignored);
    assert!(!d.is_ejected("nope:1", 10));
}

#[test]
fn zero_threshold_disables_detection() {
    let config = OutlierConfig {
        consecutive_failures: 0,
        ..OutlierConfig::default()
    };
    let mut d = OutlierDetector::new(config, &names(4));
    assert_eq!(fail(&mut d, "ep1:80", 1_000, 0), Outcome::Recorded);
    assert_eq!(d.ejected_count(0), 0);
}

#[test]
fn set_endpoints_keeps_state_of_those_that_stay() {
    let mut d = detector(3);
    fail(&mut d, "ep1:80", 5, 0);
    fail(&mut d, "ep2:80", 3, 0);
    d.set_endpoints(&[
        "ep1:80".to_string(),
        "ep2:80".to_string(),
        "ep9:80".to_string(),
    ]);
    assert!(d.is_ejected("ep1:80", 1));
    assert_eq!(
        d.endpoint("ep2:80").map(|s| s.consecutive_failures),
        Some(3)
    );
    assert_eq!(
        d.endpoint("ep9:80").copied(),
        Some(EndpointOutlier::default())
    );
    assert!(d.endpoint("ep3:80").is_none());
}

#[test]
fn validate_names_fields() {
    let bad = OutlierConfig {
        consecutive_failures: 5,
        base_ejection_ms: 0,
        max_ejection_ms: 0,
        max_ejection_percent: 101,
        interval_ms: 0,
    };
    let errors = bad.validate();
    let prefixes = ["maxEjectionPercent:", "baseEjectionTime:", "interval:"];
    assert_eq!(errors.len(), prefixes.len(), "{errors:?}");
    for (e, p) in errors.iter().zip(prefixes) {
        assert!(e.starts_with(p), "{e}");
    }
}

#[test]
fn extreme_times_do_not_overflow() {
    let config = OutlierConfig {
        base_ejection_ms: u64::MAX,
        max_ejection_ms: u64::MAX,
        ..OutlierConfig::default()
    };
    let mut d = OutlierDetector::new(config, &names(2));
    assert_eq!(
        fail(&mut d, "ep1:80", 5, u64::MAX - 1),
        Outcome::Ejected { until_ms: u64::MAX }
    );
    assert!(d.is_ejected("ep1:80", u64::MAX - 1));
}

#[test]
fn threshold_entry_point_decides_like_on_result() {
    // The proxy counts failures itself and calls `on_threshold_reached`; the ejections,
    // their growth and the capacity rule must be those of `on_result` at its threshold.
    let mut counted = detector(3);
    let mut external = detector(3);
    // (endpoint, now)
    let sequence = [
        ("ep1:80", 0),
        ("ep2:80", 100),
        ("ep1:80", 40_000),
        ("ep1:80", 200_000),
        ("nope:1", 200_000),
    ];
    for (ep, now) in sequence {
        let expected = fail(&mut counted, ep, 5, now);
        assert_eq!(
            external.on_threshold_reached(ep, now),
            expected,
            "{ep} at {now}"
        );
    }
    assert_eq!(counted, external);
    // Already ejected: ignored, like a result that arrives while ejected.
    assert!(external.is_ejected("ep1:80", 200_001));
    assert_eq!(
        external.on_threshold_reached("ep1:80", 200_001),
        Outcome::Ignored
    );
}
