//! What one canary asks of the rollout machine: plain data, filled by the config loader
//! from a validated `canaries:` entry, never parsed from user input here.
//!
//! Field meanings follow Flagger's `Canary` (`spec.analysis` in particular), so a Flagger
//! user recognises every knob. The few derived values the machine needs (the effective
//! max weight, the next step, the strategy) are methods here, next to the fields they
//! read, and reproduce Flagger's `maxWeight`/`nextStepWeight` exactly.
//!
//! Nothing in this file does IO; URLs, timeouts and metadata are carried as data for the
//! driver, which makes the calls.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The configuration's vocabulary, which the machine decides with.
pub use crate::config::{HookKind, JudgeSpec, OnInconclusive, Promotion};

/// Flagger's total weight: weights are percentages of traffic.
pub const TOTAL_WEIGHT: u8 = 100;

/// One canary, as the machine sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanarySpec {
    /// The canary's name: used in events and webhook payloads so users can tell runs apart.
    pub name: String,
    /// Flagger's `skipAnalysis`: promote a new revision without analysing it (and cancel
    /// and promote a run in progress when it is switched on mid-run).
    pub skip_analysis: bool,
    /// How a canary that passed its analysis becomes the primary (weir's own choice:
    /// there is no orchestrator to copy a pod spec to).
    pub promotion: Promotion,
    /// How long a webhook promotion may wait for the promote hooks and for the primary to
    /// report the new revision and be ready before the run is marked Failed.
    pub progress_deadline_ms: u64,
    /// Flagger's `analysis:` block.
    pub analysis: AnalysisSpec,
}

/// Flagger's `CanaryAnalysis`, reduced to what the machine decides on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisSpec {
    /// Time between two ticks; Flagger's `interval`. A tick is also due at once after a
    /// transition that must not wait (a new revision to confirm, a rollback decided,
    /// a manual command).
    pub interval_ms: u64,
    /// Failed checks tolerated before a rollback; 0 behaves as 1, as in Flagger.
    pub threshold: u32,
    /// Highest canary weight of a progressive run; 0 means 100, as in Flagger.
    pub max_weight: u8,
    /// Weight added at each successful tick; 0 with `step_weights` set uses those instead.
    pub step_weight: u8,
    /// Explicit weights to walk through (Flagger's `stepWeights`); the last one (capped at
    /// 100) is the max weight.
    pub step_weights: Vec<u8>,
    /// With `promotion: webhook`, weight moved back to the primary per tick; 0 moves it all
    /// at once. Ignored with `promotion: swap` (the swap moves everything at once).
    pub step_weight_promotion: u8,
    /// Number of analysis iterations for A/B testing (with `has_match`) and blue/green.
    pub iterations: u32,
    /// Whether `match:` rules are configured: with `iterations` this selects A/B testing,
    /// where matching requests go to the canary and the rest stay on the primary.
    pub has_match: bool,
    /// Mirror traffic to the canary: one mirrored tick before the first weight step in a
    /// canary run, or mirroring for all iterations of a blue/green run.
    pub mirror: bool,
    /// Percentage of requests mirrored while mirroring; `None` mirrors all of them.
    pub mirror_weight: Option<u8>,
    /// Whether `sessionAffinity` is configured: the router then pins clients while the
    /// canary gets weighted traffic.
    pub session_affinity: bool,
    /// Metric checks run at every analysis tick.
    pub metrics: Vec<MetricSpec>,
    /// Webhooks, in the order the user wrote them (Flagger calls hooks of one type in
    /// that order).
    pub webhooks: Vec<WebhookSpec>,
}

/// Which way a run moves traffic, chosen from the analysis fields exactly as Flagger does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Strategy {
    /// Progressive weights (`stepWeight`/`maxWeight` or `stepWeights`).
    Canary,
    /// `match` + `iterations`: matching requests go to the canary for N iterations.
    AbTesting,
    /// `iterations` without `match`: no weight shift (optionally mirroring) for N
    /// iterations, then all traffic to the canary for one more analysed tick.
    BlueGreen,
}

impl AnalysisSpec {
    /// The strategy Flagger would run with these fields.
    pub fn strategy(&self) -> Strategy {
        if self.iterations > 0 {
            if self.has_match {
                Strategy::AbTesting
            } else {
                Strategy::BlueGreen
            }
        } else {
            Strategy::Canary
        }
    }

    /// Failed checks that trigger a rollback (Flagger's default is 1).
    pub fn effective_threshold(&self) -> u32 {
        self.threshold.max(1)
    }

