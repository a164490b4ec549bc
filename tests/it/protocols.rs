//! HTTP/2 (h2c), gRPC and WebSocket through the proxy.

use crate::proto_support;

use bytes::{Buf, Bytes};
use futures_util::{SinkExt, StreamExt};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use proto_support::*;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::{self, Message};
use weir::stats::Role;

type Body = BoxBody<Bytes, Infallible>;

async fn echo(version: &str) -> weir::echo::EchoHandle {
    echo_backend(version, Duration::ZERO).await
}

#[tokio::test]
async fn h2c_prior_knowledge_is_proxied_to_an_http1_backend() {
    let backend = echo("v1").await;
    let app = start(&one_route(backend.addr, "", "")).await;
    let stream = TcpStream::connect(app.proxy_addr()).await.unwrap();
    let mut s = h2(stream).await;
    // Several streams at once on the one connection.
    let mut calls = Vec::new();
    for i in 0..8 {
        let req = get_req_h2("http", "app.test", &format!("/echo?i={i}"));
        calls.push(s.send_request(req));
    }
    for c in calls {
        let a = read_answer(c.await.unwrap()).await;
        assert_eq!(a.status, 200, "{}", a.text());
        assert_eq!(a.version, http::Version::HTTP_2);
        let j = a.json();
        assert_eq!(j["headers"]["host"][0], "app.test");
        assert_eq!(j["headers"]["x-forwarded-proto"][0], "http");
    }
}

/// What the gRPC backend saw of the last call.
#[derive(Default, Debug, Clone)]
struct Seen {
    te: Option<String>,
    version: Option<http::Version>,
    request_trailer: Option<String>,
    message: Vec<u8>,
}

/// A gRPC-shaped h2c backend: `/test.Echo/Say` answers the message back
/// with `grpc-status: 0` in trailers, `/test.Echo/Fail` with status 13,
/// `/test.Echo/Missing` trailers-only with status 12.
async fn grpc_backend(seen: Arc<Mutex<Seen>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: http::Request<Incoming>| {
                    let seen = seen.clone();
                    async move { Ok::<_, Infallible>(grpc_answer(req, seen).await) }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

async fn grpc_answer(req: http::Request<Incoming>, seen: Arc<Mutex<Seen>>) -> http::Response<Body> {
    let path = req.uri().path().to_string();
    let te = req
        .headers()
        .get("te")
        .map(|v| v.to_str().unwrap_or("").to_string());
    let version = req.version();
    let collected = req.into_body().collect().await.unwrap();
    let request_trailer = collected
        .trailers()
        .and_then(|t| t.get("x-client-trailer"))
        .map(|v| v.to_str().unwrap_or("").to_string());
    let body = collected.to_bytes();
    let message = body.get(5..).unwrap_or_default().to_vec();
    *seen.lock().unwrap() = Seen {
        te,
        version: Some(version),
        request_trailer,
        message: message.clone(),
    };
    let mut resp = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc");
    if path.ends_with("/Missing") {
        resp = resp
            .header("grpc-status", "12")
            .header("grpc-message", "no such method");
        return resp.body(Full::new(Bytes::new()).boxed()).unwrap();
    }
    let status = if path.ends_with("/Fail") { "13" } else { "0" };
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", status.parse().unwrap());
    trailers.insert("grpc-message", "done".parse().unwrap());
    let frames = vec![
        Ok(Frame::data(grpc_frame(&message))),
        Ok(Frame::trailers(trailers)),
    ];
    resp.body(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(
        frames,
    ))))
    .unwrap()
}

/// A gRPC length-prefixed message (uncompressed).
fn grpc_frame(msg: &[u8]) -> Bytes {
    let mut f = vec![0u8];
    f.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    f.extend_from_slice(msg);
    Bytes::from(f)
}

/// A unary call's request: POST, gRPC headers, one message, and a request
/// trailer (to show trailers pass upstream too).
fn grpc_call(method: &str, msg: &[u8]) -> http::Request<Body> {
    let mut t = http::HeaderMap::new();
    t.insert("x-client-trailer", "yes".parse().unwrap());
    let frames = vec![Ok(Frame::data(grpc_frame(msg))), Ok(Frame::trailers(t))];
    http::Request::post(format!("http://grpc.test/test.Echo/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(
            frames,
        ))))
        .unwrap()
}

#[tokio::test]
async fn grpc_unary_calls_keep_trailers_both_ways_and_count_grpc_status() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let backend = grpc_backend(seen.clone()).await;
    let app = start(&one_route(backend, "    protocol: http2\n", "")).await;
    let stream = TcpStream::connect(app.proxy_addr()).await.unwrap();
    let mut s = h2::<_, Body>(stream).await;

    let a = read_answer(s.send_request(grpc_call("Say", b"hello")).await.unwrap()).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.headers["content-type"], "application/grpc");
    let mut body = a.body.clone();
    assert_eq!(body.get_u8(), 0);
    assert_eq!(body.get_u32() as usize, body.remaining());
    assert_eq!(&body[..], b"hello");
    let t = a.trailers.expect("trailers reached the client");
    assert_eq!(t["grpc-status"], "0");
    assert_eq!(t["grpc-message"], "done");
    let saw = seen.lock().unwrap().clone();
    assert_eq!(
        saw.te.as_deref(),
        Some("trailers"),
        "te: trailers kept for HTTP/2"
    );
    assert_eq!(
        saw.version,
        Some(http::Version::HTTP_2),
        "HTTP/2 to the backend"
    );
    assert_eq!(
        saw.request_trailer.as_deref(),
        Some("yes"),
        "request trailers forwarded"
    );
    assert_eq!(saw.message, b"hello");

    let a = read_answer(s.send_request(grpc_call("Fail", b"x")).await.unwrap()).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.trailers.expect("trailers")["grpc-status"], "13");

    let a = read_answer(s.send_request(grpc_call("Missing", b"x")).await.unwrap()).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.headers["grpc-status"], "12");

    // The rule: non-zero grpc-status (trailers or trailers-only) is a failure.
    let counted = eventually(Duration::from_secs(5), || async {
        let snap = app.shared.store.load();
        let w =
            snap.routes[0]
                .stats
                .snapshot(Role::Primary, app.shared.now_sec(Instant::now()), 60);
        w.requests == 3 && w.failures == 2
    })
    .await;
    let snap = app.shared.store.load();
    let w = snap.routes[0]
        .stats
        .snapshot(Role::Primary, app.shared.now_sec(Instant::now()), 60);
    assert!(counted, "3 calls, 2 failed expected; stats: {w:?}");
}

