//! The three judges and the rollout rules that act on their answers, over one run.
//!
//! Each judge keeps its own run state (weight, failed checks, cumulative counts) and is
//! asked at every check until it promotes or rolls back; the run's traffic is shared
//! (see `traffic`).

use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::stats::compare::{self, CompareParams};
use crate::stats::sequential::{self, Outcome, SequentialParams};

use super::scenario::Scenario;
use super::traffic::{Counts, Traffic, Window};
use super::{FAILED_CHECKS_THRESHOLD, MAX_WEIGHT, START_WEIGHT, STEP_WEIGHT};

/// Flagger's `request-success-rate` `thresholdRange.min`, percent.
pub const MIN_SUCCESS_PCT: f64 = 99.0;
/// Flagger's `minRequests`: fewer canary requests in the window is a failed check.
pub const MIN_REQUESTS: u64 = 10;
/// The comparison judge's `thresholdRange.min`: both quantities must pass.
pub const PASS_SCORE: f64 = 90.0;

/// A way of judging the canary at each check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum JudgeKind {
    /// Flagger's fixed checks over the last interval: success rate and P99.
    Threshold,
    /// `baseline-comparison` (Mann-Whitney and two proportions) over the last interval.
    Comparison,
    /// The anytime-valid judge over everything since the run started.
    Sequential,
}

impl JudgeKind {
    /// Every judge, in the table's order.
    pub const ALL: [JudgeKind; 3] = [
        JudgeKind::Threshold,
        JudgeKind::Comparison,
        JudgeKind::Sequential,
    ];

    /// The name in the table.
    pub fn as_str(self) -> &'static str {
        match self {
            JudgeKind::Threshold => "threshold",
            JudgeKind::Comparison => "comparison",
            JudgeKind::Sequential => "sequential",
        }
    }
}

/// How a run ended for one judge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Promoted after this many seconds.
    Promoted(u64),
    /// Rolled back after this many seconds.
    RolledBack(u64),
    /// Neither within the scenario's checks.
    Undecided,
}

/// One check's answer, as the rollout engine acts on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Step the weight, or promote at the max.
    Pass,
    /// One more failed check; the threshold of them rolls back.
    FailedCheck,
    /// Roll back now (the sequential judge's Fail).
    RollBack,
    /// Nothing: wait for more evidence (the sequential judge's Inconclusive).
    Hold,
}

/// One judge's state in a run.
struct JudgeRun {
    kind: JudgeKind,
    weight: u32,
    failed_checks: u32,
    /// The sequential judge's canary and primary since the run started (its window is
    /// the run, where the others judge the last interval).
    cumulative: Option<(Counts, Counts)>,
    ending: Option<Ending>,
}

impl JudgeRun {
    fn new(kind: JudgeKind) -> JudgeRun {
        JudgeRun {
            kind,
            weight: START_WEIGHT,
            failed_checks: 0,
            cumulative: None,
            ending: None,
        }
    }

    fn verdict(&mut self, s: &Scenario, w: &Window) -> Verdict {
        let canary = w.canary_at(self.weight);
        let secs = s.interval_secs;
        match self.kind {
            JudgeKind::Threshold => threshold(&canary.snapshot(secs), s),
            JudgeKind::Comparison => {
                let j = compare::judge(
                    &canary.snapshot(secs),
                    &w.primary_at(self.weight).snapshot(secs),
                    &CompareParams::DEFAULT,
                );
                match j.score {
                    Some(score) if score >= PASS_SCORE => Verdict::Pass,
                    _ => Verdict::FailedCheck,
                }
            }
            JudgeKind::Sequential => {
                let (c, p) = self
                    .cumulative
                    .get_or_insert_with(|| (Counts::default(), Counts::default()));
                c.add(&canary);
                p.add(&w.primary_at(self.weight));
                let j = sequential::compare(
                    &c.snapshot(secs),
                    &p.snapshot(secs),
                    &SequentialParams::DEFAULT,
                );
                match j.outcome {
                    Outcome::Pass => Verdict::Pass,
                    Outcome::Fail => Verdict::RollBack,
                    Outcome::Inconclusive => Verdict::Hold,
                }
            }
        }
    }

    fn check(&mut self, s: &Scenario, w: &Window, now_secs: u64) {
        if self.ending.is_some() {
            return;
        }
        match self.verdict(s, w) {
            Verdict::Pass if self.weight >= MAX_WEIGHT => {
                self.ending = Some(Ending::Promoted(now_secs));
            }
            Verdict::Pass => self.weight = (self.weight + STEP_WEIGHT).min(MAX_WEIGHT),
            Verdict::FailedCheck => {
                self.failed_checks += 1;
                if self.failed_checks >= FAILED_CHECKS_THRESHOLD {
                    self.ending = Some(Ending::RolledBack(now_secs));
                }
            }
            Verdict::RollBack => self.ending = Some(Ending::RolledBack(now_secs)),
            Verdict::Hold => {}
        }
    }
}

/// Flagger's built-ins as weir's engine checks them: at least [`MIN_REQUESTS`], the
/// success rate at least [`MIN_SUCCESS_PCT`], the P99 at most the scenario's maximum.
fn threshold(canary: &crate::stats::WindowSnapshot, s: &Scenario) -> Verdict {
    let summary = canary.summary();
    if summary.requests < MIN_REQUESTS {
        return Verdict::FailedCheck;
    }
    let success = summary.success_rate.is_some_and(|r| r >= MIN_SUCCESS_PCT);
    let p99 = summary.p99_ms.is_some_and(|ms| ms <= s.p99_max_ms);
    if success && p99 {
        Verdict::Pass
    } else {
        Verdict::FailedCheck
    }
}

/// One run of `s` from `seed`: every judge of `judges` on the same traffic; their
/// endings in the same order.
pub fn run(s: &Scenario, traffic: &Traffic, judges: &[JudgeKind], seed: u64) -> Vec<Ending> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut runs: Vec<JudgeRun> = judges.iter().map(|&k| JudgeRun::new(k)).collect();
    let mut window = Window::default();
    for check in 1..=u64::from(s.max_checks) {
        traffic.fill(&mut rng, &mut window);
        let now = check * s.interval_secs;
        for r in &mut runs {
            r.check(s, &window, now);
        }
        if runs.iter().all(|r| r.ending.is_some()) {
            break;
        }
    }
    runs.into_iter()
        .map(|r| r.ending.unwrap_or(Ending::Undecided))
        .collect()
}
