//! The admin listener against clients it must not obey or must not wait for:
//! requests by a name it is not called by (DNS rebinding, 421), writes a page of
//! another site could send (403), idle and half-sent connections at capacity,
//! slow bodies (408), one client's event streams (429), token files others can
//! read, and a real browser on another origin trying all of it.

use crate::console::{cdp, lit};
use crate::support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use weir::app::RunningApp;
use weir::echo::EchoHandle;

/// Longest wait for something that happens at once unless the server hangs.
const BOUND: Duration = Duration::from_secs(30);

/// A route `app` (v1 / v2 slots) and a canary `app` that ticks every minute, so
/// nothing moves unless a command moves it. `admin` is the admin section's body.
fn config(blue: &EchoHandle, green: &EchoHandle, admin: &str) -> String {
    format!(
        "admin:\n  address: 127.0.0.1:0\n{admin}{}canaries:\n  - name: app\n    route: app\n    analysis:\n      interval: 1m\n      threshold: 2\n      maxWeight: 60\n      stepWeight: 20\n      metrics:\n        - name: request-success-rate\n          thresholdRange: {{ min: 99 }}\n          interval: 10s\n",
        two_slot_config(blue.addr, green.addr, "")
    )
}

async fn app_with(admin: &str) -> (RunningApp, EchoHandle, EchoHandle) {
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let app = proxy(&config(&blue, &green, admin)).await;
    // The first tick initialises the canary (a table write): wait for it, so that
    // from here on only a command changes anything.
    wait_canary(&app, "app", BOUND, "the canary initialised", |s| {
        s.phase.as_str() == "Initialized"
    })
    .await;
    (app, blue, green)
}

