//! The validated, typed form of a `canaries:` entry, and the kinds (hooks, metrics,
//! promotion) named once as enums.

use super::canary::defaults::{BASELINE_COMPARISON, DURATION, SUCCESS_RATE};
use super::*;
use crate::stats::compare::CompareParams;

/// A canary definition, validated and typed: every duration parsed, every kind an
/// enum, the `match` rules compiled. The engine maps it to its spec without reading
/// a raw string again.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryConfig {
    /// What the user wrote (the API shows it back).
    pub raw: RawCanary,
    /// Unique canary name (events, API paths, state files).
    pub name: String,
    /// The route whose traffic the canary moves.
    pub route: String,
    /// Start a run when a slot's `revisionPath` reports a new revision.
    pub watch_revision: bool,
    /// Promote a new revision without analysing it.
    pub skip_analysis: bool,
    /// How a canary that passed becomes the primary.
    pub promotion: Promotion,
    /// Time between two analysis ticks (`analysis.interval`, default 1m).
    pub interval: Duration,
    /// Time a webhook promotion may take (default 600s).
    pub progress_deadline: Duration,
    /// Control API URLs of the remote proxies to drive, without a trailing `/`;
    /// empty drives this process.
    pub data_planes: Vec<String>,
    /// Bearer token for the remote data planes, read from `dataPlaneTokenFile`.
    pub data_plane_token: Option<String>,
    /// CA certificates trusted for `https://` data planes (`dataPlaneCaFile`).
    pub data_plane_ca_file: Option<std::path::PathBuf>,
    /// Where this canary's events are notified (`analysis.alerts`).
    pub alerts: Vec<super::alerts::AlertRule>,
    /// Flagger's `analysis:` block.
    pub analysis: CanaryAnalysis,
}

/// Flagger's `analysis:` block, validated, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryAnalysis {
    /// Failed checks tolerated before a rollback (1..=1000, default 5).
    pub threshold: u32,
    /// Highest weight of a progressive run (default 50).
    pub max_weight: u8,
    /// Weight added per successful tick; 0 when not set.
    pub step_weight: u8,
    /// Explicit weights, increasing, each capped at 100.
    pub step_weights: Vec<u8>,
    /// Weight moved back to the primary per tick with `promotion: webhook`; 0 when not set.
    pub step_weight_promotion: u8,
    /// A/B and blue/green iterations; 0 selects the canary strategy.
    pub iterations: u32,
    /// The A/B `match` block, compiled.
    pub matches: CanaryMatches,
    /// Mirror traffic to the canary.
    pub mirror: bool,
    /// Percent of requests mirrored; `None` mirrors all.
    pub mirror_weight: Option<u8>,
    /// The `sessionAffinity` block (checked: it compiles), written to the route
    /// during a run.
    pub session_affinity: Option<RawAffinity>,
    /// Metric checks, in the order written.
    pub metrics: Vec<CanaryMetric>,
    /// Webhooks, in the order written (hooks of one type are called in that order).
    pub webhooks: Vec<CanaryWebhook>,
}

/// An analysis `match` block: the rules as written (what is put on the route while
/// an A/B run is active) and as compiled from them.
#[derive(Debug, Clone, Default)]
pub struct CanaryMatches {
    /// The rules as written, copied onto the route.
    pub raw: Vec<RawMatch>,
    /// The same rules compiled (one per `raw` entry).
    pub rules: Vec<MatchRule>,
}

impl CanaryMatches {
    /// Whether no rule is set (no A/B testing).
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }
}

/// The compiled rules are a function of the written ones (regexes have no equality).
impl PartialEq for CanaryMatches {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

/// How the analysed canary becomes the primary (`promotion:`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Promotion {
    /// One atomic table swap: the canary backend becomes the primary and the old primary
    /// becomes the idle slot for the next release. `stepWeightPromotion` means nothing here:
    /// all traffic moves to the new version in that one swap.
    #[default]
    Swap,
    /// Call the `promote` webhooks (which redeploy the primary), wait until the primary
    /// reports the canary's revision and is ready, then route traffic back to the primary
    /// by `stepWeightPromotion` per tick (Flagger's model, with the user doing the copy).
    Webhook,
}

impl Promotion {
    /// Every value, in the order the error message lists them.
    pub const ALL: [Promotion; 2] = [Promotion::Swap, Promotion::Webhook];

    /// The name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Promotion::Swap => "swap",
            Promotion::Webhook => "webhook",
        }
    }
}

/// One metric check, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryMetric {
    /// The name results are matched to checks by.
    pub name: String,
    /// Where the value comes from.
    pub kind: MetricKind,
    /// Lowest acceptable value (`thresholdRange.min`).
    pub min: Option<f64>,
    /// Highest acceptable value (`thresholdRange.max`).
    pub max: Option<f64>,
    /// Window of the check (default: the analysis interval).
    pub interval: Duration,
    /// Fewer requests than this in the window fail the check (built-ins; default 10).
    pub min_requests: u64,
    /// CA certificates trusted for an `https://` Prometheus (`caFile`).
    pub ca_file: Option<std::path::PathBuf>,
    /// Measured and shown, never counted as a failed check (`dryRun: true`).
    pub dry_run: bool,
    /// The `metricTemplates` entry the kind came from (`templateRef.name`), for messages.
    pub template: Option<String>,
    /// Values of `{{ variables.X }}` (`templateVariables`), each one used checked.
    pub variables: BTreeMap<String, String>,
    /// Bearer token sent to the provider (the template's `tokenFile`).
    pub token: Option<super::alerts::Secret>,
    /// Extra request headers to the provider (the template's `headers`: names and value
    /// templates).
    pub headers: Vec<(String, String)>,
    /// The sequential judge (`judge:`), for the built-ins: Pass, Fail or Inconclusive.
    pub judge: Option<super::judge::JudgeSpec>,
}

