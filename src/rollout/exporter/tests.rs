use super::*;
use crate::rollout::convert::canary_def;
use crate::rollout::machine::MetricResult;

fn def() -> CanaryDef {
    let yaml = "listeners:\n  - name: http\n    address: 127.0.0.1:0\nbackends:\n  app-blue:\n    endpoints: [\"127.0.0.1:9001\"]\n  app-green:\n    endpoints: [\"127.0.0.1:9002\"]\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\ncanaries:\n  - name: app\n    route: app\n    analysis:\n      interval: 1m\n      threshold: 3\n      maxWeight: 50\n      stepWeight: 10\n";
    let cfg = crate::config::parse_yaml(yaml, "t.yaml", std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("{e}"));
    canary_def(&cfg.canaries[0])
}

fn state(phase: Phase, weight: u8) -> CanaryState {
    CanaryState {
        phase,
        canary_weight: weight,
        started_at_ms: Some(1_000),
        last_transition_ms: 1_000,
        ..CanaryState::default()
    }
}

fn text(m: &RolloutMetrics) -> String {
    let mut out = String::new();
    m.render(&mut out);
    out
}

/// The value of the sample line `series` (name and labels exactly), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("bad value in {series}: {v}"))
        })
}

#[test]
fn status_follows_flaggers_recorder() {
    let want = [
        (Phase::Initializing, 1),
        (Phase::Initialized, 1),
        (Phase::Waiting, 1),
        (Phase::Progressing, 0),
        (Phase::WaitingPromotion, 1),
        (Phase::Promoting, 1),
        (Phase::Finalising, 1),
        (Phase::Succeeded, 1),
        (Phase::Failed, 2),
    ];
    assert_eq!(want.len(), PHASES.len());
    for (p, v) in want {
        assert_eq!(status_value(p), v, "{p:?}");
    }
}

#[test]
fn facts_are_read_from_the_state() {
    let mut st = state(Phase::Progressing, 30);
    st.failed_checks = 2;
    st.last_checks.metrics = vec![
        MetricResult {
            name: "request-success-rate".into(),
            value: Some(99.5),
            passed: true,
            reason: String::new(),
            dry_run: false,
            judgement: None,
            ..Default::default()
        },
        MetricResult {
            name: "no-data".into(),
            value: None,
            passed: false,
            reason: "no values found".into(),
            dry_run: false,
            judgement: None,
            ..Default::default()
        },
    ];
    let f = CanaryFacts::of(&def(), &st);
    assert_eq!((f.canary_weight, f.primary_weight()), (30, 70));
    assert_eq!((f.failed_checks, f.threshold), (2, 3));
    assert_eq!(
        f.metric_values,
        vec![("request-success-rate".to_string(), 99.5)],
        "a check without a value has no series"
    );
    assert_eq!(f.strategy, Strategy::Canary);
}

