//! `weir import flagger FILE...`: Flagger's `Canary`, `MetricTemplate` and
//! `AlertProvider` manifests (multi-document YAML, as in Flagger's repo;
//! `-` is stdin) → one weir config on stdout: `listeners`, `admin`, the two
//! slots of each canary as `backends` with placeholder endpoints, `routes`,
//! `metricTemplates`, `alertProviders` and `canaries`. Every field that has
//! no weir equivalent is listed, with the reason, as comments at the end of
//! that output (so the list stays with the file the user edits), and
//! counted on stderr. Other kinds in the same files (Deployment, Service,
//! HorizontalPodAutoscaler, ...) are skipped with a note each.
//!
//! A metric is never dropped: Flagger fails the check of a metric it cannot
//! measure, and a canary whose metrics vanished would be promoted on nothing.
//! One that cannot run as written (its template is not in the input, or has a
//! provider weir lacks) is kept with a note, so that `weir check` refuses the
//! config until the user completes or removes it; a query on series weir does
//! not export is noted (`series`).
//!
//! The mapping is PURE ([`flagger`]: texts in, text out); [`main`] reads
//! the files and prints.

mod analysis;
mod canary;
mod matches;
mod node;
mod resources;
mod series;
pub mod yaml;

#[cfg(test)]
mod tests;

pub use canary::placeholder;
pub use node::Note;

use node::{Node, Notes};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use yaml::{Entry, Y};

/// What [`flagger`] made of its inputs.
#[derive(Debug)]
pub struct Output {
    /// The weir config, notes included as trailing comments.
    pub yaml: String,
    /// Every field (or manifest) not mapped, and why.
    pub notes: Vec<Note>,
    pub canaries: usize,
    pub templates: usize,
    pub providers: usize,
}

/// One manifest of the input.
struct Doc {
    file: String,
    kind: String,
    name: String,
    namespace: String,
    node: Node,
}

/// Why a kind that is not imported was skipped.
fn skipped_kind(kind: &str) -> String {
    match kind {
        "Deployment" | "DaemonSet" | "StatefulSet" => {
            "the workload: run its instances as the endpoints of the canary's two slots".into()
        }
        "Service" => "weir's listener and route take its place".into(),
        "HorizontalPodAutoscaler" | "ScaledObject" => "weir does not scale workloads".into(),
        "ConfigMap" | "Secret" => {
            "not configuration weir reads; a Secret's value goes in a file weir reads (addressFile)"
                .into()
        }
        _ => "not a kind weir imports (Canary, MetricTemplate, AlertProvider); skipped".into(),
    }
}

fn metadata_reason(path: &str) -> Option<String> {
    match path {
        "metadata.labels"
        | "metadata.annotations"
        | "metadata.uid"
        | "metadata.resourceVersion"
        | "metadata.generation"
        | "metadata.creationTimestamp"
        | "metadata.managedFields" => Some("Kubernetes object metadata; weir has none".into()),
        "status" => Some("Flagger's own state, not configuration".into()),
        _ => None,
    }
}

/// Splits the inputs into manifests (a `kind: List` into its items).
fn documents(inputs: &[(String, String)], notes: &mut Vec<Note>) -> Result<Vec<Doc>, String> {
    let mut out = Vec::new();
    for (file, text) in inputs {
        let values: Vec<Value> =
            serde_saphyr::from_multiple(text).map_err(|e| format!("{file}: not YAML: {e}"))?;
        let mut queue: Vec<Value> = values;
        queue.reverse();
        while let Some(v) = queue.pop() {
            if v.is_null() {
                continue;
            }
            let mut sink = Notes {
                subject: file.clone(),
                out: notes,
            };
            let Some(mut node) = Node::new("", v, &mut sink) else {
                continue;
            };
            let kind = node.string("kind", &mut sink).unwrap_or_default();
            if kind == "List" || kind.ends_with("List") {
                let mut items = node.list("items", &mut sink);
                items.reverse();
                queue.extend(items);
                continue;
            }
            let api = node.string("apiVersion", &mut sink).unwrap_or_default();
            let (mut name, mut namespace) = (String::new(), "default".to_string());
            let mut metadata = node.child("metadata", &mut sink);
            if let Some(m) = &mut metadata {
                name = m.string("name", &mut sink).unwrap_or_default();
                if let Some(ns) = m.string("namespace", &mut sink) {
                    namespace = ns;
                }
            }
            let subject = format!("{kind} {namespace}/{name} ({file})");
            let flagger = api.starts_with("flagger.app/");
            if !flagger || !matches!(kind.as_str(), "Canary" | "MetricTemplate" | "AlertProvider") {
                notes.push(Note {
                    subject,
                    path: String::new(),
                    reason: skipped_kind(&kind),
                });
                continue;
            }
            if let Some(m) = metadata {
                let mut n = Notes {
                    subject: subject.clone(),
                    out: notes,
                };
                m.finish(&mut n, metadata_reason);
            }
            if api != "flagger.app/v1beta1" {
                notes.push(Note {
                    subject: subject.clone(),
                    path: "apiVersion".into(),
                    reason: format!("{api}: read as flagger.app/v1beta1"),
                });
            }
            if name.is_empty() {
                notes.push(Note {
                    subject,
                    path: "metadata.name".into(),
                    reason: "missing; the manifest is skipped".into(),
                });
                continue;
            }
            out.push(Doc {
                file: file.clone(),
                kind,
                name,
                namespace,
                node,
            });
        }
    }
    Ok(out)
}

