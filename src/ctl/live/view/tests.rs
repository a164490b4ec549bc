use super::*;

fn status(phase: &str, weight: u8) -> CanaryStatus {
    serde_json::from_value(serde_json::json!({
        "name": "app", "route": "app", "strategy": "canary", "promotion": "swap",
        "phase": phase, "canaryWeight": weight, "primaryWeight": 100 - weight,
        "matchActive": false, "mirror": false, "iterations": 0, "iterationsTotal": 0,
        "failedChecks": 1, "threshold": 5, "intervalMs": 5000, "nextTickMs": 10_000,
        "weightPlan": [20, 40, 60],
        "metrics": [{"name": "request-success-rate", "min": 99.0, "max": null, "intervalMs": 60000},
                    {"name": "request-duration", "min": null, "max": 500.0, "intervalMs": 60000}],
        "revision": "v2", "promotedRevision": "v1", "pendingRevision": null, "paused": false,
        "primaryBackend": "app-blue", "canaryBackend": "app-green", "message": "",
        "lastTransitionMs": 0,
        "lastChecks": {"atMs": 0, "hooks": [], "metrics": [
            {"name": "request-success-rate", "value": 97.5, "passed": false, "reason": "97.50 < 99"}]},
        "dataPlanes": ["in-process"], "pendingWrites": 0, "dataPlaneError": null, "events": []
    }))
    .expect("a canary status")
}

#[test]
fn the_plan_marks_the_current_step() {
    assert_eq!(
        step_plan(&status("Progressing", 40)),
        "0 → 20 → [40] → 60 → promote"
    );
    assert_eq!(
        step_plan(&status("Progressing", 0)),
        "[0] → 20 → 40 → 60 → promote"
    );
    assert_eq!(
        step_plan(&status("Promoting", 60)),
        "0 → 20 → 40 → 60 → [promote]"
    );
    assert_eq!(
        step_plan(&status("Succeeded", 0)),
        "0 → 20 → 40 → 60 → promote"
    );
    let mut ab = status("Progressing", 0);
    ab.weight_plan.clear();
    ab.iterations = 2;
    ab.iterations_total = 5;
    assert_eq!(step_plan(&ab), "iteration [2]/5 → promote");
}

#[test]
fn the_countdown_counts_to_the_next_tick() {
    let s = status("Progressing", 20);
    assert_eq!(countdown(&s, 6_500), "in 4s (every 5s)");
    assert_eq!(countdown(&s, 10_000), "due (every 5s)");
    let mut p = s.clone();
    p.paused = true;
    assert_eq!(countdown(&p, 6_500), "paused");
    p.paused = false;
    p.next_tick_ms = None;
    assert_eq!(countdown(&p, 6_500), "-");
}

#[test]
fn the_screen_shows_sides_checks_and_events() {
    let stats: RouteStats = serde_json::from_value(serde_json::json!({
        "route": "app", "canaryWeight": 20, "primary": "app-blue", "canary": "app-green",
        "windowSecs": 60,
        "roles": {
            "primary": {"requests": 480, "failures": 0, "rps": 8.0, "successRate": 100.0,
                        "p50Ms": 1.0, "p90Ms": 2.0, "p99Ms": 2.5},
            "canary": {"requests": 120, "failures": 3, "rps": 2.0, "successRate": 97.5,
                       "p50Ms": 1.0, "p90Ms": 2.0, "p99Ms": 14.0},
            "mirror": {"requests": 0, "failures": 0, "rps": 0.0, "successRate": null,
                       "p50Ms": null, "p90Ms": null, "p99Ms": null}
        },
        "snapshots": {
            "primary": {"requests": 0, "failures": 0, "windowSecs": 60, "histogram": []},
            "canary": {"requests": 0, "failures": 0, "windowSecs": 60, "histogram": []},
            "mirror": {"requests": 0, "failures": 0, "windowSecs": 60, "histogram": []}
        }
    }))
    .expect("a route's stats");
    let e: RolloutEvent = serde_json::from_value(serde_json::json!({
        "canary": "app", "timeMs": 3_723_000, "phase": "Progressing", "reason": "Advanced",
        "warning": false, "message": "Advance app to 20%", "canaryWeight": 20,
        "primaryWeight": 80, "iterations": 0, "failedChecks": 1, "revision": "v2"
    }))
    .expect("an event");
    let mut v = View {
        status: status("Progressing", 20),
        stats: Some(stats),
        events: Vec::new(),
        error: None,
    };
    for _ in 0..(SHOWN_EVENTS + 3) {
        v.push_event(e.clone());
    }
    assert_eq!(v.events.len(), SHOWN_EVENTS);
    let s = screen("http://127.0.0.1:9901", &v, "60s", 6_500);
    assert!(s.starts_with("\x1b[H\x1b[2J"), "{s}");
    for want in [
        "phase      Progressing",
        "0 → [20] → 40 → 60 → promote",
        "canary 20%  primary 80%",
        "next tick  in 4s (every 5s)",
        "failed     1/5 checks",
        "primary  480",
        "canary   120       2.0  97.50%   14.0ms",
        "request-success-rate     ≥ 99             97.50 FAILED (97.50 < 99)",
        "request-duration         ≤ 500            not measured yet",
        "01:02:03 app Progressing",
    ] {
        assert!(s.contains(want), "{want:?} missing:\n{s}");
    }
    let line = state_line(&v, 6_500);
    assert_eq!(
        line,
        "00:00:06 app Progressing steps 0 → [20] → 40 → 60 → promote weight 20% next in 4s (every 5s) failed 1/5 primary: 480 req 100.00% p99 2.5ms canary: 120 req 97.50% p99 14.0ms"
    );
    v.stats = None;
    assert!(screen("x", &v, "60s", 0).contains("traffic: not read yet"));
}