/// A fresh temporary directory for one test.
fn temp_dir(what: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "weir-admin-guard-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One request on a new connection, written as given: the answer.
async fn exchange(addr: SocketAddr, raw: &str) -> Got {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(raw.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    read_response(&mut s, &mut buf, raw.starts_with("HEAD ")).await
}

/// `METHOD path` with `Host: host`, extra header lines and a body.
fn request(method: &str, path: &str, host: &str, extra: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn json_of(g: &Got) -> serde_json::Value {
    serde_json::from_slice(&g.body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&g.body)))
}

/// The canary's phase and whether it is paused, and the table version: what a
/// write that got through would have changed.
fn picture(app: &RunningApp) -> (String, bool, u64) {
    let s = app.engine.status("app").expect("canary app");
    (
        s.phase.as_str().to_string(),
        s.paused,
        app.store.load().version,
    )
}

#[tokio::test]
async fn a_request_by_a_name_not_allowed_gets_421_and_changes_nothing() {
    let (app, _b, _g) = app_with("").await;
    let admin = app.admin_addr;
    let port = admin.port();
    let before = picture(&app);
    let table = exchange(
        admin,
        &request("GET", "/api/v1/table", &admin.to_string(), "", ""),
    )
    .await;
    assert_eq!(table.status, 200);
    let body = String::from_utf8_lossy(&table.body).into_owned();

    // A page of rebind.attacker.example re-pointed at 127.0.0.1 sends its own name.
    let evil = format!("rebind.attacker.example:{port}");
    let json = "Content-Type: application/json\r\n";
    let put = exchange(admin, &request("PUT", "/api/v1/table", &evil, json, &body)).await;
    assert_eq!(put.status, 421, "{}", String::from_utf8_lossy(&put.body));
    let e = json_of(&put);
    assert_eq!(e["error"], "misdirected-request", "{e}");
    assert_eq!(e["field"], "Host", "{e}");
    let reason = e["reason"].as_str().unwrap();
    assert!(reason.contains("admin.allowedHosts"), "{reason}");
    assert!(reason.contains("rebind.attacker.example"), "{reason}");
    for (method, path) in [
        ("GET", "/api/v1/table"),
        ("GET", "/api/v1/canaries/app"),
        ("POST", "/api/v1/canaries/app/pause"),
        ("GET", "/ui/"),
        ("GET", "/no/such/path"),
    ] {
        let extra = "X-Weir-Request: 1\r\n";
        let r = exchange(admin, &request(method, path, &evil, extra, "")).await;
        assert_eq!(r.status, 421, "{method} {path}");
    }
    assert_eq!(picture(&app), before, "nothing was written");

    // The probes answer any name (health checks call by address), and tell such a
    // caller nothing but up or ready.
    let ready = exchange(admin, &request("GET", "/readyz", &evil, "", "")).await;
    assert_eq!(ready.status, 200);
    assert_eq!(json_of(&ready), serde_json::json!({"status": "ready"}));
    let ready = exchange(admin, &request("GET", "/readyz", "localhost", "", "")).await;
    assert_eq!(
        json_of(&ready)["tableVersion"],
        before.2,
        "the full document"
    );
    let live = exchange(admin, &request("GET", "/healthz", &evil, "", "")).await;
    assert_eq!(live.status, 200);

    // The loopback names, with or without a port, are answered.
    for host in [
        format!("localhost:{port}"),
        "LOCALHOST".to_string(),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ] {
        let r = exchange(admin, &request("GET", "/api/v1/table", &host, "", "")).await;
        assert_eq!(r.status, 200, "{host}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn admin_allowed_hosts_replaces_the_default_names() {
    let (app, _b, _g) = app_with("  allowedHosts: [\"weir.internal\"]\n").await;
    let admin = app.admin_addr;
    let get = |host: String| async move {
        exchange(admin, &request("GET", "/api/v1/table", &host, "", ""))
            .await
            .status
    };
    assert_eq!(get(format!("weir.internal:{}", admin.port())).await, 200);
    assert_eq!(get("WEIR.internal.".into()).await, 200);
    assert_eq!(get(admin.to_string()).await, 421);
    assert_eq!(get("localhost".into()).await, 421);
    app.shutdown().await;
}

#[tokio::test]
async fn a_write_needs_json_or_the_weir_header_and_none_from_another_site_passes() {
    let (app, _b, _g) = app_with("").await;
    let admin = app.admin_addr;
    let host = admin.to_string();
    let before = picture(&app);
    let pause = "/api/v1/canaries/app/pause";
    let json = "Content-Type: application/json\r\n";
    let refused = [
        // What a cross-site `fetch(url, {method: "POST", mode: "no-cors"})` sends.
        ("", "write-header-missing", "Content-Type"),
        (
            "Content-Type: text/plain\r\n",
            "write-header-missing",
            "Content-Type",
        ),
        (
            "Content-Type: application/x-www-form-urlencoded\r\n",
            "write-header-missing",
            "Content-Type",
        ),
        (
            "X-Weir-Request: yes\r\n",
            "write-header-missing",
            "Content-Type",
        ),
        (
            "Content-Type: application/json\r\nSec-Fetch-Site: cross-site\r\n",
            "cross-site",
            "Sec-Fetch-Site",
        ),
        (
            "X-Weir-Request: 1\r\nSec-Fetch-Site: cross-site\r\n",
            "cross-site",
            "Sec-Fetch-Site",
        ),
    ];
    for (extra, error, field) in refused {
        let r = exchange(admin, &request("POST", pause, &host, extra, "")).await;
        assert_eq!(
            r.status,
            403,
            "{extra:?}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let e = json_of(&r);
        assert_eq!(
            (e["error"].as_str(), e["field"].as_str()),
            (Some(error), Some(field)),
            "{e}"
        );
        if error == "write-header-missing" {
            let reason = e["reason"].as_str().unwrap();
            assert!(
                reason.contains("X-Weir-Request: 1") && reason.contains("application/json"),
                "{reason}"
            );
        }
    }
    // An Origin of another host or port than the Host's is refused, the same one passes.
    let port = admin.port();
    for origin in [
        format!("http://localhost:{port}"),
        format!("http://127.0.0.1:{}", port.wrapping_add(1)),
        "null".to_string(),
    ] {
        let extra = format!("{json}Origin: {origin}\r\n");
        let r = exchange(admin, &request("POST", pause, &host, &extra, "{}")).await;
        assert_eq!(r.status, 403, "{origin}");
        assert_eq!(json_of(&r)["field"], "Origin");
    }
    assert_eq!(picture(&app), before, "no refused write changed anything");

    let extra = format!("{json}Origin: http://{host}\r\nSec-Fetch-Site: same-origin\r\n");
    let r = exchange(admin, &request("POST", pause, &host, &extra, "")).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(app.engine.status("app").unwrap().paused);
    let r = exchange(
        admin,
        &request(
            "POST",
            "/api/v1/canaries/app/resume",
            &host,
            "X-Weir-Request: 1\r\n",
            "",
        ),
    )
    .await;
    assert_eq!(r.status, 200, "a command needs no body with the header");
    assert!(!app.engine.status("app").unwrap().paused);
    app.shutdown().await;
}

#[tokio::test]
async fn idle_connections_give_way_to_a_request_when_the_listener_is_full() {
    use weir::control::api::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS};
    let (app, _b, _g) = app_with("").await;
    let admin = app.admin_addr;
    // More connections than there are slots, none of which ever sends a byte.
    let n = MAX_CONNECTIONS + 44;
    let mut idle = Vec::with_capacity(n);
    for _ in 0..n {
        idle.push(TcpStream::connect(admin).await.unwrap());
    }
    // Before idle connections were shed, this waited for their header timeout: the
    // bound is only exceeded by such a wait.
    let ready = tokio::time::timeout(
        HEADER_READ_TIMEOUT / 2,
        exchange(admin, &request("GET", "/readyz", "127.0.0.1", "", "")),
    )
    .await
    .expect("/readyz answers while idle connections fill the listener");
    assert_eq!(ready.status, 200);
    // The longest idle ones were closed to make room: at least one per newcomer
    // beyond the slots (the probe included).
    let closed_at_least = n + 1 - MAX_CONNECTIONS;
    let closed = || {
        idle.iter()
            .filter(|s| {
                let mut b = [0u8; 1];
                matches!(s.try_read(&mut b), Ok(0))
            })
            .count()
    };
    let shed = eventually(BOUND, || {
        let c = closed();
        async move { c >= closed_at_least }
    })
    .await;
    assert!(shed, "only {} idle connections closed", closed());
    drop(idle);
    app.shutdown().await;
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_gets_408_and_frees_its_connection() {
    let (app, _b, _g) = app_with("  bodyTimeout: 300ms\n").await;
    let admin = app.admin_addr;
    let before = picture(&app);
    let mut s = TcpStream::connect(admin).await.unwrap();
    s.write_all(
        format!(
            "PUT /api/v1/table HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    let r = read_response(&mut s, &mut buf, false).await;
    assert_eq!(r.status, 408, "{}", String::from_utf8_lossy(&r.body));
    assert!(header(&r.head, "connection").is_some_and(|v| v.eq_ignore_ascii_case("close")));
    let e: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(e["error"], "request-timeout");
    assert!(
        e["reason"].as_str().unwrap().contains("admin.bodyTimeout"),
        "{e}"
    );
    // The server closed the connection: its slot is free again.
    let mut rest = [0u8; 64];
    let n = tokio::time::timeout(BOUND, s.read(&mut rest))
        .await
        .expect("the connection is closed")
        .unwrap_or(0);
    assert_eq!(n, 0, "nothing more on the connection");
    assert_eq!(picture(&app), before);
    app.shutdown().await;
}

/// Opens `GET /api/v1/events` from `local`: the connection, the status and the
/// response head, and what arrived after the head.
async fn open_stream(admin: SocketAddr, local: &str) -> (TcpStream, u16, String, Vec<u8>) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{local}:0").parse().unwrap()).unwrap();
    let mut s = socket.connect(admin).await.unwrap();
    s.write_all(format!("GET /api/v1/events HTTP/1.1\r\nHost: {admin}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    let head = read_head(&mut s, &mut buf).await.expect("a response head");
    let status = head[9..12].parse().unwrap();
    (s, status, head, buf)
}

#[tokio::test]
async fn one_client_holds_at_most_eight_event_streams() {
    use weir::control::api::MAX_EVENT_STREAMS_PER_CLIENT;
    let (app, _b, _g) = app_with("").await;
    let admin = app.admin_addr;
    let mut streams = Vec::new();
    for _ in 0..MAX_EVENT_STREAMS_PER_CLIENT {
        let (s, status, head, _) = open_stream(admin, "127.0.0.1").await;
        assert_eq!(status, 200, "{head}");
        streams.push(s);
    }
    let (mut s, status, head, mut rest) = open_stream(admin, "127.0.0.1").await;
    assert_eq!(status, 429, "{head}");
    assert!(header(&head, "retry-after").is_some(), "{head}");
    let len: usize = header(&head, "content-length").unwrap().parse().unwrap();
    while rest.len() < len {
        assert!(more(&mut s, &mut rest).await, "the error body");
    }
    let e: serde_json::Value = serde_json::from_slice(&rest[..len]).unwrap();
    assert_eq!(e["error"], "too-many-streams", "{e}");
    // Another client address has places of its own.
    let (_other, status, head, _) = open_stream(admin, "127.0.0.2").await;
    assert_eq!(status, 200, "{head}");
    // A closed stream gives its place back.
    drop(streams.pop());
    let reopened = eventually(BOUND, || async move {
        let (s, status, _, _) = open_stream(admin, "127.0.0.1").await;
        drop(s);
        status == 200
    })
    .await;
    assert!(reopened, "the closed stream's place never came back");
    app.shutdown().await;
}

/// Starts `weir serve` on a config whose admin token file has mode `0644` and
/// whose read-only token file has `0600`; reads stderr to the admin listener's line.
#[cfg(unix)]
#[test]
fn a_token_file_others_can_read_is_warned_about_at_start() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::fs::PermissionsExt;
    use std::process::{Command, Stdio};
    let dir = temp_dir("perm");
    let loose = dir.join("admin-token");
    let tight = dir.join("read-token");
    std::fs::write(&loose, "admin-token-0123456789\n").unwrap();
    std::fs::write(&tight, "read-token-0123456789\n").unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&tight, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = dir.join("weir.yaml");
    std::fs::write(
        &config,
        "listeners:\n  - name: web\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\n  tokenFile: admin-token\n  readOnlyTokenFile: read-token\nbackends:\n  b: { endpoints: [\"127.0.0.1:9\"] }\nroutes:\n  - name: r\n    primary: b\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("serve")
        .arg("-c")
        .arg(&config)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir");
    let mut lines = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.expect("a log line");
        let done = line.contains("admin API listening");
        lines.push(line);
        if done || lines.len() > 50 {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let warned: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("WARN") && l.contains("token file"))
        .collect();
    assert_eq!(
        warned.len(),
        1,
        "one warning, for the loose file: {lines:#?}"
    );
    let w = warned[0];
    assert!(w.contains(&loose.display().to_string()), "{w}");
    assert!(w.contains("0644") && w.contains("admin.tokenFile"), "{w}");
    assert!(!w.contains("read-token"), "{w}");
}

/// A page server on another origin: every request gets an empty HTML page.
async fn page_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                if read_head(&mut s, &mut buf).await.is_some() {
                    let page = "<!doctype html><title>elsewhere</title><p>another site";
                    let _ = s
                        .write_all(
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                                page.len()
                            )
                            .as_bytes(),
                        )
                        .await;
                }
            });
        }
    });
    addr
}

