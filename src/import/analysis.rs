//! A Canary's `analysis` block: steps, match, mirror, affinity, metrics,
//! webhooks and alerts.

use super::canary::{spec_reason, Refs};
use super::matches;
use super::node::{Node, Notes};
use super::resources::DEFAULT_PROMETHEUS;
use super::series;
use super::yaml::{Entry, Y};

/// The `analysis` block, and whether a query it uses reads series weir exports only
/// with `admin.flaggerMetrics`.
pub(super) fn analysis_block(
    mut a: Node,
    ns: &str,
    metrics_server: Option<&str>,
    refs: &Refs<'_>,
    notes: &mut Notes<'_>,
) -> (Y, bool) {
    let mut out = Vec::new();
    if let Some(i) = a.string("interval", notes) {
        out.push(Entry::new("interval", Y::str(i)));
    }
    for key in ["threshold", "maxWeight", "stepWeight"] {
        if let Some(v) = a.int(key, notes) {
            out.push(Entry::new(key, Y::Int(v)));
        }
    }
    let steps: Vec<Y> = a
        .list("stepWeights", notes)
        .into_iter()
        .filter_map(|v| v.as_i64().map(Y::Int))
        .collect();
    if !steps.is_empty() {
        out.push(Entry::new("stepWeights", Y::Seq(steps)));
    }
    for key in ["stepWeightPromotion", "iterations"] {
        if let Some(v) = a.int(key, notes) {
            out.push(Entry::new(key, Y::Int(v)));
        }
    }
    let path = a.at("match");
    let items: Vec<Y> = a
        .list("match", notes)
        .into_iter()
        .enumerate()
        .filter_map(|(i, v)| matches::match_item(v, &format!("{path}[{i}]"), notes))
        .collect();
    if !items.is_empty() {
        out.push(Entry::new("match", Y::Seq(items)));
    }
    if let Some(m) = a.bool("mirror", notes) {
        out.push(Entry::new("mirror", Y::Bool(m)));
    }
    if let Some(w) = a.int("mirrorWeight", notes) {
        out.push(Entry::new("mirrorWeight", Y::Int(w)));
    }
    if let Some(s) = a.child("sessionAffinity", notes) {
        out.push(Entry::new("sessionAffinity", affinity(s, notes)));
    }
    let mut flagger_metrics = false;
    let path = a.at("metrics");
    let metrics: Vec<Y> = a
        .list("metrics", notes)
        .into_iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let n = Node::new(format!("{path}[{i}]"), v, notes)?;
            let (m, reads) = metric(n, ns, metrics_server, refs, notes)?;
            flagger_metrics |= reads;
            Some(m)
        })
        .collect();
    if !metrics.is_empty() {
        out.push(Entry::new("metrics", Y::Seq(metrics)));
    }
    let path = a.at("webhooks");
    let hooks: Vec<Y> = a
        .list("webhooks", notes)
        .into_iter()
        .enumerate()
        .filter_map(|(i, v)| webhook(Node::new(format!("{path}[{i}]"), v, notes)?, notes))
        .collect();
    if !hooks.is_empty() {
        out.push(Entry::new("webhooks", Y::Seq(hooks)));
    }
    let path = a.at("alerts");
    let alerts: Vec<Y> = a
        .list("alerts", notes)
        .into_iter()
        .enumerate()
        .filter_map(|(i, v)| alert(Node::new(format!("{path}[{i}]"), v, notes)?, refs, notes))
        .collect();
    if !alerts.is_empty() {
        out.push(Entry::new("alerts", Y::Seq(alerts)));
    }
    a.finish(notes, spec_reason);
    (Y::Map(out), flagger_metrics)
}

