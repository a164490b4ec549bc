//! Table tests replaying tick sequences through `plan` + `step`, with a small simulated
//! driver (`Sim`) that calls the planned hooks in order, measures the metrics and applies
//! nothing but the machine's own state. The sequences are Flagger's own scheduler tests
//! (`scheduler_svc_test.go`, `scheduler_deployment_test.go`) where Flagger has one.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

/// A run on a canary slot that is still deploying.
mod deploy;
/// Checks that answer "not yet" (the sequential judge).
mod inconclusive;

const INTERVAL: u64 = 60_000;
const START: u64 = 1_000_000;

fn metric(name: &str, min: Option<f64>, max: Option<f64>) -> MetricSpec {
    MetricSpec {
        name: name.to_string(),
        min,
        max,
        interval_ms: INTERVAL,
        dry_run: false,
        ..Default::default()
    }
}

fn hook(name: &str, kind: HookKind) -> WebhookSpec {
    WebhookSpec {
        name: name.to_string(),
        kind,
        url: format!("http://127.0.0.1:8090/{name}"),
        timeout_ms: 10_000,
        metadata: BTreeMap::new(),
    }
}

/// Flagger's test canary: threshold 5, stepWeight 10, maxWeight 50, two metrics.
fn base_spec() -> CanarySpec {
    CanarySpec {
        name: "podinfo".to_string(),
        skip_analysis: false,
        promotion: Promotion::Swap,
        progress_deadline_ms: 600_000,
        analysis: AnalysisSpec {
            interval_ms: INTERVAL,
            threshold: 5,
            max_weight: 50,
            step_weight: 10,
            metrics: vec![
                metric("request-success-rate", Some(99.0), None),
                metric("request-duration", None, Some(500.0)),
            ],
            ..AnalysisSpec::default()
        },
    }
}

fn with_hooks(mut spec: CanarySpec, hooks: &[(&str, HookKind)]) -> CanarySpec {
    spec.analysis.webhooks = hooks.iter().map(|(n, k)| hook(n, *k)).collect();
    spec
}

/// What the simulated outside world answers.
#[derive(Clone, Debug)]
struct World {
    canary_revision: Option<String>,
    primary_revision: Option<String>,
    primary_ready: bool,
    /// Hook answers by name; by default every hook passes except rollback hooks.
    answers: BTreeMap<String, bool>,
    failing_metrics: BTreeSet<String>,
    /// Metrics whose judge answers Inconclusive.
    inconclusive_metrics: BTreeSet<String>,
    no_traffic: bool,
    /// A passing promote hook redeploys the primary at once (seen in the same tick).
    promote_redeploys: bool,
    /// Stop at the first halting step, as a driver may.
    stop_at_halt: bool,
    /// The canary slot's deployment.
    canary_deploy: SlotDeploy,
}

impl Default for World {
    fn default() -> Self {
        World {
            canary_revision: Some("v1".to_string()),
            primary_revision: Some("v1".to_string()),
            primary_ready: true,
            answers: BTreeMap::new(),
            failing_metrics: BTreeSet::new(),
            inconclusive_metrics: BTreeSet::new(),
            no_traffic: false,
            promote_redeploys: true,
            stop_at_halt: true,
            canary_deploy: SlotDeploy::Ready,
        }
    }
}

/// One step as recorded by the simulated driver.
#[derive(Clone, Debug)]
struct Rec {
    now: u64,
    plan: Plan,
    obs: Observation,
    state: CanaryState,
    cmds: Vec<Command>,
}

