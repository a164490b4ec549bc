//! End-to-end tests of the data plane through real sockets.

use crate::support;

use bytes::Bytes;
use http_body_util::Full;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn weighted_split_of_5000_requests_at_20_percent() {
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let app = proxy(&two_slot_config(
        blue.addr,
        green.addr,
        "    canaryWeight: 20\n",
    ))
    .await;
    let c = client();
    const N: u64 = 5000;
    let mut canary = 0u64;
    for _ in 0..N {
        let r = get_once(&c, app.proxy_addr(), "/", &[]).await;
        assert_eq!(r.status, 200);
        match r.version() {
            Some("v2") => canary += 1,
            Some("v1") => {}
            other => panic!("unexpected version {other:?}"),
        }
    }
    let (lo, hi) = binomial_bounds(N, 0.2, Z_9999);
    assert!(
        (lo..=hi).contains(&canary),
        "{canary} of {N} to canary; 99.99% bound {lo}..={hi}"
    );
}

#[tokio::test]
async fn each_ab_matcher_sends_matches_to_canary_and_the_rest_to_primary() {
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let rules = "    match:\n      - headers: { x-canary: { exact: insider } }\n      - cookies: { canary: { exact: always } }\n      - queryParams: { beta: { exact: \"yes\" } }\n      - method: { exact: DELETE }\n      - uri: { prefix: /v2/ }\n      - headers: { cookie: { regex: \"^(.*?;)?(flagger=always)(;.*)?$\" } }\n";
    let app = proxy(&two_slot_config(blue.addr, green.addr, rules)).await;
    let c = client();
    let a = app.proxy_addr();
    let cases: Vec<(http::Request<Full<Bytes>>, &str)> = vec![
        (get(a, "/", &[("x-canary", "insider")]), "v2"),
        (get(a, "/", &[("x-canary", "outsider")]), "v1"),
        (get(a, "/", &[("cookie", "a=1; canary=always")]), "v2"),
        (get(a, "/", &[("cookie", "canary=never")]), "v1"),
        (get(a, "/?beta=yes", &[]), "v2"),
        (get(a, "/?beta=no", &[]), "v1"),
        (
            http::Request::delete(format!("http://{a}/"))
                .body(Full::new(Bytes::new()))
                .unwrap(),
            "v2",
        ),
        (
            http::Request::put(format!("http://{a}/"))
                .body(Full::new(Bytes::new()))
                .unwrap(),
            "v1",
        ),
        (get(a, "/v2/items", &[]), "v2"),
        (get(a, "/v1/items", &[]), "v1"),
        (get(a, "/", &[("cookie", "flagger=always; x=1")]), "v2"),
        (get(a, "/", &[("cookie", "flagger=sometimes")]), "v1"),
        (get(a, "/", &[]), "v1"),
    ];
    for (req, want) in cases {
        let desc = format!("{} {} {:?}", req.method(), req.uri(), req.headers());
        let r = send(&c, req).await;
        assert_eq!(r.version(), Some(want), "{desc}");
    }
}

#[tokio::test]
async fn source_ip_matcher_uses_the_peer_address() {
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let c = client();
    for (cidr, want) in [("127.0.0.0/8", "v2"), ("10.0.0.0/8", "v1")] {
        let extra = format!("    match:\n      - sourceIp: [\"{cidr}\"]\n");
        let app = proxy(&two_slot_config(blue.addr, green.addr, &extra)).await;
        let r = get_once(&c, app.proxy_addr(), "/", &[]).await;
        assert_eq!(r.version(), Some(want), "sourceIp {cidr}");
    }
}

