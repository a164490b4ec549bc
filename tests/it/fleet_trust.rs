//! Who a fleet trusts: member records in etcd are text anyone with write access to
//! the prefix can write, so a record counts only while bound to a lease and with an
//! `apiUrl` inside `cluster.peerAllow`; replicas present the peer token to each
//! other, never the admin token, and the peer token opens only the data-plane calls.
//! Against a REAL etcd (the fixture of `cluster.rs`).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use weir::app::RunningApp;
use weir::cluster::etcd::EtcdClient;
use weir::rollout::Phase;

use crate::cluster::{cl, eventually, route_of, start_app};
use crate::support;
use crate::support::etcd::Etcd;

const ADMIN_TOKEN: &str = "admin-token-0123456789";
const PEER_TOKEN: &str = "peer-token-0123456789abc";
/// Lease TTL (2 s at a 500 ms heartbeat) plus slack for a loaded CI machine.
const CONVERGE: Duration = Duration::from_secs(12);
/// A whole run: four steps of 300 ms and the promotion, with slack.
const RUN_WAIT: Duration = Duration::from_secs(40);

fn yaml(etcd: &Etcd, dir: &Path, name: &str, blue: SocketAddr, green: SocketAddr) -> String {
    format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\n\
         admin:\n  address: 127.0.0.1:0\n  tokenFile: {admin}\n\
         cluster:\n  etcd: [\"{etcd}\"]\n  prefix: /weir-trust\n  replicas: auto\n  heartbeat: 500ms\n  name: {name}\n  peerTokenFile: {peer}\n  peerAllow: [\"127.0.0.1/32\"]\n\
         backends:\n  app-blue:\n    endpoints: [\"{blue}\"]\n  app-green:\n    endpoints: [\"{green}\"]\n\
         routes:\n  - name: app\n    hosts: [\"app.test\"]\n    primary: app-blue\n    canary: app-green\n\
         canaries:\n  - name: app\n    route: app\n    analysis:\n      interval: 300ms\n      threshold: 3\n      stepWeight: 25\n      maxWeight: 75\n",
        admin = dir.join("admin-token").display(),
        peer = dir.join("peer-token").display(),
        etcd = etcd.url(),
    )
}

/// An authenticated API call on `app`: (status, body).
async fn call(
    app: &RunningApp,
    method: &str,
    path: &str,
    token: &str,
    body: &str,
) -> (u16, String) {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", app.admin_addr))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .expect("request");
    let r = support::send(&support::client(), req).await;
    (r.status, r.text())
}

