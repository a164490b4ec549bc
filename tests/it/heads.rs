//! Request heads under abuse, on every path that can read them: the HTTP/1
//! fast path, hyper (`http1FastPath: false`, or after a hand-off), HTTP/2
//! and TLS. Host must be one, agree with the target and reach the upstream;
//! headers weir depends on are not dropped because `Connection` lists them;
//! an unsolicited 101 is a 502; `x-weir-*` never comes from a client; the
//! header read timeout and `maxHeaderBytes` are one exact bound.

use crate::proto_support;

use bytes::Bytes;
use http_body_util::Full;
use proto_support::support::{header, read_response, scripted, Raw, Reply};
use proto_support::*;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use weir::app::RunningApp;
use weir::echo::EchoHandle;

/// Generous bound for "the proxy reacts" waits; never reached when it works.
const PATIENCE: Duration = Duration::from_secs(10);

/// Both HTTP/1 transports.
const FAST_PATH: [bool; 2] = [true, false];

/// `proxy:` settings with the fast path on or off, plus `extra` (2 spaces).
fn proxy_block(fast: bool, extra: &str) -> String {
    format!("  http1FastPath: {fast}\n{extra}")
}

/// Routes `a` (hosts a.test) and `b` (hosts b.test) to their own backends.
fn two_hosts(a: SocketAddr, b: SocketAddr, proxy: &str) -> String {
    format!(
        "backends:\n  a: {{ endpoints: [\"{a}\"] }}\n  b: {{ endpoints: [\"{b}\"] }}\nroutes:\n  - {{ name: a, hosts: [a.test], primary: a }}\n  - {{ name: b, hosts: [b.test], primary: b }}\nproxy:\n{proxy}"
    )
}

/// The JSON body of a raw `/echo` answer.
fn echo_json(raw: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(raw);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_else(|| panic!("no head end: {text}"));
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// An echo backend (`v1`) behind a catch-all route, the fast path on or
/// off, `extra` more `proxy:` settings.
async fn one_backend(fast: bool, extra: &str) -> (RunningApp, EchoHandle) {
    let backend = echo_backend("v1", Duration::ZERO).await;
    let app = start(&one_route(backend.addr, "", &proxy_block(fast, extra))).await;
    (app, backend)
}

/// Echo backends `a` and `b` behind [`two_hosts`], the fast path on or off.
async fn two_backends(fast: bool) -> (RunningApp, EchoHandle, EchoHandle) {
    let (a, b) = (
        echo_backend("a", Duration::ZERO).await,
        echo_backend("b", Duration::ZERO).await,
    );
    let app = start(&two_hosts(a.addr, b.addr, &proxy_block(fast, ""))).await;
    (app, a, b)
}

fn served(b: &EchoHandle) -> u64 {
    b.requests.load(Ordering::Relaxed)
}

#[tokio::test]
async fn a_duplicate_host_is_400_and_reaches_no_backend() {
    for fast in FAST_PATH {
        let (app, a, b) = two_backends(fast).await;
        for hosts in [
            "Host: a.test\r\nHost: b.test",
            "Host: a.test\r\nhost: a.test",
        ] {
            let req = format!("GET /echo HTTP/1.1\r\n{hosts}\r\nConnection: close\r\n\r\n");
            let (raw, _) = raw_exchange(app.proxy_addr(), req.as_bytes(), PATIENCE).await;
            assert_eq!(
                statuses(&raw),
                vec![400],
                "fast path {fast}, {hosts:?}: {}",
                String::from_utf8_lossy(&raw)
            );
        }
        assert_eq!((served(&a), served(&b)), (0, 0), "fast path {fast}");
        assert_eq!(plain_get(app.proxy_addr(), "/").await, Some(404));
    }
}

#[tokio::test]
async fn an_absolute_form_target_replaces_host_for_routing_and_upstream() {
    for fast in FAST_PATH {
        let (app, a, _b) = two_backends(fast).await;
        let req = "GET http://b.test/echo HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n";
        let (raw, _) = raw_exchange(app.proxy_addr(), req.as_bytes(), PATIENCE).await;
        assert_eq!(
            statuses(&raw),
            vec![200],
            "{}",
            String::from_utf8_lossy(&raw)
        );
        let j = echo_json(&raw);
        assert_eq!(j["version"], "b", "fast path {fast}: routed by the target");
        assert_eq!(
            j["headers"]["host"],
            serde_json::json!(["b.test"]),
            "fast path {fast}"
        );
        assert_eq!(j["headers"]["x-forwarded-host"][0], "b.test");
        assert_eq!(served(&a), 0);
    }
}

#[tokio::test]
async fn over_http2_the_authority_wins_over_a_differing_host_header() {
    let (app, a, _b) = two_backends(true).await;
    let tcp = TcpStream::connect(app.proxy_addr()).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut send = send.ready().await.unwrap();
    let req = http::Request::get("http://b.test/echo")
        .header("host", "a.test")
        .body(())
        .unwrap();
    let (resp, _) = send.send_request(req, true).unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        bytes.extend_from_slice(&chunk.unwrap());
    }
    let j: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(j["version"], "b");
    assert_eq!(j["headers"]["host"], serde_json::json!(["b.test"]));
    assert_eq!(served(&a), 0);
}

