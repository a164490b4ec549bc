//! The runtime state of one backend's endpoints: the glue between the pure modules
//! (`rolling`, `health`, `outlier`) and the proxy's rotation.
//!
//! An [`EndpointControl`] lives inside every [`Backend`](crate::dataplane::backend::Backend).
//! Three callers use it, each for one thing:
//!
//! * the table store, through `BackendRegistry::sync`, on every table write:
//!   [`EndpointControl::sync`] follows setting changes and, when the endpoint list
//!   changed, starts a rolling update ([`rolling::start`]) and wakes the driver. It never
//!   touches the rotation: that is the driver's job, one step per tick.
//! * the driver task (`driver.rs`), once per tick: [`EndpointControl::probe_plan`] says
//!   what to health-check, then [`EndpointControl::tick`] feeds the probe results to
//!   [`HealthState::observe`], runs one [`rolling::step`], applies its `Add`/`Remove`
//!   actions by swapping the rotation (`ArcSwap` of the whole `Vec`), finishes drains
//!   and re-admits endpoints whose ejection ran out.
//! * the request path: [`EndpointControl::observe`] after every upstream result
//!   (passive outlier detection). It costs one relaxed atomic load on a success and
//!   one atomic add on a failure; only the failure that reaches `consecutiveFailures`
//!   takes the detector's lock.
//!
//! Time is this module's millisecond clock ([`now_ms`]); the tick takes it as a
//! parameter so tests can drive it. Locks are never held across an `.await`; the order
//! is state → detector → events (the request path takes only the last two).

use super::health::{ExpectedStatus, HealthConfig, HealthState, Origin};
use super::outlier::{OutlierConfig, OutlierDetector};
use super::rolling::{self, IntOrPercent, Member, Phase, RollingConfig, RollingState};
use super::rolling::{Resolved, RollingStatus};
use crate::config::{self, BackendSpec};
use crate::dataplane::backend::Endpoint;
use arc_swap::ArcSwap;
use serde::Serialize;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use tokio::sync::{watch, Notify};

#[cfg(test)]
use super::health::ProbeResult;
#[cfg(test)]
#[path = "runtime_tests.rs"]
mod tests;
mod tick;
mod view;

/// Tick of a backend without health checks: the rolling update still moves one
/// step at a time, and drains and re-admissions are noticed this often.
pub const DEFAULT_TICK: Duration = Duration::from_secs(1);

/// Recent events kept per backend for the API (older ones are dropped).
pub const EVENT_LOG_CAPACITY: usize = 64;

