use std::collections::{HashMap, HashSet};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

fn names(prefix: &str, n: usize) -> Vec<Endpoint> {
    (1..=n).map(|i| format!("{prefix}{i}:80")).collect()
}

fn serving(eps: &[Endpoint]) -> Vec<Member> {
    eps.iter()
        .map(|e| Member::in_rotation(e.clone(), true))
        .collect()
}

fn cfg(surge: IntOrPercent, unavailable: IntOrPercent) -> RollingConfig {
    RollingConfig {
        max_surge: surge,
        max_unavailable: unavailable,
        progress_deadline_ms: 10_000,
    }
}

use IntOrPercent::{Int, Percent};

/// One tick of a simulated driver, as the tests see it.
struct Tick {
    tick: u64,
    state: RollingState,
    actions: Vec<Action>,
}

/// Runs ticks 1..=max_ticks, 1 s apart, until Complete. Before each tick the driver
/// probes every probe target it has not probed yet; `ready(ep, tick, probed_at)` says
/// what the health check reports at that tick.
fn run(
    mut state: RollingState,
    ready: impl Fn(&str, u64, u64) -> bool,
    max_ticks: u64,
) -> Vec<Tick> {
    let mut probed_at: HashMap<String, u64> = HashMap::new();
    let mut out = Vec::new();
    for tick in 1..=max_ticks {
        for ep in state.probe_targets() {
            probed_at.entry(ep.to_string()).or_insert(tick);
        }
        let readiness = |ep: &str| probed_at.get(ep).is_some_and(|&p| ready(ep, tick, p));
        let (next, actions) = step(&state, &readiness, tick * 1000);
        state = next;
        let done = state.phase == Phase::Complete;
        out.push(Tick {
            tick,
            state: state.clone(),
            actions,
        });
        if done {
            break;
        }
    }
    out
}

/// Old endpoints are always ready; new ones one tick after their first probe.
fn ready_one_tick_after_probe(ep: &str, tick: u64, probed: u64) -> bool {
    ep.starts_with("old") || tick > probed
}

fn rotation_names(state: &RollingState) -> Vec<String> {
    let mut v: Vec<String> = state.rotation().map(|m| m.endpoint.clone()).collect();
    v.sort();
    v
}

#[test]
fn surge_1_unavailable_0_never_drops_below_desired() {
    let old = names("old", 4);
    let new = names("new", 4);
    let state = start(&serving(&old), &new, cfg(Int(1), Int(0)), 0);
    let ticks = run(state, ready_one_tick_after_probe, 100);
    let last = ticks.last().map(|t| &t.state);
    assert_eq!(last.map(|s| s.phase), Some(Phase::Complete));
    for t in &ticks {
        let st = t.state.status();
        assert!(st.ready >= 4, "tick {}: ready {} < 4", t.tick, st.ready);
        assert!(st.total <= 5, "tick {}: total {} > 5", t.tick, st.total);
    }
    assert_eq!(last.map(rotation_names), Some(new.clone()));
}

#[test]
fn larger_surge_finishes_in_fewer_ticks() {
    // With at most one add per tick, the whole difference is whether a tick can add and
    // remove at once: surge 1 alternates (2 ticks per endpoint after the probe tick),
    // surge >= 2 overlaps them (one tick per endpoint plus the last removal). Surge 4 can
    // therefore not beat surge 2 with 4 endpoints: the one-add-per-tick rule caps it.
    let old = names("old", 4);
    let new = names("new", 4);
    let table: [(u32, u64); 3] = [(1, 9), (2, 6), (4, 6)];
    for (surge, expected_ticks) in table {
        let state = start(&serving(&old), &new, cfg(Int(surge), Int(0)), 0);
        let ticks = run(state, ready_one_tick_after_probe, 100);
        assert_eq!(
            ticks.last().map(|t| (t.tick, t.state.phase)),
            Some((expected_ticks, Phase::Complete)),
            "surge {surge}"
        );
        for t in &ticks {
            assert!(t.state.status().total <= 4 + surge as usize);
            assert!(t.state.status().ready >= 4);
        }
    }
}

