//! Flagger's `Canary` → weir's `canaries:` entry, with the backends (two
//! slots) and the route it needs.

use super::matches;
use super::node::{Node, Notes};
use super::resources::DEFAULT_PROMETHEUS;
use super::yaml::{Entry, Y};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What a canary's references may point at: the imported templates (name →
/// reads Istio's series) and alert providers.
pub struct Refs<'a> {
    pub templates: &'a BTreeMap<String, bool>,
    pub providers: &'a BTreeSet<String>,
}

/// One imported Canary and what it needs around it.
pub struct Imported {
    /// The Service port clients use: weir's listener port.
    pub port: u16,
    pub backends: Vec<Entry>,
    pub route: Y,
    pub canary: Y,
    /// A template it uses reads Istio's series (`admin.flaggerMetrics`).
    pub istio_series: bool,
    /// The Service's names inside the cluster, for a route that has no
    /// `hosts` and must be told from another canary's; empty when it has hosts.
    pub cluster_hosts: Vec<String>,
}

impl Imported {
    /// Gives the route the Service's cluster names as hosts (the route had
    /// none, and another canary's route would serve the same requests).
    pub fn use_cluster_hosts(&mut self) -> bool {
        let Y::Map(route) = &mut self.route else {
            return false;
        };
        if self.cluster_hosts.is_empty() {
            return false;
        }
        let hosts = self.cluster_hosts.iter().cloned().map(Y::Str).collect();
        route.insert(1, Entry::new("hosts", Y::Seq(hosts)));
        true
    }
}

/// The placeholder of a slot's endpoint: `weir check` refuses it (a host
/// with a space), so a config is never started with it by mistake.
pub fn placeholder(slot: &str, port: i64) -> String {
    format!("<fill in {slot}>:{port}")
}

fn spec_reason(path: &str) -> Option<String> {
    let path = path.replace("spec.canaryAnalysis.", "spec.analysis.");
    Some(match path.as_str() {
        "spec.provider" => "weir is the router: there is no mesh or ingress controller to drive".into(),
        "spec.autoscalerRef" => "weir does not scale workloads: size each slot's endpoint list yourself".into(),
        "spec.ingressRef" | "spec.routeRef" | "spec.upstreamRef" => {
            "weir routes the traffic itself: there is no ingress, route or upstream object to drive".into()
        }
        "spec.metricsServer" => "used only as the Prometheus address of inline `query` metrics; none here".into(),
        "spec.revertOnDeletion" => {
            "there is no Kubernetes object to delete: `weir ctl abort CANARY` sends all traffic back to the primary".into()
        }
        "spec.suspend" => "use `weir ctl pause CANARY` / `weir ctl resume CANARY`".into(),
        "spec.service.gateways" | "spec.service.gatewayRefs" => {
            "weir's listeners take the place of the gateway".into()
        }
        "spec.service.trafficPolicy" => {
            "no DestinationRule: TLS to the endpoints is backends.NAME.tls, the balancing backends.NAME.loadBalancer".into()
        }
        "spec.service.rewrite" => "weir forwards the path and the authority unchanged".into(),
        "spec.service.corsPolicy" => "weir has no CORS policy; answer CORS in the application".into(),
        "spec.service.mirror" => "Gateway API mirror filters are not mapped; use analysis.mirror".into(),
        "spec.service.match" => {
            "weir's route selects by hosts and pathPrefix: only a single `uri: {prefix: P}` item maps".into()
        }
        "spec.service.name" | "spec.service.portName" | "spec.service.portDiscovery"
        | "spec.service.appProtocol" | "spec.service.headless" | "spec.service.trafficDistribution"
        | "spec.service.meshName" | "spec.service.backends" | "spec.service.apex"
        | "spec.service.primary" | "spec.service.canary" | "spec.service.unmanagedMetadata"
        | "spec.service.delegation" | "spec.service.backendTimeout" => {
            "a detail of the Kubernetes Service or the mesh; weir has no such object".into()
        }
        "spec.analysis.primaryReadyThreshold" | "spec.analysis.canaryReadyThreshold" => {
            "weir checks readiness itself, per endpoint (backends.NAME.healthCheck)".into()
        }
        _ => return None,
    })
}