/// Milliseconds on the endpoint clock: monotonic, starting near 0 when first read. It
/// follows tokio's clock, so a test with paused time moves it too.
pub fn now_ms() -> u64 {
    static EPOCH: OnceLock<tokio::time::Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(tokio::time::Instant::now);
    let elapsed = tokio::time::Instant::now().saturating_duration_since(epoch);
    u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A backend's endpoint settings in the pure modules' types.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointSettings {
    /// `healthCheck`; `None` means every endpoint is ready when added.
    pub health: Option<HealthConfig>,
    /// `rollingUpdate` (always present: it has defaults).
    pub rolling: RollingConfig,
    /// `outlierDetection`; `None` means no passive ejection.
    pub outlier: Option<OutlierConfig>,
}

impl EndpointSettings {
    /// Maps the validated config. Fields the config does not expose (the outlier
    /// detector's `maxEjectionTime` and decay interval) keep their defaults.
    pub fn from_spec(spec: &BackendSpec) -> EndpointSettings {
        let health = spec.health_check.as_ref().map(|h| HealthConfig {
            path: h.path.clone(),
            interval_ms: millis(h.interval).max(1),
            timeout_ms: millis(h.timeout).max(1),
            healthy_threshold: h.healthy_threshold,
            unhealthy_threshold: h.unhealthy_threshold,
            expected_status: h
                .expected_status
                .iter()
                .map(|c| ExpectedStatus::Code(*c))
                .collect(),
        });
        let scale = |v: config::IntOrPercent| match v {
            config::IntOrPercent::Int(n) => IntOrPercent::Int(n),
            config::IntOrPercent::Percent(p) => IntOrPercent::Percent(p),
        };
        let rolling = RollingConfig {
            max_surge: scale(spec.rolling_update.max_surge),
            max_unavailable: scale(spec.rolling_update.max_unavailable),
            progress_deadline_ms: millis(spec.rolling_update.progress_deadline),
        };
        let outlier = spec.outlier.as_ref().map(|o| OutlierConfig {
            consecutive_failures: o.consecutive_failures,
            base_ejection_ms: millis(o.base_ejection_time).max(1),
            max_ejection_percent: u32::from(o.max_ejection_percent),
            ..OutlierConfig::default()
        });
        EndpointSettings {
            health,
            rolling,
            outlier,
        }
    }

    /// How often the driver ticks: the health-check interval, else [`DEFAULT_TICK`].
    pub fn tick_interval(&self) -> Duration {
        self.health
            .as_ref()
            .map_or(DEFAULT_TICK, |h| Duration::from_millis(h.interval_ms))
    }
}

/// Something that happened to a backend's endpoints: logged, kept for the API and
/// forwarded to `/api/v1/events` by the driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointEvent {
    /// Per-backend sequence number, from 1 (the driver forwards each event once).
    pub seq: u64,
    /// The backend.
    pub backend: String,
    /// `updateStarted`, `added`, `removed`, `drained`, `ready`, `notReady`, `stalled`,
    /// `resumed`, `complete`, `ejected`, `ejectionSkipped`, `readmitted`.
    pub kind: &'static str,
    /// The endpoint concerned, if any.
    pub endpoint: Option<String>,
    /// The rolling update it belongs to.
    pub generation: u64,
    /// Human-readable detail.
    pub message: String,
    /// When, on the endpoint clock ([`now_ms`]).
    pub at_ms: u64,
}

/// Bounded log of recent events.
#[derive(Debug, Default)]
struct EventLog {
    /// Last sequence number handed out.
    last_seq: u64,
    /// The newest [`EVENT_LOG_CAPACITY`] events, oldest first.
    recent: VecDeque<EndpointEvent>,
}

/// What the rollout engine (and anyone else) may wait on: which endpoint list the
/// backend is rolling to and how far it got. Published after every change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSnapshot {
    /// Bumped every time a table write changes the endpoint list (1 = the list the
    /// backend was created with), like a Deployment's `observedGeneration`.
    pub generation: u64,
    /// The endpoint list of that generation.
    pub desired: Vec<String>,
    /// Counts and phase.
    pub status: RollingStatus,
}

impl RolloutSnapshot {
    /// True when the update of generation `generation` (or a later one) is complete
    /// and still healthy: every desired endpoint is in rotation, no old one is left,
    /// and all of them passed their last health check (`Complete` is final for an
    /// update, so an endpoint failing afterwards shows only in `ready`).
    pub fn is_complete(&self, generation: u64) -> bool {
        self.generation >= generation
            && self.status.phase == Phase::Complete
            && self.status.ready >= self.status.desired
    }
}

/// What the driver must health-check at this tick.
#[derive(Debug, Clone)]
pub struct ProbePlan {
    /// The backend's health check; `None`: probe nothing.
    pub health: Option<HealthConfig>,
    /// Endpoints to probe: the rotation and the desired endpoints waiting to join.
    pub targets: Vec<String>,
    /// Time until the next tick.
    pub interval: Duration,
}

