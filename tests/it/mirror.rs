//! Mirroring end to end: shadow copies reach the canary with the
//! `-shadow` host, the client only sees the primary, a slow or dead mirror
//! target never hurts the primary, and large bodies are not mirrored.

use crate::support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::*;
use weir::app::RunningApp;
use weir::echo::EchoHandle;
use weir::stats::Role;

/// The Host and x-weir-mirror of every request a [`recorder`] got.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// A backend that records the Host and x-weir-mirror of every request.
async fn recorder() -> (std::net::SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let s2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = l.accept().await {
            let seen = s2.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let h = |n: &str| {
                            req.headers()
                                .get(n)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_string()
                        };
                        seen.lock().unwrap().push((h("host"), h("x-weir-mirror")));
                        let _ = req.into_body().collect().await;
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::from("shadow\n"),
                        )))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

/// A proxy whose route sends to a primary (`v1`) and mirrors `weight` %
/// of its requests to a [`recorder`].
async fn mirrored(weight: u32) -> (RunningApp, EchoHandle, Seen) {
    let blue = echo("v1").await;
    let (shadow, seen) = recorder().await;
    let app = proxy(&two_slot_config(
        blue.addr,
        shadow,
        &format!("    mirror: {{ weight: {weight} }}\n"),
    ))
    .await;
    (app, blue, seen)
}

/// Whether the recorder ends up with exactly `n` copies (within 10 s).
async fn copies_reach(seen: &Seen, n: usize) -> bool {
    eventually(Duration::from_secs(10), || {
        let got = seen.lock().unwrap().len();
        async move { got == n }
    })
    .await
}

#[tokio::test]
async fn half_of_4000_requests_are_mirrored_with_shadow_host() {
    let (app, _blue, seen) = mirrored(50).await;
    let c = client();
    const N: u64 = 4000;
    for _ in 0..N {
        let r = get_once(&c, app.proxy_addr(), "/", &[("host", "shop.test:8080")]).await;
        assert_eq!(
            (r.status, r.version()),
            (200, Some("v1")),
            "client only sees the primary"
        );
    }
    let counters = app.store.load().routes[0].mirror.clone();
    let done = eventually(Duration::from_secs(20), || {
        let n = seen.lock().unwrap().len() as u64;
        let sent = counters.sent.load(Ordering::Relaxed);
        async move { n == sent }
    })
    .await;
    assert!(done, "mirror copies still in flight");
    let seen = seen.lock().unwrap().clone();
    let n = seen.len() as u64;
    let (lo, hi) = binomial_bounds(N, 0.5, Z_9999);
    assert!(
        (lo..=hi).contains(&n),
        "{n} copies of {N}; bound {lo}..={hi}"
    );
    assert!(
        seen.iter()
            .all(|(h, m)| h == "shop.test-shadow:8080" && m == "1"),
        "{:?}",
        &seen[..3]
    );
    let stats = app.store.route_stats("app").unwrap();
    let s = stats
        .snapshot(Role::Mirror, app.shared.now_sec(Instant::now()), 600)
        .summary();
    assert_eq!(s.requests, n, "mirror answers recorded as role mirror");
}

#[tokio::test]
async fn a_client_cannot_make_a_real_request_look_like_shadow_traffic() {
    let (app, _blue, seen) = mirrored(100).await;
    let c = client();
    let forged = [
        ("host", "shop.test"),
        ("x-weir-mirror", "1"),
        ("x-weir-other", "x"),
    ];
    let r = get_once(&c, app.proxy_addr(), "/echo", &forged).await;
    assert_eq!((r.status, r.version()), (200, Some("v1")));
    let headers = &r.json()["headers"];
    assert!(headers.get("x-weir-mirror").is_none(), "{headers}");
    assert!(headers.get("x-weir-other").is_none(), "{headers}");
    // The shadow copy is still marked, by weir.
    assert!(copies_reach(&seen, 1).await, "no shadow copy");
    assert_eq!(seen.lock().unwrap()[0].1, "1");
}

