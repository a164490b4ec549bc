//! Retries to an HTTP/2 backend (DESIGN §11): a stream the backend refuses
//! (`REFUSED_STREAM`, RFC 9113 §8.7: it never processed the request) is
//! sent again, even a POST with its kept body and under a policy whose
//! conditions name no reset; a stream the backend reset after taking it
//! (`INTERNAL_ERROR`) is not, under the same policy.
//!
//! The backend is the `h2` crate's server, so the test decides exactly
//! which stream is refused.

use crate::support;

use bytes::Bytes;
use http_body_util::Full;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use support::*;
use tokio::net::TcpListener;

/// What the backend saw of the streams it answered: (method, attempt header, body).
type Answered = Arc<Mutex<Vec<(String, Option<String>, Vec<u8>)>>>;

/// An HTTP/2 backend that resets the first `reset_first` streams it gets
/// with `reason`, then answers 200 with `ok`.
async fn h2_backend(reset_first: usize, reason: h2::Reason) -> (SocketAddr, Answered) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answered: Answered = Arc::default();
    let seen = answered.clone();
    let streams = Arc::new(Mutex::new(0usize));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (seen, streams) = (seen.clone(), streams.clone());
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    let n = {
                        let mut s = streams.lock().unwrap();
                        *s += 1;
                        *s
                    };
                    if n <= reset_first {
                        respond.send_reset(reason);
                        continue;
                    }
                    let seen = seen.clone();
                    tokio::spawn(async move {
                        let (parts, mut body) = req.into_parts();
                        let mut got = Vec::new();
                        while let Some(Ok(chunk)) = body.data().await {
                            let _ = body.flow_control().release_capacity(chunk.len());
                            got.extend_from_slice(&chunk);
                        }
                        let attempt = parts
                            .headers
                            .get("x-weir-attempt")
                            .map(|v| v.to_str().unwrap().to_string());
                        seen.lock()
                            .unwrap()
                            .push((parts.method.to_string(), attempt, got));
                        let resp = http::Response::builder().status(200).body(()).unwrap();
                        if let Ok(mut tx) = respond.send_response(resp, false) {
                            let _ = tx.send_data(Bytes::from_static(b"ok"), true);
                        }
                    });
                }
            });
        }
    });
    (addr, answered)
}

fn config(backend: SocketAddr) -> String {
    format!(
        "backends:
  app:
    endpoints: [\"{backend}\"]
    protocol: http2
routes:
  - name: app
    primary: app
    retries: {{ attempts: 2, on: [5xx], maxBodyBytes: 1024, backoff: {{ base: 1ms, max: 1ms }} }}
"
    )
}

fn post(addr: SocketAddr, body: &'static str) -> http::Request<Full<Bytes>> {
    http::Request::post(format!("http://{addr}/submit"))
        .header("host", "app.test")
        .header("content-length", body.len().to_string())
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap()
}

async fn retries_text(app: &weir::app::RunningApp) -> String {
    get_once(&client(), app.admin_addr, "/metrics", &[])
        .await
        .text()
        .lines()
        .filter(|l| l.starts_with("weir_retries_total{"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn a_refused_stream_is_sent_again_even_for_a_post_with_its_body() {
    let (backend, answered) = h2_backend(1, h2::Reason::REFUSED_STREAM).await;
    let app = proxy(&config(backend)).await;
    let r = send(&client(), post(app.proxy_addr(), "payload")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "ok");
    let seen = answered.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![("POST".into(), Some("2".into()), b"payload".to_vec())],
        "the refused stream was never processed; the second attempt carried the whole body"
    );
    let retries = retries_text(&app).await;
    assert!(
        retries.lines().any(|l| l.contains("role=\"primary\"")
            && l.contains("reason=\"refused-stream\"")
            && l.ends_with(" 1")),
        "one refused-stream retry counted:\n{retries}"
    );
}

#[tokio::test]
async fn a_stream_reset_after_the_backend_took_it_is_not_sent_again() {
    let (backend, answered) = h2_backend(1, h2::Reason::INTERNAL_ERROR).await;
    let app = proxy(&config(backend)).await;
    let r = send(&client(), post(app.proxy_addr(), "payload")).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(answered.lock().unwrap().is_empty(), "no second attempt");
    let retries = retries_text(&app).await;
    assert!(
        !retries.lines().any(|l| !l.ends_with(" 0")),
        "no retry counted:\n{retries}"
    );
    // The next request is answered: the backend only reset one stream.
    let r = send(&client(), post(app.proxy_addr(), "again")).await;
    assert_eq!(r.status, 200, "{}", r.text());
}