/// The Canary `name` (namespace `ns`) from its `spec`.
pub fn canary(
    name: &str,
    ns: &str,
    mut spec: Node,
    refs: &Refs<'_>,
    notes: &mut Notes<'_>,
) -> Imported {
    let target = match spec.child("targetRef", notes) {
        Some(mut t) => {
            let n = t.string("name", notes);
            t.take("kind");
            t.take("apiVersion");
            t.finish(notes, |_| None);
            n
        }
        None => None,
    }
    .unwrap_or_else(|| {
        notes.add(
            "spec.targetRef.name",
            format!("missing; the slots are named after the canary ({name})"),
        );
        name.to_string()
    });
    let (blue, green) = (format!("{target}-blue"), format!("{target}-green"));

    let mut route = vec![Entry::new("name", Y::str(name))];
    let mut service_name = target.clone();
    let mut has_hosts = false;
    let mut port = 80;
    let mut target_port = 80;
    if let Some(mut s) = spec.child("service", notes) {
        port = s.int("port", notes).unwrap_or(80);
        target_port = match s.take("targetPort") {
            Some(Value::Number(n)) => n.as_i64().unwrap_or(port),
            Some(other) => {
                notes.add(
                    "spec.service.targetPort",
                    format!("named port {other}: weir needs a number; the endpoints' port is written as {port}"),
                );
                port
            }
            None => port,
        };
        let hosts: Vec<String> = s
            .list("hosts", notes)
            .into_iter()
            .filter_map(|h| h.as_str().map(str::to_string))
            .collect();
        if let Some(Value::String(n)) = s.peek("name") {
            service_name = n.clone();
        }
        if !hosts.is_empty() && !hosts.iter().any(|h| h == "*") {
            has_hosts = true;
            route.push(Entry::new(
                "hosts",
                Y::Seq(hosts.into_iter().map(Y::Str).collect()),
            ));
        }
        if let Some(prefix) = single_prefix(&mut s) {
            route.push(Entry::new("pathPrefix", Y::str(prefix)));
        }
        route.push(Entry::new("primary", Y::str(&blue)));
        route.push(Entry::new("canary", Y::str(&green)));
        if let Some(t) = s.string("timeout", notes) {
            route.push(Entry::new("timeout", Y::str(t)));
        }
        if let Some(h) = s
            .child("headers", notes)
            .and_then(|h| matches::headers(h, notes))
        {
            route.push(Entry::new("headers", h));
        }
        if let Some(r) = s
            .child("retries", notes)
            .and_then(|r| matches::retries(r, notes))
        {
            route.push(Entry::new("retries", r));
        }
        s.finish(notes, spec_reason);
    } else {
        notes.add(
            "spec.service",
            "missing; the listener is written on port 80",
        );
        route.push(Entry::new("primary", Y::str(&blue)));
        route.push(Entry::new("canary", Y::str(&green)));
    }

    let metrics_server = spec.string("metricsServer", notes);
    let deadline = spec.int("progressDeadlineSeconds", notes);
    let backend = |slot: &str, role: &str| {
        let mut b = vec![Entry::new(
            "endpoints",
            Y::Seq(vec![Y::str(placeholder(slot, target_port))]),
        )
        .note(format!("FILL IN: {role}; host:port of each instance"))];
        if let Some(d) = deadline {
            b.push(Entry::new(
                "rollingUpdate",
                Y::map([("progressDeadline", Y::str(format!("{d}s")))]),
            ));
        }
        Entry::new(slot, Y::Map(b))
    };
    let backends = vec![
        backend(
            &blue,
            &format!("the slot serving now (Flagger's {target}-primary)"),
        ),
        backend(
            &green,
            &format!("the idle slot: deploy the next version of {target} here, then start a run"),
        ),
    ];

    let mut canary = vec![
        Entry::new("name", Y::str(name)).note(format!(
            "from Canary {ns}/{name}; start a run with `weir ctl start {name} --revision REV`, or set \
             watchRevision: true and the backends' revisionPath"
        )),
        Entry::new("route", Y::str(name)),
    ];
    if spec.bool("skipAnalysis", notes) == Some(true) {
        canary.push(Entry::new("skipAnalysis", Y::Bool(true)));
    }
    let analysis = match (
        spec.child("analysis", notes),
        spec.child("canaryAnalysis", notes),
    ) {
        (Some(a), _) => Some(a),
        (None, Some(a)) => {
            notes.add(
                "spec.canaryAnalysis",
                "Flagger's old name of spec.analysis; read as it",
            );
            Some(a)
        }
        (None, None) => None,
    };
    let mut istio_series = false;
    match analysis {
        Some(a) => {
            let (y, istio) = analysis_block(a, ns, metrics_server.as_deref(), refs, notes);
            istio_series = istio;
            canary.push(Entry::new("analysis", y));
        }
        None => {
            notes.add(
                "spec.analysis",
                "missing; weir's defaults apply (interval 1m)",
            );
            canary.push(Entry::new("analysis", Y::map([("interval", Y::str("1m"))])));
        }
    }
    spec.finish(notes, spec_reason);
    Imported {
        port: u16::try_from(port).unwrap_or(80),
        backends,
        route: Y::Map(route),
        canary: Y::Map(canary),
        istio_series,
        cluster_hosts: if has_hosts {
            Vec::new()
        } else {
            vec![
                service_name.clone(),
                format!("{service_name}.{ns}"),
                format!("{service_name}.{ns}.svc.cluster.local"),
            ]
        },
    }
}

