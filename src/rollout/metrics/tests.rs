//! The built-in checks on hand-built stats, and Prometheus answers.

use super::*;
use crate::stats::RouteStats;

fn metric(name: &str, min: Option<f64>, max: Option<f64>) -> MetricSpec {
    MetricSpec {
        name: name.into(),
        min,
        max,
        interval_ms: 5_000,
        dry_run: false,
        ..Default::default()
    }
}

fn stats(ok: u64, failed: u64, latency_us: u64) -> RoleStats {
    let s = RouteStats::new(60);
    for i in 0..ok + failed {
        s.record(Role::Canary, 100, i >= ok, latency_us);
    }
    s.record(Role::Mirror, 100, false, 1_000);
    RoleStats {
        primary: s.snapshot(Role::Primary, 100, 5),
        canary: s.snapshot(Role::Canary, 100, 5),
        mirror: s.snapshot(Role::Mirror, 100, 5),
    }
}

const SR: MetricSource = MetricSource {
    kind: MetricKind::SuccessRate,
    min_requests: 10,
    template: None,
    variables: BTreeMap::new(),
    token: None,
    headers: Vec::new(),
};

#[test]
fn success_rate_and_duration_are_judged_on_the_canary_role() {
    let m = metric("request-success-rate", Some(99.0), None);
    let good = builtin_result(&m, &SR, &stats(100, 0, 2_000), Role::Canary);
    assert!(good.passed, "{good:?}");
    assert_eq!(good.value, Some(100.0));
    let bad = builtin_result(&m, &SR, &stats(90, 10, 2_000), Role::Canary);
    assert!(!bad.passed);
    assert_eq!(bad.value, Some(90.0));
    assert!(bad.reason.contains("< 99"), "{}", bad.reason);
    let d = metric("request-duration", None, Some(100.0));
    let src = MetricSource {
        kind: MetricKind::Duration,
        ..SR
    };
    let slow = builtin_result(&d, &src, &stats(50, 0, 300_000), Role::Canary);
    assert!(!slow.passed);
    assert!(
        slow.value.is_some_and(|v| (v - 300.0).abs() < 300.0 * 0.05),
        "{slow:?}"
    );
    let fast = builtin_result(&d, &src, &stats(50, 0, 3_000), Role::Canary);
    assert!(fast.passed, "{fast:?}");
}

fn two_sides(canary_us: u64, primary_us: u64, n: u64) -> RoleStats {
    let s = RouteStats::new(60);
    for i in 0..n {
        // A spread of latencies on both sides, shifted by the difference of bases.
        s.record(Role::Canary, 100, false, canary_us + (i % 40) * 250);
        s.record(Role::Primary, 100, false, primary_us + (i % 40) * 250);
    }
    RoleStats {
        primary: s.snapshot(Role::Primary, 100, 5),
        canary: s.snapshot(Role::Canary, 100, 5),
        mirror: s.snapshot(Role::Mirror, 100, 5),
    }
}

#[test]
fn baseline_comparison_scores_the_canary_against_the_primary() {
    let m = MetricSpec {
        min: Some(95.0),
        ..metric("baseline-comparison", None, None)
    };
    let p = CompareParams::DEFAULT;
    let same = comparison_result(&m, &p, &two_sides(20_000, 20_000, 300), Role::Canary);
    assert!(same.passed, "{same:?}");
    assert_eq!(same.value, Some(100.0));
    assert!(same.reason.contains("latency Pass"), "{}", same.reason);
    let slow = comparison_result(&m, &p, &two_sides(60_000, 20_000, 300), Role::Canary);
    assert!(!slow.passed);
    assert_eq!(slow.value, Some(50.0));
    assert!(slow.reason.contains("latency High"), "{}", slow.reason);
    let j = slow.judgement.as_ref().unwrap();
    assert_eq!(j.quantities[0].canary_requests, 300);
    let few = comparison_result(&m, &p, &two_sides(20_000, 20_000, 50), Role::Canary);
    assert!(!few.passed && few.value.is_none());
    assert!(
        few.reason.starts_with("not enough traffic"),
        "{}",
        few.reason
    );
    // A dry-run metric keeps its verdict for the record; the machine ignores it.
    let dry = MetricSpec {
        dry_run: true,
        ..m.clone()
    };
    let r = comparison_result(&dry, &p, &two_sides(60_000, 20_000, 300), Role::Canary);
    assert!(r.dry_run && !r.passed);
    let text = serde_json::to_string(&r).unwrap();
    assert!(
        text.contains("\"dryRun\":true") && text.contains("\"judgement\""),
        "{text}"
    );
    let back: MetricResult = serde_json::from_str(&text).unwrap();
    assert_eq!(back.judgement.map(|j| j.quantities.len()), Some(2));
    assert!(!serde_json::to_string(&same).unwrap().contains("dryRun"));
}

#[test]
fn too_little_traffic_is_a_failed_check_unless_min_requests_is_zero() {
    let m = metric("request-success-rate", Some(99.0), None);
    let few = builtin_result(&m, &SR, &stats(9, 0, 1_000), Role::Canary);
    assert!(!few.passed);
    assert!(
        few.reason.starts_with("not enough traffic"),
        "{}",
        few.reason
    );
    let none = builtin_result(&m, &SR, &RoleStats::empty(5), Role::Canary);
    assert!(!none.passed, "no traffic is not a pass");
    let zero = MetricSource {
        min_requests: 0,
        ..SR
    };
    assert!(builtin_result(&m, &zero, &RoleStats::empty(5), Role::Canary).passed);
    // With traffic, minRequests 0 still judges the value.
    assert!(!builtin_result(&m, &zero, &stats(1, 1, 1_000), Role::Canary).passed);
}

