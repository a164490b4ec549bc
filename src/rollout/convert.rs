//! From configuration to the machine, and from the machine's commands to route writes.
//!
//! Two directions, both pure:
//! - [`canary_def`]: a validated `canaries[]` entry ([`CanaryConfig`]) → the
//!   [`CanarySpec`] the machine decides on, plus what only the driver needs (the
//!   analysis `match` block, the `sessionAffinity` block, how each metric is measured,
//!   webhook retries, data planes).
//! - [`apply_change`]: a [`RouteChange`] (the driver's resolved form of a machine
//!   [`Command::SetTraffic`](super::machine::Command) or `SwapSlots`) → the edit of the
//!   route's raw definition. The same function runs inside the in-process table store's
//!   write and, for a remote data plane, on the route read over the API before the
//!   PATCH, so one proxy and a fleet are written identically.
//!
//! The route of a canary is owned by the engine for these fields: `canaryWeight`,
//! `match`, `mirror` (its weight and on/off; the body and in-flight limits a user set are
//! kept), `sessionAffinity` and `affinityState` (only when the analysis has a
//! `sessionAffinity` block), and the `primary`/`canary` names at a swap.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::spec::{AnalysisSpec, CanarySpec, MetricSpec, WebhookSpec, TOTAL_WEIGHT};
use crate::config::affinity::advance_affinity_state;
pub use crate::config::canary_defaults::{
    DEFAULT_HOOK_TIMEOUT, DEFAULT_MIN_REQUESTS, DEFAULT_THRESHOLD, DURATION, SUCCESS_RATE,
};
use crate::config::raw::{RawAffinity, RawAffinityState, RawMatch, RawMirror, RawRoute};
use crate::config::CanaryConfig;
pub use crate::config::MetricKind;

/// The `namespace` of webhook payloads and of `{{ namespace }}` in queries: weir has no
/// namespaces, Flagger receivers and pasted queries expect one.
pub const NAMESPACE: &str = crate::config::template::NAMESPACE;

/// Everything the engine runs one canary with.
#[derive(Clone, Debug, PartialEq)]
pub struct CanaryDef {
    /// What the pure machine decides on.
    pub spec: CanarySpec,
    /// The route whose traffic moves.
    pub route: String,
    /// Poll the slots' `revisionPath` for the revision (else the endpoint list is the
    /// revision: a changed list starts a run).
    pub watch_revision: bool,
    /// Control API URLs of the remote proxies to drive; empty = this process.
    pub data_planes: Vec<String>,
    /// Bearer token for the remote data planes (read from `dataPlaneTokenFile`).
    pub data_plane_token: Option<String>,
    /// The analysis `match` block, written to the route while an A/B run is active.
    pub matches: Vec<RawMatch>,
    /// The analysis `sessionAffinity` block, written to the route during a run.
    pub session_affinity: Option<RawAffinity>,
    /// How each metric of `spec.analysis.metrics` is measured (same order).
    pub metrics: Vec<MetricSource>,
    /// Extra attempts of each webhook of `spec.analysis.webhooks` (same order).
    pub hook_retries: Vec<u32>,
    /// The `caFile` of each webhook of `spec.analysis.webhooks` (same order).
    pub hook_ca_files: Vec<Option<std::path::PathBuf>>,
    /// The `caFile` of each metric of `spec.analysis.metrics` (same order).
    pub metric_ca_files: Vec<Option<std::path::PathBuf>>,
    /// CA certificates trusted for `https://` data planes (`dataPlaneCaFile`).
    pub data_plane_ca_file: Option<std::path::PathBuf>,
}

/// How one metric is measured.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricSource {
    /// Built-in or custom.
    pub kind: MetricKind,
    /// Fewer requests than this in the window is a failed check (built-ins only);
    /// 0 lets an empty window pass.
    pub min_requests: u64,
    /// The metric template the kind came from, named in the reasons of its checks.
    pub template: Option<String>,
    /// Values of `{{ variables.X }}` (`templateVariables`).
    pub variables: BTreeMap<String, String>,
    /// Bearer token sent to the provider.
    pub token: Option<crate::config::Secret>,
    /// Extra request headers to the provider: names and value templates.
    pub headers: Vec<(String, String)>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Builds the engine's view of one validated canary: every value was checked and
