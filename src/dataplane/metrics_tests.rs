use super::*;
use crate::proxy::errors::ProxyError;

#[test]
fn records_render_with_labels() {
    let m = Metrics::new();
    let r = m.route("app");
    r.record(Role::Primary, 200, Duration::from_millis(3));
    r.record(Role::Primary, 200, Duration::from_millis(4));
    r.record(Role::Canary, 503, Duration::from_millis(1));
    r.record_proxy_error(Role::Canary, ProxyError::Timeout, Duration::from_secs(1));
    let text = m.handle.render();
    assert!(
        text.contains(r#"weir_requests_total{route="app",role="primary",code="200"} 2"#),
        "{text}"
    );
    assert!(text.contains(r#"weir_requests_total{route="app",role="canary",code="504"} 1"#));
    r.record_client_error(Role::Canary, 499);
    let text = m.handle.render();
    assert!(text.contains(r#"weir_requests_total{route="app",role="canary",code="499"} 1"#));
    assert!(
        text.contains(r#"weir_request_duration_seconds_count{route="app",role="canary"} 2"#),
        "no latency sample for a client error: {text}"
    );
    assert!(
        text.contains(r#"weir_upstream_errors_total{route="app",role="canary",kind="timeout"} 1"#)
    );
    assert!(text.contains(
        r#"weir_request_duration_seconds_bucket{route="app",role="primary",le="0.005"} 2"#
    ));
    // The same name gives the same handles.
    assert!(Arc::ptr_eq(&r, &m.route("app")));
}

#[test]
fn more_codes_than_slots_are_all_counted() {
    let m = Metrics::new();
    let r = m.route("many");
    for code in 200..240u16 {
        r.record(Role::Primary, code, Duration::ZERO);
        r.record(Role::Primary, code, Duration::ZERO);
    }
    let text = m.handle.render();
    for code in 200..240u16 {
        let line = format!(r#"weir_requests_total{{route="many",role="primary",code="{code}"}} 2"#);
        assert!(text.contains(&line), "missing {line}");
    }
}

#[test]
fn two_registries_are_independent() {
    let a = Metrics::new();
    let b = Metrics::new();
    a.route("x").record(Role::Primary, 200, Duration::ZERO);
    assert!(a.handle.render().contains("weir_requests_total"));
    assert!(!b.handle.render().contains(r#"route="x""#));
}
