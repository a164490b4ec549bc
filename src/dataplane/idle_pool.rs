//! Idle upstream HTTP/1.1 connections of the fast path, per endpoint.
//!
//! Kept on the endpoint itself (no lookup on the request path), most
//! recently used first: the oldest ones age out. A connection is handed out
//! only if the reactor has not seen it become readable while idle (a close
//! or stray bytes from the upstream); that check costs no syscall. One
//! reaper task per endpoint, only while it has idle connections, closes
//! those idle longer than `proxy.upstreamIdleTimeout`.

use super::backend::Endpoint;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

#[derive(Default)]
struct Inner {
    /// Oldest first.
    conns: Vec<(TcpStream, Instant)>,
    reaper: bool,
}

/// The idle connections of one endpoint.
#[derive(Default)]
pub struct IdlePool {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for IdlePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.inner.lock().map(|i| i.conns.len()).unwrap_or(0);
        f.debug_struct("IdlePool").field("idle", &n).finish()
    }
}

impl IdlePool {
    /// The most recently used live connection idle for less than `max_idle`.
    pub fn take(&self, max_idle: Duration) -> Option<TcpStream> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((s, since)) = inner.conns.pop() {
            if since.elapsed() >= max_idle {
                // Every one left is older still.
                inner.conns.clear();
                return None;
            }
            // Readable while idle: closed by the upstream, or bytes nobody
            // asked for. Either way it cannot carry a request.
            match s.try_read(&mut [0u8; 1]) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(s),
                _ => continue,
            }
        }
        None
    }

    /// Keeps `s` for reuse unless `max` are idle already.
    pub fn put(ep: &Arc<Endpoint>, s: TcpStream, max: usize, max_idle: Duration) {
        let mut inner = ep.idle.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.conns.len() >= max {
            return;
        }
        inner.conns.push((s, Instant::now()));
        if !inner.reaper {
            inner.reaper = true;
            tokio::spawn(reap(Arc::downgrade(ep), max_idle));
        }
    }
}

/// Closes connections idle for `max_idle`, until the pool is empty or the
/// endpoint is gone.
async fn reap(ep: std::sync::Weak<Endpoint>, max_idle: Duration) {
    loop {
        tokio::time::sleep(max_idle / 2).await;
        let Some(ep) = ep.upgrade() else { return };
        let mut inner = ep.idle.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.conns.retain(|(_, since)| since.elapsed() < max_idle);
        if inner.conns.is_empty() {
            inner.reaper = false;
            return;
        }
    }
}
