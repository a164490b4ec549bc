//! The sequential judge: an anytime-valid test of the canary, against the primary or
//! against a fixed threshold, that answers Pass, Fail or Inconclusive.
//!
//! # Why sequential
//!
//! The engine looks at a run every interval. A fixed-level test repeated at every look
//! rejects a healthy canary far more often than its level says (every look is another
//! chance for noise to cross the line), and a fixed threshold on a handful of requests
//! has no stated error rate at all. Here every quantity gets a **confidence sequence**:
//! an interval for the effect that covers the true effect at *every* look at once with
//! probability at least `1 − alpha`, however often and for however long the engine
//! looks. Then
//!
//! - **Fail** when the interval lies above 0: the canary is worse, and a canary that is
//!   not worse is failed with probability at most `alpha` over the whole run;
//! - **Pass** when the interval lies below the minimum effect `δ`: any regression is
//!   smaller than the smallest one worth catching, and a canary worse by `δ` or more
//!   passes with probability at most `alpha`;
//! - **Inconclusive** otherwise: not enough evidence yet either way. A real regression
//!   smaller than `δ` may be failed (it is one) or passed (it is too small to matter);
//!   Pass is checked first, so a precise enough measurement of a negligible regression
//!   passes.
//!
//! # The interval
//!
//! The normal-mixture boundary of Robbins, in the form of the mixture sequential
//! probability ratio test of Johari, Koomen, Pekelis and Walsh ("Peeking at A/B Tests",
//! KDD 2017; "Always Valid Inference", Operations Research 2022). For an estimate `θ̂`
//! with variance `V` and a normal mixing distribution of variance `τ²` over the effect,
//! the likelihood ratio against `θ = θ₀` is
//!
//! ```text
//! Λ = sqrt(V / (V + τ²)) · exp(τ² (θ̂ − θ₀)² / (2 V (V + τ²)))
//! ```
//!
//! a martingale under `θ₀`, so by Ville's inequality `Λ ≥ 1/alpha` ever happens with
//! probability at most `alpha`. The values `θ₀` not rejected form the interval
//! `θ̂ ± w` with
//!
//! ```text
//! w = sqrt( V (V + τ²) / τ² · ln((V + τ²) / (V · alpha²)) )
//! ```
//!
//! The mixture is centred on the effect the user wants to catch: `τ = δ`, which makes
//! the interval narrowest around the time a regression of `δ` becomes detectable.
//! `V` is estimated from the data (plug-in), so the guarantee is asymptotic, as for
//! every test on proportions and means at these sample sizes; `weir sim judge` measures
//! the actual error rates on simulated traffic.
//!
//! # Quantities
//!
//! - **errors**: the failed share of attempts, in percentage points. Against the primary
//!   `θ = p_canary − p_primary`, `V = p̃_c(1 − p̃_c)/n_c + p̃_p(1 − p̃_p)/n_p`; against a
//!   threshold (a success rate of at least `min` %) `θ = p_canary − (1 − min/100)` and
//!   only the canary's term. `p̃ = (failures + ½)/(n + 1)` so that a side without any
//!   failure still has a variance (zero failures out of 20 is not a certainty).
//! - **latency**: against the primary, the difference of the mean log latency (the log
//!   of the ratio of the geometric means), reported as a ratio; the variance of the
//!   log latency has a floor of the histogram's own quantisation (a bucket is at most
//!   1/32 wide, relatively), so two identical single-bucket samples do not claim
//!   infinite precision. Against a threshold (a P99 of at most `max` ms) the test is on
//!   the share of requests slower than the threshold: Fail when it is surely above
//!   1 %, Pass when the share slower than `max × latency effect` is surely below 1 %.
//!
//! `baseline-comparison` judges both quantities, and either may fail it: each is tested
//! at `alpha / 2` (Bonferroni), so the bound on failing a canary that is not worse stays
//! `alpha` for the check as a whole.
//!
//! Fewer than `minRequests` requests on a judged side is Inconclusive (with the
//! requests still missing, and as evidence the shortest side's share of
//! `minRequests`), never a failure. A side without any latency sample (possible only
//! with `minRequests` 0) has no mean: latency is Inconclusive without an estimate.
//!
//! # Evidence
//!
//! For an Inconclusive quantity, the judge also says how far it is from a decision: the
//! factor `k` by which both samples would have to grow, at the same estimate, for the
//! interval to clear the nearer decision line. `evidence = 1/k` (0..1) and the canary
//! requests still needed are `n_c · (k − 1)`.
//!
//! Pure: no IO, no clock, no randomness.

