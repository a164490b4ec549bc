//! What a simulated release looks like: the route's traffic, how much worse the canary
//! is, and the analysis settings; the built-in set and the scenario file.
//!
//! The file is YAML (JSON is YAML too): a `scenarios:` list whose entries give `rps`
//! and any field to change from the defaults. Unknown fields are errors (a typo must
//! not silently simulate the default), and every error is reported with its field path.

use serde::{Deserialize, Serialize};

/// Highest `rps` of a scenario: every request is drawn, so this bounds a run's work.
pub const MAX_RPS: f64 = 10_000.0;
/// Most checks in a run.
pub const MAX_CHECKS: u32 = 1_000;

/// One simulated release: the route's traffic and how the canary differs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Scenario {
    /// Shown in the table, and (with `rps`) the seed of the scenario's runs, so a
    /// scenario gives the same numbers whichever others run beside it.
    pub name: String,
    /// Mean requests per second on the route (Poisson arrivals), both sides together.
    pub rps: f64,
    /// Primary error rate, percent of requests.
    pub base_error_pct: f64,
    /// Canary error rate minus the primary's, percentage points.
    pub error_delta_pp: f64,
    /// Median latency of the primary, ms (log-normal).
    pub median_ms: f64,
    /// Standard deviation of the log latency (the log-normal's shape, same both sides).
    pub sigma: f64,
    /// Canary latency ÷ primary latency (every quantile scales by it).
    pub latency_factor: f64,
    /// Seconds between two checks; also the window of the per-interval judges.
    pub interval_secs: u64,
    /// Checks before a run is called undecided.
    pub max_checks: u32,
    /// The threshold judge's `request-duration` `thresholdRange.max`, ms.
    pub p99_max_ms: f64,
}

impl Scenario {
    /// A scenario with the default traffic shape: 0.5 % errors on the primary,
    /// 50 ms median latency with sigma 0.5 (P99 about 160 ms), checks every 10 s, 30
    /// checks at most, P99 ≤ 250 ms for the threshold judge.
    pub fn new(name: &str, rps: f64, error_delta_pp: f64, latency_factor: f64) -> Scenario {
        Scenario {
            name: name.to_string(),
            rps,
            base_error_pct: 0.5,
            error_delta_pp,
            median_ms: 50.0,
            sigma: 0.5,
            latency_factor,
            interval_secs: 10,
            max_checks: 30,
            p99_max_ms: 250.0,
        }
    }

    /// The canary is worse (any regression, however small): a promotion is a false one.
    /// Otherwise a rollback is.
    pub fn canary_is_worse(&self) -> bool {
        self.error_delta_pp > 0.0 || self.latency_factor > 1.0
    }

    /// Checks the values; each error names its field under `path`.
    pub fn validate(&self, path: &str, errors: &mut Vec<String>) {
        let mut check = |ok: bool, field: &str, want: &str, got: String| {
            if !ok {
                errors.push(format!("{path}.{field}: must be {want} (got {got})"));
            }
        };
        let in_range = |x: f64, lo: f64, hi: f64| x.is_finite() && x >= lo && x <= hi;
        check(
            self.rps > 0.0 && self.rps <= MAX_RPS,
            "rps",
            &format!("more than 0 and at most {MAX_RPS}"),
            self.rps.to_string(),
        );
        check(
            in_range(self.base_error_pct, 0.0, 100.0),
            "baseErrorPct",
            "a percentage, 0..=100",
            self.base_error_pct.to_string(),
        );
        let canary = self.base_error_pct + self.error_delta_pp;
        check(
            in_range(canary, 0.0, 100.0),
            "errorDeltaPp",
            "such that the canary's rate (baseErrorPct + errorDeltaPp) is 0..=100",
            self.error_delta_pp.to_string(),
        );
        check(
            in_range(self.median_ms, 0.001, 60_000.0),
            "medianMs",
            "0.001..=60000",
            self.median_ms.to_string(),
        );
        check(
            in_range(self.sigma, 0.001, 5.0),
            "sigma",
            "0.001..=5",
            self.sigma.to_string(),
        );
        check(
            in_range(self.latency_factor, 0.01, 100.0),
            "latencyFactor",
            "0.01..=100",
            self.latency_factor.to_string(),
        );
        check(
            (1..=3600).contains(&self.interval_secs),
            "interval",
            "whole seconds, 1s..=1h",
            format!("{}s", self.interval_secs),
        );
        check(
            (1..=MAX_CHECKS).contains(&self.max_checks),
            "maxChecks",
            &format!("1..={MAX_CHECKS}"),
            self.max_checks.to_string(),
        );
        check(
            self.p99_max_ms.is_finite() && self.p99_max_ms > 0.0,
            "p99MaxMs",
            "more than 0",
            self.p99_max_ms.to_string(),
        );
    }
}

