use super::*;

const BASE: &str = "listeners:\n  - name: http\n    address: 127.0.0.1:0\nbackends:\n  app-blue:\n    endpoints: [\"127.0.0.1:9001\"]\n  app-green:\n    endpoints: [\"127.0.0.1:9002\"]\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\ncanaries:\n  - name: app\n    route: app\n    analysis:\n      stepWeight: 10\n";

fn check(src: &str) -> Checked {
    check_source(src, "t.yaml", Path::new("."))
}

/// The warnings' paths, after adding `extra` under the canary's analysis.
fn warned(analysis_extra: &str, canary_extra: &str) -> Vec<String> {
    let src = BASE.replace(
        "    analysis:\n      stepWeight: 10\n",
        &format!("{canary_extra}    analysis:\n      stepWeight: 10\n{analysis_extra}"),
    );
    let c = check(&src);
    c.report
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .map(|d| d.error.path.clone())
        .collect()
}

#[test]
fn a_good_file_has_an_empty_report_and_loads() {
    let c = check(BASE);
    assert!(c.report.diagnostics.is_empty(), "{:?}", c.report);
    assert_eq!(c.report.render(false), "");
    assert!(c.loaded.is_some());
}

#[test]
fn the_plain_rendering_is_cargo_s() {
    let src = BASE.replace("stepWeight: 10", "stepWieght: 10");
    let c = check(&src);
    assert!(c.loaded.is_none());
    assert_eq!(
        c.report.render(false),
        "error: canaries[0].analysis: unknown field `stepWieght`
  --> t.yaml:17:7
   |
17 |       stepWieght: 10
   |       ^^^^^^^^^^
   |
   = help: did you mean `stepWeight`?

error: could not validate `t.yaml` due to 1 previous error
"
    );
}

#[test]
fn colour_is_only_on_request() {
    let c = check(&BASE.replace("stepWeight: 10", "stepWieght: 10"));
    assert!(!c.report.render(false).contains('\x1b'));
    assert!(c.report.render(true).contains("\x1b["));
}

#[test]
fn parse_and_validation_errors_come_together_in_file_order_with_warnings_counted() {
    let src = BASE
        .replace(
            "primary: app-blue",
            "primary: app-blu\n    canaryWeight: ten",
        )
        .replace(
            "stepWeight: 10",
            "stepWeight: 10\n      primaryReadyThreshold: 100",
        );
    let c = check(&src);
    let lines: Vec<String> = c
        .report
        .diagnostics
        .iter()
        .map(|d| format!("{:?} {}: {}", d.severity, d.error.path, d.error.reason))
        .collect();
    assert_eq!(
        lines,
        vec![
            "Error routes[0].primary: unknown backend \"app-blu\"",
            "Error routes[0].canaryWeight: expected an integer, found `ten`",
            "Warning canaries[0].analysis.primaryReadyThreshold: ignored: accepted for Flagger compatibility; weir sends traffic only to endpoints whose health checks pass",
        ]
    );
    assert_eq!(
        c.report.diagnostics[0].help.as_deref(),
        Some("did you mean `app-blue`?")
    );
    let text = c.report.render(false);
    assert!(
        text.ends_with(
            "error: could not validate `t.yaml` due to 2 previous errors; 1 warning emitted\n"
        ),
        "{text}"
    );
    // The library's loaders see the same errors, one per line.
    let e = c.report.config_errors();
    assert_eq!(e.errors.len(), 2);
    assert_eq!(
        e.to_string().lines().next(),
        Some("t.yaml:11:5: routes[0].primary: unknown backend \"app-blu\"")
    );
}

#[test]
fn what_a_placeholder_or_a_misspelling_causes_is_not_reported_again() {
    // `primary: [x]` is replaced by '' (an unknown backend); `stepWieght` leaves
    // the canary without stepWeight: neither consequence is a second error.
    let src = BASE
        .replace("primary: app-blue", "primary: [app-blue]")
        .replace("stepWeight: 10", "stepWieght: 10");
    let c = check(&src);
    let paths: Vec<&str> = c
        .report
        .diagnostics
        .iter()
        .map(|d| d.error.path.as_str())
        .collect();
    assert_eq!(
        paths,
        vec!["routes[0].primary", "canaries[0].analysis"],
        "{:?}",
        c.report
    );
}

#[test]
fn warnings_alone_exit_clean_with_cargo_s_summary() {
    let c = check(&BASE.replace(
        "stepWeight: 10",
        "stepWeight: 10\n      stepWeightPromotion: 50",
    ));
    assert!(c.loaded.is_some());
    assert_eq!(c.report.errors(), 0);
    let text = c.report.render(false);
    assert!(
        text.ends_with("warning: `t.yaml` generated 1 warning\n"),
        "{text}"
    );
    // The loaded config carries them too, located.
    let (_, cfg) = c.loaded.unwrap();
    assert_eq!(cfg.warnings[0].location, Some((18, 7)));
}