#[test]
fn surge_1_exact_action_sequence() {
    let old = names("old", 2);
    let new = names("new", 2);
    let state = start(&serving(&old), &new, cfg(Int(1), Int(0)), 0);
    let ticks = run(state, ready_one_tick_after_probe, 100);
    let seq: Vec<(u64, Vec<Action>)> = ticks.iter().map(|t| (t.tick, t.actions.clone())).collect();
    let add = |s: &str| Action::Add(s.to_string());
    let rm = |s: &str| Action::Remove(s.to_string());
    assert_eq!(
        seq,
        vec![
            (1, vec![]),
            (2, vec![add("new1:80")]),
            (3, vec![rm("old1:80")]),
            (4, vec![add("new2:80")]),
            (5, vec![rm("old2:80")]),
        ]
    );
}

#[test]
fn broken_version_with_unavailable_0_keeps_old_and_stalls_once() {
    let old = names("old", 4);
    let new = names("new", 4);
    let mut state = start(&serving(&old), &new, cfg(Int(1), Int(0)), 0);
    let never_new = |ep: &str| ep.starts_with("old");
    let mut stalled_events = Vec::new();
    for tick in 1..=30u64 {
        let (next, actions) = step(&state, &never_new, tick * 1000);
        state = next;
        assert!(actions.is_empty(), "tick {tick}: {actions:?}");
        assert_eq!(rotation_names(&state), old);
        assert_eq!(state.status().ready, 4);
        let expected = if tick * 1000 >= 10_000 {
            Phase::Stalled
        } else {
            Phase::Progressing
        };
        assert_eq!(state.phase, expected, "tick {tick}");
        if state.phase_changed {
            stalled_events.push(tick);
        }
    }
    assert_eq!(stalled_events, vec![10]);
}

#[test]
fn broken_version_with_unavailable_2_stops_exactly_2_below() {
    let old = names("old", 4);
    let new = names("new", 4);
    let mut state = start(&serving(&old), &new, cfg(Int(1), Int(2)), 0);
    let never_new = |ep: &str| ep.starts_with("old");
    let mut removed = Vec::new();
    for tick in 1..=40u64 {
        let (next, actions) = step(&state, &never_new, tick * 1000);
        state = next;
        removed.extend(actions);
        assert!(state.status().ready >= 2, "tick {tick}");
    }
    assert_eq!(
        removed,
        vec![
            Action::Remove("old1:80".into()),
            Action::Remove("old2:80".into())
        ]
    );
    let st = state.status();
    assert_eq!((st.ready, st.total, st.old, st.draining), (2, 2, 2, 2));
    assert_eq!(state.phase, Phase::Stalled);
    // The last progress was the removal at tick 2.
    assert_eq!(state.last_progress_ms, 2000);
}

#[test]
fn redeclaring_the_old_list_after_a_stall_restores_it() {
    // Two variants: the removed old endpoints are still draining, or already drained.
    for drain_first in [false, true] {
        let old = names("old", 4);
        let new = names("new", 4);
        let never_new = |ep: &str| ep.starts_with("old");
        let mut state = start(&serving(&old), &new, cfg(Int(1), Int(2)), 0);
        for tick in 1..=20u64 {
            state = step(&state, &never_new, tick * 1000).0;
        }
        assert_eq!(state.phase, Phase::Stalled);
        if drain_first {
            assert!(state.drained("old1:80"));
            assert!(state.drained("old2:80"));
            assert!(!state.drained("old3:80"), "old3 is not draining");
        }

        let mut back = start(&state.members, &old, state.config, 20_000);
        let mut actions = Vec::new();
        for tick in 21..=30u64 {
            let (next, acts) = step(&back, &never_new, tick * 1000);
            back = next;
            actions.extend(acts);
            if back.phase == Phase::Complete {
                break;
            }
        }
        assert_eq!(back.phase, Phase::Complete, "drain_first={drain_first}");
        assert_eq!(rotation_names(&back), old);
        assert_eq!(
            actions,
            vec![Action::Add("old1:80".into()), Action::Add("old2:80".into())]
        );
        assert_eq!(back.status().draining, 0);
    }
}