use serde::{Deserialize, Serialize};

use super::{bucket_representative, WindowSnapshot};

/// Settings of the sequential judge (`judge:` of a metric).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SequentialParams {
    /// Bound on the false-failure (and false-pass) probability over the whole run.
    pub alpha: f64,
    /// Smallest error regression worth catching, in percentage points.
    pub min_errors_pp: f64,
    /// Smallest latency regression worth catching, as a ratio (canary ÷ primary, or
    /// ÷ the threshold); above 1.
    pub min_latency_ratio: f64,
    /// Fewer requests than this on a judged side: Inconclusive.
    pub min_requests: u64,
}

impl SequentialParams {
    /// alpha 0.05, 1 percentage point of errors, 10 % of latency, 10 requests a side.
    pub const DEFAULT: SequentialParams = SequentialParams {
        alpha: 0.05,
        min_errors_pp: 1.0,
        min_latency_ratio: 1.1,
        min_requests: 10,
    };
}

impl Default for SequentialParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A check's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// No regression of the minimum effect or more.
    Pass,
    /// A regression.
    Fail,
    /// Not enough evidence either way.
    Inconclusive,
}

impl Outcome {
    /// The lower-case name shown in events and status.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Inconclusive => "inconclusive",
        }
    }

    /// Fail if either fails, Pass if both pass, else Inconclusive.
    pub fn and(self, other: Outcome) -> Outcome {
        match (self, other) {
            (Outcome::Fail, _) | (_, Outcome::Fail) => Outcome::Fail,
            (Outcome::Pass, Outcome::Pass) => Outcome::Pass,
            _ => Outcome::Inconclusive,
        }
    }
}

/// What a quantity is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "against", content = "value")]
pub enum Baseline {
    /// The primary's requests in the same window.
    Primary,
    /// A fixed limit: for errors the success rate in percent (`thresholdRange.min`),
    /// for latency the P99 in milliseconds (`thresholdRange.max`).
    Threshold(f64),
}

/// One judged quantity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Quantity {
    /// `errors` or `latency`.
    pub name: String,
    /// What it was compared with.
    pub baseline: Baseline,
    /// The verdict.
    pub outcome: Outcome,
    /// The effect: percentage points of errors, a latency ratio, or (latency against a
    /// threshold) percentage points of requests slower than the threshold beyond 1 %.
    /// None with too few requests to estimate it.
    pub estimate: Option<f64>,
    /// Lower end of the confidence sequence, same unit.
    pub lower: Option<f64>,
    /// Upper end, same unit.
    pub upper: Option<f64>,
    /// The Pass line in the same unit (the minimum effect, or 0 for latency against a
    /// threshold, whose Pass is judged at the threshold times the minimum effect).
    pub pass_below: f64,
    /// The Fail line in the same unit.
    pub fail_above: f64,
    /// 0..1: how much of the evidence a decision needs is in (1 once decided).
    pub evidence: f64,
    /// Canary requests still needed for a decision at the same estimate (None once
    /// decided, or when no amount of traffic would decide at this estimate).
    pub needed: Option<u64>,
}

