//! The data plane: accept connections, route every request by one table
//! snapshot, forward it upstream with streaming bodies, answer the client.
//!
//! Phases of a request, in order (see `service`): snapshot → route →
//! decide → upstream request → response → record. Decisions are delegated to
//! the pure `routing` module; this module does the IO. It must never panic
//! on client or upstream input, never buffer a body whole (except a capped
//! copy for mirroring), and never let a slow mirror touch the primary path.

/// `AsyncWrite` for a wrapper `$ty<IO>` whose writes all go, unchanged, to
/// its field `io` (the wrappers that only look at what is read).
macro_rules! forward_async_write {
    ($ty:ident) => {
        impl<IO: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $ty<IO> {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.io.is_write_vectored()
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().io).poll_flush(cx)
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
            }
        }
    };
}

pub mod body;
pub mod client;
pub mod errors;
pub mod express;
pub mod grpc;
pub mod limits;
pub mod server;
pub mod service;
pub mod smuggle;
pub mod tls;
pub mod upgrade;
pub mod upload;
pub mod upstream;

use http::header::{HeaderMap, HeaderName, CONNECTION, TE, TRAILER, TRANSFER_ENCODING, UPGRADE};

static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Whether `name` is a fixed hop-by-hop header: one that describes one
/// connection, not the message (RFC 9110 §7.6.1). hyper strips them only on
/// HTTP/2, so the proxy removes them both ways. Compared as `HeaderName`s
/// (an enum compare for standard names), never as strings.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    *name == CONNECTION
        || *name == TE
        || *name == TRAILER
        || *name == TRANSFER_ENCODING
        || *name == UPGRADE
        || *name == KEEP_ALIVE
        || *name == PROXY_CONNECTION
}

/// Removes the hop-by-hop headers and every header named in `Connection`.
/// One pass over the names first: most messages carry none, and then
/// nothing is hashed or removed.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    if headers.contains_key(CONNECTION) {
        let listed: Vec<HeaderName> = headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|n| HeaderName::from_bytes(n.trim().to_ascii_lowercase().as_bytes()).ok())
            .collect();
        for n in listed {
            headers.remove(n);
        }
    }
    for n in [
        &CONNECTION,
        &TE,
        &TRAILER,
        &TRANSFER_ENCODING,
        &UPGRADE,
        &KEEP_ALIVE,
        &PROXY_CONNECTION,
    ] {
        headers.remove(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_fixed_and_listed_headers() {
        let mut h = HeaderMap::new();
        h.insert("connection", "keep-alive, X-Secret".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert("x-secret", "1".parse().unwrap());
        h.insert("te", "gzip".parse().unwrap());
        h.insert("upgrade", "h2c".parse().unwrap());
        h.insert("x-keep", "1".parse().unwrap());
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-keep"));
        // Each fixed name alone is found by the first pass.
        for n in [
            "connection",
            "keep-alive",
            "proxy-connection",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
        ] {
            let mut h = HeaderMap::new();
            h.insert(HeaderName::from_static(n), "x".parse().unwrap());
            h.insert("x-keep", "1".parse().unwrap());
            strip_hop_by_hop(&mut h);
            assert_eq!(h.len(), 1, "{n} not stripped");
        }
    }
}
