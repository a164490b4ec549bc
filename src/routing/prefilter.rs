//! Regex matchers with a necessary-literal prefilter.
//!
//! A/B rules usually test a regex against a header that does *not* match (the
//! common request is not in the test group), and the `regex` crate cannot skip
//! the scan for anchored patterns such as Flagger's cookie idiom
//! `^(.*?;)?(canary=always)(;.*)?$`. So at compile time we derive from the
//! pattern's syntax tree the literals every match must contain (`canary=always`;
//! `android` and `mobile`, ASCII case-insensitively, for `(?i)android.*mobile`),
//! and on the request path a `memmem` scan for them rejects most values before the
//! regex runs.
//!
//! What this must never do: change a result. The prefilter only ever answers
//! "cannot match"; whenever every required literal is present the regex decides.
//! The analysis is conservative: anything it does not understand requires
//! nothing. The differential tests in `routing/prefilter_tests.rs` hold it to that.

use memchr::memmem;
use regex::Regex;
use regex_syntax::hir::{Class, Hir, HirKind};

/// Literals shorter than this are too common to be worth a scan.
const MIN_NEEDLE: usize = 3;
/// Scanning costs per needle: two well-chosen ones reject almost everything.
const MAX_NEEDLES: usize = 2;

/// A compiled `regex` matcher and the literals any match must contain.
#[derive(Debug, Clone)]
pub struct RegexMatcher {
    regex: Regex,
    required: Vec<Needle>,
}

#[derive(Debug, Clone)]
enum Needle {
    /// These exact bytes.
    Exact(Box<memmem::Finder<'static>>),
    /// These bytes, ASCII letters in either case (stored lower-cased).
    AsciiCaseless(Box<[u8]>),
}

impl RegexMatcher {
    /// Wraps an already-compiled regex (compiled with the default flags, which
    /// the analysis re-parses the pattern with).
    pub fn new(regex: Regex) -> Self {
        let mut required = Vec::new();
        if let Ok(hir) = regex_syntax::parse(regex.as_str()) {
            let mut units = Vec::new();
            required_literals(&hir, &mut units);
            units.retain(|u| u.bytes.len() >= MIN_NEEDLE);
            // Longest first: longer literals are rarer.
            units.sort_by_key(|u| std::cmp::Reverse(u.bytes.len()));
            units.dedup_by(|a, b| a.bytes == b.bytes && a.caseless == b.caseless);
            required = units
                .into_iter()
                .take(MAX_NEEDLES)
                .map(|u| {
                    if u.caseless {
                        Needle::AsciiCaseless(u.bytes.into_boxed_slice())
                    } else {
                        Needle::Exact(Box::new(memmem::Finder::new(&u.bytes).into_owned()))
                    }
                })
                .collect();
        }
        RegexMatcher { regex, required }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        self.regex.as_str()
    }

    /// Exactly `Regex::is_match`, usually without running the regex.
    pub fn is_match(&self, v: &str) -> bool {
        let h = v.as_bytes();
        self.required.iter().all(|n| n.occurs_in(h)) && self.regex.is_match(v)
    }

    /// How many literals the prefilter scans for (tests and docs).
    pub fn prefilter_len(&self) -> usize {
        self.required.len()
    }
}

impl Needle {
    fn occurs_in(&self, h: &[u8]) -> bool {
        match self {
            Needle::Exact(f) => f.find(h).is_some(),
            Needle::AsciiCaseless(n) => occurs(h, n, true),
        }
    }
}

/// `needle` occurs in `h`; with `caseless`, ignoring ASCII case (the needle's
/// letters stored lower-cased). A `memchr` for the first byte and a compare at
/// each hit: for the short needles of routing (literals of a pattern, cookie
/// names), cheaper than building a `memmem` searcher per call.
// Inlined: called with a constant `caseless` on the request path, where the
// branch then folds away (measured: decide() 134 → 123 ns).
#[inline]
pub(super) fn occurs(h: &[u8], needle: &[u8], caseless: bool) -> bool {
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    if h.len() < needle.len() {
        return false;
    }
    let hay = &h[..=h.len() - needle.len()];
    let at = |i: usize| {
        let cand = &h[i + 1..i + needle.len()];
        if caseless {
            cand.eq_ignore_ascii_case(rest)
        } else {
            cand == rest
        }
    };
    if caseless && first.is_ascii_lowercase() {
        memchr::memchr2_iter(first, first.to_ascii_uppercase(), hay).any(at)
    } else {
        memchr::memchr_iter(first, hay).any(at)
    }
}

/// A run of adjacent literal bytes that every match contains.
struct Unit {
    bytes: Vec<u8>,
    /// Some byte came from an ASCII `[Xx]` class: compare ignoring ASCII case
    /// (weaker than the pattern, so still necessary).
    caseless: bool,
}

/// Pushes onto `out` literals that every match of `hir` contains.
fn required_literals(hir: &Hir, out: &mut Vec<Unit>) {
    match hir.kind() {
        HirKind::Literal(l) => out.push(Unit {
            bytes: l.0.to_vec(),
            caseless: false,
        }),
        HirKind::Capture(c) => required_literals(&c.sub, out),
        HirKind::Repetition(r) if r.min >= 1 => required_literals(&r.sub, out),
        HirKind::Concat(items) => {
            let mut run = Unit {
                bytes: Vec::new(),
                caseless: false,
            };
            for item in items {
                if let HirKind::Literal(l) = item.kind() {
                    run.bytes.extend_from_slice(&l.0);
                } else if let Some(lower) = ascii_case_pair(item) {
                    run.bytes.push(lower);
                    run.caseless = true;
                } else {
                    flush(&mut run, out);
                    required_literals(item, out);
                }
            }
            flush(&mut run, out);
        }
        // Alternations, optional parts, classes, assertions: nothing is certain.
        _ => {}
    }
}

fn flush(run: &mut Unit, out: &mut Vec<Unit>) {
    if !run.bytes.is_empty() {
        out.push(std::mem::replace(
            run,
            Unit {
                bytes: Vec::new(),
                caseless: false,
            },
        ));
    }
}

/// `Some(lower)` when `hir` is a class of exactly `{upper, lower}` of one ASCII letter,
/// which is what `(?i)` makes of most letters (not of `k` or `s`, whose
/// classes also hold the Kelvin sign and the long s).
fn ascii_case_pair(hir: &Hir) -> Option<u8> {
    let HirKind::Class(c) = hir.kind() else {
        return None;
    };
    // Both kinds as (start, end) code points; a third range already disqualifies.
    let ranges: Vec<(u32, u32)> = match c {
        Class::Unicode(u) => u
            .ranges()
            .iter()
            .map(|r| (r.start().into(), r.end().into()))
            .take(3)
            .collect(),
        Class::Bytes(b) => b
            .ranges()
            .iter()
            .map(|r| (r.start().into(), r.end().into()))
            .take(3)
            .collect(),
    };
    let [(a, a_end), (b, b_end)] = ranges[..] else {
        return None;
    };
    let (a, b) = (u8::try_from(a).ok()?, u8::try_from(b).ok()?);
    let single = u32::from(a) == a_end && u32::from(b) == b_end;
    (single && a.is_ascii_uppercase() && b == a.to_ascii_lowercase()).then_some(b)
}
