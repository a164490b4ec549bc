//! Session affinity end to end: cookie-jar clients stay on the
//! side they first landed on; the old cookie is deleted after the run.

use crate::support;

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

/// `set` (one answer's Set-Cookie values) deletes the canary pin of the run
/// whose value is `run` with the same Domain and Path, and `jar` dropped it.
fn assert_canary_pin_deleted(set: &[String], run: &str, jar: &Jar, context: &str) {
    let del = set
        .iter()
        .find(|s| s.starts_with("weir-canary="))
        .unwrap_or_else(|| panic!("{context}: no deleting Set-Cookie in {set:?}"));
    let parts: std::collections::BTreeSet<&str> = del.split(';').map(str::trim).collect();
    for want in [
        format!("weir-canary={run}").as_str(),
        "Max-Age=-1",
        "Domain=app.test",
        "Path=/",
    ] {
        assert!(
            parts.contains(want),
            "{context}: {want:?} missing in {del:?}"
        );
    }
    assert!(
        !jar.cookies.contains_key("weir-canary"),
        "{context}: the jar deleted it"
    );
}

/// Sets route `app`'s canary weight in the in-process table, as the end or
/// the start of a run does.
fn set_canary_weight(app: &weir::app::RunningApp, weight: i64) {
    app.store
        .update_route("app", None, "test", |r| {
            r.canary_weight = Some(weight);
            Ok(())
        })
        .map_err(|e| format!("{e:?}"))
        .unwrap();
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
    set_canary_weight(&app, 0);
    let mut checked = 0;
    for (first, jar) in jars.iter_mut().filter(|(f, _)| f == "v2").take(20) {
        let (v, set) = jar_get(&c, app.proxy_addr(), jar).await;
        assert_eq!(
            v, "v1",
            "after the run a {first} client lands on the primary"
        );
        assert_canary_pin_deleted(&set, &run1, jar, "after the run");
        checked += 1;
    }
    assert!(checked > 0);

    // The next run gets a new value.
    set_canary_weight(&app, 30);
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

/// Polls the in-process table until route `app` has a canary weight above 0.
async fn wait_for_weight(app: &weir::app::RunningApp) -> u8 {
    let w = || app.store.load().spec.routing.routes[0].canary_weight;
    assert!(
        eventually(std::time::Duration::from_secs(30), || async { w() > 0 }).await,
        "the engine never moved the weight"
    );
    w()
}

async fn engine_command(app: &weir::app::RunningApp, cmd: weir::rollout::ManualCommand) {
    let out = app.engine.command("app", cmd).await.expect("delivered");
    assert!(out.accepted, "{}", out.message);
}

/// With the engine driving the route, the primary pin lasts one analysis interval (here
/// 2 s; the old fixed 60 s outlived a step), on both HTTP/1 paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_gives_the_primary_cookie_the_analysis_interval_as_max_age() {
    for fast in [true, false] {
        let blue = echo("v1").await;
        let green = echo("v2").await;
        let yaml = format!(
            "proxy: {{ http1FastPath: {fast} }}\n{}canaries:\n  - name: app\n    route: app\n    analysis:\n      interval: 2s\n      stepWeight: 50\n      sessionAffinity: {{ cookieName: weir-canary, primaryCookieName: weir-primary }}\n",
            two_slot_config(blue.addr, green.addr, "")
        );
        let app = proxy(&yaml).await;
        let initialized = || {
            app.engine
                .status("app")
                .is_some_and(|s| s.phase == weir::rollout::Phase::Initialized)
        };
        assert!(
            eventually(std::time::Duration::from_secs(30), || async {
                initialized()
            })
            .await
        );
        engine_command(
            &app,
            weir::rollout::ManualCommand::Start {
                revision: "v2".into(),
            },
        )
        .await;
        assert_eq!(wait_for_weight(&app).await, 50);
        // Frozen at 50 % so the route cannot change under the requests.
        engine_command(&app, weir::rollout::ManualCommand::Pause).await;
        let c = client();
        let mut primary_cookie = None;
        // At 50 % each fresh client lands on the primary with p = 1/2: 64 misses in a
        // row happen with p = 2^-64.
        for _ in 0..64 {
            let mut jar = Jar::default();
            let (v, set) = jar_get(&c, app.proxy_addr(), &mut jar).await;
            if v == "v1" {
                primary_cookie = set.into_iter().find(|s| s.starts_with("weir-primary="));
                break;
            }
        }
        let cookie = primary_cookie.expect("a primary-pinned client with its cookie");
        let parts: Vec<&str> = cookie.split(';').map(str::trim).collect();
        assert!(parts.contains(&"Max-Age=2"), "fast path {fast}: {cookie:?}");
    }
}

/// `PATCH {"canaryWeight": 0, "canary": null}` through the real admin API ends the run
/// too: the old canary cookie is deleted (`Max-Age=-1`, same Domain and Path), on both
/// HTTP/1 paths.
#[tokio::test]
async fn removing_the_canary_through_the_api_deletes_the_old_canary_cookie() {
    for fast in [true, false] {
        let blue = echo("v1").await;
        let green = echo("v2").await;
        let yaml = format!(
            "proxy: {{ http1FastPath: {fast} }}\n{}",
            two_slot_config(
                blue.addr,
                green.addr,
                &format!("    canaryWeight: 100\n{AFFINITY}")
            )
        );
        let app = proxy(&yaml).await;
        let c = client();
        let mut jar = Jar::default();
        let (v, _) = jar_get(&c, app.proxy_addr(), &mut jar).await;
        assert_eq!(v, "v2", "weight 100 draws the canary");
        let run = jar.cookies.get("weir-canary").cloned().expect("canary pin");

        let body = r#"{"canaryWeight": 0, "canary": null}"#;
        let req = http::Request::builder()
            .method(http::Method::PATCH)
            .uri(format!("http://{}/api/v1/routes/app", app.admin_addr))
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .expect("request");
        let r = send(&c, req).await;
        assert_eq!(r.status, 200, "{}", r.text());

        let (v, set) = jar_get(&c, app.proxy_addr(), &mut jar).await;
        assert_eq!(v, "v1", "fast path {fast}");
        assert_canary_pin_deleted(&set, &run, &jar, &format!("fast path {fast}"));
        // Once deleted, nothing more is set.
        let (_, set) = jar_get(&c, app.proxy_addr(), &mut jar).await;
        assert!(set.is_empty(), "fast path {fast}: {set:?}");
    }
}