#[test]
fn a_run_ends_in_succeeded_or_failed() {
    let event = |phase: &str, reason: &str| -> RolloutEvent {
        serde_json::from_value(serde_json::json!({
            "canary": "app", "timeMs": 0, "phase": phase, "reason": reason,
            "warning": false, "message": "", "canaryWeight": 0, "primaryWeight": 100,
            "iterations": 0, "failedChecks": 0, "revision": "v2"
        }))
        .expect("an event")
    };
    assert!(run_finished(&event("Succeeded", "Succeeded")));
    assert!(run_finished(&event("Failed", "RolledBack")));
    assert!(run_finished(&event("Failed", "PromotionFailed")));
    assert!(run_finished(&event("Succeeded", "Aborted")));
    // A new revision is detected in the previous run's phase: not an end.
    assert!(!run_finished(&event("Succeeded", "NewRevision")));
    assert!(!run_finished(&event("Progressing", "Advanced")));
    assert!(!run_finished(&event("Initialized", "Initialized")));
    assert_eq!(
        finished_line(&status("Succeeded", 0)),
        "app: run finished: Succeeded (v2 promoted)"
    );
    let mut f = status("Failed", 0);
    f.message = "Rolled back: 5 failed checks".into();
    assert_eq!(
        finished_line(&f),
        "app: run finished: Failed (v2 rolled back; v1 serves) — Rolled back: 5 failed checks"
    );
}

#[test]
fn an_inconclusive_check_is_shown_held_with_its_evidence_and_window() {
    let mut s = status("Progressing", 20);
    s.last_checks.metrics = vec![
        serde_json::from_value(serde_json::json!({
            "name": "request-success-rate", "value": 99.2, "passed": false,
            "inconclusive": true, "evidence": 0.4,
            "reason": "inconclusive: errors inconclusive -0.10pp [-2.00, +1.80], evidence 40%",
            "window": {"sinceMs": 43_205_000, "secs": 12, "role": "canary",
                       "requests": 36, "primaryRequests": 144}
        }))
        .expect("a result"),
        serde_json::from_value(serde_json::json!({
            "name": "request-duration", "value": 12.0, "passed": true, "reason": "ok",
            "window": {"sinceMs": 43_205_000, "secs": 12, "role": "canary",
                       "requests": 36, "primaryRequests": 144}
        }))
        .expect("a result"),
    ];
    let v = View {
        status: s,
        stats: None,
        events: Vec::new(),
        error: None,
    };
    let screen = screen("x", &v, "60s", 0);
    assert!(
        screen.contains("99.20 INCONCLUSIVE, evidence 40%, step held (inconclusive: errors"),
        "{screen}"
    );
    assert!(
        screen.contains("evidence 40%) [36 canary requests since 12:00:05]"),
        "{screen}"
    );
    assert!(
        screen.contains("12.00 ok [36 canary requests since 12:00:05]"),
        "{screen}"
    );
    assert!(!screen.contains("FAILED"), "{screen}");
}
