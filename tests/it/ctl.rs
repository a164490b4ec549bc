//! `weir ctl` against a live app: the real binary, its stdout piped (so
//! `watch` prints plain lines), the app in this process on 127.0.0.1:0.

use crate::support;

use std::process::Command;
use support::weir_ctl::{ctl, GUARD};
use support::*;
use weir::app::RunningApp;

async fn app_with_traffic(
    requests: usize,
) -> (RunningApp, weir::echo::EchoHandle, weir::echo::EchoHandle) {
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let yaml = format!(
        "admin:\n  address: 127.0.0.1:0\n{}",
        two_slot_config(blue.addr, green.addr, "    canaryWeight: 0\n")
    );
    let app = proxy(&yaml).await;
    let c = client();
    for _ in 0..requests {
        assert_eq!(get_once(&c, app.proxy_addr(), "/", &[]).await.status, 200);
    }
    (app, blue, green)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_readiness_version_and_idle_slot() {
    let (app, _b, _g) = app_with_traffic(5).await;
    let o = ctl(&app, &["status"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("ready, table version 1"), "{}", o.stdout);
    let row = o
        .stdout
        .lines()
        .find(|l| l.starts_with("app "))
        .expect("route row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    // ROUTE PRIMARY CANARY WEIGHT IDLE-SLOT PRIMARY-OK CANARY-OK
    assert_eq!(
        &cells[..6],
        &["app", "app-blue", "app-green", "0", "app-green", "100.00%"],
        "{row}"
    );
    // --json is the API's data, machine-readable.
    let o = ctl(&app, &["status", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("JSON");
    assert_eq!(v["tableVersion"], 1);
    assert_eq!(v["ready"], true);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_lists_the_table() {
    let (app, _b, _g) = app_with_traffic(0).await;
    let o = ctl(&app, &["routes"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut lines = o.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "HOSTS", "PATH", "PRIMARY", "CANARY", "WEIGHT", "MATCH", "MIRROR", "AFFINITY"]
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        row,
        ["app", "*", "/", "app-blue", "app-green", "0", "-", "-", "-"]
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_shows_per_role_numbers() {
    let (app, _b, _g) = app_with_traffic(12).await;
    let o = ctl(&app, &["stats", "--route", "app", "--window", "60s"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.starts_with("window 60s\n"), "{}", o.stdout);
    let primary: Vec<&str> = o
        .stdout
        .lines()
        .find(|l| l.contains(" primary "))
        .expect("primary row")
        .split_whitespace()
        .collect();
    assert_eq!(&primary[..3], &["app", "primary", "12"]);
    assert_eq!(primary[4], "100.00%");
    let canary: Vec<&str> = o
        .stdout
        .lines()
        .find(|l| l.contains(" canary "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(&canary[..3], &["app", "canary", "0"]);
    // Bad input is reported by the API and exits 1.
    let o = ctl(&app, &["stats", "--window", "0s"]).await;
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("window"), "{}", o.stderr);
    let o = ctl(&app, &["stats", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("JSON");
    assert_eq!(v["routes"][0]["roles"]["primary"]["requests"], 12);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_weight_changes_the_running_table() {
    let (app, _b, _g) = app_with_traffic(0).await;
    let o = ctl(&app, &["set-weight", "app", "30"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.stdout.trim(),
        "app: canaryWeight 0 -> 30 (table version 1 -> 2)"
    );
    let snap = app.store.load();
    assert_eq!(snap.version, 2);
    assert_eq!(snap.spec.routing.routes[0].canary_weight, 30);
    // Refused values name the field, exit 1 and change nothing.
    let o = ctl(&app, &["set-weight", "app", "101"]).await;
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("canaryWeight") && o.stderr.contains("422"),
        "{}",
        o.stderr
    );
    let o = ctl(&app, &["set-weight", "nope", "5"]).await;
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("404"), "{}", o.stderr);
    assert_eq!(app.store.load().version, 2);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_plain_lines_when_piped() {
    let (app, _b, _g) = app_with_traffic(4).await;
    let o = ctl(&app, &["watch", "--count", "2", "--interval", "100ms"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stdout.contains('\x1b'), "no terminal escapes when piped");
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", o.stdout);
    for l in lines {
        assert!(l.contains(" route=app weight=0 primary: "), "{l}");
        assert!(l.contains("success=100.00%") && l.contains("p99="), "{l}");
        assert!(l.contains(" canary: "), "{l}");
    }
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_file_is_sent_and_required() {
    let token = "ctl-test-token-0123456789";
    let path = std::env::temp_dir().join(format!("weir-ctl-token-{}", std::process::id()));
    std::fs::write(&path, format!("{token}\n")).unwrap();
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let yaml = format!(
        "admin:\n  address: 127.0.0.1:0\n  tokenFile: {}\n{}",
        path.display(),
        two_slot_config(blue.addr, green.addr, "")
    );
    let app = proxy(&yaml).await;
    let o = ctl(&app, &["routes"]).await;
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("401"), "{}", o.stderr);
    let p = path.display().to_string();
    let o = ctl(&app, &["--token-file", &p, "routes"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.starts_with("NAME"));
    assert!(!o.stdout.contains(token) && !o.stderr.contains(token));
    app.shutdown().await;
    let _ = std::fs::remove_file(path);
}

#[tokio::test]
async fn unreachable_api_is_a_clear_error() {
    let (_held, addr) = refusing_addr();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["ctl", "--api", &format!("http://{addr}"), "routes"])
            .env_remove("WEIR_TOKEN_FILE")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach the weir API"), "{err}");
}

/// A canary command that does not apply prints the API's refusal and exits 1; one that
/// applies exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_canary_command_prints_the_reason_and_exits_1() {
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let yaml = format!(
        "{}canaries:\n  - name: app\n    route: app\n    analysis: {{ interval: 1m, threshold: 5, stepWeight: 10 }}\n",
        two_slot_config(blue.addr, green.addr, "")
    );
    let app = proxy(&yaml).await;
    let initialised = eventually(GUARD, || async {
        app.engine
            .status("app")
            .is_some_and(|s| s.phase == weir::rollout::Phase::Initialized)
    })
    .await;
    assert!(initialised, "canary app never initialised");
    for (args, reason) in [
        (&["resume", "app"][..], "resume refused: not paused"),
        (&["abort", "app"][..], "abort refused: no run in progress"),
        (
            &["promote", "app"][..],
            "promote refused: no analysis in progress",
        ),
    ] {
        let o = ctl(&app, args).await;
        assert_eq!(o.code, 1, "{args:?}: {}{}", o.stdout, o.stderr);
        assert!(o.stderr.contains(reason), "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains("HTTP 409"), "{args:?}: {}", o.stderr);
        assert!(o.stdout.is_empty(), "{args:?}: {}", o.stdout);
    }
    let o = ctl(&app, &["pause", "app"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = ctl(&app, &["pause", "app"]).await;
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(
        o.stderr.contains("pause refused: already paused"),
        "{}",
        o.stderr
    );
    app.shutdown().await;
}
