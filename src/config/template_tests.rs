use super::*;

fn vars() -> TemplateVars {
    TemplateVars {
        name: "app".into(),
        namespace: "default".into(),
        target: "web".into(),
        interval: "1m".into(),
        variables: BTreeMap::from([
            ("cluster".to_string(), "dev".to_string()),
            ("consumer_group".to_string(), "my_consumer".to_string()),
        ]),
        run_start: "1796187646".into(),
        run_age: "37s".into(),
    }
}

#[test]
fn the_run_variables_are_substituted() {
    assert_eq!(
        render("rate(x[{{ runAge }}] @ {{ runStart }})", &vars()),
        Ok("rate(x[37s] @ 1796187646)".to_string())
    );
}

#[test]
fn every_variable_is_substituted() {
    let q = "{{ name }}|{{ namespace }}|{{ target }}|{{ service }}|{{ ingress }}|{{ route }}|{{ interval }}|{{ variables.cluster }}|{{ variables.consumer_group }}";
    assert_eq!(
        render(q, &vars()),
        Ok("app|default|web|web|web|web|1m|dev|my_consumer".to_string())
    );
}

#[test]
fn flaggers_kafka_example_renders_as_flagger_renders_it() {
    // fluxcd/flagger pkg/metrics/observers/render_test.go
    let q = r#"delta(max by (consumer_group) (kafka_consumer_current_offset{cluster="{{ variables.cluster }}", consumer_group="{{ variables.consumer_group }}"}[{{ interval }}]))"#;
    assert_eq!(
        render(q, &vars()).unwrap(),
        r#"delta(max by (consumer_group) (kafka_consumer_current_offset{cluster="dev", consumer_group="my_consumer"}[1m]))"#
    );
}

#[test]
fn spacing_inside_braces_is_free_and_trim_markers_trim() {
    assert_eq!(
        render("a{{name}}b{{   target\t}}c", &vars()).unwrap(),
        "aappbwebc"
    );
    assert_eq!(
        render("x  \n {{- name -}}  \n y", &vars()).unwrap(),
        "xappy"
    );
    assert_eq!(render("x {{- name }} y", &vars()).unwrap(), "xapp y");
    assert_eq!(render("x {{ name -}} y", &vars()).unwrap(), "x appy");
    // Text without actions, and a lone "}}", are copied as written.
    assert_eq!(render("sum(up) }}", &vars()).unwrap(), "sum(up) }}");
    assert_eq!(render("", &vars()).unwrap(), "");
}

#[test]
fn a_missing_variable_is_refused_by_name() {
    let q = "{{ variables.cluster }} {{ variables.region }} {{ variables.zone }} {{ variables.region }}";
    let pieces = parse(q).unwrap();
    assert_eq!(
        missing(&pieces, &vars().variables),
        vec!["region".to_string(), "zone".to_string()]
    );
    let e = render(q, &vars()).unwrap_err();
    assert_eq!(e, "{{ variables.region }} is not set in templateVariables");
}

#[test]
fn unknown_variables_and_other_actions_are_refused() {
    let e = parse("rate(x[{{ window }}])").unwrap_err();
    assert!(
        e.contains("unknown template variable {{ window }}") && e.contains("target"),
        "{e}"
    );
    for bad in [
        "{{ if true }}x{{ end }}",
        "{{ .Name }}",
        "{{ name | printf }}",
        "{{}}",
    ] {
        assert!(parse(bad).is_err(), "{bad} should be refused");
    }
    let argo = parse("{{ args.service-name }}").unwrap_err();
    assert!(argo.contains("variables.service-name"), "{argo}");
    let key = parse("{{ variables.my-key }}").unwrap_err();
    assert!(key.contains("letters, digits and '_'"), "{key}");
    let open = parse("sum(x{a=\"{{ name \"})").unwrap_err();
    assert!(open.starts_with("unclosed {{"), "{open}");
}