/// Maps the manifests of `inputs` (`(file name, text)`) to one weir config.
pub fn flagger(inputs: &[(String, String)]) -> Result<Output, String> {
    let mut notes = Vec::new();
    let docs = documents(inputs, &mut notes)?;
    let mut templates = Vec::new();
    let mut template_facts = BTreeMap::new();
    let mut providers = Vec::new();
    let mut provider_names = BTreeSet::new();
    let mut canary_docs = Vec::new();
    for mut d in docs {
        let subject = format!("{} {}/{} ({})", d.kind, d.namespace, d.name, d.file);
        let mut n = Notes {
            subject,
            out: &mut notes,
        };
        if d.kind == "Canary" {
            canary_docs.push(d);
            continue;
        }
        let Some(spec) = d.node.child("spec", &mut n) else {
            n.add("spec", "missing; the manifest is skipped");
            continue;
        };
        match d.kind.as_str() {
            "MetricTemplate" if template_facts.contains_key(&d.name) => {
                n.add("metadata.name", "a MetricTemplate of this name was imported already; skipped (weir's templates have no namespaces)");
            }
            "MetricTemplate" => {
                let t = resources::metric_template(&d.name, spec, &mut n);
                template_facts.insert(t.name.clone(), t.flagger_metrics);
                templates.push(t.entry);
            }
            _ if provider_names.contains(&d.name) => {
                n.add(
                    "metadata.name",
                    "an AlertProvider of this name was imported already; skipped",
                );
            }
            _ => {
                if let Some(p) = resources::alert_provider(&d.name, spec, &mut n) {
                    provider_names.insert(d.name.clone());
                    providers.push(p);
                }
            }
        }
        d.node.finish(&mut n, metadata_reason);
    }

    let refs = canary::Refs {
        templates: &template_facts,
        providers: &provider_names,
    };
    let mut ports = BTreeSet::new();
    let (mut backends, mut routes, mut canaries) = (Vec::new(), Vec::new(), Vec::new());
    let mut seen = BTreeSet::new();
    let mut flagger_metrics = false;
    let several = canary_docs.len() > 1;
    for mut d in canary_docs {
        let subject = format!("Canary {}/{} ({})", d.namespace, d.name, d.file);
        let mut n = Notes {
            subject,
            out: &mut notes,
        };
        if !seen.insert(d.name.clone()) {
            n.add("metadata.name", "a Canary of this name was imported already; skipped (weir's canaries have no namespaces)");
            continue;
        }
        let Some(spec) = d.node.child("spec", &mut n) else {
            n.add("spec", "missing; the manifest is skipped");
            continue;
        };
        let mut c = canary::canary(&d.name, &d.namespace, spec, &refs, &mut n);
        // One route without hosts serves any host; two would serve the
        // same requests (weir refuses that).
        if several && c.use_cluster_hosts() {
            n.add(
                "spec.service.hosts",
                format!(
                    "not set: with several canaries, the route answers to the Service's names in the \
                     cluster ({}); change them to the names clients use",
                    c.cluster_hosts.join(", ")
                ),
            );
        }
        d.node.finish(&mut n, metadata_reason);
        ports.insert(c.port);
        backends.extend(c.backends);
        routes.push(c.route);
        canaries.push(c.canary);
        flagger_metrics |= c.flagger_metrics;
    }
    if canaries.is_empty() && templates.is_empty() && providers.is_empty() {
        return Err(nothing_imported(&notes));
    }
    let out = Output {
        canaries: canaries.len(),
        templates: templates.len(),
        providers: providers.len(),
        yaml: String::new(),
        notes,
    };
    let files: Vec<&str> = inputs.iter().map(|(f, _)| f.as_str()).collect();
    let mut top = Vec::new();
    if !canaries.is_empty() {
        let listeners = ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let name = if i == 0 {
                    "http".to_string()
                } else {
                    format!("http-{p}")
                };
                Y::map([
                    ("name", Y::str(name)),
                    ("address", Y::str(format!("0.0.0.0:{p}"))),
                ])
            })
            .collect();
        top.push(
            Entry::new("listeners", Y::Seq(listeners))
                .note("the Service port(s) of the canaries; each listener serves every route"),
        );
        let mut admin = vec![Entry::new("address", Y::str("127.0.0.1:9901"))];
        if flagger_metrics {
            admin.push(Entry::new("flaggerMetrics", Y::Bool(true)).note(
                "the imported queries read Istio's or Flagger's series, which weir exports under this switch",
            ));
        }
        top.push(Entry::new("admin", Y::Map(admin)));
        top.push(Entry::new("backends", Y::Map(backends)).note(
            "two slots per canary: `swap` promotion makes the canary slot the primary, and the old primary the idle slot",
        ));
        top.push(Entry::new("routes", Y::Seq(routes)));
    }
    if !templates.is_empty() {
        top.push(Entry::new("metricTemplates", Y::Map(templates)));
    }
    if !providers.is_empty() {
        top.push(Entry::new("alertProviders", Y::Map(providers)));
    }
    if !canaries.is_empty() {
        top.push(Entry::new("canaries", Y::Seq(canaries)));
    }
    let mut header = vec![format!(
        "Generated by `weir import flagger {}`.",
        files.join(" ")
    )];
    if out.canaries > 0 {
        header.push(
            "Replace each <fill in SLOT> endpoint with the slot's host:port (weir check names each one left), then: weir check -c FILE"
                .to_string(),
        );
    }
    if let Some(first) = top.first_mut() {
        let mut c = header;
        c.append(&mut first.comment);
        first.comment = c;
    }
    let mut text = yaml::document(&top);
    text.push_str(&notes_comment(&out.notes));
    Ok(Output { yaml: text, ..out })
}

