//! The mapping rules one by one, on small manifests.

use super::*;
use serde_json::json;

/// Imports `yaml`: the output as a value, and the notes as `path: reason` lines.
fn run(yaml: &str) -> (Value, Vec<String>, String) {
    let out =
        flagger(&[("t.yaml".to_string(), yaml.to_string())]).unwrap_or_else(|e| panic!("{e}"));
    let v: Value =
        serde_saphyr::from_str(&out.yaml).unwrap_or_else(|e| panic!("{e}\n{}", out.yaml));
    let notes = out
        .notes
        .iter()
        .map(|n| format!("{}: {}", n.path, n.reason))
        .collect();
    (v, notes, out.yaml)
}

fn has(notes: &[String], word: &str) {
    assert!(
        notes.iter().any(|n| n.contains(word)),
        "no note with {word:?} in {notes:#?}"
    );
}

/// The output with its placeholders filled parses as a weir config
/// (templates aside).
fn valid(yaml: &str) {
    let filled = yaml
        .replace("<fill in podinfo-blue>", "127.0.0.1")
        .replace("<fill in podinfo-green>", "127.0.0.1");
    if let Err(e) = crate::config::parse_yaml(&filled, "t.yaml", std::path::Path::new(".")) {
        panic!("{e}\n{filled}");
    }
}

fn canary(extra_spec: &str, analysis: &str) -> String {
    format!(
        "apiVersion: flagger.app/v1beta1
kind: Canary
metadata: {{ name: podinfo, namespace: test }}
spec:
  targetRef: {{ apiVersion: apps/v1, kind: Deployment, name: podinfo }}
  service:
    port: 9898
{extra_spec}  analysis:
    interval: 1m
    threshold: 5
{analysis}"
    )
}

