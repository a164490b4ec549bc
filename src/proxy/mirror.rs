//! Bounded shadow traffic: a copy of a primary-bound request goes to the
//! canary, its answer is discarded (only its status and latency are recorded,
//! as role `mirror`), and the client only ever sees the primary's response.
//!
//! The mirror must never slow or fail the primary path: the request body is
//! teed by reference-counted `Bytes` clones (no copy, no wait), bodies over
//! the cap are not mirrored, at most `maxInFlight` copies run at once per
//! route, and everything beyond that is dropped and counted.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use tokio::sync::oneshot;

pub use crate::dataplane::mirror::{InFlightSlot, MirrorCounters};

/// What the tee hands to the mirror task once the client's body is complete.
pub enum TeeOutcome {
    /// The whole body, in the chunks it arrived in.
    Complete(Vec<Bytes>),
    /// Larger than the cap: the copy was abandoned.
    TooLarge,
    /// The client's body errored or the request was dropped first.
    Incomplete,
}

/// Streams a request body to the primary unchanged while keeping a capped
/// copy for the mirror.
pub struct TeeBody {
    inner: Incoming,
    copy: Vec<Bytes>,
    copied: usize,
    cap: usize,
    tx: Option<oneshot::Sender<TeeOutcome>>,
}

impl TeeBody {
    /// Wraps `inner`; the receiver resolves when the body ends.
    pub fn new(inner: Incoming, cap: usize) -> (Self, oneshot::Receiver<TeeOutcome>) {
        let (tx, rx) = oneshot::channel();
        (
            TeeBody {
                inner,
                copy: Vec::new(),
                copied: 0,
                cap,
                tx: Some(tx),
            },
            rx,
        )
    }

    fn finish(&mut self, outcome: TeeOutcome) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(outcome);
        }
    }
}

impl Drop for TeeBody {
    fn drop(&mut self) {
        self.finish(TeeOutcome::Incomplete);
    }
}

impl Body for TeeBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if this.tx.is_some() {
                        this.copied += data.len();
                        if this.copied > this.cap {
                            this.copy = Vec::new();
                            this.finish(TeeOutcome::TooLarge);
                        } else {
                            this.copy.push(data.clone());
                        }
                    }
                }
                if this.inner.is_end_stream() {
                    let copy = std::mem::take(&mut this.copy);
                    this.finish(TeeOutcome::Complete(copy));
                }
            }
            Poll::Ready(None) => {
                let copy = std::mem::take(&mut this.copy);
                this.finish(TeeOutcome::Complete(copy));
            }
            Poll::Ready(Some(Err(_))) => this.finish(TeeOutcome::Incomplete),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The `Host` of a shadow copy: `-shadow` appended to the name, before any
/// port, as Envoy/Istio do (`app.example.com:8080` → `app.example.com-shadow:8080`).
pub fn shadow_host(host: &str) -> String {
    let (name, port) = if host.starts_with('[') {
        match host.find(']') {
            Some(end) => host.split_at(end + 1),
            None => (host, ""),
        }
    } else {
        match host.rfind(':') {
            Some(i) => host.split_at(i),
            None => (host, ""),
        }
    };
    format!("{name}-shadow{port}")
}

