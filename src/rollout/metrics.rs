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
            judgement: None,
            name: metric.name.clone(),
            value: None,
            passed: false,
            reason: format!(
                "not enough traffic: {} {} requests in {}s, minRequests {}",
                summary.requests, role, snap.window_secs, source.min_requests
            ),
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
            judgement: None,
            name: metric.name.clone(),
            value: None,
            passed: true,
            reason: format!(
                "no {role} requests in {}s (minRequests 0)",
                snap.window_secs
            ),
        };
    }
    let verdict = metric.evaluate(value);
    MetricResult {
        dry_run: metric.dry_run,
        judgement: None,
        name: metric.name.clone(),
        value,
        passed: verdict.is_ok(),
        reason: match verdict {
            Ok(()) => format!("{} {role} requests", summary.requests),
            Err(e) => e,
        },
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
    }
}

/// Runs a Prometheus query (an inline `query` or a `prometheus` template) and judges
/// its value. A failure's reason names the template, if any.
pub async fn prometheus_result(
    client: &HttpClient,
    def: &CanaryDef,
    metric: &MetricSpec,
    source: &MetricSource,
    url: &str,
    query: &str,
) -> MetricResult {
    let vars = templates::vars(def, metric, source);
    let request = templates::render(query, &vars, source)
        .and_then(|q| Ok((q, templates::provider_headers(source, &vars)?)));
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
                judgement: None,
                name: metric.name.clone(),
                value: Some(v),
                passed: verdict.is_ok(),
                reason: verdict.err().unwrap_or_else(|| "query ok".to_string()),
            }
        }
        Err(reason) => MetricResult {
            dry_run: metric.dry_run,
            judgement: None,
            name: metric.name.clone(),
            value: None,
            passed: false,
            reason,
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

/// Measures every metric of the canary (stats read once per distinct window).
pub async fn measure(
    client: &HttpClient,
    def: &CanaryDef,
    fleet: &Fleet,
    state: &CanaryState,
) -> Vec<MetricResult> {
    let role = judged_role(state);
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
                        prometheus_result(&c, def, metric, source, url, query).await
                    }
                    (Ok(c), MetricKind::Web(web)) => {
                        let vars = templates::vars(def, metric, source);
                        web_metric::web_result(&c, metric, source, web, &vars).await
                    }
                    (Ok(_), _) => MetricResult {
                        name: metric.name.clone(),
                        reason: "not a provider metric".to_string(),
                        ..MetricResult::default()
                    },
                    (Err(e), _) => MetricResult {
                        name: metric.name.clone(),
                        value: None,
                        passed: false,
                        reason: templates::label(source, &format!("caFile: {e}")),
                        dry_run: false,
                        judgement: None,
                    },
                }
            }
            MetricKind::SuccessRate | MetricKind::Duration | MetricKind::BaselineComparison(_) => {
                let w = window_secs(metric);
                if let std::collections::btree_map::Entry::Vacant(slot) = cache.entry(w) {
                    slot.insert(fleet.stats(&def.route, w).await.map_err(|e| e.to_string()));
                }
                match cache.get(&w) {
                    Some(Ok(stats)) => match &source.kind {
                        MetricKind::BaselineComparison(params) => {
                            comparison_result(metric, params, stats, role)
                        }
                        _ => builtin_result(metric, source, stats, role),
                    },
                    Some(Err(e)) => MetricResult {
                        name: metric.name.clone(),
                        value: None,
                        passed: false,
                        reason: e.clone(),
                        ..MetricResult::default()
                    },
                    None => MetricResult {
                        name: metric.name.clone(),
                        value: None,
                        passed: false,
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
mod tests {
    use super::*;
    use crate::stats::RouteStats;

    fn metric(name: &str, min: Option<f64>, max: Option<f64>) -> MetricSpec {
        MetricSpec {
            name: name.into(),
            min,
            max,
            interval_ms: 5_000,
            dry_run: false,
        }
    }

    fn stats(ok: u64, failed: u64, latency_us: u64) -> RoleStats {
        let s = RouteStats::new(60);
        for i in 0..ok + failed {
            s.record(Role::Canary, 100, i >= ok, latency_us);
        }
        s.record(Role::Mirror, 100, false, 1_000);
        RoleStats {
            primary: s.snapshot(Role::Primary, 100, 5),
            canary: s.snapshot(Role::Canary, 100, 5),
            mirror: s.snapshot(Role::Mirror, 100, 5),
        }
    }

    const SR: MetricSource = MetricSource {
        kind: MetricKind::SuccessRate,
        min_requests: 10,
        template: None,
        variables: BTreeMap::new(),
        token: None,
        headers: Vec::new(),
    };

    #[test]
    fn success_rate_and_duration_are_judged_on_the_canary_role() {
        let m = metric("request-success-rate", Some(99.0), None);
        let good = builtin_result(&m, &SR, &stats(100, 0, 2_000), Role::Canary);
        assert!(good.passed, "{good:?}");
        assert_eq!(good.value, Some(100.0));
        let bad = builtin_result(&m, &SR, &stats(90, 10, 2_000), Role::Canary);
        assert!(!bad.passed);
        assert_eq!(bad.value, Some(90.0));
        assert!(bad.reason.contains("< 99"), "{}", bad.reason);
        let d = metric("request-duration", None, Some(100.0));
        let src = MetricSource {
            kind: MetricKind::Duration,
            ..SR
        };
        let slow = builtin_result(&d, &src, &stats(50, 0, 300_000), Role::Canary);
        assert!(!slow.passed);
        assert!(
            slow.value.is_some_and(|v| (v - 300.0).abs() < 300.0 * 0.05),
            "{slow:?}"
        );
        let fast = builtin_result(&d, &src, &stats(50, 0, 3_000), Role::Canary);
        assert!(fast.passed, "{fast:?}");
    }

    fn two_sides(canary_us: u64, primary_us: u64, n: u64) -> RoleStats {
        let s = RouteStats::new(60);
        for i in 0..n {
            // A spread of latencies on both sides, shifted by the difference of bases.
            s.record(Role::Canary, 100, false, canary_us + (i % 40) * 250);
            s.record(Role::Primary, 100, false, primary_us + (i % 40) * 250);
        }
        RoleStats {
            primary: s.snapshot(Role::Primary, 100, 5),
            canary: s.snapshot(Role::Canary, 100, 5),
            mirror: s.snapshot(Role::Mirror, 100, 5),
        }
    }

    #[test]
    fn baseline_comparison_scores_the_canary_against_the_primary() {
        let m = MetricSpec {
            min: Some(95.0),
            ..metric("baseline-comparison", None, None)
        };
        let p = CompareParams::DEFAULT;
        let same = comparison_result(&m, &p, &two_sides(20_000, 20_000, 300), Role::Canary);
        assert!(same.passed, "{same:?}");
        assert_eq!(same.value, Some(100.0));
        assert!(same.reason.contains("latency Pass"), "{}", same.reason);
        let slow = comparison_result(&m, &p, &two_sides(60_000, 20_000, 300), Role::Canary);
        assert!(!slow.passed);
        assert_eq!(slow.value, Some(50.0));
        assert!(slow.reason.contains("latency High"), "{}", slow.reason);
        let j = slow.judgement.as_ref().unwrap();
        assert_eq!(j.quantities[0].canary_requests, 300);
        let few = comparison_result(&m, &p, &two_sides(20_000, 20_000, 50), Role::Canary);
        assert!(!few.passed && few.value.is_none());
        assert!(
            few.reason.starts_with("not enough traffic"),
            "{}",
            few.reason
        );
        // A dry-run metric keeps its verdict for the record; the machine ignores it.
        let dry = MetricSpec {
            dry_run: true,
            ..m.clone()
        };
        let r = comparison_result(&dry, &p, &two_sides(60_000, 20_000, 300), Role::Canary);
        assert!(r.dry_run && !r.passed);
        let text = serde_json::to_string(&r).unwrap();
        assert!(
            text.contains("\"dryRun\":true") && text.contains("\"judgement\""),
            "{text}"
        );
        let back: MetricResult = serde_json::from_str(&text).unwrap();
        assert_eq!(back.judgement.map(|j| j.quantities.len()), Some(2));
        assert!(!serde_json::to_string(&same).unwrap().contains("dryRun"));
    }

    #[test]
    fn too_little_traffic_is_a_failed_check_unless_min_requests_is_zero() {
        let m = metric("request-success-rate", Some(99.0), None);
        let few = builtin_result(&m, &SR, &stats(9, 0, 1_000), Role::Canary);
        assert!(!few.passed);
        assert!(
            few.reason.starts_with("not enough traffic"),
            "{}",
            few.reason
        );
        let none = builtin_result(&m, &SR, &RoleStats::empty(5), Role::Canary);
        assert!(!none.passed, "no traffic is not a pass");
        let zero = MetricSource {
            min_requests: 0,
            ..SR
        };
        assert!(builtin_result(&m, &zero, &RoleStats::empty(5), Role::Canary).passed);
        // With traffic, minRequests 0 still judges the value.
        assert!(!builtin_result(&m, &zero, &stats(1, 1, 1_000), Role::Canary).passed);
    }

    #[test]
    fn mirroring_runs_are_judged_on_the_shadow_copies() {
        let st = CanaryState {
            mirror: true,
            ..CanaryState::default()
        };
        assert_eq!(judged_role(&st), Role::Mirror);
        assert_eq!(judged_role(&CanaryState::default()), Role::Canary);
    }

    #[test]
    fn interval_durations_and_prometheus_answers() {
        assert_eq!(promql_duration(60_000), "1m");
        assert_eq!(promql_duration(90_000), "90s");
        assert_eq!(promql_duration(500), "500ms");
        let vector = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000.1,"99.5"]}]}}"#;
        assert_eq!(parse_prometheus(vector), Ok(99.5));
        let scalar =
            br#"{"status":"success","data":{"resultType":"scalar","result":[1700000000.1,"3"]}}"#;
        assert_eq!(parse_prometheus(scalar), Ok(3.0));
        let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert!(parse_prometheus(empty).is_err());
        let nan = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"NaN"]}]}}"#;
        assert!(parse_prometheus(nan).unwrap_err().contains("NaN"));
        let err = br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        assert!(parse_prometheus(err).unwrap_err().contains("parse error"));
    }
}
