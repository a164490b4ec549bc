//! The Cookie-header probe never changes a decision: differential tests of
//! `decide()` with each route's probe against the same route without one,
//! plus what the probe takes from the rules users write.

use super::{decide, CookieProbe, Draw, RequestView, Route};
use crate::config::compile_table;
use crate::config::raw::RawTable;
use http::{HeaderMap, HeaderValue, Method};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::net::IpAddr;

fn route(yaml_route: &str) -> Route {
    let yaml = format!(
        "backends:\n  blue: {{ endpoints: [\"127.0.0.1:1\"] }}\n  green: {{ endpoints: [\"127.0.0.1:2\"] }}\nroutes:\n  - name: app\n    primary: blue\n    canary: green\n{yaml_route}"
    );
    let raw: RawTable = serde_saphyr::from_str(&yaml).expect("yaml");
    compile_table(&raw)
        .unwrap_or_else(|e| panic!("{e:?}\n{yaml}"))
        .routing
        .routes
        .remove(0)
}

const AFFINITY: &str = "    sessionAffinity: { cookieName: weir-canary, maxAge: 60, primaryCookieName: weir-primary }\n    affinityState: { canaryValue: RunCurrent01, primaryValue: StepCurrent1, previousCanaryValue: RunPrevious1 }\n";

fn probe_of(yaml_route: &str) -> CookieProbe {
    route(yaml_route).cookie_probe
}

#[test]
fn the_usual_route_is_bound_by_one_scan_for_two_bytes() {
    // The benchmark's route: the Flagger cookie idiom, a cookie, affinity.
    let p = probe_of(&format!(
        "    canaryWeight: 10\n    match:\n      - headers: {{ x-canary: {{ exact: insider }} }}\n      - headers: {{ cookie: {{ regex: \"^(.*?;)?(canary=always)(;.*)?$\" }} }}\n      - cookies: {{ beta: {{ exact: \"yes\" }} }}\n      - headers: {{ user-agent: {{ regex: \"(?i)android.*mobile\" }} }}\n{AFFINITY}"
    ));
    assert_eq!(
        (0..4).map(|i| p.binds_rule(i)).collect::<Vec<_>>(),
        [false, true, true, false]
    );
    assert!(p.binds_affinity());
    // `y` finds weir-canary, weir-primary and canary=always; `b` finds beta.
    assert_eq!(p.scan_bytes(), b"yb");
}

#[test]
fn conditions_without_a_literal_bind_nothing() {
    let p = probe_of(concat!(
        "    match:\n",
        "      - cookies: { beta: { present: false } }\n",
        "      - headers: { cookie: { present: true } }\n",
        "      - headers: { cookie: { regex: \"a|b\" } }\n",
        "      - headers: { cookie: { prefix: \"\" } }\n",
        "      - headers: { x-beta: { exact: \"beta\" } }\n",
    ));
    assert!((0..5).all(|i| !p.binds_rule(i)));
    assert!(!p.binds_affinity());
    assert!(p.scan_bytes().is_empty());
}

#[test]
fn caseless_literals_take_both_cases_and_what_does_not_fit_is_left_to_the_rules() {
    // `(?i)` letters cost two bytes each; three bytes in all.
    let p = probe_of(concat!(
        "    match:\n",
        "      - headers: { cookie: { regex: \"(?i)qqq\" } }\n",
        "      - cookies: { zz: { exact: \"1\" } }\n",
        "      - cookies: { jj: { exact: \"1\" } }\n",
    ));
    assert_eq!(p.scan_bytes(), b"qQz");
    assert!(p.binds_rule(0) && p.binds_rule(1) && !p.binds_rule(2));
    let m = Method::GET;
    let ip: IpAddr = "192.0.2.1".parse().unwrap();
    let quiet = |cookie: &str| {
        let mut h = HeaderMap::new();
        h.insert("cookie", HeaderValue::from_str(cookie).unwrap());
        p.quiet(&RequestView::new("h", "/", None, &m, &h, ip))
    };
    assert!(quiet("a=1; jj=1"));
    assert!(!quiet("a=QQQ"));
    assert!(!quiet("a=qQq; b=1"));
    assert!(quiet("a=qQ; b=1"));
    assert!(!quiet("zz=2"));
    assert!(quiet("a=q; z=1; Q=z"));
    // Past the false-start budget the probe cannot tell: the rules decide.
    assert!(!quiet(&"q;".repeat(20)));
    assert!(quiet(&"q;".repeat(5)));
}