/// A WebSocket backend answering every text message with `<name>: <text>`.
async fn ws_backend(name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let svc = service_fn(move |mut req: http::Request<Incoming>| async move {
                    let Some(key) = req.headers().get("sec-websocket-key").cloned() else {
                        let mut r =
                            http::Response::new(Full::new(Bytes::from("not a websocket\n")));
                        *r.status_mut() = http::StatusCode::BAD_REQUEST;
                        return Ok::<_, Infallible>(r);
                    };
                    let on = hyper::upgrade::on(&mut req);
                    tokio::spawn(async move {
                        let Ok(up) = on.await else { return };
                        let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
                            TokioIo::new(up),
                            tungstenite::protocol::Role::Server,
                            None,
                        )
                        .await;
                        while let Some(Ok(m)) = ws.next().await {
                            match m {
                                Message::Text(t) => {
                                    let reply = format!("{name}: {}", t.as_str());
                                    if ws.send(Message::text(reply)).await.is_err() {
                                        return;
                                    }
                                }
                                Message::Close(_) => return,
                                _ => {}
                            }
                        }
                    });
                    let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
                    let r = http::Response::builder()
                        .status(101)
                        .header("connection", "Upgrade")
                        .header("upgrade", "websocket")
                        .header("sec-websocket-accept", accept)
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                    Ok(r)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .with_upgrades()
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn websocket_echo_through_the_proxy_follows_the_routing_decision() {
    let blue = ws_backend("blue").await;
    let green = ws_backend("green").await;
    let yaml = format!(
        "backends:\n  blue:\n    endpoints: [\"{blue}\"]\n  green:\n    endpoints: [\"{green}\"]\nroutes:\n  - name: app\n    primary: blue\n    canary: green\n    match:\n      - headers: {{ x-canary: {{ exact: insider }} }}\n"
    );
    let app = start(&yaml).await;
    for (canary, want) in [(false, "blue"), (true, "green")] {
        let tcp = TcpStream::connect(app.proxy_addr()).await.unwrap();
        let mut req = tungstenite::client::IntoClientRequest::into_client_request(format!(
            "ws://{}/chat",
            app.proxy_addr()
        ))
        .unwrap();
        if canary {
            req.headers_mut()
                .insert("x-canary", "insider".parse().unwrap());
        }
        let (mut ws, resp) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
        assert_eq!(resp.status(), 101);
        for i in 0..3 {
            ws.send(Message::text(format!("hello {i}"))).await.unwrap();
            let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
                .await
                .expect("echo in time")
                .expect("a message")
                .unwrap();
            assert_eq!(
                m.into_text().unwrap().as_str(),
                format!("{want}: hello {i}")
            );
        }
        ws.close(None).await.unwrap();
    }
    // A plain request on the same route is still an ordinary request.
    assert_eq!(plain_get(app.proxy_addr(), "/").await, Some(400));
}

/// `proxy.tunnelIdleTimeout`: a WebSocket that keeps talking outlives the
/// timeout many times over; one that goes silent is closed after it.
#[tokio::test]
async fn an_idle_websocket_tunnel_is_closed_and_a_busy_one_is_not() {
    let blue = ws_backend("blue").await;
    let yaml = format!(
        "proxy:\n  tunnelIdleTimeout: 400ms\nbackends:\n  blue:\n    endpoints: [\"{blue}\"]\nroutes:\n  - name: app\n    primary: blue\n"
    );
    let app = start(&yaml).await;
    let connect = || async {
        let tcp = TcpStream::connect(app.proxy_addr()).await.unwrap();
        let req = tungstenite::client::IntoClientRequest::into_client_request(format!(
            "ws://{}/chat",
            app.proxy_addr()
        ))
        .unwrap();
        let (ws, resp) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
        assert_eq!(resp.status(), 101);
        ws
    };

    // Busy: a message every 100 ms for 2 s (5 timeouts long), every one echoed.
    let mut ws = connect().await;
    for i in 0..20 {
        ws.send(Message::text(format!("tick {i}"))).await.unwrap();
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("echo in time")
            .expect("the tunnel is still open")
            .unwrap();
        assert_eq!(m.into_text().unwrap().as_str(), format!("blue: tick {i}"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Silent: the proxy closes the tunnel; the client sees the end of the stream.
    let end = tokio::time::timeout(Duration::from_secs(10), ws.next()).await;
    match end {
        Ok(None | Some(Err(_)) | Some(Ok(Message::Close(_)))) => {}
        Ok(Some(Ok(other))) => panic!("unexpected message {other:?}"),
        Err(_) => {}
    }
    assert!(end.is_ok(), "an idle tunnel was still open after 10 s");
}
