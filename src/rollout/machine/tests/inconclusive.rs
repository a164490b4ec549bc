use super::*;
use crate::stats::sequential::{Baseline, SequentialParams};

fn judged(on: OnInconclusive, max_holds: u32) -> CanarySpec {
    let mut spec = base_spec();
    spec.analysis.metrics[0].judge = Some(JudgeSpec {
        params: SequentialParams::DEFAULT,
        baseline: Baseline::Primary,
        on_inconclusive: on,
        max_holds,
    });
    spec
}

/// A run at weight 10 whose success-rate judge is undecided from now on.
fn undecided(spec: CanarySpec) -> Sim {
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    assert_eq!(sim.tick().weight(), 10);
    sim.w
        .inconclusive_metrics
        .insert("request-success-rate".to_string());
    sim
}

#[test]
fn an_inconclusive_check_holds_the_step_without_a_failed_check() {
    let mut sim = undecided(judged(OnInconclusive::Hold, 3));
    for n in 1..=3u32 {
        let r = sim.tick();
        assert_eq!(r.phase(), Phase::Progressing);
        assert_eq!((r.weight(), r.state.failed_checks), (10, 0));
        assert!(r.traffic().is_empty(), "a hold moves no traffic");
        assert_eq!(r.events(), vec![EventReason::Inconclusive]);
        assert_eq!(r.state.holds, n);
        assert!(
            r.message().contains(&format!("inconclusive {n}/3")),
            "{}",
            r.message()
        );
        assert!(r.message().contains("evidence 25%"), "{}", r.message());
    }
    // A decision ends the holds: the run steps on.
    sim.w.inconclusive_metrics.clear();
    let r = sim.tick();
    assert_eq!((r.weight(), r.state.holds), (20, 0));
}

#[test]
fn after_max_holds_hold_and_pause_pause_the_run() {
    for on in [OnInconclusive::Hold, OnInconclusive::Pause] {
        let mut sim = undecided(judged(on, 2));
        sim.ticks(2);
        let r = sim.tick();
        assert!(r.state.paused, "{on:?}");
        assert_eq!(
            r.events(),
            vec![EventReason::Inconclusive, EventReason::Paused]
        );
        assert_eq!((r.weight(), r.state.failed_checks), (10, 0));
        let p = plan(&sim.spec, &sim.state, sim.now + 10 * INTERVAL);
        assert!(!p.due, "a paused run waits for an operator");
        // Resume: the judge gets maxHolds more checks.
        sim.cmd(ManualCommand::Resume);
        assert_eq!(sim.tick().events(), vec![EventReason::Inconclusive]);
    }
}

#[test]
fn after_max_holds_rollback_rolls_back() {
    let mut sim = undecided(judged(OnInconclusive::Rollback, 1));
    sim.tick();
    let r = sim.tick();
    assert_eq!(r.phase(), Phase::Failed);
    assert!(r.has_event(EventReason::RolledBack));
    assert!(
        r.message().contains("inconclusive after 1 held checks"),
        "{}",
        r.message()
    );
}

#[test]
fn after_max_holds_promote_takes_the_check_as_passed() {
    let mut sim = undecided(judged(OnInconclusive::Promote, 0));
    let r = sim.tick();
    assert_eq!(r.weight(), 20, "the step is taken");
    assert!(r.has_event(EventReason::Inconclusive));
    assert!(r.has_event(EventReason::Advanced));
    assert_eq!(r.state.failed_checks, 0);
}

#[test]
fn a_metric_without_a_judge_cannot_be_inconclusive() {
    // A result that claims Inconclusive for a metric without a judge counts as failed.
    let mut sim = undecided(base_spec());
    let r = sim.tick();
    assert_eq!(r.state.failed_checks, 1);
    assert_eq!(r.events(), vec![EventReason::CheckFailed]);
}

#[test]
fn a_failure_beside_an_inconclusive_check_is_a_failed_check() {
    let mut sim = undecided(judged(OnInconclusive::Hold, 3));
    sim.fail_metric("request-duration", true);
    sim.w.stop_at_halt = false;
    let r = sim.tick();
    assert_eq!((r.state.failed_checks, r.state.holds), (1, 0));
    assert_eq!(r.events(), vec![EventReason::CheckFailed]);
}

#[test]
fn a_new_run_starts_with_no_holds_and_its_own_window() {
    let mut sim = undecided(judged(OnInconclusive::Hold, 5));
    sim.tick();
    assert_eq!(sim.state.holds, 1);
    sim.state.measured_since_ms = Some(sim.now);
    sim.w.inconclusive_metrics.clear();
    sim.w.canary_revision = Some("v3".to_string());
    let r = sim.tick();
    assert!(r.has_event(EventReason::Restarted));
    assert_eq!(r.state.holds, 0);
    assert_eq!(r.state.measured_since_ms, None);
    assert_eq!(r.state.window_start_ms(), Some(r.now));
}
