use super::*;
use crate::config::LoadBalancer;
use crate::proxy::upstream::{Backend, BackendRegistry, InFlight};

const OK: ProbeResult = ProbeResult { ok: true };
const FAIL: ProbeResult = ProbeResult { ok: false };
const DRAIN_MS: u64 = 30_000;

/// A backend `b` as the config loader builds it (through the real validation, so the
/// test follows the config's fields).
fn spec(endpoints: &[&str], health: bool, surge: u32, unavailable: u32) -> BackendSpec {
    spec_with(endpoints, health, surge, unavailable, None)
}

/// `outlier`: (consecutiveFailures, baseEjectionTime, maxEjectionPercent).
fn spec_with(
    endpoints: &[&str],
    health: bool,
    surge: u32,
    unavailable: u32,
    outlier: Option<(u32, &str, u32)>,
) -> BackendSpec {
    let mut backend = serde_json::json!({
        "endpoints": endpoints,
        "rollingUpdate": {
            "maxSurge": surge,
            "maxUnavailable": unavailable,
            "progressDeadline": "10s",
        },
    });
    if health {
        backend["healthCheck"] = serde_json::json!({
            "path": "/healthz",
            "interval": "1s",
            "timeout": "500ms",
            "healthyThreshold": 1,
            "unhealthyThreshold": 1,
        });
    }
    if let Some((failures, base, percent)) = outlier {
        backend["outlierDetection"] = serde_json::json!({
            "consecutiveFailures": failures,
            "baseEjectionTime": base,
            "maxEjectionPercent": percent,
        });
    }
    let raw: crate::config::raw::RawTable = serde_json::from_value(serde_json::json!({
        "backends": {"b": backend},
        "routes": [{"name": "r", "primary": "b"}],
    }))
    .unwrap();
    let table = crate::config::compile_table(&raw).unwrap_or_else(|e| panic!("{e:?}"));
    table.backends["b"].clone()
}

fn rotation(b: &Backend) -> Vec<String> {
    b.addresses()
}

fn ready_in_rotation(b: &Backend) -> usize {
    b.rotation
        .load()
        .iter()
        .filter(|e| e.ready.load(Ordering::Relaxed))
        .count()
}

/// Probe results: every target passes unless it contains one of `failing`.
fn probe(b: &Backend, failing: &[&str]) -> Vec<(String, ProbeResult)> {
    b.control()
        .probe_plan()
        .targets
        .into_iter()
        .map(|t| {
            let r = if failing.iter().any(|f| t.contains(f)) {
                FAIL
            } else {
                OK
            };
            (t, r)
        })
        .collect()
}

const OLD: [&str; 3] = ["127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"];
const NEW: [&str; 3] = ["127.0.0.1:2001", "127.0.0.1:2002", "127.0.0.1:2003"];

#[test]
fn settings_map_from_the_config() {
    let mut s = spec_with(&OLD, true, 2, 1, Some((3, "250ms", 34)));
    s.health_check.as_mut().unwrap().expected_status = vec![200, 204];
    let e = EndpointSettings::from_spec(&s);
    let h = e.health.clone().unwrap();
    assert_eq!((h.interval_ms, h.timeout_ms), (1_000, 500));
    assert_eq!(
        h.expected_status,
        vec![ExpectedStatus::Code(200), ExpectedStatus::Code(204)]
    );
    assert!(h.status_ok(204) && !h.status_ok(301));
    assert_eq!(e.rolling.max_surge, IntOrPercent::Int(2));
    assert_eq!(e.rolling.max_unavailable, IntOrPercent::Int(1));
    assert_eq!(e.rolling.progress_deadline_ms, 10_000);
    let o = e.outlier.unwrap();
    assert_eq!((o.consecutive_failures, o.base_ejection_ms), (3, 250));
    assert_eq!(o.max_ejection_percent, 34);
    assert_eq!(e.tick_interval(), Duration::from_secs(1));
    assert_eq!(
        EndpointSettings::from_spec(&spec(&OLD, false, 1, 0)).tick_interval(),
        DEFAULT_TICK
    );
}

