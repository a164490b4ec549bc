//! `weir demo`: a release, end to end, in one process and under a minute.
//!
//! Each scenario starts two `weir echo` backends (v1, and v2 — failing 30 % of its
//! requests in `rollback`), a proxy whose route `app` has the slots `app-blue` (primary,
//! v1) and `app-green` (the idle slot, also v1), and the rollout engine with 1 s
//! intervals. Clients send traffic through the proxy the whole time. The demo then
//! *deploys* v2 to the idle slot (its endpoint list changes to the v2 backend, as a
//! deploy script would do through the API), the engine sees the new revision on the
//! slot's `/version`, and the run plays out live: one line per rollout event, and a
//! traffic line per second with what the clients got. The demo ends with the outcome and
//! checks it: the phase (Succeeded, or Failed for `rollback`), who serves afterwards,
//! and what the scenario promises:
//!
//! | scenario | strategy | checked |
//! |---|---|---|
//! | `promote` | canary, 20 % steps to 60 % | promoted by swap: every client gets v2 afterwards |
//! | `rollback` | canary, v2 fails 30 % | rolled back after 2 failed checks: every client gets v1 |
//! | `ab` | A/B, `x-canary: insider`, 4 iterations | only insiders reach v2 during the run |
//! | `bluegreen` | blue/green, 3 iterations, acceptance webhook | no client reaches v2 before the cutover |
//! | `mirror` | blue/green with mirroring | v2 gets shadow copies, no client reaches v2 before the cutover |
//! | `affinity` | canary with session affinity | no client with a cookie jar ever goes back from v2 to v1 |
//!
//! The process exits 0 only when the outcome is the expected one.
//!
//! The checks need traffic, and a busy or slow machine sends less of it per second. So
//! that such a machine slows the demo down instead of failing it for "not enough
//! traffic", every scenario whose canary gets client traffic during the analysis has a
//! `rollout` webhook, the traffic gate: it is called at each analysed tick before the
//! metrics and answers once the proxy's own stats show the judged role (the canary, or
//! the shadow copies while the run mirrors) has answered the checks' `minRequests` in
//! their window (`traffic_gate`). On a machine that keeps up it answers at once.
//!
//! [`HookServer`] (`hooks`) and [`CookieJar`] (`jar`) stay in the library, not in test
//! support: the demo needs them at run time (the blue/green acceptance webhook, the
//! affinity scenario's browsers), and the end-to-end tests reuse them rather than keep
//! a second copy. [`traffic::Traffic`] is the one traffic generator, for the same reason:
//! the demo's clients run on it, and so do the end-to-end tests' background loads.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::app::RunningApp;
use crate::dataplane::store::TableStore;
use crate::echo::{EchoHandle, EchoOptions};
use crate::proxy::service::ProxyShared;
use crate::rollout::{Engine, Phase, RolloutEvent};

mod hooks;
mod jar;
pub mod traffic;

pub use hooks::{HookCall, HookHandler, HookServer};
pub use jar::CookieJar;
use traffic::{apply_event_flags, get, say, spawn_traffic, DemoClient, RunFlags, Seen};

/// Which release the demo plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// A healthy v2 promoted by progressive weights and a slot swap.
    Promote,
    /// A v2 failing 30 % of requests, rolled back.
    Rollback,
    /// A/B testing: only `x-canary: insider` requests reach v2 during the run.
    Ab,
    /// Blue/green: iterations gated by an acceptance webhook, then a cutover.
    Bluegreen,
    /// Blue/green with traffic mirrored (shadowed) to v2 during the iterations.
    Mirror,
    /// Canary with session affinity: cookie-jar clients stay on their side.
    Affinity,
}

