//! The Istio/Gateway API vocabulary of a match item: `withoutHeaders`,
//! `ignoreUriCase`, `scheme`, `authority`, `port`.

use super::tests::table;
use super::*;
use http::{HeaderMap, HeaderValue, Method};

/// A request on a listener: its authority as sent, TLS or not, the port.
struct On {
    path: &'static str,
    headers: Vec<(&'static str, &'static str)>,
    authority: &'static str,
    tls: bool,
    port: u16,
}

impl On {
    fn new(path: &'static str) -> Self {
        On {
            path,
            headers: Vec::new(),
            authority: "app.example.com",
            tls: false,
            port: 8080,
        }
    }
    fn header(mut self, k: &'static str, v: &'static str) -> Self {
        self.headers.push((k, v));
        self
    }
}

/// The side on a route with one match item `rule`, on both header
/// representations (they must agree).
fn side(rule: &str, r: &On) -> Side {
    let t = table(&format!(
        "  - name: app\n    primary: blue\n    canary: green\n    match:\n      - {rule}\n"
    ));
    let route = &t.routing.routes[0];
    let mut map = HeaderMap::new();
    for (k, v) in &r.headers {
        map.append(*k, HeaderValue::from_static(v));
    }
    let raw: Vec<httparse::Header<'_>> = r
        .headers
        .iter()
        .map(|(k, v)| httparse::Header {
            name: k,
            value: v.as_bytes(),
        })
        .collect();
    let m = Method::GET;
    let ip = "192.0.2.1".parse().unwrap();
    let host = normalize_host(r.authority);
    let draw = Draw {
        weight: 99,
        mirror: 99,
    };
    let on_map =
        RequestView::new(&host, r.path, None, &m, &map, ip).on_listener(r.authority, r.tls, r.port);
    let on_raw =
        RequestView::raw(&host, r.path, None, &m, &raw, ip).on_listener(r.authority, r.tls, r.port);
    let a = decide(&on_map, route, draw).side;
    let b = decide(&on_raw, route, draw).side;
    assert_eq!(a, b, "map and raw headers disagree on {rule}");
    a
}

#[test]
fn without_headers_fails_the_item_when_any_of_them_holds() {
    let rule = "{ headers: { x-beta: { present: true } }, withoutHeaders: { x-internal: { exact: \"1\" }, user-agent: { regex: \"(?i)bot\" } } }";
    assert_eq!(
        side(rule, &On::new("/").header("x-beta", "y")),
        Side::Canary
    );
    let internal = On::new("/").header("x-beta", "y").header("x-internal", "1");
    assert_eq!(side(rule, &internal), Side::Primary);
    let other = On::new("/").header("x-beta", "y").header("x-internal", "2");
    assert_eq!(side(rule, &other), Side::Canary);
    let bot = On::new("/")
        .header("x-beta", "y")
        .header("user-agent", "GoogleBot/2");
    assert_eq!(side(rule, &bot), Side::Primary);
    // Every value of a repeated header is looked at.
    let repeated = On::new("/")
        .header("x-beta", "y")
        .header("x-internal", "0")
        .header("x-internal", "1");
    assert_eq!(side(rule, &repeated), Side::Primary);

    // Alone, it selects every request without the header.
    let rule = "{ withoutHeaders: { x-legacy: { present: true } } }";
    assert_eq!(side(rule, &On::new("/")), Side::Canary);
    assert_eq!(
        side(rule, &On::new("/").header("x-legacy", "")),
        Side::Primary
    );
}

#[test]
fn without_headers_on_cookie_reads_the_joined_header_and_keeps_the_probe_honest() {
    // The positive cookie condition is what the route's cookie probe binds;
    // the negated one must not be mistaken for a requirement.
    let rule = "{ cookies: { beta: { exact: \"1\" } }, withoutHeaders: { cookie: { regex: \"optout=1\" } } }";
    assert_eq!(
        side(rule, &On::new("/").header("cookie", "beta=1")),
        Side::Canary
    );
    assert_eq!(
        side(rule, &On::new("/").header("cookie", "beta=1; optout=1")),
        Side::Primary
    );
    assert_eq!(
        side(
            rule,
            &On::new("/")
                .header("cookie", "beta=1")
                .header("cookie", "optout=1")
        ),
        Side::Primary
    );
    let rule = "{ withoutHeaders: { cookie: { regex: \"optout=1\" } } }";
    assert_eq!(side(rule, &On::new("/")), Side::Canary);
    assert_eq!(
        side(rule, &On::new("/").header("cookie", "a=b")),
        Side::Canary
    );
    assert_eq!(
        side(rule, &On::new("/").header("cookie", "optout=1")),
        Side::Primary
    );
}