/// Why nothing was imported: the reasons given for the Flagger manifests of the input
/// (an AlertProvider of a type weir lacks, a manifest without a name), or that there
/// were none.
fn nothing_imported(notes: &[Note]) -> String {
    let reasons: Vec<String> = notes
        .iter()
        .filter(|n| {
            ["Canary ", "MetricTemplate ", "AlertProvider "]
                .iter()
                .any(|k| n.subject.starts_with(k))
        })
        .map(|n| format!("\n  {} {}: {}", n.subject, n.path, n.reason))
        .collect();
    if reasons.is_empty() {
        "no Canary, MetricTemplate or AlertProvider (flagger.app) in the input".into()
    } else {
        format!(
            "nothing could be imported from the Flagger manifests of the input:{}",
            reasons.concat()
        )
    }
}

/// The notes as YAML comments.
fn notes_comment(notes: &[Note]) -> String {
    if notes.is_empty() {
        return "\n# Every field was mapped.\n".into();
    }
    let mut s = format!("\n# Not mapped ({}):\n", notes.len());
    for n in notes {
        let at = if n.path.is_empty() {
            String::new()
        } else {
            format!(" {}:", n.path)
        };
        s.push_str(&format!(
            "# - {}{at} {}\n",
            n.subject,
            n.reason.replace('\n', " ")
        ));
    }
    s
}

/// `weir import flagger FILE...`: prints the config, the count of notes on
/// stderr; exit 1 when an input cannot be read or holds nothing to import.
pub fn main(files: &[PathBuf]) -> ExitCode {
    let mut inputs = Vec::new();
    for f in files {
        let name = f.display().to_string();
        let text = if name == "-" {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).map(|_| s)
        } else {
            std::fs::read_to_string(f)
        };
        match text {
            Ok(t) => inputs.push((name, t)),
            Err(e) => {
                eprintln!("weir import: cannot read {name}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    match flagger(&inputs) {
        Ok(out) => {
            print!("{}", out.yaml);
            eprintln!(
                "weir import: {} canaries, {} metric templates, {} alert providers; {} fields or manifests not mapped (listed at the end of the output)",
                out.canaries,
                out.templates,
                out.providers,
                out.notes.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("weir import: {e}");
            ExitCode::FAILURE
        }
    }
}