#[tokio::test]
async fn backend_sees_forwarded_headers_and_no_hop_by_hop() {
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let extra = "    headers:\n      request: { set: { x-env: prod }, add: { x-added: one }, remove: [x-drop] }\n      response: { set: { x-served-by: weir }, remove: [x-weir-echo-requests] }\n";
    let app = proxy(&two_slot_config(blue.addr, green.addr, extra)).await;
    let c = client();
    let r = get_once(
        &c,
        app.proxy_addr(),
        "/echo",
        &[
            ("host", "shop.example.com"),
            ("connection", "x-private"),
            ("x-private", "secret"),
            ("keep-alive", "timeout=5"),
            ("te", "gzip"),
            ("proxy-connection", "keep-alive"),
            ("x-forwarded-for", "203.0.113.9"),
            ("x-drop", "1"),
            ("x-env", "dev"),
        ],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-served-by"), Some("weir"));
    assert!(
        r.header("x-weir-echo-requests").is_none(),
        "response edit removes it"
    );
    let seen = r.json();
    let h = &seen["headers"];
    for gone in [
        "connection",
        "x-private",
        "keep-alive",
        "te",
        "proxy-connection",
        "x-drop",
    ] {
        assert!(
            h.get(gone).is_none(),
            "backend saw hop-by-hop/removed header {gone}: {h}"
        );
    }
    assert_eq!(h["host"][0], "shop.example.com", "client Host kept");
    // The test client is no trusted proxy: what it claims is replaced.
    assert_eq!(h["x-forwarded-for"][0], "127.0.0.1");
    assert_eq!(h["x-forwarded-proto"][0], "http");
    assert_eq!(h["x-forwarded-host"][0], "shop.example.com");
    assert_eq!(h["x-env"][0], "prod");
    assert_eq!(h["x-added"][0], "one");
}

/// A backend that answers with hop-by-hop headers of its own.
async fn raw_backend(response: &'static str) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s.write_all(response.as_bytes()).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn hop_by_hop_headers_from_the_backend_are_stripped() {
    let up = raw_backend("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive, X-Internal\r\nX-Internal: secret\r\nKeep-Alive: timeout=5\r\nX-Public: yes\r\n\r\nok").await;
    let app = proxy(&one_route_config(up)).await;
    let r = get_once(&client(), app.proxy_addr(), "/", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "ok");
    assert_eq!(r.header("x-public"), Some("yes"));
    assert!(r.header("x-internal").is_none());
    assert!(r.header("keep-alive").is_none());
}

#[tokio::test]
async fn proxy_made_errors_have_the_right_status_and_the_proxy_stays_up() {
    let live = echo("v1").await;
    // A free port nobody listens on: connect refused → 502.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let yaml = format!(
        "backends:\n  live: {{ endpoints: [\"{}\"] }}\n  dead: {{ endpoints: [\"{dead}\"] }}\n  down: {{ endpoints: [\"{}\"] }}\nroutes:\n  - {{ name: refused, hosts: [refused.test], primary: dead }}\n  - {{ name: slow, hosts: [slow.test], primary: live, timeout: 200ms }}\n  - {{ name: down, hosts: [down.test], primary: down }}\n  - {{ name: ok, hosts: [ok.test], primary: live }}\n",
        live.addr, live.addr
    );
    let app = proxy(&yaml).await;
    // Nothing ready in `down`: the health checker would do this.
    for ep in app.store.backend("down").unwrap().rotation.load().iter() {
        ep.ready.store(false, std::sync::atomic::Ordering::Relaxed);
    }
    let c = client();
    let a = app.proxy_addr();
    let cases = [
        ("refused.test", "/", 502, "upstream-failed"),
        ("slow.test", "/sleep?ms=3000", 504, "upstream-timeout"),
        ("down.test", "/", 503, "no-healthy-endpoint"),
        ("nowhere.test", "/", 404, "no-route"),
    ];
    for (host, path, status, code) in cases {
        let r = get_once(&c, a, path, &[("host", host)]).await;
        assert_eq!(r.status, status, "{host}{path}: {}", r.text());
        assert_eq!(r.header("x-weir-error"), Some(code));
    }
    let r = get_once(&c, a, "/", &[("host", "ok.test")]).await;
    assert_eq!(
        (r.status, r.version()),
        (200, Some("v1")),
        "still serving after errors"
    );
}

#[tokio::test]
async fn failed_requests_count_against_their_side() {
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let blue = echo("v1").await;
    let app = proxy(&two_slot_config(blue.addr, dead, "    canaryWeight: 100\n")).await;
    let c = client();
    for _ in 0..20 {
        assert_eq!(get_once(&c, app.proxy_addr(), "/", &[]).await.status, 502);
    }
    let stats = app.store.route_stats("app").unwrap();
    let now = app.shared.now_sec(std::time::Instant::now());
    let s = stats.snapshot(weir::stats::Role::Canary, now, 60).summary();
    assert_eq!((s.requests, s.failures), (20, 20));
    assert_eq!(s.success_rate, Some(0.0));
}