#[test]
fn redeclaring_removes_a_joined_new_endpoint_that_broke() {
    // new1 passes its check, joins, old1 leaves, then new1 breaks: the update stalls with
    // new1 in rotation, not ready. Re-declaring the old list removes new1 at once (it is
    // not ready, so its removal is always allowed) and brings old1 back.
    let old = names("old", 4);
    let new = names("new", 4);
    let readiness_at =
        |tick: u64| move |ep: &str| ep.starts_with("old") || (ep == "new1:80" && tick <= 3);
    let mut state = start(&serving(&old), &new, cfg(Int(1), Int(0)), 0);
    let mut all = Vec::new();
    for tick in 1..=20u64 {
        let (next, acts) = step(&state, &readiness_at(tick), tick * 1000);
        state = next;
        all.extend(acts);
    }
    assert_eq!(
        all,
        vec![
            Action::Add("new1:80".into()),
            Action::Remove("old1:80".into())
        ]
    );
    assert_eq!(state.phase, Phase::Stalled);
    assert_eq!(state.status().ready, 3, "new1 broke after joining");

    let mut back = start(&state.members, &old, state.config, 20_000);
    let (b1, a1) = step(&back, &readiness_at(21), 21_000);
    assert_eq!(
        a1,
        vec![
            Action::Add("old1:80".into()),
            Action::Remove("new1:80".into())
        ]
    );
    back = b1;
    assert_eq!(back.phase, Phase::Complete);
    assert_eq!(rotation_names(&back), old);
}

#[test]
fn empty_rotation_at_start_up_fills_as_endpoints_become_ready() {
    let desired = names("app", 3);
    let state = start(&[], &desired, RollingConfig::default(), 0);
    assert_eq!(state.phase, Phase::Progressing);
    // Tick 1: only app1 answers; tick 2: all do.
    let r1 = |ep: &str| ep == "app1:80";
    let (s1, a1) = step(&state, &r1, 1000);
    assert_eq!(a1, vec![Action::Add("app1:80".into())]);
    let (s2, a2) = step(&s1, &|_: &str| true, 2000);
    assert_eq!(
        a2,
        vec![Action::Add("app2:80".into()), Action::Add("app3:80".into())]
    );
    assert_eq!((s2.phase, s2.phase_changed), (Phase::Complete, true));
}

#[test]
fn start_with_rotation_already_desired_is_complete() {
    let eps = names("app", 2);
    let state = start(&serving(&eps), &eps, RollingConfig::default(), 0);
    assert_eq!(state.phase, Phase::Complete);
    let (next, actions) = step(&state, &|_: &str| true, 1000);
    assert!(actions.is_empty());
    assert_eq!((next.phase, next.phase_changed), (Phase::Complete, false));
}

