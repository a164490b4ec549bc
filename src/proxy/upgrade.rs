//! HTTP/1.1 `Upgrade` pass-through (WebSocket and any other protocol).
//!
//! A request with `Connection: upgrade` and an `Upgrade` header (other than
//! `h2c`, which hyper's server does not speak) is routed and decided like
//! any request; `Connection: upgrade` and its `Upgrade` value are the only
//! hop-by-hop headers kept for the upstream, which is always reached over
//! HTTP/1.1. When the upstream answers `101 Switching Protocols`, both
//! sides are taken over from hyper (`hyper::upgrade::on`) and spliced with
//! `tokio::io::copy_bidirectional` until either side closes. Any other
//! answer is an ordinary response. A tunnel has no idle timeout, and a
//! graceful drain does not wait for open tunnels (they end with the process).

use http::header::{HeaderMap, HeaderValue, CONNECTION, UPGRADE};
use http::Version;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

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
/// background; `guard` (the endpoint's in-flight count) lives as long as
/// the tunnel.
pub fn splice(client: OnUpgrade, upstream: OnUpgrade, guard: impl Send + 'static) {
    tokio::spawn(async move {
        let _guard = guard;
        let (c, u) = match tokio::try_join!(client, upstream) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::debug!(target: "weir::upgrade", error = %e, "upgrade failed");
                return;
            }
        };
        let mut c = TokioIo::new(c);
        let mut u = TokioIo::new(u);
        match tokio::io::copy_bidirectional(&mut c, &mut u).await {
            Ok((up, down)) => {
                tracing::debug!(target: "weir::upgrade", bytes_up = up, bytes_down = down, "tunnel closed")
            }
            Err(e) => {
                tracing::debug!(target: "weir::upgrade", error = %e, "tunnel ended with error")
            }
        }
    });
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
