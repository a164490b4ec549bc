//! End to end: the baseline-comparison judge (DESIGN §15) in a real release, and dryRun.
//! Real sockets on 127.0.0.1, `weir echo` backends with a fixed added latency, the whole
//! app, an analysis interval of 1 s. Every wait is a bounded poll on the engine.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use support::*;
use weir::app::RunningApp;
use weir::demo::traffic::TrafficSpec;
use weir::rollout::{CanaryStatus, ManualCommand, Phase};
use weir::stats::compare::Class;

/// Longest wait for any one condition.
const WAIT: Duration = Duration::from_secs(60);

/// v1's added latency; the slow v2 adds 40 ms to it.
const BASE: Duration = Duration::from_millis(20);

/// A weir with `app-blue` (v1) and `app-green` (v2) on route `app` and canary `app`
/// stepping straight to 50 % then promoting, with `metrics` (YAML, 6 spaces). Threshold
/// 3: the first check after the step sees one interval of canary traffic, which a loaded
/// machine may leave under minRequests (a failed "not enough traffic" check); two of
/// those must not roll back a healthy release.
fn config(blue: SocketAddr, green: SocketAddr, metrics: &str) -> String {
    format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\nbackends:\n  app-blue:\n    endpoints: [\"{blue}\"]\n  app-green:\n    endpoints: [\"{green}\"]\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\ncanaries:\n  - name: app\n    route: app\n    analysis:\n      interval: 1s\n      threshold: 3\n      stepWeight: 50\n      maxWeight: 50\n      metrics:\n{metrics}"
    )
}

/// The judge over 3 s with 30 requests per side at least (the generator's 16 workers
/// give each side well over that per second, even on a loaded machine), and the
/// absolute P99 check that would pass a 40 ms slower v2.
fn metrics(dry_run: bool) -> String {
    format!(
        "        - name: baseline-comparison\n          thresholdRange: {{ min: 100 }}\n          interval: 3s\n          dryRun: {dry_run}\n          compare:\n            against: primary\n            confidence: 0.98\n            minRequests: 30\n            latency: {{ allowedIncrease: 1.1 }}\n            errors: {{ allowedIncrease: 1.0 }}\n        - name: request-duration\n          thresholdRange: {{ max: 500 }}\n          interval: 3s\n          minRequests: 10\n"
    )
}

async fn release(v2_latency: Duration, dry_run: bool) -> (RunningApp, CanaryStatus) {
    let v1 = echo_with("v1", 0.0, BASE).await;
    let v2 = echo_with("v2", 0.0, v2_latency).await;
    let yaml = config(v1.addr, v2.addr, &metrics(dry_run));
    let cfg = weir::config::parse_yaml(&yaml, "judge.yaml", std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("config invalid:\n{e}\n---\n{yaml}"));
    let app = weir::app::start(cfg).await.expect("start app");
    let mut spec = TrafficSpec::new(app.proxy_addr());
    spec.workers = 16;
    spec.pause = Duration::from_millis(2);
    let traffic = spec.start();
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
    let done = wait(&app, "the end of the run", |s| {
        matches!(s.phase, Phase::Succeeded | Phase::Failed) && s.revision.is_some()
    })
    .await;
    traffic.stop().await;
    drop((v1, v2));
    (app, done)
}

async fn wait(app: &RunningApp, what: &str, f: impl Fn(&CanaryStatus) -> bool) -> CanaryStatus {
    let mut last = None;
    let ok = eventually(WAIT, || {
        let s = app.engine.status("app").expect("canary app");
        let hit = f(&s);
        last = Some(s);
        async move { hit }
    })
    .await;
    let s = last.expect("polled at least once");
    assert!(ok, "timed out waiting for {what}; status:\n{s:#?}");
    s
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
    let (_app, done) = release(BASE + Duration::from_millis(40), false).await;
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
    let (app, done) = release(BASE + Duration::from_millis(40), true).await;
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