/// typed by the loader, so this only maps units and shapes.
pub fn canary_def(cfg: &CanaryConfig) -> CanaryDef {
    let a = &cfg.analysis;
    let metrics = a
        .metrics
        .iter()
        .map(|m| MetricSpec {
            name: m.name.clone(),
            min: m.min,
            max: m.max,
            interval_ms: ms(m.interval),
            dry_run: m.dry_run,
            judge: m.judge,
        })
        .collect();
    let sources = a
        .metrics
        .iter()
        .map(|m| MetricSource {
            kind: m.kind.clone(),
            min_requests: m.min_requests,
            template: m.template.clone(),
            variables: m.variables.clone(),
            token: m.token.clone(),
            headers: m.headers.clone(),
        })
        .collect();
    let webhooks = a
        .webhooks
        .iter()
        .map(|w| WebhookSpec {
            name: w.name.clone(),
            kind: w.kind,
            url: w.url.clone(),
            timeout_ms: ms(w.timeout),
            metadata: w.metadata.clone(),
        })
        .collect();
    let analysis = AnalysisSpec {
        interval_ms: ms(cfg.interval),
        threshold: a.threshold,
        max_weight: a.max_weight,
        step_weight: a.step_weight,
        step_weights: a.step_weights.clone(),
        step_weight_promotion: a.step_weight_promotion,
        iterations: a.iterations,
        has_match: !a.matches.is_empty(),
        mirror: a.mirror,
        mirror_weight: a.mirror_weight,
        session_affinity: a.session_affinity.is_some(),
        metrics,
        webhooks,
    };
    CanaryDef {
        spec: CanarySpec {
            name: cfg.name.clone(),
            skip_analysis: cfg.skip_analysis,
            promotion: cfg.promotion,
            progress_deadline_ms: ms(cfg.progress_deadline),
            analysis,
        },
        route: cfg.route.clone(),
        watch_revision: cfg.watch_revision,
        data_planes: cfg.data_planes.clone(),
        data_plane_token: cfg.data_plane_token.clone(),
        matches: a.matches.raw.clone(),
        session_affinity: a.session_affinity.clone().map(|mut b| {
            default_primary_max_age(&mut b, cfg.interval);
            b
        }),
        metrics: sources,
        hook_retries: a.webhooks.iter().map(|w| w.retries).collect(),
        hook_ca_files: a.webhooks.iter().map(|w| w.ca_file.clone()).collect(),
        metric_ca_files: a.metrics.iter().map(|m| m.ca_file.clone()).collect(),
        data_plane_ca_file: cfg.data_plane_ca_file.clone(),
    }
}

/// A route write the driver applies to every data plane: the resolved form of the
/// machine's traffic commands, absolute (applying it twice is applying it once), so a
/// write that failed half-way through a fleet is simply retried.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum RouteChange {
    /// The machine's `SetTraffic`, with the cookie values the engine chose.
    Traffic {
        /// Percent of unmatched, unpinned requests to the canary.
        canary_weight: u8,
        /// Write the analysis `match` block (A/B run active) or clear it.
        match_active: bool,
        /// Mirror this percentage to the canary; `None` turns mirroring off.
        mirror_weight: Option<u8>,
        /// Pin clients with the analysis `sessionAffinity` cookies.
        affinity_active: bool,
        /// Cookie values, the same on every replica (only with session affinity).
        affinity_state: Option<RawAffinityState>,
    },
    /// The machine's `SwapSlots`: the named backends become primary and canary, at
    /// weight 0, match and mirror off. Names are absolute so a retry cannot swap back.
    Swap {
        /// The new primary (the canary that passed its analysis).
        primary: String,
        /// The new idle slot (the old primary).
        canary: String,
        /// Cookie values after the run (the run's canary value kept as previous).
        affinity_state: Option<RawAffinityState>,
    },
}

impl RouteChange {
    /// The canary weight the route has after this change.
    pub fn canary_weight(&self) -> u8 {
        match self {
            RouteChange::Traffic { canary_weight, .. } => *canary_weight,
            RouteChange::Swap { .. } => 0,
        }
    }
}

/// Whether a mirror block carries limits the user set (kept when mirroring stops).
fn has_limits(m: &RawMirror) -> bool {
    m.max_body_bytes.is_some() || m.max_in_flight.is_some()
}

fn set_mirror(route: &mut RawRoute, mirror_weight: Option<u8>) {
    route.mirror = match (mirror_weight, route.mirror.take()) {
        (Some(w), old) => Some(RawMirror {
            enabled: None,
            weight: Some(i64::from(w)),
            ..old.unwrap_or_default()
        }),
        (None, Some(old)) if has_limits(&old) => Some(RawMirror {
            enabled: Some(false),
            weight: None,
            ..old
        }),
        (None, _) => None,
    };
}

/// The primary pin's value changes at every step, so its cookie lives one analysis
/// interval (whole seconds, at least 1) unless the user chose a `primaryMaxAge`: a
/// longer one would outlive the step's value, and the client would draw again mid-step.
fn default_primary_max_age(block: &mut RawAffinity, interval: Duration) {
    if block.primary_max_age.is_none() {
        let secs = interval.as_millis().div_ceil(1000).clamp(1, 400 * 86_400);
        block.primary_max_age = Some(i64::try_from(secs).unwrap_or(1));
    }
}