/// One endpoint as `GET /api/v1/backends/{name}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointView {
    /// `host:port`.
    pub address: String,
    /// In the desired list of the current update.
    pub desired: bool,
    /// In rotation (may receive new requests if ready and not ejected).
    pub in_rotation: bool,
    /// Passing its health check (always true without one).
    pub ready: bool,
    /// Ejected by outlier detection right now.
    pub ejected: bool,
    /// Time left of the ejection, in ms.
    pub ejected_for_ms: Option<u64>,
    /// Left the rotation; in-flight requests are finishing.
    pub draining: bool,
    /// Requests in flight now.
    pub in_flight: usize,
    /// Health probes failed in a row (0 without health checks).
    pub failed_probes: u32,
}

/// The rolling-update part of `GET /api/v1/backends/{name}`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointsView {
    /// Current update generation (see [`RolloutSnapshot::generation`]).
    pub generation: u64,
    /// Counts (`desired`, `ready`, `updated`, `old`, `total`, `draining`) and `phase`
    /// (`Progressing`, `Complete`, `Stalled`).
    #[serde(flatten)]
    pub status: RollingStatus,
    /// The endpoint list being rolled to.
    pub desired_endpoints: Vec<String>,
    /// `maxSurge` / `maxUnavailable` as configured.
    pub max_surge: IntOrPercent,
    /// See `max_surge`.
    pub max_unavailable: IntOrPercent,
    /// Both resolved against the desired count.
    pub resolved: Resolved,
    /// Without progress for this long the update is reported `Stalled`.
    pub progress_deadline_ms: u64,
    /// Time since the update started.
    pub ms_since_start: u64,
    /// Time since the last progress (add, remove, or more ready endpoints).
    pub ms_since_progress: u64,
    /// Every endpoint known: in rotation, joining, or draining.
    pub endpoints: Vec<EndpointView>,
    /// Recent events, oldest first.
    pub events: Vec<EndpointEvent>,
}

/// The health part of `GET /api/v1/backends/{name}`: the checks in force and which
/// endpoints of the rotation pass them.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthView {
    /// The active health check, if any (`null`: every endpoint is ready when added).
    pub health_check: Option<HealthConfig>,
    /// Passive outlier detection, if any.
    pub outlier_detection: Option<OutlierConfig>,
    /// Endpoints in rotation passing their health check.
    pub ready: Vec<String>,
    /// Endpoints in rotation failing it (no traffic).
    pub not_ready: Vec<String>,
    /// Endpoints in rotation ejected by outlier detection now (no traffic).
    pub ejected: Vec<String>,
}

/// Everything behind the state lock.
#[derive(Debug)]
struct Managed {
    /// Settings in force.
    settings: EndpointSettings,
    /// The current (or last, complete) rolling update.
    update: RollingState,
    /// See [`RolloutSnapshot::generation`].
    generation: u64,
    /// Probe state of every endpoint in `update.members` or `update.desired`.
    health: HashMap<String, HealthState>,
    /// The proxy's endpoint objects of every member (rotation and draining).
    objects: HashMap<String, Arc<Endpoint>>,
    /// Members draining, with the time they left the rotation.
    draining_since: HashMap<String, u64>,
    /// Readiness from outside the health checks (see [`EndpointControl::set_gate`]).
    gate: Option<Gate>,
    /// The gate changed since the last tick, which re-reads every endpoint's flag.
    gate_changed: bool,
}

/// What an endpoint provider says of each endpoint it fills a backend with:
/// address → `None` when ready, or the reason it is not (a Docker HEALTHCHECK
/// still `starting`, `unhealthy`, a container that is restarting or gone).
/// An address the provider does not list is not ready: nothing runs there.
pub type Gate = HashMap<String, Option<String>>;

impl Managed {
    /// Health check (when there is one) and provider gate (when there is one)
    /// both pass: what the rolling update and the balancer go by.
    fn ready(&self, ep: &str) -> bool {
        let checked = self.settings.health.is_some();
        let healthy = self.health.get(ep).map_or(!checked, |h| h.ready);
        healthy && gate_ready(self.gate.as_ref(), ep)
    }
}

