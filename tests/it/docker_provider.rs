//! End to end: the Docker provider (DESIGN §16) against a fake Docker Engine API
//! served on a unix socket in a temp dir (hyper, the paths and documents bollard
//! asks for: `/_ping`, `/containers/json`, `/containers/{id}/json`, a streaming
//! `/events`), with the whole app and `weir echo` backends on 127.0.0.1.
//!
//! It shows: labelled containers become endpoints; a `health_status` event takes
//! one out of service and back; `die` removes one; the daemon going away keeps the
//! endpoints (traffic flows) and is reported in `/readyz`, `GET /api/v1/providers`
//! and `/metrics`; its return re-lists; a new `weir.revision` on the canary slot
//! starts a run that promotes; a label naming a backend of the file takes nothing
//! over; a 48 MiB container list is read no further than the 16 MiB cap. Every wait
//! is a bounded poll.

use crate::support;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body::Frame;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use support::*;
use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use weir::app::RunningApp;
use weir::demo::traffic::Traffic;
use weir::rollout::{CanaryStatus, Phase};

const WAIT: Duration = Duration::from_secs(40);

/// What the fake daemon knows: inspect documents by ID and the open event streams.
#[derive(Default)]
struct Daemon {
    containers: Mutex<BTreeMap<String, Value>>,
    streams: Mutex<Vec<mpsc::UnboundedSender<Bytes>>>,
    /// When not 0, `/containers/json` answers a list of this many bytes, made as it
    /// is read.
    huge_list: AtomicUsize,
    /// Bytes of each huge list the daemon got to hand to its connection.
    huge_sent: Mutex<Vec<Arc<AtomicUsize>>>,
}

impl Daemon {
    fn put(&self, doc: Value) {
        let id = doc["Id"].as_str().unwrap().to_string();
        self.containers.lock().unwrap().insert(id, doc);
    }

    /// Sends an event for container `id` (a `/events` message as the daemon writes it).
    fn event(&self, action: &str, id: &str) {
        let name = self
            .containers
            .lock()
            .unwrap()
            .get(id)
            .map_or(String::new(), |d| {
                d["Name"]
                    .as_str()
                    .unwrap_or("")
                    .trim_start_matches('/')
                    .to_string()
            });
        let msg = json!({
            "status": action, "id": id, "from": "weir:dev", "Type": "container",
            "Action": action, "Actor": {"ID": id, "Attributes": {"name": name}},
            "scope": "local", "time": 1_764_601_300, "timeNano": 1_764_601_300_000_000_000i64,
        });
        let line = Bytes::from(format!("{msg}\n"));
        self.streams
            .lock()
            .unwrap()
            .retain(|s| s.send(line.clone()).is_ok());
    }

    fn answer(&self, path: &str) -> Response<EventsOrFull> {
        let path = path.split('?').next().unwrap_or("");
        // bollard prefixes the API version: `/v1.52/containers/json`.
        let tail = match path.strip_prefix("/v") {
            Some(rest) if rest.starts_with(|c: char| c.is_ascii_digit()) => {
                rest.split_once('/').map_or("", |(_, t)| t)
            }
            _ => path.trim_start_matches('/'),
        };
        let json = |status: StatusCode, v: Value| {
            Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(EventsOrFull::Full(Some(Bytes::from(v.to_string()))))
                .unwrap()
        };
        match tail.split('/').collect::<Vec<_>>().as_slice() {
            ["_ping"] => Response::new(EventsOrFull::Full(Some(Bytes::from_static(b"OK")))),
            ["version"] => json(
                StatusCode::OK,
                json!({"Version": "27.5.1", "ApiVersion": "1.47"}),
            ),
            ["containers", "json"] if self.huge_list.load(Relaxed) > 0 => {
                let sent = Arc::new(AtomicUsize::new(0));
                self.huge_sent.lock().unwrap().push(sent.clone());
                Response::builder()
                    .header("content-type", "application/json")
                    .body(EventsOrFull::Huge {
                        left: self.huge_list.load(Relaxed),
                        sent,
                    })
                    .unwrap()
            }
            ["containers", "json"] => {
                let list: Vec<Value> = self
                    .containers
                    .lock()
                    .unwrap()
                    .values()
                    .map(|d| json!({"Id": d["Id"], "Names": [d["Name"]], "Labels": d["Config"]["Labels"], "State": d["State"]["Status"]}))
                    .collect();
                json(StatusCode::OK, Value::Array(list))
            }
            ["containers", id, "json"] => match self.containers.lock().unwrap().get(*id) {
                Some(d) => json(StatusCode::OK, d.clone()),
                None => json(
                    StatusCode::NOT_FOUND,
                    json!({"message": format!("No such container: {id}")}),
                ),
            },
            ["events"] => {
                let (tx, rx) = mpsc::unbounded_channel();
                self.streams.lock().unwrap().push(tx);
                Response::builder()
                    .header("content-type", "application/json")
                    .body(EventsOrFull::Events(rx))
                    .unwrap()
            }
            _ => json(StatusCode::NOT_FOUND, json!({"message": "page not found"})),
        }
    }
}

