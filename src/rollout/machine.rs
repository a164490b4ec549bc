//! The rollout state machine: Flagger's scheduler (`advanceCanary`) as two pure functions.
//!
//! The driver runs one tick as *observe → step*:
//!
//! 1. [`plan`]`(spec, state, now)` says whether a tick is due and which webhooks to call,
//!    in Flagger's order, with the phase to put in each payload, and where the metric
//!    checks go ([`PlanStep::Metrics`]).
//! 2. The driver calls them in that order. It may stop at the first step that halts the
//!    tick — a hook for which [`HookKind::halts`] is true (a rollback hook that passes,
//!    any other hook that fails), or a metric step with a failed metric — because the
//!    machine never reads results past that point. Calling everything gives the same
//!    result. A planned hook with no result counts as failed (a rollback hook with no
//!    result signals nothing).
//! 3. [`step`]`(spec, state, observation, now)` — with the **same** `now` as the plan —
//!    returns the next state and the [`Command`]s to apply in order. The driver persists
//!    the state after every step, whatever the commands.
//!
//! A manual command ([`ManualCommand`]) is handled on its own: call `step` with an
//! observation carrying only the command, whenever it arrives (due or not). Results in
//! that observation are ignored. [`command_refusal`] says beforehand whether it applies;
//! a command it refuses leaves the state unchanged and emits nothing (the refusal is the
//! operator's answer, not an event for every watcher).
//!
//! Use the same `spec` for the plan and the step of one tick (the plan's hook indices
//! point into it). A new canary revision is only seen by `step`, so in the tick that
//! restarts a run the hooks the driver already called are ignored. With
//! `promotion: swap`, report `primary_revision` when it is known: at the swap it becomes
//! the baseline revision of the idle slot, so the old primary landing there is not taken
//! for a new release (without it, the next revision reported there is the baseline).
//!
//! This module does no IO, reads no clock and keeps no hidden state: the same inputs give
//! the same outputs, so a recorded sequence of observations replays to the same decisions,
//! and a state saved between two ticks continues identically after a restart.
//!
//! ## Flagger's behaviour, reproduced
//!
//! One due tick, in Flagger's order (`scheduler.go`):
//! - Initializing → Initialized: all traffic to the primary; the canary's current revision
//!   becomes the baseline (it is not a new release).
//! - Idle (Initialized, Succeeded, Failed): a changed canary revision (or `Start`) is
//!   recorded as pending and the next tick is due at once; that tick asks the
//!   `confirm-rollout` hooks: failing → Waiting, passing → Progressing at weight 0. As in
//!   Flagger, the tick that starts a run moves no traffic.
//! - Waiting: `confirm-rollout` again at every tick; passing → Progressing. The rollback
//!   hooks are not asked while waiting (Flagger lists Waiting for them, but its
//!   confirm-rollout check returns first); Abort works.
//! - Progressing / WaitingPromotion: a new revision restarts the run at weight 0 (back to
//!   `pre-rollout`, not `confirm-rollout`); `skipAnalysis` promotes at once; a passing
//!   `rollback` hook rolls back; `failedChecks ≥ threshold` rolls back; then either the
//!   `pre-rollout` hooks (weight 0, no iteration, not mirroring) or the `rollout` hooks
//!   and the metrics — any failure counts one failed check and ends the tick without a
//!   step; then the strategy step:
//!   - canary: `confirm-traffic-increase` (not while mirroring, not in WaitingPromotion;
//!     Flagger asks it even at the max weight), then below the max weight one step
//!     (with `mirror`, the first step only mirrors 100/0 and the next one goes to the
//!     first weight without mirroring; weights overshoot the max like Flagger: max 50,
//!     step 20 gives 20, 40, 60), at the max weight `confirm-promotion` then Promoting;
//!   - A/B: N iterations with the match rules sending matching requests to the canary
//!     (weight 0 + `match_active`), then `confirm-promotion`, then Promoting;
//!   - blue/green: N iterations without weight (mirroring if `mirror`), then
//!     `confirm-promotion`, all traffic to the canary for one more analysed tick, then
//!     `confirm-promotion` again and Promoting.
//!
//!   A failing `confirm-promotion` moves to (or holds in) WaitingPromotion, where the
//!   analysis goes on and failed checks still count.
//! - Finalising → Succeeded, then the `post-rollout` hooks.
//! - Rollback: all traffic to the primary (match and mirror off), Failed with 0 failed
//!   checks and 0 iterations (Flagger's `SyncStatus`; the rollback's event reports the
//!   count through `last_run_failed_checks`), then the `post-rollout` hooks.
//! - Iterations are 0 outside Progressing, Waiting, WaitingPromotion and Promoting
//!   (Flagger's `setStatusPhase`), so a finished A/B or blue/green run reports none.
//! - The payloads' `checksum` is computed over `applied_revision`, Flagger's
//!   `lastAppliedSpec`: synced when a run starts, so `confirm-rollout` is asked with the
//!   previous run's (or the baseline's) checksum — except after a Failed run, where
//!   Flagger re-syncs it first and the new revision's is sent.
//!
//! Every phase change and every failed check emits an [`Command::Event`] carrying the
//! weights, the check values and the reasons; the driver forwards events to the `event`
//! hooks.
//!
//! ## Where weir differs, deliberately
//! - **Promotion.** Flagger copies the canary's spec to the primary; weir has no
//!   orchestrator. With [`Promotion::Swap`] the Promoting tick emits [`Command::SwapSlots`]
//!   (one atomic table swap, `stepWeightPromotion` has no meaning) then Finalising,
//!   Succeeded. With [`Promotion::Webhook`] the Promoting ticks call the `promote` hooks
//!   (gating, retried every tick), wait until the primary reports the canary's revision
//!   and is ready, then shift traffic back by `stepWeightPromotion` per tick (0: at once;
//!   an A/B run's match is removed at once). If the hooks or the primary do not make it
//!   within `progressDeadline`, the run is Failed with the reason and **the traffic is
//!   left where it is**, on the canary: the canary passed its analysis, while the primary
//!   is at best not ready with the new revision — moving users to it would turn a failed
//!   promotion into an outage, and moving more of them to the canary could overload a
//!   canary slot sized for its max weight. A later run starts by routing everything to
//!   the primary.
//! - **Rollback timing.** Flagger rolls back at the tick *after* the one that reached the
//!   threshold, an interval later; weir keeps that separate tick (the rollback hooks are
//!   asked first, as in Flagger) but makes it due at once.
//! - **New revision while Promoting** restarts the run too (Flagger only checks in
//!   Progressing and WaitingPromotion): with a swap, the slot about to become the primary
//!   would otherwise carry an unanalysed build.
//! - **Repeated `confirm-promotion` failures** keep the iteration count (newer Flagger
//!   resets it to N-1 on entering WaitingPromotion, which asks the hook only every other
//!   tick).
//! - **Manual control:** Pause (Flagger's `suspend`: nothing happens, nothing is counted),
//!   Resume, Abort (rollback), Promote (skip the remaining analysis and `confirm-promotion`:
//!   the operator is the approval), Start (a new run, as if a new revision was detected).
//!   Abort, Promote and Start also lift a pause; Resume gives a webhook promotion a fresh
//!   progress deadline (it does not run while paused).
//! - **skipAnalysis** follows Flagger: the run goes through the `confirm-rollout` tick, then
//!   the next tick promotes (swap, or the `promote` hooks then all traffic to the
//!   primary), sets Succeeded and calls the `post-rollout` hooks with phase Succeeded (as
//!   Flagger's `shouldSkipAnalysis` since fluxcd/flagger#1195), whether the skip came
//!   before the run or was switched on mid-run. It does not apply in Finalising, where
//!   the swap already happened.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::spec::*;

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;

