//! Parity of weir's two HTTP/1 transports: the byte-level fast path
//! (`proxy.http1FastPath: true`) and hyper (`false`). One table of request
//! kinds is sent through two weirs that differ only in that setting and share
//! the same scripted backends; for every case the test compares what the
//! backends received, what a raw client read, the stats and metrics deltas
//! and the access-log lines. On a mismatch it prints the case, the field and
//! both sides.
//!
//! Normalisations, each for a difference that is allowed by design:
//! - header field names compared in lower case: the fast path forwards names
//!   as received, hyper writes them in lower case (docs/protocols.md);
//! - header fields sorted by name, keeping the order of one name's values:
//!   the fast path keeps the order of fields, hyper's `HeaderMap` groups and
//!   reorders them; only the order of same-named fields carries meaning
//!   (RFC 9110 §5.3);
//! - the `date` value: it is the clock (its presence is still compared);
//! - chunked bodies compared decoded, with their trailers: chunk sizes
//!   follow the timing of reads (the framing headers are still compared);
//! - stats and metrics: counts only; latencies (`p50`.., histogram buckets
//!   and sums, `ms` in the access log) are the clock;
//! - the client's port in the access log: each side has its own connections.
//!
//! Where the transports differ today the case keeps a named entry in
//! [`Known`]: the test then demands that exact difference, so a fix shows
//! up as a failure telling to remove the entry.

use crate::support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use support::*;
use tokio::io::AsyncWriteExt;
use weir::app::RunningApp;

/// Bound on one side of one case (the slowest waits on a 300 ms route timeout).
const CASE_LIMIT: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------
// The access log, captured as the binary writes it (`cli::init_logging`:
// tracing's fmt format with targets), minus the timestamp.

#[derive(Clone)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

/// Everything `weir::access` wrote so far in this process.
fn access_log() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        tracing_subscriber::fmt()
            .with_writer(Capture(buf.clone()))
            .with_env_filter(tracing_subscriber::EnvFilter::new("weir::access=debug"))
            .with_target(true)
            .with_ansi(false)
            .without_time()
            .try_init()
            .expect("the parity test owns this binary's subscriber");
        buf
    })
}

/// Where the captured log ends now.
fn access_mark() -> usize {
    access_log().lock().unwrap().len()
}

