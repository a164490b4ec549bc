//! The engine's small HTTP client: webhooks, Prometheus queries, revision probes,
//! remote data planes and notifications all go through it.
//!
//! Every call has a timeout covering the whole exchange (connect, TLS handshake, head and
//! body), and bodies are read up to [`MAX_BODY`]: a hook or a proxy answering forever, or
//! answering a gigabyte, costs the engine one bounded call, never a stuck task.
//!
//! `http://` and `https://` URLs are both spoken, dialled by the proxy's upstream connector
//! with its backend TLS config (`proxy::tls::client_config`). TLS is rustls (the process's
//! one crypto provider, TLS 1.2 and 1.3, ALPN `http/1.1`) and trusts the Mozilla roots
//! (`webpki-roots`), or, for a target configured with a `caFile`, only the certificates of
//! that file ([`HttpClient::trusting`]). Any other scheme is refused before a connection is
//! made.
//!
//! A URL may hold a secret (a chat webhook's token is its path): the client's own
//! messages name a URL as `scheme://host/…` only ([`crate::text::redact_url`]).

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tower_service::Service;

use crate::config::{UpstreamProtocol, UpstreamTls};
use crate::proxy::body::BoxError;
use crate::proxy::client::{Connector as Dial, UpstreamStream};
use crate::text::redact_url;

/// Largest answer body read (webhook answers, Prometheus results, API documents).
pub const MAX_BODY: usize = 4 << 20;

/// Bound on connecting (TCP, then the TLS handshake) when the call's own timeout is longer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

type Pooled = Client<Connector, Full<Bytes>>;

/// A pooled HTTP/1.1 client over clear text or TLS (cheap to clone: the pools are shared).
#[derive(Clone)]
pub struct HttpClient {
    /// The pool this handle sends on (Mozilla roots, or one `caFile`).
    inner: Pooled,
    /// Which roots `inner` trusts, for messages and [`HttpClient::trusting`].
    ca_file: Option<PathBuf>,
    /// The Mozilla-roots pool and one pool per `caFile` (built on first use), shared by
    /// every clone, so that the webhooks of fifty canaries trusting one CA share one pool.
    shared: Arc<Pools>,
}

struct Pools {
    default: Pooled,
    by_ca: Mutex<HashMap<PathBuf, Pooled>>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
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
    /// A client trusting the Mozilla roots, with keep-alive pooling and a connect timeout.
    pub fn new() -> Self {
        // The ring provider speaks TLS 1.2 and 1.3; should it ever not, https
        // calls fail with a reason instead of the process refusing to start.
        let connector = Connector::trusting(None).unwrap_or_else(|_| Connector {
            plain: Dial::plain(CONNECT_TIMEOUT),
            tls: None,
        });
        let default = pool(connector);
        HttpClient {
            inner: default.clone(),
            ca_file: None,
            shared: Arc::new(Pools {
                default,
                by_ca: Mutex::default(),
            }),
        }
    }

    /// A handle on the pool that trusts only the certificates of `ca_file` (`None`: the
    /// Mozilla roots). The file is read when its pool is first built; a file that cannot
    /// be read any more is an error naming it.
    pub fn trusting(&self, ca_file: Option<&Path>) -> Result<HttpClient, String> {
        let inner = match ca_file {
            None => self.shared.default.clone(),
            Some(path) => {
                let mut map = self.shared.by_ca.lock().unwrap_or_else(|p| p.into_inner());
                match map.get(path) {
                    Some(c) => c.clone(),
                    None => {
                        let c = pool(Connector::trusting(Some(path))?);
                        map.insert(path.to_path_buf(), c.clone());
                        c
                    }
                }
            }
        };
        Ok(HttpClient {
            inner,
            ca_file: ca_file.map(Path::to_path_buf),
            shared: self.shared.clone(),
        })
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
            .map_err(|e| format!("invalid URL {}: {e}", redact_url(url)))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(format!(
                "expected an http:// or https:// URL (got {})",
                redact_url(url)
            ));
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
            .map_err(|e| format!("cannot build request to {}: {e}", redact_url(url)))?;
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

/// The pool of one trust setting.
fn pool(connector: Connector) -> Pooled {
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(8)
        .build(connector)
}

/// TCP for `http://`, TCP then TLS for `https://`: the proxy's upstream
/// connector, one of each.
#[derive(Clone)]
pub struct Connector {
    /// Dials `http://` URLs.
    plain: Dial,
    /// Dials `https://` URLs; `None`: TLS could not be set up.
    tls: Option<Dial>,
}

impl Connector {
    /// TLS trusting the Mozilla roots (`None`) or only the certificates of
    /// `ca_file`, offering ALPN `http/1.1`; an unreadable file is an error
    /// naming it.
    fn trusting(ca_file: Option<&Path>) -> Result<Self, String> {
        let trust = UpstreamTls {
            ca_file: ca_file.map(Path::to_path_buf),
            server_name: None,
        };
        let cfg = crate::proxy::tls::client_config(&trust, UpstreamProtocol::Http1)?;
        Ok(Connector {
            plain: Dial::plain(CONNECT_TIMEOUT),
            tls: Some(Dial::tls(CONNECT_TIMEOUT, cfg, None)?),
        })
    }
}

impl Service<http::Uri> for Connector {
    type Response = TokioIo<UpstreamStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        std::task::ready!(self.plain.poll_ready(cx))?;
        match &mut self.tls {
            Some(tls) => tls.poll_ready(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, dst: http::Uri) -> Self::Future {
        if dst.scheme_str() != Some("https") {
            return self.plain.call(dst);
        }
        match &mut self.tls {
            Some(tls) => tls.call(dst),
            None => Box::pin(async { Err("TLS is not available in this build".into()) }),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_that_cannot_be_read_is_an_error_naming_it_and_no_pool() {
        let client = HttpClient::new();
        let missing =
            std::env::temp_dir().join(format!("weir-http-no-ca-{}.pem", std::process::id()));
        let err = client.trusting(Some(&missing)).unwrap_err();
        assert!(err.contains(&missing.display().to_string()), "{err}");
        assert!(client.shared.by_ca.lock().unwrap().is_empty());
        assert!(client.trusting(None).is_ok());
    }

    /// The client's own errors never carry a URL's path or query (a webhook's token).
    #[tokio::test]
    async fn errors_name_a_url_by_scheme_and_host_only() {
        let c = HttpClient::new();
        for url in [
            "ftp://hooks.example/services/T0001/B0002/SECRET",
            "https://hooks.example/services/T0001/B0002/SECRET\u{7f}",
            "http://127.0.0.1:1/services/T0001/B0002/SECRET",
        ] {
            let err = c
                .get(url, &[], Duration::from_secs(2))
                .await
                .expect_err("cannot succeed");
            assert!(!err.contains("SECRET") && !err.contains("T0001"), "{err}");
        }
    }
}
