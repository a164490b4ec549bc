//! The connections under the Engine API client: bollard builds the requests and
//! reads the answers, this module dials (a unix socket, TCP, or TCP with TLS and a
//! client certificate) and counts what is read.
//!
//! Every answer is capped at [`MAX_ANSWER`] (16 MiB): the client reads a list or an
//! inspect document whole before it parses it, so a daemon (or whatever listens on
//! its socket) answering 48 MiB would otherwise cost all of it, and more to parse.
//! A connection carries one request ([`Transport::request`] dials for each), so the
//! bytes read from a connection are the bytes of one answer; past the cap the read
//! fails, the request fails with a reason naming the cap, and nothing more is read.
//! The event stream is one long answer: its count restarts at each event decoded
//! ([`Meter::restart`]), so it is each event that is capped.

use crate::config::{DockerEndpoint, DockerSettings};
use bollard::BollardRequest;
use http::header::HOST;
use http::{HeaderValue, Response, Uri};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The largest answer (or single event) of the Engine API read.
pub const MAX_ANSWER: u64 = 16 << 20;

/// What an answer may add to its body: the status line, the headers and the chunked
/// encoding's framing.
const HEAD_ROOM: u64 = 64 << 10;

/// The error of a read past the cap.
pub fn over_cap() -> io::Error {
    io::Error::other(format!(
        "the Engine API's answer is larger than {} MiB: not read further",
        MAX_ANSWER >> 20
    ))
}

/// Bytes read on a connection (or, for the event stream, since its last event).
#[derive(Clone, Debug, Default)]
pub struct Meter(Arc<AtomicU64>);

impl Meter {
    /// Counts `n` more bytes; `false` once the total is over the cap.
    fn add(&self, n: usize) -> bool {
        let n = n as u64;
        self.0.fetch_add(n, Ordering::Relaxed) + n <= MAX_ANSWER + HEAD_ROOM
    }

    /// Starts the count again (an event was decoded).
    pub fn restart(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    /// Bytes counted.
    pub fn read(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// How to reach the daemon.
enum Dial {
    Unix(PathBuf),
    Tcp(String),
    Tls {
        address: String,
        name: ServerName<'static>,
        connector: tokio_rustls::TlsConnector,
    },
}

/// Dials the daemon, one connection per request, every read counted.
pub struct Transport {
    dial: Dial,
    /// The `Host` header (the daemon ignores it on a unix socket; HTTP/1.1 needs one).
    host: HeaderValue,
    /// The event stream's count, restarted by its reader at each event.
    events: Meter,
}

/// A stream the client may speak HTTP/1.1 over.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

impl Transport {
    /// The transport of `settings.endpoint`; TLS files are read here (the config
    /// checked them, but they may have changed since).
    pub fn new(settings: &DockerSettings) -> Result<Self, String> {
        let (dial, host) = match &settings.endpoint {
            DockerEndpoint::Unix(path) => (Dial::Unix(path.clone()), "docker".to_string()),
            DockerEndpoint::Tcp { address, tls: None } => {
                (Dial::Tcp(address.clone()), address.clone())
            }
            DockerEndpoint::Tcp {
                address,
                tls: Some(t),
            } => {
                let mut roots = rustls::RootCertStore::empty();
                roots.add_parsable_certificates(crate::config::tls::load_ca_file(&t.ca_file)?);
                let key = crate::config::tls::load_pair(&t.cert_file, &t.key_file)
                    .map_err(|e| e.to_string())?;
                let config =
                    rustls::ClientConfig::builder_with_provider(crate::config::tls::provider())
                        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
                        .map_err(|e| format!("TLS setup: {e}"))?
                        .with_root_certificates(roots)
                        .with_client_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(
                            key,
                        )));
                let host = match address.rsplit_once(':') {
                    Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
                    None => address.as_str(),
                };
                let name = ServerName::try_from(host.to_string())
                    .map_err(|e| format!("{address}: not a name TLS can verify: {e}"))?;
                (
                    Dial::Tls {
                        address: address.clone(),
                        name,
                        connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
                    },
                    address.clone(),
                )
            }
        };
        let host = HeaderValue::from_str(&host).map_err(|e| format!("{host}: {e}"))?;
        Ok(Transport {
            dial,
            host,
            events: Meter::default(),
        })
    }

    /// The event stream's meter (its reader restarts it at each event).
    pub fn events_meter(&self) -> Meter {
        self.events.clone()
    }

    async fn connect(&self) -> io::Result<Box<dyn Io>> {
        Ok(match &self.dial {
            Dial::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
            Dial::Tcp(address) => {
                let s = tokio::net::TcpStream::connect(address.as_str()).await?;
                let _ = s.set_nodelay(true);
                Box::new(s)
            }
            Dial::Tls {
                address,
                name,
                connector,
            } => {
                let s = tokio::net::TcpStream::connect(address.as_str()).await?;
                let _ = s.set_nodelay(true);
                Box::new(connector.connect(name.clone(), s).await?)
            }
        })
    }

    /// Sends one request on a connection of its own and returns the answer, whose
    /// body reads fail past [`MAX_ANSWER`].
    pub async fn request(
        &self,
        req: BollardRequest,
    ) -> Result<Response<Incoming>, bollard::errors::Error> {
        let (mut parts, body) = req.into_parts();
        let events = parts.uri.path().ends_with("/events");
        // Origin form on the wire, as a client speaking to one server sends it.
        let target = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        parts.uri = target.parse::<Uri>()?;
        parts.headers.insert(HOST, self.host.clone());
        let meter = if events {
            self.events.restart();
            self.events.clone()
        } else {
            Meter::default()
        };
        let io = Capped {
            inner: self.connect().await?,
            meter,
        };
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(send
            .send_request(http::Request::from_parts(parts, body))
            .await?)
    }
}

/// A connection whose reads stop past the cap.
struct Capped {
    inner: Box<dyn Io>,
    meter: Meter,
}

impl AsyncRead for Capped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        if self.meter.add(buf.filled().len() - before) {
            Poll::Ready(Ok(()))
        } else {
            Poll::Ready(Err(over_cap()))
        }
    }
}

impl AsyncWrite for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// `e` and the errors under it, as one line ("error reading a body from
/// connection: the Engine API's answer is larger than 16 MiB: …").
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let m = inner.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        src = inner.source();
    }
    s
}
