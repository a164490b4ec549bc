//! The fast path's pure parts: chunked framing, which requests it serves,
//! and the heads it writes both ways.

use super::chunked::{ChunkedScanner, Scan};
use super::head::{self, Framing};
use crate::config::ProxySettings;

/// Feeds `body` split at every position (and byte by byte): the end is
/// found at the same absolute offset whatever the split.
fn end_of(body: &[u8]) -> Option<usize> {
    let mut whole = ChunkedScanner::default();
    let want = match whole.feed(body) {
        Scan::Done(n) => Some(n),
        Scan::More => None,
        Scan::Invalid => return None,
    };
    for cut in 0..=body.len() {
        let mut s = ChunkedScanner::default();
        let got = match s.feed(&body[..cut]) {
            Scan::Done(n) => Some(n),
            Scan::Invalid => panic!("split at {cut} made it invalid"),
            Scan::More => match s.feed(&body[cut..]) {
                Scan::Done(n) => Some(cut + n),
                Scan::More => None,
                Scan::Invalid => panic!("split at {cut} made it invalid"),
            },
        };
        assert_eq!(
            got,
            want,
            "split at {cut} of {:?}",
            String::from_utf8_lossy(body)
        );
    }
    let mut s = ChunkedScanner::default();
    let mut bytewise = None;
    for (i, b) in body.iter().enumerate() {
        match s.feed(std::slice::from_ref(b)) {
            Scan::Done(1) => {
                bytewise = Some(i + 1);
                break;
            }
            Scan::More => {}
            other => panic!("byte {i}: {other:?}"),
        }
    }
    assert_eq!(bytewise, want);
    want
}

#[test]
fn chunked_end_is_found_wherever_the_body_is_split() {
    let cases: &[(&[u8], Option<usize>)] = &[
        (b"0\r\n\r\n", Some(5)),
        (b"5\r\nhello\r\n0\r\n\r\n", Some(15)),
        (b"5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1", Some(15)),
        (b"A\r\n0123456789\r\n0\r\n\r\n", Some(20)),
        (b"a;name=value\r\n0123456789\r\n000\r\n\r\n", Some(33)),
        (
            b"3 ; ext\r\nabc\r\n0\r\nx-trailer: 1\r\ngrpc-status: 0\r\n\r\n",
            Some(49),
        ),
        (b"5\r\nhel", None),
        (b"5\r\nhello\r\n0\r\nx-t: 1\r\n", None),
    ];
    for (body, want) in cases {
        assert_eq!(end_of(body), *want, "{:?}", String::from_utf8_lossy(body));
    }
}

