//! The fast path's decisions on message heads, as pure functions over what
//! `httparse` parsed: which requests it may serve (everything else goes to
//! hyper), the head sent upstream, how a response is framed, and the head
//! sent back. No IO, no clock (the caller passes the Date value).
//!
//! It must make the same changes as the general path (`service`): hop-by-hop
//! headers and the ones named in `Connection` stripped both ways (never
//! Host, Content-Length or X-Forwarded-*), the client's `x-weir-*` removed,
//! X-Forwarded-For appended, X-Forwarded-Proto/-Host set, the client's Host
//! kept, affinity cookies added. It keeps what hyper would lose: header
//! case, order and duplicates, and the upstream's reason phrase.

use crate::config::ProxySettings;
use crate::proxy::headers::{
    client_address_header, client_address_value, forwarded_for_prefix, forwarded_proto,
    is_forwarded_header, is_hop_by_hop_name, is_protected, is_weir_header,
};
use http::Method;

fn named(name: &str, want: &str) -> bool {
    name.len() == want.len() && name.eq_ignore_ascii_case(want)
}

/// Header names a `Connection` header lists (beyond close / keep-alive),
/// removed as hop-by-hop. A few fit inline; more send the request to hyper.
#[derive(Debug, Default)]
pub struct Listed<'b> {
    names: [&'b str; 4],
    len: usize,
}

impl<'b> Listed<'b> {
    fn push(&mut self, n: &'b str) -> bool {
        if self.len == self.names.len() {
            return false;
        }
        self.names[self.len] = n;
        self.len += 1;
        true
    }

    fn contains(&self, name: &str) -> bool {
        self.names[..self.len].iter().any(|n| named(name, n))
    }
}

/// What `Connection` says: close after this message, and what else to strip
/// (never a header the proxy depends on, `is_protected`).
/// `None` when it names `upgrade` or more names than fit.
fn connection_tokens<'b>(value: &'b [u8], close: &mut bool, listed: &mut Listed<'b>) -> Option<()> {
    let v = std::str::from_utf8(value).ok()?;
    for t in v.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if t.eq_ignore_ascii_case("close") {
            *close = true;
        } else if t.eq_ignore_ascii_case("keep-alive") || is_protected(t) {
        } else if t.eq_ignore_ascii_case("upgrade") || !listed.push(t) {
            return None;
        }
    }
    Some(())
}

/// A request the fast path serves.
#[derive(Debug)]
pub struct FastRequest<'b> {
    /// The method.
    pub method: Method,
    /// The request target as received (origin form: path and query).
    pub target: &'b str,
    /// The path, for routing.
    pub path: &'b str,
    /// The query, for routing.
    pub query: Option<&'b str>,
    /// The Host header, as received.
    pub host: &'b str,
    /// The client asked to close the connection after this exchange.
    pub close: bool,
    listed: Listed<'b>,
}

impl FastRequest<'_> {
    /// A method that may be sent again when a pooled connection turns out
    /// to be closed before any answer (RFC 9110 §9.2.2).
    pub fn idempotent(&self) -> bool {
        self.method.is_idempotent()
    }
}

/// Whether the fast path serves this request, and its facts. `None` sends
/// the connection to hyper with this request: anything but HTTP/1.1 in
/// origin form, CONNECT, a body (Content-Length other than 0 or any
/// Transfer-Encoding), Upgrade, Expect, not exactly one Host, a target or
/// header count over the limits, a target hyper's URI parser would refuse.
/// hyper then answers exactly as it always did (400, 414, 431, smuggling).
pub fn analyze_request<'b>(
    req: &httparse::Request<'_, 'b>,
    settings: &ProxySettings,
) -> Option<FastRequest<'b>> {
    if req.version != Some(1) || req.headers.len() > settings.max_headers {
        return None;
    }
    let method = Method::from_bytes(req.method?.as_bytes()).ok()?;
    if method == Method::CONNECT {
        return None;
    }
    let target = req.path?;
    if !target.starts_with('/') || target.len() > settings.max_uri_bytes || target.contains('#') {
        return None;
    }
    // The same check hyper makes (it builds an `http::Uri` from the target).
    http::uri::PathAndQuery::try_from(target).ok()?;
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let mut host = None;
    let mut close = false;
    let mut listed = Listed::default();
    for h in req.headers.iter() {
        let n = h.name;
        if named(n, "host") {
            if host.is_some() {
                return None;
            }
            host = Some(crate::routing::as_visible_str(h.value)?);
        } else if named(n, "content-length") {
            if h.value != b"0" {
                return None;
            }
        } else if named(n, "transfer-encoding") || named(n, "upgrade") || named(n, "expect") {
            return None;
        } else if named(n, "connection") {
            connection_tokens(h.value, &mut close, &mut listed)?;
        }
    }
    Some(FastRequest {
        method,
        target,
        path,
        query,
        host: host?,
        close,
        listed,
    })
}

