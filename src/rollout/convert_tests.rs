//! Config → spec conversion and route effects, including the session-affinity life
//! cycle through the table store's own validation.

use std::path::Path;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::*;
use crate::config::raw::RawTable;
use crate::config::{compile_table, parse_yaml};
use crate::rollout::spec::{HookKind, Promotion, Strategy};

const BASE: &str = r#"
listeners: [{ name: http, address: "127.0.0.1:0" }]
backends:
  app-blue: { endpoints: ["127.0.0.1:9001"], revisionPath: /version }
  app-green: { endpoints: ["127.0.0.1:9101"], revisionPath: /version }
routes:
  - name: app
    primary: app-blue
    canary: app-green
    mirror: { maxBodyBytes: 2048 }
canaries:
  - name: app
    route: app
"#;

fn config(analysis: &str) -> crate::config::Config {
    let yaml = format!("{BASE}{analysis}");
    parse_yaml(&yaml, "t.yaml", Path::new(".")).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

fn def(analysis: &str) -> CanaryDef {
    canary_def(&config(analysis).canaries[0])
}

/// The route `app` as configured (no run yet).
fn route() -> RawRoute {
    config("    analysis: { stepWeight: 10 }\n")
        .table
        .raw
        .routes[0]
        .clone()
}

#[test]
fn flagger_analysis_block_converts_with_defaults() {
    let d = def(r#"    watchRevision: true
    analysis:
      interval: 30s
      stepWeight: 20
      maxWeight: 60
      metrics:
        - name: request-success-rate
          thresholdRange: { min: 99 }
        - name: request-duration
          thresholdRange: { max: 500 }
          interval: 1m
          minRequests: 0
        - name: errors
          thresholdRange: { max: 1 }
          query: 'sum(rate(x{route="{{ route }}"}[{{ interval }}]))'
          prometheusUrl: http://127.0.0.1:9090/
      webhooks:
        - { name: gate, type: confirm-promotion, url: "http://127.0.0.1:1/gate", retries: 2 }
        - { name: load, url: "http://127.0.0.1:1/load", timeout: 3s }
"#);
    let a = &d.spec.analysis;
    assert_eq!(d.spec.name, "app");
    assert_eq!(d.route, "app");
    assert!(d.watch_revision);
    assert_eq!(d.spec.promotion, Promotion::Swap);
    assert_eq!(d.spec.progress_deadline_ms, 600_000);
    assert_eq!(a.interval_ms, 30_000);
    assert_eq!(a.threshold, DEFAULT_THRESHOLD);
    assert_eq!((a.step_weight, a.max_weight), (20, 60));
    assert_eq!(a.strategy(), Strategy::Canary);
    assert_eq!(
        a.metrics[0].interval_ms, 30_000,
        "metric interval defaults to the analysis interval"
    );
    assert_eq!(a.metrics[0].min, Some(99.0));
    assert_eq!(a.metrics[1].interval_ms, 60_000);
    assert_eq!(a.metrics[1].max, Some(500.0));
    assert_eq!(d.metrics[0].kind, MetricKind::SuccessRate);
    assert_eq!(d.metrics[0].min_requests, DEFAULT_MIN_REQUESTS);
    assert_eq!(d.metrics[1].kind, MetricKind::Duration);
    assert_eq!(d.metrics[1].min_requests, 0);
    assert_eq!(
        d.metrics[2].kind,
        MetricKind::Prometheus {
            url: "http://127.0.0.1:9090".into(),
            query: r#"sum(rate(x{route="{{ route }}"}[{{ interval }}]))"#.into()
        }
    );
    assert_eq!(a.webhooks[0].kind, HookKind::ConfirmPromotion);
    assert_eq!(a.webhooks[0].timeout_ms, 10_000);
    assert_eq!(
        a.webhooks[1].kind,
        HookKind::Rollout,
        "Flagger's default type"
    );
    assert_eq!(a.webhooks[1].timeout_ms, 3_000);
    assert_eq!(d.hook_retries, vec![2, 0]);
}

#[test]
fn strategies_are_recognised() {
    let ab = def(r#"    analysis:
      iterations: 5
      match: [{ headers: { x-canary: { exact: insider } } }]
"#);
    assert_eq!(ab.spec.analysis.strategy(), Strategy::AbTesting);
    assert_eq!(ab.matches.len(), 1);
    let bg = def("    analysis: { iterations: 3, mirror: true, mirrorWeight: 50 }\n");
    assert_eq!(bg.spec.analysis.strategy(), Strategy::BlueGreen);
    assert!(bg.spec.analysis.mirror);
    assert_eq!(bg.spec.analysis.mirror_weight, Some(50));
    let hooks = def(r#"    promotion: webhook
    progressDeadline: 90s
    analysis:
      stepWeights: [1, 10, 80]
      stepWeightPromotion: 50
      webhooks: [{ name: p, type: promote, url: "http://127.0.0.1:1/p" }]
"#);
    assert_eq!(hooks.spec.promotion, Promotion::Webhook);
    assert_eq!(hooks.spec.progress_deadline_ms, 90_000);
    assert_eq!(hooks.spec.analysis.step_weights, vec![1, 10, 80]);
    assert_eq!(hooks.spec.analysis.max_weight(), 80);
    assert_eq!(hooks.spec.analysis.webhooks[0].kind, HookKind::Promote);
}

#[test]
fn config_errors_for_specs_the_machine_cannot_run() {
    let cases = [
        (
            "    analysis: { interval: 1m }\n",
            "canaries[0].analysis.stepWeight",
        ),
        (
            "    watchRevision: true\n    analysis: { stepWeight: 10 }\n",
            "",
        ),
    ];
    for (analysis, field) in cases {
        let yaml = format!("{BASE}{analysis}");
        let r = parse_yaml(&yaml, "t.yaml", Path::new("."));
        if field.is_empty() {
            assert!(r.is_ok(), "{analysis}: {:?}", r.err());
        } else {
            let e = r.expect_err(analysis);
            assert!(e.errors.iter().any(|x| x.path == field), "{e}");
        }
    }
    let no_revision = BASE.replace(", revisionPath: /version", "");
    let yaml =
        format!("{no_revision}    watchRevision: true\n    analysis: {{ stepWeight: 10 }}\n");
    let e = parse_yaml(&yaml, "t.yaml", Path::new(".")).expect_err("needs revisionPath");
    assert!(
        e.errors
            .iter()
            .any(|x| x.path == "canaries[0].watchRevision"),
        "{e}"
    );
}

fn traffic(
    w: u8,
    m: bool,
    mirror: Option<u8>,
    aff: bool,
    st: Option<RawAffinityState>,
) -> RouteChange {
    RouteChange::Traffic {
        canary_weight: w,
        match_active: m,
        mirror_weight: mirror,
        affinity_active: aff,
        affinity_state: st,
    }
}

/// Applies a change and checks the result passes the table store's validation.
fn applied(r: &RawRoute, c: &RouteChange, d: &CanaryDef) -> RawRoute {
    let mut out = r.clone();
    apply_change(&mut out, c, d);
    let table = RawTable {
        backends: config("    analysis: { stepWeight: 10 }\n")
            .table
            .raw
            .backends,
        routes: vec![out.clone()],
    };
    if let Err(e) = compile_table(&table) {
        panic!("change {c:?} produced an invalid route: {e:?}");
    }
    out
}

#[test]
fn traffic_writes_weight_match_and_mirror_keeping_user_limits() {
    let d = def(r#"    analysis:
      iterations: 2
      match: [{ headers: { x-canary: { exact: insider } } }]
"#);
    let r = route();
    let ab = applied(&r, &traffic(0, true, None, false, None), &d);
    assert_eq!(ab.canary_weight, Some(0));
    assert_eq!(ab.matches, d.matches);
    let off = applied(&ab, &traffic(0, false, None, false, None), &d);
    assert!(off.matches.is_empty());
    assert_eq!(
        off.mirror.as_ref().map(|m| (m.enabled, m.max_body_bytes)),
        Some((Some(false), Some(2048))),
        "mirroring off keeps the user's limits, disabled"
    );
    let mirrored = applied(&r, &traffic(0, false, Some(40), false, None), &d);
    let m = mirrored.mirror.clone().expect("mirror block");
    assert_eq!(
        (m.enabled, m.weight, m.max_body_bytes),
        (None, Some(40), Some(2048))
    );
    let weighted = applied(&mirrored, &traffic(30, false, None, false, None), &d);
    assert_eq!(weighted.canary_weight, Some(30));
    assert_ne!(weighted.mirror.as_ref().and_then(|m| m.enabled), None);
    // Without user limits, mirroring off removes the block.
    let mut bare = r.clone();
    bare.mirror = None;
    let on = applied(&bare, &traffic(0, false, Some(100), false, None), &d);
    assert!(on.mirror.is_some());
    assert_eq!(
        applied(&on, &traffic(0, false, None, false, None), &d).mirror,
        None
    );
    // The same change twice is the same route.
    let again = applied(&weighted, &traffic(30, false, None, false, None), &d);
    assert_eq!(again, weighted);
}

#[test]
fn swap_exchanges_the_slots_and_is_idempotent() {
    let d = def("    analysis: { stepWeight: 10 }\n");
    let mut r = route();
    r = applied(&r, &traffic(60, false, None, false, None), &d);
    let swap = RouteChange::Swap {
        primary: "app-green".into(),
        canary: "app-blue".into(),
        affinity_state: None,
    };
    let s = applied(&r, &swap, &d);
    assert_eq!(
        (s.primary.as_str(), s.canary.as_deref()),
        ("app-green", Some("app-blue"))
    );
    assert_eq!(s.canary_weight, Some(0));
    assert_eq!(
        applied(&s, &swap, &d),
        s,
        "a retried swap does not swap back"
    );
}

#[test]
fn session_affinity_stays_on_after_the_run_to_expire_the_old_cookie() {
    let d = def(r#"    analysis:
      stepWeight: 20
      sessionAffinity: { cookieName: weir-canary, primaryCookieName: weir-primary, maxAge: 600 }
"#);
    let mut rng = SmallRng::seed_from_u64(7);
    let r0 = route();
    // Initialisation: weight 0, nothing to pin, nothing written.
    let init = applied(&r0, &traffic(0, false, None, false, None), &d);
    assert_eq!(init.session_affinity, None);
    assert_eq!(init.affinity_state, None);
    // The run starts: new values, block on.
    let s1 = next_affinity_state(&RawAffinityState::default(), 0, 20, &mut rng);
    let run = applied(&init, &traffic(20, false, None, true, Some(s1.clone())), &d);
    assert_eq!(run.session_affinity, d.session_affinity);
    let canary_value = s1.canary_value.clone().expect("canary value");
    assert!(canary_value.len() >= crate::affinity::MIN_VALUE_LEN);
    assert_eq!(run.affinity_state, Some(s1.clone()));
    // A step: same canary value (pinned clients stay), new primary value.
    let s2 = next_affinity_state(&s1, 20, 40, &mut rng);
    assert_eq!(s2.canary_value, s1.canary_value);
    assert_ne!(s2.primary_value, s1.primary_value);
    // The same weight again changes nothing (a retried write).
    assert_eq!(next_affinity_state(&s2, 40, 40, &mut rng), s2);
    let step = applied(&run, &traffic(40, false, None, true, Some(s2.clone())), &d);
    // The run ends (rollback to 0): the block stays so the old cookie is expired on
    // sight; the run's value becomes the previous one.
    let s3 = next_affinity_state(&s2, 40, 0, &mut rng);
    assert_eq!(
        s3.previous_canary_value.as_deref(),
        Some(canary_value.as_str())
    );
    assert_eq!(
        (s3.canary_value.as_ref(), s3.primary_value.as_ref()),
        (None, None)
    );
    let ended = applied(&step, &traffic(0, false, None, false, Some(s3.clone())), &d);
    assert_eq!(ended.session_affinity, d.session_affinity);
    assert_eq!(ended.affinity_state, Some(s3.clone()));
    // The compiled route pins nobody at weight 0 and deletes the old cookie.
    let table = RawTable {
        backends: config("    analysis: { stepWeight: 10 }\n")
            .table
            .raw
            .backends,
        routes: vec![ended.clone()],
    };
    let compiled = compile_table(&table).expect("valid");
    let route = &compiled.routing.routes[0];
    let headers = {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::COOKIE,
            format!("weir-canary={canary_value}")
                .parse()
                .expect("header"),
        );
        h
    };
    let method = http::Method::GET;
    let view = crate::routing::RequestView::new(
        "app",
        "/",
        None,
        &method,
        &headers,
        std::net::IpAddr::from([127, 0, 0, 1]),
    );
    let d0 = crate::routing::decide(
        &view,
        route,
        crate::routing::Draw {
            weight: 0,
            mirror: 99,
        },
    );
    assert_eq!(
        d0.side,
        crate::routing::Side::Primary,
        "weight 0 pins nobody to the canary"
    );
    assert_eq!(
        d0.cookies.expire_canary.as_deref(),
        Some(canary_value.as_str())
    );
    // A swap ends the run the same way.
    let swapped = applied(
        &step,
        &RouteChange::Swap {
            primary: "app-green".into(),
            canary: "app-blue".into(),
            affinity_state: Some(s3.clone()),
        },
        &d,
    );
    assert_eq!(swapped.session_affinity, d.session_affinity);
    assert_eq!(swapped.affinity_state, Some(s3));
}

#[test]
fn merge_diffs_turn_a_route_into_the_written_one() {
    let d = def(r#"    analysis:
      stepWeight: 20
      sessionAffinity: { cookieName: weir-canary, primaryCookieName: weir-primary }
"#);
    let mut rng = SmallRng::seed_from_u64(3);
    let r0 = route();
    let s1 = next_affinity_state(&RawAffinityState::default(), 0, 20, &mut rng);
    let steps = [
        traffic(0, false, Some(100), false, None),
        traffic(20, false, None, true, Some(s1.clone())),
        traffic(
            0,
            false,
            None,
            false,
            Some(next_affinity_state(&s1, 20, 0, &mut rng)),
        ),
        RouteChange::Swap {
            primary: "app-green".into(),
            canary: "app-blue".into(),
            affinity_state: None,
        },
    ];
    let mut before = r0;
    for c in &steps {
        let after = applied(&before, c, &d);
        let b = serde_json::to_value(&before).expect("json");
        let a = serde_json::to_value(&after).expect("json");
        let patch = merge_diff(&b, &a);
        let mut merged = b.clone();
        crate::control::api::merge_patch(&mut merged, &patch);
        assert_eq!(merged, a, "patch {patch} of {c:?}");
        assert_eq!(
            merge_diff(&a, &a),
            serde_json::json!({}),
            "no change, empty patch"
        );
        before = after;
    }
}

#[test]
fn endpoint_revisions_change_with_the_list_only() {
    let a = endpoints_revision(&["127.0.0.1:1".into(), "127.0.0.1:2".into()]);
    assert_eq!(
        a,
        endpoints_revision(&["127.0.0.1:1".into(), "127.0.0.1:2".into()])
    );
    assert_ne!(a, endpoints_revision(&["127.0.0.1:1".into()]));
    assert_ne!(a, endpoints_revision(&["127.0.0.1:12".into()]));
    assert_eq!(checksum("a", Some("v1")), checksum("a", Some("v1")));
    assert_ne!(checksum("a", Some("v1")), checksum("a", Some("v2")));
}

/// Flagger caps step weights at 100; the spec carries the capped list, which walks the
/// same weights (the machine's table test `stepWeights 1,2,10,200` runs it).
#[test]
fn step_weights_over_100_are_capped_in_the_spec() {
    let d = def("    analysis: { stepWeights: [1, 2, 10, 200] }\n");
    assert_eq!(d.spec.analysis.step_weights, vec![1, 2, 10, 100]);
    assert_eq!(d.spec.analysis.max_weight(), 100);
}

/// The primary pin lapses when the step changes, so its Max-Age is the analysis
/// interval unless the user set one: with `interval: 90s` a 60 s cookie would let a
/// primary-pinned client draw again in the middle of a step.
#[test]
fn the_primary_cookie_lives_for_one_analysis_interval() {
    let mut rng = SmallRng::seed_from_u64(3);
    let mut primary_max_age = |analysis: &str, own_block: Option<&str>| {
        let d = def(analysis);
        let mut r0 = route();
        if let Some(block) = own_block {
            r0.session_affinity = Some(serde_json::from_str(block).expect("block"));
        }
        let st = next_affinity_state(&RawAffinityState::default(), 0, 20, &mut rng);
        let mut run = applied(&r0, &traffic(20, false, None, true, Some(st.clone())), &d);
        if own_block.is_some() {
            // The table store fills in the values the engine does not write there.
            run.affinity_state = Some(st);
        }
        let table = RawTable {
            backends: config("    analysis: { stepWeight: 10 }\n")
                .table
                .raw
                .backends,
            routes: vec![run],
        };
        let compiled = compile_table(&table).expect("valid");
        let route = &compiled.routing.routes[0];
        let cfg = route.affinity.as_ref().expect("affinity on");
        let method = http::Method::GET;
        let headers = http::HeaderMap::new();
        let view = crate::routing::RequestView::new(
            "app",
            "/",
            None,
            &method,
            &headers,
            std::net::IpAddr::from([127, 0, 0, 1]),
        );
        let draw = crate::routing::Draw {
            weight: 99,
            mirror: 99,
        };
        let d = crate::routing::decide(&view, route, draw);
        assert!(d.cookies.set_primary);
        let set = d.cookies.render(cfg, &route.pin_cookies);
        let cookie = set[0].to_str().expect("ascii").to_string();
        assert!(cookie.starts_with("weir-primary="), "{cookie}");
        cookie
            .rsplit_once("Max-Age=")
            .map(|(_, v)| v.to_string())
            .expect("Max-Age")
    };
    let block = "{ cookieName: weir-canary, primaryCookieName: weir-primary }";
    let analysis = |interval: &str, block: &str| {
        format!("    analysis:\n      interval: {interval}\n      stepWeight: 20\n      sessionAffinity: {block}\n")
    };
    assert_eq!(primary_max_age(&analysis("90s", block), None), "90");
    assert_eq!(primary_max_age(&analysis("1500ms", block), None), "2");
    let explicit =
        "{ cookieName: weir-canary, primaryCookieName: weir-primary, primaryMaxAge: 30 }";
    assert_eq!(primary_max_age(&analysis("90s", explicit), None), "30");
    // The route's own block, when the analysis has none, is driven the same way.
    let own = r#"{"cookieName": "weir-canary", "primaryCookieName": "weir-primary"}"#;
    let plain = "    analysis:\n      interval: 2m\n      stepWeight: 20\n";
    assert_eq!(primary_max_age(plain, Some(own)), "120");
}
