//! Request-smuggling guard for HTTP/1 connections.
//!
//! hyper already answers 400 and closes the connection for a
//! `Transfer-Encoding` whose last coding is not `chunked` and for differing
//! duplicate `Content-Length` values. A request with *both*
//! `Content-Length` and `Transfer-Encoding` it accepts as RFC 9112 §6.3
//! allows (chunked wins, the connection closes afterwards) and it drops the
//! `Content-Length` before the proxy sees the request, so the proxy cannot
//! tell from the request alone. weir rejects such requests (400,
//! `Connection: close`, nothing forwarded), as Envoy does by default.
//!
//! [`Sniffed`] wraps the client connection and follows the HTTP/1 framing
//! of the bytes hyper reads (request heads with `httparse`, the same parser
//! hyper uses; fixed-length and chunked bodies), and marks the index of the
//! first head carrying both headers. The service numbers the requests of
//! the connection in the same order ([`ConnGuard::next_request`]) and
//! refuses the marked one. Anything the tracker does not understand turns
//! it off for the rest of the connection: hyper stays the authority on
//! framing and rejects such input itself; a request it does accept after
//! that is still forwarded with consistent (chunked) framing and the
//! connection closed after it. HTTP/2 connections are not tracked.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// Per-connection facts shared by the byte tracker and the service.
#[derive(Debug)]
pub struct ConnGuard {
    /// Requests the service has started on this connection.
    requests: AtomicU64,
    /// Index of the first request head with both Content-Length and
    /// Transfer-Encoding; `u64::MAX` = none.
    bad_head: AtomicU64,
    /// Index of the first request head longer than `maxHeaderBytes` that
    /// hyper's looser buffer limit let through; `u64::MAX` = none.
    oversized: AtomicU64,
}

impl Default for ConnGuard {
    fn default() -> Self {
        ConnGuard {
            requests: AtomicU64::new(0),
            bad_head: AtomicU64::new(u64::MAX),
            oversized: AtomicU64::new(u64::MAX),
        }
    }
}

impl ConnGuard {
    /// Numbers the next request (0-based), in the order hyper hands them over.
    pub fn next_request(&self) -> u64 {
        self.requests.fetch_add(1, Ordering::Relaxed)
    }

    /// Requests started so far (used to drop connections that never send one).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Whether request `index` had both Content-Length and Transfer-Encoding.
    pub fn is_smuggling(&self, index: u64) -> bool {
        self.bad_head.load(Ordering::Relaxed) == index
    }

    /// Whether request `index` had a head longer than `maxHeaderBytes`.
    pub fn is_oversized(&self, index: u64) -> bool {
        self.oversized.load(Ordering::Relaxed) == index
    }

