//! `weir echo`: a small backend for demos, tests and benchmarks.
//!
//! Every answer carries `x-weir-version: <version>`, so a client can tell
//! which side served it. Endpoints:
//! - `GET /healthz` → `ok`; `GET /version` → the version (never fail, never sleep);
//! - `/echo` → JSON `{version, method, path, query, headers, bodyBytes}` (body streamed and counted);
//! - `/bytes?n=N` → N bytes streamed in 64 KiB chunks (never buffered);
//! - `/status/CODE` → that status; `/sleep?ms=N` → answers after N ms;
//! - anything else → `<version>\n`.
//!
//! `--error-rate R` answers R of the requests (other than /healthz and
//! /version) with 500; `--latency D` sleeps D before answering them.

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rand::Rng;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How the echo server behaves.
#[derive(Debug, Clone)]
pub struct EchoOptions {
    /// Reported in every answer.
    pub version: String,
    /// Share (0..=1) of requests answered with 500.
    pub error_rate: f64,
    /// Delay before answering.
    pub latency: Duration,
}

/// A running echo server.
pub struct EchoHandle {
    /// The bound address (useful with port 0).
    pub addr: SocketAddr,
    /// Requests served so far (all paths).
    pub requests: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
}

impl EchoHandle {
    /// Stops accepting; open connections end with the runtime.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

impl Drop for EchoHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

type EchoBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// Binds `addr` and serves in the background.
pub async fn spawn(addr: SocketAddr, opts: EchoOptions) -> std::io::Result<EchoHandle> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let requests = Arc::new(AtomicU64::new(0));
    let (stop, mut stopped) = watch::channel(false);
    let opts = Arc::new(opts);
    let counter = requests.clone();
    tokio::spawn(async move {
        let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
        loop {
            tokio::select! {
                acc = listener.accept() => {
                    let Ok((stream, _)) = acc else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let opts = opts.clone();
                    let counter = counter.clone();
                    let builder = builder.clone();
                    tokio::spawn(async move {
                        let svc = service_fn(move |req| answer(opts.clone(), counter.clone(), req));
                        let _ = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc).await;
                    });
                }
                _ = stopped.changed() => break,
            }
        }
    });
    Ok(EchoHandle {
        addr,
        requests,
        stop,
    })
}

/// Serves until the process ends (the `weir echo` command).
pub async fn run(addr: SocketAddr, opts: EchoOptions) -> std::io::Result<()> {
    let h = spawn(addr, opts.clone()).await?;
    tracing::info!(addr = %h.addr, version = %opts.version, "echo backend listening");
    std::future::pending::<()>().await;
    Ok(())
}

fn full(s: impl Into<Bytes>) -> EchoBody {
    Full::new(s.into()).boxed()
}

fn query_param<'a>(q: Option<&'a str>, key: &str) -> Option<std::borrow::Cow<'a, str>> {
    form_urlencoded::parse(q?.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

async fn answer(
    opts: Arc<EchoOptions>,
    counter: Arc<AtomicU64>,
    req: Request<Incoming>,
) -> Result<Response<EchoBody>, Infallible> {
    let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
    let path = req.uri().path().to_string();
    let mut resp = match path.as_str() {
        "/healthz" => Response::new(full("ok\n")),
        "/version" => Response::new(full(format!("{}\n", opts.version))),
        _ => {
            if !opts.latency.is_zero() {
                tokio::time::sleep(opts.latency).await;
            }
            if opts.error_rate > 0.0 && rand::rng().random::<f64>() < opts.error_rate {
                let mut r = Response::new(full(format!("{} injected failure\n", opts.version)));
                *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                r
            } else {
                serve_path(&opts, &path, req).await
            }
        }
    };
    let h = resp.headers_mut();
    if let Ok(v) = header::HeaderValue::from_str(&opts.version) {
        h.insert("x-weir-version", v);
    }
    h.insert("x-weir-echo-requests", header::HeaderValue::from(n));
    Ok(resp)
}

async fn serve_path(opts: &EchoOptions, path: &str, req: Request<Incoming>) -> Response<EchoBody> {
    if path == "/echo" {
        let method = req.method().to_string();
        let query = req.uri().query().map(str::to_string);
        let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, v) in req.headers() {
            headers
                .entry(k.as_str().to_string())
                .or_default()
                .push(String::from_utf8_lossy(v.as_bytes()).into_owned());
        }
        // Count the body chunk by chunk: never hold it whole.
        let mut body = req.into_body();
        let mut bytes = 0u64;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => bytes += f.data_ref().map_or(0, |d| d.len() as u64),
                Err(_) => break,
            }
        }
        let doc = serde_json::json!({
            "version": opts.version, "method": method, "path": path,
            "query": query, "headers": headers, "bodyBytes": bytes,
        });
        let mut r = Response::new(full(doc.to_string()));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        return r;
    }
    if path == "/bytes" {
        let n: u64 = query_param(req.uri().query(), "n")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        const CHUNK: usize = 64 * 1024;
        let chunk = Bytes::from(vec![b'x'; CHUNK]);
        let stream = futures_lite_stream(n, chunk);
        let mut r = Response::new(StreamBody::new(stream).boxed());
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, header::HeaderValue::from(n));
        return r;
    }
    if let Some(code) = path.strip_prefix("/status/") {
        let status = code
            .parse::<u16>()
            .ok()
            .and_then(|c| StatusCode::from_u16(c).ok())
            .unwrap_or(StatusCode::BAD_REQUEST);
        let mut r = Response::new(full(format!("{}\n", opts.version)));
        *r.status_mut() = status;
        return r;
    }
    if path == "/sleep" {
        let ms: u64 = query_param(req.uri().query(), "ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms.min(600_000))).await;
    }
    // Drain any request body so keep-alive works.
    let mut body = req.into_body();
    while let Some(Ok(_)) = body.frame().await {}
    Response::new(full(format!("{}\n", opts.version)))
}

/// A stream of `n` bytes made of clones of `chunk` (no allocation per chunk).
fn futures_lite_stream(
    n: u64,
    chunk: Bytes,
) -> impl futures_core::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send {
    struct S {
        left: u64,
        chunk: Bytes,
    }
    impl futures_core::Stream for S {
        type Item = Result<Frame<Bytes>, Infallible>;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            if self.left == 0 {
                return std::task::Poll::Ready(None);
            }
            let take = self.left.min(self.chunk.len() as u64) as usize;
            self.left -= take as u64;
            let data = self.chunk.slice(..take);
            std::task::Poll::Ready(Some(Ok(Frame::data(data))))
        }
    }
    S { left: n, chunk }
}