impl Scenario {
    /// The scenario's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Promote => "promote",
            Scenario::Rollback => "rollback",
            Scenario::Ab => "ab",
            Scenario::Bluegreen => "bluegreen",
            Scenario::Mirror => "mirror",
            Scenario::Affinity => "affinity",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Scenario::Promote => "a healthy v2 goes to the idle slot and is promoted step by step (20%, 40%, 60%, swap)",
            Scenario::Rollback => "v2 fails 30% of its requests: the checks fail and the engine rolls back",
            Scenario::Ab => "A/B testing: requests with `x-canary: insider` go to v2 for 4 iterations, everyone else stays on v1",
            Scenario::Bluegreen => "blue/green: 3 iterations gated by an acceptance webhook, then all traffic cuts over to v2",
            Scenario::Mirror => "blue/green with mirroring: v2 gets shadow copies of the traffic for 3 iterations, then the cutover",
            Scenario::Affinity => "canary with session affinity: each client stays on the side it first got (cookies)",
        }
    }

    /// The phase the run must end in.
    pub fn expected(self) -> Phase {
        match self {
            Scenario::Rollback => Phase::Failed,
            _ => Phase::Succeeded,
        }
    }

    /// The `analysis:` block (and canary fields) of the scenario; `hook` is the
    /// webhook receiver's base URL (the acceptance test and the traffic gate).
    fn canary_yaml(self, hook: &str) -> String {
        let metrics = |min_requests: u64| {
            format!(
                "      metrics:\n        - name: request-success-rate\n          thresholdRange: {{ min: 99 }}\n          interval: {CHECK_WINDOW_SECS}s\n          minRequests: {min_requests}\n        - name: request-duration\n          thresholdRange: {{ max: 500 }}\n          interval: {CHECK_WINDOW_SECS}s\n          minRequests: {min_requests}\n"
            )
        };
        // Blue/green without mirroring sends the canary no client traffic until the
        // cut-over: its checks take no minimum, and a gate would wait for nothing.
        let gated = format!(
            "      webhooks:\n        - name: traffic-gate\n          type: rollout\n          url: {hook}/traffic\n          timeout: {}s\n{}",
            GATE_LIMIT.as_secs() + 5,
            metrics(MIN_REQUESTS)
        );
        let analysis = match self {
            Scenario::Promote | Scenario::Rollback => {
                "      stepWeight: 20\n      maxWeight: 60\n".to_string() + &gated
            }
            Scenario::Ab => "      iterations: 4\n      match:\n        - headers: { x-canary: { exact: insider } }\n"
                .to_string() + &gated,
            Scenario::Bluegreen => format!(
                "      iterations: 3\n      webhooks:\n        - name: acceptance-test\n          type: pre-rollout\n          url: {hook}/acceptance\n          timeout: 5s\n{}",
                metrics(0)
            ),
            Scenario::Mirror => {
                "      iterations: 3\n      mirror: true\n      mirrorWeight: 100\n".to_string()
                    + &gated
            }
            Scenario::Affinity => "      stepWeight: 25\n      maxWeight: 50\n      sessionAffinity:\n        cookieName: weir-canary\n        primaryCookieName: weir-primary\n        maxAge: 600\n"
                .to_string() + &gated,
        };
        format!(
            "canaries:\n  - name: app\n    route: app\n    watchRevision: true\n    analysis:\n      interval: 1s\n      threshold: 2\n{analysis}"
        )
    }
}

/// The window of the demo's checks, in seconds. Longer than the 1 s between ticks, so
/// the first check after a step already sees a few seconds of the canary's traffic; the
/// traffic gate needs the checks' minimum in all but the oldest of these seconds, which
/// a machine answering 15 requests per second gives a 20 % canary.
const CHECK_WINDOW_SECS: u64 = 5;

/// Requests of the judged role each check needs in its window.
const MIN_REQUESTS: u64 = 10;

/// How long the traffic gate waits for them before it lets the checks decide (they then
/// fail for "not enough traffic", as they would without the gate).
const GATE_LIMIT: Duration = Duration::from_secs(10);

/// The YAML of the demo's weir: two slots on `v1_addr`, the route and the canary.
pub fn demo_config(scenario: Scenario, v1_addr: SocketAddr, hook: &str) -> String {
    format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\nbackends:\n  app-blue:\n    endpoints: [\"{v1_addr}\"]\n    revisionPath: /version\n  app-green:\n    endpoints: [\"{v1_addr}\"]\n    revisionPath: /version\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\n{}",
        scenario.canary_yaml(hook)
    )
}

/// Starts the app of the demo from its YAML.
async fn start_app(yaml: &str) -> Result<RunningApp, String> {
    let cfg = crate::config::parse_yaml(yaml, "demo.yaml", std::path::Path::new("."))
        .map_err(|e| e.to_string())?;
    crate::app::start(cfg).await
}

/// What the traffic gate reads, set once the app has started (the app's config needs
/// the webhook receiver's URL first).
struct Probe {
    store: Arc<TableStore>,
    shared: Arc<ProxyShared>,
    engine: Arc<Engine>,
}

