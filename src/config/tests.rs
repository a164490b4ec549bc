use super::*;
use std::path::Path;

const GOOD: &str = r#"
listeners:
  - name: http
    address: 127.0.0.1:0
backends:
  app-blue:
    endpoints: ["127.0.0.1:9001"]
  app-green:
    endpoints: ["127.0.0.1:9101"]
routes:
  - name: app
    primary: app-blue
    canary: app-green
    canaryWeight: 10
"#;

fn errors(yaml: &str) -> ConfigErrors {
    match parse_yaml(yaml, "t.yaml", Path::new(".")) {
        Ok(_) => panic!("config unexpectedly valid:\n{yaml}"),
        Err(e) => e,
    }
}

#[test]
fn good_config_compiles() {
    let c = parse_yaml(GOOD, "t.yaml", Path::new(".")).unwrap();
    assert_eq!(c.table.routing.routes[0].canary_weight, 10);
    assert_eq!(
        c.table.routing.routes[0].timeout,
        std::time::Duration::from_secs(15)
    );
    assert_eq!(c.admin.address.to_string(), "127.0.0.1:9901");
}

/// Each bad config, the field path its error must name, and a word of the reason.
#[test]
fn every_bad_config_names_its_field() {
    let cases: &[(&str, &str, &str, &str)] = &[
        ("weight over 100", "canaryWeight: 10", "canaryWeight: 150", "routes[0].canaryWeight"),
        ("negative weight", "canaryWeight: 10", "canaryWeight: -1", "routes[0].canaryWeight"),
        ("unknown primary", "primary: app-blue", "primary: app-red", "routes[0].primary"),
        ("unknown canary", "canary: app-green", "canary: nope", "routes[0].canary"),
        ("canary equals primary", "canary: app-green", "canary: app-blue", "routes[0].canary"),
        ("bad duration", "canaryWeight: 10", "canaryWeight: 10\n    timeout: 10 parsecs", "routes[0].timeout"),
        ("bad listener address", "address: 127.0.0.1:0", "address: localhost", "listeners[0].address"),
        ("endpoint without port", "\"127.0.0.1:9001\"", "\"127.0.0.1\"", "backends.app-blue.endpoints[0]"),
        ("endpoint with scheme", "\"127.0.0.1:9001\"", "\"http://127.0.0.1:9001\"", "backends.app-blue.endpoints[0]"),
        ("no endpoints", "endpoints: [\"127.0.0.1:9001\"]", "endpoints: []", "backends.app-blue.endpoints"),
        ("bad regex", "canaryWeight: 10", "canaryWeight: 10\n    match:\n      - headers: { x-a: { regex: \"(\" } }", "routes[0].match[0].headers.x-a.regex"),
        ("huge regex", "canaryWeight: 10", "canaryWeight: 10\n    match:\n      - headers: { x-a: { regex: \"\\\\w{1000}\\\\w{1000}\" } }", "routes[0].match[0].headers.x-a.regex"),
        ("two kinds in one matcher", "canaryWeight: 10", "canaryWeight: 10\n    match:\n      - headers: { x-a: { exact: a, prefix: b } }", "routes[0].match[0].headers.x-a"),
        ("empty match item", "canaryWeight: 10", "canaryWeight: 10\n    match:\n      - {}", "routes[0].match[0]"),
        ("bad CIDR", "canaryWeight: 10", "canaryWeight: 10\n    match:\n      - sourceIp: [\"10.0.0.0/33\"]", "routes[0].match[0].sourceIp[0]"),
        ("bad host", "canaryWeight: 10", "canaryWeight: 10\n    hosts: [\"a b\"]", "routes[0].hosts[0]"),
        ("bad wildcard", "canaryWeight: 10", "canaryWeight: 10\n    hosts: [\"*.\"]", "routes[0].hosts[0]"),
        ("path prefix without slash", "canaryWeight: 10", "canaryWeight: 10\n    pathPrefix: api", "routes[0].pathPrefix"),
        ("bad sameSite", "canaryWeight: 10", "canaryWeight: 10\n    sessionAffinity: { cookieName: c, sameSite: Sometimes }", "routes[0].sessionAffinity.sameSite"),
        ("bad cookie name", "canaryWeight: 10", "canaryWeight: 10\n    sessionAffinity: { cookieName: \"a;b\" }", "routes[0].sessionAffinity.cookieName"),
        ("mirror weight", "canaryWeight: 10", "canaryWeight: 10\n    mirror: { weight: 101 }", "routes[0].mirror.weight"),
        ("hop-by-hop header edit", "canaryWeight: 10", "canaryWeight: 10\n    headers: { request: { set: { connection: close } } }", "routes[0].headers.request.set.connection"),
        ("non-loopback admin without token", "routes:", "admin:\n  address: 0.0.0.0:9901\nroutes:", "admin.tokenFile"),
        ("surge and unavailable both 0", "endpoints: [\"127.0.0.1:9001\"]", "endpoints: [\"127.0.0.1:9001\"]\n    rollingUpdate: { maxSurge: 0, maxUnavailable: 0 }", "backends.app-blue.rollingUpdate.maxUnavailable"),
        ("bad load balancer", "endpoints: [\"127.0.0.1:9001\"]", "endpoints: [\"127.0.0.1:9001\"]\n    loadBalancer: random", "backends.app-blue.loadBalancer"),
        ("canary on unknown route", "canaryWeight: 10", "canaryWeight: 10\ncanaries:\n  - name: c\n    route: nope\n    analysis: { interval: 1m, threshold: 5 }", "canaries[0].route"),
        ("unknown webhook type", "canaryWeight: 10", "canaryWeight: 10\ncanaries:\n  - name: c\n    route: app\n    analysis:\n      webhooks: [{ name: w, type: pre-flight, url: \"http://127.0.0.1:1/\" }]", "canaries[0].analysis.webhooks[0].type"),
        ("custom metric without query", "canaryWeight: 10", "canaryWeight: 10\ncanaries:\n  - name: c\n    route: app\n    analysis:\n      metrics: [{ name: error-budget, thresholdRange: { min: 1 } }]", "canaries[0].analysis.metrics[0].query"),
    ];
    assert!(cases.len() >= 15);
    for (what, from, to, field) in cases {
        assert!(
            GOOD.contains(from),
            "{what}: fixture text {from:?} not found"
        );
        let yaml = GOOD.replacen(from, to, 1);
        let e = errors(&yaml);
        let found = e.errors.iter().find(|x| x.path == *field);
        assert!(
            found.is_some(),
            "{what}: expected an error at {field}, got:\n{e}"
        );
        let text = e.to_string();
        assert!(
            text.contains(field),
            "{what}: message does not name {field}:\n{text}"
        );
        assert!(
            found.unwrap().location.is_some(),
            "{what}: no line:col for {field}"
        );
    }
}

