//! Notifications (DESIGN §12): the canary's events, filtered by each alert's severity,
//! sent to chat services and webhooks in their own JSON (`alertProviders:` and
//! `analysis.alerts`, Flagger's `AlertProvider` and `CanaryAlert`).
//!
//! # Which events, how important
//! Flagger alerts on a few moments of a run, not on every step; weir does the same, and
//! adds what Flagger misses (a failing pre-rollout hook, a stalled rolling update of a
//! slot, an engine that lost its etcd lease):
//!
//! | severity | events (`reason`) |
//! |---|---|
//! | info | `Started`, `Restarted`, `Promoting`, `Succeeded`, `Paused`, `Resumed` |
//! | warn | `WaitingApproval`, `TrafficIncreaseHeld`, `WaitingPromotion`, `CheckFailed` (a metric, a rollout or pre-rollout hook; not a hook with `muteAlert`), `PromoteHookFailed`, `Aborted` |
//! | error | `RolledBack`, `PromotionFailed`, `RollingUpdateStalled`, `LeaseLost` |
//!
//! An alert of severity `info` sends every row, `warn` the warn and error rows, `error`
//! the error row ([`sends`]).
//!
//! # Never in the way of a release
//! The engine hands a notification over with [`Alerter::on_event`], which renders the
//! payload and puts it on the provider's bounded queue without waiting ([`QUEUE`]; a full
//! queue drops the message and says so in the provider's status). One task per provider
//! delivers its queue in order, each attempt bounded by the provider's `timeout`, failed
//! attempts retried `retries` times with jittered exponential backoff ([`backoff`]). A
//! receiver that hangs or fails therefore delays no tick and stops no release.
//!
//! The last result per provider is kept for `GET /api/v1/canaries/{name}`
//! ([`NotificationStatus`]). A provider's address is a secret: it is never logged, never
//! in a status, and cut out of any error text.
//!
//! # Layout
//! - this file: the severity rules, the [`Alerter`] and the status type;
//! - [`payload`]: PURE, one [`payload::Alert`] → each service's JSON;
//! - `deliver`: the per-provider queue and task.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, Weak};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;

use super::convert::checksum;
use super::driver::RolloutEvent;
use super::http::HttpClient;
use crate::clock::Clock;
use crate::config::{AlertRule, Config, Severity};
use crate::control::events::{Event, EventBus};

mod deliver;
pub mod payload;

#[cfg(test)]
mod tests;

pub use deliver::backoff;
use payload::Alert;

/// Notifications waiting per provider before new ones are dropped.
pub const QUEUE: usize = 64;

/// The severity of an event with this `reason`, or `None` when it is not notified.
pub fn severity_of(reason: &str) -> Option<Severity> {
    Some(match reason {
        "Started" | "Restarted" | "Promoting" | "Succeeded" | "Paused" | "Resumed" => {
            Severity::Info
        }
        "WaitingApproval"
        | "TrafficIncreaseHeld"
        | "WaitingPromotion"
        | "CheckFailed"
        | "PromoteHookFailed"
        | "Aborted" => Severity::Warn,
        "RolledBack" | "PromotionFailed" | "RollingUpdateStalled" | "LeaseLost" => Severity::Error,
        _ => return None,
    })
}

/// Whether an alert of severity `rule` sends an event of severity `event`.
pub fn sends(rule: Severity, event: Severity) -> bool {
    event >= rule
}

/// The last delivery to one provider of a canary's alerts, as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationStatus {
    /// The `alertProviders` entry.
    pub provider: String,
    /// Its type (`slack`, `generic`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// The `analysis.alerts` entry that sent it.
    pub alert: String,
    /// The event notified (`RolledBack`, …).
    pub event: String,
    /// When the last attempt ended (ms since the Unix epoch).
    pub time_ms: u64,
    /// Delivered (the receiver answered 2xx).
    pub ok: bool,
    /// The receiver's last HTTP status, if it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// `HTTP 200`, the transport error, `timed out after 2s`, `queue full: dropped`.
    pub reason: String,
    /// Attempts made (1 + retries used).
    pub attempts: u32,
}

