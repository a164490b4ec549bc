//! The engine's small HTTP client: webhooks, Prometheus queries, revision probes and
//! remote data planes all go through it.
//!
//! Every call has a timeout covering the whole exchange (connect, head and body), and
//! bodies are read up to [`MAX_BODY`]: a hook or a proxy answering forever, or answering
//! a gigabyte, costs the engine one bounded call, never a stuck task.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// Largest answer body read (webhook answers, Prometheus results, API documents).
pub const MAX_BODY: usize = 4 << 20;

/// A pooled HTTP/1.1 client (cheap to clone: the pool is shared).
#[derive(Clone, Debug)]
pub struct HttpClient {
    inner: Client<HttpConnector, Full<Bytes>>,
}

/// An answer read whole (up to [`MAX_BODY`]).
#[derive(Clone, Debug)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Response headers (ETag of the control API, content type).
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl HttpResponse {
    /// The body as text, lossily, cut to `max` characters for messages.
    pub fn snippet(&self, max: usize) -> String {
        let s = String::from_utf8_lossy(&self.body);
        let s = s.trim();
        if s.chars().count() <= max {
            s.to_string()
        } else {
            let cut: String = s.chars().take(max).collect();
            format!("{cut}…")
        }
    }
}

impl Default for HttpClient {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpClient {
    /// A client with keep-alive pooling and a connect timeout.
    pub fn new() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let inner = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(8)
            .build(connector);
        HttpClient { inner }
    }

    /// Sends `method url` with optional JSON body and extra headers, and reads the answer
    /// within `timeout`. Transport failures and timeouts are `Err` with a readable reason.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<HttpResponse, String> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| format!("invalid URL {url:?}: {e}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!("only http:// URLs are supported (got {url:?})"));
        }
        let mut b = Request::builder().method(method).uri(uri);
        let has_body = body.is_some();
        for (k, v) in headers {
            b = b.header(*k, v.as_str());
        }
        if has_body {
            b = b.header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = b
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| format!("cannot build request to {url}: {e}"))?;
        let exchange = async {
            let resp = self.inner.request(req).await.map_err(|e| error_chain(&e))?;
            let (parts, body) = resp.into_parts();
            let body = Limited::new(body, MAX_BODY)
                .collect()
                .await
                .map_err(|e| format!("reading the answer failed: {e}"))?
                .to_bytes();
            Ok::<_, String>(HttpResponse {
                status: parts.status.as_u16(),
                headers: parts.headers,
                body,
            })
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(format!("timed out after {}", fmt_duration(timeout))),
        }
    }

    /// GET shorthand.
    pub async fn get(
        &self,
        url: &str,
        headers: &[(&str, String)],
        timeout: Duration,
    ) -> Result<HttpResponse, String> {
        self.send(Method::GET, url, headers, None, timeout).await
    }
}

/// "connection refused" rather than hyper-util's opaque "client error (Connect)".
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let m = inner.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        src = inner.source();
    }
    s
}

/// `1.5s`, `250ms`, `2m` for messages.
pub fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0s".to_string()
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else if ms > 1000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{ms}ms")
    }
}
