//! What an imported query reads, said in the notes. Flagger queries the series of the
//! mesh or ingress it drives; weir is the router, and exports only its own series (and,
//! with `admin.flaggerMetrics`, Flagger's and Istio's names for them). A query on any
//! other series finds data only if the user's Prometheus scrapes another exporter, and
//! otherwise fails every check: the user must know before the first release.

use super::node::Notes;
use crate::config::series::{self, Scan};

/// Exporters whose series Flagger's templates commonly read, by name prefix.
const EXPORTERS: &[(&str, &str)] = &[
    ("response_", "Linkerd's proxy"),
    ("request_total", "Linkerd's proxy"),
    ("tcp_", "Linkerd's proxy"),
    ("nginx_ingress_controller_", "the NGINX ingress controller"),
    ("envoy_", "Envoy (Contour, Gloo, Emissary)"),
    ("traefik_", "Traefik"),
    ("kong_", "Kong"),
    ("apisix_", "APISIX"),
    ("skipper_", "Skipper"),
];

/// Labels that pick Kubernetes pods by name, which weir's slots are not.
const POD_LABELS: &[&str] = &["pod", "pod_name", "kubernetes_pod_name"];

/// Prefixes of the names weir exports: a miss there is a mistake weir can name.
const WEIR_PREFIXES: &[&str] = &["weir_", "flagger_", "istio_"];

/// Adds the notes on what `query` (at `path` of the manifest) reads that weir cannot
/// vouch for; true when it reads series weir exports only with `admin.flaggerMetrics`.
pub(super) fn query_notes(query: &str, path: &str, notes: &mut Notes<'_>) -> bool {
    let Scan { series, labels } = series::scan(query);
    let mut flagger_metrics = false;
    let mut foreign: Vec<(&str, Option<&str>)> = Vec::new();
    for name in series {
        if let Some(f) = series::exported(name) {
            flagger_metrics |= f.flagger_metrics;
            continue;
        }
        let why = series::why_not_exported(name).unwrap_or_default();
        if name.starts_with("weir_") {
            notes.add(
                path,
                format!("{why}; weir check refuses the query until it names a series weir exports"),
            );
        } else if WEIR_PREFIXES.iter().any(|p| name.starts_with(p)) {
            notes.add(
                path,
                format!(
                    "{why}; weir check accepts the query (it judges weir_* names only), but every \
                     check finds no data, which is a failed check, unless another exporter has it"
                ),
            );
        } else {
            let exporter = EXPORTERS
                .iter()
                .find(|(p, _)| name.starts_with(p))
                .map(|(_, e)| *e);
            foreign.push((name, exporter));
        }
    }
    if !foreign.is_empty() {
        let (it, they, comes) = if foreign.len() == 1 {
            ("it", "it", "comes")
        } else {
            ("them", "they", "come")
        };
        notes.add(
            path,
            format!(
                "reads {}, which weir does not export: weir check cannot know {it}; unless {they} \
                 {comes} from your Prometheus (scraping {their} exporter beside weir), every check \
                 finds no data, which is a failed check; weir's own request series are \
                 weir_requests_total and weir_request_duration_seconds_bucket, labelled by route \
                 ({{{{ target }}}})",
                described(&foreign),
                their = if foreign.len() == 1 { "its" } else { "their" },
            ),
        );
    }
    let pods: Vec<&str> = labels
        .into_iter()
        .filter(|l| POD_LABELS.contains(l))
        .collect();
    if !pods.is_empty() {
        notes.add(
            path,
            format!(
                "selects by {}: weir's slots are not Kubernetes pods, so this matches only if your \
                 Prometheus labels the slots' instances so; weir's own series carry route, role \
                 and backend",
                pods.join(", ")
            ),
        );
    }
    flagger_metrics
}

/// `a, b (from X), c`: the names, each run of one exporter's followed by its name.
fn described(names: &[(&str, Option<&str>)]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for (i, (name, exporter)) in names.iter().enumerate() {
        let last_of_run = names.get(i + 1).is_none_or(|(_, e)| e != exporter);
        match exporter {
            Some(e) if last_of_run => parts.push(format!("{name} (from {e})")),
            _ => parts.push(name.to_string()),
        }
    }
    parts.join(", ")
}
