//! The smuggling tracker over byte streams split every way.

use super::*;

/// Feeds `input` in pieces of every size from 1 to 7 bytes and checks
/// the result does not depend on how the bytes were split.
fn run(input: &[u8]) -> (Option<u64>, u64, bool) {
    let mut results = Vec::new();
    for step in [usize::MAX, 1, 2, 3, 5, 7] {
        let mut t = Tracker::new(60 * 1024, 100);
        for piece in input.chunks(step.min(input.len().max(1))) {
            t.feed(piece);
        }
        results.push((t.bad_head(), t.heads, t.is_on()));
    }
    for r in &results[1..] {
        assert_eq!(*r, results[0], "split-dependent result");
    }
    results[0]
}

#[test]
fn keep_alive_sequences_are_followed_through_bodies() {
    let input = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n\
POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello\
POST /y HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\n\
GET /z HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_eq!(run(input), (None, 4, true));
}

#[test]
fn a_body_that_looks_like_a_request_is_not_a_head() {
    let inner = b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
    let mut input = format!(
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
        inner.len()
    )
    .into_bytes();
    input.extend_from_slice(inner);
    input.extend_from_slice(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(run(&input), (None, 2, true));
}

#[test]
fn both_framing_headers_mark_that_head_in_either_order() {
    for head in [
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\ntransfer-encoding: chunked\r\ncontent-length: 4\r\n\r\n",
    ] {
        let input = format!(
            "GET / HTTP/1.1\r\nHost: a\r\n\r\n{head}0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n"
        );
        let (bad, heads, on) = run(input.as_bytes());
        assert_eq!(bad, Some(1), "{head}");
        assert_eq!(heads, 2);
        assert!(!on);
    }
}

/// Heads without framing headers take a path that neither copies nor
/// parses them; it must agree with the full one (`run` feeds whole and
/// split input, and split heads always take the full path).
#[test]
fn plain_heads_and_framed_heads_mix_in_any_split() {
    let input = b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n\
GET /b HTTP/1.0\nHost: a\n\n\
POST /c HTTP/1.1\r\nHost: a\r\nCONTENT-LENGTH: 3\r\n\r\nxyz\
GET /d HTTP/1.1\r\nX-Note: no content-length here\r\n\r\n\
POST /e HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n0\r\n\r\n\
GET /f HTTP/1.1\r\n\r\n";
    assert_eq!(run(input), (Some(4), 5, false));
}

#[test]
fn what_hyper_refuses_is_not_marked_but_stops_tracking() {
    for input in [
        &b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"[..],
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, x\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ] {
        let (bad, _, on) = run(input);
        assert_eq!(bad, None);
        assert!(!on);
    }
}

#[test]
fn leading_empty_lines_and_bare_lf_are_accepted_like_hyper() {
    let input = b"\r\nGET / HTTP/1.1\nHost: a\n\nGET /b HTTP/1.1\r\n\r\n";
    assert_eq!(run(input), (None, 2, true));
}

#[test]
fn an_oversized_head_is_marked_and_ends_tracking() {
    let mut t = Tracker::new(64, 100);
    t.feed(b"GET / HTTP/1.1\r\nX-Long: ");
    t.feed(&[b'a'; 100]);
    assert!(!t.is_on());
    assert_eq!(t.oversized_head(), Some(0));
    // Exactly the limit passes, one byte more is marked, whole or split.
    let head = |len: usize| {
        let start = b"GET / HTTP/1.1\r\nX: ";
        let mut h = start.to_vec();
        h.resize(len - 4, b'a');
        h.extend_from_slice(b"\r\n\r\n");
        h
    };
    for len in [64, 65] {
        let mut input = b"GET /first HTTP/1.1\r\n\r\n".to_vec();
        input.extend_from_slice(&head(len));
        let (want, heads) = if len == 64 { (None, 2) } else { (Some(1), 1) };
        for step in [usize::MAX, 1, 7] {
            let mut t = Tracker::new(64, 100);
            for piece in input.chunks(step.min(input.len())) {
                t.feed(piece);
            }
            assert_eq!(t.oversized_head(), want, "len {len}, step {step}");
            assert_eq!(t.heads, heads, "len {len}, step {step}");
        }
    }
}

#[test]
fn guard_marks_only_the_first_bad_head() {
    let g = ConnGuard::default();
    assert_eq!(g.next_request(), 0);
    g.mark(1);
    g.mark(3);
    assert!(!g.is_smuggling(0));
    assert!(g.is_smuggling(1));
    assert!(!g.is_smuggling(3));
    assert_eq!(g.requests(), 1);
}
