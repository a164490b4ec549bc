//! Built-in checks under the sequential judge, and the window every built-in check
//! names.

use super::super::convert::MetricKind;
use super::super::dataplane::RoleStats;
use super::super::machine::{CheckWindow, MetricResult};
use super::super::spec::MetricSpec;
use crate::config::JudgeSpec;
use crate::stats::sequential::{self, Outcome};
use crate::stats::Role;

/// Judges a built-in metric with its sequential judge (pure): Pass, Fail, or
/// Inconclusive (too little traffic included), with the evidence so far.
pub fn sequential_result(
    metric: &MetricSpec,
    judge: &JudgeSpec,
    kind: &MetricKind,
    stats: &RoleStats,
    role: Role,
) -> MetricResult {
    let snap = stats.role(role);
    let p = &judge.params;
    let judgement = match kind {
        MetricKind::SuccessRate => sequential::single(
            sequential::errors(snap, judge.baseline, &stats.primary, p),
            snap,
            &stats.primary,
            p,
        ),
        MetricKind::Duration => sequential::single(
            sequential::latency(snap, judge.baseline, &stats.primary, p),
            snap,
            &stats.primary,
            p,
        ),
        _ => sequential::compare(snap, &stats.primary, p),
    };
    let summary = snap.summary();
    let value = match kind {
        MetricKind::SuccessRate => summary.success_rate,
        MetricKind::Duration => summary.p99_ms,
        _ => None,
    };
    let reason = format!("{}: {}", judgement.outcome.as_str(), judgement.describe());
    MetricResult {
        name: metric.name.clone(),
        value,
        passed: judgement.outcome == Outcome::Pass,
        inconclusive: judgement.outcome == Outcome::Inconclusive,
        evidence: Some(judgement.evidence),
        reason,
        dry_run: metric.dry_run,
        sequential: Some(judgement),
        ..MetricResult::default()
    }
}

/// Where a window of `secs` whole seconds read at `now_ms` starts, as shown: the start
/// of its first second, never before the run's `start_ms` (the data plane counted
/// only seconds that began after it).
pub fn window_since(now_ms: u64, secs: u64, start_ms: Option<u64>) -> u64 {
    let first = (now_ms / 1000).saturating_sub(secs.saturating_sub(1)) * 1000;
    match start_ms {
        Some(start) => first.max(start),
        None => first,
    }
}

/// Names the window in the result: its field, its reason, and for an Inconclusive
/// check the requests still needed at the current rate.
pub fn with_window(mut r: MetricResult, w: CheckWindow) -> MetricResult {
    let mut reason = format!("{}; {}", r.reason, w.describe());
    if r.inconclusive {
        if let Some(needed) = r.sequential.as_ref().and_then(|j| j.needed) {
            reason.push_str(&format!("; {needed} more {} requests needed", w.role));
            let rate = w.rate();
            if rate > 0.0 {
                reason.push_str(&format!(
                    " (about {} at {rate:.1}/s)",
                    human_secs(needed as f64 / rate)
                ));
            }
        }
    }
    r.reason = reason;
    r.window = Some(w);
    r
}

fn human_secs(s: f64) -> String {
    if !s.is_finite() || s > 86_400.0 * 365.0 {
        "forever".to_string()
    } else if s < 120.0 {
        format!("{}s", s.ceil() as u64)
    } else if s < 7_200.0 {
        format!("{}m", (s / 60.0).ceil() as u64)
    } else {
        format!("{}h", (s / 3_600.0).ceil() as u64)
    }
}
