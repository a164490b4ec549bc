//! Limits and request-smuggling defences: each limit crossed
//! gets its documented answer and the proxy keeps serving the next client;
//! smuggling attempts get 400, the connection is closed and nothing
//! reaches the backend (the echo backend counts requests).

use crate::proto_support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use proto_support::*;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use weir::echo::EchoHandle;

async fn echo() -> EchoHandle {
    echo_backend("v1", Duration::ZERO).await
}

/// Generous bound for "the proxy reacts" waits; never reached when it works.
const PATIENCE: Duration = Duration::from_secs(10);

async fn still_serves(addr: SocketAddr) {
    assert_eq!(
        plain_get(addr, "/").await,
        Some(200),
        "the next client is served"
    );
}

#[tokio::test]
async fn a_header_block_over_the_limit_gets_431() {
    let backend = echo().await;
    let app = start(&one_route(backend.addr, "", "  maxHeaderBytes: 16384\n")).await;
    let big = "a".repeat(12 * 1024);
    // Two headers of 12 KiB: each fits, together they do not.
    let req = format!("GET / HTTP/1.1\r\nHost: a\r\nX-A: {big}\r\nX-B: {big}\r\n\r\n");
    let mut s = TcpStream::connect(app.proxy_addr()).await.unwrap();
    // The proxy may close before reading everything; what matters is its answer.
    let _ = s.write_all(req.as_bytes()).await;
    let (raw, _) = read_until_close(&mut s, PATIENCE).await;
    assert_eq!(
        statuses(&raw),
        vec![431],
        "{}",
        String::from_utf8_lossy(&raw)
    );
    // Under the limit is fine.
    let ok = format!("GET / HTTP/1.1\r\nHost: a\r\nX-A: {big}\r\nConnection: close\r\n\r\n");
    let (raw, _) = raw_exchange(app.proxy_addr(), ok.as_bytes(), PATIENCE).await;
    assert_eq!(statuses(&raw), vec![200]);
    assert_eq!(backend.requests.load(Ordering::Relaxed), 1);
    still_serves(app.proxy_addr()).await;
}

