//! `judge:` of a built-in metric: the sequential test's settings, checked with paths.

use super::*;
use crate::stats::sequential::{Baseline, SequentialParams};

/// What the engine does once a run has held `maxHolds` Inconclusive checks in a row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OnInconclusive {
    /// Hold up to `maxHolds` checks, then pause the run for an operator (a run never
    /// waits forever without anyone being asked).
    #[default]
    Hold,
    /// Pause the run for an operator.
    Pause,
    /// Roll the run back.
    Rollback,
    /// Take the check as passed: the run advances.
    Promote,
}

impl OnInconclusive {
    /// The names accepted in the config.
    pub const NAMES: [&'static str; 4] = ["hold", "pause", "rollback", "promote"];

    /// Parses a config name.
    pub fn parse(name: &str) -> Option<OnInconclusive> {
        match name {
            "hold" => Some(OnInconclusive::Hold),
            "pause" => Some(OnInconclusive::Pause),
            "rollback" => Some(OnInconclusive::Rollback),
            "promote" => Some(OnInconclusive::Promote),
            _ => None,
        }
    }

    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            OnInconclusive::Hold => "hold",
            OnInconclusive::Pause => "pause",
            OnInconclusive::Rollback => "rollback",
            OnInconclusive::Promote => "promote",
        }
    }
}

/// A metric's sequential judge, validated.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JudgeSpec {
    /// The test's settings (alpha, minimum effects, minimum requests per side).
    pub params: SequentialParams,
    /// What the errors are compared with (`request-success-rate`), or the latency
    /// (`request-duration`); `baseline-comparison` always compares with the primary.
    pub baseline: Baseline,
    /// Applied after `max_holds` Inconclusive checks in a row.
    pub on_inconclusive: OnInconclusive,
    /// Inconclusive checks in a row that only hold the step.
    pub max_holds: u32,
}

/// Default `judge.maxHolds`.
pub const DEFAULT_MAX_HOLDS: u32 = 5;

/// Checks `judge:` of metric `m` at `mp`; `min_requests` is the metric's (per side).
/// `None` when absent or invalid (the errors say why).
pub(super) fn compile_judge(
    mp: &str,
    m: &RawMetric,
    min_requests: u64,
    errs: &mut Errors,
) -> Option<JudgeSpec> {
    let j = m.judge.as_ref()?;
    let jp = format!("{mp}.judge");
    let range = m.threshold_range.as_ref();
    let (min, max) = (range.and_then(|t| t.min), range.and_then(|t| t.max));
    let baseline = match m.name.as_str() {
        defaults::SUCCESS_RATE => {
            if max.is_some() {
                errs.push(
                    format!("{mp}.thresholdRange.max"),
                    "the judge tests a success rate against its min only",
                );
            }
            min.map_or(Baseline::Primary, Baseline::Threshold)
        }
        defaults::DURATION => {
            if min.is_some() {
                errs.push(
                    format!("{mp}.thresholdRange.min"),
                    "the judge tests a P99 latency against its max only",
                );
            }
            max.map_or(Baseline::Primary, Baseline::Threshold)
        }
        defaults::BASELINE_COMPARISON => {
            if range.is_some() {
                errs.push(
                    format!("{mp}.thresholdRange"),
                    "with a judge, baseline-comparison compares against the primary and has no score: remove thresholdRange",
                );
            }
            if m.compare.is_some() {
                errs.push(
                    format!("{mp}.compare"),
                    "compare configures the Mann-Whitney judge; with judge set, use judge.minimumEffect and minRequests",
                );
            }
            Baseline::Primary
        }
        other => {
            errs.push(
                jp,
                format!(
                    "a judge is only for {:?}, {:?} and {:?}, not {other:?}",
                    defaults::SUCCESS_RATE,
                    defaults::DURATION,
                    defaults::BASELINE_COMPARISON
                ),
            );
            return None;
        }
    };
    let mut params = SequentialParams {
        min_requests: min_requests.max(1),
        ..SequentialParams::DEFAULT
    };
    let before = errs.0.len();
    if let Some(alpha) = j.sequential.as_ref().and_then(|s| s.alpha) {
        if alpha.is_finite() && alpha > 0.0 && alpha <= 0.5 {
            params.alpha = alpha;
        } else {
            errs.push(
                format!("{jp}.sequential.alpha"),
                format!("{alpha} is not a probability in (0, 0.5]"),
            );
        }
    }
    let effect = j.minimum_effect.as_ref();
    if let Some(e) = effect.and_then(|e| e.errors) {
        if e.is_finite() && e > 0.0 && e < 100.0 {
            params.min_errors_pp = e;
        } else {
            errs.push(
                format!("{jp}.minimumEffect.errors"),
                format!("{e} is not a number of percentage points in (0, 100)"),
            );
        }
    }
    if let Some(l) = effect.and_then(|e| e.latency) {
        if l.is_finite() && l > 1.0 && l <= 100.0 {
            params.min_latency_ratio = l;
        } else {
            errs.push(
                format!("{jp}.minimumEffect.latency"),
                format!("{l} is not a latency ratio above 1 (1.1 is 10 % slower)"),
            );
        }
    }
    let on_inconclusive = match j.on_inconclusive.as_deref() {
        None => OnInconclusive::default(),
        Some(name) => OnInconclusive::parse(name).unwrap_or_else(|| {
            errs.push(
                format!("{jp}.onInconclusive"),
                format!(
                    "unknown action {name:?}; expected one of {}",
                    OnInconclusive::NAMES.join(", ")
                ),
            );
            OnInconclusive::default()
        }),
    };
    let max_holds = errs.int_in(
        &format!("{jp}.maxHolds"),
        j.max_holds,
        0,
        10_000,
        i64::from(DEFAULT_MAX_HOLDS),
    );
    (errs.0.len() == before).then_some(JudgeSpec {
        params,
        baseline,
        on_inconclusive,
        max_holds: u32::try_from(max_holds).unwrap_or(DEFAULT_MAX_HOLDS),
    })
}