#[test]
fn all_errors_are_reported_at_once_with_line_and_column() {
    let yaml = GOOD
        .replace("canaryWeight: 10", "canaryWeight: 150\n    timeout: soon")
        .replace("primary: app-blue", "primary: app-red");
    let e = errors(&yaml);
    let paths: Vec<&str> = e.errors.iter().map(|x| x.path.as_str()).collect();
    for p in [
        "routes[0].canaryWeight",
        "routes[0].timeout",
        "routes[0].primary",
    ] {
        assert!(paths.contains(&p), "missing {p} in {paths:?}");
    }
    let text = e.to_string();
    // `primary` is on line 12 of the fixture (line 1 is empty), column 5.
    assert!(
        text.contains("t.yaml:12:5: routes[0].primary: unknown backend \"app-red\""),
        "{text}"
    );
}

#[test]
fn unknown_fields_and_wrong_types_are_errors_with_location() {
    let e = errors(&GOOD.replace("canaryWeight: 10", "canaryWeight: 10\n    canaryWieght: 20"));
    let text = e.to_string();
    assert!(
        text.starts_with("t.yaml:15:5: routes[0]: unknown field `canaryWieght`"),
        "{text}"
    );
    assert!(e.errors[0].location.is_some_and(|(l, _)| l == 15), "{text}");
    let e = errors(&GOOD.replace("canaryWeight: 10", "canaryWeight: [1]"));
    assert!(e.errors[0].location.is_some(), "{e}");
    let e = errors("listeners: [");
    assert!(!e.errors.is_empty());
}