/// The session-affinity fields: the analysis block while pinning, and after the run as
/// long as the route has it, so that a client still presenting the run's canary cookie
/// gets it deleted (`Max-Age=-1`) — with weight 0 the block pins nobody, it only
/// expires. Without a block in the analysis the route's own affinity is left alone,
/// but for a missing `primaryMaxAge`, which becomes the interval as above.
fn set_affinity(
    route: &mut RawRoute,
    def: &CanaryDef,
    active: bool,
    state: &Option<RawAffinityState>,
) {
    let Some(block) = &def.session_affinity else {
        if let Some(own) = route.session_affinity.as_mut() {
            default_primary_max_age(own, Duration::from_millis(def.spec.analysis.interval_ms));
        }
        return;
    };
    if active || route.session_affinity.is_some() {
        route.session_affinity = Some(block.clone());
        route.affinity_state = state.clone().filter(|s| *s != RawAffinityState::default());
    } else {
        route.affinity_state = None;
    }
}

/// Applies `change` to the route's raw definition (see the module docs for the fields).
pub fn apply_change(route: &mut RawRoute, change: &RouteChange, def: &CanaryDef) {
    match change {
        RouteChange::Traffic {
            canary_weight,
            match_active,
            mirror_weight,
            affinity_active,
            affinity_state,
        } => {
            route.canary_weight = Some(i64::from((*canary_weight).min(TOTAL_WEIGHT)));
            route.matches = if *match_active {
                def.matches.clone()
            } else {
                Vec::new()
            };
            set_mirror(route, *mirror_weight);
            set_affinity(
                route,
                def,
                *affinity_active && *canary_weight > 0,
                affinity_state,
            );
        }
        RouteChange::Swap {
            primary,
            canary,
            affinity_state,
        } => {
            route.primary = primary.clone();
            route.canary = Some(canary.clone());
            route.canary_weight = Some(0);
            route.matches = Vec::new();
            set_mirror(route, None);
            set_affinity(route, def, false, affinity_state);
        }
    }
}

/// The cookie values after the weight moves from `old_weight` to `new_weight`, chosen
/// by the engine (not the table store) so every replica of a fleet gets the same ones:
/// a run starts (0 → >0) with new canary and primary values; a step (a change between
/// two non-zero weights) gets a new primary value, so the primary pins of the last step
/// lapse and those clients draw again at the new weight; the run ends (>0 → 0) keeping
/// its canary value as `previousCanaryValue`, expired on sight.
pub fn next_affinity_state(
    prev: &RawAffinityState,
    old_weight: u8,
    new_weight: u8,
    rng: &mut impl Rng,
) -> RawAffinityState {
    let mut s = prev.clone();
    advance_affinity_state(&mut s, old_weight.into(), new_weight.into(), rng);
    s
}

/// The JSON merge patch (RFC 7396) that turns `before` into `after`: changed fields with
/// their new value, removed fields as `null`, objects diffed key by key so that a merge
/// yields exactly `after`. A remote data plane is written with
/// `PATCH /api/v1/routes/{name}` and this body; an empty object means no change.
pub fn merge_diff(before: &serde_json::Value, after: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let mut out = serde_json::Map::new();
            for (k, av) in a {
                match b.get(k) {
                    Some(bv) if bv == av => {}
                    Some(bv) if bv.is_object() && av.is_object() => {
                        out.insert(k.clone(), merge_diff(bv, av));
                    }
                    _ => {
                        out.insert(k.clone(), av.clone());
                    }
                }
            }
            for k in b.keys() {
                if !a.contains_key(k) {
                    out.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(out)
        }
        _ => after.clone(),
    }
}

/// The revision of a backend when revisions are not watched: its endpoint list, so that
/// deploying to the slot (a config or API change of its endpoints) is a new release.
pub fn endpoints_revision(endpoints: &[String]) -> String {
    // FNV-1a: stable across processes and versions (unlike `DefaultHasher`).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for e in endpoints {
        for b in e.bytes().chain(std::iter::once(b',')) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("endpoints-{h:016x}")
}

/// Flagger's `checksum` of a run: stable for one revision of one canary.
pub fn checksum(name: &str, revision: Option<&str>) -> String {
    let mut s = BTreeMap::new();
    s.insert("name", name);
    s.insert("revision", revision.unwrap_or(""));
    let joined: Vec<String> = s.iter().map(|(k, v)| format!("{k}={v}")).collect();
    endpoints_revision(&joined)
        .trim_start_matches("endpoints-")
        .to_string()
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
