//! `weir ctl deploy`, `weir ctl start --revision [--force]` and `weir ctl watch CANARY`
//! with the real binary against a live app in this process (127.0.0.1:0), stdout piped
//! (so `watch` prints plain lines).

use crate::support;

use std::io::BufRead;
use std::process::Command;
use support::weir_ctl::{ctl, ctl_command, GUARD};
use support::*;
use weir::app::RunningApp;

const HEALTH: &str = "    healthCheck: { path: /healthz, interval: 100ms, timeout: 1s }\n";

/// `app-blue` / `app-green` with health checks, the green one with `rolling`.
fn slots(blue: &str, green: &str, rolling: &str) -> String {
    format!(
        "backends:\n  app-blue:\n    endpoints: [\"{blue}\"]\n    revisionPath: /version\n{HEALTH}  app-green:\n    endpoints: [\"{green}\"]\n    revisionPath: /version\n{HEALTH}{rolling}routes:\n  - name: app\n    primary: app-blue\n    canary: app-green\n"
    )
}

fn rotation(app: &RunningApp, backend: &str) -> Vec<String> {
    app.store
        .backend(backend)
        .map(|b| b.addresses().iter().map(|a| a.to_string()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_rolls_the_slot_and_waits_until_it_is_ready() {
    let blue = echo("v1").await;
    let old = echo("v1").await;
    let new = echo("v2").await;
    let app = proxy(&slots(&blue.addr.to_string(), &old.addr.to_string(), "")).await;
    let new_addr = new.addr.to_string();
    let o = ctl(&app, &["deploy", "app-green", &new_addr]).await;
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(
        lines[0].starts_with(&format!(
            "app-green: rolling to {new_addr} (table version 2, update 2)"
        )),
        "{}",
        o.stdout
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("app-green: Progressing  ready ")),
        "a progress line while it rolls:\n{}",
        o.stdout
    );
    assert_eq!(
        lines.last().copied(),
        Some("app-green: rolled out: 1/1 ready"),
        "{}",
        o.stdout
    );
    // It returned when the new endpoint serves alone.
    assert_eq!(rotation(&app, "app-green"), [new_addr.as_str()]);
    // --json: every progress line is the rollingUpdate document.
    let newer = echo("v3").await;
    let o = ctl(
        &app,
        &["--json", "deploy", "app-green", &newer.addr.to_string()],
    )
    .await;
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let docs: Vec<serde_json::Value> = o
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(
        docs.last().map(|d| d["phase"].clone()),
        Some("Complete".into())
    );
    assert!(docs.iter().all(|d| d["generation"] == 3), "{}", o.stdout);
    let o = ctl(&app, &["deploy", "app-green", &new_addr]).await;
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    // The same list again: nothing to roll, done at once.
    let o = ctl(&app, &["deploy", "app-green", &new_addr]).await;
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.ends_with("rolled out: 1/1 ready\n"),
        "{}",
        o.stdout
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_errors_are_the_apis_reasons_and_exit_1() {
    let blue = echo("v1").await;
    let green = echo("v1").await;
    let app = proxy(&slots(&blue.addr.to_string(), &green.addr.to_string(), "")).await;
    let o = ctl(&app, &["deploy", "nope", "127.0.0.1:1"]).await;
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(
        o.stderr.contains("no backend")
            && o.stderr.contains("nope")
            && o.stderr.contains("HTTP 404"),
        "{}",
        o.stderr
    );
    let o = ctl(&app, &["deploy", "app-green", "not-an-endpoint"]).await;
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(
        o.stderr.contains("field endpoints[0]") && o.stderr.contains("HTTP 422"),
        "{}",
        o.stderr
    );
    // Without an endpoint clap refuses (usage, exit 2).
    let o = ctl(&app, &["deploy", "app-green"]).await;
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert_eq!(rotation(&app, "app-green"), [green.addr.to_string()]);
    app.shutdown().await;
}

/// A new endpoint that never passes its health check: the update stalls after
/// `progressDeadline` and deploy exits 1 naming it, while the old endpoint keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_or_slow_deploy_exits_1_with_the_reason() {
    let blue = echo("v1").await;
    let green = echo("v1").await;
    let (_held, dead) = refusing_addr();
    let app = proxy(&slots(
        &blue.addr.to_string(),
        &green.addr.to_string(),
        "    rollingUpdate: { maxSurge: 1, maxUnavailable: 0, progressDeadline: 1s }\n",
    ))
    .await;
    let dead = dead.to_string();
    let o = ctl(&app, &["deploy", "app-green", &dead]).await;
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr
            .contains("app-green: the rolling update stalled (no progress for 1s)"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains(&format!("{dead} not ready")),
        "{}",
        o.stderr
    );
    assert!(
        o.stdout.contains("app-green: Stalled  ready 1/1"),
        "{}",
        o.stdout
    );
    assert_eq!(rotation(&app, "app-green"), [green.addr.to_string()]);
    // Before the deadline, --timeout ends the wait.
    let green2 = echo("v1").await;
    let _ = ctl(&app, &["deploy", "app-green", &green2.addr.to_string()]).await;
    let o = ctl(&app, &["deploy", "app-green", &dead, "--timeout", "300ms"]).await;
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("app-green: not rolled out within 300ms")
            && o.stderr.contains(&format!("{dead} not ready")),
        "{}",
        o.stderr
    );
    app.shutdown().await;
}

fn canary_config(blue: &str, green: &str, watch_revision: bool) -> String {
    format!(
        "{}canaries:\n  - name: app\n    route: app\n    watchRevision: {watch_revision}\n    analysis: {{ interval: 1m, threshold: 5, stepWeight: 10 }}\n",
        slots(blue, green, "")
    )
}

async fn initialised(app: &RunningApp) {
    let ok = eventually(GUARD, || async {
        app.engine
            .status("app")
            .is_some_and(|s| s.phase == weir::rollout::Phase::Initialized)
    })
    .await;
    assert!(ok, "canary app never initialised");
}

/// With `watchRevision`, `start` refuses a revision the canary slot does not report
/// (409 with the slot's answer); `--force` starts it, and a matching one starts without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_checks_the_revision_of_the_slot_unless_forced() {
    let blue = echo("v1").await;
    let green = echo("v1").await;
    let app = proxy(&canary_config(
        &blue.addr.to_string(),
        &green.addr.to_string(),
        true,
    ))
    .await;
    initialised(&app).await;
    let o = ctl(&app, &["start", "app", "--revision", "v2"]).await;
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains(
            "start refused: the canary slot app-green reports revision \"v1\", not \"v2\" (--force starts anyway)"
        ) && o.stderr.contains("HTTP 409"),
        "{}",
        o.stderr
    );
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    let st = app.engine.status("app").expect("status");
    assert_eq!(
        (st.revision, st.pending_revision),
        (None, None),
        "nothing started"
    );
    let o = ctl(&app, &["start", "app", "--revision", "v2", "--force"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut lines = o.stdout.lines();
    assert!(
        lines
            .next()
            .is_some_and(|l| l.starts_with("app: start done: ")),
        "{}",
        o.stdout
    );
    // Then the state after the command, as `weir ctl canaries` shows it.
    assert!(
        lines.next().is_some_and(|l| l.starts_with("CANARY")),
        "{}",
        o.stdout
    );
    let row = lines.next().unwrap_or_default();
    assert!(row.starts_with("app "), "{}", o.stdout);
    assert!(o.stdout.contains("Run of v2 requested"), "{}", o.stdout);
    let st = app.engine.status("app").expect("status");
    assert_eq!(
        st.pending_revision.or(st.revision).as_deref(),
        Some("v2"),
        "the run of v2 is requested"
    );
    // What the slot reports starts without --force.
    let o = ctl(&app, &["start", "app", "--revision", "v1"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    // Over the API: force is a body field; an unknown field is refused by name.
    let c = client();
    let post = |body: &str| {
        http::Request::post(format!(
            "http://{}/api/v1/canaries/app/start",
            app.admin_addr
        ))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .unwrap()
    };
    let r = send(&c, post(r#"{"revision": "v3"}"#)).await;
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.json()["error"], "command-refused");
    let r = send(&c, post(r#"{"revision": "v3", "force": true}"#)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = send(&c, post(r#"{"revision": "v3", "forced": true}"#)).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("forced"), "{}", r.text());
    app.shutdown().await;
}

/// Without `watchRevision` a revision is a label: no check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_watch_revision_start_takes_any_label() {
    let blue = echo("v1").await;
    let green = echo("v1").await;
    let app = proxy(&canary_config(
        &blue.addr.to_string(),
        &green.addr.to_string(),
        false,
    ))
    .await;
    initialised(&app).await;
    let o = ctl(&app, &["start", "app", "--revision", "release-42"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    app.shutdown().await;
}

/// The live view, piped: a state line, then a line per event and per change, until
/// the run finishes; it names the outcome and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_follows_a_run_to_its_end_in_plain_lines() {
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let yaml = format!(
        "{}canaries:\n  - name: app\n    route: app\n    analysis: {{ interval: 200ms, threshold: 2, stepWeight: 50, maxWeight: 50 }}\n",
        slots(&blue.addr.to_string(), &green.addr.to_string(), "")
    );
    let app = proxy(&yaml).await;
    initialised(&app).await;
    let (mut child, mut rx) =
        spawn_lines(ctl_command(&app, &["watch", "app", "--interval", "100ms"]));
    let first = tokio::time::timeout(GUARD, rx.recv())
        .await
        .expect("a first line")
        .expect("watch printed nothing");
    assert!(
        first.contains(" app Initialized steps 0 → 50 → promote weight 0% next in "),
        "{first}"
    );
    // Subscribed before its first line: the start's events are all seen.
    let o = ctl(&app, &["start", "app", "--revision", "v2"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut lines = vec![first];
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(l)) => lines.push(l),
            Ok(None) => break,
            Err(_) => {
                let _ = child.kill();
                panic!("watch did not end:\n{}", lines.join("\n"));
            }
        }
    }
    let status = child.wait().expect("wait");
    let text = lines.join("\n");
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(!text.contains('\x1b'), "no escapes when piped:\n{text}");
    assert!(
        text.contains("Progressing steps 0 → [50] → promote weight 50%"),
        "the current step is marked:\n{text}"
    );
    assert!(text.contains(" app Succeeded "), "{text}");
    assert_eq!(
        lines.last().map(String::as_str),
        Some("app: run finished: Succeeded (v2 promoted)"),
        "{text}"
    );
    // --count ends it after N events; an unknown canary is the API's 404.
    let o = ctl(&app, &["watch", "nope"]).await;
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(
        o.stderr.contains("nope") && o.stderr.contains("HTTP 404"),
        "{}",
        o.stderr
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_count_stops_after_n_events() {
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let yaml = format!(
        "{}canaries:\n  - name: app\n    route: app\n    analysis: {{ interval: 1m, threshold: 2, stepWeight: 50 }}\n",
        slots(&blue.addr.to_string(), &green.addr.to_string(), "")
    );
    let app = proxy(&yaml).await;
    initialised(&app).await;
    let (mut child, mut rx) = spawn_lines(ctl_command(&app, &["watch", "app", "--count", "1"]));
    let first = tokio::time::timeout(GUARD, rx.recv())
        .await
        .expect("a first line");
    assert!(first.is_some_and(|l| l.contains(" app Initialized ")));
    let o = ctl(&app, &["pause", "app"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut lines = Vec::new();
    while let Ok(Some(l)) = tokio::time::timeout(GUARD, rx.recv()).await {
        lines.push(l);
    }
    let status = child.wait().expect("wait");
    let text = lines.join("\n");
    assert_eq!(status.code(), Some(0), "{text}");
    assert_eq!(lines.len(), 2, "the event, then the changed state:\n{text}");
    assert!(
        lines[0].contains(" app Initialized ") && lines[0].contains("Paused"),
        "{text}"
    );
    assert!(lines[1].contains("Initialized (paused)"), "{text}");
    // --json: the status, then each event, as JSON lines.
    let (mut child, mut rx) = spawn_lines(ctl_command(
        &app,
        &["--json", "watch", "app", "--count", "1"],
    ));
    let first = tokio::time::timeout(GUARD, rx.recv())
        .await
        .expect("a first line");
    let status: serde_json::Value = serde_json::from_str(&first.unwrap_or_default()).unwrap();
    assert_eq!(
        (status["name"].as_str(), status["paused"].as_bool()),
        (Some("app"), Some(true))
    );
    let o = ctl(&app, &["resume", "app"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let event = tokio::time::timeout(GUARD, rx.recv())
        .await
        .expect("an event line");
    let event: serde_json::Value = serde_json::from_str(&event.unwrap_or_default()).unwrap();
    assert_eq!(event["reason"], "Resumed", "{event}");
    assert_eq!(child.wait().expect("wait").code(), Some(0));
    app.shutdown().await;
}

/// Spawns `cmd` and hands its stdout over line by line.
fn spawn_lines(
    mut cmd: Command,
) -> (
    std::process::Child,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let mut child = cmd.spawn().expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}
