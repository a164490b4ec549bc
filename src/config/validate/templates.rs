//! `metricTemplates:` and the metrics that use them (`templateRef`, `templateVariables`),
//! and the template syntax of inline `query` metrics.
//!
//! A template is checked once where it is defined (provider, fields, template syntax:
//! an unknown `{{ … }}` is an error at `metricTemplates.NAME.query`), then at every use
//! with the values it will run with: a `{{ variables.X }}` the metric does not set is an
//! error at the metric's `templateVariables`, and a web URL or header must still be one
//! after rendering. So a config that loads never sends a half-rendered query.
//!
//! A metric that could never be measured is refused here rather than found failing its
//! checks mid-release: a `templateRef` to no template, a provider weir does not have, a
//! query (a template's or an inline one) that reads a `weir_*` series weir does not
//! export (`config::series`).

use super::alerts::{check_ca_file, check_url, Secret};
use super::*;
use crate::config::series;
use crate::config::template::{self, TemplateVars};
use std::path::PathBuf;

/// Default bound on one request of a `web` metric (Argo Rollouts' 10 s).
pub const DEFAULT_WEB_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest `timeoutSeconds` of a `web` metric.
const MAX_WEB_TIMEOUT_SECS: i64 = 600;

/// A JSON document fetched from a URL, its value picked with a JSONPath (Argo Rollouts'
/// web metric provider).
#[derive(Clone, PartialEq)]
pub struct WebMetric {
    /// The URL to GET, a template (`{{ target }}` …), checked when loaded.
    pub url: String,
    /// Where the value is in the answer.
    pub json_path: serde_json_path::JsonPath,
    /// Bound on one request.
    pub timeout: Duration,
}

/// The URL may carry credentials.
impl std::fmt::Debug for WebMetric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebMetric")
            .field("url", &"<redacted>")
            .field("json_path", &self.json_path.to_string())
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// One `metricTemplates:` entry, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricTemplate {
    /// Where the value comes from (a Prometheus query or a web metric).
    pub kind: MetricKind,
    /// CA certificates trusted for an `https://` provider.
    pub ca_file: Option<PathBuf>,
    /// Bearer token sent to the provider (from `tokenFile`).
    pub token: Option<Secret>,
    /// Extra request headers: names and value templates.
    pub headers: Vec<(String, String)>,
}

/// The provider types, in the order the error message lists them.
const PROVIDER_TYPES: [&str; 2] = ["prometheus", "web"];

/// Refuses `field` (set) on a provider of another type.
fn only_for(errs: &mut Errors, path: &str, field: &str, set: bool, kind: &str, owner: &str) {
    if set {
        errs.push(
            format!("{path}.{field}"),
            format!("{field} is for type {owner}, not {kind}"),
        );
    }
}

/// Checks the template syntax of `src` at `path`; true when it parses.
fn check_syntax(errs: &mut Errors, path: &str, src: &str) -> bool {
    match template::parse(src) {
        Ok(_) => true,
        Err(e) => {
            errs.push(path, e);
            false
        }
    }
}

/// Refuses each `weir_*` series `query` reads that weir does not export: it would find
/// no data at every check. True when there is none.
fn check_series(errs: &mut Errors, path: &str, query: &str) -> bool {
    let unknown = series::unknown_weir_series(query);
    for (_, why) in &unknown {
        errs.push(path, why.clone());
    }
    unknown.is_empty()
}

/// Reads a non-empty token file (relative to the config's directory).
pub(super) fn read_token(
    path: &str,
    file: &Option<String>,
    base: &Path,
    errs: &mut Errors,
) -> Option<Secret> {
    let f = file.as_ref()?;
    match std::fs::read_to_string(base.join(f)) {
        Ok(t) if !t.trim().is_empty() => Some(Secret(t.trim().to_string())),
        Ok(_) => {
            errs.push(path, "the token file is empty");
            None
        }
        Err(e) => {
            errs.push(path, format!("cannot read {f}: {e}"));
            None
        }
    }
}

/// Argo writes `{$.data.x}` (Kubernetes JSONPath); RFC 9535 writes `$.data.x`. Both
/// are read, and `.data.x` (Kubernetes' implicit root) too.
pub fn normalise_json_path(src: &str) -> String {
    let s = src.trim();
    let s = s
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .unwrap_or(s)
        .trim();
    if s.starts_with('$') {
        s.to_string()
    } else {
        format!("${s}")
    }
}

/// Reads a `jsonPath` as [`normalise_json_path`] does and parses it (RFC 9535).
pub fn validate_json_path(src: &str) -> Result<serde_json_path::JsonPath, String> {
    serde_json_path::JsonPath::parse(&normalise_json_path(src))
        .map_err(|e| format!("{src:?} is not a JSONPath: {e}"))
}

