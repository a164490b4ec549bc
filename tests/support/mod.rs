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
use std::time::Duration;
use weir::app::RunningApp;
use weir::echo::{EchoHandle, EchoOptions};

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
