//! The data plane: accept connections, route every request by one table
//! snapshot, forward it upstream with streaming bodies, answer the client.
//!
//! One request core, two transports. The phases of a request (route →
//! admit → decide → forward → respond → record) are the plain functions of
//! [`phases`], with the header rules of [`headers`]; decisions come from
//! the pure `routing` module. Two transports call them:
//! - the HTTP/1 fast path, [`express`]: every clear-text connection starts
//!   there (with `proxy.http1FastPath: true`, the default) and is read and
//!   written as bytes. A request it does not serve (`phases::needs_general_path`
//!   and `express::head::analyze_request` list which) ends it with an
//!   `express::Handoff`, which [`server`] gives to hyper at that request;
//! - the hyper path, [`service`]: HTTP/2, TLS, `http1FastPath: false`, and
//!   every connection handed off.
//!
//! It must never panic on client or upstream input, never buffer a body
//! whole (except a capped copy for mirroring), and never let a slow mirror
//! touch the primary path.

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
pub mod headers;
pub mod limits;
pub mod mirror;
pub mod phases;
pub mod server;
pub mod service;
pub mod smuggle;
pub mod tls;
pub mod upgrade;
pub mod upload;
pub mod upstream;

pub use headers::{
    is_hop_by_hop, is_protected, is_weir_header, strip_hop_by_hop, strip_weir_headers,
};