#[test]
fn malformed_chunked_bodies_are_refused() {
    for bad in [
        &b"\r\n"[..],
        b"x\r\n",
        b"5\nhello\r\n",
        b"5\r\nhelloX\r\n",
        b"5\r\nhello\rX",
        b"11112222333344445\r\n",
        b"0\r\n\n",
        b"0\r\nx-t: 1\n\r\n",
        b"5;ext\n",
    ] {
        let mut s = ChunkedScanner::default();
        assert_eq!(
            s.feed(bad),
            Scan::Invalid,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    // A size of 16 hex digits is still a size (then the data never comes).
    let mut s = ChunkedScanner::default();
    assert_eq!(s.feed(b"ffffffffffffffff\r\nab"), Scan::More);
}

#[test]
fn head_end_finds_the_empty_line() {
    assert_eq!(
        head::head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
        Some(27)
    );
    assert_eq!(
        head::head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET"),
        Some(27)
    );
    assert_eq!(head::head_end(b"GET / HTTP/1.1\nHost: a\n\n"), Some(24));
    assert_eq!(head::head_end(b"GET / HTTP/1.1\r\nHost: a\r\n"), None);
    assert_eq!(head::head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r"), None);
    assert_eq!(head::head_end(b""), None);
}

fn parse_req<'b>(raw: &'b [u8], hs: &'b mut [httparse::Header<'b>]) -> httparse::Request<'b, 'b> {
    let mut r = httparse::Request::new(hs);
    assert!(
        r.parse(raw).unwrap().is_complete(),
        "{:?}",
        String::from_utf8_lossy(raw)
    );
    r
}

#[test]
fn only_simple_requests_take_the_fast_path() {
    let s = ProxySettings::default();
    let served = |raw: &[u8]| {
        let mut hs = [httparse::EMPTY_HEADER; 32];
        let r = parse_req(raw, &mut hs);
        head::analyze_request(&r, &s).is_some()
    };
    assert!(served(b"GET /a?b=1 HTTP/1.1\r\nHost: shop\r\n\r\n"));
    assert!(served(
        b"DELETE / HTTP/1.1\r\nHost: shop\r\nContent-Length: 0\r\n\r\n"
    ));
    assert!(served(
        b"GET / HTTP/1.1\r\nHost: shop\r\nConnection: keep-alive, X-A\r\n\r\n"
    ));
    for raw in [
        &b"GET / HTTP/1.0\r\nHost: shop\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: shop\r\nContent-Length: 5\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: shop\r\nContent-Length: 00\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: shop\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: shop\r\nConnection: Upgrade\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: shop\r\nExpect: 100-continue\r\n\r\n",
        b"CONNECT shop:443 HTTP/1.1\r\nHost: shop\r\n\r\n",
        b"GET http://shop/ HTTP/1.1\r\nHost: shop\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: shop\r\n\r\n",
        b"GET /a#frag HTTP/1.1\r\nHost: shop\r\n\r\n",
        b"GET /a<b HTTP/1.1\r\nHost: shop\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: sh\x80op\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: shop\r\nConnection: a, b, c, d, e\r\n\r\n",
    ] {
        assert!(
            !served(raw),
            "{:?} must go to hyper",
            String::from_utf8_lossy(raw)
        );
    }
    // Over the limits: hyper answers 414 / 431.
    let long = format!(
        "GET /{} HTTP/1.1\r\nHost: shop\r\n\r\n",
        "a".repeat(s.max_uri_bytes)
    );
    assert!(!served(long.as_bytes()));
    let few = ProxySettings {
        max_headers: 2,
        ..ProxySettings::default()
    };
    let mut hs = [httparse::EMPTY_HEADER; 8];
    let r = parse_req(
        b"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n",
        &mut hs,
    );
    assert!(head::analyze_request(&r, &few).is_none());
}

fn upstream_head(raw: &[u8]) -> String {
    upstream_head_from(raw, true)
}

/// The upstream head of `raw` from peer 10.1.2.3, a trusted proxy or not.
fn upstream_head_from(raw: &[u8], trusted: bool) -> String {
    let s = ProxySettings::default();
    let mut hs = [httparse::EMPTY_HEADER; 32];
    let r = parse_req(raw, &mut hs);
    let fast = head::analyze_request(&r, &s).expect("served");
    let mut out = Vec::new();
    head::write_upstream_head(&mut out, &fast, r.headers, "10.1.2.3", trusted);
    String::from_utf8(out).unwrap()
}

#[test]
fn an_untrusted_peer_cannot_choose_the_client_address() {
    let raw = b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\n\
                Forwarded: for=6.6.6.6;proto=https\r\nForwarded: for=7.7.7.7\r\nTrue-Client-IP: 6.6.6.6\r\n\r\n";
    let got = upstream_head_from(raw, false);
    assert!(
        !got.contains("6.6.6.6") && !got.contains("7.7.7.7"),
        "{got}"
    );
    assert!(got.contains("\r\nX-Real-IP: 10.1.2.3\r\n"), "{got}");
    assert!(got.contains("\r\nForwarded: for=10.1.2.3\r\n"), "{got}");
    assert_eq!(got.matches("Forwarded: ").count(), 1, "{got}");
    assert!(got.contains("\r\nTrue-Client-IP: 10.1.2.3\r\n"), "{got}");
    assert!(got.contains("\r\nx-forwarded-for: 10.1.2.3\r\n"), "{got}");
    // A trusted proxy's are passed on, X-Forwarded-For extended.
    let got = upstream_head_from(raw, true);
    assert!(got.contains("\r\nX-Real-IP: 6.6.6.6\r\n"), "{got}");
    assert!(got.contains("\r\nForwarded: for=7.7.7.7\r\n"), "{got}");
    assert!(
        got.contains("\r\nx-forwarded-for: 6.6.6.6, 10.1.2.3\r\n"),
        "{got}"
    );
    assert_eq!(
        crate::proxy::headers::client_address_value(0, "::1"),
        "for=\"[::1]\""
    );
}

#[test]
fn the_upstream_head_is_the_general_paths() {
    let got = upstream_head(
        b"GET /p?q=1 HTTP/1.1\r\nHost: Shop.Test:8080\r\nX-Case: Kept\r\nConnection: keep-alive, X-Secret\r\n\
          X-Secret: s\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Connection: x\r\nTrailer: t\r\n\
          X-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\nX-Forwarded-Proto: https\r\n\
          X-Forwarded-Host: evil\r\nAccept: a\r\nAccept: b\r\n\r\n",
    );
    assert_eq!(
        got,
        "GET /p?q=1 HTTP/1.1\r\nHost: Shop.Test:8080\r\nX-Case: Kept\r\nAccept: a\r\nAccept: b\r\n\
         x-forwarded-for: 1.1.1.1, 10.1.2.3\r\nx-forwarded-proto: http\r\n\
         x-forwarded-host: Shop.Test:8080\r\n\r\n"
    );
    // No (or a blank) X-Forwarded-For: just the peer.
    let got = upstream_head(b"HEAD / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For:  \r\n\r\n");
    assert!(got.starts_with("HEAD / HTTP/1.1\r\nHost: a\r\n"));
    assert!(got.contains("\r\nx-forwarded-for: 10.1.2.3\r\n"), "{got}");
    assert_eq!(got.matches("forwarded-for").count(), 1);
}

#[test]
fn the_client_asking_to_close_is_seen() {
    let s = ProxySettings::default();
    let mut hs = [httparse::EMPTY_HEADER; 8];
    let r = parse_req(
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Close\r\n\r\n",
        &mut hs,
    );
    assert!(head::analyze_request(&r, &s).unwrap().close);
    let mut hs = [httparse::EMPTY_HEADER; 8];
    let r = parse_req(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", &mut hs);
    assert!(!head::analyze_request(&r, &s).unwrap().close);
}

fn plan_of(raw: &[u8], head_request: bool) -> Result<head::ResponsePlan, &'static str> {
    let mut hs = [httparse::EMPTY_HEADER; 32];
    let mut r = httparse::Response::new(&mut hs);
    assert!(r.parse(raw).unwrap().is_complete());
    head::analyze_response(&r, head_request)
}

#[test]
fn responses_are_framed_by_rfc_9112() {
    let f = |raw: &[u8], head: bool| plan_of(raw, head).map(|p| (p.framing, p.reusable));
    assert_eq!(
        f(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false),
        Ok((Framing::Length(5), true))
    );
    assert_eq!(
        f(b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n", false),
        Ok((Framing::Length(5), true))
    );
    assert_eq!(
        f(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true),
        Ok((Framing::Empty, true))
    );
    assert_eq!(
        f(b"HTTP/1.1 204 No Content\r\n\r\n", false),
        Ok((Framing::Empty, true))
    );
    assert_eq!(
        f(
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
            false
        ),
        Ok((Framing::Empty, true))
    );
    assert_eq!(
        f(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            false
        ),
        Ok((Framing::Chunked, true))
    );
    assert_eq!(
        f(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            false
        ),
        Ok((Framing::Chunked, true))
    );
    assert_eq!(
        f(b"HTTP/1.1 200 OK\r\n\r\n", false),
        Ok((Framing::UntilClose, false))
    );
    assert_eq!(
        f(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\n",
            false
        ),
        Ok((Framing::Length(1), false))
    );
    assert_eq!(
        f(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false),
        Ok((Framing::Length(1), false))
    );
    assert_eq!(
        f(
            b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\n",
            false
        ),
        Ok((Framing::Length(1), true))
    );
    for bad in [
        &b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
    ] {
        assert!(
            plan_of(bad, false).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

fn client_head(raw: &[u8], cookies: &[&str], close: bool) -> String {
    let mut hs = [httparse::EMPTY_HEADER; 32];
    let mut r = httparse::Response::new(&mut hs);
    assert!(r.parse(raw).unwrap().is_complete());
    let plan = head::analyze_response(&r, false).unwrap();
    let cookies: Vec<http::HeaderValue> = cookies.iter().map(|c| c.parse().unwrap()).collect();
    let mut out = Vec::new();
    head::write_client_head(
        &mut out,
        &r,
        &plan,
        &cookies,
        close,
        b"Sun, 29 Nov 2026 22:00:00 GMT",
    );
    String::from_utf8(out).unwrap()
}

#[test]
fn the_client_head_strips_hop_by_hop_and_adds_what_weir_owes() {
    let got = client_head(
        b"HTTP/1.1 200 Fine\r\nX-App: 1\r\nConnection: keep-alive, X-Internal\r\nX-Internal: s\r\n\
          Keep-Alive: timeout=5\r\nDate: Sun, 29 Nov 2026 21:00:00 GMT\r\nContent-Length: 2\r\n\r\n",
        &["weir-canary=abc; Path=/"],
        false,
    );
    assert_eq!(
        got,
        "HTTP/1.1 200 Fine\r\nX-App: 1\r\nDate: Sun, 29 Nov 2026 21:00:00 GMT\r\nContent-Length: 2\r\n\
         set-cookie: weir-canary=abc; Path=/\r\n\r\n"
    );
    // Chunked and close-delimited bodies reach the client chunked, without
    // Content-Length; a missing Date and reason are supplied; close is said.
    let got = client_head(
        b"HTTP/1.1 404 \r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n",
        &[],
        true,
    );
    assert_eq!(
        got,
        "HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\ndate: Sun, 29 Nov 2026 22:00:00 GMT\r\n\
         connection: close\r\n\r\n"
    );
    let got = client_head(b"HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\n", &[], false);
    assert!(got.contains("transfer-encoding: chunked\r\n"), "{got}");
    let got = client_head(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        &[],
        false,
    );
    assert!(
        got.contains("transfer-encoding: gzip, chunked\r\n"),
        "{got}"
    );
    // More listed names than fit inline are still stripped.
    let got = client_head(
        b"HTTP/1.1 200 OK\r\nConnection: a, b, c, d, e\r\nA: 1\r\nE: 5\r\nF: 6\r\nContent-Length: 0\r\n\r\n",
        &[],
        false,
    );
    assert!(
        !got.contains("\r\nA:") && !got.contains("\r\nE:") && got.contains("\r\nF: 6\r\n"),
        "{got}"
    );
}

#[test]
fn errors_are_the_general_paths() {
    use crate::proxy::errors::ProxyError;
    let mut out = Vec::new();
    head::write_error(
        &mut out,
        ProxyError::NoRoute,
        "no route for this host and path",
        None,
        false,
        b"Sun, 29 Nov 2026 22:00:00 GMT",
    );
    let text = String::from_utf8(out).unwrap();
    let body = "no-route: no route for this host and path\n";
    assert_eq!(
        text,
        format!(
            "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain; charset=utf-8\r\nx-weir-error: no-route\r\n\
             content-length: {}\r\ndate: Sun, 29 Nov 2026 22:00:00 GMT\r\n\r\n{body}",
            body.len()
        )
    );
    // The body is what ProxyError::response sends.
    let general = ProxyError::NoRoute.response("no route for this host and path");
    assert_eq!(general.status().as_u16(), 404);
    assert_eq!(general.headers()["x-weir-error"], "no-route");
}

#[test]
fn an_unbounded_timeout_is_a_far_deadline_not_a_panic() {
    let now = tokio::time::Instant::now();
    assert!(super::deadline(now, std::time::Duration::MAX) > now);
    let d = std::time::Duration::from_secs(5);
    assert_eq!(super::deadline(now, d), now + d);
}

#[test]
fn a_retried_head_carries_its_attempt_number_and_never_the_clients() {
    let head = b"GET /a HTTP/1.1\r\nhost: x\r\nX-Weir-Attempt: 9\r\naccept: */*\r\n\r\n";
    let out = head::with_attempt(head, 2);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "GET /a HTTP/1.1\r\nhost: x\r\naccept: */*\r\nx-weir-attempt: 2\r\n\r\n"
    );
    let out = head::with_attempt(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n", 10);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "GET / HTTP/1.1\r\nhost: x\r\nx-weir-attempt: 10\r\n\r\n"
    );
}

#[test]
fn the_status_of_a_response_head_is_read_from_its_status_line() {
    assert_eq!(
        head::response_status(b"HTTP/1.1 503 Busy\r\n\r\n"),
        Some(503)
    );
    assert_eq!(head::response_status(b"HTTP/1.0 200\r\n\r\n"), Some(200));
    assert_eq!(
        head::response_status(b"HTTP/1.1 101 Switching\r\n"),
        Some(101)
    );
    assert_eq!(head::response_status(b"HTTP/1.1 20x OK\r\n"), None);
    assert_eq!(head::response_status(b"HTTP/2 200\r\n"), None);
    assert_eq!(head::response_status(b"HTTP/1.1 200"), None);
}
