//! The HTTP/1 fast path ("express"): clear-text HTTP/1.1 requests without a
//! body are read, routed and forwarded as bytes, without building hyper
//! requests or going through hyper-util's pool (that machinery was most of
//! weir's user-space CPU per request).
//!
//! Every plain connection starts here (unless `proxy.http1FastPath: false`).
//! A request the fast path does not serve (see `head::analyze_request`: a
//! body, an upgrade, HTTP/1.0, anything hyper would refuse), or one whose
//! route, decision or backend needs the general path
//! (`phases::needs_general_path` and its companions: mirroring, header
//! edits, TLS or HTTP/2 to the backend), ends [`connection`] with a
//! [`Handoff`]: the stream and the bytes read so far, at a request boundary.
//! The server (`server::fast_connection`) gives it to hyper, which serves
//! that request and everything after it exactly as it serves any other
//! connection. Nothing is sent upstream before that choice is made, so a
//! handed-over request is decided only once.
//!
//! What is decided, counted and logged comes from `phases` (route lookup,
//! side and endpoint, failure table, stats, metrics, outlier feedback,
//! access log), as on the hyper path; this module reads and writes bytes:
//! `head` (the heads both ways), `upstream` (the exchange with an endpoint),
//! `body` (forwarding the response body), `pool`, `chunked`, `rewind`. It
//! must never forward a request it has not fully validated, never reuse an
//! upstream connection whose response it has not read to its end, and never
//! hold a read buffer while a connection is idle.

mod body;
pub mod chunked;
pub mod head;
pub use crate::dataplane::idle_pool as pool;
mod prepare;
pub mod rewind;
mod upstream;

#[cfg(test)]
mod tests;

use super::phases::attempts::{Attempts, Tried};
use super::phases::{self, feed_outlier, record_answer, UpstreamFailure};
use super::service::ProxyShared;
use super::upstream::{Endpoint, InFlight};
use crate::config::RetryPolicy;
use crate::dataplane::resilience::retry::{AttemptOutcome, BodyReplay};
use crate::dataplane::resilience::RouteGuards;
use crate::dataplane::store::RouteRuntime;
use body::forward_body;
use pool::IdlePool;
use prepare::Forward;
use prepare::{prepare, Answer, Prepared};
use rewind::Rewind;
use std::borrow::Cow;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use upstream::{exchange, UpErr};

/// Request heads longer than this go to hyper (which applies
/// `proxy.maxHeaderBytes`); real heads are far smaller.
const FAST_HEAD_LIMIT: usize = 16 * 1024;
/// Header fields parsed in place; more go to hyper.
const REQUEST_HEADERS: usize = 64;
/// Header fields of an upstream response (hyper's client allows 100).
const RESPONSE_HEADERS: usize = 128;

/// What comes after one exchange.
enum Next {
    KeepAlive,
    Close,
    /// Give the connection, from the current request on, to hyper.
    Handoff,
}

/// Per-connection facts the request path reads.
struct Client<'a> {
    shared: &'a Arc<ProxyShared>,
    peer: SocketAddr,
    /// The listener's port (`port` matches).
    port: u16,
    /// The peer's address as text, formatted once (X-Forwarded-For).
    peer_ip: &'a str,
    /// The peer is one of the listener's `trustedProxies`.
    trusted: bool,
    /// True once a graceful shutdown has begun.
    shutdown: &'a watch::Receiver<bool>,
}

/// A connection the fast path gives back, at a request boundary, for hyper
/// to serve from the current request on.
pub struct Handoff {
    /// The client connection.
    pub stream: TcpStream,
    /// What was read from it and not served yet (hyper reads it first).
    pub buf: Vec<u8>,
    /// When the head being read must be complete (`None`: a whole head is in
    /// `buf`, and hyper's own bound applies from now).
    pub head_by: Option<tokio::time::Instant>,
}

impl Handoff {
    /// The stream with the bytes already read put back in front of it.
    pub fn into_io(self) -> Rewind<TcpStream> {
        Rewind::new(self.buf, self.stream)
    }
}

