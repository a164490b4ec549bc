//! The routes every weir serves whatever its features: the probes
//! (`/healthz`, `/readyz`), `/metrics`, `/openapi.json`, the event
//! stream `/api/v1/events` and `/api/v1/whoami` (what the presented token
//! may do).

use super::api::{
    full, json_response, raw_json, ApiError, ApiResponse, ApiState, Auth, ReadinessCheck, RouteDef,
};
use super::api::{OPENAPI_JSON, SSE_KEEPALIVE};
use super::events::StreamSlot;
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Method, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

use crate::dataplane::providers::ProviderBoard;
use crate::wire::access::WhoAmI;
use crate::wire::probe::Readiness;
use crate::wire::providers::ProviderStatusBrief;

/// The core routes, first in the table.
pub static ROUTES: &[RouteDef] = &[
    RouteDef {
        method: Method::GET,
        path: "/healthz",
        auth: Auth::Probe,
        handler: |_, _| {
            Box::pin(async {
                Ok(json_response(
                    StatusCode::OK,
                    &serde_json::json!({"status": "ok"}),
                ))
            })
        },
    },
    RouteDef {
        method: Method::GET,
        path: "/readyz",
        auth: Auth::Probe,
        handler: |s, r| Box::pin(async move { Ok(readyz(&s, r.host_allowed)) }),
    },
    RouteDef {
        method: Method::GET,
        path: "/metrics",
        auth: Auth::Token,
        handler: |s, _| Box::pin(async move { Ok(metrics(&s)) }),
    },
    RouteDef {
        method: Method::GET,
        path: "/openapi.json",
        auth: Auth::Token,
        handler: |_, _| {
            Box::pin(async {
                Ok(raw_json(
                    StatusCode::OK,
                    Bytes::from_static(OPENAPI_JSON.as_bytes()),
                ))
            })
        },
    },
    RouteDef {
        method: Method::GET,
        path: "/api/v1/whoami",
        auth: Auth::Token,
        handler: |s, r| {
            Box::pin(async move {
                Ok(json_response(
                    StatusCode::OK,
                    &WhoAmI {
                        access: r.access,
                        token_required: s.token.is_some(),
                    },
                ))
            })
        },
    },
    RouteDef {
        method: Method::GET,
        path: "/api/v1/events",
        auth: Auth::Token,
        handler: |s, r| Box::pin(async move { events(&s, r.peer) }),
    },
];

/// `/readyz`: the wire type its clients parse (`wire::probe::Readiness`). Asked
/// by a name `admin.allowedHosts` does not list, it answers the status alone
/// (no table version, provider or lease detail).
fn readyz(s: &ApiState, host_allowed: bool) -> ApiResponse {
    let (code, mut doc) = readiness(s);
    if !host_allowed {
        doc.table_version = None;
        doc.reason = None;
        doc.providers.clear();
    }
    json_response(code, &doc)
}

fn readiness(s: &ApiState) -> (StatusCode, Readiness) {
    let providers: Vec<ProviderStatusBrief> = s
        .ext
        .get::<std::sync::Arc<ProviderBoard>>()
        .map(|b| {
            b.list()
                .into_iter()
                .map(|p| ProviderStatusBrief {
                    provider: p.provider,
                    connected: p.connected,
                    last_error: p.last_error,
                })
                .collect()
        })
        .unwrap_or_default();
    // In a fleet, a replica without a valid etcd lease drives nothing: not ready
    // (it still proxies).
    if let Some(reason) = s.ext.get::<ReadinessCheck>().and_then(|c| (c.0)(s)) {
        if s.ready.load(Ordering::Acquire) {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Readiness {
                    status: "no-lease".into(),
                    table_version: None,
                    reason: Some(reason),
                    providers,
                },
            );
        }
    }
    if s.ready.load(Ordering::Acquire) {
        (
            StatusCode::OK,
            Readiness {
                status: "ready".into(),
                table_version: Some(s.store.load().version),
                reason: None,
                providers,
            },
        )
    } else {
        let status = if *s.shutdown.borrow() {
            "draining"
        } else {
            "starting"
        };
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Readiness {
                status: status.into(),
                table_version: None,
                reason: None,
                providers,
            },
        )
    }
}

fn metrics(s: &ApiState) -> ApiResponse {
    let text = s.metrics.render(&s.store);
    let mut r = Response::new(full(text));
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

/// A body fed by a channel (the SSE stream); ends when the sender is gone.
struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
    /// The client's place among its streams, given back with the body.
    _slot: StreamSlot,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

/// `/api/v1/events`: the event stream, at most
/// [`MAX_EVENT_STREAMS_PER_CLIENT`](super::api::MAX_EVENT_STREAMS_PER_CLIENT)
/// open per client address (429 beyond).
fn events(s: &ApiState, peer: SocketAddr) -> Result<ApiResponse, ApiError> {
    let Some(slot) = s.event_streams.open(peer.ip()) else {
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too-many-streams",
            None,
            format!(
                "{} already holds {} event streams, the most one client may; close one first",
                peer.ip(),
                s.event_streams.limit()
            ),
        );
        e.headers
            .push((http::header::RETRY_AFTER, HeaderValue::from_static("5")));
        return Err(e);
    };
    // Subscribe before answering so that nothing published after the client
    // has seen the response head is missed.
    let mut rx = s.events.subscribe();
    let mut shutdown = s.shutdown.clone();
    let (tx, body_rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        // A stream opened while draining ends at once.
        if *shutdown.borrow_and_update() {
            return;
        }
        if tx
            .send(Bytes::from_static(b"retry: 2000\n: connected\n\n"))
            .await
            .is_err()
        {
            return;
        }
        let mut keepalive = tokio::time::interval(SSE_KEEPALIVE);
        keepalive.tick().await;
        loop {
            let chunk = tokio::select! {
                ev = rx.recv() => match ev {
                    Ok(e) => Bytes::from(e.to_sse()),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => Bytes::from(format!(
                        "event: lagged\ndata: {{\"missed\":{n}}}\n\n"
                    )),
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                },
                _ = keepalive.tick() => Bytes::from_static(b": keepalive\n\n"),
                _ = shutdown.changed() => break,
                _ = tx.closed() => break,
            };
            if tx.send(chunk).await.is_err() {
                break;
            }
        }
    });
    let mut r = Response::new(
        ChannelBody {
            rx: body_rx,
            _slot: slot,
        }
        .boxed(),
    );
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(r)
}