#[test]
fn start_drops_duplicates_and_keeps_order() {
    let desired: Vec<Endpoint> = ["b:1", "a:1", "b:1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let current = serving(&["a:1".to_string(), "a:1".to_string(), "c:1".to_string()]);
    let state = start(&current, &desired, RollingConfig::default(), 5);
    assert_eq!(state.desired, vec!["b:1".to_string(), "a:1".to_string()]);
    assert_eq!(state.members.len(), 2);
    assert!(state.members[0].is_new, "a:1 is desired");
    assert!(!state.members[1].is_new, "c:1 is old");
    assert_eq!(state.probe_targets(), vec!["a:1", "c:1", "b:1"]);
}

#[test]
fn stalled_update_resumes_on_progress() {
    let old = names("old", 2);
    let new = names("new", 2);
    let mut state = start(&serving(&old), &new, cfg(Int(1), Int(0)), 0);
    let only_old = |ep: &str| ep.starts_with("old");
    for tick in 1..=10u64 {
        state = step(&state, &only_old, tick * 1000).0;
    }
    assert_eq!(state.phase, Phase::Stalled);
    let (resumed, actions) = step(&state, &|_: &str| true, 11_000);
    assert_eq!(actions, vec![Action::Add("new1:80".into())]);
    assert_eq!(
        (resumed.phase, resumed.phase_changed),
        (Phase::Progressing, true)
    );
}

#[test]
fn status_counts() {
    let old = names("old", 3);
    let new = names("new", 2);
    let state = start(&serving(&old), &new, cfg(Int(1), Int(1)), 0);
    let readiness = |ep: &str| ep != "old2:80";
    // Tick 1: old2 (not ready) leaves first; the rotation is full (3 = 2 + surge 1), so
    // nothing joins.
    let (s, a) = step(&state, &readiness, 1000);
    assert_eq!(a, vec![Action::Remove("old2:80".into())]);
    let st = s.status();
    assert_eq!(
        (
            st.desired,
            st.ready,
            st.updated,
            st.old,
            st.total,
            st.draining
        ),
        (2, 2, 0, 2, 2, 1)
    );
    // Tick 2: new1 joins and, from the counts at the start of the tick (2 ready > floor
    // 2 - 1), old1 leaves.
    let (s, a) = step(&s, &readiness, 2000);
    assert_eq!(
        a,
        vec![
            Action::Add("new1:80".into()),
            Action::Remove("old1:80".into())
        ]
    );
    let st = s.status();
    assert_eq!(
        (
            st.desired,
            st.ready,
            st.updated,
            st.old,
            st.total,
            st.draining
        ),
        (2, 2, 1, 1, 2, 2)
    );
    let json = serde_json::to_value(st).unwrap_or_default();
    assert_eq!(json["phase"], "Progressing");
    assert_eq!(json["draining"], 2);
}

#[test]
fn time_going_backwards_does_not_panic_or_stall() {
    let old = names("old", 2);
    let new = names("new", 2);
    let state = start(&serving(&old), &new, cfg(Int(1), Int(0)), 50_000);
    let (s, _) = step(&state, &|ep: &str| ep.starts_with("old"), 1_000);
    assert_eq!(s.phase, Phase::Progressing);
}

#[test]
fn validate_rejects_both_zero() {
    let table = [
        (Int(0), Int(0), false),
        (Percent(0), Int(0), false),
        (Int(0), Percent(0), false),
        (Percent(0), Percent(0), false),
        (Int(1), Int(0), true),
        (Int(0), Int(1), true),
        (Percent(25), Percent(25), true),
        (Percent(0), Percent(10), true),
        (Int(1), Percent(101), false),
        (Percent(200), Percent(100), true),
    ];
    for (surge, unavailable, ok) in table {
        let result = validate(surge, unavailable);
        assert_eq!(result.is_ok(), ok, "{surge} / {unavailable}: {result:?}");
    }
    let msg = validate(Int(0), Int(0)).err().unwrap_or_default();
    assert!(
        msg.contains("maxSurge") && msg.contains("maxUnavailable"),
        "{msg}"
    );
    assert!(cfg(Int(0), Int(0)).validate().is_err());
    assert!(RollingConfig::default().validate().is_ok());
}

#[test]
fn percentages_round_like_kubernetes() {
    // (value, desired, surge = round up, unavailable = round down)
    let table = [
        (Percent(25), 3, 1, 0),
        (Percent(25), 4, 1, 1),
        (Percent(25), 10, 3, 2),
        (Percent(10), 10, 1, 1),
        (Percent(10), 3, 1, 0),
        (Percent(33), 3, 1, 0),
        (Percent(50), 5, 3, 2),
        (Percent(100), 7, 7, 7),
        (Percent(150), 4, 6, 6),
        (Percent(25), 0, 0, 0),
        (Int(2), 10, 2, 2),
        (Int(5), 1, 5, 5),
    ];
    for (value, desired, up, down) in table {
        assert_eq!(value.scaled(desired, true), up, "{value} of {desired} up");
        assert_eq!(
            value.scaled(desired, false),
            down,
            "{value} of {desired} down"
        );
    }
    // Cross-check against Kubernetes' float formula, math.Ceil/Floor(v * total / 100).
    for p in 0..=250u32 {
        for total in 0..=60usize {
            let exact = f64::from(p) * total as f64 / 100.0;
            assert_eq!(Percent(p).scaled(total, true), exact.ceil() as usize);
            assert_eq!(Percent(p).scaled(total, false), exact.floor() as usize);
        }
    }
}

#[test]
fn resolve_applies_the_fencepost() {
    let table = [
        // (surge, unavailable, desired) -> (surge, unavailable)
        (Percent(25), Percent(25), 4, (1, 1)),
        (Percent(25), Percent(25), 1, (1, 0)),
        (Percent(0), Percent(10), 3, (0, 1)),
        (Percent(25), Percent(25), 0, (0, 1)),
        (Int(1), Int(0), 4, (1, 0)),
        (Int(0), Int(2), 4, (0, 2)),
    ];
    for (s, u, desired, (es, eu)) in table {
        assert_eq!(
            resolve(s, u, desired),
            Resolved {
                max_surge: es,
                max_unavailable: eu
            },
            "{s} / {u} of {desired}"
        );
    }
}

#[test]
fn int_or_percent_serde() {
    let ok = [
        ("1", Int(1)),
        ("0", Int(0)),
        ("\"25%\"", Percent(25)),
        ("\"0%\"", Percent(0)),
        ("\"150%\"", Percent(150)),
    ];
    for (json, expected) in ok {
        let parsed: Result<IntOrPercent, _> = serde_json::from_str(json);
        assert_eq!(parsed.ok(), Some(expected), "{json}");
        assert_eq!(serde_json::to_string(&expected).ok().as_deref(), Some(json));
    }
    for bad in [
        "-1",
        "\"1\"",
        "\"%\"",
        "\"x%\"",
        "\"-5%\"",
        "1.5",
        "\"99999999999%\"",
        "null",
    ] {
        let parsed: Result<IntOrPercent, _> = serde_json::from_str(bad);
        assert!(parsed.is_err(), "{bad} should be rejected");
    }
    let cfg: Result<RollingConfig, _> = serde_json::from_str(
        r#"{"maxSurge": 1, "maxUnavailable": "10%", "progressDeadlineMs": 600000}"#,
    );
    assert_eq!(
        cfg.ok(),
        Some(RollingConfig {
            max_surge: Int(1),
            max_unavailable: Percent(10),
            progress_deadline_ms: 600_000
        })
    );
}

#[test]
fn state_round_trips_through_json() {
    let old = names("old", 2);
    let new = names("new", 2);
    let state = start(&serving(&old), &new, RollingConfig::default(), 0);
    let (state, _) = step(&state, &|_: &str| true, 1000);
    let json = serde_json::to_string(&state).unwrap_or_default();
    let back: Option<RollingState> = serde_json::from_str(&json).ok();
    assert_eq!(back, Some(state));
}

/// Random config value: an integer 0..=3 or a percentage from a set that exercises
/// rounding.
fn random_int_or_percent(rng: &mut SmallRng) -> IntOrPercent {
    if rng.random_bool(0.5) {
        Int(rng.random_range(0..=3))
    } else {
        const PERCENTS: [u32; 7] = [0, 10, 25, 33, 50, 75, 100];
        Percent(PERCENTS[rng.random_range(0..PERCENTS.len())])
    }
}

fn active_set(state: &RollingState) -> HashSet<String> {
    state.rotation().map(|m| m.endpoint.clone()).collect()
}

#[test]
fn property_invariants_hold_and_updates_complete() {
    let mut checked_ticks = 0u64;
    let mut completed = 0u32;
    let mut seed = 0u64;
    let mut runs = 0u32;
    while runs < 2_000 {
        seed += 1;
        let mut rng = SmallRng::seed_from_u64(seed);
        let config = RollingConfig {
            max_surge: random_int_or_percent(&mut rng),
            max_unavailable: random_int_or_percent(&mut rng),
            progress_deadline_ms: rng.random_range(1..=20) * 1000,
        };
        if config.validate().is_err() {
            continue;
        }
        runs += 1;

        // Old rotation: `n_old` old-only endpoints plus `n_keep` that stay desired.
        let n_old = rng.random_range(0..=6usize);
        let n_keep = rng.random_range(0..=3usize);
        let n_new = rng.random_range(0..=6usize);
        let kept = names("keep", n_keep);
        let original: Vec<Endpoint> = names("old", n_old)
            .into_iter()
            .chain(kept.clone())
            .collect();
        let mut desired: Vec<Endpoint> = kept.into_iter().chain(names("new", n_new)).collect();
        let current: Vec<Member> = original
            .iter()
            .map(|e| Member::in_rotation(e.clone(), rng.random_bool(0.8)))
            .collect();
        let mut state = start(&current, &desired, config, 0);

        // Readiness is random until `settle`; after it every desired endpoint is ready
        // and the others keep flapping. Some runs re-declare the original list midway.
        let p_ready: f64 = rng.random_range(0.0..1.0);
        let settle = rng.random_range(0..30u64);
        let redeclare_at = if rng.random_bool(0.3) {
            Some(rng.random_range(1..settle.max(2)))
        } else {
            None
        };
        let mut tick = 0u64;
        let mut complete_at = None;
        while tick < settle + 40 {
            tick += 1;
            let now = tick * 1000;
            if redeclare_at == Some(tick) {
                desired = original.clone();
                state = start(&state.members, &desired, config, now);
            }
            let desired_set: HashSet<&str> = desired.iter().map(String::as_str).collect();
            let mut readiness_now: HashMap<String, bool> = HashMap::new();
            for ep in state
                .members
                .iter()
                .map(|m| &m.endpoint)
                .chain(desired.iter())
            {
                let r = (tick >= settle && desired_set.contains(ep.as_str()))
                    || rng.random_bool(p_ready);
                readiness_now.insert(ep.clone(), r);
            }
            let readiness = |ep: &str| readiness_now.get(ep).copied().unwrap_or(false);

            let limits = resolve(config.max_surge, config.max_unavailable, desired.len());
            let max_total = desired.len() + limits.max_surge;
            let min_ready = desired.len().saturating_sub(limits.max_unavailable);
            let before = active_set(&state);
            let ready_before = before.iter().filter(|e| readiness(e)).count();
            let old_before = before
                .iter()
                .filter(|e| !desired_set.contains(e.as_str()))
                .count();

            let (next, actions) = step(&state, &readiness, now);
            checked_ticks += 1;

            let after = active_set(&next);
            let ready_after = after.iter().filter(|e| readiness(e)).count();
            let ctx = format!("seed {seed} tick {tick} {config:?} {actions:?}");
            let adds = actions
                .iter()
                .filter(|a| matches!(a, Action::Add(_)))
                .count();
            let removes = actions.len() - adds;
            assert!(removes <= 1, "{ctx}");
            assert!(adds <= 1 || old_before == 0, "{ctx}");
            let mut removed_ready = false;
            for a in &actions {
                match a {
                    Action::Add(ep) => {
                        assert!(desired_set.contains(ep.as_str()), "{ctx}: add of undesired");
                        assert!(!before.contains(ep), "{ctx}: add of a member in rotation");
                        assert!(readiness(ep), "{ctx}: add of a not-ready endpoint");
                        assert!(after.contains(ep), "{ctx}");
                    }
                    Action::Remove(ep) => {
                        assert!(before.contains(ep), "{ctx}: remove of a non-member");
                        assert!(
                            !desired_set.contains(ep.as_str()),
                            "{ctx}: remove of desired"
                        );
                        assert!(!after.contains(ep), "{ctx}");
                        removed_ready |= readiness(ep);
                    }
                }
            }
            if adds > 0 || before.len() <= max_total {
                assert!(
                    after.len() <= max_total,
                    "{ctx}: {} > {max_total}",
                    after.len()
                );
            }
            if removed_ready || ready_before >= min_ready {
                assert!(
                    ready_after >= min_ready,
                    "{ctx}: floor {ready_after} < {min_ready}"
                );
            }
            // Actions are exactly the difference between the two rotations.
            let added: HashSet<String> = after.difference(&before).cloned().collect();
            let gone: HashSet<String> = before.difference(&after).cloned().collect();
            assert_eq!(added.len(), adds, "{ctx}");
            assert_eq!(gone.len(), removes, "{ctx}");
            for m in &next.members {
                assert!(m.draining || m.ready == readiness(&m.endpoint), "{ctx}");
            }

            state = next;
            // The driver sometimes finishes draining.
            let draining: Vec<String> = state
                .members
                .iter()
                .filter(|m| m.draining)
                .map(|m| m.endpoint.clone())
                .collect();
            for ep in draining {
                if rng.random_bool(0.5) {
                    assert!(state.drained(&ep));
                }
            }
            if state.phase == Phase::Complete {
                let mut rot: Vec<String> = after.into_iter().collect();
                rot.sort();
                let mut want = desired.clone();
                want.sort();
                assert_eq!(rot, want, "{ctx}: complete with the wrong rotation");
                complete_at = Some(tick);
                break;
            }
        }
        // After `settle`, every tick adds or removes something, so at most
        // desired + members ticks are needed.
        let bound = settle + (desired.len() + n_old + n_keep + n_new) as u64 + 1;
        assert!(
            complete_at.is_some_and(|t| t <= bound),
            "seed {seed}: not complete by tick {bound} ({complete_at:?}) {config:?} {:?}",
            state.status()
        );
        completed += 1;
    }
    assert_eq!(completed, 2_000);
    assert!(checked_ticks > 10_000, "{checked_ticks}");
}