/// Serves one plain client connection until it closes (`None`), or returns
/// it for hyper to serve ([`Handoff`]); `shutdown` turns true when a
/// graceful shutdown begins.
pub async fn connection(
    mut stream: TcpStream,
    (peer, trusted): (SocketAddr, bool),
    port: u16,
    shared: &Arc<ProxyShared>,
    shutdown: &watch::Receiver<bool>,
) -> Option<Handoff> {
    let peer_ip = peer.ip().to_string();
    let limit = FAST_HEAD_LIMIT.min(shared.settings.max_header_bytes);
    let header_read = shared.settings.header_read_timeout;
    // One of each per connection, re-armed per request: moving a tokio timer's
    // deadline later costs an atomic store, a new timer a wheel insert and
    // removal; and the shutdown signal is subscribed to once.
    let stop = shutting_down(shutdown.clone());
    let head_timer = tokio::time::sleep(header_read);
    let upstream_timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(stop, head_timer, upstream_timer);
    let mut buf = Vec::new();
    loop {
        head_timer
            .as_mut()
            .reset(deadline(tokio::time::Instant::now(), header_read));
        let read = tokio::select! {
            biased;
            () = &mut stop => return None,
            r = read_head(&mut stream, &mut buf, limit) => r,
            () = head_timer.as_mut() => {
                tracing::debug!(target: "weir::conn", %peer, "no request head within the header read timeout; closing");
                return None;
            }
        };
        let end = match read {
            Ok(Some(Some(end))) => end,
            // hyper reads the rest of this head within what is left of the
            // bound, not a new one.
            Ok(Some(None)) => {
                return Some(Handoff {
                    stream,
                    buf,
                    head_by: Some(head_timer.deadline()),
                })
            }
            Ok(None) | Err(_) => return None,
        };
        let client = Client {
            shared,
            peer,
            port,
            peer_ip: &peer_ip,
            trusted,
            shutdown,
        };
        // Boxed: its state is only needed while a request is in flight.
        let next = Box::pin(serve_one(
            &mut stream,
            &mut buf,
            end,
            &client,
            upstream_timer.as_mut(),
        ))
        .await;
        match next {
            Next::KeepAlive => {}
            Next::Close => return None,
            Next::Handoff => {
                return Some(Handoff {
                    stream,
                    buf,
                    head_by: None,
                })
            }
        }
        if buf.is_empty() {
            // Idle connections hold no buffer.
            buf = Vec::new();
        }
    }
}

/// `from + d`, or one far enough away when that overflows: timeouts have no
/// upper bound in the config, and an absurd one must not panic a connection.
fn deadline(from: tokio::time::Instant, d: Duration) -> tokio::time::Instant {
    from.checked_add(d)
        .unwrap_or_else(|| from + Duration::from_secs(86_400 * 365 * 30))
}

/// Resolves once a graceful shutdown has begun (never if nobody can start one).
async fn shutting_down(mut rx: watch::Receiver<bool>) {
    if rx.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Reads until `buf` holds a whole head: `Some(Some(end))`; `Some(None)`
/// when `limit` bytes hold none; `None` when the client closed.
async fn read_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    limit: usize,
) -> io::Result<Option<Option<usize>>> {
    loop {
        if !buf.is_empty() {
            if let Some(end) = head::head_end(buf) {
                return Ok(Some(Some(end)));
            }
            // Noise shows in the first bytes; checking only those keeps a
            // client that sends its head a byte at a time from costing a
            // parse per byte over the whole head.
            if buf.len() >= limit || (buf.len() <= 1024 && !could_be_a_head(buf)) {
                return Ok(Some(None));
            }
        }
        // Wait before allocating: an idle connection must not hold a buffer.
        stream.readable().await?;
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4096);
        }
        // `read_buf`, not `try_read_buf`: after a short read tokio forgets the
        // socket's readiness, which saves a read that would only say EAGAIN.
        if stream.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// Whether the start of a head parses so far: bytes that cannot become a
/// request (a TLS ClientHello on the clear-text port, binary noise) go to
/// hyper at once, which answers 400, instead of waiting for a line end.
fn could_be_a_head(partial: &[u8]) -> bool {
    let mut hs = [httparse::EMPTY_HEADER; REQUEST_HEADERS];
    !matches!(
        httparse::Request::new(&mut hs).parse(partial),
        Err(e) if e != httparse::Error::TooManyHeaders
    )
}