/// The judge's answer for one check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Judgement {
    /// Fail if any quantity fails, Pass if all pass, else Inconclusive.
    pub outcome: Outcome,
    /// The alpha used.
    pub alpha: f64,
    /// Requests of the judged side.
    pub canary_requests: u64,
    /// Requests of the primary, when compared with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_requests: Option<u64>,
    /// The quantities, errors first.
    pub quantities: Vec<Quantity>,
    /// The least evidence among the undecided quantities (1 once decided).
    pub evidence: f64,
    /// The most canary requests an undecided quantity still needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needed: Option<u64>,
}

impl Judgement {
    /// One line for events: each quantity's estimate and interval against its lines.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self.quantities.iter().map(Quantity::describe).collect();
        parts.join("; ")
    }
}

impl Quantity {
    /// `errors pass +0.12pp [-0.40, +0.64]`, `latency inconclusive 1.042x [0.98, 1.11],
    /// evidence 40%`, `errors inconclusive: 4 more requests`.
    pub fn describe(&self) -> String {
        let ratio = self.name == "latency" && self.baseline == Baseline::Primary;
        let fmt = |x: Option<f64>, signed: bool| match x {
            None => "?".to_string(),
            Some(v) if ratio => format!("{v:.3}"),
            Some(v) if signed => format!("{v:+.2}"),
            Some(v) => format!("{v:.2}"),
        };
        let mut s = match self.estimate {
            None => format!("{} {}: too few requests", self.name, self.outcome.as_str()),
            Some(_) => {
                let unit = if ratio { "x" } else { "pp" };
                format!(
                    "{} {} {}{unit} [{}, {}]",
                    self.name,
                    self.outcome.as_str(),
                    fmt(self.estimate, true),
                    fmt(self.lower, true),
                    fmt(self.upper, true)
                )
            }
        };
        if self.outcome == Outcome::Inconclusive {
            s.push_str(&format!(", evidence {:.0}%", 100.0 * self.evidence));
        }
        s
    }
}

/// Half-width of the confidence sequence for an estimate of variance `v`, mixing
/// variance `tau2`, level `alpha`. Infinite without a variance estimate.
pub fn half_width(v: f64, tau2: f64, alpha: f64) -> f64 {
    // An infinite variance (a side without samples) would make the logarithm's
    // argument inf/inf = NaN, which `max(0.0)` turns into a width of 0: certainty.
    let valid = v > 0.0 && v.is_finite() && tau2 > 0.0 && alpha > 0.0 && alpha < 1.0;
    if !valid {
        return f64::INFINITY;
    }
    let inner = (v + tau2) / (v * alpha * alpha);
    (v * (v + tau2) / tau2 * inner.ln()).max(0.0).sqrt()
}

/// A raw quantity: estimate and variance on the additive scale the test runs on.
#[derive(Clone, Copy, Debug)]
struct Raw {
    estimate: f64,
    variance: f64,
}

/// Decides one quantity on the additive scale: Pass below `pass_below` (upper end),
/// Fail above `fail_above` (lower end). `tau2` is the mixing variance.
fn decide(raw: Raw, pass_below: f64, fail_above: f64, tau2: f64, alpha: f64) -> Decided {
    let w = half_width(raw.variance, tau2, alpha);
    let (lower, upper) = (raw.estimate - w, raw.estimate + w);
    let outcome = if upper < pass_below {
        Outcome::Pass
    } else if lower > fail_above {
        Outcome::Fail
    } else {
        Outcome::Inconclusive
    };
    let (evidence, growth) = if outcome == Outcome::Inconclusive {
        growth_needed(raw, pass_below, fail_above, tau2, alpha)
    } else {
        (1.0, None)
    };
    Decided {
        outcome,
        lower,
        upper,
        evidence,
        growth,
    }
}

struct Decided {
    outcome: Outcome,
    lower: f64,
    upper: f64,
    evidence: f64,
    /// The factor both samples must grow by for a decision at this estimate.
    growth: Option<f64>,
}

