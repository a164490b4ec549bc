//! The pooled upstream clients, one per way of talking to a backend.
//!
//! hyper-util's legacy `Client` pools connections per scheme + authority and
//! speaks one configuration, so weir keeps one client per (protocol, TLS
//! setting): clear-text HTTP/1.1, clear-text HTTP/2 (h2c prior knowledge,
//! `http2_only`), and for TLS backends one client per distinct
//! `{caFile, serverName}` × protocol, built on first use and kept. The
//! connector does TCP (TCP_NODELAY, connect timeout, keepalive) and then
//! TLS when the backend asks for it; with `protocol: auto` over TLS, ALPN
//! picks HTTP/2 or HTTP/1.1 per connection. The engine's client
//! (`rollout::http`) dials through the same [`Connector`].

use super::body::{BoxError, ProxyBody};
use crate::config::{ProxySettings, UpstreamProtocol, UpstreamTls};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tower_service::Service;

/// One pooled hyper client.
pub type HttpClient = Client<Connector, ProxyBody>;

/// Every upstream client of the proxy.
pub struct UpstreamClients {
    /// Settings the lazily built TLS clients use.
    settings: ProxySettings,
    /// Clear-text HTTP/1.1 (`protocol: http1` and `auto`).
    plain_http1: HttpClient,
    /// Clear-text HTTP/2 with prior knowledge (`protocol: http2`).
    plain_http2: HttpClient,
    /// TLS clients by setting and protocol, built on first use.
    tls: RwLock<HashMap<(UpstreamTls, UpstreamProtocol), HttpClient>>,
    /// Clients without a pool, for sending a request again on a new
    /// connection after a stale pooled one ([`stale_connection`]); by
    /// setting and protocol (`None`: clear text), built on first use.
    fresh: RwLock<HashMap<(Option<UpstreamTls>, UpstreamProtocol), HttpClient>>,
}

impl std::fmt::Debug for UpstreamClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamClients").finish_non_exhaustive()
    }
}

impl UpstreamClients {
    /// The clear-text clients; TLS ones come on demand.
    pub fn new(settings: &ProxySettings) -> Self {
        UpstreamClients {
            settings: settings.clone(),
            plain_http1: build(
                settings,
                Connector::plain(settings.connect_timeout),
                UpstreamProtocol::Http1,
            ),
            plain_http2: build(
                settings,
                Connector::plain(settings.connect_timeout),
                UpstreamProtocol::Http2,
            ),
            tls: RwLock::new(HashMap::new()),
            fresh: RwLock::new(HashMap::new()),
        }
    }

    /// A client that opens a new connection for every request, with the
    /// same protocol and TLS setting as [`UpstreamClients::client_for`].
    pub fn fresh_for(
        &self,
        protocol: UpstreamProtocol,
        tls: Option<&UpstreamTls>,
    ) -> Result<HttpClient, String> {
        let key = (tls.cloned(), protocol);
        if let Some(c) = self
            .fresh
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(c.clone());
        }
        let connector = match tls {
            Some(t) => Connector::for_backend(&self.settings, t, protocol)?,
            None => Connector::plain(self.settings.connect_timeout),
        };
        let unpooled = ProxySettings {
            upstream_max_idle_per_host: 0,
            ..self.settings.clone()
        };
        let client = build(&unpooled, connector, protocol);
        let mut map = self.fresh.write().unwrap_or_else(|p| p.into_inner());
        Ok(map.entry(key).or_insert(client).clone())
    }

    /// Sends over the clear-text HTTP/1.1 pool (the mirror uses it).
    pub fn request(&self, req: http::Request<ProxyBody>) -> ResponseFuture {
        self.plain_http1.request(req)
    }

    /// The client for a backend's protocol and TLS setting. Fails only when
    /// a TLS client must be built and its CA file cannot be read any more
    /// (it was checked when the config was validated).
    /// Clear-text clients are lent (the hot path clones nothing).
    pub fn client_for(
        &self,
        protocol: UpstreamProtocol,
        tls: Option<&UpstreamTls>,
    ) -> Result<Cow<'_, HttpClient>, String> {
        let Some(tls) = tls else {
            return Ok(Cow::Borrowed(match protocol {
                UpstreamProtocol::Http2 => &self.plain_http2,
                UpstreamProtocol::Http1 | UpstreamProtocol::Auto => &self.plain_http1,
            }));
        };
        let key = (tls.clone(), protocol);
        if let Some(c) = self.tls.read().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok(Cow::Owned(c.clone()));
        }
        let connector = Connector::for_backend(&self.settings, tls, protocol)?;
        let client = build(&self.settings, connector, protocol);
        let mut map = self.tls.write().unwrap_or_else(|p| p.into_inner());
        Ok(Cow::Owned(map.entry(key).or_insert(client).clone()))
    }
}