/// What the page tries against the admin API at `api` (an absolute URL): every
/// kind of write a page may send without the API's consent. Resolves to a list of
/// `what: outcome` strings (an opaque answer, a status, or the refusal's error).
fn attack(api: &str, table: &str) -> String {
    format!(
        r#"(async () => {{
  const api = {api};
  const out = [];
  const run = async (what, url, init) => {{
    try {{
      const r = await fetch(api + url, init);
      out.push(what + ': ' + (r.type === 'opaque' ? 'opaque' : r.status));
    }} catch (e) {{
      out.push(what + ': ' + e.name);
    }}
  }};
  for (const cmd of ['pause', 'promote', 'abort']) {{
    await run('no-cors POST ' + cmd, '/api/v1/canaries/app/' + cmd, {{method: 'POST', mode: 'no-cors'}});
    await run('no-cors text/plain ' + cmd, '/api/v1/canaries/app/' + cmd,
      {{method: 'POST', mode: 'no-cors', headers: {{'Content-Type': 'text/plain'}}, body: '{{}}'}});
  }}
  await run('no-cors text/plain start', '/api/v1/canaries/app/start',
    {{method: 'POST', mode: 'no-cors', headers: {{'Content-Type': 'text/plain'}}, body: '{{"revision":"v9","force":true}}'}});
  await run('PUT json table', '/api/v1/table',
    {{method: 'PUT', headers: {{'Content-Type': 'application/json'}}, body: {table}}});
  await run('POST weir header pause', '/api/v1/canaries/app/pause',
    {{method: 'POST', headers: {{'X-Weir-Request': '1'}}}});
  return out;
}})()"#,
        api = lit(api),
        table = lit(table),
    )
}

