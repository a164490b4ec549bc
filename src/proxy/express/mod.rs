//! The HTTP/1 fast path ("express"): clear-text HTTP/1.1 requests without a
//! body are read, routed and forwarded as bytes, without building hyper
//! requests or going through hyper-util's pool (issue 8: that machinery was
//! most of weir's user-space CPU per request).
//!
//! Every plain connection starts here (unless `proxy.http1FastPath: false`).
//! A request the fast path does not serve (see `head::analyze_request`: a
//! body, an upgrade, HTTP/1.0, anything hyper would refuse), or one whose
//! route or backend needs the general path (mirroring, header edits, TLS or
//! HTTP/2 to the backend), hands the whole connection to hyper (`server::run`)
//! with the bytes read so far, at a request boundary: hyper then serves it and
//! everything after it exactly as before. Nothing is sent upstream before
//! that choice is made, so a handed-over request is decided only once.
//!
//! What it must keep: the general path's routing, decisions, header changes,
//! stats, metrics, access log, error statuses (404/502/503/504 with
//! `x-weir-error`), header read timeout, graceful drain. It must never
//! forward a request it has not fully validated, never reuse an upstream
//! connection whose response it has not read to its end, and never hold a
//! read buffer while a connection is idle.

pub mod chunked;
pub mod head;
pub use crate::dataplane::idle_pool as pool;
pub mod rewind;

#[cfg(test)]
mod tests;

use super::errors::ProxyError;
use super::server::{run, Conn};
use super::service::{
    access_log_on, log_access, random_u64, record_answer, record_error, ProxyShared,
};
use super::smuggle::{Sniffed, Tracker};
use super::upstream::{Endpoint, InFlight};
use crate::config::{ProxySettings, UpstreamProtocol};
use crate::routing::{decide, normalize_host, Draw, RequestView, Side};
use crate::stats::Role;
use chunked::{ChunkedScanner, Scan};
use head::Framing;
use pool::IdlePool;
use rewind::Rewind;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// Request heads longer than this go to hyper (which applies
/// `proxy.maxHeaderBytes`); real heads are far smaller.
const FAST_HEAD_LIMIT: usize = 16 * 1024;
/// Header fields parsed in place; more go to hyper.
const REQUEST_HEADERS: usize = 64;
/// Longest upstream response head (hyper's client reads up to ~400 KiB).
const MAX_RESPONSE_HEAD: usize = 256 * 1024;
/// Header fields of an upstream response (hyper's client allows 100).
const RESPONSE_HEADERS: usize = 128;
/// Largest single read while forwarding a response body.
const BODY_READ: usize = 64 * 1024;

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
    /// The peer's address as text, formatted once (X-Forwarded-For).
    peer_ip: &'a str,
    /// True once a graceful shutdown has begun.
    shutdown: &'a watch::Receiver<bool>,
}

