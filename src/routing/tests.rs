use super::*;
use crate::config::raw::RawTable;
use crate::config::{compile_table, TableSpec};
use http::{HeaderMap, HeaderValue, Method};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use std::net::IpAddr;

pub(super) fn table(yaml_routes: &str) -> TableSpec {
    let yaml = format!(
        "backends:\n  blue: {{ endpoints: [\"127.0.0.1:1\"] }}\n  green: {{ endpoints: [\"127.0.0.1:2\"] }}\nroutes:\n{yaml_routes}"
    );
    let raw: RawTable = serde_saphyr::from_str(&yaml).expect("yaml");
    compile_table(&raw).unwrap_or_else(|e| panic!("{e:?}"))
}

struct Req {
    host: String,
    path: String,
    query: Option<String>,
    method: Method,
    headers: HeaderMap,
    ip: IpAddr,
}

impl Req {
    fn new(path: &str) -> Self {
        let (path, query) = match path.split_once('?') {
            Some((p, q)) => (p.to_string(), Some(q.to_string())),
            None => (path.to_string(), None),
        };
        Req {
            host: "app.example.com".into(),
            path,
            query,
            method: Method::GET,
            headers: HeaderMap::new(),
            ip: "192.0.2.10".parse().unwrap(),
        }
    }
    fn header(mut self, k: &'static str, v: &str) -> Self {
        self.headers.append(k, HeaderValue::from_str(v).unwrap());
        self
    }
    fn view(&self) -> RequestView<'_> {
        RequestView::new(
            &self.host,
            &self.path,
            self.query.as_deref(),
            &self.method,
            &self.headers,
            self.ip,
        )
    }
}

/// Decides `r` on the table's first route with the draw `weight`, `mirror`.
fn decide_at(t: &TableSpec, r: &Req, weight: u8, mirror: u8) -> Decision {
    decide(&r.view(), &t.routing.routes[0], Draw { weight, mirror })
}

/// Decides with a draw that never picks the canary by weight, so only
/// rules can send a request there.
fn side(t: &TableSpec, r: &Req) -> Side {
    decide_at(t, r, 99, 99).side
}

/// [`side`] of a request to `/` with one `cookie` header per entry.
fn cookie_side(t: &TableSpec, cookies: &[&str]) -> Side {
    let r = cookies
        .iter()
        .fold(Req::new("/"), |r, c| r.header("cookie", c));
    side(t, &r)
}

fn ab(rule: &str) -> TableSpec {
    table(&format!(
        "  - name: app\n    primary: blue\n    canary: green\n    match:\n      - {rule}\n"
    ))
}

/// A match rule (YAML), the request headers, and the side expected.
type HeaderCase<'a> = (&'a str, &'a [(&'a str, &'a str)], Side);

#[test]
fn header_matchers_every_kind() {
    let cases: &[HeaderCase] = &[
        (
            "{ headers: { x-canary: { exact: insider } } }",
            &[("x-canary", "insider")],
            Side::Canary,
        ),
        (
            "{ headers: { x-canary: { exact: insider } } }",
            &[("x-canary", "insider2")],
            Side::Primary,
        ),
        (
            "{ headers: { x-canary: { exact: insider } } }",
            &[],
            Side::Primary,
        ),
        (
            "{ headers: { X-Canary: { exact: insider } } }",
            &[("x-canary", "insider")],
            Side::Canary,
        ),
        (
            "{ headers: { user-agent: { prefix: Mozilla } } }",
            &[("user-agent", "Mozilla/5.0")],
            Side::Canary,
        ),
        (
            "{ headers: { user-agent: { prefix: Mozilla } } }",
            &[("user-agent", "curl/8")],
            Side::Primary,
        ),
        (
            "{ headers: { x-tenant: { suffix: .beta } } }",
            &[("x-tenant", "acme.beta")],
            Side::Canary,
        ),
        (
            "{ headers: { x-tenant: { suffix: .beta } } }",
            &[("x-tenant", "acme.prod")],
            Side::Primary,
        ),
        (
            "{ headers: { user-agent: { regex: \".*Firefox.*\" } } }",
            &[("user-agent", "Mozilla Firefox/120")],
            Side::Canary,
        ),
        (
            "{ headers: { user-agent: { regex: \"^Firefox\" } } }",
            &[("user-agent", "Mozilla Firefox/120")],
            Side::Primary,
        ),
        (
            "{ headers: { x-debug: { present: true } } }",
            &[("x-debug", "")],
            Side::Canary,
        ),
        (
            "{ headers: { x-debug: { present: true } } }",
            &[],
            Side::Primary,
        ),
        (
            "{ headers: { x-debug: { present: false } } }",
            &[],
            Side::Canary,
        ),
        (
            "{ headers: { x-debug: { present: false } } }",
            &[("x-debug", "1")],
            Side::Primary,
        ),
        // A repeated header matches if any of its values does.
        (
            "{ headers: { x-group: { exact: b } } }",
            &[("x-group", "a"), ("x-group", "b")],
            Side::Canary,
        ),
    ];
    for (rule, headers, want) in cases {
        let t = ab(rule);
        let mut r = Req::new("/");
        for (k, v) in *headers {
            r = r.header(k, v);
        }
        assert_eq!(side(&t, &r), *want, "rule {rule} headers {headers:?}");
    }
}