/// The access lines written since `mark` for the connection from `peer`
/// (an earlier connection may have had the same port), normalised: client
/// port and latency removed.
fn access_lines(mark: usize, peer: SocketAddr) -> Vec<String> {
    let all = String::from_utf8_lossy(&access_log().lock().unwrap()[mark..]).into_owned();
    all.lines()
        .filter(|l| l.contains(&format!("peer={peer} ")))
        .map(|l| {
            let l = l.replace(&format!("peer={peer}"), &format!("peer={}:*", peer.ip()));
            match l.find(" ms=") {
                Some(i) => {
                    let rest = &l[i + 4..];
                    let end = rest.find(' ').unwrap_or(rest.len());
                    format!("{}{}", &l[..i], &rest[end..])
                }
                None => l,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Backends, shared by both weirs.

/// The answer of the `blue` and `green` backends: by path, one response kind
/// each; otherwise 200 naming the backend and the request target.
fn script(name: &'static str) -> impl Fn(usize, &str) -> Reply + Send + Sync + 'static {
    move |_, head| {
        let target = head.split(' ').nth(1).unwrap_or("").to_string();
        let method = head.split(' ').next().unwrap_or("").to_string();
        let path = target.split('?').next().unwrap_or("").to_string();
        let one = |s: &str| Reply::Send(vec![s.as_bytes().to_vec()], false);
        match path.as_str() {
            "/chunked" => Reply::Send(
                vec![
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Backend: b\r\n\r\n5\r\nhel"
                        .to_vec(),
                    b"lo\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n".to_vec(),
                ],
                false,
            ),
            "/chunked-declared" => Reply::Send(
                vec![b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: x-trailer\r\n\r\n2\r\nok\r\n0\r\nx-trailer: 1\r\n\r\n".to_vec()],
                false,
            ),
            "/close" => Reply::Send(
                vec![
                    b"HTTP/1.1 200 OK\r\nX-Backend: b\r\n\r\nuntil".to_vec(),
                    b" close".to_vec(),
                ],
                true,
            ),
            "/empty" => one("HTTP/1.1 204 No Content\r\nX-Backend: b\r\n\r\n"),
            "/cached" => one("HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n"),
            "/head" => one("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nX-Backend: b\r\n\r\n"),
            "/early" => Reply::Send(
                vec![
                    b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n".to_vec(),
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhints".to_vec(),
                ],
                false,
            ),
            "/garbage" => Reply::Send(vec![b"SPDY/3 hello there\r\n\r\n".to_vec()], true),
            "/head-chunked" => one("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
            "/empty-cl" => one("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"),
            "/cached-cl" => one("HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n"),
            "/no-reason" => one("HTTP/1.1 200 \r\nContent-Length: 2\r\n\r\nok"),
            "/both-framings" => one(
                "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
            ),
            "/reason" => one("HTTP/1.1 200 Fine Thanks\r\nContent-Length: 2\r\n\r\nok"),
            "/fail" => one("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nRetry-After: 1\r\n\r\nbusy"),
            "/multi" => one(
                "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nX-Dup: one\r\nConnection: X-Hop\r\nX-Hop: 1\r\nSet-Cookie: b=2\r\nX-Dup: two\r\nKeep-Alive: timeout=5\r\nContent-Length: 5\r\n\r\nmulti",
            ),
            _ => {
                let body = format!("{name} {method} {target}");
                Reply::Send(
                    vec![format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Backend: {name}\r\nServer: scripted\r\n\r\n{body}",
                        body.len()
                    )
                    .into_bytes()],
                    false,
                )
            }
        }
    }
}

struct Backends {
    /// Name → backend, in a fixed order.
    scripted: Vec<(&'static str, Scripted)>,
    /// Bound but not listening: every connect is refused, and the port
    /// stays ours for the whole test.
    refused: tokio::net::TcpSocket,
}

impl Backends {
    async fn start() -> Backends {
        let refused = tokio::net::TcpSocket::new_v4().unwrap();
        refused.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        Backends {
            scripted: vec![
                ("blue", scripted(script("blue")).await),
                ("green", scripted(script("green")).await),
                ("hang", scripted(|_, _| Reply::Hangup).await),
                ("stall", scripted(|_, _| Reply::Stall).await),
                // Every connection answers once, then hangs up on the next
                // request: an upstream's keep-alive timeout, made certain.
                (
                    "once",
                    scripted(|n, _| if n == 0 { ok("once") } else { Reply::Hangup }).await,
                ),
            ],
            refused,
        }
    }

    fn addr(&self, name: &str) -> SocketAddr {
        self.scripted
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap()
            .1
            .addr
    }

    /// How many requests each backend has seen so far.
    fn marks(&self) -> Vec<usize> {
        self.scripted
            .iter()
            .map(|(_, s)| s.heads.lock().unwrap().len())
            .collect()
    }

    /// The requests received since `marks`, normalised: backend, head, body.
    fn since(&self, marks: &[usize]) -> Vec<String> {
        let mut out = Vec::new();
        for ((name, s), &from) in self.scripted.iter().zip(marks) {
            let heads = s.heads.lock().unwrap();
            let bodies = s.bodies.lock().unwrap();
            for (h, b) in heads[from..].iter().zip(&bodies[from..]) {
                out.push(format!(
                    "{name}: {}\n  body {:?}",
                    norm_head(h),
                    String::from_utf8_lossy(b)
                ));
            }
        }
        out
    }
}

/// A head as comparable text: the start line as sent, then the fields with
/// lower-case names, sorted by name (stable), `date` valued `*`.
fn norm_head(head: &str) -> String {
    let mut lines = head.split("\r\n").filter(|l| !l.is_empty());
    let start = lines.next().unwrap_or("").to_string();
    let mut fields: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap_or((l, ""));
            let n = n.to_ascii_lowercase();
            let v = if n == "date" { "*" } else { v.trim() };
            (n, v.to_string())
        })
        .collect();
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    let mut s = start;
    for (n, v) in fields {
        s.push_str(&format!("\n  {n}: {v}"));
    }
    s
}

// ---------------------------------------------------------------------------
// The two weirs.

const AFFINITY: &str = "    sessionAffinity: { cookieName: weir-canary, primaryCookieName: weir-primary, maxAge: 3600, domain: sticky.test, path: / }\n";

fn config(b: &Backends, fast: bool) -> String {
    let refused = b.refused.local_addr().unwrap();
    let (blue, green, hang, stall, once) = (
        b.addr("blue"),
        b.addr("green"),
        b.addr("hang"),
        b.addr("stall"),
        b.addr("once"),
    );
    let ab = |name: &str, host: &str, extra: &str| {
        format!(
            "  - name: {name}\n    hosts: [{host}]\n    primary: blue\n    canary: green\n{extra}"
        )
    };
    let mut routes = String::new();
    routes += &ab(
        "app",
        "app.test",
        "    match:
      - headers: { x-exact: { exact: insider } }
      - headers: { x-prefix: { prefix: pre- } }
      - headers: { x-suffix: { suffix: -post } }
      - headers: { x-regex: { regex: \"^v[0-9]+$\" } }
      - headers: { x-present: { present: true } }
      - cookies: { beta: { exact: \"on\" } }
      - queryParams: { canary: { exact: \"yes\" } }
      - method: { exact: DELETE }
      - uri: { prefix: /v2/ }
",
    );
    routes += "  - { name: api, hosts: [app.test], pathPrefix: /api, primary: green }\n";
    routes += &ab(
        "src-in",
        "src-in.test",
        "    match: [ { sourceIp: [\"127.0.0.1/32\"] } ]\n",
    );
    routes += &ab(
        "src-out",
        "src-out.test",
        "    match: [ { sourceIp: [\"10.0.0.0/8\"] } ]\n",
    );
    // Istio's vocabulary; `scheme: https` and `port: 1` never hold here
    // (clear text, and no listener on port 1).
    routes += &ab(
        "istio",
        "istio.test",
        "    match:
      - headers: { x-beta: { present: true } }
        withoutHeaders: { x-internal: { exact: \"1\" } }
      - uri: { exact: /Upper }
        ignoreUriCase: true
      - authority: { exact: \"istio.test:81\" }
      - scheme: { exact: https }
      - port: 1
",
    );
    routes += &ab(
        "scheme",
        "scheme.test",
        "    match: [ { scheme: { exact: http } } ]\n",
    );
    routes += &ab("split", "split.test", "    canaryWeight: 100\n");
    routes += &ab(
        "sticky",
        "sticky.test",
        &format!("    canaryWeight: 50\n{AFFINITY}    affinityState: {{ canaryValue: canaryrun0001, primaryValue: primarystep01 }}\n"),
    );
    routes += &ab(
        "fresh",
        "fresh.test",
        &format!("    canaryWeight: 100\n{AFFINITY}    affinityState: {{ canaryValue: canaryrun0001, primaryValue: primarystep01 }}\n"),
    );
    routes += &ab(
        "ended",
        "ended.test",
        &format!("    canaryWeight: 0\n{AFFINITY}    affinityState: {{ previousCanaryValue: oldcanary0001 }}\n"),
    );
    routes += "  - name: edits
    hosts: [edits.test]
    primary: blue
    headers:
      request: { set: { x-env: prod }, add: { x-added: one }, remove: [x-secret] }
      response: { set: { x-served-by: weir }, remove: [server] }
";
    routes += "  - { name: slow, hosts: [slow.test], primary: stall, timeout: 300ms }\n";
    routes += "  - { name: refused, hosts: [refused.test], primary: refused }\n";
    routes += "  - { name: reset, hosts: [reset.test], primary: hang }\n";
    routes += "  - { name: once, hosts: [once.test], primary: once }\n";
    routes += "  - { name: retried, hosts: [retried.test], primary: pair, retries: { attempts: 1, on: [connect-failure], backoff: { base: 1ms, max: 1ms } } }\n";
    routes += "  - { name: retried-5xx, hosts: [retried-5xx.test], primary: blue, retries: { attempts: 2, on: [gateway-error], backoff: { base: 1ms, max: 1ms } } }\n";
    routes += "  - { name: limited, hosts: [limited.test], primary: blue, rateLimit: { requestsPerSecond: 0.001, burst: 1 } }\n";
    routes += "  - { name: capped, hosts: [capped.test], primary: blue, maxRequestBodyBytes: 4 }\n";
    routes += "  - { name: guarded, hosts: [guarded.test], primary: guarded }\n";
    format!(
        "proxy:
  http1FastPath: {fast}
  accessLog: true
  maxUriBytes: 2048
  maxHeaderBytes: 32768
  maxHeaders: 40
backends:
  blue: {{ endpoints: [\"{blue}\"] }}
  green: {{ endpoints: [\"{green}\"] }}
  hang: {{ endpoints: [\"{hang}\"] }}
  stall: {{ endpoints: [\"{stall}\"] }}
  refused: {{ endpoints: [\"{refused}\"] }}
  once: {{ endpoints: [\"{once}\"] }}
  pair: {{ endpoints: [\"{refused}\", \"{blue}\"] }}
  guarded: {{ endpoints: [\"{blue}\"], circuitBreaker: {{ maxConnections: 4, maxPendingRequests: 4, maxRequests: 8 }} }}
routes:
{routes}"
    )
}

// ---------------------------------------------------------------------------
// Cases.

/// What the client does on its connection.
enum Step {
    /// Sends one request and reads its response (`true`: a HEAD).
    Req(String, bool),
    /// Sends these requests in one write, then reads `n` responses.
    Pipe(String, usize),
}

/// A difference between the transports that exists today, kept visible:
/// the named fields must differ (the rest must still agree).
struct Known {
    name: &'static str,
    fields: &'static [&'static str],
    why: &'static str,
}

struct Case {
    name: &'static str,
    steps: Vec<Step>,
    known: Option<Known>,
}

fn get(host: &str, target: &str, extra: &str) -> String {
    format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n")
}

fn case(name: &'static str, raw: String) -> Case {
    let head = raw.starts_with("HEAD ");
    Case {
        name,
        steps: vec![Step::Req(raw, head)],
        known: None,
    }
}

/// `c` with a known difference in `fields`.
fn known(c: Case, name: &'static str, fields: &'static [&'static str], why: &'static str) -> Case {
    Case {
        known: Some(Known { name, fields, why }),
        ..c
    }
}

const TRAILERS: &str = "hyper writes only the trailer fields that the response's `Trailer` \
    header declares, and weir strips `Trailer` as hop-by-hop: hyper drops them all; the fast \
    path forwards the chunked bytes as received, trailers included";

fn cases() -> Vec<Case> {
    let app = |extra: &str| get("app.test", "/", extra);
    let mut many = String::new();
    for i in 0..45 {
        many += &format!("X-H{i}: v\r\n");
    }
    vec![
        case("plain get", app("")),
        case("header exact: hit", app("X-Exact: insider\r\n")),
        case("header exact: miss", app("X-Exact: outsider\r\n")),
        case("header prefix: hit", app("X-Prefix: pre-123\r\n")),
        case("header prefix: miss", app("X-Prefix: post-123\r\n")),
        case("header suffix: hit", app("X-Suffix: a-post\r\n")),
        case("header regex: hit", app("X-Regex: v42\r\n")),
        case("header regex: miss", app("X-Regex: v4x\r\n")),
        case("header present", app("X-Present: \r\n")),
        case(
            "header repeated: second value matches",
            app("X-Exact: no\r\nX-Exact: insider\r\n"),
        ),
        case("cookie: hit", app("Cookie: a=1; beta=on\r\n")),
        case(
            "cookie: hit in a second Cookie header",
            app("Cookie: a=1\r\nCookie: beta=on\r\n"),
        ),
        case("cookie: miss", app("Cookie: beta=off\r\n")),
        case("query param: hit", get("app.test", "/?x=1&canary=yes", "")),
        case("query param: miss", get("app.test", "/?canary=no", "")),
        case(
            "method: DELETE",
            "DELETE /item HTTP/1.1\r\nHost: app.test\r\n\r\n".into(),
        ),
        case(
            "method: PUT, Content-Length 0",
            "PUT /item HTTP/1.1\r\nHost: app.test\r\nContent-Length: 0\r\n\r\n".into(),
        ),
        case("uri prefix", get("app.test", "/v2/items", "")),
        case("longest path prefix", get("app.test", "/api/x", "")),
        case("sourceIp: in", get("src-in.test", "/", "")),
        case("sourceIp: out", get("src-out.test", "/", "")),
        case("withoutHeaders: not excluded", get("istio.test", "/", "X-Beta: 1\r\n")),
        case(
            "withoutHeaders: excluded",
            get("istio.test", "/", "X-Beta: 1\r\nX-Internal: 1\r\n"),
        ),
        case("ignoreUriCase: hit", get("istio.test", "/uPPer", "")),
        case("ignoreUriCase: miss", get("istio.test", "/Upper/x", "")),
        case("authority with port: hit", get("istio.test:81", "/", "")),
        case("scheme https, port 1: miss", get("istio.test", "/", "")),
        case("scheme http: hit", get("scheme.test", "/", "")),
        case("weight 100", get("split.test", "/", "")),
        case("affinity: cookie set", get("fresh.test", "/", "")),
        case(
            "affinity: pinned to canary",
            get("sticky.test", "/", "Cookie: weir-canary=canaryrun0001\r\n"),
        ),
        case(
            "affinity: pinned to primary",
            get("sticky.test", "/", "Cookie: weir-primary=primarystep01\r\n"),
        ),
        case(
            "affinity: old canary cookie deleted",
            get("ended.test", "/", "Cookie: weir-canary=oldcanary0001\r\n"),
        ),
        case("no route: 404", get("other.test", "/", "")),
        case(
            "no Host: 400",
            "GET / HTTP/1.1\r\nX-No-Host: 1\r\n\r\n".into(),
        ),
        case(
            "CONNECT: 405",
            "CONNECT app.test:443 HTTP/1.1\r\nHost: app.test:443\r\n\r\n".into(),
        ),
        case(
            "long target: 414",
            get("app.test", &format!("/{}", "p".repeat(3000)), ""),
        ),
        case("too many headers: 431", app(&many)),
        case(
            "header block too large: 431",
            app(&format!("X-Big: {}\r\n", "b".repeat(40 * 1024))),
        ),
        case(
            "large headers under the fast path's limit",
            app(&format!("X-Big: {}\r\n", "b".repeat(12 * 1024))),
        ),
        case(
            "large headers over the fast path's limit",
            app(&format!("X-Big: {}\r\n", "b".repeat(20 * 1024))),
        ),
        case("backend refused: 502", get("refused.test", "/", "")),
        case("backend hangs up: 502", get("reset.test", "/", "")),
        case("backend timeout: 504", get("slow.test", "/", "")),
        case("backend garbage: 502", get("app.test", "/garbage", "")),
        case("backend 503", get("app.test", "/fail", "")),
        Case {
            name: "keep-alive: three requests",
            steps: vec![
                Step::Req(get("app.test", "/1", ""), false),
                Step::Req(get("app.test", "/2", "Connection: keep-alive\r\n"), false),
                Step::Req(get("app.test", "/3", "X-Exact: insider\r\n"), false),
            ],
            known: None,
        },
        // The second request finds the first one's upstream connection idle
        // in the pool on both sides (hyper-util returns it from a task spawned
        // when the body ends, which this single-threaded runtime runs before
        // the client has even read the answer); both send it again on a new
        // connection.
        Case {
            name: "pooled upstream connection closed by the upstream",
            steps: vec![
                Step::Req(get("once.test", "/1", ""), false),
                Step::Req(get("once.test", "/2", ""), false),
            ],
            known: None,
        },
        case("Connection: close", app("Connection: close\r\n")),
        case(
            "Connection: close on a weir-made answer",
            get("other.test", "/", "Connection: close\r\n"),
        ),
        Case {
            name: "pipelining",
            steps: vec![Step::Pipe(
                format!(
                    "{}{}{}",
                    get("app.test", "/p1", ""),
                    get("app.test", "/p2", "X-Exact: insider\r\n"),
                    get("other.test", "/p3", "")
                ),
                3,
            )],
            known: None,
        },
        known(
            case("chunked response with trailers", get("app.test", "/chunked", "")),
            "response trailers: forwarded by the fast path, dropped by hyper",
            &["response"],
            TRAILERS,
        ),
        case("close-delimited response", get("app.test", "/close", "")),
        case(
            "HEAD",
            "HEAD /head HTTP/1.1\r\nHost: app.test\r\n\r\n".into(),
        ),
        case("204", get("app.test", "/empty", "")),
        case("304", get("app.test", "/cached", "If-None-Match: \"v1\"\r\n")),
        case("103 then 200", get("app.test", "/early", "")),
        case("reason phrase", get("app.test", "/reason", "")),
        known(
            case("empty reason phrase", get("app.test", "/no-reason", "")),
            "empty reason phrase: the standard one on the fast path, kept empty by hyper",
            &["response"],
            "the fast path writes the standard reason phrase when the upstream sent none \
             (head::write_client_head); hyper forwards the upstream's, empty included",
        ),
        case(
            "HEAD of a chunked resource",
            "HEAD /head-chunked HTTP/1.1\r\nHost: app.test\r\n\r\n".into(),
        ),
        case("204 with Content-Length 0", get("app.test", "/empty-cl", "")),
        known(
            case("304 with Content-Length", get("app.test", "/cached-cl", "")),
            "304 Content-Length: forwarded by the fast path, dropped by hyper",
            &["response"],
            "hyper removes Content-Length from every 304 it writes; the fast path forwards \
             it, which RFC 9110 §8.6 allows (the length the 200 would have had)",
        ),
        case(
            "response with Content-Length and chunked",
            get("app.test", "/both-framings", ""),
        ),
        known(
            case(
                "chunked response with declared trailers, TE: trailers",
                get("app.test", "/chunked-declared", "TE: trailers\r\n"),
            ),
            "response trailers: forwarded by the fast path, dropped by hyper",
            &["response"],
            TRAILERS,
        ),
        known(
            case(
                "chunked response with trailers, TE: trailers",
                get("app.test", "/chunked", "TE: trailers\r\n"),
            ),
            "response trailers: forwarded by the fast path, dropped by hyper",
            &["response"],
            TRAILERS,
        ),
        case(
            "absolute-form target",
            "GET http://app.test/abs?x=1 HTTP/1.1\r\nHost: app.test\r\n\r\n".into(),
        ),
        case("Host with a port", get("app.test:8080", "/", "")),
        case("Host in upper case", get("APP.TEST", "/", "")),
        case(
            "two Host headers",
            "GET / HTTP/1.1\r\nHost: app.test\r\nHost: other.test\r\n\r\n".into(),
        ),
        case(
            "bare LF line ends",
            "GET /lf HTTP/1.1\nHost: app.test\nX-Exact: insider\n\n".into(),
        ),
        case("dot segments", get("app.test", "/x/../v2/./y", "")),
        case("non-ASCII header value", app("X-Exact: insid\u{e9}r\r\n")),
        case(
            "GET with Content-Length 0",
            app("Content-Length: 0\r\n"),
        ),
        case("duplicate and hop-by-hop response headers", get("app.test", "/multi", "")),
        case(
            "query string",
            get("app.test", "/search?q=a%20b&tag=x&tag=y&empty=&flag", ""),
        ),
        case(
            "hop-by-hop request headers and X-Forwarded-*",
            app("Connection: keep-alive, X-Drop\r\nX-Drop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTE: gzip\r\nX-Forwarded-For: 9.9.9.9\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil.test\r\nX-Custom-Case: Yes\r\n"),
        ),
        case(
            "POST with a body",
            "POST /form HTTP/1.1\r\nHost: app.test\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello".into(),
        ),
        case(
            "chunked request body",
            "POST /upload HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n".into(),
        ),
        case(
            "HTTP/1.0",
            "GET /old HTTP/1.0\r\nHost: app.test\r\n\r\n".into(),
        ),
        case(
            "route header edits",
            get("edits.test", "/", "X-Secret: s\r\nX-Env: dev\r\nX-Added: zero\r\n"),
        ),
        Case {
            name: "retries: a refused endpoint, then another (and a client's x-weir-attempt dropped)",
            steps: vec![
                Step::Req(get("retried.test", "/", "X-Weir-Attempt: 9\r\n"), false),
                Step::Req(get("retried.test", "/", ""), false),
            ],
            known: None,
        },
        Case {
            name: "retries: a 503 sent again to the only endpoint until attempts run out; a 200 once",
            steps: vec![
                Step::Req(get("retried-5xx.test", "/fail", ""), false),
                Step::Req(get("retried-5xx.test", "/", ""), false),
            ],
            known: None,
        },
        Case {
            name: "rate limit: the second request is a 429 with Retry-After",
            steps: vec![
                Step::Req(get("limited.test", "/", ""), false),
                Step::Req(get("limited.test", "/", ""), false),
            ],
            known: None,
        },
        case(
            "body limit: a declared body over maxRequestBodyBytes",
            "POST / HTTP/1.1\r\nHost: capped.test\r\nContent-Length: 10\r\n\r\n0123456789".into(),
        ),
        case("circuit breaker: under its limits", get("guarded.test", "/", "")),
    ]
}

// ---------------------------------------------------------------------------
// Running a case on one side.

/// What one weir did with one case.
#[derive(Debug, Default)]
struct Seen {
    upstream: Vec<String>,
    responses: Vec<String>,
    stats: BTreeMap<String, i64>,
    metrics: BTreeMap<String, f64>,
    access: Vec<String>,
}

impl Seen {
    fn field(&self, f: &str) -> String {
        match f {
            "upstream" => self.upstream.join("\n"),
            "response" => self.responses.join("\n"),
            "stats" => format!("{:#?}", self.stats),
            "metrics" => format!("{:#?}", self.metrics),
            "access" => self.access.join("\n"),
            _ => unreachable!("no field {f}"),
        }
    }
}

const FIELDS: [&str; 5] = ["upstream", "response", "stats", "metrics", "access"];

/// Requests and failures per route and role, over the whole window.
async fn stats(c: &TestClient, app: &RunningApp) -> BTreeMap<String, i64> {
    let r = get_once(c, app.admin_addr, "/api/v1/stats?window=600s", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mut out = BTreeMap::new();
    for route in r.json()["routes"].as_array().unwrap() {
        let name = route["route"].as_str().unwrap();
        for (role, s) in route["roles"].as_object().unwrap() {
            for k in ["requests", "failures"] {
                out.insert(
                    format!("{name}/{role}/{k}"),
                    s[k].as_i64().unwrap_or_default(),
                );
            }
        }
    }
    out
}

/// Every series with a `route` label, except the latency histogram's
/// buckets and sum (clock-dependent; its `_count` is kept).
async fn metrics(c: &TestClient, app: &RunningApp) -> BTreeMap<String, f64> {
    let r = get_once(c, app.admin_addr, "/metrics", &[]).await;
    assert_eq!(r.status, 200);
    r.text()
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("route=\""))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let name = series.split('{').next()?;
            if name.ends_with("_bucket") || name.ends_with("_sum") {
                return None;
            }
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn delta<V>(before: &BTreeMap<String, V>, after: BTreeMap<String, V>) -> BTreeMap<String, V>
where
    V: Copy + Default + PartialEq + std::ops::Sub<Output = V>,
{
    after
        .into_iter()
        .map(|(k, v)| {
            let d = v - before.get(&k).copied().unwrap_or_default();
            (k, d)
        })
        .filter(|(_, d)| *d != V::default())
        .collect()
}

/// `date: <value>` (any case) with the value replaced by `*`.
fn norm_date(s: &str) -> String {
    let lower = s.to_ascii_lowercase();
    match lower.find("date: ") {
        Some(i) => {
            let rest = &s[i + 6..];
            let end = rest.find("\\r").unwrap_or(rest.len());
            format!("{}*{}", &s[..i + 6], &rest[end..])
        }
        None => s.to_string(),
    }
}

fn show_response(g: &Got) -> String {
    format!(
        "{}\n  body {:?}{}",
        norm_head(&g.head),
        String::from_utf8_lossy(&g.body),
        if g.trailers.is_empty() {
            String::new()
        } else {
            format!("\n  trailers {:?}", g.trailers)
        }
    )
}

async fn run_side(case: &Case, app: &RunningApp, backends: &Backends, c: &TestClient) -> Seen {
    let marks = backends.marks();
    let log_mark = access_mark();
    let stats_before = stats(c, app).await;
    let metrics_before = metrics(c, app).await;
    let mut raw = Raw::to(app.proxy_addr()).await;
    let peer = raw.s.local_addr().unwrap();
    let mut responses = Vec::new();
    'steps: for step in &case.steps {
        let (bytes, n, head) = match step {
            Step::Req(r, head) => (r, 1, *head),
            Step::Pipe(r, n) => (r, *n, false),
        };
        // A proxy refusing a head may close before reading all of it; its
        // answer is what counts.
        let _ = raw.s.write_all(bytes.as_bytes()).await;
        for _ in 0..n {
            match try_read_response(&mut raw.s, &mut raw.buf, head).await {
                Ok(g) => responses.push(show_response(&g)),
                Err(e) => {
                    // What arrived is in the message.
                    raw.buf.clear();
                    responses.push(format!("broken response: {}", norm_date(&e)));
                    break 'steps;
                }
            }
        }
    }
    // The barrier: once the proxy has closed the connection (after our end
    // is shut, or on its own), it has logged and counted every request of it.
    let _ = raw.s.shutdown().await;
    assert!(raw.closed().await);
    if !raw.buf.is_empty() {
        responses.push(format!(
            "after the last response: {:?}",
            String::from_utf8_lossy(&raw.buf)
        ));
    }
    Seen {
        upstream: backends.since(&marks),
        responses,
        stats: delta(&stats_before, stats(c, app).await),
        metrics: delta(&metrics_before, metrics(c, app).await),
        access: access_lines(log_mark, peer),
    }
}

#[tokio::test]
async fn both_http1_transports_give_the_same_answers() {
    access_log();
    let backends = Backends::start().await;
    let fast = proxy(&config(&backends, true)).await;
    let hyper = proxy(&config(&backends, false)).await;
    let c = client();
    let table = cases();
    assert!(table.len() >= 30);
    let mut failures = Vec::new();
    for case in &table {
        let mut seen = Vec::new();
        for (side, app) in [("fast path", &fast), ("hyper", &hyper)] {
            println!("case {:?} on {side}", case.name);
            let s = tokio::time::timeout(CASE_LIMIT, run_side(case, app, &backends, &c))
                .await
                .unwrap_or_else(|_| panic!("case {:?} on {side}: over {CASE_LIMIT:?}", case.name));
            seen.push(s);
        }
        let (f, h) = (&seen[0], &seen[1]);
        for field in FIELDS {
            let (a, b) = (f.field(field), h.field(field));
            let known = case.known.as_ref().filter(|k| k.fields.contains(&field));
            match known {
                None if a != b => failures.push(format!(
                    "case {:?}, {field} differs\n--- fast path:\n{a}\n--- hyper:\n{b}\n",
                    case.name
                )),
                Some(k) if a == b => failures.push(format!(
                    "case {:?}: the known difference {:?} is gone ({field} agrees:\n{a}\n); remove the entry",
                    case.name, k.name
                )),
                Some(k) => println!(
                    "known difference {:?} in case {:?} ({}):\n--- fast path:\n{a}\n--- hyper:\n{b}\n",
                    k.name, case.name, k.why
                ),
                None => {}
            }
        }
        // Every case is answered at least once; a case without any answer
        // compares nothing.
        assert!(
            !f.responses.is_empty(),
            "case {:?}: no response at all",
            case.name
        );
    }
    assert!(
        failures.is_empty(),
        "{} mismatches between the transports:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}
