//! The baseline-comparison judge (DESIGN §15): the canary against the primary in the
//! same window, from the two [`WindowSnapshot`]s the proxies already keep, as Kayenta's
//! NetflixACAJudge classifies a metric.
//!
//! Two quantities are judged:
//! - **latency**: Mann-Whitney U on the two latency histograms (each bucket a group of
//!   ties, see [`rank`]), the Hodges-Lehmann shift (canary − primary, ms) with its
//!   interval at `confidence`, the effect size as the ratio of means (canary ÷ primary).
//!   As Kayenta's `MannWhitneyClassifier` (tolerance 0.25): **High** when the interval's
//!   lower end is above `0.25 × |estimate|` and the ratio exceeds `allowedIncrease`,
//!   **Low** when its upper end is below `−0.25 × |estimate|` and the ratio is under
//!   `1 / allowedIncrease`, **Pass** otherwise; identical samples, or one single value
//!   for both sides, Pass without a test (Kayenta's shortcuts).
//! - **errors** (failed answers: 5xx and upstream failures): a two-proportion test
//!   ([`proportion`]); **High** when it rejects equal rates at `1 − confidence`, the
//!   canary's rate is the higher and the ratio of rates exceeds `allowedIncrease`,
//!   **Low** symmetrically, **Pass** otherwise. The estimate is the difference of rates
//!   in percentage points with Newcombe's interval.
//!
//! Either side below `minRequests` makes every quantity **NoData**. The score is
//! `100 × Pass ÷ judged`; with NoData there is no score (the check fails: not enough
//! traffic, as every weir metric).
//!
//! Pure: no IO, no clock, no randomness; the same snapshots give the same judgement.

pub mod proportion;
pub mod rank;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};

use super::{bucket_representative, Histogram, WindowSnapshot};
use proportion::ProportionTest;

/// Kayenta's tolerance: the interval must clear `TOLERANCE × |estimate|`, not only zero,
/// so a shift that is significant but tiny against its own size stays a Pass.
pub const TOLERANCE: f64 = 0.25;

/// What to compare and how strictly (`compare:` of a `baseline-comparison` metric).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompareParams {
    /// Confidence of the intervals and of the error test (0.5..1; Kayenta uses 0.98).
    pub confidence: f64,
    /// Fewer requests than this on either side: NoData.
    pub min_requests: u64,
    /// Ratio of mean latencies (canary ÷ primary) the canary may exceed before High.
    pub latency_allowed_increase: f64,
    /// Ratio of error rates (canary ÷ primary) the canary may exceed before High.
    pub errors_allowed_increase: f64,
}

impl CompareParams {
    /// The defaults of DESIGN §15: Kayenta's confidence, 100 requests per side, no
    /// allowed increase.
    pub const DEFAULT: CompareParams = CompareParams {
        confidence: 0.98,
        min_requests: 100,
        latency_allowed_increase: 1.0,
        errors_allowed_increase: 1.0,
    };
}

impl Default for CompareParams {
    fn default() -> Self {
        CompareParams::DEFAULT
    }
}

/// A quantity's classification, Kayenta's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Class {
    /// No significant difference beyond the allowed increase.
    Pass,
    /// The canary is significantly higher.
    High,
    /// The canary is significantly lower.
    Low,
    /// Too few requests on a side to judge.
    NoData,
}

impl Class {
    /// The name shown in events and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Pass => "Pass",
            Class::High => "High",
            Class::Low => "Low",
            Class::NoData => "NoData",
        }
    }
}

/// One judged quantity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Quantity {
    /// `latency` or `errors`.
    pub name: String,
    /// The classification.
    pub class: Class,
    /// The estimate: the latency shift in ms, or the difference of error rates in
    /// percentage points (canary − primary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<f64>,
    /// Lower end of the estimate's interval at `confidence`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower: Option<f64>,
    /// Upper end of the estimate's interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upper: Option<f64>,
    /// Effect size: ratio of means (latency) or of rates (errors), canary ÷ primary;
    /// absent when undefined (a primary mean or rate of 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<f64>,
    /// Two-sided p-value of the test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
    /// The test: `mann-whitney`, `two-proportion-z` or `fisher-exact` (absent: none ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<String>,
    /// Canary samples (requests) judged.
    pub canary_requests: u64,
    /// Primary samples judged.
    pub primary_requests: u64,
}

/// The judge's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Judgement {
    /// `100 × Pass ÷ judged`; absent when a quantity has NoData.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// Confidence the intervals were computed at.
    pub confidence: f64,
    /// Each quantity, latency then errors.
    pub quantities: Vec<Quantity>,
}

impl Judgement {
    /// One line for events and logs: every quantity's class, estimate, interval, effect
    /// and sample sizes.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .quantities
            .iter()
            .map(|q| {
                let unit = if q.name == "latency" { "ms" } else { "pp" };
                let mut s = format!("{} {}", q.name, q.class.as_str());
                if let (Some(e), Some(lo), Some(hi)) = (q.estimate, q.lower, q.upper) {
                    s.push_str(&format!(
                        " {e:+.3}{unit} [{lo:+.3}, {hi:+.3}] at {}%",
                        self.confidence * 100.0
                    ));
                }
                if let Some(r) = q.effect {
                    s.push_str(&format!(" ratio {r:.3}"));
                }
                if let Some(p) = q.p_value {
                    s.push_str(&format!(" p={p:.3}"));
                }
                s.push_str(&format!(
                    " (canary {} / primary {})",
                    q.canary_requests, q.primary_requests
                ));
                s
            })
            .collect();
        parts.join("; ")
    }
}