#[test]
fn a_table_write_starts_an_update_and_ticks_move_it_without_dropping_capacity() {
    let reg = BackendRegistry::default();
    let b = reg.sync(&spec(&OLD, false, 1, 0));
    assert_eq!(rotation(&b), OLD);
    assert_eq!(b.rollout().generation, 1);
    assert_eq!(b.rollout_status().phase, Phase::Complete);

    let same = reg.sync(&spec(&NEW, false, 1, 0));
    assert!(Arc::ptr_eq(&b, &same));
    // The write alone changes nothing the proxy sees.
    assert_eq!(rotation(&b), OLD);
    let snap = b.rollout();
    assert_eq!(
        (snap.generation, snap.status.phase),
        (2, Phase::Progressing)
    );
    assert_eq!(snap.desired, NEW);

    let mut ticks = 0;
    while b.rollout_status().phase != Phase::Complete {
        ticks += 1;
        assert!(ticks <= 20, "update did not complete");
        b.control().tick(&b.rotation, &[], ticks * 1_000, DRAIN_MS);
        let rot = b.rotation.load();
        assert!(rot.len() <= 4, "surge 1: at most 4 in rotation");
        assert!(ready_in_rotation(&b) >= 3, "unavailable 0: never below 3");
        assert!(rot.iter().all(|e| !e.draining.load(Ordering::Relaxed)));
    }
    assert_eq!(rotation(&b), NEW);
    // Surge 1, unavailable 0: add, remove, add, remove, add, remove = 6 ticks.
    assert_eq!(ticks, 6);
    // Nothing was in flight: every old endpoint finished draining at once.
    assert_eq!(b.rollout_status().draining, 0);
    let kinds: Vec<&str> = b.endpoints_view().events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "added").count(), 3);
    assert_eq!(kinds.iter().filter(|k| **k == "drained").count(), 3);
    assert_eq!(kinds.first(), Some(&"updateStarted"));
    assert_eq!(kinds.last(), Some(&"complete"));
}

#[test]
fn a_write_that_keeps_the_list_starts_nothing() {
    let reg = BackendRegistry::default();
    let b = reg.sync(&spec(&OLD, false, 1, 0));
    let mut s = spec(&OLD, false, 1, 0);
    s.load_balancer = LoadBalancer::LeastRequest;
    reg.sync(&s);
    assert_eq!(b.rollout().generation, 1);
    assert!(b.endpoints_view().events.is_empty());
}

#[test]
fn new_endpoints_join_only_when_their_health_check_passes() {
    let reg = BackendRegistry::default();
    let b = reg.sync(&spec(&OLD, true, 1, 0));
    reg.sync(&spec(&NEW, true, 1, 0));
    // Tick 1: the new ones fail, so nothing joins and nothing leaves.
    b.control()
        .tick(&b.rotation, &probe(&b, &[":200"]), 1_000, DRAIN_MS);
    assert_eq!(rotation(&b), OLD);
    // Tick 2: only 2002 passes; it joins (surge 1); nothing leaves in the same tick.
    b.control().tick(
        &b.rotation,
        &probe(&b, &[":2001", ":2003"]),
        2_000,
        DRAIN_MS,
    );
    assert_eq!(rotation(&b), [OLD[0], OLD[1], OLD[2], NEW[1]]);
    let view = b.endpoints_view();
    assert_eq!((view.status.updated, view.status.old), (1, 3));
    // Later ticks finish it.
    for t in 3..=10 {
        b.control()
            .tick(&b.rotation, &probe(&b, &[]), t * 1_000, DRAIN_MS);
    }
    // The rotation is in join order: 2002 joined first.
    assert_eq!(rotation(&b), [NEW[1], NEW[0], NEW[2]]);
    assert_eq!(b.rollout_status().phase, Phase::Complete);
}