/// `service.match` when it is one `uri: {prefix: P}` item (Flagger's usual
/// `/`); anything else is left for the notes.
fn single_prefix(s: &mut Node) -> Option<String> {
    let Some(Value::Array(items)) = s.peek("match") else {
        return None;
    };
    let [item] = items.as_slice() else {
        return None;
    };
    let obj = item.as_object()?;
    if obj.len() != 1 {
        return None;
    }
    let uri = obj.get("uri")?.as_object()?;
    let p = uri.get("prefix")?.as_str()?.to_string();
    if uri.len() != 1 || !p.starts_with('/') {
        return None;
    }
    s.take("match");
    Some(p)
}

/// The `analysis` block, and whether a template it uses reads Istio's series.
fn analysis_block(
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
    let mut istio = false;
    let path = a.at("metrics");
    let metrics: Vec<Y> = a
        .list("metrics", notes)
        .into_iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let n = Node::new(format!("{path}[{i}]"), v, notes)?;
            let (m, uses_istio) = metric(n, ns, metrics_server, refs, notes)?;
            istio |= uses_istio;
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
    (Y::Map(out), istio)
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
    let name = m.string("name", notes)?;
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
    let mut istio = false;
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
            let Some(&reads_istio) = refs.templates.get(tn) else {
                notes.add(
                    &format!("{path}.templateRef"),
                    format!(
                        "MetricTemplate {tn:?} is not among the imported ones (pass its file too, or \
                         its provider has no weir equivalent); metric {name:?} is left out"
                    ),
                );
                return None;
            };
            istio = reads_istio;
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
            out.push(Entry::new("query", Y::str(q)));
            let url = metrics_server.unwrap_or_else(|| {
                notes.add(
                    &format!("{path}.query"),
                    format!("Flagger ran it on its --metrics-server; prometheusUrl {DEFAULT_PROMETHEUS} is written, change it to your Prometheus"),
                );
                DEFAULT_PROMETHEUS
            });
            out.push(Entry::new("prometheusUrl", Y::str(url)));
        } else {
            notes.add(
                &path,
                format!(
                    "metric {name:?} is neither a builtin nor has a templateRef or query; left out"
                ),
            );
            return None;
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
    Some((Y::Map(out), istio))
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
