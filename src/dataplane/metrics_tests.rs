use super::*;
use crate::proxy::errors::ProxyError;

#[test]
fn records_render_with_labels() {
    let m = Metrics::new();
    let r = m.route("app", "blue", Some("green"));
    r.record(Role::Primary, 200, Duration::from_millis(3));
    r.record(Role::Primary, 200, Duration::from_millis(4));
    r.record(Role::Canary, 503, Duration::from_millis(1));
    r.record_proxy_error(Role::Canary, ProxyError::Timeout, Duration::from_secs(1));
    let text = m.handle.render();
    assert!(
        text.contains(
            r#"weir_requests_total{route="app",role="primary",backend="blue",code="200"} 2"#
        ),
        "{text}"
    );
    assert!(text.contains(
        r#"weir_requests_total{route="app",role="canary",backend="green",code="504"} 1"#
    ));
    r.record_client_error(Role::Canary, 499);
    let text = m.handle.render();
    assert!(text.contains(
        r#"weir_requests_total{route="app",role="canary",backend="green",code="499"} 1"#
    ));
    assert!(
        text.contains(
            r#"weir_request_duration_seconds_count{route="app",role="canary",backend="green"} 2"#
        ),
        "no latency sample for a client error: {text}"
    );
    assert!(
        text.contains(r#"weir_upstream_errors_total{route="app",role="canary",kind="timeout"} 1"#)
    );
    assert!(text.contains(
        r#"weir_request_duration_seconds_bucket{route="app",role="primary",backend="blue",le="0.005"} 2"#
    ));
    // The same name gives the same handles.
    assert!(Arc::ptr_eq(&r, &m.route("app", "blue", Some("green"))));
}

#[test]
fn a_slot_swap_labels_requests_with_the_new_backends() {
    let m = Metrics::new();
    let before = m.route("app", "blue", Some("green"));
    let after = m.route("app", "green", Some("blue"));
    assert!(!Arc::ptr_eq(&before, &after));
    before.record(Role::Canary, 200, Duration::from_millis(1));
    after.record(Role::Primary, 200, Duration::from_millis(1));
    after.record(Role::Canary, 500, Duration::from_millis(1));
    let text = m.handle.render();
    for line in [
        r#"weir_requests_total{route="app",role="canary",backend="green",code="200"} 1"#,
        r#"weir_requests_total{route="app",role="primary",backend="green",code="200"} 1"#,
        r#"weir_requests_total{route="app",role="canary",backend="blue",code="500"} 1"#,
        r#"weir_request_duration_seconds_count{route="app",role="primary",backend="green"} 1"#,
    ] {
        assert!(text.contains(line), "missing {line} in {text}");
    }
    // Swapping back finds the first handles again.
    assert!(Arc::ptr_eq(&before, &m.route("app", "blue", Some("green"))));
}

struct Fixed(&'static str);

impl ScrapeSection for Fixed {
    fn render(&self, out: &mut String) {
        out.push_str(self.0);
    }
}

#[test]
fn sections_are_appended_to_the_scrape() {
    let m = Metrics::new();
    m.add_section(Arc::new(Fixed("# TYPE x_total counter\nx_total 3\n")));
    let store = TableStore::with_metrics(
        crate::config::compile_table(&Default::default()).expect("empty table"),
        m.clone(),
    );
    let text = m.render(&store);
    assert!(text.ends_with("x_total 3\n"), "{text}");
    assert!(text.contains("weir_table_version"), "{text}");
}

#[test]
fn more_codes_than_slots_are_all_counted() {
    let m = Metrics::new();
    let r = m.route("many", "blue", None);
    for code in 200..240u16 {
        r.record(Role::Primary, code, Duration::ZERO);
        r.record(Role::Primary, code, Duration::ZERO);
    }
    let text = m.handle.render();
    for code in 200..240u16 {
        let line = format!(
            r#"weir_requests_total{{route="many",role="primary",backend="blue",code="{code}"}} 2"#
        );
        assert!(text.contains(&line), "missing {line}");
    }
}

#[test]
fn two_registries_are_independent() {
    let a = Metrics::new();
    let b = Metrics::new();
    a.route("x", "blue", None)
        .record(Role::Primary, 200, Duration::ZERO);
    assert!(a.handle.render().contains("weir_requests_total"));
    assert!(!b.handle.render().contains(r#"route="x""#));
}

/// The `"weir_…"` string literals of `source`.
fn weir_literals(source: &str) -> Vec<&str> {
    source
        .match_indices("\"weir_")
        .map(|(i, _)| {
            let rest = &source[i + 1..];
            &rest[..rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len())]
        })
        .collect()
}

/// The `# TYPE` lines of a scrape: (name, kind).
fn declared(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect()
}

/// `weir check` judges queries against `config::series`; every series this registry
/// renders must be there, with its kind, or a valid query would be refused.
#[test]
fn every_series_rendered_here_is_in_configs_list() {
    use crate::config::series::family;
    for name in weir_literals(include_str!("metrics.rs")) {
        assert!(family(name).is_some(), "{name} is not in config::series");
    }
    let yaml = "backends:\n  blue:\n    endpoints: [\"127.0.0.1:9001\"]\n    circuitBreaker: { maxRequests: 4 }\n  green:\n    endpoints: [\"127.0.0.1:9002\"]\nroutes:\n  - name: app\n    primary: blue\n    canary: green\n    mirror: { enabled: true }\n    retries: { attempts: 2, on: [connect-failure] }\n    rateLimit: { requestsPerSecond: 10, burst: 5, key: client-ip }\n";
    let cfg = crate::config::parse_yaml(yaml, "t.yaml", std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("{e}"));
    let m = Metrics::new();
    let store = TableStore::with_metrics(cfg.table.clone(), m.clone());
    let r = m.route("app", "blue", Some("green"));
    r.record(Role::Canary, 200, Duration::from_millis(3));
    r.record_proxy_error(
        Role::Primary,
        ProxyError::Upstream,
        Duration::from_millis(1),
    );
    r.record_connect_error(Role::Primary);
    let text = m.render(&store);
    let types = declared(&text);
    for (name, kind) in &types {
        let Some(f) = family(name) else {
            panic!("{name} is rendered but not in config::series:\n{text}");
        };
        assert_eq!(*kind, f.kind.type_name(), "{name}");
    }
    // The render above covers every family of this module.
    for name in weir_literals(include_str!("metrics.rs")) {
        assert!(
            types.iter().any(|(n, _)| *n == name),
            "{name} not rendered:\n{text}"
        );
    }
}
