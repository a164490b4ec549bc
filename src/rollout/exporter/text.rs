//! The text exposition format of the rollout series, Flagger's names included.

use std::fmt::Write;

use super::{status_value, Observed, RunHistogram, RunResult, PHASES, RUN_BUCKETS};
use crate::rollout::convert::NAMESPACE;
use crate::rollout::spec::Strategy;

/// A label value escaped for the text format.
fn esc(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

/// A sample value in the text format (`+Inf`, `-Inf`, `NaN` spelled as Prometheus reads them).
fn num(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// `labels` as `{a="x",b="y"}`.
fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn histogram(out: &mut String, name: &str, base: &[(&str, &str)], h: &RunHistogram) {
    for (b, c) in RUN_BUCKETS.iter().zip(h.cumulative.iter()) {
        let le = num(*b);
        let mut l = base.to_vec();
        l.push(("le", &le));
        let _ = writeln!(out, "{name}_bucket{} {c}", labels(&l));
    }
    let mut l = base.to_vec();
    l.push(("le", "+Inf"));
    let _ = writeln!(out, "{name}_bucket{} {}", labels(&l), h.count);
    let _ = writeln!(out, "{name}_sum{} {}", labels(base), num(h.sum));
    let _ = writeln!(out, "{name}_count{} {}", labels(base), h.count);
}

/// Flagger's `deployment_strategy` label value.
fn flagger_strategy(s: Strategy) -> &'static str {
    match s {
        Strategy::Canary => "canary",
        Strategy::AbTesting => "ab-testing",
        Strategy::BlueGreen => "blue-green",
    }
}

/// Appends the series of `s` to `out`; `flagger` (weir's version) adds Flagger's names.
pub fn render(s: &Observed, flagger: Option<&str>, out: &mut String) {
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    let cs = &s.canaries;
    header(
        out,
        "weir_canary_status",
        "gauge",
        "Last canary analysis result, as Flagger's: 0 progressing, 1 any other phase (succeeded, initialized, waiting, promoting), 2 failed.",
    );
    for (n, f) in cs {
        let _ = writeln!(
            out,
            "weir_canary_status{} {}",
            labels(&[("canary", n)]),
            status_value(f.phase)
        );
    }
    header(
        out,
        "weir_canary_phase",
        "gauge",
        "1 for the canary's current phase, 0 for the others.",
    );
    for (n, f) in cs {
        for p in PHASES {
            let _ = writeln!(
                out,
                "weir_canary_phase{} {}",
                labels(&[("canary", n), ("phase", p.as_str())]),
                u8::from(p == f.phase)
            );
        }
    }
    header(
        out,
        "weir_canary_weight",
        "gauge",
        "Traffic weight (percent) of the route's primary and canary slots.",
    );
    for (n, f) in cs {
        for (role, w) in [("primary", f.primary_weight()), ("canary", f.canary_weight)] {
            let _ = writeln!(
                out,
                "weir_canary_weight{} {w}",
                labels(&[("canary", n), ("role", role)])
            );
        }
    }
    header(
        out,
        "weir_canary_failed_checks",
        "gauge",
        "Failed checks of the run in progress (0 again after a rollback).",
    );
    for (n, f) in cs {
        let _ = writeln!(
            out,
            "weir_canary_failed_checks{} {}",
            labels(&[("canary", n)]),
            f.failed_checks
        );
    }
    header(
        out,
        "weir_canary_threshold",
        "gauge",
        "Failed checks that roll the run back.",
    );
    for (n, f) in cs {
        let _ = writeln!(
            out,
            "weir_canary_threshold{} {}",
            labels(&[("canary", n)]),
            f.threshold
        );
    }
    header(
        out,
        "weir_canary_metric_value",
        "gauge",
        "Last measured value of each metric check.",
    );
    for (n, f) in cs {
        for (m, v) in &f.metric_values {
            let _ = writeln!(
                out,
                "weir_canary_metric_value{} {}",
                labels(&[("canary", n), ("metric", m)]),
                num(*v)
            );
        }
    }
    header(
        out,
        "weir_canary_duration_seconds",
        "histogram",
        "Duration of finished runs, from the new revision's detection to success or rollback.",
    );
    for (n, r) in &s.runs {
        histogram(
            out,
            "weir_canary_duration_seconds",
            &[("canary", n)],
            &r.durations,
        );
    }
    header(
        out,
        "weir_canary_runs_total",
        "counter",
        "Finished runs seen by this replica, by result (succeeded, failed).",
    );
    for (n, r) in &s.runs {
        for (res, c) in [
            (RunResult::Succeeded, r.succeeded),
            (RunResult::Failed, r.failed),
        ] {
            let _ = writeln!(
                out,
                "weir_canary_runs_total{} {c}",
                labels(&[("canary", n), ("result", res.as_str())])
            );
        }
    }
    header(
        out,
        "weir_backend_revision_info",
        "gauge",
        "1 for the revision each canary slot's backend reported on the last tick.",
    );
    let mut revs: Vec<&(String, String)> = s.revisions.values().flatten().collect();
    revs.sort();
    revs.dedup();
    for (b, r) in revs {
        let _ = writeln!(
            out,
            "weir_backend_revision_info{} 1",
            labels(&[("backend", b), ("revision", r)])
        );
    }
    if let Some(version) = flagger {
        render_flagger(s, version, out);
    }
}

/// Flagger's names and labels (`pkg/metrics/recorder.go`), from the same facts.
fn render_flagger(s: &Observed, version: &str, out: &mut String) {
    let ns = NAMESPACE;
    let cs = &s.canaries;
    header(
        out,
        "flagger_info",
        "gauge",
        "Flagger version and mesh provider information (here: weir's version).",
    );
    let _ = writeln!(
        out,
        "flagger_info{} 1",
        labels(&[("version", version), ("mesh_provider", "weir")])
    );
    header(
        out,
        "flagger_canary_total",
        "gauge",
        "Total number of canary object",
    );
    let _ = writeln!(
        out,
        "flagger_canary_total{} {}",
        labels(&[("namespace", ns)]),
        cs.len()
    );
    header(
        out,
        "flagger_canary_status",
        "gauge",
        "Last canary analysis result",
    );
    for (n, f) in cs {
        let _ = writeln!(
            out,
            "flagger_canary_status{} {}",
            labels(&[("name", n), ("namespace", ns)]),
            status_value(f.phase)
        );
    }
    header(
        out,
        "flagger_canary_weight",
        "gauge",
        "The virtual service destination weight current value",
    );
    for (n, f) in cs {
        let primary = format!("{n}-primary");
        let _ = writeln!(
            out,
            "flagger_canary_weight{} {}",
            labels(&[("workload", &primary), ("namespace", ns)]),
            f.primary_weight()
        );
        let _ = writeln!(
            out,
            "flagger_canary_weight{} {}",
            labels(&[("workload", n), ("namespace", ns)]),
            f.canary_weight
        );
    }
    header(
        out,
        "flagger_canary_metric_analysis",
        "gauge",
        "Last canary analysis result per metric",
    );
    for (n, f) in cs {
        for (m, v) in &f.metric_values {
            let _ = writeln!(
                out,
                "flagger_canary_metric_analysis{} {}",
                labels(&[("name", n), ("namespace", ns), ("metric", m)]),
                num(*v)
            );
        }
    }
    header(
        out,
        "flagger_canary_duration_seconds",
        "histogram",
        "Seconds spent performing canary analysis (weir: per finished run).",
    );
    for (n, r) in &s.runs {
        histogram(
            out,
            "flagger_canary_duration_seconds",
            &[("name", n), ("namespace", ns)],
            &r.durations,
        );
    }
    for (name, help, pick) in [
        (
            "flagger_canary_successes_total",
            "Total number of canary successes",
            RunResult::Succeeded,
        ),
        (
            "flagger_canary_failures_total",
            "Total number of canary failures",
            RunResult::Failed,
        ),
    ] {
        header(out, name, "counter", help);
        for (n, r) in &s.runs {
            let (strategy, skipped) = r.flavour.unwrap_or((Strategy::Canary, false));
            let c = match pick {
                RunResult::Succeeded => r.succeeded,
                RunResult::Failed => r.failed,
            };
            let _ = writeln!(
                out,
                "{name}{} {c}",
                labels(&[
                    ("name", n),
                    ("namespace", ns),
                    ("deployment_strategy", flagger_strategy(strategy)),
                    (
                        "analysis_status",
                        if skipped { "skipped" } else { "completed" }
                    ),
                ])
            );
        }
    }
}