/// A table that would send all traffic to the canary slot, as JSON.
fn hostile_table(app: &RunningApp) -> String {
    let mut t = serde_json::to_value(&app.store.load().spec.raw).unwrap();
    t["routes"][0]["canaryWeight"] = serde_json::json!(100);
    t.to_string()
}

#[tokio::test]
async fn a_browser_page_of_another_site_changes_nothing_with_or_without_a_token() {
    if !tool_available(
        "chromium",
        "a_browser_page_of_another_site_changes_nothing_with_or_without_a_token",
        "apt-get install chromium",
    ) {
        return;
    }
    let dir = temp_dir("browser");
    std::fs::write(dir.join("token"), "browser-admin-token-0123456789\n").unwrap();
    let page = page_server().await;
    let mut b = cdp::Browser::launch_with(&[
        // What DNS rebinding gives: a name of the attacker's that resolves to loopback.
        "--host-resolver-rules=MAP rebind.attacker.example 127.0.0.1",
    ])
    .await;
    for token in [false, true] {
        let admin = if token {
            format!("  tokenFile: {}\n", dir.join("token").display())
        } else {
            String::new()
        };
        let (app, _b, _g) = app_with(&admin).await;
        let before = picture(&app);
        let table = hostile_table(&app);
        // localhost and 127.0.0.1 are different sites: the page is cross-site.
        let tab = b
            .tab(&format!("http://localhost:{}/", page.port()), 800, 600)
            .await;
        tab.wait(
            &mut b,
            "the other site's page",
            "document.title === 'elsewhere'",
            BOUND,
        )
        .await;
        let api = format!("http://127.0.0.1:{}", app.admin_addr.port());
        let out = tab.eval(&mut b, &attack(&api, &table)).await;
        let out: Vec<String> = serde_json::from_value(out).unwrap();
        // Sent (opaque) or blocked by the browser (no CORS), never obeyed.
        for line in &out {
            assert!(
                line.ends_with(": opaque") || line.ends_with(": TypeError"),
                "token {token}: {line} ({out:#?})"
            );
        }
        assert_eq!(picture(&app), before, "token {token}: {out:#?}");

        // DNS rebinding: the page is same-origin with the API in the browser's eyes,
        // so it could read and write, but it calls it by its own name.
        let port = app.admin_addr.port();
        let rebound = b
            .tab(
                &format!("http://rebind.attacker.example:{port}/ui/"),
                800,
                600,
            )
            .await;
        rebound
            .wait(&mut b, "the rebound page", "document.readyState === 'complete' && location.hostname === 'rebind.attacker.example'", BOUND)
            .await;
        let out = rebound.eval(&mut b, &attack("", &table)).await;
        let out: Vec<String> = serde_json::from_value(out).unwrap();
        let same_origin: Vec<&String> = out
            .iter()
            .filter(|l| l.starts_with("PUT") || l.starts_with("POST weir"))
            .collect();
        assert_eq!(same_origin.len(), 2, "{out:#?}");
        for l in same_origin {
            assert!(l.ends_with(": 421"), "token {token}: {l} ({out:#?})");
        }
        let read = rebound
            .eval(&mut b, "fetch('/api/v1/table').then(r => r.status)")
            .await;
        assert_eq!(read, 421, "token {token}: the table is not readable either");
        assert_eq!(picture(&app), before, "token {token}: {out:#?}");

        // The console, on the API's own origin, still writes (with the token when
        // one is configured).
        let console = b
            .tab(&format!("http://{}/ui/", app.admin_addr), 800, 600)
            .await;
        console
            .wait(
                &mut b,
                "the console",
                "typeof weirConsole === 'object'",
                BOUND,
            )
            .await;
        let auth = if token {
            "'Authorization': 'Bearer browser-admin-token-0123456789', "
        } else {
            ""
        };
        let status = console
            .eval(
                &mut b,
                &format!("fetch('/api/v1/canaries/app/pause', {{method: 'POST', headers: {{{auth}'X-Weir-Request': '1'}}}}).then(r => r.status)"),
            )
            .await;
        assert_eq!(status, 200, "token {token}");
        assert!(app.engine.status("app").unwrap().paused, "token {token}");
        app.shutdown().await;
    }
    b.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
