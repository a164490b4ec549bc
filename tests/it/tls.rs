//! TLS termination and origination end to end, with certificates
//! made in the test by rcgen.

use crate::proto_support;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use proto_support::*;
use rustls::pki_types::pem::PemObject;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// A TLS listener config followed by one route to `backend`.
fn tls_config(tls_block: &str, backend: SocketAddr) -> String {
    format!(
        "listeners:\n  - name: https\n    address: 127.0.0.1:0\n    tls: {tls_block}\n{}",
        one_route(backend, "", "")
    )
}

/// A proxy terminating TLS with one certificate for `app.test` (`app.crt`
/// and `app.key` in `dir`, issued by `ca`) in front of an echo backend.
struct AppTest {
    app: weir::app::RunningApp,
    /// Held: the backend stops when dropped.
    _backend: weir::echo::EchoHandle,
    /// The certificate files, which a test may replace.
    dir: TempDir,
    leaf: Leaf,
    ca: Ca,
}

impl AppTest {
    async fn start(tag: &str) -> Self {
        let ca = Ca::new();
        let dir = TempDir::new(tag);
        let leaf = ca.leaf(&["app.test"]);
        dir.write("app.crt", &leaf.cert_pem);
        dir.write("app.key", &leaf.key_pem);
        let backend = echo_backend("v1", Duration::ZERO).await;
        let app = start_in(
            &tls_config("{ certFile: app.crt, keyFile: app.key }", backend.addr),
            &dir.0,
        )
        .await;
        AppTest {
            app,
            _backend: backend,
            dir,
            leaf,
            ca,
        }
    }
}

#[tokio::test]
async fn https_request_is_proxied_with_x_forwarded_proto_https() {
    let AppTest { app, ca, leaf, .. } = &AppTest::start("tls-basic").await;
    let cfg = ca.client_config(&[&rustls::version::TLS13], &[b"http/1.1"]);
    let tls = tls_connect(app.proxy_addr(), cfg, "app.test")
        .await
        .unwrap();
    assert_eq!(peer_leaf(&tls), leaf.der);
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let mut s = h1(tls).await;
    let a = read_answer(s.send_request(get_req("app.test", "/echo")).await.unwrap()).await;
    assert_eq!(a.status, 200, "{}", a.text());
    let j = a.json();
    assert_eq!(j["headers"]["x-forwarded-proto"][0], "https");
    assert_eq!(j["headers"]["x-forwarded-host"][0], "app.test");
}

