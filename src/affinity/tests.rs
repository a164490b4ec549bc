use super::*;
use crate::config::compile_table;
use crate::config::raw::RawTable;
use crate::routing::{decide, Decision, Draw, Reason, Side};
use http::{HeaderMap, HeaderValue, Method};

const CANARY_V: &str = "CanaryRun2xxxxxxx";
const PRIMARY_V: &str = "PrimaryStep5xxxxx";
const OLD_V: &str = "CanaryRun1xxxxxxx";

fn route(
    weight: u8,
    primary_cookie: bool,
    state: (&str, &str, &str),
    matches: bool,
) -> crate::routing::Route {
    let opt = |s: &str| {
        if s.is_empty() {
            "null".to_string()
        } else {
            format!("\"{s}\"")
        }
    };
    let yaml = format!(
        "backends:\n  blue: {{ endpoints: [\"127.0.0.1:1\"] }}\n  green: {{ endpoints: [\"127.0.0.1:2\"] }}\nroutes:\n  - name: app\n    primary: blue\n    canary: green\n    canaryWeight: {weight}\n{}    sessionAffinity:\n      cookieName: weir-canary\n      maxAge: 21600\n{}      primaryMaxAge: 60\n      domain: example.com\n      path: /shop\n      httpOnly: true\n      secure: true\n      sameSite: Lax\n      partitioned: true\n    affinityState: {{ canaryValue: {}, primaryValue: {}, previousCanaryValue: {} }}\n",
        if matches { "    match:\n      - headers: { x-canary: { exact: insider } }\n" } else { "" },
        if primary_cookie { "      primaryCookieName: weir-primary\n" } else { "" },
        opt(state.0),
        opt(state.1),
        opt(state.2),
    );
    let raw: RawTable = serde_saphyr::from_str(&yaml).expect("yaml");
    compile_table(&raw)
        .unwrap_or_else(|e| panic!("{e:?}"))
        .routing
        .routes
        .remove(0)
}

