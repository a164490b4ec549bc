//! The web console (`/ui/`, docs/console.md) and the read-only token.
//!
//! The API tests run everywhere; the browser test drives a real headless Chromium over
//! the DevTools protocol (a small client below, on tokio-tungstenite, already a
//! dev-dependency: the protocol needs four commands here, and a driver crate such as
//! chromiumoxide would add a generated protocol crate that takes minutes to build on
//! the 2-core CI machine). It loads the page during real releases and asserts what a
//! person sees; screenshots go to `target/console-screenshots/`.

use crate::support;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use http_body_util::Full;
use support::*;
use weir::app::RunningApp;
use weir::demo::traffic::{Traffic, TrafficSpec};
use weir::echo::EchoHandle;

const WRITE: &str = "console-write-token-0123456789";
const READ: &str = "console-read-token-0123456789";

fn token_files() -> (PathBuf, PathBuf, PathBuf) {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "weir-console-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("write"), format!("{WRITE}\n")).unwrap();
    std::fs::write(dir.join("read"), format!("{READ}\n")).unwrap();
    (dir.join("write"), dir.join("read"), dir)
}

/// Two slots and a canary `app` that steps 20 → 40 → 60 every `interval`, judged on
/// the proxy's own success rate and P99.
fn config(
    blue: &EchoHandle,
    green: &EchoHandle,
    write: &std::path::Path,
    read: &std::path::Path,
    interval: &str,
) -> String {
    format!(
        "admin:\n  address: 127.0.0.1:0\n  tokenFile: {}\n  readOnlyTokenFile: {}\n{}canaries:\n  - name: app\n    route: app\n    analysis:\n      interval: {interval}\n      threshold: 2\n      maxWeight: 60\n      stepWeight: 20\n      metrics:\n        - name: request-success-rate\n          thresholdRange: {{ min: 99 }}\n          interval: 10s\n          minRequests: 5\n        - name: request-duration\n          thresholdRange: {{ max: 500 }}\n          interval: 10s\n          minRequests: 5\n",
        write.display(),
        read.display(),
        two_slot_config(blue.addr, green.addr, "")
    )
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

async fn call(
    app: &RunningApp,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Answer {
    let c = client();
    let mut b = http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", app.admin_addr));
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    b = b.header("x-weir-request", "1");
    if body.is_some() {
        b = b.header("content-type", "application/json");
    }
    let req = b
        .body(Full::new(Bytes::from(body.unwrap_or("").to_string())))
        .unwrap();
    let r = send(&c, req).await;
    Answer {
        status: r.status,
        headers: r.headers.clone(),
        body: String::from_utf8_lossy(&r.body).into_owned(),
    }
}

#[tokio::test]
async fn the_read_only_token_reads_every_get_and_gets_403_on_a_write() {
    let (write, read, dir) = token_files();
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let app = proxy(&config(&blue, &green, &write, &read, "1m")).await;
    for path in [
        "/api/v1/table",
        "/api/v1/routes/app",
        "/api/v1/stats",
        "/api/v1/canaries",
        "/api/v1/canaries/app",
        "/api/v1/backends/app-blue",
        "/openapi.json",
        "/metrics",
    ] {
        let r = call(&app, Method::GET, path, Some(READ), None).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
    }
    let who = |t| call(&app, Method::GET, "/api/v1/whoami", Some(t), None);
    let r = who(READ).await;
    let w: weir::wire::access::WhoAmI = serde_json::from_str(&r.body).unwrap();
    assert_eq!(w.access, weir::wire::access::Access::Read);
    assert!(w.token_required);
    let w: weir::wire::access::WhoAmI = serde_json::from_str(&who(WRITE).await.body).unwrap();
    assert_eq!(w.access, weir::wire::access::Access::Write);
    assert_eq!(who("not-a-token-of-this-weir").await.status, 401);

    let version = app.store.load().version;
    let writes: [(Method, &str, Option<&str>); 4] = [
        (
            Method::PATCH,
            "/api/v1/routes/app",
            Some(r#"{"canaryWeight":50}"#),
        ),
        (Method::POST, "/api/v1/canaries/app/pause", None),
        (
            Method::POST,
            "/api/v1/canaries/app/start",
            Some(r#"{"revision":"v9"}"#),
        ),
        (
            Method::PUT,
            "/api/v1/backends/app-blue/endpoints",
            Some(r#"{"endpoints":["127.0.0.1:1"]}"#),
        ),
    ];
    for (m, path, body) in writes {
        let r = call(&app, m.clone(), path, Some(READ), body).await;
        assert_eq!(r.status, 403, "{m} {path}: {}", r.body);
        let e: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(e["error"], "forbidden", "{e}");
        assert!(e["reason"].as_str().unwrap().contains("read-only"), "{e}");
        assert!(!r.body.contains(READ), "the token is never echoed");
    }
    assert_eq!(app.store.load().version, version, "nothing was written");
    let st = app.engine.status("app").unwrap();
    assert!(!st.paused && st.revision.is_none(), "{st:?}");
    // The writing token still writes.
    let r = call(
        &app,
        Method::POST,
        "/api/v1/canaries/app/pause",
        Some(WRITE),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_console_is_served_without_a_token_with_a_strict_policy() {
    let (write, read, dir) = token_files();
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let app = proxy(&config(&blue, &green, &write, &read, "1m")).await;
    for (path, media) in [
        ("/ui/", "text/html"),
        ("/ui", "text/html"),
        ("/ui/console.js", "text/javascript"),
        ("/ui/console.css", "text/css"),
        ("/ui/chart.min.js", "text/javascript"),
        ("/ui/chart.js.LICENSE", "text/plain"),
    ] {
        let r = call(&app, Method::GET, path, None, None).await;
        assert_eq!(r.status, 200, "{path}");
        let ct = r.headers["content-type"].to_str().unwrap();
        assert!(ct.starts_with(media), "{path}: {ct}");
        let csp = r.headers["content-security-policy"].to_str().unwrap();
        assert!(
            csp.starts_with("default-src 'self'") && !csp.contains("unsafe"),
            "{csp}"
        );
        assert_eq!(r.headers["x-content-type-options"], "nosniff");
        assert!(
            r.headers.get("set-cookie").is_none(),
            "the console sets no cookie"
        );
    }
    assert!(call(&app, Method::GET, "/ui/", None, None)
        .await
        .body
        .contains("weir console"));
    let r = call(&app, Method::GET, "/ui/secret.txt", None, None).await;
    assert_eq!(r.status, 404);
    // The data behind the page still needs the token.
    assert_eq!(
        call(&app, Method::GET, "/api/v1/canaries", None, None)
            .await
            .status,
        401
    );
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A minimal DevTools-protocol client: one WebSocket to the browser, commands sent in
/// turn, events skipped while waiting for an answer (uncaught page exceptions kept).
pub(crate) mod cdp {
    use futures_util::{SinkExt, StreamExt};
    use serde_json::{json, Value};
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    use tokio::net::TcpStream;
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::WebSocketStream;

    /// Longest wait for one command's answer.
    const CALL_TIMEOUT: Duration = Duration::from_secs(30);

    pub struct Browser {
        ws: WebSocketStream<TcpStream>,
        next: u64,
        child: std::process::Child,
        /// Uncaught exceptions and console errors the pages reported.
        pub errors: Vec<String>,
        _profile: TempDir,
    }

    struct TempDir(std::path::PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    impl Browser {
        pub async fn launch() -> Browser {
            Browser::launch_with(&[]).await
        }

        /// [`Browser::launch`] with extra command-line switches.
        pub async fn launch_with(extra: &[&str]) -> Browser {
            // Tests run in parallel: each browser has a profile of its own.
            static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let profile = std::env::temp_dir().join(format!(
                "weir-console-chromium-{}-{}",
                std::process::id(),
                N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&profile);
            let mut child = std::process::Command::new("chromium")
                .args([
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--remote-debugging-address=127.0.0.1",
                    "--remote-debugging-port=0",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-extensions",
                    "--password-store=basic",
                ])
                .args(extra)
                .arg(format!("--user-data-dir={}", profile.display()))
                .arg("about:blank")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start chromium");
            // A thread reads stderr (and keeps draining it, so chromium never blocks
            // on a full pipe) and hands over the DevTools address.
            let stderr = child.stderr.take().unwrap();
            let (tx, rx) = tokio::sync::oneshot::channel::<String>();
            std::thread::spawn(move || {
                use std::io::BufRead;
                let mut tx = Some(tx);
                for l in std::io::BufReader::new(stderr)
                    .lines()
                    .map_while(Result::ok)
                {
                    if let Some(i) = l.find("ws://") {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(l[i..].trim().to_string());
                        }
                    }
                }
            });
            let url = tokio::time::timeout(Duration::from_secs(30), rx)
                .await
                .expect("chromium printed its DevTools address in time")
                .expect("chromium ended without a DevTools address");
            let hostport = url
                .trim_start_matches("ws://")
                .split('/')
                .next()
                .unwrap()
                .to_string();
            assert!(hostport.starts_with("127.0.0.1:"), "{url}");
            let tcp = TcpStream::connect(&hostport).await.unwrap();
            let (ws, _) = tokio_tungstenite::client_async(url.as_str(), tcp)
                .await
                .expect("DevTools WebSocket");
            Browser {
                ws,
                next: 1,
                child,
                errors: Vec::new(),
                _profile: TempDir(profile),
            }
        }

        pub async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
            let id = self.next;
            self.next += 1;
            let mut msg = json!({"id": id, "method": method, "params": params});
            if let Some(s) = session {
                msg["sessionId"] = json!(s);
            }
            self.ws
                .send(Message::text(msg.to_string()))
                .await
                .expect("send to chromium");
            let deadline = Instant::now() + CALL_TIMEOUT;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let m = tokio::time::timeout(left, self.ws.next())
                    .await
                    .unwrap_or_else(|_| panic!("{method}: no answer from chromium"))
                    .expect("chromium closed the DevTools socket")
                    .expect("DevTools socket error");
                let Message::Text(t) = m else { continue };
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["id"].as_u64() == Some(id) {
                    if let Some(e) = v.get("error") {
                        panic!("{method}: {e}");
                    }
                    return v["result"].clone();
                }
                match v["method"].as_str() {
                    Some("Runtime.exceptionThrown") => self
                        .errors
                        .push(v["params"]["exceptionDetails"].to_string()),
                    Some("Runtime.consoleAPICalled") if v["params"]["type"] == "error" => {
                        self.errors.push(v["params"]["args"].to_string())
                    }
                    Some("Log.entryAdded") if v["params"]["entry"]["level"] == "error" => {
                        let text = v["params"]["entry"]["text"].to_string();
                        // A failed API call the page handles (401, 403, 409) is logged by
                        // the browser too; only the policy's refusals are errors here.
                        if text.contains("Content Security Policy") || text.contains("Refused") {
                            self.errors.push(text)
                        }
                    }
                    _ => {}
                }
            }
        }

        /// A new tab (its own sessionStorage) of `width` × `height`, at `url`.
        pub async fn tab(&mut self, url: &str, width: u32, height: u32) -> Tab {
            let t = self
                .call(None, "Target.createTarget", json!({"url": "about:blank"}))
                .await;
            let target = t["targetId"].as_str().unwrap().to_string();
            let a = self
                .call(
                    None,
                    "Target.attachToTarget",
                    json!({"targetId": target, "flatten": true}),
                )
                .await;
            let session = a["sessionId"].as_str().unwrap().to_string();
            let tab = Tab { session };
            for m in ["Page.enable", "Runtime.enable", "Log.enable"] {
                self.call(Some(&tab.session), m, json!({})).await;
            }
            tab.viewport(self, width, height).await;
            self.call(Some(&tab.session), "Page.navigate", json!({"url": url}))
                .await;
            tab
        }

        pub async fn close(mut self) {
            let _ = self.call(None, "Browser.close", json!({})).await;
        }
    }

    impl Drop for Browser {
        fn drop(&mut self) {
            // Also when a test fails half-way: no browser outlives its test.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    pub struct Tab {
        session: String,
    }

    impl Tab {
        pub async fn viewport(&self, b: &mut Browser, width: u32, height: u32) {
            b.call(
                Some(&self.session),
                "Emulation.setDeviceMetricsOverride",
                json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}),
            )
            .await;
        }

        /// Evaluates `js` in the page (promises awaited) and returns its value.
        pub async fn eval(&self, b: &mut Browser, js: &str) -> Value {
            let r = b
                .call(
                    Some(&self.session),
                    "Runtime.evaluate",
                    json!({"expression": js, "returnByValue": true, "awaitPromise": true}),
                )
                .await;
            if let Some(e) = r.get("exceptionDetails") {
                let page = b
                    .call(
                        Some(&self.session),
                        "Runtime.evaluate",
                        json!({"expression": "document.body.innerHTML", "returnByValue": true}),
                    )
                    .await;
                panic!("{js}: {e}\nthe page: {}", page["result"]["value"]);
            }
            r["result"]["value"].clone()
        }

        /// Polls `js` until it is true, at most `within`.
        pub async fn wait(&self, b: &mut Browser, what: &str, js: &str, within: Duration) {
            let deadline = Instant::now() + within;
            // Before the page has loaded, its elements are not there yet: false.
            let guarded = format!(
                "(() => {{ try {{ return ({js}) === true; }} catch (e) {{ return false; }} }})()"
            );
            loop {
                if self.eval(b, &guarded).await == Value::Bool(true) {
                    return;
                }
                if Instant::now() > deadline {
                    let page = self.eval(b, "document.body.innerText").await;
                    panic!(
                        "never: {what} ({js}); the page shows:\n{}",
                        page.as_str().unwrap_or("")
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }

        pub async fn screenshot(&self, b: &mut Browser, path: &std::path::Path) {
            use base64::Engine as _;
            let r = b
                .call(
                    Some(&self.session),
                    "Page.captureScreenshot",
                    json!({"format": "png", "captureBeyondViewport": true}),
                )
                .await;
            let png = base64::engine::general_purpose::STANDARD
                .decode(r["data"].as_str().unwrap())
                .unwrap();
            std::fs::write(path, png).unwrap();
        }
    }
}

/// `js` as a JSON string literal.
pub(crate) fn lit(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

const LONG: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_release_seen_and_driven_in_a_real_browser() {
    if !tool_available(
        "chromium",
        "a_release_seen_and_driven_in_a_real_browser",
        "apt-get install chromium",
    ) {
        return;
    }
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let (write, read, dir) = token_files();
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let app = proxy(&config(&blue, &green, &write, &read, "2s")).await;
    let traffic = Traffic::start(
        TrafficSpec::new(app.proxy_addr())
            .workers(2)
            .pause(Duration::from_millis(10)),
    );
    let url = format!("http://{}/ui/", app.admin_addr);
    let mut b = cdp::Browser::launch().await;
    let tab = b.tab(&url, 1280, 900).await;

    // The page asks for the token; a wrong one is refused and asked for again.
    tab.wait(
        &mut b,
        "the token is asked",
        "document.getElementById('login').open",
        LONG,
    )
    .await;
    let sign_in = |t: &str| {
        format!("document.getElementById('token').value = {}; document.getElementById('login-form').requestSubmit(); true", lit(t))
    };
    tab.eval(&mut b, &sign_in("this-is-not-the-token")).await;
    tab.wait(
        &mut b,
        "asked again after a wrong token",
        "document.getElementById('login').open && document.getElementById('login-error').textContent.includes('wrong token')",
        LONG,
    )
    .await;
    tab.eval(&mut b, &sign_in(WRITE)).await;
    tab.wait(
        &mut b,
        "the overview lists the canary",
        "!!document.querySelector('#canaries tr[data-canary=app]')",
        LONG,
    )
    .await;
    tab.wait(
        &mut b,
        "the route's rps",
        "!!document.querySelector('#routes tr[data-route=app]')",
        LONG,
    )
    .await;
    assert_eq!(
        tab.eval(&mut b, "document.getElementById('access').textContent")
            .await,
        "read & write"
    );

    // The canary page; start a run of v2 with the Start button.
    tab.eval(&mut b, "location.hash = '#/canary/app'; true")
        .await;
    tab.wait(&mut b, "the canary page", "document.querySelector('h1') && document.querySelector('h1').textContent.startsWith('app')", LONG).await;
    tab.wait(&mut b, "initialised", "document.getElementById('phase') && document.getElementById('phase').textContent === 'Initialized'", LONG).await;
    let start = |rev: &str| {
        format!(
            "document.querySelector('button[data-cmd=start]').click(); document.getElementById('confirm-input').value = {}; document.getElementById('confirm-form').requestSubmit(); true",
            lit(rev)
        )
    };
    tab.eval(&mut b, &start("v2")).await;
    let phase_is = |p: &str| {
        format!("document.getElementById('phase') && document.getElementById('phase').textContent === {}", lit(p))
    };
    let current_is = |s: &str| {
        format!("!!document.querySelector('#plan .current') && document.querySelector('#plan .current').textContent === {}", lit(s))
    };
    let points =
        "Chart.getChart(document.getElementById('chart-weights')).data.datasets[0].data.length";
    tab.wait(&mut b, "Progressing", &phase_is("Progressing"), LONG)
        .await;
    tab.wait(&mut b, "the current step at 20 %", &current_is("20%"), LONG)
        .await;
    let at_20 = tab.eval(&mut b, points).await.as_u64().unwrap();
    tab.screenshot(&mut b, &shots.join("canary-progressing-1280.png"))
        .await;
    tab.wait(
        &mut b,
        "the current step moves to 40 %",
        &current_is("40%"),
        LONG,
    )
    .await;
    let at_40 = tab.eval(&mut b, points).await.as_u64().unwrap();
    assert!(
        at_40 > at_20,
        "the weight chart gains points: {at_20} then {at_40}"
    );
    tab.wait(
        &mut b,
        "a measured check value",
        "document.querySelectorAll('#checks tbody tr:not(.empty)').length > 0",
        LONG,
    )
    .await;
    tab.wait(&mut b, "Succeeded", &phase_is("Succeeded"), LONG)
        .await;
    tab.wait(&mut b, "the run in the history", "document.querySelectorAll('#history tbody tr').length === 1 && document.getElementById('history').textContent.includes('v2')", LONG).await;
    tab.screenshot(&mut b, &shots.join("canary-succeeded-1280.png"))
        .await;

    // A second run: Pause stops the countdown, Resume continues, Abort rolls back.
    tab.eval(&mut b, &start("v3")).await;
    tab.wait(
        &mut b,
        "v3 progressing",
        &format!(
            "{} && document.getElementById('kv').textContent.includes('v3')",
            phase_is("Progressing")
        ),
        LONG,
    )
    .await;
    tab.eval(
        &mut b,
        "document.querySelector('button[data-cmd=pause]').click(); true",
    )
    .await;
    tab.wait(&mut b, "the paused badge", "!!document.getElementById('paused') && document.getElementById('paused').textContent === 'paused'", LONG).await;
    tab.wait(
        &mut b,
        "the countdown stopped",
        "document.getElementById('countdown').textContent.startsWith('paused')",
        LONG,
    )
    .await;
    assert!(app.engine.status("app").unwrap().paused);
    // Pausing twice is refused by the API, and the page says so.
    tab.eval(
        &mut b,
        "document.querySelector('button[data-cmd=pause]').click(); true",
    )
    .await;
    tab.wait(
        &mut b,
        "the refusal shown",
        "document.getElementById('banner').textContent.includes('409')",
        LONG,
    )
    .await;
    tab.screenshot(&mut b, &shots.join("canary-paused-1280.png"))
        .await;
    tab.eval(
        &mut b,
        "document.querySelector('button[data-cmd=resume]').click(); true",
    )
    .await;
    tab.wait(&mut b, "resumed", "!document.getElementById('paused') && document.getElementById('countdown').textContent.includes('tick')", LONG).await;
    tab.eval(
        &mut b,
        "document.querySelector('button[data-cmd=abort]').click(); true",
    )
    .await;
    tab.wait(
        &mut b,
        "abort asks first",
        "document.getElementById('confirm').open",
        LONG,
    )
    .await;
    tab.eval(
        &mut b,
        "document.getElementById('confirm-form').requestSubmit(); true",
    )
    .await;
    tab.wait(&mut b, "rolled back", &phase_is("Failed"), LONG)
        .await;
    tab.wait(
        &mut b,
        "all traffic on the primary",
        "document.getElementById('kv').textContent.includes('0% canary')",
        LONG,
    )
    .await;
    tab.wait(
        &mut b,
        "a warning in the timeline",
        "!!document.querySelector('#timeline li.warning')",
        LONG,
    )
    .await;
    tab.wait(
        &mut b,
        "two runs in the history",
        "document.querySelectorAll('#history tbody tr').length === 2",
        LONG,
    )
    .await;
    let st = app.engine.status("app").unwrap();
    assert_eq!((st.canary_weight, st.phase.as_str()), (0, "Failed"));
    tab.screenshot(&mut b, &shots.join("canary-rolled-back-1280.png"))
        .await;

    // A phone screen: the page still fits its width.
    tab.viewport(&mut b, 390, 844).await;
    tab.wait(
        &mut b,
        "no sideways scroll at 390 px",
        "document.documentElement.scrollWidth <= 390",
        LONG,
    )
    .await;
    tab.screenshot(&mut b, &shots.join("canary-390.png")).await;
    tab.eval(&mut b, "location.hash = '#/'; true").await;
    tab.wait(
        &mut b,
        "the overview",
        "!!document.querySelector('#canaries tr[data-canary=app]')",
        LONG,
    )
    .await;
    tab.wait(
        &mut b,
        "no sideways scroll on the overview",
        "document.documentElement.scrollWidth <= 390",
        LONG,
    )
    .await;
    tab.screenshot(&mut b, &shots.join("overview-390.png"))
        .await;
    tab.viewport(&mut b, 1280, 900).await;
    tab.screenshot(&mut b, &shots.join("overview-1280.png"))
        .await;

    // The read-only token, in a new tab (a new session): everything shown, no button,
    // and a write forced through the API answers 403.
    let ro = b.tab(&url, 1280, 900).await;
    ro.wait(
        &mut b,
        "the token is asked",
        "document.getElementById('login').open",
        LONG,
    )
    .await;
    ro.eval(&mut b, &sign_in(READ)).await;
    ro.wait(
        &mut b,
        "read only",
        "document.getElementById('access').textContent === 'read only'",
        LONG,
    )
    .await;
    ro.eval(&mut b, "location.hash = '#/canary/app'; true")
        .await;
    ro.wait(&mut b, "the canary page, read only", "!!document.getElementById('phase') && document.querySelectorAll('#history tbody tr').length === 2", LONG).await;
    assert_eq!(
        ro.eval(
            &mut b,
            "document.querySelectorAll('button[data-cmd]').length"
        )
        .await,
        0,
        "no command buttons"
    );
    let forced = ro
        .eval(
            &mut b,
            &format!(
                "fetch('/api/v1/canaries/app/start', {{method: 'POST', headers: {{'Authorization': 'Bearer ' + {}, 'Content-Type': 'application/json'}}, body: '{{\"revision\":\"v9\"}}'}}).then(r => r.status)",
                lit(READ)
            ),
        )
        .await;
    assert_eq!(forced, 403);
    assert_eq!(
        app.engine.status("app").unwrap().phase.as_str(),
        "Failed",
        "nothing started"
    );
    ro.screenshot(&mut b, &shots.join("canary-read-only-1280.png"))
        .await;

    // The page's data shaping, on fixtures.
    let chips = ro
        .eval(
            &mut b,
            "JSON.stringify(weirConsole.planChips({strategy:'canary', phase:'Progressing', canaryWeight:40, weightPlan:[20,40,60], iterations:0, iterationsTotal:0}))",
        )
        .await;
    assert_eq!(
        chips,
        r#"[{"label":"start","state":"done"},{"label":"20%","state":"done"},{"label":"40%","state":"current"},{"label":"60%","state":"todo"},{"label":"promote","state":"todo"}]"#
    );
    let chips = ro
        .eval(&mut b, "JSON.stringify(weirConsole.planChips({strategy:'abTesting', phase:'Promoting', canaryWeight:0, weightPlan:[], iterations:2, iterationsTotal:2}).map(c => c.state))")
        .await;
    assert_eq!(chips, r#"["done","done","current"]"#);
    let run = ro
        .eval(&mut b, "JSON.stringify(weirConsole.runEvents([{reason:'Succeeded'},{reason:'NewRevision'},{reason:'Advanced'}]).map(e => e.reason))")
        .await;
    assert_eq!(run, r#"["NewRevision","Advanced"]"#);
    assert_eq!(
        ro.eval(
            &mut b,
            "weirConsole.countdown({paused:false, nextTickMs: 10500}, 1000)"
        )
        .await,
        "next tick in 10 s"
    );
    assert_eq!(
        ro.eval(
            &mut b,
            "weirConsole.countdown({paused:true, nextTickMs: null}, 1000)"
        )
        .await,
        "paused: no tick until resumed"
    );

    // A check the judge could not decide yet is shown held, with its evidence, apart
    // from a pass and a failure.
    let held = ro
        .eval(&mut b, "(() => { const n = weirConsole.lastChecks({lastChecks:{metrics:[{name:'request-success-rate', passed:false, inconclusive:true, evidence:0.25, value:99.1}, {name:'request-duration', passed:false, value:700}]}}); return JSON.stringify([...n.children].map(d => [d.className, d.textContent])); })()")
        .await;
    assert_eq!(
        held,
        r#"[["held","… request-success-rate inconclusive, evidence 25%"],["fail","✗ request-duration 700.00"]]"#
    );
    assert_eq!(
        ro.eval(&mut b, "weirConsole.verdictClass({passed:true})")
            .await,
        "pass"
    );

    let errors = std::mem::take(&mut b.errors);
    assert!(errors.is_empty(), "the pages reported errors: {errors:#?}");
    b.close().await;
    traffic.stop().await;
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn weir_demo_hold_prints_the_console_url_and_keeps_serving_it() {
    use std::io::{BufRead, Read, Write};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["demo", "--hold"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start weir demo --hold");
    // Ends the demo however the test ends.
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let _guard = Kill(child);
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut url = None;
    let mut seen = Vec::new();
    // The promote scenario takes about ten seconds, longer on a busy machine (its steps
    // wait for enough traffic, within the demo's own 55 s limit); then the demo holds.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = rx.recv_timeout(left).unwrap_or_else(|_| {
            panic!("weir demo --hold never said it holds:\n{}", seen.join("\n"))
        });
        if let Some(u) = line.trim().strip_prefix("console: ") {
            url = Some(u.to_string());
        }
        let holding = line.starts_with("holding:");
        seen.push(line);
        if holding {
            break;
        }
    }
    let all = seen.join("\n");
    assert!(all.contains("demo promote: OK"), "{all}");
    let url = url.unwrap_or_else(|| panic!("no console URL printed:\n{all}"));
    let hostport = url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix("/ui/"))
        .unwrap_or_else(|| panic!("{url}"));
    assert!(hostport.starts_with("127.0.0.1:"), "{url}");
    let mut s = std::net::TcpStream::connect(hostport).expect("the held demo's admin listener");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /ui/ HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("weir console"));
}