    fn mark_oversized(&self, index: u64) {
        let _ =
            self.oversized
                .compare_exchange(u64::MAX, index, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn mark(&self, index: u64) {
        let _ =
            self.bad_head
                .compare_exchange(u64::MAX, index, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// Where the tracker is in the byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Collecting a request head.
    Head,
    /// Skipping a fixed-length body.
    Fixed(u64),
    /// Reading a chunk-size line: value so far and hex digits read.
    ChunkSize { size: u64, digits: u8 },
    /// After the size digits: extensions up to the end of the line.
    ChunkSizeRest { size: u64 },
    /// Skipping chunk data.
    ChunkData(u64),
    /// The CRLF after chunk data.
    ChunkDataEnd,
    /// Trailer lines after the last chunk; `len` = bytes on the current line.
    Trailers { len: usize },
    /// Not tracking any more.
    Off,
}

/// HTTP/1 request framing follower (pure: bytes in, marks out).
#[derive(Debug)]
pub struct Tracker {
    phase: Phase,
    /// The current, incomplete head.
    head: Vec<u8>,
    /// Where to resume looking for the end of the head.
    scan_from: usize,
    /// Heads completed so far.
    heads: u64,
    /// Heads bigger than this (request line through the empty line) are
    /// marked: hyper's buffer limit only roughly matches it.
    max_head: usize,
    /// Header slots for the parser; more headers are left to hyper (431).
    max_headers: usize,
    /// First head index with both framing headers.
    bad: Option<u64>,
    /// Index of the head found longer than `max_head`.
    oversized: Option<u64>,
}

impl Tracker {
    /// A tracker for a new connection.
    pub fn new(max_head: usize, max_headers: usize) -> Self {
        Tracker {
            phase: Phase::Head,
            head: Vec::new(),
            scan_from: 0,
            heads: 0,
            max_head,
            max_headers,
            bad: None,
            oversized: None,
        }
    }

    /// A tracker that never looks (HTTP/2 connections).
    pub fn off() -> Self {
        let mut t = Tracker::new(0, 0);
        t.phase = Phase::Off;
        t
    }

    /// The first head (0-based) that had both Content-Length and
    /// Transfer-Encoding.
    pub fn bad_head(&self) -> Option<u64> {
        self.bad
    }

    /// The head (0-based) found longer than `max_head`; tracking stops there,
    /// as the connection is closed after its 431.
    pub fn oversized_head(&self) -> Option<u64> {
        self.oversized
    }

    /// Whether the tracker still follows the stream.
    pub fn is_on(&self) -> bool {
        self.phase != Phase::Off
    }

    /// Feeds bytes read from the client, in order.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            match self.phase {
                Phase::Off => return,
                Phase::Head => {
                    if self.head.is_empty() {
                        if let Some(end) = self.plain_head(data) {
                            self.heads += 1;
                            data = &data[end..];
                            continue;
                        }
                    }
                    self.head.extend_from_slice(data);
                    data = &[];
                    let rest = self.try_head();
                    if let Some(rest) = rest {
                        // Bytes after the head belong to the body or the next
                        // request: process them in the new phase.
                        let rest = rest.to_vec();
                        self.head.clear();
                        self.scan_from = 0;
                        self.feed(&rest);
                        return;
                    }
                }
                Phase::Fixed(n) => {
                    let take = (data.len() as u64).min(n);
                    data = &data[take as usize..];
                    self.phase = if n == take {
                        Phase::Head
                    } else {
                        Phase::Fixed(n - take)
                    };
                }
                Phase::ChunkSize { size, digits } => {
                    let b = data[0];
                    data = &data[1..];
                    match (b as char).to_digit(16) {
                        Some(d) if digits < 15 => {
                            self.phase = Phase::ChunkSize {
                                size: size * 16 + d as u64,
                                digits: digits + 1,
                            }
                        }
                        Some(_) => self.phase = Phase::Off,
                        None if digits == 0 => self.phase = Phase::Off,
                        None if b == b'\n' => self.end_size_line(size),
                        None => self.phase = Phase::ChunkSizeRest { size },
                    }
                }
                Phase::ChunkSizeRest { size } => match data.iter().position(|&b| b == b'\n') {
                    Some(i) => {
                        data = &data[i + 1..];
                        self.end_size_line(size);
                    }
                    None => data = &[],
                },
                Phase::ChunkData(n) => {
                    let take = (data.len() as u64).min(n);
                    data = &data[take as usize..];
                    self.phase = if n == take {
                        Phase::ChunkDataEnd
                    } else {
                        Phase::ChunkData(n - take)
                    };
                }
                Phase::ChunkDataEnd => match data.iter().position(|&b| b == b'\n') {
                    Some(i) => {
                        data = &data[i + 1..];
                        self.phase = Phase::ChunkSize { size: 0, digits: 0 };
                    }
                    None => data = &[],
                },
                Phase::Trailers { len } => {
                    let b = data[0];
                    data = &data[1..];
                    self.phase = match b {
                        b'\n' if len == 0 => Phase::Head,
                        b'\n' => Phase::Trailers { len: 0 },
                        b'\r' => Phase::Trailers { len },
                        _ => Phase::Trailers { len: len + 1 },
                    };
                }
            }
        }
    }

    /// The common request, seen without copying or parsing it: a whole head at
    /// the start of `data` that names neither framing header, so no body follows
    /// and there is nothing to smuggle. Returns its length. Anything else (a
    /// head split over reads, one with Content-Length or Transfer-Encoding,
    /// leading empty lines, an oversized one, not HTTP/1) goes through
    /// [`Tracker::analyze`].
    fn plain_head(&self, data: &[u8]) -> Option<usize> {
        if matches!(data.first(), None | Some(b'\r' | b'\n')) {
            return None;
        }
        let end = memchr::memchr_iter(b'\n', data).find_map(|i| match data.get(i + 1..i + 3) {
            Some([b'\n', _]) => Some(i + 2),
            Some([b'\r', b'\n']) => Some(i + 3),
            None if data.get(i + 1) == Some(&b'\n') => Some(i + 2),
            _ => None,
        })?;
        let head = &data[..end];
        // An HTTP/1 request line; anything else (the HTTP/2 preface) is for
        // `analyze` to give up on.
        let line_end = memchr::memchr(b'\n', head)?;
        let line = head[..line_end]
            .strip_suffix(b"\r")
            .unwrap_or(&head[..line_end]);
        let http1 = line.ends_with(b" HTTP/1.1") || line.ends_with(b" HTTP/1.0");
        // A header line starts right after a newline (no space may precede the
        // name, or hyper refuses the head); any line that merely starts with a
        // framing header's name takes the full path.
        let framed = memchr::memchr_iter(b'\n', head).any(|i| {
            let l = &head[i + 1..];
            let starts =
                |name: &[u8]| l.len() >= name.len() && l[..name.len()].eq_ignore_ascii_case(name);
            starts(b"content-length") || starts(b"transfer-encoding")
        });
        (http1 && !framed && end <= self.max_head).then_some(end)
    }

    fn end_size_line(&mut self, size: u64) {
        self.phase = if size == 0 {
            Phase::Trailers { len: 0 }
        } else {
            Phase::ChunkData(size)
        };
    }

    /// Parses the head once its end is in the buffer; returns the bytes
    /// after it when complete.
    fn try_head(&mut self) -> Option<&[u8]> {
        loop {
            let from = self.scan_from.saturating_sub(2);
            let window = &self.head[from..];
            let end = window
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| from + i + 2)
                .into_iter()
                .chain(
                    window
                        .windows(3)
                        .position(|w| w == b"\n\r\n")
                        .map(|i| from + i + 3),
                )
                .min();
            let Some(end) = end else {
                self.scan_from = self.head.len();
                if self.head.len() > self.max_head {
                    self.too_large();
                }
                return None;
            };
            match self.analyze() {
                HeadResult::Partial => {
                    // An empty line before the request line: look further.
                    self.scan_from = end;
                    if end >= self.head.len() {
                        return None;
                    }
                }
                HeadResult::Done(len, next) => {
                    self.heads += 1;
                    self.phase = next;
                    return Some(&self.head[len..]);
                }
                HeadResult::Bad(len, index_marked) => {
                    let index = self.heads;
                    self.heads += 1;
                    if index_marked && self.bad.is_none() {
                        self.bad = Some(index);
                    }
                    // hyper closes the connection after this request.
                    self.phase = Phase::Off;
                    return Some(&self.head[len..]);
                }
                HeadResult::TooLarge => {
                    self.too_large();
                    return None;
                }
                HeadResult::GiveUp => {
                    self.phase = Phase::Off;
                    return None;
                }
            }
        }
    }

