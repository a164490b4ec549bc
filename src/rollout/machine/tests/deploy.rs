//! Flagger's `IsCanaryReady` gate: an analysed run on a canary slot whose
//! rolling update has not finished waits, and rolls back once it stalled.

use super::*;

fn rolling() -> SlotDeploy {
    SlotDeploy::Rolling("rolling update of backend green: 0 of 1 new endpoints in rotation".into())
}

#[test]
fn a_run_waits_for_the_canary_slot_without_counting_checks_or_moving_traffic() {
    let mut sim = Sim::new(with_hooks(
        base_spec(),
        &[("load", HookKind::Rollout), ("gate", HookKind::Rollback)],
    ));
    sim.init();
    sim.w.canary_deploy = rolling();
    let started = sim.release("v2");
    assert_eq!(started.phase(), Phase::Progressing);
    sim.fail_metric("request-success-rate", true);
    for r in sim.ticks(4) {
        assert_eq!(r.phase(), Phase::Progressing);
        assert_eq!((r.weight(), r.state.failed_checks), (0, 0));
        assert_eq!(r.events(), vec![EventReason::WaitingCanary]);
        assert!(
            r.message().contains("0 of 1 new endpoints in rotation"),
            "{}",
            r.message()
        );
        assert!(r.traffic().is_empty());
    }
    // Deployed: the analysis goes on from where it waited.
    sim.w.canary_deploy = SlotDeploy::Ready;
    sim.fail_metric("request-success-rate", false);
    let r = sim.tick();
    assert!(r.has_event(EventReason::Advanced), "{:?}", r.events());
    assert_eq!(r.weight(), 10);
}

#[test]
fn a_stalled_canary_slot_rolls_the_run_back_with_the_deadline_named() {
    let mut sim = Sim::new(with_hooks(base_spec(), &[("after", HookKind::PostRollout)]));
    sim.init();
    sim.w.canary_deploy = rolling();
    sim.release("v2");
    sim.tick();
    sim.w.canary_deploy = SlotDeploy::Stalled(
        "rolling update of backend green: 0 of 1 new endpoints in rotation, 0 ready".into(),
    );
    let r = sim.tick();
    assert_eq!(r.phase(), Phase::Failed);
    assert!(r.has_event(EventReason::RolledBack));
    let msg = r.message();
    assert!(
        msg.contains("progress deadline exceeded: rolling update of backend green"),
        "{msg}"
    );
    assert_eq!(r.post_rollout(), Some(Phase::Failed));
    assert_eq!(r.weight(), 0);
    // The failed revision does not start again on its own.
    let r = sim.tick();
    assert_eq!(r.phase(), Phase::Failed);
    assert!(r.cmds.is_empty(), "{:?}", r.cmds);
}

#[test]
fn a_slot_deploying_mid_run_holds_the_weight_it_had() {
    let mut sim = Sim::new(base_spec());
    sim.init();
    sim.release("v2");
    let r = sim.tick();
    assert_eq!(r.weight(), 10);
    sim.w.canary_deploy = rolling();
    let r = sim.tick();
    assert_eq!(r.weight(), 10, "no step while the slot deploys");
    assert_eq!(r.events(), vec![EventReason::WaitingCanary]);
}
