//! End-to-end tests of the rollout engine (DESIGN §6): real sockets on
//! 127.0.0.1, `weir echo` backends, the whole app (proxy, control API, engine), a tiny
//! webhook receiver, analysis intervals of a few hundred milliseconds.
//!
//! Every wait is a bounded poll on the engine's status; no assertion depends on how long
//! something took. Assertions about "during the run" are made with the canary paused
//! (an operator's pause freezes the machine, so the route cannot change under the test).

use crate::support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use support::*;
use weir::app::RunningApp;
use weir::demo::traffic::TrafficSpec;
use weir::demo::{CookieJar, HookServer};
use weir::rollout::{CanaryStatus, Engine, ManualCommand, Phase};

/// Longest wait for any one condition.
const WAIT: Duration = Duration::from_secs(40);

/// The built-in success-rate check over a 2 s window, 5 requests at least.
const METRICS: &str = "      metrics:\n        - name: request-success-rate\n          thresholdRange: { min: 99 }\n          interval: 2s\n          minRequests: 5\n";

/// A weir with slots `app-blue` (`blue`) and `app-green` (`green`), route `app`, and a
/// canary `app` on it with `canary` (YAML lines, 4 spaces) and `top` (top-level YAML).
fn config(blue: SocketAddr, green: SocketAddr, canary: &str, top: &str) -> String {
    format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\n{top}backends:\n  app-blue:\n    endpoints: [\"{blue}\"]\n    revisionPath: /version\n  app-green:\n    endpoints: [\"{green}\"]\n    revisionPath: /version\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\ncanaries:\n  - name: app\n    route: app\n{canary}"
    )
}

/// A canary block with a 300 ms interval, threshold 6 and `analysis` lines (6 spaces).
/// A check counts only the whole seconds of traffic that began after the run started,
/// so the first checks of a run, under a second after its start, see at most part of a
/// second (none when the run started within the current second): with 300 ms ticks a
/// healthy run may meet up to four "not enough traffic" checks before its first full
/// second, and one more on a loaded machine.
fn analysis(analysis: &str) -> String {
    analysis_with_threshold(6, analysis)
}

/// [`analysis`] with another failed-checks threshold.
fn analysis_with_threshold(threshold: u32, analysis: &str) -> String {
    format!("    analysis:\n      interval: 300ms\n      threshold: {threshold}\n{analysis}")
}

async fn start(yaml: &str) -> RunningApp {
    let cfg = weir::config::parse_yaml(yaml, "test.yaml", std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("test config invalid:\n{e}\n---\n{yaml}"));
    weir::app::start(cfg).await.expect("start app")
}

fn status(app: &RunningApp) -> CanaryStatus {
    app.engine.status("app").expect("canary app")
}

/// Polls the canary's status until `f` holds.
async fn wait_for(app: &RunningApp, what: &str, f: impl Fn(&CanaryStatus) -> bool) -> CanaryStatus {
    wait_on(&app.engine, what, f).await
}

