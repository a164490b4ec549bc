//! The label → endpoint mapping on Engine API documents recorded from a real
//! daemon (`GET /containers/{id}/json`, tests/fixtures/docker/inspect/, made by
//! tests/fixtures/docker/record.sh).

use super::super::client::container_from_inspect;
use super::*;

fn fixture(name: &str) -> Container {
    let path = format!(
        "{}/tests/fixtures/docker/inspect/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let doc: bollard::models::ContainerInspectResponse =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    container_from_inspect(&doc)
}

/// The container's IP in `network`, read from the document itself.
fn ip(c: &Container, network: &str) -> String {
    c.networks
        .get(network)
        .cloned()
        .unwrap_or_else(|| panic!("{} has no network {network}", c.name))
}

#[test]
fn an_inspect_document_becomes_a_container() {
    let c = fixture("blue-1");
    assert_eq!(c.name, "weirrec-app-blue-1");
    assert_eq!(c.id.len(), 64);
    assert_eq!(c.state, "running");
    assert_eq!(c.health.as_deref(), Some("healthy"));
    assert_eq!(
        c.labels.get(LABEL_BACKEND).map(String::as_str),
        Some("app-blue")
    );
    assert!(ip(&c, "weirrec_app-net").starts_with("172."));
    assert!(c.image_id.starts_with("sha256:"));
    // No HEALTHCHECK: no health at all (not "none").
    assert_eq!(fixture("blue-2").health, None);
}

#[test]
fn a_running_healthy_container_is_an_endpoint_with_its_revision_label() {
    let c = fixture("blue-1");
    let s = judge(&c, None).unwrap();
    assert!(s.ready, "{s:?}");
    assert_eq!(
        s.address,
        Some(format!("{}:9901", ip(&c, "weirrec_app-net")))
    );
    assert_eq!(s.revision, "v1");
    assert_eq!(s.backend, "app-blue");
    assert_eq!(s.id, c.id[..12]);
}

#[test]
fn without_a_revision_label_the_revision_is_the_image_id() {
    let c = fixture("blue-2");
    let s = judge(&c, None).unwrap();
    assert!(s.ready, "no HEALTHCHECK: running is ready");
    assert_eq!(s.revision, c.image_id);
}

#[test]
fn starting_unhealthy_restarting_and_exited_containers_are_not_ready() {
    for (name, why) in [
        ("green-starting", "health check: starting"),
        ("green-unhealthy", "health check: unhealthy"),
        ("green-restarting", "not running (restarting)"),
        ("blue-exited", "not running (exited)"),
    ] {
        let s = judge(&fixture(name), None).unwrap();
        assert!(!s.ready, "{name}");
        assert_eq!(s.reason.as_deref(), Some(why), "{name}");
    }
}

#[test]
fn a_missing_port_label_is_named() {
    let s = judge(&fixture("no-port"), None).unwrap();
    assert!(!s.ready);
    assert_eq!(s.reason.as_deref(), Some("no weir.port label"));
    assert_eq!(s.address, None);
    let mut c = fixture("no-port");
    c.labels.insert(LABEL_PORT.into(), "http".into());
    let s = judge(&c, None).unwrap();
    assert_eq!(
        s.reason.as_deref(),
        Some("weir.port \"http\" is not a port (1..65535)")
    );
}

#[test]
fn two_networks_need_the_network_setting_which_matches_the_compose_name_too() {
    let c = fixture("two-networks");
    let s = judge(&c, None).unwrap();
    assert!(!s.ready);
    assert_eq!(
        s.reason.as_deref(),
        Some("on 2 networks (weirrec_app-net, weirrec_backoffice): set providers.docker.network")
    );
    // By its Docker name, or by the name in the compose file (project prefix added).
    for net in ["weirrec_backoffice", "backoffice"] {
        let s = judge(&c, Some(net)).unwrap();
        assert!(s.ready, "{net}: {s:?}");
        assert_eq!(
            s.address,
            Some(format!("{}:9001", ip(&c, "weirrec_backoffice")))
        );
    }
    let s = judge(&c, Some("elsewhere")).unwrap();
    assert_eq!(
        s.reason.as_deref(),
        Some("no IP in network \"elsewhere\" (networks: weirrec_app-net, weirrec_backoffice)")
    );
}

#[test]
fn a_container_without_the_backend_label_is_not_ours() {
    let mut c = fixture("blue-1");
    c.labels.remove(LABEL_BACKEND);
    assert_eq!(judge(&c, None), None);
}

#[test]
fn an_ipv6_address_is_bracketed() {
    let mut c = fixture("blue-1");
    c.networks = [("v6".to_string(), "fd00::2".to_string())].into();
    assert_eq!(
        judge(&c, None).unwrap().address.as_deref(),
        Some("[fd00::2]:9901")
    );
}

#[test]
fn every_fixture_together_gives_each_backend_its_running_endpoints_sorted() {
    let all: Vec<Container> = [
        "two-networks",
        "blue-2",
        "blue-1",
        "green-starting",
        "green-unhealthy",
        "green-restarting",
        "blue-exited",
        "no-port",
    ]
    .iter()
    .map(|n| fixture(n))
    .collect();
    let (backends, statuses) = desired(&all, Some("app-net"));
    assert_eq!(statuses.len(), 8);
    assert!(statuses
        .windows(2)
        .all(|w| (&w[0].backend, &w[0].name) <= (&w[1].backend, &w[1].name)));
    let net = |n: &str, port: u16| format!("{}:{port}", ip(&fixture(n), "weirrec_app-net"));
    let mut want = vec![
        net("blue-1", 9901),
        net("blue-2", 9001),
        net("two-networks", 9001),
    ];
    want.sort();
    let blue = &backends["app-blue"];
    assert_eq!(blue.endpoints, want);
    assert_eq!(blue.revisions[&net("blue-1", 9901)], "v1");
    assert!(blue.revisions[&net("blue-2", 9001)].starts_with("sha256:"));
    assert!(blue.not_ready.is_empty(), "{:?}", blue.not_ready);
    // app-green's running containers are listed, not ready, with Docker's
    // reason; the restarting one has no address, so it is not listed.
    let green = &backends["app-green"];
    let starting = net("green-starting", 9901);
    let unhealthy = net("green-unhealthy", 9001);
    let mut want = vec![starting.clone(), unhealthy.clone()];
    want.sort();
    assert_eq!(green.endpoints, want);
    assert_eq!(green.not_ready[&starting], "health check: starting");
    assert_eq!(green.not_ready[&unhealthy], "health check: unhealthy");
    assert_eq!(green.revisions.len(), 2);
}

#[test]
fn a_restarting_container_with_an_address_is_listed_not_ready() {
    let mut c = fixture("green-restarting");
    c.networks = [("weirrec_app-net".to_string(), "172.26.0.9".to_string())].into();
    let mut exited = fixture("blue-exited");
    exited.networks = [("weirrec_app-net".to_string(), "172.26.0.8".to_string())].into();
    let (backends, _) = desired(&[c, exited], None);
    let green = &backends["app-green"];
    assert_eq!(green.endpoints.len(), 1, "{green:?}");
    assert_eq!(
        green.not_ready[&green.endpoints[0]],
        "not running (restarting)"
    );
    assert!(
        backends["app-blue"].endpoints.is_empty(),
        "an exited container is not listed"
    );
}

/// The list answer names the same containers, labels included.
#[test]
fn the_recorded_list_answer_names_every_labelled_container() {
    let path = format!(
        "{}/tests/fixtures/docker/containers.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let list: Vec<bollard::models::ContainerSummary> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(list.len(), 8);
    assert!(list.iter().all(|c| c
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(LABEL_BACKEND))));
    let ids: Vec<&str> = list.iter().filter_map(|c| c.id.as_deref()).collect();
    assert!(ids.contains(&fixture("blue-1").id.as_str()));
}
