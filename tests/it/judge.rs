//! End to end: the baseline-comparison judge in a real release, and dryRun.
//! Real sockets on 127.0.0.1, `weir echo` backends with a fixed added latency, the whole
//! app, an analysis interval of 1 s. Every wait is a bounded poll on the engine.
//!
//! The proxy measures wall-clock latency, so a loaded machine adds its delays to what the
//! judge sees. The verdicts must rest on the backends' added latencies, which the tests
//! choose, not on that noise; three things see to it:
//! - both sides are sampled over the same seconds: the traffic starts once the canary
//!   has its 50 %, so no window holds primary requests from a time the canary had none
//!   (a busier second then would make one side alone slower);
//! - no window holds the traffic's cold start (every client and upstream connection
//!   opened at once, the first answers late on both sides but in small samples): a
//!   `rollout` webhook, called before the metrics of every analysed tick, holds the
//!   first check until the start has left the window;
//! - the added latency, [`BASE`], is large against what noise is left.

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use support::*;
use weir::app::RunningApp;
use weir::demo::traffic::TrafficSpec;
use weir::demo::{HookHandler, HookServer};
use weir::rollout::{CanaryStatus, ManualCommand, Phase};
use weir::stats::compare::Class;

/// Longest wait for any one condition.
const WAIT: Duration = Duration::from_secs(60);

/// v1's added latency; the equal v2 adds the same, the slow v2 adds [`SLOWER`] to it.
///
/// High needs the canary's mean latency above `allowedIncrease` (1.1) times the
/// primary's. Sampled over the same seconds, the two sides differ by chance alone, and
/// over 200 ms chance would have to add 20 ms to the canary's mean (over 20 ms, 2 ms
/// would do). The slow v2 is 1.2 times v1, so it stays High unless chance slowed the
/// primary alone by 18 ms; and 240 ms keeps its P99 well under the 500 ms of
/// `request-duration`.
const BASE: Duration = Duration::from_millis(200);

/// How much slower the slow v2 is.
const SLOWER: Duration = Duration::from_millis(40);

/// Client loops of the traffic: each waits [`BASE`] or more per answer, so about 80
/// requests per side in each second at 50 %, some 240 in a check's 3 s.
const WORKERS: u64 = 32;

/// Answers before the first check: 20 per worker on average, so at least 20 × [`BASE`]
/// = 4 s since the first request (no answer comes sooner than [`BASE`]): more than the
/// 3 s window.
const WARM_UP: u64 = 20 * WORKERS;

/// A weir with `app-blue` (v1) and `app-green` (v2) on route `app` and canary `app`
/// stepping straight to 50 % then promoting, with `metrics` (YAML, 6 spaces) and the
/// `rollout` webhook `warm-up` at `hook`. Threshold 3: a check the machine starves of
/// traffic all the same (a failed "not enough traffic" check) must not roll back a
/// healthy release on its own.
fn config(blue: SocketAddr, green: SocketAddr, hook: &str, metrics: &str) -> String {
    format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\nbackends:\n  app-blue:\n    endpoints: [\"{blue}\"]\n  app-green:\n    endpoints: [\"{green}\"]\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\ncanaries:\n  - name: app\n    route: app\n    analysis:\n      interval: 1s\n      threshold: 3\n      stepWeight: 50\n      maxWeight: 50\n      webhooks:\n        - name: warm-up\n          type: rollout\n          url: {hook}\n          timeout: 60s\n      metrics:\n{metrics}"
    )
}

/// The judge over 3 s with 30 requests per side at least, and the absolute P99 check
/// that would pass a 40 ms slower v2.
fn metrics(dry_run: bool) -> String {
    format!(
        "        - name: baseline-comparison\n          thresholdRange: {{ min: 100 }}\n          interval: 3s\n          dryRun: {dry_run}\n          compare:\n            against: primary\n            confidence: 0.98\n            minRequests: 30\n            latency: {{ allowedIncrease: 1.1 }}\n            errors: {{ allowedIncrease: 1.0 }}\n        - name: request-duration\n          thresholdRange: {{ max: 500 }}\n          interval: 3s\n          minRequests: 10\n"
    )
}

