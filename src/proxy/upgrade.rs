//! HTTP/1.1 `Upgrade` pass-through (WebSocket and any other protocol).
//!
//! A request with `Connection: upgrade` and an `Upgrade` header (other than
//! `h2c`, which hyper's server does not speak) is routed and decided like
//! any request; `Connection: upgrade` and its `Upgrade` value are the only
//! hop-by-hop headers kept for the upstream, which is always reached over
//! HTTP/1.1. When the upstream answers `101 Switching Protocols`, both
//! sides are taken over from hyper (`hyper::upgrade::on`) and spliced with
//! `tokio::io::copy_bidirectional` until either side closes, or until no
//! byte has moved either way for `proxy.tunnelIdleTimeout`. Any other answer
//! is an ordinary response. A graceful drain does not wait for open tunnels
//! (they end with the process).

use http::header::{HeaderMap, HeaderValue, CONNECTION, UPGRADE};
use http::Version;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// The `Upgrade` value when the request asks for a protocol switch that
/// weir passes through.
pub fn requested(version: Version, headers: &HeaderMap) -> Option<HeaderValue> {
    if version != Version::HTTP_11 {
        return None;
    }
    let wants = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    if !wants {
        return None;
    }
    let up = headers.get(UPGRADE)?;
    let is_h2c = up
        .to_str()
        .map(|s| s.split(',').any(|p| p.trim().eq_ignore_ascii_case("h2c")))
        .unwrap_or(false);
    (!is_h2c).then(|| up.clone())
}

/// Puts back the two headers an upgrade needs after hop-by-hop stripping.
pub fn restore(headers: &mut HeaderMap, upgrade: HeaderValue) {
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(UPGRADE, upgrade);
}

/// Splices the client's and the upstream's upgraded connections in the
/// background until either side closes or nothing moves for `idle`; `guard`
/// (the endpoint's in-flight count) lives as long as the tunnel.
pub fn splice(client: OnUpgrade, upstream: OnUpgrade, guard: impl Send + 'static, idle: Duration) {
    tokio::spawn(async move {
        let _guard = guard;
        let (c, u) = match tokio::try_join!(client, upstream) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::debug!(target: "weir::upgrade", error = %e, "upgrade failed");
                return;
            }
        };
        let start = Instant::now();
        let last = Arc::new(AtomicU64::new(0));
        let mut c = Active::new(TokioIo::new(c), start, last.clone());
        let mut u = Active::new(TokioIo::new(u), start, last.clone());
        tokio::select! {
            r = tokio::io::copy_bidirectional(&mut c, &mut u) => match r {
                Ok((up, down)) => {
                    tracing::debug!(target: "weir::upgrade", bytes_up = up, bytes_down = down, "tunnel closed")
                }
                Err(e) => {
                    tracing::debug!(target: "weir::upgrade", error = %e, "tunnel ended with error")
                }
            },
            () = idle_for(idle, start, &last) => {
                // Dropping both sides closes them.
                tracing::debug!(target: "weir::upgrade", ?idle, "tunnel idle timeout: closed");
            }
        }
    });
}

/// Returns once nothing has moved for `idle` (checked at each deadline, so a
/// busy tunnel costs one timer wake-up per `idle`).
async fn idle_for(idle: Duration, start: Instant, last: &AtomicU64) {
    loop {
        let moved = start + Duration::from_millis(last.load(Ordering::Relaxed));
        let deadline = moved + idle;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// An upgraded connection that notes, in milliseconds since `start`, when a
/// byte last moved through it.
struct Active<IO> {
    io: IO,
    start: Instant,
    last: Arc<AtomicU64>,
}

impl<IO> Active<IO> {
    fn new(io: IO, start: Instant, last: Arc<AtomicU64>) -> Self {
        Active { io, start, last }
    }

    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last.fetch_max(ms, Ordering::Relaxed);
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Active<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.touch();
        }
        r
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Active<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    }

    #[test]
    fn detects_upgrade_requests_only_on_http11_and_not_h2c() {
        let ws = h(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket"),
        ]);
        assert_eq!(requested(Version::HTTP_11, &ws).unwrap(), "websocket");
        assert!(requested(Version::HTTP_10, &ws).is_none());
        assert!(requested(Version::HTTP_2, &ws).is_none());
        assert!(requested(Version::HTTP_11, &h(&[("upgrade", "websocket")])).is_none());
        assert!(requested(Version::HTTP_11, &h(&[("connection", "upgrade")])).is_none());
        let h2c = h(&[
            ("connection", "upgrade, http2-settings"),
            ("upgrade", "h2c"),
        ]);
        assert!(requested(Version::HTTP_11, &h2c).is_none());
    }
}
