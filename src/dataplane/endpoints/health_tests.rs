use super::*;

fn cfg(healthy: u32, unhealthy: u32) -> HealthConfig {
    HealthConfig {
        healthy_threshold: healthy,
        unhealthy_threshold: unhealthy,
        ..HealthConfig::default()
    }
}

const OK: ProbeResult = ProbeResult { ok: true };
const FAIL: ProbeResult = ProbeResult { ok: false };

#[test]
fn defaults_are_kubernetes_readiness_defaults() {
    let d = HealthConfig::default();
    assert_eq!(d.path, "/healthz");
    assert_eq!((d.interval_ms, d.timeout_ms), (10_000, 1_000));
    assert_eq!((d.healthy_threshold, d.unhealthy_threshold), (1, 3));
    assert_eq!(
        d.expected_status,
        vec![ExpectedStatus::Range { from: 200, to: 399 }]
    );
    assert!(d.validate().is_empty());
}

#[test]
fn initial_readiness() {
    let table = [
        // (health checked, origin, ready)
        (false, Origin::Initial, true),
        (false, Origin::Added, true),
        (true, Origin::Initial, true),
        (true, Origin::Added, false),
    ];
    for (checked, origin, ready) in table {
        let s = HealthState::initial(checked, origin);
        assert_eq!(s.ready, ready, "{checked} {origin:?}");
        assert_eq!((s.consecutive_successes, s.consecutive_failures), (0, 0));
    }
}

/// (healthy threshold, unhealthy threshold, starts ready, probes, readiness after each)
type ThresholdCase = (u32, u32, bool, &'static [ProbeResult], &'static [bool]);

#[test]
fn thresholds() {
    let table: [ThresholdCase; 7] = [
        (2, 3, false, &[OK, OK], &[false, true]),
        (
            2,
            3,
            false,
            &[OK, FAIL, OK, OK],
            &[false, false, false, true],
        ),
        (1, 3, false, &[OK], &[true]),
        (2, 3, true, &[FAIL, FAIL, FAIL], &[true, true, false]),
        (
            2,
            3,
            true,
            &[FAIL, FAIL, OK, FAIL, FAIL, FAIL],
            &[true, true, true, true, true, false],
        ),
        (
            2,
            1,
            true,
            &[FAIL, OK, OK, FAIL],
            &[false, false, true, false],
        ),
        // A threshold of 0 is never trusted: it acts as 1.
        (0, 0, true, &[FAIL, OK], &[false, true]),
    ];
    for (healthy, unhealthy, start_ready, probes, expected) in table {
        let c = cfg(healthy, unhealthy);
        let mut s = HealthState {
            ready: start_ready,
            consecutive_successes: 0,
            consecutive_failures: 0,
        };
        let mut previous = start_ready;
        for (i, (&probe, &want)) in probes.iter().zip(expected).enumerate() {
            let flipped = s.observe(probe, &c);
            let ctx = format!("h{healthy} u{unhealthy} probe {i}");
            assert_eq!(s.ready, want, "{ctx}");
            assert_eq!(flipped, want != previous, "{ctx}: flip");
            previous = want;
        }
    }
}

#[test]
fn counters_reset_on_the_opposite_result() {
    let c = cfg(3, 3);
    let mut s = HealthState::initial(true, Origin::Added);
    s.observe(OK, &c);
    s.observe(OK, &c);
    assert_eq!((s.consecutive_successes, s.consecutive_failures), (2, 0));
    s.observe(FAIL, &c);
    assert_eq!((s.consecutive_successes, s.consecutive_failures), (0, 1));
    assert!(!s.ready);
}

#[test]
fn expected_status() {
    let default = HealthConfig::default();
    let custom = HealthConfig {
        expected_status: vec![
            ExpectedStatus::Code(200),
            ExpectedStatus::Range { from: 202, to: 204 },
        ],
        ..HealthConfig::default()
    };
    let empty = HealthConfig {
        expected_status: Vec::new(),
        ..HealthConfig::default()
    };
    // (status, default ok, custom ok)
    let table = [
        (199, false, false),
        (200, true, true),
        (201, true, false),
        (202, true, true),
        (204, true, true),
        (205, true, false),
        (301, true, false),
        (399, true, false),
        (400, false, false),
        (503, false, false),
    ];
    for (status, d, c) in table {
        assert_eq!(default.status_ok(status), d, "default {status}");
        assert_eq!(empty.status_ok(status), d, "empty list {status}");
        assert_eq!(custom.status_ok(status), c, "custom {status}");
        assert_eq!(custom.probe_result(Some(status)).ok, c);
    }
    assert!(
        !default.probe_result(None).ok,
        "connect error or timeout fails"
    );
}

#[test]
fn expected_status_serde() {
    let ok = [
        ("200", ExpectedStatus::Code(200), "200"),
        ("\"204\"", ExpectedStatus::Code(204), "204"),
        (
            "\"200-399\"",
            ExpectedStatus::Range { from: 200, to: 399 },
            "\"200-399\"",
        ),
        (
            "\" 200 - 299 \"",
            ExpectedStatus::Range { from: 200, to: 299 },
            "\"200-299\"",
        ),
    ];
    for (json, expected, back) in ok {
        let parsed: Result<ExpectedStatus, _> = serde_json::from_str(json);
        assert_eq!(parsed.ok(), Some(expected), "{json}");
        assert_eq!(serde_json::to_string(&expected).ok().as_deref(), Some(back));
    }
    for bad in ["-1", "70000", "\"abc\"", "\"200-\"", "\"2xx\"", "true"] {
        let parsed: Result<ExpectedStatus, _> = serde_json::from_str(bad);
        assert!(parsed.is_err(), "{bad}");
    }
}

#[test]
fn validate_collects_every_error_with_its_field() {
    let bad = HealthConfig {
        path: "healthz".into(),
        interval_ms: 0,
        timeout_ms: 0,
        healthy_threshold: 0,
        unhealthy_threshold: 0,
        expected_status: vec![
            ExpectedStatus::Code(99),
            ExpectedStatus::Code(200),
            ExpectedStatus::Range { from: 299, to: 200 },
            ExpectedStatus::Range { from: 200, to: 600 },
        ],
    };
    let errors = bad.validate();
    let prefixes = [
        "path:",
        "interval:",
        "timeout:",
        "healthyThreshold:",
        "unhealthyThreshold:",
        "expectedStatus[0]:",
        "expectedStatus[2]:",
        "expectedStatus[3]:",
    ];
    assert_eq!(errors.len(), prefixes.len(), "{errors:?}");
    for (e, p) in errors.iter().zip(prefixes) {
        assert!(e.starts_with(p), "{e} should start with {p}");
    }
}