/// Conditions a random route is made of: every kind that binds, and some
/// that do not.
const CONDITIONS: &[&str] = &[
    "headers: { cookie: { regex: \"^(.*?;)?(canary=always)(;.*)?$\" } }",
    "headers: { cookie: { regex: \"(?i)canary=ALWAYS\" } }",
    "headers: { cookie: { regex: \"beta=(yes|no)\" } }",
    "headers: { cookie: { regex: \".*\" } }",
    "headers: { cookie: { exact: \"canary=always\" } }",
    "headers: { cookie: { prefix: \"ab\" } }",
    "headers: { cookie: { suffix: \"=1\" } }",
    "headers: { cookie: { present: true } }",
    "headers: { cookie: { present: false } }",
    "cookies: { beta: { exact: \"yes\" } }",
    "cookies: { canary: { present: true } }",
    "cookies: { canary: { present: false } }",
    "cookies: { canary: { regex: \"^al\" } }",
    "cookies: { ab: { regex: \".*\" } }",
    "headers: { x-canary: { exact: insider } }",
];

/// Pieces of random Cookie headers: the literals above whole, cut and in
/// other cases, affinity cookies of this run and an older one, runs of the
/// probe's bytes (false starts), and bytes that are not visible.
const PIECES: &[&[u8]] = &[
    b"canary=always",
    b"Canary=Always",
    b"canary=alwayS",
    b"canary",
    b"canary=%61lways",
    b"beta=yes",
    b"beta=no",
    b"bet",
    b"yyyyyyyyyyyy",
    b"bbbbbbbbbbbbbbbb",
    b"weir-canary=RunCurrent01",
    b"weir-canary=RunPrevious1",
    b"weir-primary=StepCurrent1",
    b"weir-primar=StepCurrent1",
    b"x=\xff",
    b"session=3b1f0c9e77aa",
    b"ab=1",
    b"a=b",
    b"",
];

#[test]
fn probe_never_changes_a_decision() {
    let mut rng = SmallRng::seed_from_u64(0x7072_6f62);
    let (mut bound_routes, mut quiet, mut loud) = (0, 0, 0);
    for _ in 0..300 {
        let mut y = format!("    canaryWeight: {}\n", [0, 30][rng.random_range(0..2)]);
        let rules = rng.random_range(0..5);
        if rules > 0 {
            y.push_str("    match:\n");
        }
        for _ in 0..rules {
            let a = CONDITIONS[rng.random_range(0..CONDITIONS.len())];
            let b = CONDITIONS[rng.random_range(0..CONDITIONS.len())];
            // Two conditions of the same kind would be one YAML key twice.
            if rng.random_bool(0.5) && a.split(':').next() != b.split(':').next() {
                y.push_str(&format!("      - {{ {a}, {b} }}\n"));
            } else {
                y.push_str(&format!("      - {a}\n"));
            }
        }
        if rng.random_bool(0.7) {
            y.push_str(AFFINITY);
        }
        let with = route(&y);
        let without = Route {
            cookie_probe: CookieProbe::default(),
            ..with.clone()
        };
        bound_routes += usize::from(!with.cookie_probe.scan_bytes().is_empty());
        for _ in 0..60 {
            let mut map = HeaderMap::new();
            for _ in 0..rng.random_range(0..4) {
                if rng.random_bool(0.15) {
                    map.append("x-canary", HeaderValue::from_static("insider"));
                    continue;
                }
                let mut v = Vec::new();
                for i in 0..rng.random_range(0..5) {
                    if i > 0 {
                        v.extend_from_slice([&b"; "[..], b";"][rng.random_range(0..2)]);
                    }
                    v.extend_from_slice(PIECES[rng.random_range(0..PIECES.len())]);
                }
                map.append("cookie", HeaderValue::from_bytes(&v).unwrap());
            }
            let raw: Vec<httparse::Header<'_>> = map
                .iter()
                .map(|(k, v)| httparse::Header {
                    name: k.as_str(),
                    value: v.as_bytes(),
                })
                .collect();
            let m = Method::GET;
            let ip: IpAddr = "192.0.2.1".parse().unwrap();
            for view in [
                RequestView::new("h", "/", None, &m, &map, ip),
                RequestView::raw("h", "/", None, &m, &raw, ip),
            ] {
                if !with.cookie_probe.scan_bytes().is_empty() {
                    if with.cookie_probe.quiet(&view) {
                        quiet += 1;
                    } else {
                        loud += 1;
                    }
                }
                for weight in [0, 99] {
                    let draw = Draw { weight, mirror: 99 };
                    assert_eq!(
                        decide(&view, &with, draw),
                        decide(&view, &without, draw),
                        "route:\n{y}headers: {map:?}"
                    );
                }
            }
        }
    }
    // The comparison means something only if the probe was used both ways.
    assert!(bound_routes > 100, "{bound_routes} routes had a probe");
    assert!(quiet > 1_000 && loud > 1_000, "quiet {quiet}, not {loud}");
}
