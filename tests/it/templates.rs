//! End-to-end tests of `metricTemplates` (DESIGN §13): whole runs of the engine whose
//! metrics come from templates, served by a fake Prometheus and a fake JSON API on
//! 127.0.0.1 that record what they were asked; a provider that is down; and `weir check`
//! on a config with template errors.
//!
//! The template metrics need no proxy traffic (their values come from the providers),
//! so the runs are deterministic: every wait is a bounded poll on the engine's status.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::*;
use weir::app::RunningApp;
use weir::rollout::{CanaryStatus, ManualCommand, Phase};

/// Longest wait for any one condition.
const WAIT: Duration = Duration::from_secs(40);

/// A weir with slots `app-blue` / `app-green`, route `web`, canary `app` on it with a
/// 300 ms interval, `top` more top-level YAML and `metrics` its metric list (8 spaces).
fn config(blue: &str, green: &str, top: &str, metrics: &str) -> String {
    format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\n{top}backends:\n  app-blue:\n    endpoints: [\"{blue}\"]\n  app-green:\n    endpoints: [\"{green}\"]\nroutes:\n  - name: web\n    primary: app-blue\n    canary: app-green\ncanaries:\n  - name: app\n    route: web\n    analysis:\n      interval: 300ms\n      threshold: 2\n      stepWeight: 50\n      maxWeight: 50\n      metrics:\n{metrics}"
    )
}

async fn start(yaml: &str) -> RunningApp {
    let cfg = weir::config::parse_yaml(yaml, "test.yaml", std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("test config invalid:\n{e}\n---\n{yaml}"));
    weir::app::start(cfg).await.expect("start app")
}

