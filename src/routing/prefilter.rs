//! Regex matchers with a necessary-literal prefilter.
//!
//! A/B rules usually test a regex against a header that does *not* match (the
//! common request is not in the test group), and the `regex` crate cannot skip
//! the scan for anchored patterns such as Flagger's cookie idiom
//! `^(.*?;)?(canary=always)(;.*)?$`. So at compile time we derive from the
//! pattern's syntax tree the literals every match must contain (`canary=always`;
//! `android` and `mobile`, ASCII case-insensitively, for `(?i)android.*mobile`),
//! and on the request path a `memchr` scan for each literal's rarest byte rejects
//! most values before the regex runs.
//!
//! What this must never do: change a result. The prefilter only ever answers
//! "cannot match"; whenever every required literal is present the regex decides.
//! The analysis is conservative: anything it does not understand requires
//! nothing. The differential tests in `routing/prefilter_tests.rs` hold it to that.

use regex_automata::meta;
use regex_automata::util::syntax;
use regex_automata::MatchKind;
use regex_syntax::hir::{Class, Hir, HirKind};
use std::sync::Arc;

/// Literals shorter than this are too common to be worth a scan.
const MIN_NEEDLE: usize = 3;
/// Scanning costs per needle: two well-chosen ones reject almost everything.
const MAX_NEEDLES: usize = 2;

/// A compiled `regex` matcher and the literals any match must contain.
#[derive(Debug, Clone)]
pub struct RegexMatcher {
    /// What `regex::bytes::Regex` is made of (built as its builder builds it), used
    /// directly for its [`meta::Regex::memory_usage`].
    regex: meta::Regex,
    /// The pattern as written.
    pattern: Arc<str>,
    required: Vec<Needle>,
}

/// A literal every match contains.
#[derive(Debug, Clone)]
struct Needle {
    /// The bytes; lower-cased when `caseless`.
    bytes: Box<[u8]>,
    /// ASCII letters match in either case.
    caseless: bool,
    /// Offset of the byte least common in text (memchr's frequency ranks):
    /// the scan looks for it, so that a needle such as `android` does not
    /// stop at the `a` of every `Mozilla`.
    rare: usize,
}

/// How common a byte is in the header values rules test (cookies, user
/// agents): memchr's own ranks are for prose and code, where `=` is rare; in
/// a Cookie header it is in every pair.
pub(super) struct HeaderText;

impl memchr::arch::all::packedpair::HeuristicFrequencyRank for HeaderText {
    fn rank(&self, b: u8) -> u8 {
        const LETTERS_BY_FREQUENCY: &[u8] = b"etaoinsrhldcumfpgwybvkxjqz";
        let lower = b.to_ascii_lowercase();
        match LETTERS_BY_FREQUENCY.iter().position(|&l| l == lower) {
            // 250 for `e` down to 125 for `z`; capitals rarer still.
            Some(i) => {
                let r = 250 - 5 * i as u8;
                if b.is_ascii_uppercase() {
                    r / 2
                } else {
                    r
                }
            }
            None if b.is_ascii_digit() || b" =;,./:-_()".contains(&b) => 255,
            None => 20,
        }
    }
}

/// False starts a needle scan tolerates before it stops and lets the regex
/// decide: whatever a client sends, the scan stays linear in the value.
pub(super) const MAX_FALSE_STARTS: usize = 8;