    /// Flagger's `maxWeight()`: the last step weight (capped at 100) when `stepWeights` is
    /// set, else `maxWeight`, else 100. weir also caps `maxWeight` at 100 so an out-of-range
    /// value cannot leave a run stepping forever below an unreachable maximum.
    pub fn max_weight(&self) -> u8 {
        if let Some(&last) = self.step_weights.last() {
            last.min(TOTAL_WEIGHT)
        } else if self.max_weight > 0 {
            self.max_weight.min(TOTAL_WEIGHT)
        } else {
            TOTAL_WEIGHT
        }
    }

    /// Flagger's `nextStepWeight()`: the weight to add from `canary_weight`. `stepWeight`
    /// wins when set; with `stepWeights`, the step to the next listed weight, never past 100;
    /// at 100 it returns 1 so that the run still reaches the promotion branch. 0 means the
    /// canary strategy cannot move (the config loader rejects such a spec).
    pub fn next_step_weight(&self, canary_weight: u8) -> u8 {
        if self.step_weight > 0 || self.step_weights.is_empty() {
            return self.step_weight;
        }
        let current = u32::from(canary_weight);
        let max_step = u32::from(TOTAL_WEIGHT).saturating_sub(current);
        if max_step == 0 {
            return 1;
        }
        let steps = &self.step_weights;
        let step = if current == 0 {
            steps.first().map_or(0, |&w| u32::from(w)).min(max_step)
        } else {
            steps
                .windows(2)
                .find(|pair| u32::from(pair[0]) == current)
                .map_or(max_step, |pair| {
                    u32::from(pair[1]).saturating_sub(current).min(max_step)
                })
        };
        // `step` ≤ max_step ≤ 100, so it always fits.
        u8::try_from(step).unwrap_or(TOTAL_WEIGHT)
    }
}

impl AnalysisSpec {
    /// The canary weights a canary-strategy run walks through, as the machine steps
    /// them from 0 (each step adds [`next_step_weight`](Self::next_step_weight) until
    /// the max weight is reached; the last may overshoot it, as in Flagger). Empty for
    /// A/B and blue/green, whose plan is `iterations`, and for a spec that cannot move.
    pub fn weight_plan(&self) -> Vec<u8> {
        let mut plan = Vec::new();
        if self.strategy() != Strategy::Canary {
            return plan;
        }
        let max = self.max_weight();
        let mut w: u8 = 0;
        // Every step adds at least 1, so 100 steps reach any max.
        while w < max && plan.len() <= usize::from(TOTAL_WEIGHT) {
            let step = self.next_step_weight(w);
            if step == 0 {
                return Vec::new();
            }
            w = w.saturating_add(step).min(TOTAL_WEIGHT);
            plan.push(w);
        }
        plan
    }
}

/// One metric check (Flagger's `metrics[]` entry with its `thresholdRange`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricSpec {
    /// Metric name (`request-success-rate`, `request-duration`, or a custom query's name):
    /// results are matched to checks by this name.
    pub name: String,
    /// Lowest acceptable value (`thresholdRange.min`).
    pub min: Option<f64>,
    /// Highest acceptable value (`thresholdRange.max`).
    pub max: Option<f64>,
    /// Window the driver queries the value over.
    pub interval_ms: u64,
    /// `dryRun`: measured, shown and exported, never a failed check.
    #[serde(default)]
    pub dry_run: bool,
    /// The sequential judge: its checks may be Inconclusive, which holds the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<crate::config::JudgeSpec>,
}

impl MetricSpec {
    /// Judges a measured value against the range, with Flagger's messages (`95.00 < 99`).
    /// No value is a failure: weir never passes a check it could not measure (the driver
    /// reports "not enough traffic" the same way).
    pub fn evaluate(&self, value: Option<f64>) -> Result<(), String> {
        let Some(v) = value else {
            return Err("no value".to_string());
        };
        if !v.is_finite() {
            return Err(format!("value {v} is not a number"));
        }
        if let Some(min) = self.min {
            if v < min {
                return Err(format!("{v:.2} < {min}"));
            }
        }
        if let Some(max) = self.max {
            if v > max {
                return Err(format!("{v:.2} > {max}"));
            }
        }
        Ok(())
    }
}

/// One webhook (Flagger's `webhooks[]` entry).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookSpec {
    /// Hook name, shown in events ("waiting for approval from <name>").
    pub name: String,
    /// When the hook is called and what its answer means (Flagger's `type`).
    #[serde(rename = "type")]
    pub kind: HookKind,
    /// Where the driver POSTs the payload.
    pub url: String,
    /// Per-call timeout for the driver (Flagger's default is 10s; the loader fills it).
    pub timeout_ms: u64,
    /// Sent as the payload's `metadata`.
    pub metadata: BTreeMap<String, String>,
}
