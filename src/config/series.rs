//! The series weir exports at `/metrics`, listed in one place, and the series a PromQL
//! query reads.
//!
//! A metric whose query reads a `weir_*` series that weir does not export finds no data
//! at every check: a failed check each interval, then a rollback, for a typo that could
//! have been named before the release started. So validation refuses such a query
//! ([`why_not_exported`] gives the reason). Only names starting with `weir_` are held to
//! the list there: any other series comes from an exporter weir cannot see.
//!
//! The series are rendered by layers above config (the data plane's registry, the
//! rollout exporter, the providers' section), which config may not import; so the list
//! lives here, and a test beside each of those renders its series and holds every name
//! to [`FAMILIES`], so the two cannot drift apart. PURE: no IO.

use super::suggest::did_you_mean;

/// How Prometheus stores a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One series per label set, only going up.
    Counter,
    /// One series per label set.
    Gauge,
    /// Stored as `NAME_bucket`, `NAME_sum` and `NAME_count`; `NAME` itself holds nothing.
    Histogram,
}

impl Kind {
    /// The word of a `# TYPE` line.
    pub fn type_name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One family of `/metrics`.
#[derive(Debug)]
pub struct Family {
    /// The name in `# TYPE` lines.
    pub name: &'static str,
    /// How it is stored, which decides the names a query can read.
    pub kind: Kind,
    /// Exported only with `admin.flaggerMetrics: true` (Flagger's and Istio's names).
    pub flagger_metrics: bool,
}

const fn weir(name: &'static str, kind: Kind) -> Family {
    Family {
        name,
        kind,
        flagger_metrics: false,
    }
}

const fn flagger(name: &'static str, kind: Kind) -> Family {
    Family {
        name,
        kind,
        flagger_metrics: true,
    }
}

use Kind::{Counter, Gauge, Histogram};

/// Every family weir can export, as `docs/metrics.md` lists them. Some appear only
/// once their feature is configured (a mirror, a retry policy, a provider, a canary).
pub const FAMILIES: &[Family] = &[
    // The data plane's registry.
    weir("weir_requests_total", Counter),
    weir("weir_request_duration_seconds", Histogram),
    weir("weir_upstream_errors_total", Counter),
    weir("weir_upstream_connect_errors_total", Counter),
    weir("weir_table_version", Gauge),
    weir("weir_mirror_requests_total", Counter),
    weir("weir_mirror_dropped_total", Counter),
    weir("weir_mirror_in_flight", Gauge),
    weir("weir_backend_endpoints", Gauge),
    weir("weir_upstream_in_flight", Gauge),
    weir("weir_retries_total", Counter),
    weir("weir_overflows_total", Counter),
    weir("weir_rate_limited_total", Counter),
    // The endpoint providers.
    weir("weir_provider_connected", Gauge),
    weir("weir_provider_events_total", Counter),
    weir("weir_provider_syncs_total", Counter),
    weir("weir_provider_disconnects_total", Counter),
    weir("weir_provider_endpoints", Gauge),
    weir("weir_provider_containers", Gauge),
    // The rollout engine.
    weir("weir_canary_status", Gauge),
    weir("weir_canary_phase", Gauge),
    weir("weir_canary_weight", Gauge),
    weir("weir_canary_failed_checks", Gauge),
    weir("weir_canary_threshold", Gauge),
    weir("weir_canary_metric_value", Gauge),
    weir("weir_canary_duration_seconds", Histogram),
    weir("weir_canary_runs_total", Counter),
    weir("weir_backend_revision_info", Gauge),
    // The fleet.
    weir("weir_cluster_peers_refused_total", Counter),
    weir("weir_cluster_replica_lag_seconds", Gauge),
    // The same facts under Flagger's names, and the request series under Istio's.
    flagger("flagger_info", Gauge),
    flagger("flagger_canary_total", Gauge),
    flagger("flagger_canary_status", Gauge),
    flagger("flagger_canary_weight", Gauge),
    flagger("flagger_canary_metric_analysis", Gauge),
    flagger("flagger_canary_duration_seconds", Histogram),
    flagger("flagger_canary_successes_total", Counter),
    flagger("flagger_canary_failures_total", Counter),
    flagger("istio_requests_total", Counter),
    flagger("istio_request_duration_milliseconds", Histogram),
];

/// The suffixes under which Prometheus stores a histogram.
const HISTOGRAM_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];

/// The family with this `# TYPE` name.
pub fn family(name: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.name == name)
}

/// The family a query reads through `name` (a histogram through its suffixed names), or
/// `None` when weir exports nothing under that name.
pub fn exported(name: &str) -> Option<&'static Family> {
    if let Some(f) = family(name).filter(|f| f.kind != Histogram) {
        return Some(f);
    }
    HISTOGRAM_SUFFIXES
        .iter()
        .filter_map(|s| name.strip_suffix(s))
        .filter_map(family)
        .find(|f| f.kind == Histogram)
}

/// Every name a query can read from weir.
pub fn queryable() -> Vec<String> {
    FAMILIES
        .iter()
        .flat_map(|f| match f.kind {
            Histogram => HISTOGRAM_SUFFIXES
                .iter()
                .map(|s| format!("{}{s}", f.name))
                .collect(),
            _ => vec![f.name.to_string()],
        })
        .collect()
}

/// The exported name closest to `name` (a typo of it), if one is close enough; one of
/// the same prefix first (`istio_…` is meant as an Istio name, not as a weir one).
pub fn closest(name: &str) -> Option<String> {
    let names = queryable();
    let prefix = name.split_once('_').map_or(name, |(p, _)| p);
    let same = names
        .iter()
        .filter(|n| n.split_once('_').is_some_and(|(p, _)| p == prefix));
    did_you_mean(name, same.map(String::as_str))
        .or_else(|| did_you_mean(name, names.iter().map(String::as_str)))
        .map(str::to_string)
}

