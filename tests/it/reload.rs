//! SIGHUP reloads the config file's routing table (the real binary): a valid file
//! is applied under a new table version, an invalid one is refused with its field
//! and the running state untouched, a canary-driven route keeps its running
//! definition, and sections that need a restart are named.

use crate::proto_support;

use bytes::Bytes;
use http_body_util::Full;
use proto_support::*;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpStream;
use weir::echo::EchoHandle;

async fn backend(version: &str) -> EchoHandle {
    echo_backend(version, Duration::ZERO).await
}

/// The version of the backend that answered `host`, or the status if not 200.
async fn served_by(proxy: SocketAddr, host: &str) -> String {
    let mut s = h1::<_, Full<Bytes>>(TcpStream::connect(proxy).await.unwrap()).await;
    let a = read_answer(s.send_request(get_req(host, "/echo")).await.unwrap()).await;
    if a.status != 200 {
        return a.status.to_string();
    }
    a.json()["version"].as_str().unwrap_or_default().to_string()
}

/// GET on the admin API: (body as JSON, ETag without quotes).
async fn admin_get(admin: SocketAddr, path: &str) -> (serde_json::Value, String) {
    let mut s = h1::<_, Full<Bytes>>(TcpStream::connect(admin).await.unwrap()).await;
    let host = admin.to_string();
    let a = read_answer(s.send_request(get_req(&host, path)).await.unwrap()).await;
    assert_eq!(a.status, 200, "{path}: {}", a.text());
    let etag = a
        .headers
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .trim_matches('"')
        .to_string();
    (a.json(), etag)
}

