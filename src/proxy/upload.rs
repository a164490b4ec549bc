//! The request body on its way upstream (general path; the fast path hands
//! every request with a body to it).
//!
//! [`Watched`] wraps the body and tells the request path, through a shared
//! [`Upload`], when the client has sent all of it (the route timeout starts
//! then, as Envoy's does) and, when it broke, why: malformed framing (400),
//! a client that went away (499) or one that stopped sending (408). Those
//! are the client's faults: they never count against the backend, its
//! outlier detection or the analysis. [`wait_response`] runs the phases.

use super::body::BoxError;
use super::limits;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::Notify;

/// Why a request body did not reach the backend whole, by the client's doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientFault {
    /// Framing the server could not decode (a bad chunk size, an HTTP/2
    /// protocol error): 400, connection closed.
    Malformed,
    /// The client closed or reset its connection (or stream) mid-body: 499.
    Gone,
    /// No body data for `proxy.bodyIdleTimeout`: 408.
    Stalled,
    /// The body was not complete within `proxy.requestBodyTimeout`: 408.
    TooSlow,
    /// The body grew past the route's `maxRequestBodyBytes`: 413.
    TooLarge,
}

const STREAMING: u8 = 0;
const COMPLETE: u8 = 1;
const MALFORMED: u8 = 2;
const GONE: u8 = 3;
const STALLED: u8 = 4;
const TOO_LARGE: u8 = 5;

/// What the request path and the body share.
#[derive(Debug, Default)]
pub struct Upload {
    /// `STREAMING`, `COMPLETE` or the fault.
    state: AtomicU8,
    /// Frames handed upstream so far (progress, for the stalled-backend check).
    frames: AtomicU64,
    /// The last poll found no data from the client: a stall now is the
    /// client's, not the backend's.
    waiting_on_client: AtomicBool,
    /// Woken when the state leaves `STREAMING`.
    changed: Notify,
}

impl Upload {
    fn set(&self, state: u8) {
        if self
            .state
            .compare_exchange(STREAMING, state, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.changed.notify_waiters();
        }
    }

    /// The client's fault, once the body broke by its doing.
    pub fn fault(&self) -> Option<ClientFault> {
        match self.state.load(Ordering::Acquire) {
            MALFORMED => Some(ClientFault::Malformed),
            GONE => Some(ClientFault::Gone),
            STALLED => Some(ClientFault::Stalled),
            TOO_LARGE => Some(ClientFault::TooLarge),
            _ => None,
        }
    }

    /// Resolves once the body is complete or broken.
    async fn settled(&self) {
        loop {
            let notified = self.changed.notified();
            if self.state.load(Ordering::Acquire) != STREAMING {
                return;
            }
            notified.await;
        }
    }
}

/// A request body that reports its end and its faults to an [`Upload`].
pub struct Watched<B> {
    inner: B,
    upload: Arc<Upload>,
}

impl<B> Watched<B> {
    /// Wraps `inner`; the request path keeps `upload`.
    pub fn new(inner: B, upload: Arc<Upload>) -> Self {
        Watched { inner, upload }
    }
}

impl<B> Body for Watched<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        let up = &this.upload;
        up.waiting_on_client
            .store(polled.is_pending(), Ordering::Relaxed);
        match &polled {
            Poll::Pending => {}
            Poll::Ready(None) => up.set(COMPLETE),
            Poll::Ready(Some(Ok(_))) => {
                up.frames.fetch_add(1, Ordering::Relaxed);
                if this.inner.is_end_stream() {
                    up.set(COMPLETE);
                }
            }
            Poll::Ready(Some(Err(e))) => up.set(classify(&**e)),
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Tells a body that could not be decoded from one whose client went away.
/// hyper's HTTP/1 decoder reports bad framing as `InvalidInput` or
/// `InvalidData`; h2 reports it as a protocol error. Anything else (reset,
/// end of stream inside the body, a cancelled stream) means the client left.
fn classify(err: &(dyn std::error::Error + 'static)) -> u8 {
    if limits::is_idle_timeout(err) {
        return STALLED;
    }
    if is_too_large(err) {
        return TOO_LARGE;
    }
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData
            ) {
                return MALFORMED;
            }
        }
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            if h2.reason() == Some(h2::Reason::PROTOCOL_ERROR) {
                return MALFORMED;
            }
        }
        cur = e.source();
    }
    GONE
}

