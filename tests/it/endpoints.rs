//! End-to-end: readiness-gated rolling updates of a backend's endpoints and passive
//! outlier ejection (DESIGN §7), through real sockets on 127.0.0.1.
//!
//! Every wait is a bounded poll; no assertion depends on how long something took.

use crate::support;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::*;
use tokio::net::TcpListener;
use tokio::sync::watch;
use weir::app::RunningApp;
use weir::demo::traffic::{Traffic, TrafficSpec};

/// Longest any poll in this file waits before the test fails.
const POLL: Duration = Duration::from_secs(30);

/// Evaluates `$done` (which may `.await`) every 20 ms until it is true; fails the test
/// with `$what` after [`POLL`].
macro_rules! poll_until {
    ($what:expr, $done:expr) => {{
        let deadline = tokio::time::Instant::now() + POLL;
        loop {
            if $done {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting: {}",
                $what
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }};
}

/// A backend whose answers can be switched while it runs: `/healthz` answers
/// `healthz`, every other path `status`, always with `x-weir-version`.
struct Switchable {
    addr: SocketAddr,
    healthz: Arc<AtomicU16>,
    status: Arc<AtomicU16>,
    _stop: watch::Sender<bool>,
}

async fn switchable(version: &str, healthz: u16, status: u16) -> Switchable {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let healthz = Arc::new(AtomicU16::new(healthz));
    let status = Arc::new(AtomicU16::new(status));
    let (stop, mut stopped) = watch::channel(false);
    let (h, s, version) = (healthz.clone(), status.clone(), version.to_string());
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                acc = listener.accept() => match acc { Ok(a) => a, Err(_) => continue },
                _ = stopped.changed() => return,
            };
            let (h, s, version) = (h.clone(), s.clone(), version.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let code = if req.uri().path() == "/healthz" {
                        h.load(Ordering::Relaxed)
                    } else {
                        s.load(Ordering::Relaxed)
                    };
                    let mut resp = Response::new(Full::new(Bytes::from(format!("{version}\n"))));
                    *resp.status_mut() = StatusCode::from_u16(code).unwrap();
                    resp.headers_mut()
                        .insert("x-weir-version", version.parse().unwrap());
                    async move { Ok::<_, Infallible>(resp) }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Switchable {
        addr,
        healthz,
        status,
        _stop: stop,
    }
}

/// The proxy with an admin listener, a backend `app` with `endpoints` and the given
/// extra backend fields (YAML, indented 4 spaces), and a route to it.
async fn start(endpoints: &[SocketAddr], backend_extra: &str) -> RunningApp {
    let list: Vec<String> = endpoints.iter().map(|a| format!("\"{a}\"")).collect();
    proxy(&format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\nbackends:\n  app:\n    endpoints: [{}]\n{backend_extra}routes:\n  - name: r\n    primary: app\n",
        list.join(", ")
    ))
    .await
}

fn admin(app: &RunningApp) -> SocketAddr {
    app.admin_addr
}

/// `PUT /api/v1/backends/app/endpoints`.
async fn put_endpoints(c: &TestClient, app: &RunningApp, eps: &[SocketAddr]) -> Resp {
    let body = json!({ "endpoints": eps.iter().map(|a| a.to_string()).collect::<Vec<_>>() });
    let req = Request::put(format!(
        "http://{}/api/v1/backends/app/endpoints",
        admin(app)
    ))
    .header("content-type", "application/json")
    .body(Full::new(Bytes::from(body.to_string())))
    .unwrap();
    send(c, req).await
}

/// The `rollingUpdate` member of `GET /api/v1/backends/app`.
async fn rollout(c: &TestClient, app: &RunningApp) -> Value {
    let r = get_once(c, admin(app), "/api/v1/backends/app", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["rollingUpdate"].clone()
}

/// Backend `app`'s endpoint list in `GET /api/v1/table`.
async fn table_endpoints(c: &TestClient, app: &RunningApp) -> Vec<SocketAddr> {
    let r = get_once(c, admin(app), "/api/v1/table", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_value(r.json()["backends"]["app"]["endpoints"].clone()).unwrap()
}

fn addresses(v: &Value, filter: impl Fn(&Value) -> bool) -> Vec<String> {
    let mut out: Vec<String> = v["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| filter(e))
        .map(|e| e["address"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

fn sorted(eps: &[SocketAddr]) -> Vec<String> {
    let mut v: Vec<String> = eps.iter().map(|a| a.to_string()).collect();
    v.sort();
    v
}

/// Steady load: `workers` client loops through the proxy until stopped. Every answer
/// other than a 200 (or a failed exchange) is a failure; versions are counted.
fn start_load(addr: SocketAddr, workers: usize) -> Traffic {
    TrafficSpec::new(addr)
        .workers(workers)
        .pause(Duration::ZERO)
        .start()
}

/// Waits until `n` more requests have been sent (the load really runs).
async fn wait_for_more(load: &Traffic, n: u64) {
    let target = load.tally().sent() + n;
    poll_until!("load", load.tally().sent() >= target);
}

async fn finish(load: Traffic) -> (Vec<String>, BTreeMap<String, u64>) {
    let t = load.stop().await;
    (t.failures(), t.by_version())
}

const HEALTH: &str = "    healthCheck: { path: /healthz, interval: 100ms, timeout: 1s }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_update_through_the_api_serves_every_request_and_ends_on_the_new_version() {
    let old = [echo("v1").await, echo("v1").await, echo("v1").await];
    let new = [echo("v2").await, echo("v2").await, echo("v2").await];
    let old_addrs: Vec<SocketAddr> = old.iter().map(|e| e.addr).collect();
    let new_addrs: Vec<SocketAddr> = new.iter().map(|e| e.addr).collect();
    let app = start(
        &old_addrs,
        &format!("{HEALTH}    rollingUpdate: {{ maxSurge: 1, maxUnavailable: 0, progressDeadline: 30s }}\n"),
    )
    .await;
    let c = client();
    let load = start_load(app.proxy_addr(), 4);
    wait_for_more(&load, 50).await;

    let put = put_endpoints(&c, &app, &new_addrs).await;
    assert_eq!(put.status, 202, "{}", put.text());
    assert_eq!(put.json()["rollout"]["generation"], 2);
    // The table is the source of truth: it already holds the new list.
    assert_eq!(table_endpoints(&c, &app).await, new_addrs);

    // Never more than desired + maxSurge in rotation, never fewer than desired ready,
    // until the update completes.
    let mut phases = Vec::new();
    poll_until!("the update to complete", {
        let v = rollout(&c, &app).await;
        let in_rotation = addresses(&v, |e| e["inRotation"] == true);
        let ready = addresses(&v, |e| e["inRotation"] == true && e["ready"] == true);
        assert!(
            in_rotation.len() <= 4,
            "rotation above desired + maxSurge: {v}"
        );
        assert!(
            ready.len() >= 3,
            "ready below desired - maxUnavailable: {v}"
        );
        phases.push(v["phase"].as_str().unwrap().to_string());
        v["phase"] == "Complete" && in_rotation == sorted(&new_addrs)
    });
    assert!(phases.iter().any(|p| p == "Progressing"), "{phases:?}");
    // Drains finish: nothing stays in flight on the old endpoints.
    poll_until!("drains", rollout(&c, &app).await["draining"] == 0);
    wait_for_more(&load, 50).await;
    let (failures, versions) = finish(load).await;
    assert!(failures.is_empty(), "failed requests: {failures:?}");
    assert!(versions.get("v1").copied().unwrap_or(0) > 0, "{versions:?}");
    assert!(versions.get("v2").copied().unwrap_or(0) > 0, "{versions:?}");

    // At the end the backend reports the new version, and only it serves.
    let v = rollout(&c, &app).await;
    assert_eq!(v["generation"], 2);
    assert_eq!(v["phase"], "Complete");
    let counts =
        |v: &Value| ["desired", "ready", "updated", "old", "total"].map(|k| v[k].as_u64().unwrap());
    assert_eq!(counts(&v), [3, 3, 3, 0, 3], "{v}");
    assert_eq!(addresses(&v, |_| true), sorted(&new_addrs));
    let served_before: u64 = old.iter().map(|e| e.requests.load(Ordering::Relaxed)).sum();
    for _ in 0..30 {
        let r = get_once(&c, app.proxy_addr(), "/", &[]).await;
        assert_eq!((r.status, r.version()), (200, Some("v2")));
    }
    let served_after: u64 = old.iter().map(|e| e.requests.load(Ordering::Relaxed)).sum();
    // The old endpoints get nothing any more, not even probes.
    assert_eq!(served_before, served_after);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn broken_update_keeps_the_old_endpoints_serving_stalls_and_rolls_back() {
    let old = [echo("v1").await, echo("v1").await, echo("v1").await];
    let broken = [
        switchable("v2-broken", 500, 200).await,
        switchable("v2-broken", 500, 200).await,
        switchable("v2-broken", 500, 200).await,
    ];
    let old_addrs: Vec<SocketAddr> = old.iter().map(|e| e.addr).collect();
    let broken_addrs: Vec<SocketAddr> = broken.iter().map(|e| e.addr).collect();
    let app = start(
        &old_addrs,
        &format!("{HEALTH}    rollingUpdate: {{ maxSurge: 1, maxUnavailable: 0, progressDeadline: 1s }}\n"),
    )
    .await;
    let c = client();
    let load = start_load(app.proxy_addr(), 4);
    wait_for_more(&load, 50).await;

    let mut bus = app.events.subscribe();
    let put = put_endpoints(&c, &app, &broken_addrs).await;
    assert_eq!(put.status, 202, "{}", put.text());
    poll_until!("the update to stall", {
        let v = rollout(&c, &app).await;
        // Before the stall and after it, only the old endpoints are in rotation.
        assert_eq!(
            addresses(&v, |e| e["inRotation"] == true),
            sorted(&old_addrs),
            "{v}"
        );
        v["phase"] == "Stalled"
    });
    let v = rollout(&c, &app).await;
    assert_eq!(v["generation"], 2);
    let counts = ["desired", "ready", "updated", "old"].map(|k| v[k].as_u64().unwrap());
    assert_eq!(counts, [3, 3, 0, 3], "{v}");
    assert_eq!(v["progressDeadlineMs"], 1000);
    let kinds: Vec<&str> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "stalled").count(),
        1,
        "{kinds:?}"
    );
    // The stall also went out on the event stream (`GET /api/v1/events`).
    let mut published = Vec::new();
    poll_until!("the stalled event on the bus", {
        while let Ok(e) = bus.try_recv() {
            if e.kind == "endpoints" {
                let data: Value = serde_json::from_str(&e.data).unwrap();
                published.push(data["kind"].as_str().unwrap().to_string());
            }
        }
        published.iter().any(|k| k == "stalled")
    });
    assert_eq!(published.first().map(String::as_str), Some("updateStarted"));
    // The broken endpoints are known, desired, probed and not ready.
    let waiting = addresses(&v, |e| {
        e["desired"] == true && e["inRotation"] == false && e["ready"] == false
    });
    assert_eq!(waiting, sorted(&broken_addrs), "{v}");
    wait_for_more(&load, 50).await;

    // Re-declaring the old list rolls back by the same mechanism.
    let put = put_endpoints(&c, &app, &old_addrs).await;
    assert_eq!(put.status, 202, "{}", put.text());
    poll_until!("the rollback to complete", {
        let v = rollout(&c, &app).await;
        v["phase"] == "Complete" && v["generation"] == 3
    });
    wait_for_more(&load, 50).await;
    let (failures, versions) = finish(load).await;
    assert!(failures.is_empty(), "failed requests: {failures:?}");
    assert_eq!(versions.keys().collect::<Vec<_>>(), ["v1"], "{versions:?}");
    let v = rollout(&c, &app).await;
    assert_eq!(
        addresses(&v, |e| e["inRotation"] == true),
        sorted(&old_addrs)
    );
    // The broken endpoints are forgotten.
    assert_eq!(addresses(&v, |_| true), sorted(&old_addrs), "{v}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_endpoint_is_ejected_and_readmitted_after_it_heals() {
    let backends = [
        switchable("a", 200, 200).await,
        switchable("b", 200, 200).await,
        switchable("c", 200, 200).await,
    ];
    let addrs: Vec<SocketAddr> = backends.iter().map(|b| b.addr).collect();
    let app = start(
        &addrs,
        "    outlierDetection: { consecutiveFailures: 3, baseEjectionTime: 2s, maxEjectionPercent: 50 }\n",
    )
    .await;
    let c = client();
    let bad = addrs[2].to_string();
    let is_ejected = |v: &Value| addresses(v, |e| e["ejected"] == true) == [bad.clone()];
    let count = |v: &Value, kind: &str| {
        v["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == kind)
            .count()
    };

    // All healthy: round-robin reaches all three.
    let mut seen = BTreeMap::new();
    for _ in 0..30 {
        let r = get_once(&c, app.proxy_addr(), "/", &[]).await;
        assert_eq!(r.status, 200);
        *seen.entry(r.version().unwrap().to_string()).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 3, "{seen:?}");

    // `c` starts failing: within a few rounds it is ejected.
    backends[2].status.store(500, Ordering::Relaxed);
    let mut failed_before = 0;
    poll_until!("the failing endpoint to be ejected", {
        if get_once(&c, app.proxy_addr(), "/", &[]).await.status != 200 {
            failed_before += 1;
        }
        is_ejected(&rollout(&c, &app).await)
    });
    assert!(failed_before >= 3, "ejected after {failed_before} failures");
    // The other parts of the backend status agree.
    let full = get_once(&c, admin(&app), "/api/v1/backends/app", &[])
        .await
        .json();
    assert_eq!(full["health"]["ejected"], json!([bad]), "{full}");
    let flagged: Vec<&Value> = full["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ejected"] == true)
        .collect();
    assert_eq!(flagged.len(), 1, "{full}");
    assert_eq!(flagged[0]["address"], bad.as_str());

    // The success rate recovers: a batch sent while `c` stays ejected all succeeds. A
    // batch during which the ejection ran out (the view changed) proves nothing and is
    // sent again.
    let mut clean_batch = false;
    for _ in 0..10 {
        let before = rollout(&c, &app).await;
        let mut failed = 0;
        for _ in 0..30 {
            if get_once(&c, app.proxy_addr(), "/", &[]).await.status != 200 {
                failed += 1;
            }
        }
        let after = rollout(&c, &app).await;
        if is_ejected(&before)
            && is_ejected(&after)
            && count(&before, "ejected") == count(&after, "ejected")
        {
            assert_eq!(failed, 0, "requests failed while the endpoint was ejected");
            clean_batch = true;
            break;
        }
    }
    assert!(clean_batch, "no batch ran entirely within an ejection");

    // `c` heals: once its ejection runs out it is re-admitted and serves again.
    backends[2].status.store(200, Ordering::Relaxed);
    let mut served_by_c = 0;
    poll_until!("the healed endpoint to serve again", {
        let r = get_once(&c, app.proxy_addr(), "/", &[]).await;
        assert_eq!(r.status, 200, "a healed backend must not fail");
        if r.version() == Some("c") {
            served_by_c += 1;
        }
        served_by_c >= 5
    });
    poll_until!(
        "the readmitted event",
        count(&rollout(&c, &app).await, "readmitted") >= 1
    );
    let v = rollout(&c, &app).await;
    assert!(addresses(&v, |e| e["ejected"] == true).is_empty(), "{v}");
    assert!(backends
        .iter()
        .all(|b| b.healthz.load(Ordering::Relaxed) == 200));
    app.shutdown().await;
}

#[tokio::test]
async fn put_endpoints_is_validated_like_the_config_and_leaves_the_table_alone_when_refused() {
    let e = echo("v1").await;
    let app = start(&[e.addr], "").await;
    let c = client();
    let url = |backend: &str| format!("http://{}/api/v1/backends/{backend}/endpoints", admin(&app));
    let put = |backend: &str, body: &str| {
        Request::put(url(backend))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap()
    };
    let version = |r: &Resp| r.header("etag").map(str::to_string);
    let before = get_once(&c, admin(&app), "/api/v1/table", &[]).await;

    // (backend, body, status, field)
    let cases = [
        (
            "app",
            r#"{"endpoints": ["127.0.0.1:1", "nope", "127.0.0.1:1"]}"#,
            422,
            "endpoints[1]",
        ),
        ("app", r#"{"endpoints": []}"#, 422, "endpoints"),
        (
            "app",
            r#"{"endpoints": ["127.0.0.1:1"], "extra": 1}"#,
            400,
            "extra",
        ),
        ("app", r#"{"endpoints": "127.0.0.1:1"}"#, 400, "endpoints"),
        ("nope", r#"{"endpoints": ["127.0.0.1:1"]}"#, 404, "name"),
    ];
    for (backend, body, status, field) in cases {
        let r = send(&c, put(backend, body)).await;
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert_eq!(r.json()["field"], field, "{body}: {}", r.text());
    }
    let after = get_once(&c, admin(&app), "/api/v1/table", &[]).await;
    assert_eq!(version(&before), version(&after));
    assert_eq!(before.json(), after.json());

    // If-Match: a stale version conflicts, the current one is accepted.
    let mut stale = put(
        "app",
        &json!({"endpoints": [e.addr.to_string()]}).to_string(),
    );
    stale
        .headers_mut()
        .insert("if-match", "\"999\"".parse().unwrap());
    assert_eq!(send(&c, stale).await.status, 409);
    let mut current = put(
        "app",
        &json!({"endpoints": [e.addr.to_string()]}).to_string(),
    );
    current
        .headers_mut()
        .insert("if-match", version(&after).unwrap().parse().unwrap());
    let r = send(&c, current).await;
    assert_eq!(r.status, 202, "{}", r.text());
    // Same list: a new table version, but no new rolling update.
    assert_ne!(version(&r), version(&after));
    assert_eq!(r.json()["rollout"]["generation"], 1);
    assert_eq!(r.json()["rollout"]["status"]["phase"], "Complete");
    app.shutdown().await;
}