fn build(settings: &ProxySettings, connector: Connector, protocol: UpstreamProtocol) -> HttpClient {
    let mut b = Client::builder(TokioExecutor::new());
    b.pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .pool_idle_timeout(settings.upstream_idle_timeout)
        .pool_max_idle_per_host(settings.upstream_max_idle_per_host)
        // An unsent request comes back to weir ([`unsent`]), which sends it again
        // on a new connection: hyper-util's own resend goes back to the pool, where
        // a request could wait until the route timeout for a connection.
        .retry_canceled_requests(false);
    if protocol == UpstreamProtocol::Http2 {
        b.http2_only(true);
    }
    b.build(connector)
}

/// TCP, then TLS when configured.
#[derive(Clone)]
pub struct Connector {
    /// The TCP side (TCP_NODELAY, connect timeout, keepalive).
    http: HttpConnector,
    /// The TLS side, for every connection; `None`: clear text.
    tls: Option<TlsSetup>,
}

#[derive(Clone)]
struct TlsSetup {
    connector: tokio_rustls::TlsConnector,
    /// Fixed SNI name, else the endpoint's host.
    server_name: Option<ServerName<'static>>,
    /// Bound on the handshake (the connect timeout).
    timeout: Duration,
}

impl Connector {
    fn tcp(connect_timeout: Duration) -> HttpConnector {
        let mut c = HttpConnector::new();
        c.set_nodelay(true);
        c.set_connect_timeout(Some(connect_timeout));
        c.set_keepalive(Some(Duration::from_secs(60)));
        // `https://` URIs reach this connector too; TLS is done below.
        c.enforce_http(false);
        c
    }

    /// TCP only, whatever the URI's scheme.
    pub fn plain(connect_timeout: Duration) -> Self {
        Connector {
            http: Self::tcp(connect_timeout),
            tls: None,
        }
    }

    /// TCP, then TLS with `cfg` on every connection, the handshake bounded
    /// by `connect_timeout` too; SNI is `server_name`, else the URI's host.
    pub fn tls(
        connect_timeout: Duration,
        cfg: Arc<ClientConfig>,
        server_name: Option<&str>,
    ) -> Result<Self, String> {
        let server_name = match server_name {
            Some(n) => Some(
                ServerName::try_from(n.to_string())
                    .map_err(|_| format!("invalid TLS server name {n:?}"))?,
            ),
            None => None,
        };
        Ok(Connector {
            http: Self::tcp(connect_timeout),
            tls: Some(TlsSetup {
                connector: tokio_rustls::TlsConnector::from(cfg),
                server_name,
                timeout: connect_timeout,
            }),
        })
    }

    fn for_backend(
        settings: &ProxySettings,
        tls: &UpstreamTls,
        protocol: UpstreamProtocol,
    ) -> Result<Self, String> {
        let cfg = super::tls::client_config(tls, protocol)?;
        Self::tls(settings.connect_timeout, cfg, tls.server_name.as_deref())
    }
}

impl Service<http::Uri> for Connector {
    type Response = TokioIo<UpstreamStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: http::Uri) -> Self::Future {
        let mut http = self.http.clone();
        let tls = self.tls.clone();
        Box::pin(async move {
            let name = match &tls {
                Some(TlsSetup {
                    server_name: Some(n),
                    ..
                }) => Some(n.clone()),
                Some(_) => {
                    let host = dst.host().unwrap_or_default();
                    let host = host.trim_start_matches('[').trim_end_matches(']');
                    Some(
                        ServerName::try_from(host.to_string())
                            .map_err(|_| format!("{host:?} cannot be a TLS server name"))?,
                    )
                }
                None => None,
            };
            let tcp = http.call(dst).await?.into_inner();
            let (Some(tls), Some(name)) = (tls, name) else {
                return Ok(TokioIo::new(UpstreamStream::new(Io::Plain(tcp))));
            };
            let stream = tokio::time::timeout(tls.timeout, tls.connector.connect(name, tcp))
                .await
                .map_err(|_| "TLS handshake with the upstream timed out")??;
            Ok(TokioIo::new(UpstreamStream::new(Io::Tls(Box::new(stream)))))
        })
    }
}

