//! Routing decisions: which route serves a request, and which side of it
//! (primary or canary), with mirroring and sticky cookies.
//!
//! This module is PURE: no IO, no clock, no global RNG. The caller passes the
//! request view and a random draw, so every decision is reproducible in tests
//! and cheap on the hot path. It must never allocate on the common path
//! (weight-only routes) and never panic on anything a client sends.

mod decide;
mod matcher;
mod prefilter;
mod probe;
mod table;

#[cfg(test)]
mod matcher_tests;
#[cfg(test)]
mod prefilter_tests;
#[cfg(test)]
mod probe_tests;
#[cfg(test)]
mod tests;

pub use decide::{decide, Decision, Draw, Reason, Side};
pub use matcher::{MatchRule, StringMatcher};
pub use prefilter::RegexMatcher;
pub use probe::CookieProbe;
pub use table::{normalize_host, HeaderEdits, HostPattern, MirrorPolicy, Route, RoutingTable};

use http::{HeaderMap, Method};
use std::borrow::Cow;
use std::cell::OnceCell;
use std::net::IpAddr;

/// What routing may look at in a request. Built once per request by the
/// proxy; parsed parts (cookies, query) are computed only when a route's
/// rules ask for them.
pub struct RequestView<'a> {
    /// Lower-cased host without port (from Host or the HTTP/2 authority).
    pub host: &'a str,
    /// Path without the query string.
    pub path: &'a str,
    /// Raw query string, if any.
    pub query: Option<&'a str>,
    /// Request method.
    pub method: &'a Method,
    /// All request headers, as received.
    pub headers: Headers<'a>,
    /// The client's address (the TCP peer).
    pub source_ip: IpAddr,
    /// The authority as the client sent it (Host or HTTP/2 `:authority`,
    /// case and port as sent); `host` when the transport did not say.
    pub authority: &'a str,
    /// The scheme of the listener the request came in on.
    pub scheme: Scheme,
    /// The port of the listener the request came in on (0: not known).
    pub port: u16,
    query_pairs: OnceCell<Vec<(String, String)>>,
    /// The Cookie header when there is exactly one (HTTP/1, and most HTTP/2
    /// clients): match rules and affinity ask for it several times per request.
    cookie_header: OnceCell<CookieHeader<'a>>,
}

/// How a request reached weir: clear text or TLS. It is the listener's, not
/// the client's word (`X-Forwarded-Proto` is not read).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scheme {
    #[default]
    Http,
    Https,
}

impl Scheme {
    /// `http` or `https`, as a `scheme` match sees it.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

#[derive(Clone, Copy)]
pub(super) enum CookieHeader<'a> {
    Absent,
    /// The only Cookie header, not yet checked for visibility: most rules
    /// reject it on a scan for a literal, and only a candidate is checked.
    One(&'a [u8]),
    /// Several: read them from the headers.
    Many,
}

/// The request headers routing reads: a parsed map (hyper's requests, HTTP/2)
/// or the raw list of an HTTP/1 head (the fast path). Both answer the same
/// questions the same way: names case-insensitively, values only when they
/// are visible ASCII (as `HeaderValue::to_str`).
#[derive(Clone, Copy, Debug)]
pub enum Headers<'a> {
    /// hyper's header map.
    Map(&'a HeaderMap),
    /// `httparse`'s headers, in the order received.
    Raw(&'a [httparse::Header<'a>]),
}

impl<'a> Headers<'a> {
    /// Every value of `name` that is visible ASCII, in order.
    pub fn values(self, name: &'a http::HeaderName) -> impl Iterator<Item = &'a str> + 'a {
        let (map, raw) = match self {
            Headers::Map(m) => (Some(m.get_all(name).iter().map(|v| v.as_bytes())), None),
            Headers::Raw(h) => {
                let name = name.as_str();
                (
                    None,
                    Some(
                        h.iter()
                            .filter(move |h| h.name.eq_ignore_ascii_case(name))
                            .map(|h| h.value),
                    ),
                )
            }
        };
        map.into_iter()
            .flatten()
            .chain(raw.into_iter().flatten())
            .filter_map(as_visible_str)
    }

    /// The one `Cookie` header, `Absent`, or `Many`.
    fn cookie(self) -> CookieHeader<'a> {
        let one_or_many = |first: Option<&'a [u8]>, second: bool| match (first, second) {
            (None, _) => CookieHeader::Absent,
            (Some(v), false) => CookieHeader::One(v),
            (Some(_), true) => CookieHeader::Many,
        };
        match self {
            Headers::Map(m) => {
                let mut all = m.get_all(http::header::COOKIE).iter();
                one_or_many(all.next().map(|v| v.as_bytes()), all.next().is_some())
            }
            Headers::Raw(h) => {
                let mut all = h.iter().filter(|h| h.name.eq_ignore_ascii_case("cookie"));
                one_or_many(all.next().map(|h| h.value), all.next().is_some())
            }
        }
    }
}

/// Every byte is visible ASCII, space or tab: exactly what
/// `HeaderValue::to_str` accepts.
pub fn is_visible(v: &[u8]) -> bool {
    v.iter().all(|&b| (32..127).contains(&b) || b == b'\t')
}

/// `v` as text when it is visible (see [`is_visible`]).
pub fn as_visible_str(v: &[u8]) -> Option<&str> {
    if is_visible(v) {
        std::str::from_utf8(v).ok()
    } else {
        None
    }
}

/// `needle` occurs in `hay` (see [`prefilter::occurs`]).
fn contains(hay: &[u8], needle: &str) -> bool {
    prefilter::occurs(hay, needle.as_bytes())
}

