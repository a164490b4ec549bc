//! Istio's `HTTPMatchRequest` (Flagger's `analysis.match` and
//! `service.match`) → weir's match items, and Istio's route retries and
//! header edits → weir's.

use super::node::{Node, Notes};
use super::yaml::{Entry, Y};
use serde_json::Value;

/// One Istio `StringMatch` → weir's (`{}` is Istio's "present").
fn string_match(v: Value, path: &str, notes: &mut Notes<'_>) -> Option<Y> {
    let mut n = Node::new(path, v, notes)?;
    let mut found = Vec::new();
    for kind in ["exact", "prefix", "suffix", "regex"] {
        if let Some(s) = n.string(kind, notes) {
            found.push(Entry::new(kind, Y::str(s)));
        }
    }
    n.finish(notes, |_| None);
    match found.len() {
        0 => Some(Y::map([("present", Y::Bool(true))])),
        1 => Some(Y::Map(found)),
        _ => {
            notes.add(
                path,
                "more than one of exact, prefix, regex: Istio refuses this too; left out",
            );
            None
        }
    }
}

/// A map of header (or query parameter) name → StringMatch.
fn string_matches(n: &mut Node, key: &str, notes: &mut Notes<'_>) -> Option<Y> {
    let mut m = n.child(key, notes)?;
    let names: Vec<String> = m.keys();
    let mut out = Vec::new();
    for name in names {
        let p = m.at(&name);
        if let Some(v) = m.take(&name) {
            if let Some(sm) = string_match(v, &p, notes) {
                out.push(Entry::new(name, sm));
            }
        }
    }
    m.finish(notes, |_| None);
    (!out.is_empty()).then_some(Y::Map(out))
}

/// One item of a match list; `None` when nothing of it maps.
pub fn match_item(v: Value, path: &str, notes: &mut Notes<'_>) -> Option<Y> {
    let mut n = Node::new(path, v, notes)?;
    let mut out = Vec::new();
    for key in ["headers", "withoutHeaders", "queryParams"] {
        if let Some(y) = string_matches(&mut n, key, notes) {
            out.push(Entry::new(key, y));
        }
    }
    for key in ["uri", "method", "scheme", "authority"] {
        if let Some(v) = n.take(key) {
            if let Some(sm) = string_match(v, &n.at(key), notes) {
                out.push(Entry::new(key, sm));
            }
        }
    }
    if let Some(b) = n.bool("ignoreUriCase", notes) {
        out.push(Entry::new("ignoreUriCase", Y::Bool(b)));
    }
    if let Some(p) = n.int("port", notes) {
        out.push(Entry::new("port", Y::Int(p)));
    }
    if n.take("sourceLabels").is_some() {
        notes.add(
            &n.at("sourceLabels"),
            "weir has no workload labels to select clients by: add `sourceIp: [CIDR, ...]` with the \
             clients' addresses to this item",
        );
    }
    n.finish(notes, |p| {
        let field = p.rsplit('.').next().unwrap_or(p);
        Some(match field {
            "gateways" => "weir's listeners take the place of gateways; a match item cannot select one (use `port`)".into(),
            "sourceNamespace" => "weir has no namespaces to select clients by; use `sourceIp`".into(),
            "name" | "statPrefix" => "Istio's names for stats; weir's stats are per route and role".into(),
            _ => return None,
        })
    });
    if out.is_empty() {
        notes.add(
            path,
            "no condition of this item maps to weir's; the item is left out",
        );
        return None;
    }
    Some(Y::Map(out))
}

/// Istio's retryOn conditions that weir's `retries.on` knows.
const RETRY_ON: &[&str] = &[
    "connect-failure",
    "reset",
    "gateway-error",
    "5xx",
    "retriable-status-codes",
];

/// `service.retries` (Istio's HTTPRetry) → `routes[].retries`.
pub fn retries(mut n: Node, notes: &mut Notes<'_>) -> Option<Y> {
    let attempts = n.int("attempts", notes);
    let per_try = n.string("perTryTimeout", notes);
    let on = n.string("retryOn", notes);
    let path = n.path.clone();
    n.finish(notes, |_| None);
    let attempts = attempts?;
    if attempts <= 0 {
        return None;
    }
    let mut out = vec![Entry::new("attempts", Y::Int(attempts))];
    if let Some(on) = on {
        let mut kept = Vec::new();
        for c in on.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            if RETRY_ON.contains(&c) {
                kept.push(Y::str(c));
            } else {
                notes.add(
                    &format!("{path}.retryOn"),
                    format!(
                        "condition {c:?} has no weir equivalent (weir retries on {}); left out",
                        RETRY_ON.join(", ")
                    ),
                );
            }
        }
        if !kept.is_empty() {
            out.push(Entry::new("on", Y::Seq(kept)));
        }
    }
    if let Some(t) = per_try {
        out.push(Entry::new("perTryTimeout", Y::str(t)));
    }
    Some(Y::Map(out))
}

/// `service.headers` (Istio's Headers: request/response set, add, remove)
/// → `routes[].headers`, which has the same shape.
pub fn headers(mut n: Node, notes: &mut Notes<'_>) -> Option<Y> {
    let mut out = Vec::new();
    for side in ["request", "response"] {
        let Some(mut s) = n.child(side, notes) else {
            continue;
        };
        let mut edits = Vec::new();
        for op in ["set", "add"] {
            let pairs = s.strings(op, notes);
            if !pairs.is_empty() {
                edits.push(Entry::new(
                    op,
                    Y::Map(
                        pairs
                            .into_iter()
                            .map(|(k, v)| Entry::new(k, Y::Str(v)))
                            .collect(),
                    ),
                ));
            }
        }
        let remove: Vec<Y> = s
            .list("remove", notes)
            .into_iter()
            .filter_map(|v| v.as_str().map(Y::str))
            .collect();
        if !remove.is_empty() {
            edits.push(Entry::new("remove", Y::Seq(remove)));
        }
        s.finish(notes, |_| None);
        if !edits.is_empty() {
            out.push(Entry::new(side, Y::Map(edits)));
        }
    }
    n.finish(notes, |_| None);
    (!out.is_empty()).then_some(Y::Map(out))
}