impl Rec {
    fn phase(&self) -> Phase {
        self.state.phase
    }
    fn weight(&self) -> u8 {
        self.state.canary_weight
    }
    fn primary(&self) -> u8 {
        100 - self.state.canary_weight
    }
    fn planned(&self) -> Vec<HookKind> {
        self.plan
            .steps
            .iter()
            .map(|s| match s {
                PlanStep::Hook { kind, .. } => *kind,
                // Metrics shown as a pseudo kind for compact assertions.
                PlanStep::Metrics => HookKind::Event,
            })
            .collect()
    }
    fn plans(&self, kind: HookKind) -> bool {
        self.planned().contains(&kind)
    }
    fn plans_metrics(&self) -> bool {
        self.plan.needs_metrics()
    }
    fn events(&self) -> Vec<EventReason> {
        self.cmds
            .iter()
            .filter_map(|c| match c {
                Command::Event { reason, .. } => Some(*reason),
                _ => None,
            })
            .collect()
    }
    fn has_event(&self, reason: EventReason) -> bool {
        self.events().contains(&reason)
    }
    fn traffic(&self) -> Vec<Command> {
        self.cmds
            .iter()
            .filter(|c| matches!(c, Command::SetTraffic { .. }))
            .cloned()
            .collect()
    }
    fn swapped(&self) -> bool {
        self.cmds.contains(&Command::SwapSlots)
    }
    fn post_rollout(&self) -> Option<Phase> {
        self.cmds.iter().find_map(|c| match c {
            Command::CallHooks {
                kind: HookKind::PostRollout,
                phase,
            } => Some(*phase),
            _ => None,
        })
    }
    fn message(&self) -> String {
        self.cmds
            .iter()
            .filter_map(|c| match c {
                Command::Event { message, .. } => Some(message.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(" | ")
    }
}

fn traffic(canary_weight: u8, match_active: bool, mirror_weight: Option<u8>) -> Command {
    Command::SetTraffic {
        canary_weight,
        match_active,
        mirror_weight,
        affinity_active: false,
    }
}

/// A simulated driver around the machine.
struct Sim {
    spec: CanarySpec,
    state: CanaryState,
    now: u64,
    w: World,
    log: Vec<Rec>,
}

impl Sim {
    fn new(spec: CanarySpec) -> Self {
        Sim {
            spec,
            state: CanaryState::new(),
            now: START,
            w: World::default(),
            log: Vec::new(),
        }
    }

    fn answer(&mut self, name: &str, passed: bool) {
        self.w.answers.insert(name.to_string(), passed);
    }

    fn fail_metric(&mut self, name: &str, failing: bool) {
        if failing {
            self.w.failing_metrics.insert(name.to_string());
        } else {
            self.w.failing_metrics.remove(name);
        }
    }

    /// Calls the planned hooks and measures the metrics, like the real driver.
    fn observe(&mut self, plan: &Plan) -> Observation {
        let mut obs = Observation::default();
        for s in &plan.steps {
            let halted = match s {
                PlanStep::Hook { index, kind, .. } => {
                    let h = &self.spec.analysis.webhooks[*index];
                    let default = *kind != HookKind::Rollback;
                    let passed = self.w.answers.get(&h.name).copied().unwrap_or(default);
                    if *kind == HookKind::Promote && passed && self.w.promote_redeploys {
                        self.w.primary_revision = self.state.revision.clone();
                        self.w.primary_ready = true;
                    }
                    obs.hooks.push(HookResult {
                        index: *index,
                        name: h.name.clone(),
                        kind: *kind,
                        passed,
                        reason: if passed { "200 OK" } else { "403 Forbidden" }.to_string(),
                    });
                    kind.halts(passed)
                }
                PlanStep::Metrics => {
                    let mut any_failed = false;
                    for m in &self.spec.analysis.metrics {
                        if self.w.inconclusive_metrics.contains(&m.name) {
                            any_failed = true;
                            obs.metrics.push(MetricResult {
                                name: m.name.clone(),
                                inconclusive: true,
                                evidence: Some(0.25),
                                reason: "inconclusive: errors inconclusive, evidence 25%"
                                    .to_string(),
                                ..MetricResult::default()
                            });
                            continue;
                        }
                        let failing = self.w.failing_metrics.contains(&m.name);
                        let value = if self.w.no_traffic {
                            None
                        } else if failing {
                            m.min.map(|v| v - 4.0).or(m.max.map(|v| v + 100.0))
                        } else {
                            m.min.map(|v| v + 0.5).or(m.max.map(|v| v / 2.0))
                        };
                        let verdict = if self.w.no_traffic {
                            Err("not enough traffic".to_string())
                        } else {
                            m.evaluate(value)
                        };
                        any_failed |= verdict.is_err();
                        obs.metrics.push(MetricResult {
                            name: m.name.clone(),
                            value,
                            passed: verdict.is_ok(),
                            reason: verdict.err().unwrap_or_default(),
                            ..MetricResult::default()
                        });
                    }
                    any_failed
                }
            };
            if halted && self.w.stop_at_halt {
                break;
            }
        }
        obs.canary_revision = self.w.canary_revision.clone();
        obs.primary_revision = self.w.primary_revision.clone();
        obs.primary_ready = self.w.primary_ready;
        obs.canary_deploy = self.w.canary_deploy.clone();
        obs
    }

    /// Waits for the next due tick and runs it.
    fn tick(&mut self) -> Rec {
        let mut p = plan(&self.spec, &self.state, self.now);
        if !p.due {
            self.now = p
                .next_due_ms
                .expect("a tick was expected but the canary is paused");
            p = plan(&self.spec, &self.state, self.now);
        }
        assert!(p.due, "plan must be due at its next_due_ms");
        let obs = self.observe(&p);
        self.apply(p, obs)
    }

    /// Runs the tick due *now*, asserting that no time has to pass.
    fn tick_now(&mut self) -> Rec {
        let p = plan(&self.spec, &self.state, self.now);
        assert!(p.due, "a tick should be due at once: {p:?}");
        self.tick()
    }

    fn ticks(&mut self, n: usize) -> Vec<Rec> {
        (0..n).map(|_| self.tick()).collect()
    }

    fn cmd(&mut self, c: ManualCommand) -> Rec {
        let p = plan(&self.spec, &self.state, self.now);
        self.apply(p, Observation::command(c))
    }

    fn apply(&mut self, plan: Plan, obs: Observation) -> Rec {
        let before = self.state.clone();
        let (state, cmds) = step(&self.spec, &self.state, &obs, self.now);
        check_invariants(&before, &state, &cmds);
        if cmds.contains(&Command::SwapSlots) {
            // The driver swaps the slots: each now reports the other's revision.
            std::mem::swap(&mut self.w.canary_revision, &mut self.w.primary_revision);
        }
        self.state = state.clone();
        let rec = Rec {
            now: self.now,
            plan,
            obs,
            state,
            cmds,
        };
        self.log.push(rec.clone());
        rec
    }

    fn init(&mut self) -> Rec {
        let r = self.tick();
        assert_eq!(r.phase(), Phase::Initialized);
        r
    }

    /// Deploys `rev` on the canary slot and runs the detection tick and the
    /// confirm-rollout tick (due at once). Returns the confirm tick.
    fn release(&mut self, rev: &str) -> Rec {
        self.w.canary_revision = Some(rev.to_string());
        let detect = self.tick();
        assert_eq!(detect.state.pending_revision.as_deref(), Some(rev));
        assert!(detect.has_event(EventReason::NewRevision));
        assert!(detect.traffic().is_empty());
        self.tick_now()
    }
}

/// Checked after every step of every test.
fn check_invariants(before: &CanaryState, after: &CanaryState, cmds: &[Command]) {
    assert!(after.canary_weight <= 100);
    if after.phase != before.phase {
        assert!(
            cmds.iter()
                .any(|c| matches!(c, Command::Event { phase, .. } if *phase == after.phase)),
            "transition {:?} -> {:?} without an event: {cmds:?}",
            before.phase,
            after.phase
        );
    }
    if after.failed_checks > before.failed_checks {
        assert!(
            cmds.iter().any(|c| matches!(
                c,
                Command::Event {
                    reason: EventReason::CheckFailed,
                    ..
                }
            )),
            "failed check without an event"
        );
    }
    // The last traffic command is the traffic recorded in the state.
    let last = cmds.iter().rev().find_map(|c| match c {
        Command::SetTraffic {
            canary_weight,
            match_active,
            mirror_weight,
            ..
        } => Some((*canary_weight, *match_active, mirror_weight.is_some())),
        Command::SwapSlots => Some((0, false, false)),
        _ => None,
    });
    let now = (after.canary_weight, after.match_active, after.mirror);
    let was = (before.canary_weight, before.match_active, before.mirror);
    match last {
        Some(t) => assert_eq!(t, now, "traffic command and state disagree"),
        None => assert_eq!(was, now, "traffic changed without a command: {cmds:?}"),
    }
}

#[test]
fn initialization_routes_everything_to_the_primary_and_takes_a_baseline() {
    let mut sim = Sim::new(base_spec());
    let r = sim.init();
    assert_eq!(r.traffic(), vec![traffic(0, false, None)]);
    assert!(r.has_event(EventReason::Initialized));
    assert_eq!(r.state.observed_revision.as_deref(), Some("v1"));
    // The baseline is not a release: nothing happens on the next ticks.
    for (i, r) in sim.ticks(3).iter().enumerate() {
        assert_eq!(r.phase(), Phase::Initialized);
        assert!(r.cmds.is_empty());
        assert_eq!(r.now - START, INTERVAL * (i as u64 + 1));
    }
}

/// Flagger's `testServicePromotion`: the primary weights seen after each tick from the
/// tick that detects the new revision, then Promoting, Finalising (all traffic on the new
/// primary) and Succeeded.
#[test]
fn canary_weights_follow_flagger_service_promotion_tests() {
    let weights = |step_weights: &[u8]| {
        let mut s = base_spec();
        s.analysis.step_weight = 0;
        s.analysis.max_weight = 0;
        s.analysis.step_weights = step_weights.to_vec();
        s
    };
    let canary = |step: u8, max: u8| {
        let mut s = base_spec();
        s.analysis.step_weight = step;
        s.analysis.max_weight = max;
        s
    };
    let table: Vec<(&str, CanarySpec, Vec<u8>)> = vec![
        (
            "stepWeight 20 maxWeight 50",
            canary(20, 50),
            vec![100, 80, 60, 40],
        ),
        (
            "stepWeight 50 maxWeight 100",
            canary(50, 100),
            vec![100, 50, 0],
        ),
        (
            "stepWeights 1,2,10,80",
            weights(&[1, 2, 10, 80]),
            vec![100, 99, 98, 90, 20],
        ),
        (
            "stepWeights 1,2,10,200 (overflow)",
            weights(&[1, 2, 10, 200]),
            vec![100, 99, 98, 90, 0],
        ),
    ];
    for (name, spec, expected) in table {
        let mut sim = Sim::new(spec);
        sim.init();
        let mut seen = vec![sim.release("v2").primary()];
        for r in sim.ticks(expected.len() - 1) {
            assert_eq!(r.phase(), Phase::Progressing, "{name}");
            assert!(!r.state.mirror, "{name}");
            assert_eq!(
                r.traffic(),
                vec![traffic(r.weight(), false, None)],
                "{name}"
            );
            assert!(r.has_event(EventReason::Advanced), "{name}");
            seen.push(r.primary());
        }
        assert_eq!(seen, expected, "{name}");

        let promoting = sim.tick();
        assert_eq!(promoting.phase(), Phase::Promoting, "{name}");
        assert!(
            promoting.traffic().is_empty(),
            "{name}: promotion holds the weight"
        );

        let finalising = sim.tick();
        assert_eq!(finalising.phase(), Phase::Finalising, "{name}");
        assert!(finalising.swapped(), "{name}");
        assert_eq!(finalising.primary(), 100, "{name}");
        assert_eq!(finalising.state.promoted_revision.as_deref(), Some("v2"));

        let done = sim.tick();
        assert_eq!(done.phase(), Phase::Succeeded, "{name}");
        assert_eq!(done.post_rollout(), Some(Phase::Succeeded), "{name}");
    }
}

/// Flagger's `TestScheduler_DeploymentAnalysisPhases` with stepWeight 100 and
/// stepWeightPromotion 50: 0, 100, Promoting 100 → 50 → 0, Finalising, Succeeded.
#[test]
fn webhook_promotion_shifts_back_by_step_weight_promotion() {
    let mut spec = with_hooks(base_spec(), &[("redeploy", HookKind::Promote)]);
    spec.promotion = Promotion::Webhook;
    spec.analysis.step_weight = 100;
    spec.analysis.max_weight = 0;
    spec.analysis.step_weight_promotion = 50;
    let mut sim = Sim::new(spec);
    sim.init();
    let mut seen = vec![(sim.release("v2").phase(), sim.state.canary_weight)];
    let recs = sim.ticks(5);
    seen.extend(recs.iter().map(|r| (r.phase(), r.weight())));
    assert_eq!(
        seen,
        vec![
            (Phase::Progressing, 0),
            (Phase::Progressing, 100),
            (Phase::Promoting, 100),
            (Phase::Promoting, 50),
            (Phase::Finalising, 0),
            (Phase::Succeeded, 0),
        ]
    );
    // The promote hook is called in the first Promoting tick, once, with phase Promoting.
    assert!(!recs[1].plans(HookKind::Promote));
    assert_eq!(
        recs[2].plan.steps,
        vec![PlanStep::Hook {
            index: 0,
            kind: HookKind::Promote,
            phase: Phase::Promoting
        }]
    );
    assert!(!recs[3].plans(HookKind::Promote));
    assert_eq!(recs[2].traffic(), vec![traffic(50, false, None)]);
    assert_eq!(recs[3].traffic(), vec![traffic(0, false, None)]);
    assert!(recs.iter().all(|r| !r.swapped()));
    assert_eq!(recs[4].post_rollout(), Some(Phase::Succeeded));
    assert_eq!(recs[4].state.promoted_revision.as_deref(), Some("v2"));
}

#[test]
fn webhook_promotion_without_step_weight_promotion_moves_everything_at_once() {
    let mut spec = with_hooks(base_spec(), &[("redeploy", HookKind::Promote)]);
    spec.promotion = Promotion::Webhook;
    spec.analysis.step_weight = 50;
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    assert_eq!(sim.tick().weight(), 50);
    assert_eq!(sim.tick().phase(), Phase::Promoting);
    let r = sim.tick();
    assert_eq!((r.phase(), r.weight()), (Phase::Finalising, 0));
    assert_eq!(r.traffic(), vec![traffic(0, false, None)]);
}

/// Flagger's `TestScheduler_DeploymentMirroring`: mirrored 100/0, then 90/10 without mirror.
#[test]
fn mirroring_runs_one_mirrored_tick_before_the_first_step() {
    let mut spec = with_hooks(
        base_spec(),
        &[
            ("pre", HookKind::PreRollout),
            ("load", HookKind::Rollout),
            ("more", HookKind::ConfirmTrafficIncrease),
        ],
    );
    spec.analysis.mirror = true;
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");

    let mirrored = sim.tick();
    assert_eq!((mirrored.primary(), mirrored.weight()), (100, 0));
    assert!(mirrored.state.mirror);
    assert_eq!(mirrored.traffic(), vec![traffic(0, false, Some(100))]);
    // Flagger asks confirm-traffic-increase before the mirror step too.
    assert_eq!(
        mirrored.planned(),
        vec![HookKind::PreRollout, HookKind::ConfirmTrafficIncrease]
    );

    let shifted = sim.tick();
    assert_eq!((shifted.primary(), shifted.weight()), (90, 10));
    assert!(!shifted.state.mirror);
    assert_eq!(shifted.traffic(), vec![traffic(10, false, None)]);
    // Mirrored traffic is analysed; no confirm-traffic-increase while mirrored.
    assert_eq!(shifted.planned(), vec![HookKind::Rollout, HookKind::Event]);

    let next = sim.tick();
    assert_eq!(next.weight(), 20);
    assert!(next.plans(HookKind::ConfirmTrafficIncrease));
}

#[test]
fn mirror_weight_is_passed_through() {
    let mut spec = base_spec();
    spec.analysis.mirror = true;
    spec.analysis.mirror_weight = Some(30);
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    assert_eq!(sim.tick().traffic(), vec![traffic(0, false, Some(30))]);
}

/// A/B: matching requests go to the canary (weight 0, match active) for N iterations.
#[test]
fn ab_testing_routes_matching_requests_for_n_iterations_then_promotes() {
    let mut spec = with_hooks(
        base_spec(),
        &[
            ("pre", HookKind::PreRollout),
            ("approve", HookKind::ConfirmPromotion),
        ],
    );
    spec.analysis.iterations = 3;
    spec.analysis.has_match = true;
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    let recs = sim.ticks(3);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.phase(), Phase::Progressing);
        assert_eq!(r.state.iterations, i as u32 + 1);
        assert_eq!(r.traffic(), vec![traffic(0, true, None)]);
        assert!(!r.plans(HookKind::ConfirmPromotion));
        assert_eq!(r.plans(HookKind::PreRollout), i == 0);
        assert_eq!(r.plans_metrics(), i > 0);
    }
    let promoting = sim.tick();
    assert_eq!(promoting.phase(), Phase::Promoting);
    assert!(promoting.plans(HookKind::ConfirmPromotion));
    assert!(
        promoting.state.match_active,
        "matching users stay on the canary"
    );
    let finalising = sim.tick();
    assert!(finalising.swapped());
    assert!(!finalising.state.match_active);
    assert_eq!(sim.tick().phase(), Phase::Succeeded);
}

/// Flagger's `TestScheduler_DeploymentBlueGreenAnalysisPhases` (iterations 1).
#[test]
fn blue_green_phases_follow_flagger() {
    let mut spec = base_spec();
    spec.analysis.iterations = 1;
    let mut sim = Sim::new(spec);
    sim.init();
    let mut seen = vec![(sim.release("v2").phase(), sim.state.canary_weight)];
    seen.extend(sim.ticks(5).iter().map(|r| (r.phase(), r.weight())));
    assert_eq!(
        seen,
        vec![
            (Phase::Progressing, 0),   // detect
            (Phase::Progressing, 0),   // iteration 1/1, no weight shift
            (Phase::Progressing, 100), // all traffic to the canary
            (Phase::Promoting, 100),
            (Phase::Finalising, 0),
            (Phase::Succeeded, 0),
        ]
    );
}

#[test]
fn blue_green_shifts_no_weight_during_iterations() {
    let mut spec = with_hooks(base_spec(), &[("approve", HookKind::ConfirmPromotion)]);
    spec.analysis.iterations = 3;
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    for (i, r) in sim.ticks(3).iter().enumerate() {
        assert_eq!((r.weight(), r.state.iterations), (0, i as u32 + 1));
        assert!(r.traffic().is_empty());
        assert!(!r.plans(HookKind::ConfirmPromotion));
    }
    let all = sim.tick();
    assert!(all.plans(HookKind::ConfirmPromotion));
    assert_eq!(all.traffic(), vec![traffic(100, false, None)]);
    let promoting = sim.tick();
    assert!(promoting.plans(HookKind::ConfirmPromotion) && promoting.plans_metrics());
    assert_eq!(promoting.phase(), Phase::Promoting);
}

#[test]
fn blue_green_with_mirror_mirrors_during_iterations() {
    let mut spec = base_spec();
    spec.analysis.iterations = 2;
    spec.analysis.mirror = true;
    spec.analysis.mirror_weight = Some(50);
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    let first = sim.tick();
    assert_eq!(first.traffic(), vec![traffic(0, false, Some(50))]);
    let second = sim.tick();
    assert!(second.state.mirror && second.traffic().is_empty());
    assert!(second.plans_metrics(), "mirrored traffic is analysed");
    let all = sim.tick();
    assert_eq!(all.traffic(), vec![traffic(100, false, None)]);
    assert!(all.message().contains("stop traffic mirroring"));
    assert_eq!(sim.tick().phase(), Phase::Promoting);
}

#[test]
fn a_failing_dry_run_metric_is_recorded_but_never_a_failed_check() {
    let mut spec = base_spec();
    spec.analysis.metrics[0].dry_run = true;
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    assert_eq!(sim.tick().weight(), 10);
    sim.fail_metric("request-success-rate", true);
    let r = sim.tick();
    assert_eq!(r.state.failed_checks, 0, "{:?}", r.state);
    assert_eq!(r.weight(), 20, "the run steps on");
    let recorded = &r.state.last_checks.metrics;
    assert!(recorded
        .iter()
        .any(|m| m.name == "request-success-rate" && !m.passed));
}

#[test]
fn failing_metrics_roll_back_after_threshold_failed_ticks() {
    let mut spec = with_hooks(base_spec(), &[("rb", HookKind::Rollback)]);
    spec.analysis.threshold = 3;
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    assert_eq!(sim.tick().weight(), 10);
    sim.fail_metric("request-success-rate", true);
    for fc in 1..=3u32 {
        let r = sim.tick();
        assert_eq!(r.phase(), Phase::Progressing);
        assert_eq!(r.state.failed_checks, fc);
        assert_eq!(r.weight(), 10, "a failing tick does not step");
        assert!(r.traffic().is_empty());
        assert_eq!(r.events(), vec![EventReason::CheckFailed]);
        assert!(r
            .message()
            .contains("request-success-rate 95.00 (95.00 < 99)"));
        assert!(r.message().contains(&format!("failed checks {fc}/3")));
    }
    // The rollback tick is due at once and only asks the rollback hooks.
    let at = sim.now;
    let r = sim.tick_now();
    assert_eq!(r.now, at);
    assert_eq!(r.planned(), vec![HookKind::Rollback]);
    assert_eq!(r.phase(), Phase::Failed);
    assert_eq!(
        r.cmds[0],
        Command::SetTraffic {
            canary_weight: 0,
            match_active: false,
            mirror_weight: None,
            affinity_active: false
        }
    );
    assert!(r.has_event(EventReason::RolledBack));
    assert!(r.message().contains("failed checks threshold reached 3/3"));
    assert_eq!(r.post_rollout(), Some(Phase::Failed));
    // Failed stays put until a new revision.
    for r in sim.ticks(2) {
        assert_eq!(r.phase(), Phase::Failed);
        assert!(r.cmds.is_empty());
    }
    sim.fail_metric("request-success-rate", false);
    assert_eq!(sim.release("v3").phase(), Phase::Progressing);
}

#[test]
fn no_traffic_is_a_failed_check() {
    let mut sim = Sim::new(base_spec());
    sim.init();
    sim.release("v2");
    sim.tick();
    sim.w.no_traffic = true;
    let r = sim.tick();
    assert_eq!((r.state.failed_checks, r.weight()), (1, 10));
    assert!(r.message().contains("no value (not enough traffic)"));
}

#[test]
fn unreported_results_count_as_failures_and_rollback_hooks_as_silent() {
    let spec = with_hooks(
        base_spec(),
        &[("rb", HookKind::Rollback), ("load", HookKind::Rollout)],
    );
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    sim.tick();
    let p = plan(&sim.spec, &sim.state, sim.now + INTERVAL);
    sim.now += INTERVAL;
    // The driver reports nothing at all.
    let r = sim.apply(p, Observation::default());
    assert_eq!(r.phase(), Phase::Progressing);
    assert_eq!(r.state.failed_checks, 1);
    assert!(r
        .message()
        .contains("rollout webhook load failed (no answer)"));
}

#[test]
fn confirm_rollout_holds_in_waiting_without_failed_checks() {
    let spec = with_hooks(
        base_spec(),
        &[
            ("gate", HookKind::ConfirmRollout),
            ("pre", HookKind::PreRollout),
        ],
    );
    let mut sim = Sim::new(spec);
    sim.init();
    sim.answer("gate", false);
    let r = sim.release("v2");
    assert_eq!(r.phase(), Phase::Waiting);
    assert_eq!(
        r.plan.steps,
        vec![PlanStep::Hook {
            index: 0,
            kind: HookKind::ConfirmRollout,
            phase: Phase::Initialized
        }]
    );
    assert!(r.has_event(EventReason::WaitingApproval));
    assert_eq!(r.state.revision.as_deref(), Some("v2"));
    for r in sim.ticks(3) {
        assert_eq!(r.phase(), Phase::Waiting);
        assert_eq!(r.planned(), vec![HookKind::ConfirmRollout]);
        assert_eq!(r.state.failed_checks, 0);
        assert!(
            r.cmds.is_empty(),
            "one event when entering Waiting, not every tick"
        );
    }
    sim.answer("gate", true);
    let r = sim.tick();
    assert_eq!((r.phase(), r.weight()), (Phase::Progressing, 0));
    assert!(r.has_event(EventReason::Started));
    let r = sim.tick();
    assert_eq!(r.planned(), vec![HookKind::PreRollout]);
    assert_eq!(r.weight(), 10);
}

#[test]
fn pre_rollout_failure_counts_a_failed_check_and_is_retried() {
    let spec = with_hooks(base_spec(), &[("pre", HookKind::PreRollout)]);
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    sim.answer("pre", false);
    for fc in 1..=2 {
        let r = sim.tick();
        assert_eq!(r.planned(), vec![HookKind::PreRollout]);
        assert_eq!((r.state.failed_checks, r.weight()), (fc, 0));
        assert!(r
            .message()
            .contains("pre-rollout webhook pre failed (403 Forbidden)"));
    }
    sim.answer("pre", true);
    let r = sim.tick();
    assert_eq!((r.state.failed_checks, r.weight()), (2, 10));
}

#[test]
fn rollout_hook_failure_counts_a_failed_check() {
    let spec = with_hooks(base_spec(), &[("load", HookKind::Rollout)]);
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    sim.tick();
    sim.answer("load", false);
    let r = sim.tick();
    assert_eq!((r.state.failed_checks, r.weight()), (1, 10));
    assert!(
        r.obs.metrics.is_empty(),
        "the driver stopped before the metrics"
    );
}

#[test]
fn confirm_traffic_increase_holds_the_weight_without_failing() {
    let spec = with_hooks(base_spec(), &[("more", HookKind::ConfirmTrafficIncrease)]);
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    assert_eq!(sim.tick().weight(), 10);
    sim.answer("more", false);
    for r in sim.ticks(3) {
        assert_eq!(
            (r.phase(), r.weight(), r.state.failed_checks),
            (Phase::Progressing, 10, 0)
        );
        assert_eq!(r.events(), vec![EventReason::TrafficIncreaseHeld]);
    }
    sim.answer("more", true);
    assert_eq!(sim.tick().weight(), 20);
}

/// The issue's "403 holds until 200": confirm-promotion failing holds in WaitingPromotion,
/// the analysis goes on (failed checks still count), a 200 promotes.
#[test]
fn confirm_promotion_holds_in_waiting_promotion_until_it_passes() {
    let mut spec = with_hooks(
        base_spec(),
        &[
            ("more", HookKind::ConfirmTrafficIncrease),
            ("approve", HookKind::ConfirmPromotion),
        ],
    );
    spec.analysis.step_weight = 50;
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    assert_eq!(sim.tick().weight(), 50);
    sim.answer("approve", false);
    let r = sim.tick();
    assert_eq!(r.phase(), Phase::WaitingPromotion);
    // Flagger asks confirm-traffic-increase even at the max weight, while Progressing.
    assert_eq!(
        r.planned(),
        vec![
            HookKind::Event,
            HookKind::ConfirmTrafficIncrease,
            HookKind::ConfirmPromotion
        ]
    );
    assert_eq!(r.events(), vec![EventReason::WaitingPromotion]);
    let r = sim.tick();
    assert_eq!(r.phase(), Phase::WaitingPromotion);
    assert_eq!(
        r.planned(),
        vec![HookKind::Event, HookKind::ConfirmPromotion]
    );
    assert!(r.cmds.is_empty());
    sim.fail_metric("request-duration", true);
    let r = sim.tick();
    assert_eq!(
        (r.phase(), r.state.failed_checks),
        (Phase::WaitingPromotion, 1)
    );
    assert!(r
        .message()
        .contains("request-duration 600.00 (600.00 > 500)"));
    sim.fail_metric("request-duration", false);
    sim.answer("approve", true);
    let r = sim.tick();
    assert_eq!((r.phase(), r.weight()), (Phase::Promoting, 50));
}

#[test]
fn a_passing_rollback_hook_rolls_back() {
    for waiting_promotion in [false, true] {
        let spec = with_hooks(
            base_spec(),
            &[
                ("rb", HookKind::Rollback),
                ("approve", HookKind::ConfirmPromotion),
            ],
        );
        let mut sim = Sim::new(spec);
        sim.init();
        sim.release("v2");
        sim.ticks(2);
        if waiting_promotion {
            sim.answer("approve", false);
            sim.ticks(4);
            assert_eq!(sim.state.phase, Phase::WaitingPromotion);
        }
        sim.answer("rb", true);
        let r = sim.tick();
        assert_eq!(
            r.plan.steps[0],
            PlanStep::Hook {
                index: 0,
                kind: HookKind::Rollback,
                phase: if waiting_promotion {
                    Phase::WaitingPromotion
                } else {
                    Phase::Progressing
                },
            }
        );
        assert_eq!(r.phase(), Phase::Failed);
        assert_eq!(r.traffic(), vec![traffic(0, false, None)]);
        assert!(r
            .message()
            .contains("rollback webhook rb signalled a rollback"));
        assert_eq!(r.post_rollout(), Some(Phase::Failed));
        assert_eq!(
            r.obs.hooks.len(),
            1,
            "the driver stops at the passing rollback hook"
        );
    }
}

#[test]
fn skip_analysis_promotes_after_the_detection_tick() {
    let mut spec = with_hooks(base_spec(), &[("gate", HookKind::ConfirmRollout)]);
    spec.skip_analysis = true;
    let mut sim = Sim::new(spec);
    sim.init();
    assert_eq!(sim.release("v2").phase(), Phase::Progressing);
    let r = sim.tick();
    assert!(r.plan.steps.is_empty());
    assert_eq!(r.phase(), Phase::Succeeded);
    assert!(r.swapped());
    // Flagger's shouldSkipAnalysis calls post-rollout with Succeeded (fluxcd/flagger#1195).
    assert_eq!(r.post_rollout(), Some(Phase::Succeeded));
    assert_eq!(r.state.promoted_revision.as_deref(), Some("v2"));
}

#[test]
fn skip_analysis_mid_run_cancels_and_promotes() {
    let mut sim = Sim::new(base_spec());
    sim.init();
    sim.release("v2");
    assert_eq!(sim.ticks(3)[2].weight(), 30);
    sim.spec.skip_analysis = true;
    let r = sim.tick();
    assert_eq!((r.phase(), r.weight()), (Phase::Succeeded, 0));
    assert!(r.swapped());
    assert_eq!(r.post_rollout(), Some(Phase::Succeeded));
}

#[test]
fn skip_analysis_with_webhook_promotion_calls_the_promote_hooks() {
    let mut spec = with_hooks(base_spec(), &[("redeploy", HookKind::Promote)]);
    spec.promotion = Promotion::Webhook;
    spec.skip_analysis = true;
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    sim.answer("redeploy", false);
    let r = sim.tick();
    assert_eq!(r.planned(), vec![HookKind::Promote]);
    assert_eq!(r.phase(), Phase::Progressing);
    assert!(r.has_event(EventReason::PromoteHookFailed));
    assert_eq!(r.post_rollout(), None, "the run has not ended yet");
    sim.answer("redeploy", true);
    let r = sim.tick();
    assert_eq!(r.phase(), Phase::Succeeded);
    assert_eq!(r.traffic(), vec![traffic(0, false, None)]);
    assert_eq!(r.post_rollout(), Some(Phase::Succeeded));
}

/// Flagger's `lastAppliedSpec` is synced when a run starts, so `confirm-rollout` is asked
/// with the checksum of the previous revision; after a Failed run `shouldAdvance`
/// re-syncs it first, so there the new revision's checksum is sent.
#[test]
fn confirm_rollout_is_asked_with_the_last_applied_revision() {
    let spec = with_hooks(
        base_spec(),
        &[
            ("gate", HookKind::ConfirmRollout),
            ("rb", HookKind::Rollback),
        ],
    );
    let mut sim = Sim::new(spec);
    sim.init();
    assert_eq!(sim.state.applied_revision.as_deref(), Some("v1"));
    let r = sim.release("v2");
    assert!(r.plans(HookKind::ConfirmRollout));
    let asked_with = |sim: &Sim| sim.log[sim.log.len() - 2].state.applied_revision.clone();
    assert_eq!(asked_with(&sim).as_deref(), Some("v1"), "the baseline's");
    assert_eq!(
        r.state.applied_revision.as_deref(),
        Some("v2"),
        "run started"
    );
    while sim.tick().phase() != Phase::Succeeded {}
    assert_eq!(sim.state.applied_revision.as_deref(), Some("v2"));

    // Succeeded → a held v3: every confirm-rollout tick is asked with v2's checksum.
    sim.answer("gate", false);
    let r = sim.release("v3");
    assert_eq!(r.phase(), Phase::Waiting);
    assert_eq!(asked_with(&sim).as_deref(), Some("v2"));
    let r = sim.tick();
    assert!(r.plans(HookKind::ConfirmRollout));
    assert_eq!(asked_with(&sim).as_deref(), Some("v2"));
    sim.answer("gate", true);
    let r = sim.tick();
    assert_eq!(r.phase(), Phase::Progressing);
    assert_eq!(r.state.applied_revision.as_deref(), Some("v3"));
    sim.tick();
    sim.answer("rb", true);
    assert_eq!(sim.tick().phase(), Phase::Failed);
    sim.answer("rb", false);
    assert_eq!(sim.state.applied_revision.as_deref(), Some("v3"));

    // Failed → v4: re-synced before its confirm-rollout tick.
    sim.answer("gate", false);
    let r = sim.release("v4");
    assert_eq!(r.phase(), Phase::Waiting);
    assert_eq!(asked_with(&sim).as_deref(), Some("v4"));
    let r = sim.tick();
    assert!(r.plans(HookKind::ConfirmRollout));
    assert_eq!(asked_with(&sim).as_deref(), Some("v4"));
}

/// Flagger's rollback syncs the status to {Failed, weight 0, iterations 0, failedChecks
/// 0}; the rollback event keeps the count that caused it.
#[test]
fn a_rollback_resets_the_status_and_keeps_the_count_for_its_event() {
    for iterations in [0, 3] {
        let mut spec = base_spec();
        spec.analysis.threshold = 2;
        spec.analysis.iterations = iterations;
        spec.analysis.has_match = iterations > 0;
        let mut sim = Sim::new(spec);
        sim.init();
        sim.release("v2");
        sim.ticks(2);
        sim.fail_metric("request-success-rate", true);
        sim.ticks(2);
        assert_eq!(sim.state.failed_checks, 2);
        let r = sim.tick_now();
        assert_eq!(r.phase(), Phase::Failed);
        assert!(r.message().contains("failed checks threshold reached 2/2"));
        assert_eq!(
            (r.weight(), r.state.iterations, r.state.failed_checks),
            (0, 0, 0),
            "iterations {iterations}"
        );
        assert_eq!(r.state.last_run_failed_checks, 2);
    }
}

/// Flagger's `setStatusPhase` zeroes the iterations outside Progressing, Waiting and
/// Promoting: a finished A/B or blue/green run reports 0, not N or N+1.
#[test]
fn a_finished_iteration_run_reports_no_iterations() {
    for (has_match, mirror) in [(true, false), (false, false), (false, true)] {
        let mut spec = base_spec();
        spec.analysis.iterations = 2;
        spec.analysis.has_match = has_match;
        spec.analysis.mirror = mirror;
        let mut sim = Sim::new(spec);
        sim.init();
        sim.release("v2");
        let mut phases = Vec::new();
        loop {
            let r = sim.tick();
            phases.push((r.phase(), r.state.iterations));
            if r.phase() == Phase::Succeeded {
                break;
            }
        }
        let case = format!("match {has_match} mirror {mirror}: {phases:?}");
        let n = if has_match { 2 } else { 3 };
        assert!(phases.contains(&(Phase::Promoting, n)), "{case}");
        assert!(phases.contains(&(Phase::Finalising, 0)), "{case}");
        assert_eq!(phases.last(), Some(&(Phase::Succeeded, 0)), "{case}");
    }
}

#[test]
fn pause_freezes_everything_and_resume_continues() {
    let mut sim = Sim::new(base_spec());
    sim.init();
    sim.release("v2");
    assert_eq!(sim.ticks(2)[1].weight(), 20);
    let r = sim.cmd(ManualCommand::Pause);
    assert!(r.state.paused && r.has_event(EventReason::Paused));
    sim.fail_metric("request-success-rate", true);
    for later in [1, INTERVAL, 10 * INTERVAL] {
        let p = plan(&sim.spec, &sim.state, sim.now + later);
        assert_eq!((p.due, p.next_due_ms), (false, None));
        let (s, cmds) = step(
            &sim.spec,
            &sim.state,
            &Observation::default(),
            sim.now + later,
        );
        assert_eq!(s, sim.state);
        assert!(cmds.is_empty());
    }
    sim.now += 10 * INTERVAL;
    assert!(command_refusal(&sim.state, &ManualCommand::Pause).is_some());
    sim.fail_metric("request-success-rate", false);
    let r = sim.cmd(ManualCommand::Resume);
    assert!(!r.state.paused && r.has_event(EventReason::Resumed));
    let r = sim.tick_now();
    assert_eq!((r.weight(), r.state.failed_checks), (30, 0));
}

#[test]
fn manual_abort_rolls_back() {
    let mut sim = Sim::new(base_spec());
    sim.init();
    sim.release("v2");
    sim.ticks(2);
    let r = sim.cmd(ManualCommand::Abort);
    assert_eq!(r.phase(), Phase::Failed);
    assert_eq!(r.traffic(), vec![traffic(0, false, None)]);
    assert!(r.message().contains("aborted by an operator"));
    assert_eq!(r.post_rollout(), Some(Phase::Failed));
    assert!(command_refusal(&sim.state, &ManualCommand::Abort).is_some());
}

#[test]
fn manual_promote_skips_the_remaining_analysis() {
    let spec = with_hooks(base_spec(), &[("approve", HookKind::ConfirmPromotion)]);
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    sim.ticks(2);
    let r = sim.cmd(ManualCommand::Promote);
    assert_eq!((r.phase(), r.weight()), (Phase::Promoting, 20));
    let r = sim.tick_now();
    assert!(
        r.plan.steps.is_empty(),
        "no confirm-promotion: the operator approved"
    );
    assert_eq!(r.phase(), Phase::Finalising);
    assert!(r.swapped());
    assert!(command_refusal(&sim.state, &ManualCommand::Promote).is_some());
}

#[test]
fn manual_start_begins_a_run_and_restarts_one_in_progress() {
    let spec = with_hooks(base_spec(), &[("gate", HookKind::ConfirmRollout)]);
    let mut sim = Sim::new(spec);
    sim.init();
    let r = sim.cmd(ManualCommand::Start {
        revision: "build-7".to_string(),
    });
    assert_eq!(r.state.pending_revision.as_deref(), Some("build-7"));
    let r = sim.tick_now();
    assert_eq!(r.planned(), vec![HookKind::ConfirmRollout]);
    assert_eq!(r.phase(), Phase::Progressing);
    assert_eq!(r.state.revision.as_deref(), Some("build-7"));
    sim.ticks(2);
    let r = sim.cmd(ManualCommand::Start {
        revision: "build-8".to_string(),
    });
    assert_eq!((r.phase(), r.weight()), (Phase::Progressing, 0));
    assert_eq!(r.state.revision.as_deref(), Some("build-8"));
    assert!(r.has_event(EventReason::Restarted));
}

/// Flagger's `TestScheduler_DeploymentNewRevisionReset`, and the issue's rule: a restart
/// goes back to pre-rollout, not to confirm-rollout.
#[test]
fn a_new_revision_mid_run_restarts_at_weight_zero() {
    let spec = with_hooks(
        base_spec(),
        &[
            ("gate", HookKind::ConfirmRollout),
            ("pre", HookKind::PreRollout),
        ],
    );
    for phase in [
        Phase::Progressing,
        Phase::WaitingPromotion,
        Phase::Promoting,
    ] {
        let mut spec = spec.clone();
        spec.analysis
            .webhooks
            .push(hook("approve", HookKind::ConfirmPromotion));
        let mut sim = Sim::new(spec);
        sim.init();
        sim.release("v2");
        sim.tick();
        sim.fail_metric("request-duration", true);
        sim.answer("approve", phase != Phase::WaitingPromotion);
        assert_eq!(sim.tick().state.failed_checks, 1);
        sim.fail_metric("request-duration", false);
        while sim.state.phase != phase {
            sim.tick();
        }
        assert!(sim.state.failed_checks > 0 || phase == Phase::Promoting);
        sim.w.canary_revision = Some("v3".to_string());
        let r = sim.tick();
        assert_eq!((r.phase(), r.weight()), (Phase::Progressing, 0), "{phase}");
        assert_eq!(r.traffic(), vec![traffic(0, false, None)]);
        assert_eq!((r.state.failed_checks, r.state.iterations), (0, 0));
        assert_eq!(r.state.revision.as_deref(), Some("v3"));
        assert!(r.has_event(EventReason::Restarted));
        let r = sim.tick();
        assert_eq!(r.planned(), vec![HookKind::PreRollout], "{phase}");
        assert_eq!(r.weight(), 10);
    }
}

#[test]
fn a_new_revision_while_waiting_replaces_the_candidate() {
    let spec = with_hooks(base_spec(), &[("gate", HookKind::ConfirmRollout)]);
    let mut sim = Sim::new(spec);
    sim.init();
    sim.answer("gate", false);
    sim.release("v2");
    sim.w.canary_revision = Some("v3".to_string());
    let r = sim.tick();
    assert_eq!(r.phase(), Phase::Waiting);
    assert_eq!(r.state.revision.as_deref(), Some("v3"));
    sim.answer("gate", true);
    assert_eq!(sim.tick().state.revision.as_deref(), Some("v3"));
}

#[test]
fn webhook_promotion_waits_for_the_primary_revision_and_readiness() {
    let mut spec = with_hooks(base_spec(), &[("redeploy", HookKind::Promote)]);
    spec.promotion = Promotion::Webhook;
    spec.analysis.step_weight = 50;
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    sim.w.promote_redeploys = false;
    sim.ticks(2);
    assert_eq!(sim.state.phase, Phase::Promoting);
    let r = sim.tick();
    assert!(r.state.promote_hooks_done);
    assert!(r.has_event(EventReason::WaitingPrimary));
    assert!(r
        .message()
        .contains("primary reports revision v1 and is ready"));
    sim.w.primary_revision = Some("v2".to_string());
    sim.w.primary_ready = false;
    let r = sim.tick();
    assert!(
        r.plan.steps.is_empty(),
        "promote hooks are not called again"
    );
    assert!(r
        .message()
        .contains("primary reports revision v2 and is not ready"));
    assert_eq!(r.weight(), 50);
    sim.w.primary_ready = true;
    let r = sim.tick();
    assert_eq!((r.phase(), r.weight()), (Phase::Finalising, 0));
}

#[test]
fn webhook_promotion_fails_after_the_progress_deadline_leaving_traffic_on_the_canary() {
    for hook_fails in [false, true] {
        let mut spec = with_hooks(base_spec(), &[("redeploy", HookKind::Promote)]);
        spec.promotion = Promotion::Webhook;
        spec.analysis.step_weight = 50;
        spec.progress_deadline_ms = 3 * INTERVAL;
        let mut sim = Sim::new(spec);
        sim.init();
        sim.release("v2");
        sim.w.promote_redeploys = false;
        sim.answer("redeploy", !hook_fails);
        sim.ticks(2);
        let since = sim
            .state
            .promotion_wait_since_ms
            .expect("promotion started");
        loop {
            let r = sim.tick();
            if r.phase() == Phase::Failed {
                assert_eq!(r.now - since, 4 * INTERVAL, "fails once past the deadline");
                assert!(r.traffic().is_empty(), "traffic left on the canary");
                assert_eq!(r.weight(), 50);
                assert!(r.has_event(EventReason::PromotionFailed));
                assert_eq!(r.post_rollout(), Some(Phase::Failed));
                let why = if hook_fails {
                    "promote webhook redeploy failed (403 Forbidden)"
                } else {
                    "waiting for the primary to run v2 and be ready"
                };
                assert!(r.message().contains(why), "{}", r.message());
                break;
            }
            assert_eq!(r.phase(), Phase::Promoting);
            assert_eq!(
                r.plans(HookKind::Promote),
                hook_fails || r.now == since + INTERVAL
            );
        }
        // The next run starts by routing everything back to the primary.
        let r = sim.release("v3");
        assert_eq!(r.traffic(), vec![traffic(0, false, None)]);
    }
}

#[test]
fn after_a_swap_the_old_primary_in_the_idle_slot_is_not_a_new_release() {
    for primary_known in [true, false] {
        let mut sim = Sim::new(base_spec());
        sim.init();
        sim.release("v2");
        if !primary_known {
            sim.w.primary_revision = None;
        }
        while sim.state.phase != Phase::Finalising {
            sim.tick();
        }
        // The swap put v1 (the old primary) in the canary slot.
        assert_eq!(sim.w.primary_revision.as_deref(), Some("v2"));
        sim.w.canary_revision = Some("v1".to_string());
        assert_eq!(sim.tick().phase(), Phase::Succeeded);
        for r in sim.ticks(3) {
            assert_eq!(r.phase(), Phase::Succeeded);
            assert!(r.state.pending_revision.is_none());
        }
        assert_eq!(sim.release("v3").phase(), Phase::Progressing);
    }
}

#[test]
fn session_affinity_is_active_while_the_canary_has_weight() {
    let mut spec = base_spec();
    spec.analysis.session_affinity = true;
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    let r = sim.tick();
    assert_eq!(
        r.traffic(),
        vec![Command::SetTraffic {
            canary_weight: 10,
            match_active: false,
            mirror_weight: None,
            affinity_active: true
        }]
    );
    sim.ticks(1);
    let r = sim.cmd(ManualCommand::Abort);
    assert_eq!(r.traffic(), vec![traffic(0, false, None)]);
}

/// Drives a long scenario touching most paths; returns the log.
fn scenario(stop_at_halt: bool) -> Sim {
    let spec = with_hooks(
        base_spec(),
        &[
            ("gate", HookKind::ConfirmRollout),
            ("pre", HookKind::PreRollout),
            ("load", HookKind::Rollout),
            ("more", HookKind::ConfirmTrafficIncrease),
            ("approve", HookKind::ConfirmPromotion),
            ("rb", HookKind::Rollback),
        ],
    );
    let mut sim = Sim::new(spec);
    sim.w.stop_at_halt = stop_at_halt;
    sim.init();
    sim.answer("gate", false);
    sim.release("v2");
    sim.tick();
    sim.answer("gate", true);
    sim.answer("pre", false);
    sim.ticks(2);
    sim.answer("pre", true);
    sim.ticks(2);
    sim.answer("more", false);
    sim.ticks(1);
    sim.answer("more", true);
    sim.fail_metric("request-success-rate", true);
    sim.ticks(1);
    sim.fail_metric("request-success-rate", false);
    sim.answer("approve", false);
    sim.ticks(5);
    sim.answer("approve", true);
    sim.ticks(3);
    sim.release("v3");
    sim.ticks(2);
    sim.answer("rb", true);
    sim.ticks(2);
    sim
}

#[test]
fn a_driver_that_calls_every_hook_gets_the_same_decisions() {
    let stopping = scenario(true);
    let calling_all = scenario(false);
    assert_eq!(stopping.log.len(), calling_all.log.len());
    for (a, b) in stopping.log.iter().zip(&calling_all.log) {
        // Only the recorded answers differ: the second driver reports more of them.
        let strip = |r: &Rec| CanaryState {
            last_checks: LastChecks::default(),
            ..r.state.clone()
        };
        assert_eq!((strip(a), &a.cmds), (strip(b), &b.cmds));
    }
    let phases: BTreeSet<Phase> = stopping.log.iter().map(|r| r.phase()).collect();
    assert!(
        phases.len() >= 8,
        "the scenario covers most phases: {phases:?}"
    );
}

#[test]
fn replaying_recorded_observations_gives_identical_decisions() {
    let sim = scenario(true);
    let mut state = CanaryState::new();
    for rec in &sim.log {
        let (next, cmds) = step(&sim.spec, &state, &rec.obs, rec.now);
        assert_eq!(next, rec.state);
        assert_eq!(cmds, rec.cmds);
        // Through a JSON round trip, as a recording on disk would be.
        let obs: Observation =
            serde_json::from_str(&serde_json::to_string(&rec.obs).unwrap()).unwrap();
        assert_eq!(step(&sim.spec, &state, &obs, rec.now), (next.clone(), cmds));
        state = next;
    }
}

#[test]
fn a_persisted_state_continues_identically_after_a_restart() {
    let spec = with_hooks(
        base_spec(),
        &[
            ("approve", HookKind::ConfirmPromotion),
            ("load", HookKind::Rollout),
        ],
    );
    let mut sim = Sim::new(spec);
    sim.init();
    sim.release("v2");
    sim.ticks(2);
    sim.fail_metric("request-success-rate", true);
    sim.tick();
    sim.fail_metric("request-success-rate", false);

    let json = serde_json::to_string(&sim.state).unwrap();
    let restored: CanaryState = serde_json::from_str(&json).unwrap();
    assert_eq!(restored, sim.state);
    let mut twin = Sim::new(sim.spec.clone());
    twin.state = restored;
    twin.now = sim.now;
    twin.w = sim.w.clone();
    for _ in 0..8 {
        let (a, b) = (sim.tick(), twin.tick());
        assert_eq!((a.now, &a.state, &a.cmds), (b.now, &b.state, &b.cmds));
    }
    assert_eq!(sim.state.phase, Phase::Succeeded);
}

#[test]
fn state_json_uses_flagger_names() {
    let mut state = CanaryState::new();
    state.phase = Phase::WaitingPromotion;
    let v = serde_json::to_value(&state).unwrap();
    assert_eq!(v["phase"], "WaitingPromotion");
    assert!(v.get("failedChecks").is_some() && v.get("canaryWeight").is_some());
    // Missing fields default, so a state written by an older weir still loads.
    let old: CanaryState = serde_json::from_str(r#"{"phase":"Progressing"}"#).unwrap();
    assert_eq!(old.phase, Phase::Progressing);
    let kinds = [
        (HookKind::ConfirmRollout, "confirm-rollout"),
        (HookKind::PreRollout, "pre-rollout"),
        (HookKind::Rollout, "rollout"),
        (HookKind::ConfirmTrafficIncrease, "confirm-traffic-increase"),
        (HookKind::ConfirmPromotion, "confirm-promotion"),
        (HookKind::PostRollout, "post-rollout"),
        (HookKind::Rollback, "rollback"),
        (HookKind::Event, "event"),
        (HookKind::Promote, "promote"),
    ];
    for (kind, name) in kinds {
        assert_eq!(serde_json::to_value(kind).unwrap(), name);
    }
    let cmd = serde_json::to_value(traffic(10, false, Some(5))).unwrap();
    assert_eq!(cmd["type"], "setTraffic");
    assert_eq!(cmd["canaryWeight"], 10);
    assert_eq!(cmd["mirrorWeight"], 5);
    let hook = serde_json::to_value(hook("a", HookKind::PreRollout)).unwrap();
    assert_eq!(hook["type"], "pre-rollout");
    assert_eq!(hook["timeoutMs"], 10_000);
}

#[test]
fn plan_is_due_once_per_interval() {
    let spec = base_spec();
    let mut state = CanaryState::new();
    assert!(plan(&spec, &state, 5).due, "a new canary ticks at once");
    state.last_tick_ms = Some(START);
    let table = [
        (START + INTERVAL - 1, false),
        (START + INTERVAL, true),
        (START + 5 * INTERVAL, true),
        (START - 1, true), // the clock went back: do not stall
    ];
    for (now, due) in table {
        let p = plan(&spec, &state, now);
        assert_eq!(p.due, due, "at {now}");
        assert_eq!(p.next_due_ms, (!due).then_some(START + INTERVAL));
        // Not due: step changes nothing.
        if !due {
            assert_eq!(
                step(&spec, &state, &Observation::default(), now),
                (state.clone(), vec![])
            );
        }
    }
}

#[test]
fn next_step_weight_and_max_weight_follow_flagger() {
    let mut a = AnalysisSpec {
        step_weight: 20,
        max_weight: 50,
        ..AnalysisSpec::default()
    };
    assert_eq!((a.next_step_weight(40), a.max_weight()), (20, 50));
    a.max_weight = 0;
    assert_eq!(a.max_weight(), 100);
    a.max_weight = 150;
    assert_eq!(a.max_weight(), 100);
    let mut s = AnalysisSpec {
        step_weights: vec![1, 2, 10, 80],
        ..AnalysisSpec::default()
    };
    let table = [
        (0, 1),
        (1, 1),
        (2, 8),
        (10, 70),
        (80, 20),
        (100, 1),
        (5, 95),
    ];
    for (from, step) in table {
        assert_eq!(s.next_step_weight(from), step, "from {from}");
    }
    assert_eq!(s.max_weight(), 80);
    s.step_weights = vec![1, 2, 10, 200];
    assert_eq!((s.next_step_weight(10), s.max_weight()), (90, 100));
    assert_eq!(AnalysisSpec::default().next_step_weight(0), 0);
    assert_eq!(AnalysisSpec::default().effective_threshold(), 1);
}

#[test]
fn the_weight_plan_is_the_weights_the_machine_steps_through() {
    let a = AnalysisSpec {
        step_weight: 20,
        max_weight: 50,
        ..AnalysisSpec::default()
    };
    // 20, 40, then 60: the last step overshoots the max, as Flagger's does.
    assert_eq!(a.weight_plan(), vec![20, 40, 60]);
    let a = AnalysisSpec {
        step_weights: vec![1, 2, 10, 80],
        ..AnalysisSpec::default()
    };
    assert_eq!(a.weight_plan(), vec![1, 2, 10, 80]);
    let a = AnalysisSpec {
        step_weight: 10,
        ..AnalysisSpec::default()
    };
    assert_eq!(a.weight_plan().len(), 10);
    assert_eq!(a.weight_plan().last(), Some(&100));
    let ab = AnalysisSpec {
        step_weight: 10,
        iterations: 3,
        ..AnalysisSpec::default()
    };
    assert!(
        ab.weight_plan().is_empty(),
        "A/B and blue/green plan iterations"
    );
    assert!(AnalysisSpec::default().weight_plan().is_empty());
}

#[test]
fn metric_ranges_are_judged_like_flagger() {
    let rate = metric("request-success-rate", Some(99.0), None);
    let duration = metric("request-duration", None, Some(500.0));
    let both = metric("x", Some(1.0), Some(2.0));
    let table: [(&MetricSpec, Option<f64>, Result<(), &str>); 8] = [
        (&rate, Some(99.0), Ok(())),
        (&rate, Some(95.0), Err("95.00 < 99")),
        (&rate, None, Err("no value")),
        (&rate, Some(f64::NAN), Err("value NaN is not a number")),
        (&duration, Some(500.0), Ok(())),
        (&duration, Some(501.5), Err("501.50 > 500")),
        (&both, Some(1.5), Ok(())),
        (&both, Some(0.5), Err("0.50 < 1")),
    ];
    for (m, value, want) in table {
        assert_eq!(
            m.evaluate(value),
            want.map_err(str::to_string),
            "{} {value:?}",
            m.name
        );
    }
    assert!(HookKind::Rollback.halts(true) && !HookKind::Rollback.halts(false));
    assert!(HookKind::ConfirmPromotion.halts(false) && !HookKind::Rollout.halts(true));
}

/// Random specs, answers, commands and clocks: the machine never panics, keeps weights in
/// range and keeps its invariants (events on transitions, traffic commands match state).
#[test]
fn random_inputs_never_break_the_machine() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_f00d);
    let kinds = [
        HookKind::ConfirmRollout,
        HookKind::PreRollout,
        HookKind::Rollout,
        HookKind::ConfirmTrafficIncrease,
        HookKind::ConfirmPromotion,
        HookKind::PostRollout,
        HookKind::Rollback,
        HookKind::Event,
        HookKind::Promote,
    ];
    for _ in 0..200 {
        let mut spec = base_spec();
        let a = &mut spec.analysis;
        a.threshold = rng.random_range(0..4);
        a.step_weight = rng.random_range(0..120);
        a.max_weight = rng.random_range(0..=255);
        if rng.random_bool(0.3) {
            a.step_weights = (0..rng.random_range(0..5)).map(|_| rng.random()).collect();
        }
        a.step_weight_promotion = rng.random_range(0..120);
        a.iterations = rng.random_range(0..3);
        a.has_match = rng.random_bool(0.5);
        a.mirror = rng.random_bool(0.5);
        a.mirror_weight = rng.random_bool(0.5).then(|| rng.random());
        a.session_affinity = rng.random_bool(0.5);
        a.interval_ms = rng.random_range(0..3) * 1000;
        a.webhooks = (0..rng.random_range(0..6))
            .map(|i| hook(&format!("h{i}"), kinds[rng.random_range(0..kinds.len())]))
            .collect();
        spec.promotion = if rng.random_bool(0.5) {
            Promotion::Swap
        } else {
            Promotion::Webhook
        };
        spec.skip_analysis = rng.random_bool(0.1);
        spec.progress_deadline_ms = rng.random_range(0..5000);

        let mut state = CanaryState::new();
        let mut now: u64 = rng.random_range(0..1_000_000);
        let revisions = ["v1", "v2", "v3"];
        for _ in 0..150 {
            now = if rng.random_bool(0.05) {
                now.saturating_sub(rng.random_range(0..10_000))
            } else {
                now.saturating_add(rng.random_range(0..3000))
            };
            let p = plan(&spec, &state, now);
            let mut obs = Observation {
                canary_revision: rng
                    .random_bool(0.9)
                    .then(|| revisions[rng.random_range(0..3)].to_string()),
                primary_revision: rng
                    .random_bool(0.8)
                    .then(|| revisions[rng.random_range(0..3)].to_string()),
                primary_ready: rng.random_bool(0.7),
                ..Observation::default()
            };
            for s in &p.steps {
                match s {
                    PlanStep::Hook { index, kind, .. } => obs.hooks.push(HookResult {
                        index: *index,
                        name: spec.analysis.webhooks[*index].name.clone(),
                        kind: *kind,
                        passed: rng.random_bool(if *kind == HookKind::Rollback {
                            0.05
                        } else {
                            0.8
                        }),
                        reason: String::new(),
                    }),
                    PlanStep::Metrics => {
                        for m in &spec.analysis.metrics {
                            let value = rng.random_bool(0.9).then(|| rng.random_range(0.0..1000.0));
                            obs.metrics.push(MetricResult {
                                name: m.name.clone(),
                                value,
                                passed: m.evaluate(value).is_ok() || rng.random_bool(0.5),
                                reason: String::new(),
                                ..MetricResult::default()
                            });
                        }
                    }
                }
            }
            if rng.random_bool(0.05) {
                obs.command = Some(match rng.random_range(0..5) {
                    0 => ManualCommand::Start {
                        revision: revisions[rng.random_range(0..3)].to_string(),
                    },
                    1 => ManualCommand::Promote,
                    2 => ManualCommand::Abort,
                    3 => ManualCommand::Pause,
                    _ => ManualCommand::Resume,
                });
            }
            let (next, cmds) = step(&spec, &state, &obs, now);
            check_invariants(&state, &next, &cmds);
            assert_eq!(step(&spec, &state, &obs, now), (next.clone(), cmds));
            state = next;
        }
    }
}

