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
//! The pure parts ([`CanaryFacts::of`], [`finished_run`], [`render`] in `text`) take the
//! state and return numbers and text; [`RolloutMetrics`] holds what was observed between
//! scrapes.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::convert::CanaryDef;
use super::machine::{CanaryState, Phase};
use super::spec::{Strategy, TOTAL_WEIGHT};
use crate::dataplane::metrics::ScrapeSection;

pub mod mesh;
mod text;

pub use text::render;

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
    /// Route → canary of every canary in the config (driven here or not: each replica
    /// exports its own traffic), for the Istio-named request series.
    mesh_routes: BTreeMap<String, String>,
}

impl RolloutMetrics {
    /// An empty exporter; `flagger` adds Flagger's series.
    pub fn new(flagger: bool) -> RolloutMetrics {
        RolloutMetrics {
            flagger,
            version: env!("CARGO_PKG_VERSION"),
            state: Mutex::new(Observed::default()),
            mesh_routes: BTreeMap::new(),
        }
    }

    /// With Flagger's names on, also exports the request series of these canaries'
    /// routes (`(route, canary)`) under Istio's names ([`mesh`]).
    pub fn with_canary_routes(
        mut self,
        routes: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        self.mesh_routes = routes.into_iter().collect();
        self
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
        if self.flagger {
            // Read from the request series already in the scrape, before ours are added.
            let mut mesh_text = String::new();
            mesh::render(&self.mesh_routes, out, &mut mesh_text);
            out.push_str(&mesh_text);
        }
        let s = self.lock();
        render(&s, self.flagger.then_some(self.version), out);
    }
}

#[cfg(test)]
mod tests;
