//! One provider's queue and the task that delivers it: in order, each attempt bounded
//! by the provider's timeout, failures retried with jittered exponential backoff.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Method;
use rand::Rng;
use tokio::sync::mpsc;

use super::payload::{render, Alert};
use super::{NotificationStatus, QUEUE};
use crate::clock::Clock;
use crate::config::AlertProvider;
use crate::rollout::http::HttpClient;

/// First retry delay.
pub const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// Longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The wait before retry `attempt` (0 = the first retry): `BACKOFF_BASE × 2^attempt`
/// capped at [`BACKOFF_MAX`], scaled by `draw` ∈ [0, 1) into its upper half ("equal
/// jitter"), so that receivers coming back see retries spread out, never bunched.
pub fn backoff(attempt: u32, draw: f64) -> Duration {
    let full = BACKOFF_BASE
        .saturating_mul(1u32 << attempt.min(16))
        .min(BACKOFF_MAX);
    full.mul_f64(0.5 + 0.5 * draw.clamp(0.0, 1.0))
}

/// Last result per (canary, provider), shared by the queues and the API.
#[derive(Clone, Default)]
pub(super) struct Results(Arc<Mutex<BTreeMap<(String, String), NotificationStatus>>>);

impl Results {
    fn set(&self, canary: &str, s: NotificationStatus) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((canary.to_string(), s.provider.clone()), s);
    }

    pub(super) fn of(&self, canary: &str) -> Vec<NotificationStatus> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|((c, _), _)| c == canary)
            .map(|(_, s)| s.clone())
            .collect()
    }
}

struct Item {
    canary: String,
    alert: String,
    event: String,
    body: Vec<u8>,
}

/// The sending side of one provider's queue.
pub(super) struct Queue {
    provider: AlertProvider,
    tx: mpsc::Sender<Item>,
    results: Results,
    clock: Clock,
}

impl Queue {
    /// Starts the provider's task; it ends when the queue is dropped.
    pub(super) fn spawn(
        provider: AlertProvider,
        client: HttpClient,
        results: Results,
        clock: Clock,
    ) -> Queue {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(provider.clone(), client, rx, results.clone(), clock));
        Queue {
            provider,
            tx,
            results,
            clock,
        }
    }

    /// Renders and queues; a full queue drops the message (and says so in the status).
    pub(super) fn push(&self, alert_name: &str, a: &Alert) {
        let p = &self.provider;
        let body = render(p.kind, &p.channel, &p.username, a)
            .to_string()
            .into_bytes();
        let item = Item {
            canary: a.canary.clone(),
            alert: alert_name.to_string(),
            event: a.reason.clone(),
            body,
        };
        if self.tx.try_send(item).is_err() {
            tracing::warn!(target: "weir::alerts", provider = %p.name, canary = %a.canary, event = %a.reason, "notification queue full: message dropped");
            self.results.set(
                &a.canary,
                NotificationStatus {
                    provider: p.name.clone(),
                    kind: p.kind.name().to_string(),
                    alert: alert_name.to_string(),
                    event: a.reason.clone(),
                    time_ms: self.clock.now_ms(),
                    ok: false,
                    status: None,
                    reason: "queue full: dropped".into(),
                    attempts: 0,
                },
            );
        }
    }
}

/// Whether another attempt could change the answer (transport errors, 429, 5xx).
fn retryable(status: Option<u16>) -> bool {
    status.is_none_or(|s| s == 429 || s >= 500)
}

async fn run(
    p: AlertProvider,
    client: HttpClient,
    mut rx: mpsc::Receiver<Item>,
    results: Results,
    clock: Clock,
) {
    while let Some(item) = rx.recv().await {
        let mut attempts = 0;
        let (ok, status, reason) = loop {
            attempts += 1;
            let r = client
                .send(
                    Method::POST,
                    &p.address.0,
                    &[],
                    Some(item.body.clone()),
                    p.timeout,
                )
                .await;
            let (ok, status, reason) = match r {
                Ok(r) => {
                    let ok = (200..300).contains(&r.status);
                    let snippet = r.snippet(200);
                    let reason = if snippet.is_empty() || ok {
                        format!("HTTP {}", r.status)
                    } else {
                        format!("HTTP {}: {snippet}", r.status)
                    };
                    (ok, Some(r.status), reason)
                }
                Err(e) => (false, None, e),
            };
            // An error text or the receiver's answer may quote the URL; the URL is a
            // secret: shown as `scheme://host/…`, its path and query cut out.
            let reason = crate::text::scrub_url(&reason, &p.address.0);
            if ok || attempts > p.retries || !retryable(status) {
                break (ok, status, reason);
            }
            tracing::debug!(target: "weir::alerts", provider = %p.name, attempt = attempts, %reason, "notification failed; retrying");
            let wait = backoff(attempts - 1, rand::rng().random::<f64>());
            tokio::time::sleep(wait).await;
        };
        if ok {
            tracing::info!(target: "weir::alerts", provider = %p.name, canary = %item.canary, event = %item.event, attempts, "notification delivered");
        } else {
            tracing::warn!(target: "weir::alerts", provider = %p.name, canary = %item.canary, event = %item.event, attempts, %reason, "notification failed");
        }
        results.set(
            &item.canary,
            NotificationStatus {
                provider: p.name.clone(),
                kind: p.kind.name().to_string(),
                alert: item.alert,
                event: item.event,
                time_ms: clock.now_ms(),
                ok,
                status,
                reason,
                attempts,
            },
        );
    }
}