#[tokio::test]
async fn too_many_headers_get_431_over_http1_and_http2() {
    let backend = echo().await;
    let app = start(&one_route(backend.addr, "", "  maxHeaders: 20\n")).await;
    let mut head = String::from("GET / HTTP/1.1\r\nHost: a\r\n");
    for i in 0..25 {
        head.push_str(&format!("X-H{i}: v\r\n"));
    }
    head.push_str("\r\n");
    let (raw, closed) = raw_exchange(app.proxy_addr(), head.as_bytes(), PATIENCE).await;
    assert_eq!(statuses(&raw), vec![431]);
    assert!(closed);

    let stream = TcpStream::connect(app.proxy_addr()).await.unwrap();
    let mut s = h2::<_, Full<Bytes>>(stream).await;
    let mut req = get_req_h2("http", "app.test", "/");
    for i in 0..25 {
        req.headers_mut().insert(
            http::HeaderName::from_bytes(format!("x-h{i}").as_bytes()).unwrap(),
            "v".parse().unwrap(),
        );
    }
    let a = read_answer(s.send_request(req).await.unwrap()).await;
    assert_eq!(a.status, 431);
    // Same connection, within the limit: served.
    let a = read_answer(
        s.send_request(get_req_h2("http", "app.test", "/"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(a.status, 200);
    assert_eq!(backend.requests.load(Ordering::Relaxed), 1);
    still_serves(app.proxy_addr()).await;
}

#[tokio::test]
async fn a_long_request_target_gets_414() {
    let backend = echo().await;
    let app = start(&one_route(backend.addr, "", "  maxUriBytes: 2048\n")).await;
    let long = format!("/{}", "p".repeat(3000));
    assert_eq!(plain_get(app.proxy_addr(), &long).await, Some(414));
    let stream = TcpStream::connect(app.proxy_addr()).await.unwrap();
    let mut s = h2::<_, Full<Bytes>>(stream).await;
    let a = read_answer(
        s.send_request(get_req_h2("http", "app.test", &long))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(a.status, 414);
    assert_eq!(
        plain_get(app.proxy_addr(), &format!("/{}", "p".repeat(2000))).await,
        Some(200)
    );
    assert_eq!(backend.requests.load(Ordering::Relaxed), 1);
    still_serves(app.proxy_addr()).await;
}

#[tokio::test]
async fn slow_or_silent_header_senders_are_disconnected() {
    let backend = echo().await;
    let app = start(&one_route(backend.addr, "", "  headerReadTimeout: 500ms\n")).await;
    // Slowloris: half a head, then nothing. hyper closes without an answer.
    let mut slow = TcpStream::connect(app.proxy_addr()).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n")
        .await
        .unwrap();
    // Silent: connects and never sends a byte.
    let mut silent = TcpStream::connect(app.proxy_addr()).await.unwrap();
    // Stuck in the HTTP/2 preface.
    let mut preface = TcpStream::connect(app.proxy_addr()).await.unwrap();
    preface.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    for (name, s) in [
        ("slow", &mut slow),
        ("silent", &mut silent),
        ("preface", &mut preface),
    ] {
        let (raw, closed) = read_until_close(s, PATIENCE).await;
        assert!(closed, "{name}: connection still open");
        assert!(
            raw.is_empty(),
            "{name}: got {}",
            String::from_utf8_lossy(&raw)
        );
    }
    assert_eq!(backend.requests.load(Ordering::Relaxed), 0);
    still_serves(app.proxy_addr()).await;
}

#[tokio::test]
async fn a_stalled_request_body_gets_408() {
    let backend = echo().await;
    let app = start(&one_route(backend.addr, "", "  bodyIdleTimeout: 300ms\n")).await;
    let mut s = TcpStream::connect(app.proxy_addr()).await.unwrap();
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789")
        .await
        .unwrap();
    let (raw, closed) = read_until_close(&mut s, PATIENCE).await;
    assert_eq!(
        statuses(&raw),
        vec![408],
        "{}",
        String::from_utf8_lossy(&raw)
    );
    assert!(closed, "the connection is closed after a 408");
    // A client that is merely slow (gaps under the limit) is served.
    let mut s = TcpStream::connect(app.proxy_addr()).await.unwrap();
    s.write_all(
        b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 20\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.write_all(b"01234").await.unwrap();
    }
    let (raw, _) = read_until_close(&mut s, PATIENCE).await;
    assert_eq!(
        statuses(&raw),
        vec![200],
        "{}",
        String::from_utf8_lossy(&raw)
    );
    assert!(String::from_utf8_lossy(&raw).contains("\"bodyBytes\":20"));
    still_serves(app.proxy_addr()).await;
}

/// A backend that sends its headers and one chunk, then nothing (while
/// keeping the stream open), on `/stall`; `ok` elsewhere.
async fn stalling_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let svc = service_fn(|req: http::Request<Incoming>| async move {
                    type B = http_body_util::combinators::BoxBody<Bytes, Infallible>;
                    if req.uri().path() != "/stall" {
                        let b: B = Full::new(Bytes::from("ok\n")).boxed();
                        return Ok::<_, Infallible>(http::Response::new(b));
                    }
                    let (tx, rx) =
                        tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
                    tokio::spawn(async move {
                        let _ = tx.send(Ok(Frame::data(Bytes::from("first chunk\n")))).await;
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        drop(tx);
                    });
                    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                        rx.recv().await.map(|f| (f, rx))
                    });
                    let b: B = BodyExt::boxed(StreamBody::new(stream));
                    Ok(http::Response::new(b))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_stalled_response_body_is_cut_after_the_idle_timeout() {
    let backend = stalling_backend().await;
    let app = start(&one_route(backend, "", "  bodyIdleTimeout: 300ms\n")).await;
    let stream = TcpStream::connect(app.proxy_addr()).await.unwrap();
    let mut s = h1::<_, Full<Bytes>>(stream).await;
    let resp = s.send_request(get_req("a", "/stall")).await.unwrap();
    assert_eq!(resp.status(), 200, "the response had started");
    let read = tokio::time::timeout(PATIENCE, resp.into_body().collect()).await;
    let body = read.expect("the proxy cut the stalled body in time");
    assert!(body.is_err(), "the client sees an incomplete body");
    still_serves(app.proxy_addr()).await;
}

/// Connections waiting in the kernel's accept queue of the socket listening on `addr`:
/// Linux shows a listening socket's queue as its `rx_queue` in /proc/net/tcp (`ss -lnt`
/// calls it Recv-Q). A connection counted there has finished its handshake and has not
/// been taken by `accept`. `None`: no such listening socket.
fn accept_queue(addr: SocketAddr) -> Option<u64> {
    let (table, local) = match addr {
        SocketAddr::V4(a) => (
            "/proc/net/tcp",
            // The kernel prints the address as the native-endian integer of its bytes.
            format!(
                "{:08X}:{:04X}",
                u32::from_ne_bytes(a.ip().octets()),
                a.port()
            ),
        ),
        SocketAddr::V6(a) => {
            let ip: String = a
                .ip()
                .octets()
                .chunks(4)
                .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
                .collect();
            ("/proc/net/tcp6", format!("{ip}:{:04X}", a.port()))
        }
    };
    let text = std::fs::read_to_string(table)
        .unwrap_or_else(|e| panic!("{table} (the accept queue is read from Linux's /proc): {e}"));
    const LISTEN: &str = "0A";
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local_address rem_address st tx_queue:rx_queue …
        if f.len() < 5 || f[1] != local || f[3] != LISTEN {
            return None;
        }
        let rx = f[4].split(':').nth(1)?;
        u64::from_str_radix(rx, 16).ok()
    })
}

// "Not served" is proven on the kernel's side rather than by waiting a while: the third
// connection is seen complete and sitting in the listen backlog; then the proxy serves
// the two open connections, which takes its runtime through the readiness events that
// would have woken an accept, and the third is still there, un-accepted.
#[tokio::test]
#[cfg_attr(
    not(target_os = "linux"),
    ignore = "reads the accept queue from Linux's /proc/net/tcp"
)]
async fn connections_over_the_limit_wait_and_open_ones_are_unaffected() {
    let backend = echo().await;
    let app = start(&one_route(backend.addr, "", "  maxConnections: 2\n")).await;
    let addr = app.proxy_addr();
    let mut c1 = h1::<_, Full<Bytes>>(TcpStream::connect(addr).await.unwrap()).await;
    let mut c2 = h1::<_, Full<Bytes>>(TcpStream::connect(addr).await.unwrap()).await;
    for c in [&mut c1, &mut c2] {
        assert_eq!(
            read_answer(c.send_request(get_req("a", "/")).await.unwrap())
                .await
                .status,
            200
        );
    }
    assert_eq!(
        accept_queue(addr),
        Some(0),
        "both connections were accepted"
    );
    // The third connection is accepted by the kernel but not by the proxy.
    let third = tokio::spawn(async move {
        let mut c3 = h1::<_, Full<Bytes>>(TcpStream::connect(addr).await.unwrap()).await;
        read_answer(c3.send_request(get_req("a", "/")).await.unwrap())
            .await
            .status
    });
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while accept_queue(addr) != Some(1) {
        assert!(
            !third.is_finished(),
            "a third connection was served over maxConnections: 2"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "the third connection never reached the listen backlog: {:?}",
            accept_queue(addr)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The open connections keep working meanwhile.
    for c in [&mut c1, &mut c2] {
        assert_eq!(
            read_answer(c.send_request(get_req("a", "/")).await.unwrap())
                .await
                .status,
            200
        );
    }
    assert_eq!(
        accept_queue(addr),
        Some(1),
        "the third connection left the backlog while two were open"
    );
    assert!(
        !third.is_finished(),
        "a third connection was served over maxConnections: 2"
    );
    // Closing one lets the waiting client in.
    drop(c1);
    let status = tokio::time::timeout(PATIENCE, third)
        .await
        .expect("the waiting connection was served after one closed")
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(accept_queue(addr), Some(0));
    assert_eq!(backend.requests.load(Ordering::Relaxed), 5);
}

#[tokio::test]
async fn http2_max_concurrent_streams_is_advertised() {
    let backend = echo().await;
    let app = start(&one_route(
        backend.addr,
        "",
        "  http2MaxConcurrentStreams: 7\n",
    ))
    .await;
    let tcp = TcpStream::connect(app.proxy_addr()).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut send = send.ready().await.unwrap();
    let req = http::Request::get("http://app.test/").body(()).unwrap();
    let (resp, _) = send.send_request(req, true).unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(send.current_max_send_streams(), 7);
}

/// Sends `raw` on a fresh connection; returns the statuses answered and
/// whether the proxy closed the connection.
async fn smuggle(addr: SocketAddr, raw: &str) -> (Vec<u16>, bool) {
    let (bytes, closed) = raw_exchange(addr, raw.as_bytes(), PATIENCE).await;
    (statuses(&bytes), closed)
}

#[tokio::test]
async fn smuggling_attempts_get_400_and_never_reach_the_backend() {
    let backend = echo().await;
    let app = start(&one_route(backend.addr, "", "")).await;
    let addr = app.proxy_addr();
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    let cases = [
        // CL.TE: the classic, with a second request hidden in the body.
        format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}", 5 + smuggled.len()),
        // TE.CL, header order reversed.
        format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n5c\r\n{smuggled}\r\n0\r\n\r\n"),
        // CL.CL with different values.
        format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: {}\r\n\r\nhello{smuggled}", 5 + smuggled.len()),
        // A Transfer-Encoding whose last coding is not chunked.
        format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, x\r\n\r\n0\r\n\r\n{smuggled}"),
        // Two Transfer-Encoding lines, the last not chunked.
        format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n{smuggled}"),
    ];
    for raw in &cases {
        let (statuses, closed) = smuggle(addr, raw).await;
        assert_eq!(statuses, vec![400], "{raw:?}");
        assert!(closed, "connection left open after {raw:?}");
        assert_eq!(
            backend.requests.load(Ordering::Relaxed),
            0,
            "{raw:?} reached the backend"
        );
    }
    // The smuggling check sits after earlier good requests on a keep-alive
    // connection too: those are served, the bad one is not.
    let raw = format!(
        "GET /first HTTP/1.1\r\nHost: a\r\n\r\nPOST / HTTP/1.1\r\nHost: a\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"
    );
    let (statuses, closed) = smuggle(addr, &raw).await;
    assert_eq!(statuses, vec![200, 400]);
    assert!(closed);
    assert_eq!(backend.requests.load(Ordering::Relaxed), 1);
    still_serves(addr).await;
}

#[tokio::test]
async fn bodies_that_look_like_requests_are_just_bodies() {
    let backend = echo().await;
    let app = start(&one_route(backend.addr, "", "")).await;
    // A fixed-length body and a chunked one both carrying a fake head with
    // both framing headers, then a real request on the same connection.
    let fake = "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
    let raw = format!(
        "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n{fake}\
POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{fake}\r\n0\r\n\r\n\
GET /last HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        fake.len(),
        fake.len()
    );
    let (statuses, closed) = smuggle(app.proxy_addr(), &raw).await;
    assert_eq!(statuses, vec![200, 200, 200]);
    assert!(closed);
    assert_eq!(backend.requests.load(Ordering::Relaxed), 3);
}

#[tokio::test]
async fn rapid_reset_floods_get_goaway_and_other_clients_are_served() {
    let backend = echo().await;
    let app = start(&one_route(
        backend.addr,
        "",
        "  http2MaxPendingAcceptResetStreams: 5\n",
    ))
    .await;
    let tcp = TcpStream::connect(app.proxy_addr()).await.unwrap();
    let (mut send, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(conn);
    // Open streams and cancel them at once (CVE-2023-44487), without
    // yielding, so HEADERS and RST_STREAM frames leave together.
    let mut refused = false;
    for _ in 0..100 {
        let req = http::Request::get("http://app.test/").body(()).unwrap();
        match send.send_request(req, false) {
            Ok((_resp, mut stream)) => stream.send_reset(h2::Reason::CANCEL),
            Err(_) => {
                refused = true;
                break;
            }
        }
    }
    let ended = tokio::time::timeout(PATIENCE, conn)
        .await
        .expect("the flooding connection was not closed")
        .unwrap();
    let err = ended.expect_err("the connection ended without an error");
    assert_eq!(
        err.reason(),
        Some(h2::Reason::ENHANCE_YOUR_CALM),
        "{err} (refused early: {refused})"
    );
    assert_eq!(backend.requests.load(Ordering::Relaxed), 0);
    let stream = TcpStream::connect(app.proxy_addr()).await.unwrap();
    let mut s = h2::<_, Full<Bytes>>(stream).await;
    let a = read_answer(
        s.send_request(get_req_h2("http", "app.test", "/"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(a.status, 200);
}

#[test]
fn limit_fields_are_validated_with_their_paths() {
    let yaml = "listeners: [{ name: http, address: \"127.0.0.1:0\" }]
proxy:
  maxHeaderBytes: 100
  maxHeaders: 0
  maxUriBytes: 100000
  bodyIdleTimeout: soon
  maxConnections: 0
  http2MaxConcurrentStreams: 0
  http2MaxPendingAcceptResetStreams: 0
  http2MaxLocalErrorResetStreams: -1
  tunnelIdleTimeout: 0s
";
    let err = weir::config::parse_yaml(yaml, "t.yaml", std::path::Path::new(".")).unwrap_err();
    let mut paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "proxy.bodyIdleTimeout",
            "proxy.http2MaxConcurrentStreams",
            "proxy.http2MaxLocalErrorResetStreams",
            "proxy.http2MaxPendingAcceptResetStreams",
            "proxy.maxConnections",
            "proxy.maxHeaderBytes",
            "proxy.maxHeaders",
            "proxy.maxUriBytes",
            "proxy.tunnelIdleTimeout",
        ],
        "{err}"
    );
    // The defaults, as documented in docs/protocols.md.
    let d = weir::config::ProxySettings::default();
    assert_eq!(
        (
            d.max_header_bytes,
            d.max_headers,
            d.max_uri_bytes,
            d.max_connections
        ),
        (61440, 100, 8192, 10_000)
    );
    assert_eq!(d.body_idle_timeout, Duration::from_secs(60));
    assert_eq!(d.tunnel_idle_timeout, Duration::from_secs(300));
    assert_eq!(
        (
            d.http2_max_concurrent_streams,
            d.http2_max_pending_accept_reset_streams,
            d.http2_max_local_error_reset_streams
        ),
        (128, 20, 1024)
    );
}
