//! The rollout engine's Prometheus series (DESIGN §12), appended to `GET /metrics`.
//!
//! The driver hands every state it shows (the one place a canary's status is written)
//! to [`RolloutMetrics::update`]; the series are rendered from that at scrape time, so
//! they follow the engine on every step, command, restore and take-over.
//!
//! # A fleet
//! Only the replica that drives a canary exports its gauges (status, phase, weights,
//! checks, revisions): a replica that is not the owner, or has just lost the canary,
//! removes them, so `sum` or `max` over replicas reads one value. Counters
//! (`weir_canary_runs_total`, the duration histogram) count the runs this replica saw
//! end and stay after a loss, so a sum over replicas counts every run once: a run is
//! counted only when one replica saw it in progress and then saw it end.
//!
//! # Status, as Flagger's recorder
//! `Progressing` → 0, `Failed` → 2, every other phase → 1 (Flagger's `SetStatus`:
//! `Initialized`, `Waiting`, `WaitingPromotion`, `Promoting`, `Finalising` and
//! `Succeeded` all report 1). `weir_canary_phase` tells them apart.
//!
//! The pure parts ([`CanaryFacts::of`], [`finished_run`], [`render`]) take the state and
//! return numbers and text; [`RolloutMetrics`] holds what was observed between scrapes.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use super::convert::{CanaryDef, NAMESPACE};
use super::machine::{CanaryState, Phase};
use super::spec::{Strategy, TOTAL_WEIGHT};
use crate::dataplane::metrics::ScrapeSection;

/// Upper bounds (seconds) of the run-duration histograms: runs last from seconds (tests,
/// a 1s interval) to hours.
pub const RUN_BUCKETS: [f64; 14] = [
    1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0,
    28800.0,
];

/// Every phase, in the order `weir_canary_phase` lists them.
pub const PHASES: [Phase; 9] = [
    Phase::Initializing,
    Phase::Initialized,
    Phase::Waiting,
    Phase::Progressing,
    Phase::WaitingPromotion,
    Phase::Promoting,
    Phase::Finalising,
    Phase::Succeeded,
    Phase::Failed,
];

/// `weir_canary_status` / `flagger_canary_status` of a phase (Flagger's mapping).
pub fn status_value(phase: Phase) -> u8 {
    match phase {
        Phase::Progressing => 0,
        Phase::Failed => 2,
        _ => 1,
    }
}

/// How a finished run ended (`result` label of `weir_canary_runs_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunResult {
    /// Promoted.
    Succeeded,
    /// Rolled back, or its promotion failed.
    Failed,
}

impl RunResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RunResult::Succeeded => "succeeded",
            RunResult::Failed => "failed",
        }
    }
}

/// A run that ended between two observed states.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FinishedRun {
    /// How it ended.
    pub result: RunResult,
    /// From the run's start to its end.
    pub seconds: f64,
}

/// The run that ended, if `prev` (the phase shown before) was inside a run and `st` is
/// its end. `None` for the first state seen (a restore or a take-over of a run already
/// finished is not counted again) and for every state that is not an end.
pub fn finished_run(prev: Option<Phase>, st: &CanaryState) -> Option<FinishedRun> {
    let prev = prev?;
    if prev.is_idle() || prev == Phase::Initializing {
        return None;
    }
    let result = match st.phase {
        Phase::Succeeded => RunResult::Succeeded,
        Phase::Failed => RunResult::Failed,
        _ => return None,
    };
    let started = st.started_at_ms.unwrap_or(st.last_transition_ms);
    let seconds = st.last_transition_ms.saturating_sub(started) as f64 / 1000.0;
    Some(FinishedRun { result, seconds })
}

/// What the gauges of one canary show.
#[derive(Clone, Debug, PartialEq)]
pub struct CanaryFacts {
    /// Current phase.
    pub phase: Phase,
    /// Canary weight (0..=100).
    pub canary_weight: u8,
    /// Failed checks of the run in progress (0 again after a rollback, as the status).
    pub failed_checks: u32,
    /// Failed checks that roll back.
    pub threshold: u32,
    /// The last measured value of each metric check, by name.
    pub metric_values: Vec<(String, f64)>,
    /// For Flagger's `deployment_strategy` label.
    pub strategy: Strategy,
    /// For Flagger's `analysis_status` label (`skipped` with `skipAnalysis`).
    pub skip_analysis: bool,
}

