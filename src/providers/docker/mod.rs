//! The Docker provider (DESIGN §16): backends' endpoint lists from the labels of
//! running containers, kept current by the Engine API's event stream, as
//! Traefik's Docker provider does.
//!
//! - [`client`]: the Engine API behind a trait ([`client::Engine`]), bollard for real,
//!   over [`transport`]: a connection per request, every answer capped at 16 MiB.
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
//! Only a backend that says `provider: docker` is filled: a label naming any other
//! backend (one with its own endpoints, or one the table does not have) changes
//! nothing. That container is reported not ready in `GET /api/v1/providers`, and
//! once per container and backend as the event `ProviderLabelIgnored` (in the
//! provider's `recentEvents`, on the event bus as kind `providers`, in the log).
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
pub mod transport;

use crate::clock::Clock;
use crate::config::DockerSettings;
use crate::control::events::EventBus;
use crate::dataplane::endpoints::runtime::{now_ms, Gate};
use crate::dataplane::providers::ProviderBoard;
use crate::dataplane::store::TableStore;
use crate::endpoints::api::{put_endpoints, EndpointsBody};
use crate::wire::providers::{ContainerStatus, ProvidedBackend, ProviderEvent, RECENT_EVENTS};
use client::{Connector, Engine};
use labels::Container;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
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

/// Starts the provider: it runs until `shutdown` turns true. Its events (an
/// ignored label) go to `bus` as kind `providers`, when given.
#[allow(clippy::too_many_arguments)] // the provider's whole context, each used once
pub fn spawn(
    settings: DockerSettings,
    store: Arc<TableStore>,
    board: Arc<ProviderBoard>,
    connect: Connector,
    clock: Clock,
    seed: u64,
    bus: Option<Arc<EventBus>>,
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
        reported: BTreeSet::new(),
        bus,
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
    /// (container ID, backend) pairs already reported as `ProviderLabelIgnored`.
    reported: BTreeSet<(String, String)>,
    /// Where the provider's events are published.
    bus: Option<Arc<EventBus>>,
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
        let mut ignored = Vec::new();
        for name in names {
            let spec = match snap.spec.backends.get(&name) {
                Some(spec) if spec.from_docker => spec,
                other => {
                    let why = match other {
                        None => format!("backend {name:?} is not in the table"),
                        Some(_) => format!(
                            "backend {name:?} does not say `provider: docker`: its endpoints are the file's"
                        ),
                    };
                    mark_ignored(&mut statuses, &name, &why);
                    ignored.push(name.clone());
                    // A backend that stopped saying `provider: docker` (a reload)
                    // is the file's again: no gate, no revisions from labels.
                    if self.written.remove(&name).is_some() {
                        self.store.revisions().set(&name, BTreeMap::new());
                        if let Some(backend) = self.store.backend(&name) {
                            backend.control().set_gate(None, now_ms());
                        }
                    }
                    continue;
                }
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
        let events = self.report_ignored(&statuses, &ignored);
        let written = self.written.clone();
        self.board.update(NAME, |s| {
            s.backends = written;
            s.containers = statuses;
            s.recent_events.extend(events);
            let over = s.recent_events.len().saturating_sub(RECENT_EVENTS);
            s.recent_events.drain(..over);
        });
    }

    /// `ProviderLabelIgnored` for each container labelled for an `ignored` backend
    /// not reported yet (logged, and published on the bus); the pairs of containers
    /// no longer seen are forgotten.
    fn report_ignored(
        &mut self,
        statuses: &[ContainerStatus],
        ignored: &[String],
    ) -> Vec<ProviderEvent> {
        let seen: BTreeSet<&str> = statuses.iter().map(|s| s.id.as_str()).collect();
        self.reported.retain(|(id, _)| seen.contains(id.as_str()));
        let mut out = Vec::new();
        for s in statuses.iter().filter(|s| ignored.contains(&s.backend)) {
            if !self.reported.insert((s.id.clone(), s.backend.clone())) {
                continue;
            }
            let message = format!(
                "container {} ({}) is labelled weir.backend={}, ignored: {}",
                crate::text::for_terminal(&s.name),
                s.id,
                crate::text::for_terminal(&s.backend),
                s.reason.as_deref().unwrap_or("not a provider backend")
            );
            tracing::warn!(target: "weir::providers", provider = NAME, container = %s.id, backend = %s.backend, "docker: {message}");
            let e = ProviderEvent {
                reason: "ProviderLabelIgnored".into(),
                time_ms: self.clock.now_ms(),
                container: s.id.clone(),
                name: s.name.clone(),
                backend: s.backend.clone(),
                message,
            };
            if let Some(bus) = &self.bus {
                bus.publish(
                    "providers",
                    serde_json::json!({
                        "kind": e.reason, "provider": NAME, "container": e.container,
                        "name": e.name, "backend": e.backend, "message": e.message,
                    }),
                );
            }
            out.push(e);
        }
        out
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

/// Containers naming a backend the provider does not fill are not endpoints.
fn mark_ignored(statuses: &mut [ContainerStatus], backend: &str, why: &str) {
    for s in statuses.iter_mut().filter(|s| s.backend == backend) {
        s.ready = false;
        s.reason = Some(why.to_string());
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