#[test]
fn mirroring_runs_are_judged_on_the_shadow_copies() {
    let st = CanaryState {
        mirror: true,
        ..CanaryState::default()
    };
    assert_eq!(judged_role(&st), Role::Mirror);
    assert_eq!(judged_role(&CanaryState::default()), Role::Canary);
}

#[test]
fn interval_durations_and_prometheus_answers() {
    assert_eq!(promql_duration(60_000), "1m");
    assert_eq!(promql_duration(90_000), "90s");
    assert_eq!(promql_duration(500), "500ms");
    let vector = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000.1,"99.5"]}]}}"#;
    assert_eq!(parse_prometheus(vector), Ok(99.5));
    let scalar =
        br#"{"status":"success","data":{"resultType":"scalar","result":[1700000000.1,"3"]}}"#;
    assert_eq!(parse_prometheus(scalar), Ok(3.0));
    let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
    assert!(parse_prometheus(empty).is_err());
    let nan = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"NaN"]}]}}"#;
    assert!(parse_prometheus(nan).unwrap_err().contains("NaN"));
    let err = br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
    assert!(parse_prometheus(err).unwrap_err().contains("parse error"));
}

#[test]
fn a_check_window_never_reaches_before_the_run_or_beyond_the_interval() {
    use crate::stats::seconds_within;
    // Run started at 100.7 s on the plane's clock, now 112.2 s: seconds 101..=112.
    assert_eq!(seconds_within(112_200, 11_500, 60), 12);
    // An old run: the interval.
    assert_eq!(seconds_within(900_000, 800_000, 60), 60);
    // Started 0.5 s ago at 110.7, now 111.2: second 111 began after the start.
    assert_eq!(seconds_within(111_200, 500, 60), 1);
    // Started 0.1 s ago at 111.1: second 111 holds requests from before: nothing.
    assert_eq!(seconds_within(111_200, 100, 60), 0);
    assert_eq!(seconds_within(111_200, 0, 60), 0);
    // A start exactly on a second's boundary counts that second.
    assert_eq!(seconds_within(111_200, 1_200, 60), 2);
    // Shown from the first second's start, never before the run.
    assert_eq!(window_since(112_200, 12, Some(100_700)), 101_000);
    assert_eq!(window_since(112_200, 60, Some(100_700)), 100_700);
    assert_eq!(window_since(112_200, 5, None), 108_000);
}

#[test]
fn every_built_in_result_names_its_window() {
    let m = metric("request-success-rate", Some(99.0), None);
    let r = with_window(
        builtin_result(&m, &SR, &stats(100, 0, 2_000), Role::Canary),
        CheckWindow {
            since_ms: 43_205_000,
            secs: 5,
            role: "canary".to_string(),
            requests: 100,
            primary_requests: 900,
        },
    );
    assert!(
        r.reason.ends_with("100 canary requests since 12:00:05"),
        "{}",
        r.reason
    );
    assert_eq!(r.window.as_ref().map(|w| w.secs), Some(5));
    let text = serde_json::to_string(&r).unwrap();
    assert!(text.contains("\"window\":{\"sinceMs\":43205000"), "{text}");
    let back: MetricResult = serde_json::from_str(&text).unwrap();
    assert_eq!(back, r);
}

fn judge(baseline: crate::stats::sequential::Baseline) -> crate::config::JudgeSpec {
    crate::config::JudgeSpec {
        params: crate::stats::sequential::SequentialParams::DEFAULT,
        baseline,
        on_inconclusive: crate::config::OnInconclusive::Hold,
        max_holds: 5,
    }
}

#[test]
fn the_sequential_judge_says_pass_fail_or_not_yet() {
    use crate::stats::sequential::Baseline;
    let m = metric("baseline-comparison", None, None);
    let kind = MetricKind::BaselineComparison(CompareParams::DEFAULT);
    let j = judge(Baseline::Primary);
    // Too few requests: Inconclusive, never a failure.
    let few = sequential_result(&m, &j, &kind, &two_sides(20_000, 20_000, 4), Role::Canary);
    assert!(few.inconclusive && !few.passed, "{few:?}");
    assert_eq!(few.evidence, Some(0.4));
    let few = with_window(
        few,
        CheckWindow {
            since_ms: 0,
            secs: 2,
            role: "canary".to_string(),
            requests: 4,
            primary_requests: 4,
        },
    );
    assert!(
        few.reason
            .contains("6 more canary requests needed (about 3s at 2.0/s)"),
        "{}",
        few.reason
    );
    // Plenty of identical traffic: Pass.
    let same = sequential_result(
        &m,
        &j,
        &kind,
        &two_sides(20_000, 20_000, 4_000),
        Role::Canary,
    );
    assert!(same.passed && !same.inconclusive, "{}", same.reason);
    // A much slower canary: Fail.
    let slow = sequential_result(
        &m,
        &j,
        &kind,
        &two_sides(60_000, 20_000, 4_000),
        Role::Canary,
    );
    assert!(!slow.passed && !slow.inconclusive, "{}", slow.reason);
    assert!(slow.reason.starts_with("fail: "), "{}", slow.reason);
    // The success rate against its threshold.
    let sr = metric("request-success-rate", Some(99.0), None);
    let bad = sequential_result(
        &sr,
        &judge(Baseline::Threshold(99.0)),
        &MetricKind::SuccessRate,
        &stats(800, 200, 2_000),
        Role::Canary,
    );
    assert!(!bad.passed && !bad.inconclusive, "{}", bad.reason);
    assert_eq!(bad.value, Some(80.0));
}
