//! A/B match rules (Flagger's `match` list) evaluated against a request view.

use super::RegexMatcher;
use super::{is_visible, CookieHeader, Headers, RequestView};
use http::HeaderName;
use ipnet::IpNet;

/// One string condition. Kinds are those of Istio/Flagger plus `present`.
#[derive(Debug, Clone)]
pub enum StringMatcher {
    Exact(String),
    Prefix(String),
    Suffix(String),
    /// `regex` crate (RE2 syntax), used as written: unanchored unless the
    /// pattern has `^`/`$`, so Flagger's cookie regexes keep their meaning.
    Regex(RegexMatcher),
    /// `true`: the value exists; `false`: it does not.
    Present(bool),
}

impl StringMatcher {
    /// Tests one concrete value.
    pub fn matches_value(&self, v: &str) -> bool {
        self.matches_bytes(v.as_bytes())
    }

    /// The same on bytes: the pattern decides before anything else is
    /// looked at (a regex's literal scan usually rejects the value).
    fn matches_bytes(&self, v: &[u8]) -> bool {
        match self {
            StringMatcher::Exact(s) => v == s.as_bytes(),
            StringMatcher::Prefix(s) => v.starts_with(s.as_bytes()),
            StringMatcher::Suffix(s) => v.ends_with(s.as_bytes()),
            StringMatcher::Regex(r) => r.is_match(v),
            StringMatcher::Present(p) => *p,
        }
    }

    /// Tests a possibly repeated value: any value may satisfy it; with no
    /// value only `present: false` holds.
    pub fn matches_any<S: AsRef<str>>(&self, mut values: impl Iterator<Item = S>) -> bool {
        match self {
            StringMatcher::Present(p) => values.next().is_some() == *p,
            _ => values.any(|v| self.matches_value(v.as_ref())),
        }
    }

    /// [`Self::matches_value`] ignoring ASCII case for `exact`, `prefix`
    /// and `suffix` (Istio's `ignoreUriCase`); a regex compiled for it
    /// carries its own `(?i)`.
    pub fn matches_value_caseless(&self, v: &str) -> bool {
        let v = v.as_bytes();
        let tail = |s: &str| {
            v.len() >= s.len() && v[v.len() - s.len()..].eq_ignore_ascii_case(s.as_bytes())
        };
        match self {
            StringMatcher::Exact(s) => v.eq_ignore_ascii_case(s.as_bytes()),
            StringMatcher::Prefix(s) => {
                v.len() >= s.len() && v[..s.len()].eq_ignore_ascii_case(s.as_bytes())
            }
            StringMatcher::Suffix(s) => tail(s),
            _ => self.matches_bytes(v),
        }
    }

    /// The same for a single optional value.
    pub fn matches_opt(&self, value: Option<&str>) -> bool {
        self.matches_any(value.into_iter())
    }

    /// The same for the values of a header as raw bytes, which exist only
    /// when visible (as `HeaderValue::to_str` reads them). Visibility is
    /// checked after the pattern: a value that does not match cannot match
    /// once it is visible either.
    fn matches_header<'v>(&self, mut values: impl Iterator<Item = &'v [u8]>) -> bool {
        match self {
            StringMatcher::Present(p) => values.any(is_visible) == *p,
            _ => values.any(|v| self.matches_bytes(v) && is_visible(v)),
        }
    }
}

/// One item of the `match` list: every condition must hold.
#[derive(Debug, Clone, Default)]
pub struct MatchRule {
    /// Header conditions; names are lower-cased (case-insensitive).
    pub headers: Vec<(HeaderName, StringMatcher)>,
    /// Cookie conditions on parsed cookies.
    pub cookies: Vec<(String, StringMatcher)>,
    /// Query-parameter conditions (decoded names and values).
    pub query_params: Vec<(String, StringMatcher)>,
    /// Condition on the method name.
    pub method: Option<StringMatcher>,
    /// Condition on the path (no query string).
    pub uri: Option<StringMatcher>,
    /// Client address ranges; any may contain the client.
    pub source_ip: Vec<IpNet>,
    /// `uri` compares ignoring ASCII case.
    pub uri_ignore_case: bool,
    /// Header conditions none of which may hold (Istio's `withoutHeaders`).
    pub without_headers: Vec<(HeaderName, StringMatcher)>,
    /// Condition on the listener's scheme (`http`/`https`).
    pub scheme: Option<StringMatcher>,
    /// Condition on the authority as sent (Host or `:authority`).
    pub authority: Option<StringMatcher>,
    /// The listener port the request must have arrived on.
    pub port: Option<u16>,
}

impl MatchRule {
    /// All conditions of this item hold for `req`.
    pub fn matches(&self, req: &RequestView<'_>) -> bool {
        if let Some(m) = &self.method {
            if !m.matches_value(req.method.as_str()) {
                return false;
            }
        }
        if let Some(m) = &self.uri {
            let ok = if self.uri_ignore_case {
                m.matches_value_caseless(req.path)
            } else {
                m.matches_value(req.path)
            };
            if !ok {
                return false;
            }
        }
        // A rule that names none of these pays one branch each.
        if self.port.is_some_and(|p| p != req.port) {
            return false;
        }
        if let Some(m) = &self.scheme {
            if !m.matches_value(req.scheme.as_str()) {
                return false;
            }
        }
        if let Some(m) = &self.authority {
            if !m.matches_value(req.authority) {
                return false;
            }
        }
        if !self.source_ip.is_empty() && !self.source_ip.iter().any(|n| n.contains(&req.source_ip))
        {
            return false;
        }
        if !self
            .headers
            .iter()
            .all(|(name, m)| header_holds(req, name, m))
        {
            return false;
        }
        for (name, m) in &self.cookies {
            let ok = match m {
                StringMatcher::Present(p) => req.any_cookie(name, |_| true) == *p,
                _ => req.any_cookie(name, |v| m.matches_value(&v)),
            };
            if !ok {
                return false;
            }
        }
        for (name, m) in &self.query_params {
            let pairs = req.query_pairs();
            let values = pairs
                .iter()
                .filter(|(k, _)| k == name)
                .map(|(_, v)| v.as_str());
            if !m.matches_any(values) {
                return false;
            }
        }
        if self
            .without_headers
            .iter()
            .any(|(name, m)| header_holds(req, name, m))
        {
            return false;
        }
        true
    }
}

/// Header condition `m` on `name` holds for `req`: any value may satisfy it,
/// `cookie` read as one joined header.
fn header_holds(req: &RequestView<'_>, name: &HeaderName, m: &StringMatcher) -> bool {
    if name == http::header::COOKIE {
        // HTTP/2 clients split cookies over several headers; a
        // Flagger cookie regex expects them joined (RFC 9113 §8.2.3).
        return match req.cookie_header() {
            CookieHeader::One(v) => m.matches_header(std::iter::once(v)),
            _ => m.matches_opt(req.joined_cookie_header().as_deref()),
        };
    }
    // Monomorphic per representation: a chained iterator over
    // both cost a fifth of a decision.
    match req.headers {
        Headers::Map(h) => m.matches_header(h.get_all(name).iter().map(|v| v.as_bytes())),
        Headers::Raw(h) => {
            // Once, not per header: a standard name's text is a
            // table lookup through a jump.
            let name = name.as_str();
            m.matches_header(
                h.iter()
                    .filter(|h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| h.value),
            )
        }
    }
}
