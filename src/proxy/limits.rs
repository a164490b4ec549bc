//! Request limits the proxy enforces itself (hyper enforces the rest, see
//! `server::conn_builder`), and the body idle timeout.
//!
//! | limit | where | answer |
//! |---|---|---|
//! | head size (`maxHeaderBytes`) | h1: the fast path; `smuggle::Tracker` + the service behind hyper (whose `max_buf_size` is only a loose bound); h2 `max_header_list_size` | 431 |
//! | header count (`maxHeaders`) | hyper h1 `max_headers`; here for HTTP/2 | 431 |
//! | request-target length (`maxUriBytes`) | here | 414 |
//! | body idle (`bodyIdleTimeout`) | [`IdleTimeout`] on both bodies | 408 before the response, else the stream is cut |

use super::body::BoxError;
use bytes::Bytes;
use http::{HeaderMap, Uri};
use http_body::{Body, Frame, SizeHint};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Length of the request target as the client sent it (origin form: path
/// and query; absolute form and HTTP/2: the whole URI).
pub fn request_target_len(uri: &Uri) -> usize {
    let pq = uri.path_and_query().map_or(0, |p| p.as_str().len());
    match uri.authority() {
        // scheme "://" authority
        Some(a) => uri.scheme_str().map_or(0, |s| s.len() + 3) + a.as_str().len() + pq,
        None => pq,
    }
}

/// The detail of the 431 for an HTTP/1 head longer than `max` bytes (the
/// request line through the empty line that ends the head).
pub fn head_too_large(max: usize) -> String {
    format!("the request head is longer than {max} bytes")
}

/// Whether a request carries more header fields than `max` (every value of
/// a repeated header counts, as in hyper's HTTP/1 parser).
pub fn too_many_headers(headers: &HeaderMap, max: usize) -> bool {
    headers.len() > max
}

/// The error a body yields after [`IdleTimeout`] elapsed without a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyIdleTimeout {
    /// The configured idle limit.
    pub after: Duration,
}

impl fmt::Display for BodyIdleTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no body data for {:?}", self.after)
    }
}

impl std::error::Error for BodyIdleTimeout {}

/// Whether `err` (or any error it wraps) is a [`BodyIdleTimeout`]; used to
/// tell a stalled client (408) from a failed upstream (502).
pub fn is_idle_timeout(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if e.is::<BodyIdleTimeout>() {
            return true;
        }
        cur = e.source();
    }
    false
}

/// A body that fails with [`BodyIdleTimeout`] when its inner body makes no
/// progress for `after`. The timer is only created the first time the inner
/// body is not ready, so bodies that arrive at once cost no timer.
pub struct IdleTimeout<B> {
    inner: B,
    after: Duration,
    /// Created lazily; reset at the start of every wait.
    sleep: Option<Pin<Box<Sleep>>>,
    /// A wait is in progress (the deadline is set for it).
    waiting: bool,
    /// The timeout fired: the body is over.
    fired: bool,
}

impl<B> IdleTimeout<B> {
    /// Wraps `inner`.
    pub fn new(inner: B, after: Duration) -> Self {
        IdleTimeout {
            inner,
            after,
            sleep: None,
            waiting: false,
            fired: false,
        }
    }
}

impl<B> Body for IdleTimeout<B>
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
        if this.fired {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => {
                this.waiting = false;
                Poll::Ready(r.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => {
                if !this.waiting {
                    this.waiting = true;
                    let deadline = Instant::now() + this.after;
                    match &mut this.sleep {
                        Some(s) => s.as_mut().reset(deadline),
                        None => this.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
                    }
                }
                let Some(sleep) = this.sleep.as_mut() else {
                    return Poll::Pending;
                };
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.fired = true;
                        Poll::Ready(Some(Err(Box::new(BodyIdleTimeout { after: this.after }))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.fired || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    #[test]
    fn target_length_counts_what_the_client_sent() {
        assert_eq!(request_target_len(&"/a?b=c".parse().unwrap()), 6);
        assert_eq!(request_target_len(&"http://h:1/a".parse().unwrap()), 12);
        assert_eq!(request_target_len(&"*".parse().unwrap()), 1);
    }

    #[test]
    fn header_count_includes_repeated_values() {
        let mut h = HeaderMap::new();
        h.append("a", "1".parse().unwrap());
        h.append("a", "2".parse().unwrap());
        assert!(!too_many_headers(&h, 2));
        assert!(too_many_headers(&h, 1));
    }

    type Chunks = StreamBody<tokio_stream_shim::Rx<Result<Frame<Bytes>, std::convert::Infallible>>>;

    /// A minimal channel-backed stream (tokio's mpsc receiver as a Stream)
    /// without pulling in tokio-stream.
    mod tokio_stream_shim {
        use std::pin::Pin;
        use std::task::{Context, Poll};
        pub struct Rx<T>(pub tokio::sync::mpsc::Receiver<T>);
        impl<T> futures_core::Stream for Rx<T> {
            type Item = T;
            fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
                self.0.poll_recv(cx)
            }
        }
    }

    fn channel_body() -> (
        tokio::sync::mpsc::Sender<Result<Frame<Bytes>, std::convert::Infallible>>,
        Chunks,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        (tx, StreamBody::new(tokio_stream_shim::Rx(rx)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_body_passes_and_a_stalled_one_fails_after_the_limit() {
        let (tx, body) = channel_body();
        let mut b = IdleTimeout::new(body, Duration::from_secs(10));
        let feeder = tokio::spawn(async move {
            for _ in 0..3 {
                // Each gap is under the limit; together they exceed it.
                tokio::time::sleep(Duration::from_secs(8)).await;
                tx.send(Ok(Frame::data(Bytes::from_static(b"x"))))
                    .await
                    .unwrap();
            }
            // Then stall while still holding the sender.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(tx);
        });
        for _ in 0..3 {
            let f = b.frame().await.unwrap().unwrap();
            assert_eq!(f.into_data().unwrap(), Bytes::from_static(b"x"));
        }
        let started = Instant::now();
        let err = b.frame().await.unwrap().unwrap_err();
        assert!(is_idle_timeout(&*err), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        assert!(b.frame().await.is_none(), "a fired body is over");
        feeder.abort();
    }
}