/// Starts a run of `app` and waits for its end.
async fn run(app: &RunningApp) -> CanaryStatus {
    let deadline = tokio::time::Instant::now() + WAIT;
    let status = || app.engine.status("app").expect("canary app");
    while status().phase != Phase::Initialized {
        assert!(tokio::time::Instant::now() < deadline, "{:#?}", status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = app
        .engine
        .command(
            "app",
            ManualCommand::Start {
                revision: "v2".into(),
            },
        )
        .await
        .expect("command delivered");
    assert!(out.accepted, "{}", out.message);
    loop {
        let s = status();
        if matches!(s.phase, Phase::Succeeded | Phase::Failed) && s.revision.is_some() {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run did not end: {s:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A weir started by [`run_once`], after its run.
struct Ran {
    app: RunningApp,
    /// Held: the slots stop when dropped (the template metrics never send them traffic).
    _slots: (weir::echo::EchoHandle, weir::echo::EchoHandle),
    /// The run's end.
    done: CanaryStatus,
}

/// Starts a weir from [`config`] with `top` and `metrics` on two echo slots and
/// [`run`]s `app` to its end.
async fn run_once(top: &str, metrics: &str) -> Ran {
    let slots = (echo("v1").await, echo("v2").await);
    let app = start(&config(
        &slots.0.addr.to_string(),
        &slots.1.addr.to_string(),
        top,
        metrics,
    ))
    .await;
    let done = run(&app).await;
    Ran {
        app,
        _slots: slots,
        done,
    }
}

/// An HTTP/1.1 200 answer with a JSON body.
fn json(body: &str) -> Reply {
    Reply::Send(
        vec![format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()],
        false,
    )
}

/// The request target (`/path?query`) of a request head.
fn target(head: &str) -> String {
    head.split_whitespace().nth(1).unwrap_or("").to_string()
}

/// The decoded `query` parameter of a request target.
fn query_param(target: &str) -> Option<String> {
    let (_, q) = target.split_once('?')?;
    form_urlencoded::parse(q.as_bytes())
        .find(|(k, _)| k == "query")
        .map(|(_, v)| v.into_owned())
}

/// What a fake provider was asked: request heads, in order.
type Seen = Arc<Mutex<Vec<String>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_template_is_rendered_with_flaggers_variables_and_judged() {
    // The fake Prometheus answers 0.5 (% errors) to any query.
    let prom = scripted(|_, _| {
        json(r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000,"0.5"]}]}}"#)
    })
    .await;
    let top = format!(
        "metricTemplates:\n  error-rate:\n    provider: {{ type: prometheus, address: \"http://{}\", headers: [{{ key: X-Scope-OrgID, value: \"tenant-{{{{ name }}}}\" }}] }}\n    query: |\n      100 - sum(rate(weir_requests_total{{route=\"{{{{ target }}}}\",role=\"canary\",code!~\"{{{{ variables.code }}}}\"}}[{{{{ interval }}}}]))\n          / sum(rate(weir_requests_total{{route=\"{{{{ target }}}}\",role=\"canary\"}}[{{{{interval}}}}])) * 100 + 0 * count(up{{job=\"{{{{ name }}}}\",ns=\"{{{{ namespace }}}}\"}})\n",
        prom.addr
    );
    let metrics = "        - name: error-rate\n          templateRef: { name: error-rate, namespace: default }\n          templateVariables: { code: \"5..\" }\n          thresholdRange: { max: 1 }\n          interval: 1m\n";
    let ran = run_once(&top, metrics).await;
    let done = &ran.done;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    let check = done
        .events
        .iter()
        .flat_map(|e| e.checks.iter())
        .find(|c| c.name == "error-rate")
        .expect("an error-rate check");
    assert!(check.passed && check.value == Some(0.5), "{check:?}");
    let heads = prom.heads.lock().unwrap().clone();
    assert!(!heads.is_empty());
    let want = "100 - sum(rate(weir_requests_total{route=\"web\",role=\"canary\",code!~\"5..\"}[1m]))\n    / sum(rate(weir_requests_total{route=\"web\",role=\"canary\"}[1m])) * 100 + 0 * count(up{job=\"app\",ns=\"default\"})\n";
    for h in &heads {
        let t = target(h);
        assert!(t.starts_with("/api/v1/query?"), "{t}");
        assert_eq!(query_param(&t).as_deref(), Some(want), "{h}");
        assert_eq!(header(h, "x-scope-orgid"), Some("tenant-app"), "{h}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_template_gets_its_value_at_the_json_path() {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let api = scripted(move |_, head| {
        s.lock().unwrap().push(head.to_string());
        json(r#"{"data":{"route":"web","latency":{"p99":"42.5"}}}"#)
    })
    .await;
    let token = std::env::temp_dir().join(format!("weir-templates-token-{}", std::process::id()));
    std::fs::write(&token, "s3cret\n").unwrap();
    let top = format!(
        "metricTemplates:\n  latency:\n    provider:\n      type: web\n      url: \"http://{}/stats?route={{{{ target }}}}&canary={{{{ name }}}}&window={{{{ interval }}}}\"\n      jsonPath: \"{{$.data.latency.p99}}\"\n      headers:\n        - {{ key: X-Scope-OrgID, value: \"{{{{ variables.tenant }}}}\" }}\n      timeoutSeconds: 5\n      tokenFile: {}\n",
        api.addr,
        token.display()
    );
    let metrics = "        - name: p99\n          templateRef: { name: latency }\n          templateVariables: { tenant: team-a }\n          thresholdRange: { max: 100 }\n          interval: 30s\n";
    let ran = run_once(&top, metrics).await;
    let done = &ran.done;
    let _ = std::fs::remove_file(&token);
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    let check = done
        .events
        .iter()
        .flat_map(|e| e.checks.iter())
        .find(|c| c.name == "p99")
        .expect("a p99 check");
    assert!(check.passed && check.value == Some(42.5), "{check:?}");
    let heads = seen.lock().unwrap().clone();
    assert!(!heads.is_empty());
    for h in &heads {
        assert_eq!(target(h), "/stats?route=web&canary=app&window=30s", "{h}");
        assert_eq!(header(h, "x-scope-orgid"), Some("team-a"), "{h}");
        assert_eq!(header(h, "authorization"), Some("Bearer s3cret"), "{h}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_is_down_or_answers_nonsense_fails_the_checks_and_rolls_back() {
    let (_held, down) = refusing_addr();
    let nonsense = scripted(|_, _| json(r#"{"data":{"p99":"fast"}}"#)).await;
    let broken = scripted(|_, _| {
        Reply::Send(
            vec![b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 8\r\n\r\nupstream".to_vec()],
            false,
        )
    })
    .await;
    let cases = [
        (
            format!("metricTemplates:\n  errors:\n    provider: {{ type: prometheus, address: \"http://{down}\" }}\n    query: sum(up)\n"),
            "template errors: Prometheus unreachable",
        ),
        (
            format!("metricTemplates:\n  errors:\n    provider: {{ type: web, url: \"http://{}/x\", jsonPath: \"{{$.data.p99}}\" }}\n", nonsense.addr),
            "template errors: the value at jsonPath $.data.p99 is not a number: \"fast\"",
        ),
        (
            format!("metricTemplates:\n  errors:\n    provider: {{ type: web, url: \"http://{}/x\" }}\n", broken.addr),
            "template errors: web provider answered HTTP 503: upstream",
        ),
    ];
    let metrics = "        - name: errors\n          templateRef: { name: errors }\n          thresholdRange: { max: 1 }\n";
    for (top, reason) in cases {
        let ran = run_once(&top, metrics).await;
        let done = &ran.done;
        assert_eq!(done.phase, Phase::Failed, "{reason}: {done:#?}");
        let failed: Vec<_> = done
            .events
            .iter()
            .filter(|e| e.reason == "CheckFailed")
            .collect();
        assert_eq!(failed.len(), 2, "threshold 2: {done:#?}");
        for e in &failed {
            assert!(
                e.message.contains(reason),
                "{reason:?} not in {:?}",
                e.message
            );
        }
        assert!(
            done.events.iter().any(|e| e.reason == "RolledBack"),
            "{done:#?}"
        );
        assert_eq!(done.canary_weight, 0);
        ran.app.shutdown().await;
    }
}

#[test]
fn weir_check_names_every_template_error_with_its_line() {
    let dir = std::env::temp_dir().join(format!("weir-templates-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("templates.yaml");
    let top = "metricTemplates:\n  error-rate:\n    provider: { type: prometheus, address: \"http://127.0.0.1:9090\" }\n    query: \"sum(rate(x{route=\\\"{{ target }}\\\",code=\\\"{{ variables.code }}\\\"}[{{ window }}]))\"\n";
    let metrics = "        - name: a\n          templateRef: { name: error-rate }\n          thresholdRange: { max: 1 }\n        - name: b\n          templateRef: { name: latency }\n          thresholdRange: { max: 1 }\n";
    std::fs::write(&path, config("127.0.0.1:9", "127.0.0.1:10", top, metrics)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["check", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for needle in [
        "error: metricTemplates.error-rate.query: unknown template variable {{ window }}",
        "templates.yaml:9:12\n",
        "error: canaries[0].analysis.metrics[1].templateRef.name: unknown metric template \"latency\"; defined: error-rate",
        "templates.yaml:32:32\n",
        "due to 2 previous errors",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
    // The query failed to parse, so its variables are not reported a second time.
    assert!(
        !err.lines()
            .any(|l| l.starts_with("error:") && l.contains("variables.code")),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_changed_template_is_named_by_a_reload_as_applied_at_the_next_start() {
    let dir = std::env::temp_dir().join(format!("weir-templates-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("weir.yaml");
    let top = |q: &str| {
        format!("metricTemplates:\n  t:\n    provider: {{ type: prometheus, address: \"http://127.0.0.1:9090\" }}\n    query: {q}\n")
    };
    let metrics = "        - name: m\n          templateRef: { name: t }\n          thresholdRange: { max: 1 }\n";
    std::fs::write(
        &path,
        config("127.0.0.1:9", "127.0.0.1:10", &top("up"), metrics),
    )
    .unwrap();
    let (raw, cfg) = weir::config::load_file_with_raw(&path).unwrap();
    let started = weir::reload::Started::new(raw);
    let store = weir::dataplane::store::TableStore::new(cfg.table);
    std::fs::write(
        &path,
        config("127.0.0.1:9", "127.0.0.1:10", &top("sum(up)"), metrics),
    )
    .unwrap();
    let r = weir::reload::reload(&path, &started, &store).unwrap();
    assert_eq!(r.needs_restart, vec!["metricTemplates"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// DESIGN §13's template, verbatim, against a real Prometheus scraping this weir: a
/// healthy canary is promoted on it, a canary failing half its requests is rolled back
/// by it. Prometheus finds weir through a file-discovery target written once the admin
/// listener is bound, so no port is picked in advance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_design_template_judges_canaries_from_a_real_prometheus() {
    if !tool_available(
        "prometheus",
        "the_design_template_judges_canaries_from_a_real_prometheus",
        "Debian: apt-get install prometheus",
    ) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("weir-templates-prom-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let targets = dir.join("targets.json");
    std::fs::write(&targets, "[]").unwrap();
    let prom_cfg = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: weir\n    file_sd_configs:\n      - files: [\"{}\"]\n        refresh_interval: 1s\n",
        targets.display()
    );
    let prom_dir = dir.clone();
    let prom = tokio::task::spawn_blocking(move || start_prometheus(&prom_cfg, &prom_dir))
        .await
        .expect("prometheus");
    let top = format!(
        "metricTemplates:\n  error-rate:\n    provider: {{ type: prometheus, address: \"{}\" }}   # or type: web (GET JSON, jsonPath)\n    query: |\n      100 - sum(rate(weir_requests_total{{route=\"{{{{ target }}}}\",role=\"canary\",code!~\"5..\"}}[{{{{ interval }}}}]))\n          / sum(rate(weir_requests_total{{route=\"{{{{ target }}}}\",role=\"canary\"}}[{{{{ interval }}}}])) * 100\n",
        prom.url
    );
    // Early checks see no canary series yet (a failed check, "no values found"): the
    // threshold leaves room for them, and the failing canary still exceeds it.
    let metrics = "        - name: error-rate\n          templateRef: { name: error-rate, namespace: default }\n          templateVariables: { route: app }\n          thresholdRange: { max: 1 }\n          interval: 5s\n";
    // Each run has a route of its own, so that the series of one never count in the other.
    for (route, error_rate, want) in [
        ("web-ok", 0.0, Phase::Succeeded),
        ("web-bad", 0.5, Phase::Failed),
    ] {
        let v1 = echo("v1").await;
        let v2 = echo_with("v2", error_rate, Duration::ZERO).await;
        let yaml = config(&v1.addr.to_string(), &v2.addr.to_string(), &top, metrics)
            .replace(
                "interval: 300ms\n      threshold: 2",
                "interval: 1s\n      threshold: 15",
            )
            .replace("  - name: web\n", &format!("  - name: {route}\n"))
            .replace("    route: web\n", &format!("    route: {route}\n"));
        let app = start(&yaml).await;
        std::fs::write(
            &targets,
            format!("[{{\"targets\": [\"{}\"]}}]", app.admin_addr),
        )
        .unwrap();
        let traffic = weir::demo::traffic::TrafficSpec::new(app.proxy_addr()).start();
        let done = run(&app).await;
        traffic.stop().await;
        assert_eq!(done.phase, want, "error rate {error_rate}: {done:#?}");
        let values: Vec<f64> = done
            .events
            .iter()
            .flat_map(|e| e.checks.iter())
            .filter(|c| c.name == "error-rate")
            .filter_map(|c| c.value)
            .collect();
        if want == Phase::Succeeded {
            assert!(values.iter().any(|v| *v <= 1.0), "{values:?}");
        } else {
            // Half the canary's answers are 500s: the error rate is far above 1 %.
            assert!(values.iter().any(|v| *v > 20.0), "{values:?}");
        }
        app.shutdown().await;
    }
    drop(prom);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn weir_serve_refuses_a_template_error_as_weir_check_does() {
    let dir = std::env::temp_dir().join(format!("weir-templates-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("serve.yaml");
    let metrics = "        - name: a\n          templateRef: { name: nope }\n          thresholdRange: { max: 1 }\n";
    std::fs::write(&path, config("127.0.0.1:9", "127.0.0.1:10", "", metrics)).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "-c"])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("weir serve started with an undefined templateRef");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("canaries[0].analysis.metrics[0].templateRef.name: unknown metric template \"nope\": metricTemplates is empty"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