/// A connection to an endpoint, clear or TLS, with what has crossed it.
pub struct UpstreamStream {
    io: Io,
    /// Shared with the client's errors (through [`Connected::extra`]).
    track: Arc<ConnUse>,
}

enum Io {
    /// Clear text.
    Plain(TcpStream),
    /// TLS (boxed: the session state is large).
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl UpstreamStream {
    fn new(io: Io) -> Self {
        UpstreamStream {
            io,
            track: Arc::default(),
        }
    }
}

/// Bytes read on one HTTP/1 upstream connection, before and since the
/// request being written now: enough to tell a pooled connection that the
/// backend closed before answering from a backend that failed a request.
/// Costs two relaxed atomic operations per read and per write.
#[derive(Debug, Default)]
struct ConnUse {
    /// Bytes read so far.
    read: AtomicU64,
    /// `read` when the request now on the connection began to be written.
    read_before_request: AtomicU64,
    /// A request is being written (no response byte read since).
    writing: AtomicBool,
}

impl ConnUse {
    fn on_read(&self, n: usize) {
        if n > 0 {
            self.read.fetch_add(n as u64, Ordering::Relaxed);
            self.writing.store(false, Ordering::Relaxed);
        }
    }

    fn on_write(&self) {
        if !self.writing.swap(true, Ordering::Relaxed) {
            self.read_before_request
                .store(self.read.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// The handle on a connection's [`ConnUse`] that its errors carry.
#[derive(Clone)]
struct ConnUseHandle(Arc<ConnUse>);

/// Whether `err` says the request never left weir: hyper-util gave it back
/// unsent (its pooled connection closed before a byte of it was written), or
/// the pooled connection it was given was already closed. Such a request may
/// go again on a new connection whatever its method, if weir still has it.
pub fn unsent(err: &hyper_util::client::legacy::Error) -> bool {
    use hyper_util::client::legacy::pool;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(e) = cur {
        if matches!(
            e.downcast_ref::<pool::Error>(),
            Some(pool::Error::CheckedOutClosedValue)
        ) {
            return true;
        }
        if e.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Whether `err` is a pooled HTTP/1 connection that failed before any byte
/// of the answer: it had served a request before (the backend read and
/// answered on it) and nothing came back for this one. Such a connection was
/// closed by the backend while it sat idle, or just as the request went out
/// (a keep-alive race no client can avoid); the request never reached a
/// handler, so an idempotent one may go again. (A request not written at all
/// is [`unsent`].)
pub fn stale_connection(err: &hyper_util::client::legacy::Error) -> bool {
    if err.is_connect() {
        return false;
    }
    let Some(info) = err.connect_info() else {
        return false;
    };
    let mut ext = http::Extensions::new();
    info.get_extras(&mut ext);
    let Some(ConnUseHandle(track)) = ext.get::<ConnUseHandle>() else {
        return false;
    };
    let before = track.read_before_request.load(Ordering::Relaxed);
    before > 0 && track.read.load(Ordering::Relaxed) == before
}

impl Connection for UpstreamStream {
    fn connected(&self) -> Connected {
        let tracked = |c: Connected| c.extra(ConnUseHandle(self.track.clone()));
        match &self.io {
            Io::Plain(s) => tracked(s.connected()),
            Io::Tls(s) => {
                let (tcp, session) = s.get_ref();
                let c = tcp.connected();
                if session.alpn_protocol() == Some(b"h2") {
                    // HTTP/2 reports refused streams itself (GOAWAY).
                    c.negotiated_h2()
                } else {
                    tracked(c)
                }
            }
        }
    }
}

impl AsyncRead for UpstreamStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        if let Poll::Ready(Ok(())) = polled {
            this.track.on_read(buf.filled().len() - before);
        }
        polled
    }
}

impl AsyncWrite for UpstreamStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.track.on_write();
        match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.track.on_write();
        match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
