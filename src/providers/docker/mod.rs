//! The Docker provider (DESIGN §16): backends' endpoint lists from the labels of
//! running containers, kept current by the Engine API's event stream, as
//! Traefik's Docker provider does.
//!
//! - [`client`]: the Engine API behind a trait ([`client::Engine`]), bollard for real.
//! - [`labels`]: PURE containers → each backend's listed endpoints, their
//!   readiness and revisions.
//! - [`events`]: PURE event → change of the known containers.
//! - this file: the driver. Per connection: subscribe to events, list and inspect
//!   the labelled containers, then follow the events; changes are throttled
//!   (`debounce`: the first change of a burst opens a window, the lists are written
//!   when it closes) and a full re-list runs every `resyncInterval`. A list (every
//!   running container, ready or not) is written as
//!   `PUT /api/v1/backends/{name}/endpoints` would (a rolling update, DESIGN §7),
//!   after the backend's readiness gate
//!   ([`EndpointControl::set_gate`](crate::dataplane::endpoints::runtime::EndpointControl::set_gate)):
//!   a container joins the rotation only once Docker calls it healthy, so a release
//!   that never turns healthy stalls the update, which is reported after
//!   `progressDeadline` and fails a canary run waiting on it. Each endpoint's
//!   revision goes to the table store's
//!   [`EndpointRevisions`](crate::dataplane::providers::EndpointRevisions), where
//!   the rollout engine reads a slot's revision.
//!
//! Failure: a lost or refused connection keeps every list and gate as last written
//! (a backend is never emptied by the provider), shows as `connected: false` in
//! `/readyz`, `GET /api/v1/providers` and `weir_provider_connected`, and is retried
//! with jittered exponential backoff on the injected clock. A backend none of whose
//! containers runs any more also keeps its last list, with every endpoint not
//! ready: nothing listens there.

pub mod client;
pub mod events;
pub mod labels;

use crate::clock::Clock;
use crate::config::DockerSettings;
use crate::dataplane::endpoints::runtime::{now_ms, Gate};
use crate::dataplane::providers::ProviderBoard;
use crate::dataplane::store::TableStore;
use crate::endpoints::api::{put_endpoints, EndpointsBody};
use crate::wire::providers::{ContainerStatus, ProvidedBackend};
use client::{Connector, Engine};
use labels::Container;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The provider's name in the API, `/readyz` and the metrics.
pub const NAME: &str = "docker";
/// The audit log's actor for the provider's writes.
pub const ACTOR: &str = "provider:docker";
/// First reconnect delay (before jitter).
pub const BACKOFF_MIN: Duration = Duration::from_millis(500);
/// Largest reconnect delay (before jitter).
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// PURE: the wait before reconnect attempt `attempt` (0-based): exponential from
/// [`BACKOFF_MIN`] to [`BACKOFF_MAX`], then "equal jitter" with `unit` in [0, 1):
/// between half and all of it, so replicas that lost the daemon together do not
/// reconnect in step.
pub fn backoff(attempt: u32, unit: f64) -> Duration {
    let base = BACKOFF_MIN
        .saturating_mul(2u32.saturating_pow(attempt.min(16)))
        .min(BACKOFF_MAX);
    // Whole milliseconds: the timer's resolution.
    let ms = base.as_millis() as f64 * (0.5 + 0.5 * unit.clamp(0.0, 1.0));
    Duration::from_millis(ms as u64)
}

/// Starts the provider: it runs until `shutdown` turns true.
pub fn spawn(
    settings: DockerSettings,
    store: Arc<TableStore>,
    board: Arc<ProviderBoard>,
    connect: Connector,
    clock: Clock,
    seed: u64,
    shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let endpoint = settings.endpoint.to_string();
    board.update(NAME, |s| s.endpoint = endpoint);
    let driver = Driver {
        settings,
        store,
        board,
        connect,
        clock,
        rng: rand::rngs::SmallRng::seed_from_u64(seed),
        known: BTreeMap::new(),
        written: BTreeMap::new(),
    };
    tokio::spawn(driver.run(shutdown))
}