/// A record without a lease pointing at a listener the test holds, and a record
/// under a live lease pointing outside `peerAllow`: neither is a peer. The run is
/// driven on both real replicas and promoted; not one connection reaches the bait,
/// no tick waits for either record (their stats are never read), both refusals are
/// visible (events, the cluster document, the series), and the peer token opens the
/// data-plane calls only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_member_records_are_refused_and_never_called() {
    let Some(etcd) = Etcd::start("forged_member_records_are_refused_and_never_called").await else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("weir-trust-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("admin-token"), ADMIN_TOKEN).unwrap();
    std::fs::write(dir.join("peer-token"), PEER_TOKEN).unwrap();

    // The bait: counts every connection made to it.
    let bait = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bait_addr = bait.local_addr().unwrap();
    let hits = Arc::new(AtomicU64::new(0));
    let counted = hits.clone();
    let bait_task = tokio::spawn(async move {
        while let Ok((s, _)) = bait.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    let e = EtcdClient::new(&[etcd.url()], Duration::from_secs(2)).unwrap();
    let evil = json!({"name": "evil", "apiUrl": format!("http://{bait_addr}")}).to_string();
    e.put("/weir-trust/members/evil", evil.as_bytes(), 0)
        .await
        .unwrap();
    let lease = e.lease_grant(120).await.unwrap();
    let outsider = json!({"name": "outsider", "apiUrl": "http://127.0.0.2:9"}).to_string();
    e.put(
        "/weir-trust/members/outsider",
        outsider.as_bytes(),
        lease.id,
    )
    .await
    .unwrap();

    let (blue, green) = (support::echo("v1").await, support::echo("v2").await);
    let a = start_app(&yaml(&etcd, &dir, "a", blue.addr, green.addr)).await;
    let b = start_app(&yaml(&etcd, &dir, "b", blue.addr, green.addr)).await;
    let apps = [&a, &b];
    let refused_by_both = || {
        apps.iter().all(|app| {
            let names: Vec<String> = cl(app)
                .refused_peers()
                .into_iter()
                .map(|r| r.name)
                .collect();
            names == ["evil", "outsider"]
        })
    };
    assert!(
        eventually(CONVERGE, refused_by_both).await,
        "{:?}",
        cl(&a).status().refused_peers
    );
    let owned = || apps.iter().filter(|app| cl(app).may_drive("app")).count() == 1;
    assert!(eventually(CONVERGE, owned).await, "one owner of app");
    let (owner, other) = if cl(&a).may_drive("app") {
        (&a, &b)
    } else {
        (&b, &a)
    };
    // The owner's fleet: itself and the other replica, nothing else.
    let planes_ok = || {
        owner
            .engine
            .status("app")
            .is_some_and(|s| s.data_planes.len() == 2)
    };
    assert!(
        eventually(CONVERGE, planes_ok).await,
        "{:?}",
        owner.engine.status("app").map(|s| s.data_planes)
    );
    let planes = owner.engine.status("app").unwrap().data_planes;
    assert!(
        planes.contains(&format!("http://{}", other.admin_addr)),
        "{planes:?}"
    );
    let inited = || owner.engine.status("app").map(|s| s.phase) == Some(Phase::Initialized);
    assert!(eventually(CONVERGE, inited).await);
    // Started through the replica that does not own it: forwarded with the peer token.
    let (status, body) = call(
        other,
        "POST",
        "/api/v1/canaries/app/start",
        ADMIN_TOKEN,
        r#"{"revision": "v2"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let done = || owner.engine.status("app").map(|s| s.phase) == Some(Phase::Succeeded);
    assert!(
        eventually(RUN_WAIT, done).await,
        "{:?}",
        owner.engine.status("app").map(|s| (s.phase, s.message))
    );
    // The promotion reached the other replica through the peer token.
    assert_eq!(route_of(other, "app").primary, "app-green");
    assert_eq!(route_of(owner, "app").primary, "app-green");

    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a connection reached the bait"
    );
    let st = owner.engine.status("app").unwrap();
    for ev in &st.events {
        assert!(
            !(ev.message.contains("evil") || ev.message.contains("outsider")),
            "an event of the run names a forged record: {}",
            ev.message
        );
    }
    for app in apps {
        let log = cl(app).event_log();
        let refused: Vec<&str> = log
            .iter()
            .filter(|e| e.kind == "PeerRefused")
            .map(|e| e.message.as_str())
            .collect();
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(
            refused
                .iter()
                .any(|m| m.contains("\"evil\"") && m.contains("bound to no lease")),
            "{refused:?}"
        );
        assert!(
            refused.iter().any(|m| m.contains("\"outsider\"")
                && m.contains("points to 127.0.0.2, outside cluster.peerAllow (127.0.0.1/32)")),
            "{refused:?}"
        );
        let (status, metrics) = call(app, "GET", "/metrics", ADMIN_TOKEN, "").await;
        assert_eq!(status, 200);
        assert!(
            metrics.contains("weir_cluster_peers_refused_total 2"),
            "{metrics}"
        );
        let (_, doc) = call(app, "GET", "/api/v1/cluster", ADMIN_TOKEN, "").await;
        let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
        assert_eq!(doc["peersRefusedTotal"], 2, "{doc}");
        let members: Vec<&str> = doc["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["name"].as_str())
            .collect();
        assert!(!members.contains(&"evil"), "{members:?}");
        let outsider = doc["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "outsider")
            .expect("a leased record is a member, only not a peer");
        assert_eq!(outsider["trusted"], false, "{doc}");
    }

    // The console's fleet table, in a real browser: every member with the table
    // version it applied, the leased outsider not trusted, the forged record refused.
    if support::tool_available(
        "chromium",
        "forged_member_records_are_refused_and_never_called",
        "apt-get install chromium",
    ) {
        use crate::console::{cdp, lit};
        let mut br = cdp::Browser::launch().await;
        let tab = br
            .tab(&format!("http://{}/ui/", a.admin_addr), 1280, 900)
            .await;
        tab.wait(
            &mut br,
            "the token is asked",
            "document.getElementById('login').open",
            RUN_WAIT,
        )
        .await;
        let sign_in = format!(
            "document.getElementById('token').value = {}; document.getElementById('login-form').requestSubmit(); true",
            lit(ADMIN_TOKEN)
        );
        tab.eval(&mut br, &sign_in).await;
        tab.wait(
            &mut br,
            "the fleet table",
            "document.querySelectorAll('#members tbody tr').length === 3",
            RUN_WAIT,
        )
        .await;
        let cells = |member: &str| {
            format!(
                "Array.from(document.querySelectorAll('#members tr[data-member={}] td')).map((t) => t.textContent)",
                lit(member)
            )
        };
        let outsider = tab.eval(&mut br, &cells("outsider")).await;
        assert_eq!(outsider[4], "not trusted", "{outsider}");
        for member in ["a", "b"] {
            let row = tab.eval(&mut br, &cells(member)).await;
            let version: u64 = row[1].as_str().unwrap_or("").parse().unwrap_or(0);
            assert!(version > 0, "{member}: {row}");
            assert_eq!(row[4], "yes", "{row}");
        }
        let refused = tab
            .eval(&mut br, "document.getElementById('refused').textContent")
            .await;
        assert!(refused.as_str().unwrap_or("").contains("evil"), "{refused}");
        let errors = std::mem::take(&mut br.errors);
        assert!(errors.is_empty(), "the page reported errors: {errors:#?}");
        br.close().await;
    }

    // The peer token: the data-plane calls only.
    let (s, _) = call(&a, "GET", "/api/v1/routes/app", PEER_TOKEN, "").await;
    assert_eq!(s, 200);
    let (s, _) = call(&a, "GET", "/api/v1/stats?route=app", PEER_TOKEN, "").await;
    assert_eq!(s, 200);
    for (method, path) in [
        ("GET", "/api/v1/table"),
        ("PUT", "/api/v1/table"),
        ("GET", "/api/v1/canaries"),
        ("GET", "/api/v1/cluster"),
        ("GET", "/metrics"),
    ] {
        let (s, body) = call(&a, method, path, PEER_TOKEN, "{}").await;
        assert_eq!(s, 403, "{method} {path} with the peer token: {body}");
        assert!(body.contains("the peer token may not"), "{body}");
    }
    let (s, _) = call(&a, "GET", "/api/v1/table", ADMIN_TOKEN, "").await;
    assert_eq!(s, 200);

    bait_task.abort();
    b.shutdown().await;
    a.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
