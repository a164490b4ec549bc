use crate::config::{parse_yaml, ConfigErrors, MetricKind};
use std::path::Path;

/// A weir with route `app` and a canary `app` on it; `top` is more top-level YAML and
/// `metrics` the metric list (lines indented 8 spaces).
fn config(top: &str, metrics: &str) -> String {
    format!(
        "backends:\n  app-blue:\n    endpoints: [\"127.0.0.1:9001\"]\n  app-green:\n    endpoints: [\"127.0.0.1:9101\"]\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\n{top}canaries:\n  - name: app\n    route: app\n    analysis:\n      stepWeight: 10\n      metrics:\n{metrics}"
    )
}

const PROM: &str = "metricTemplates:\n  error-rate:\n    provider: { type: prometheus, address: \"http://127.0.0.1:9090/\" }\n    query: |\n      100 - sum(rate(weir_requests_total{route=\"{{ target }}\",role=\"canary\",code!~\"{{ variables.code }}\"}[{{ interval }}]))\n";

const USE: &str = "        - name: error-rate\n          templateRef: { name: error-rate, namespace: default }\n          templateVariables: { code: \"5..\" }\n          thresholdRange: { max: 1 }\n          interval: 30s\n";

fn errors(yaml: &str) -> ConfigErrors {
    match parse_yaml(yaml, "t.yaml", Path::new(".")) {
        Ok(_) => panic!("config unexpectedly valid:\n{yaml}"),
        Err(e) => e,
    }
}

/// The error at `path` (exactly one), its reason.
fn error_at(yaml: &str, path: &str) -> String {
    let e = errors(yaml);
    let at: Vec<_> = e.errors.iter().filter(|x| x.path == path).collect();
    assert_eq!(at.len(), 1, "want one error at {path}, got:\n{e}");
    assert!(at[0].location.is_some(), "no line:col for {path}:\n{e}");
    at[0].reason.clone()
}

