//! Event handling on `/events` messages in the Engine API's shape
//! (tests/fixtures/docker/events.jsonl).

use super::super::client::{container_from_inspect, event_from_message};
use super::*;

fn events() -> Vec<Event> {
    let path = format!(
        "{}/tests/fixtures/docker/events.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let m: bollard::models::EventMessage =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            event_from_message(&m)
        })
        .collect()
}

fn container(name: &str) -> Container {
    let path = format!(
        "{}/tests/fixtures/docker/inspect/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let doc: bollard::models::ContainerInspectResponse =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    container_from_inspect(&doc)
}

fn find<'a>(evs: &'a [Event], action: &str, id: &str) -> &'a Event {
    evs.iter()
        .find(|e| e.action == action && e.id == id)
        .unwrap_or_else(|| panic!("no {action} event for {id}"))
}

#[test]
fn the_recorded_messages_parse_with_their_ids_and_attributes() {
    let evs = events();
    assert_eq!(evs.len(), 11);
    let green = container("green-starting");
    let e = find(&evs, "health_status: healthy", &green.id);
    assert_eq!(e.kind, "container");
    assert_eq!(e.attributes["name"], "weirdemo-app-green-1");
    assert_eq!(e.attributes["weir.backend"], "app-green");
}

#[test]
fn each_action_has_its_effect() {
    let evs = events();
    let effects: Vec<Effect> = evs.iter().map(effect).collect();
    let id = |n: &str| container(n).id;
    assert_eq!(
        effects,
        vec![
            Effect::Ignore, // exec_create of a HEALTHCHECK run
            Effect::Ignore, // exec_start
            Effect::Ignore, // exec_die
            Effect::Health {
                id: id("green-starting"),
                status: "healthy".into()
            },
            Effect::Health {
                id: id("blue-1"),
                status: "unhealthy".into()
            },
            Effect::Ignore, // kill: a signal; the container may still run
            Effect::Stopped {
                id: id("blue-2"),
                state: "exited".into()
            },
            Effect::Stopped {
                id: id("blue-2"),
                state: "exited".into()
            },
            Effect::Removed(id("blue-exited")),
            Effect::Inspect(id("green-restarting")),
            Effect::Ignore, // a network event
        ]
    );
}

#[test]
fn applying_the_stream_changes_readiness_and_removes_containers() {
    let mut known: BTreeMap<String, Container> =
        ["blue-1", "blue-2", "green-starting", "blue-exited"]
            .iter()
            .map(|n| {
                let c = container(n);
                (c.id.clone(), c)
            })
            .collect();
    let ready = |k: &BTreeMap<String, Container>| -> Vec<String> {
        let all: Vec<Container> = k.values().cloned().collect();
        let (b, _) = super::super::labels::desired(&all, None);
        b.values().flat_map(|p| p.endpoints.clone()).collect()
    };
    assert_eq!(ready(&known), ["172.20.0.2:9001", "172.20.0.3:9001"]);
    let mut changed = Vec::new();
    for e in events() {
        changed.push(apply(&mut known, &effect(&e)));
    }
    // healthy (green joins), unhealthy (blue-1 leaves), die (blue-2 leaves), the
    // stop after it (no change), destroy (blue-exited forgotten).
    assert_eq!(
        changed,
        [false, false, false, true, true, false, true, false, true, false, false]
    );
    assert_eq!(ready(&known), ["172.20.0.4:9001"]);
    assert_eq!(known.len(), 3);
}

#[test]
fn a_health_status_without_the_status_asks_for_an_inspect() {
    let e = Event {
        kind: "container".into(),
        action: "health_status".into(),
        id: "abc".into(),
        attributes: BTreeMap::new(),
    };
    assert_eq!(effect(&e), Effect::Inspect("abc".into()));
    let unknown = Effect::Health {
        id: "nope".into(),
        status: "healthy".into(),
    };
    assert!(!apply(&mut BTreeMap::new(), &unknown));
}
