//! Request bodies under abuse: a malformed or abandoned upload is the
//! client's fault (400 / 499), never the backend's (no 502, no failure in
//! the success rate, no outlier ejection); the route timeout starts when
//! the request is complete, and a slow upload is bounded by the body
//! timeouts (408). Every test runs with `http1FastPath` on and off.

use crate::proto_support;

use bytes::Bytes;
use http_body_util::Full;
use proto_support::*;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use weir::echo::{EchoHandle, EchoOptions};

/// Generous bound for "the proxy reacts" waits; never reached when it works.
const PATIENCE: Duration = Duration::from_secs(10);

async fn echo(version: &str) -> EchoHandle {
    weir::echo::spawn(
        "127.0.0.1:0".parse().unwrap(),
        EchoOptions {
            version: version.into(),
            error_rate: 0.0,
            latency: Duration::ZERO,
        },
    )
    .await
    .unwrap()
}

/// Backend `app` on `endpoints` with outlier detection that ejects an
/// endpoint after 3 failures in a row, one route `app`, and `proxy` lines.
fn config(endpoints: &[SocketAddr], route_extra: &str, fast: bool, proxy: &str) -> String {
    let eps: Vec<String> = endpoints.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "backends:\n  app:\n    endpoints: [{}]\n    outlierDetection: {{ consecutiveFailures: 3, baseEjectionTime: 60s, maxEjectionPercent: 100 }}\n\
routes:\n  - name: app\n    primary: app\n{route_extra}proxy:\n  http1FastPath: {fast}\n{proxy}",
        eps.join(", ")
    )
}

async fn admin_get(app: &weir::app::RunningApp, path: &str) -> (u16, String) {
    let s = TcpStream::connect(app.admin_addr).await.unwrap();
    let mut c = h1::<_, Full<Bytes>>(s).await;
    let host = app.admin_addr.to_string();
    let a = read_answer(c.send_request(get_req(&host, path)).await.unwrap()).await;
    (a.status, a.text())
}

/// The primary's numbers in `/api/v1/stats`.
async fn primary_stats(app: &weir::app::RunningApp) -> Value {
    let (status, text) = admin_get(app, "/api/v1/stats?route=app&window=600s").await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    v["roles"]["primary"].clone()
}

