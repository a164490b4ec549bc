//! The exchange with an endpoint: a pooled or new connection, the request
//! head written, the final response head read.

use super::head;
use crate::config::ProxySettings;
use crate::proxy::upstream::Endpoint;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest upstream response head (hyper's client reads up to ~400 KiB).
const MAX_RESPONSE_HEAD: usize = 256 * 1024;

/// Why no response head came from the upstream.
pub(super) enum UpErr {
    Connect(io::Error),
    Broken(&'static str),
}

/// Sends the head on a pooled or new connection and reads the response
/// head (past any 1xx) into `rbuf`: the connection and where the head ends.
/// A pooled connection that fails before any response byte is replaced by a
/// new one once, for idempotent methods (the upstream may have closed it
/// while it was idle, as nginx and hyper-util also assume).
pub(super) async fn exchange(
    ep: &Endpoint,
    head: &[u8],
    rbuf: &mut Vec<u8>,
    idempotent: bool,
    s: &ProxySettings,
) -> Result<(TcpStream, usize), UpErr> {
    let mut retried = false;
    loop {
        let pooled = if retried {
            None
        } else {
            ep.idle.take(s.upstream_idle_timeout)
        };
        let reused = pooled.is_some();
        let mut up = match pooled {
            Some(c) => c,
            None => connect(&ep.address, s).await.map_err(UpErr::Connect)?,
        };
        rbuf.clear();
        let read = match up.write_all(head).await {
            Ok(()) => read_response_head(&mut up, rbuf).await,
            Err(e) => Err(e),
        };
        match read {
            Ok(Some(end)) => return Ok((up, end)),
            _ if reused && idempotent && rbuf.is_empty() => retried = true,
            Ok(None) => return Err(UpErr::Broken("closed before a whole response head")),
            Err(_) => return Err(UpErr::Broken("read or write failed")),
        }
    }
}

/// Reads a final response head: `Some(end)`, or `None` at end of stream.
/// Interim (1xx) responses are dropped, as the general path does.
async fn read_response_head(up: &mut TcpStream, rbuf: &mut Vec<u8>) -> io::Result<Option<usize>> {
    loop {
        if let Some(end) = head::head_end(rbuf) {
            let interim = rbuf.len() > 12 && rbuf[9] == b'1' && &rbuf[9..12] != b"101";
            if !interim {
                return Ok(Some(end));
            }
            rbuf.drain(..end);
            continue;
        }
        if rbuf.len() >= MAX_RESPONSE_HEAD {
            return Err(io::Error::other("response head too long"));
        }
        if rbuf.capacity() - rbuf.len() < 1024 {
            rbuf.reserve(8192);
        }
        if up.read_buf(rbuf).await? == 0 {
            return Ok(None);
        }
    }
}

/// A new connection to `address` (`host:port`; names resolved now), with
/// TCP_NODELAY and keep-alive probes, within `proxy.connectTimeout`.
async fn connect(address: &str, s: &ProxySettings) -> io::Result<TcpStream> {
    let stream = tokio::time::timeout(s.connect_timeout, TcpStream::connect(address))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    stream.set_nodelay(true)?;
    let keepalive = socket2::TcpKeepalive::new().with_time(Duration::from_secs(60));
    socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive)?;
    Ok(stream)
}