#[test]
fn a_run_is_counted_once_when_it_ends() {
    let d = def();
    let m = RolloutMetrics::new(false);
    m.update(&d, &state(Phase::Initialized, 0), true);
    let t = text(&m);
    assert_eq!(
        sample(
            &t,
            r#"weir_canary_runs_total{canary="app",result="succeeded"}"#
        ),
        Some(0.0),
        "{t}"
    );
    assert_eq!(sample(&t, r#"weir_canary_status{canary="app"}"#), Some(1.0));
    for w in [10, 20, 30] {
        m.update(&d, &state(Phase::Progressing, w), true);
    }
    let t = text(&m);
    assert_eq!(
        sample(&t, r#"weir_canary_status{canary="app"}"#),
        Some(0.0),
        "{t}"
    );
    assert_eq!(
        sample(&t, r#"weir_canary_weight{canary="app",role="canary"}"#),
        Some(30.0)
    );
    assert_eq!(
        sample(&t, r#"weir_canary_weight{canary="app",role="primary"}"#),
        Some(70.0)
    );
    assert_eq!(
        sample(&t, r#"weir_canary_phase{canary="app",phase="Progressing"}"#),
        Some(1.0)
    );
    assert_eq!(
        sample(&t, r#"weir_canary_phase{canary="app",phase="Initialized"}"#),
        Some(0.0)
    );
    m.update(&d, &state(Phase::Promoting, 100), true);
    let mut done = state(Phase::Succeeded, 0);
    done.last_transition_ms = 1_000 + 95_000;
    m.update(&d, &done, true);
    // The same state shown again (a driver event, a follower refresh) is not a new run.
    m.update(&d, &done, true);
    let t = text(&m);
    let runs = |r: &str| {
        sample(
            &t,
            &format!(r#"weir_canary_runs_total{{canary="app",result="{r}"}}"#),
        )
    };
    assert_eq!(
        (runs("succeeded"), runs("failed")),
        (Some(1.0), Some(0.0)),
        "{t}"
    );
    assert_eq!(
        sample(&t, r#"weir_canary_duration_seconds_count{canary="app"}"#),
        Some(1.0)
    );
    assert_eq!(
        sample(&t, r#"weir_canary_duration_seconds_sum{canary="app"}"#),
        Some(95.0)
    );
    assert_eq!(
        sample(
            &t,
            r#"weir_canary_duration_seconds_bucket{canary="app",le="60"}"#
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &t,
            r#"weir_canary_duration_seconds_bucket{canary="app",le="120"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &t,
            r#"weir_canary_duration_seconds_bucket{canary="app",le="+Inf"}"#
        ),
        Some(1.0)
    );
    assert_eq!(sample(&t, r#"weir_canary_status{canary="app"}"#), Some(1.0));
    assert_eq!(
        sample(&t, r#"weir_canary_weight{canary="app",role="canary"}"#),
        Some(0.0)
    );

    // A rollback.
    m.update(&d, &state(Phase::Progressing, 10), true);
    m.update(&d, &state(Phase::Failed, 0), true);
    let t = text(&m);
    assert_eq!(
        sample(
            &t,
            r#"weir_canary_runs_total{canary="app",result="failed"}"#
        ),
        Some(1.0)
    );
    assert_eq!(sample(&t, r#"weir_canary_status{canary="app"}"#), Some(2.0));
}

#[test]
fn a_restored_end_is_not_a_run() {
    let d = def();
    let m = RolloutMetrics::new(false);
    m.update(&d, &state(Phase::Succeeded, 0), true);
    assert_eq!(finished_run(None, &state(Phase::Succeeded, 0)), None);
    assert_eq!(
        finished_run(Some(Phase::Initialized), &state(Phase::Succeeded, 0)),
        None
    );
    assert_eq!(
        finished_run(Some(Phase::Initializing), &state(Phase::Failed, 0)),
        None
    );
    assert_eq!(m.snapshot().runs["app"].succeeded, 0);
}

#[test]
fn a_replica_that_does_not_drive_exports_no_gauges_but_keeps_its_counters() {
    let d = def();
    let m = RolloutMetrics::new(true);
    m.update(&d, &state(Phase::Progressing, 20), true);
    m.set_revisions(
        "app",
        vec![
            ("app-blue".into(), "v1".into()),
            ("app-green".into(), "v2".into()),
        ],
    );
    m.update(&d, &state(Phase::Succeeded, 0), true);
    let t = text(&m);
    assert_eq!(
        sample(
            &t,
            r#"weir_backend_revision_info{backend="app-green",revision="v2"}"#
        ),
        Some(1.0),
        "{t}"
    );
    assert_eq!(
        sample(&t, r#"flagger_canary_total{namespace="default"}"#),
        Some(1.0)
    );
    m.update(&d, &state(Phase::Succeeded, 0), false);
    let t = text(&m);
    for gone in [
        "weir_canary_status{",
        "weir_canary_weight{",
        "weir_canary_phase{",
        "weir_backend_revision_info{",
        "flagger_canary_status{",
        "flagger_canary_weight{",
    ] {
        assert!(!t.contains(gone), "{gone} still exported: {t}");
    }
    assert_eq!(
        sample(
            &t,
            r#"weir_canary_runs_total{canary="app",result="succeeded"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&t, r#"flagger_canary_total{namespace="default"}"#),
        Some(0.0)
    );
    // Revisions of a canary not driven here are not taken.
    m.set_revisions("app", vec![("app-blue".into(), "v9".into())]);
    assert!(!text(&m).contains("v9"));
    // Taken back in its ended state: shown again, not counted again.
    m.update(&d, &state(Phase::Succeeded, 0), true);
    assert_eq!(m.snapshot().runs["app"].succeeded, 1);
    assert!(text(&m).contains(r#"weir_canary_status{canary="app"} 1"#));
}

#[test]
fn a_new_revision_replaces_the_old_series() {
    let d = def();
    let m = RolloutMetrics::new(false);
    m.update(&d, &state(Phase::Progressing, 20), true);
    m.set_revisions("app", vec![("app-green".into(), "v2".into())]);
    m.set_revisions("app", vec![("app-green".into(), "v3".into())]);
    let t = text(&m);
    assert!(
        t.contains(r#"weir_backend_revision_info{backend="app-green",revision="v3"} 1"#),
        "{t}"
    );
    assert!(!t.contains(r#"revision="v2""#), "{t}");
}

#[test]
fn flagger_names_only_when_asked_with_flaggers_labels() {
    let d = def();
    let mut st = state(Phase::Progressing, 25);
    st.last_checks.metrics = vec![MetricResult {
        name: "request-duration".into(),
        value: Some(0.25),
        passed: true,
        reason: String::new(),
        dry_run: false,
        judgement: None,
        ..Default::default()
    }];
    let plain = RolloutMetrics::new(false);
    plain.update(&d, &st, true);
    assert!(!text(&plain).contains("flagger_"));
    let m = RolloutMetrics::new(true);
    m.update(&d, &st, true);
    let t = text(&m);
    assert_eq!(
        sample(
            &t,
            r#"flagger_canary_status{name="app",namespace="default"}"#
        ),
        Some(0.0),
        "{t}"
    );
    assert_eq!(
        sample(
            &t,
            r#"flagger_canary_weight{workload="app-primary",namespace="default"}"#
        ),
        Some(75.0)
    );
    assert_eq!(
        sample(
            &t,
            r#"flagger_canary_weight{workload="app",namespace="default"}"#
        ),
        Some(25.0)
    );
    assert_eq!(
        sample(
            &t,
            r#"flagger_canary_metric_analysis{name="app",namespace="default",metric="request-duration"}"#
        ),
        Some(0.25)
    );
    assert_eq!(
        sample(
            &t,
            r#"weir_canary_metric_value{canary="app",metric="request-duration"}"#
        ),
        Some(0.25)
    );
    assert_eq!(
        sample(
            &t,
            r#"flagger_canary_duration_seconds_count{name="app",namespace="default"}"#
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &t,
            r#"flagger_canary_successes_total{name="app",namespace="default",deployment_strategy="canary",analysis_status="completed"}"#
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &t,
            r#"flagger_canary_failures_total{name="app",namespace="default",deployment_strategy="canary",analysis_status="completed"}"#
        ),
        Some(0.0)
    );
    assert!(t.contains(r#"flagger_info{version=""#));
}

#[test]
fn the_text_is_well_formed() {
    let d = def();
    let m = RolloutMetrics::new(true);
    let mut st = state(Phase::Progressing, 10);
    st.last_checks.metrics = vec![MetricResult {
        name: "odd \"name\"\\x".into(),
        value: Some(f64::INFINITY),
        passed: false,
        reason: String::new(),
        dry_run: false,
        judgement: None,
        ..Default::default()
    }];
    m.update(&d, &st, true);
    let mut out = "weir_table_version 1".to_string();
    m.render(&mut out);
    assert!(
        out.starts_with("weir_table_version 1\n# HELP"),
        "a section starts on its own line"
    );
    assert!(out.contains(r#"metric="odd \"name\"\\x"} +Inf"#), "{out}");
    // Every sample belongs to a family declared before it, and every value parses.
    let mut declared = std::collections::HashSet::new();
    for l in out.lines().skip(1) {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let mut it = rest.split(' ');
            let name = it.next().unwrap();
            assert!(
                matches!(it.next(), Some("gauge" | "counter" | "histogram")),
                "{l}"
            );
            assert!(declared.insert(name.to_string()), "{name} declared twice");
            continue;
        }
        if l.starts_with('#') {
            continue;
        }
        let name = l.split(['{', ' ']).next().unwrap();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| declared.contains(*f)))
            .unwrap_or(name);
        assert!(declared.contains(family), "{l}: no TYPE line before it");
        let v = l.rsplit(' ').next().unwrap();
        assert!(
            v.parse::<f64>().is_ok() || matches!(v, "+Inf" | "-Inf" | "NaN"),
            "{l}"
        );
    }
}

/// `weir check` judges queries against `config::series`; every series rendered here
/// (Flagger's and Istio's names included) must be there with its kind, or a valid
/// query would be refused.
#[test]
fn every_series_rendered_here_is_in_configs_list() {
    use crate::config::series::{exported, family, FAMILIES};
    let m = RolloutMetrics::new(true).with_canary_routes([("app".into(), "app".into())]);
    m.update(&def(), &state(Phase::Progressing, 10), true);
    let mut out = "# TYPE weir_requests_total counter\nweir_requests_total{route=\"app\",role=\"canary\",backend=\"app-green\",code=\"200\"} 1\nweir_request_duration_seconds_bucket{route=\"app\",role=\"canary\",backend=\"app-green\",le=\"+Inf\"} 1\nweir_request_duration_seconds_sum{route=\"app\",role=\"canary\",backend=\"app-green\"} 0.1\nweir_request_duration_seconds_count{route=\"app\",role=\"canary\",backend=\"app-green\"} 1\n".to_string();
    m.render(&mut out);
    let mut rendered = Vec::new();
    for (name, kind) in out
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' '))
    {
        let Some(f) = family(name) else {
            panic!("{name} is rendered but not in config::series:\n{out}");
        };
        assert_eq!(kind, f.kind.type_name(), "{name}");
        rendered.push(name);
    }
    for source in [include_str!("text.rs"), include_str!("mesh.rs")] {
        for prefix in ["\"weir_", "\"flagger_", "\"istio_"] {
            for (i, _) in source.match_indices(prefix) {
                let rest = &source[i + 1..];
                let name = &rest[..rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len())];
                // A prefix the mesh matches lines by (`"weir_request"`) names no series.
                if FAMILIES
                    .iter()
                    .any(|f| f.name != name && f.name.starts_with(name))
                {
                    continue;
                }
                let Some(f) = family(name).or_else(|| exported(name)) else {
                    panic!("{name} is not in config::series");
                };
                // The data plane's series are the input here, not the output.
                if !f.name.starts_with("weir_request") {
                    assert!(rendered.contains(&f.name), "{name} not rendered:\n{out}");
                }
            }
        }
    }
}