fn config(blue: SocketAddr, green: SocketAddr, routes: &str, extra: &str) -> String {
    format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\n{extra}backends:\n  blue:\n    endpoints: [\"{blue}\"]\n  green:\n    endpoints: [\"{green}\"]\nroutes:\n{routes}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_a_valid_table_and_refuses_an_invalid_file_untouched() {
    let (v1, v2) = (backend("v1").await, backend("v2").await);
    let routes = "  - { name: app, hosts: [app.test], primary: blue }\n";
    let mut weir = Weir::start(&config(v1.addr, v2.addr, routes, ""));
    let (proxy, admin) = (weir.proxy_addr, weir.admin_addr);
    assert_eq!(served_by(proxy, "app.test").await, "v1");
    assert_eq!(served_by(proxy, "new.test").await, "404");
    let (_, v0) = admin_get(admin, "/api/v1/table").await;

    // A valid change: app moves to green, a new route appears.
    let routes = "  - { name: app, hosts: [app.test], primary: green }\n  - { name: new, hosts: [new.test], primary: blue }\n";
    std::fs::write(&weir.config, config(v1.addr, v2.addr, routes, "")).unwrap();
    weir.signal("-HUP");
    weir.wait_line("config reloaded", Duration::from_secs(20))
        .expect("no reload logged");
    assert_eq!(served_by(proxy, "app.test").await, "v2");
    assert_eq!(served_by(proxy, "new.test").await, "v1");
    let (_, v1_tag) = admin_get(admin, "/api/v1/table").await;
    assert_eq!(
        v1_tag.parse::<u64>().unwrap(),
        v0.parse::<u64>().unwrap() + 1,
        "one reload, one new table version"
    );

    // An invalid file: refused with the field named, nothing changes.
    let bad = "  - { name: app, hosts: [app.test], primary: green, canary: nowhere, canaryWeight: 150 }\n";
    std::fs::write(&weir.config, config(v1.addr, v2.addr, bad, "")).unwrap();
    weir.signal("-HUP");
    weir.wait_line("config reload refused", Duration::from_secs(20))
        .expect("no refusal logged");
    // Every error is logged in `weir check`'s form, the field first.
    let why = weir
        .wait_line("routes[0].canaryWeight", Duration::from_secs(5))
        .expect("the refusal names the field");
    assert!(why.contains("error: routes[0].canaryWeight: "), "{why}");
    assert!(weir.running(), "an invalid reload stopped the process");
    let (_, tag) = admin_get(admin, "/api/v1/table").await;
    assert_eq!(tag, v1_tag, "the table version moved on a refused reload");
    assert_eq!(served_by(proxy, "app.test").await, "v2");
    assert_eq!(served_by(proxy, "new.test").await, "v1");

    // A section that needs a restart is named; the table part still applies.
    let routes = "  - { name: app, hosts: [app.test], primary: blue }\n";
    let proxy_section = "proxy:\n  drainTimeout: 5s\n";
    std::fs::write(
        &weir.config,
        config(v1.addr, v2.addr, routes, proxy_section),
    )
    .unwrap();
    weir.signal("-HUP");
    let line = weir
        .wait_line("applied only at a restart", Duration::from_secs(20))
        .expect("the restart-only section is named");
    assert!(line.contains("proxy"), "{line}");
    assert_eq!(served_by(proxy, "app.test").await, "v1");
    assert_eq!(served_by(proxy, "new.test").await, "404");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_driven_route_keeps_its_running_definition() {
    let (v1, v2) = (backend("v1").await, backend("v2").await);
    let canary = "canaries:\n  - name: app\n    route: app\n    analysis:\n      interval: 1s\n      threshold: 2\n      stepWeight: 50\n      maxWeight: 50\n";
    let routes = "  - { name: app, hosts: [app.test], primary: blue, canary: green }\n  - { name: other, hosts: [other.test], primary: blue }\n";
    let mut weir = Weir::start(&format!("{}{canary}", config(v1.addr, v2.addr, routes, "")));
    let (proxy, admin) = (weir.proxy_addr, weir.admin_addr);
    // The engine writes the route when it initialises the canary (weight 0):
    // compare with the route as the engine drives it, not as it was before.
    let initialised = eventually(Duration::from_secs(20), || async {
        admin_get(admin, "/api/v1/canaries/app").await.0["phase"] == "Initialized"
    })
    .await;
    if !initialised {
        let (c, _) = admin_get(admin, "/api/v1/canaries/app").await;
        panic!("the canary was not initialised: {c}");
    }
    let (before, _) = admin_get(admin, "/api/v1/routes/app").await;

    // The file sends all of app to the canary and moves `other` to green.
    let routes = "  - { name: app, hosts: [app.test], primary: blue, canary: green, canaryWeight: 100 }\n  - { name: other, hosts: [other.test], primary: green }\n";
    std::fs::write(
        &weir.config,
        format!("{}{canary}", config(v1.addr, v2.addr, routes, "")),
    )
    .unwrap();
    weir.signal("-HUP");
    let line = weir
        .wait_line("driven by a canary", Duration::from_secs(20))
        .expect("the kept route is named");
    assert!(line.contains("route=app"), "{line}");
    let (after, _) = admin_get(admin, "/api/v1/routes/app").await;
    assert_eq!(
        (&after["primary"], &after["canaryWeight"]),
        (&before["primary"], &before["canaryWeight"]),
        "the canary-driven route changed: {before} -> {after}"
    );
    assert_eq!(served_by(proxy, "app.test").await, "v1");
    assert_eq!(served_by(proxy, "other.test").await, "v2");
}

#[test]
fn a_changed_alert_provider_is_named_by_a_reload_as_applied_at_the_next_start() {
    let dir = std::env::temp_dir().join(format!("weir-reload-alerts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("weir.yaml");
    let config = |channel: &str| {
        format!(
            "listeners:\n  - {{ name: http, address: \"127.0.0.1:0\" }}\nadmin: {{ address: \"127.0.0.1:0\" }}\n\
             alertProviders:\n  team: {{ type: slack, address: \"https://hooks.example.test/x\", channel: \"{channel}\" }}\n\
             backends:\n  app: {{ endpoints: [\"127.0.0.1:9\"] }}\nroutes:\n  - {{ name: app, primary: app }}\n"
        )
    };
    std::fs::write(&path, config("#a")).unwrap();
    let (raw, cfg) = weir::config::load_file_with_raw(&path).unwrap();
    let started = weir::reload::Started::new(raw);
    let store = weir::dataplane::store::TableStore::new(cfg.table);
    std::fs::write(&path, config("#b")).unwrap();
    let r = weir::reload::reload(&path, &started, &store).unwrap();
    assert_eq!(r.needs_restart, vec!["alertProviders"]);
    let _ = std::fs::remove_dir_all(&dir);
}
