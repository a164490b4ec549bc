//! One scan of the Cookie header for everything a route's cookie conditions
//! need.
//!
//! A route with A/B rules and session affinity asks the Cookie header
//! several questions per request: is cookie `beta` there, does the header
//! hold `canary=always`, is there a `weir-canary` or a `weir-primary` cookie.
//! Each question is a scan, and on the common request (not in the test
//! group, not pinned) every answer is no. Each of those conditions needs a
//! literal to occur in the header (a cookie's name; a literal every match of
//! the header pattern contains), so the route's literals are gathered at
//! compile time and one scan for up to three bytes tells whether any of them
//! occurs. When none does, every such condition is false without being asked.
//!
//! What this must never do: change a decision. The probe only ever answers
//! "none of these literals occurs"; anything it is unsure of (several Cookie
//! headers, too many false starts, a literal it could not fit) leaves the
//! question to the rules. The differential test in `routing/probe_tests.rs`
//! (`probe_never_changes_a_decision`) holds it to that.

use super::prefilter::{positions_of_any, same_literal, HeaderText, MAX_FALSE_STARTS};
use super::{CookieHeader, MatchRule, RequestView, StringMatcher};
use crate::affinity::AffinityConfig;
use memchr::arch::all::packedpair::HeuristicFrequencyRank;

/// Bytes one scan looks for (memchr's searchers take at most three).
const MAX_PROBE_BYTES: usize = 3;

/// What a route's cookie conditions need from the Cookie header; see the
/// module docs. Built from the route's `matches` and `affinity` (by
/// [`CookieProbe::new`], when the route is compiled): it must be rebuilt if
/// either changes. The default probe binds nothing and is always safe.
#[derive(Debug, Clone, Default)]
pub struct CookieProbe {
    /// The bytes the scan looks for.
    set: Vec<u8>,
    literals: Vec<Literal>,
    /// `rules[i]`: rule `i` has a condition that needs one of `literals`.
    rules: Vec<bool>,
    /// Affinity's cookie names are all among `literals`.
    affinity: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Literal {
    /// Lower-cased when `caseless`.
    bytes: Vec<u8>,
    caseless: bool,
    /// Offset of the byte the scan finds it by.
    at: usize,
    /// That byte as the scan may find it: both cases when caseless (else
    /// the same byte twice), so a hit is told from a miss in two compares.
    keys: [u8; 2],
}

impl CookieProbe {
    /// The probe for a route's rules and affinity. Affinity comes first: it
    /// is asked on every request no rule sends to the canary.
    pub fn new(rules: &[MatchRule], affinity: Option<&AffinityConfig>) -> Self {
        let mut probe = CookieProbe {
            rules: vec![false; rules.len()],
            ..CookieProbe::default()
        };
        if let Some(a) = affinity {
            let names = std::iter::once(&a.cookie_name).chain(&a.primary_cookie_name);
            let group: Vec<(&[u8], bool)> = names.map(|n| (n.as_bytes(), false)).collect();
            probe.affinity = probe.try_add(&group);
        }
        for (i, rule) in rules.iter().enumerate() {
            // One literal of a rule is enough: its absence fails the rule.
            probe.rules[i] = rule_literals(rule).any(|l| probe.try_add(&[l]));
        }
        if !probe.affinity && !probe.rules.contains(&true) {
            return CookieProbe::default();
        }
        probe
    }

    /// Whether rule `i` has a condition that is false when [`Self::quiet`] is.
    pub(super) fn binds_rule(&self, i: usize) -> bool {
        self.rules.get(i).copied().unwrap_or(false)
    }

    /// Whether affinity finds no cookie when [`Self::quiet`] is true.
    pub(super) fn binds_affinity(&self) -> bool {
        self.affinity
    }

    /// The bytes one scan looks for (tests).
    #[cfg(test)]
    pub(super) fn scan_bytes(&self) -> &[u8] {
        &self.set
    }