/// The fault of a request body that failed by the client's doing (for a
/// body read whole before it is sent, as a retry's is).
pub fn fault_of(err: &(dyn std::error::Error + 'static)) -> ClientFault {
    match classify(err) {
        MALFORMED => ClientFault::Malformed,
        STALLED => ClientFault::Stalled,
        TOO_LARGE => ClientFault::TooLarge,
        _ => ClientFault::Gone,
    }
}

/// The error of a body cut at the route's `maxRequestBodyBytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyTooLarge {
    /// The limit.
    pub max: u64,
}

impl std::fmt::Display for BodyTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "request body larger than {} bytes", self.max)
    }
}

impl std::error::Error for BodyTooLarge {}

fn is_too_large(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if e.is::<BodyTooLarge>() || e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cur = e.source();
    }
    false
}

/// A request body that fails with [`BodyTooLarge`] once more than `max`
/// bytes came: a body without a declared length is cut there, before the
/// byte that would exceed the limit is sent upstream.
pub struct Capped<B> {
    inner: B,
    max: u64,
    seen: u64,
}

impl<B> Capped<B> {
    /// Wraps `inner`.
    pub fn new(inner: B, max: u64) -> Self {
        Capped {
            inner,
            max,
            seen: 0,
        }
    }
}

impl<B> Body for Capped<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &polled {
            if let Some(d) = f.data_ref() {
                this.seen = this.seen.saturating_add(d.len() as u64);
                if this.seen > this.max {
                    return Poll::Ready(Some(Err(Box::new(BodyTooLarge { max: this.max }))));
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What the upstream client yields for one request.
pub type Answer = Result<http::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error>;

/// How waiting for the response head ended.
#[derive(Debug)]
pub enum Waited<T> {
    /// The upstream answered or failed (not the client's doing).
    Done(T),
    /// No response head within the route timeout after the request was
    /// complete, or the backend stopped taking the body for the body idle
    /// timeout: 504, the backend's fault.
    TimedOut,
    /// The client broke the upload.
    Client(ClientFault),
}

/// Limits on a request's wait for its response head.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The route timeout: from the moment the request is complete.
    pub route: Duration,
    /// `proxy.requestBodyTimeout`: from the request head to the body's end.
    pub body_total: Option<Duration>,
    /// `proxy.bodyIdleTimeout`: also how long the backend may leave the body
    /// unread while the client has more.
    pub body_idle: Duration,
}

/// Waits for `exchange` (the upstream request). Without `upload` (no body)
/// the route timeout runs at once. With one, the route timeout starts when
/// the body is complete; until then the upload is bounded by the body
/// timeouts, and a broken body ends the wait as the client's fault.
pub async fn wait_response<F>(
    exchange: F,
    upload: Option<&Upload>,
    limits: Limits,
) -> Waited<Answer>
where
    F: Future<Output = Answer>,
{
    let mut exchange = pin!(exchange);
    if let Some(up) = upload {
        let total = sleep_or_never(limits.body_total);
        let mut total = pin!(total);
        let mut watchdog = pin!(tokio::time::sleep(limits.body_idle));
        let mut seen = up.frames.load(Ordering::Relaxed);
        loop {
            tokio::select! {
                biased;
                r = &mut exchange => {
                    // A failure caused by the broken body is the client's.
                    // An answer that came anyway is the backend's (it
                    // answered early); a failure after the body broke is not.
                    return match up.fault() {
                        Some(f) if r.is_err() => Waited::Client(f),
                        _ => Waited::Done(r),
                    };
                }
                () = up.settled() => match up.fault() {
                    Some(f) => return Waited::Client(f),
                    None => break,
                },
                () = &mut total => return Waited::Client(ClientFault::TooSlow),
                () = &mut watchdog => {
                    let now = up.frames.load(Ordering::Relaxed);
                    if now == seen && !up.waiting_on_client.load(Ordering::Relaxed) {
                        return Waited::TimedOut;
                    }
                    seen = now;
                    watchdog.as_mut().reset(tokio::time::Instant::now() + limits.body_idle);
                }
            }
        }
    }
    match tokio::time::timeout(limits.route, exchange).await {
        Ok(r) => Waited::Done(r),
        Err(_) => Waited::TimedOut,
    }
}

async fn sleep_or_never(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}
