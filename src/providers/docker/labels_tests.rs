//! The label → endpoint mapping on Engine API documents in the shape
//! `GET /containers/{id}/json` answers (tests/fixtures/docker/inspect/).

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

#[test]
fn an_inspect_document_becomes_a_container() {
    let c = fixture("blue-1");
    assert_eq!(c.name, "weirdemo-app-blue-1");
    assert_eq!(c.state, "running");
    assert_eq!(c.health.as_deref(), Some("healthy"));
    assert_eq!(
        c.labels.get(LABEL_BACKEND).map(String::as_str),
        Some("app-blue")
    );
    assert_eq!(
        c.networks.get("weirdemo_app-net").map(String::as_str),
        Some("172.20.0.2")
    );
    assert!(c.image_id.starts_with("sha256:"));
    // No HEALTHCHECK: no health at all (not "none").
    assert_eq!(fixture("blue-2").health, None);
}

#[test]
fn a_running_healthy_container_is_an_endpoint_with_its_revision_label() {
    let s = judge(&fixture("blue-1"), None).unwrap();
    assert!(s.ready, "{s:?}");
    assert_eq!(s.address.as_deref(), Some("172.20.0.2:9001"));
    assert_eq!(s.revision, "v1");
    assert_eq!(s.backend, "app-blue");
    assert_eq!(s.id.len(), 12);
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
        Some("on 2 networks (weirdemo_app-net, weirdemo_backoffice): set providers.docker.network")
    );
    // By its Docker name, or by the name in the compose file (project prefix added).
    for net in ["weirdemo_backoffice", "backoffice"] {
        let s = judge(&c, Some(net)).unwrap();
        assert!(s.ready, "{net}: {s:?}");
        assert_eq!(s.address.as_deref(), Some("172.21.0.6:9001"));
    }
    let s = judge(&c, Some("elsewhere")).unwrap();
    assert_eq!(
        s.reason.as_deref(),
        Some("no IP in network \"elsewhere\" (networks: weirdemo_app-net, weirdemo_backoffice)")
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
        Some("[fd00::2]:9001")
    );
}

#[test]
fn every_fixture_together_gives_each_backend_its_ready_endpoints_sorted() {
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
    let blue = &backends["app-blue"];
    assert_eq!(
        blue.endpoints,
        ["172.20.0.2:9001", "172.20.0.3:9001", "172.20.0.6:9001"]
    );
    assert_eq!(blue.revisions["172.20.0.2:9001"], "v1");
    assert!(blue.revisions["172.20.0.3:9001"].starts_with("sha256:"));
    // app-green has containers, none ready: present with an empty list.
    assert!(backends["app-green"].endpoints.is_empty());
}