fn gate_ready(gate: Option<&Gate>, ep: &str) -> bool {
    gate.is_none_or(|g| matches!(g.get(ep), Some(None)))
}

/// Endpoint management of one backend (module doc).
#[derive(Debug)]
pub struct EndpointControl {
    /// Backend name, for logs and events.
    backend: String,
    /// Rolling update, health and endpoint objects.
    state: Mutex<Managed>,
    /// Passive outlier detection over the rotation.
    detector: Mutex<OutlierDetector>,
    /// `consecutiveFailures` for the request path's atomic counters; 0 = off.
    outlier_threshold: AtomicU32,
    /// Recent events.
    events: Mutex<EventLog>,
    /// Wakes the driver when an update starts (a stored permit is never lost).
    wake: Arc<Notify>,
    /// Latest rollout snapshot, for waiters.
    status: watch::Sender<RolloutSnapshot>,
}

impl EndpointControl {
    /// The state of a backend created with `spec`, and its first rotation. Its endpoints
    /// are the backend's initial list: in rotation and ready at once (health.rs explains
    /// why), whether the process is starting or the backend was added by a table write.
    pub fn new(spec: &BackendSpec, now: u64) -> (EndpointControl, Vec<Arc<Endpoint>>) {
        let settings = EndpointSettings::from_spec(spec);
        let checked = settings.health.is_some();
        let mut objects = HashMap::new();
        let mut rotation = Vec::new();
        let mut members = Vec::new();
        let mut health = HashMap::new();
        for address in &spec.endpoints {
            if objects.contains_key(address) {
                continue;
            }
            let Some(ep) = Endpoint::new(address) else {
                tracing::error!(target: "weir::endpoints", backend = %spec.name, endpoint = %address, "endpoint is not host:port; skipped");
                continue;
            };
            objects.insert(address.clone(), ep.clone());
            rotation.push(ep);
            members.push(Member::in_rotation(address.clone(), true));
            health.insert(
                address.clone(),
                HealthState::initial(checked, Origin::Initial),
            );
        }
        let update = rolling::start(&members, &spec.endpoints, settings.rolling, now);
        let detector = OutlierDetector::new(
            settings.outlier.unwrap_or_default(),
            &rotation_addresses(&update),
        );
        let snapshot = RolloutSnapshot {
            generation: 1,
            desired: update.desired.clone(),
            status: update.status(),
        };
        let threshold = settings.outlier.map_or(0, |o| o.consecutive_failures);
        let control = EndpointControl {
            backend: spec.name.clone(),
            state: Mutex::new(Managed {
                settings,
                update,
                generation: 1,
                health,
                objects,
                draining_since: HashMap::new(),
                gate: None,
                gate_changed: false,
            }),
            detector: Mutex::new(detector),
            outlier_threshold: AtomicU32::new(threshold),
            events: Mutex::new(EventLog::default()),
            wake: Arc::new(Notify::new()),
            status: watch::channel(snapshot).0,
        };
        (control, rotation)
    }

    /// Follows a table write. Settings are taken as they are; a changed endpoint list
    /// starts a rolling update from the current members (draining ones included, so a
    /// rollback can take them back) and wakes the driver. The rotation is left alone.
    pub fn sync(&self, spec: &BackendSpec, rotation: &ArcSwap<Vec<Arc<Endpoint>>>, now: u64) {
        let settings = EndpointSettings::from_spec(spec);
        let mut guard = lock(&self.state);
        let m = &mut *guard;
        if settings != m.settings {
            self.apply_settings(m, settings, rotation);
        }
        if spec.endpoints == m.update.desired {
            return;
        }
        let previous = m.update.desired.clone();
        m.update = rolling::start(&m.update.members, &spec.endpoints, m.settings.rolling, now);
        m.generation += 1;
        let checked = m.settings.health.is_some();
        for ep in &m.update.desired {
            m.health
                .entry(ep.clone())
                .or_insert_with(|| HealthState::initial(checked, Origin::Added));
        }
        tracing::info!(target: "weir::endpoints", backend = %self.backend, generation = m.generation, from = ?previous, to = ?m.update.desired, "rolling update started");
        self.push_event(
            "updateStarted",
            None,
            m.generation,
            format!("{previous:?} -> {:?}", m.update.desired),
            now,
        );
        self.publish(m);
        self.wake.notify_one();
    }