/// Flagger's canary phases, serialised as their names.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Phase {
    /// Never stepped: the first tick takes over the route.
    #[default]
    Initializing,
    /// Ready, no run yet.
    Initialized,
    /// A new revision waits for its `confirm-rollout` hooks.
    Waiting,
    /// Analysis in progress.
    Progressing,
    /// Analysis done, waiting for the `confirm-promotion` hooks.
    WaitingPromotion,
    /// Making the canary the primary.
    Promoting,
    /// Promotion done; the next tick records success.
    Finalising,
    /// The last run was promoted.
    Succeeded,
    /// The last run was rolled back (or its promotion failed).
    Failed,
}

impl Phase {
    /// The phases in which no run is in progress and a new revision may start one.
    pub fn is_idle(self) -> bool {
        matches!(self, Phase::Initialized | Phase::Succeeded | Phase::Failed)
    }

    /// The name, as serialised and as sent in webhook payloads.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Initializing => "Initializing",
            Phase::Initialized => "Initialized",
            Phase::Waiting => "Waiting",
            Phase::Progressing => "Progressing",
            Phase::WaitingPromotion => "WaitingPromotion",
            Phase::Promoting => "Promoting",
            Phase::Finalising => "Finalising",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything the machine knows about one canary between two ticks. Persisted (file or
/// etcd) after every step; a restarted or new owner continues from it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CanaryState {
    /// Current phase.
    pub phase: Phase,
    /// Desired canary weight (0..=100): the machine's record of the traffic it set, the
    /// source of truth for the next step (Flagger re-reads it from the mesh).
    pub canary_weight: u8,
    /// Whether the A/B match rules currently send matching requests to the canary.
    pub match_active: bool,
    /// Whether traffic is currently mirrored to the canary.
    pub mirror: bool,
    /// A/B and blue/green iterations done in this run.
    pub iterations: u32,
    /// Failed checks in this run; back to 0 after a rollback, as Flagger's status (the
    /// count that caused it is kept in `last_run_failed_checks`).
    pub failed_checks: u32,
    /// Failed checks the last finished run ended with: what a rollback's event reports
    /// once `failed_checks` is reset.
    pub last_run_failed_checks: u32,
    /// Revision of the current (or last) run: what a webhook promotion waits for on the
    /// primary, and what events name.
    pub revision: Option<String>,
    /// Revision of the last successful promotion.
    pub promoted_revision: Option<String>,
    /// Flagger's `lastAppliedSpec`: the revision the webhook payloads' `checksum` is
    /// computed over. It becomes a run's revision when the run starts; while a new
    /// revision waits for `confirm-rollout` it is still the previous one, except after a
    /// Failed run, where Flagger re-syncs it to the canary's current revision at once.
    pub applied_revision: Option<String>,
    /// A new revision to start once its `confirm-rollout` tick runs.
    pub pending_revision: Option<String>,
    /// Last canary revision reported by the driver: the baseline a change is detected
    /// against (kept apart from `revision` so a manual `Start` label never looks like a
    /// change).
    pub observed_revision: Option<String>,
    /// The next revision the driver reports is a baseline, not a release (after
    /// initialisation or a swap whose idle slot revision was unknown).
    pub rebaseline: bool,
    /// Paused by an operator: no tick is due until Resume.
    pub paused: bool,
    /// When the last tick ran; `None` makes the next tick due at once.
    pub last_tick_ms: Option<u64>,
    /// When the phase last changed.
    pub last_transition_ms: u64,
    /// When the current run started.
    pub started_at_ms: Option<u64>,
    /// Start of the current wait of a webhook promotion (promote hooks, then primary
    /// readiness), measured against `progressDeadline`.
    pub promotion_wait_since_ms: Option<u64>,
    /// The `promote` hooks of this promotion have passed; they are not called again.
    pub promote_hooks_done: bool,
    /// Results of the last tick that ran checks, for status pages.
    pub last_checks: LastChecks,
    /// Message of the last event, for status pages.
    pub message: String,
}

impl CanaryState {
    /// A canary never stepped: the first tick initialises it.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Check results kept in the state for status pages.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LastChecks {
    /// When they were taken.
    pub at_ms: u64,
    /// Webhook answers.
    pub hooks: Vec<HookResult>,
    /// Metric values.
    pub metrics: Vec<MetricResult>,
}

/// What the driver must do for one tick.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Whether a tick is due now. When false, the driver calls nothing and need not call
    /// `step` (which would change nothing).
    pub due: bool,
    /// When not due, when the next tick will be; `None` while paused.
    pub next_due_ms: Option<u64>,
    /// What to call, in order (see the module docs for when the driver may stop).
    pub steps: Vec<PlanStep>,
}

impl Plan {
    /// Whether the driver must take the metric measurements this tick.
    pub fn needs_metrics(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, PlanStep::Metrics))
    }
}

