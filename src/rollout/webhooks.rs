//! Webhook calls, with Flagger's payload and pass rule.
//!
//! Every hook is a `POST` of a JSON [`HookPayload`] to its URL:
//! `{name, namespace, phase, checksum, metadata}` as Flagger sends it, plus weir's
//! `canaryWeight`, `iteration`, `failedChecks` and `revision`. An answer with a status of
//! at most 202 passes (Flagger's rule: 203 and 204 do not); anything else, a transport
//! error or the timeout (default 10 s) fails. A failed call is retried `retries` times
//! when retrying can help (transport errors, 429 and 5xx; never a 4xx "no" of a gate),
//! with a short backoff. A hook's URL may hold a secret: an answer or an error that
//! quotes it shows it as `scheme://host/…` ([`crate::text::scrub_url`]).
//!
//! The driver awaits gating and analysis hooks inside the canary's own task (never on the
//! proxy's request path), and hands `event` and `post-rollout` hooks to a
//! [`Notifier`]: one background task per canary that calls them in order, so a slow
//! receiver delays nothing else.

use std::collections::BTreeMap;
use std::time::Duration;

use http::Method;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::convert::NAMESPACE;
use super::http::HttpClient;
use super::machine::Phase;
use super::spec::WebhookSpec;

/// Webhook calls waiting in a [`Notifier`] before new ones are dropped (with a warning).
pub const NOTIFY_QUEUE: usize = 256;

/// The JSON body of every webhook call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookPayload {
    /// The canary's name.
    pub name: String,
    /// Always `default` (weir has no namespaces; Flagger receivers expect the field).
    pub namespace: String,
    /// The phase Flagger would send for this hook type.
    pub phase: Phase,
    /// Identifies the run's revision (stable for one revision of one canary).
    pub checksum: String,
    /// The hook's `metadata`; `event` hooks also get `eventMessage` and `eventType`
    /// (`Normal` or `Warning`), as in Flagger.
    pub metadata: BTreeMap<String, String>,
    /// Canary weight when the hook is called.
    pub canary_weight: u8,
    /// A/B or blue/green iteration of the run.
    pub iteration: u32,
    /// Failed checks of the run so far.
    pub failed_checks: u32,
    /// Revision of the run, if known.
    pub revision: Option<String>,
}

impl HookPayload {
    /// A payload with the hook's metadata filled in.
    pub fn for_hook(mut self, hook: &WebhookSpec) -> Self {
        let mut m = hook.metadata.clone();
        m.extend(std::mem::take(&mut self.metadata));
        self.metadata = m;
        self
    }
}

/// The outcome of one hook call, as the machine wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookOutcome {
    /// Flagger's pass rule held (status ≤ 202).
    pub passed: bool,
    /// Status and a bit of the body, or the transport error.
    pub reason: String,
}

/// Whether another attempt could change the answer.
fn retryable(status: Option<u16>) -> bool {
    match status {
        None => true,
        Some(s) => s == 429 || s >= 500,
    }
}

/// Calls `hook` with `payload`, with `retries` extra attempts where they can help.
pub async fn call(
    client: &HttpClient,
    hook: &WebhookSpec,
    retries: u32,
    payload: &HookPayload,
) -> HookOutcome {
    let body = match serde_json::to_vec(payload) {
        Ok(b) => b,
        Err(e) => {
            return HookOutcome {
                passed: false,
                reason: format!("cannot encode the payload: {e}"),
            }
        }
    };
    let timeout = Duration::from_millis(hook.timeout_ms.max(1));
    let mut attempt = 0;
    loop {
        let (outcome, status) = match client
            .send(Method::POST, &hook.url, &[], Some(body.clone()), timeout)
            .await
        {
            Ok(r) => {
                let snippet = r.snippet(200);
                let reason = if snippet.is_empty() {
                    format!("HTTP {}", r.status)
                } else {
                    format!("HTTP {}: {snippet}", r.status)
                };
                (
                    HookOutcome {
                        passed: r.status <= 202,
                        reason,
                    },
                    Some(r.status),
                )
            }
            Err(e) => (
                HookOutcome {
                    passed: false,
                    reason: e,
                },
                None,
            ),
        };
        // A hook's URL may hold a secret, and its answer may quote it.
        let outcome = HookOutcome {
            reason: crate::text::scrub_url(&outcome.reason, &hook.url),
            ..outcome
        };
        if outcome.passed || attempt >= retries || !retryable(status) {
            if attempt > 0 {
                return HookOutcome {
                    reason: format!("{} (after {} attempts)", outcome.reason, attempt + 1),
                    ..outcome
                };
            }
            return outcome;
        }
        attempt += 1;
        let backoff = Duration::from_millis(100u64 << attempt.min(4)).min(timeout);
        tokio::time::sleep(backoff).await;
    }
}

/// One queued fire-and-forget call.
#[derive(Debug)]
pub struct Notification {
    /// The hook.
    pub hook: WebhookSpec,
    /// Its retries.
    pub retries: u32,
    /// CA certificates trusted for an `https://` URL (`caFile`).
    pub ca_file: Option<std::path::PathBuf>,
    /// The payload.
    pub payload: HookPayload,
}