    /// Takes new settings. Turning health checks on or off resets every member to
    /// ready (serving endpoints keep serving until probes say otherwise) and every
    /// endpoint still waiting to join to the new rule.
    fn apply_settings(
        &self,
        m: &mut Managed,
        settings: EndpointSettings,
        rotation: &ArcSwap<Vec<Arc<Endpoint>>>,
    ) {
        let was_checked = m.settings.health.is_some();
        let checked = settings.health.is_some();
        if was_checked != checked {
            let members: HashSet<&str> = m
                .update
                .members
                .iter()
                .map(|x| x.endpoint.as_str())
                .collect();
            for (ep, h) in m.health.iter_mut() {
                let origin = if members.contains(ep.as_str()) {
                    Origin::Initial
                } else {
                    Origin::Added
                };
                *h = HealthState::initial(checked, origin);
            }
            for ep in rotation.load().iter() {
                ep.ready.store(true, Ordering::Relaxed);
            }
        }
        m.update.config = settings.rolling;
        let outlier = settings.outlier.unwrap_or_default();
        lock(&self.detector).config = outlier;
        self.outlier_threshold.store(
            settings.outlier.map_or(0, |o| o.consecutive_failures),
            Ordering::Relaxed,
        );
        if settings.outlier.is_none() {
            for ep in rotation.load().iter() {
                ep.ejected_until_ms.store(0, Ordering::Relaxed);
            }
        }
        m.settings = settings;
    }

    /// Sets (or, with `None`, lifts) the provider's readiness gate: from now on an
    /// endpoint is ready only if its health check passes and the gate says so.
    /// A change is an event (`ready` / `notReady` with the provider's reason) for
    /// every endpoint the update knows, and wakes the driver, whose next tick
    /// applies it to the rolling update and the balancer.
    pub fn set_gate(&self, gate: Option<Gate>, now: u64) {
        let mut guard = lock(&self.state);
        let m = &mut *guard;
        if m.gate == gate {
            return;
        }
        let mut known: Vec<String> = m
            .update
            .members
            .iter()
            .filter(|x| !x.draining)
            .map(|x| x.endpoint.clone())
            .chain(m.update.desired.iter().cloned())
            .collect();
        known.sort();
        known.dedup();
        for ep in &known {
            let before = gate_ready(m.gate.as_ref(), ep);
            let after = gate_ready(gate.as_ref(), ep);
            if before == after {
                continue;
            }
            let (kind, msg) = if after {
                ("ready", "provider: ready".to_string())
            } else {
                let why = gate
                    .as_ref()
                    .and_then(|g| g.get(ep).cloned().flatten())
                    .unwrap_or_else(|| "not among its containers".to_string());
                ("notReady", format!("provider: {why}"))
            };
            self.push_event(kind, Some(ep), m.generation, msg, now);
        }
        m.gate = gate;
        m.gate_changed = true;
        self.wake.notify_one();
    }

    /// The handle the driver waits on between ticks.
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// What to probe before the next [`Self::tick`].
    pub fn probe_plan(&self) -> ProbePlan {
        let m = lock(&self.state);
        ProbePlan {
            health: m.settings.health.clone(),
            targets: match m.settings.health {
                Some(_) => m
                    .update
                    .probe_targets()
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
                None => Vec::new(),
            },
            interval: m.settings.tick_interval(),
        }
    }
}

fn rotation_addresses(update: &RollingState) -> Vec<String> {
    update.rotation().map(|m| m.endpoint.clone()).collect()
}