struct Driver {
    settings: DockerSettings,
    store: Arc<TableStore>,
    board: Arc<ProviderBoard>,
    connect: Connector,
    clock: Clock,
    /// The backoff's jitter.
    rng: rand::rngs::SmallRng,
    /// Labelled containers by ID, as last listed and updated by events.
    known: BTreeMap<String, Container>,
    /// Each backend's list as last written, with its revisions.
    written: BTreeMap<String, ProvidedBackend>,
}

/// Why a session (one connection) ended.
enum End {
    Shutdown,
    Lost { error: String, was_connected: bool },
}

impl Driver {
    async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut attempt: u32 = 0;
        loop {
            if *shutdown.borrow() {
                return;
            }
            match self.session(&mut shutdown).await {
                End::Shutdown => return,
                End::Lost {
                    error,
                    was_connected,
                } => {
                    if was_connected {
                        attempt = 0;
                    }
                    tracing::warn!(target: "weir::providers", provider = NAME, %error, "docker: not connected; the endpoint lists stay as last written");
                    self.board.update(NAME, |s| {
                        s.connected = false;
                        if was_connected {
                            s.disconnects += 1;
                        }
                        s.last_error = Some(error);
                    });
                    let delay = backoff(attempt, self.rng.random::<f64>());
                    attempt = attempt.saturating_add(1);
                    tokio::select! {
                        _ = self.clock.sleep(delay) => {}
                        _ = shutdown.changed() => return,
                    }
                }
            }
        }
    }

    async fn session(&mut self, shutdown: &mut watch::Receiver<bool>) -> End {
        let lost = |error: String, was_connected: bool| End::Lost {
            error,
            was_connected,
        };
        let engine = match (self.connect)() {
            Ok(e) => e,
            Err(e) => return lost(e, false),
        };
        if let Err(e) = engine.ping().await {
            return lost(e, false);
        }
        // Subscribe before listing: an event between the two is not lost.
        let mut events = engine.events();
        if let Err(e) = self.resync(&*engine).await {
            return lost(e, false);
        }
        tracing::info!(target: "weir::providers", provider = NAME, endpoint = %self.settings.endpoint, containers = self.known.len(), "docker: connected");
        self.board.update(NAME, |s| {
            s.connected = true;
            s.last_error = None;
        });
        self.publish();
        let mut window: Option<Instant> = None;
        let mut next_resync = self.clock.instant() + self.settings.resync_interval;
        loop {
            let window_end = window;
            tokio::select! {
                _ = shutdown.changed() => return End::Shutdown,
                ev = std::future::poll_fn(|cx| events.as_mut().poll_next(cx)) => {
                    let ev = match ev {
                        None => return lost("the event stream ended".into(), true),
                        Some(Err(e)) => return lost(e, true),
                        Some(Ok(ev)) => ev,
                    };
                    self.board.update(NAME, |s| s.events += 1);
                    let effect = events::effect(&ev);
                    tracing::debug!(target: "weir::providers", provider = NAME, action = %ev.action, id = %ev.id, ?effect, "docker event");
                    let changed = match &effect {
                        events::Effect::Inspect(id) => match self.refresh(&*engine, id).await {
                            Ok(changed) => changed,
                            Err(e) => return lost(e, true),
                        },
                        other => events::apply(&mut self.known, other),
                    };
                    if changed && window.is_none() {
                        window = Some(self.clock.instant() + self.settings.debounce);
                    }
                }
                _ = sleep_until_opt(self.clock, window_end) => {
                    window = None;
                    self.publish();
                }
                _ = self.clock.sleep_until(next_resync) => {
                    if let Err(e) = self.resync(&*engine).await {
                        return lost(e, true);
                    }
                    next_resync = self.clock.instant() + self.settings.resync_interval;
                    window = None;
                    self.publish();
                }
            }
        }
    }

    /// Lists and inspects every labelled container.
    async fn resync(&mut self, engine: &dyn Engine) -> Result<(), String> {
        let ids = engine.list().await?;
        let mut known = BTreeMap::new();
        for id in ids {
            if let Some(c) = engine.inspect(&id).await? {
                known.insert(c.id.clone(), c);
            }
        }
        self.known = known;
        self.board.update(NAME, |s| s.syncs += 1);
        Ok(())
    }

    /// Inspects one container again; `true` when what is known of it changed.
    async fn refresh(&mut self, engine: &dyn Engine, id: &str) -> Result<bool, String> {
        let now = engine.inspect(id).await?;
        Ok(match now {
            None => self.known.remove(id).is_some(),
            Some(c) if c.labels.contains_key(labels::LABEL_BACKEND) => {
                let before = self.known.insert(c.id.clone(), c.clone());
                before.as_ref() != Some(&c)
            }
            Some(_) => false,
        })
    }

    /// Writes each backend's list (when it changed) and the status document.
    fn publish(&mut self) {
        let containers: Vec<Container> = self.known.values().cloned().collect();
        let (computed, mut statuses) =
            labels::desired(&containers, self.settings.network.as_deref());
        let snap = self.store.load();
        let mut names: Vec<String> = computed.keys().cloned().collect();
        names.extend(self.written.keys().cloned());
        names.sort();
        names.dedup();
        for name in names {
            let Some(spec) = snap.spec.backends.get(&name) else {
                mark_unknown(&mut statuses, &name);
                continue;
            };
            let fresh = computed.get(&name).cloned().unwrap_or_default();
            let next = if !fresh.endpoints.is_empty() {
                fresh
            } else {
                match self.written.get(&name) {
                    Some(prev) if !prev.endpoints.is_empty() => ProvidedBackend {
                        note: Some(
                            "no running container: the last endpoint list is kept, not ready"
                                .into(),
                        ),
                        not_ready: prev
                            .endpoints
                            .iter()
                            .map(|e| (e.clone(), "no running container".to_string()))
                            .collect(),
                        ..prev.clone()
                    },
                    _ => ProvidedBackend {
                        note: Some("no running container yet".into()),
                        ..ProvidedBackend::default()
                    },
                }
            };
            self.store.revisions().set(&name, next.revisions.clone());
            // The gate before the list: the update the list starts must never
            // see a new container as ready before Docker does.
            if let Some(backend) = self.store.backend(&name) {
                backend.control().set_gate(Some(gate_of(&next)), now_ms());
            }
            if !next.endpoints.is_empty() && spec.endpoints != next.endpoints {
                let body = EndpointsBody {
                    endpoints: next.endpoints.clone(),
                };
                match put_endpoints(&self.store, &name, body, None, ACTOR) {
                    Ok(a) => {
                        tracing::info!(target: "weir::providers", provider = NAME, backend = %name, endpoints = ?next.endpoints, generation = a.rollout.generation, "docker: endpoint list written (rolling update)")
                    }
                    Err(e) => {
                        tracing::error!(target: "weir::providers", provider = NAME, backend = %name, error = ?e, "docker: endpoint list refused")
                    }
                }
            }
            self.written.insert(name, next);
        }
        let written = self.written.clone();
        self.board.update(NAME, |s| {
            s.backends = written;
            s.containers = statuses;
        });
    }
}

/// The rolling update's gate for a provided list: each listed endpoint is
/// ready unless Docker says otherwise; an address not listed is not ready.
fn gate_of(b: &ProvidedBackend) -> Gate {
    b.endpoints
        .iter()
        .map(|e| (e.clone(), b.not_ready.get(e).cloned()))
        .collect()
}

/// Containers naming a backend the table does not have are not endpoints.
fn mark_unknown(statuses: &mut [ContainerStatus], backend: &str) {
    for s in statuses.iter_mut().filter(|s| s.backend == backend) {
        s.ready = false;
        s.reason = Some(format!("backend {backend:?} is not in the table"));
    }
}

async fn sleep_until_opt(clock: Clock, at: Option<Instant>) {
    match at {
        Some(at) => clock.sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
