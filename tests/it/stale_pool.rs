//! Stale pooled upstream connections: a backend that answers with
//! keep-alive and then closes every connection. An idempotent request
//! without a body that meets such a connection is sent again on a new one,
//! on every path: the HTTP/1 fast path, TLS and HTTP/2 clients and routes
//! with header edits (hyper's path). 2,000 requests per client kind, no
//! error, none left waiting for a connection (each answered well before the
//! route timeout), and the retried failures are not counted against the backend.

use crate::proto_support;

use bytes::Bytes;
use http_body_util::Full;
use proto_support::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Requests per client kind.
const REQUESTS: usize = 2000;
/// A request answered later than this waited on something other than the
/// backend, which answers at once: a pooled connection it never got (the
/// route timeout, 15 s, would answer it 504). Not a speed measure: a loaded
/// 2-core machine answers in milliseconds; only a hang comes near it.
const HANG: Duration = Duration::from_secs(5);
/// Cap on the whole load (four kinds at once); far above what it takes.
const CAP: Duration = Duration::from_secs(240);

/// A backend that answers one request per connection with a keep-alive
/// response (no `Connection: close`) and then closes the connection.
/// Counts the requests it read (and answers).
async fn closing_backend() -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answered = Arc::new(AtomicU64::new(0));
    let count = answered.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = Vec::with_capacity(4096);
                loop {
                    if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                    match s.read_buf(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
                // Counted before the answer is written: once the client has
                // its answer, the count must already include it.
                count.fetch_add(1, Ordering::Relaxed);
                let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                let _ = s.write_all(ok).await;
                // Dropped: closed right after answering.
            });
        }
    });
    (addr, answered)
}

fn config(backend: SocketAddr) -> String {
    format!(
        "listeners:
  - name: http
    address: 127.0.0.1:0
  - name: https
    address: 127.0.0.1:0
    tls: {{ certFile: app.crt, keyFile: app.key }}
backends:
  app:
    endpoints: [\"{backend}\"]
    outlierDetection: {{ consecutiveFailures: 3, baseEjectionTime: 60s, maxEjectionPercent: 100 }}
routes:
  - name: edited
    hosts: [edited.test]
    primary: app
    headers: {{ request: {{ set: {{ x-env: test }} }} }}
  - name: app
    primary: app
"
    )
}

/// Sends `REQUESTS` GETs one after the other on one connection; returns
/// the answers that were not 200.
async fn h1_load<IO>(io: IO, host: &str) -> Vec<String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut s = h1::<_, Full<Bytes>>(io).await;
    let mut bad = Vec::new();
    for i in 0..REQUESTS {
        s.ready().await.unwrap();
        let sent = std::time::Instant::now();
        let a = read_answer(s.send_request(get_req(host, "/")).await.unwrap()).await;
        if a.status != 200 {
            bad.push(format!("{host} #{i}: {} {}", a.status, a.text().trim()));
        } else if sent.elapsed() > HANG {
            bad.push(format!("{host} #{i}: answered after {:?}", sent.elapsed()));
        }
    }
    bad
}

