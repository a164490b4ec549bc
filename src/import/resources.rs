//! Flagger's `MetricTemplate` and `AlertProvider` → weir's `metricTemplates:`
//! and `alertProviders:` entries.

use super::node::{Node, Notes};
use super::series;
use super::yaml::{Entry, Y};

/// Where weir's Prometheus templates go when the manifest names no address
/// (Flagger then uses its own `--metrics-server`).
pub const DEFAULT_PROMETHEUS: &str = "http://127.0.0.1:9090";

/// Flagger's template variables that weir's templates also define.
const WEIR_VARIABLES: &[&str] = &[
    "name",
    "namespace",
    "target",
    "service",
    "ingress",
    "route",
    "interval",
];

/// An imported template: its weir entry, and the facts a canary's metric needs.
pub struct Template {
    pub name: String,
    pub entry: Entry,
    /// The query reads series weir exports only with `admin.flaggerMetrics: true`
    /// (Istio's `istio_requests_total`, ...).
    pub flagger_metrics: bool,
}

/// A `MetricTemplate`. One weir cannot run (a provider it lacks, no query) is kept as
/// written, so that `weir check` refuses it and the metrics that use it until the user
/// decides: dropped, those metrics would silently stop being checked.
pub fn metric_template(name: &str, mut spec: Node, notes: &mut Notes<'_>) -> Template {
    let query = spec.string("query", notes);
    let mut provider = spec.child("provider", notes);
    let kind = provider
        .as_mut()
        .and_then(|p| p.string("type", notes))
        .unwrap_or_else(|| "prometheus".into());
    let supported = kind == "prometheus";
    if !supported {
        notes.add(
            "spec.provider.type",
            format!(
                "provider {kind:?} has no weir equivalent (weir queries Prometheus, or a JSON URL with \
                 type: web): the template is kept as written, and weir check refuses it and the \
                 metrics that use it until it is rewritten for one of those, or removed with them"
            ),
        );
    }
    if query.is_none() {
        notes.add(
            "spec.query",
            "missing: the template is kept without one, and weir check refuses it and the \
             metrics that use it until it has one",
        );
    }
    let address = provider.as_mut().and_then(|p| p.string("address", notes));
    if address.is_none() && supported {
        notes.add(
            "spec.provider.address",
            format!(
                "not set: Flagger used its --metrics-server; {DEFAULT_PROMETHEUS} is written in its \
                 place, change it to your Prometheus"
            ),
        );
    }
    let mut extra = Vec::new();
    if let Some(mut p) = provider {
        if supported {
            if let Some(mut secret) = p.child("secretRef", notes) {
                let name = secret
                    .string("name", notes)
                    .unwrap_or_else(|| "prometheus".into());
                secret.finish(notes, |_| None);
                let file = format!("secrets/{name}-token");
                notes.add(
                    "spec.provider.secretRef",
                    format!(
                        "weir reads a bearer token from a file: write the `token` key of Secret {name:?} \
                         into {file} (basic auth: an `Authorization: Basic ...` entry in headers instead)"
                    ),
                );
                extra.push(Entry::new("tokenFile", Y::str(file)));
            }
            if p.bool("insecureSkipVerify", notes) == Some(true) {
                notes.add(
                    "spec.provider.insecureSkipVerify",
                    "weir always verifies TLS; trust a private CA with the provider's caFile instead",
                );
            }
            if let Some(h) = p.child("headers", notes) {
                if let Some(list) = headers(h, notes) {
                    extra.push(Entry::new("headers", list));
                }
            }
        }
        p.finish(notes, |path| match path {
            "spec.provider.region" => Some("only for cloud providers, which weir has not".into()),
            _ if !supported => Some(format!("a setting of the {kind} provider; not mapped")),
            _ => None,
        });
    }
    spec.finish(notes, |_| None);
    let query = query.unwrap_or_default();
    for var in flagger_variables(&query) {
        let known = WEIR_VARIABLES.contains(&var.as_str()) || var.starts_with("variables.");
        if !known {
            notes.add(
                "spec.query",
                format!(
                    "uses {{{{ {var} }}}}, which weir's templates do not define (they define {} and \
                     variables.*): weir check refuses it; rewrite it as {{{{ variables.X }}}} with a templateVariable",
                    WEIR_VARIABLES.join(", ")
                ),
            );
        }
    }
    let flagger_metrics = supported && series::query_notes(&query, "spec.query", notes);
    let source_reporter = flagger_metrics && query.contains("reporter=\"source\"");
    if source_reporter {
        notes.add(
            "spec.query",
            "selects reporter=\"source\", but weir's Istio-named series carry only \
             reporter=\"destination\" (weir sees each request once): change the selector, or \
             the check finds no data, which is a failed check",
        );
    }
    let mut provider = vec![Entry::new("type", Y::str(&kind))];
    match address {
        Some(a) => provider.push(Entry::new("address", Y::str(a))),
        None if supported => provider.push(Entry::new("address", Y::str(DEFAULT_PROMETHEUS))),
        None => {}
    }
    provider.extend(extra);
    let mut fields = vec![Entry::new("provider", Y::Map(provider))];
    if !query.is_empty() {
        fields.push(Entry::new("query", Y::str(&query)));
    }
    let mut entry = Entry::new(name, Y::Map(fields));
    if !supported {
        entry = entry.note(format!(
            "provider {kind:?} has no weir equivalent: weir check refuses this template until it \
             is rewritten (see the notes at the end)"
        ));
    }
    if flagger_metrics {
        entry = entry.note(
            "reads series weir exports with admin.flaggerMetrics: true (Istio's or Flagger's names)",
        );
    }
    if source_reporter {
        entry = entry.note(
            "CHANGE reporter=\"source\" to reporter=\"destination\" (see the notes at the end)",
        );
    }
    Template {
        name: name.to_string(),
        entry,
        flagger_metrics,
    }
}