#[test]
fn istio_match_items_map_to_weirs_and_source_labels_are_refused_with_the_way_out() {
    let (v, notes, yaml) = run(&canary(
        "",
        "    iterations: 10
    match:
      - headers: { x-canary: { exact: insider }, x-any: {} }
        withoutHeaders: { x-internal: { prefix: \"1\" } }
        uri: { prefix: /Api }
        ignoreUriCase: true
        scheme: { exact: https }
        authority: { regex: \"^app\" }
        port: 8443
        queryParams: { beta: { exact: \"on\" } }
        method: { exact: GET }
        gateways: [mesh]
      - sourceLabels: { app: frontend }
      - headers: { x-a: { exact: a } }
        sourceNamespace: web
",
    ));
    let m = &v["canaries"][0]["analysis"]["match"];
    assert_eq!(
        m[0],
        json!({
            "headers": {"x-any": {"present": true}, "x-canary": {"exact": "insider"}},
            "withoutHeaders": {"x-internal": {"prefix": "1"}},
            "queryParams": {"beta": {"exact": "on"}},
            "uri": {"prefix": "/Api"},
            "method": {"exact": "GET"},
            "scheme": {"exact": "https"},
            "authority": {"regex": "^app"},
            "ignoreUriCase": true,
            "port": 8443,
        })
    );
    assert_eq!(
        m[1],
        json!({"headers": {"x-a": {"exact": "a"}}}),
        "the sourceLabels-only item is left out"
    );
    has(
        &notes,
        "spec.analysis.match[1].sourceLabels: weir has no workload labels",
    );
    has(&notes, "sourceIp");
    has(
        &notes,
        "spec.analysis.match[1]: no condition of this item maps",
    );
    has(
        &notes,
        "spec.analysis.match[0].gateways: weir's listeners take the place of gateways",
    );
    has(&notes, "spec.analysis.match[2].sourceNamespace:");
    valid(&yaml);
}

#[test]
fn the_service_block_maps_to_the_route_and_names_what_it_cannot() {
    let (v, notes, yaml) = run(&canary(
        "    targetPort: http
    hosts: [\"*\"]
    timeout: 5s
    match:
      - uri: { prefix: /api }
      - uri: { prefix: /v2 }
    retries: { attempts: 3, perTryTimeout: 2s, retryOn: \"gateway-error,connect-failure,refused-stream\" }
    headers:
      request: { set: { x-api-version: v1 }, add: { x-custom: c }, remove: [x-debug] }
      response: { remove: [x-powered-by] }
    corsPolicy: { allowOrigins: [{ exact: \"*\" }] }
",
        "    stepWeight: 10\n    maxWeight: 50\n",
    ));
    let r = &v["routes"][0];
    assert_eq!(r.get("hosts"), None, "`*` is any host");
    assert_eq!(r.get("pathPrefix"), None, "two prefixes do not map");
    assert_eq!(r["timeout"], "5s");
    assert_eq!(
        r["retries"],
        json!({"attempts": 3, "on": ["gateway-error", "connect-failure"], "perTryTimeout": "2s"})
    );
    assert_eq!(
        r["headers"],
        json!({"request": {"set": {"x-api-version": "v1"}, "add": {"x-custom": "c"}, "remove": ["x-debug"]},
               "response": {"remove": ["x-powered-by"]}})
    );
    assert_eq!(
        v["backends"]["podinfo-blue"]["endpoints"][0],
        "<fill in podinfo-blue>:9898"
    );
    has(&notes, "spec.service.targetPort: named port");
    has(
        &notes,
        "spec.service.match: weir's route selects by hosts and pathPrefix",
    );
    has(&notes, "retryOn: condition \"refused-stream\"");
    has(&notes, "spec.service.corsPolicy:");
    valid(&yaml);
}

#[test]
fn metrics_builtin_legacy_inline_and_templated() {
    let yaml = format!(
        "apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{ name: dd, namespace: test }}
spec: {{ provider: {{ type: datadog, address: https://api.datadoghq.com }}, query: avg:x }}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{ name: errors, namespace: test }}
spec:
  provider:
    type: prometheus
    secretRef: {{ name: prom-auth }}
    insecureSkipVerify: true
    headers: {{ X-Scope-OrgID: [team-a], X-One: one }}
  query: sum(rate(x{{svc=\"{{{{ service }}}}\",t=\"{{{{ target }}}}\",w=\"{{{{ window }}}}\",v=\"{{{{ variables.a }}}}\"}}[{{{{ interval }}}}]))
---
{}",
        canary(
            "",
            "    stepWeight: 10
    maxWeight: 50
    metrics:
      - { name: istio_requests_total, threshold: 99 }
      - { name: request-duration, threshold: 500, interval: 30s }
      - { name: custom, query: \"sum(up)\", thresholdRange: { min: 1 } }
      - { name: from-dd, templateRef: { name: dd }, thresholdRange: { max: 1 } }
      - { name: from-errors, templateRef: { name: errors }, templateVariables: { a: b }, thresholdRange: { max: 1 } }
      - { name: nothing }
      - { thresholdRange: { max: 1 } }
",
        )
        .replace("  targetRef:", "  metricsServer: http://prom.example:9090\n  targetRef:")
    );
    let (v, notes, _) = run(&yaml);
    let m = &v["canaries"][0]["analysis"]["metrics"];
    assert_eq!(
        m[0],
        json!({"name": "request-success-rate", "thresholdRange": {"min": 99}})
    );
    assert_eq!(
        m[1],
        json!({"name": "request-duration", "thresholdRange": {"max": 500}, "interval": "30s"})
    );
    assert_eq!(
        m[2],
        json!({"name": "custom", "query": "sum(up)", "prometheusUrl": "http://prom.example:9090", "thresholdRange": {"min": 1}})
    );
    assert_eq!(
        m[3],
        json!({"name": "from-dd", "templateRef": {"name": "dd", "namespace": "test"},
               "thresholdRange": {"max": 1}})
    );
    assert_eq!(
        m[4],
        json!({"name": "from-errors", "templateRef": {"name": "errors", "namespace": "test"},
               "templateVariables": {"a": "b"}, "thresholdRange": {"max": 1}})
    );
    assert_eq!(m[5], json!({"name": "nothing"}));
    assert_eq!(m.as_array().unwrap().len(), 6);
    assert_eq!(
        v["metricTemplates"]["errors"]["provider"],
        json!({"type": "prometheus", "address": resources::DEFAULT_PROMETHEUS,
               "tokenFile": "secrets/prom-auth-token",
               "headers": [{"key": "X-One", "value": "one"}, {"key": "X-Scope-OrgID", "value": "team-a"}]})
    );
    assert_eq!(
        v["metricTemplates"]["dd"],
        json!({"provider": {"type": "datadog", "address": "https://api.datadoghq.com"}, "query": "avg:x"})
    );
    has(
        &notes,
        "spec.provider.type: provider \"datadog\" has no weir equivalent",
    );
    has(
        &notes,
        "metrics[0].name: Flagger's old name of request-success-rate",
    );
    has(
        &notes,
        "metrics[0].threshold: Flagger's deprecated threshold; written as thresholdRange.min",
    );
    has(
        &notes,
        "metrics[1].threshold: Flagger's deprecated threshold; written as thresholdRange.max",
    );
    has(
        &notes,
        "metrics[5]: metric \"nothing\" is neither a builtin nor has a templateRef or query (Flagger skips it): kept",
    );
    has(
        &notes,
        "metrics[6]: a metric without a name, which Flagger's Canary does not accept either",
    );
    has(&notes, "spec.provider.address: not set");
    has(&notes, "spec.provider.secretRef:");
    has(&notes, "spec.provider.insecureSkipVerify:");
    has(&notes, "uses {{ window }}");
    assert!(
        !notes.iter().any(|n| n.contains("{{ variables.a }}")
            || n.contains("uses {{ target }}")
            || n.contains("uses {{ service }}")),
        "{notes:#?}"
    );
}

#[test]
fn alert_providers_by_type_and_canary_alerts_by_reference() {
    let yaml = format!(
        "apiVersion: flagger.app/v1beta1
kind: AlertProvider
metadata: {{ name: teams }}
spec: {{ type: msteams, address: \"https://example.webhook.office.com/x\" }}
---
apiVersion: flagger.app/v1beta1
kind: AlertProvider
metadata: {{ name: chat }}
spec: {{ type: googlechat, address: \"https://chat.googleapis.com/v1/x\" }}
---
apiVersion: flagger.app/v1beta1
kind: AlertProvider
metadata: {{ name: pager }}
spec: {{ type: pagerduty, address: \"https://events.pagerduty.com\" }}
---
{}",
        canary(
            "",
            "    stepWeight: 10
    maxWeight: 50
    alerts:
      - { name: t, severity: warn, providerRef: { name: teams, namespace: flagger } }
      - { name: p, providerRef: { name: pager } }
",
        )
    );
    let (v, notes, yaml) = run(&yaml);
    assert_eq!(
        v["alertProviders"]["teams"],
        json!({"type": "msteams", "address": "https://example.webhook.office.com/x"})
    );
    assert_eq!(v["alertProviders"]["chat"]["type"], "gchat");
    assert!(v["alertProviders"].get("pager").is_none());
    assert_eq!(
        v["canaries"][0]["analysis"]["alerts"],
        json!([{"name": "t", "severity": "warn", "providerRef": {"name": "teams", "namespace": "flagger"}}])
    );
    has(
        &notes,
        "spec.type: type \"pagerduty\" has no weir equivalent",
    );
    has(
        &notes,
        "alerts[1].providerRef: AlertProvider \"pager\" is not among the imported ones",
    );
    valid(&yaml);
}

#[test]
fn lists_old_names_duplicates_wrong_types_and_spec_fields_each_get_a_note() {
    let c = canary("", "    stepWeight: 10\n    maxWeight: 50\n    webhooks:\n      - { name: h, url: \"https://hooks.example/x\", disableTLS: true, muteAlert: true }\n");
    let yaml = format!(
        "apiVersion: v1
kind: List
items:
  - apiVersion: flagger.app/v1alpha3
    kind: Canary
    metadata: {{ name: old, labels: {{ a: b }} }}
    spec:
      targetRef: {{ name: old }}
      service: {{ port: 80 }}
      skipAnalysis: true
      suspend: true
      revertOnDeletion: true
      progressDeadlineSeconds: 120
      canaryAnalysis: {{ interval: 30s, threshold: x, stepWeight: 20, maxWeight: 60, primaryReadyThreshold: 90 }}
  - apiVersion: flagger.app/v1beta1
    kind: Canary
    metadata: {{ name: old }}
    spec: {{}}
---
{c}"
    );
    let (v, notes, yaml) = run(&yaml);
    let names: Vec<&str> = v["canaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["old", "podinfo"]);
    let old = &v["canaries"][0];
    assert_eq!(old["skipAnalysis"], true);
    assert_eq!(
        old["analysis"],
        json!({"interval": "30s", "stepWeight": 20, "maxWeight": 60})
    );
    assert_eq!(
        v["backends"]["old-green"]["rollingUpdate"]["progressDeadline"],
        "120s"
    );
    assert_eq!(
        v["canaries"][1]["analysis"]["webhooks"][0]["muteAlert"],
        true
    );
    has(
        &notes,
        "apiVersion: flagger.app/v1alpha3: read as flagger.app/v1beta1",
    );
    has(&notes, "metadata.labels: Kubernetes object metadata");
    has(&notes, "spec.suspend: use `weir ctl pause CANARY`");
    has(&notes, "spec.revertOnDeletion:");
    has(
        &notes,
        "spec.canaryAnalysis: Flagger's old name of spec.analysis",
    );
    has(&notes, "spec.canaryAnalysis.threshold: expected an integer");
    has(
        &notes,
        "spec.canaryAnalysis.primaryReadyThreshold: weir checks readiness itself",
    );
    has(
        &notes,
        "metadata.name: a Canary of this name was imported already",
    );
    has(&notes, "webhooks[0].disableTLS: weir always verifies TLS");
    has(&notes, "spec.service.hosts: not set: with several canaries");
    assert_eq!(
        v["routes"][0]["hosts"],
        json!(["old", "old.default", "old.default.svc.cluster.local"])
    );
    // The second `old` is skipped, so the config stays valid.
    assert_eq!(v["routes"].as_array().unwrap().len(), 2);
    let filled = yaml
        .replace("<fill in old-blue>", "127.0.0.1")
        .replace("<fill in old-green>", "127.0.0.1");
    valid(&filled);
}

#[test]
fn nothing_to_import_and_not_yaml_are_errors() {
    let e = flagger(&[(
        "a.yaml".into(),
        "apiVersion: v1\nkind: Service\nmetadata: { name: x }\n".into(),
    )])
    .unwrap_err();
    assert!(
        e.contains("no Canary, MetricTemplate or AlertProvider"),
        "{e}"
    );
    let e = flagger(&[("a.yaml".into(), "a: [b\n".into())]).unwrap_err();
    assert!(e.starts_with("a.yaml: not YAML"), "{e}");
    // A scalar document is noted, not fatal.
    let out = flagger(&[(
        "a.yaml".into(),
        format!(
            "just text\n---\n{}",
            canary("", "    stepWeight: 10\n    maxWeight: 50\n")
        ),
    )])
    .unwrap();
    assert_eq!(out.canaries, 1);
    assert!(
        out.notes
            .iter()
            .any(|n| n.reason.contains("expected an object")),
        "{:?}",
        out.notes
    );
}

/// `weir check`'s errors on the output, its placeholders filled: the output must be
/// refused.
fn refused(yaml: &str) -> Vec<(String, String)> {
    let filled = yaml
        .replace("<fill in podinfo-blue>", "127.0.0.1")
        .replace("<fill in podinfo-green>", "127.0.0.1");
    match crate::config::parse_yaml(&filled, "t.yaml", std::path::Path::new(".")) {
        Ok(_) => panic!("weir check passes a config it should refuse:\n{filled}"),
        Err(e) => e.errors.into_iter().map(|e| (e.path, e.reason)).collect(),
    }
}

fn template(name: &str, provider: &str, query: &str) -> String {
    format!(
        "apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{ name: {name}, namespace: test }}
spec:
  provider: {provider}
  query: {query:?}
---
"
    )
}

#[test]
fn a_metric_whose_template_is_not_in_the_input_is_kept_for_weir_check_to_refuse() {
    let (v, notes, yaml) = run(&canary(
        "",
        "    iterations: 5
    metrics:
      - name: error-rate
        templateRef: { name: error-rate, namespace: flagger-system }
        templateVariables: { code: \"5..\" }
        thresholdRange: { max: 1 }
",
    ));
    assert_eq!(
        v["canaries"][0]["analysis"]["metrics"][0],
        json!({"name": "error-rate", "templateRef": {"name": "error-rate", "namespace": "flagger-system"},
               "templateVariables": {"code": "5.."}, "thresholdRange": {"max": 1}})
    );
    has(
        &notes,
        "spec.analysis.metrics[0].templateRef: MetricTemplate \"error-rate\" is not among the imported ones: metric \"error-rate\" keeps its templateRef, and weir check refuses it",
    );
    let errors = refused(&yaml);
    assert_eq!(
        errors,
        [(
            "canaries[0].analysis.metrics[0].templateRef.name".to_string(),
            "unknown metric template \"error-rate\": metricTemplates is empty".to_string()
        )]
    );
}

#[test]
fn a_template_of_a_provider_weir_lacks_is_kept_for_weir_check_to_refuse() {
    let yaml = format!(
        "{}{}",
        template(
            "latency",
            "{ type: cloudwatch, region: eu-west-1, secretRef: { name: aws } }",
            "[{\"Id\": \"p99\"}]"
        ),
        canary(
            "",
            "    iterations: 5\n    metrics:\n      - { name: p99, templateRef: { name: latency }, thresholdRange: { max: 500 } }\n"
        )
    );
    let (v, notes, yaml) = run(&yaml);
    assert_eq!(
        v["metricTemplates"]["latency"],
        json!({"provider": {"type": "cloudwatch"}, "query": "[{\"Id\": \"p99\"}]"})
    );
    assert_eq!(
        v["canaries"][0]["analysis"]["metrics"][0]["templateRef"]["name"],
        "latency"
    );
    has(
        &notes,
        "spec.provider.type: provider \"cloudwatch\" has no weir equivalent (weir queries Prometheus, or a JSON URL with type: web): the template is kept as written",
    );
    has(&notes, "spec.provider.region: only for cloud providers");
    has(
        &notes,
        "spec.provider.secretRef: a setting of the cloudwatch provider; not mapped",
    );
    assert!(
        yaml.contains("# provider \"cloudwatch\" has no weir equivalent"),
        "{yaml}"
    );
    let errors = refused(&yaml);
    assert_eq!(
        errors,
        [(
            "metricTemplates.latency.provider.type".to_string(),
            "unsupported provider type \"cloudwatch\"; weir has prometheus, web".to_string()
        )]
    );
}

#[test]
fn a_lone_manifest_weir_cannot_use_names_why() {
    // A template is kept, its provider named, and weir check refuses it.
    let out = flagger(&[(
        "dd.yaml".into(),
        template("dd", "{ type: datadog }", "avg:x"),
    )])
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((out.canaries, out.templates), (0, 1));
    assert!(
        out.notes.iter().any(|n| n.path == "spec.provider.type"
            && n.reason
                .contains("provider \"datadog\" has no weir equivalent")),
        "{:?}",
        out.notes
    );
    assert!(out.yaml.contains("type: datadog"), "{}", out.yaml);
    let errors = refused(&out.yaml);
    assert!(
        errors
            .iter()
            .any(|(p, r)| p == "metricTemplates.dd.provider.type"
                && r.contains("unsupported provider type \"datadog\"")),
        "{errors:?}"
    );
    // An alert provider weir lacks is left out: the error says why, not just "nothing".
    let e = flagger(&[(
        "pd.yaml".into(),
        "apiVersion: flagger.app/v1beta1\nkind: AlertProvider\nmetadata: { name: pager }\nspec: { type: pagerduty, address: \"https://events.pagerduty.com\" }\n".into(),
    )])
    .unwrap_err();
    assert!(
        e.contains("AlertProvider default/pager (pd.yaml) spec.type: type \"pagerduty\" has no weir equivalent"),
        "{e}"
    );
    assert!(
        !e.contains("no Canary, MetricTemplate or AlertProvider"),
        "{e}"
    );
}

#[test]
fn queries_on_series_weir_does_not_export_are_noted() {
    let yaml = format!(
        "{}{}{}{}{}",
        template(
            "success-rate",
            "{ type: prometheus, address: \"http://prometheus.linkerd-viz:9090\" }",
            "sum(rate(response_total{namespace=\"{{ namespace }}\",deployment=~\"{{ target }}\",classification!=\"failure\"}[{{ interval }}])) / sum(rate(response_total{deployment=~\"{{ target }}\"}[{{ interval }}])) * 100"
        ),
        template(
            "typo",
            "{ type: prometheus, address: \"http://prom:9090\" }",
            "sum(rate(weir_request_total{route=\"{{ target }}\"}[{{ interval }}]))"
        ),
        template(
            "old-istio",
            "{ type: prometheus, address: \"http://prom:9090\" }",
            "histogram_quantile(0.99, sum(rate(istio_request_duration_seconds_bucket[{{ interval }}])) by (le))"
        ),
        template(
            "istio",
            "{ type: prometheus, address: \"http://prom:9090\" }",
            "sum(rate(istio_requests_total{destination_workload=~\"{{ target }}\",response_code!~\"5.*\"}[{{ interval }}]))"
        ),
        canary(
            "",
            "    iterations: 5
    metrics:
      - { name: a, templateRef: { name: success-rate }, thresholdRange: { min: 99 } }
      - { name: b, templateRef: { name: typo }, thresholdRange: { max: 1 } }
      - { name: c, templateRef: { name: old-istio }, thresholdRange: { max: 500 } }
      - { name: d, templateRef: { name: istio }, thresholdRange: { max: 1 } }
      - name: nginx
        query: 'sum(rate(nginx_ingress_controller_requests{ingress=\"{{ ingress }}\",status!~\"5.*\"}[1m])) + sum(http_requests_total{kubernetes_pod_name=~\"{{ target }}-[0-9a-z]+\"})'
        thresholdRange: { min: 1 }
"
        )
    );
    let (v, notes, yaml) = run(&yaml);
    has(
        &notes,
        "spec.query: reads response_total (from Linkerd's proxy), which weir does not export: weir check cannot know it; unless it comes from your Prometheus",
    );
    has(
        &notes,
        "spec.query: weir exports no series \"weir_request_total\": did you mean weir_requests_total?; weir check refuses the query",
    );
    has(
        &notes,
        "spec.query: weir exports no series \"istio_request_duration_seconds_bucket\": did you mean istio_request_duration_milliseconds_bucket?; weir check accepts the query",
    );
    has(
        &notes,
        "spec.analysis.metrics[4].query: reads nginx_ingress_controller_requests (from the NGINX ingress controller), http_requests_total, which weir does not export",
    );
    has(
        &notes,
        "spec.analysis.metrics[4].query: selects by kubernetes_pod_name: weir's slots are not Kubernetes pods",
    );
    // The Istio-named template is exported under admin.flaggerMetrics, and noted for nothing.
    assert_eq!(v["admin"]["flaggerMetrics"], true, "{yaml}");
    assert!(
        !notes.iter().any(|n| n.contains("istio_requests_total")),
        "{notes:#?}"
    );
    // The only series weir check can judge is the weir_ one.
    let errors = refused(&yaml);
    assert_eq!(
        errors,
        [(
            "metricTemplates.typo.query".to_string(),
            "weir exports no series \"weir_request_total\": did you mean weir_requests_total?"
                .to_string()
        )]
    );
}