/// One thing to do in a tick.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum PlanStep {
    /// Call `spec.analysis.webhooks[index]` with `phase` in the payload.
    Hook {
        /// Index into `spec.analysis.webhooks`; report it back in [`HookResult::index`].
        index: usize,
        /// The hook's kind, repeated so the driver need not look it up.
        kind: HookKind,
        /// Phase for the payload (Flagger's choice for that hook type).
        phase: Phase,
    },
    /// Measure every metric of `spec.analysis.metrics`.
    Metrics,
}

/// What the driver saw and did during one tick.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Observation {
    /// The canary slot's revision as the driver sees it now (`None`: unknown or not
    /// watched); a change starts (or restarts) a run.
    pub canary_revision: Option<String>,
    /// Answers of the planned hooks.
    pub hooks: Vec<HookResult>,
    /// Metric results (the driver judges them, e.g. with [`MetricSpec::evaluate`];
    /// too little traffic is a failure it reports).
    pub metrics: Vec<MetricResult>,
    /// An operator's command; when set, the step handles only the command.
    pub command: Option<ManualCommand>,
    /// The primary slot's revision: what a webhook promotion waits for, and with a swap
    /// the revision the idle slot will report after the swap.
    pub primary_revision: Option<String>,
    /// Whether the primary's endpoints are ready (webhook promotion).
    pub primary_ready: bool,
}

impl Observation {
    /// An observation carrying only an operator's command.
    pub fn command(command: ManualCommand) -> Self {
        Self {
            command: Some(command),
            ..Self::default()
        }
    }
}

/// The answer of one planned hook.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HookResult {
    /// The plan's index of the hook: results are matched by index and kind.
    pub index: usize,
    /// The hook's name, for events and status.
    pub name: String,
    /// The hook's kind.
    pub kind: HookKind,
    /// Flagger's pass rule (HTTP status ≤ 202).
    pub passed: bool,
    /// Status and body, or the transport error, for events.
    pub reason: String,
}

/// One metric result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MetricResult {
    /// The metric's name (matched to `spec.analysis.metrics` by name).
    pub name: String,
    /// The measured value, if any.
    pub value: Option<f64>,
    /// Whether the value is within range (and there was enough traffic to measure it).
    pub passed: bool,
    /// Why it failed (`95.00 < 99`, `not enough traffic`).
    pub reason: String,
}

/// An operator's command, from the control API or `weir ctl`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "camelCase")]
pub enum ManualCommand {
    /// Start a run for this revision, as if it had just been detected (restarts a run in
    /// progress).
    Start {
        /// Revision label of the run.
        revision: String,
    },
    /// Skip the remaining analysis and promote now.
    Promote,
    /// Roll back the run in progress.
    Abort,
    /// Freeze the canary: no tick, no check counted.
    Pause,
    /// Continue after a pause.
    Resume,
}

/// What the driver applies after a step, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Command {
    /// The whole desired traffic state of the route (idempotent).
    SetTraffic {
        /// Percentage of unmatched requests sent to the canary.
        canary_weight: u8,
        /// A/B: requests matching the `match` rules go to the canary.
        match_active: bool,
        /// Mirror this percentage of requests to the canary; `None`: no mirroring.
        mirror_weight: Option<u8>,
        /// Session affinity pins clients to the side they drew.
        affinity_active: bool,
    },
    /// Promotion by swap: in one table swap the canary backend becomes the primary and
    /// the old primary the idle canary slot, at weight 0, match and mirror off.
    SwapSlots,
    /// Call every hook of this kind (non-gating; answers change nothing).
    CallHooks {
        /// Which hooks.
        kind: HookKind,
        /// Phase for the payload.
        phase: Phase,
    },
    /// Record an event (API, logs, `weir ctl watch`) and send it to the `event` hooks.
    Event {
        /// Phase after the step.
        phase: Phase,
        /// Why, in one word.
        reason: EventReason,
        /// The details: weights, check values, hook names and answers.
        message: String,
    },
}

/// Why an event was emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventReason {
    /// The canary was taken over; all traffic on the primary.
    Initialized,
    /// A new revision was detected or requested.
    NewRevision,
    /// `confirm-rollout` holds the new revision.
    WaitingApproval,
    /// The analysis of a new revision started.
    Started,
    /// A new revision arrived mid-run; the run starts over.
    Restarted,
    /// A pre-rollout or rollout hook or a metric failed: one more failed check.
    CheckFailed,
    /// Weight or iteration step.
    Advanced,
    /// `confirm-traffic-increase` holds the weight.
    TrafficIncreaseHeld,
    /// `confirm-promotion` holds the promotion.
    WaitingPromotion,
    /// Promotion started.
    Promoting,
    /// A `promote` hook failed; retried next tick.
    PromoteHookFailed,
    /// Webhook promotion waits for the primary's revision and readiness.
    WaitingPrimary,
    /// Promotion finished moving traffic.
    Finalising,
    /// The run succeeded.
    Succeeded,
    /// The run was rolled back.
    RolledBack,
    /// Webhook promotion missed its deadline.
    PromotionFailed,
    /// An operator cancelled a run not yet started.
    Aborted,
    /// An operator paused the canary.
    Paused,
    /// An operator resumed the canary.
    Resumed,
}

impl EventReason {
    /// Whether the event deserves attention (Flagger's Warning events).
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            EventReason::WaitingApproval
                | EventReason::Restarted
                | EventReason::CheckFailed
                | EventReason::TrafficIncreaseHeld
                | EventReason::WaitingPromotion
                | EventReason::PromoteHookFailed
                | EventReason::RolledBack
                | EventReason::PromotionFailed
        )
    }
}

/// Whether a tick is due: never while paused; at once after a forced transition or when
/// the clock went backwards (a restored state from a later clock must not stall the run);
/// else one interval after the last tick.
fn due_at(spec: &CanarySpec, state: &CanaryState, now_ms: u64) -> u64 {
    match state.last_tick_ms {
        None => now_ms,
        Some(last) if now_ms < last => now_ms,
        Some(last) => last.saturating_add(spec.analysis.interval_ms),
    }
}

fn is_due(spec: &CanarySpec, state: &CanaryState, now_ms: u64) -> bool {
    !state.paused && now_ms >= due_at(spec, state, now_ms)
}