#[test]
fn duplicate_names_are_errors() {
    let yaml = format!("{GOOD}  - name: app\n    primary: app-blue\n    pathPrefix: /other\n");
    let e = errors(&yaml);
    assert!(
        e.errors
            .iter()
            .any(|x| x.path == "routes[1].name" && x.reason.contains("duplicate")),
        "{e}"
    );
    let yaml = format!("{GOOD}  - name: app2\n    primary: app-blue\n");
    let e = errors(&yaml);
    assert!(
        e.errors
            .iter()
            .any(|x| x.path == "routes[1].pathPrefix" && x.reason.contains("never match")),
        "{e}"
    );
}

#[test]
fn durations_parse() {
    assert_eq!(
        parse_duration("500ms").unwrap(),
        std::time::Duration::from_millis(500)
    );
    assert_eq!(
        parse_duration("10s").unwrap(),
        std::time::Duration::from_secs(10)
    );
    assert_eq!(
        parse_duration("1m").unwrap(),
        std::time::Duration::from_secs(60)
    );
    assert!(parse_duration("ten").is_err());
}

/// Flagger's durations are Go's: `1M` is not a month, `1 minute` is not a minute, and a
/// negative interval is out of range; each error names the field and the accepted forms.
#[test]
fn durations_outside_go_syntax_name_the_field_and_the_forms() {
    let canary = |interval: &str| {
        format!("{GOOD}canaries:\n  - name: c\n    route: app\n    analysis: {{ interval: \"{interval}\", threshold: 5, stepWeight: 10 }}\n")
    };
    for (interval, why) in [
        ("1M", "unknown unit \"M\""),
        ("1 minute", "unknown unit \" minute\""),
        ("90", "missing unit"),
        ("-1m", "must not be negative"),
        ("3000000h", "out of range"),
    ] {
        let e = errors(&canary(interval));
        let found = e
            .errors
            .iter()
            .find(|x| x.path == "canaries[0].analysis.interval")
            .unwrap_or_else(|| panic!("{interval}: no error at the interval:\n{e}"));
        assert!(found.reason.contains(why), "{interval}: {}", found.reason);
        assert!(
            found.reason.contains("300ms, 1.5h, 1m30s"),
            "{interval}: {}",
            found.reason
        );
        assert!(found.location.is_some(), "{interval}: no line:col");
    }
    let c = parse_yaml(&canary("1m30s"), "t.yaml", Path::new(".")).unwrap();
    assert_eq!(c.canaries[0].interval, std::time::Duration::from_secs(90));
}

/// [`GOOD`] with a canary on route `app` and these `analysis` lines (6 spaces).
fn with_canary(analysis: &str) -> String {
    format!("{GOOD}canaries:\n  - name: c\n    route: app\n    analysis:\n{analysis}")
}

/// Flagger accepts step weights above 100 and caps the canary weight at 100: so does
/// weir, with a warning naming each capped entry.
#[test]
fn step_weights_over_100_are_accepted_with_a_warning() {
    let yaml = with_canary("      stepWeights: [1, 2, 10, 200]\n");
    let c = parse_yaml(&yaml, "t.yaml", Path::new(".")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.canaries.len(), 1);
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    let w = &c.warnings[0];
    assert_eq!(w.path, "canaries[0].analysis.stepWeights[3]");
    assert!(
        w.reason.contains("200") && w.reason.contains("100"),
        "{w:?}"
    );
    assert_eq!(w.location, Some((19, 31)), "{w:?}");
    let ok = parse_yaml(
        &with_canary("      stepWeights: [1, 2, 10, 80]\n"),
        "t.yaml",
        Path::new("."),
    );
    assert!(ok.unwrap().warnings.is_empty());
}

