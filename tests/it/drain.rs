//! Graceful drain with the real binary: SIGTERM stops accepting,
//! in-flight requests finish, the process exits 0 before the drain
//! timeout; a second signal exits at once.

use crate::proto_support;

use bytes::Bytes;
use http_body_util::Full;
use proto_support::*;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use weir::echo::EchoHandle;

async fn slow_echo(latency: Duration) -> EchoHandle {
    echo_backend("v1", latency).await
}

/// Starts the binary on a config with one route to `backend`; returns it
/// with the proxy listener's address.
fn start_weir(backend: SocketAddr, drain: &str) -> (Weir, SocketAddr) {
    let yaml = format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\n{}proxy:\n  drainTimeout: {drain}\n",
        one_route(backend, "", "")
    );
    let w = Weir::start(&yaml);
    let addr = w.proxy_addr;
    (w, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_50_in_flight_requests_refuses_new_connections_and_exits_0() {
    let backend = slow_echo(Duration::from_secs(1)).await;
    let drain = Duration::from_secs(20);
    let (mut weir, addr) = start_weir(backend.addr, "20s");

    // 50 slow requests: 40 on HTTP/1.1 connections of their own, 10 as
    // streams of one h2c connection.
    let mut calls = Vec::new();
    for i in 0..40 {
        calls.push(tokio::spawn(async move {
            let stream = TcpStream::connect(addr).await.unwrap();
            let mut s = h1::<_, Full<Bytes>>(stream).await;
            let r = s
                .send_request(get_req("app.test", &format!("/slow/{i}")))
                .await
                .expect("in-flight request failed");
            read_answer(r).await
        }));
    }
    let mut h2c = h2::<_, Full<Bytes>>(TcpStream::connect(addr).await.unwrap()).await;
    for i in 0..10 {
        let r = h2c.send_request(get_req_h2("http", "app.test", &format!("/slow/h2/{i}")));
        calls.push(tokio::spawn(async move {
            read_answer(r.await.expect("in-flight stream failed")).await
        }));
    }
    let arrived = eventually(Duration::from_secs(20), || async {
        backend.requests.load(Ordering::Relaxed) >= 50
    })
    .await;
    assert!(
        arrived,
        "only {} requests reached the backend",
        backend.requests.load(Ordering::Relaxed)
    );

    let signalled = Instant::now();
    weir.signal("-TERM");
    // New connections are refused while the old ones drain.
    let refused = eventually(Duration::from_secs(10), || async {
        TcpStream::connect(addr).await.is_err()
    })
    .await;
    assert!(refused, "the listener still accepts after SIGTERM");
    assert!(
        weir.running(),
        "the process exited before its in-flight requests were done"
    );

    for c in calls {
        let a = tokio::time::timeout(Duration::from_secs(30), c)
            .await
            .expect("in-flight request finished")
            .unwrap();
        assert_eq!(a.status, 200, "{}", a.text());
        if a.version == http::Version::HTTP_11 {
            assert_eq!(
                a.headers.get("connection").and_then(|v| v.to_str().ok()),
                Some("close"),
                "HTTP/1 responses during a drain close their connection"
            );
        }
    }
    // The HTTP/2 connection got a GOAWAY: no new stream on it.
    let late = h2c
        .send_request(get_req_h2("http", "app.test", "/late"))
        .await;
    assert!(late.is_err(), "a new stream was accepted during the drain");
    let status = tokio::task::spawn_blocking(move || {
        let st = weir.wait_exit(Duration::from_secs(25));
        (st, weir)
    })
    .await
    .unwrap();
    let exited = status.0.expect("weir did not exit");
    assert!(exited.success(), "exit status {exited:?}");
    assert!(
        signalled.elapsed() < drain,
        "exited after {:?}, not before the drain timeout",
        signalled.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once() {
    let backend = slow_echo(Duration::from_secs(60)).await;
    let (mut weir, addr) = start_weir(backend.addr, "60s");
    let call = tokio::spawn(async move {
        let stream = TcpStream::connect(addr).await.unwrap();
        let mut s = h1::<_, Full<Bytes>>(stream).await;
        s.send_request(get_req("app.test", "/slow"))
            .await
            .map(|r| r.status())
    });
    assert!(
        eventually(Duration::from_secs(20), || async {
            backend.requests.load(Ordering::Relaxed) >= 1
        })
        .await
    );
    weir.signal("-TERM");
    assert!(
        weir.wait_line("shutting down", Duration::from_secs(20))
            .is_some(),
        "no drain started"
    );
    // The drain would wait up to 60 s for the request; a second signal ends it.
    // (Repeated, so a signal sent before the second handler is armed does not
    // make the test depend on timing.)
    let started = Instant::now();
    let (exited, _weir) = tokio::task::spawn_blocking(move || {
        for _ in 0..20 {
            weir.signal("-INT");
            if let Some(st) = weir.wait_exit(Duration::from_millis(500)) {
                return (Some(st), weir);
            }
        }
        (None, weir)
    })
    .await
    .unwrap();
    assert!(exited.is_some(), "weir did not exit on the second signal");
    assert!(started.elapsed() < Duration::from_secs(30));
    // The in-flight request was cut, not completed.
    let r = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .unwrap()
        .unwrap();
    assert!(r.is_err(), "the request completed: {r:?}");
}