/// Waits until the primary has counted `n` client errors (the event that
/// says the proxy has finished with every broken upload).
async fn wait_client_errors(app: &weir::app::RunningApp, n: u64) -> Value {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let s = primary_stats(app).await;
        if s["clientErrors"].as_u64() == Some(n) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "client errors never reached {n}: {s}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends a head and the first 1 KiB of a declared 100 KiB body, waits until
/// a backend has the request (`forwarded` counts them: the proxy is then
/// forwarding the body), then resets the connection.
async fn reset_mid_upload(proxy: SocketAddr, forwarded: impl Fn() -> u64) {
    let before = forwarded();
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let mut raw = b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 102400\r\n\r\n".to_vec();
    raw.extend_from_slice(&[b'x'; 1024]);
    s.write_all(&raw).await.unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while forwarded() == before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the upload never reached the backend"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Linger 0: close with RST, as a crashed or killed client does.
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(s);
}

async fn broken_uploads_are_the_clients_fault(fast: bool) {
    let (a, b) = (echo("a").await, echo("b").await);
    let app = start(&config(&[a.addr, b.addr], "", fast, "")).await;
    let addr = app.proxy_addr();
    // Round-robin: each endpoint gets 3 of each kind, enough to eject it
    // if they counted as failures.
    for i in 0..6 {
        let bad =
            b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n";
        let (raw, closed) = raw_exchange(addr, bad, PATIENCE).await;
        let text = String::from_utf8_lossy(&raw);
        assert_eq!(statuses(&raw), vec![400], "malformed upload {i}: {text}");
        assert!(text.contains("x-weir-error: bad-request"), "{text}");
        assert!(closed, "the connection is closed after a malformed body");
    }
    for _ in 0..6 {
        reset_mid_upload(addr, || {
            a.requests.load(Ordering::Relaxed) + b.requests.load(Ordering::Relaxed)
        })
        .await;
    }
    let s = wait_client_errors(&app, 12).await;
    assert_eq!(s["failures"], 0, "{s}");
    assert_eq!(
        s["requests"], 0,
        "client errors are not in the denominator: {s}"
    );
    let (_, backend) = admin_get(&app, "/api/v1/backends/app").await;
    let backend: Value = serde_json::from_str(&backend).unwrap();
    assert_eq!(
        backend["health"]["ejected"],
        serde_json::json!([]),
        "{backend}"
    );
    let (_, metrics) = admin_get(&app, "/metrics").await;
    for code in ["400", "499"] {
        let line = format!(r#"route="app",role="primary",backend="app",code="{code}"}} 6"#);
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("weir_requests_total") && l.ends_with(&line)),
            "no {line} in\n{metrics}"
        );
    }
    assert!(!metrics.contains(r#"kind="upstream"} 1"#), "{metrics}");
    // Both endpoints still serve.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let c = TcpStream::connect(addr).await.unwrap();
        let mut c = h1::<_, Full<Bytes>>(c).await;
        let r = c.send_request(get_req("a", "/")).await.unwrap();
        assert_eq!(r.status(), 200);
        seen.insert(r.headers()["x-weir-version"].to_str().unwrap().to_string());
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(primary_stats(&app).await["successRate"], 100.0);
}

#[tokio::test]
async fn broken_uploads_are_the_clients_fault_fast_path() {
    broken_uploads_are_the_clients_fault(true).await;
}

#[tokio::test]
async fn broken_uploads_are_the_clients_fault_hyper_path() {
    broken_uploads_are_the_clients_fault(false).await;
}

#[tokio::test]
async fn an_http2_client_that_resets_its_upload_is_a_client_error() {
    let backend = echo("a").await;
    let app = start(&config(&[backend.addr], "", true, "")).await;
    let tcp = TcpStream::connect(app.proxy_addr()).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut send = send.ready().await.unwrap();
    let req = http::Request::post("http://app.test/echo")
        .header("content-length", "102400")
        .body(())
        .unwrap();
    let (_resp, mut stream) = send.send_request(req, false).unwrap();
    stream
        .send_data(Bytes::from(vec![b'x'; 1024]), false)
        .unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while backend.requests.load(Ordering::Relaxed) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never forwarded");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stream.send_reset(h2::Reason::CANCEL);
    let s = wait_client_errors(&app, 1).await;
    assert_eq!(
        (s["requests"].as_u64(), s["failures"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
}

/// Writes `head`, then `body` in two halves with `gap` between them, and
/// returns the statuses answered and whether the proxy closed.
async fn upload_in_two_halves(addr: SocketAddr, body: &[u8], gap: Duration) -> (Vec<u16>, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let (first, second) = body.split_at(body.len() / 2);
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(first).await.unwrap();
    tokio::time::sleep(gap).await;
    // The proxy may have answered and closed already (the unfixed 504).
    let _ = s.write_all(second).await;
    let (raw, _) = read_until_close(&mut s, PATIENCE).await;
    (statuses(&raw), String::from_utf8_lossy(&raw).into_owned())
}

async fn the_route_timeout_starts_when_the_request_is_complete(fast: bool) {
    let backend = echo("a").await;
    // The upload pauses for three route timeouts: the answer is about which
    // status, so a loaded machine only makes the pause longer.
    let app = start(&config(&[backend.addr], "    timeout: 200ms\n", fast, "")).await;
    let (st, text) = upload_in_two_halves(
        app.proxy_addr(),
        b"0123456789ab",
        Duration::from_millis(600),
    )
    .await;
    assert_eq!(st, vec![200], "{text}");
    assert!(text.contains("\"bodyBytes\":12"), "{text}");
    let s = primary_stats(&app).await;
    assert_eq!(
        (s["requests"].as_u64(), s["failures"].as_u64()),
        (Some(1), Some(0)),
        "{s}"
    );
}

#[tokio::test]
async fn the_route_timeout_starts_when_the_request_is_complete_fast_path() {
    the_route_timeout_starts_when_the_request_is_complete(true).await;
}

#[tokio::test]
async fn the_route_timeout_starts_when_the_request_is_complete_hyper_path() {
    the_route_timeout_starts_when_the_request_is_complete(false).await;
}

async fn a_slow_upload_over_the_request_body_timeout_gets_408(fast: bool) {
    let backend = echo("a").await;
    let app = start(&config(
        &[backend.addr],
        "",
        fast,
        "  requestBodyTimeout: 300ms\n",
    ))
    .await;
    // Half of the body, then nothing: the total limit ends it.
    let mut s = TcpStream::connect(app.proxy_addr()).await.unwrap();
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n012345")
        .await
        .unwrap();
    let (raw, closed) = read_until_close(&mut s, PATIENCE).await;
    let text = String::from_utf8_lossy(&raw);
    assert_eq!(statuses(&raw), vec![408], "{text}");
    assert!(text.contains("x-weir-error: request-timeout"), "{text}");
    assert!(closed, "the connection is closed after a 408");
    let s = wait_client_errors(&app, 1).await;
    assert_eq!(
        (s["requests"].as_u64(), s["failures"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    // A body sent at once is well within the limit.
    let (raw, _) = raw_exchange(
        app.proxy_addr(),
        b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\nConnection: close\r\n\r\n0123456789ab",
        PATIENCE,
    )
    .await;
    assert_eq!(
        statuses(&raw),
        vec![200],
        "{}",
        String::from_utf8_lossy(&raw)
    );
}

#[tokio::test]
async fn a_slow_upload_over_the_request_body_timeout_gets_408_fast_path() {
    a_slow_upload_over_the_request_body_timeout_gets_408(true).await;
}

#[tokio::test]
async fn a_slow_upload_over_the_request_body_timeout_gets_408_hyper_path() {
    a_slow_upload_over_the_request_body_timeout_gets_408(false).await;
}

/// A backend that reads request heads and never a body byte (nor answers).
async fn deaf_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    addr
}

#[tokio::test]
async fn a_backend_that_stops_reading_the_upload_is_the_backends_fault() {
    let backend = deaf_backend().await;
    let app = start(&config(&[backend], "", false, "  bodyIdleTimeout: 300ms\n")).await;
    let mut s = TcpStream::connect(app.proxy_addr()).await.unwrap();
    // Far more than the socket buffers on the way hold: the upload stalls
    // because nobody reads it, while the client is ready to send more.
    let size = 64 << 20;
    let head = format!("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: {size}\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let writer = tokio::spawn(async move {
        let chunk = vec![b'x'; 64 << 10];
        for _ in 0..(size / chunk.len()) {
            if wr.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let (raw, _) = read_until_close(&mut rd, PATIENCE).await;
    writer.abort();
    let text = String::from_utf8_lossy(&raw);
    assert_eq!(statuses(&raw), vec![504], "{text}");
    let s = primary_stats(&app).await;
    assert_eq!(
        (s["requests"].as_u64(), s["failures"].as_u64()),
        (Some(1), Some(1)),
        "{s}"
    );
}

#[test]
fn request_body_timeout_is_validated_with_its_path() {
    let yaml = "listeners: [{ name: http, address: \"127.0.0.1:0\" }]
proxy:
  requestBodyTimeout: soon
";
    let err = weir::config::parse_yaml(yaml, "t.yaml", std::path::Path::new(".")).unwrap_err();
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["proxy.requestBodyTimeout"], "{err}");
    let yaml = yaml.replace("soon", "0s");
    let err = weir::config::parse_yaml(&yaml, "t.yaml", std::path::Path::new(".")).unwrap_err();
    assert!(err.to_string().contains("greater than 0"), "{err}");
    // Off unless set.
    assert_eq!(
        weir::config::ProxySettings::default().request_body_timeout,
        None
    );
}