    /// True when none of the literals occurs in `req`'s Cookie header, so
    /// every condition the probe binds is false. False when one occurs or
    /// when the probe cannot tell.
    pub(super) fn quiet(&self, req: &RequestView<'_>) -> bool {
        match req.cookie_header() {
            CookieHeader::Absent => true,
            CookieHeader::One(h) => self.absent_from(h),
            // The rules join several headers; not worth a second path.
            CookieHeader::Many => false,
        }
    }

    /// True when no literal occurs in `h`; false when one does, or after
    /// more false starts than the scan tolerates (the rules then decide, so
    /// the work stays linear in `h` whatever a client sends).
    fn absent_from(&self, h: &[u8]) -> bool {
        if self.set.is_empty() {
            return false;
        }
        let mut false_starts = 0;
        let found_or_gave_up = |p: usize| {
            let b = h[p];
            let hit = self.literals.iter().any(|l| {
                (l.keys[0] == b || l.keys[1] == b)
                    && p.checked_sub(l.at).is_some_and(|start| {
                        h.get(start..start + l.bytes.len())
                            .is_some_and(|cand| same_literal(cand, &l.bytes, l.caseless))
                    })
            });
            false_starts += usize::from(!hit);
            hit || false_starts > MAX_FALSE_STARTS
        };
        !positions_of_any(&self.set, h, found_or_gave_up)
    }

    /// Adds every literal of `group` or none: each is found by one of its
    /// bytes, preferring bytes already scanned for, then the rarest.
    fn try_add(&mut self, group: &[(&[u8], bool)]) -> bool {
        let mut set = self.set.clone();
        let mut added = Vec::new();
        for &(bytes, caseless) in group {
            if bytes.is_empty() {
                return false;
            }
            let bytes = if caseless {
                bytes.to_ascii_lowercase()
            } else {
                bytes.to_vec()
            };
            let keys = |b: u8| {
                if caseless {
                    [b, b.to_ascii_uppercase()]
                } else {
                    [b, b]
                }
            };
            let best = (0..bytes.len()).min_by_key(|&at| {
                let mut new = keys(bytes[at]).to_vec();
                new.dedup();
                new.retain(|k| !set.contains(k));
                (new.len(), HeaderText.rank(bytes[at]))
            });
            let Some(at) = best else { return false };
            let keys = keys(bytes[at]);
            for k in keys {
                if !set.contains(&k) {
                    set.push(k);
                }
            }
            if set.len() > MAX_PROBE_BYTES {
                return false;
            }
            let lit = Literal {
                bytes,
                caseless,
                at,
                keys,
            };
            if !self.literals.contains(&lit) && !added.contains(&lit) {
                added.push(lit);
            }
        }
        self.set = set;
        self.literals.extend(added);
        true
    }
}

/// Literals that must occur in the one Cookie header for some condition of
/// `rule` to hold, as `(bytes, caseless)`.
fn rule_literals(rule: &MatchRule) -> impl Iterator<Item = (&[u8], bool)> {
    let header = rule
        .headers
        .iter()
        .filter(|(name, _)| name == http::header::COOKIE)
        .flat_map(|(_, m)| value_literals(m));
    // A cookie that must exist (any matcher but `present: false`) has its
    // name in the header, as `any_cookie` looks for it.
    let cookies = rule
        .cookies
        .iter()
        .filter(|(_, m)| !matches!(m, StringMatcher::Present(false)))
        .map(|(name, _)| (name.as_bytes(), false));
    header.chain(cookies)
}

/// Literals every value `m` accepts contains.
fn value_literals(m: &StringMatcher) -> Box<dyn Iterator<Item = (&[u8], bool)> + '_> {
    match m {
        StringMatcher::Exact(s) | StringMatcher::Prefix(s) | StringMatcher::Suffix(s) => {
            Box::new(std::iter::once((s.as_bytes(), false)).filter(|(b, _)| !b.is_empty()))
        }
        StringMatcher::Regex(r) => Box::new(r.required()),
        StringMatcher::Present(_) => Box::new(std::iter::empty()),
    }
}