/// Serves the request whose head is `buf[..end]`.
async fn serve_one(
    client: &mut TcpStream,
    buf: &mut Vec<u8>,
    end: usize,
    cx: &Client<'_>,
    mut timer: std::pin::Pin<&mut tokio::time::Sleep>,
) -> Next {
    let (shared, peer, shutdown) = (cx.shared, cx.peer, cx.shutdown);
    let start = Instant::now();
    let snap = shared.store.load();
    let prepared = prepare(&buf[..end], shared, &snap, cx);
    let mut f = match prepared {
        Prepared::Handoff => return Next::Handoff,
        Prepared::Forward(f) => f,
        Prepared::Answer(a) => {
            buf.drain(..end);
            return answer(client, cx, &snap, a, start).await;
        }
    };
    buf.drain(..end);
    let route = &snap.spec.routing.routes[f.route];
    let rt = &snap.routes[f.route];
    let s = &shared.settings;
    // The side's circuit breaker; a queued request waits within the route timeout.
    let _permit = match phases::admit_backend(&f.backend, route.timeout).await {
        Ok(p) => p,
        Err(refusal) => return answer(client, cx, &snap, f.failed(refusal), start).await,
    };
    let mut rbuf = Vec::new();
    let (exchanged, _in_flight, attempt_start) = match phases::retry_policy(rt) {
        None => {
            rbuf.reserve(8192);
            let in_flight = InFlight::start(f.endpoint.clone());
            timer.as_mut().reset(deadline(
                tokio::time::Instant::from_std(start),
                route.timeout,
            ));
            let exchanged = tokio::select! {
                biased;
                r = exchange(&f.endpoint, &f.upstream_head, &mut rbuf, f.idempotent, s) => Ok(r),
                () = timer.as_mut() => Err(()),
            };
            let exchanged = match exchanged {
                Ok(r) => r.map_err(|e| classify(&f.endpoint, e).0),
                Err(()) => Err(UpstreamFailure::Timeout(route.timeout)),
            };
            (exchanged, in_flight, start)
        }
        Some((guards, policy)) => {
            let tried = retried(&f, rt, guards, policy, route.timeout, cx, start, timer).await;
            f.endpoint = tried.endpoint;
            let exchanged = tried.outcome.map(|(up, buf, end)| {
                rbuf = buf;
                (up, end)
            });
            (exchanged, tried.guard, tried.started)
        }
    };
    let (mut upstream, end) = match exchanged {
        Ok(x) => x,
        Err(failure) => {
            feed_outlier(&f.backend, &f.endpoint, None);
            let refusal = failure.refusal(rt, f.role, &f.backend, &f.endpoint);
            return answer(client, cx, &snap, f.failed(refusal), attempt_start).await;
        }
    };

    // The response head: parsed, checked, rewritten for the client.
    let close = f.close || *shutdown.borrow();
    let mut out = std::mem::take(&mut f.upstream_head);
    out.clear();
    let plan = {
        let mut hs = [httparse::EMPTY_HEADER; RESPONSE_HEADERS];
        let mut resp = httparse::Response::new(&mut hs);
        let parsed = matches!(resp.parse(&rbuf[..end]), Ok(httparse::Status::Complete(_)));
        let plan = if parsed {
            head::analyze_response(&resp, f.head_request)
        } else {
            Err("unparsable response head")
        };
        match plan {
            Ok(plan) => {
                head::write_client_head(
                    &mut out,
                    &resp,
                    &plan,
                    &f.set_cookies,
                    close,
                    &http_date(),
                );
                plan
            }
            Err(why) => {
                tracing::debug!(target: "weir::upstream", endpoint = %f.endpoint.address, why, "unusable response");
                feed_outlier(&f.backend, &f.endpoint, None);
                let refusal = UpstreamFailure::Broken.refusal(rt, f.role, &f.backend, &f.endpoint);
                return answer(client, cx, &snap, f.failed(refusal), attempt_start).await;
            }
        }
    };
    feed_outlier(&f.backend, &f.endpoint, Some(plan.status));
    record_answer(
        shared,
        rt,
        f.role,
        plan.status,
        plan.status >= 500,
        attempt_start,
    );
    if let Some(l) = &f.log {
        l.log(shared, peer, Some(&route.name), plan.status, start);
    }

    match forward_body(
        client,
        &mut upstream,
        &out,
        &mut rbuf,
        end,
        plan.framing,
        s.body_idle_timeout,
    )
    .await
    {
        Ok(clean) => {
            if clean && plan.reusable {
                IdlePool::put(
                    &f.endpoint,
                    upstream,
                    s.upstream_max_idle_per_host,
                    s.upstream_idle_timeout,
                );
            }
            if close {
                Next::Close
            } else {
                Next::KeepAlive
            }
        }
        Err(e) => {
            tracing::debug!(target: "weir::upstream", endpoint = %f.endpoint.address, error = %e, "response body not forwarded whole; closing");
            Next::Close
        }
    }
}

