//! gRPC outcome for the success rate.
//!
//! A gRPC call fails inside a 200 response: its result is the `grpc-status`
//! trailer (or header, for a trailers-only response). The rule weir applies
//! to a response whose `content-type` is `application/grpc` (or
//! `application/grpc+…`, `application/grpc;…`; gRPC-Web is not covered):
//!
//! - HTTP status ≥ 500: failure (as for any request);
//! - `grpc-status` in the response headers (trailers-only): failure iff ≠ 0;
//! - else the trailers decide when the body ends: failure iff
//!   `grpc-status` ≠ 0, or missing, or the stream breaks;
//! - the client going away before the trailers: recorded as not failed (a
//!   cancellation is not the backend's fault).
//!
//! A call decided by its trailers is recorded when the trailers arrive, so
//! its latency is the full call duration (time to headers for anything else).

use super::body::BoxError;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// How a gRPC call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `grpc-status: 0`.
    Ok,
    /// Non-zero or missing `grpc-status`, or a broken stream.
    Failed,
    /// The client dropped the response before its end.
    Cancelled,
}

/// Whether a response (or request) is gRPC by its content type.
pub fn is_grpc(headers: &HeaderMap) -> bool {
    let Some(ct) = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some(rest) = ct.strip_prefix("application/grpc") else {
        return false;
    };
    rest.is_empty() || rest.starts_with('+') || rest.starts_with(';')
}

/// Whether a `grpc-status` value means failure (anything but `0`).
pub fn status_failed(v: &HeaderValue) -> bool {
    v.as_bytes().trim_ascii() != b"0"
}

/// Called once with the outcome.
pub type OnOutcome = Box<dyn FnOnce(Outcome) + Send + Sync>;

/// A response body that reports the call's outcome from its trailers.
pub struct StatusWatch<B> {
    inner: B,
    on_done: Option<OnOutcome>,
}

impl<B> StatusWatch<B> {
    /// Watches `inner`; `on_done` runs exactly once (at the trailers, at
    /// the end of the stream, on an error, or when dropped early).
    pub fn new(inner: B, on_done: OnOutcome) -> Self {
        StatusWatch {
            inner,
            on_done: Some(on_done),
        }
    }

    fn finish(&mut self, o: Outcome) {
        if let Some(f) = self.on_done.take() {
            f(o);
        }
    }
}

impl<B> Drop for StatusWatch<B> {
    fn drop(&mut self) {
        self.finish(Outcome::Cancelled);
    }
}

impl<B> Body for StatusWatch<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(t) = f.trailers_ref() {
                    let failed = t.get("grpc-status").is_none_or(status_failed);
                    this.finish(if failed { Outcome::Failed } else { Outcome::Ok });
                }
            }
            Poll::Ready(Some(Err(_))) | Poll::Ready(None) => this.finish(Outcome::Failed),
            Poll::Pending => {}
        }
        polled.map(|o| o.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};
    use std::sync::{Arc, Mutex};

    #[test]
    fn content_types() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(http::header::CONTENT_TYPE, v.parse().unwrap());
            m
        };
        assert!(is_grpc(&h("application/grpc")));
        assert!(is_grpc(&h("application/grpc+proto")));
        assert!(is_grpc(&h("application/grpc;charset=utf-8")));
        assert!(!is_grpc(&h("application/grpc-web")));
        assert!(!is_grpc(&h("application/json")));
        assert!(!is_grpc(&HeaderMap::new()));
    }

    async fn outcome_of(frames: Vec<Frame<Bytes>>, read_all: bool) -> Outcome {
        let seen = Arc::new(Mutex::new(None));
        let s = seen.clone();
        let stream =
            futures_util_shim::iter(frames.into_iter().map(Ok::<_, std::convert::Infallible>));
        let mut body = StatusWatch::new(
            StreamBody::new(stream),
            Box::new(move |o| *s.lock().unwrap() = Some(o)),
        );
        if read_all {
            while body.frame().await.is_some() {}
        } else {
            let _ = body.frame().await;
        }
        drop(body);
        let o = seen.lock().unwrap().take();
        o.expect("outcome reported")
    }

    /// `futures::stream::iter` without the dependency.
    mod futures_util_shim {
        use std::pin::Pin;
        use std::task::{Context, Poll};
        pub struct Iter<I>(I);
        pub fn iter<I: Iterator>(i: I) -> Iter<I> {
            Iter(i)
        }
        impl<I: Iterator + Unpin> futures_core::Stream for Iter<I> {
            type Item = I::Item;
            fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<I::Item>> {
                Poll::Ready(self.0.next())
            }
        }
    }

    fn trailers(status: Option<&str>) -> Frame<Bytes> {
        let mut t = HeaderMap::new();
        if let Some(s) = status {
            t.insert("grpc-status", s.parse().unwrap());
        }
        Frame::trailers(t)
    }

    #[tokio::test]
    async fn trailers_decide_and_early_drop_is_a_cancellation() {
        let data = || Frame::data(Bytes::from_static(b"\0\0\0\0\0"));
        assert_eq!(
            outcome_of(vec![data(), trailers(Some("0"))], true).await,
            Outcome::Ok
        );
        assert_eq!(
            outcome_of(vec![data(), trailers(Some("13"))], true).await,
            Outcome::Failed
        );
        assert_eq!(
            outcome_of(vec![data(), trailers(None)], true).await,
            Outcome::Failed
        );
        assert_eq!(outcome_of(vec![data()], true).await, Outcome::Failed);
        assert_eq!(
            outcome_of(vec![data(), trailers(Some("0"))], false).await,
            Outcome::Cancelled
        );
    }
}