/// Starts a shadow copy of `up` (already prepared for the primary) to the
/// route's canary and returns the body to send to the primary: the client's
/// body unchanged, or teed when it must be copied. Every path that cannot
/// mirror (no slot, too large, no canary) just returns the plain body.
pub fn dispatch(
    shared: &std::sync::Arc<crate::proxy::service::ProxyShared>,
    snap: &std::sync::Arc<crate::dataplane::store::Snapshot>,
    idx: usize,
    up: &mut http::Request<()>,
    body: Incoming,
) -> crate::proxy::body::ProxyBody {
    use crate::proxy::body::ProxyBody;
    let (route, rt) = crate::proxy::service::snapshot_route(snap, idx);
    let (Some(policy), Some(canary)) = (&route.mirror, &rt.canary) else {
        return ProxyBody::streamed(body);
    };
    let declared_len = up
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared_len.is_some_and(|n| n > policy.max_body_bytes as u64) {
        rt.mirror.dropped_too_large.fetch_add(1, Ordering::Relaxed);
        return ProxyBody::streamed(body);
    }
    let Some(slot) = rt.mirror.try_acquire(policy.max_in_flight) else {
        return ProxyBody::streamed(body);
    };
    let mut headers = up.headers().clone();
    let host = headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(shadow_host)
        .and_then(|h| http::HeaderValue::from_str(&h).ok());
    if let Some(h) = host {
        headers.insert(http::header::HOST, h);
    }
    headers.insert("x-weir-mirror", http::HeaderValue::from_static("1"));
    let method = up.method().clone();
    let path = up
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let (primary_body, rx) = if body.is_end_stream() {
        (ProxyBody::streamed(body), None)
    } else {
        let (tee, rx) = TeeBody::new(body, policy.max_body_bytes);
        (ProxyBody::tee(tee), Some(rx))
    };
    // The copy speaks the canary backend's own protocol and TLS setting.
    let canary_spec = snap.spec.backends.get(&canary.name);
    let protocol = canary_spec.map_or(crate::config::UpstreamProtocol::Http1, |b| b.protocol);
    let tls = canary_spec.and_then(|b| b.tls.clone());
    let counters = rt.mirror.clone();
    let stats = rt.stats.clone();
    let metrics = rt.metrics.clone();
    let canary = canary.clone();
    let timeout = route.timeout;
    let shared = shared.clone();
    tokio::spawn(async move {
        let _slot = slot;
        let chunks = match rx {
            None => Vec::new(),
            Some(rx) => match rx.await {
                Ok(TeeOutcome::Complete(c)) => c,
                Ok(TeeOutcome::TooLarge) => {
                    counters.dropped_too_large.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Ok(TeeOutcome::Incomplete) | Err(_) => {
                    counters.dropped_incomplete.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            },
        };
        counters.sent.fetch_add(1, Ordering::Relaxed);
        let start = std::time::Instant::now();
        let outcome = send_copy(
            &shared,
            &canary,
            (protocol, tls.as_ref()),
            method,
            &path,
            headers,
            chunks,
            timeout,
        )
        .await;
        let now = std::time::Instant::now();
        let latency = now.duration_since(start);
        let failed = !matches!(outcome, Ok(status) if status < 500);
        stats.record(
            crate::stats::Role::Mirror,
            shared.now_sec(now),
            failed,
            latency.as_micros() as u64,
        );
        match outcome {
            Ok(status) => metrics.record(crate::stats::Role::Mirror, status, latency),
            Err(e) => metrics.record_proxy_error(crate::stats::Role::Mirror, e, latency),
        }
    });
    primary_body
}

/// Sends one shadow request and reads (then discards) its answer; returns
/// its status, or why no answer came (no endpoint, connect error, timeout).
#[allow(clippy::too_many_arguments)]
async fn send_copy(
    shared: &crate::proxy::service::ProxyShared,
    canary: &crate::proxy::upstream::Backend,
    (protocol, tls): (
        crate::config::UpstreamProtocol,
        Option<&crate::config::UpstreamTls>,
    ),
    method: http::Method,
    path: &str,
    mut headers: http::HeaderMap,
    chunks: Vec<Bytes>,
    timeout: std::time::Duration,
) -> Result<u16, crate::proxy::errors::ProxyError> {
    use crate::proxy::errors::ProxyError;
    use http_body_util::BodyExt;
    let Some(ep) = canary.pick(crate::proxy::service::random_u64()) else {
        return Err(ProxyError::NoEndpoint);
    };
    let _in_flight = crate::proxy::upstream::InFlight::start(ep.clone());
    let body: Bytes = if chunks.len() == 1 {
        chunks.into_iter().next().unwrap_or_default()
    } else {
        chunks.concat().into()
    };
    headers.insert(
        http::header::CONTENT_LENGTH,
        http::HeaderValue::from(body.len()),
    );
    let Ok(client) = shared.client.client_for(protocol, tls) else {
        return Err(ProxyError::Upstream);
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let uri = format!("{scheme}://{}{}", ep.authority, path);
    let Ok(uri) = uri.parse::<http::Uri>() else {
        return Err(ProxyError::BadRequest);
    };
    let mut req = http::Request::new(crate::proxy::body::ProxyBody::full(body));
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    let exchange = async {
        let resp = client
            .request(req)
            .await
            .map_err(|_| ProxyError::Upstream)?;
        let status = resp.status().as_u16();
        // Read the answer so the pooled connection can be reused; capped.
        let _ = http_body_util::Limited::new(resp.into_body(), 4 << 20)
            .collect()
            .await;
        Ok(status)
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(ProxyError::Timeout))
}