/// The demo's webhooks: `/acceptance`, the blue/green scenario's acceptance test, and
/// `/traffic`, the traffic gate.
fn hook_handler(v2: SocketAddr, probe: Arc<OnceLock<Probe>>) -> HookHandler {
    Arc::new(move |path, _payload| {
        let probe = probe.clone();
        Box::pin(async move {
            if path == "/traffic" {
                return traffic_gate(&probe).await;
            }
            acceptance_test(v2).await
        })
    })
}

/// The acceptance test of the blue/green scenario: GET the idle slot's backend directly.
async fn acceptance_test(v2: SocketAddr) -> (u16, String) {
    let client = crate::rollout::http::HttpClient::new();
    match client
        .get(&format!("http://{v2}/version"), &[], Duration::from_secs(2))
        .await
    {
        Ok(r) if r.status == 200 => (200, "acceptance tests passed".to_string()),
        Ok(r) => (500, format!("acceptance tests failed: HTTP {}", r.status)),
        Err(e) => (500, format!("acceptance tests failed: {e}")),
    }
}

/// The traffic gate (a `rollout` webhook, called before the metrics of every analysed
/// tick): answers once the judged role has [`MIN_REQUESTS`] requests in the check
/// window without its oldest second, so the check, which reads the window right after,
/// finds them there even if a second boundary passes in between. Always passes: after
/// [`GATE_LIMIT`] the checks judge what there is.
async fn traffic_gate(probe: &OnceLock<Probe>) -> (u16, String) {
    let Some(p) = probe.get() else {
        return (200, "no proxy to wait for".to_string());
    };
    let deadline = tokio::time::Instant::now() + GATE_LIMIT;
    loop {
        let (role, n) = judged_requests(p);
        if n >= MIN_REQUESTS {
            return (200, format!("{n} {role} requests to judge"));
        }
        if tokio::time::Instant::now() >= deadline {
            return (
                200,
                format!("only {n} {role} requests after {GATE_LIMIT:?}"),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The role the checks judge now (the shadow copies while the run mirrors, as the
/// engine's built-in metrics do) and its requests in the gate's part of the window.
fn judged_requests(p: &Probe) -> (crate::stats::Role, u64) {
    let mirroring = p.engine.status("app").is_some_and(|s| s.mirror);
    let role = if mirroring {
        crate::stats::Role::Mirror
    } else {
        crate::stats::Role::Canary
    };
    let now = p.shared.now_sec(Instant::now());
    let n = p
        .store
        .route_stats("app")
        .map_or(0, |s| s.snapshot(role, now, CHECK_WINDOW_SECS - 1).requests);
    (role, n)
}

/// Runs one scenario, printing it live; `Ok(true)` when the outcome is the expected one.
pub async fn run(scenario: Scenario) -> Result<bool, String> {
    run_with(scenario, false).await
}

/// [`run`], and with `hold` the demo stays up after the outcome (backends, proxy,
/// engine, the console, light traffic) until Ctrl-C, for a look in the console.
pub async fn run_with(scenario: Scenario, hold: bool) -> Result<bool, String> {
    let t0 = Instant::now();
    let v1 = echo("v1", 0.0).await?;
    let v2 = echo(
        "v2",
        if scenario == Scenario::Rollback {
            0.3
        } else {
            0.0
        },
    )
    .await?;
    let probe = Arc::new(OnceLock::new());
    let hooks = HookServer::spawn_with(hook_handler(v2.addr, probe.clone()))
        .await
        .map_err(|e| format!("cannot start the webhook receiver: {e}"))?;
    let app = start_app(&demo_config(scenario, v1.addr, &hooks.url(""))).await?;
    let _ = probe.set(Probe {
        store: app.store.clone(),
        shared: app.shared.clone(),
        engine: app.engine.clone(),
    });
    let engine = app.engine.clone();
    let proxy = app.proxy_addr();
    println!(
        "weir demo --scenario {}: {}",
        scenario.name(),
        scenario.describe()
    );
    println!(
        "  v1 on {}, v2 on {}; proxy http://{proxy}; control API http://{}",
        v1.addr, v2.addr, app.admin_addr
    );
    println!("  console: http://{}/ui/", app.admin_addr);
    println!("  route app: primary app-blue (v1), idle slot app-green (v1); analysis every 1s");

    let seen = Arc::new(Seen::default());
    let flags = Arc::new(RunFlags::default());
    let mut events = engine.subscribe();
    // Events before the subscription (initialisation) are in the status ring.
    let mut backlog: Vec<RolloutEvent> = engine.status("app").map(|s| s.events).unwrap_or_default();
    let workers = spawn_traffic(
        scenario,
        proxy,
        app.store.clone(),
        seen.clone(),
        flags.clone(),
    );

    let deadline = tokio::time::Instant::now() + Duration::from_secs(55);
    let mut deployed = false;
    let mut mirror_copies_before_cutover = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.tick().await;
    let mut last = (0u64, 0u64, 0u64);
    let mut printed: Vec<(u64, String, String)> = Vec::new();
    let outcome: Option<RolloutEvent> = loop {
        let e = if let Some(e) = (!backlog.is_empty()).then(|| backlog.remove(0)) {
            Some(e)
        } else {
            tokio::select! {
                r = events.recv() => match r {
                    Ok(e) => Some(e),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
                    Err(_) => break None,
                },
                _ = ticker.tick() => {
                    let now = (
                        seen.v1.load(Ordering::Relaxed),
                        seen.v2.load(Ordering::Relaxed),
                        seen.failed.load(Ordering::Relaxed),
                    );
                    let (d1, d2, df) = (now.0 - last.0, now.1 - last.1, now.2 - last.2);
                    last = now;
                    let st = engine.status("app");
                    let (phase, w) = st
                        .as_ref()
                        .map(|s| (s.phase.to_string(), s.canary_weight))
                        .unwrap_or_default();
                    let mut line = format!(
                        "   traffic  {:>4} req/s   v1 {d1:>4}   v2 {d2:>4}   5xx {df:>3}   | {phase} canary {w}%",
                        d1 + d2
                    );
                    if scenario == Scenario::Mirror {
                        line.push_str(&format!(
                            "   shadow copies to v2 so far: {}",
                            shadow_copies(&app)
                        ));
                    }
                    say(t0, &line);
                    if tokio::time::Instant::now() > deadline {
                        break None;
                    }
                    None
                }
            }
        };
        let Some(e) = e else { continue };
        if printed.contains(&(e.time_ms, e.reason.clone(), e.message.clone())) {
            continue;
        }
        printed.push((e.time_ms, e.reason.clone(), e.message.clone()));
        apply_event_flags(scenario, &flags, &e);
        let mut line = format!(
            "{:<17} canary {:>3}%  {}: {}",
            e.phase.to_string(),
            e.canary_weight,
            e.reason,
            e.message
        );
        if !e.checks.is_empty() {
            let checks: Vec<String> = e
                .checks
                .iter()
                .map(|c| {
                    format!(
                        "{}={}",
                        c.name,
                        c.value.map_or("-".to_string(), |v| format!("{v:.1}"))
                    )
                })
                .collect();
            line.push_str(&format!("  [{}]", checks.join(" ")));
        }
        say(t0, &line);
        if scenario == Scenario::Mirror && e.canary_weight > 0 && mirror_copies_before_cutover == 0
        {
            mirror_copies_before_cutover = shadow_copies(&app);
        }
        if e.reason == "Initialized" && !deployed {
            deployed = true;
            tokio::time::sleep(Duration::from_millis(500)).await;
            say(t0, "deploying v2 to the idle slot app-green (its endpoint list now points at the v2 backend)");
            deploy(&app, v2.addr)?;
        }
        if deployed
            && e.revision.as_deref() == Some("v2")
            && matches!(e.phase, Phase::Succeeded | Phase::Failed)
            && matches!(
                e.reason.as_str(),
                "Succeeded" | "RolledBack" | "PromotionFailed"
            )
        {
            break Some(e);
        }
    };
    workers.stop().await;
    let result = verify(
        scenario,
        &app,
        &seen,
        outcome.as_ref(),
        mirror_copies_before_cutover,
    )
    .await;
    let ok = match &result {
        Ok(msg) => {
            println!("outcome: {msg}");
            println!(
                "demo {}: OK (expected {})",
                scenario.name(),
                scenario.expected()
            );
            true
        }
        Err(msg) => {
            println!("outcome: {msg}");
            println!(
                "demo {}: UNEXPECTED OUTCOME (expected {})",
                scenario.name(),
                scenario.expected()
            );
            false
        }
    };
    if hold {
        // A trickle of requests keeps the console's rates and charts alive.
        let trickle = crate::demo::traffic::TrafficSpec::new(proxy)
            .pause(Duration::from_millis(50))
            .start();
        println!(
            "holding: console http://{}/ui/ , proxy http://{proxy} ; Ctrl-C to stop",
            app.admin_addr
        );
        if let Err(e) = tokio::signal::ctrl_c().await {
            eprintln!("demo: cannot wait for Ctrl-C ({e}); stopping");
        }
        trickle.stop().await;
    }
    engine.shutdown().await;
    app.shutdown().await;
    drop(hooks);
    Ok(ok)
}

/// Shadow copies the proxy sent to the canary slot (the mirror role's stats).
fn shadow_copies(app: &RunningApp) -> u64 {
    let now = app.shared.now_sec(Instant::now());
    app.store.route_stats("app").map_or(0, |s| {
        s.snapshot(crate::stats::Role::Mirror, now, s.capacity_secs() as u64)
            .requests
    })
}

async fn echo(version: &str, error_rate: f64) -> Result<EchoHandle, String> {
    crate::echo::spawn(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        EchoOptions {
            version: version.to_string(),
            error_rate,
            latency: Duration::from_millis(2),
        },
    )
    .await
    .map_err(|e| format!("cannot start the {version} backend: {e}"))
}

/// Points the idle slot at the v2 backend, as a deploy script would.
fn deploy(app: &RunningApp, v2: SocketAddr) -> Result<(), String> {
    // Atomic with the engine's own writes of the table (it records the
    // run's state there), which a load-then-replace could race with.
    app.store
        .update_table("demo", "deploy v2 to the idle slot", |raw| {
            if let Some(b) = raw.backends.get_mut("app-green") {
                b.endpoints = vec![v2.to_string()];
            }
        })
        .map(|_| ())
        .map_err(|e| format!("deploy failed: {e:?}"))
}

/// Checks the outcome against the scenario's promises.
async fn verify(
    scenario: Scenario,
    app: &RunningApp,
    seen: &Seen,
    outcome: Option<&RolloutEvent>,
    mirror_copies: u64,
) -> Result<String, String> {
    let Some(end) = outcome else {
        return Err("the run did not finish within the demo's time limit".to_string());
    };
    if end.phase != scenario.expected() {
        return Err(format!("the run ended {} ({})", end.phase, end.message));
    }
    if seen.violations.load(Ordering::Relaxed) > 0 {
        let first = seen
            .first_violation
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default();
        return Err(format!(
            "{} requests broke the scenario's promise, first: {first}",
            seen.violations.load(Ordering::Relaxed)
        ));
    }
    let client: DemoClient = Client::builder(TokioExecutor::new()).build_http();
    let want = if scenario == Scenario::Rollback {
        "v1"
    } else {
        "v2"
    };
    let mut got = BTreeMap::<String, u32>::new();
    for _ in 0..20 {
        if let Some((_, v, _)) = get(&client, app.proxy_addr(), &[]).await {
            *got.entry(v.unwrap_or_else(|| "?".into())).or_default() += 1;
        }
    }
    if got.get(want).copied().unwrap_or(0) != 20 {
        return Err(format!(
            "after the run clients got {got:?}, expected only {want}"
        ));
    }
    let snap = app.store.load();
    let route = snap.spec.raw.routes.iter().find(|r| r.name == "app");
    let primary = route.map(|r| r.primary.clone()).unwrap_or_default();
    let extra = match scenario {
        Scenario::Ab => {
            let n = seen.insiders_on_v2.load(Ordering::Relaxed);
            if n == 0 {
                return Err("no insider request reached v2 during the A/B run".into());
            }
            format!("; {n} insider requests reached v2 during the run, no other request did")
        }
        Scenario::Mirror => {
            if mirror_copies == 0 {
                return Err("v2 received no shadow copies before the cutover".into());
            }
            format!("; v2 answered {mirror_copies} shadow copies while clients were on v1")
        }
        Scenario::Bluegreen => "; no client reached v2 before the cutover".to_string(),
        Scenario::Affinity => "; no cookie-jar client ever went back from v2 to v1".to_string(),
        _ => String::new(),
    };
    Ok(match scenario {
        Scenario::Rollback => format!(
            "Failed as expected, rolled back: all traffic on the primary {primary} (v1){extra}"
        ),
        _ => format!(
            "Succeeded: v2 is the primary ({primary}) and serves every client; the old primary is the idle slot{extra}"
        ),
    })
}

/// Entry point of `weir demo`: exit 0 only for the expected outcome.
pub fn main(scenario: Scenario, hold: bool) -> std::process::ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(run_with(scenario, hold)) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("demo: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
