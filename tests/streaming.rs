//! Bodies stream through the proxy: a 10 MiB upload and a 10 MiB download
//! never sit whole in memory.
//!
//! A test crate of its own, apart from `tests/it`: it measures the growth of
//! the process's peak RSS (VmHWM), which only this test may move; in the
//! shared crate any test running beside it would.

#[path = "it/support/mod.rs"]
mod support;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use support::*;

const SIZE: usize = 10 << 20;
const CHUNK: usize = 64 << 10;

/// Peak resident set size of this process, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_mib_up_and_down_stream_without_buffering() {
    let blue = echo("v1").await;
    let app = proxy(&one_route_config(blue.addr)).await;
    // Warm up: connections, buffers, lazy statics.
    let c = client();
    get_once(&c, app.proxy_addr(), "/bytes?n=1000", &[]).await;
    let before = peak_rss_kib();

    // Upload: the client produces the body chunk by chunk; the backend counts it.
    let chunk = Bytes::from(vec![b'u'; CHUNK]);
    let stream = futures_stream(SIZE / CHUNK, chunk);
    let body = StreamBody::new(stream);
    let up: Client<_, StreamBody<_>> = Client::builder(TokioExecutor::new()).build_http();
    let req = http::Request::post(format!("http://{}/echo", app.proxy_addr()))
        .header("content-length", SIZE.to_string())
        .body(body)
        .unwrap();
    let resp = up.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let doc: serde_json::Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(doc["bodyBytes"], SIZE as u64);

    // Download: consumed frame by frame.
    let resp = c
        .request(get(app.proxy_addr(), &format!("/bytes?n={SIZE}"), &[]))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got = 0usize;
    while let Some(f) = body.frame().await {
        got += f.unwrap().data_ref().map_or(0, |d| d.len());
    }
    assert_eq!(got, SIZE);

    let growth_kib = peak_rss_kib().saturating_sub(before);
    // Buffering either body whole would add at least 10 MiB; streaming adds
    // only socket and chunk buffers. 4 MiB leaves room for allocator noise.
    assert!(
        growth_kib < 4 * 1024,
        "peak RSS grew by {growth_kib} KiB while streaming 2×10 MiB"
    );
}

fn futures_stream(
    n: usize,
    chunk: Bytes,
) -> impl futures_core::Stream<Item = Result<Frame<Bytes>, std::convert::Infallible>> + Send + Unpin
{
    struct S(usize, Bytes);
    impl futures_core::Stream for S {
        type Item = Result<Frame<Bytes>, std::convert::Infallible>;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            if self.0 == 0 {
                return std::task::Poll::Ready(None);
            }
            self.0 -= 1;
            std::task::Poll::Ready(Some(Ok(Frame::data(self.1.clone()))))
        }
    }
    S(n, chunk)
}