/// The smallest factor `k` such that, at the same estimate and with the variance
/// shrunk to `V/k`, the interval clears the nearer line; `(1/k, Some(k))`, or
/// `(0, None)` when the estimate sits on a line that no sample size can clear.
fn growth_needed(
    raw: Raw,
    pass_below: f64,
    fail_above: f64,
    tau2: f64,
    alpha: f64,
) -> (f64, Option<f64>) {
    // The width a decision needs: to pass, the estimate must be `target` below the
    // pass line; to fail, above the fail line. The more distant line is never nearer.
    let target = (pass_below - raw.estimate).max(raw.estimate - fail_above);
    let decidable = target > 0.0 && raw.variance > 0.0;
    if !decidable {
        return (0.0, None);
    }
    let fits = |k: f64| half_width(raw.variance / k, tau2, alpha) < target;
    if fits(1.0) {
        return (1.0, Some(1.0));
    }
    let mut hi = 2.0;
    while !fits(hi) {
        hi *= 2.0;
        if hi > 1e12 {
            return (0.0, None);
        }
    }
    let mut lo = hi / 2.0;
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if fits(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    (1.0 / hi, Some(hi))
}

/// Failed share of attempts, and a variance that is never zero.
fn rate(s: &WindowSnapshot) -> (f64, f64, f64) {
    let n = s.attempts().max(1) as f64;
    let f = s.failures.min(s.attempts()) as f64;
    let p = f / n;
    let smoothed = (f + 0.5) / (n + 1.0);
    (p, smoothed * (1.0 - smoothed), n)
}

/// Mean and variance of the log latency (µs) of a histogram; the variance has the
/// quantisation floor.
fn log_moments(s: &WindowSnapshot) -> (f64, f64, f64) {
    // A bucket spans at most 1/32 of its value: a uniform error over a log-width of
    // ln(1 + 1/32) has this variance.
    let floor = (1.0f64 + 1.0 / 32.0).ln().powi(2) / 12.0;
    let mut n = 0.0;
    let mut sum = 0.0;
    let mut sum2 = 0.0;
    for (i, c) in s.histogram.nonzero() {
        let x = (bucket_representative(i).max(1) as f64).ln();
        let c = c as f64;
        n += c;
        sum += c * x;
        sum2 += c * x * x;
    }
    if n == 0.0 {
        // No mean: the estimate is NaN, reported as none, and decides nothing.
        return (f64::NAN, f64::INFINITY, 0.0);
    }
    let mean = sum / n;
    let var = if n > 1.0 {
        ((sum2 - n * mean * mean) / (n - 1.0)).max(0.0)
    } else {
        0.0
    };
    (mean, var.max(floor), n)
}

/// Share of a histogram's samples slower than `limit_us`.
fn share_above(s: &WindowSnapshot, limit_us: f64) -> (f64, f64) {
    let mut n = 0.0;
    let mut above = 0.0;
    for (i, c) in s.histogram.nonzero() {
        n += c as f64;
        if bucket_representative(i) as f64 > limit_us {
            above += c as f64;
        }
    }
    (above / n.max(1.0), n)
}

/// The share of requests a P99 allows above it.
const P99_TAIL: f64 = 0.01;

/// Inconclusive for too few requests, when a judged side has fewer than `minRequests`:
/// the requests still missing, and as evidence the shortest side's share of
/// `minRequests` (the primary may be the one short).
fn too_few(
    name: &str,
    canary: &WindowSnapshot,
    baseline: Baseline,
    primary: &WindowSnapshot,
    p: &SequentialParams,
) -> Option<Quantity> {
    let judged: &[&WindowSnapshot] = if baseline == Baseline::Primary {
        &[canary, primary]
    } else {
        &[canary]
    };
    let need = judged
        .iter()
        .map(|s| p.min_requests.saturating_sub(s.requests))
        .max()
        .unwrap_or(0);
    if need == 0 {
        return None;
    }
    let have = judged.iter().map(|s| s.requests).min().unwrap_or(0);
    let (pass_below, fail_above) = match (name, baseline) {
        ("errors", _) => (p.min_errors_pp, 0.0),
        (_, Baseline::Primary) => (p.min_latency_ratio, 1.0),
        _ => (0.0, 0.0),
    };
    Some(Quantity {
        name: name.to_string(),
        baseline,
        outcome: Outcome::Inconclusive,
        estimate: None,
        lower: None,
        upper: None,
        pass_below,
        fail_above,
        evidence: if p.min_requests == 0 {
            0.0
        } else {
            (have as f64 / p.min_requests as f64).min(1.0)
        },
        needed: Some(need),
    })
}

/// Judges the errors of `canary` against the primary or a success-rate threshold.
pub fn errors(
    canary: &WindowSnapshot,
    baseline: Baseline,
    primary: &WindowSnapshot,
    p: &SequentialParams,
) -> Quantity {
    if let Some(q) = too_few("errors", canary, baseline, primary, p) {
        return q;
    }
    let (pc, vc, nc) = rate(canary);
    let raw = match baseline {
        Baseline::Primary => {
            let (pp, vp, np) = rate(primary);
            Raw {
                estimate: pc - pp,
                variance: vc / nc + vp / np,
            }
        }
        Baseline::Threshold(min_success) => Raw {
            estimate: pc - (1.0 - min_success / 100.0),
            variance: vc / nc,
        },
    };
    let delta = p.min_errors_pp / 100.0;
    let d = decide(raw, delta, 0.0, delta * delta, p.alpha);
    Quantity {
        name: "errors".to_string(),
        baseline,
        outcome: d.outcome,
        estimate: finite(100.0 * raw.estimate),
        lower: finite(100.0 * d.lower),
        upper: finite(100.0 * d.upper),
        pass_below: p.min_errors_pp,
        fail_above: 0.0,
        evidence: d.evidence,
        needed: needed(d.growth, canary.requests),
    }
}

/// JSON has no infinities: an unbounded end is absent.
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

fn needed(growth: Option<f64>, have: u64) -> Option<u64> {
    let k = growth?;
    if k <= 1.0 {
        return None;
    }
    let more = (have.max(1) as f64 * (k - 1.0)).ceil();
    Some(if more >= u64::MAX as f64 {
        u64::MAX
    } else {
        more as u64
    })
}

/// Judges the latency of `canary` against the primary or a P99 threshold (ms).
pub fn latency(
    canary: &WindowSnapshot,
    baseline: Baseline,
    primary: &WindowSnapshot,
    p: &SequentialParams,
) -> Quantity {
    if let Some(q) = too_few("latency", canary, baseline, primary, p) {
        return q;
    }
    let ratio = p.min_latency_ratio.max(1.0 + 1e-9);
    match baseline {
        Baseline::Primary => {
            let (mc, vc, nc) = log_moments(canary);
            let (mp, vp, np) = log_moments(primary);
            let raw = Raw {
                estimate: mc - mp,
                variance: vc / nc.max(1.0) + vp / np.max(1.0),
            };
            let delta = ratio.ln();
            let d = decide(raw, delta, 0.0, delta * delta, p.alpha);
            Quantity {
                name: "latency".to_string(),
                baseline,
                outcome: d.outcome,
                estimate: finite(raw.estimate.exp()),
                lower: finite(d.lower.exp()),
                upper: finite(d.upper.exp()),
                pass_below: ratio,
                fail_above: 1.0,
                evidence: d.evidence,
                needed: needed(d.growth, canary.requests),
            }
        }
        Baseline::Threshold(max_ms) => {
            let limit_us = max_ms * 1000.0;
            // Fail: the share slower than the threshold is surely above 1 %.
            let (q_fail, n) = share_above(canary, limit_us);
            // Pass: the share slower than the threshold × the effect is surely below.
            let (q_pass, _) = share_above(canary, limit_us * ratio);
            let var = |q: f64| {
                let s = (q * n + 0.5) / (n + 1.0);
                s * (1.0 - s) / n.max(1.0)
            };
            // The mixture is tuned to a doubling of the tail (1 % → 2 %).
            let tau2 = P99_TAIL * P99_TAIL;
            let fail_raw = Raw {
                estimate: q_fail - P99_TAIL,
                variance: var(q_fail),
            };
            let pass_raw = Raw {
                estimate: q_pass - P99_TAIL,
                variance: var(q_pass),
            };
            let f = decide(fail_raw, f64::NEG_INFINITY, 0.0, tau2, p.alpha);
            let s = decide(pass_raw, 0.0, f64::INFINITY, tau2, p.alpha);
            let outcome = if s.outcome == Outcome::Pass {
                Outcome::Pass
            } else if f.outcome == Outcome::Fail {
                Outcome::Fail
            } else {
                Outcome::Inconclusive
            };
            let (evidence, growth) = if outcome == Outcome::Inconclusive {
                let a = growth_needed(pass_raw, 0.0, f64::INFINITY, tau2, p.alpha);
                let b = growth_needed(fail_raw, f64::NEG_INFINITY, 0.0, tau2, p.alpha);
                if a.0 >= b.0 {
                    a
                } else {
                    b
                }
            } else {
                (1.0, None)
            };
            Quantity {
                name: "latency".to_string(),
                baseline,
                outcome,
                estimate: finite(100.0 * fail_raw.estimate),
                lower: finite(100.0 * f.lower),
                // The interval of the share over the limit (the Fail test's).
                upper: finite(100.0 * f.upper),
                pass_below: 0.0,
                fail_above: 0.0,
                evidence,
                needed: needed(growth, canary.requests),
            }
        }
    }
}

/// Combines judged quantities into one check's judgement.
pub fn combine(
    quantities: Vec<Quantity>,
    canary: &WindowSnapshot,
    primary: Option<&WindowSnapshot>,
    p: &SequentialParams,
) -> Judgement {
    let outcome = quantities
        .iter()
        .fold(Outcome::Pass, |acc, q| acc.and(q.outcome));
    let undecided = || {
        quantities
            .iter()
            .filter(|q| q.outcome == Outcome::Inconclusive)
    };
    let evidence = if outcome == Outcome::Inconclusive {
        undecided().map(|q| q.evidence).fold(1.0, f64::min)
    } else {
        1.0
    };
    let needed = if outcome == Outcome::Inconclusive {
        undecided().filter_map(|q| q.needed).max()
    } else {
        None
    };
    Judgement {
        outcome,
        alpha: p.alpha,
        canary_requests: canary.requests,
        primary_requests: primary.map(|s| s.requests),
        quantities,
        evidence,
        needed,
    }
}

/// The `baseline-comparison` judge: errors and latency against the primary.
pub fn compare(
    canary: &WindowSnapshot,
    primary: &WindowSnapshot,
    p: &SequentialParams,
) -> Judgement {
    // Two quantities, each of which may fail the check: each gets half of alpha, so a
    // canary that is not worse is failed with probability at most alpha in all.
    let half = SequentialParams {
        alpha: p.alpha / 2.0,
        ..*p
    };
    let q = vec![
        errors(canary, Baseline::Primary, primary, &half),
        latency(canary, Baseline::Primary, primary, &half),
    ];
    combine(q, canary, Some(primary), p)
}

/// One quantity alone (`request-success-rate` → errors, `request-duration` → latency).
pub fn single(
    quantity: Quantity,
    canary: &WindowSnapshot,
    primary: &WindowSnapshot,
    p: &SequentialParams,
) -> Judgement {
    let vs_primary = quantity.baseline == Baseline::Primary;
    combine(vec![quantity], canary, vs_primary.then_some(primary), p)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod reference;
