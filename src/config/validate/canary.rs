//! `canaries:` entries: Flagger's `Canary` checked against the table it drives.

use super::*;

/// Defaults and names of `canaries:` the engine shares.
pub mod defaults {
    use std::time::Duration;

    /// Name of the built-in success-rate metric (percent of non-5xx answers).
    pub const SUCCESS_RATE: &str = "request-success-rate";
    /// Name of the built-in latency metric (P99 in milliseconds).
    pub const DURATION: &str = "request-duration";
    /// Default `minRequests` of a metric: fewer requests in the window fail the check.
    pub const DEFAULT_MIN_REQUESTS: u64 = 10;
    /// Default webhook timeout (Flagger's).
    pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default failed-checks threshold when `threshold` is not set.
    pub const DEFAULT_THRESHOLD: u32 = 5;
    /// Default analysis interval (Flagger's).
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
    /// Default progress deadline of a webhook promotion (Flagger's).
    pub const DEFAULT_PROGRESS_DEADLINE: Duration = Duration::from_secs(600);
}
use defaults::*;

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
    /// A PromQL query against a Prometheus server (`{{ name }}`, `{{ interval }}`,
    /// `{{ route }}`, `{{ namespace }}` substituted).
    Prometheus {
        /// Server base URL without a trailing `/`, e.g. `http://127.0.0.1:9090`.
        url: String,
        /// The query template.
        query: String,
    },
}