#[test]
fn every_ignored_field_is_warned_about_and_only_where_it_is_ignored() {
    let a = "canaries[0].analysis";
    let cases: Vec<(&str, &str, Vec<String>)> = vec![
        ("      stepWeightPromotion: 20\n", "", vec![format!("{a}.stepWeightPromotion")]),
        ("      stepWeightPromotion: 20\n", "    promotion: webhook\n", vec![]),
        ("", "    progressDeadline: 60s\n", vec!["canaries[0].progressDeadline".into()]),
        ("", "    promotion: webhook\n    progressDeadline: 60s\n", vec![]),
        ("      primaryReadyThreshold: 100\n      canaryReadyThreshold: 100\n", "", vec![
            format!("{a}.primaryReadyThreshold"),
            format!("{a}.canaryReadyThreshold"),
        ]),
        ("      webhooks:\n        - { name: h, url: 'http://127.0.0.1:1/', muteAlert: true }\n", "", vec![format!("{a}.webhooks[0].muteAlert")]),
        ("      webhooks:\n        - { name: h, url: 'http://127.0.0.1:1/', muteAlert: true }\n      alerts:\n        - { name: x, providerRef: { name: p } }\n", "", vec![]),
        ("      mirrorWeight: 50\n", "", vec![format!("{a}.mirrorWeight")]),
        ("      mirrorWeight: 50\n      mirror: true\n", "", vec![]),
        ("      maxWeight: 30\n", "", vec![]),
        ("      metrics:\n        - { name: q, query: up, prometheusUrl: 'http://127.0.0.1:9090', minRequests: 5, thresholdRange: { min: 1 } }\n", "", vec![format!("{a}.metrics[0].minRequests")]),
        ("      metrics:\n        - { name: request-success-rate, minRequests: 5, thresholdRange: { min: 99 } }\n", "", vec![]),
        ("", "    dataPlaneTokenFile: token\n", vec!["canaries[0].dataPlaneTokenFile".into()]),
        ("      sessionAffinity: { cookieName: c, primaryMaxAge: 60 }\n", "", vec![format!("{a}.sessionAffinity.primaryMaxAge")]),
        ("      sessionAffinity: { cookieName: c, primaryCookieName: p, primaryMaxAge: 60 }\n", "", vec![]),
    ];
    for (analysis, canary, want) in cases {
        assert_eq!(warned(analysis, canary), want, "{analysis}{canary}");
    }
}

#[test]
fn max_weight_is_ignored_with_step_weights_or_iterations() {
    let src = BASE.replace(
        "stepWeight: 10",
        "stepWeights: [10, 20]\n      maxWeight: 50",
    );
    let w: Vec<String> = check(&src)
        .report
        .diagnostics
        .iter()
        .map(|d| d.error.path.clone())
        .collect();
    assert_eq!(w, vec!["canaries[0].analysis.maxWeight"]);
    let src = BASE.replace("stepWeight: 10", "iterations: 5\n      maxWeight: 50");
    let c = check(&src);
    assert_eq!(c.report.warnings(), 1, "{:?}", c.report);
    assert!(c.report.diagnostics[0].error.reason.contains("iterations"));
}

#[test]
fn route_and_provider_fields_without_effect_are_warned_about() {
    let src = BASE.replace(
        "    canary: app-green\n",
        "    canary: app-green\n  - name: solo\n    hosts: [solo.test]\n    primary: app-blue\n    sessionAffinity: { cookieName: c }\n",
    ) + "alertProviders:\n  teams: { type: msteams, address: 'https://example.com/x', channel: '#x', username: me }\n  chat: { type: slack, address: 'https://example.com/y', channel: '#x', username: me }\n";
    let c = check(&src);
    let w: Vec<&str> = c
        .report
        .diagnostics
        .iter()
        .map(|d| d.error.path.as_str())
        .collect();
    assert_eq!(
        w,
        vec![
            "routes[1].sessionAffinity",
            "alertProviders.teams.channel",
            "alertProviders.teams.username"
        ],
        "{:?}",
        c.report
    );
}

#[test]
fn an_unreadable_file_is_one_error_without_excerpt() {
    let c = check_file(Path::new("/nonexistent/weir.yaml"));
    let text = c.report.render(false);
    assert!(text.starts_with("error: cannot read file: "), "{text}");
    assert!(text.contains("\n--> /nonexistent/weir.yaml\n"), "{text}");
}

#[test]
fn a_word_close_to_an_allowed_one_gets_a_suggestion() {
    let c = check(&BASE.replace("    route: app\n", "    route: app\n    promotion: swapp\n"));
    let d = &c.report.diagnostics[0];
    assert_eq!(d.error.path, "canaries[0].promotion");
    assert_eq!(d.help.as_deref(), Some("did you mean `swap`?"));
    let hook =
        "      webhooks:\n        - { name: h, type: pre-rolout, url: 'http://127.0.0.1:1/' }\n";
    let c = check(&BASE.replace("stepWeight: 10\n", &format!("stepWeight: 10\n{hook}")));
    assert_eq!(
        c.report.diagnostics[0].help.as_deref(),
        Some("did you mean `pre-rollout`?")
    );
    // Choices that are not single words, or nothing close: no guess.
    assert_eq!(
        choice_help("expected ip:port such as 0.0.0.0:8080 (got \"x\")"),
        None
    );
    assert_eq!(
        choice_help("expected swap or webhook (got \"canary\")"),
        None
    );
}