fn run(
    r: &crate::routing::Route,
    cookies: &[&str],
    headers: &[(&'static str, &str)],
    draw_canary: bool,
) -> Decision {
    let mut h = HeaderMap::new();
    for c in cookies {
        h.append("cookie", HeaderValue::from_str(c).unwrap());
    }
    for (k, v) in headers {
        h.append(*k, HeaderValue::from_str(v).unwrap());
    }
    let m = Method::GET;
    let view =
        crate::routing::RequestView::new("app", "/", None, &m, &h, "127.0.0.1".parse().unwrap());
    // Weight 30: draw 0 picks the canary, draw 99 the primary.
    decide(
        &view,
        r,
        Draw {
            weight: if draw_canary { 0 } else { 99 },
            mirror: 99,
        },
    )
}

fn set_cookies(r: &crate::routing::Route, d: &Decision) -> Vec<String> {
    d.cookies
        .render(r.affinity.as_ref().unwrap(), &r.pin_cookies)
        .into_iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

fn attrs(s: &str) -> std::collections::BTreeSet<String> {
    s.split(';').map(|p| p.trim().to_string()).collect()
}

#[test]
fn current_canary_cookie_pins_to_canary_whatever_the_draw() {
    let r = route(30, true, (CANARY_V, PRIMARY_V, OLD_V), false);
    for draw in [true, false] {
        let d = run(&r, &[&format!("weir-canary={CANARY_V}")], &[], draw);
        assert_eq!((d.side, d.reason), (Side::Canary, Reason::AffinityCanary));
        assert!(d.cookies.is_empty(), "a pinned request needs no Set-Cookie");
    }
}

#[test]
fn current_primary_cookie_pins_to_primary() {
    let r = route(30, true, (CANARY_V, PRIMARY_V, OLD_V), false);
    let d = run(&r, &[&format!("weir-primary={PRIMARY_V}")], &[], true);
    assert_eq!((d.side, d.reason), (Side::Primary, Reason::AffinityPrimary));
    assert!(d.cookies.is_empty());
}

#[test]
fn old_values_no_longer_pin() {
    let r = route(30, true, (CANARY_V, PRIMARY_V, OLD_V), false);
    // An old step's primary value: the draw decides.
    let d = run(&r, &["weir-primary=PrimaryStep4xxxxx"], &[], true);
    assert_eq!((d.side, d.reason), (Side::Canary, Reason::Weight));
    // The last run's canary value during a new run: the draw decides; when
    // it picks the primary the stale cookie is deleted.
    let d = run(&r, &[&format!("weir-canary={OLD_V}")], &[], false);
    assert_eq!((d.side, d.reason), (Side::Primary, Reason::Weight));
    assert_eq!(d.cookies.expire_canary.as_deref(), Some(OLD_V));
    assert!(d.cookies.set_primary);
    // …and when it picks the canary the new cookie overwrites it.
    let d = run(&r, &[&format!("weir-canary={OLD_V}")], &[], true);
    assert_eq!(d.side, Side::Canary);
    assert!(d.cookies.set_canary && d.cookies.expire_canary.is_none());
}

#[test]
fn unpinned_requests_get_the_cookie_of_the_side_drawn() {
    let r = route(30, true, (CANARY_V, PRIMARY_V, ""), false);
    let d = run(&r, &[], &[], true);
    assert_eq!(d.side, Side::Canary);
    assert_eq!(
        d.cookies,
        CookieActions {
            set_canary: true,
            set_primary: false,
            expire_canary: None
        }
    );
    let d = run(&r, &[], &[], false);
    assert_eq!(d.side, Side::Primary);
    assert_eq!(
        d.cookies,
        CookieActions {
            set_canary: false,
            set_primary: true,
            expire_canary: None
        }
    );
    // Without primaryCookieName the primary side sets nothing (as Flagger).
    let r = route(30, false, (CANARY_V, "", ""), false);
    let d = run(&r, &[], &[], false);
    assert!(d.cookies.is_empty());
}

#[test]
fn after_the_run_the_old_cookie_goes_to_primary_and_is_deleted_with_domain_and_path() {
    let r = route(0, true, ("", "", OLD_V), false);
    let d = run(&r, &[&format!("weir-canary={OLD_V}")], &[], true);
    assert_eq!(d.side, Side::Primary, "no run: nothing pins to the canary");
    let sc = set_cookies(&r, &d);
    assert_eq!(sc.len(), 1);
    let want: std::collections::BTreeSet<String> = [
        format!("weir-canary={OLD_V}"),
        "Max-Age=-1".into(),
        "Domain=example.com".into(),
        "Path=/shop".into(),
        "HttpOnly".into(),
        "Secure".into(),
        "SameSite=Lax".into(),
        "Partitioned".into(),
    ]
    .into_iter()
    .collect();
    assert_eq!(attrs(&sc[0]), want);
}

#[test]
fn a_client_cannot_pick_a_canary_that_is_not_running() {
    // Weight 0 with a (stale) canary value still in the state.
    let r = route(0, true, (CANARY_V, PRIMARY_V, ""), false);
    let d = run(&r, &[&format!("weir-canary={CANARY_V}")], &[], true);
    assert_eq!(d.side, Side::Primary);
    assert_eq!(d.cookies.expire_canary.as_deref(), Some(CANARY_V));
    // No run and no cookie: nothing to set.
    let d = run(&r, &[], &[], true);
    assert!(d.cookies.is_empty());
}

#[test]
fn exact_set_cookie_strings_with_every_attribute() {
    let r = route(30, true, (CANARY_V, PRIMARY_V, ""), false);
    let d = run(&r, &[], &[], true);
    let sc = set_cookies(&r, &d);
    let common = [
        "Domain=example.com",
        "Path=/shop",
        "HttpOnly",
        "Secure",
        "SameSite=Lax",
        "Partitioned",
    ];
    let mut want: std::collections::BTreeSet<String> =
        common.iter().map(|s| s.to_string()).collect();
    want.insert(format!("weir-canary={CANARY_V}"));
    want.insert("Max-Age=21600".into());
    assert_eq!(attrs(&sc[0]), want);
    let d = run(&r, &[], &[], false);
    let sc = set_cookies(&r, &d);
    let mut want: std::collections::BTreeSet<String> =
        common.iter().map(|s| s.to_string()).collect();
    want.insert(format!("weir-primary={PRIMARY_V}"));
    want.insert("Max-Age=60".into());
    assert_eq!(attrs(&sc[0]), want);
}

#[test]
fn the_pins_sent_are_those_of_the_state_the_route_was_compiled_with() {
    // The pins are rendered with the route: a table built for the next step
    // answers with the next step's values, never the previous table's.
    let step = |primary: &str| route(30, true, (CANARY_V, primary, ""), false);
    let next = "PrimaryStep6xxxxx";
    for (r, primary) in [(step(PRIMARY_V), PRIMARY_V), (step(next), next)] {
        let sc = set_cookies(&r, &run(&r, &[], &[], false));
        assert!(
            sc[0].starts_with(&format!("weir-primary={primary};")),
            "{sc:?}"
        );
        let sc = set_cookies(&r, &run(&r, &[], &[], true));
        assert!(
            sc[0].starts_with(&format!("weir-canary={CANARY_V};")),
            "{sc:?}"
        );
    }
    // A run without a canary value (a table written by hand) has no pin to
    // send: the canary answer carries no cookie rather than an empty one.
    let r = route(30, true, ("", PRIMARY_V, ""), false);
    let d = run(&r, &[], &[], true);
    assert!(d.cookies.set_canary);
    assert!(set_cookies(&r, &d).is_empty());
}

#[test]
fn match_rules_come_before_cookies() {
    let r = route(30, true, (CANARY_V, PRIMARY_V, ""), true);
    let d = run(
        &r,
        &[&format!("weir-primary={PRIMARY_V}")],
        &[("x-canary", "insider")],
        false,
    );
    assert_eq!((d.side, d.reason), (Side::Canary, Reason::Match));
}

#[test]
fn cookies_are_parsed_not_regex_matched_and_split_headers_count() {
    let r = route(30, true, (CANARY_V, PRIMARY_V, ""), false);
    // HTTP/2 split cookies.
    let d = run(&r, &["a=b", &format!("weir-canary={CANARY_V}")], &[], false);
    assert_eq!(d.side, Side::Canary);
    // Name or value only similar: no pin.
    for c in [
        format!("xweir-canary={CANARY_V}"),
        format!("weir-canary={CANARY_V}x"),
        format!("weir-canary=x{CANARY_V}"),
        format!("other=weir-canary={CANARY_V}"),
    ] {
        let d = run(&r, &[&c], &[], false);
        assert_eq!(d.side, Side::Primary, "cookie {c:?} must not pin");
    }
}

#[test]
fn store_fills_values_on_run_start_step_and_end() {
    use crate::config::affinity::fill_affinity_values;
    use rand::SeedableRng;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let base = |w: i64| -> RawTable {
        serde_saphyr::from_str(&format!(
            "backends:\n  blue: {{ endpoints: [\"127.0.0.1:1\"] }}\n  green: {{ endpoints: [\"127.0.0.1:2\"] }}\nroutes:\n  - {{ name: app, primary: blue, canary: green, canaryWeight: {w}, sessionAffinity: {{ cookieName: c, primaryCookieName: p }} }}\n"
        ))
        .unwrap()
    };
    let t0 = base(0);
    let mut t1 = base(10);
    fill_affinity_values(&t0, &mut t1, &mut rng);
    let s1 = t1.routes[0].affinity_state.clone().unwrap();
    let c1 = s1.canary_value.clone().unwrap();
    assert!(c1.len() >= MIN_VALUE_LEN);
    assert!(s1.primary_value.is_some());
    // A step keeps the run's value and changes the step's.
    let mut t2 = t1.clone();
    t2.routes[0].canary_weight = Some(20);
    fill_affinity_values(&t1, &mut t2, &mut rng);
    let s2 = t2.routes[0].affinity_state.clone().unwrap();
    assert_eq!(s2.canary_value.as_deref(), Some(c1.as_str()));
    assert_ne!(s2.primary_value, s1.primary_value);
    // End of run: the value becomes `previous`.
    let mut t3 = t2.clone();
    t3.routes[0].canary_weight = Some(0);
    fill_affinity_values(&t2, &mut t3, &mut rng);
    let s3 = t3.routes[0].affinity_state.clone().unwrap();
    assert_eq!(
        (
            s3.canary_value.as_deref(),
            s3.previous_canary_value.as_deref()
        ),
        (None, Some(c1.as_str()))
    );
    // The next run gets a new value.
    let mut t4 = t3.clone();
    t4.routes[0].canary_weight = Some(10);
    fill_affinity_values(&t3, &mut t4, &mut rng);
    let s4 = t4.routes[0].affinity_state.clone().unwrap();
    assert_ne!(s4.canary_value.as_deref(), Some(c1.as_str()));
    // A write that carries its own values is left alone.
    let mut t5 = t3.clone();
    t5.routes[0].canary_weight = Some(10);
    t5.routes[0].affinity_state = Some(crate::config::raw::RawAffinityState {
        canary_value: Some("EngineChosen0001".into()),
        ..Default::default()
    });
    fill_affinity_values(&t3, &mut t5, &mut rng);
    assert_eq!(
        t5.routes[0]
            .affinity_state
            .as_ref()
            .unwrap()
            .canary_value
            .as_deref(),
        Some("EngineChosen0001")
    );
}