    fn too_large(&mut self) {
        self.oversized.get_or_insert(self.heads);
        self.phase = Phase::Off;
    }

    fn analyze(&self) -> HeadResult {
        let mut stack = [httparse::EMPTY_HEADER; 100];
        let mut heap;
        let slots: &mut [httparse::Header<'_>] = if self.max_headers <= stack.len() {
            &mut stack[..self.max_headers.max(1)]
        } else {
            heap = vec![httparse::EMPTY_HEADER; self.max_headers];
            &mut heap[..]
        };
        let mut req = httparse::Request::new(slots);
        let len = match req.parse(&self.head) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return HeadResult::Partial,
            Err(_) => return HeadResult::GiveUp,
        };
        if len > self.max_head {
            return HeadResult::TooLarge;
        }
        let http11 = req.version == Some(1);
        let mut cl: Option<u64> = None;
        let mut has_cl = false;
        let mut te_last: Option<&[u8]> = None;
        for h in req.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                has_cl = true;
                match digits(h.value) {
                    Some(v) if cl.is_none_or(|c| c == v) => cl = Some(v),
                    // Differing or invalid: hyper answers 400 and closes.
                    _ => return HeadResult::Bad(len, false),
                }
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                te_last = Some(h.value);
            }
        }
        if let Some(te) = te_last {
            if has_cl {
                return HeadResult::Bad(len, true);
            }
            if !http11 || !last_coding_is_chunked(te) {
                return HeadResult::Bad(len, false);
            }
            return HeadResult::Done(len, Phase::ChunkSize { size: 0, digits: 0 });
        }
        match cl {
            Some(n) if n > 0 => HeadResult::Done(len, Phase::Fixed(n)),
            _ => HeadResult::Done(len, Phase::Head),
        }
    }
}

enum HeadResult {
    /// The head is not complete yet.
    Partial,
    /// A good head of `len` bytes; the body follows in this phase.
    Done(usize, Phase),
    /// A head hyper will refuse or close after; `true` = both framing headers.
    Bad(usize, bool),
    /// A head longer than the limit.
    TooLarge,
    /// Not HTTP/1 as the tracker understands it.
    GiveUp,
}

fn digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 {
        return None;
    }
    v.iter().try_fold(0u64, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + u64::from(b - b'0'))
    })
}

fn last_coding_is_chunked(v: &[u8]) -> bool {
    let last = v.rsplit(|&b| b == b',').next().unwrap_or(v);
    last.trim_ascii().eq_ignore_ascii_case(b"chunked")
}

/// A client connection whose reads go through a [`Tracker`].
pub struct Sniffed<IO> {
    io: IO,
    tracker: Tracker,
    guard: Arc<ConnGuard>,
}

impl<IO> Sniffed<IO> {
    /// Wraps `io`; marks go to `guard`.
    pub fn new(io: IO, tracker: Tracker, guard: Arc<ConnGuard>) -> Self {
        Sniffed { io, tracker, guard }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Sniffed<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            if this.tracker.is_on() {
                this.tracker.feed(&buf.filled()[before..]);
                if let Some(i) = this.tracker.bad_head() {
                    this.guard.mark(i);
                }
                if let Some(i) = this.tracker.oversized_head() {
                    this.guard.mark_oversized(i);
                }
            }
        }
        r
    }
}

forward_async_write!(Sniffed);

#[cfg(test)]
mod tests;
