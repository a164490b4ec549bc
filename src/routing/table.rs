//! The compiled, immutable routing table and route lookup.

use super::{CookieProbe, MatchRule};
use crate::affinity::{AffinityConfig, AffinityState, PinCookies};
use http::{HeaderName, HeaderValue};
use std::collections::HashMap;
use std::time::Duration;

/// A `hosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Lower-cased exact name.
    Exact(String),
    /// `*.example.com` stored as `.example.com`: matches any name ending in
    /// it (one or more labels), not the bare `example.com`, as in Envoy.
    Suffix(String),
}

/// Header edits compiled to header types, applied in the order remove → set → add.
#[derive(Debug, Clone, Default)]
pub struct HeaderEdits {
    pub set: Vec<(HeaderName, HeaderValue)>,
    pub add: Vec<(HeaderName, HeaderValue)>,
    pub remove: Vec<HeaderName>,
}

impl HeaderEdits {
    /// Whether there is nothing to do (keeps the hot path branch-only).
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }

    /// Applies the edits to `headers`.
    pub fn apply(&self, headers: &mut http::HeaderMap) {
        for name in &self.remove {
            headers.remove(name);
        }
        for (name, value) in &self.set {
            headers.insert(name.clone(), value.clone());
        }
        for (name, value) in &self.add {
            headers.append(name.clone(), value.clone());
        }
    }
}

/// Shadow traffic settings of a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorPolicy {
    /// Percent (0..100) of primary requests copied to the canary.
    pub weight: u8,
    /// Largest request body copied; larger bodies are not mirrored.
    pub max_body_bytes: usize,
    /// Mirror requests in flight at most; more are dropped.
    pub max_in_flight: usize,
}

/// One compiled route.
#[derive(Debug, Clone)]
pub struct Route {
    /// Unique route name (API, stats, metrics).
    pub name: String,
    /// Host patterns; empty = any host.
    pub hosts: Vec<HostPattern>,
    /// Plain string prefix of the path.
    pub path_prefix: String,
    /// Backend name serving by default.
    pub primary: String,
    /// Backend name of the canary slot, if any.
    pub canary: Option<String>,
    /// Percent of undecided traffic sent to the canary.
    pub canary_weight: u8,
    /// A/B rules; a matching request goes to the canary.
    pub matches: Vec<MatchRule>,
    /// Shadow traffic, if enabled.
    pub mirror: Option<MirrorPolicy>,
    /// Sticky cookie settings, if enabled.
    pub affinity: Option<AffinityConfig>,
    /// Cookie values of the current and last run.
    pub affinity_state: AffinityState,
    /// The `Set-Cookie` pins of `affinity` with the values of
    /// `affinity_state` (`PinCookies::new`; rebuild it if either changes).
    pub pin_cookies: PinCookies,
    /// The literals `matches` and `affinity` need from the Cookie header,
    /// found in one scan (`CookieProbe::new(&matches, affinity.as_ref())`;
    /// rebuild it if either changes, or use the default, which binds nothing).
    pub cookie_probe: CookieProbe,
    /// Upstream response-header timeout.
    pub timeout: Duration,
    /// Edits on the request sent upstream.
    pub request_headers: HeaderEdits,
    /// Edits on the response sent to the client.
    pub response_headers: HeaderEdits,
}

/// All routes plus the indexes that make lookup cheap. Immutable: a change
/// builds a new table, swapped in as a whole.
#[derive(Debug, Clone, Default)]
pub struct RoutingTable {
    /// Routes in configuration order; indexes below point into it.
    pub routes: Vec<Route>,
    /// Exact host → route indexes, longest prefix first.
    /// foldhash, not SipHash: the map is fixed when the table is built, so a
    /// client cannot grow collisions into it, and hashing the host was a tenth
    /// of a routing decision.
    exact: HashMap<String, Vec<usize>, foldhash::fast::RandomState>,
    /// Wildcard suffix → route indexes; longest suffix first, then longest prefix.
    wildcard: Vec<(String, Vec<usize>)>,
    /// Routes without hosts, longest prefix first.
    any: Vec<usize>,
}

