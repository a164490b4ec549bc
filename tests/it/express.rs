//! The HTTP/1 fast path (`proxy::express`) end to end, against scripted raw
//! backends and a raw client, so that every byte both ways is visible:
//! which requests it serves and which it hands to hyper mid-connection,
//! upstream connection reuse, retry of a pooled connection the upstream
//! closed, every response framing, interim responses, closing.

use crate::support;

use std::sync::atomic::Ordering;
use std::time::Duration;
use support::*;
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn simple_requests_take_the_fast_path_and_others_hand_the_connection_to_hyper() {
    let up = scripted(|_, head| ok(head.split(' ').nth(1).unwrap())).await;
    let app = proxy(&one_route_config(up.addr)).await;
    let mut c = Raw::to(app.proxy_addr()).await;

    // A GET: forwarded as received (header case and order kept, which hyper
    // would not), hop-by-hop headers gone, X-Forwarded-* added.
    let r = c
        .get("/a?b=1", "X-Custom-Case: Yes\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\nX-Forwarded-For: 9.9.9.9\r\n")
        .await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"/a?b=1"[..]));
    let seen = up.heads.lock().unwrap()[0].clone();
    assert!(
        seen.starts_with("GET /a?b=1 HTTP/1.1\r\nHost: shop.test\r\nX-Custom-Case: Yes\r\n"),
        "{seen}"
    );
    assert!(
        !seen.to_ascii_lowercase().contains("x-drop") && !seen.contains("Connection"),
        "{seen}"
    );
    assert_eq!(header(&seen, "x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(header(&seen, "x-forwarded-proto"), Some("http"));
    assert_eq!(header(&seen, "x-forwarded-host"), Some("shop.test"));
    assert!(header(&r.head, "date").is_some());

    // A request with a body: hyper serves it, on the same connection...
    let r = c
        .send("POST /up HTTP/1.1\r\nHost: shop.test\r\nX-Custom-Case: Yes\r\nContent-Length: 5\r\n\r\nhello", false)
        .await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"/up"[..]));
    // ...and everything after it (hyper writes header names in lower case).
    let r = c.get("/after", "X-Custom-Case: Yes\r\n").await;
    assert_eq!(r.status, 200);
    let heads = up.heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 3);
    assert!(
        heads[1].starts_with("POST /up HTTP/1.1\r\n") && heads[1].contains("x-custom-case: Yes"),
        "{}",
        heads[1]
    );
    assert!(heads[2].contains("x-custom-case: Yes"), "{}", heads[2]);

    // Pipelined simple requests on a fresh connection: answered in order.
    let mut p = Raw::to(app.proxy_addr()).await;
    let two =
        "GET /1 HTTP/1.1\r\nHost: shop.test\r\n\r\nGET /2 HTTP/1.1\r\nHost: shop.test\r\n\r\n";
    p.s.write_all(two.as_bytes()).await.unwrap();
    for want in ["/1", "/2"] {
        let r = read_response(&mut p.s, &mut p.buf, false).await;
        assert_eq!((r.status, r.body.as_slice()), (200, want.as_bytes()));
    }
}

#[tokio::test]
async fn the_fast_path_can_be_turned_off() {
    let up = scripted(|_, _| ok("x")).await;
    let app = proxy(&format!(
        "proxy: {{ http1FastPath: false }}\n{}",
        one_route_config(up.addr)
    ))
    .await;
    let mut c = Raw::to(app.proxy_addr()).await;
    assert_eq!(c.get("/", "X-Custom-Case: Yes\r\n").await.status, 200);
    let seen = up.heads.lock().unwrap()[0].clone();
    assert!(
        seen.contains("x-custom-case: Yes"),
        "hyper's lower case expected: {seen}"
    );
}