/// [`h1_load`] over HTTP/2 (h2c prior knowledge).
async fn h2_load(io: TcpStream) -> Vec<String> {
    let mut s = h2::<_, Full<Bytes>>(io).await;
    let mut bad = Vec::new();
    for i in 0..REQUESTS {
        let sent = std::time::Instant::now();
        let a = read_answer(
            s.send_request(get_req_h2("http", "app.test", "/"))
                .await
                .unwrap(),
        )
        .await;
        if a.status != 200 {
            bad.push(format!("h2c #{i}: {} {}", a.status, a.text().trim()));
        } else if sent.elapsed() > HANG {
            bad.push(format!("h2c #{i}: answered after {:?}", sent.elapsed()));
        }
    }
    bad
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_closing_every_keep_alive_connection_gives_no_errors() {
    let (backend, answered) = closing_backend().await;
    let ca = Ca::new();
    let dir = TempDir::new("stale-pool");
    let leaf = ca.leaf(&["app.test"]);
    dir.write("app.crt", &leaf.cert_pem);
    dir.write("app.key", &leaf.key_pem);
    let app = start_in(&config(backend), &dir.0).await;
    let plain = app.listeners[0].1;
    let tls_addr = app.listeners[1].1;
    let cfg = ca.client_config(&[&rustls::version::TLS13], &[b"http/1.1"]);
    let tls = tls_connect(tls_addr, cfg, "app.test").await.unwrap();
    let loads = async {
        tokio::join!(
            h1_load(TcpStream::connect(plain).await.unwrap(), "app.test"),
            h1_load(tls, "app.test"),
            h2_load(TcpStream::connect(plain).await.unwrap()),
            h1_load(TcpStream::connect(plain).await.unwrap(), "edited.test"),
        )
    };
    let (fast, tls, h2c, edited) = tokio::time::timeout(CAP, loads)
        .await
        .expect("the load finished within its cap");
    for (kind, bad) in [
        ("fast path", fast),
        ("tls", tls),
        ("h2c", h2c),
        ("header edits", edited),
    ] {
        assert!(
            bad.is_empty(),
            "{kind}: {} of {REQUESTS} failed, first: {:?}",
            bad.len(),
            &bad[..bad.len().min(5)]
        );
    }
    assert_eq!(answered.load(Ordering::Relaxed), 4 * REQUESTS as u64);
    // Not one failure was counted against the backend.
    let snap = app.store.load();
    for (route, rt) in snap.spec.routing.routes.iter().zip(&snap.routes) {
        let now = app.shared.now_sec(std::time::Instant::now());
        let w = rt.stats.snapshot(weir::stats::Role::Primary, now, 600);
        assert_eq!(w.failures, 0, "route {}: {w:?}", route.name);
    }
    let b = app.store.backend("app").unwrap();
    assert!(
        b.rotation.load().iter().all(|e| !e.is_ejected()),
        "an endpoint was ejected"
    );
}

/// The race at its most frequent: sixteen clients at once on hyper's path (a
/// route with header edits), each request meeting a pooled connection the
/// backend may be closing. A request hyper-util hands back unsent goes again on
/// a new connection at once: every one is answered, none waits for a pooled
/// connection until the route timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_on_closing_connections_never_wait_for_the_pool() {
    const CLIENTS: usize = 16;
    const EACH: usize = 250;
    let (backend, answered) = closing_backend().await;
    let dir = TempDir::new("stale-pool-race");
    let ca = Ca::new();
    let leaf = ca.leaf(&["app.test"]);
    dir.write("app.crt", &leaf.cert_pem);
    dir.write("app.key", &leaf.key_pem);
    let app = start_in(&config(backend), &dir.0).await;
    let plain = app.listeners[0].1;
    let clients = (0..CLIENTS).map(|_| async move {
        let mut s = h1::<_, Full<Bytes>>(TcpStream::connect(plain).await.unwrap()).await;
        let mut bad = Vec::new();
        for i in 0..EACH {
            s.ready().await.unwrap();
            let sent = std::time::Instant::now();
            let a = read_answer(s.send_request(get_req("edited.test", "/")).await.unwrap()).await;
            if a.status != 200 {
                bad.push(format!("#{i}: {} {}", a.status, a.text().trim()));
            } else if sent.elapsed() > HANG {
                bad.push(format!("#{i}: answered after {:?}", sent.elapsed()));
            }
        }
        bad
    });
    let all = tokio::time::timeout(CAP, futures_util::future::join_all(clients))
        .await
        .expect("the load finished within its cap");
    let bad: Vec<String> = all.into_iter().flatten().collect();
    assert!(
        bad.is_empty(),
        "{} of {} failed or waited, first: {:?}",
        bad.len(),
        CLIENTS * EACH,
        &bad[..bad.len().min(5)]
    );
    assert_eq!(answered.load(Ordering::Relaxed), (CLIENTS * EACH) as u64);
}