/// A per-canary queue of non-gating hook calls (`event`, `post-rollout`), drained in
/// order by one background task.
#[derive(Clone, Debug)]
pub struct Notifier {
    tx: mpsc::Sender<Notification>,
}

impl Notifier {
    /// Starts the task; it ends when every `Notifier` clone is dropped.
    pub fn spawn(client: HttpClient, canary: String) -> Self {
        let (tx, mut rx) = mpsc::channel::<Notification>(NOTIFY_QUEUE);
        tokio::spawn(async move {
            while let Some(n) = rx.recv().await {
                let out = match client.trusting(n.ca_file.as_deref()) {
                    Ok(c) => call(&c, &n.hook, n.retries, &n.payload).await,
                    Err(e) => HookOutcome {
                        passed: false,
                        reason: format!("caFile: {e}"),
                    },
                };
                if out.passed {
                    tracing::debug!(target: "weir::rollout", canary = %canary, hook = %n.hook.name, reason = %out.reason, "hook called");
                } else {
                    tracing::warn!(target: "weir::rollout", canary = %canary, hook = %n.hook.name, reason = %out.reason, "hook failed (its answer changes nothing)");
                }
            }
        });
        Notifier { tx }
    }

    /// Queues a call; a full queue drops it with a warning rather than wait.
    pub fn send(&self, n: Notification) {
        if let Err(e) = self.tx.try_send(n) {
            let name = match &e {
                mpsc::error::TrySendError::Full(n) | mpsc::error::TrySendError::Closed(n) => {
                    n.hook.name.clone()
                }
            };
            tracing::warn!(target: "weir::rollout", hook = %name, "webhook queue full or closed: call dropped");
        }
    }
}

/// The namespace sent in payloads.
pub fn namespace() -> String {
    NAMESPACE.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::spec::HookKind;

    #[test]
    fn payload_has_flaggers_fields_and_ours() {
        let hook = WebhookSpec {
            name: "load".into(),
            kind: HookKind::Rollout,
            url: "http://127.0.0.1:1/".into(),
            timeout_ms: 1000,
            metadata: BTreeMap::from([("cmd".to_string(), "hey".to_string())]),
        };
        let p = HookPayload {
            name: "app".into(),
            namespace: namespace(),
            phase: Phase::Progressing,
            checksum: "abc".into(),
            metadata: BTreeMap::from([("eventType".to_string(), "Normal".to_string())]),
            canary_weight: 20,
            iteration: 0,
            failed_checks: 1,
            revision: Some("v2".into()),
        }
        .for_hook(&hook);
        let v = serde_json::to_value(&p).expect("json");
        for k in ["name", "namespace", "phase", "checksum", "metadata"] {
            assert!(v.get(k).is_some(), "{k} missing in {v}");
        }
        assert_eq!(v["phase"], "Progressing");
        assert_eq!(v["namespace"], "default");
        assert_eq!(v["metadata"]["cmd"], "hey");
        assert_eq!(v["metadata"]["eventType"], "Normal");
        assert_eq!(v["canaryWeight"], 20);
        assert_eq!(v["failedChecks"], 1);
        assert_eq!(v["revision"], "v2");
    }

    #[test]
    fn only_transport_errors_throttling_and_server_errors_are_retried() {
        assert!(retryable(None));
        assert!(retryable(Some(503)));
        assert!(retryable(Some(429)));
        assert!(!retryable(Some(403)));
        assert!(!retryable(Some(404)));
    }

    /// A receiver that quotes the hook's URL back (an error page naming the request)
    /// shows it as `scheme://host/…`: neither the path nor its secret part reaches
    /// the outcome (and so no event, status or log line).
    #[tokio::test]
    async fn an_answer_quoting_the_url_shows_scheme_and_host_only() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let url = format!("http://{addr}/hooks/T0001/B0002/SECRETHOOK");
        let quoted = url.clone();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 8192];
            let _ = s.read(&mut buf).await;
            let body = format!("no such hook {quoted} (POST /hooks/T0001/B0002/SECRETHOOK)");
            let head = format!(
                "HTTP/1.1 404 Not Found\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes()).await;
            let _ = s.write_all(body.as_bytes()).await;
        });
        let hook = WebhookSpec {
            name: "gate".into(),
            kind: HookKind::PreRollout,
            url,
            timeout_ms: 5000,
            metadata: BTreeMap::new(),
        };
        let payload = HookPayload {
            name: "app".into(),
            namespace: namespace(),
            phase: Phase::Progressing,
            checksum: "abc".into(),
            metadata: BTreeMap::new(),
            canary_weight: 0,
            iteration: 0,
            failed_checks: 0,
            revision: None,
        };
        let out = call(&HttpClient::new(), &hook, 0, &payload).await;
        assert!(!out.passed);
        assert!(!out.reason.contains("SECRETHOOK"), "{}", out.reason);
        assert!(!out.reason.contains("T0001"), "{}", out.reason);
        assert!(
            out.reason
                .contains(&format!("HTTP 404: no such hook http://{addr}/… (POST …)")),
            "{}",
            out.reason
        );
    }
}