/// The groups of a histogram, in ms: each non-empty bucket's representative and count.
pub fn histogram_groups(h: &Histogram) -> rank::Groups {
    h.nonzero()
        .map(|(i, c)| (bucket_representative(i) as f64 / 1000.0, c as f64))
        .collect()
}

/// The standard normal quantile at `1 − (1 − confidence)/2`.
pub fn two_sided_z(confidence: f64) -> f64 {
    let alpha = (1.0 - confidence).clamp(1e-12, 1.0);
    Normal::standard().inverse_cdf(1.0 - alpha / 2.0)
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// Judges latency on grouped samples (ms), Kayenta's rule.
pub fn judge_latency(
    canary: &[(f64, f64)],
    primary: &[(f64, f64)],
    params: &CompareParams,
) -> Quantity {
    let mut q = Quantity {
        name: "latency".to_string(),
        class: Class::NoData,
        estimate: None,
        lower: None,
        upper: None,
        effect: None,
        p_value: None,
        test: None,
        canary_requests: rank::total(canary) as u64,
        primary_requests: rank::total(primary) as u64,
    };
    let min = params.min_requests.max(1);
    if q.canary_requests < min || q.primary_requests < min {
        return q;
    }
    let ratio = match (rank::mean(canary), rank::mean(primary)) {
        (Some(c), Some(p)) => c / p,
        _ => f64::NAN,
    };
    q.effect = finite(ratio);
    let Some(shift) = rank::hodges_lehmann(canary, primary, two_sided_z(params.confidence)) else {
        return q;
    };
    (q.estimate, q.lower, q.upper) = (Some(shift.estimate), Some(shift.lower), Some(shift.upper));
    let single_value = canary.len() == 1 && primary.len() == 1 && canary[0].0 == primary[0].0;
    if canary == primary || single_value {
        q.class = Class::Pass;
        return q;
    }
    if let Some(mw) = rank::mann_whitney(canary, primary) {
        q.p_value = Some(mw.p_value);
        q.test = Some("mann-whitney".to_string());
    }
    let bound = TOLERANCE * shift.estimate.abs();
    // An undefined ratio (a primary mean of 0) does not veto, as in Kayenta.
    let high = shift.lower > bound && (ratio.is_nan() || ratio > params.latency_allowed_increase);
    let low =
        shift.upper < -bound && (ratio.is_nan() || ratio < 1.0 / params.latency_allowed_increase);
    q.class = if high {
        Class::High
    } else if low {
        Class::Low
    } else {
        Class::Pass
    };
    q
}

/// Judges error rates: `e1` of `n` canary answers failed, `e0` of `m` primary ones.
pub fn judge_errors(e1: u64, n: u64, e0: u64, m: u64, params: &CompareParams) -> Quantity {
    let mut q = Quantity {
        name: "errors".to_string(),
        class: Class::NoData,
        estimate: None,
        lower: None,
        upper: None,
        effect: None,
        p_value: None,
        test: None,
        canary_requests: n,
        primary_requests: m,
    };
    let min = params.min_requests.max(1);
    if n < min || m < min {
        return q;
    }
    let Some(r) = proportion::compare_rates(e1, n, e0, m, two_sided_z(params.confidence)) else {
        return q;
    };
    let (p1, p0) = (e1.min(n) as f64 / n as f64, e0.min(m) as f64 / m as f64);
    let ratio = if p1 == p0 { 1.0 } else { p1 / p0 };
    q.estimate = Some(100.0 * r.difference);
    q.lower = Some(100.0 * r.lower);
    q.upper = Some(100.0 * r.upper);
    q.effect = finite(ratio);
    q.p_value = Some(r.p_value);
    q.test = Some(
        match r.test {
            ProportionTest::ZTest => "two-proportion-z",
            ProportionTest::Fisher => "fisher-exact",
        }
        .to_string(),
    );
    let significant = r.p_value < 1.0 - params.confidence;
    q.class = if significant && p1 > p0 && ratio > params.errors_allowed_increase {
        Class::High
    } else if significant && p1 < p0 && ratio < 1.0 / params.errors_allowed_increase {
        Class::Low
    } else {
        Class::Pass
    };
    q
}

/// Judges the canary's window against the primary's.
pub fn judge(
    canary: &WindowSnapshot,
    primary: &WindowSnapshot,
    params: &CompareParams,
) -> Judgement {
    let latency = judge_latency(
        &histogram_groups(&canary.histogram),
        &histogram_groups(&primary.histogram),
        params,
    );
    // Failures and the latency histogram count attempts (a retried request is one per
    // attempt), so the error rate is over attempts too: retries never hide a canary.
    let errors = judge_errors(
        canary.failures,
        canary.attempts(),
        primary.failures,
        primary.attempts(),
        params,
    );
    let quantities = vec![latency, errors];
    let score = if quantities.iter().any(|q| q.class == Class::NoData) {
        None
    } else {
        let pass = quantities.iter().filter(|q| q.class == Class::Pass).count();
        Some(100.0 * pass as f64 / quantities.len() as f64)
    };
    Judgement {
        score,
        confidence: params.confidence,
        quantities,
    }
}