/// A whole body, the event stream (open until the daemon stops), or a huge list
/// made in 64 KiB pieces as the connection takes them.
enum EventsOrFull {
    Full(Option<Bytes>),
    Events(mpsc::UnboundedReceiver<Bytes>),
    Huge { left: usize, sent: Arc<AtomicUsize> },
}

impl http_body::Body for EventsOrFull {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            EventsOrFull::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            EventsOrFull::Events(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
            EventsOrFull::Huge { left, sent } => {
                if *left == 0 {
                    return Poll::Ready(None);
                }
                let first = sent.load(Relaxed) == 0;
                let n = (*left).min(64 << 10);
                let mut piece = if first {
                    br#"[{"Id":"huge","Labels":{"weir.backend":"app-blue","pad":""#.to_vec()
                } else {
                    Vec::new()
                };
                piece.resize(n, b'x');
                *left -= n;
                sent.fetch_add(n, Relaxed);
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(piece)))))
            }
        }
    }
}

/// The fake daemon listening on `path`; dropping (or [`Running::stop`]) closes the
/// socket and every connection, as a daemon that goes away.
struct Running {
    conns: Arc<Mutex<JoinSet<()>>>,
    accept: tokio::task::JoinHandle<()>,
    path: PathBuf,
}

impl Running {
    fn stop(self) {
        self.accept.abort();
        self.conns.lock().unwrap().abort_all();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve(daemon: Arc<Daemon>, path: &Path) -> Running {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).expect("bind the fake daemon's socket");
    let conns = Arc::new(Mutex::new(JoinSet::new()));
    let accept = tokio::spawn({
        let conns = conns.clone();
        async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let daemon = daemon.clone();
                conns.lock().unwrap().spawn(async move {
                    let svc = service_fn(move |req: http::Request<Incoming>| {
                        let daemon = daemon.clone();
                        async move {
                            let path = req
                                .uri()
                                .path_and_query()
                                .map_or("/".to_string(), |p| p.to_string());
                            Ok::<_, Infallible>(daemon.answer(&path))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        }
    });
    Running {
        conns,
        accept,
        path: path.to_path_buf(),
    }
}

/// An inspect document as the daemon answers it (the fields the provider reads).
fn container(id: &str, backend: &str, port: u16, revision: &str, health: Option<&str>) -> Value {
    let mut state = json!({"Status": "running", "Running": true, "Pid": 42, "ExitCode": 0});
    if let Some(h) = health {
        state["Health"] = json!({"Status": h, "FailingStreak": 0, "Log": []});
    }
    json!({
        "Id": format!("{id:0<64}"),
        "Name": format!("/weirtest-{id}-1"),
        "Image": format!("sha256:{:0<64}", revision),
        "State": state,
        "Config": {"Labels": {
            "weir.backend": backend, "weir.port": port.to_string(), "weir.revision": revision,
            "com.docker.compose.project": "weirtest"
        }},
        "NetworkSettings": {"Networks": {"weirtest_default": {"IPAddress": "127.0.0.1"}}},
    })
}

fn full_id(id: &str) -> String {
    format!("{id:0<64}")
}

fn temp_socket(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-docker-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("docker.sock")
}

async fn api(app: &RunningApp, path: &str) -> Value {
    let r = send(&client(), get(app.admin_addr, path, &[])).await;
    serde_json::from_str(&r.text()).unwrap_or(Value::Null)
}

async fn endpoints(app: &RunningApp, backend: &str) -> Vec<String> {
    let mut e: Vec<String> = app.store.load().spec.backends[backend].endpoints.clone();
    e.sort();
    e
}

/// The endpoints of `backend` that may get requests now: in rotation, ready and
/// not draining (a listed container joins only once its HEALTHCHECK passes).
async fn serving(app: &RunningApp, backend: &str) -> Vec<String> {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(b) = app.store.backend(backend) else {
        return Vec::new();
    };
    let mut e: Vec<String> = b
        .rotation
        .load()
        .iter()
        .filter(|e| e.ready.load(Relaxed) && !e.draining.load(Relaxed))
        .map(|e| e.address.clone())
        .collect();
    e.sort();
    e
}

/// Polls `$done` (which may `.await`) every 20 ms; fails after [`WAIT`].
macro_rules! wait {
    ($what:expr, $done:expr) => {{
        let deadline = tokio::time::Instant::now() + WAIT;
        while !$done {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {}",
                $what
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }};
}

/// What the proxy answers for `n` requests (each body is the version).
async fn versions(app: &RunningApp, n: usize) -> Vec<String> {
    let c = client();
    let mut out = Vec::new();
    for _ in 0..n {
        let r = send(&c, get(app.proxy_addr(), "/", &[])).await;
        out.push(format!("{} {}", r.status, r.version().unwrap_or("")));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_become_endpoints_and_a_lost_daemon_keeps_them() {
    let (b1, b2, b3) = (echo("v1").await, echo("v1").await, echo("v1").await);
    let g1 = echo("v1").await;
    let sock = temp_socket("endpoints");
    let daemon = Arc::new(Daemon::default());
    daemon.put(container(
        "b1",
        "app-blue",
        b1.addr.port(),
        "v1",
        Some("healthy"),
    ));
    daemon.put(container("g1", "app-green", g1.addr.port(), "v1", None));
    let running = serve(daemon.clone(), &sock);
    let yaml = format!(
        "backends:\n  app-blue: {{ provider: docker }}\n  app-green: {{ endpoints: [], provider: docker }}\nroutes:\n  - {{ name: app, primary: app-blue, canary: app-green }}\nproviders:\n  docker:\n    endpoint: unix://{}\n    debounce: 20ms\n    resyncInterval: 1h\n",
        sock.display()
    );
    let app = proxy(&yaml).await;
    let at = |p: u16| format!("127.0.0.1:{p}");
    // One listing writes each backend in turn: wait for both.
    wait!("the first listing", {
        endpoints(&app, "app-blue").await == [at(b1.addr.port())]
            && endpoints(&app, "app-green").await == [at(g1.addr.port())]
    });
    wait!("traffic to the listed container", {
        versions(&app, 1).await == ["200 v1"]
    });

    // Two containers start (`--scale app-blue=3`): both join.
    daemon.put(container(
        "b2",
        "app-blue",
        b2.addr.port(),
        "v1",
        Some("starting"),
    ));
    daemon.event("start", &full_id("b2"));
    daemon.put(container("b3", "app-blue", b3.addr.port(), "v1", None));
    daemon.event("start", &full_id("b3"));
    wait!("b3 joins, b2 still starting", {
        serving(&app, "app-blue").await.len() == 2
    });
    assert!(!serving(&app, "app-blue")
        .await
        .contains(&at(b2.addr.port())));
    assert_eq!(
        endpoints(&app, "app-blue").await.len(),
        3,
        "the starting one is listed, waiting to join"
    );
    // Its HEALTHCHECK passes: ready.
    daemon.put(container(
        "b2",
        "app-blue",
        b2.addr.port(),
        "v1",
        Some("healthy"),
    ));
    daemon.event("health_status: healthy", &full_id("b2"));
    wait!("b2 joins when healthy", {
        serving(&app, "app-blue").await.len() == 3
    });
    // b1 turns unhealthy: no more requests; b3 dies: out of the list.
    daemon.event("health_status: unhealthy", &full_id("b1"));
    daemon.event("die", &full_id("b3"));
    wait!("the unhealthy and the dead leave", {
        serving(&app, "app-blue").await == [at(b2.addr.port())]
    });
    let doc = api(&app, "/api/v1/providers").await;
    let p = &doc["providers"][0];
    assert_eq!(p["provider"], "docker");
    assert_eq!(p["connected"], true);
    let mut listed = vec![at(b1.addr.port()), at(b2.addr.port())];
    listed.sort();
    assert_eq!(p["backends"]["app-blue"]["endpoints"], json!(listed));
    assert_eq!(
        p["backends"]["app-blue"]["notReady"],
        json!({ at(b1.addr.port()): "health check: unhealthy" })
    );
    let b1_status = p["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "weirtest-b1-1")
        .unwrap();
    assert_eq!(b1_status["ready"], false);
    assert_eq!(b1_status["reason"], "health check: unhealthy");

    // The daemon goes away: reported, the endpoints stay, traffic flows.
    running.stop();
    wait!("the disconnect to be reported", {
        let r = api(&app, "/readyz").await;
        r["providers"][0]["connected"] == false
    });
    let r = api(&app, "/readyz").await;
    assert_eq!(
        r["status"], "ready",
        "a lost daemon does not make weir unready: {r}"
    );
    assert!(r["providers"][0]["lastError"].is_string(), "{r}");
    let doc = api(&app, "/api/v1/providers").await;
    assert_eq!(doc["providers"][0]["connected"], false);
    assert_eq!(doc["providers"][0]["disconnects"], 1);
    let metrics = send(&client(), get(app.admin_addr, "/metrics", &[]))
        .await
        .text();
    assert!(
        metrics.contains("weir_provider_connected{provider=\"docker\"} 0"),
        "{metrics}"
    );
    assert!(metrics.contains("weir_provider_endpoints{provider=\"docker\",backend=\"app-blue\"} 2"));
    assert_eq!(serving(&app, "app-blue").await, [at(b2.addr.port())]);
    assert_eq!(versions(&app, 5).await, vec!["200 v1"; 5]);

    // Meanwhile b1 recovers; the daemon returns: a re-list finds it.
    daemon.put(container(
        "b1",
        "app-blue",
        b1.addr.port(),
        "v1",
        Some("healthy"),
    ));
    daemon.containers.lock().unwrap().remove(&full_id("b3"));
    let running = serve(daemon.clone(), &sock);
    wait!("the reconnect and re-list", {
        serving(&app, "app-blue").await.len() == 2
            && api(&app, "/readyz").await["providers"][0]["connected"] == true
    });
    let metrics = send(&client(), get(app.admin_addr, "/metrics", &[]))
        .await
        .text();
    assert!(
        metrics.contains("weir_provider_connected{provider=\"docker\"} 1"),
        "{metrics}"
    );

    // A table write that gives a provided backend no endpoints (a reload of the
    // file, which declares none) keeps the provider's list; an explicit empty
    // list is refused by name.
    let before = endpoints(&app, "app-blue").await;
    let table = api(&app, "/api/v1/table").await;
    let mut table = table.get("table").cloned().unwrap_or(table);
    table["backends"]["app-blue"]["endpoints"] = json!([]);
    let put = |path: &str, body: Value| {
        http::Request::put(format!("http://{}{path}", app.admin_addr))
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(Bytes::from(body.to_string())))
            .unwrap()
    };
    let r = send(&client(), put("/api/v1/table", table)).await;
    assert!(r.status < 300, "{} {}", r.status, r.text());
    assert_eq!(endpoints(&app, "app-blue").await, before);
    let r = send(
        &client(),
        put(
            "/api/v1/backends/app-blue/endpoints",
            json!({"endpoints": []}),
        ),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(
        r.text().contains("at least one endpoint is required"),
        "{}",
        r.text()
    );
    running.stop();
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(sock.parent().unwrap());
}

#[test]
fn weir_check_says_which_backends_the_provider_fills() {
    let dir = std::env::temp_dir().join(format!("weir-docker-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("weir.yaml");
    let table = "listeners: [{ name: http, address: 127.0.0.1:0 }]\nbackends:\n  app-blue: { provider: docker }\n  app-green: { endpoints: [], provider: docker }\nroutes:\n  - { name: app, primary: app-blue, canary: app-green }\n";
    let check = |yaml: &str| {
        std::fs::write(&file, yaml).unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["check", "-c"])
            .arg(&file)
            .output()
            .unwrap()
    };
    let out = check(&format!(
        "{table}providers:\n  docker: {{ network: app-net }}\n"
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("note: backends.app-blue: no endpoints in the file; providers.docker fills them from running containers labelled weir.backend=app-blue"),
        "{stdout}"
    );
    assert!(stdout.contains("note: backends.app-green:"), "{stdout}");
    // Without the provider, an error naming the field.
    let out = check(table);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("backends.app-blue.provider: providers.docker is not configured"),
        "{stderr}"
    );
    // A backend that does not say so must list its endpoints.
    let out = check(&format!(
        "{}providers:\n  docker: {{ network: app-net }}\n",
        table.replace("app-blue: { provider: docker }", "app-blue: {}")
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("backends.app-blue.endpoints: at least one endpoint is required"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Compose stack's config: the two provided slots (`green` is app-green's
/// extra settings), the canary watching the labels' revisions, the provider on
/// the fake daemon's socket.
fn release_yaml(sock: &Path, green: &str) -> String {
    format!(
        "backends:\n  app-blue: {{ provider: docker }}\n  app-green: {{ provider: docker, {green} }}\nroutes:\n  - {{ name: app, primary: app-blue, canary: app-green }}\ncanaries:\n  - name: app\n    route: app\n    watchRevision: true\n    analysis:\n      interval: 300ms\n      threshold: 6\n      stepWeight: 50\n      maxWeight: 50\n      metrics:\n        - name: request-success-rate\n          thresholdRange: {{ min: 99 }}\n          interval: 2s\n          minRequests: 5\nproviders:\n  docker:\n    endpoint: unix://{}\n    debounce: 20ms\n",
        sock.display()
    )
}

/// Waits for the first listing to serve both slots, then for two engine ticks
/// to see the slots' revisions: the provider's first listing may come after the
/// engine's first tick, and the first revision seen is the baseline.
async fn listed_and_baselined(app: &RunningApp) {
    wait!("the first listing", {
        !serving(app, "app-green").await.is_empty() && !serving(app, "app-blue").await.is_empty()
    });
    for _ in 0..2 {
        let tick = app.engine.status("app").expect("canary").next_tick_ms;
        wait!("an engine tick", {
            app.engine.status("app").expect("canary").next_tick_ms != tick
        });
    }
    assert_eq!(app.engine.status("app").unwrap().phase, Phase::Initialized);
}

/// `docker compose up -d app-green`: the old container is removed, the new one
/// (`id`, revision `rev`, HEALTHCHECK `health`) starts.
fn recreate_green(daemon: &Daemon, old: &str, id: &str, port: u16, rev: &str, health: &str) {
    daemon.containers.lock().unwrap().remove(&full_id(old));
    daemon.event("destroy", &full_id(old));
    daemon.put(container(id, "app-green", port, rev, Some(health)));
    daemon.event("start", &full_id(id));
}

/// The canary's status once `done` holds it.
async fn canary_until(
    app: &RunningApp,
    what: &str,
    done: impl Fn(&CanaryStatus) -> bool,
) -> CanaryStatus {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = app.engine.status("app").expect("canary");
        if done(&s) {
            return s;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {s:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Stops the load (asserting no request was lost), the daemon and the app.
async fn finish(app: RunningApp, traffic: Traffic, running: Running, sock: &Path) {
    let tally = traffic.stop().await;
    assert!(tally.done() > 0);
    assert!(
        tally.failures().is_empty(),
        "no request lost: {:?}",
        tally.failures()
    );
    running.stop();
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(sock.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_revision_label_on_the_canary_slot_starts_a_run_that_promotes() {
    let (blue, green1, green2) = (echo("v1").await, echo("v1").await, echo("v2").await);
    let sock = temp_socket("revision");
    let daemon = Arc::new(Daemon::default());
    daemon.put(container(
        "blue",
        "app-blue",
        blue.addr.port(),
        "v1",
        Some("healthy"),
    ));
    daemon.put(container(
        "green1",
        "app-green",
        green1.addr.port(),
        "v1",
        Some("healthy"),
    ));
    let running = serve(daemon.clone(), &sock);
    // No revisionPath: the revisions come from the labels.
    let app = proxy(&release_yaml(&sock, "")).await;
    // Before the first listing a provided backend has no endpoint (503).
    listed_and_baselined(&app).await;
    let traffic = weir::demo::traffic::TrafficSpec::new(app.proxy_addr()).start();
    recreate_green(
        &daemon,
        "green1",
        "green2",
        green2.addr.port(),
        "v2",
        "healthy",
    );
    let done = canary_until(&app, "the run to end", |s| {
        matches!(s.phase, Phase::Succeeded | Phase::Failed) && s.revision.is_some()
    })
    .await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    assert_eq!(
        done.revision.as_deref(),
        Some("v2"),
        "the revision from the label"
    );
    assert_eq!(versions(&app, 10).await, vec!["200 v2"; 10]);
    finish(app, traffic, running, &sock).await;
}

/// `docker compose up -d app-green` with an image whose HEALTHCHECK never
/// passes: the new revision starts a run at once, which waits for the slot
/// (no failed check, no traffic); the slot's rolling update stalls after its
/// `progressDeadline` and the run rolls back, naming the deadline. Traffic
/// stays on the primary throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_never_turns_healthy_stalls_and_rolls_back() {
    let (blue, green1, green3) = (echo("v1").await, echo("v1").await, echo("v3").await);
    let sock = temp_socket("stall");
    let daemon = Arc::new(Daemon::default());
    daemon.put(container("blue", "app-blue", blue.addr.port(), "v1", None));
    daemon.put(container(
        "green1",
        "app-green",
        green1.addr.port(),
        "v1",
        None,
    ));
    let running = serve(daemon.clone(), &sock);
    let app = proxy(&release_yaml(
        &sock,
        "rollingUpdate: { progressDeadline: 1500ms }",
    ))
    .await;
    listed_and_baselined(&app).await;
    let traffic = weir::demo::traffic::TrafficSpec::new(app.proxy_addr()).start();
    recreate_green(
        &daemon,
        "green1",
        "green3",
        green3.addr.port(),
        "v3",
        "starting",
    );
    canary_until(&app, "the run to start on v3", |s| {
        s.phase == Phase::Progressing && s.revision.as_deref() == Some("v3")
    })
    .await;
    let s = canary_until(&app, "the run to wait for the slot", |s| {
        s.events.iter().any(|e| e.reason == "WaitingCanary")
    })
    .await;
    assert_eq!((s.canary_weight, s.failed_checks), (0, 0), "{s:#?}");
    // It turns unhealthy and stays so.
    daemon.put(container(
        "green3",
        "app-green",
        green3.addr.port(),
        "v3",
        Some("unhealthy"),
    ));
    daemon.event("health_status: unhealthy", &full_id("green3"));
    let done = canary_until(&app, "the rollback", |s| s.phase == Phase::Failed).await;
    let rolled = done
        .events
        .iter()
        .find(|e| e.reason == "RolledBack")
        .unwrap_or_else(|| panic!("{done:#?}"));
    assert!(
        rolled
            .message
            .contains("progress deadline exceeded: rolling update of backend app-green"),
        "{}",
        rolled.message
    );
    assert_eq!(done.canary_weight, 0);
    // The slot's own update reported the stall (the RollingUpdateStalled alert).
    let green = app.store.backend("app-green").unwrap();
    let events = green.endpoints_view().events;
    assert!(events.iter().any(|e| e.kind == "stalled"), "{events:#?}");
    assert!(serving(&app, "app-green").await.is_empty());
    assert_eq!(versions(&app, 5).await, vec!["200 v1"; 5]);
    finish(app, traffic, running, &sock).await;
}

/// A container labelled `weir.backend=payments`, where `payments` is a backend of
/// the file (no `provider: docker`): its endpoints stay the file's, traffic stays
/// there, and `GET /api/v1/providers` reports `ProviderLabelIgnored` once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_naming_a_backend_of_the_file_takes_nothing_over() {
    let (payments, blue, evil) = (echo("pay").await, echo("v1").await, echo("evil").await);
    let sock = temp_socket("takeover");
    let daemon = Arc::new(Daemon::default());
    daemon.put(container("blue", "app-blue", blue.addr.port(), "v1", None));
    daemon.put(container("evil", "payments", evil.addr.port(), "x", None));
    let running = serve(daemon.clone(), &sock);
    let yaml = format!(
        "backends:\n  app-blue: {{ provider: docker }}\n  payments: {{ endpoints: [\"{}\"] }}\nroutes:\n  - {{ name: app, hosts: [app.test], primary: app-blue }}\n  - {{ name: pay, primary: payments }}\nproviders:\n  docker:\n    endpoint: unix://{}\n    debounce: 20ms\n    resyncInterval: 1h\n",
        payments.addr,
        sock.display()
    );
    let app = proxy(&yaml).await;
    wait!("the first listing", {
        !serving(&app, "app-blue").await.is_empty()
    });
    wait!("the ignored label reported", {
        api(&app, "/api/v1/providers").await["providers"][0]["recentEvents"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
    });
    // Events of that container change nothing and report nothing again.
    daemon.event("start", &full_id("evil"));
    daemon.event("health_status: healthy", &full_id("evil"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        endpoints(&app, "payments").await,
        [payments.addr.to_string()]
    );
    assert_eq!(versions(&app, 5).await, vec!["200 pay"; 5]);
    let p = api(&app, "/api/v1/providers").await["providers"][0].clone();
    let events = p["recentEvents"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{p}");
    assert_eq!(events[0]["reason"], "ProviderLabelIgnored");
    assert_eq!(events[0]["backend"], "payments");
    assert!(p["backends"].get("payments").is_none(), "{p}");
    let c = p["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["backend"] == "payments")
        .unwrap()
        .clone();
    assert_eq!(c["ready"], false);
    running.stop();
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(sock.parent().unwrap());
}

/// A daemon answering a 48 MiB container list: the provider reads it no further
/// than the 16 MiB cap (the daemon never gets to hand over much more), reports why,
/// keeps serving, and lists normally once the answers are sane again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_container_list_is_read_no_further_than_the_cap() {
    let blue = echo("v1").await;
    let sock = temp_socket("huge");
    let daemon = Arc::new(Daemon::default());
    daemon.put(container("blue", "app-blue", blue.addr.port(), "v1", None));
    daemon.huge_list.store(48 << 20, Relaxed);
    let running = serve(daemon.clone(), &sock);
    let yaml = format!(
        "backends:\n  app-blue: {{ provider: docker }}\nroutes:\n  - {{ name: app, primary: app-blue }}\nproviders:\n  docker:\n    endpoint: unix://{}\n    debounce: 20ms\n    resyncInterval: 1h\n",
        sock.display()
    );
    let app = proxy(&yaml).await;
    wait!("the refusal to be reported", {
        api(&app, "/api/v1/providers").await["providers"][0]["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("larger than 16 MiB"))
    });
    let p = api(&app, "/api/v1/providers").await["providers"][0].clone();
    assert_eq!(p["connected"], false, "{p}");
    assert!(
        p["lastError"]
            .as_str()
            .unwrap()
            .starts_with("GET /containers/json: "),
        "{p}"
    );
    // What the daemon handed over: the cap and what the socket buffers hold, never
    // the 48 MiB.
    let sent: Vec<usize> = daemon
        .huge_sent
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.load(Relaxed))
        .collect();
    assert!(!sent.is_empty());
    for n in &sent {
        assert!(*n < 24 << 20, "the daemon sent {} MiB: {sent:?}", n >> 20);
    }
    // Sane again: the next attempt lists.
    daemon.huge_list.store(0, Relaxed);
    wait!("the listing after the daemon recovers", {
        !serving(&app, "app-blue").await.is_empty()
    });
    running.stop();
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(sock.parent().unwrap());
}

/// The fake daemon behind TLS on 127.0.0.1:0 that requires a client certificate
/// of `ca` (as `dockerd --tlsverify`); returns its port.
async fn serve_tls(daemon: Arc<Daemon>, ca: &crate::proto_support::Ca) -> u16 {
    let leaf = ca.leaf(&["127.0.0.1"]);
    let key = weir::proxy::tls::parse_pair(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes())
        .expect("leaf pair");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der()).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        weir::proxy::tls::provider(),
    )
    .build()
    .unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(weir::proxy::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(key)));
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, daemon) = (acceptor.clone(), daemon.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = service_fn(move |req: http::Request<Incoming>| {
                    let daemon = daemon.clone();
                    async move {
                        let path = req
                            .uri()
                            .path_and_query()
                            .map_or("/".to_string(), |p| p.to_string());
                        Ok::<_, Infallible>(daemon.answer(&path))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    port
}

/// `tcp://` with TLS both ways (the daemon's CA, weir's client certificate): the
/// containers become endpoints as over the socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_over_tls_with_a_client_certificate_is_listed() {
    let ca = crate::proto_support::Ca::new();
    let dir = crate::proto_support::TempDir::new("docker-tls");
    dir.write("ca.pem", &ca.pem());
    let client = ca.leaf(&["weir"]);
    dir.write("cert.pem", &client.cert_pem);
    dir.write("key.pem", &client.key_pem);
    let blue = echo("v1").await;
    let daemon = Arc::new(Daemon::default());
    daemon.put(container("blue", "app-blue", blue.addr.port(), "v1", None));
    let port = serve_tls(daemon, &ca).await;
    let yaml = format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\nbackends:\n  app-blue: {{ provider: docker }}\nroutes:\n  - {{ name: app, primary: app-blue }}\nproviders:\n  docker:\n    endpoint: tcp://127.0.0.1:{port}\n    tls: {{ caFile: ca.pem, certFile: cert.pem, keyFile: key.pem }}\n    debounce: 20ms\n",
    );
    let cfg = weir::config::parse_yaml(&yaml, "t.yaml", &dir.0).expect("config");
    let app = weir::app::start(cfg).await.expect("start");
    wait!("the listing over TLS", {
        !serving(&app, "app-blue").await.is_empty()
    });
    assert_eq!(versions(&app, 3).await, vec!["200 v1"; 3]);
    app.shutdown().await;
}
