//! Flagger's `Canary` → weir's `canaries:` entry, with the backends (two
//! slots) and the route it needs.

use super::analysis::analysis_block;
use super::matches;
use super::node::{Node, Notes};
use super::yaml::{Entry, Y};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What a canary's references may point at: the imported templates (name →
/// reads series weir exports only with `admin.flaggerMetrics`) and alert providers.
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
    /// A query it uses reads series weir exports only with `admin.flaggerMetrics`.
    pub flagger_metrics: bool,
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

pub(super) fn spec_reason(path: &str) -> Option<String> {
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
    let mut flagger_metrics = false;
    match analysis {
        Some(a) => {
            let (y, reads) = analysis_block(a, ns, metrics_server.as_deref(), refs, notes);
            flagger_metrics = reads;
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
        flagger_metrics,
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