#[test]
fn ignore_uri_case_covers_every_kind_and_only_the_uri() {
    for (rule, yes, no) in [
        (
            "{ uri: { exact: /Login }, ignoreUriCase: true }",
            "/LOGIN",
            "/login/x",
        ),
        (
            "{ uri: { prefix: /API/v2 }, ignoreUriCase: true }",
            "/api/V2/users",
            "/api/v1",
        ),
        (
            "{ uri: { suffix: .JSON }, ignoreUriCase: true }",
            "/a/b.json",
            "/a/b.jso",
        ),
        (
            "{ uri: { regex: \"^/items/[a-z]+$\" }, ignoreUriCase: true }",
            "/ITEMS/Abc",
            "/items/1",
        ),
    ] {
        assert_eq!(side(rule, &On::new(yes)), Side::Canary, "{rule} on {yes}");
        assert_eq!(side(rule, &On::new(no)), Side::Primary, "{rule} on {no}");
    }
    // Without it, the uri is case-sensitive, as in Istio.
    assert_eq!(
        side("{ uri: { exact: /Login } }", &On::new("/login")),
        Side::Primary
    );
    assert_eq!(
        side(
            "{ uri: { exact: /Login }, ignoreUriCase: false }",
            &On::new("/login")
        ),
        Side::Primary
    );
    // A caseless prefix longer than the path, and a multi-byte path, are plain misses.
    assert_eq!(
        side(
            "{ uri: { prefix: /abcdef }, ignoreUriCase: true }",
            &On::new("/ab")
        ),
        Side::Primary
    );
    assert_eq!(
        side(
            "{ uri: { suffix: É }, ignoreUriCase: true }",
            &On::new("/é")
        ),
        Side::Primary
    );
}

#[test]
fn scheme_authority_and_port_come_from_the_listener() {
    let https = On {
        tls: true,
        port: 8443,
        ..On::new("/")
    };
    assert_eq!(side("{ scheme: { exact: https } }", &https), Side::Canary);
    assert_eq!(
        side("{ scheme: { exact: https } }", &On::new("/")),
        Side::Primary
    );
    assert_eq!(
        side("{ scheme: { exact: http } }", &On::new("/")),
        Side::Canary
    );
    // A client's X-Forwarded-Proto is not the scheme.
    let forged = On::new("/").header("x-forwarded-proto", "https");
    assert_eq!(side("{ scheme: { exact: https } }", &forged), Side::Primary);

    assert_eq!(side("{ port: 8443 }", &https), Side::Canary);
    assert_eq!(side("{ port: 8443 }", &On::new("/")), Side::Primary);

    // The authority as sent: port included, case-sensitive (Istio).
    let with_port = On {
        authority: "app.example.com:8080",
        ..On::new("/")
    };
    assert_eq!(
        side("{ authority: { exact: app.example.com } }", &On::new("/")),
        Side::Canary
    );
    assert_eq!(
        side("{ authority: { exact: app.example.com } }", &with_port),
        Side::Primary
    );
    assert_eq!(
        side("{ authority: { prefix: app.example.com } }", &with_port),
        Side::Canary
    );
    assert_eq!(
        side(
            "{ authority: { regex: \"^app\\\\.example\\\\.com(:[0-9]+)?$\" } }",
            &with_port
        ),
        Side::Canary
    );
    let upper = On {
        authority: "App.Example.com",
        ..On::new("/")
    };
    assert_eq!(
        side("{ authority: { exact: app.example.com } }", &upper),
        Side::Primary
    );

    // All conditions of an item hold together.
    let rule = "{ scheme: { exact: https }, port: 8443, authority: { suffix: example.com } }";
    assert_eq!(side(rule, &https), Side::Canary);
    let other_port = On {
        port: 9443,
        ..https
    };
    assert_eq!(side(rule, &other_port), Side::Primary);
}

#[test]
fn a_view_without_listener_facts_is_http_on_port_0_with_the_host_as_authority() {
    let h = HeaderMap::new();
    let m = Method::GET;
    let v = RequestView::new("h.example", "/", None, &m, &h, "127.0.0.1".parse().unwrap());
    assert_eq!(v.scheme, Scheme::Http);
    assert_eq!(v.port, 0);
    assert_eq!(v.authority, "h.example");
}