#[tokio::test]
async fn headers_weir_depends_on_survive_being_listed_in_connection() {
    // The short list fits the fast path's own table; the long one does not
    // (the request goes to hyper either way when the fast path is off).
    for (fast, listed) in [
        (true, "close, host, x-forwarded-for"),
        (
            true,
            "close, host, content-length, x-forwarded-for, x-forwarded-proto, x-forwarded-host",
        ),
        (
            false,
            "close, host, content-length, x-forwarded-for, x-forwarded-proto, x-forwarded-host",
        ),
    ] {
        let (app, _backend) = one_backend(fast, "").await;
        let req = format!(
            "GET /echo HTTP/1.1\r\nHost: app.test\r\nX-Forwarded-For: 9.9.9.9\r\nConnection: {listed}\r\n\r\n"
        );
        let (raw, _) = raw_exchange(app.proxy_addr(), req.as_bytes(), PATIENCE).await;
        assert_eq!(
            statuses(&raw),
            vec![200],
            "{}",
            String::from_utf8_lossy(&raw)
        );
        let h = &echo_json(&raw)["headers"];
        assert_eq!(
            h["host"],
            serde_json::json!(["app.test"]),
            "fast path {fast}: {h}"
        );
        assert_eq!(h["x-forwarded-for"][0], "127.0.0.1", "fast path {fast}");
        assert_eq!(h["x-forwarded-proto"][0], "http", "fast path {fast}");
        assert_eq!(h["x-forwarded-host"][0], "app.test", "fast path {fast}");
        // A body framed by a Content-Length the client also listed.
        let req = format!(
            "POST /echo HTTP/1.1\r\nHost: app.test\r\nContent-Length: 5\r\nConnection: {listed}\r\n\r\nhello"
        );
        let (raw, _) = raw_exchange(app.proxy_addr(), req.as_bytes(), PATIENCE).await;
        assert_eq!(
            statuses(&raw),
            vec![200],
            "{}",
            String::from_utf8_lossy(&raw)
        );
        let j = echo_json(&raw);
        assert_eq!(j["bodyBytes"], 5);
        assert_eq!(
            j["headers"]["content-length"],
            serde_json::json!(["5"]),
            "fast path {fast}"
        );
    }
}

#[tokio::test]
async fn a_response_listing_content_length_in_connection_keeps_its_framing() {
    for fast in FAST_PATH {
        let up = scripted(|_, _| {
            Reply::Send(
                vec![b"HTTP/1.1 200 OK\r\nConnection: content-length\r\nContent-Length: 5\r\n\r\nhello".to_vec()],
                false,
            )
        })
        .await;
        let app = start(&one_route(up.addr, "", &proxy_block(fast, ""))).await;
        let mut c = Raw::to(app.proxy_addr()).await;
        // Two exchanges on one connection: the first answer must be framed
        // for the second to be read at all.
        for i in 0..2 {
            let r = c.get("/", "").await;
            assert_eq!(
                (r.status, r.body.as_slice()),
                (200, &b"hello"[..]),
                "fast path {fast}, #{i}"
            );
            let framed = header(&r.head, "content-length") == Some("5")
                || header(&r.head, "transfer-encoding") == Some("chunked");
            assert!(framed, "fast path {fast}: unframed answer {}", r.head);
        }
    }
}