/// Flagger's "starting" condition: no traffic, no iteration and not mirroring yet, so the
/// `pre-rollout` hooks run instead of the analysis.
fn starting(analysis: &AnalysisSpec, state: &CanaryState) -> bool {
    state.canary_weight == 0 && state.iterations == 0 && !(analysis.mirror && state.mirror)
}

/// Which hooks to call and checks to take this tick, and whether a tick is due.
pub fn plan(spec: &CanarySpec, state: &CanaryState, now_ms: u64) -> Plan {
    if state.paused {
        return Plan {
            due: false,
            next_due_ms: None,
            steps: Vec::new(),
        };
    }
    let at = due_at(spec, state, now_ms);
    if now_ms < at {
        return Plan {
            due: false,
            next_due_ms: Some(at),
            steps: Vec::new(),
        };
    }
    Plan {
        due: true,
        next_due_ms: None,
        steps: planned_steps(spec, state),
    }
}

/// The steps of a due tick; `step` consults exactly these, in this order.
fn planned_steps(spec: &CanarySpec, st: &CanaryState) -> Vec<PlanStep> {
    let a = &spec.analysis;
    let mut steps = Vec::new();
    let hooks = |steps: &mut Vec<PlanStep>, kind: HookKind, phase: Phase| {
        for (index, hook) in a.webhooks.iter().enumerate() {
            if hook.kind == kind {
                steps.push(PlanStep::Hook { index, kind, phase });
            }
        }
    };
    let webhook_promotion = spec.promotion == Promotion::Webhook;
    match st.phase {
        Phase::Initializing | Phase::Finalising => {}
        Phase::Initialized | Phase::Succeeded | Phase::Failed => {
            if st.pending_revision.is_some() {
                hooks(&mut steps, HookKind::ConfirmRollout, st.phase);
            }
        }
        Phase::Waiting => hooks(&mut steps, HookKind::ConfirmRollout, st.phase),
        Phase::Progressing | Phase::WaitingPromotion if !spec.skip_analysis => {
            hooks(&mut steps, HookKind::Rollback, st.phase);
            if st.failed_checks >= a.effective_threshold() {
                return steps;
            }
            if starting(a, st) {
                hooks(&mut steps, HookKind::PreRollout, Phase::Progressing);
            } else {
                hooks(&mut steps, HookKind::Rollout, Phase::Progressing);
                if !a.metrics.is_empty() {
                    steps.push(PlanStep::Metrics);
                }
            }
            match a.strategy() {
                Strategy::AbTesting | Strategy::BlueGreen => {
                    if st.iterations >= a.iterations {
                        hooks(&mut steps, HookKind::ConfirmPromotion, Phase::Progressing);
                    }
                }
                Strategy::Canary => {
                    if a.next_step_weight(st.canary_weight) > 0 {
                        if !st.mirror && st.phase == Phase::Progressing {
                            hooks(
                                &mut steps,
                                HookKind::ConfirmTrafficIncrease,
                                Phase::Progressing,
                            );
                        }
                        if st.canary_weight >= a.max_weight() {
                            hooks(&mut steps, HookKind::ConfirmPromotion, Phase::Progressing);
                        }
                    }
                }
            }
        }
        // skipAnalysis in a run, or the Promoting phase: only a webhook promotion calls
        // anything, and only until its promote hooks have passed.
        Phase::Progressing | Phase::WaitingPromotion | Phase::Promoting => {
            if webhook_promotion && !st.promote_hooks_done {
                hooks(&mut steps, HookKind::Promote, Phase::Promoting);
            }
        }
    }
    steps
}

/// Advances the canary by one tick (or applies one manual command). Pure: call it with the
/// `now_ms` given to [`plan`] for this tick.
pub fn step(
    spec: &CanarySpec,
    state: &CanaryState,
    obs: &Observation,
    now_ms: u64,
) -> (CanaryState, Vec<Command>) {
    let mut tick = Tick {
        spec,
        obs,
        now: now_ms,
        s: state.clone(),
        out: Vec::new(),
    };
    if let Some(command) = &obs.command {
        tick.command(command);
        return (tick.s, tick.out);
    }
    if !is_due(spec, state, now_ms) {
        return (state.clone(), Vec::new());
    }
    tick.s.last_tick_ms = Some(now_ms);
    tick.record_checks();
    match state.phase {
        Phase::Initializing => tick.initialize(),
        Phase::Initialized | Phase::Succeeded | Phase::Failed => tick.idle(),
        Phase::Waiting => tick.waiting(),
        Phase::Progressing | Phase::WaitingPromotion => tick.progressing(),
        Phase::Promoting => tick.promoting(),
        Phase::Finalising => tick.finalising(),
    }
    (tick.s, tick.out)
}

/// A run is under way: Abort rolls it back.
fn in_run(phase: Phase) -> bool {
    matches!(
        phase,
        Phase::Waiting | Phase::Progressing | Phase::WaitingPromotion | Phase::Promoting
    )
}

/// Why an operator's command does not apply to a canary in `state`, or `None` when it
/// does. [`step`] applies exactly the commands this accepts and leaves the state alone
/// (no event) for the others, so a caller that asks first (the control API, answering
/// 409 with this reason) and the machine cannot disagree.
pub fn command_refusal(state: &CanaryState, command: &ManualCommand) -> Option<String> {
    let phase = state.phase;
    let (what, why) = match command {
        ManualCommand::Pause if state.paused => ("pause", "already paused"),
        ManualCommand::Resume if !state.paused => ("resume", "not paused"),
        ManualCommand::Abort
            if !(in_run(phase) || phase.is_idle() && state.pending_revision.is_some()) =>
        {
            ("abort", "no run in progress")
        }
        ManualCommand::Promote
            if !matches!(
                phase,
                Phase::Waiting | Phase::Progressing | Phase::WaitingPromotion
            ) =>
        {
            ("promote", "no analysis in progress")
        }
        _ => return None,
    };
    Some(format!("{what} refused: {why} (phase {phase})"))
}

/// A gate that did not pass: the hook's name and its answer.
struct Refusal {
    name: String,
    reason: String,
}

/// One step in progress: the inputs, the state being built and the commands so far.
struct Tick<'a> {
    spec: &'a CanarySpec,
    obs: &'a Observation,
    now: u64,
    s: CanaryState,
    out: Vec<Command>,
}

