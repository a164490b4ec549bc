//! Event handling on `/events` messages recorded from a real daemon
//! (tests/fixtures/docker/events.jsonl, made by record.sh while the fixture
//! containers were created, turned healthy or unhealthy, stopped and removed).

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
    assert!(evs.len() > 20);
    assert!(evs
        .iter()
        .all(|e| e.kind == "container" && e.id.len() == 64));
    let blue = container("blue-1");
    let e = find(&evs, "health_status: healthy", &blue.id);
    assert_eq!(e.attributes["name"], "weirrec-app-blue-1");
    assert_eq!(e.attributes["weir.backend"], "app-blue");
}

#[test]
fn each_action_has_its_effect() {
    let evs = events();
    let mut seen = BTreeMap::<String, usize>::new();
    for e in &evs {
        let kind = e.action.split(':').next().unwrap().to_string();
        *seen.entry(kind.clone()).or_default() += 1;
        let id = e.id.clone();
        let want = match kind.as_str() {
            // Every HEALTHCHECK run is an exec; a kill is only a signal.
            "exec_create" | "exec_start" | "exec_die" | "kill" => Effect::Ignore,
            "create" | "start" => Effect::Inspect(id),
            "die" | "stop" => Effect::Stopped {
                id,
                state: "exited".into(),
            },
            "destroy" => Effect::Removed(id),
            "health_status" => Effect::Health {
                id,
                status: e.action["health_status: ".len()..].to_string(),
            },
            other => panic!("an action the fixture should not hold: {other}"),
        };
        assert_eq!(effect(e), want, "{}", e.action);
    }
    for kind in [
        "create",
        "start",
        "exec_die",
        "health_status",
        "die",
        "kill",
        "stop",
        "destroy",
    ] {
        assert!(
            seen.contains_key(kind),
            "no {kind} event recorded: {seen:?}"
        );
    }
    let green = container("green-unhealthy");
    assert_eq!(
        effect(find(&evs, "health_status: unhealthy", &green.id)),
        Effect::Health {
            id: green.id.clone(),
            status: "unhealthy".into()
        }
    );
}

#[test]
fn applying_the_stream_changes_readiness_and_removes_containers() {
    // As inspected before blue-2 was stopped and blue-exited removed.
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
        b.values()
            .flat_map(|p| {
                p.endpoints
                    .iter()
                    .filter(|e| !p.not_ready.contains_key(*e))
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    assert_eq!(ready(&known).len(), 2, "blue-1 and blue-2");
    let (blue2, exited) = (container("blue-2").id, container("blue-exited").id);
    let mut changed = Vec::new();
    for e in events() {
        if apply(&mut known, &effect(&e)) {
            changed.push((e.action.clone(), e.id.clone()));
        }
    }
    // What the documents already said changes nothing (blue-1's healthy, blue-exited's
    // die); blue-2's die and blue-exited's destroy do.
    assert_eq!(
        changed,
        [("die".to_string(), blue2), ("destroy".to_string(), exited)]
    );
    assert_eq!(
        ready(&known),
        ready(&{
            let c = container("blue-1");
            BTreeMap::from([(c.id.clone(), c)])
        })
    );
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
    let network = Event {
        kind: "network".into(),
        action: "connect".into(),
        id: "n1".into(),
        attributes: BTreeMap::new(),
    };
    assert_eq!(effect(&network), Effect::Ignore);
}