/// Why a query finds no data under `name`, or `None` when weir exports it.
pub fn why_not_exported(name: &str) -> Option<String> {
    if exported(name).is_some() {
        return None;
    }
    if family(name).is_some_and(|f| f.kind == Histogram) {
        return Some(format!(
            "{name:?} is a histogram: Prometheus stores it as {name}_bucket, {name}_sum and \
             {name}_count, and the name alone has no samples"
        ));
    }
    Some(match closest(name) {
        Some(c) => format!("weir exports no series {name:?}: did you mean {c}?"),
        None => format!(
            "weir exports no series {name:?} (its request series are weir_requests_total and \
             weir_request_duration_seconds_bucket, _sum and _count; all are in docs/metrics.md)"
        ),
    })
}

/// What a query reads, as [`scan`] finds it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan<'q> {
    /// Metric names, each once, in the order they first appear.
    pub series: Vec<&'q str>,
    /// Label names inside `{…}` selectors, each once, in order.
    pub labels: Vec<&'q str>,
}

/// Words that are PromQL, not series: aggregations (which may be followed by `by (…)`
/// before their parenthesis), binary operators, modifiers and literals.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "and",
    "or",
    "unless",
    "atan2",
    "bool",
    "offset",
    "inf",
    "nan",
];

/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

fn ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b':'
}

fn ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

/// The index after the string literal that opens at `i` (`"…"` and `'…'` with
/// backslash escapes, `` `…` `` raw); the end of the text when it is not closed.
fn skip_string(b: &[u8], i: usize) -> usize {
    let quote = b[i];
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' if quote != b'`' => j += 2,
            c if c == quote => return j + 1,
            _ => j += 1,
        }
    }
    b.len()
}

/// The index just after the first `close` at or after `i`, or the end of the text.
fn skip_past(b: &[u8], i: usize, close: u8) -> usize {
    b[i..]
        .iter()
        .position(|&c| c == close)
        .map_or(b.len(), |p| i + p + 1)
}

/// The series and label names a PromQL query (a template, possibly) reads.
///
/// A reasonable reading, not a parser: identifiers are `[a-zA-Z_:][a-zA-Z0-9_:]*`;
/// string literals, comments, `[…]` ranges, numbers and durations are skipped; a word
/// before `(` is a function, a keyword is PromQL's; label names are the identifiers
/// inside `{…}` and after `by`, `on` and their kin. A template action `{{ … }}` is
/// skipped, and a word written against one (`weir_{{ variables.kind }}_total`) is not
/// read at all: its name is known only once rendered.
pub fn scan(query: &str) -> Scan<'_> {
    let b = query.as_bytes();
    let mut out = Scan::default();
    let mut i = 0;
    let mut braces = 0usize;
    let mut after_action = false;
    while i < b.len() {
        if b[i..].starts_with(b"{{") {
            i = query[i + 2..].find("}}").map_or(b.len(), |j| i + 2 + j + 2);
            after_action = true;
            continue;
        }
        let glued_before = std::mem::take(&mut after_action);
        let c = b[i];
        match c {
            b'"' | b'\'' | b'`' => i = skip_string(b, i),
            b'#' => i = skip_past(b, i, b'\n'),
            b'[' => i = skip_past(b, i, b']'),
            b'{' => {
                braces += 1;
                i += 1;
            }
            b'}' => {
                braces = braces.saturating_sub(1);
                i += 1;
            }
            c if c.is_ascii_digit()
                || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) =>
            {
                while i < b.len() && (ident_char(b[i]) || b[i] == b'.') {
                    i += 1;
                }
            }
            c if ident_start(c) => {
                let start = i;
                while i < b.len() && ident_char(b[i]) {
                    i += 1;
                }
                let word = &query[start..i];
                if glued_before || b[i..].starts_with(b"{{") {
                    continue;
                }
                if braces > 0 {
                    push(&mut out.labels, word);
                    continue;
                }
                let lower = word.to_ascii_lowercase();
                let rest = query[i..].trim_start();
                if LABEL_LISTS.contains(&lower.as_str()) {
                    if rest.starts_with('(') {
                        let open = query.len() - rest.len();
                        let close = b[open..].iter().position(|&c| c == b')').map(|p| open + p);
                        for label in scan_list(&query[open + 1..close.unwrap_or(b.len())]) {
                            push(&mut out.labels, label);
                        }
                        i = close.map_or(b.len(), |c| c + 1);
                    }
                    continue;
                }
                if KEYWORDS.contains(&lower.as_str()) || rest.starts_with('(') {
                    continue;
                }
                push(&mut out.series, word);
            }
            _ => i += 1,
        }
    }
    out
}

/// The identifiers of a `by (a, b)` list.
fn scan_list(list: &str) -> impl Iterator<Item = &str> {
    list.split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty() && w.bytes().all(ident_char))
}

fn push<'q>(list: &mut Vec<&'q str>, word: &'q str) {
    if !list.contains(&word) {
        list.push(word);
    }
}

/// The `weir_*` series `query` reads that weir does not export, each with the reason.
pub fn unknown_weir_series(query: &str) -> Vec<(&str, String)> {
    scan(query)
        .series
        .into_iter()
        .filter(|s| s.starts_with("weir_"))
        .filter_map(|s| why_not_exported(s).map(|why| (s, why)))
        .collect()
}

#[cfg(test)]
#[path = "series_tests.rs"]
mod tests;