impl CanaryFacts {
    /// The facts of `st`, a state of canary `def`.
    pub fn of(def: &CanaryDef, st: &CanaryState) -> CanaryFacts {
        CanaryFacts {
            phase: st.phase,
            canary_weight: st.canary_weight.min(TOTAL_WEIGHT),
            failed_checks: st.failed_checks,
            threshold: def.spec.analysis.effective_threshold(),
            metric_values: st
                .last_checks
                .metrics
                .iter()
                .filter_map(|m| m.value.map(|v| (m.name.clone(), v)))
                .collect(),
            strategy: def.spec.analysis.strategy(),
            skip_analysis: def.spec.skip_analysis,
        }
    }

    /// Primary weight.
    pub fn primary_weight(&self) -> u8 {
        TOTAL_WEIGHT - self.canary_weight
    }
}

/// A fixed-bucket histogram ([`RUN_BUCKETS`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunHistogram {
    /// Observations at or below each bound, cumulative as the text format wants.
    pub cumulative: [u64; RUN_BUCKETS.len()],
    /// Sum of the observations.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl RunHistogram {
    /// Adds one observation.
    pub fn observe(&mut self, v: f64) {
        for (b, c) in RUN_BUCKETS.iter().zip(self.cumulative.iter_mut()) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
}

/// The counters of one canary's finished runs, seen by this replica.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunCounts {
    /// Promoted runs.
    pub succeeded: u64,
    /// Rolled-back runs.
    pub failed: u64,
    /// Their durations.
    pub durations: RunHistogram,
    /// Strategy and `skipAnalysis` when last driven (Flagger's counter labels), so a
    /// lost canary's counters keep their label set.
    pub flavour: Option<(Strategy, bool)>,
}

/// What the exporter knows between scrapes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// Canaries this replica drives, with their facts (exported gauges).
    pub canaries: BTreeMap<String, CanaryFacts>,
    /// Finished runs per canary (kept when the canary is lost: counters only grow).
    pub runs: BTreeMap<String, RunCounts>,
    /// `(backend, revision)` per canary, as its last tick read the slots.
    pub revisions: BTreeMap<String, Vec<(String, String)>>,
}

impl Observed {
    /// Takes one shown state: `None` when this replica does not drive the canary.
    pub fn update(&mut self, canary: &str, facts: Option<CanaryFacts>, st: &CanaryState) {
        let Some(facts) = facts else {
            self.canaries.remove(canary);
            self.revisions.remove(canary);
            return;
        };
        let prev = self.canaries.get(canary).map(|f| f.phase);
        let runs = self.runs.entry(canary.to_string()).or_default();
        runs.flavour = Some((facts.strategy, facts.skip_analysis));
        if let Some(run) = finished_run(prev, st) {
            match run.result {
                RunResult::Succeeded => runs.succeeded += 1,
                RunResult::Failed => runs.failed += 1,
            }
            runs.durations.observe(run.seconds);
        }
        self.canaries.insert(canary.to_string(), facts);
    }
}

/// The rollout series of one weir: fed by the engine, rendered into `/metrics`.
#[derive(Debug, Default)]
pub struct RolloutMetrics {
    /// `admin.flaggerMetrics`: also render Flagger's names.
    flagger: bool,
    /// Version reported in `flagger_info`.
    version: &'static str,
    state: Mutex<Observed>,
}

impl RolloutMetrics {
    /// An empty exporter; `flagger` adds Flagger's series.
    pub fn new(flagger: bool) -> RolloutMetrics {
        RolloutMetrics {
            flagger,
            version: env!("CARGO_PKG_VERSION"),
            state: Mutex::new(Observed::default()),
        }
    }

    /// The state `st` of `def` as now shown; `driven` false removes its gauges (this
    /// replica does not own the canary).
    pub fn update(&self, def: &CanaryDef, st: &CanaryState, driven: bool) {
        let facts = driven.then(|| CanaryFacts::of(def, st));
        self.lock().update(&def.spec.name, facts, st);
    }

    /// The revisions the canary's slots reported on its last tick (replaces the
    /// previous ones, so a backend's old revision disappears).
    pub fn set_revisions(&self, canary: &str, revisions: Vec<(String, String)>) {
        let mut s = self.lock();
        if s.canaries.contains_key(canary) {
            s.revisions.insert(canary.to_string(), revisions);
        }
    }

    /// A copy of what is known (for tests and status pages).
    pub fn snapshot(&self) -> Observed {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Observed> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ScrapeSection for RolloutMetrics {
    fn render(&self, out: &mut String) {
        let s = self.lock();
        render(&s, self.flagger.then_some(self.version), out);
    }
}

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

#[cfg(test)]
#[path = "exporter_tests.rs"]
mod tests;
