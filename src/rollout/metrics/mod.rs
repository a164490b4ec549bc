//! Metric checks: the built-ins from the proxies' own stats, custom ones from Prometheus.
//!
//! - `request-success-rate`: percent of non-5xx answers of the canary role over the
//!   metric's interval, summed over the fleet. While the run mirrors traffic (blue/green
//!   with mirroring, or the first mirrored tick of a canary run) the canary gets no user
//!   traffic, so the shadow copies (the `mirror` role) are judged instead.
//! - `request-duration`: the P99 latency in milliseconds of the same role and window
//!   (percentile of the summed histograms, never an average of percentiles).
//! - Both need at least `minRequests` (default 10) requests in the window: fewer is a
//!   failed check with the reason "not enough traffic". `minRequests: 0` lets an empty
//!   window pass, for strategies where the proxy routes no user traffic to the canary
//!   (blue/green without mirroring), which must then be tested by webhooks.
//! - `baseline-comparison`: the judge ([`crate::stats::compare`]): the same role against
//!   the primary in the same window; the value is its score (0..100), NoData (below
//!   `compare.minRequests` on a side) a failed check, "not enough traffic". The result
//!   carries the judgement (every quantity's class, estimate and interval).
//! - `dryRun` on any metric: measured and recorded like the others; the machine never
//!   counts it as a failed check.
//! - Custom: `query` is sent to `prometheusUrl` + `/api/v1/query`, a `metricTemplates`
//!   entry to its provider (Prometheus, or `web`: [`super::web_metric`]), with Flagger's
//!   template variables rendered ([`super::templates`]). The first sample of the result
//!   is the value; an empty result, NaN or an error is a failed check, whose reason names
//!   the template.
//!
//! The window of the stats is the metric's interval rounded up to whole seconds; the
//! current second counts, partly elapsed. Use intervals of a few seconds at least.

use std::collections::BTreeMap;
use std::time::Duration;

use super::convert::{CanaryDef, MetricKind, MetricSource};
use super::dataplane::{encode, Fleet, RoleStats};
use super::http::HttpClient;
use super::machine::{CanaryState, MetricResult};
use super::spec::MetricSpec;
use super::{templates, web_metric};
use crate::stats::compare::{self, CompareParams};
use crate::stats::Role;

mod judged;
use super::machine::CheckWindow;
pub use judged::{sequential_result, window_since, with_window};

/// Timeout of one Prometheus query.
pub const PROMETHEUS_TIMEOUT: Duration = Duration::from_secs(10);

/// Which role the built-ins judge in this state.
pub fn judged_role(state: &CanaryState) -> Role {
    if state.mirror {
        Role::Mirror
    } else {
        Role::Canary
    }
}

/// The stats window of a metric, in whole seconds (at least 1).
pub fn window_secs(metric: &MetricSpec) -> u64 {
    metric.interval_ms.div_ceil(1000).max(1)
}

/// A PromQL duration for `ms` (`90s`, `2m`, `500ms`).
pub fn promql_duration(ms: u64) -> String {
    crate::config::template::prometheus_duration(Duration::from_millis(ms))
}

/// Reads the first sample of a Prometheus `/api/v1/query` answer.
pub fn parse_prometheus(body: &[u8]) -> Result<f64, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not a Prometheus answer: {e}"))?;
    if v["status"] != "success" {
        let err = v["error"].as_str().unwrap_or("unknown error");
        return Err(format!("query failed: {err}"));
    }
    let data = &v["data"];
    let sample = match data["resultType"].as_str() {
        Some("vector") => data["result"]
            .as_array()
            .and_then(|r| r.first())
            .map(|s| &s["value"]),
        Some("scalar") => Some(&data["result"]),
        Some(other) => return Err(format!("unsupported result type {other}")),
        None => None,
    };
    let Some(sample) = sample else {
        return Err("no values found (empty result)".to_string());
    };
    let raw = sample
        .get(1)
        .and_then(|x| x.as_str())
        .ok_or_else(|| "malformed sample".to_string())?;
    let value: f64 = raw
        .parse()
        .map_err(|_| format!("sample {raw:?} is not a number"))?;
    if value.is_nan() {
        return Err("the query returned NaN".to_string());
    }
    Ok(value)
}