/// Flagger's CRD: `analysis` is oneOf {iterations}, {stepWeight}, {stepWeights}, so any
/// two of them together are refused.
#[test]
fn step_fields_that_flaggers_crd_refuses_together_are_errors() {
    let cases = [
        (
            "      stepWeight: 10\n      stepWeights: [10, 20]\n",
            "stepWeights",
            "stepWeight",
        ),
        (
            "      iterations: 3\n      stepWeight: 10\n",
            "iterations",
            "stepWeight",
        ),
        (
            "      iterations: 3\n      stepWeights: [10, 20]\n",
            "iterations",
            "stepWeights",
        ),
    ];
    for (lines, field, other) in cases {
        let e = errors(&with_canary(lines));
        let path = format!("canaries[0].analysis.{field}");
        let found = e.errors.iter().find(|x| x.path == path);
        assert!(
            found.is_some_and(|x| x.reason.contains(other) && x.location.is_some()),
            "{lines}: expected an error at {path} naming {other}, got:\n{e}"
        );
    }
}

/// Every hook type is named the same in the config, in error messages and on the wire
/// (webhook payloads, state files), so the one enum is the one list.
#[test]
fn hook_kind_names_are_their_serde_names() {
    for k in HookKind::ALL {
        assert_eq!(
            serde_json::to_value(k).unwrap(),
            serde_json::Value::String(k.name().into())
        );
        assert_eq!(HookKind::parse(k.name()), Some(k));
    }
    assert_eq!(HookKind::parse("Rollout"), None);
    let e = errors(&with_canary(
        "      stepWeight: 10\n      webhooks: [{ name: h, type: nope, url: \"http://127.0.0.1:1/\" }]\n",
    ));
    let found = e
        .errors
        .iter()
        .find(|x| x.path == "canaries[0].analysis.webhooks[0].type")
        .unwrap_or_else(|| panic!("no error at the type:\n{e}"));
    for k in HookKind::ALL {
        assert!(found.reason.contains(k.name()), "{}", found.reason);
    }
}

/// A validated canary is typed: durations parsed, kinds resolved, matches compiled,
/// so nothing downstream reads the raw strings again.
#[test]
fn a_validated_canary_is_typed() {
    let c = parse_yaml(
        &with_canary(
            r#"      iterations: 3
      match: [{ headers: { x-canary: { exact: insider } } }]
      metrics:
        - { name: request-success-rate, thresholdRange: { min: 99 } }
        - { name: request-duration, thresholdRange: { max: 500 }, interval: 30s }
        - name: request-success-rate-custom
          thresholdRange: { max: 1 }
          query: up
          prometheusUrl: http://127.0.0.1:9090/
      webhooks:
        - { name: gate, type: confirm-promotion, url: "http://127.0.0.1:1/", timeout: 2s, retries: 3 }
"#,
        )
        .replace("  - name: c\n", "  - name: c\n    progressDeadline: 5m\n"),
        "t.yaml",
        Path::new("."),
    );
    let e = c.as_ref().err().map(ToString::to_string);
    assert!(e.is_none(), "{e:?}");
    let c = &c.unwrap().canaries[0];
    assert_eq!(c.progress_deadline, std::time::Duration::from_secs(300));
    assert_eq!(c.promotion, Promotion::Swap);
    let a = &c.analysis;
    assert_eq!((a.iterations, a.threshold, a.max_weight), (3, 5, 0));
    assert_eq!((a.matches.raw.len(), a.matches.rules.len()), (1, 1));
    let kinds: Vec<_> = a.metrics.iter().map(|m| m.kind.clone()).collect();
    assert_eq!(
        kinds,
        vec![
            MetricKind::SuccessRate,
            MetricKind::Duration,
            MetricKind::Prometheus {
                url: "http://127.0.0.1:9090".into(),
                query: "up".into()
            }
        ],
        "the kind comes from the name or the query, never a fallback"
    );
    assert_eq!(a.metrics[0].interval, c.interval);
    assert_eq!(a.metrics[1].interval, std::time::Duration::from_secs(30));
    let w = &a.webhooks[0];
    assert_eq!(w.kind, HookKind::ConfirmPromotion);
    assert_eq!(
        (w.timeout, w.retries),
        (std::time::Duration::from_secs(2), 3)
    );
}