#[tokio::test]
async fn h2_over_tls_is_negotiated_by_alpn_and_proxied() {
    let AppTest { app, ca, .. } = &AppTest::start("tls-h2").await;
    let cfg = ca.client_config(&[&rustls::version::TLS13], &[b"h2", b"http/1.1"]);
    let tls = tls_connect(app.proxy_addr(), cfg, "app.test")
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let mut s = h2(tls).await;
    for _ in 0..3 {
        let a = read_answer(
            s.send_request(get_req_h2("https", "app.test", "/echo"))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(a.status, 200, "{}", a.text());
        assert_eq!(a.version, http::Version::HTTP_2);
        let j = a.json();
        assert_eq!(j["headers"]["x-forwarded-proto"][0], "https");
        // The HTTP/1.1 backend gets a Host made from the :authority.
        assert_eq!(j["headers"]["host"][0], "app.test");
    }
}

#[tokio::test]
async fn sni_picks_the_certificate_that_covers_the_name() {
    let ca = Ca::new();
    let dir = TempDir::new("tls-sni");
    let a = ca.leaf(&["a.test"]);
    let b = ca.leaf(&["*.b.test", "b.test"]);
    dir.write("a.crt", &a.cert_pem);
    dir.write("a.key", &a.key_pem);
    dir.write("b.crt", &b.cert_pem);
    dir.write("b.key", &b.key_pem);
    let backend = echo_backend("v1", Duration::ZERO).await;
    let block = "{ certificates: [ { certFile: a.crt, keyFile: a.key }, { certFile: b.crt, keyFile: b.key } ] }";
    let app = start_in(&tls_config(block, backend.addr), &dir.0).await;
    let cfg = ca.client_config(&[&rustls::version::TLS13], &[b"http/1.1"]);
    for (sni, want) in [("a.test", &a.der), ("x.b.test", &b.der), ("b.test", &b.der)] {
        let tls = tls_connect(app.proxy_addr(), cfg.clone(), sni)
            .await
            .unwrap();
        assert_eq!(&peer_leaf(&tls), want, "SNI {sni}");
        let mut s = h1(tls).await;
        let r = read_answer(s.send_request(get_req(sni, "/")).await.unwrap()).await;
        assert_eq!(r.status, 200);
    }
    // No SNI at all: the first certificate is the default.
    let mut no_sni = (*ca.client_config(&[&rustls::version::TLS13], &[])).clone();
    no_sni.enable_sni = false;
    let tls = tls_connect(app.proxy_addr(), Arc::new(no_sni), "a.test")
        .await
        .unwrap();
    assert_eq!(peer_leaf(&tls), a.der);
}

#[tokio::test]
async fn a_replaced_certificate_serves_new_connections_while_open_ones_keep_working() {
    let t = AppTest::start("tls-reload").await;
    let (app, ca, dir, old) = (&t.app, &t.ca, &t.dir, &t.leaf);
    let cfg = ca.client_config(&[&rustls::version::TLS13], &[b"http/1.1"]);
    let open = tls_connect(app.proxy_addr(), cfg.clone(), "app.test")
        .await
        .unwrap();
    assert_eq!(peer_leaf(&open), old.der);
    let mut open = h1(open).await;
    let r = read_answer(open.send_request(get_req("app.test", "/")).await.unwrap()).await;
    assert_eq!(r.status, 200);

    // Replace key first, then certificate (a checker may see the pair
    // mismatched in between: it must keep the old one then).
    let new = ca.leaf(&["app.test"]);
    dir.write("app.key", &new.key_pem);
    dir.write("app.crt", &new.cert_pem);
    let addr = app.proxy_addr();
    let swapped = eventually(Duration::from_secs(15), || {
        let cfg = cfg.clone();
        let want = new.der.clone();
        async move {
            match tls_connect(addr, cfg, "app.test").await {
                Ok(s) => peer_leaf(&s) == want,
                Err(_) => false,
            }
        }
    })
    .await;
    assert!(swapped, "new connections never got the new certificate");
    // The connection opened before the swap still works.
    for _ in 0..3 {
        let r = read_answer(open.send_request(get_req("app.test", "/")).await.unwrap()).await;
        assert_eq!(r.status, 200);
    }
}

#[tokio::test]
async fn tls_1_2_and_1_3_handshakes_work_and_tls_1_1_is_refused() {
    let AppTest { app, ca, .. } = &AppTest::start("tls-versions").await;
    for (v, want) in [
        (&rustls::version::TLS12, rustls::ProtocolVersion::TLSv1_2),
        (&rustls::version::TLS13, rustls::ProtocolVersion::TLSv1_3),
    ] {
        let cfg = ca.client_config(&[v], &[b"http/1.1"]);
        let tls = tls_connect(app.proxy_addr(), cfg, "app.test")
            .await
            .unwrap();
        assert_eq!(tls.get_ref().1.protocol_version(), Some(want));
        let mut s = h1(tls).await;
        let r = read_answer(s.send_request(get_req("app.test", "/")).await.unwrap()).await;
        assert_eq!(r.status, 200);
    }
    // rustls cannot offer TLS 1.1, so send a TLS 1.1 ClientHello by hand:
    // the proxy must answer with a fatal protocol_version alert.
    let mut s = TcpStream::connect(app.proxy_addr()).await.unwrap();
    s.write_all(&tls11_client_hello("app.test")).await.unwrap();
    let (reply, _) = read_until_close(&mut s, Duration::from_secs(10)).await;
    assert!(reply.len() >= 7, "no alert: {reply:?}");
    assert_eq!(reply[0], 0x15, "not an alert record: {reply:?}");
    assert_eq!(
        &reply[5..7],
        &[2, 70],
        "not a fatal protocol_version alert: {reply:?}"
    );
    // And the listener still serves.
    let cfg = ca.client_config(&[&rustls::version::TLS13], &[b"http/1.1"]);
    assert!(tls_connect(app.proxy_addr(), cfg, "app.test").await.is_ok());
}

/// A TLS 1.1 ClientHello (legacy version 3.2, no supported_versions
/// extension) with SNI, signature algorithms and two TLS 1.1 cipher suites.
fn tls11_client_hello(sni: &str) -> Vec<u8> {
    let name = sni.as_bytes();
    let mut exts = Vec::new();
    let list_len = (name.len() + 3) as u16;
    exts.extend_from_slice(&[0x00, 0x00]); // server_name
    exts.extend_from_slice(&(list_len + 2).to_be_bytes());
    exts.extend_from_slice(&list_len.to_be_bytes());
    exts.push(0); // host_name
    exts.extend_from_slice(&(name.len() as u16).to_be_bytes());
    exts.extend_from_slice(name);
    // signature_algorithms (ecdsa_secp256r1_sha256, rsa_pkcs1_sha256), as
    // clients capped at 1.1 by configuration send it; without it rustls
    // fails earlier, on the certificate choice, with handshake_failure.
    exts.extend_from_slice(&[0x00, 0x0d, 0x00, 0x06, 0x00, 0x04, 0x04, 0x03, 0x04, 0x01]);
    let mut body = vec![0x03, 0x02]; // client_version TLS 1.1
    body.extend_from_slice(&[0x42; 32]); // random
    body.push(0); // session id
    body.extend_from_slice(&[0x00, 0x04, 0xc0, 0x13, 0x00, 0x2f]);
    body.extend_from_slice(&[0x01, 0x00]); // compression: null
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut hs = vec![0x01];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 0x03, 0x02];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

#[test]
fn bad_tls_files_are_config_errors_with_field_paths() {
    let ca = Ca::new();
    let dir = TempDir::new("tls-config");
    let leaf = ca.leaf(&["app.test"]);
    let other = ca.leaf(&["other.test"]);
    dir.write("app.crt", &leaf.cert_pem);
    dir.write("app.key", &leaf.key_pem);
    dir.write("other.key", &other.key_pem);
    dir.write("junk.pem", "not pem at all\n");
    let yaml = "listeners:
  - name: a
    address: 127.0.0.1:0
    tls: { certFile: missing.crt, keyFile: app.key }
  - name: b
    address: 127.0.0.1:0
    tls:
      certificates:
        - { certFile: app.crt, keyFile: app.key }
        - { certFile: app.crt, keyFile: other.key }
        - { certFile: junk.pem, keyFile: app.key }
  - name: c
    address: 127.0.0.1:0
    tls: { certFile: app.crt }
  - name: d
    address: 127.0.0.1:0
    tls: {}
backends:
  app:
    endpoints: [\"127.0.0.1:1\"]
    protocol: h3
    tls: { caFile: junk.pem, serverName: \"not a name\" }
routes:
  - name: app
    primary: app
";
    let err = weir::config::parse_yaml(yaml, "t.yaml", &dir.0).unwrap_err();
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    for want in [
        "listeners[0].tls.certFile",
        "listeners[1].tls.certificates[1].keyFile",
        "listeners[1].tls.certificates[2].certFile",
        "listeners[2].tls.keyFile",
        "listeners[3].tls",
        "backends.app.protocol",
        "backends.app.tls.caFile",
        "backends.app.tls.serverName",
    ] {
        assert!(paths.contains(&want), "no error at {want}; got:\n{err}");
    }
    assert_eq!(paths.len(), 8, "unexpected errors:\n{err}");
    let mismatch = err
        .errors
        .iter()
        .find(|e| e.path == "listeners[1].tls.certificates[1].keyFile")
        .unwrap();
    assert!(
        mismatch.reason.contains("does not belong"),
        "{}",
        mismatch.reason
    );
}

/// An HTTPS backend (HTTP/1.1 and h2 by ALPN) answering with the HTTP
/// version it saw.
async fn tls_backend(ca: &Ca, names: &[&str]) -> SocketAddr {
    let leaf = ca.leaf(names);
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(weir::proxy::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der.clone()], key)
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = service_fn(|req: http::Request<hyper::body::Incoming>| async move {
                    let body = format!("{:?} {}", req.version(), req.uri().path());
                    Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(body))))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn backends_over_tls_use_the_ca_file_server_name_and_protocol() {
    let ca = Ca::new();
    let dir = TempDir::new("tls-upstream");
    dir.write("ca.pem", &ca.pem());
    let backend = tls_backend(&ca, &["backend.test"]).await;
    let yaml = format!(
        "backends:
  h1:
    endpoints: [\"{backend}\"]
    tls: {{ caFile: ca.pem, serverName: backend.test }}
  auto:
    endpoints: [\"{backend}\"]
    protocol: auto
    tls: {{ caFile: ca.pem, serverName: backend.test }}
  h2:
    endpoints: [\"{backend}\"]
    protocol: http2
    tls: {{ caFile: ca.pem, serverName: backend.test }}
  wrong-name:
    endpoints: [\"{backend}\"]
    tls: {{ caFile: ca.pem, serverName: elsewhere.test }}
  public-roots:
    endpoints: [\"{backend}\"]
    tls: {{ serverName: backend.test }}
routes:
  - {{ name: h1, pathPrefix: /h1, primary: h1 }}
  - {{ name: auto, pathPrefix: /auto, primary: auto }}
  - {{ name: h2, pathPrefix: /h2, primary: h2 }}
  - {{ name: wrong-name, pathPrefix: /wrong, primary: wrong-name }}
  - {{ name: public-roots, pathPrefix: /public, primary: public-roots }}
"
    );
    let app = start_in(&yaml, &dir.0).await;
    let addr = app.proxy_addr();
    let ask = |path: &'static str| async move {
        let stream = TcpStream::connect(addr).await.unwrap();
        let mut s = h1(stream).await;
        read_answer(s.send_request(get_req("app.test", path)).await.unwrap()).await
    };
    let a = ask("/h1").await;
    assert_eq!((a.status, a.text().as_str()), (200, "HTTP/1.1 /h1"));
    let a = ask("/auto").await;
    assert_eq!((a.status, a.text().as_str()), (200, "HTTP/2.0 /auto"));
    let a = ask("/h2").await;
    assert_eq!((a.status, a.text().as_str()), (200, "HTTP/2.0 /h2"));
    // Certificate not valid for the name, or not from a public CA: 502.
    assert_eq!(ask("/wrong").await.status, 502);
    assert_eq!(ask("/public").await.status, 502);
}

/// A `tracing` writer into a shared buffer (the access log as text).
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// A backend whose CA file is gone by the time a request needs a TLS
/// client: the 502 is still counted and logged like every other answer.
/// The runtime is the test's one thread, so the thread's subscriber sees
/// every event of the app, and the line is written before the answer is sent.
#[tokio::test]
async fn a_tls_client_that_cannot_be_built_is_a_logged_502_on_both_paths() {
    for fast in [true, false] {
        let ca = Ca::new();
        let dir = TempDir::new("tls-gone-ca");
        let ca_file = dir.write("ca.pem", &ca.pem());
        let backend = tls_backend(&ca, &["backend.test"]).await;
        let yaml = one_route(
            backend,
            "    tls: { caFile: ca.pem, serverName: backend.test }\n",
            &format!("  accessLog: true\n  http1FastPath: {fast}\n"),
        );
        let app = start_in(&yaml, &dir.0).await;
        std::fs::remove_file(&ca_file).unwrap();
        let log = Captured::default();
        let sub = tracing_subscriber::fmt()
            .with_writer({
                let log = log.clone();
                move || log.clone()
            })
            .with_ansi(false)
            .with_env_filter("weir::access=info")
            .finish();
        let _on = tracing::subscriber::set_default(sub);
        let stream = TcpStream::connect(app.proxy_addr()).await.unwrap();
        let mut s = h1(stream).await;
        let a = read_answer(s.send_request(get_req("app.test", "/x")).await.unwrap()).await;
        assert_eq!(a.status, 502, "fast={fast}: {}", a.text());
        // The client reads a sentence; the cause is the operator's.
        assert_eq!(
            a.text(),
            "upstream-failed: the upstream could not be reached\n"
        );
        let text = log.text();
        let line = text.lines().find(|l| l.contains("request"));
        assert!(
            line.is_some_and(|l| l.contains("status=502")
                && l.contains("route=\"app\"")
                && l.contains("cause=\"cannot set up TLS to backend")),
            "fast={fast}: no access line with the cause of the 502 in:\n{text}"
        );
    }
}