/// Offers each value of cookie `name` in one visible Cookie header to `f`
/// until it returns true: exactly `Cookie::split_parse` (split at `;`, skip
/// blank pieces, parse each trimmed piece), except that a piece which does
/// not contain `name` is not parsed: it cannot yield that name, and parsing
/// every cookie of a browser's header was most of the cost of a match rule.
/// A value is percent-decoded (and only then copied) when it contains `%`.
fn any_cookie_in(header: &str, name: &str, f: &mut impl FnMut(Cow<'_, str>) -> bool) -> bool {
    header
        .split(';')
        .filter(|piece| contains(piece.as_bytes(), name))
        .any(|piece| offer_cookie(piece, name, f))
}

/// Parses one piece of a Cookie header as `Cookie::split_parse` does and, if
/// it is cookie `name`, offers its value to `f`.
fn offer_cookie(piece: &str, name: &str, f: &mut impl FnMut(Cow<'_, str>) -> bool) -> bool {
    let Ok(c) = cookie::Cookie::parse(piece.trim()) else {
        return false;
    };
    if c.name_raw() != Some(name) {
        return false;
    }
    let Some(raw) = c.value_raw() else {
        return false;
    };
    if !raw.contains('%') {
        return f(Cow::Borrowed(raw));
    }
    match cookie::Cookie::parse_encoded(format!("{name}={raw}")) {
        Ok(decoded) => f(Cow::Owned(decoded.value().to_string())),
        Err(_) => false,
    }
}

impl<'a> RequestView<'a> {
    /// A view over parts the proxy already has.
    pub fn new(
        host: &'a str,
        path: &'a str,
        query: Option<&'a str>,
        method: &'a Method,
        headers: &'a HeaderMap,
        source_ip: IpAddr,
    ) -> Self {
        Self::with(host, path, query, method, Headers::Map(headers), source_ip)
    }

    /// The same view over a head as `httparse` left it (the HTTP/1 fast
    /// path, `proxy::express`): no header map is built for routing.
    pub fn raw(
        host: &'a str,
        path: &'a str,
        query: Option<&'a str>,
        method: &'a Method,
        headers: &'a [httparse::Header<'a>],
        source_ip: IpAddr,
    ) -> Self {
        Self::with(host, path, query, method, Headers::Raw(headers), source_ip)
    }

    fn with(
        host: &'a str,
        path: &'a str,
        query: Option<&'a str>,
        method: &'a Method,
        headers: Headers<'a>,
        source_ip: IpAddr,
    ) -> Self {
        RequestView {
            host,
            path,
            query,
            method,
            headers,
            source_ip,
            authority: host,
            scheme: Scheme::Http,
            port: 0,
            query_pairs: OnceCell::new(),
            cookie_header: OnceCell::new(),
        }
    }

    /// The same view with the facts of the connection: the authority as
    /// sent, whether the listener is TLS, and its port. Three stores; only
    /// `scheme`, `authority` and `port` conditions read them.
    pub fn on_listener(mut self, authority: &'a str, tls: bool, port: u16) -> Self {
        self.authority = authority;
        self.scheme = if tls { Scheme::Https } else { Scheme::Http };
        self.port = port;
        self
    }

    pub(super) fn cookie_header(&self) -> CookieHeader<'a> {
        *self.cookie_header.get_or_init(|| self.headers.cookie())
    }

    /// Offers every value of cookie `name`, from every visible `Cookie`
    /// header (HTTP/2 clients split them) in order, to `f` until it returns
    /// true; returns whether it did. Parsed as the `cookie` crate parses
    /// (see `any_cookie_in`); malformed pairs are skipped, never fatal; a
    /// name sent more than once offers every value. The common case (the
    /// name is absent) costs one scan of the header and allocates nothing.
    pub fn any_cookie(&self, name: &str, mut f: impl FnMut(Cow<'_, str>) -> bool) -> bool {
        match self.cookie_header() {
            CookieHeader::Absent => false,
            CookieHeader::One(h) => {
                contains(h, name)
                    && as_visible_str(h).is_some_and(|h| any_cookie_in(h, name, &mut f))
            }
            CookieHeader::Many => self
                .headers
                .values(&http::header::COOKIE)
                .any(|h| any_cookie_in(h, name, &mut f)),
        }
    }

    /// Whether cookie `name` is present with exactly `value`.
    pub fn has_cookie(&self, name: &str, value: &str) -> bool {
        self.any_cookie(name, |v| v == value)
    }

    /// All visible `Cookie` headers joined with `"; "`, as one HTTP/1 header
    /// would be; borrowed when there is only one (the common case).
    pub fn joined_cookie_header(&self) -> Option<Cow<'_, str>> {
        if let CookieHeader::One(v) = self.cookie_header() {
            return as_visible_str(v).map(Cow::Borrowed);
        }
        let mut parts = self.headers.values(&http::header::COOKIE);
        let first = parts.next()?;
        let Some(second) = parts.next() else {
            return Some(Cow::Borrowed(first));
        };
        let mut s = format!("{first}; {second}");
        for p in parts {
            s.push_str("; ");
            s.push_str(p);
        }
        Some(Cow::Owned(s))
    }

    /// Decoded query parameters, in order.
    pub fn query_pairs(&self) -> &[(String, String)] {
        self.query_pairs.get_or_init(|| match self.query {
            None => Vec::new(),
            Some(q) => form_urlencoded::parse(q.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        })
    }
}

impl crate::affinity::RequestCookies for RequestView<'_> {
    #[inline]
    fn any_cookie(&self, name: &str, f: impl FnMut(Cow<'_, str>) -> bool) -> bool {
        RequestView::any_cookie(self, name, f)
    }

    #[inline]
    fn has_cookie(&self, name: &str, value: &str) -> bool {
        RequestView::has_cookie(self, name, value)
    }
}