/// Appends the head sent upstream: the request line with HTTP/1.1, every
/// end-to-end header as received but the client's `x-weir-*` ones, then X-Forwarded-For (the client's first
/// value, if any, joined with the peer, as nginx's
/// `$proxy_add_x_forwarded_for`), X-Forwarded-Proto and X-Forwarded-Host.
pub fn write_upstream_head(
    out: &mut Vec<u8>,
    req: &FastRequest<'_>,
    headers: &[httparse::Header<'_>],
    peer_ip: &str,
    trusted: bool,
) {
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut forwarded_for: Option<&[u8]> = None;
    // Which client-address headers were replaced already (each is written once).
    let mut replaced = [false; 3];
    for h in headers {
        let n = h.name;
        if is_hop_by_hop_name(n.as_bytes()) || req.listed.contains(n) || is_weir_header(n) {
            continue;
        }
        if is_forwarded_header(n) {
            if n.len() == "x-forwarded-for".len() {
                forwarded_for.get_or_insert(h.value);
            }
            continue;
        }
        if !trusted {
            if let Some(i) = client_address_header(n) {
                if !std::mem::replace(&mut replaced[i], true) {
                    let v = client_address_value(i, peer_ip);
                    push_header(out, n.as_bytes(), v.as_bytes());
                }
                continue;
            }
        }
        push_header(out, n.as_bytes(), h.value);
    }
    out.extend_from_slice(b"x-forwarded-for: ");
    let prev = forwarded_for
        .filter(|_| trusted)
        .and_then(crate::routing::as_visible_str);
    if let Some(prev) = forwarded_for_prefix(prev) {
        out.extend_from_slice(prev.as_bytes());
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(peer_ip.as_bytes());
    out.extend_from_slice(b"\r\n");
    // The fast path serves clear-text connections only.
    push_header(out, b"x-forwarded-proto", forwarded_proto(false).as_bytes());
    push_header(out, b"x-forwarded-host", req.host.as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn push_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// How the response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (HEAD, 1xx, 204, 304).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked, forwarded as received.
    Chunked,
    /// Until the upstream closes; re-framed as chunked for the client.
    UntilClose,
}

/// What the response head says about the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsePlan {
    /// Status code.
    pub status: u16,
    /// Body framing.
    pub framing: Framing,
    /// The upstream connection may carry another request afterwards.
    pub reusable: bool,
}

/// Frames a final (non-1xx) response to a request (`head_request`: HEAD)
/// by RFC 9112 §6.3. `Err` names why it cannot be forwarded (→ 502):
/// a 101 nobody asked for, a transfer coding that does not end in chunked,
/// Content-Length values that are not one number.
pub fn analyze_response(
    resp: &httparse::Response<'_, '_>,
    head_request: bool,
) -> Result<ResponsePlan, &'static str> {
    let status = resp.code.ok_or("no status")?;
    if status == 101 {
        return Err("101 Switching Protocols without an upgrade request");
    }
    let mut close = resp.version != Some(1);
    let mut chunked = false;
    let mut length: Option<u64> = None;
    for h in resp.headers.iter() {
        let n = h.name;
        if named(n, "transfer-encoding") {
            let v = std::str::from_utf8(h.value).map_err(|_| "bad transfer-encoding")?;
            let last = v.rsplit(',').map(str::trim).find(|c| !c.is_empty());
            if !last.is_some_and(|c| c.eq_ignore_ascii_case("chunked")) {
                return Err("transfer coding does not end in chunked");
            }
            chunked = true;
        } else if named(n, "content-length") {
            let v = std::str::from_utf8(h.value).map_err(|_| "bad content-length")?;
            for part in v.split(',').map(str::trim) {
                if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                    return Err("bad content-length");
                }
                let n: u64 = part.parse().map_err(|_| "bad content-length")?;
                if length.is_some_and(|l| l != n) {
                    return Err("conflicting content-length values");
                }
                length = Some(n);
            }
        } else if named(n, "connection") {
            let v = std::str::from_utf8(h.value).unwrap_or("");
            for t in v.split(',').map(str::trim) {
                if t.eq_ignore_ascii_case("close") {
                    close = true;
                } else if t.eq_ignore_ascii_case("keep-alive") && resp.version == Some(0) {
                    close = false;
                }
            }
        }
    }
    let framing = if head_request || status < 200 || status == 204 || status == 304 {
        Framing::Empty
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    Ok(ResponsePlan {
        status,
        framing,
        reusable: !close && framing != Framing::UntilClose,
    })
}

/// Appends the head sent to the client: status line (the upstream's reason
/// phrase, or the standard one when it sent none), end-to-end headers as
/// received (Content-Length dropped under chunked framing and on a 204), the upstream's
/// transfer codings for a chunked body (forwarded undecoded), chunked for a
/// close-delimited one (re-framed), `date` when the upstream
/// sent none (as hyper), the affinity `set-cookie`s, `connection: close`
/// when this connection ends after the response.
pub fn write_client_head(
    out: &mut Vec<u8>,
    resp: &httparse::Response<'_, '_>,
    plan: &ResponsePlan,
    set_cookies: &[http::HeaderValue],
    close: bool,
    date: &[u8],
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_status(out, plan.status);
    out.push(b' ');
    match resp.reason.filter(|r| !r.is_empty()) {
        Some(r) => out.extend_from_slice(r.as_bytes()),
        None => out.extend_from_slice(
            http::StatusCode::from_u16(plan.status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("")
                .as_bytes(),
        ),
    }
    out.extend_from_slice(b"\r\n");
    let mut listed = Listed::default();
    let mut overflow = false;
    for h in resp.headers.iter() {
        if named(h.name, "connection") {
            let mut close = false;
            overflow |= connection_tokens(h.value, &mut close, &mut listed).is_none();
        }
    }
    let chunked_out = matches!(plan.framing, Framing::Chunked | Framing::UntilClose);
    let mut has_date = false;
    for h in resp.headers.iter() {
        let n = h.name;
        if is_hop_by_hop_name(n.as_bytes())
            || listed.contains(n)
            || (overflow && strip_listed(resp.headers, n))
        {
            continue;
        }
        // A 204 never carries Content-Length (RFC 9110 §8.6), as hyper writes it.
        if (chunked_out || plan.status == 204) && named(n, "content-length") {
            continue;
        }
        has_date |= named(n, "date");
        push_header(out, n.as_bytes(), h.value);
    }
    match plan.framing {
        // The upstream's codings, as its bytes are forwarded undecoded.
        Framing::Chunked => {
            for h in resp
                .headers
                .iter()
                .filter(|h| named(h.name, "transfer-encoding"))
            {
                push_header(out, b"transfer-encoding", h.value);
            }
        }
        Framing::UntilClose => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Framing::Empty | Framing::Length(_) => {}
    }
    if !has_date {
        push_header(out, b"date", date);
    }
    for c in set_cookies {
        push_header(out, b"set-cookie", c.as_bytes());
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Whether a `Connection` header of `headers` lists `name` (the slow check,
/// for a response listing more names than `Listed` holds).
fn strip_listed(headers: &[httparse::Header<'_>], name: &str) -> bool {
    headers
        .iter()
        .filter(|h| named(h.name, "connection"))
        .any(|h| {
            std::str::from_utf8(h.value)
                .unwrap_or("")
                .split(',')
                .any(|t| named(t.trim(), name) && !is_protected(name))
        })
}

fn push_status(out: &mut Vec<u8>, status: u16) {
    out.extend_from_slice(&[
        b'0' + (status / 100 % 10) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
    ]);
}

/// A whole response weir makes itself (`ProxyError`): the same status,
/// headers and body as the general path's `ProxyError::response`.
pub fn write_error(
    out: &mut Vec<u8>,
    err: crate::proxy::errors::ProxyError,
    detail: &str,
    retry_after: Option<u64>,
    close: bool,
    date: &[u8],
) {
    let body = err.body(detail);
    let status = err.status();
    out.extend_from_slice(b"HTTP/1.1 ");
    push_status(out, status.as_u16());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\ncontent-type: text/plain; charset=utf-8\r\n");
    push_header(out, b"x-weir-error", err.code().as_bytes());
    if let Some(secs) = retry_after {
        push_header(out, b"retry-after", secs.to_string().as_bytes());
    }
    push_header(out, b"content-length", body.len().to_string().as_bytes());
    push_header(out, b"date", date);
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body.as_bytes());
}

/// The status of a whole response head (`HTTP/1.x NNN ...`), `None` when
/// its status line is not one.
pub fn response_status(head: &[u8]) -> Option<u16> {
    match head {
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', _, b' ', a, b, c, b' ' | b'\r', ..]
            if [a, b, c].iter().all(|d| d.is_ascii_digit()) =>
        {
            Some(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
        }
        _ => None,
    }
}

/// The upstream head of attempt `n` (2 for the first retry): `head` with
/// any `x-weir-attempt` field the client sent dropped and weir's own added
/// before the empty line, as the hyper path's `insert` does.
pub fn with_attempt(head: &[u8], n: u32) -> Vec<u8> {
    let body = head.strip_suffix(b"\r\n\r\n").unwrap_or(head);
    let mut out = Vec::with_capacity(head.len() + 24);
    for (i, line) in body.split(|b| *b == b'\n').enumerate() {
        let name = line.split(|b| *b == b':').next().unwrap_or(line);
        if i > 0 && name.eq_ignore_ascii_case(crate::proxy::phases::ATTEMPT_HEADER.as_bytes()) {
            continue;
        }
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    // The last line had no `\n` of its own (the suffix took its CRLF).
    out.pop();
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(crate::proxy::phases::ATTEMPT_HEADER.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out
}

/// Where a head ends in `buf` (just past its empty line), if it is all
/// there. Accepts bare LF line ends as `httparse` does; leading empty lines
/// are left to the parser.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'\n', &buf[from..]) {
        let at = from + i;
        match buf.get(at + 1) {
            Some(b'\n') => return Some(at + 2),
            Some(b'\r') if buf.get(at + 2) == Some(&b'\n') => return Some(at + 3),
            Some(_) => {}
            None => return None,
        }
        from = at + 1;
    }
    None
}