#[test]
fn flagger_cookie_header_regex_keeps_working() {
    let t = ab("{ headers: { cookie: { regex: \"^(.*?;)?(canary=always)(;.*)?$\" } } }");
    assert_eq!(cookie_side(&t, &["canary=always"]), Side::Canary);
    assert_eq!(cookie_side(&t, &["canary=always;a=b"]), Side::Canary);
    assert_eq!(cookie_side(&t, &["a=b;canary=always"]), Side::Canary);
    assert_eq!(cookie_side(&t, &["canary=never"]), Side::Primary);
    // HTTP/2 split cookies are joined with "; " before the regex sees them,
    // exactly as one HTTP/1 header would carry them.
    assert_eq!(cookie_side(&t, &["canary=always", "a=b"]), Side::Canary);
}

#[test]
fn cookie_matchers_parse_every_cookie_header() {
    let t = ab("{ cookies: { canary: { exact: always } } }");
    assert_eq!(cookie_side(&t, &["a=b; canary=always; c=d"]), Side::Canary);
    assert_eq!(cookie_side(&t, &["a=b", "canary=always"]), Side::Canary);
    assert_eq!(cookie_side(&t, &["xcanary=always"]), Side::Primary);
    assert_eq!(cookie_side(&t, &["canary=alwaysx"]), Side::Primary);
    // Percent-encoded values are decoded by the cookie crate.
    let t = ab("{ cookies: { group: { exact: \"a b\" } } }");
    assert_eq!(cookie_side(&t, &["group=a%20b"]), Side::Canary);
    let t = ab("{ cookies: { session: { present: true } } }");
    assert_eq!(cookie_side(&t, &["session=1"]), Side::Canary);
    assert_eq!(side(&t, &Req::new("/")), Side::Primary);
}

#[test]
fn query_method_uri_and_source_matchers() {
    let t = ab("{ queryParams: { beta: { exact: \"1\" } } }");
    assert_eq!(side(&t, &Req::new("/?a=2&beta=1")), Side::Canary);
    assert_eq!(side(&t, &Req::new("/?beta=0")), Side::Primary);
    assert_eq!(side(&t, &Req::new("/")), Side::Primary);
    let t = ab("{ queryParams: { name: { exact: \"a b\" } } }");
    assert_eq!(side(&t, &Req::new("/?name=a+b")), Side::Canary);

    let t = ab("{ method: { exact: POST } }");
    let mut r = Req::new("/");
    assert_eq!(side(&t, &r), Side::Primary);
    r.method = Method::POST;
    assert_eq!(side(&t, &r), Side::Canary);

    let t = ab("{ uri: { prefix: /api/v2 } }");
    assert_eq!(side(&t, &Req::new("/api/v2/users?x=1")), Side::Canary);
    assert_eq!(side(&t, &Req::new("/api/v1/users")), Side::Primary);
    let t = ab("{ uri: { regex: \"^/items/[0-9]+$\" } }");
    assert_eq!(side(&t, &Req::new("/items/42")), Side::Canary);
    assert_eq!(side(&t, &Req::new("/items/42/x")), Side::Primary);

    let t = ab("{ sourceIp: [\"192.0.2.0/24\", \"2001:db8::/32\"] }");
    let mut r = Req::new("/");
    assert_eq!(side(&t, &r), Side::Canary);
    r.ip = "198.51.100.1".parse().unwrap();
    assert_eq!(side(&t, &r), Side::Primary);
    r.ip = "2001:db8::5".parse().unwrap();
    assert_eq!(side(&t, &r), Side::Canary);
}