#[test]
fn a_broken_version_stalls_after_the_deadline_and_redeclaring_rolls_back() {
    let reg = BackendRegistry::default();
    let b = reg.sync(&spec(&OLD, true, 1, 0));
    let mut rx = b.subscribe_rollout();
    reg.sync(&spec(&NEW, true, 1, 0));
    // The update started on the real endpoint clock; ticks are offsets from it.
    let t0 = now_ms();
    assert!(rx.has_changed().unwrap());
    assert_eq!(rx.borrow_and_update().generation, 2);
    let broken = [":2001", ":2002", ":2003"];
    // (time ms, expected phase) — the deadline is 10 s after the start at 0.
    for (t, phase) in [
        (1_000, Phase::Progressing),
        (9_000, Phase::Progressing),
        (10_000, Phase::Stalled),
        (15_000, Phase::Stalled),
    ] {
        b.control()
            .tick(&b.rotation, &probe(&b, &broken), t0 + t, DRAIN_MS);
        assert_eq!(b.rollout_status().phase, phase, "at {t}");
        assert_eq!(rotation(&b), OLD, "old endpoints keep serving at {t}");
        assert_eq!(ready_in_rotation(&b), 3);
    }
    let view = b.endpoints_view();
    let stalled: Vec<_> = view.events.iter().filter(|e| e.kind == "stalled").collect();
    assert_eq!(stalled.len(), 1, "the stall is reported once");
    assert_eq!(stalled[0].generation, 2);
    assert!(view
        .endpoints
        .iter()
        .filter(|e| NEW.contains(&e.address.as_str()))
        .all(|e| e.desired && !e.in_rotation && !e.ready && e.failed_probes > 0));

    // Re-declaring the old list: same mechanism, complete at once.
    reg.sync(&spec(&OLD, true, 1, 0));
    assert_eq!(b.rollout().generation, 3);
    assert_eq!(b.rollout_status().phase, Phase::Complete);
    b.control()
        .tick(&b.rotation, &probe(&b, &broken), t0 + 16_000, DRAIN_MS);
    assert_eq!(rotation(&b), OLD);
    assert!(b.rollout().is_complete(3));
    assert!(!b.rollout().is_complete(4));
    // The broken endpoints are forgotten: nothing probes them any more.
    let targets = b.control().probe_plan().targets;
    assert_eq!(targets, OLD);
}

#[test]
fn a_removed_endpoint_drains_until_its_requests_finish_or_the_timeout() {
    let reg = BackendRegistry::default();
    let b = reg.sync(&spec(&OLD[..2], false, 0, 1));
    let busy = b.rotation.load()[0].clone();
    assert_eq!(busy.address, OLD[0]);
    let guard = InFlight::start(busy.clone());
    reg.sync(&spec(&OLD[1..2], false, 0, 1));
    b.control().tick(&b.rotation, &[], 1_000, 5_000);
    assert_eq!(rotation(&b), [OLD[1]]);
    assert!(busy.draining.load(Ordering::Relaxed));
    let view = b.endpoints_view();
    let ep = view.endpoints.iter().find(|e| e.address == OLD[0]).unwrap();
    assert!(ep.draining && !ep.in_rotation && ep.in_flight == 1);
    assert_eq!(view.status.draining, 1);
    // Still busy: still draining.
    b.control().tick(&b.rotation, &[], 2_000, 5_000);
    assert_eq!(b.rollout_status().draining, 1);
    drop(guard);
    b.control().tick(&b.rotation, &[], 3_000, 5_000);
    assert_eq!(b.rollout_status().draining, 0);

    // A stuck request does not hold the drain past the timeout.
    let b2 = reg.sync(&spec(&OLD[..2], false, 0, 1));
    assert!(Arc::ptr_eq(&b, &b2));
    for t in 4..=8 {
        b.control().tick(&b.rotation, &[], t * 1_000, 5_000);
    }
    assert_eq!(b.rollout_status().phase, Phase::Complete);
    let stuck = b.rotation.load()[1].clone();
    assert_eq!(stuck.address, OLD[0]);
    let _guard = InFlight::start(stuck);
    reg.sync(&spec(&OLD[1..2], false, 0, 1));
    b.control().tick(&b.rotation, &[], 10_000, 5_000);
    b.control().tick(&b.rotation, &[], 14_999, 5_000);
    assert_eq!(b.rollout_status().draining, 1);
    b.control().tick(&b.rotation, &[], 15_000, 5_000);
    assert_eq!(b.rollout_status().draining, 0);
    let last = b.endpoints_view().events.last().cloned().unwrap();
    assert_eq!(last.kind, "drained");
    assert!(last.message.contains("timeout"), "{}", last.message);
}

#[test]
fn a_flapping_serving_endpoint_leaves_the_pick_and_comes_back() {
    let reg = BackendRegistry::default();
    let b = reg.sync(&spec(&OLD, true, 1, 0));
    b.control()
        .tick(&b.rotation, &probe(&b, &[":1002"]), 1_000, DRAIN_MS);
    for i in 0..30 {
        let ep = b.pick(i).unwrap();
        assert_ne!(ep.address, OLD[1]);
    }
    // Still Complete (final for the update), but not all ready: not "complete" for a
    // waiter such as the rollout engine.
    assert_eq!(b.rollout_status().phase, Phase::Complete);
    assert_eq!(b.rollout_status().ready, 2);
    assert!(!b.rollout().is_complete(1));
    b.control()
        .tick(&b.rotation, &probe(&b, &[]), 2_000, DRAIN_MS);
    assert!(b.rollout().is_complete(1));
    let picked: HashSet<String> = (0..30)
        .map(|i| b.pick(i).unwrap().address.clone())
        .collect();
    assert!(picked.contains(OLD[1]));
    // With every endpoint failing, nothing is picked (→ 503).
    b.control()
        .tick(&b.rotation, &probe(&b, &[":100"]), 3_000, DRAIN_MS);
    assert!(b.pick(0).is_none());
}

