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
//!
//! ## Layout
//! - `types`: the values the driver exchanges with the machine (state, plan, observation,
//!   commands, events), re-exported here.
//! - this file: the entry points ([`plan`], [`step`], [`command_refusal`]) and the
//!   per-step context `Tick`.
//! - `tick`: `Tick`'s bookkeeping (phase, traffic, events), gates and run start/stop.
//! - `strategy`: the analysed phases and the canary, A/B and blue/green steps, promotion.
//! - `command`: the manual commands.

use super::spec::*;

mod command;
mod strategy;
mod tick;
mod types;

pub use types::*;

#[cfg(test)]
mod tests;

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