/// A backend that answers every request with a 101 nobody asked for.
async fn switching_backend() -> proto_support::support::Scripted {
    scripted(|_, _| {
        Reply::Send(
            vec![b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: weird\r\n\r\n".to_vec()],
            true,
        )
    })
    .await
}

#[tokio::test]
async fn an_unsolicited_101_is_a_502_over_http1_and_http2() {
    for fast in FAST_PATH {
        let up = switching_backend().await;
        let app = start(&one_route(up.addr, "", &proxy_block(fast, ""))).await;
        let mut c = Raw::to(app.proxy_addr()).await;
        let r = c.get("/", "").await;
        assert_eq!(r.status, 502, "fast path {fast}: {}", r.head);
        assert_eq!(header(&r.head, "x-weir-error"), Some("upstream-failed"));

        let tcp = TcpStream::connect(app.proxy_addr()).await.unwrap();
        let mut s = h2::<_, Full<Bytes>>(tcp).await;
        let resp = s.send_request(get_req_h2("http", "app.test", "/")).await;
        let a = read_answer(resp.expect("an HTTP/2 answer, not a broken stream")).await;
        assert_eq!(a.status, 502);
        assert_eq!(a.headers["x-weir-error"], "upstream-failed");
    }
}

#[tokio::test]
async fn client_sent_weir_headers_are_stripped_on_every_path() {
    let forged =
        "X-Weir-Mirror: 1\r\nx-weir-attempt: 3\r\nX-WEIR-Anything: x\r\nX-Weirdo: kept\r\n";
    for fast in FAST_PATH {
        let (app, _backend) = one_backend(fast, "").await;
        let req =
            format!("GET /echo HTTP/1.1\r\nHost: app.test\r\n{forged}Connection: close\r\n\r\n");
        let (raw, _) = raw_exchange(app.proxy_addr(), req.as_bytes(), PATIENCE).await;
        let h = echo_json(&raw)["headers"].clone();
        let names: Vec<&String> = h.as_object().unwrap().keys().collect();
        assert!(
            !names.iter().any(|n| n.starts_with("x-weir-")),
            "fast path {fast}: {names:?}"
        );
        assert_eq!(h["x-weirdo"][0], "kept");

        let tcp = TcpStream::connect(app.proxy_addr()).await.unwrap();
        let mut s = h2::<_, Full<Bytes>>(tcp).await;
        let mut req = get_req_h2("http", "app.test", "/echo");
        req.headers_mut()
            .insert("x-weir-mirror", "1".parse().unwrap());
        let a = read_answer(s.send_request(req).await.unwrap()).await;
        assert!(
            a.json()["headers"].get("x-weir-mirror").is_none(),
            "{}",
            a.text()
        );
    }
}

/// A head of exactly `len` bytes (request line through the empty line).
fn head_of(len: usize) -> String {
    let start = "GET / HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\nX-Pad: ";
    let end = "\r\n\r\n";
    let pad = len - start.len() - end.len();
    format!("{start}{}{end}", "p".repeat(pad))
}

#[tokio::test]
async fn max_header_bytes_is_exact_over_http1() {
    // 8192 is under the fast path's own buffer, 61440 (the default) over it.
    for (max, extra) in [(8192, "  maxHeaderBytes: 8192\n"), (61440, "")] {
        for fast in FAST_PATH {
            let (app, backend) = one_backend(fast, extra).await;
            for (len, want) in [(max, 200), (max + 1, 431), (max + 2048, 431)] {
                let mut s = TcpStream::connect(app.proxy_addr()).await.unwrap();
                // The proxy may close before reading it all; its answer counts.
                let _ = s.write_all(head_of(len).as_bytes()).await;
                let (raw, _) = read_until_close(&mut s, PATIENCE).await;
                assert_eq!(
                    statuses(&raw),
                    vec![want],
                    "max {max}, fast path {fast}, head of {len} bytes"
                );
            }
            assert_eq!(served(&backend), 1, "max {max}, fast path {fast}");
        }
    }
}

#[tokio::test]
async fn max_header_bytes_is_exact_over_tls() {
    let ca = Ca::new();
    let dir = TempDir::new("heads-tls");
    let leaf = ca.leaf(&["app.test"]);
    dir.write("app.crt", &leaf.cert_pem);
    dir.write("app.key", &leaf.key_pem);
    let backend = echo_backend("v1", Duration::ZERO).await;
    let yaml = format!(
        "listeners:\n  - name: https\n    address: 127.0.0.1:0\n    tls: {{ certFile: app.crt, keyFile: app.key }}\n{}",
        one_route(backend.addr, "", "")
    );
    let app = start_in(&yaml, &dir.0).await;
    let cfg = ca.client_config(&[&rustls::version::TLS13], &[b"http/1.1"]);
    for (len, want) in [(61440, 200), (61441, 431)] {
        let mut tls = tls_connect(app.proxy_addr(), cfg.clone(), "app.test")
            .await
            .unwrap();
        let _ = tls.write_all(head_of(len).as_bytes()).await;
        let (raw, _) = read_until_close(&mut tls, PATIENCE).await;
        assert_eq!(statuses(&raw), vec![want], "head of {len} bytes");
    }
}

#[tokio::test]
async fn max_header_bytes_bounds_the_http2_header_list_exactly() {
    let backend = echo_backend("v1", Duration::ZERO).await;
    let max = 16384;
    let app = start(&one_route(backend.addr, "", "  maxHeaderBytes: 16384\n")).await;
    let tcp = TcpStream::connect(app.proxy_addr()).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    // RFC 9113 §6.5.2: each field counts name + value + 32 octets,
    // pseudo-header fields included.
    let pseudo = (":method".len() + 3 + 32)
        + (":scheme".len() + 4 + 32)
        + (":authority".len() + "app.test".len() + 32)
        + (":path".len() + 1 + 32);
    for (size, want) in [(max, 200), (max + 1, 431)] {
        let pad = size - pseudo - "x-pad".len() - 32;
        let req = http::Request::get("http://app.test/")
            .header("x-pad", "p".repeat(pad))
            .body(())
            .unwrap();
        let mut send = send.clone().ready().await.unwrap();
        let (resp, _) = send.send_request(req, true).unwrap();
        let status = resp.await.map(|r| r.status().as_u16());
        assert_eq!(status.ok(), Some(want), "header list of {size} bytes");
    }
    assert_eq!(served(&backend), 1);
}

/// Writes `bytes` in pieces, `gap` apart; stops early when the proxy closed.
async fn trickle(s: &mut TcpStream, bytes: &[u8], piece: usize, gap: Duration) {
    for p in bytes.chunks(piece) {
        if s.write_all(p).await.is_err() {
            return;
        }
        tokio::time::sleep(gap).await;
    }
}

#[tokio::test]
async fn the_header_read_timeout_is_one_bound_across_the_hand_off_to_hyper() {
    // With a 2 s bound, the head passes the fast path's 16 KiB buffer at
    // about 1 s (the connection goes to hyper) and is complete at about
    // 2.5 s. One bound closes the connection at 2 s, before it is complete;
    // a bound restarted at the hand-off would run to 3 s and serve it.
    for fast in FAST_PATH {
        let (app, backend) = one_backend(fast, "  headerReadTimeout: 2s\n").await;
        let mut s = TcpStream::connect(app.proxy_addr()).await.unwrap();
        let head = head_of(20 * 1024);
        let (first, rest) = head.as_bytes().split_at(17 * 1024);
        let (middle, last) = rest.split_at(rest.len() - 4);
        trickle(&mut s, first, 1024, Duration::from_millis(1000 / 17)).await;
        trickle(
            &mut s,
            middle,
            256,
            Duration::from_millis(1500 * 256 / middle.len() as u64),
        )
        .await;
        let _ = s.write_all(last).await;
        let (raw, closed) = read_until_close(&mut s, PATIENCE).await;
        assert!(closed, "fast path {fast}: still open");
        assert!(
            raw.is_empty(),
            "fast path {fast}: served after the header read timeout: {}",
            String::from_utf8_lossy(&raw)
        );
        assert_eq!(served(&backend), 0, "fast path {fast}");
    }
}

#[tokio::test]
async fn a_head_read_in_time_is_still_served_after_a_hand_off() {
    for fast in FAST_PATH {
        let (app, _backend) = one_backend(fast, "  headerReadTimeout: 5s\n").await;
        let mut c = Raw::to(app.proxy_addr()).await;
        let head = head_of(20 * 1024).replace("Connection: close\r\n", "");
        c.s.write_all(head.as_bytes()).await.unwrap();
        let r = read_response(&mut c.s, &mut c.buf, false).await;
        assert_eq!(r.status, 200, "fast path {fast}");
        // The next request on the connection gets the whole bound again.
        assert_eq!(c.get("/", "").await.status, 200);
    }
}