impl RoutingTable {
    /// Builds the indexes. Routes are assumed validated (names unique).
    pub fn new(routes: Vec<Route>) -> Self {
        let mut exact: HashMap<String, Vec<usize>, foldhash::fast::RandomState> =
            HashMap::default();
        let mut wildcard: HashMap<String, Vec<usize>> = HashMap::new();
        let mut any = Vec::new();
        for (i, r) in routes.iter().enumerate() {
            if r.hosts.is_empty() {
                any.push(i);
            }
            for h in &r.hosts {
                match h {
                    HostPattern::Exact(name) => exact.entry(name.clone()).or_default().push(i),
                    HostPattern::Suffix(s) => wildcard.entry(s.clone()).or_default().push(i),
                }
            }
        }
        let by_prefix = |v: &mut Vec<usize>| {
            // Stable sort keeps configuration order among equal prefixes.
            v.sort_by_key(|&i| std::cmp::Reverse(routes[i].path_prefix.len()));
            v.dedup();
        };
        exact.values_mut().for_each(by_prefix);
        by_prefix(&mut any);
        let mut wildcard: Vec<(String, Vec<usize>)> = wildcard.into_iter().collect();
        wildcard.iter_mut().for_each(|(_, v)| by_prefix(v));
        wildcard.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        RoutingTable {
            routes,
            exact,
            wildcard,
            any,
        }
    }

    /// The route for `host` (normalised) and `path`: the most specific host
    /// group (exact, then longest wildcard, then any-host) that has a route
    /// whose prefix matches, and in it the longest prefix (Gateway API order).
    pub fn find(&self, host: &str, path: &str) -> Option<usize> {
        let first = |v: &[usize]| {
            v.iter()
                .copied()
                .find(|&i| path.starts_with(self.routes[i].path_prefix.as_str()))
        };
        if let Some(v) = self.exact.get(host) {
            if let Some(i) = first(v) {
                return Some(i);
            }
        }
        for (suffix, v) in &self.wildcard {
            if host.len() > suffix.len() && host.ends_with(suffix.as_str()) {
                if let Some(i) = first(v) {
                    return Some(i);
                }
            }
        }
        first(&self.any)
    }

    /// Index of the route named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.routes.iter().position(|r| r.name == name)
    }
}

/// Lower-cases and strips the port and a trailing dot: `App.Example.com:8080`
/// → `app.example.com`; `[::1]:80` → `[::1]`. Returns a borrowed value when
/// nothing changes (the common case).
pub fn normalize_host(raw: &str) -> std::borrow::Cow<'_, str> {
    let b = raw.as_bytes();
    // Plain loops, not `rfind`/`any`: a host is a few dozen bytes, shorter
    // than memrchr's setup (this was a tenth of a routing decision).
    let end = if b.first() == Some(&b'[') {
        b.iter().position(|&c| c == b']').map_or(b.len(), |i| i + 1)
    } else {
        b.iter().rposition(|&c| c == b':').unwrap_or(b.len())
    };
    let without_port = &raw[..end];
    let trimmed = without_port.strip_suffix('.').unwrap_or(without_port);
    if has_ascii_uppercase(trimmed.as_bytes()) {
        std::borrow::Cow::Owned(trimmed.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(trimmed)
    }
}

/// Whether any byte of `b` is an ASCII capital, eight bytes at a time: a
/// byte below 0x80 is in `A..=Z` when adding 0x3f to it sets its top bit and
/// adding 0x25 does not (no carry crosses bytes: 0x7f + 0x3f < 0x100).
fn has_ascii_uppercase(b: &[u8]) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let mut words = b.chunks_exact(8);
    for w in &mut words {
        let mut x = [0u8; 8];
        x.copy_from_slice(w);
        let x = u64::from_le_bytes(x);
        let low = x & LOW7;
        let at_least_a = low + 0x3f3f_3f3f_3f3f_3f3f;
        let past_z = low + 0x2525_2525_2525_2525;
        if at_least_a & !past_z & !x & HIGH != 0 {
            return true;
        }
    }
    words.remainder().iter().any(u8::is_ascii_uppercase)
}
