//! Listeners: accept TCP connections, terminate TLS where configured, and
//! serve HTTP/1.1 and HTTP/2 on each (h2 by ALPN over TLS, h2c by prior
//! knowledge in clear text), with connection limits and graceful shutdown.
//!
//! Per connection, in order: a permit of the listener's `maxConnections`
//! semaphore (while none is free the loop stops accepting, so new clients
//! wait in the kernel's listen backlog; open connections are unaffected),
//! the TLS handshake (bounded by `headerReadTimeout`), the smuggling
//! tracker on HTTP/1 bytes (`smuggle`), then hyper. A connection that has
//! not started a single request within `headerReadTimeout` is closed (this
//! covers clients that send nothing or stall inside the HTTP/2 preface,
//! which hyper's own header timeout does not see).

use super::service::{handle, ConnInfo, ProxyShared};
use super::smuggle::{ConnGuard, Sniffed, Tracker};
use super::tls::{CertStore, Terminator, RELOAD_INTERVAL};
use crate::config::ProxySettings;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// The connection builder with the proxy's protocol settings and limits.
pub fn conn_builder(s: &ProxySettings) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        // Closes the connection (no 408) when a request head takes longer.
        .header_read_timeout(s.header_read_timeout)
        .keep_alive(true)
        // A head that does not fit the read buffer is answered with 431; one
        // that fits but is longer than `maxHeaderBytes` is refused by the
        // service (`smuggle::Tracker` measures it), as this bound is loose.
        .max_buf_size(s.max_header_bytes.max(8192))
        // More header lines than this: 431.
        .max_headers(s.max_headers);
    b.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(Some(s.http2_max_concurrent_streams))
        .max_pending_accept_reset_streams(Some(s.http2_max_pending_accept_reset_streams))
        .max_local_error_reset_streams(Some(s.http2_max_local_error_reset_streams))
        // h2 answers 431 itself when a header list (RFC 9113 §6.5.2 size) is
        // larger. It refuses a list that reaches its limit, so the limit is
        // one more than the largest list accepted.
        .max_header_list_size(u32::try_from(s.max_header_bytes + 1).unwrap_or(u32::MAX));
    b
}