/// Polls canary `app`'s status in `engine` until `f` holds.
async fn wait_on(engine: &Engine, what: &str, f: impl Fn(&CanaryStatus) -> bool) -> CanaryStatus {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = engine.status("app").expect("canary app");
        if f(&s) {
            return s;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}; status:\n{s:#?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ended(s: &CanaryStatus) -> bool {
    matches!(s.phase, Phase::Succeeded | Phase::Failed) && s.revision.is_some()
}

async fn command(app: &RunningApp, cmd: ManualCommand) {
    let out = app
        .engine
        .command("app", cmd.clone())
        .await
        .expect("command delivered");
    assert!(out.accepted, "{cmd:?} refused: {}", out.message);
}

async fn start_run(app: &RunningApp) {
    wait_for(app, "initialisation", |s| s.phase == Phase::Initialized).await;
    command(
        app,
        ManualCommand::Start {
            revision: "v2".into(),
        },
    )
    .await;
}

fn route(app: &RunningApp) -> weir::config::raw::RawRoute {
    app.store
        .load()
        .spec
        .raw
        .routes
        .iter()
        .find(|r| r.name == "app")
        .cloned()
        .expect("route")
}

/// Versions answering `n` requests with these headers.
async fn versions(addr: SocketAddr, n: usize, headers: &[(&str, &str)]) -> Vec<String> {
    let c = client();
    let mut out = Vec::new();
    for _ in 0..n {
        let r = get_once(&c, addr, "/", headers).await;
        out.push(r.version().unwrap_or("?").to_string());
    }
    out
}

fn all(v: &[String], want: &str) -> bool {
    !v.is_empty() && v.iter().all(|x| x == want)
}

fn advanced_weights(s: &CanaryStatus) -> Vec<u8> {
    s.events
        .iter()
        .filter(|e| e.reason == "Advanced")
        .map(|e| e.canary_weight)
        .collect()
}

fn has_event(s: &CanaryStatus, reason: &str) -> bool {
    s.events.iter().any(|e| e.reason == reason)
}

/// A fresh directory under the system temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "weir-rollout-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// An admin API call with an optional JSON body.
async fn api(app: &RunningApp, method: &str, path: &str, body: Option<&str>) -> Resp {
    let mut b = http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", app.admin_addr))
        .header("x-weir-request", "1");
    if body.is_some() {
        b = b.header("content-type", "application/json");
    }
    let req = b
        .body(Full::new(Bytes::from(body.unwrap_or("").to_string())))
        .expect("request");
    send(&client(), req).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_canary_is_promoted_step_by_step_and_the_slots_swapped() {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let hooks = HookServer::spawn().await.expect("hooks");
    let canary = analysis(&format!(
        "      stepWeight: 20\n      maxWeight: 60\n{METRICS}      webhooks:\n        - {{ name: load, type: rollout, url: \"{}\", metadata: {{ cmd: hey }} }}\n        - {{ name: post, type: post-rollout, url: \"{}\" }}\n        - {{ name: events, type: event, url: \"{}\" }}\n",
        hooks.url("/load"),
        hooks.url("/post"),
        hooks.url("/events")
    ));
    let app = start(&config(v1.addr, v2.addr, &canary, "")).await;
    let traffic = TrafficSpec::new(app.proxy_addr()).start();
    start_run(&app).await;
    let done = wait_for(&app, "the end of the run", ended).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    assert_eq!(
        advanced_weights(&done),
        vec![20, 40, 60],
        "Flagger's steps: 20, 40, 60, promote"
    );
    let r = route(&app);
    assert_eq!(
        (r.primary.as_str(), r.canary.as_deref()),
        ("app-green", Some("app-blue")),
        "slots swapped"
    );
    assert_eq!(r.canary_weight, Some(0));
    assert_eq!(
        (
            done.primary_backend.as_deref(),
            done.canary_backend.as_deref()
        ),
        (Some("app-green"), Some("app-blue"))
    );
    let got = versions(app.proxy_addr(), 20, &[]).await;
    assert!(all(&got, "v2"), "after promotion: {got:?}");
    // The rollout hook was called at every analysed tick, with Flagger's payload.
    let load = hooks.calls_to("/load");
    assert!(load.len() >= 3, "rollout hook calls: {}", load.len());
    let p = &load[0].payload;
    assert_eq!(
        (
            p["name"].as_str(),
            p["namespace"].as_str(),
            p["phase"].as_str()
        ),
        (Some("app"), Some("default"), Some("Progressing"))
    );
    assert_eq!(p["metadata"]["cmd"], "hey");
    assert_eq!(p["revision"], "v2");
    assert!(p["checksum"].as_str().is_some_and(|c| !c.is_empty()));
    assert!(
        eventually(WAIT, || async { !hooks.calls_to("/post").is_empty() }).await,
        "post-rollout hook"
    );
    assert_eq!(hooks.calls_to("/post")[0].payload["phase"], "Succeeded");
    // Every event goes to the event hooks, with Flagger's eventMessage and eventType.
    assert!(
        eventually(WAIT, || async {
            hooks
                .calls_to("/events")
                .iter()
                .any(|c| c.payload["phase"] == "Succeeded")
        })
        .await,
        "event hook never told of the success"
    );
    let ev = hooks.calls_to("/events");
    assert!(ev
        .iter()
        .all(|c| c.payload["metadata"]["eventMessage"].is_string()));
    assert!(ev
        .iter()
        .any(|c| c.payload["metadata"]["eventType"] == "Normal"));
    traffic.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_answering_500s_is_rolled_back() {
    let (v1, v2) = (echo("v1").await, echo_with("v2", 1.0, Duration::ZERO).await);
    // Threshold 4, not 3: the first check after a step sees only the traffic since the
    // step (one 300 ms interval at 20 %), which on a loaded machine can be under
    // minRequests, a "no value" failed check. Four checks span more than a second of
    // traffic, so at least one of them measures the 500s.
    let canary = analysis_with_threshold(
        4,
        &format!("      stepWeight: 20\n      maxWeight: 60\n{METRICS}"),
    );
    let app = start(&config(v1.addr, v2.addr, &canary, "")).await;
    let traffic = TrafficSpec::new(app.proxy_addr()).start();
    start_run(&app).await;
    let done = wait_for(&app, "the end of the run", ended).await;
    assert_eq!(done.phase, Phase::Failed, "{done:#?}");
    // Flagger's status after a rollback: 0 failed checks; the event keeps the count.
    assert_eq!((done.failed_checks, done.iterations), (0, 0));
    let rollback = done
        .events
        .iter()
        .find(|e| e.reason == "RolledBack")
        .expect("RolledBack event");
    assert_eq!(rollback.failed_checks, 4, "{rollback:#?}");
    assert!(
        rollback.message.contains("failed checks threshold"),
        "{}",
        rollback.message
    );
    assert!(
        done.events
            .iter()
            .any(|e| e.reason == "CheckFailed" && e.message.contains("request-success-rate 0.00")),
        "no check measured the 500s: {:#?}",
        done.events
    );
    let r = route(&app);
    assert_eq!((r.primary.as_str(), r.canary_weight), ("app-blue", Some(0)));
    let got = versions(app.proxy_addr(), 20, &[]).await;
    assert!(all(&got, "v1"), "after rollback: {got:?}");
    traffic.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ab_testing_sends_only_insiders_to_the_canary() {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let canary = analysis(&format!(
        "      iterations: 3\n      match:\n        - headers: {{ x-canary: {{ exact: insider }} }}\n{METRICS}"
    ));
    let app = start(&config(v1.addr, v2.addr, &canary, "")).await;
    let insiders = TrafficSpec::new(app.proxy_addr())
        .header("x-canary", "insider")
        .start();
    let others = TrafficSpec::new(app.proxy_addr()).start();
    start_run(&app).await;
    wait_for(&app, "an A/B iteration", |s| {
        s.phase == Phase::Progressing && s.match_active && s.iterations >= 1
    })
    .await;
    command(&app, ManualCommand::Pause).await;
    assert!(
        !route(&app).matches.is_empty(),
        "the analysis match block is on the route"
    );
    assert_eq!(route(&app).canary_weight, Some(0), "A/B moves no weight");
    let plain = versions(app.proxy_addr(), 40, &[]).await;
    assert!(
        all(&plain, "v1"),
        "requests without the header during the run: {plain:?}"
    );
    let insider = versions(app.proxy_addr(), 40, &[("x-canary", "insider")]).await;
    assert!(
        all(&insider, "v2"),
        "insider requests during the run: {insider:?}"
    );
    command(&app, ManualCommand::Resume).await;
    let done = wait_for(&app, "the end of the run", ended).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    assert!(
        route(&app).matches.is_empty(),
        "match rules removed at the swap"
    );
    assert!(all(&versions(app.proxy_addr(), 20, &[]).await, "v2"));
    insiders.stop().await;
    others.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blue_green_with_mirroring_shadows_traffic_while_clients_stay_on_v1() {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let canary = analysis(&format!(
        "      iterations: 3\n      mirror: true\n      mirrorWeight: 100\n{METRICS}"
    ));
    let app = start(&config(v1.addr, v2.addr, &canary, "")).await;
    let traffic = TrafficSpec::new(app.proxy_addr()).start();
    start_run(&app).await;
    let s = wait_for(&app, "a mirrored iteration", |s| {
        s.phase == Phase::Progressing && s.mirror && s.iterations >= 2
    })
    .await;
    command(&app, ManualCommand::Pause).await;
    assert_eq!(s.canary_weight, 0);
    let before = v2.requests.load(Ordering::Relaxed);
    let got = versions(app.proxy_addr(), 40, &[]).await;
    assert!(
        all(&got, "v1"),
        "clients during the mirrored iterations: {got:?}"
    );
    // Every primary request is copied to the canary (mirrorWeight 100); copies are
    // sent in the background, so wait for them.
    assert!(
        eventually(WAIT, || async {
            v2.requests.load(Ordering::Relaxed) >= before + 40
        })
        .await,
        "v2 got {} shadow copies of 40",
        v2.requests.load(Ordering::Relaxed) - before
    );
    // The analysed iterations judged the shadow copies (the mirror role).
    let mirrored = s
        .last_checks
        .metrics
        .iter()
        .find(|m| m.name == "request-success-rate")
        .expect("checked");
    assert!(
        mirrored.passed && mirrored.reason.contains("mirror"),
        "{mirrored:?}"
    );
    command(&app, ManualCommand::Resume).await;
    let done = wait_for(&app, "the end of the run", ended).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    assert!(route(&app).mirror.is_none(), "mirroring off after the run");
    assert!(all(&versions(app.proxy_addr(), 20, &[]).await, "v2"));
    traffic.stop().await;
}

/// One cookie-jar client: its jar and the versions it got.
struct Browser {
    jar: CookieJar,
    seen: Vec<String>,
}

impl Browser {
    async fn visit(&mut self, c: &TestClient, addr: SocketAddr) -> String {
        let cookie = self.jar.header();
        let mut h: Vec<(&str, &str)> = Vec::new();
        if let Some(c) = &cookie {
            h.push(("cookie", c.as_str()));
        }
        let r = get_once(c, addr, "/", &h).await;
        self.jar.absorb(&r.headers);
        let v = r.version().unwrap_or("?").to_string();
        self.seen.push(v.clone());
        v
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_canary_clients_never_flip_during_the_run() {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let canary = analysis(&format!(
        "      stepWeight: 30\n      maxWeight: 60\n      sessionAffinity: {{ cookieName: weir-canary, primaryCookieName: weir-primary, maxAge: 600, path: / }}\n{METRICS}"
    ));
    let app = start(&config(v1.addr, v2.addr, &canary, "")).await;
    let traffic = TrafficSpec::new(app.proxy_addr()).start();
    start_run(&app).await;
    wait_for(&app, "weight 30", |s| {
        s.phase == Phase::Progressing && s.canary_weight == 30
    })
    .await;
    command(&app, ManualCommand::Pause).await;
    let c = client();
    const CLIENTS: usize = 40;
    let mut browsers: Vec<Browser> = (0..CLIENTS)
        .map(|_| Browser {
            jar: CookieJar::default(),
            seen: Vec::new(),
        })
        .collect();
    for b in &mut browsers {
        for _ in 0..4 {
            b.visit(&c, app.proxy_addr()).await;
        }
        assert!(
            b.seen.windows(2).all(|w| w[0] == w[1]),
            "a client flipped within a step: {:?}",
            b.seen
        );
    }
    let on_canary: Vec<bool> = browsers.iter().map(|b| b.seen[0] == "v2").collect();
    let n = on_canary.iter().filter(|x| **x).count() as u64;
    // Binomial(40, 0.3) lies in this range with probability 99.99 %.
    let (lo, hi) = binomial_bounds(CLIENTS as u64, 0.3, Z_9999);
    assert!(
        (lo..=hi).contains(&n),
        "{n} of {CLIENTS} clients pinned to the canary at weight 30; bound {lo}..={hi}"
    );
    command(&app, ManualCommand::Resume).await;
    wait_for(&app, "weight 60", |s| s.canary_weight == 60).await;
    command(&app, ManualCommand::Pause).await;
    for (b, was_canary) in browsers.iter_mut().zip(&on_canary) {
        let first = b.seen.len();
        for _ in 0..4 {
            b.visit(&c, app.proxy_addr()).await;
        }
        let step: &[String] = &b.seen[first..];
        if *was_canary {
            assert!(
                all(step, "v2"),
                "a canary-pinned client left the canary at the next step: {:?}",
                b.seen
            );
        }
        // A primary client may draw again at a new step (its step cookie lapsed), then stays.
        assert!(
            step[1..].windows(2).all(|w| w[0] == w[1]),
            "a client flipped within a step: {:?}",
            b.seen
        );
        assert!(
            !b.seen.windows(2).any(|w| w[0] == "v2" && w[1] == "v1"),
            "v2 → v1 during the run: {:?}",
            b.seen
        );
    }
    command(&app, ManualCommand::Resume).await;
    let done = wait_for(&app, "the end of the run", ended).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    for b in &mut browsers {
        assert_eq!(b.visit(&c, app.proxy_addr()).await, "v2");
        assert!(
            !b.jar.cookies.contains_key("weir-canary"),
            "the run's canary cookie is deleted after it: {:?}",
            b.jar.cookies
        );
    }
    traffic.stop().await;
}

/// A canary block with `skipAnalysis: true` (and an analysis that would need traffic),
/// then `more` (YAML lines, 6 spaces) in the analysis.
fn skip_analysis(more: &str) -> String {
    format!(
        "    skipAnalysis: true\n{}",
        analysis(&format!("      stepWeight: 20\n{METRICS}{more}"))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_analysis_promotes_at_once_without_checks() {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let hooks = HookServer::spawn().await.expect("hooks");
    let canary = skip_analysis(&format!(
        "      webhooks:\n        - {{ name: gate, type: confirm-rollout, url: \"{}\" }}\n        - {{ name: post, type: post-rollout, url: \"{}\" }}\n",
        hooks.url("/gate"),
        hooks.url("/post")
    ));
    let app = start(&config(v1.addr, v2.addr, &canary, "")).await;
    // No traffic at all: with analysis this could never pass.
    start_run(&app).await;
    let done = wait_for(&app, "the end of the run", ended).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    assert!(
        advanced_weights(&done).is_empty(),
        "no weight step: {:?}",
        advanced_weights(&done)
    );
    assert!(done.last_checks.metrics.is_empty(), "no metric checked");
    assert_eq!(route(&app).primary, "app-green");
    assert!(all(&versions(app.proxy_addr(), 10, &[]).await, "v2"));
    // Flagger calls post-rollout after a skipped analysis too (fluxcd/flagger#1195).
    assert!(
        eventually(WAIT, || async { !hooks.calls_to("/post").is_empty() }).await,
        "post-rollout hook never called"
    );
    let post = &hooks.calls_to("/post")[0].payload;
    assert_eq!(post["phase"], "Succeeded");
    // confirm-rollout is asked before the run's status sync: with the checksum of the
    // last applied revision (the baseline), not of v2.
    let gate = &hooks.calls_to("/gate")[0].payload;
    assert_eq!(gate["revision"], "v2");
    assert!(gate["checksum"].as_str().is_some_and(|c| !c.is_empty()));
    assert_ne!(gate["checksum"], post["checksum"], "{gate} {post}");
}

/// Every event the engine hands out (broadcast, SSE sink) is already in the canary's
/// status when it is handed out, so a client that subscribes and then reads the status
/// (the demo, `weir ctl watch`) misses none. The sink runs where the broadcast is sent,
/// so it sees the status exactly as a subscriber woken by that event could.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_is_in_the_status_before_anyone_hears_of_it() {
    use std::sync::{Arc, Mutex, OnceLock};
    use weir::rollout::{EngineOptions, EventSink, LocalPlane, RolloutEvent};

    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let canary = skip_analysis("");
    let yaml = config(v1.addr, v2.addr, &canary, "");
    let cfg =
        weir::config::parse_yaml(&yaml, "test.yaml", std::path::Path::new(".")).expect("config");
    let store = weir::control::store::TableStore::new(cfg.table.clone());
    let engine: Arc<OnceLock<Arc<Engine>>> = Arc::new(OnceLock::new());
    // (reason, found in the status at that moment)
    let heard: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let sink: EventSink = {
        let (engine, heard) = (engine.clone(), heard.clone());
        Arc::new(move |e: &RolloutEvent| {
            // Events before the engine is stored (its initialisation) are not checked.
            if let Some(en) = engine.get() {
                let found = en.status("app").is_some_and(|s| s.events.contains(e));
                heard.lock().unwrap().push((e.reason.clone(), found));
            }
        })
    };
    let en = Arc::new(
        Engine::start(
            &cfg.canaries,
            EngineOptions {
                local: Some(LocalPlane {
                    store,
                    started: std::time::Instant::now(),
                }),
                sink: Some(sink),
                ..Default::default()
            },
        )
        .expect("engine"),
    );
    assert!(engine.set(en.clone()).is_ok());
    wait_on(&en, "initialisation", |s| s.phase == Phase::Initialized).await;
    let out = en
        .command(
            "app",
            ManualCommand::Start {
                revision: "v2".into(),
            },
        )
        .await
        .expect("command delivered");
    assert!(out.accepted, "{}", out.message);
    wait_on(&en, "the end of the run", ended).await;
    en.shutdown().await;
    let heard = heard.lock().unwrap().clone();
    assert!(
        heard.iter().any(|(r, _)| r == "Succeeded"),
        "the run's events were heard: {heard:?}"
    );
    let missing: Vec<_> = heard.iter().filter(|(_, found)| !found).collect();
    assert!(
        missing.is_empty(),
        "handed out before the status had them: {missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_aborts_a_run_through_the_api() {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let canary = analysis(&format!(
        "      stepWeight: 20\n      maxWeight: 80\n{METRICS}"
    ));
    let app = start(&config(v1.addr, v2.addr, &canary, "")).await;
    let traffic = TrafficSpec::new(app.proxy_addr()).start();
    wait_for(&app, "initialisation", |s| s.phase == Phase::Initialized).await;
    let bad = api(
        &app,
        "POST",
        "/api/v1/canaries/app/start",
        Some("{\"revision\": \"\"}"),
    )
    .await;
    assert_eq!(bad.status, 422, "{}", bad.text());
    let missing = api(&app, "POST", "/api/v1/canaries/app/start", None).await;
    assert_eq!(missing.status, 400, "{}", missing.text());
    let unknown = api(&app, "POST", "/api/v1/canaries/nope/abort", None).await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    let started = api(
        &app,
        "POST",
        "/api/v1/canaries/app/start",
        Some("{\"revision\": \"v2\"}"),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.text());
    assert_eq!(started.json()["accepted"], true);
    wait_for(&app, "weight 20", |s| {
        s.phase == Phase::Progressing && s.canary_weight >= 20
    })
    .await;
    let aborted = api(&app, "POST", "/api/v1/canaries/app/abort", None).await;
    assert_eq!(aborted.status, 200, "{}", aborted.text());
    let st = aborted.json()["status"].clone();
    assert_eq!(st["phase"], "Failed");
    assert_eq!(st["canaryWeight"], 0);
    assert_eq!(
        route(&app).canary_weight,
        Some(0),
        "applied before the answer"
    );
    assert!(all(&versions(app.proxy_addr(), 10, &[]).await, "v1"));
    let again = api(&app, "POST", "/api/v1/canaries/app/abort", Some("{}")).await;
    assert_eq!(again.status, 409, "nothing to abort: {}", again.text());
    let one = api(&app, "GET", "/api/v1/canaries/app", None).await.json();
    assert_eq!(one["phase"], "Failed");
    assert_eq!(one["revision"], "v2");
    let events = one["events"].as_array().expect("events");
    assert!(
        events.iter().any(|e| e["reason"] == "RolledBack"
            && e["message"]
                .as_str()
                .unwrap_or("")
                .contains("aborted by an operator")),
        "{events:?}"
    );
    let list = api(&app, "GET", "/api/v1/canaries", None).await.json();
    assert_eq!(list["canaries"][0]["name"], "app");
    assert_eq!(list["canaries"][0]["phase"], "Failed");
    traffic.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_traffic_is_a_failed_check_and_rolls_back() {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let canary = analysis(&format!(
        "      stepWeight: 50\n      maxWeight: 50\n{METRICS}"
    ));
    let app = start(&config(v1.addr, v2.addr, &canary, "")).await;
    start_run(&app).await;
    let done = wait_for(&app, "the end of the run", ended).await;
    assert_eq!(
        done.phase,
        Phase::Failed,
        "no traffic must never promote: {done:#?}"
    );
    let failed = done
        .events
        .iter()
        .find(|e| e.reason == "CheckFailed")
        .expect("CheckFailed");
    assert!(
        failed.message.contains("not enough traffic"),
        "{}",
        failed.message
    );
    assert_eq!(route(&app).canary_weight, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_promotion_answering_403_holds_the_run_until_it_answers_200() {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let hooks = HookServer::spawn().await.expect("hooks");
    hooks.set_status("/gate", 403);
    let canary = analysis(&format!(
        "      stepWeight: 50\n      maxWeight: 50\n{METRICS}      webhooks:\n        - {{ name: gate, type: confirm-promotion, url: \"{}\" }}\n",
        hooks.url("/gate")
    ));
    let app = start(&config(v1.addr, v2.addr, &canary, "")).await;
    let traffic = TrafficSpec::new(app.proxy_addr()).start();
    start_run(&app).await;
    wait_for(&app, "WaitingPromotion", |s| {
        s.phase == Phase::WaitingPromotion
    })
    .await;
    // Held: the gate is asked again at every tick and the phase does not move.
    let deadline = tokio::time::Instant::now() + WAIT;
    while hooks.calls_to("/gate").len() < 5 {
        let s = status(&app);
        assert_eq!(s.phase, Phase::WaitingPromotion, "{s:#?}");
        assert_eq!(s.canary_weight, 50);
        assert!(
            tokio::time::Instant::now() < deadline,
            "gate not asked again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let p = &hooks.calls_to("/gate")[0].payload;
    assert_eq!(
        (p["name"].as_str(), p["phase"].as_str()),
        (Some("app"), Some("Progressing"))
    );
    assert_eq!(p["canaryWeight"], 50);
    assert_eq!(route(&app).primary, "app-blue", "not promoted while held");
    hooks.set_status("/gate", 200);
    let done = wait_for(&app, "the end of the run", ended).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    assert_eq!(route(&app).primary, "app-green");
    traffic.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_weir_continues_the_run_from_its_state_file() {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let dir = temp_dir("restart");
    let top = format!("rollout:\n  stateDir: {}\n", dir.display());
    let canary = analysis(&format!(
        "      stepWeight: 20\n      maxWeight: 80\n{METRICS}"
    ));
    let yaml = config(v1.addr, v2.addr, &canary, &top);

    let app1 = start(&yaml).await;
    let t1 = TrafficSpec::new(app1.proxy_addr()).start();
    start_run(&app1).await;
    wait_for(&app1, "weight 40", |s| {
        s.phase == Phase::Progressing && s.canary_weight >= 40
    })
    .await;
    t1.stop().await;
    app1.shutdown().await;

    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("app.json")).expect("state file"))
            .expect("JSON");
    assert_eq!(file["state"]["phase"], "Progressing");
    let w = file["state"]["canaryWeight"].as_u64().expect("weight") as u8;
    assert!(w >= 40, "{file}");
    assert!(
        !dir.join("app.json.tmp").exists(),
        "atomic write leaves no temp file"
    );

    // A new process: its table starts from the config file (weight 0); the engine puts
    // the recorded weight back and goes on from there.
    let app2 = start(&yaml).await;
    let t2 = TrafficSpec::new(app2.proxy_addr()).start();
    let s = wait_for(&app2, "the restored weight", |_| {
        route(&app2).canary_weight.unwrap_or(0) >= i64::from(w)
    })
    .await;
    assert!(has_event(&s, "Restored"), "{s:#?}");
    assert!(
        !has_event(&s, "Initialized"),
        "a restored canary does not initialise again"
    );
    let done = wait_for(&app2, "the end of the run", ended).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    assert!(
        advanced_weights(&done).iter().all(|x| *x > w),
        "continued above {w}: {:?}",
        advanced_weights(&done)
    );
    assert_eq!(route(&app2).primary, "app-green");
    t2.stop().await;
    app2.shutdown().await;

    // Once more: the config still names app-blue as primary; the recorded swap wins.
    let app3 = start(&yaml).await;
    let s = wait_for(&app3, "the swap put back", |_| {
        route(&app3).primary == "app-green"
    })
    .await;
    assert_eq!(s.phase, Phase::Succeeded);
    assert!(all(&versions(app3.proxy_addr(), 10, &[]).await, "v2"));
    app3.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Deploys v2 to the idle slot `app-green` (its endpoint list), as a deploy script
/// would, and waits for the run it starts; `watch` selects revisions read from
/// `/version` rather than the endpoint list.
async fn deploy_to_idle_slot_starts_a_run(watch: bool) {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    // Both slots run v1; deploying v2 to the idle slot is the release.
    let canary = format!(
        "    watchRevision: {watch}\n{}",
        analysis(&format!(
            "      stepWeight: 50\n      maxWeight: 50\n{METRICS}"
        ))
    );
    let app = start(&config(v1.addr, v1.addr, &canary, "")).await;
    let traffic = TrafficSpec::new(app.proxy_addr()).start();
    wait_for(&app, "initialisation", |s| s.phase == Phase::Initialized).await;
    // A deploy script with If-Match would retry on a conflict with the
    // engine's own writes; in process, the atomic read-modify-write.
    app.store
        .update_table("test", "deploy v2", |raw| {
            raw.backends.get_mut("app-green").expect("slot").endpoints = vec![v2.addr.to_string()];
        })
        .expect("deploy");
    let done = wait_for(&app, "the end of the run", ended).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    let rev = done.revision.clone().unwrap_or_default();
    if watch {
        assert_eq!(rev, "v2", "the revision read from /version");
    } else {
        assert!(
            rev.starts_with("endpoints-"),
            "the endpoint list is the revision: {rev}"
        );
    }
    assert!(has_event(&done, "NewRevision"));
    assert!(all(&versions(app.proxy_addr(), 10, &[]).await, "v2"));
    // The old primary, now in the idle slot, is the new baseline, not a release: no new
    // run starts (three more intervals pass).
    let ticks = done.events.len();
    if watch {
        // Every tick asks the idle slot (v1, which serves no traffic now) for its
        // revision: the fourth question after the end proves three ticks were decided.
        let asked = v1.requests.load(Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + WAIT;
        while v1.requests.load(Ordering::Relaxed) < asked + 4 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the engine kept asking the idle slot for its revision"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    } else {
        // An endpoint-list revision is read in process, and a tick that changes nothing
        // publishes nothing: the status's tick counter shows three more ticks decided.
        wait_for(&app, "three more ticks", |s| s.ticks >= done.ticks + 3).await;
    }
    let after = status(&app);
    assert_eq!(after.phase, Phase::Succeeded, "{after:#?}");
    assert_eq!(
        after.events.len(),
        ticks,
        "nothing happened since: {:#?}",
        after.events
    );
    traffic.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_revision_on_the_idle_slot_starts_a_run() {
    deploy_to_idle_slot_starts_a_run(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_endpoint_list_of_the_idle_slot_starts_a_run() {
    deploy_to_idle_slot_starts_a_run(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_engine_drives_a_fleet_of_remote_proxies() {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let dir = temp_dir("fleet");
    std::fs::write(dir.join("token"), "fleet-token-0123456789\n").expect("token");
    let plane = || {
        format!(
            "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\n  tokenFile: {}\nbackends:\n  app-blue:\n    endpoints: [\"{}\"]\n    revisionPath: /version\n  app-green:\n    endpoints: [\"{}\"]\n    revisionPath: /version\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\n",
            dir.join("token").display(),
            v1.addr,
            v2.addr
        )
    };
    let (b, c) = (start(&plane()).await, start(&plane()).await);
    let canary = format!(
        "    dataPlanes: [\"http://{}\", \"http://{}\"]\n    dataPlaneTokenFile: {}\n{}",
        b.admin_addr,
        c.admin_addr,
        dir.join("token").display(),
        analysis(&format!(
            "      stepWeight: 50\n      maxWeight: 50\n{METRICS}"
        ))
    );
    let engine = start(&config(v1.addr, v2.addr, &canary, "")).await;
    let (tb, tc) = (
        TrafficSpec::new(b.proxy_addr()).start(),
        TrafficSpec::new(c.proxy_addr()).start(),
    );
    start_run(&engine).await;
    let done = wait_for(&engine, "the end of the run", ended).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    assert_eq!(done.data_planes.len(), 2);
    for p in [&b, &c] {
        assert_eq!(route(p).primary, "app-green", "every data plane swapped");
        assert!(all(&versions(p.proxy_addr(), 10, &[]).await, "v2"));
    }
    assert_eq!(
        route(&engine).primary,
        "app-blue",
        "the engine's own proxy is not a data plane here"
    );
    tb.stop().await;
    tc.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_events_stream_over_sse() {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let canary = format!(
        "    skipAnalysis: true\n{}",
        analysis("      stepWeight: 20\n")
    );
    let app = start(&config(v1.addr, v2.addr, &canary, "")).await;
    wait_for(&app, "initialisation", |s| s.phase == Phase::Initialized).await;
    let req = http::Request::get(format!("http://{}/api/v1/events", app.admin_addr))
        .body(Full::new(Bytes::new()))
        .expect("req");
    let resp = client().request(req).await.expect("SSE");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    command(
        &app,
        ManualCommand::Start {
            revision: "v2".into(),
        },
    )
    .await;
    let mut text = String::new();
    let found = tokio::time::timeout(WAIT, async {
        while let Some(Ok(f)) = body.frame().await {
            if let Some(d) = f.data_ref() {
                text.push_str(&String::from_utf8_lossy(d));
            }
            if text.contains("event: rollout") && text.contains("\"reason\":\"Succeeded\"") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "SSE stream: {text}");
}

/// A Prometheus server started for one test, stopped on drop.
struct Prometheus {
    child: std::process::Child,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_metrics_are_queried_from_a_real_prometheus() {
    if !tool_available(
        "prometheus",
        "custom_metrics_are_queried_from_a_real_prometheus",
        "Debian: apt-get install prometheus",
    ) {
        return;
    }
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port();
    let prom = format!("http://127.0.0.1:{port}");
    let good = "100 * sum(rate(weir_requests_total{route=\\\"{{ route }}\\\",role=\\\"canary\\\",code!~\\\"5..\\\"}[{{ interval }}])) / sum(rate(weir_requests_total{route=\\\"{{ route }}\\\",role=\\\"canary\\\"}[{{ interval }}]))";
    // A series weir exports, on a route that does not exist: no data. (A weir series
    // weir does not export would be refused by validation before any check ran.)
    let empty = "sum(rate(weir_requests_total{route=\\\"no-such-{{ route }}\\\"}[{{ interval }}]))";
    let yaml = format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\nbackends:\n  app-blue:\n    endpoints: [\"{}\"]\n    revisionPath: /version\n  app-green:\n    endpoints: [\"{}\"]\n    revisionPath: /version\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\n  - name: other\n    hosts: [other.test]\n    primary: app-blue\n    canary: app-green\ncanaries:\n  - name: app\n    route: app\n    analysis:\n      interval: 1s\n      threshold: 30\n      stepWeight: 50\n      maxWeight: 50\n      metrics:\n        - name: canary-success\n          thresholdRange: {{ min: 99 }}\n          interval: 5s\n          prometheusUrl: {prom}\n          query: \"{good}\"\n  - name: other\n    route: other\n    analysis:\n      interval: 300ms\n      threshold: 3\n      stepWeight: 50\n      maxWeight: 50\n      metrics:\n        - name: nothing\n          thresholdRange: {{ min: 1 }}\n          interval: 5s\n          prometheusUrl: {prom}\n          query: \"{empty}\"\n",
        v1.addr, v2.addr
    );
    let app = start(&yaml).await;
    let dir = temp_dir("prometheus");
    std::fs::write(
        dir.join("prometheus.yml"),
        format!("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: weir\n    static_configs:\n      - targets: [\"{}\"]\n", app.admin_addr),
    )
    .expect("prometheus config");
    let _prometheus = Prometheus {
        child: std::process::Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start prometheus"),
    };
    let c = weir::rollout::http::HttpClient::new();
    let ready = eventually(WAIT, || async {
        c.get(&format!("{prom}/-/ready"), &[], Duration::from_secs(1))
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(ready, "prometheus did not become ready");
    let traffic = TrafficSpec::new(app.proxy_addr()).start();
    wait_for(&app, "initialisation", |s| s.phase == Phase::Initialized).await;
    command(
        &app,
        ManualCommand::Start {
            revision: "v2".into(),
        },
    )
    .await;
    let out = app
        .engine
        .command(
            "other",
            ManualCommand::Start {
                revision: "v2".into(),
            },
        )
        .await
        .expect("other");
    assert!(out.accepted);
    let done = wait_for(&app, "the end of the run", ended).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    let check = done
        .events
        .iter()
        .flat_map(|e| e.checks.iter())
        .find(|c| c.name == "canary-success" && c.passed)
        .expect("a passing Prometheus check");
    assert!(check.value.is_some_and(|v| v >= 99.0), "{check:?}");
    // An empty result is a failed check, never a pass.
    let deadline = tokio::time::Instant::now() + WAIT;
    let other = loop {
        let s = app.engine.status("other").expect("other");
        if ended(&s) {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "other did not end: {s:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(other.phase, Phase::Failed, "{other:#?}");
    assert!(
        other
            .events
            .iter()
            .any(|e| e.reason == "CheckFailed" && e.message.contains("no values found")),
        "{other:#?}"
    );
    traffic.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `weir ctl --api <admin> ARGS` (the real binary) off the runtime's threads.
async fn ctl(app: &RunningApp, args: &[&str]) -> (i32, String, String) {
    let api = format!("http://{}", app.admin_addr);
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("ctl")
            .arg("--api")
            .arg(api)
            .args(&args)
            .output()
            .expect("run weir ctl");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .expect("join")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_ctl_starts_pauses_watches_and_aborts_a_canary() {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let canary = analysis(&format!(
        "      stepWeight: 20\n      maxWeight: 80\n{METRICS}"
    ));
    let app = start(&config(v1.addr, v2.addr, &canary, "")).await;
    let traffic = TrafficSpec::new(app.proxy_addr()).start();
    wait_for(&app, "initialisation", |s| s.phase == Phase::Initialized).await;
    let (code, out, err) = ctl(&app, &["start", "app", "--revision", "v2"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("app: start done: Initialized"), "{out}");
    // Live: a state line, then the run's events as they happen.
    let (code, out, err) = ctl(&app, &["watch", "app", "--count", "3"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .next()
            .is_some_and(|l| l.contains(" app ") && l.contains(" steps ")),
        "{out}"
    );
    assert!(
        out.lines().filter(|l| l.contains(" app ")).count() >= 3,
        "{out}"
    );
    wait_for(&app, "weight 20", |s| s.canary_weight >= 20).await;
    let (code, out, err) = ctl(&app, &["pause", "app"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = ctl(&app, &["canaries"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("Progressing (paused)"), "{out}");
    let (code, out, _) = ctl(&app, &["canaries", "app"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("events:") && out.contains("Paused"), "{out}");
    let (code, _, err) = ctl(&app, &["pause", "app"]).await;
    assert_eq!(code, 1, "pausing twice is refused");
    assert!(err.contains("already paused"), "{err}");
    let (code, out, err) = ctl(&app, &["abort", "app"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Failed at canary weight 0%"), "{out}");
    let (code, out, _) = ctl(&app, &["--json", "canaries", "app"]).await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["phase"], "Failed");
    let (code, _, err) = ctl(&app, &["promote", "nope"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("no canary named"), "{err}");
    traffic.stop().await;
}

/// A command that does not apply (resume while not paused, abort or promote with no run,
/// pause while paused) is a 409 with the reason for its caller only: watchers of
/// `/api/v1/events` hear the accepted commands' events and nothing about the refusals.
/// The stream is read up to the event of the accepted command sent last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_command_is_a_409_for_its_caller_and_no_event() {
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let canary = analysis(&format!("      stepWeight: 20\n{METRICS}"));
    let app = start(&config(v1.addr, v2.addr, &canary, "")).await;
    wait_for(&app, "initialisation", |s| s.phase == Phase::Initialized).await;
    let req = http::Request::get(format!("http://{}/api/v1/events", app.admin_addr))
        .body(Full::new(Bytes::new()))
        .expect("req");
    let resp = client().request(req).await.expect("SSE");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let refused = |r: &Resp, why: &str| {
        assert_eq!(r.status, 409, "{}", r.text());
        let e = r.json();
        assert_eq!(e["error"], "command-refused", "{e}");
        let reason = e["reason"].as_str().unwrap_or("");
        assert!(reason.contains(why), "{e}");
        assert!(reason.contains("(phase Initialized)"), "{e}");
    };
    let post = |what: &'static str| {
        let app = &app;
        async move { api(app, "POST", &format!("/api/v1/canaries/app/{what}"), None).await }
    };
    refused(&post("resume").await, "resume refused: not paused");
    refused(&post("abort").await, "abort refused: no run in progress");
    refused(
        &post("promote").await,
        "promote refused: no analysis in progress",
    );
    assert_eq!(post("pause").await.status, 200);
    refused(&post("pause").await, "pause refused: already paused");
    assert_eq!(post("resume").await.status, 200);
    assert!(!status(&app).paused);

    let mut text = String::new();
    let heard = tokio::time::timeout(WAIT, async {
        while let Some(Ok(f)) = body.frame().await {
            if let Some(d) = f.data_ref() {
                text.push_str(&String::from_utf8_lossy(d));
            }
            if text.contains("\"reason\":\"Resumed\"") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(heard, Ok(true), "SSE stream: {text}");
    let reasons: Vec<String> = text
        .split("\n\n")
        .filter(|b| b.contains("event: rollout"))
        .filter_map(|b| {
            let data = b.lines().find_map(|l| l.strip_prefix("data:"))?;
            let v: serde_json::Value = serde_json::from_str(data.trim()).ok()?;
            v["reason"].as_str().map(str::to_string)
        })
        .collect();
    assert_eq!(reasons, ["Paused", "Resumed"], "SSE stream: {text}");
    let events = &status(&app).events;
    assert!(
        events.iter().all(|e| e.reason != "CommandIgnored"),
        "{events:?}"
    );
}