fn affinity(mut s: Node, notes: &mut Notes<'_>) -> Y {
    let mut out = Vec::new();
    for key in ["cookieName", "primaryCookieName"] {
        if let Some(v) = s.string(key, notes) {
            out.push(Entry::new(key, Y::str(v)));
        }
    }
    if let Some(v) = s.int("maxAge", notes) {
        out.push(Entry::new("maxAge", Y::Int(v)));
    }
    for key in ["domain", "path", "sameSite"] {
        if let Some(v) = s.string(key, notes) {
            out.push(Entry::new(key, Y::str(v)));
        }
    }
    for key in ["httpOnly", "secure", "partitioned"] {
        if let Some(v) = s.bool(key, notes) {
            out.push(Entry::new(key, Y::Bool(v)));
        }
    }
    s.finish(notes, |_| None);
    Y::Map(out)
}

/// Flagger's builtin metric names (and their v1alpha names) → weir's.
fn builtin(name: &str) -> Option<&'static str> {
    match name {
        "request-success-rate" | "istio_requests_total" => Some("request-success-rate"),
        "request-duration" | "istio_request_duration_seconds_bucket" => Some("request-duration"),
        _ => None,
    }
}

fn metric(
    mut m: Node,
    ns: &str,
    metrics_server: Option<&str>,
    refs: &Refs<'_>,
    notes: &mut Notes<'_>,
) -> Option<(Y, bool)> {
    let Some(name) = m.string("name", notes) else {
        notes.add(
            &m.path,
            "a metric without a name, which Flagger's Canary does not accept either: left out",
        );
        return None;
    };
    let interval = m.string("interval", notes);
    let mut range = Vec::new();
    if let Some(mut r) = m.child("thresholdRange", notes) {
        for key in ["min", "max"] {
            if let Some(v) = r.float(key, notes) {
                range.push(Entry::new(key, Y::Float(v)));
            }
        }
        r.finish(notes, |_| None);
    }
    let legacy = m.float("threshold", notes);
    let template = m.child("templateRef", notes).map(|mut t| {
        let tn = t.string("name", notes).unwrap_or_default();
        let tns = t
            .string("namespace", notes)
            .unwrap_or_else(|| ns.to_string());
        t.finish(notes, |_| None);
        (tn, tns)
    });
    let variables = m.strings("templateVariables", notes);
    let query = m.string("query", notes);
    let path = m.path.clone();
    m.finish(notes, |_| None);

    let mut out = vec![];
    let mut flagger_metrics = false;
    let builtin = builtin(&name);
    if let Some(b) = builtin {
        if b != name {
            notes.add(
                &format!("{path}.name"),
                format!("Flagger's old name of {b}; written as {b}"),
            );
        }
        out.push(Entry::new("name", Y::str(b)));
    } else {
        out.push(Entry::new("name", Y::str(&name)));
        if let Some((tn, tns)) = &template {
            match refs.templates.get(tn) {
                Some(&reads) => flagger_metrics = reads,
                None => notes.add(
                    &format!("{path}.templateRef"),
                    format!(
                        "MetricTemplate {tn:?} is not among the imported ones: metric {name:?} keeps \
                         its templateRef, and weir check refuses it until metricTemplates has {tn:?} \
                         (pass the template's file too, or write it) or the metric is removed"
                    ),
                ),
            }
            out.push(Entry::new(
                "templateRef",
                Y::map([("name", Y::str(tn)), ("namespace", Y::str(tns))]),
            ));
            if !variables.is_empty() {
                out.push(Entry::new(
                    "templateVariables",
                    Y::Map(
                        variables
                            .into_iter()
                            .map(|(k, v)| Entry::new(k, Y::Str(v)))
                            .collect(),
                    ),
                ));
            }
        } else if let Some(q) = query {
            let qp = format!("{path}.query");
            flagger_metrics = series::query_notes(&q, &qp, notes);
            out.push(Entry::new("query", Y::str(q)));
            let url = metrics_server.unwrap_or_else(|| {
                notes.add(
                    &qp,
                    format!("Flagger ran it on its --metrics-server; prometheusUrl {DEFAULT_PROMETHEUS} is written, change it to your Prometheus"),
                );
                DEFAULT_PROMETHEUS
            });
            out.push(Entry::new("prometheusUrl", Y::str(url)));
        } else {
            notes.add(
                &path,
                format!(
                    "metric {name:?} is neither a builtin nor has a templateRef or query (Flagger \
                     skips it): kept, and weir check refuses it until it has a query or a \
                     templateRef, or is removed"
                ),
            );
        }
    }
    if range.is_empty() {
        if let Some(t) = legacy {
            let key = if builtin == Some("request-success-rate") {
                "min"
            } else {
                "max"
            };
            notes.add(
                &format!("{path}.threshold"),
                format!("Flagger's deprecated threshold; written as thresholdRange.{key}"),
            );
            range.push(Entry::new(key, Y::Float(t)));
        }
    } else if legacy.is_some() {
        notes.add(
            &format!("{path}.threshold"),
            "deprecated, and thresholdRange is set: left out",
        );
    }
    if !range.is_empty() {
        out.push(Entry::new("thresholdRange", Y::Map(range)));
    }
    if let Some(i) = interval {
        out.push(Entry::new("interval", Y::str(i)));
    }
    Some((Y::Map(out), flagger_metrics))
}