/// Serves one plain client connection until it closes, or hands it to hyper.
pub(super) async fn connection(mut stream: TcpStream, conn: Conn) {
    let shared = conn.shared.clone();
    let peer_ip = conn.peer.ip().to_string();
    let limit = FAST_HEAD_LIMIT.min(shared.settings.max_header_bytes);
    let header_read = shared.settings.header_read_timeout;
    // One of each per connection, re-armed per request: moving a tokio timer's
    // deadline later costs an atomic store, a new timer a wheel insert and
    // removal; and the shutdown signal is subscribed to once.
    let stop = shutting_down(conn.shutdown.clone());
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
            () = &mut stop => return,
            r = read_head(&mut stream, &mut buf, limit) => r,
            () = head_timer.as_mut() => {
                tracing::debug!(target: "weir::conn", peer = %conn.peer, "no request head within the header read timeout; closing");
                return;
            }
        };
        let end = match read {
            Ok(Some(Some(end))) => end,
            // hyper reads the rest of this head within what is left of the
            // bound, not a new one.
            Ok(Some(None)) => return handoff(stream, buf, conn, Some(head_timer.deadline())).await,
            Ok(None) | Err(_) => return,
        };
        let client = Client {
            shared: &shared,
            peer: conn.peer,
            peer_ip: &peer_ip,
            shutdown: &conn.shutdown,
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
            Next::Close => return,
            Next::Handoff => return handoff(stream, buf, conn, None).await,
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

/// hyper takes the connection over, reading `buf` first; `head_by` is
/// when the head being read must be complete (`None`: a whole head is in
/// `buf`, and hyper's own bound applies from now).
async fn handoff(
    stream: TcpStream,
    buf: Vec<u8>,
    conn: Conn,
    head_by: Option<tokio::time::Instant>,
) {
    let s = &conn.shared.settings;
    let tracker = Tracker::new(s.max_header_bytes, s.max_headers);
    let io = Sniffed::new(Rewind::new(buf, stream), tracker, conn.guard.clone());
    // Boxed: awaited inline, hyper's connection would size every fast one.
    Box::pin(run(io, false, conn, head_by)).await
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

/// A request the fast path forwards, with everything decided.
struct Forward {
    upstream_head: Vec<u8>,
    route: usize,
    role: Role,
    backend: Arc<super::upstream::Backend>,
    endpoint: Arc<Endpoint>,
    set_cookies: Vec<http::HeaderValue>,
    head_request: bool,
    idempotent: bool,
    close: bool,
    log: Option<(http::Method, String, String)>,
}

/// An answer weir makes itself instead of forwarding.
struct Answer {
    err: ProxyError,
    detail: String,
    /// The route and side it counts against (none for 404).
    counted: Option<(usize, Role)>,
    /// The client asked to close after this exchange.
    close: bool,
    log: Option<(http::Method, String, String)>,
}

/// Parses and decides one request head (no IO).
enum Prepared {
    Forward(Box<Forward>),
    /// weir answers itself (404, 503).
    Answer(Answer),
    Handoff,
}

fn prepare(
    head: &[u8],
    shared: &ProxyShared,
    snap: &crate::dataplane::store::Snapshot,
    cx: &Client<'_>,
) -> Prepared {
    // The head as `maxHeaderBytes` counts it: request line through the
    // empty line. hyper would close after its 431, so this closes too.
    if head.len() > shared.settings.max_header_bytes {
        return Prepared::Answer(Answer {
            err: ProxyError::HeadersTooLarge,
            detail: super::limits::head_too_large(shared.settings.max_header_bytes),
            counted: None,
            close: true,
            log: None,
        });
    }
    let mut hs = [httparse::EMPTY_HEADER; REQUEST_HEADERS];
    let mut req = httparse::Request::new(&mut hs);
    match req.parse(head) {
        Ok(httparse::Status::Complete(n)) if n == head.len() => {}
        _ => return Prepared::Handoff,
    }
    let Some(fast) = head::analyze_request(&req, &shared.settings) else {
        return Prepared::Handoff;
    };
    let host = normalize_host(fast.host);
    let log = access_log_on(shared)
        .then(|| (fast.method.clone(), host.to_string(), fast.path.to_string()));
    let Some(idx) = snap.spec.routing.find(&host, fast.path) else {
        return Prepared::Answer(Answer {
            err: ProxyError::NoRoute,
            detail: "no route for this host and path".into(),
            counted: None,
            close: fast.close,
            log,
        });
    };
    let route = &snap.spec.routing.routes[idx];
    let rt = &snap.routes[idx];
    if route.mirror.is_some()
        || !route.request_headers.is_empty()
        || !route.response_headers.is_empty()
    {
        return Prepared::Handoff;
    }
    let r = random_u64();
    let decision = {
        let view = RequestView::raw(
            &host,
            fast.path,
            fast.query,
            &fast.method,
            req.headers,
            cx.peer.ip(),
        );
        decide(&view, route, Draw::from_u64(r))
    };
    if decision.mirror {
        return Prepared::Handoff;
    }
    let (backend, role) = match (decision.side, &rt.canary) {
        (Side::Canary, Some(c)) => (c, Role::Canary),
        _ => (&rt.primary, Role::Primary),
    };
    let plain_http1 = snap
        .spec
        .backends
        .get(&backend.name)
        .is_none_or(|b| b.tls.is_none() && b.protocol != UpstreamProtocol::Http2);
    if !plain_http1 {
        return Prepared::Handoff;
    }
    let Some(endpoint) = backend.pick(r.rotate_left(17)) else {
        return Prepared::Answer(Answer {
            err: ProxyError::NoEndpoint,
            detail: format!("backend {} has no ready endpoint", backend.name),
            counted: Some((idx, role)),
            close: fast.close,
            log,
        });
    };
    let mut upstream_head = Vec::with_capacity(head.len() + 128);
    head::write_upstream_head(&mut upstream_head, &fast, req.headers, cx.peer_ip);
    let set_cookies = match &route.affinity {
        Some(cfg) if !decision.cookies.is_empty() => {
            decision.cookies.render(cfg, &route.pin_cookies)
        }
        _ => Vec::new(),
    };
    Prepared::Forward(Box::new(Forward {
        upstream_head,
        route: idx,
        role,
        backend: backend.clone(),
        endpoint,
        set_cookies,
        head_request: fast.method == http::Method::HEAD,
        idempotent: fast.idempotent(),
        close: fast.close,
        log,
    }))
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
    let _in_flight = InFlight::start(f.endpoint.clone());
    let mut rbuf = Vec::with_capacity(8192);
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
        Ok(Ok(x)) => Ok(x),
        Err(_) => Err((
            ProxyError::Timeout,
            format!(
                "no response from {} within {:?}",
                f.endpoint.address, route.timeout
            ),
        )),
        Ok(Err(UpErr::Connect(e))) => {
            tracing::debug!(target: "weir::upstream", endpoint = %f.endpoint.address, error = %e, "connect failed");
            rt.metrics.record_connect_error(f.role);
            Err((
                ProxyError::Upstream,
                format!("cannot connect to {}", f.endpoint.address),
            ))
        }
        Ok(Err(UpErr::Broken(why))) => {
            tracing::debug!(target: "weir::upstream", endpoint = %f.endpoint.address, why, "upstream exchange failed");
            Err((
                ProxyError::Upstream,
                format!("{} broke the exchange", f.endpoint.address),
            ))
        }
    };
    let (mut upstream, end) = match exchanged {
        Ok(x) => x,
        Err((err, detail)) => {
            f.backend.observe(&f.endpoint, true);
            return answer(client, cx, &snap, f.failed(err, detail), start).await;
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
                f.backend.observe(&f.endpoint, true);
                let detail = format!("{} broke the exchange", f.endpoint.address);
                return answer(
                    client,
                    cx,
                    &snap,
                    f.failed(ProxyError::Upstream, detail),
                    start,
                )
                .await;
            }
        }
    };
    let failed = plan.status >= 500;
    f.backend.observe(&f.endpoint, failed);
    record_answer(shared, rt, f.role, plan.status, failed, start);
    if let Some((m, h, p)) = &f.log {
        log_access(shared, peer, m, h, p, Some(&route.name), plan.status, start);
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

impl Forward {
    /// The answer when the upstream gave none that can be forwarded.
    fn failed(&mut self, err: ProxyError, detail: String) -> Answer {
        Answer {
            err,
            detail,
            counted: Some((self.route, self.role)),
            close: self.close,
            log: self.log.take(),
        }
    }
}

/// Sends a weir-made answer, counting it against its side when it has one.
async fn answer(
    client: &mut TcpStream,
    cx: &Client<'_>,
    snap: &crate::dataplane::store::Snapshot,
    a: Answer,
    start: Instant,
) -> Next {
    if let Some((idx, role)) = a.counted {
        record_error(cx.shared, &snap.routes[idx], role, a.err, start);
    }
    let close = a.close || *cx.shutdown.borrow();
    let mut out = Vec::with_capacity(256);
    head::write_error(&mut out, a.err, &a.detail, close, &http_date());
    let sent = client.write_all(&out).await;
    if let Some((m, h, p)) = &a.log {
        let route = a
            .counted
            .map(|(i, _)| snap.spec.routing.routes[i].name.as_str());
        let status = a.err.status().as_u16();
        log_access(cx.shared, cx.peer, m, h, p, route, status, start);
    }
    if close || sent.is_err() {
        Next::Close
    } else {
        Next::KeepAlive
    }
}

/// Why no response head came from the upstream.
enum UpErr {
    Connect(io::Error),
    Broken(&'static str),
}

/// Sends the head on a pooled or new connection and reads the response
/// head (past any 1xx) into `rbuf`: the connection and where the head ends.
/// A pooled connection that fails before any response byte is replaced by a
/// new one once, for idempotent methods (the upstream may have closed it
/// while it was idle, as nginx and hyper-util also assume).
async fn exchange(
    ep: &Endpoint,
    head: &[u8],
    rbuf: &mut Vec<u8>,
    idempotent: bool,
    s: &ProxySettings,
) -> Result<(TcpStream, usize), UpErr> {
    let mut retried = false;
    loop {
        let pooled = if retried {
            None
        } else {
            ep.idle.take(s.upstream_idle_timeout)
        };
        let reused = pooled.is_some();
        let mut up = match pooled {
            Some(c) => c,
            None => connect(&ep.address, s).await.map_err(UpErr::Connect)?,
        };
        rbuf.clear();
        let read = match up.write_all(head).await {
            Ok(()) => read_response_head(&mut up, rbuf).await,
            Err(e) => Err(e),
        };
        match read {
            Ok(Some(end)) => return Ok((up, end)),
            _ if reused && idempotent && rbuf.is_empty() => retried = true,
            Ok(None) => return Err(UpErr::Broken("closed before a whole response head")),
            Err(_) => return Err(UpErr::Broken("read or write failed")),
        }
    }
}

/// Reads a final response head: `Some(end)`, or `None` at end of stream.
/// Interim (1xx) responses are dropped, as the general path does.
async fn read_response_head(up: &mut TcpStream, rbuf: &mut Vec<u8>) -> io::Result<Option<usize>> {
    loop {
        if let Some(end) = head::head_end(rbuf) {
            let interim = rbuf.len() > 12 && rbuf[9] == b'1' && &rbuf[9..12] != b"101";
            if !interim {
                return Ok(Some(end));
            }
            rbuf.drain(..end);
            continue;
        }
        if rbuf.len() >= MAX_RESPONSE_HEAD {
            return Err(io::Error::other("response head too long"));
        }
        if rbuf.capacity() - rbuf.len() < 1024 {
            rbuf.reserve(8192);
        }
        if up.read_buf(rbuf).await? == 0 {
            return Ok(None);
        }
    }
}

/// A new connection to `address` (`host:port`; names resolved now), with
/// TCP_NODELAY and keep-alive probes, within `proxy.connectTimeout`.
async fn connect(address: &str, s: &ProxySettings) -> io::Result<TcpStream> {
    let stream = tokio::time::timeout(s.connect_timeout, TcpStream::connect(address))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    stream.set_nodelay(true)?;
    let keepalive = socket2::TcpKeepalive::new().with_time(Duration::from_secs(60));
    socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive)?;
    Ok(stream)
}

/// Writes the client head and the body that follows `rbuf[from..]`.
/// `Ok(true)`: done, and the upstream sent nothing after the body (its
/// connection may be reused); `Ok(false)`: done, but do not reuse it.
async fn forward_body(
    client: &mut TcpStream,
    up: &mut TcpStream,
    head: &[u8],
    rbuf: &mut Vec<u8>,
    from: usize,
    framing: Framing,
    idle: Duration,
) -> io::Result<bool> {
    let avail = &rbuf[from..];
    match framing {
        Framing::Empty => {
            client.write_all(head).await?;
            Ok(avail.is_empty())
        }
        Framing::Length(n) => {
            let first = avail.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            let mut clean = avail.len() == first;
            write_slices(client, &mut [head, &avail[..first]]).await?;
            let mut left = n - first as u64;
            while left > 0 {
                let got = read_more(up, rbuf, idle).await?;
                let take = got.min(usize::try_from(left).unwrap_or(usize::MAX));
                clean &= take == got;
                client.write_all(&rbuf[..take]).await?;
                left -= take as u64;
            }
            Ok(clean)
        }
        Framing::Chunked => {
            let mut scan = ChunkedScanner::default();
            let mut head = Some(head);
            let mut from = from;
            loop {
                let avail = &rbuf[from..];
                let (send, done) = match scan.feed(avail) {
                    Scan::More => (avail.len(), None),
                    Scan::Done(k) => (k, Some(k == avail.len())),
                    Scan::Invalid => return Err(io::Error::other("invalid chunked body")),
                };
                match head.take() {
                    Some(h) => write_slices(client, &mut [h, &avail[..send]]).await?,
                    None => client.write_all(&avail[..send]).await?,
                }
                if let Some(clean) = done {
                    return Ok(clean);
                }
                read_more(up, rbuf, idle).await?;
                from = 0;
            }
        }
        Framing::UntilClose => {
            let mut head = Some(head);
            let mut from = from;
            loop {
                let avail = &rbuf[from..];
                let size = format!("{:x}\r\n", avail.len());
                let mut parts: [&[u8]; 4] = [head.take().unwrap_or(b""), b"", b"", b""];
                if !avail.is_empty() {
                    parts[1..].copy_from_slice(&[size.as_bytes(), avail, b"\r\n"]);
                }
                write_slices(client, &mut parts).await?;
                if read_some(up, rbuf, idle).await? == 0 {
                    client.write_all(b"0\r\n\r\n").await?;
                    return Ok(false);
                }
                from = 0;
            }
        }
    }
}

/// Replaces `rbuf` with the next bytes from the upstream (within `idle`);
/// 0 at the end of the stream.
async fn read_some(up: &mut TcpStream, rbuf: &mut Vec<u8>, idle: Duration) -> io::Result<usize> {
    rbuf.clear();
    rbuf.reserve(BODY_READ);
    tokio::time::timeout(idle, up.read_buf(rbuf))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "response body idle"))?
}

/// [`read_some`] where the end of the stream is an error (the body is not complete).
async fn read_more(up: &mut TcpStream, rbuf: &mut Vec<u8>, idle: Duration) -> io::Result<usize> {
    let got = read_some(up, rbuf, idle).await?;
    if got == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "upstream closed inside the body",
        ));
    }
    Ok(got)
}

/// Writes every slice (at most 4), in order, with as few `writev`s as the
/// socket allows.
async fn write_slices(s: &mut TcpStream, parts: &mut [&[u8]]) -> io::Result<()> {
    let mut i = 0;
    while i < parts.len() {
        if parts[i].is_empty() {
            i += 1;
            continue;
        }
        let mut slices = [IoSlice::new(&[]); 4];
        let k = (parts.len() - i).min(slices.len());
        for (slot, p) in slices.iter_mut().zip(&parts[i..i + k]) {
            *slot = IoSlice::new(p);
        }
        let mut n = s.write_vectored(&slices[..k]).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        while n > 0 && i < parts.len() {
            let take = n.min(parts[i].len());
            parts[i] = &parts[i][take..];
            n -= take;
            if parts[i].is_empty() {
                i += 1;
            }
        }
    }
    Ok(())
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
