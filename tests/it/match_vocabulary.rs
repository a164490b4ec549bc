//! The facts of the connection that Istio's match vocabulary reads
//! (`port`, `scheme`, `authority`) come from the listener the request
//! arrived on, on both HTTP/1 transports and over TLS. The rest of the
//! vocabulary (`withoutHeaders`, `ignoreUriCase`) is held to the same answers
//! on both transports by `tests/it/parity.rs`; here a hit is checked to reach
//! the canary.

use crate::proto_support;

use proto_support::support::{client, send, Raw};
use proto_support::*;
use std::net::SocketAddr;
use weir::app::RunningApp;

/// Two clear-text listeners (`a`, `b`), `v1` primary and `v2` canary on
/// route `app` with the given `match:` list (flow YAML).
fn two_listeners(blue: SocketAddr, green: SocketAddr, fast: bool, matches: &str) -> String {
    format!(
        "listeners:
  - {{ name: a, address: 127.0.0.1:0 }}
  - {{ name: b, address: 127.0.0.1:0 }}
proxy: {{ http1FastPath: {fast} }}
backends:
  blue: {{ endpoints: [\"{blue}\"] }}
  green: {{ endpoints: [\"{green}\"] }}
routes:
  - name: app
    primary: blue
    canary: green
    match: {matches}
"
    )
}

fn listener(app: &RunningApp, name: &str) -> SocketAddr {
    app.listeners
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, a)| *a)
        .expect("listener")
}

/// The version that answered `GET /version` with `Host: host` on `addr`.
async fn version(addr: SocketAddr, host: &str, extra: &str) -> String {
    let mut raw = Raw::to(addr).await;
    let got = raw
        .send(
            &format!("GET /version HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n"),
            false,
        )
        .await;
    assert_eq!(got.status, 200, "{}", got.head);
    String::from_utf8_lossy(&got.body).trim().to_string()
}

async fn patch_match(app: &RunningApp, body: &str) {
    let req = http::Request::builder()
        .method(http::Method::PATCH)
        .uri(format!("http://{}/api/v1/routes/app", app.admin_addr))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .expect("request");
    let r = send(&client(), req).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test]
async fn port_is_the_listeners_and_authority_is_as_sent_on_both_transports() {
    let (blue, green) = (
        echo_backend("v1", Default::default()).await,
        echo_backend("v2", Default::default()).await,
    );
    for fast in [true, false] {
        // The port is known once bound: the rule is written through the API.
        let app = start(&two_listeners(
            blue.addr,
            green.addr,
            fast,
            "[ { port: 1 } ]",
        ))
        .await;
        let (a, b) = (listener(&app, "a"), listener(&app, "b"));
        assert_eq!(
            version(b, "app.test", "").await,
            "v1",
            "fast {fast}: port 1 is no listener's"
        );
        patch_match(&app, &format!(r#"{{"match": [{{"port": {}}}]}}"#, b.port())).await;
        assert_eq!(
            version(b, "app.test", "").await,
            "v2",
            "fast {fast}: on listener b"
        );
        assert_eq!(
            version(a, "app.test", "").await,
            "v1",
            "fast {fast}: on listener a"
        );

        patch_match(
            &app,
            r#"{"match": [{"authority": {"exact": "app.test:81"}}, {"scheme": {"exact": "https"}}]}"#,
        )
        .await;
        assert_eq!(
            version(a, "app.test:81", "").await,
            "v2",
            "fast {fast}: authority with port"
        );
        assert_eq!(
            version(a, "app.test", "").await,
            "v1",
            "fast {fast}: authority without port"
        );
        assert_eq!(
            version(a, "app.test", "X-Forwarded-Proto: https\r\n").await,
            "v1",
            "fast {fast}: a client's X-Forwarded-Proto is not the scheme"
        );

        patch_match(
            &app,
            r#"{"match": [{"uri": {"prefix": "/VERSION"}, "ignoreUriCase": true, "withoutHeaders": {"x-internal": {"present": true}}}]}"#,
        )
        .await;
        assert_eq!(
            version(a, "app.test", "").await,
            "v2",
            "fast {fast}: ignoreUriCase"
        );
        assert_eq!(
            version(a, "app.test", "X-Internal: 1\r\n").await,
            "v1",
            "fast {fast}: withoutHeaders"
        );

        // Refused through the API too, naming the field.
        let req = http::Request::builder()
            .method(http::Method::PATCH)
            .uri(format!("http://{}/api/v1/routes/app", app.admin_addr))
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(
                r#"{"match": [{"sourceLabels": {"app": "web"}}]}"#,
            )))
            .unwrap();
        let r = send(&client(), req).await;
        assert_eq!(r.status, 422, "{}", r.text());
        assert!(
            r.text().contains("sourceLabels") && r.text().contains("sourceIp"),
            "{}",
            r.text()
        );
        app.shutdown().await;
    }
}

#[tokio::test]
async fn scheme_is_https_on_a_tls_listener_only() {
    let ca = Ca::new();
    let dir = TempDir::new("match-scheme");
    let leaf = ca.leaf(&["app.test"]);
    dir.write("app.crt", &leaf.cert_pem);
    dir.write("app.key", &leaf.key_pem);
    let (blue, green) = (
        echo_backend("v1", Default::default()).await,
        echo_backend("v2", Default::default()).await,
    );
    let yaml = format!(
        "listeners:
  - {{ name: http, address: 127.0.0.1:0 }}
  - {{ name: https, address: 127.0.0.1:0, tls: {{ certFile: app.crt, keyFile: app.key }} }}
backends:
  blue: {{ endpoints: [\"{}\"] }}
  green: {{ endpoints: [\"{}\"] }}
routes:
  - name: app
    primary: blue
    canary: green
    match: [ {{ scheme: {{ exact: https }} }} ]
",
        blue.addr, green.addr
    );
    let app = start_in(&yaml, &dir.0).await;
    assert_eq!(version(listener(&app, "http"), "app.test", "").await, "v1");
    for alpn in [&b"http/1.1"[..], &b"h2"[..]] {
        let cfg = ca.client_config(&[&rustls::version::TLS13], &[alpn]);
        let tls = tls_connect(listener(&app, "https"), cfg, "app.test")
            .await
            .unwrap();
        let a = if alpn == b"h2" {
            let mut s = h2(tls).await;
            read_answer(
                s.send_request(get_req_h2("https", "app.test", "/version"))
                    .await
                    .unwrap(),
            )
            .await
        } else {
            let mut s = h1(tls).await;
            read_answer(
                s.send_request(get_req("app.test", "/version"))
                    .await
                    .unwrap(),
            )
            .await
        };
        assert_eq!(a.status, 200, "{}", a.text());
        assert_eq!(
            a.text().trim(),
            "v2",
            "over {}",
            String::from_utf8_lossy(alpn)
        );
    }
    app.shutdown().await;
}
