//! Session affinity end to end (issue 4): cookie-jar clients stay on the
//! side they first landed on; the old cookie is deleted after the run.

mod support;

use std::collections::BTreeMap;
use support::*;

/// A minimal RFC 6265 cookie jar for one host: stores by name, honours
/// Max-Age <= 0 as deletion, sends every stored cookie.
#[derive(Default, Clone)]
struct Jar {
    cookies: BTreeMap<String, String>,
}

impl Jar {
    fn header(&self) -> Option<String> {
        if self.cookies.is_empty() {
            return None;
        }
        Some(
            self.cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("; "),
        )
    }
    fn absorb(&mut self, r: &Resp) -> Vec<String> {
        let mut raw = Vec::new();
        for v in r.headers.get_all("set-cookie") {
            let s = v.to_str().unwrap().to_string();
            let c = cookie::Cookie::parse(s.clone()).expect("valid Set-Cookie");
            let expired =
                c.max_age().is_some_and(|m| m.whole_seconds() <= 0) || s.contains("Max-Age=-1");
            if expired {
                self.cookies.remove(c.name());
            } else {
                self.cookies
                    .insert(c.name().to_string(), c.value().to_string());
            }
            raw.push(s);
        }
        raw
    }
}

async fn jar_get(
    c: &TestClient,
    addr: std::net::SocketAddr,
    jar: &mut Jar,
) -> (String, Vec<String>) {
    let h = jar.header();
    let headers: Vec<(&str, &str)> = h
        .as_deref()
        .map(|v| vec![("cookie", v)])
        .unwrap_or_default();
    let r = get_once(c, addr, "/", &headers).await;
    assert_eq!(r.status, 200);
    let set = jar.absorb(&r);
    (r.version().unwrap().to_string(), set)
}

const AFFINITY: &str = "    sessionAffinity:\n      cookieName: weir-canary\n      primaryCookieName: weir-primary\n      maxAge: 3600\n      domain: app.test\n      path: /\n";

#[tokio::test]
async fn clients_stay_pinned_during_the_run_and_the_old_cookie_is_deleted_after() {
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let app = proxy(&two_slot_config(
        blue.addr,
        green.addr,
        &format!("    canaryWeight: 30\n{AFFINITY}"),
    ))
    .await;
    let c = client();
    const CLIENTS: u64 = 200;
    let mut jars = Vec::new();
    let mut on_canary = 0;
    for i in 0..CLIENTS {
        let mut jar = Jar::default();
        let (first, _) = jar_get(&c, app.proxy_addr(), &mut jar).await;
        for _ in 1..20 {
            let (v, _) = jar_get(&c, app.proxy_addr(), &mut jar).await;
            assert_eq!(v, first, "client {i} flipped from {first} to {v}");
        }
        if first == "v2" {
            on_canary += 1;
            assert!(jar.cookies.contains_key("weir-canary"));
        } else {
            assert!(jar.cookies.contains_key("weir-primary"));
        }
        jars.push((first, jar));
    }
    let (lo, hi) = binomial_bounds(CLIENTS, 0.3, Z_9999);
    assert!(
        (lo..=hi).contains(&on_canary),
        "{on_canary} of {CLIENTS} clients pinned to canary; bound {lo}..={hi}"
    );
    let run1 = app.store.load().spec.routing.routes[0]
        .affinity_state
        .canary_value
        .clone()
        .unwrap();

    // End of the run: weight back to 0.
    app.store
        .update_route("app", None, "test", |r| {
            r.canary_weight = Some(0);
            Ok(())
        })
        .map_err(|e| format!("{e:?}"))
        .unwrap();
    let mut checked = 0;
    for (first, jar) in jars.iter_mut().filter(|(f, _)| f == "v2").take(20) {
        let (v, set) = jar_get(&c, app.proxy_addr(), jar).await;
        assert_eq!(
            v, "v1",
            "after the run a {first} client lands on the primary"
        );
        let del = set
            .iter()
            .find(|s| s.starts_with("weir-canary="))
            .expect("deleting Set-Cookie");
        let parts: std::collections::BTreeSet<&str> = del.split(';').map(str::trim).collect();
        for want in [
            format!("weir-canary={run1}").as_str(),
            "Max-Age=-1",
            "Domain=app.test",
            "Path=/",
        ] {
            assert!(parts.contains(want), "{want:?} missing in {del:?}");
        }
        assert!(
            !jar.cookies.contains_key("weir-canary"),
            "the jar deleted it"
        );
        checked += 1;
    }
    assert!(checked > 0);

    // The next run gets a new value.
    app.store
        .update_route("app", None, "test", |r| {
            r.canary_weight = Some(30);
            Ok(())
        })
        .map_err(|e| format!("{e:?}"))
        .unwrap();
    let run2 = app.store.load().spec.routing.routes[0]
        .affinity_state
        .canary_value
        .clone()
        .unwrap();
    assert_ne!(run1, run2);
    let mut saw_new = false;
    for _ in 0..200 {
        let mut jar = Jar::default();
        let (v, _) = jar_get(&c, app.proxy_addr(), &mut jar).await;
        if v == "v2" {
            assert_eq!(jar.cookies.get("weir-canary"), Some(&run2));
            saw_new = true;
            break;
        }
    }
    assert!(
        saw_new,
        "no client landed on the canary in 200 tries at 30%"
    );
}

#[tokio::test]
async fn a_forged_or_stale_cookie_cannot_select_the_canary() {
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let app = proxy(&two_slot_config(
        blue.addr,
        green.addr,
        &format!("    canaryWeight: 0\n{AFFINITY}"),
    ))
    .await;
    let c = client();
    for cookie in ["weir-canary=anything", "weir-canary=AAAAAAAAAAAAAAAA"] {
        for _ in 0..20 {
            let r = get_once(&c, app.proxy_addr(), "/", &[("cookie", cookie)]).await;
            assert_eq!(r.version(), Some("v1"), "{cookie}");
        }
    }
}
