//! Config errors of the Istio match vocabulary, on routes and on a
//! canary's `analysis.match`, each naming its field.

use super::*;
use std::path::Path;

fn with_match(item: &str) -> String {
    format!(
        r#"
backends:
  app-blue: {{ endpoints: ["127.0.0.1:9001"] }}
  app-green: {{ endpoints: ["127.0.0.1:9101"] }}
routes:
  - name: app
    primary: app-blue
    canary: app-green
    match:
      - {item}
canaries:
  - name: app
    route: app
    analysis:
      interval: 1m
      threshold: 5
      iterations: 3
      match:
        - {item}
"#
    )
}

/// The errors of `item` at `field` (under the route, and the same under
/// the canary), each with its line and column.
fn error_at(item: &str, field: &str, reason: &str) {
    let yaml = with_match(item);
    let e = match parse_yaml(&yaml, "t.yaml", Path::new(".")) {
        Ok(_) => panic!("{item}: unexpectedly valid"),
        Err(e) => e,
    };
    for prefix in ["routes[0].match[0]", "canaries[0].analysis.match[0]"] {
        let path = format!("{prefix}{field}");
        let found = e.errors.iter().find(|x| x.path == path);
        let Some(found) = found else {
            panic!("{item}: expected an error at {path}, got:\n{e}")
        };
        assert!(
            found.reason.contains(reason),
            "{item}: {path}: {:?} lacks {reason:?}",
            found.reason
        );
        assert!(found.location.is_some(), "{item}: no line:col for {path}");
    }
}

#[test]
fn the_istio_vocabulary_compiles_on_routes_and_analysis_blocks() {
    let item = "{ headers: { x-beta: { exact: \"1\" } }, withoutHeaders: { x-internal: { present: true } }, uri: { prefix: /Api }, ignoreUriCase: true, scheme: { exact: https }, authority: { exact: app.example.com }, port: 8443 }";
    let c =
        parse_yaml(&with_match(item), "t.yaml", Path::new(".")).unwrap_or_else(|e| panic!("{e}"));
    let rule = &c.table.routing.routes[0].matches[0];
    assert!(rule.uri_ignore_case);
    assert_eq!(rule.port, Some(8443));
    assert_eq!(rule.without_headers.len(), 1);
    assert!(rule.scheme.is_some() && rule.authority.is_some());
    // Each alone is a condition (not an empty item).
    for item in [
        "{ withoutHeaders: { x-a: { present: true } } }",
        "{ scheme: { exact: http } }",
        "{ authority: { prefix: app } }",
        "{ port: 80 }",
    ] {
        parse_yaml(&with_match(item), "t.yaml", Path::new("."))
            .unwrap_or_else(|e| panic!("{item}: {e}"));
    }
}

#[test]
fn bad_istio_conditions_name_their_field_and_the_reason() {
    error_at(
        "{ sourceLabels: { app: frontend } }",
        ".sourceLabels",
        "use `sourceIp`",
    );
    error_at(
        "{ headers: { x-a: { present: true } }, sourceLabels: { app: frontend } }",
        ".sourceLabels",
        "sourceIp",
    );
    error_at(
        "{ ignoreUriCase: true, headers: { x-a: { present: true } } }",
        ".ignoreUriCase",
        "uri",
    );
    error_at("{ port: 0 }", ".port", "1..65535");
    error_at("{ port: 70000 }", ".port", "1..65535");
    error_at(
        "{ withoutHeaders: { \"a b\": { exact: x } } }",
        ".withoutHeaders.a b",
        "invalid header name",
    );
    error_at(
        "{ withoutHeaders: { x-a: { exact: x, prefix: y } } }",
        ".withoutHeaders.x-a",
        "exactly one",
    );
    error_at("{ scheme: { regex: \"(\" } }", ".scheme.regex", "");
    error_at("{ authority: {} }", ".authority", "exactly one");
    error_at(
        "{ uri: { regex: \"(\" }, ignoreUriCase: true }",
        ".uri.regex",
        "",
    );
}
