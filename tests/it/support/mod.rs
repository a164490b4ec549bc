//! Shared fixtures for the end-to-end tests: in-process `weir echo`
//! backends, a proxy built from YAML, and a pooled HTTP client. Everything
//! binds 127.0.0.1 port 0.
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir::app::RunningApp;
use weir::echo::{EchoHandle, EchoOptions};

pub mod etcd;
pub mod weir_ctl;

/// A loopback address whose connects are refused, held for as long as the returned
/// socket lives: it is bound but never listens, so the kernel answers every connect
/// with a reset and no other test (or process) can be handed the port meanwhile, as
/// could happen to a port bound, dropped and reused by number.
pub fn refusing_addr() -> (tokio::net::TcpSocket, SocketAddr) {
    let s = tokio::net::TcpSocket::new_v4().expect("socket");
    s.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
    let addr = s.local_addr().expect("local addr");
    (s, addr)
}

/// Starts an echo backend answering `version`.
pub async fn echo(version: &str) -> EchoHandle {
    echo_with(version, 0.0, Duration::ZERO).await
}

/// Starts an echo backend with an error rate and a latency.
pub async fn echo_with(version: &str, error_rate: f64, latency: Duration) -> EchoHandle {
    weir::echo::spawn(
        "127.0.0.1:0".parse().unwrap(),
        EchoOptions {
            version: version.into(),
            error_rate,
            latency,
        },
    )
    .await
    .expect("bind echo backend")
}

/// Parses a YAML config (listener `127.0.0.1:0` is added when none is
/// given) and starts the whole app.
pub async fn proxy(yaml: &str) -> RunningApp {
    let mut yaml = if yaml.contains("listeners:") {
        yaml.to_string()
    } else {
        format!("listeners:\n  - name: http\n    address: 127.0.0.1:0\n{yaml}")
    };
    // Tests run in parallel: the admin API takes a free port too unless
    // the test configures one (`RunningApp::admin_addr` tells which).
    if !yaml.contains("admin:") {
        yaml = format!("admin:\n  address: 127.0.0.1:0\n{yaml}");
    }
    let cfg = weir::config::parse_yaml(&yaml, "test.yaml", Path::new("."))
        .unwrap_or_else(|e| panic!("test config invalid:\n{e}\n---\n{yaml}"));
    weir::app::start(cfg).await.expect("start app")
}

/// A keep-alive HTTP/1.1 client.
pub type TestClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> TestClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(64)
        .build_http()
}

