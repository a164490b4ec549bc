//! One body type for both directions, so the upstream client and the server
//! need no boxing: a streamed hyper body, a small buffered one, or nothing.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Dropped when the body is finished or abandoned; used to count in-flight
/// requests per endpoint until the response is fully streamed.
pub type BodyGuard = Box<dyn Send + Sync + 'static>;

/// Error of a proxied body: hyper's, or one of the proxy's own (a body idle
/// timeout), which hyper cannot represent.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A body behind a wrapper (idle timeout, gRPC status watch).
pub type BoxedBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;

/// Request or response body passing through the proxy.
pub struct ProxyBody {
    inner: Inner,
    /// Released when the body is dropped (end of stream or client gone).
    _guard: Option<BodyGuard>,
}

enum Inner {
    Empty,
    Full(Option<Bytes>),
    Streamed(Incoming),
    Tee(super::mirror::TeeBody),
    Boxed(BoxedBody),
}

impl ProxyBody {
    /// No body.
    pub fn empty() -> Self {
        ProxyBody {
            inner: Inner::Empty,
            _guard: None,
        }
    }

    /// A small in-memory body (errors, API answers).
    pub fn full(b: impl Into<Bytes>) -> Self {
        let b = b.into();
        let inner = if b.is_empty() {
            Inner::Empty
        } else {
            Inner::Full(Some(b))
        };
        ProxyBody {
            inner,
            _guard: None,
        }
    }

    /// A body streamed from a peer, never buffered whole.
    pub fn streamed(b: Incoming) -> Self {
        ProxyBody {
            inner: Inner::Streamed(b),
            _guard: None,
        }
    }

    /// A request body that is also copied to a mirror.
    pub fn tee(b: super::mirror::TeeBody) -> Self {
        ProxyBody {
            inner: Inner::Tee(b),
            _guard: None,
        }
    }

    /// A wrapped body (see `limits::IdleTimeout`, `grpc::StatusWatch`).
    pub fn boxed(b: BoxedBody) -> Self {
        ProxyBody {
            inner: Inner::Boxed(b),
            _guard: None,
        }
    }

    /// Attaches a guard released with the body.
    pub fn with_guard(mut self, g: BodyGuard) -> Self {
        self._guard = Some(g);
        self
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let boxed = |p: Poll<Option<Result<Frame<Bytes>, hyper::Error>>>| {
            p.map(|o| o.map(|r| r.map_err(BoxError::from)))
        };
        match &mut self.get_mut().inner {
            Inner::Empty => Poll::Ready(None),
            Inner::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Inner::Streamed(b) => boxed(Pin::new(b).poll_frame(cx)),
            Inner::Tee(t) => boxed(Pin::new(t).poll_frame(cx)),
            Inner::Boxed(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Empty => true,
            Inner::Full(b) => b.is_none(),
            Inner::Streamed(b) => b.is_end_stream(),
            Inner::Tee(t) => t.is_end_stream(),
            Inner::Boxed(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Empty => SizeHint::with_exact(0),
            Inner::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Inner::Streamed(b) => b.size_hint(),
            Inner::Tee(t) => t.size_hint(),
            Inner::Boxed(b) => b.size_hint(),
        }
    }
}
