//! The rollout series seen by a real Prometheus: a weir runs a release while a
//! `prometheus` scrapes it every second; the series move as the run does, Flagger's
//! names are there with `admin.flaggerMetrics`, every query of the shipped Grafana
//! dashboard returns data, and the shipped alert rules pass `promtool`.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use support::*;
use weir::app::RunningApp;
use weir::demo::traffic::TrafficSpec;
use weir::rollout::http::HttpClient;
use weir::rollout::{CanaryStatus, ManualCommand, Phase};

/// Bound of every wait (a release of a few 2s ticks and scrapes every second).
const WAIT: Duration = Duration::from_secs(90);

/// What the dashboard's Grafana variables stand for in the test.
const VARIABLES: [(&str, &str); 5] = [
    ("$__rate_interval", "5s"),
    ("$__interval", "2s"),
    ("$__range", "10m"),
    ("$canary", "app"),
    ("$route", "app"),
];

/// The request panels of Flagger's Grafana dashboard for Istio, written here in the shapes
/// its queries take, over one workload (`$workload`: the dashboard's `$primary` or
/// `$canary`) of `$namespace`: volume, success ratio, P50/P90/P99 latency, and incoming
/// requests by source and code. Each must return a series over weir's Istio-named series.
///
/// Left out, because no proxy can answer them: the USE panels (cAdvisor's `container_cpu_*`,
/// `container_memory_*`, `container_network_*` of the pods), the `mutual_tls` variants (weir
/// has no mesh mTLS: its series say `connection_security_policy="none"`, which the
/// `!="mutual_tls"` panels show), and the `reporter="source"` outgoing panels (the
/// backends' own calls, which weir does not see).
const ISTIO_DASHBOARD_PANELS: [&str; 6] = [
    r#"round(sum(rate(istio_requests_total{reporter="destination", destination_workload_namespace=~"$namespace", destination_workload=~"$workload"}[30s])), 0.001)"#,
    r#"sum(irate(istio_requests_total{reporter="destination", destination_workload_namespace=~"$namespace", destination_workload=~"$workload", response_code!~"5.*"}[30s])) / sum(irate(istio_requests_total{reporter="destination", destination_workload_namespace=~"$namespace", destination_workload=~"$workload"}[30s]))"#,
    r#"histogram_quantile(0.50, sum by (le) (irate(istio_request_duration_milliseconds_bucket{reporter="destination", destination_workload_namespace=~"$namespace", destination_workload=~"$workload"}[1m]))) / 1000"#,
    r#"histogram_quantile(0.90, sum by (le) (irate(istio_request_duration_milliseconds_bucket{reporter="destination", destination_workload_namespace=~"$namespace", destination_workload=~"$workload"}[1m]))) / 1000"#,
    r#"histogram_quantile(0.99, sum by (le) (irate(istio_request_duration_milliseconds_bucket{reporter="destination", destination_workload_namespace=~"$namespace", destination_workload=~"$workload"}[1m]))) / 1000"#,
    r#"round(sum by (source_workload, source_workload_namespace, response_code) (irate(istio_requests_total{reporter="destination", connection_security_policy!="mutual_tls", destination_workload_namespace=~"$namespace", destination_workload=~"$workload"}[30s])), 0.001)"#,
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-metrics-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

async fn start(yaml: &str) -> RunningApp {
    let cfg = weir::config::parse_yaml(yaml, "test.yaml", Path::new("."))
        .unwrap_or_else(|e| panic!("test config invalid:\n{e}\n---\n{yaml}"));
    weir::app::start(cfg).await.expect("start app")
}

fn config(blue: std::net::SocketAddr, green: std::net::SocketAddr, flagger: bool) -> String {
    format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\n  flaggerMetrics: {flagger}\nbackends:\n  app-blue:\n    endpoints: [\"{blue}\"]\n    revisionPath: /version\n  app-green:\n    endpoints: [\"{green}\"]\n    revisionPath: /version\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\ncanaries:\n  - name: app\n    route: app\n    watchRevision: true\n    analysis:\n      interval: 2s\n      threshold: 5\n      stepWeight: 25\n      maxWeight: 50\n      metrics:\n        - name: request-success-rate\n          thresholdRange: {{ min: 1 }}\n          interval: 5s\n        - name: request-duration\n          thresholdRange: {{ max: 60000 }}\n          interval: 5s\n"
    )
}

/// Polls the canary's status until `f` holds.
async fn wait_for(app: &RunningApp, what: &str, f: impl Fn(&CanaryStatus) -> bool) -> CanaryStatus {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = app.engine.status("app").expect("canary app");
        if f(&s) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; status:\n{s:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn command(app: &RunningApp, cmd: ManualCommand) {
    let out = app
        .engine
        .command("app", cmd.clone())
        .await
        .expect("command delivered");
    assert!(out.accepted, "{cmd:?} refused: {}", out.message);
}

/// Prometheus's HTTP API.
struct Prom {
    url: String,
    client: HttpClient,
}

impl Prom {
    async fn api(&self, path: &str, params: &[(&str, &str)]) -> Value {
        let q: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(params)
            .finish();
        let url = format!("{}{path}?{q}", self.url);
        let r = self
            .client
            .get(&url, &[], Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let v: Value = serde_json::from_slice(&r.body)
            .unwrap_or_else(|e| panic!("{url}: {e}: {}", String::from_utf8_lossy(&r.body)));
        assert_eq!(v["status"], "success", "{url}: {v}");
        v["data"].clone()
    }

    /// An instant query's samples: labels and value.
    async fn instant(&self, query: &str) -> Vec<(Value, f64)> {
        let d = self.api("/api/v1/query", &[("query", query)]).await;
        d["result"]
            .as_array()
            .expect("a vector")
            .iter()
            .map(|s| (s["metric"].clone(), value(&s["value"])))
            .collect()
    }

    /// A range query over `[start, now]` at 1s steps: each series' values.
    async fn range(&self, query: &str, start: f64) -> Vec<(Value, Vec<f64>)> {
        let end = format!("{:.3}", now_secs());
        let start = format!("{start:.3}");
        let d = self
            .api(
                "/api/v1/query_range",
                &[
                    ("query", query),
                    ("start", &start),
                    ("end", &end),
                    ("step", "1"),
                ],
            )
            .await;
        d["result"]
            .as_array()
            .unwrap_or_else(|| panic!("{query}: not a matrix: {d}"))
            .iter()
            .map(|s| {
                let vals = s["values"]
                    .as_array()
                    .expect("values")
                    .iter()
                    .map(value)
                    .collect();
                (s["metric"].clone(), vals)
            })
            .collect()
    }

    /// The single series of a range query, its consecutive repeats folded.
    async fn steps(&self, query: &str, start: f64) -> Vec<f64> {
        let r = self.range(query, start).await;
        assert_eq!(r.len(), 1, "{query}: {r:?}");
        let mut out: Vec<f64> = Vec::new();
        for v in &r[0].1 {
            if out.last() != Some(v) {
                out.push(*v);
            }
        }
        out
    }

    /// [`Prom::steps`] once its last value is `last` (a range query ends on a 1s step,
    /// so it may lag the newest sample an instant query already sees).
    async fn steps_ending(&self, query: &str, start: f64, last: f64) -> Vec<f64> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let steps = self.steps(query, start).await;
            if steps.last() == Some(&last) {
                return steps;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{query} never ended at {last}: {steps:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until the instant query has a sample equal to `want`.
    async fn until_value(&self, query: &str, want: f64) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let got = self.instant(query).await;
            if got.iter().any(|(_, v)| *v == want) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{query} never reached {want}: {got:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

fn value(pair: &Value) -> f64 {
    let s = pair[1].as_str().expect("a sample value");
    match s {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        s => s.parse().expect("a number"),
    }
}

fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// Every PromQL `expr` in the dashboard (panels, nested rows, annotations).
fn dashboard_exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr", Value::String(e)) => out.push(e.clone()),
                    _ => dashboard_exprs(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| dashboard_exprs(x, out)),
        _ => {}
    }
}

fn substitute(expr: &str) -> String {
    let mut e = expr.to_string();
    for (k, v) in VARIABLES {
        e = e.replace(k, v);
    }
    assert!(!e.contains('$'), "an unknown template variable in {expr}");
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_follows_a_release_and_every_dashboard_query_has_data() {
    if !tool_available(
        "prometheus",
        "a_real_prometheus_follows_a_release_and_every_dashboard_query_has_data",
        "Debian: apt-get install prometheus",
    ) {
        return;
    }
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let app = start(&config(v1.addr, v2.addr, true)).await;
    let dir = temp_dir("release");
    let prom_cfg = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: weir\n    static_configs:\n      - targets: [\"{}\"]\n",
        app.admin_addr
    );
    let prom_dir = dir.clone();
    let process = tokio::task::spawn_blocking(move || start_prometheus(&prom_cfg, &prom_dir))
        .await
        .expect("prometheus");
    let prom = Prom {
        url: process.url.clone(),
        client: HttpClient::new(),
    };
    let ready = eventually(WAIT, || async {
        prom.client
            .get(
                &format!("{}/-/ready", prom.url),
                &[],
                Duration::from_secs(1),
            )
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(ready, "prometheus did not become ready");
    let began = now_secs();
    let traffic = TrafficSpec::new(app.proxy_addr()).start();
    wait_for(&app, "initialisation", |s| s.phase == Phase::Initialized).await;
    // Scraped before the run: status 1, weight 0, no run yet.
    prom.until_value(r#"weir_canary_weight{canary="app",role="canary"}"#, 0.0)
        .await;
    prom.until_value(
        r#"weir_canary_runs_total{canary="app",result="succeeded"}"#,
        0.0,
    )
    .await;
    command(
        &app,
        ManualCommand::Start {
            revision: "v2".into(),
        },
    )
    .await;
    // Hold each step until Prometheus has scraped it, so the assertions below never
    // depend on a tick and a scrape lining up.
    let mut held = Vec::new();
    for w in [25u8, 50] {
        let s = wait_for(&app, "the next step", |s| {
            s.canary_weight >= w || (s.phase.is_idle() && s.revision.is_some())
        })
        .await;
        if s.phase != Phase::Progressing {
            break;
        }
        command(&app, ManualCommand::Pause).await;
        let w = app.engine.status("app").expect("app").canary_weight;
        prom.until_value(
            r#"weir_canary_weight{canary="app",role="canary"}"#,
            f64::from(w),
        )
        .await;
        prom.until_value(r#"weir_canary_status{canary="app"}"#, 0.0)
            .await;
        held.push(w);
        command(&app, ManualCommand::Resume).await;
    }
    assert!(!held.is_empty(), "no step was held");
    let done = wait_for(&app, "the end of the run", |s| {
        s.phase.is_idle() && s.revision.is_some()
    })
    .await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    prom.until_value(
        r#"weir_canary_runs_total{canary="app",result="succeeded"}"#,
        1.0,
    )
    .await;
    // Traffic on the swapped slots reaches Prometheus under the new backend label.
    prom.until_value(
        r#"sum(weir_requests_total{route="app",role="primary",backend="app-green"}) > bool 0"#,
        1.0,
    )
    .await;

    // The weight went 0 → the steps → 0; the status 1 → 0 → 1; one run more.
    let weights = prom
        .steps_ending(
            r#"weir_canary_weight{canary="app",role="canary"}"#,
            began,
            0.0,
        )
        .await;
    assert_eq!(weights.first(), Some(&0.0), "{weights:?}");
    assert_eq!(weights.last(), Some(&0.0), "{weights:?}");
    let middle = &weights[1..weights.len() - 1];
    for w in &held {
        assert!(
            middle.contains(&f64::from(*w)),
            "step {w} missing: {weights:?}"
        );
    }
    assert!(
        middle.windows(2).all(|p| p[0] < p[1]) && middle.iter().all(|w| [25.0, 50.0].contains(w)),
        "the steps rise through the plan: {weights:?}"
    );
    let primary = prom
        .steps_ending(
            r#"weir_canary_weight{canary="app",role="primary"}"#,
            began,
            100.0,
        )
        .await;
    assert_eq!(primary.first(), Some(&100.0), "{primary:?}");
    assert_eq!(primary.last(), Some(&100.0), "{primary:?}");
    let status = prom
        .steps_ending(r#"weir_canary_status{canary="app"}"#, began, 1.0)
        .await;
    assert!(status.contains(&0.0), "{status:?}");
    assert_eq!(status.last(), Some(&1.0), "{status:?}");
    let runs = prom
        .steps_ending(
            r#"weir_canary_runs_total{canary="app",result="succeeded"}"#,
            began,
            1.0,
        )
        .await;
    assert_eq!(runs, [0.0, 1.0], "{runs:?}");
    let phase = prom
        .instant(r#"weir_canary_phase{canary="app"} == 1"#)
        .await;
    assert_eq!(phase.len(), 1, "{phase:?}");
    assert_eq!(phase[0].0["phase"], "Succeeded");
    let revs = prom
        .instant(r#"weir_backend_revision_info{backend="app-green"}"#)
        .await;
    assert_eq!(revs.len(), 1, "{revs:?}");
    assert_eq!(revs[0].0["revision"], "v2");
    let checks = prom
        .instant(r#"weir_canary_metric_value{canary="app"}"#)
        .await;
    assert_eq!(checks.len(), 2, "{checks:?}");

    // Flagger's names and labels.
    let flagger = [
        (
            r#"flagger_canary_status{name="app",namespace="default"}"#,
            1.0,
        ),
        (
            r#"flagger_canary_weight{workload="app-primary",namespace="default"}"#,
            100.0,
        ),
        (
            r#"flagger_canary_weight{workload="app",namespace="default"}"#,
            0.0,
        ),
        (r#"flagger_canary_total{namespace="default"}"#, 1.0),
        (
            r#"flagger_canary_duration_seconds_count{name="app",namespace="default"}"#,
            1.0,
        ),
        (
            r#"flagger_canary_successes_total{name="app",namespace="default",deployment_strategy="canary",analysis_status="completed"}"#,
            1.0,
        ),
    ];
    for (q, want) in flagger {
        let got = prom.instant(q).await;
        assert_eq!(got.len(), 1, "{q}: {got:?}");
        assert_eq!(got[0].1, want, "{q}");
    }
    let analysed = prom
        .instant(r#"flagger_canary_metric_analysis{name="app",namespace="default",metric="request-success-rate"}"#)
        .await;
    assert!(analysed.len() == 1 && analysed[0].1 >= 1.0, "{analysed:?}");
    assert!(
        prom.instant("flagger_canary_status > 1").await.is_empty(),
        "Flagger's rollback alert does not fire after a success"
    );

    // Every query of the shipped dashboard returns a series over the release.
    let text = std::fs::read_to_string(repo().join("docs/grafana/weir-canary.json"))
        .expect("the dashboard");
    let dash: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    dashboard_exprs(&dash, &mut exprs);
    assert!(exprs.len() >= 10, "{exprs:?}");
    for e in &exprs {
        let q = substitute(e);
        let r = prom.range(&q, began).await;
        assert!(!r.is_empty(), "dashboard query returned no series: {q}");
    }
    // Its template variables list the canary and the route.
    for (label, metric) in [
        ("canary", "weir_canary_status"),
        ("route", "weir_requests_total"),
    ] {
        let d = prom
            .api(
                &format!("/api/v1/label/{label}/values"),
                &[("match[]", metric)],
            )
            .await;
        assert!(
            d.as_array().is_some_and(|a| a.iter().any(|v| v == "app")),
            "label_values({metric}, {label}): {d}"
        );
    }
    // The request panels of Flagger's Istio dashboard, in the queries' own shapes, over the
    // Istio-named series weir exports with admin.flaggerMetrics.
    let queries: Vec<String> = ["$primary", "$canary"]
        .iter()
        .flat_map(|w| ISTIO_DASHBOARD_PANELS.map(|q| q.replace("$workload", w)))
        .collect();
    assert!(queries.len() >= 10, "{queries:?}");
    for q in queries {
        let q = q
            .replace("$namespace", "default")
            .replace("$primary", "app-primary")
            .replace("$canary", "app");
        let r = prom.range(&q, began).await;
        assert!(
            !r.is_empty(),
            "Flagger's dashboard query returned no series: {q}"
        );
    }
    // Its variables: workloads by namespace.
    let d = prom
        .api(
            "/api/v1/label/destination_workload/values",
            &[(
                "match[]",
                "istio_requests_total{destination_workload_namespace=\"default\"}",
            )],
        )
        .await;
    for w in ["app", "app-primary"] {
        assert!(
            d.as_array().is_some_and(|a| a.iter().any(|v| v == w)),
            "workload {w} missing: {d}"
        );
    }
    traffic.stop().await;
    drop(process);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn flagger_names_are_exported_only_when_asked() {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let client = HttpClient::new();
    for flagger in [false, true] {
        let app = start(&config(v1.addr, v2.addr, flagger)).await;
        wait_for(&app, "initialisation", |s| s.phase == Phase::Initialized).await;
        let r = client
            .get(
                &format!("http://{}/metrics", app.admin_addr),
                &[],
                Duration::from_secs(5),
            )
            .await
            .expect("/metrics");
        let text = String::from_utf8_lossy(&r.body).into_owned();
        assert!(
            text.contains("weir_canary_status{canary=\"app\"} 1"),
            "{text}"
        );
        assert_eq!(
            text.contains("flagger_canary_status{name=\"app\",namespace=\"default\"} 1"),
            flagger,
            "{text}"
        );
        if flagger {
            every_family_is_documented(&text);
            promtool_accepts(&text);
        }
    }
}

/// Each metric family of a scrape is named in docs/metrics.md.
fn every_family_is_documented(text: &str) {
    let docs = std::fs::read_to_string(repo().join("docs/metrics.md")).expect("docs/metrics.md");
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert!(families.len() >= 20, "{families:?}");
    for f in families {
        assert!(
            docs.contains(&format!("`{f}`")),
            "{f} is not documented in docs/metrics.md"
        );
    }
}

/// `promtool check metrics` parses and lints the scrape (skipped without promtool, except
/// in CI).
fn promtool_accepts(text: &str) {
    if !tool_available(
        "promtool",
        "flagger_names_are_exported_only_when_asked",
        "Debian: apt-get install prometheus (it ships promtool)",
    ) {
        return;
    }
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write the scrape");
    let out = child.wait_with_output().expect("promtool");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The lints promtool may report are about names kept as Flagger and Istio spell them
    // (a gauge ending in `_total`, a histogram in milliseconds); a parse error or any
    // other lint fails.
    let problems: Vec<&str> = report
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !l.starts_with("flagger_canary_total non-counter metrics"))
        .filter(|l| !l.starts_with("istio_request_duration_milliseconds use base unit"))
        .collect();
    assert!(
        problems.is_empty(),
        "promtool check metrics:\n{report}\n---\n{text}"
    );
}

#[test]
fn the_alert_rules_pass_promtool() {
    if !tool_available(
        "promtool",
        "the_alert_rules_pass_promtool",
        "Debian: apt-get install prometheus (it ships promtool)",
    ) {
        return;
    }
    let dir = repo().join("docs/grafana");
    for args in [
        ["check", "rules", "weir-alerts.yaml"],
        ["test", "rules", "weir-alerts.test.yaml"],
    ] {
        let out = std::process::Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("run promtool");
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