#[test]
fn admin_flagger_metrics_defaults_to_off_and_must_be_a_bool() {
    let c = parse_yaml(GOOD, "t.yaml", Path::new(".")).unwrap();
    assert!(!c.admin.flagger_metrics);
    let on = format!("admin:\n  address: 127.0.0.1:9901\n  flaggerMetrics: true\n{GOOD}");
    let c = parse_yaml(&on, "t.yaml", Path::new(".")).unwrap();
    assert!(c.admin.flagger_metrics);
    // A wrong type is an error at its line and column, like every other field's.
    let e = errors(&on.replace("flaggerMetrics: true", "flaggerMetrics: maybe"));
    let text = e.to_string();
    assert!(e.errors[0].location.is_some_and(|(l, _)| l == 3), "{text}");
    assert!(text.starts_with("t.yaml:3:"), "{text}");
}

#[test]
fn a_read_only_token_needs_a_writing_token_of_its_own() {
    let dir = std::env::temp_dir().join(format!("weir-config-ro-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("w"), "write-token-0123456789\n").unwrap();
    std::fs::write(dir.join("r"), "read-token-0123456789\n").unwrap();
    std::fs::write(dir.join("short"), "short\n").unwrap();
    let yaml = |admin: &str| {
        GOOD.replacen(
            "routes:",
            &format!("admin:\n  address: 127.0.0.1:0\n{admin}routes:"),
            1,
        )
    };
    let c = parse_yaml(
        &yaml("  tokenFile: w\n  readOnlyTokenFile: r\n"),
        "t.yaml",
        &dir,
    )
    .unwrap();
    assert_eq!(c.admin.token.as_deref(), Some("write-token-0123456789"));
    assert_eq!(
        c.admin.read_only_token.as_deref(),
        Some("read-token-0123456789")
    );
    let cases = [
        ("  readOnlyTokenFile: r\n", "needs admin.tokenFile"),
        ("  tokenFile: w\n  readOnlyTokenFile: w\n", "must differ"),
        (
            "  tokenFile: w\n  readOnlyTokenFile: short\n",
            "at least 16",
        ),
        (
            "  tokenFile: w\n  readOnlyTokenFile: missing\n",
            "cannot read",
        ),
    ];
    for (admin, reason) in cases {
        let e = match parse_yaml(&yaml(admin), "t.yaml", &dir) {
            Ok(_) => panic!("accepted: {admin}"),
            Err(e) => e,
        };
        assert!(
            e.errors
                .iter()
                .any(|x| x.path == "admin.readOnlyTokenFile" && x.reason.contains(reason)),
            "{admin}: {e}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn admin_allowed_hosts_and_body_timeout_default_and_name_their_field() {
    let c = parse_yaml(GOOD, "t.yaml", Path::new(".")).unwrap();
    assert_eq!(
        c.admin.allowed_hosts.describe(),
        "localhost, 127.0.0.1, ::1"
    );
    assert_eq!(c.admin.body_timeout, std::time::Duration::from_secs(10));
    let with = |admin: &str| {
        GOOD.replacen(
            "routes:",
            &format!("admin:\n  address: 127.0.0.1:9901\n{admin}routes:"),
            1,
        )
    };
    let c = parse_yaml(
        &with("  allowedHosts: [weir.internal, \"10.0.0.7:9901\", \"[fd00::1]\"]\n  bodyTimeout: 250ms\n"),
        "t.yaml",
        Path::new("."),
    )
    .unwrap();
    assert_eq!(
        c.admin.allowed_hosts.describe(),
        "weir.internal, 10.0.0.7:9901, fd00::1",
        "a list replaces the defaults"
    );
    assert_eq!(c.admin.body_timeout, std::time::Duration::from_millis(250));
    let c = parse_yaml(&with("  allowedHosts: [\"*\"]\n"), "t.yaml", Path::new(".")).unwrap();
    assert!(c.admin.allowed_hosts.any);
    for (admin, path, reason) in [
        ("  allowedHosts: []\n", "admin.allowedHosts", "at least one"),
        (
            "  allowedHosts: [ok.example, \"bad host\"]\n",
            "admin.allowedHosts[1]",
            "expected a host name",
        ),
        (
            "  allowedHosts: [\"h:99999\"]\n",
            "admin.allowedHosts[0]",
            "expected",
        ),
        ("  bodyTimeout: 0s\n", "admin.bodyTimeout", "greater than 0"),
        ("  bodyTimeout: soon\n", "admin.bodyTimeout", ""),
    ] {
        let e = errors(&with(admin));
        assert!(
            e.errors
                .iter()
                .any(|x| x.path == path && x.reason.contains(reason)),
            "{admin}: {e}"
        );
    }
    // The listen address is answered by default.
    let dir = std::env::temp_dir().join(format!("weir-config-hosts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("w"), "write-token-0123456789\n").unwrap();
    let public = GOOD.replacen(
        "routes:",
        "admin:\n  address: 10.1.2.3:9901\n  tokenFile: w\nroutes:",
        1,
    );
    let c = parse_yaml(&public, "t.yaml", &dir).unwrap();
    assert!(c.admin.allowed_hosts.allows("10.1.2.3", Some(9901)));
    assert_eq!(
        c.admin.token_files,
        vec![("admin.tokenFile", dir.join("w"))]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn baseline_comparison_and_dry_run_compile_and_bad_settings_name_their_field() {
    let yaml = with_canary(
        r#"      stepWeight: 10
      metrics:
        - name: baseline-comparison
          thresholdRange: { min: 95 }
          interval: 1m
          dryRun: true
          compare:
            against: primary
            confidence: 0.99
            minRequests: 50
            latency: { allowedIncrease: 1.1 }
            errors: { allowedIncrease: 1.5 }
        - { name: request-duration, thresholdRange: { max: 500 } }
"#,
    );
    let c = parse_yaml(&yaml, "t.yaml", Path::new(".")).unwrap_or_else(|e| panic!("{e}"));
    let m = &c.canaries[0].analysis.metrics;
    assert_eq!(
        m[0].kind,
        MetricKind::BaselineComparison(crate::stats::compare::CompareParams {
            confidence: 0.99,
            min_requests: 50,
            latency_allowed_increase: 1.1,
            errors_allowed_increase: 1.5,
        })
    );
    assert!(m[0].dry_run && !m[1].dry_run);
    // Without compare: DESIGN §15's defaults.
    let plain = with_canary("      stepWeight: 10\n      metrics: [{ name: baseline-comparison, thresholdRange: { min: 100 } }]\n");
    let c = parse_yaml(&plain, "t.yaml", Path::new(".")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.canaries[0].analysis.metrics[0].kind,
        MetricKind::BaselineComparison(crate::stats::compare::CompareParams::DEFAULT)
    );
    let bad = with_canary(
        r#"      metrics:
        - name: baseline-comparison
          thresholdRange: { max: 95 }
          minRequests: 10
          compare:
            against: canary
            confidence: 1.5
            minRequests: 0
            latency: { allowedIncrease: 0.9 }
            errors: { allowedIncrease: .nan }
        - name: request-duration
          thresholdRange: { max: 500 }
          compare: { confidence: 0.9 }
"#,
    );
    let e = errors(&bad);
    let paths: Vec<&str> = e.errors.iter().map(|x| x.path.as_str()).collect();
    let p = "canaries[0].analysis.metrics[0]";
    for field in [
        format!("{p}.thresholdRange.min"),
        format!("{p}.minRequests"),
        format!("{p}.compare.against"),
        format!("{p}.compare.confidence"),
        format!("{p}.compare.minRequests"),
        format!("{p}.compare.latency.allowedIncrease"),
        format!("{p}.compare.errors.allowedIncrease"),
        "canaries[0].analysis.metrics[1].compare".to_string(),
    ] {
        assert!(
            paths.contains(&field.as_str()),
            "missing {field} in {paths:?}"
        );
    }
    // An unknown key inside compare is an error with its location, not ignored.
    let typo = plain.replace(
        "thresholdRange: { min: 100 }",
        "thresholdRange: { min: 100 }, compare: { confidance: 0.9 }",
    );
    assert!(errors(&typo).to_string().contains("confidance"));
}

#[test]
fn a_judge_compiles_with_defaults_and_its_baseline_and_bad_settings_name_their_field() {
    use crate::config::{OnInconclusive, DEFAULT_MAX_HOLDS};
    use crate::stats::sequential::Baseline;
    let yaml = with_canary(
        r#"      stepWeight: 10
      metrics:
        - name: baseline-comparison
          minRequests: 20
          judge:
            sequential: { alpha: 0.01 }
            minimumEffect: { errors: 2.0, latency: 1.25 }
            onInconclusive: rollback
            maxHolds: 3
        - { name: request-success-rate, thresholdRange: { min: 99 }, judge: {} }
        - { name: request-duration, judge: {} }
"#,
    );
    let c = parse_yaml(&yaml, "t.yaml", Path::new(".")).unwrap_or_else(|e| panic!("{e}"));
    let m = &c.canaries[0].analysis.metrics;
    let j = m[0].judge.expect("a judge");
    assert_eq!(j.params.alpha, 0.01);
    assert_eq!(j.params.min_errors_pp, 2.0);
    assert_eq!(j.params.min_latency_ratio, 1.25);
    assert_eq!(j.params.min_requests, 20);
    assert_eq!(
        (j.on_inconclusive, j.max_holds),
        (OnInconclusive::Rollback, 3)
    );
    assert_eq!(j.baseline, Baseline::Primary);
    let j = m[1].judge.expect("a judge");
    assert_eq!(j.baseline, Baseline::Threshold(99.0));
    assert_eq!(
        (j.on_inconclusive, j.max_holds),
        (OnInconclusive::Hold, DEFAULT_MAX_HOLDS)
    );
    assert_eq!(j.params.alpha, 0.05);
    // No thresholdRange: judged against the primary.
    assert_eq!(m[2].judge.map(|j| j.baseline), Some(Baseline::Primary));
    let bad = with_canary(
        r#"      metrics:
        - name: baseline-comparison
          thresholdRange: { min: 95 }
          compare: { confidence: 0.9 }
          judge:
            sequential: { alpha: 0.7 }
            minimumEffect: { errors: 0, latency: 0.9 }
            onInconclusive: wait
            maxHolds: -1
        - { name: request-success-rate, thresholdRange: { max: 99 }, judge: {} }
        - { name: request-duration, thresholdRange: { min: 1 }, judge: {} }
        - { name: custom, query: "up", prometheusUrl: "http://127.0.0.1:9090", thresholdRange: { min: 1 }, judge: {} }
"#,
    );
    let e = errors(&bad);
    let paths: Vec<&str> = e.errors.iter().map(|x| x.path.as_str()).collect();
    let p = "canaries[0].analysis.metrics[0]";
    for field in [
        format!("{p}.thresholdRange"),
        format!("{p}.compare"),
        format!("{p}.judge.sequential.alpha"),
        format!("{p}.judge.minimumEffect.errors"),
        format!("{p}.judge.minimumEffect.latency"),
        format!("{p}.judge.onInconclusive"),
        format!("{p}.judge.maxHolds"),
        "canaries[0].analysis.metrics[1].thresholdRange.max".to_string(),
        "canaries[0].analysis.metrics[2].thresholdRange.min".to_string(),
        "canaries[0].analysis.metrics[3].judge".to_string(),
    ] {
        assert!(
            paths.contains(&field.as_str()),
            "missing {field} in {paths:?}"
        );
    }
    // Without a judge a metric still needs its thresholdRange.
    let bare = with_canary("      metrics: [{ name: request-duration }]\n");
    assert!(errors(&bare).to_string().contains("thresholdRange"));
}

/// A route whose one match item tests `n` headers against `\w{5}` (Unicode `\w`: a
/// small pattern that compiles to about 280 KB).
fn regex_heavy(n: usize, limits: &str) -> String {
    let mut headers = String::new();
    for i in 0..n {
        headers.push_str(&format!("          x-h{i}: {{ regex: '\\w{{5}}' }}\n"));
    }
    format!("{GOOD}    match:\n      - headers:\n{headers}{limits}")
}

/// Regex amplification: a short file of many regexes that compile large. Their
/// compiled size together is held to `limits.maxTableRegexBytes` (64 MiB by
/// default); past it the table is refused at the regex that crossed it, naming the
/// budget, and no further regex is compiled.
#[test]
fn the_regexes_of_a_table_are_held_to_one_budget() {
    let e = errors(&regex_heavy(600, ""));
    assert_eq!(e.errors.len(), 1, "{e}");
    let err = &e.errors[0];
    assert!(
        err.path.starts_with("routes[0].match[0].headers.x-h") && err.path.ends_with(".regex"),
        "{err:?}"
    );
    assert!(
        err.reason.starts_with(
            "the table's regexes compile to more than limits.maxTableRegexBytes (64 MiB) together: "
        ),
        "{err:?}"
    );
    // It stopped where the budget ran out, far before the 600th.
    let before: usize = err
        .reason
        .split(": ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((100..400).contains(&before), "{err:?}");

    // The budget is the file's: a smaller one refuses sooner, a larger one accepts.
    let e = errors(&regex_heavy(5, "limits:\n  maxTableRegexBytes: 1048576\n"));
    assert!(
        e.errors[0]
            .reason
            .contains("limits.maxTableRegexBytes (1 MiB)"),
        "{e}"
    );
    let cfg = parse_yaml(
        &regex_heavy(5, "limits:\n  maxTableRegexBytes: 8388608\n"),
        "t.yaml",
        Path::new("."),
    )
    .unwrap();
    assert_eq!(cfg.limits.max_table_regex_bytes, 8 << 20);
    let e = errors(&format!("{GOOD}limits:\n  maxTableRegexBytes: 0\n"));
    assert_eq!(e.errors[0].path, "limits.maxTableRegexBytes");

    // An API write is held to the same budget.
    let raw: raw::RawConfig = serde_saphyr::from_str(&regex_heavy(5, "")).unwrap();
    let table = raw::RawTable {
        backends: raw.backends,
        routes: raw.routes,
    };
    let tight = TableRules {
        max_table_regex_bytes: 1 << 20,
        ..TableRules::default()
    };
    let e = compile_table_with(&table, tight).unwrap_err();
    assert!(
        e[0].reason.contains("limits.maxTableRegexBytes (1 MiB)"),
        "{e:?}"
    );
    assert!(compile_table_with(&table, TableRules::default()).is_ok());
}