#[test]
fn all_conditions_of_an_item_must_hold_any_item_may_match() {
    let t = table(
        "  - name: app\n    primary: blue\n    canary: green\n    match:\n      - headers: { x-a: { exact: \"1\" } }\n        method: { exact: GET }\n      - queryParams: { b: { exact: \"1\" } }\n",
    );
    assert_eq!(side(&t, &Req::new("/").header("x-a", "1")), Side::Canary);
    let mut post = Req::new("/").header("x-a", "1");
    post.method = Method::POST;
    assert_eq!(
        side(&t, &post),
        Side::Primary,
        "second condition of item 0 fails"
    );
    assert_eq!(side(&t, &Req::new("/?b=1")), Side::Canary, "item 1 alone");
    assert_eq!(side(&t, &Req::new("/")), Side::Primary);
}

#[test]
fn host_then_longest_prefix() {
    let t = table(concat!(
        "  - { name: any-root, primary: blue, pathPrefix: / }\n",
        "  - { name: any-api, primary: blue, pathPrefix: /api }\n",
        "  - { name: exact-root, primary: blue, hosts: [app.example.com], pathPrefix: / }\n",
        "  - { name: exact-api-v2, primary: blue, hosts: [app.example.com], pathPrefix: /api/v2 }\n",
        "  - { name: wild, primary: blue, hosts: [\"*.example.com\"], pathPrefix: /wild }\n",
        "  - { name: wild-deep, primary: blue, hosts: [\"*.eu.example.com\"], pathPrefix: / }\n",
        "  - { name: only-exact-api, primary: blue, hosts: [api.example.com], pathPrefix: /v1 }\n",
    ));
    let name = |host: &str, path: &str| {
        let h = normalize_host(host);
        t.routing
            .find(&h, path)
            .map(|i| t.routing.routes[i].name.clone())
    };
    assert_eq!(
        name("app.example.com", "/api/v2/x").as_deref(),
        Some("exact-api-v2")
    );
    assert_eq!(
        name("app.example.com", "/api/v1").as_deref(),
        Some("exact-root")
    );
    assert_eq!(
        name("APP.Example.com:8080", "/x").as_deref(),
        Some("exact-root"),
        "case and port ignored"
    );
    assert_eq!(
        name("app.example.com.", "/x").as_deref(),
        Some("exact-root"),
        "trailing dot ignored"
    );
    assert_eq!(name("x.example.com", "/wild/1").as_deref(), Some("wild"));
    assert_eq!(
        name("x.example.com", "/other").as_deref(),
        Some("any-root"),
        "falls through to any-host"
    );
    assert_eq!(
        name("a.eu.example.com", "/wild").as_deref(),
        Some("wild-deep"),
        "longest wildcard first"
    );
    assert_eq!(
        name("example.com", "/wild").as_deref(),
        Some("any-root"),
        "*.x does not match x"
    );
    assert_eq!(
        name("api.example.com", "/v1/a").as_deref(),
        Some("only-exact-api")
    );
    assert_eq!(name("api.example.com", "/api").as_deref(), Some("any-api"));
    assert_eq!(name("other.org", "/api/x").as_deref(), Some("any-api"));
}

#[test]
fn no_route_when_nothing_matches() {
    let t = table("  - { name: a, primary: blue, hosts: [a.example.com], pathPrefix: /a }\n");
    assert_eq!(t.routing.find("a.example.com", "/b"), None);
    assert_eq!(t.routing.find("b.example.com", "/a"), None);
}

#[test]
fn normalize_host_forms() {
    assert_eq!(normalize_host("a.b"), "a.b");
    assert_eq!(normalize_host("A.B:80"), "a.b");
    assert_eq!(normalize_host("[::1]:8080"), "[::1]");
    assert_eq!(normalize_host("[::1]"), "[::1]");
    assert_eq!(normalize_host("127.0.0.1:1"), "127.0.0.1");
    assert!(matches!(
        normalize_host("lower.case"),
        std::borrow::Cow::Borrowed(_)
    ));
}

