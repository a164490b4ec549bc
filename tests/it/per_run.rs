//! End to end: a check counts only the current run's requests to the backend now in
//! the canary role (never the previous run's, on the same slot or on the other one
//! before a swap), and the sequential judge holds a run it cannot decide yet.
//!
//! Real sockets on 127.0.0.1, `weir echo` backends reporting their version at
//! `/version`, a 1 s analysis interval. The traffic is sent by the canary's own
//! `rollout` webhook, called before the metrics of every analysed tick: each call sends
//! a fixed batch, so every check has its requests whatever the machine's load, and the
//! test knows which run they belong to.

use crate::support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::*;
use weir::app::RunningApp;
use weir::rollout::machine::MetricResult;
use weir::rollout::{CanaryStatus, Phase};

/// Longest wait for any one condition.
const WAIT: Duration = Duration::from_secs(60);

/// Timeout of one of the test's requests: a bound for a hung exchange.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The `rollout` webhook: every call sends `batch` requests through the proxy and
/// counts the answers per version.
struct Traffic {
    server: weir::demo::HookServer,
    proxy: Arc<Mutex<Option<SocketAddr>>>,
    /// Answers per version, and failures, of every batch so far.
    answers: Arc<Mutex<Vec<(String, u16)>>>,
}

impl Traffic {
    async fn start(batch: u64) -> Traffic {
        let proxy: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let answers: Arc<Mutex<Vec<(String, u16)>>> = Arc::default();
        let (p, a) = (proxy.clone(), answers.clone());
        let handler: weir::demo::HookHandler = Arc::new(move |_path, _payload| {
            let (p, a) = (p.clone(), a.clone());
            Box::pin(async move {
                let to = *p.lock().unwrap();
                if let Some(proxy) = to {
                    let c = client();
                    for _ in 0..batch {
                        let got = exchange(&c, proxy).await;
                        a.lock().unwrap().push(got);
                    }
                }
                (200, String::new())
            })
        });
        let server = weir::demo::HookServer::spawn_with(handler)
            .await
            .expect("start the hook");
        Traffic {
            server,
            proxy,
            answers,
        }
    }

    fn send_through(&self, app: &RunningApp) {
        *self.proxy.lock().unwrap() = Some(app.proxy_addr());
    }

    /// Answers of `version` so far, and how many of them were 5xx.
    fn of(&self, version: &str) -> (u64, u64) {
        let a = self.answers.lock().unwrap();
        let mine: Vec<_> = a.iter().filter(|(v, _)| v == version).collect();
        let failed = mine.iter().filter(|(_, s)| *s >= 500).count();
        (mine.len() as u64, failed as u64)
    }
}

async fn exchange(c: &TestClient, proxy: SocketAddr) -> (String, u16) {
    let (status, version) = version_exchange(c, proxy, "app.test", REQUEST_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("request through the proxy failed: {e}"));
    (version, status)
}

/// Route `app` on slots `app-blue` (primary) and `app-green`, a canary stepping
/// straight to 50 % then promoting, `metrics` (YAML at 6 spaces), the traffic hook.
fn config(
    blue: SocketAddr,
    green: SocketAddr,
    hook: &str,
    threshold: u32,
    metrics: &str,
) -> String {
    format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\nbackends:\n  app-blue:\n    endpoints: [\"{blue}\"]\n    revisionPath: /version\n  app-green:\n    endpoints: [\"{green}\"]\n    revisionPath: /version\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\ncanaries:\n  - name: app\n    route: app\n    analysis:\n      interval: 1s\n      threshold: {threshold}\n      stepWeight: 50\n      maxWeight: 50\n      webhooks:\n        - name: traffic\n          type: rollout\n          url: {hook}\n          timeout: 60s\n      metrics:\n{metrics}"
    )
}

async fn start(yaml: &str) -> RunningApp {
    let cfg = weir::config::parse_yaml(yaml, "per-run.yaml", std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("config invalid:\n{e}\n---\n{yaml}"));
    weir::app::start(cfg).await.expect("start app")
}

async fn wait(app: &RunningApp, what: &str, f: impl Fn(&CanaryStatus) -> bool) -> CanaryStatus {
    wait_canary(app, "app", WAIT, what, f).await
}