#[test]
fn outlier_ejection_skips_the_endpoint_and_never_takes_the_last_one() {
    let reg = BackendRegistry::default();
    let b = reg.sync(&spec_with(&OLD, false, 1, 0, Some((3, "1h", 100))));
    let eps: Vec<Arc<Endpoint>> = b.rotation.load().iter().cloned().collect();
    // Two failures and a success: not ejected.
    b.observe(&eps[0], true);
    b.observe(&eps[0], true);
    b.observe(&eps[0], false);
    b.observe(&eps[0], true);
    assert_eq!(eps[0].ejected_until_ms.load(Ordering::Relaxed), 0);
    b.observe(&eps[0], true);
    b.observe(&eps[0], true);
    assert!(eps[0].ejected_until_ms.load(Ordering::Relaxed) > 0);
    for i in 0..30 {
        assert_ne!(b.pick(i).unwrap().address, OLD[0]);
    }
    for _ in 0..3 {
        b.observe(&eps[1], true);
    }
    for i in 0..30 {
        assert_eq!(b.pick(i).unwrap().address, OLD[2]);
    }
    // The last one is never ejected (capacity rule), even at 100%.
    for _ in 0..9 {
        b.observe(&eps[2], true);
    }
    assert_eq!(eps[2].ejected_until_ms.load(Ordering::Relaxed), 0);
    let view = b.endpoints_view();
    let ejected: Vec<&str> = view
        .endpoints
        .iter()
        .filter(|e| e.ejected)
        .map(|e| e.address.as_str())
        .collect();
    assert_eq!(ejected, [OLD[0], OLD[1]]);
    assert!(view.events.iter().any(|e| e.kind == "ejectionSkipped"));

    // Should the last serving endpoint turn not ready, the pick falls back to an
    // ejected one rather than answering 503.
    eps[2].ready.store(false, Ordering::Relaxed);
    let fallback = b.pick(0).unwrap();
    assert!(fallback.address == OLD[0] || fallback.address == OLD[1]);
}

#[test]
fn an_ejection_runs_out_and_the_tick_readmits() {
    let reg = BackendRegistry::default();
    let b = reg.sync(&spec_with(&OLD, false, 1, 0, Some((1, "1ms", 50))));
    let ep = b.rotation.load()[0].clone();
    b.observe(&ep, true);
    let until = ep.ejected_until_ms.load(Ordering::Relaxed);
    assert!(until > 0);
    b.control().tick(&b.rotation, &[], until - 1, DRAIN_MS);
    assert_eq!(ep.ejected_until_ms.load(Ordering::Relaxed), until);
    b.control().tick(&b.rotation, &[], until, DRAIN_MS);
    assert_eq!(ep.ejected_until_ms.load(Ordering::Relaxed), 0);
    assert_eq!(
        b.endpoints_view().events.last().map(|e| e.kind),
        Some("readmitted")
    );
}

#[test]
fn turning_outlier_detection_off_clears_ejections_and_stops_counting() {
    let reg = BackendRegistry::default();
    let mut s = spec_with(&OLD, false, 1, 0, Some((1, "1h", 50)));
    let b = reg.sync(&s);
    let ep = b.rotation.load()[0].clone();
    b.observe(&ep, true);
    assert!(ep.ejected_until_ms.load(Ordering::Relaxed) > 0);
    s.outlier = None;
    reg.sync(&s);
    assert_eq!(ep.ejected_until_ms.load(Ordering::Relaxed), 0);
    b.observe(&ep, true);
    assert_eq!(ep.consecutive_failures.load(Ordering::Relaxed), 0);
}

#[test]
fn events_are_numbered_and_bounded() {
    let reg = BackendRegistry::default();
    let b = reg.sync(&spec(&OLD, false, 1, 0));
    for i in 0..(EVENT_LOG_CAPACITY as u64) {
        let list = if i % 2 == 0 { &NEW } else { &OLD };
        reg.sync(&spec(list, false, 1, 0));
    }
    let all = b.control().events_since(0);
    assert_eq!(all.len(), EVENT_LOG_CAPACITY);
    let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
    let last = *seqs.last().unwrap();
    assert!(b.control().events_since(last).is_empty());
    assert_eq!(b.control().events_since(last - 1).len(), 1);
}