#[test]
fn a_prometheus_template_becomes_the_metrics_query() {
    let c = parse_yaml(&config(PROM, USE), "t.yaml", Path::new(".")).unwrap();
    let m = &c.canaries[0].analysis.metrics[0];
    let MetricKind::Prometheus { url, query } = &m.kind else {
        panic!("{m:?}")
    };
    assert_eq!(url, "http://127.0.0.1:9090");
    assert!(query.contains("{{ variables.code }}"), "{query}");
    assert_eq!(m.template.as_deref(), Some("error-rate"));
    assert_eq!(m.variables.get("code").map(String::as_str), Some("5.."));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

#[test]
fn a_web_template_is_read_with_argos_field_names() {
    let top = "metricTemplates:\n  p99:\n    provider:\n      type: web\n      url: \"http://127.0.0.1:9/stats?route={{ target }}&w={{ interval }}\"\n      jsonPath: \"{$.data.p99}\"\n      headers:\n        - { key: X-Scope, value: \"{{ variables.tenant }}\" }\n      timeoutSeconds: 3\n";
    let metrics = "        - name: p99\n          templateRef: { name: p99 }\n          templateVariables: { tenant: team-a }\n          thresholdRange: { max: 500 }\n";
    let c = parse_yaml(&config(top, metrics), "t.yaml", Path::new(".")).unwrap();
    let MetricKind::Web(w) = &c.canaries[0].analysis.metrics[0].kind else {
        panic!()
    };
    assert_eq!(w.timeout, std::time::Duration::from_secs(3));
    assert_eq!(w.json_path.to_string(), "$.data.p99");
    assert_eq!(
        c.canaries[0].analysis.metrics[0].headers,
        vec![("X-Scope".into(), "{{ variables.tenant }}".into())]
    );
    // Debug never shows the URL (it may carry a token).
    assert!(!format!("{w:?}").contains("127.0.0.1"));
}

#[test]
fn an_undefined_template_is_an_error_at_the_ref() {
    let yaml = config(PROM, &USE.replace("name: error-rate,", "name: errors,"));
    let e = error_at(&yaml, "canaries[0].analysis.metrics[0].templateRef.name");
    assert!(
        e.contains("unknown metric template \"errors\"") && e.contains("error-rate"),
        "{e}"
    );
    let e = error_at(
        &config("", USE),
        "canaries[0].analysis.metrics[0].templateRef.name",
    );
    assert!(e.contains("metricTemplates is empty"), "{e}");
}

/// A metric whose template has a provider weir lacks is refused where the provider is
/// named; the metric itself adds no second error.
#[test]
fn a_template_with_an_unknown_provider_refuses_its_metric() {
    let dd = "metricTemplates:\n  error-rate:\n    provider: { type: datadog, address: \"https://api.datadoghq.com\" }\n    query: \"avg:requests.error.rate{service:{{ target }}}\"\n";
    let yaml = config(dd, USE);
    let e = error_at(&yaml, "metricTemplates.error-rate.provider.type");
    assert_eq!(
        e,
        "unsupported provider type \"datadog\"; weir has prometheus, web"
    );
    assert_eq!(errors(&yaml).errors.len(), 1, "{}", errors(&yaml));
}

#[test]
fn a_query_reading_a_weir_series_weir_does_not_export_is_refused_with_the_closest_name() {
    let yaml = config(
        &PROM.replace("weir_requests_total", "weir_request_total"),
        USE,
    );
    let e = error_at(&yaml, "metricTemplates.error-rate.query");
    assert_eq!(
        e,
        "weir exports no series \"weir_request_total\": did you mean weir_requests_total?"
    );
    // An inline query is held to the same list.
    let inline = "        - name: p99\n          prometheusUrl: http://127.0.0.1:9090\n          query: \"histogram_quantile(0.99, sum(rate(weir_request_duration_seconds{route=\\\"{{ route }}\\\"}[{{ interval }}])) by (le))\"\n          thresholdRange: { max: 1 }\n";
    let e = error_at(&config("", inline), "canaries[0].analysis.metrics[0].query");
    assert!(
        e.contains("is a histogram") && e.contains("weir_request_duration_seconds_bucket"),
        "{e}"
    );
}

/// Queries on weir's series, Flagger's and Istio's names and other exporters' series
/// (which weir cannot know) all load; so do template variables anywhere in them.
#[test]
fn queries_on_exported_or_foreign_series_pass() {
    let queries = [
        "histogram_quantile(0.99, sum(rate(weir_request_duration_seconds_bucket{route=\\\"{{ route }}\\\",role=\\\"canary\\\"}[{{ interval }}])) by (le))",
        "sum(rate(istio_requests_total{destination_workload=~\\\"{{ target }}\\\",response_code!~\\\"5.*\\\"}[{{ interval }}])) / sum(rate(istio_requests_total[{{ interval }}])) * 100",
        "sum(rate(response_total{namespace=\\\"{{ namespace }}\\\",deployment=~\\\"{{ target }}\\\"}[{{ interval }}])) + max(weir_canary_failed_checks) + flagger_canary_status",
        "sum(rate(weir_{{ variables.kind }}_total[1m]))",
    ];
    for q in queries {
        let inline = format!(
            "        - name: q\n          prometheusUrl: http://127.0.0.1:9090\n          templateVariables: {{ kind: requests }}\n          query: \"{q}\"\n          thresholdRange: {{ max: 1 }}\n"
        );
        if let Err(e) = parse_yaml(&config("", &inline), "t.yaml", Path::new(".")) {
            panic!("{q}: {e}");
        }
    }
}

#[test]
fn a_missing_variable_is_an_error_at_the_metrics_template_variables() {
    let yaml = config(PROM, &USE.replace("code", "other"));
    let e = error_at(&yaml, "canaries[0].analysis.metrics[0].templateVariables");
    assert_eq!(
        e,
        "template \"error-rate\" uses {{ variables.code }}: set code in templateVariables"
    );
    // Inline queries are held to the same rule.
    let inline = "        - name: q\n          prometheusUrl: http://127.0.0.1:9090\n          query: \"sum(x{a=\\\"{{ variables.a }}\\\"})\"\n          thresholdRange: { max: 1 }\n";
    let e = error_at(
        &config("", inline),
        "canaries[0].analysis.metrics[0].templateVariables",
    );
    assert!(e.contains("the query uses {{ variables.a }}"), "{e}");
}

#[test]
fn an_unknown_variable_is_an_error_where_it_is_written() {
    let yaml = config(&PROM.replace("{{ interval }}", "{{ window }}"), USE);
    let e = error_at(&yaml, "metricTemplates.error-rate.query");
    assert!(e.contains("unknown template variable {{ window }}"), "{e}");
    let inline = "        - name: q\n          prometheusUrl: http://127.0.0.1:9090\n          query: \"sum(x[{{ args.w }}])\"\n          thresholdRange: { max: 1 }\n";
    let e = error_at(&config("", inline), "canaries[0].analysis.metrics[0].query");
    assert!(e.contains("Argo Rollouts' syntax"), "{e}");
}

/// Each bad template, the path of its error and a word of the reason.
#[test]
fn every_bad_template_names_its_field() {
    let web = "metricTemplates:\n  error-rate:\n    provider: { type: web, url: \"http://127.0.0.1:9/x\" }\n";
    let cases: &[(&str, &str, &str)] = &[
        (
            "metricTemplates:\n  error-rate:\n    provider: { type: datadog, address: \"http://x\" }\n    query: q\n",
            "metricTemplates.error-rate.provider.type",
            "unsupported provider type \"datadog\"",
        ),
        (
            "metricTemplates:\n  error-rate:\n    provider: { type: prometheus }\n    query: q\n",
            "metricTemplates.error-rate.provider.address",
            "needs the server URL",
        ),
        (
            "metricTemplates:\n  error-rate:\n    provider: { type: prometheus, address: \"ftp://x\" }\n    query: q\n",
            "metricTemplates.error-rate.provider.address",
            "http://",
        ),
        (
            "metricTemplates:\n  error-rate:\n    provider: { type: prometheus, address: \"http://x\" }\n",
            "metricTemplates.error-rate.query",
            "needs a query",
        ),
        (
            "metricTemplates:\n  error-rate:\n    provider: { type: prometheus, address: \"http://x\", jsonPath: \"{$}\" }\n    query: q\n",
            "metricTemplates.error-rate.provider.jsonPath",
            "for type web",
        ),
        (
            "metricTemplates:\n  error-rate:\n    provider: { type: prometheus, address: \"http://x\", secretRef: { name: prom } }\n    query: q\n",
            "metricTemplates.error-rate.provider.secretRef",
            "tokenFile",
        ),
        (
            "metricTemplates:\n  error-rate:\n    provider: { type: prometheus, address: \"http://x\", insecureSkipVerify: true }\n    query: q\n",
            "metricTemplates.error-rate.provider.insecureSkipVerify",
            "caFile",
        ),
        (
            "metricTemplates:\n  error-rate:\n    provider: { type: prometheus, address: \"http://x\", tokenFile: /nonexistent/token }\n    query: q\n",
            "metricTemplates.error-rate.provider.tokenFile",
            "cannot read",
        ),
        (
            "metricTemplates:\n  error-rate:\n    provider: { type: web }\n",
            "metricTemplates.error-rate.provider.url",
            "needs the url",
        ),
        (
            &web.replace("/x\"", "/x\", jsonPath: \"{$.a[}\""),
            "metricTemplates.error-rate.provider.jsonPath",
            "not a JSONPath",
        ),
        (
            &web.replace("/x\"", "/x\", timeoutSeconds: 0"),
            "metricTemplates.error-rate.provider.timeoutSeconds",
            "between 1 and 600",
        ),
        (
            &web.replace("/x\"", "/x\", timeoutSeconds: 2, timeout: 2s"),
            "metricTemplates.error-rate.provider.timeout",
            "not both",
        ),
        (
            &web.replace("/x\"", "/x\", headers: [{ key: \"a b\", value: v }]"),
            "metricTemplates.error-rate.provider.headers[0].key",
            "not a header name",
        ),
        (
            "metricTemplates:\n  error-rate:\n    provider: { type: prometheus, address: \"http://x\", tokenFile: Cargo.toml, headers: [{ key: Authorization, value: v }] }\n    query: q\n",
            "metricTemplates.error-rate.provider.headers[0].key",
            "keep one of the two",
        ),
        (
            "metricTemplates:\n  error-rate:\n    provider: { type: prometheus, address: \"http://x\", headers: [{ key: X-Scope-OrgID, value: \"{{ tenant }}\" }] }\n    query: q\n",
            "metricTemplates.error-rate.provider.headers[0].value",
            "unknown template variable {{ tenant }}",
        ),
        (
            &web.replace("/x\"", "/x?r={{ rout }}\""),
            "metricTemplates.error-rate.provider.url",
            "unknown template variable {{ rout }}",
        ),
        (
            &format!("{web}    query: q\n"),
            "metricTemplates.error-rate.query",
            "takes no query",
        ),
        (
            "metricTemplates:\n  error-rate:\n    provider: { type: web, url: \"{{ variables.code }}/x\" }\n",
            "canaries[0].analysis.metrics[0].templateRef",
            "not an http:// or https:// URL",
        ),
    ];
    for (top, path, word) in cases {
        let reason = error_at(&config(top, USE), path);
        assert!(reason.contains(word), "{path}: {reason:?} lacks {word:?}");
    }
}

#[test]
fn a_template_metric_takes_no_query_url_or_ca_file_of_its_own() {
    let yaml = config(
        PROM,
        &USE.replace(
            "          interval: 30s\n",
            "          interval: 30s\n          prometheusUrl: http://127.0.0.1:9090\n",
        ),
    );
    let e = error_at(&yaml, "canaries[0].analysis.metrics[0].prometheusUrl");
    assert!(e.contains("comes from the template"), "{e}");
    let stray = "        - name: request-success-rate\n          templateVariables: { a: b }\n          thresholdRange: { min: 99 }\n";
    let e = error_at(
        &config("", stray),
        "canaries[0].analysis.metrics[0].templateVariables",
    );
    assert!(e.contains("templateRef or a query"), "{e}");
}

#[test]
fn an_unused_template_is_a_warning() {
    let extra = format!(
        "{PROM}  spare:\n    provider: {{ type: prometheus, address: \"http://x\" }}\n    query: up\n"
    );
    let c = parse_yaml(&config(&extra, USE), "t.yaml", Path::new(".")).unwrap();
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert_eq!(c.warnings[0].path, "metricTemplates.spare");
    assert!(c.warnings[0].location.is_some());
}

/// DESIGN §13's example, verbatim: a contract the importer and users rely on.
#[test]
fn the_design_example_loads() {
    let top = r#"metricTemplates:
  error-rate:
    provider: { type: prometheus, address: "http://127.0.0.1:9090" }   # or type: web (GET JSON, jsonPath)
    query: |
      100 - sum(rate(weir_requests_total{route="{{ target }}",role="canary",code!~"5.."}[{{ interval }}]))
          / sum(rate(weir_requests_total{route="{{ target }}",role="canary"}[{{ interval }}])) * 100
"#;
    let metrics = r#"        - name: error-rate
          templateRef: { name: error-rate, namespace: default }   # namespace accepted, ignored
          templateVariables: { route: app }                        # {{ variables.route }}
          thresholdRange: { max: 1 }
          interval: 1m
"#;
    let c = parse_yaml(&config(top, metrics), "t.yaml", Path::new(".")).unwrap();
    let m = &c.canaries[0].analysis.metrics[0];
    assert!(matches!(m.kind, MetricKind::Prometheus { .. }), "{m:?}");
    assert_eq!(m.max, Some(1.0));
}