/// A response read whole.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    /// The `x-weir-version` of the echo backend that answered.
    pub fn version(&self) -> Option<&str> {
        self.header("x-weir-version")
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// Sends a request and reads the whole answer.
pub async fn send(c: &TestClient, req: http::Request<Full<Bytes>>) -> Resp {
    let resp = c.request(req).await.expect("request failed");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Resp {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    }
}

/// A GET with extra headers.
pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> http::Request<Full<Bytes>> {
    let mut b = http::Request::get(format!("http://{addr}{path}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Full::new(Bytes::new())).unwrap()
}

/// GET shorthand.
pub async fn get_once(
    c: &TestClient,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Resp {
    send(c, get(addr, path, headers)).await
}

/// Two-sided binomial bound: the number of successes in `n` trials with
/// probability `p` lies within `mean ± z·sd` (z = 3.89 is the 99.99% normal
/// quantile), returned as an inclusive range.
pub fn binomial_bounds(n: u64, p: f64, z: f64) -> (u64, u64) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    let lo = (mean - z * sd).floor().max(0.0) as u64;
    let hi = (mean + z * sd).ceil() as u64;
    (lo, hi)
}

/// Z for a two-sided 99.99% interval.
pub const Z_9999: f64 = 3.891;

/// Polls canary `name`'s status on `app` until `f` holds, and returns it; panics with
/// the last status after `bound`.
pub async fn wait_canary(
    app: &RunningApp,
    name: &str,
    bound: Duration,
    what: &str,
    f: impl Fn(&weir::rollout::CanaryStatus) -> bool,
) -> weir::rollout::CanaryStatus {
    let mut last = None;
    let ok = eventually(bound, || {
        let s = app.engine.status(name).expect("the canary exists");
        let hit = f(&s);
        last = Some(s);
        async move { hit }
    })
    .await;
    let s = last.expect("polled at least once");
    assert!(ok, "timed out waiting for {what}; status:\n{s:#?}");
    s
}

/// One GET through a proxy: `Ok` with the status and the `x-weir-version` of the slot
/// that answered, or why there was no answer (each half bounded by `timeout`).
pub async fn version_exchange(
    c: &TestClient,
    proxy: SocketAddr,
    host: &str,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let req = get(proxy, "/", &[("host", host)]);
    let resp = match tokio::time::timeout(timeout, c.request(req)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Err(format!("request error: {e}")),
        Err(_) => return Err("timed out".into()),
    };
    let status = resp.status().as_u16();
    let version = resp
        .headers()
        .get("x-weir-version")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    match tokio::time::timeout(timeout, BodyExt::collect(resp)).await {
        Ok(Ok(_)) => Ok((status, version)),
        Ok(Err(e)) => Err(format!("body: {e}")),
        Err(_) => Err("body timed out".into()),
    }
}

/// Polls `f` every 20 ms until it returns true or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if f().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One backend `b` at `addr` and one catch-all route `r` to it.
pub fn one_route_config(addr: impl std::fmt::Display) -> String {
    format!(
        "backends:\n  b: {{ endpoints: [\"{addr}\"] }}\nroutes:\n  - {{ name: r, primary: b }}\n"
    )
}

/// Two backends `app-blue` (v1) and `app-green` (v2) and a route `app`
/// with the given extra route fields (YAML, indented 4 spaces).
pub fn two_slot_config(blue: SocketAddr, green: SocketAddr, route_extra: &str) -> String {
    format!(
        "backends:\n  app-blue:\n    endpoints: [\"{blue}\"]\n  app-green:\n    endpoints: [\"{green}\"]\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\n{route_extra}"
    )
}

// Scripted raw backends and a raw client, for tests that must see every
// byte both ways.

/// What the scripted backend does with one request.
pub enum Reply {
    /// Writes these pieces (20 ms apart), then closes if asked.
    Send(Vec<Vec<u8>>, bool),
    /// Closes the connection without answering.
    Hangup,
    /// Never answers; keeps the connection until the peer closes it.
    Stall,
}

/// A backend answering by script: `(request number on this connection,
/// head)` → reply. Counts connections and keeps every head it saw, and
/// beside it the request body (Content-Length or chunked, decoded).
pub struct Scripted {
    pub addr: std::net::SocketAddr,
    pub conns: Arc<AtomicUsize>,
    pub closed_by_peer: Arc<AtomicUsize>,
    pub heads: Arc<Mutex<Vec<String>>>,
    pub bodies: Arc<Mutex<Vec<Vec<u8>>>>,
}

pub async fn scripted<F>(script: F) -> Scripted
where
    F: Fn(usize, &str) -> Reply + Send + Sync + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let closed_by_peer = Arc::new(AtomicUsize::new(0));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let script = Arc::new(script);
    let (c, cl, h, b) = (
        conns.clone(),
        closed_by_peer.clone(),
        heads.clone(),
        bodies.clone(),
    );
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let (script, h, cl, b) = (script.clone(), h.clone(), cl.clone(), b.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                for n in 0.. {
                    let Some(head) = read_head(&mut s, &mut buf).await else {
                        cl.fetch_add(1, Ordering::SeqCst);
                        return;
                    };
                    let body = if header(&head, "transfer-encoding").is_some() {
                        let Some((body, _)) = read_chunked(&mut s, &mut buf).await else {
                            return;
                        };
                        body
                    } else {
                        let len = header(&head, "content-length").map_or(0, |v| v.parse().unwrap());
                        while buf.len() < len {
                            if !more(&mut s, &mut buf).await {
                                return;
                            }
                        }
                        buf.drain(..len).collect()
                    };
                    h.lock().unwrap().push(head.clone());
                    b.lock().unwrap().push(body);
                    match script(n, &head) {
                        Reply::Hangup => return,
                        Reply::Stall => {
                            let mut sink = [0u8; 4096];
                            while matches!(s.read(&mut sink).await, Ok(k) if k > 0) {}
                            return;
                        }
                        Reply::Send(pieces, close) => {
                            for (i, p) in pieces.iter().enumerate() {
                                if i > 0 {
                                    tokio::time::sleep(Duration::from_millis(20)).await;
                                }
                                if s.write_all(p).await.is_err() {
                                    return;
                                }
                            }
                            if close {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    Scripted {
        addr,
        conns,
        closed_by_peer,
        heads,
        bodies,
    }
}

/// Reads one head (through its empty line) off `buf` + `s`.
pub async fn read_head(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i + 4]).into_owned();
            buf.drain(..i + 4);
            return Some(head);
        }
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The first value of `name` in a head (names compared case-insensitively).
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

pub fn ok(body: &str) -> Reply {
    Reply::Send(
        vec![format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()],
        false,
    )
}

/// One response read by the raw client: status, head, decoded body, and
/// the trailer lines of a chunked body.
pub struct Got {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
    pub trailers: String,
}

pub async fn more(s: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 8192];
    match tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk)).await {
        Ok(Ok(0)) | Ok(Err(_)) => false,
        Ok(Ok(n)) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
        Err(_) => panic!("no response bytes within 10 s"),
    }
}

/// Reads one response; `head_request` for an answer to HEAD.
pub async fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>, head_request: bool) -> Got {
    try_read_response(s, buf, head_request)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// [`read_response`], where a response cut short is an error naming what
/// arrived instead of a panic.
pub async fn try_read_response(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    head_request: bool,
) -> Result<Got, String> {
    let head = read_head(s, buf).await.ok_or("no response head")?;
    let status: u16 = head[9..12]
        .parse()
        .map_err(|_| format!("bad status line: {head:?}"))?;
    let mut body = Vec::new();
    let mut trailers = String::new();
    if head_request || status == 204 || status == 304 {
    } else if header(&head, "transfer-encoding").is_some() {
        (body, trailers) = read_chunked(s, buf)
            .await
            .ok_or_else(|| format!("eof in a chunked body after {head:?}"))?;
    } else if let Some(n) = header(&head, "content-length") {
        let n: usize = n
            .parse()
            .map_err(|_| format!("bad content-length: {head:?}"))?;
        while buf.len() < n {
            if !more(s, buf).await {
                let got = String::from_utf8_lossy(buf);
                return Err(format!("eof in the body after {head:?} and {got:?}"));
            }
        }
        body = buf.drain(..n).collect();
    } else {
        while more(s, buf).await {}
        body = std::mem::take(buf);
    }
    Ok(Got {
        status,
        head,
        body,
        trailers,
    })
}

/// Reads a chunked body off `buf` + `s`: the decoded data and the trailer
/// lines; `None` at an early end of stream.
pub async fn read_chunked(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(Vec<u8>, String)> {
    let mut body = Vec::new();
    loop {
        while !buf.windows(2).any(|w| w == b"\r\n") {
            if !more(s, buf).await {
                return None;
            }
        }
        let i = buf.windows(2).position(|w| w == b"\r\n").unwrap();
        let line = std::str::from_utf8(&buf[..i]).unwrap();
        let size = usize::from_str_radix(line.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            // Trailer lines, then the empty line.
            buf.drain(..i + 2);
            let mut trailers = String::new();
            loop {
                while !buf.windows(2).any(|w| w == b"\r\n") {
                    if !more(s, buf).await {
                        return None;
                    }
                }
                let j = buf.windows(2).position(|w| w == b"\r\n").unwrap();
                trailers.push_str(&String::from_utf8_lossy(&buf[..j + 2]));
                buf.drain(..j + 2);
                if j == 0 {
                    return Some((body, trailers));
                }
            }
        }
        while buf.len() < i + 2 + size + 2 {
            if !more(s, buf).await {
                return None;
            }
        }
        body.extend_from_slice(&buf[i + 2..i + 2 + size]);
        buf.drain(..i + 2 + size + 2);
    }
}

/// A client connection that sends raw requests.
pub struct Raw {
    pub s: TcpStream,
    pub buf: Vec<u8>,
}

impl Raw {
    /// A connection from a port this process holds alone: bound before
    /// connecting, so no other test's connection (to another listener) can
    /// share it, and a line logged with `peer=` this port is this one's.
    pub async fn to(addr: std::net::SocketAddr) -> Raw {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        Raw {
            s: socket.connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    pub async fn get(&mut self, path: &str, extra: &str) -> Got {
        self.send(
            &format!("GET {path} HTTP/1.1\r\nHost: shop.test\r\n{extra}\r\n"),
            false,
        )
        .await
    }

    pub async fn send(&mut self, raw: &str, head_request: bool) -> Got {
        self.s.write_all(raw.as_bytes()).await.unwrap();
        read_response(&mut self.s, &mut self.buf, head_request).await
    }

    /// The server closed the connection (nothing more to read).
    pub async fn closed(&mut self) -> bool {
        !more(&mut self.s, &mut self.buf).await
    }
}

/// Whether the external program `tool` (etcd, prometheus, chromium, …) is on PATH.
///
/// A test that needs it calls this first. Under CI (`CI` set, as `.ci/run` runs) a
/// missing tool fails the test: CI installs it, so its absence is a broken setup, not a
/// reason to pass. A local run without it prints a loud line and the test returns early.
#[allow(dead_code)]
pub fn tool_available(tool: &str, test: &str, install: &str) -> bool {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    if found {
        return true;
    }
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
        panic!("{test}: `{tool}` is not on PATH and CI must run this test ({install})");
    }
    println!("SKIP {test}: `{tool}` is not on PATH ({install}); CI fails here instead");
    false
}

/// A `prometheus` process started by a test (on a port of its own choosing, read from
/// its log, so no port is freed and re-bound); killed when dropped.
#[allow(dead_code)]
pub struct PrometheusProcess {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Drop for PrometheusProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `prometheus` with `config` (its YAML) in `dir`, listening on 127.0.0.1 port 0.
/// Blocking: call it from `spawn_blocking` or before the runtime is busy.
#[allow(dead_code)]
pub fn start_prometheus(config: &str, dir: &Path) -> PrometheusProcess {
    use std::io::BufRead;
    std::fs::write(dir.join("prometheus.yml"), config).expect("prometheus config");
    let mut child = std::process::Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg("--web.listen-address=127.0.0.1:0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start prometheus");
    let stderr = child.stderr.take().expect("prometheus stderr");
    let mut lines = std::io::BufReader::new(stderr).lines();
    let mut url = None;
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let Ok(line) = line else { break };
        if line.contains("msg=\"Listening on\"") {
            url = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("address="))
                .map(|a| format!("http://{a}"));
            break;
        }
        seen.push(line);
    }
    // Keep draining its log so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let url = url.unwrap_or_else(|| panic!("prometheus did not start:\n{}", seen.join("\n")));
    PrometheusProcess { child, url }
}