impl MetricKind {
    /// The built-in metrics by name.
    pub const BUILTIN: [(&'static str, MetricKind); 2] = [
        (SUCCESS_RATE, MetricKind::SuccessRate),
        (DURATION, MetricKind::Duration),
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
    /// The `http://` URL the payload is POSTed to.
    pub url: String,
    /// Per-call timeout (default 10s, Flagger's).
    pub timeout: Duration,
    /// Extra attempts after a failed call (0..=10).
    pub retries: u32,
    /// Sent as the payload's `metadata`.
    pub metadata: BTreeMap<String, String>,
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

/// A validated weight or count: in range by the time it is converted.
fn small<T: TryFrom<i64>>(n: i64, fallback: T) -> T {
    T::try_from(n).unwrap_or(fallback)
}

pub(super) fn validate_canaries(
    raw: &[RawCanary],
    table: &RawTable,
    base: &Path,
    errs: &mut Errors,
) -> Vec<CanaryConfig> {
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    let mut routes_taken = BTreeSet::new();
    for (i, c) in raw.iter().enumerate() {
        let p = format!("canaries[{i}]");
        let before = errs.0.len();
        if !valid_name(&c.name) {
            errs.push(
                format!("{p}.name"),
                "canary names use letters, digits, '-', '_' and '.' only",
            );
        } else if !names.insert(c.name.clone()) {
            errs.push(
                format!("{p}.name"),
                format!("duplicate canary name {:?}", c.name),
            );
        }
        match table.routes.iter().find(|r| r.name == c.route) {
            None => errs.push(format!("{p}.route"), format!("unknown route {:?}", c.route)),
            Some(r) => {
                if r.canary.is_none() {
                    errs.push(
                        format!("{p}.route"),
                        format!("route {:?} has no canary backend", c.route),
                    );
                }
                if !routes_taken.insert(c.route.clone()) {
                    errs.push(
                        format!("{p}.route"),
                        format!("route {:?} is already driven by another canary", c.route),
                    );
                }
            }
        }
        let promotion = match c.promotion.as_deref() {
            None => Promotion::Swap,
            Some(name) => Promotion::ALL
                .into_iter()
                .find(|k| k.name() == name)
                .unwrap_or_else(|| {
                    errs.push(
                        format!("{p}.promotion"),
                        format!("expected swap or webhook (got {name:?})"),
                    );
                    Promotion::Swap
                }),
        };
        for (j, u) in c.data_planes.iter().enumerate() {
            if u.parse::<http::Uri>()
                .ok()
                .and_then(|u| u.host().map(|_| ()))
                .is_none()
                || !u.starts_with("http")
            {
                errs.push(
                    format!("{p}.dataPlanes[{j}]"),
                    format!("expected a URL such as http://10.0.0.2:9901 (got {u:?})"),
                );
            }
        }
        let a = &c.analysis;
        let ap = format!("{p}.analysis");
        let interval = errs.duration(&format!("{ap}.interval"), &a.interval, DEFAULT_INTERVAL);
        let progress_deadline = errs.duration(
            &format!("{p}.progressDeadline"),
            &c.progress_deadline,
            DEFAULT_PROGRESS_DEADLINE,
        );
        let threshold = errs.int_in(
            &format!("{ap}.threshold"),
            a.threshold,
            1,
            1000,
            i64::from(DEFAULT_THRESHOLD),
        );
        // The machine reads 0 as "not set" for maxWeight and stepWeight.
        let max_weight = a
            .max_weight
            .map(|_| errs.int_in(&format!("{ap}.maxWeight"), a.max_weight, 1, 100, 50));
        let step_weight = a
            .step_weight
            .map(|_| errs.int_in(&format!("{ap}.stepWeight"), a.step_weight, 1, 100, 10));
        let step_weight_promotion = errs.int_in(
            &format!("{ap}.stepWeightPromotion"),
            a.step_weight_promotion,
            0,
            100,
            0,
        );
        let iterations = errs.int_in(&format!("{ap}.iterations"), a.iterations, 0, 100_000, 0);
        let mirror_weight = a
            .mirror_weight
            .map(|_| errs.int_in(&format!("{ap}.mirrorWeight"), a.mirror_weight, 0, 100, 100));
        let mut last = 0;
        for (j, w) in a.step_weights.iter().enumerate() {
            if *w < 1 {
                errs.push(
                    format!("{ap}.stepWeights[{j}]"),
                    format!("must be at least 1 (got {w})"),
                );
            } else if *w <= last {
                errs.push(
                    format!("{ap}.stepWeights[{j}]"),
                    "step weights must increase",
                );
            } else if *w > 100 {
                // Flagger accepts it and never routes more than 100 %; so does weir.
                errs.warn(
                    format!("{ap}.stepWeights[{j}]"),
                    format!("{w} is above 100: capped at 100, as Flagger does"),
                );
            }
            last = *w;
        }
        // Flagger's CRD: `analysis` is oneOf required [iterations], [stepWeight],
        // [stepWeights]; any two of them together are refused there.
        if a.step_weight.is_some() && !a.step_weights.is_empty() {
            errs.push(
                format!("{ap}.stepWeights"),
                "cannot be combined with stepWeight (Flagger's Canary allows one of iterations, stepWeight, stepWeights)",
            );
        }
        if a.iterations.is_some() && (a.step_weight.is_some() || !a.step_weights.is_empty()) {
            let other = if a.step_weight.is_some() {
                "stepWeight"
            } else {
                "stepWeights"
            };
            errs.push(
                format!("{ap}.iterations"),
                format!("cannot be combined with {other} (Flagger's Canary allows one of iterations, stepWeight, stepWeights)"),
            );
        }
        if !a.matches.is_empty() && a.iterations.unwrap_or(0) == 0 {
            errs.push(
                format!("{ap}.iterations"),
                "A/B testing (match) needs iterations > 0",
            );
        }
        if a.mirror == Some(true) && !a.matches.is_empty() {
            errs.push(
                format!("{ap}.mirror"),
                "mirroring cannot be combined with match",
            );
        }
        if a.session_affinity.is_some() && a.iterations.unwrap_or(0) > 0 {
            errs.push(
                format!("{ap}.sessionAffinity"),
                "session affinity works with the canary (weight) strategy, not with iterations",
            );
        }
        let match_rules = compile_matches(&format!("{ap}.match"), &a.matches, errs);
        if let Some(sa) = &a.session_affinity {
            compile_affinity(&format!("{ap}.sessionAffinity"), sa, errs);
        }
        let mut metric_names = BTreeSet::new();
        let mut metrics = Vec::new();
        for (j, m) in a.metrics.iter().enumerate() {
            let mp = format!("{ap}.metrics[{j}]");
            if !metric_names.insert(m.name.clone()) {
                errs.push(
                    format!("{mp}.name"),
                    format!("duplicate metric {:?}", m.name),
                );
            }
            let kind = match (&m.query, &m.prometheus_url) {
                (Some(query), Some(url)) => Some(MetricKind::Prometheus {
                    url: url.trim_end_matches('/').to_string(),
                    query: query.clone(),
                }),
                (Some(_), None) => {
                    errs.push(
                        format!("{mp}.prometheusUrl"),
                        "a custom query needs the Prometheus server URL",
                    );
                    None
                }
                (None, _) => {
                    let kind = MetricKind::builtin(&m.name);
                    if kind.is_none() {
                        let names: Vec<&str> =
                            MetricKind::BUILTIN.iter().map(|(n, _)| *n).collect();
                        errs.push(
                            format!("{mp}.query"),
                            format!(
                                "metric {:?} is not built in ({}); a custom metric needs a query",
                                m.name,
                                names.join(", ")
                            ),
                        );
                    }
                    kind
                }
            };
            match &m.threshold_range {
                None => errs.push(format!("{mp}.thresholdRange"), "required (min and/or max)"),
                Some(t) => {
                    if t.min.is_none() && t.max.is_none() {
                        errs.push(format!("{mp}.thresholdRange"), "set min and/or max");
                    }
                    if let (Some(lo), Some(hi)) = (t.min, t.max) {
                        if lo > hi {
                            errs.push(
                                format!("{mp}.thresholdRange"),
                                format!("min {lo} is above max {hi}"),
                            );
                        }
                    }
                }
            }
            let metric_interval = errs.duration(&format!("{mp}.interval"), &m.interval, interval);
            let min_requests = errs.int_in(
                &format!("{mp}.minRequests"),
                m.min_requests,
                0,
                1_000_000_000,
                DEFAULT_MIN_REQUESTS as i64,
            );
            if let Some(kind) = kind {
                metrics.push(CanaryMetric {
                    name: m.name.clone(),
                    kind,
                    min: m.threshold_range.as_ref().and_then(|t| t.min),
                    max: m.threshold_range.as_ref().and_then(|t| t.max),
                    interval: metric_interval,
                    min_requests: small(min_requests, DEFAULT_MIN_REQUESTS),
                });
            }
        }
        let mut hook_names = BTreeSet::new();
        let mut webhooks = Vec::new();
        for (j, w) in a.webhooks.iter().enumerate() {
            let wp = format!("{ap}.webhooks[{j}]");
            if !hook_names.insert(w.name.clone()) {
                errs.push(
                    format!("{wp}.name"),
                    format!("duplicate webhook {:?}", w.name),
                );
            }
            let kind = match w.kind.as_deref() {
                None => Some(HookKind::Rollout),
                Some(name) => {
                    let kind = HookKind::parse(name);
                    if kind.is_none() {
                        let names: Vec<&str> = HookKind::ALL.iter().map(|k| k.name()).collect();
                        errs.push(
                            format!("{wp}.type"),
                            format!(
                                "unknown webhook type {name:?}; expected one of {}",
                                names.join(", ")
                            ),
                        );
                    }
                    kind
                }
            };
            if kind == Some(HookKind::Promote) && promotion != Promotion::Webhook {
                errs.push(
                    format!("{wp}.type"),
                    "a promote hook needs promotion: webhook",
                );
            }
            let ok_url = w
                .url
                .parse::<http::Uri>()
                .ok()
                .is_some_and(|u| u.scheme_str() == Some("http") && u.host().is_some());
            if !ok_url {
                errs.push(
                    format!("{wp}.url"),
                    format!("expected an http:// URL (got {:?})", w.url),
                );
            }
            let timeout = errs.duration(&format!("{wp}.timeout"), &w.timeout, DEFAULT_HOOK_TIMEOUT);
            let retries = errs.int_in(&format!("{wp}.retries"), w.retries, 0, 10, 0);
            if let Some(kind) = kind {
                webhooks.push(CanaryWebhook {
                    name: w.name.clone(),
                    kind,
                    url: w.url.clone(),
                    timeout,
                    retries: small(retries, 0),
                    metadata: w.metadata.clone(),
                });
            }
        }
        if promotion == Promotion::Webhook && !webhooks.iter().any(|w| w.kind == HookKind::Promote)
        {
            errs.push(
                format!("{p}.promotion"),
                "promotion: webhook needs a webhook of type promote",
            );
        }
        // The canary strategy moves by stepWeight or stepWeights; without either a run
        // could never leave weight 0 (A/B and blue/green move by iterations).
        if c.skip_analysis != Some(true)
            && a.iterations.unwrap_or(0) == 0
            && a.step_weight.is_none()
            && a.step_weights.is_empty()
        {
            errs.push(
                format!("{ap}.stepWeight"),
                "set stepWeight or stepWeights (canary strategy), or iterations (A/B, blue/green)",
            );
        }
        // Revisions are read from the slots' revisionPath: both slots, since a swap
        // exchanges them.
        if let Some(r) = table.routes.iter().find(|r| r.name == c.route) {
            let needs = |why: &str, slot: &str, errs: &mut Errors| {
                let has = table
                    .backends
                    .get(slot)
                    .is_some_and(|b| b.revision_path.is_some());
                if !has && table.backends.contains_key(slot) {
                    errs.push(
                        format!("{p}.{why}"),
                        format!(
                            "backend {slot:?} of route {:?} needs a revisionPath",
                            r.name
                        ),
                    );
                }
            };
            let mut slots = vec![r.primary.clone()];
            slots.extend(r.canary.clone());
            if c.watch_revision == Some(true) {
                for s in &slots {
                    needs("watchRevision", s, errs);
                }
            }
            if promotion == Promotion::Webhook {
                for s in &slots {
                    needs("promotion", s, errs);
                }
            }
        }
        let data_plane_token = match &c.data_plane_token_file {
            None => None,
            Some(f) => match std::fs::read_to_string(base.join(f)) {
                Ok(t) if !t.trim().is_empty() => Some(t.trim().to_string()),
                Ok(_) => {
                    errs.push(format!("{p}.dataPlaneTokenFile"), "the token file is empty");
                    None
                }
                Err(e) => {
                    errs.push(
                        format!("{p}.dataPlaneTokenFile"),
                        format!("cannot read {f}: {e}"),
                    );
                    None
                }
            },
        };
        if errs.0.len() == before {
            out.push(CanaryConfig {
                raw: c.clone(),
                name: c.name.clone(),
                route: c.route.clone(),
                watch_revision: c.watch_revision.unwrap_or(false),
                skip_analysis: c.skip_analysis.unwrap_or(false),
                promotion,
                interval,
                progress_deadline,
                data_planes: c
                    .data_planes
                    .iter()
                    .map(|u| u.trim_end_matches('/').to_string())
                    .collect(),
                data_plane_token,
                analysis: CanaryAnalysis {
                    threshold: small(threshold, DEFAULT_THRESHOLD),
                    max_weight: max_weight.map_or(0, |w| small(w, 100)),
                    step_weight: step_weight.map_or(0, |w| small(w, 100)),
                    // Above 100 was a warning: capped, as Flagger does.
                    step_weights: a
                        .step_weights
                        .iter()
                        .map(|w| small((*w).clamp(0, 100), 100))
                        .collect(),
                    step_weight_promotion: small(step_weight_promotion, 0),
                    iterations: small(iterations, 0),
                    matches: CanaryMatches {
                        raw: a.matches.clone(),
                        rules: match_rules,
                    },
                    mirror: a.mirror.unwrap_or(false),
                    mirror_weight: mirror_weight.map(|w| small(w, 100)),
                    session_affinity: a.session_affinity.clone(),
                    metrics,
                    webhooks,
                },
            });
        }
    }
    out
}
