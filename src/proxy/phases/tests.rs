//! The pure parts of the request core: the hand-off list against every
//! route feature, the endpoint draw, and the failure table.

use super::*;
use crate::routing::Route;
use std::path::Path;

/// The routes of a table with two backends (`plain`, and `tls` with TLS
/// to its endpoint), one route per line of `routes`.
fn routes(routes: &str) -> (Vec<Route>, crate::config::TableSpec) {
    let yaml = format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nbackends:\n  plain:\n    endpoints: [\"127.0.0.1:9\"]\n  h2:\n    endpoints: [\"127.0.0.1:9\"]\n    protocol: http2\n  canary:\n    endpoints: [\"127.0.0.1:9\"]\nroutes:\n{routes}"
    );
    let cfg = crate::config::parse_yaml(&yaml, "t.yaml", Path::new("."))
        .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    (cfg.table.routing.routes.clone(), cfg.table)
}

/// Every route feature, switched on alone, is either served by the fast
/// path or hands the request off; a feature added to `Route` must be added
/// to `needs_general_path` (which does not compile until it is) and here.
#[test]
fn every_route_feature_is_served_by_the_fast_path_or_hands_off() {
    let base = "primary: plain";
    // (feature, route fields, hands off)
    let cases = [
        ("plain route", "", false),
        ("hosts", ", hosts: [a.test, \"*.b.test\"]", false),
        ("pathPrefix", ", pathPrefix: /api", false),
        (
            "canary and weight",
            ", canary: canary, canaryWeight: 30",
            false,
        ),
        ("timeout", ", timeout: 3s", false),
        (
            "A/B match",
            ", canary: canary, match: [{ headers: { x-canary: { exact: insider } } }]",
            false,
        ),
        (
            "session affinity",
            ", canary: canary, canaryWeight: 10, sessionAffinity: { cookieName: c }",
            false,
        ),
        ("mirror", ", canary: canary, mirror: { weight: 50 }", true),
        (
            "request header edits",
            ", headers: { request: { set: { x-env: prod } } }",
            true,
        ),
        (
            "response header edits",
            ", headers: { response: { remove: [server] } }",
            true,
        ),
    ];
    for (feature, fields, hands_off) in cases {
        let (r, _) = routes(&format!("  - {{ name: r, {base}{fields} }}\n"));
        assert_eq!(needs_general_path(&r[0]), hands_off, "{feature}");
    }
}

#[test]
fn a_backend_over_tls_or_http2_hands_off_and_a_mirrored_decision_too() {
    let (_, table) = routes("  - { name: r, primary: plain }\n");
    assert!(!backend_needs_general_path(table.backends.get("plain")));
    assert!(backend_needs_general_path(table.backends.get("h2")));
    // A backend the table does not know (being replaced) is plain HTTP/1.
    assert!(!backend_needs_general_path(None));
    let mut d = Decision {
        side: Side::Primary,
        reason: crate::routing::Reason::Weight,
        mirror: false,
        cookies: Default::default(),
    };
    assert!(!decision_needs_general_path(&d));
    d.mirror = true;
    assert!(decision_needs_general_path(&d));
}

/// The side draw reads the high-order bits of each half, the endpoint pick
/// their low-order ones: with the rotation, a fixed side draw still spreads
/// over the endpoints, and the value is the one both transports used.
#[test]
fn the_endpoint_draw_is_independent_of_the_side_draw() {
    assert_eq!(endpoint_draw(1), 1 << 17);
    assert_eq!(endpoint_draw(1 << 63), 1 << 16);
    // Words whose side draw is the same (only bits in the middle of the
    // high half differ) still pick each of 4 endpoints: those bits are the
    // low-order bits of the endpoint draw.
    let mut seen = [false; 4];
    let fixed = (0x80u64 << 56) | (0x80 << 24);
    for low in 0..4u64 {
        let r = fixed | (low << 47);
        assert_eq!(
            crate::routing::Draw::from_u64(r),
            crate::routing::Draw::from_u64(fixed)
        );
        seen[(endpoint_draw(r) % 4) as usize] = true;
    }
    assert_eq!(seen, [true; 4]);
}