/// How a failed exchange counts: the failure's answer, and its outcome for
/// the retry decision.
fn classify(ep: &Endpoint, e: UpErr) -> (UpstreamFailure, AttemptOutcome) {
    match e {
        UpErr::Connect(e) => {
            tracing::debug!(target: "weir::upstream", endpoint = %ep.address, error = %e, "connect failed");
            (UpstreamFailure::Connect, AttemptOutcome::ConnectFailure)
        }
        UpErr::Broken(why) => {
            tracing::debug!(target: "weir::upstream", endpoint = %ep.address, why, "upstream exchange failed");
            (UpstreamFailure::Broken, AttemptOutcome::Reset)
        }
    }
}

/// The attempts of a request on a route with `retries`, through the shared
/// loop (`phases::attempts`): each one is the prepared head (with
/// `x-weir-attempt: N` from the second on) exchanged with its endpoint.
/// The fast path serves bodiless requests only, so every one is replayable.
/// `timer` is the connection's upstream timer, re-armed per attempt.
#[allow(clippy::too_many_arguments)]
async fn retried(
    f: &Forward,
    rt: &RouteRuntime,
    guards: &RouteGuards,
    policy: &RetryPolicy,
    route_timeout: Duration,
    cx: &Client<'_>,
    start: Instant,
    timer: std::pin::Pin<&mut tokio::time::Sleep>,
) -> Tried<(TcpStream, Vec<u8>, usize)> {
    let shared = cx.shared;
    phases::attempts::deposit(shared, guards, start);
    let x = Attempts {
        shared,
        rt,
        role: f.role,
        backend: &f.backend,
        guards,
        policy,
        method: &f.method,
        replay: BodyReplay::Empty,
        route_timeout,
    };
    let s = &shared.settings;
    phases::attempts::run(x, f.endpoint.clone(), start, timer, |ep, n| {
        let head = if n > 1 {
            Cow::Owned(head::with_attempt(&f.upstream_head, n))
        } else {
            Cow::Borrowed(f.upstream_head.as_slice())
        };
        async move {
            let mut rbuf = Vec::with_capacity(8192);
            match exchange(&ep, &head, &mut rbuf, f.idempotent, s).await {
                Ok((up, end)) => match head::response_status(&rbuf[..end]) {
                    // As the hyper path: a 101 nobody asked for breaks the exchange.
                    Some(101) | None => Err((UpstreamFailure::Broken, AttemptOutcome::Reset)),
                    Some(status) => Ok(((up, rbuf, end), status)),
                },
                Err(e) => Err(classify(&ep, e)),
            }
        }
    })
    .await
}

/// Sends a weir-made answer, counting it against its side when it has one.
async fn answer(
    client: &mut TcpStream,
    cx: &Client<'_>,
    snap: &crate::dataplane::store::Snapshot,
    a: Answer,
    start: Instant,
) -> Next {
    // Counted and logged before it is sent, as on the hyper path.
    phases::account_refusal(
        cx.shared,
        cx.peer,
        a.counted.map(|(i, role)| (&snap.routes[i], role)),
        a.counted
            .map(|(i, _)| snap.spec.routing.routes[i].name.as_str()),
        &a.refusal,
        a.log.as_ref(),
        start,
    );
    let close = a.close || *cx.shutdown.borrow();
    let mut out = Vec::with_capacity(256);
    head::write_error(
        &mut out,
        a.refusal.err,
        &a.refusal.detail,
        a.refusal.retry_after,
        close,
        &http_date(),
    );
    let sent = client.write_all(&out).await;
    if close || sent.is_err() {
        Next::Close
    } else {
        Next::KeepAlive
    }
}

/// The `date` value for this second (formatted once a second per thread).
fn http_date() -> [u8; 29] {
    use std::cell::Cell;
    use std::time::{SystemTime, UNIX_EPOCH};
    thread_local! {
        static CACHE: Cell<(u64, [u8; 29])> = const { Cell::new((u64::MAX, [0; 29])) };
    }
    let now = SystemTime::now();
    let sec = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    CACHE.with(|c| {
        let (at, v) = c.get();
        if at == sec {
            return v;
        }
        let mut v = [0u8; 29];
        let s = httpdate::fmt_http_date(now);
        if s.len() == 29 {
            v.copy_from_slice(s.as_bytes());
        }
        c.set((sec, v));
        v
    })
}
