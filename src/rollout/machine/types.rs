//! The values the driver exchanges with the machine: state, plan, observation, commands
//! and events.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::rollout::spec::*;

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
    /// Where the built-in checks' windows start: the run's start, moved forward when the
    /// backend in a role changed or an operator changed the traffic during the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_since_ms: Option<u64>,
    /// Inconclusive checks in a row (sequential judge); back to 0 on a decision.
    #[serde(skip_serializing_if = "is_zero")]
    pub holds: u32,
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

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl CanaryState {
    /// Where a check's window starts: the later of the run's start and the last
    /// change of the traffic's holders; `None` outside a run.
    pub fn window_start_ms(&self) -> Option<u64> {
        match (self.started_at_ms, self.measured_since_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

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
    /// Where the canary slot's deployment (its endpoint rolling update) stands:
    /// a run analyses only a slot that finished deploying.
    pub canary_deploy: SlotDeploy,
}

/// The canary slot's deployment as the driver reads it, Flagger's
/// `IsCanaryReady`: while it rolls, an analysed run waits (no failed check, no
/// step, no hook); once it stalled past its `progressDeadline`, the run rolls back.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SlotDeploy {
    /// Finished, or nothing is known of it: analyse.
    #[default]
    Ready,
    /// Its rolling update is still moving; the detail says how far.
    Rolling(String),
    /// Its rolling update made no progress for its `progressDeadline`.
    Stalled(String),
}

impl SlotDeploy {
    /// Hooks and metrics are asked only for a slot that finished deploying (the
    /// machine reads no result of a tick that waits or rolls back on it).
    pub fn is_ready(&self) -> bool {
        *self == SlotDeploy::Ready
    }
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
    /// A `dryRun` metric: shown and exported, never counted as a failed check (its
    /// `passed` says what it would have decided).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// The judge's classifications, estimates and intervals (`baseline-comparison`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judgement: Option<crate::stats::compare::Judgement>,
    /// Neither passed nor failed: the sequential judge needs more evidence. The step
    /// is held; it is not a failed check (`passed` is false).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub inconclusive: bool,
    /// 0..1: how much of the evidence a decision needs is in (sequential judge).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<f64>,
    /// The sequential judge's estimates and intervals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequential: Option<crate::stats::sequential::Judgement>,
    /// The requests the check judged (built-ins): this run's, since `since_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<CheckWindow>,
}

/// The traffic a built-in check judged: the current run's requests to the backend in
/// each role, since the later of the run's start and the last change of who holds
/// the role, and within the metric's interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CheckWindow {
    /// Start of the window (ms since the Unix epoch).
    pub since_ms: u64,
    /// Its length in whole seconds.
    pub secs: u64,
    /// The judged role: `canary`, or `mirror` while traffic is mirrored.
    pub role: String,
    /// Requests of the judged role in the window.
    pub requests: u64,
    /// Requests of the primary in the window.
    pub primary_requests: u64,
}

impl CheckWindow {
    /// `120 canary requests since 12:00:05` (UTC).
    pub fn describe(&self) -> String {
        format!(
            "{} {} requests since {}",
            self.requests,
            self.role,
            clock_of_day(self.since_ms)
        )
    }

    /// Requests per second of the judged role over the window.
    pub fn rate(&self) -> f64 {
        if self.secs == 0 {
            0.0
        } else {
            self.requests as f64 / self.secs as f64
        }
    }
}

/// `HH:MM:SS` (UTC) of a time in ms since the Unix epoch.
pub fn clock_of_day(ms: u64) -> String {
    let s = (ms / 1000) % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
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
    /// An analysed run waits for the canary slot's rolling update to finish.
    WaitingCanary,
    /// A check was Inconclusive (the sequential judge needs more evidence): the step
    /// is held, no failed check is counted.
    Inconclusive,
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
