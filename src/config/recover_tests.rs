use super::*;
use crate::config::raw::RawConfig;

fn problems(src: &str) -> Vec<(String, String, String)> {
    let r = parse_all::<RawConfig>(src);
    r.problems
        .iter()
        .map(|p| {
            let at = p.span.clone().map_or(String::new(), |s| src[s].to_string());
            (p.path.clone(), p.reason.clone(), at)
        })
        .collect()
}

const ROUTE: &str = "routes:\n  - name: app\n    primary: blue\n";

#[test]
fn a_valid_text_has_no_problem_and_a_value() {
    let r = parse_all::<RawConfig>(ROUTE);
    assert!(r.problems.is_empty());
    assert_eq!(r.value.unwrap().routes[0].primary, "blue");
}

#[test]
fn every_unknown_field_and_wrong_type_is_found_in_one_pass() {
    let src = "routes:\n  - name: app\n    primary: blue\n    canaryWieght: 5\n    timeout: [1]\n    hosts: a.test\n  - name: b\n    primary: blue\n    pathPrefx: /b\nbackends:\n  blue:\n    endpoints: [\"x:1\"]\n    healthCheck: { path: /h, intervall: 5s }\n";
    assert_eq!(
        problems(src),
        vec![
            (
                "routes[0]".into(),
                "unknown field `canaryWieght`".into(),
                "canaryWieght".into()
            ),
            (
                "routes[0].timeout".into(),
                "expected a string, found a list".into(),
                "[1]".into()
            ),
            (
                "routes[0].hosts".into(),
                "expected a list, found `a.test`".into(),
                "a.test".into()
            ),
            (
                "routes[1]".into(),
                "unknown field `pathPrefx`".into(),
                "pathPrefx".into()
            ),
            (
                "backends.blue.healthCheck".into(),
                "unknown field `intervall`".into(),
                "intervall".into()
            ),
        ]
    );
    let r = parse_all::<RawConfig>(src);
    let v = r.value.expect("repaired far enough to deserialize");
    // What was cut is gone; what was right is kept.
    assert_eq!(v.routes[1].path_prefix, None);
    assert_eq!(v.backends["blue"].endpoints, vec!["x:1".to_string()]);
    // The placeholders' paths are remembered.
    assert!(r.repaired.contains(&"routes[0].timeout".to_string()));
    assert!(r.repaired.contains(&"routes[0].hosts".to_string()));
    assert!(r.misspelt.contains(&"routes[1].pathPrefix".to_string()));
}

#[test]
fn the_only_key_of_a_mapping_and_flow_entries_are_cut_cleanly() {
    let src = "canaries:\n  - name: c\n    route: r\n    analysis:\n      stepWieght: 5\nroutes:\n  - { name: r, primary: b, canaryWieght: 5, timeout: 1s }\n  - { name: s, primary: b, tiemout: 1s }\n";
    let got = problems(src);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[0].0, "canaries[0].analysis");
    assert_eq!(got[1].0, "routes[0]");
    assert_eq!(
        got[2],
        (
            "routes[1]".into(),
            "unknown field `tiemout`".into(),
            "tiemout".into()
        )
    );
    let v = parse_all::<RawConfig>(src).value.unwrap();
    assert_eq!(v.routes[0].timeout.as_deref(), Some("1s"));
}

#[test]
fn missing_and_duplicate_keys_are_reported_and_passed() {
    let src = "routes:\n  - name: a\n  - primary: b\n    primary: c\n";
    let got = problems(src);
    assert_eq!(
        got,
        vec![
            (
                "routes[0]".into(),
                "missing required field `primary`".into(),
                "name".into()
            ),
            (
                "routes[1]".into(),
                "duplicate key `primary`".into(),
                "primary".into()
            ),
            (
                "routes[1]".into(),
                "missing required field `name`".into(),
                "primary".into()
            ),
        ]
    );
    let r = parse_all::<RawConfig>(src);
    assert_eq!(
        r.problems[1].span,
        Some(39..46),
        "the second `primary` is underlined"
    );
    assert_eq!(
        r.problems[1].note.as_deref(),
        Some("`primary` is first set on line 3")
    );
    assert!(r.repaired.contains(&"routes[0].primary".to_string()));
}