/// Deploys `addr` on `slot` through the admin API (a new revision there).
async fn deploy(app: &RunningApp, slot: &str, addr: SocketAddr) {
    let req = http::Request::put(format!(
        "http://{}/api/v1/backends/{slot}/endpoints",
        app.admin_addr
    ))
    .header("content-type", "application/json")
    .body(http_body_util::Full::new(bytes::Bytes::from(format!(
        "{{\"endpoints\":[\"{addr}\"]}}"
    ))))
    .expect("request");
    let r = send(&client(), req).await;
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
}

/// The first metric check of the run of `revision`, by name.
fn first_check(s: &CanaryStatus, revision: &str, name: &str) -> MetricResult {
    s.events
        .iter()
        .filter(|e| e.revision.as_deref() == Some(revision))
        .flat_map(|e| &e.checks)
        .find(|c| c.name == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} check of {revision}: {s:#?}"))
}

/// Waits for the `n`-th finished run, asserts it ended in `phase` and returns the
/// status and the run's revision.
async fn run_ended(app: &RunningApp, n: usize, phase: Phase) -> (CanaryStatus, String) {
    let s = wait(app, &format!("run {n} to end"), |s| s.history.len() >= n).await;
    let run = &s.history[n - 1];
    assert_eq!(run.result, phase, "{s:#?}");
    let rev = run.revision.clone().expect("a run has a revision");
    (s, rev)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_counts_only_this_runs_requests_to_the_backend_in_the_role() {
    let v1 = echo("v1").await;
    let v2 = echo("v2").await;
    let v3 = echo_with("v3", 1.0, Duration::ZERO).await;
    let v4 = echo("v4").await;
    let traffic = Traffic::start(40).await;
    // A window far longer than the test: only the run's start can cut it.
    let metrics = "        - name: request-success-rate\n          thresholdRange: { min: 99 }\n          interval: 10m\n          minRequests: 5\n";
    let yaml = config(v1.addr, v1.addr, &traffic.server.url("/t"), 1, metrics);
    let app = start(&yaml).await;
    traffic.send_through(&app);
    wait(&app, "initialisation", |s| s.phase == Phase::Initialized).await;

    // v2 on the idle green slot: promoted, the slots swap (green primary, blue idle).
    deploy(&app, "app-green", v2.addr).await;
    let (s, _) = run_ended(&app, 1, Phase::Succeeded).await;
    assert_eq!(s.canary_backend.as_deref(), Some("app-blue"), "{s:#?}");
    assert!(traffic.of("v2").0 > 0);

    // v3 (every answer a 500) on blue: its first check counts v3 alone, not the v2
    // requests green served as the canary minutes of window ago.
    deploy(&app, "app-blue", v3.addr).await;
    let (s, v3_rev) = run_ended(&app, 2, Phase::Failed).await;
    let c = first_check(&s, &v3_rev, "request-success-rate");
    assert_eq!(
        c.value,
        Some(0.0),
        "v2's successes leaked into v3's check: {c:#?}"
    );
    let w = c.window.as_ref().expect("the check names its window");
    let (v3_answers, v3_failed) = traffic.of("v3");
    assert_eq!(v3_answers, v3_failed);
    assert!(
        w.requests > 0 && w.requests <= v3_answers,
        "{w:?}, {v3_answers} v3 answers"
    );
    assert!(
        c.reason
            .contains(&format!("{} canary requests since ", w.requests)),
        "{}",
        c.reason
    );

    // v4 (healthy) on the same blue slot right after: its first check is 100 %, none of
    // v3's failures in it.
    deploy(&app, "app-blue", v4.addr).await;
    let (s, v4_rev) = run_ended(&app, 3, Phase::Succeeded).await;
    let c = first_check(&s, &v4_rev, "request-success-rate");
    assert_eq!(
        c.value,
        Some(100.0),
        "v3's failures leaked into v4's check: {c:#?}"
    );
    assert!(c.passed, "{c:#?}");
    let w = c.window.as_ref().expect("window");
    assert!(w.requests <= traffic.of("v4").0, "{w:?}");
    let started = s
        .events
        .iter()
        .find(|e| e.reason == "Started" && e.revision.as_deref() == Some(v4_rev.as_str()))
        .expect("v4 Started");
    assert!(
        w.since_ms >= started.time_ms,
        "window from {} before the start {}",
        w.since_ms,
        started.time_ms
    );
    drop((v1, v2, v3, v4));
}

/// The success rate judged by the sequential test against the primary: 5 points of
/// errors are worth catching, and a false rollback may happen once in a thousand runs.
fn judged(max_holds: u32) -> String {
    format!(
        "        - name: request-success-rate\n          interval: 10m\n          minRequests: 10\n          judge:\n            sequential: {{ alpha: 0.001 }}\n            minimumEffect: {{ errors: 5 }}\n            onInconclusive: pause\n            maxHolds: {max_holds}\n"
    )
}

fn events(s: &CanaryStatus, reason: &str) -> usize {
    s.events.iter().filter(|e| e.reason == reason).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sequential_judge_promotes_a_a_runs_and_rolls_back_a_20_percent_error_canary() {
    // Every version fails 2 % of its requests.
    let v1 = echo_with("v1", 0.02, Duration::ZERO).await;
    let traffic = Traffic::start(200).await;
    let yaml = config(v1.addr, v1.addr, &traffic.server.url("/t"), 1, &judged(100));
    let app = start(&yaml).await;
    traffic.send_through(&app);
    wait(&app, "initialisation", |s| s.phase == Phase::Initialized).await;
    let mut keep = Vec::new();
    for n in 1..=3 {
        let v = echo_with(&format!("a{n}"), 0.02, Duration::ZERO).await;
        let slot = app.engine.status("app").unwrap().canary_backend.unwrap();
        deploy(&app, &slot, v.addr).await;
        keep.push(v);
        let (s, rev) = run_ended(&app, n, Phase::Succeeded).await;
        assert_eq!(events(&s, "CheckFailed"), 0, "{s:#?}");
        let passed = s
            .events
            .iter()
            .filter(|e| e.revision.as_deref() == Some(rev.as_str()))
            .flat_map(|e| &e.checks)
            .find(|c| c.passed)
            .expect("a passing check");
        let j = passed
            .sequential
            .as_ref()
            .expect("the sequential judgement");
        assert_eq!(j.quantities[0].name, "errors");
        assert!(j.quantities[0].upper.is_some_and(|u| u < 5.0), "{j:?}");
    }
    // A canary failing 20 % of its requests: failed at its first decided check.
    let bad = echo_with("bad", 0.2, Duration::ZERO).await;
    let slot = app.engine.status("app").unwrap().canary_backend.unwrap();
    deploy(&app, &slot, bad.addr).await;
    let (s, rev) = run_ended(&app, 4, Phase::Failed).await;
    let failed = s
        .events
        .iter()
        .filter(|e| e.reason == "CheckFailed" && e.revision.as_deref() == Some(rev.as_str()))
        .flat_map(|e| &e.checks)
        .find(|c| c.name == "request-success-rate")
        .expect("a failed check");
    assert!(
        failed.reason.starts_with("fail: errors fail"),
        "{}",
        failed.reason
    );
    assert!(!failed.inconclusive);
    drop((v1, keep, bad));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_two_requests_a_second_the_run_holds_then_pauses_without_a_failed_check() {
    let v1 = echo_with("v1", 0.02, Duration::ZERO).await;
    let v2 = echo_with("v2", 0.02, Duration::ZERO).await;
    // Two requests per 1 s check: about one for each side.
    let traffic = Traffic::start(2).await;
    let yaml = config(v1.addr, v1.addr, &traffic.server.url("/t"), 1, &judged(3));
    let app = start(&yaml).await;
    traffic.send_through(&app);
    wait(&app, "initialisation", |s| s.phase == Phase::Initialized).await;
    deploy(&app, "app-green", v2.addr).await;
    let s = wait(&app, "the pause", |s| s.paused).await;
    assert_eq!(s.phase, Phase::Progressing, "{s:#?}");
    assert_eq!(s.failed_checks, 0);
    assert_eq!(events(&s, "CheckFailed"), 0, "{s:#?}");
    assert_eq!(
        events(&s, "Inconclusive"),
        4,
        "three holds, then the pause: {s:#?}"
    );
    assert_eq!(events(&s, "Paused"), 1);
    assert_eq!(s.canary_weight, 50, "held at its step");
    let held = s
        .events
        .iter()
        .find(|e| e.reason == "Inconclusive")
        .expect("a hold");
    assert!(
        held.message.contains("inconclusive 1/3"),
        "{}",
        held.message
    );
    assert!(
        held.message.contains("more canary requests needed"),
        "{}",
        held.message
    );
    let c = &held.checks[0];
    assert!(c.inconclusive && !c.passed, "{c:#?}");
    assert!(c.evidence.is_some_and(|e| e < 1.0), "{c:#?}");
    drop((v1, v2));
}