/// The 99.99% two-sided normal bound of a binomial count.
fn bounds(n: u64, p: f64) -> (u64, u64) {
    const Z: f64 = 3.891;
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    (
        (mean - Z * sd).floor() as u64,
        (mean + Z * sd).ceil() as u64,
    )
}

#[test]
fn weighted_split_within_binomial_bound() {
    const N: u64 = 100_000;
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    for w in [1u8, 10, 50, 90] {
        let t = table(&format!(
            "  - {{ name: app, primary: blue, canary: green, canaryWeight: {w} }}\n"
        ));
        let route = &t.routing.routes[0];
        let r = Req::new("/");
        let view = r.view();
        let canary = (0..N)
            .filter(|_| decide(&view, route, Draw::from_u64(rng.next_u64())).side == Side::Canary)
            .count() as u64;
        let (lo, hi) = bounds(N, w as f64 / 100.0);
        assert!(
            (lo..=hi).contains(&canary),
            "weight {w}: {canary} canary of {N}, expected {lo}..={hi}"
        );
    }
}

#[test]
fn weight_edges_are_exact() {
    let r = Req::new("/");
    for (w, want) in [(0u8, Side::Primary), (100, Side::Canary)] {
        let t = table(&format!(
            "  - {{ name: app, primary: blue, canary: green, canaryWeight: {w} }}\n"
        ));
        for draw in [0u8, 1, 50, 98, 99] {
            let d = decide_at(&t, &r, draw, 0);
            assert_eq!(d.side, want, "weight {w} draw {draw}");
            assert_eq!(d.reason, Reason::Weight);
        }
    }
    // Draw::from_u64 covers exactly 0..100.
    assert_eq!(Draw::from_u64(0).weight, 0);
    assert_eq!(Draw::from_u64(u64::MAX).weight, 99);
    assert_eq!(Draw::from_u64(u64::MAX).mirror, 99);
}

#[test]
fn match_wins_over_weight_and_no_canary_means_primary() {
    let t = table("  - name: app\n    primary: blue\n    canary: green\n    canaryWeight: 0\n    match:\n      - headers: { x-canary: { exact: insider } }\n");
    let r = Req::new("/").header("x-canary", "insider");
    let d = decide_at(&t, &r, 0, 0);
    assert_eq!((d.side, d.reason), (Side::Canary, Reason::Match));
    let t = table("  - { name: app, primary: blue }\n");
    let d = decide_at(&t, &r, 0, 0);
    assert_eq!(
        (d.side, d.reason, d.mirror),
        (Side::Primary, Reason::NoCanary, false)
    );
}

#[test]
fn mirror_only_for_primary_bound_requests_and_by_weight() {
    let t = table("  - { name: app, primary: blue, canary: green, canaryWeight: 50, mirror: { weight: 30 } }\n");
    let r = Req::new("/");
    let d = |w: u8, m: u8| decide_at(&t, &r, w, m);
    assert!(d(60, 29).mirror, "primary side, mirror draw under 30");
    assert!(!d(60, 30).mirror, "mirror draw at 30 is outside");
    assert!(!d(10, 0).mirror, "canary-bound requests are never mirrored");
}

/// `any_cookie` skips the pieces that cannot hold the name; what it offers
/// must still be exactly what `Cookie::split_parse` over every header gives.
#[test]
fn any_cookie_agrees_with_split_parse() {
    let pieces = [
        "a=b",
        " canary=always",
        "canary=never ",
        "canary",
        "=canary",
        "canary=",
        "xcanary=1",
        "canaryx=2",
        "  ",
        "",
        "canary=a%20b",
        "canary=%zz",
        "c=canary",
        "canary = spaced",
        "\"canary\"=q",
        "canary=\"quoted\"",
        "beta=yes",
    ];
    let mut rng = SmallRng::seed_from_u64(0xc00c1e);
    for _ in 0..5_000 {
        let mut r = Req::new("/");
        for _ in 0..1 + rng.next_u32() % 3 {
            // Now and then a long header.
            let n = if rng.next_u32() % 8 == 0 {
                30 + rng.next_u32() % 8
            } else {
                rng.next_u32() % 5
            };
            let h: Vec<&str> = (0..n)
                .map(|_| pieces[rng.next_u32() as usize % pieces.len()])
                .collect();
            r = r.header("cookie", &h.join(";"));
        }
        for name in ["canary", "beta", "a"] {
            let want: Vec<String> = r
                .headers
                .get_all(http::header::COOKIE)
                .iter()
                .filter_map(|h| h.to_str().ok())
                .flat_map(cookie::Cookie::split_parse)
                .filter_map(|c| c.ok())
                .filter(|c| c.name_raw() == Some(name))
                .filter_map(|c| {
                    let raw = c.value_raw()?.to_string();
                    if !raw.contains('%') {
                        return Some(raw);
                    }
                    cookie::Cookie::parse_encoded(format!("{name}={raw}"))
                        .ok()
                        .map(|d| d.value().to_string())
                })
                .collect();
            let view = r.view();
            let mut got: Vec<String> = Vec::new();
            view.any_cookie(name, |v| {
                got.push(v.into_owned());
                false
            });
            assert_eq!(got, want, "{name} in {:?}", r.headers);
        }
    }
}

