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
mod table;

#[cfg(test)]
mod prefilter_tests;
#[cfg(test)]
mod tests;

pub use decide::{decide, Decision, Draw, Reason, Side};
pub use matcher::{any_matches, MatchRule, StringMatcher};
pub use prefilter::RegexMatcher;
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
    query_pairs: OnceCell<Vec<(String, String)>>,
    /// The Cookie header when there is exactly one (HTTP/1, and most HTTP/2
    /// clients): match rules and affinity ask for it several times per request.
    cookie_header: OnceCell<CookieHeader<'a>>,
}

#[derive(Clone, Copy)]
enum CookieHeader<'a> {
    Absent,
    One(&'a str),
    /// Several (or one that is not visible ASCII): read them from the map.
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
    /// Every value of `name` that is visible ASCII, in order. The map's
    /// values are read as `HeaderValue::to_str` reads them (one pass).
    pub fn values(self, name: &'a http::HeaderName) -> impl Iterator<Item = &'a str> + 'a {
        let (map, raw) = match self {
            Headers::Map(m) => (
                Some(m.get_all(name).iter().filter_map(|v| v.to_str().ok())),
                None,
            ),
            Headers::Raw(h) => (
                None,
                Some(
                    h.iter()
                        .filter(move |h| h.name.eq_ignore_ascii_case(name.as_str()))
                        .filter_map(|h| as_visible_str(h.value)),
                ),
            ),
        };
        map.into_iter().flatten().chain(raw.into_iter().flatten())
    }

    /// The one `Cookie` header, `Absent`, or `Many`.
    fn cookie(self) -> CookieHeader<'a> {
        match self {
            Headers::Map(m) => {
                let mut all = m.get_all(http::header::COOKIE).iter();
                match (all.next(), all.next()) {
                    (None, _) => CookieHeader::Absent,
                    (Some(v), None) => v.to_str().map_or(CookieHeader::Many, CookieHeader::One),
                    _ => CookieHeader::Many,
                }
            }
            Headers::Raw(h) => {
                let mut all = h.iter().filter(|h| h.name.eq_ignore_ascii_case("cookie"));
                match (all.next(), all.next()) {
                    (None, _) => CookieHeader::Absent,
                    (Some(v), None) => {
                        as_visible_str(v.value).map_or(CookieHeader::Many, CookieHeader::One)
                    }
                    _ => CookieHeader::Many,
                }
            }
        }
    }
}

/// `v` as text when every byte is visible ASCII, space or tab (exactly
/// what `HeaderValue::to_str` accepts).
pub fn as_visible_str(v: &[u8]) -> Option<&str> {
    if v.iter().all(|&b| (32..127).contains(&b) || b == b'\t') {
        std::str::from_utf8(v).ok()
    } else {
        None
    }
}

/// `needle` occurs in `hay` (see [`prefilter::occurs`]).
fn contains(hay: &str, needle: &str) -> bool {
    prefilter::occurs(hay.as_bytes(), needle.as_bytes(), false)
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
            query_pairs: OnceCell::new(),
            cookie_header: OnceCell::new(),
        }
    }

    fn cookie_header(&self) -> CookieHeader<'a> {
        *self.cookie_header.get_or_init(|| self.headers.cookie())
    }

    /// Every Cookie header that is visible ASCII, in order.
    fn cookie_headers<'s>(&'s self) -> impl Iterator<Item = &'s str> + 's {
        let (one, many) = match self.cookie_header() {
            CookieHeader::Absent => (None, None),
            CookieHeader::One(v) => (Some(v), None),
            CookieHeader::Many => (None, Some(self.headers.values(&http::header::COOKIE))),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// Values of the cookie `name`, from every `Cookie` header (HTTP/2
    /// clients split them), parsed with the `cookie` crate. Parsing borrows
    /// from the header, so the common case allocates nothing; a value is
    /// percent-decoded (and only then copied) when it contains `%`.
    /// Malformed pairs are skipped, never fatal. A client may send a name
    /// more than once: every value is returned.
    ///
    /// Exactly `Cookie::split_parse` (split at `;`, skip blank pieces, parse
    /// each trimmed piece), except that a piece which does not contain `name`
    /// is not parsed: it cannot yield that name, and parsing every cookie of a
    /// browser's header was most of the cost of a match rule.
    pub fn cookie_values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = Cow<'s, str>> + 's {
        self.cookie_headers()
            .filter(move |h| contains(h, name))
            .flat_map(|h| h.split(';'))
            .filter(move |piece| contains(piece, name) && !piece.trim().is_empty())
            .filter_map(move |piece| {
                let c = cookie::Cookie::parse(piece.trim()).ok()?;
                if c.name_raw()? != name {
                    return None;
                }
                let raw = c.value_raw()?;
                if !raw.contains('%') {
                    return Some(Cow::Borrowed(raw));
                }
                let decoded = cookie::Cookie::parse_encoded(format!("{name}={raw}")).ok()?;
                Some(Cow::Owned(decoded.value().to_string()))
            })
    }

    /// Whether cookie `name` is present with exactly `value`.
    pub fn has_cookie(&self, name: &str, value: &str) -> bool {
        self.cookie_values(name).any(|v| v == value)
    }

    /// All `Cookie` headers joined with `"; "`, as one HTTP/1 header would
    /// be; borrowed when there is only one (the common case).
    pub fn joined_cookie_header(&self) -> Option<Cow<'_, str>> {
        if let CookieHeader::One(v) = self.cookie_header() {
            return Some(Cow::Borrowed(v));
        }
        let mut parts = self.cookie_headers();
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