#[test]
fn a_syntax_error_ends_the_search_with_a_hint() {
    let src = "backends:\n  a:\n    endpoints: [\"x:1\"]\n   revisionPath: /v\n";
    let r = parse_all::<RawConfig>(src);
    assert!(r.value.is_none());
    assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
    let p = &r.problems[0];
    assert!(p.reason.starts_with("invalid YAML: "), "{p:?}");
    assert_eq!(line_of(src, p.span.clone().unwrap().start), 4);
    assert_eq!(
        p.help.as_deref(),
        Some("this line is indented by 3 spaces and the line above by 4: the keys of one mapping must line up")
    );
}

#[test]
fn problems_before_a_syntax_error_are_kept() {
    let src = "routes:\n  - name: a\n    primary: b\n    canaryWeight: ten\nlisteners: [\n";
    let got = problems(src);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].1, "expected an integer, found `ten`");
    assert!(got[1].1.starts_with("invalid YAML"), "{got:?}");
}

#[test]
fn an_empty_value_and_a_block_scalar_are_replaced() {
    let src = "routes:\n  - name: a\n    primary:\n    hosts: |\n      a\n    canaryWeight: x\n";
    let got = problems(src);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[0].1, "expected a string, found nothing (null)");
    assert_eq!(got[0].2, "primary", "an empty value: its key is underlined");
    assert_eq!(got[1].1, "expected a list, found `a`");
    assert_eq!(got[1].0, "routes[0].hosts");
    assert_eq!(got[2].0, "routes[0].canaryWeight");
}

#[test]
fn a_dedented_field_gets_an_indentation_hint() {
    let src = "backends:\n  a:\n    endpoints: [\"x:1\"]\n  revisionPath: /v\n";
    let r = parse_all::<RawConfig>(src);
    assert_eq!(r.problems.len(), 1);
    assert_eq!(
        r.problems[0].help.as_deref(),
        Some("if `revisionPath` is a field of `a` above, indent it as far as `endpoints`")
    );
}

#[test]
fn the_search_is_bounded() {
    let mut src = String::from("routes:\n");
    for i in 0..80 {
        src.push_str(&format!("  - {{ name: r{i}, primary: b, bogus: 1 }}\n"));
    }
    let r = parse_all::<RawConfig>(&src);
    assert_eq!(r.problems.len(), MAX_PROBLEMS);
}

#[test]
fn a_mapping_ending_in_an_empty_value_is_cut_whole() {
    // A Compose file: two unknown top-level keys, the last one's value ending in `key:`.
    let src = "services:\n  app:\n    image: x\n\nvolumes:\n  # state\n  weir-state:\n";
    let got = problems(src);
    assert_eq!(
        got.iter().map(|p| p.1.as_str()).collect::<Vec<_>>(),
        vec!["unknown field `services`", "unknown field `volumes`"]
    );
    assert!(parse_all::<RawConfig>(src).value.is_some());
}

/// Every shipped config, broken line by line in three ways: the search never
/// panics, never loops past its bounds, and never stays silent about a text
/// serde refuses.
#[test]
fn broken_shipped_configs_are_never_a_crash_and_never_silent() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/config");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let src = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = src.lines().collect();
        for i in 0..lines.len() {
            let line = lines[i];
            let mutations = [
                format!(" {line}"),
                line.replace(": ", ": [x, {y: 1}] #"),
                line.replacen(|c: char| c.is_ascii_alphabetic(), "Q", 1),
            ];
            for m in mutations {
                if m == line {
                    continue;
                }
                let mut all = lines.clone();
                all[i] = &m;
                let text = all.join("\n");
                let refused = serde_saphyr::from_str::<RawConfig>(&text).is_err();
                let r = parse_all::<RawConfig>(&text);
                assert_eq!(
                    refused,
                    !r.problems.is_empty(),
                    "{}:{}: {m:?}: {:?}",
                    path.display(),
                    i + 1,
                    r.problems
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "{checked}");
}