/// Header and cookie rules give the same answer on hyper's map and on the
/// fast path's raw list (names in any case), and both give what the
/// definition says: a header value exists only when it is visible ASCII
/// (`HeaderValue::to_str`), several Cookie headers are joined with "; ", and
/// cookies are `Cookie::split_parse` over the visible Cookie headers.
#[test]
fn rules_read_map_and_raw_headers_alike_and_as_defined() {
    let spec = table(
        r#"  - name: r
    primary: blue
    canary: green
    match:
      - headers: { x-t: { exact: "a" } }
      - headers: { x-t: { prefix: "a" } }
      - headers: { x-t: { suffix: "z" } }
      - headers: { x-t: { regex: "(?i)android.*mobile" } }
      - headers: { x-t: { present: true } }
      - headers: { x-t: { present: false } }
      - headers: { cookie: { regex: "^(.*?;)?(canary=always)(;.*)?$" } }
      - headers: { cookie: { present: false } }
      - headers: { cookie: { suffix: "=1" } }
      - cookies: { canary: { exact: "always" } }
      - cookies: { canary: { present: true } }
      - cookies: { canary: { present: false } }
      - cookies: { canary: { regex: "^al" } }
"#,
    );
    let route = &spec.routing.routes[0];
    let x_t: &[&[u8]] = &[
        b"a",
        b"az",
        b"xyz",
        b"Android 14 Mobile",
        b"android \xff mobile",
        b"a\xe9",
        b"a\tz",
        b"",
    ];
    let cookies: &[&[u8]] = &[
        b"canary=always",
        b"a=1; canary=always",
        b"canary=never; b=1",
        b"canary=alw\xffays",
        b"x=\xff; canary=always",
        b"canary",
        b"canary=%61lways",
        b"",
    ];
    let mut rng = SmallRng::seed_from_u64(0x6d61_7072);
    for _ in 0..4_000 {
        let mut list: Vec<(&'static str, &[u8])> = Vec::new();
        for _ in 0..rng.next_u32() % 3 {
            list.push(("x-t", x_t[rng.next_u32() as usize % x_t.len()]));
        }
        for _ in 0..rng.next_u32() % 3 {
            list.push(("cookie", cookies[rng.next_u32() as usize % cookies.len()]));
        }
        list.push(("accept", b"*/*"));
        // Random order, so repeated names are interleaved with others.
        for i in (1..list.len()).rev() {
            list.swap(i, rng.next_u32() as usize % (i + 1));
        }
        let names: Vec<String> = list.iter().map(|(k, _)| mixed_case(k, &mut rng)).collect();
        let (map, raw) = both_forms(&list, &names);
        let method = Method::GET;
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let on_map = RequestView::new("h", "/", None, &method, &map, ip);
        let on_raw = RequestView::raw("h", "/", None, &method, &raw, ip);

        // The definition, from the map with the http crate's own reading.
        let visible = |name: &str| -> Vec<&str> {
            map.get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect()
        };
        let cookie_headers = visible("cookie");
        let joined = (!cookie_headers.is_empty()).then(|| cookie_headers.join("; "));
        let jar: Vec<String> = cookie_headers
            .iter()
            .flat_map(|h| cookie::Cookie::split_parse_encoded(*h))
            .filter_map(|c| c.ok())
            .filter(|c| c.name() == "canary")
            .map(|c| c.value().to_string())
            .collect();
        for (i, rule) in route.matches.iter().enumerate() {
            let want = match (rule.headers.first(), rule.cookies.first()) {
                (Some((name, m)), _) if name == "cookie" => m.matches_opt(joined.as_deref()),
                (Some((name, m)), _) => m.matches_any(visible(name.as_str()).into_iter()),
                (_, Some((_, m))) => m.matches_any(jar.iter()),
                _ => unreachable!("every rule has one condition"),
            };
            assert_eq!(rule.matches(&on_map), want, "rule {i} on map {list:?}");
            assert_eq!(rule.matches(&on_raw), want, "rule {i} on raw {raw:?}");
        }
    }
}

/// `list` as hyper's map, and as the fast path's raw list with the names
/// written as in `names` (one per entry).
pub(super) fn both_forms<'a, V: AsRef<[u8]>>(
    list: &'a [(&'static str, V)],
    names: &'a [String],
) -> (HeaderMap, Vec<httparse::Header<'a>>) {
    let mut map = HeaderMap::new();
    for (k, v) in list {
        map.append(*k, HeaderValue::from_bytes(v.as_ref()).unwrap());
    }
    let raw = list
        .iter()
        .zip(names)
        .map(|((_, v), n)| httparse::Header {
            name: n,
            value: v.as_ref(),
        })
        .collect();
    (map, raw)
}