async fn release(v2_latency: Duration, dry_run: bool) -> (RunningApp, CanaryStatus) {
    let v1 = echo_with("v1", 0.0, BASE).await;
    let v2 = echo_with("v2", 0.0, v2_latency).await;
    // The warm-up hook answers once the test says the traffic is warm, and at once
    // from then on.
    let (warm_tx, warm_rx) = tokio::sync::watch::channel(false);
    let handler: HookHandler = Arc::new(move |_path, _payload| {
        let mut warm = warm_rx.clone();
        Box::pin(async move {
            let _ = warm.wait_for(|w| *w).await;
            (200, "warm".to_string())
        })
    });
    let hooks = HookServer::spawn_with(handler).await.expect("hook server");
    let yaml = config(v1.addr, v2.addr, &hooks.url("/warm"), &metrics(dry_run));
    let cfg = weir::config::parse_yaml(&yaml, "judge.yaml", std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("config invalid:\n{e}\n---\n{yaml}"));
    let app = weir::app::start(cfg).await.expect("start app");
    wait(&app, "initialisation", |s| s.phase == Phase::Initialized).await;
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
    wait(&app, "the step to 50 %", |s| s.canary_weight == 50).await;
    let mut spec = TrafficSpec::new(app.proxy_addr());
    spec.workers = WORKERS as usize;
    spec.pause = Duration::from_millis(2);
    let traffic = spec.start();
    let warm = eventually(WAIT, || {
        let done = traffic.tally().done();
        async move { done >= WARM_UP }
    })
    .await;
    assert!(warm, "{} answers", traffic.tally().done());
    warm_tx.send_replace(true);
    let done = wait(&app, "the end of the run", |s| {
        matches!(s.phase, Phase::Succeeded | Phase::Failed) && s.revision.is_some()
    })
    .await;
    traffic.stop().await;
    drop((v1, v2, hooks));
    (app, done)
}

async fn wait(app: &RunningApp, what: &str, f: impl Fn(&CanaryStatus) -> bool) -> CanaryStatus {
    wait_canary(app, "app", WAIT, what, f).await
}

/// The judged latency classes of every baseline-comparison check in the events.
fn latency_classes(s: &CanaryStatus) -> Vec<Class> {
    s.events
        .iter()
        .flat_map(|e| &e.checks)
        .filter(|c| c.name == "baseline-comparison")
        .filter_map(|c| c.judgement.as_ref())
        .map(|j| j.quantities[0].class)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v2_equal_to_v1_is_promoted() {
    let (_app, done) = release(BASE, false).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    let classes = latency_classes(&done);
    assert!(
        classes.contains(&Class::Pass),
        "no judged Pass: {classes:?}\n{done:#?}"
    );
    assert!(!classes.contains(&Class::High), "{classes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v2_40ms_slower_is_rolled_back_though_p99_under_500ms_passes() {
    let (_app, done) = release(BASE + SLOWER, false).await;
    assert_eq!(done.phase, Phase::Failed, "{done:#?}");
    let failed: Vec<_> = done
        .events
        .iter()
        .filter(|e| e.reason == "CheckFailed")
        .collect();
    assert!(!failed.is_empty(), "{done:#?}");
    // The judge said High with an interval around the 40 ms, and named its samples;
    // the absolute threshold passed the same ticks.
    let judged = failed
        .iter()
        .flat_map(|e| &e.checks)
        .find(|c| c.name == "baseline-comparison" && c.judgement.is_some())
        .expect("a judged check");
    let lat = &judged.judgement.as_ref().unwrap().quantities[0];
    assert_eq!(lat.class, Class::High, "{judged:#?}");
    let (lo, hi) = (lat.lower.unwrap(), lat.upper.unwrap());
    assert!(
        lo > 20.0 && hi < 80.0,
        "interval [{lo}, {hi}] ms for a 40 ms shift"
    );
    assert!(lat.canary_requests >= 30 && lat.primary_requests >= 30);
    assert!(judged.reason.contains("latency High"), "{}", judged.reason);
    let duration_passed = failed
        .iter()
        .flat_map(|e| &e.checks)
        .any(|c| c.name == "request-duration" && c.passed);
    assert!(
        duration_passed,
        "request-duration ≤ 500 ms should have passed: {failed:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_dry_run_the_slow_v2_is_promoted_and_the_judgement_shown() {
    let (app, done) = release(BASE + SLOWER, true).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    let classes = latency_classes(&done);
    assert!(
        classes.contains(&Class::High),
        "the judge saw no High: {classes:?}\n{done:#?}"
    );
    let shown = done
        .events
        .iter()
        .flat_map(|e| &e.checks)
        .find(|c| c.name == "baseline-comparison" && c.judgement.is_some())
        .expect("a judged check");
    assert!(shown.dry_run && !shown.passed, "{shown:#?}");
    // The API's canary document carries it too (what `weir ctl canaries app` prints).
    let c = client();
    let r = get_once(&c, app.admin_addr, "/api/v1/canaries/app", &[]).await;
    let body = String::from_utf8_lossy(&r.body).to_string();
    assert!(
        body.contains("\"judgement\"") && body.contains("\"dryRun\":true"),
        "{body}"
    );
}