fn validate_template(
    p: &str,
    t: &RawMetricTemplate,
    base: &Path,
    errs: &mut Errors,
) -> Option<MetricTemplate> {
    let before = errs.0.len();
    let pp = format!("{p}.provider");
    let v = &t.provider;
    if v.secret_ref.is_some() {
        errs.push(
            format!("{pp}.secretRef"),
            "weir reads credentials from files: set tokenFile (a bearer token)",
        );
    }
    for (field, set) in [
        ("insecureSkipVerify", v.insecure_skip_verify.is_some()),
        ("insecure", v.insecure.is_some()),
    ] {
        if set {
            errs.push(
                format!("{pp}.{field}"),
                "TLS verification cannot be turned off: set caFile to trust a private CA",
            );
        }
    }
    let ca_file = check_ca_file(&format!("{pp}.caFile"), &v.ca_file, base, errs);
    let token = read_token(&format!("{pp}.tokenFile"), &v.token_file, base, errs);
    let mut headers = Vec::new();
    for (i, h) in v.headers.iter().enumerate() {
        let hp = format!("{pp}.headers[{i}]");
        if HeaderName::from_bytes(h.key.as_bytes()).is_err() {
            errs.push(
                format!("{hp}.key"),
                format!("{:?} is not a header name", h.key),
            );
        } else if token.is_some() && h.key.eq_ignore_ascii_case("authorization") {
            errs.push(
                format!("{hp}.key"),
                "tokenFile already sets Authorization: keep one of the two",
            );
        }
        if check_syntax(errs, &format!("{hp}.value"), &h.value) {
            headers.push((h.key.clone(), h.value.clone()));
        }
    }
    let kind = match v.kind.as_str() {
        "prometheus" => {
            let web = [
                ("url", v.url.is_some()),
                ("jsonPath", v.json_path.is_some()),
                ("timeoutSeconds", v.timeout_seconds.is_some()),
                ("timeout", v.timeout.is_some()),
            ];
            for (field, set) in web {
                only_for(errs, &pp, field, set, "prometheus", "web");
            }
            let address = match &v.address {
                None => {
                    errs.push(
                        format!("{pp}.address"),
                        "a prometheus provider needs the server URL",
                    );
                    None
                }
                Some(a) => check_url(&format!("{pp}.address"), a, errs)
                    .then(|| a.trim_end_matches('/').to_string()),
            };
            let query = match t.query.as_deref().map(str::trim) {
                None | Some("") => {
                    errs.push(format!("{p}.query"), "a prometheus template needs a query");
                    None
                }
                Some(_) => {
                    let q = t.query.clone().unwrap_or_default();
                    let qp = format!("{p}.query");
                    (check_syntax(errs, &qp, &q) & check_series(errs, &qp, &q)).then_some(q)
                }
            };
            match (address, query) {
                (Some(url), Some(query)) => Some(MetricKind::Prometheus { url, query }),
                _ => None,
            }
        }
        "web" => {
            only_for(
                errs,
                &pp,
                "address",
                v.address.is_some(),
                "web",
                "prometheus",
            );
            if t.query.is_some() {
                errs.push(
                    format!("{p}.query"),
                    "a web template takes no query: its url is the template",
                );
            }
            let url = match &v.url {
                None => {
                    errs.push(format!("{pp}.url"), "a web provider needs the url to GET");
                    None
                }
                Some(u) => check_syntax(errs, &format!("{pp}.url"), u).then(|| u.clone()),
            };
            let src = v.json_path.as_deref().unwrap_or("{$}");
            let json_path = match validate_json_path(src) {
                Ok(jp) => Some(jp),
                Err(e) => {
                    errs.push(format!("{pp}.jsonPath"), e);
                    None
                }
            };
            let timeout = match (v.timeout_seconds, &v.timeout) {
                (Some(_), Some(_)) => {
                    errs.push(
                        format!("{pp}.timeout"),
                        "set timeoutSeconds or timeout, not both",
                    );
                    DEFAULT_WEB_TIMEOUT
                }
                (Some(_), None) => {
                    let s = errs.int_in(
                        &format!("{pp}.timeoutSeconds"),
                        v.timeout_seconds,
                        1,
                        MAX_WEB_TIMEOUT_SECS,
                        10,
                    );
                    Duration::from_secs(u64::try_from(s).unwrap_or(10))
                }
                (None, t) => errs.duration(&format!("{pp}.timeout"), t, DEFAULT_WEB_TIMEOUT),
            };
            match (url, json_path) {
                (Some(url), Some(json_path)) => Some(MetricKind::Web(WebMetric {
                    url,
                    json_path,
                    timeout,
                })),
                _ => None,
            }
        }
        other => {
            errs.push(
                format!("{pp}.type"),
                format!(
                    "unsupported provider type {other:?}; weir has {}",
                    PROVIDER_TYPES.join(", ")
                ),
            );
            None
        }
    };
    if errs.0.len() > before {
        return None;
    }
    Some(MetricTemplate {
        kind: kind?,
        ca_file,
        token,
        headers,
    })
}

