//! The Cookie-header probe never changes a decision: differential tests of
//! `decide()` with each route's probe against the same route without one,
//! plus what the probe takes from the rules users write.

use super::tests::{both_forms, mixed_case, table};
use super::{decide, CookieProbe, Draw, RequestView, Route};
use http::{HeaderMap, HeaderValue, Method};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::net::IpAddr;

/// Route `app` (primary and canary) with `yaml_route`'s fields.
fn route(yaml_route: &str) -> Route {
    table(&format!(
        "  - name: app\n    primary: blue\n    canary: green\n{yaml_route}"
    ))
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

/// Header conditions a random rule is made of: every kind that the probe
/// binds, and some it does not (one name written with capitals).
const HEADER_CONDITIONS: &[(&str, &str)] = &[
    ("cookie", r#"{ regex: "^(.*?;)?(canary=always)(;.*)?$" }"#),
    ("cookie", r#"{ regex: "(?i)canary=ALWAYS" }"#),
    ("cookie", r#"{ regex: "beta=(yes|no)" }"#),
    ("cookie", r#"{ regex: ".*" }"#),
    ("cookie", r#"{ exact: "canary=always" }"#),
    ("cookie", r#"{ prefix: "ab" }"#),
    ("cookie", r#"{ suffix: "=1" }"#),
    ("cookie", "{ present: true }"),
    ("cookie", "{ present: false }"),
    ("x-canary", "{ exact: insider }"),
    ("x-canary", "{ present: false }"),
    ("x-canary", r#"{ regex: "^in" }"#),
    ("user-agent", r#"{ regex: "(?i)android.*mobile" }"#),
    ("user-agent", "{ present: true }"),
    ("X-Mixed", r#"{ suffix: "z" }"#),
];

/// Cookie conditions.
const COOKIE_CONDITIONS: &[(&str, &str)] = &[
    ("beta", r#"{ exact: "yes" }"#),
    ("canary", "{ present: true }"),
    ("canary", "{ present: false }"),
    ("canary", r#"{ regex: "^al" }"#),
    ("ab", r#"{ regex: ".*" }"#),
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

/// Other headers of random requests, repeated or not, visible or not.
const OTHERS: &[(&str, &[u8])] = &[
    ("x-canary", b"insider"),
    ("x-canary", b"in\xff"),
    ("x-canary", b"outsider"),
    ("user-agent", b"Mozilla/5.0 (Linux; Android 14) Mobile"),
    ("user-agent", b"Mozilla/5.0 (X11; Linux x86_64)"),
    ("user-agent", b"android \xff mobile"),
    ("x-mixed", b"az"),
    ("x-mixed", b"za"),
    ("accept", b"*/*"),
];

/// A random rule: up to three header conditions on distinct names and up
/// to one cookie condition, at least one in all.
fn random_rule(rng: &mut SmallRng) -> String {
    let mut headers: Vec<(&str, &str)> = Vec::new();
    for _ in 0..rng.random_range(0..4) {
        let c = HEADER_CONDITIONS[rng.random_range(0..HEADER_CONDITIONS.len())];
        if !headers.iter().any(|(n, _)| *n == c.0) {
            headers.push(c);
        }
    }
    let mut parts = Vec::new();
    if !headers.is_empty() {
        let h: Vec<String> = headers.iter().map(|(n, m)| format!("{n}: {m}")).collect();
        parts.push(format!("headers: {{ {} }}", h.join(", ")));
    }
    if headers.is_empty() || rng.random_bool(0.3) {
        let (n, m) = COOKIE_CONDITIONS[rng.random_range(0..COOKIE_CONDITIONS.len())];
        parts.push(format!("cookies: {{ {n}: {m} }}"));
    }
    // A negated condition (on the Cookie header too) must never be taken
    // for a literal the rule needs.
    if rng.random_bool(0.3) {
        let (n, m) = HEADER_CONDITIONS[rng.random_range(0..HEADER_CONDITIONS.len())];
        parts.push(format!("withoutHeaders: {{ {n}: {m} }}"));
    }
    format!("      - {{ {} }}\n", parts.join(", "))
}

/// Random headers: 0–3 Cookie headers of random pieces, 0–3 others.
fn random_headers(rng: &mut SmallRng) -> Vec<(&'static str, Vec<u8>)> {
    let mut list = Vec::new();
    for _ in 0..rng.random_range(0..4) {
        let mut v = Vec::new();
        for i in 0..rng.random_range(0..5) {
            if i > 0 {
                v.extend_from_slice([&b"; "[..], b";"][rng.random_range(0..2)]);
            }
            v.extend_from_slice(PIECES[rng.random_range(0..PIECES.len())]);
        }
        list.push(("cookie", v));
    }
    for _ in 0..rng.random_range(0..4) {
        let (n, v) = OTHERS[rng.random_range(0..OTHERS.len())];
        list.push((n, v.to_vec()));
    }
    for i in (1..list.len()).rev() {
        list.swap(i, rng.random_range(0..=i));
    }
    list
}

/// `decide()` with each route's Cookie probe against the same route
/// without one, on hyper's map and on raw headers
/// with names in random case.
#[test]
fn probe_never_changes_a_decision() {
    let mut rng = SmallRng::seed_from_u64(0x7072_6f62);
    let (mut probed, mut quiet, mut loud) = (0, 0, 0);
    for _ in 0..300 {
        let mut y = format!("    canaryWeight: {}\n", [0, 30][rng.random_range(0..2)]);
        let rules = rng.random_range(0..5);
        if rules > 0 {
            y.push_str("    match:\n");
        }
        for _ in 0..rules {
            y.push_str(&random_rule(&mut rng));
        }
        if rng.random_bool(0.7) {
            y.push_str(AFFINITY);
        }
        let with = route(&y);
        let without = Route {
            cookie_probe: CookieProbe::default(),
            ..with.clone()
        };
        let has_probe = !with.cookie_probe.scan_bytes().is_empty();
        probed += usize::from(has_probe);
        for _ in 0..60 {
            let list = random_headers(&mut rng);
            let names: Vec<String> = list.iter().map(|(k, _)| mixed_case(k, &mut rng)).collect();
            let (map, raw) = both_forms(&list, &names);
            let m = Method::GET;
            let ip: IpAddr = "192.0.2.1".parse().unwrap();
            let views = || {
                [
                    RequestView::new("h", "/", None, &m, &map, ip),
                    RequestView::raw("h", "/", None, &m, &raw, ip),
                ]
            };
            if has_probe {
                for view in views() {
                    if with.cookie_probe.quiet(&view) {
                        quiet += 1;
                    } else {
                        loud += 1;
                    }
                }
            }
            for weight in [0, 99] {
                let draw = Draw { weight, mirror: 99 };
                // Fresh views: a view keeps what it looked up.
                for (a, b) in views().iter().zip(views().iter()) {
                    assert_eq!(
                        decide(a, &with, draw),
                        decide(b, &without, draw),
                        "route:\n{y}headers: {list:?}"
                    );
                }
            }
        }
    }
    // The comparison means something only if the probe was used both ways.
    assert!(probed > 100, "{probed} routes had a probe");
    assert!(quiet > 1_000 && loud > 1_000, "quiet {quiet}, not {loud}");
}
