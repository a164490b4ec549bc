//! Fixtures for the protocol and hardening tests (TLS, HTTP/2, gRPC,
//! WebSocket, limits, smuggling, drain): certificates made with rcgen, a
//! proxy started from YAML with every listener on 127.0.0.1:0, TLS and
//! HTTP/2 clients over a single connection, raw-socket helpers, and the real
//! `weir serve` binary as a child process ([`Weir`]).
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use weir::app::RunningApp;

// The fixtures shared with the data-plane tests.
pub(crate) use crate::support;
#[allow(unused_imports)] // not every test binary polls
pub use support::eventually;

/// An in-process `weir echo` backend on 127.0.0.1:0 answering as `version`
/// after `latency`.
pub async fn echo_backend(version: &str, latency: Duration) -> weir::echo::EchoHandle {
    weir::echo::spawn(
        "127.0.0.1:0".parse().unwrap(),
        weir::echo::EchoOptions {
            version: version.into(),
            error_rate: 0.0,
            latency,
        },
    )
    .await
    .unwrap()
}

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "weir-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes a file atomically (temp file + rename), as a certificate
    /// manager does, so a reader never sees half a file.
    pub fn write(&self, name: &str, content: &str) -> PathBuf {
        let p = self.path(name);
        let tmp = self.path(&format!(".{name}.tmp"));
        std::fs::write(&tmp, content).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A test certificate authority.
pub struct Ca {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

/// A leaf certificate and its key, PEM and DER.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

impl Ca {
    pub fn new() -> Self {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "weir test CA");
        p.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let issuer =
            rcgen::CertifiedIssuer::self_signed(p, rcgen::KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// A leaf for DNS names and/or IP addresses.
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        p.distinguished_name.push(
            rcgen::DnType::CommonName,
            names.first().copied().unwrap_or("leaf"),
        );
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// A rustls client trusting this CA only.
    pub fn client_config(
        &self,
        versions: &[&'static rustls::SupportedProtocolVersion],
        alpn: &[&[u8]],
    ) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.der()).unwrap();
        let mut cfg = rustls::ClientConfig::builder_with_provider(weir::proxy::tls::provider())
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(cfg)
    }
}

/// Starts the app from YAML. The admin API is put on 127.0.0.1:0 and a
/// clear-text listener on 127.0.0.1:0 is added unless the YAML has
/// `listeners:`. Relative file names resolve against `base`.
pub async fn start_in(yaml: &str, base: &Path) -> RunningApp {
    let mut y = String::new();
    if !yaml.contains("listeners:") {
        y.push_str("listeners:\n  - name: http\n    address: 127.0.0.1:0\n");
    }
    if !yaml.contains("admin:") {
        y.push_str("admin:\n  address: 127.0.0.1:0\n");
    }
    y.push_str(yaml);
    let cfg = weir::config::parse_yaml(&y, "test.yaml", base)
        .unwrap_or_else(|e| panic!("test config invalid:\n{e}\n---\n{y}"));
    weir::app::start(cfg).await.expect("start app")
}

/// [`start_in`] with the current directory as base.
pub async fn start(yaml: &str) -> RunningApp {
    start_in(yaml, Path::new(".")).await
}

/// One backend `app` with one endpoint and a catch-all route to it;
/// `backend_extra` goes under the backend (4 spaces), `proxy` is a YAML
/// `proxy:` block body (2 spaces) or empty.
pub fn one_route(endpoint: SocketAddr, backend_extra: &str, proxy: &str) -> String {
    let mut y = format!(
        "backends:\n  app:\n    endpoints: [\"{endpoint}\"]\n{backend_extra}routes:\n  - name: app\n    primary: app\n"
    );
    if !proxy.is_empty() {
        y.push_str("proxy:\n");
        y.push_str(proxy);
    }
    y
}

/// A TLS connection to `addr` with `sni` (verified against the CA).
pub async fn tls_connect(
    addr: SocketAddr,
    cfg: Arc<rustls::ClientConfig>,
    sni: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(sni.to_string()).unwrap();
    tokio_rustls::TlsConnector::from(cfg)
        .connect(name, tcp)
        .await
}

/// The leaf certificate a TLS connection was set up with.
pub fn peer_leaf(s: &tokio_rustls::client::TlsStream<TcpStream>) -> CertificateDer<'static> {
    s.get_ref().1.peer_certificates().unwrap()[0].clone()
}

/// An HTTP/1.1 connection over `io`.
pub async fn h1<IO, B>(io: IO) -> hyper::client::conn::http1::SendRequest<B>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

/// An HTTP/2 connection over `io` (h2c prior knowledge on a plain stream).
pub async fn h2<IO, B>(io: IO) -> hyper::client::conn::http2::SendRequest<B>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: http_body::Body + Unpin + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

/// A response read whole, trailers included.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub version: http::Version,
    pub headers: http::HeaderMap,
    pub body: Bytes,
    pub trailers: Option<http::HeaderMap>,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// Reads a response whole.
pub async fn read_answer(resp: http::Response<hyper::body::Incoming>) -> Answer {
    let (p, b) = resp.into_parts();
    let collected = b.collect().await.expect("body");
    let trailers = collected.trailers().cloned();
    Answer {
        status: p.status.as_u16(),
        version: p.version,
        headers: p.headers,
        body: collected.to_bytes(),
        trailers,
    }
}

/// A GET for `path` with a Host header (HTTP/1.1 origin form).
pub fn get_req(host: &str, path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(path)
        .header("host", host)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// A GET for HTTP/2 (absolute URI: scheme and authority become pseudo-headers).
pub fn get_req_h2(scheme: &str, authority: &str, path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(format!("{scheme}://{authority}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// Plain HTTP/1.1 GET on a fresh connection: the status (or None when the
/// proxy closed the connection without answering).
pub async fn plain_get(addr: SocketAddr, path: &str) -> Option<u16> {
    let stream = TcpStream::connect(addr).await.ok()?;
    let mut s = h1::<_, Full<Bytes>>(stream).await;
    let r = s.send_request(get_req("test", path)).await.ok()?;
    Some(read_answer(r).await.status)
}

/// Writes `bytes` on a new connection and reads until the proxy closes it
/// or `wait` passes; returns what was read.
pub async fn raw_exchange(addr: SocketAddr, bytes: &[u8], wait: Duration) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    read_until_close(&mut s, wait).await
}

/// Reads until EOF (true) or until `wait` passes (false).
pub async fn read_until_close<S: AsyncRead + Unpin>(s: &mut S, wait: Duration) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (out, true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (out, false),
        }
    }
}

/// The status codes of every HTTP/1 response in `raw`, in order.
pub fn statuses(raw: &[u8]) -> Vec<u16> {
    let text = String::from_utf8_lossy(raw);
    text.match_indices("HTTP/1.1 ")
        .filter_map(|(i, _)| text.get(i + 9..i + 12)?.parse().ok())
        .collect()
}

/// A running `weir serve` and its log lines.
pub struct Weir {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    /// The config file it runs on.
    pub config: PathBuf,
    /// The first proxy listener's address (from its log).
    pub proxy_addr: SocketAddr,
    /// The admin listener's address (from its log).
    pub admin_addr: SocketAddr,
    _dir: TempDir,
}

impl Weir {
    /// Starts `weir serve` on `yaml` (written to `weir.yaml` in a temporary
    /// directory, listeners on port 0) and waits until the proxy listens.
    pub fn start(yaml: &str) -> Weir {
        let dir = TempDir::new("weir");
        let cfg = dir.write("weir.yaml", yaml);
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["serve", "-c"])
            .arg(&cfg)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run weir");
        let (tx, lines) = mpsc::channel();
        for out in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send(strip_ansi(&line));
                }
            });
        }
        let wait = |needle: &str| {
            next_line(&lines, needle, Duration::from_secs(60))
                .unwrap_or_else(|| panic!("weir did not log {needle:?}"))
        };
        let addr_in = |line: &str, key: &str| -> SocketAddr {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(key))
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("no {key} in {line:?}"))
        };
        let proxy_addr = addr_in(&wait("proxy listening"), "addr=");
        let admin_addr = addr_in(&wait("admin API listening"), "admin_addr=");
        Weir {
            child,
            lines,
            config: cfg,
            proxy_addr,
            admin_addr,
            _dir: dir,
        }
    }

    /// The next log line containing `needle`, within `within`.
    pub fn wait_line(&mut self, needle: &str, within: Duration) -> Option<String> {
        next_line(&self.lines, needle, within)
    }

    /// Sends a signal (`-TERM`, `-HUP`, ...) with kill(1).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill {sig} failed");
    }

    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits for the exit, up to `within`.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

/// The next line from `lines` containing `needle`, within `within`; earlier
/// lines are consumed.
fn next_line(lines: &mpsc::Receiver<String>, needle: &str, within: Duration) -> Option<String> {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        match lines.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return Some(l),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
}

impl Drop for Weir {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