/// Where a metric's value comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum MetricKind {
    /// Percent of non-5xx answers of the canary (or mirror) role, from the proxies' stats
    /// (`request-success-rate`).
    SuccessRate,
    /// P99 latency in ms of the canary (or mirror) role, from the proxies' stats
    /// (`request-duration`).
    Duration,
    /// A PromQL query against a Prometheus server: an inline `query`, or a `prometheus`
    /// metric template (the variables of `crate::config::template` substituted).
    Prometheus {
        /// Server base URL without a trailing `/`, e.g. `http://127.0.0.1:9090`.
        url: String,
        /// The query template, its syntax and variables checked.
        query: String,
    },
    /// A JSON document from a URL, the value at a JSONPath (a `web` metric template).
    Web(super::templates::WebMetric),
    /// The canary against the primary in the same window (`baseline-comparison`): the
    /// judge's score, 0..100.
    BaselineComparison(CompareParams),
}

impl MetricKind {
    /// The built-in metrics by name.
    pub const BUILTIN: [(&'static str, MetricKind); 3] = [
        (SUCCESS_RATE, MetricKind::SuccessRate),
        (DURATION, MetricKind::Duration),
        (
            BASELINE_COMPARISON,
            MetricKind::BaselineComparison(CompareParams::DEFAULT),
        ),
    ];

    /// The built-in metric of that name.
    pub fn builtin(name: &str) -> Option<MetricKind> {
        Self::BUILTIN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, k)| k.clone())
    }
}

/// One webhook, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryWebhook {
    /// Hook name, shown in events.
    pub name: String,
    /// When it is called and what its answer means (`type`, default `rollout`).
    pub kind: HookKind,
    /// The `http://` or `https://` URL the payload is POSTed to.
    pub url: String,
    /// Per-call timeout (default 10s, Flagger's).
    pub timeout: Duration,
    /// Extra attempts after a failed call (0..=10).
    pub retries: u32,
    /// Sent as the payload's `metadata`.
    pub metadata: BTreeMap<String, String>,
    /// Its failures send no notification (`muteAlert`).
    pub mute_alert: bool,
    /// CA certificates trusted for an `https://` URL.
    pub ca_file: Option<std::path::PathBuf>,
}

/// Flagger's webhook types, plus weir's `promote`. Serialised as in Flagger
/// (`confirm-rollout`, `pre-rollout`, ...).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HookKind {
    /// Gate before a new revision starts: failing holds the run in Waiting.
    ConfirmRollout,
    /// Called once before the first traffic step: failing counts a failed check.
    PreRollout,
    /// Called at every analysis tick before the metrics: failing counts a failed check
    /// (Flagger's default type).
    #[default]
    Rollout,
    /// Gate before every weight increase: failing holds the weight, counts nothing.
    ConfirmTrafficIncrease,
    /// Gate before promotion: failing holds the run in WaitingPromotion.
    ConfirmPromotion,
    /// Called after the run ends (Succeeded or Failed); its answer changes nothing.
    PostRollout,
    /// Asked at every tick of an analysis: a *passing* answer rolls the run back.
    Rollback,
    /// Receives every event; its answer changes nothing.
    Event,
    /// weir's own: with `promotion: webhook`, asked to redeploy the primary with the
    /// canary's revision; gating, retried every tick until the progress deadline.
    Promote,
}

impl HookKind {
    /// Every type, in the order the error message lists them.
    pub const ALL: [HookKind; 9] = [
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

    /// The name in the configuration and in webhook payloads.
    pub fn name(self) -> &'static str {
        match self {
            HookKind::ConfirmRollout => "confirm-rollout",
            HookKind::PreRollout => "pre-rollout",
            HookKind::Rollout => "rollout",
            HookKind::ConfirmTrafficIncrease => "confirm-traffic-increase",
            HookKind::ConfirmPromotion => "confirm-promotion",
            HookKind::PostRollout => "post-rollout",
            HookKind::Rollback => "rollback",
            HookKind::Event => "event",
            HookKind::Promote => "promote",
        }
    }

    /// The type of that name.
    pub fn parse(name: &str) -> Option<HookKind> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether this answer ends the tick, so a driver calling the plan in order may stop
    /// there: a rollback hook ends it when it passes (the run is rolled back), every other
    /// planned hook when it fails (the gate holds or the check failed).
    pub fn halts(self, passed: bool) -> bool {
        match self {
            HookKind::Rollback => passed,
            _ => !passed,
        }
    }
}