fn gate(pairs: &[(&str, Option<&str>)]) -> Option<Gate> {
    Some(
        pairs
            .iter()
            .map(|(ep, why)| (ep.to_string(), why.map(str::to_string)))
            .collect(),
    )
}

#[test]
fn a_provider_gate_holds_an_endpoint_out_until_it_says_ready() {
    let reg = BackendRegistry::default();
    let b = reg.sync(&spec(&OLD[..1], false, 1, 0));
    b.control().set_gate(gate(&[(OLD[0], None)]), 0);
    // A recreated container: the old one is gone, the new one's HEALTHCHECK is
    // still starting. Nothing runs at the old address any more, so it leaves at
    // once; the new one may not join yet.
    b.control()
        .set_gate(gate(&[(NEW[0], Some("health check: starting"))]), 0);
    reg.sync(&spec(&NEW[..1], false, 1, 0));
    let t0 = now_ms();
    b.control().tick(&b.rotation, &[], t0 + 1_000, DRAIN_MS);
    assert!(rotation(&b).is_empty(), "{:?}", rotation(&b));
    let view = b.endpoints_view();
    let new = view.endpoints.iter().find(|e| e.address == NEW[0]).unwrap();
    assert!(new.desired && !new.in_rotation && !new.ready);
    let reasons: Vec<String> = view
        .events
        .iter()
        .filter(|e| e.kind == "notReady")
        .map(|e| e.message.clone())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|m| m == "provider: not among its containers"),
        "{reasons:?}"
    );
    // Still gated when the deadline (10 s) has passed: the update is stalled.
    b.control().tick(&b.rotation, &[], t0 + 20_000, DRAIN_MS);
    assert_eq!(b.rollout_status().phase, Phase::Stalled);
    assert!(b
        .endpoints_view()
        .events
        .iter()
        .any(|e| e.kind == "stalled"));
    // Healthy: it joins and the update completes.
    b.control().set_gate(gate(&[(NEW[0], None)]), t0 + 21_000);
    b.control().tick(&b.rotation, &[], t0 + 21_000, DRAIN_MS);
    assert_eq!(rotation(&b), [NEW[0]]);
    assert_eq!(b.rollout_status().phase, Phase::Complete);
    assert_eq!(ready_in_rotation(&b), 1);
}

#[test]
fn a_gated_endpoint_in_rotation_stops_serving_and_comes_back() {
    let reg = BackendRegistry::default();
    let b = reg.sync(&spec(&OLD[..2], true, 1, 0));
    b.control()
        .set_gate(gate(&[(OLD[0], None), (OLD[1], None)]), 0);
    b.control()
        .tick(&b.rotation, &probe(&b, &[]), 1_000, DRAIN_MS);
    assert_eq!(ready_in_rotation(&b), 2);
    // Its container turns unhealthy while its HTTP check still passes: the gate
    // alone takes it out of the balancer.
    b.control().set_gate(
        gate(&[(OLD[0], None), (OLD[1], Some("health check: unhealthy"))]),
        2_000,
    );
    b.control()
        .tick(&b.rotation, &probe(&b, &[]), 2_000, DRAIN_MS);
    assert_eq!(rotation(&b), OLD[..2], "it stays in rotation, not ready");
    assert_eq!(ready_in_rotation(&b), 1);
    let last = b.endpoints_view().events.last().cloned().unwrap();
    assert_eq!(
        (last.kind, last.endpoint.as_deref(), last.message.as_str()),
        (
            "notReady",
            Some(OLD[1]),
            "provider: health check: unhealthy"
        )
    );
    // And the other way round: the gate passes but the HTTP check fails.
    b.control()
        .set_gate(gate(&[(OLD[0], None), (OLD[1], None)]), 3_000);
    b.control()
        .tick(&b.rotation, &probe(&b, &[OLD[0]]), 3_000, DRAIN_MS);
    assert_eq!(ready_in_rotation(&b), 1);
    b.control()
        .tick(&b.rotation, &probe(&b, &[]), 4_000, DRAIN_MS);
    assert_eq!(ready_in_rotation(&b), 2);
    // Lifting the gate leaves the health checks alone in charge.
    b.control().set_gate(None, 5_000);
    b.control()
        .tick(&b.rotation, &probe(&b, &[]), 5_000, DRAIN_MS);
    assert_eq!(ready_in_rotation(&b), 2);
}