/// The built-in set: A/A, +1 pp and +5 pp of errors, +10 % and +50 % of latency, each
/// at 5, 50 and 500 requests per second.
pub fn defaults() -> Vec<Scenario> {
    let kinds: [(&str, f64, f64); 5] = [
        ("A/A", 0.0, 1.0),
        ("errors +1pp", 1.0, 1.0),
        ("errors +5pp", 5.0, 1.0),
        ("latency +10%", 0.0, 1.1),
        ("latency +50%", 0.0, 1.5),
    ];
    let mut out = Vec::new();
    for (name, errors, latency) in kinds {
        for rps in [5.0, 50.0, 500.0] {
            out.push(Scenario::new(name, rps, errors, latency));
        }
    }
    out
}

/// The file's form: every field but `rps` optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    scenarios: Vec<RawScenario>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    rps: f64,
    base_error_pct: Option<f64>,
    error_delta_pp: Option<f64>,
    median_ms: Option<f64>,
    sigma: Option<f64>,
    latency_factor: Option<f64>,
    /// A duration as in weir's config: `10s`, `1m`.
    interval: Option<String>,
    max_checks: Option<u32>,
    p99_max_ms: Option<f64>,
}

/// A name that says what differs from A/A.
fn describe(errors_pp: f64, factor: f64) -> String {
    let mut parts = Vec::new();
    if errors_pp != 0.0 {
        parts.push(format!("errors {errors_pp:+}pp"));
    }
    if factor != 1.0 {
        parts.push(format!(
            "latency {:+}%",
            ((factor - 1.0) * 1000.0).round() / 10.0
        ));
    }
    if parts.is_empty() {
        "A/A".to_string()
    } else {
        parts.join(", ")
    }
}

/// Reads a scenario file's text (YAML or JSON); every error at once.
pub fn parse(text: &str) -> Result<Vec<Scenario>, Vec<String>> {
    let raw: RawFile = serde_saphyr::from_str(text).map_err(|e| vec![e.to_string()])?;
    if raw.scenarios.is_empty() {
        return Err(vec![
            "scenarios: must list at least one scenario".to_string()
        ]);
    }
    let mut errors = Vec::new();
    let mut out = Vec::new();
    for (i, r) in raw.scenarios.into_iter().enumerate() {
        let path = format!("scenarios[{i}]");
        let errors_pp = r.error_delta_pp.unwrap_or(0.0);
        let factor = r.latency_factor.unwrap_or(1.0);
        let name = r.name.unwrap_or_else(|| describe(errors_pp, factor));
        let mut s = Scenario::new(&name, r.rps, errors_pp, factor);
        s.base_error_pct = r.base_error_pct.unwrap_or(s.base_error_pct);
        s.median_ms = r.median_ms.unwrap_or(s.median_ms);
        s.sigma = r.sigma.unwrap_or(s.sigma);
        s.max_checks = r.max_checks.unwrap_or(s.max_checks);
        s.p99_max_ms = r.p99_max_ms.unwrap_or(s.p99_max_ms);
        if let Some(text) = r.interval {
            match crate::config::parse_duration(&text) {
                Ok(d) if d.subsec_nanos() == 0 => s.interval_secs = d.as_secs(),
                Ok(d) => errors.push(format!(
                    "{path}.interval: must be whole seconds (got {})",
                    humantime::format_duration(d)
                )),
                Err(e) => errors.push(format!("{path}.interval: {e}")),
            }
        }
        s.validate(&path, &mut errors);
        out.push(s);
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}