/// Judges a built-in metric on summed stats (pure).
pub fn builtin_result(
    metric: &MetricSpec,
    source: &MetricSource,
    stats: &RoleStats,
    role: Role,
) -> MetricResult {
    let snap = stats.role(role);
    let summary = snap.summary();
    if summary.requests < source.min_requests {
        return MetricResult {
            dry_run: metric.dry_run,
            name: metric.name.clone(),
            value: None,
            passed: false,
            reason: format!(
                "not enough traffic: {} {} requests in {}s, minRequests {}",
                summary.requests, role, snap.window_secs, source.min_requests
            ),
            ..Default::default()
        };
    }
    let value = match source.kind {
        MetricKind::Duration => summary.p99_ms,
        _ => summary.success_rate,
    };
    if value.is_none() {
        // minRequests 0 and no request: the user allowed an empty window.
        return MetricResult {
            dry_run: metric.dry_run,
            name: metric.name.clone(),
            value: None,
            passed: true,
            reason: format!(
                "no {role} requests in {}s (minRequests 0)",
                snap.window_secs
            ),
            ..Default::default()
        };
    }
    let verdict = metric.evaluate(value);
    MetricResult {
        dry_run: metric.dry_run,
        name: metric.name.clone(),
        value,
        passed: verdict.is_ok(),
        reason: match verdict {
            Ok(()) => format!("{} {role} requests", summary.requests),
            Err(e) => e,
        },
        ..Default::default()
    }
}

/// Judges the canary (or its shadow copies) against the primary in the same window
/// (pure): the value is the judge's score, `thresholdRange.min` the pass score, and
/// NoData (too few requests on a side) a failed check, "not enough traffic".
pub fn comparison_result(
    metric: &MetricSpec,
    params: &CompareParams,
    stats: &RoleStats,
    role: Role,
) -> MetricResult {
    let snap = stats.role(role);
    let judgement = compare::judge(snap, &stats.primary, params);
    let detail = judgement.describe();
    let (value, passed, reason) = match judgement.score {
        None => (
            None,
            false,
            format!(
                "not enough traffic: {} {role} and {} primary requests in {}s, minRequests {} per side",
                snap.requests, stats.primary.requests, snap.window_secs, params.min_requests
            ),
        ),
        Some(score) => match metric.evaluate(Some(score)) {
            Ok(()) => (Some(score), true, format!("score {score:.0}: {detail}")),
            Err(e) => (Some(score), false, format!("score {e}: {detail}")),
        },
    };
    MetricResult {
        name: metric.name.clone(),
        value,
        passed,
        reason,
        dry_run: metric.dry_run,
        judgement: Some(judgement),
        ..Default::default()
    }
}

/// Runs a Prometheus query (an inline `query` or a `prometheus` template) and judges
/// its value. A failure's reason names the template, if any.
pub async fn prometheus_result(
    client: &HttpClient,
    metric: &MetricSpec,
    source: &MetricSource,
    url: &str,
    query: &str,
    vars: &templates::TemplateVars,
) -> MetricResult {
    let request = templates::render(query, vars, source)
        .and_then(|q| Ok((q, templates::provider_headers(source, vars)?)));
    let value = match request {
        Ok((rendered, headers)) => run_query(client, &headers, url, &rendered)
            .await
            .map_err(|e| templates::label(source, &e)),
        Err(e) => Err(e),
    };
    match value {
        Ok(v) => {
            let verdict = metric.evaluate(Some(v));
            MetricResult {
                dry_run: metric.dry_run,
                name: metric.name.clone(),
                value: Some(v),
                passed: verdict.is_ok(),
                reason: verdict.err().unwrap_or_else(|| "query ok".to_string()),
                ..Default::default()
            }
        }
        Err(reason) => MetricResult {
            dry_run: metric.dry_run,
            name: metric.name.clone(),
            value: None,
            passed: false,
            reason,
            ..Default::default()
        },
    }
}