impl<'a> Tick<'a> {
    fn analysis(&self) -> &'a AnalysisSpec {
        &self.spec.analysis
    }

    fn rev(&self) -> String {
        self.s
            .revision
            .clone()
            .unwrap_or_else(|| "(unknown revision)".to_string())
    }

    fn set_phase(&mut self, phase: Phase) {
        if self.s.phase != phase {
            self.s.phase = phase;
            self.s.last_transition_ms = self.now;
        }
        // Flagger's setStatusPhase zeroes the iterations outside the phases of a run
        // (WaitingPromotion keeps them here: see the module docs).
        if !matches!(
            phase,
            Phase::Progressing | Phase::Waiting | Phase::WaitingPromotion | Phase::Promoting
        ) {
            self.s.iterations = 0;
        }
    }

    /// A run ended in Failed: Flagger's status goes back to 0 failed checks, the count
    /// that caused it stays with the run's record for its events.
    fn reset_failed_checks(&mut self) {
        self.s.last_run_failed_checks = self.s.failed_checks;
        self.s.failed_checks = 0;
    }

    /// After a Failed run Flagger re-syncs `lastAppliedSpec` to the canary as it is now,
    /// so the `confirm-rollout` hooks of the next run get the new revision's checksum.
    fn resync_after_failure(&mut self) {
        if self.s.phase == Phase::Failed && self.s.pending_revision.is_some() {
            self.s.applied_revision = self.s.pending_revision.clone();
        }
    }

    fn event(&mut self, reason: EventReason, message: String) {
        self.s.message = message.clone();
        self.out.push(Command::Event {
            phase: self.s.phase,
            reason,
            message,
        });
    }

    fn weights(&self) -> String {
        format!(
            "canary weight {}, primary weight {}",
            self.s.canary_weight,
            TOTAL_WEIGHT - self.s.canary_weight.min(TOTAL_WEIGHT)
        )
    }

    /// Sets the traffic state and emits it whole.
    fn route(&mut self, canary_weight: u8, match_active: bool, mirror: bool) {
        self.s.canary_weight = canary_weight.min(TOTAL_WEIGHT);
        self.s.match_active = match_active;
        self.s.mirror = mirror;
        let a = self.analysis();
        self.out.push(Command::SetTraffic {
            canary_weight: self.s.canary_weight,
            match_active,
            mirror_weight: mirror
                .then(|| a.mirror_weight.unwrap_or(TOTAL_WEIGHT).min(TOTAL_WEIGHT)),
            affinity_active: a.session_affinity && self.s.canary_weight > 0,
        });
    }

    fn all_to_primary(&mut self) {
        self.route(0, false, false);
    }

    fn traffic_on_primary(&self) -> bool {
        self.s.canary_weight == 0 && !self.s.match_active && !self.s.mirror
    }

    fn post_rollout(&mut self) {
        self.out.push(Command::CallHooks {
            kind: HookKind::PostRollout,
            phase: self.s.phase,
        });
    }

    /// Makes the next tick due at once.
    fn due_now(&mut self) {
        self.s.last_tick_ms = None;
    }

    fn record_checks(&mut self) {
        if self.obs.hooks.is_empty() && self.obs.metrics.is_empty() {
            return;
        }
        let metrics = self
            .obs
            .metrics
            .iter()
            .map(|m| MetricResult {
                // A NaN would not survive a JSON round trip; keep only real numbers.
                value: m.value.filter(|v| v.is_finite()),
                ..m.clone()
            })
            .collect();
        self.s.last_checks = LastChecks {
            at_ms: self.now,
            hooks: self.obs.hooks.clone(),
            metrics,
        };
    }

    fn hook_result(&self, index: usize, kind: HookKind) -> Option<&HookResult> {
        self.obs
            .hooks
            .iter()
            .find(|r| r.index == index && r.kind == kind)
    }

    /// All hooks of `kind` passed (in spec order; the first refusal is reported).
    fn gate(&self, kind: HookKind) -> Result<(), Refusal> {
        for (index, hook) in self.analysis().webhooks.iter().enumerate() {
            if hook.kind != kind {
                continue;
            }
            match self.hook_result(index, kind) {
                Some(r) if r.passed => {}
                Some(r) => {
                    return Err(Refusal {
                        name: hook.name.clone(),
                        reason: r.reason.clone(),
                    })
                }
                None => {
                    return Err(Refusal {
                        name: hook.name.clone(),
                        reason: "no answer".to_string(),
                    })
                }
            }
        }
        Ok(())
    }

    /// The first rollback hook that passed, if any.
    fn rollback_signal(&self) -> Option<String> {
        self.analysis()
            .webhooks
            .iter()
            .enumerate()
            .filter(|(_, h)| h.kind == HookKind::Rollback)
            .find(|(i, _)| {
                self.hook_result(*i, HookKind::Rollback)
                    .is_some_and(|r| r.passed)
            })
            .map(|(_, h)| h.name.clone())
    }

    /// One description per failed (or unreported) metric, in spec order.
    fn metric_failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        for m in &self.analysis().metrics {
            match self.obs.metrics.iter().find(|r| r.name == m.name) {
                Some(r) if r.passed => {}
                Some(r) => {
                    let value = r
                        .value
                        .filter(|v| v.is_finite())
                        .map_or("no value".to_string(), |v| format!("{v:.2}"));
                    failures.push(format!("{} {} ({})", m.name, value, r.reason));
                }
                None => failures.push(format!("{} not measured", m.name)),
            }
        }
        failures
    }

    /// A changed canary revision reported by the driver, if any; updates the baseline.
    fn detect(&mut self) -> Option<String> {
        let seen = self.obs.canary_revision.as_ref()?;
        if self.s.rebaseline {
            self.s.rebaseline = false;
            self.s.observed_revision = Some(seen.clone());
            if self.s.applied_revision.is_none() {
                self.s.applied_revision = Some(seen.clone());
            }
            return None;
        }
        if self.s.observed_revision.as_ref() == Some(seen) {
            return None;
        }
        self.s.observed_revision = Some(seen.clone());
        Some(seen.clone())
    }

    fn reset_run(&mut self) {
        self.s.failed_checks = 0;
        self.s.iterations = 0;
        self.s.promote_hooks_done = false;
        self.s.promotion_wait_since_ms = None;
    }

    /// Leaves the idle phases for `phase` with a fresh run of `revision`. Traffic goes back
    /// to the primary if a failed webhook promotion had left it on the canary: the canary
    /// slot now carries an unanalysed build.
    fn begin_run(&mut self, revision: Option<String>, phase: Phase) {
        self.s.revision = revision;
        self.s.pending_revision = None;
        self.reset_run();
        self.s.started_at_ms = Some(self.now);
        if !self.traffic_on_primary() {
            self.all_to_primary();
        }
        self.set_phase(phase);
    }

    fn initialize(&mut self) {
        self.all_to_primary();
        match &self.obs.canary_revision {
            Some(r) => {
                self.s.observed_revision = Some(r.clone());
                self.s.rebaseline = false;
            }
            None => self.s.rebaseline = true,
        }
        self.s.applied_revision = self.s.observed_revision.clone();
        self.set_phase(Phase::Initialized);
        let baseline = self
            .s
            .observed_revision
            .clone()
            .unwrap_or_else(|| "not known yet".to_string());
        self.event(
            EventReason::Initialized,
            format!(
                "Initialization done! {}: all traffic on the primary; canary revision {baseline} is the baseline",
                self.spec.name
            ),
        );
        if self.s.pending_revision.is_some() {
            self.due_now();
        }
    }

    fn idle(&mut self) {
        let detected = self.detect();
        if self.s.pending_revision.is_none() {
            if let Some(r) = detected {
                self.s.pending_revision = Some(r.clone());
                self.resync_after_failure();
                self.due_now();
                self.event(
                    EventReason::NewRevision,
                    format!(
                        "New revision {r} detected on the canary of {}",
                        self.spec.name
                    ),
                );
            }
            return;
        }
        if let Some(r) = detected {
            // The latest deployment wins over an older pending one.
            self.s.pending_revision = Some(r);
            self.resync_after_failure();
        }
        let pending = self.s.pending_revision.clone();
        match self.gate(HookKind::ConfirmRollout) {
            Err(refusal) => {
                self.begin_run(pending, Phase::Waiting);
                let msg = format!(
                    "Halt advancement of {}: waiting for approval from confirm-rollout webhook {} ({})",
                    self.rev(),
                    refusal.name,
                    refusal.reason
                );
                self.event(EventReason::WaitingApproval, msg);
            }
            Ok(()) => self.start(pending),
        }
    }

    fn start(&mut self, revision: Option<String>) {
        self.s.applied_revision = revision.clone();
        self.begin_run(revision, Phase::Progressing);
        let msg = format!(
            "New revision {} detected! Starting canary analysis of {}",
            self.rev(),
            self.spec.name
        );
        self.event(EventReason::Started, msg);
    }

    fn waiting(&mut self) {
        if let Some(r) = self.detect() {
            self.s.revision = Some(r.clone());
            self.event(
                EventReason::NewRevision,
                format!("New revision {r} detected while waiting for approval"),
            );
        }
        if self.gate(HookKind::ConfirmRollout).is_ok() {
            let revision = self.s.revision.clone();
            self.start(revision);
        }
    }

    fn restart(&mut self, revision: String) {
        self.s.applied_revision = Some(revision.clone());
        self.s.revision = Some(revision);
        self.reset_run();
        self.s.started_at_ms = Some(self.now);
        self.all_to_primary();
        self.set_phase(Phase::Progressing);
        let msg = format!(
            "New revision {} detected! Restarting analysis of {}: all traffic routed to the primary",
            self.rev(),
            self.spec.name
        );
        self.event(EventReason::Restarted, msg);
    }

    fn rollback(&mut self, why: String) {
        let was = self.weights();
        self.all_to_primary();
        self.s.promote_hooks_done = false;
        self.s.promotion_wait_since_ms = None;
        self.set_phase(Phase::Failed);
        self.reset_failed_checks();
        let msg = format!(
            "Canary failed! Rolling back {}: {why} (at {was}); all traffic routed to the primary",
            self.rev()
        );
        self.event(EventReason::RolledBack, msg);
        self.post_rollout();
        if self.s.pending_revision.is_some() {
            self.due_now();
        }
    }

    fn check_failed(&mut self, what: String) {
        self.s.failed_checks = self.s.failed_checks.saturating_add(1);
        let threshold = self.analysis().effective_threshold();
        if self.s.failed_checks >= threshold {
            self.due_now();
        }
        let msg = format!(
            "Halt advancement of {} at {}: {what} (failed checks {}/{threshold})",
            self.rev(),
            self.weights(),
            self.s.failed_checks
        );
        self.event(EventReason::CheckFailed, msg);
    }

    fn progressing(&mut self) {
        if let Some(r) = self.detect() {
            return self.restart(r);
        }
        if self.spec.skip_analysis {
            return self.skip_analysis();
        }
        if let Some(name) = self.rollback_signal() {
            return self.rollback(format!("rollback webhook {name} signalled a rollback"));
        }
        let threshold = self.analysis().effective_threshold();
        if self.s.failed_checks >= threshold {
            let fc = self.s.failed_checks;
            return self.rollback(format!("failed checks threshold reached {fc}/{threshold}"));
        }
        if starting(self.analysis(), &self.s) {
            if let Err(r) = self.gate(HookKind::PreRollout) {
                return self.check_failed(format!(
                    "pre-rollout webhook {} failed ({})",
                    r.name, r.reason
                ));
            }
        } else {
            if let Err(r) = self.gate(HookKind::Rollout) {
                return self
                    .check_failed(format!("rollout webhook {} failed ({})", r.name, r.reason));
            }
            let failures = self.metric_failures();
            if !failures.is_empty() {
                return self.check_failed(failures.join("; "));
            }
        }
        match self.analysis().strategy() {
            Strategy::Canary => self.run_canary(),
            Strategy::AbTesting => self.run_ab(),
            Strategy::BlueGreen => self.run_blue_green(),
        }
    }

    /// `confirm-promotion`: a refusal moves to (or holds in) WaitingPromotion.
    fn promotion_approved(&mut self) -> bool {
        match self.gate(HookKind::ConfirmPromotion) {
            Ok(()) => true,
            Err(r) => {
                if self.s.phase != Phase::WaitingPromotion {
                    self.set_phase(Phase::WaitingPromotion);
                    let msg = format!(
                        "Halt advancement of {} at {}: waiting for promotion approval from confirm-promotion webhook {} ({})",
                        self.rev(),
                        self.weights(),
                        r.name,
                        r.reason
                    );
                    self.event(EventReason::WaitingPromotion, msg);
                }
                false
            }
        }
    }

    fn enter_promoting(&mut self, why: &str) {
        self.set_phase(Phase::Promoting);
        self.s.promote_hooks_done = false;
        self.s.promotion_wait_since_ms = Some(self.now);
        let how = match self.spec.promotion {
            Promotion::Swap => "the slots will be swapped",
            Promotion::Webhook => "calling the promote webhooks",
        };
        let msg = format!(
            "Promoting {} of {} ({why}, at {}): {how}",
            self.rev(),
            self.spec.name,
            self.weights()
        );
        self.event(EventReason::Promoting, msg);
    }

    fn run_canary(&mut self) {
        let a = self.analysis();
        let weight = self.s.canary_weight;
        let next = a.next_step_weight(weight);
        let max = a.max_weight();
        let mirror_first = a.mirror;
        if next == 0 {
            // Flagger does nothing either; the config loader rejects such a spec.
            return;
        }
        if !self.s.mirror && self.s.phase == Phase::Progressing {
            if let Err(r) = self.gate(HookKind::ConfirmTrafficIncrease) {
                let msg = format!(
                    "Halt advancement of {} at {}: waiting for traffic increase approval from confirm-traffic-increase webhook {} ({})",
                    self.rev(),
                    self.weights(),
                    r.name,
                    r.reason
                );
                return self.event(EventReason::TrafficIncreaseHeld, msg);
            }
        }
        if weight < max {
            if mirror_first && weight == 0 {
                if !self.s.mirror {
                    self.route(0, false, true);
                    let msg = format!(
                        "Advance {}: mirroring traffic to the canary before shifting it ({})",
                        self.rev(),
                        self.weights()
                    );
                    return self.event(EventReason::Advanced, msg);
                }
                self.route(next, false, false);
            } else {
                let w = u32::from(weight) + u32::from(next);
                self.route(
                    u8::try_from(w.min(u32::from(TOTAL_WEIGHT))).unwrap_or(TOTAL_WEIGHT),
                    false,
                    false,
                );
            }
            let msg = format!("Advance {}: {}", self.rev(), self.weights());
            return self.event(EventReason::Advanced, msg);
        }
        if self.promotion_approved() {
            self.enter_promoting("analysis passed at the max weight");
        }
    }

    fn run_ab(&mut self) {
        let n = self.analysis().iterations;
        if self.s.iterations < n {
            self.route(0, true, false);
            self.s.iterations = self.s.iterations.saturating_add(1);
            let msg = format!(
                "Advance {}: iteration {}/{n}, requests matching the A/B rules go to the canary",
                self.rev(),
                self.s.iterations
            );
            return self.event(EventReason::Advanced, msg);
        }
        if self.promotion_approved() {
            self.enter_promoting("A/B iterations passed");
        }
    }

    fn run_blue_green(&mut self) {
        let a = self.analysis();
        let n = a.iterations;
        let mirror = a.mirror;
        if self.s.iterations < n {
            if mirror && !self.s.mirror {
                self.route(0, false, true);
            }
            self.s.iterations = self.s.iterations.saturating_add(1);
            let msg = format!(
                "Advance {}: iteration {}/{n}{}",
                self.rev(),
                self.s.iterations,
                if self.s.mirror {
                    ", traffic mirrored to the canary"
                } else {
                    ""
                }
            );
            return self.event(EventReason::Advanced, msg);
        }
        if !self.promotion_approved() {
            return;
        }
        if self.s.iterations == n {
            let how = if self.s.mirror {
                "stop traffic mirroring and route all traffic to the canary"
            } else {
                "route all traffic to the canary"
            };
            self.route(TOTAL_WEIGHT, false, false);
            self.s.iterations = self.s.iterations.saturating_add(1);
            let msg = format!("Advance {}: {how} ({})", self.rev(), self.weights());
            return self.event(EventReason::Advanced, msg);
        }
        self.enter_promoting("blue/green iterations passed");
    }

    /// Records the swap: the canary's revision is now the primary's, and the idle slot's
    /// revision (the old primary's, when the driver knows it) is the new baseline.
    fn apply_swap(&mut self) {
        self.out.push(Command::SwapSlots);
        self.s.promoted_revision = self.s.revision.clone();
        self.s.canary_weight = 0;
        self.s.match_active = false;
        self.s.mirror = false;
        match &self.obs.primary_revision {
            Some(p) => {
                self.s.observed_revision = Some(p.clone());
                self.s.rebaseline = false;
            }
            None => {
                self.s.observed_revision = None;
                self.s.rebaseline = true;
            }
        }
    }

    fn end_promotion(&mut self) {
        self.s.promote_hooks_done = false;
        self.s.promotion_wait_since_ms = None;
        if self.s.pending_revision.is_some() {
            self.due_now();
        }
    }

    /// skipAnalysis: promote at once (cancelling any analysis), Succeeded, then the
    /// `post-rollout` hooks (Flagger's `shouldSkipAnalysis` since fluxcd/flagger#1195).
    fn skip_analysis(&mut self) {
        self.s.last_run_failed_checks = self.s.failed_checks;
        match self.spec.promotion {
            Promotion::Swap => {
                self.apply_swap();
                self.set_phase(Phase::Succeeded);
                let msg = format!(
                    "Promotion completed! Canary analysis was skipped for {}: slots swapped, {} is the primary",
                    self.spec.name,
                    self.rev()
                );
                self.event(EventReason::Succeeded, msg);
                self.post_rollout();
            }
            Promotion::Webhook => {
                if !self.s.promote_hooks_done {
                    if let Err(r) = self.gate(HookKind::Promote) {
                        let msg = format!(
                            "Promote webhook {} failed for {} ({}); retrying at the next tick",
                            r.name,
                            self.rev(),
                            r.reason
                        );
                        return self.event(EventReason::PromoteHookFailed, msg);
                    }
                }
                self.all_to_primary();
                self.s.promoted_revision = self.s.revision.clone();
                self.set_phase(Phase::Succeeded);
                let msg = format!(
                    "Promotion completed! Canary analysis was skipped for {}: promote webhooks passed, all traffic routed to the primary",
                    self.spec.name
                );
                self.event(EventReason::Succeeded, msg);
                self.post_rollout();
            }
        }
        self.end_promotion();
    }

    fn promoting(&mut self) {
        if let Some(r) = self.detect() {
            return self.restart(r);
        }
        if self.spec.skip_analysis {
            return self.skip_analysis();
        }
        match self.spec.promotion {
            Promotion::Swap => {
                self.apply_swap();
                self.set_phase(Phase::Finalising);
                let msg = format!(
                    "Promotion completed! Slots swapped: {} is the primary of {}, the old primary is the idle slot",
                    self.rev(),
                    self.spec.name
                );
                self.event(EventReason::Finalising, msg);
            }
            Promotion::Webhook => self.webhook_promotion(),
        }
    }

    fn deadline_passed(&self) -> bool {
        let since = self.s.promotion_wait_since_ms.unwrap_or(self.now);
        self.now.saturating_sub(since) > self.spec.progress_deadline_ms
    }

    /// Webhook promotion missed its deadline: Failed, traffic left on the canary (see the
    /// module docs for why).
    fn promotion_failed(&mut self, why: String) {
        self.set_phase(Phase::Failed);
        self.reset_failed_checks();
        self.s.promote_hooks_done = false;
        self.s.promotion_wait_since_ms = None;
        let msg = format!(
            "Promotion of {} failed: {why}, progress deadline of {} ms exceeded; traffic left on the canary, which passed its analysis ({})",
            self.rev(),
            self.spec.progress_deadline_ms,
            self.weights()
        );
        self.event(EventReason::PromotionFailed, msg);
        self.post_rollout();
        if self.s.pending_revision.is_some() {
            self.due_now();
        }
    }

    fn webhook_promotion(&mut self) {
        if !self.s.promote_hooks_done {
            if let Err(r) = self.gate(HookKind::Promote) {
                let why = format!("promote webhook {} failed ({})", r.name, r.reason);
                if self.deadline_passed() {
                    return self.promotion_failed(why);
                }
                let msg = format!("{why} for {}; retrying at the next tick", self.rev());
                return self.event(EventReason::PromoteHookFailed, msg);
            }
            self.s.promote_hooks_done = true;
        }
        let want = self.s.revision.as_ref();
        let primary = self.obs.primary_revision.as_ref();
        if !(self.obs.primary_ready && want.is_some() && primary == want) {
            let seen = format!(
                "primary reports revision {} and is {}",
                primary.map_or("(unknown)", String::as_str),
                if self.obs.primary_ready {
                    "ready"
                } else {
                    "not ready"
                }
            );
            if self.deadline_passed() {
                return self.promotion_failed(format!(
                    "waiting for the primary to run {} and be ready: {seen}",
                    self.rev()
                ));
            }
            let msg = format!(
                "Waiting for the primary to run {} and be ready: {seen}",
                self.rev()
            );
            return self.event(EventReason::WaitingPrimary, msg);
        }
        // Progress: a later stall gets a full deadline of its own.
        self.s.promotion_wait_since_ms = Some(self.now);
        let step = self.analysis().step_weight_promotion;
        let weight = self.s.canary_weight;
        let next = if step == 0 || self.s.match_active {
            0
        } else {
            weight.saturating_sub(step)
        };
        self.route(next, false, false);
        if next == 0 {
            self.set_phase(Phase::Finalising);
            let msg = format!(
                "Promotion completed! All traffic routed to the primary, which runs {}",
                self.rev()
            );
            self.event(EventReason::Finalising, msg);
        } else {
            let msg = format!("Advance promotion of {}: {}", self.rev(), self.weights());
            self.event(EventReason::Advanced, msg);
        }
    }

    fn finalising(&mut self) {
        self.s.promoted_revision = self.s.revision.clone();
        self.s.last_run_failed_checks = self.s.failed_checks;
        self.set_phase(Phase::Succeeded);
        let msg = format!(
            "Promotion completed! {} of {} promoted",
            self.rev(),
            self.spec.name
        );
        self.event(EventReason::Succeeded, msg);
        self.post_rollout();
        self.end_promotion();
    }

    fn command(&mut self, command: &ManualCommand) {
        if command_refusal(&self.s, command).is_some() {
            return;
        }
        let phase = self.s.phase;
        match command {
            ManualCommand::Pause => {
                self.s.paused = true;
                let msg = format!(
                    "Paused by an operator at {phase}, {}: no step and no check until resumed",
                    self.weights()
                );
                self.event(EventReason::Paused, msg);
            }
            ManualCommand::Resume => {
                self.s.paused = false;
                if self.s.promotion_wait_since_ms.is_some() {
                    // The deadline does not run while paused.
                    self.s.promotion_wait_since_ms = Some(self.now);
                }
                let msg = format!("Resumed by an operator at {phase}, {}", self.weights());
                self.event(EventReason::Resumed, msg);
            }
            ManualCommand::Abort => {
                self.s.paused = false;
                if in_run(phase) {
                    self.rollback("aborted by an operator".to_string());
                } else {
                    let pending = self.s.pending_revision.take().unwrap_or_default();
                    self.event(
                        EventReason::Aborted,
                        format!("Run of {pending} cancelled by an operator before it started"),
                    );
                }
            }
            ManualCommand::Promote => {
                self.s.paused = false;
                self.enter_promoting("manual promotion, remaining analysis skipped");
                self.due_now();
            }
            ManualCommand::Start { revision } => {
                self.s.paused = false;
                match phase {
                    Phase::Progressing | Phase::WaitingPromotion | Phase::Promoting => {
                        self.restart(revision.clone());
                    }
                    Phase::Waiting => {
                        self.s.revision = Some(revision.clone());
                        self.due_now();
                        self.event(
                            EventReason::NewRevision,
                            format!(
                                "Run of {revision} requested by an operator; waiting for approval"
                            ),
                        );
                    }
                    Phase::Initializing
                    | Phase::Initialized
                    | Phase::Succeeded
                    | Phase::Failed
                    | Phase::Finalising => {
                        self.s.pending_revision = Some(revision.clone());
                        self.resync_after_failure();
                        self.due_now();
                        self.event(
                            EventReason::NewRevision,
                            format!("Run of {revision} requested by an operator"),
                        );
                    }
                }
            }
        }
    }
}