/// `name` with each letter's case drawn at random: the fast path's raw
/// names keep whatever case the client sent.
pub(super) fn mixed_case(name: &str, rng: &mut SmallRng) -> String {
    name.chars()
        .map(|c| {
            if rng.next_u32().is_multiple_of(2) {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

/// The word-at-a-time capital check agrees with the byte one on every byte
/// value at every position of a word and of the tail.
#[test]
fn normalize_host_lowercases_exactly_when_a_capital_is_present() {
    for len in [1usize, 7, 8, 9, 16, 19, 24] {
        for pos in 0..len {
            for b in 0..=255u8 {
                let mut host = vec![b'a'; len];
                host[pos] = b;
                let Ok(s) = std::str::from_utf8(&host) else {
                    continue;
                };
                if b == b':' || b == b'.' || b == b'[' {
                    continue;
                }
                let got = normalize_host(s);
                assert_eq!(
                    matches!(got, std::borrow::Cow::Owned(_)),
                    b.is_ascii_uppercase(),
                    "{s:?}"
                );
                assert_eq!(got, s.to_ascii_lowercase(), "{s:?}");
            }
        }
    }
}

/// A route whose canary slot was removed (`canary: null`) has ended its run like any
/// other: a client still presenting the canary cookie gets it deleted, and nothing else
/// is set.
#[test]
fn a_route_without_canary_still_deletes_the_old_canary_cookie() {
    let t = table("  - name: app\n    primary: blue\n    sessionAffinity: { cookieName: weir-canary, primaryCookieName: weir-primary, domain: example.com, path: / }\n    affinityState: { previousCanaryValue: OldRunValue123 }\n");
    let route = &t.routing.routes[0];
    for draw in [0, 99] {
        let draw = Draw {
            weight: draw,
            mirror: draw,
        };
        let stale = Req::new("/").header("cookie", "a=1; weir-canary=OldRunValue123");
        let d = decide(&stale.view(), route, draw);
        assert_eq!((d.side, d.reason), (Side::Primary, Reason::NoCanary));
        assert_eq!(
            d.cookies,
            crate::affinity::CookieActions {
                expire_canary: Some("OldRunValue123".to_string()),
                ..Default::default()
            }
        );
        let set: Vec<String> = d
            .cookies
            .render(
                route.affinity.as_ref().expect("affinity"),
                &route.pin_cookies,
            )
            .iter()
            .map(|v| v.to_str().expect("ascii").to_string())
            .collect();
        assert_eq!(set.len(), 1, "{set:?}");
        for part in [
            "weir-canary=OldRunValue123",
            "Max-Age=-1",
            "Domain=example.com",
            "Path=/",
        ] {
            assert!(set[0].split("; ").any(|p| p == part), "{part} in {set:?}");
        }
        let clean = Req::new("/").header("cookie", "a=1");
        assert!(decide(&clean.view(), route, draw).cookies.is_empty());
    }
}
