//! Routing decisions: which route serves a request, and which side of it
//! (primary or canary), with mirroring and sticky cookies.
//!
//! This module is PURE: no IO, no clock, no global RNG. The caller passes the
//! request view and a random draw, so every decision is reproducible in tests
//! and cheap on the hot path. It must never allocate on the common path
//! (weight-only routes) and never panic on anything a client sends.

mod decide;
mod matcher;
mod table;

#[cfg(test)]
mod tests;

pub use decide::{decide, Decision, Draw, Reason, Side};
pub use matcher::{any_matches, MatchRule, StringMatcher};
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
    pub headers: &'a HeaderMap,
    /// The client's address (the TCP peer).
    pub source_ip: IpAddr,
    query_pairs: OnceCell<Vec<(String, String)>>,
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
        RequestView {
            host,
            path,
            query,
            method,
            headers,
            source_ip,
            query_pairs: OnceCell::new(),
        }
    }

    /// Values of the cookie `name`, from every `Cookie` header (HTTP/2
    /// clients split them), parsed with the `cookie` crate. Parsing borrows
    /// from the header, so the common case allocates nothing; a value is
    /// percent-decoded (and only then copied) when it contains `%`.
    /// Malformed pairs are skipped, never fatal. A client may send a name
    /// more than once: every value is returned.
    pub fn cookie_values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = Cow<'s, str>> + 's {
        self.headers
            .get_all(http::header::COOKIE)
            .iter()
            .filter_map(|h| h.to_str().ok())
            .flat_map(cookie::Cookie::split_parse)
            .filter_map(move |c| {
                let c = c.ok()?;
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
        let mut parts = self
            .headers
            .get_all(http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok());
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