#[tokio::test]
async fn requests_without_host_are_rejected() {
    let blue = echo("v1").await;
    let app = proxy(&one_route_config(blue.addr)).await;
    let mut s = tokio::net::TcpStream::connect(app.proxy_addr())
        .await
        .unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.starts_with("HTTP/1.0 400") || text.starts_with("HTTP/1.1 400"),
        "{text}"
    );
}

/// Appends what the next read brings to `buf`; `what` names the wait in failures.
async fn read_more(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>, what: &str) {
    let mut chunk = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk))
        .await
        .unwrap_or_else(|_| panic!("no {what} in time"))
        .unwrap();
    assert!(
        n > 0,
        "closed before the {what}: {:?}",
        String::from_utf8_lossy(buf)
    );
    buf.extend_from_slice(&chunk[..n]);
}

/// Reads one HTTP/1.1 response with a Content-Length body; returns (head, body).
async fn read_response(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> (String, String) {
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        read_more(s, buf, "response head").await;
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .expect("content-length");
    while buf.len() < end + 4 + len {
        read_more(s, buf, "whole body").await;
    }
    let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).to_string();
    buf.drain(..end + 4 + len);
    (head, body)
}

/// An idle keep-alive connection gives its buffers back (the hyper patch in
/// vendor/hyper); everything a connection does between and across idle periods must
/// work as before: a head arriving in pieces, a body arriving in pieces, an idle
/// pause, pipelined requests, a big head after small ones.
#[tokio::test]
async fn keep_alive_survives_idle_pauses_split_heads_split_bodies_and_pipelining() {
    let blue = echo("v1").await;
    let app = proxy(&one_route_config(blue.addr)).await;
    let mut s = tokio::net::TcpStream::connect(app.proxy_addr())
        .await
        .unwrap();
    s.set_nodelay(true).unwrap();
    let pause = || tokio::time::sleep(Duration::from_millis(60));
    let mut buf = Vec::new();

    // 1. A head in three pieces: the read buffer holds a partial head while
    //    the connection waits.
    for piece in [
        &b"GET /echo?n=1 HT"[..],
        b"TP/1.1\r\nHost: a.test\r\nX-Piece",
        b": 3\r\n\r\n",
    ] {
        s.write_all(piece).await.unwrap();
        pause().await;
    }
    let (head, body) = read_response(&mut s, &mut buf).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("\"n=1\""), "{body}");

    // 2. Idle, then a body in two pieces.
    pause().await;
    s.write_all(b"POST /echo?n=2 HTTP/1.1\r\nHost: a.test\r\nContent-Length: 10\r\n\r\n01234")
        .await
        .unwrap();
    pause().await;
    s.write_all(b"56789").await.unwrap();
    let (head, body) = read_response(&mut s, &mut buf).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("\"bodyBytes\":10"), "{body}");

    // 3. Idle, then two pipelined requests in one write: answered in order.
    pause().await;
    s.write_all(
        b"GET /echo?n=3 HTTP/1.1\r\nHost: a.test\r\n\r\nGET /echo?n=4 HTTP/1.1\r\nHost: a.test\r\n\r\n",
    )
    .await
    .unwrap();
    for n in ["n=3", "n=4"] {
        let (head, body) = read_response(&mut s, &mut buf).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(body.contains(&format!("\"{n}\"")), "{n}: {body}");
    }

    // 4. Idle, then a head bigger than the first read buffer would have been.
    pause().await;
    let big = "x".repeat(12_000);
    s.write_all(
        format!("GET /echo?n=5 HTTP/1.1\r\nHost: a.test\r\nX-Big: {big}\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let (head, body) = read_response(&mut s, &mut buf).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains(&big), "the big header reached the backend");
}

/// An answer weir makes because of an upstream never names the upstream: no
/// address, port or backend name in the body, on either transport (the fast path
/// and hyper's), for a refused connect (502), a silent backend (504) and a backend
/// with no endpoint left (503). The cause goes to the log instead.
#[tokio::test]
async fn a_client_never_reads_an_internal_address() {
    let (_held, refused) = refusing_addr();
    let silent = scripted(|_, _| Reply::Stall).await;
    let silent_addr = silent.addr;
    let yaml = |fast: bool| {
        format!(
            "proxy:\n  http1FastPath: {fast}\nbackends:\n  secret-db:\n    endpoints: [\"{refused}\"]\n  secret-slow:\n    endpoints: [\"{silent_addr}\"]\n  secret-none:\n    endpoints: [\"{refused}\"]\n    healthCheck: {{ path: /healthz, interval: 100ms, unhealthyThreshold: 1 }}\nroutes:\n  - {{ name: dead, hosts: [dead.test], primary: secret-db }}\n  - {{ name: slow, hosts: [slow.test], primary: secret-slow, timeout: 300ms }}\n  - {{ name: none, hosts: [none.test], primary: secret-none }}\n"
        )
    };
    for fast in [true, false] {
        let app = proxy(&yaml(fast)).await;
        let c = client();
        // The health check finds the only endpoint of secret-none down.
        let down = eventually(Duration::from_secs(10), || async {
            get_once(&c, app.proxy_addr(), "/", &[("host", "none.test")])
                .await
                .status
                == 503
        })
        .await;
        assert!(down, "secret-none's endpoint never went down");
        let mut seen = Vec::new();
        for (host, status, code) in [
            ("dead.test", 502, "upstream-failed"),
            ("slow.test", 504, "upstream-timeout"),
            ("none.test", 503, "no-healthy-endpoint"),
        ] {
            let r = get_once(&c, app.proxy_addr(), "/", &[("host", host)]).await;
            let body = r.text();
            assert_eq!(
                (r.status, r.header("x-weir-error")),
                (status, Some(code)),
                "fast path {fast}, {host}: {body}"
            );
            for secret in [
                "127.0.0.1".to_string(),
                refused.port().to_string(),
                silent_addr.port().to_string(),
                "secret".to_string(),
            ] {
                assert!(
                    !body.contains(&secret),
                    "fast path {fast}, {host}: the body names {secret}: {body}"
                );
            }
            seen.push(body);
        }
        assert_eq!(
            seen,
            [
                "upstream-failed: the upstream could not be reached\n",
                "upstream-timeout: no response from the upstream within 300ms\n",
                "no-healthy-endpoint: no ready endpoint to send the request to\n",
            ],
            "fast path {fast}"
        );
        app.shutdown().await;
    }
}

/// `listeners[].trustedProxies`, on both transports: from a peer outside it the
/// client-address headers a client sent are replaced by the peer's address
/// (X-Forwarded-For, X-Real-IP, Forwarded, True-Client-IP); from a trusted proxy
/// they pass and X-Forwarded-For is extended.
#[tokio::test]
async fn only_a_trusted_proxy_chooses_the_client_address() {
    let up = echo("v1").await;
    let claims = [
        ("host", "shop.test"),
        ("x-forwarded-for", "203.0.113.9"),
        ("x-real-ip", "203.0.113.9"),
        ("forwarded", "for=203.0.113.9;proto=https"),
        ("true-client-ip", "203.0.113.9"),
    ];
    for fast in [true, false] {
        for trusted in [false, true] {
            let yaml = format!(
                "listeners:\n  - name: http\n    address: 127.0.0.1:0\n    trustedProxies: [{}]\nproxy: {{ http1FastPath: {fast} }}\n{}",
                if trusted { "\"127.0.0.0/8\"" } else { "\"10.0.0.0/8\"" },
                one_route_config(up.addr)
            );
            let app = proxy(&yaml).await;
            let r = get_once(&client(), app.proxy_addr(), "/echo", &claims).await;
            assert_eq!(r.status, 200, "fast {fast} trusted {trusted}");
            let h = &r.json()["headers"];
            let one = |n: &str| h[n][0].as_str().unwrap_or("").to_string();
            let want = if trusted {
                [
                    "203.0.113.9, 127.0.0.1",
                    "203.0.113.9",
                    "for=203.0.113.9;proto=https",
                    "203.0.113.9",
                ]
            } else {
                ["127.0.0.1", "127.0.0.1", "for=127.0.0.1", "127.0.0.1"]
            };
            assert_eq!(
                [
                    one("x-forwarded-for"),
                    one("x-real-ip"),
                    one("forwarded"),
                    one("true-client-ip")
                ],
                want,
                "fast {fast} trusted {trusted}: {h}"
            );
            app.shutdown().await;
        }
    }
    let bad = weir::config::parse_yaml(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\n    trustedProxies: [\"ten\"]\nroutes: []\n",
        "t.yaml",
        std::path::Path::new("."),
    )
    .expect_err("refused")
    .to_string();
    assert!(bad.contains("listeners[0].trustedProxies[0]"), "{bad}");
}