impl RegexMatcher {
    /// Compiles `pattern` as `regex::Regex` accepts it (Unicode; a pattern
    /// that could match invalid UTF-8 is a syntax error); the one syntax tree
    /// serves that check and the literal analysis. The regex is a bytes regex, so that
    /// a header value is matched without first being checked as text; on text
    /// it answers as `regex::Regex` would. `size_limit` bounds the compiled
    /// program and its DFA.
    pub fn compile(pattern: &str, size_limit: usize) -> Result<Self, regex::Error> {
        let hir = regex_syntax::parse(pattern).map_err(|e| regex::Error::Syntax(e.to_string()))?;
        // Exactly `regex::bytes::RegexBuilder::new(pattern).size_limit(l)
        // .dfa_size_limit(l).build()`, its errors mapped as it maps them.
        let regex = meta::Builder::new()
            .configure(
                meta::Config::new()
                    .match_kind(MatchKind::LeftmostFirst)
                    .utf8_empty(false)
                    .nfa_size_limit(Some(size_limit))
                    .hybrid_cache_capacity(size_limit),
            )
            .syntax(syntax::Config::new().utf8(false))
            .build(pattern)
            .map_err(|e| match (e.size_limit(), e.syntax_error()) {
                (Some(limit), _) => regex::Error::CompiledTooBig(limit),
                (None, Some(s)) => regex::Error::Syntax(s.to_string()),
                (None, None) => regex::Error::Syntax(e.to_string()),
            })?;
        let mut units = Vec::new();
        required_literals(&hir, &mut units);
        units.retain(|u| u.bytes.len() >= MIN_NEEDLE);
        // Longest first: longer literals are rarer.
        units.sort_by_key(|u| std::cmp::Reverse(u.bytes.len()));
        units.dedup_by(|a, b| a.bytes == b.bytes && a.caseless == b.caseless);
        let required = units
            .into_iter()
            .take(MAX_NEEDLES)
            .map(|u| Needle {
                rare: memchr::arch::all::packedpair::Pair::with_ranker(&u.bytes, HeaderText)
                    .map_or(0, |p| usize::from(p.index1())),
                bytes: u.bytes.into_boxed_slice(),
                caseless: u.caseless,
            })
            .collect();
        Ok(RegexMatcher {
            regex,
            pattern: Arc::from(pattern),
            required,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Heap bytes of the compiled regex (its automata, prefilter and literals; not
    /// the per-thread search caches, which grow with use up to the DFA limit).
    pub fn memory_usage(&self) -> usize {
        self.regex.memory_usage()
            + self.pattern.len()
            + self.required.iter().map(|n| n.bytes.len()).sum::<usize>()
    }

    /// Exactly `Regex::is_match`, usually without running the regex.
    pub fn is_match(&self, h: &[u8]) -> bool {
        self.required.iter().all(|n| n.may_occur(h)) && self.regex.is_match(h)
    }

    /// How many literals the prefilter scans for (tests and docs).
    pub fn prefilter_len(&self) -> usize {
        self.required.len()
    }

    /// The literals every match contains, as `(bytes, caseless)`; caseless
    /// ones are lower-cased.
    pub(super) fn required(&self) -> impl Iterator<Item = (&[u8], bool)> {
        self.required.iter().map(|n| (&n.bytes[..], n.caseless))
    }
}

impl Needle {
    /// False only when `h` cannot contain the needle.
    fn may_occur(&self, h: &[u8]) -> bool {
        let n = &self.bytes[..];
        if h.len() < n.len() {
            return false;
        }
        let b = n[self.rare];
        // A match starting at `i` has the rare byte at `i + rare`, for every
        // start from 0 to h.len() - n.len(): `window[i]` is that byte.
        let window = &h[self.rare..=h.len() - n.len() + self.rare];
        let mut false_starts = 0;
        let found_or_gave_up = |i: usize| {
            let hit = same_literal(&h[i..i + n.len()], n, self.caseless);
            false_starts += usize::from(!hit);
            hit || false_starts > MAX_FALSE_STARTS
        };
        if self.caseless && b.is_ascii_lowercase() {
            positions_of_either(b, b.to_ascii_uppercase(), window, found_or_gave_up)
        } else {
            positions_of(b, window, found_or_gave_up)
        }
    }
}

/// `needle` occurs in `h`. A `memchr` for the first byte and a compare at
/// each hit: for the short needles of routing (cookie names), cheaper than
/// building a `memmem` searcher per call.
#[inline]
pub(super) fn occurs(h: &[u8], needle: &[u8]) -> bool {
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    if h.len() < needle.len() {
        return false;
    }
    let hay = &h[..=h.len() - needle.len()];
    positions_of(first, hay, |i| {
        same_bytes(&h[i + 1..i + needle.len()], rest)
    })
}

/// `cand` is the literal `lit` (lower-cased when `caseless`, and then
/// compared ignoring ASCII case).
#[inline]
pub(super) fn same_literal(cand: &[u8], lit: &[u8], caseless: bool) -> bool {
    if caseless {
        cand.eq_ignore_ascii_case(lit)
    } else {
        same_bytes(cand, lit)
    }
}

/// `a == b` for the few bytes of a needle, compared in place: slice
/// equality calls libc's `memcmp`, whose call costs more than these compares.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Whether `f` holds at some position of `b` in `h`, in order.
///
/// SSE2 is part of x86-64, so there memchr's SSE2 searcher is used directly:
/// inlined, without `memchr()`'s run-time dispatch to AVX2, which costs more
/// than it saves on header values of a few dozen bytes (measured: about a
/// tenth of a routing decision).
#[inline]
fn positions_of(b: u8, h: &[u8], f: impl FnMut(usize) -> bool) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(one) = memchr::arch::x86_64::sse2::memchr::One::new(b) {
        return one.iter(h).any(f);
    }
    memchr::memchr_iter(b, h).any(f)
}

/// The same for either of two bytes.
#[inline]
fn positions_of_either(a: u8, b: u8, h: &[u8], f: impl FnMut(usize) -> bool) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(two) = memchr::arch::x86_64::sse2::memchr::Two::new(a, b) {
        return two.iter(h).any(f);
    }
    memchr::memchr2_iter(a, b, h).any(f)
}

/// The same for any of one to three bytes (more are not supported: `set`
/// is cut to three).
#[inline]
pub(super) fn positions_of_any(set: &[u8], h: &[u8], f: impl FnMut(usize) -> bool) -> bool {
    match *set {
        [] => false,
        [a] => positions_of(a, h, f),
        [a, b] => positions_of_either(a, b, h, f),
        [a, b, c, ..] => {
            #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
            if let Some(three) = memchr::arch::x86_64::sse2::memchr::Three::new(a, b, c) {
                return three.iter(h).any(f);
            }
            memchr::memchr3_iter(a, b, c, h).any(f)
        }
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