async fn primary_p99_ms(app: &RunningApp) -> f64 {
    let stats = app.store.route_stats("app").unwrap();
    stats
        .snapshot(Role::Primary, app.shared.now_sec(Instant::now()), 600)
        .summary()
        .p99_ms
        .unwrap()
}

#[tokio::test]
async fn a_slow_or_dead_mirror_never_hurts_the_primary() {
    let blue = echo("v1").await;
    let slow = echo_with("v2", 0.0, Duration::from_secs(2)).await;
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    for target in [slow.addr, dead] {
        let app = proxy(&two_slot_config(
            blue.addr,
            target,
            "    mirror: { weight: 100, maxInFlight: 64 }\n",
        ))
        .await;
        let c = client();
        for _ in 0..300 {
            let r = get_once(&c, app.proxy_addr(), "/", &[]).await;
            assert_eq!(r.status, 200, "primary answer with mirror target {target}");
        }
        // Were the mirror awaited on the primary path, the primary's p99
        // would be ≥ 2000 ms (slow) or include connect errors (dead).
        let p99 = primary_p99_ms(&app).await;
        assert!(
            p99 < 500.0,
            "primary p99 {p99} ms with mirror target {target}"
        );
        let rt = &app.store.load().routes[0];
        let started =
            rt.mirror.sent.load(Ordering::Relaxed) + rt.mirror.dropped_busy.load(Ordering::Relaxed);
        assert_eq!(
            started, 300,
            "every request was mirrored or counted as dropped"
        );
    }
}

#[tokio::test]
async fn a_5_mib_upload_goes_to_primary_and_is_not_mirrored() {
    let (app, _blue, seen) = mirrored(100).await;
    let c = client();
    const SIZE: usize = 5 << 20;
    let req = http::Request::post(format!("http://{}/echo", app.proxy_addr()))
        .body(Full::new(Bytes::from(vec![b'x'; SIZE])))
        .unwrap();
    let r = send(&c, req).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["bodyBytes"], SIZE as u64);
    // A small body is mirrored (the body is copied too).
    let req = http::Request::post(format!("http://{}/echo", app.proxy_addr()))
        .body(Full::new(Bytes::from_static(b"small")))
        .unwrap();
    assert_eq!(send(&c, req).await.status, 200);
    let rt = app.store.load().routes[0].mirror.clone();
    assert!(copies_reach(&seen, 1).await);
    assert_eq!(rt.dropped_too_large.load(Ordering::Relaxed), 1);
    assert_eq!(rt.sent.load(Ordering::Relaxed), 1);

    // Chunked (no Content-Length): the tee notices the cap while streaming.
    let chunks: Vec<Result<hyper::body::Frame<Bytes>, std::convert::Infallible>> = (0..32)
        .map(|_| Ok(hyper::body::Frame::data(Bytes::from(vec![b'y'; 64 << 10]))))
        .collect();
    let body = http_body_util::StreamBody::new(futures_iter(chunks));
    let streaming: hyper_util::client::legacy::Client<_, _> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http();
    let req = http::Request::post(format!("http://{}/echo", app.proxy_addr()))
        .body(body)
        .unwrap();
    let resp = streaming.request(req).await.unwrap();
    let doc: serde_json::Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(
        doc["bodyBytes"],
        32 * (64 << 10) as u64,
        "primary got the whole chunked body"
    );
    assert!(
        eventually(Duration::from_secs(10), || {
            let n = rt.dropped_too_large.load(Ordering::Relaxed);
            async move { n == 2 }
        })
        .await
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the 2 MiB chunked body was not mirrored"
    );
}

fn futures_iter<T: Unpin>(items: Vec<T>) -> impl futures_core::Stream<Item = T> + Unpin {
    struct S<T>(std::collections::VecDeque<T>);
    impl<T: Unpin> futures_core::Stream for S<T> {
        type Item = T;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<T>> {
            std::task::Poll::Ready(self.0.pop_front())
        }
    }
    S(items.into())
}