fn webhook(mut w: Node, notes: &mut Notes<'_>) -> Option<Y> {
    let name = w.string("name", notes)?;
    let mut out = vec![Entry::new("name", Y::str(name))];
    if let Some(t) = w.string("type", notes) {
        out.push(Entry::new("type", Y::str(t)));
    }
    let url = w.string("url", notes)?;
    let mut url_entry = Entry::new("url", Y::str(&url));
    if url.contains("flagger-loadtester") {
        url_entry = url_entry.note(
            "Flagger's load tester: run it (or any hook receiver) where weir can reach it; \
             `weir load URL` generates traffic on a plain host",
        );
    }
    out.push(url_entry);
    if let Some(t) = w.string("timeout", notes) {
        out.push(Entry::new("timeout", Y::str(t)));
    }
    if let Some(r) = w.int("retries", notes) {
        out.push(Entry::new("retries", Y::Int(r)));
    }
    let meta = w.strings("metadata", notes);
    if !meta.is_empty() {
        out.push(Entry::new(
            "metadata",
            Y::Map(
                meta.into_iter()
                    .map(|(k, v)| Entry::new(k, Y::Str(v)))
                    .collect(),
            ),
        ));
    }
    if w.bool("muteAlert", notes) == Some(true) {
        out.push(Entry::new("muteAlert", Y::Bool(true)));
    }
    w.finish(notes, |p| {
        p.ends_with(".disableTLS").then(|| {
            "weir always verifies TLS; trust a private CA with the hook's caFile instead"
                .to_string()
        })
    });
    Some(Y::Map(out))
}

fn alert(mut a: Node, refs: &Refs<'_>, notes: &mut Notes<'_>) -> Option<Y> {
    let name = a.string("name", notes)?;
    let severity = a.string("severity", notes);
    let (pname, pns) = match a.child("providerRef", notes) {
        Some(mut p) => {
            let n = p.string("name", notes);
            let ns = p.string("namespace", notes);
            p.finish(notes, |_| None);
            (n?, ns)
        }
        None => return None,
    };
    let path = a.path.clone();
    a.finish(notes, |_| None);
    if !refs.providers.contains(&pname) {
        notes.add(
            &format!("{path}.providerRef"),
            format!(
                "AlertProvider {pname:?} is not among the imported ones (pass its file too, or its \
                 type has no weir equivalent); alert {name:?} is left out"
            ),
        );
        return None;
    }
    let mut out = vec![Entry::new("name", Y::str(name))];
    if let Some(s) = severity {
        out.push(Entry::new("severity", Y::str(s)));
    }
    let mut pref = vec![Entry::new("name", Y::str(pname))];
    if let Some(ns) = pns {
        pref.push(Entry::new("namespace", Y::str(ns)));
    }
    out.push(Entry::new("providerRef", Y::Map(pref)));
    Some(Y::Map(out))
}