#[tokio::test]
async fn upstream_connections_are_pooled_and_reaped() {
    let up = scripted(|n, _| ok(&n.to_string())).await;
    let app = proxy(&format!(
        "proxy: {{ upstreamIdleTimeout: 400ms }}\n{}",
        one_route_config(up.addr)
    ))
    .await;
    let mut a = Raw::to(app.proxy_addr()).await;
    let mut b = Raw::to(app.proxy_addr()).await;
    for i in 0..20 {
        assert_eq!(a.get("/", "").await.status, 200);
        let r = b.get("/", "").await;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.body,
            (2 * i + 1).to_string().as_bytes(),
            "one upstream connection, used in turn"
        );
    }
    assert_eq!(
        up.conns.load(Ordering::SeqCst),
        1,
        "sequential requests share one upstream connection"
    );
    // Idle past upstreamIdleTimeout: the pool closes it.
    assert!(
        eventually(Duration::from_secs(5), || async {
            up.closed_by_peer.load(Ordering::SeqCst) == 1
        })
        .await,
        "the idle upstream connection was not closed"
    );
    assert_eq!(a.get("/", "").await.status, 200);
    assert_eq!(up.conns.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_pooled_connection_closed_by_the_upstream_is_retried_for_idempotent_methods_only() {
    // Every connection answers its first request and hangs up on the second
    // one: the race of an upstream keep-alive timeout, made certain.
    let up = scripted(|n, _| if n == 0 { ok("fresh") } else { Reply::Hangup }).await;
    let app = proxy(&one_route_config(up.addr)).await;
    let mut c = Raw::to(app.proxy_addr()).await;
    for _ in 0..5 {
        let r = c.get("/", "").await;
        assert_eq!((r.status, r.body.as_slice()), (200, &b"fresh"[..]));
    }
    assert_eq!(up.conns.load(Ordering::SeqCst), 5);
    // POST is not idempotent: the upstream may have acted on it; 502.
    let r = c
        .send(
            "POST / HTTP/1.1\r\nHost: shop.test\r\nContent-Length: 0\r\n\r\n",
            false,
        )
        .await;
    assert_eq!(r.status, 502);
    assert_eq!(header(&r.head, "x-weir-error"), Some("upstream-failed"));
}

#[tokio::test]
async fn every_response_framing_is_forwarded_whole() {
    let up = scripted(|_, head| {
        let path = head.split(' ').nth(1).unwrap().to_string();
        let pieces: Vec<&[u8]> = match path.as_str() {
            "/chunked" => vec![
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
                b"lo\r\n",
                b"6;ext=1\r\n world\r\n0\r\nx-trailer: 1\r\n",
                b"\r\n",
            ],
            "/length" => vec![
                b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhel",
                b"lo world",
            ],
            "/head" => vec![b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"],
            "/early" => vec![
                b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n",
                b"HTTP/1.1 204 No Content\r\n\r\n",
            ],
            "/close" => {
                return Reply::Send(
                    vec![b"HTTP/1.1 200 OK\r\n\r\nhello".to_vec(), b" world".to_vec()],
                    true,
                )
            }
            "/bad" => vec![b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"],
            _ => vec![b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"],
        };
        Reply::Send(pieces.into_iter().map(<[u8]>::to_vec).collect(), false)
    })
    .await;
    let app = proxy(&one_route_config(up.addr)).await;
    let mut c = Raw::to(app.proxy_addr()).await;
    let r = c.get("/chunked", "").await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello world"[..]));
    let r = c.get("/length", "").await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello world"[..]));
    let r = c
        .send("HEAD /head HTTP/1.1\r\nHost: shop.test\r\n\r\n", true)
        .await;
    assert_eq!(
        (r.status, header(&r.head, "content-length")),
        (200, Some("100"))
    );
    let r = c.get("/early", "").await;
    assert_eq!(r.status, 204, "the interim 103 is not forwarded");
    assert_eq!(
        up.conns.load(Ordering::SeqCst),
        1,
        "all of the above on one upstream connection"
    );
    // Close-delimited: re-framed as chunked, the client connection stays.
    let r = c.get("/close", "").await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello world"[..]));
    assert_eq!(header(&r.head, "transfer-encoding"), Some("chunked"));
    let r = c.get("/bad", "").await;
    assert_eq!(r.status, 502, "conflicting Content-Length values");
    assert_eq!(c.get("/length", "").await.body, b"hello world");
    assert_eq!(
        up.conns.load(Ordering::SeqCst),
        3,
        "neither the closed nor the broken one was reused"
    );
}

#[tokio::test]
async fn a_client_asking_to_close_gets_connection_close_and_a_closed_connection() {
    let up = scripted(|_, _| ok("bye")).await;
    let app = proxy(&one_route_config(up.addr)).await;
    let mut c = Raw::to(app.proxy_addr()).await;
    let r = c.get("/", "Connection: close\r\n").await;
    assert_eq!(
        (r.status, header(&r.head, "connection")),
        (200, Some("close"))
    );
    assert!(c.closed().await);
    // The same for an answer weir makes itself.
    let app2 = proxy("backends:\n  b: { endpoints: [\"127.0.0.1:1\"] }\nroutes:\n  - { name: r, hosts: [other.test], primary: b }\n").await;
    let mut c = Raw::to(app2.proxy_addr()).await;
    let r = c.get("/", "Connection: close\r\n").await;
    assert_eq!(
        (r.status, header(&r.head, "x-weir-error")),
        (404, Some("no-route"))
    );
    assert_eq!(header(&r.head, "connection"), Some("close"));
    assert!(c.closed().await);
}

#[tokio::test]
async fn bytes_that_cannot_be_a_request_are_answered_at_once() {
    let up = scripted(|_, _| ok("x")).await;
    let app = proxy(&one_route_config(up.addr)).await;
    // A TLS ClientHello's first bytes on the clear-text port: no line end
    // will come, and hyper's 400 must not wait for the header read timeout.
    let mut c = Raw::to(app.proxy_addr()).await;
    c.s.write_all(&[
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ])
    .await
    .unwrap();
    let r = read_response(&mut c.s, &mut c.buf, false).await;
    assert_eq!(r.status, 400);
    assert!(up.heads.lock().unwrap().is_empty());
}