/// `GET {url}/api/v1/query?query=…` and the first sample of the answer.
async fn run_query(
    client: &HttpClient,
    headers: &[(&str, String)],
    url: &str,
    rendered: &str,
) -> Result<f64, String> {
    let full = format!("{url}/api/v1/query?query={}", encode(rendered));
    match client.get(&full, headers, PROMETHEUS_TIMEOUT).await {
        Ok(r) if (200..300).contains(&r.status) || r.status == 400 || r.status == 422 => {
            parse_prometheus(&r.body)
        }
        Ok(r) => Err(format!(
            "Prometheus answered HTTP {}: {}",
            r.status,
            r.snippet(200)
        )),
        Err(e) => Err(format!("Prometheus unreachable: {e}")),
    }
}

/// Measures every metric of the canary at `now_ms` (stats read once per distinct
/// window). A built-in check judges only the current run's traffic: its window is the
/// metric's interval cut at [`CanaryState::window_start_ms`].
pub async fn measure(
    client: &HttpClient,
    def: &CanaryDef,
    fleet: &Fleet,
    state: &CanaryState,
    now_ms: u64,
) -> Vec<MetricResult> {
    let role = judged_role(state);
    let start = state.window_start_ms();
    let mut cache: BTreeMap<u64, Result<RoleStats, String>> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, (metric, source)) in def
        .spec
        .analysis
        .metrics
        .iter()
        .zip(&def.metrics)
        .enumerate()
    {
        let result = match &source.kind {
            MetricKind::Prometheus { .. } | MetricKind::Web(_) => {
                let ca = def.metric_ca_files.get(i).cloned().flatten();
                match (client.trusting(ca.as_deref()), &source.kind) {
                    (Ok(c), MetricKind::Prometheus { url, query }) => {
                        let vars = templates::vars(def, metric, source, start, now_ms);
                        prometheus_result(&c, metric, source, url, query, &vars).await
                    }
                    (Ok(c), MetricKind::Web(web)) => {
                        let vars = templates::vars(def, metric, source, start, now_ms);
                        web_metric::web_result(&c, metric, source, web, &vars).await
                    }
                    (Ok(_), _) => MetricResult {
                        name: metric.name.clone(),
                        reason: "not a provider metric".to_string(),
                        ..MetricResult::default()
                    },
                    (Err(e), _) => MetricResult {
                        name: metric.name.clone(),
                        reason: templates::label(source, &format!("caFile: {e}")),
                        ..MetricResult::default()
                    },
                }
            }
            MetricKind::SuccessRate | MetricKind::Duration | MetricKind::BaselineComparison(_) => {
                let w = window_secs(metric);
                // Outside a run nothing is judged: an empty window says so.
                let age = start.map_or(0, |s| now_ms.saturating_sub(s));
                if let std::collections::btree_map::Entry::Vacant(slot) = cache.entry(w) {
                    let read = fleet
                        .stats(&def.route, w, Some(age))
                        .await
                        .map_err(|e| e.to_string());
                    slot.insert(read);
                }
                match cache.get(&w) {
                    Some(Ok(stats)) => {
                        let r = match (&metric.judge, &source.kind) {
                            (Some(judge), kind) => {
                                sequential_result(metric, judge, kind, stats, role)
                            }
                            (None, MetricKind::BaselineComparison(params)) => {
                                comparison_result(metric, params, stats, role)
                            }
                            (None, _) => builtin_result(metric, source, stats, role),
                        };
                        let secs = stats.role(role).window_secs;
                        with_window(
                            r,
                            CheckWindow {
                                since_ms: window_since(now_ms, secs, start),
                                secs,
                                role: role.as_str().to_string(),
                                requests: stats.role(role).requests,
                                primary_requests: stats.primary.requests,
                            },
                        )
                    }
                    Some(Err(e)) => MetricResult {
                        name: metric.name.clone(),
                        reason: e.clone(),
                        ..MetricResult::default()
                    },
                    None => MetricResult {
                        name: metric.name.clone(),
                        reason: "stats not read".to_string(),
                        ..MetricResult::default()
                    },
                }
            }
        };
        out.push(MetricResult {
            dry_run: metric.dry_run,
            ..result
        });
    }
    out
}

#[cfg(test)]
mod tests;