/// Every phase, paused or not, with and without a pending revision.
fn command_states() -> Vec<CanaryState> {
    let phases = [
        Phase::Initializing,
        Phase::Initialized,
        Phase::Waiting,
        Phase::Progressing,
        Phase::WaitingPromotion,
        Phase::Promoting,
        Phase::Finalising,
        Phase::Succeeded,
        Phase::Failed,
    ];
    let mut out = Vec::new();
    for phase in phases {
        for paused in [false, true] {
            for pending in [None, Some("v3".to_string())] {
                out.push(CanaryState {
                    phase,
                    paused,
                    pending_revision: pending,
                    revision: Some("v2".into()),
                    canary_weight: if phase == Phase::Progressing { 20 } else { 0 },
                    last_tick_ms: Some(0),
                    ..CanaryState::new()
                });
            }
        }
    }
    out
}

fn manual_commands() -> Vec<ManualCommand> {
    vec![
        ManualCommand::Start {
            revision: "v4".into(),
        },
        ManualCommand::Promote,
        ManualCommand::Abort,
        ManualCommand::Pause,
        ManualCommand::Resume,
    ]
}

/// A refused command is the caller's answer, not an event: the step leaves the state as
/// it was and emits nothing, so no watcher hears of it.
#[test]
fn a_refused_command_changes_nothing_and_emits_nothing() {
    let spec = base_spec();
    let refused = [
        (Phase::Progressing, true, ManualCommand::Pause),
        (Phase::Progressing, false, ManualCommand::Resume),
        (Phase::Failed, false, ManualCommand::Abort),
        (Phase::Initialized, false, ManualCommand::Promote),
        (Phase::Succeeded, false, ManualCommand::Promote),
    ];
    for (phase, paused, cmd) in refused {
        let state = command_states()
            .into_iter()
            .find(|s| s.phase == phase && s.paused == paused && s.pending_revision.is_none())
            .expect("state");
        let (next, cmds) = step(&spec, &state, &Observation::command(cmd.clone()), 5);
        assert_eq!(next, state, "{cmd:?} at {phase}");
        assert!(cmds.is_empty(), "{cmd:?} at {phase}: {cmds:?}");
    }
}