/// What the alerter knows of one canary.
struct CanaryAlerts {
    rules: Vec<AlertRule>,
    threshold: u32,
    /// Webhooks with `muteAlert`: their failures are not notified.
    muted_hooks: Vec<String>,
    /// Both slots of the canary's route (a swap exchanges them, the pair stays).
    backends: BTreeSet<String>,
}

/// Sends the canaries' notifications (one per process; see the module docs).
pub struct Alerter {
    canaries: BTreeMap<String, CanaryAlerts>,
    providers: BTreeMap<String, deliver::Queue>,
    /// Last event per canary: the weights and phase of a notification that is not the
    /// engine's (a stalled rolling update, a lost lease).
    last: Mutex<BTreeMap<String, RolloutEvent>>,
    results: deliver::Results,
    clock: Clock,
}

impl std::fmt::Debug for Alerter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alerter")
            .field("canaries", &self.canaries.keys().collect::<Vec<_>>())
            .field("providers", &self.providers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Alerter {
    /// Starts one delivery task per provider some canary uses; `None` when no canary has
    /// alerts. Fails when a provider's `caFile` cannot be read any more.
    pub fn start(
        cfg: &Config,
        client: &HttpClient,
        clock: Clock,
    ) -> Result<Option<Arc<Alerter>>, String> {
        let used: BTreeSet<&str> = cfg
            .canaries
            .iter()
            .flat_map(|c| c.alerts.iter().map(|a| a.provider.as_str()))
            .collect();
        if used.is_empty() {
            return Ok(None);
        }
        let results = deliver::Results::default();
        let mut providers = BTreeMap::new();
        for name in used {
            let Some(p) = cfg.alert_providers.get(name) else {
                continue;
            };
            let c = client
                .trusting(p.ca_file.as_deref())
                .map_err(|e| format!("alertProviders.{name}.caFile: {e}"))?;
            providers.insert(
                name.to_string(),
                deliver::Queue::spawn(p.clone(), c, results.clone(), clock),
            );
        }
        let canaries = cfg
            .canaries
            .iter()
            .filter(|c| !c.alerts.is_empty())
            .map(|c| {
                let backends = cfg
                    .table
                    .raw
                    .routes
                    .iter()
                    .filter(|r| r.name == c.route)
                    .flat_map(|r| std::iter::once(r.primary.clone()).chain(r.canary.clone()))
                    .collect();
                (
                    c.name.clone(),
                    CanaryAlerts {
                        rules: c.alerts.clone(),
                        threshold: c.analysis.threshold,
                        muted_hooks: c
                            .analysis
                            .webhooks
                            .iter()
                            .filter(|w| w.mute_alert)
                            .map(|w| w.name.clone())
                            .collect(),
                        backends,
                    },
                )
            })
            .collect();
        Ok(Some(Arc::new(Alerter {
            canaries,
            providers,
            last: Mutex::default(),
            results,
            clock,
        })))
    }

    /// Notifies a rollout event to the alerts that want it. Never waits.
    pub fn on_event(&self, e: &RolloutEvent) {
        self.last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(e.canary.clone(), e.clone());
        let Some(c) = self.canaries.get(&e.canary) else {
            return;
        };
        let Some(severity) = severity_of(&e.reason) else {
            return;
        };
        if e.reason == "CheckFailed"
            && c.muted_hooks
                .iter()
                .any(|h| e.message.contains(&format!("webhook {h} failed")))
        {
            return;
        }
        let alert = Alert {
            canary: e.canary.clone(),
            severity,
            reason: e.reason.clone(),
            phase: e.phase.to_string(),
            revision: e.revision.clone(),
            message: e.message.clone(),
            canary_weight: e.canary_weight,
            primary_weight: e.primary_weight,
            failed_checks: e.failed_checks,
            threshold: c.threshold,
            checks: e.checks.clone(),
            checksum: checksum(&e.canary, e.revision.as_deref()),
            time_ms: e.time_ms,
        };
        self.dispatch(c, &alert);
    }

    /// Notifies what the rest of the process publishes on the event bus and the engine
    /// does not see: a slot's rolling update that stalled (`endpoints`, kind `stalled`),
    /// a canary this replica lost with its etcd lease (`cluster`, kind `CanaryLost`).
    pub fn on_bus_event(&self, kind: &str, data: &Value) {
        let field = |k: &str| data.get(k).and_then(Value::as_str).unwrap_or_default();
        let (targets, reason, message): (Vec<&String>, &str, String) = match (kind, field("kind")) {
            ("endpoints", "stalled") => {
                let backend = field("backend");
                (
                    self.canaries
                        .iter()
                        .filter(|(_, c)| c.backends.contains(backend))
                        .map(|(n, _)| n)
                        .collect(),
                    "RollingUpdateStalled",
                    format!(
                        "Rolling update of backend {backend} stalled: {}",
                        field("message")
                    ),
                )
            }
            ("cluster", "CanaryLost") => {
                let canary = field("canary");
                (
                        self.canaries.keys().filter(|n| *n == canary).collect(),
                        "LeaseLost",
                        format!(
                            "Replica {} lost its etcd lease and stopped driving {canary} ({}); traffic stays where it is until another replica takes the canary over",
                            field("replica"),
                            field("message")
                        ),
                    )
            }
            _ => return,
        };
        for name in targets {
            let Some(c) = self.canaries.get(name) else {
                continue;
            };
            let last = self
                .last
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(name)
                .cloned();
            let alert = Alert {
                canary: name.clone(),
                severity: Severity::Error,
                reason: reason.to_string(),
                phase: last
                    .as_ref()
                    .map_or_else(|| "Initializing".to_string(), |e| e.phase.to_string()),
                revision: last.as_ref().and_then(|e| e.revision.clone()),
                message: message.clone(),
                canary_weight: last.as_ref().map_or(0, |e| e.canary_weight),
                primary_weight: last.as_ref().map_or(100, |e| e.primary_weight),
                failed_checks: last.as_ref().map_or(0, |e| e.failed_checks),
                threshold: c.threshold,
                checks: Vec::new(),
                checksum: checksum(name, last.as_ref().and_then(|e| e.revision.as_deref())),
                time_ms: self.clock.now_ms(),
            };
            self.dispatch(c, &alert);
        }
    }

    fn dispatch(&self, c: &CanaryAlerts, alert: &Alert) {
        for rule in &c.rules {
            if !sends(rule.severity, alert.severity) {
                continue;
            }
            if let Some(q) = self.providers.get(&rule.provider) {
                q.push(&rule.name, alert);
            }
        }
    }

    /// The last delivery per provider of a canary's alerts, by provider name.
    pub fn results(&self, canary: &str) -> Vec<NotificationStatus> {
        self.results.of(canary)
    }

    /// Follows the event bus (stalled rolling updates, lost leases) until the bus or the
    /// alerter is gone.
    pub fn follow(self: &Arc<Self>, bus: &EventBus) -> tokio::task::JoinHandle<()> {
        let me: Weak<Alerter> = Arc::downgrade(self);
        let mut rx = bus.subscribe();
        tokio::spawn(async move {
            loop {
                let ev: Event = match rx.recv().await {
                    Ok(e) => e,
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                if ev.kind != "endpoints" && ev.kind != "cluster" {
                    continue;
                }
                let Some(me) = me.upgrade() else { return };
                if let Ok(v) = serde_json::from_str::<Value>(&ev.data) {
                    me.on_bus_event(&ev.kind, &v);
                }
            }
        })
    }
}
