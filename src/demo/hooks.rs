//! The webhook receiver: the blue/green scenario's acceptance hook at run time, and the rollout tests' hook recorder.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A handler of [`HookServer`]: path and JSON payload in, status and body out.
pub type HookHandler = Arc<
    dyn Fn(String, serde_json::Value) -> Pin<Box<dyn Future<Output = (u16, String)> + Send>>
        + Send
        + Sync,
>;

/// One call received by a [`HookServer`].
#[derive(Clone, Debug)]
pub struct HookCall {
    /// Request path.
    pub path: String,
    /// The JSON payload (`null` if it was not JSON).
    pub payload: serde_json::Value,
}

/// A tiny webhook receiver: records every call and answers with the status set for its
/// path (200 by default), or with a custom handler.
pub struct HookServer {
    /// Bound address.
    pub addr: SocketAddr,
    calls: Arc<Mutex<Vec<HookCall>>>,
    statuses: Arc<Mutex<HashMap<String, u16>>>,
    stop: watch::Sender<bool>,
}

impl HookServer {
    /// A recording receiver on 127.0.0.1 (port chosen by the OS).
    pub async fn spawn() -> std::io::Result<HookServer> {
        Self::spawn_inner(None).await
    }

    /// A receiver answering with `handler` (calls are still recorded).
    pub async fn spawn_with(handler: HookHandler) -> std::io::Result<HookServer> {
        Self::spawn_inner(Some(handler)).await
    }

    async fn spawn_inner(handler: Option<HookHandler>) -> std::io::Result<HookServer> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let statuses: Arc<Mutex<HashMap<String, u16>>> = Arc::new(Mutex::new(HashMap::new()));
        let (stop, mut stopped) = watch::channel(false);
        let (c, s) = (calls.clone(), statuses.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    acc = listener.accept() => {
                        let Ok((stream, _)) = acc else { continue };
                        let (c, s, h) = (c.clone(), s.clone(), handler.clone());
                        tokio::spawn(async move {
                            let svc = service_fn(move |req: Request<Incoming>| {
                                let (c, s, h) = (c.clone(), s.clone(), h.clone());
                                async move {
                                    let path = req.uri().path().to_string();
                                    let body = Limited::new(req.into_body(), 1 << 20)
                                        .collect()
                                        .await
                                        .map(|b| b.to_bytes())
                                        .unwrap_or_default();
                                    let payload = serde_json::from_slice(&body)
                                        .unwrap_or(serde_json::Value::Null);
                                    c.lock().unwrap_or_else(|p| p.into_inner()).push(HookCall {
                                        path: path.clone(),
                                        payload: payload.clone(),
                                    });
                                    let (status, text) = match &h {
                                        Some(h) => h(path, payload).await,
                                        None => {
                                            let st = s
                                                .lock()
                                                .unwrap_or_else(|p| p.into_inner())
                                                .get(&path)
                                                .copied()
                                                .unwrap_or(200);
                                            (st, format!("status {st}"))
                                        }
                                    };
                                    let mut r = Response::new(Full::new(Bytes::from(text)));
                                    *r.status_mut() = http::StatusCode::from_u16(status)
                                        .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
                                    Ok::<_, Infallible>(r)
                                }
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                    _ = stopped.changed() => break,
                }
            }
        });
        Ok(HookServer {
            addr,
            calls,
            statuses,
            stop,
        })
    }

    /// `http://<addr><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Answers `status` on `path` from now on.
    pub fn set_status(&self, path: &str, status: u16) {
        self.statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path.to_string(), status);
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<HookCall> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Calls to `path` so far.
    pub fn calls_to(&self, path: &str) -> Vec<HookCall> {
        self.calls()
            .into_iter()
            .filter(|c| c.path == path)
            .collect()
    }
}

impl Drop for HookServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