/// The acceptance rule, state by state, and `step` agreeing with it everywhere: an
/// accepted command changes the state or emits an event, a refused one neither.
#[test]
fn command_refusal_is_the_rule_step_applies() {
    use ManualCommand::*;
    let refused = |s: &CanaryState, c: &ManualCommand| command_refusal(s, c);
    let at = |phase: Phase, paused: bool, pending: bool| {
        command_states()
            .into_iter()
            .find(|s| {
                s.phase == phase && s.paused == paused && s.pending_revision.is_some() == pending
            })
            .expect("state")
    };
    assert_eq!(
        refused(&at(Phase::Progressing, true, false), &Pause).as_deref(),
        Some("pause refused: already paused (phase Progressing)")
    );
    assert_eq!(
        refused(&at(Phase::Initialized, false, false), &Resume).as_deref(),
        Some("resume refused: not paused (phase Initialized)")
    );
    assert_eq!(
        refused(&at(Phase::Failed, false, false), &Abort).as_deref(),
        Some("abort refused: no run in progress (phase Failed)")
    );
    assert_eq!(
        refused(&at(Phase::Promoting, false, false), &Promote).as_deref(),
        Some("promote refused: no analysis in progress (phase Promoting)")
    );
    assert_eq!(refused(&at(Phase::Succeeded, false, true), &Abort), None);
    assert!(refused(&at(Phase::Finalising, false, true), &Abort).is_some());
    assert_eq!(refused(&at(Phase::Promoting, true, false), &Abort), None);
    assert_eq!(refused(&at(Phase::Waiting, false, false), &Promote), None);
    assert_eq!(refused(&at(Phase::Progressing, false, false), &Pause), None);
    assert_eq!(refused(&at(Phase::Initialized, true, false), &Resume), None);
    let start = Start {
        revision: "v4".into(),
    };
    for s in command_states() {
        assert_eq!(refused(&s, &start), None, "start at {}", s.phase);
    }

    let spec = base_spec();
    for state in command_states() {
        for cmd in manual_commands() {
            let (next, cmds) = step(&spec, &state, &Observation::command(cmd.clone()), 5);
            let what = format!("{cmd:?} at {} (paused {})", state.phase, state.paused);
            match refused(&state, &cmd) {
                Some(_) => {
                    assert_eq!(next, state, "{what}");
                    assert!(cmds.is_empty(), "{what}: {cmds:?}");
                }
                None => assert!(
                    next != state && cmds.iter().any(|c| matches!(c, Command::Event { .. })),
                    "{what} accepted but did nothing: {cmds:?}"
                ),
            }
        }
    }
}