/// Flagger's provider headers (Go's `http.Header`: a name → a list of
/// values, or one value) → weir's list of `{key, value}`.
fn headers(mut h: Node, notes: &mut Notes<'_>) -> Option<Y> {
    let mut out = Vec::new();
    for k in h.keys() {
        let values = match h.take(&k) {
            Some(serde_json::Value::Array(a)) => a,
            Some(v) => vec![v],
            None => continue,
        };
        for v in values {
            match v.as_str() {
                Some(s) => out.push(Y::map([("key", Y::str(&k)), ("value", Y::str(s))])),
                None => notes.add(&h.at(&k), format!("expected a string value, found {v}")),
            }
        }
    }
    h.finish(notes, |_| None);
    (!out.is_empty()).then_some(Y::Seq(out))
}

/// The names inside `{{ ... }}` in a Go template, in order.
fn flagger_variables(q: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = q;
    while let Some(i) = rest.find("{{") {
        let after = &rest[i + 2..];
        let Some(j) = after.find("}}") else { break };
        let v = after[..j].trim().trim_start_matches('.').to_string();
        if !out.contains(&v) {
            out.push(v);
        }
        rest = &after[j + 2..];
    }
    out
}

/// Flagger's AlertProvider types, as weir names them.
fn provider_type(t: &str) -> Option<&'static str> {
    Some(match t {
        "slack" => "slack",
        "msteams" => "msteams",
        "discord" => "discord",
        "rocket" => "rocket",
        "gchat" | "googlechat" => "gchat",
        _ => return None,
    })
}

/// An `AlertProvider`; `None` when its type has no weir equivalent.
pub fn alert_provider(name: &str, mut spec: Node, notes: &mut Notes<'_>) -> Option<Entry> {
    let t = spec.string("type", notes).unwrap_or_default();
    let Some(kind) = provider_type(&t) else {
        notes.add(
            "spec.type",
            format!(
                "type {t:?} has no weir equivalent (weir sends to slack, msteams, discord, rocket, \
                 gchat and generic); left out"
            ),
        );
        return None;
    };
    let mut out = vec![Entry::new("type", Y::str(kind))];
    let address = spec.string("address", notes);
    let secret = spec.child("secretRef", notes).map(|mut s| {
        let secret = s.string("name", notes).unwrap_or_else(|| name.to_string());
        s.finish(notes, |_| None);
        secret
    });
    match (secret, address) {
        (Some(secret), address) => {
            let file = format!("secrets/{secret}-address");
            notes.add(
                "spec.secretRef",
                format!(
                    "weir reads the webhook URL from a file: write the `address` key of Secret \
                     {secret:?} into {file} (relative to the config file)"
                ),
            );
            if address.is_some() {
                notes.add(
                    "spec.address",
                    "the secretRef's address wins, as in Flagger; this one is left out",
                );
            }
            out.push(
                Entry::new("addressFile", Y::str(file))
                    .note(format!("holds the address from Secret {secret}")),
            );
        }
        (None, Some(a)) => out.push(Entry::new("address", Y::str(a))),
        (None, None) => {
            notes.add(
                "spec.address",
                "missing: a provider needs an address; left out",
            );
            return None;
        }
    }
    if let Some(c) = spec.string("channel", notes) {
        out.push(Entry::new("channel", Y::str(c)));
    }
    if let Some(u) = spec.string("username", notes) {
        out.push(Entry::new("username", Y::str(u)));
    }
    spec.finish(notes, |path| match path {
        "spec.proxy" => {
            Some("weir sends notifications directly (no HTTP proxy setting); not mapped".into())
        }
        _ => None,
    });
    Some(Entry::new(name, Y::Map(out)))
}