/// Validates every `metricTemplates:` entry; the valid ones by name. A template no
/// metric uses is a warning.
pub(super) fn validate_templates(
    raw: &BTreeMap<String, RawMetricTemplate>,
    canaries: &[RawCanary],
    base: &Path,
    errs: &mut Errors,
) -> BTreeMap<String, MetricTemplate> {
    let used: BTreeSet<&str> = canaries
        .iter()
        .flat_map(|c| c.analysis.metrics.iter())
        .filter_map(|m| m.template_ref.as_ref().map(|r| r.name.as_str()))
        .collect();
    let mut out = BTreeMap::new();
    for (name, t) in raw {
        let p = join_key("metricTemplates", name);
        if !valid_name(name) {
            errs.push(
                &p,
                "template names use letters, digits, '-', '_' and '.' only",
            );
        }
        if !used.contains(name.as_str()) {
            errs.warn(&p, "no metric uses this template (templateRef)");
        }
        if let Some(v) = validate_template(&p, t, base, errs) {
            out.insert(name.clone(), v);
        }
    }
    out
}

/// A metric's source once its template (if any) is resolved.
pub(super) struct Resolved {
    /// Where the value comes from.
    pub kind: MetricKind,
    /// CA certificates trusted for the provider (the template's or the metric's `caFile`).
    pub ca_file: Option<PathBuf>,
    /// Bearer token sent to the provider.
    pub token: Option<Secret>,
    /// The template's name, for the reasons of failed checks.
    pub template: Option<String>,
    /// Extra request headers (value templates).
    pub headers: Vec<(String, String)>,
}

/// Checks that every `{{ variables.X }}` of `src` is set by the metric (error at
/// `{mp}.templateVariables`, naming the template or the field).
fn check_variables(errs: &mut Errors, mp: &str, what: &str, src: &str, vars: &TemplateVars) {
    let Ok(pieces) = template::parse(src) else {
        return;
    };
    for key in template::missing(&pieces, &vars.variables) {
        errs.push(
            format!("{mp}.templateVariables"),
            format!("{what} uses {{{{ variables.{key} }}}}: set {key} in templateVariables"),
        );
    }
}

/// The metric at `mp` with a `templateRef`: the template it names, checked with the
/// values it will run with. `None` after an error.
pub(super) fn use_template(
    mp: &str,
    m: &RawMetric,
    templates: &BTreeMap<String, MetricTemplate>,
    raw_templates: &BTreeMap<String, RawMetricTemplate>,
    vars: &TemplateVars,
    errs: &mut Errors,
) -> Option<Resolved> {
    let r = m.template_ref.as_ref()?;
    for (field, set) in [
        ("query", m.query.is_some()),
        ("prometheusUrl", m.prometheus_url.is_some()),
        ("caFile", m.ca_file.is_some()),
    ] {
        if set {
            errs.push(
                format!("{mp}.{field}"),
                format!("comes from the template {:?}: remove it here", r.name),
            );
        }
    }
    let Some(t) = templates.get(&r.name) else {
        // An invalid template was reported where it is defined.
        if !raw_templates.contains_key(&r.name) {
            let known: Vec<&str> = raw_templates.keys().map(String::as_str).collect();
            errs.push(
                format!("{mp}.templateRef.name"),
                if known.is_empty() {
                    format!(
                        "unknown metric template {:?}: metricTemplates is empty",
                        r.name
                    )
                } else {
                    format!(
                        "unknown metric template {:?}; defined: {}",
                        r.name,
                        known.join(", ")
                    )
                },
            );
        }
        return None;
    };
    let before = errs.0.len();
    let what = format!("template {:?}", r.name);
    for (_, v) in &t.headers {
        check_variables(errs, mp, &what, v, vars);
    }
    match &t.kind {
        MetricKind::Prometheus { query, .. } => check_variables(errs, mp, &what, query, vars),
        MetricKind::Web(w) => {
            check_variables(errs, mp, &what, &w.url, vars);
            if errs.0.len() == before {
                if let Ok(url) = template::render(&w.url, vars) {
                    if !url.parse::<http::Uri>().ok().is_some_and(|u| {
                        matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some()
                    }) {
                        errs.push(
                            format!("{mp}.templateRef"),
                            format!("the url of {what} renders to {url:?} here, which is not an http:// or https:// URL"),
                        );
                    }
                }
            }
        }
        _ => {}
    }
    if errs.0.len() == before {
        for (k, v) in &t.headers {
            if let Ok(value) = template::render(v, vars) {
                if HeaderValue::from_str(&value).is_err() {
                    errs.push(
                        format!("{mp}.templateVariables"),
                        format!("header {k} of {what} renders to a value that is not a valid header value"),
                    );
                }
            }
        }
    }
    if errs.0.len() > before {
        return None;
    }
    Some(Resolved {
        kind: t.kind.clone(),
        ca_file: t.ca_file.clone(),
        token: t.token.clone(),
        template: Some(r.name.clone()),
        headers: t.headers.clone(),
    })
}

/// An inline `query`: its template syntax and the weir series it reads (errors at
/// `{mp}.query`), and its variables.
pub(super) fn check_inline_query(mp: &str, query: &str, vars: &TemplateVars, errs: &mut Errors) {
    let qp = format!("{mp}.query");
    if check_syntax(errs, &qp, query) {
        check_variables(errs, mp, "the query", query, vars);
    }
    check_series(errs, &qp, query);
}

#[cfg(test)]
#[path = "templates_tests.rs"]
mod tests;