/// Serves `listener` until `shutdown` turns true, then stops accepting
/// (the socket is closed: new connections are refused) and waits up to
/// `drain` for open connections to finish their requests (HTTP/1 gets
/// `Connection: close`, HTTP/2 a GOAWAY). With `tls`, every connection is
/// a TLS one and the certificate files are watched for changes.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<ProxyShared>,
    tls: Option<Arc<Terminator>>,
    trusted_proxies: Arc<[ipnet::IpNet]>,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
) {
    // Once per listener: `port` match conditions read it on every request.
    let port = listener.local_addr().map_or(0, |a| a.port());
    let builder = Arc::new(conn_builder(&shared.settings));
    let graceful = GracefulShutdown::new();
    let limit = Arc::new(Semaphore::new(shared.settings.max_connections));
    if let Some(t) = &tls {
        tokio::spawn(CertStore::watch(
            Arc::downgrade(&t.store),
            RELOAD_INTERVAL,
            shutdown.clone(),
        ));
    }
    loop {
        let permit = tokio::select! {
            p = limit.clone().acquire_owned() => p,
            _ = shutdown.changed() => break,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let conn = Conn {
            peer,
            port,
            // Decided once per connection: the requests read a bool.
            trusted: trusted_proxies.iter().any(|n| n.contains(&peer.ip())),
            guard: Arc::new(ConnGuard::default()),
            shared: shared.clone(),
            builder: builder.clone(),
            watcher: graceful.watcher(),
            shutdown: shutdown.clone(),
            _permit: permit,
        };
        // Each kind spawned as its own task, not awaited inside a common async
        // fn: an awaited future is laid out twice in its caller's state, and a
        // plain connection must not carry the TLS one's size (memory per idle
        // connection).
        match &tls {
            None if shared.settings.http1_fast_path => {
                tokio::spawn(fast_connection(stream, conn));
            }
            None => {
                let s = &shared.settings;
                let tracker = Tracker::new(s.max_header_bytes, s.max_headers);
                let io = Sniffed::new(stream, tracker, conn.guard.clone());
                tokio::spawn(run(io, false, conn, None));
            }
            Some(t) => {
                tokio::spawn(tls_connection(stream, t.clone(), conn));
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?drain,
            "drain timeout reached; closing remaining connections"
        );
    }
}

/// What every connection task holds besides its stream.
struct Conn {
    peer: SocketAddr,
    /// The listener's port (`port` match conditions).
    port: u16,
    /// The peer is one of the listener's `trustedProxies`.
    trusted: bool,
    guard: Arc<ConnGuard>,
    shared: Arc<ProxyShared>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    /// Held for the life of the connection: a graceful shutdown waits for it.
    watcher: Watcher,
    /// Turns true when a graceful shutdown begins (the fast path's signal;
    /// hyper gets it through `watcher`).
    shutdown: watch::Receiver<bool>,
    /// The `max_connections` slot, released when the task ends.
    _permit: OwnedSemaphorePermit,
}

/// A plain connection on the HTTP/1 fast path; one it hands back (a request
/// it does not serve, see `express`) is served by hyper from that request on.
async fn fast_connection(stream: TcpStream, conn: Conn) {
    let handed = super::express::connection(
        stream,
        (conn.peer, conn.trusted),
        conn.port,
        &conn.shared,
        &conn.shutdown,
    )
    .await;
    let Some(h) = handed else { return };
    let head_by = h.head_by;
    let s = &conn.shared.settings;
    let tracker = Tracker::new(s.max_header_bytes, s.max_headers);
    let io = Sniffed::new(h.into_io(), tracker, conn.guard.clone());
    // Boxed: awaited inline, hyper's connection would size every fast one.
    Box::pin(run(io, false, conn, head_by)).await
}

/// A TLS connection: the handshake, then HTTP.
async fn tls_connection(stream: TcpStream, t: Arc<Terminator>, conn: Conn) {
    let s = &conn.shared.settings;
    let peer = conn.peer;
    let hs = tokio::time::timeout(s.header_read_timeout, t.acceptor.accept(stream)).await;
    let stream = match hs {
        Ok(Ok(st)) => st,
        Ok(Err(e)) => {
            tracing::debug!(target: "weir::tls", %peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(target: "weir::tls", %peer, "TLS handshake timed out");
            return;
        }
    };
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let tracker = if h2 {
        Tracker::off()
    } else {
        Tracker::new(s.max_header_bytes, s.max_headers)
    };
    let io = Sniffed::new(stream, tracker, conn.guard.clone());
    // Boxed: awaited inline, the HTTP future would be laid out twice.
    Box::pin(run(io, true, conn, None)).await
}

/// Serves a connection with hyper (HTTP/1.1, or HTTP/2 by preface or ALPN).
/// The first request must have started by `first_request_by` (default: the
/// header read timeout from now); a connection the fast path hands over in
/// the middle of a head passes what is left of its bound, since hyper's own
/// timer would start again from the hand-off.
async fn run<IO>(io: IO, tls: bool, c: Conn, first_request_by: Option<tokio::time::Instant>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Conn {
        peer,
        port,
        trusted,
        guard,
        shared,
        builder,
        watcher,
        shutdown: _,
        _permit,
    } = c;
    let first_request_by = first_request_by.unwrap_or_else(|| {
        let now = tokio::time::Instant::now();
        let within = shared.settings.header_read_timeout;
        // No upper bound in the config: an absurd one must not overflow.
        now.checked_add(within)
            .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30))
    });
    let info = ConnInfo {
        peer,
        tls,
        port,
        trusted,
        guard: Some(guard.clone()),
    };
    // Boxed per request: hyper keeps the allocation holding the service future
    // for the whole life of the connection, so an unboxed future (1.6 KB) would
    // be paid by every idle keep-alive connection.
    let svc = service_fn(move |req| Box::pin(handle(shared.clone(), info.clone(), req)));
    let conn = builder
        .serve_connection_with_upgrades(TokioIo::new(io), svc)
        .into_owned();
    let conn = watcher.watch(conn);
    tokio::pin!(conn);
    let res = tokio::select! {
        r = &mut conn => r,
        _ = tokio::time::sleep_until(first_request_by) => {
            if guard.requests() == 0 {
                tracing::debug!(target: "weir::conn", %peer, "no request within the header read timeout; closing");
                return;
            }
            conn.await
        }
    };
    if let Err(e) = res {
        tracing::debug!(target: "weir::conn", %peer, error = %e, "connection ended with error");
    }
}
