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

use super::health::{ExpectedStatus, HealthConfig, HealthState, Origin, ProbeResult};
use super::outlier::{Outcome, OutlierConfig, OutlierDetector};
use super::rolling::{self, Action, IntOrPercent, Member, Phase, RollingConfig, RollingState};
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
#[path = "runtime_tests.rs"]
mod tests;

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

    /// One tick: probe results in, one rolling step, rotation swapped if it changed,
    /// drains finished (`in_flight == 0`, or `drain_timeout_ms` passed), expired
    /// ejections cleared. `results` may name endpoints the update no longer knows
    /// (the list changed while probing): those are ignored.
    pub fn tick(
        &self,
        rotation: &ArcSwap<Vec<Arc<Endpoint>>>,
        results: &[(String, ProbeResult)],
        now: u64,
        drain_timeout_ms: u64,
    ) {
        let mut guard = lock(&self.state);
        let m = &mut *guard;
        let checked = m.settings.health.is_some();
        let generation = m.generation;

        // Health: count the probes, flip the balancer's flag on a change.
        if let Some(cfg) = &m.settings.health {
            for (ep, result) in results {
                let Some(h) = m.health.get_mut(ep) else {
                    continue;
                };
                if !h.observe(*result, cfg) {
                    continue;
                }
                let ready = h.ready;
                if let Some(obj) = m.objects.get(ep) {
                    obj.ready.store(ready, Ordering::Relaxed);
                }
                let (kind, msg) = if ready {
                    ("ready", "health check passes")
                } else {
                    ("notReady", "health check fails")
                };
                if ready {
                    tracing::info!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep, "endpoint ready");
                } else {
                    tracing::warn!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep, "endpoint not ready");
                }
                self.push_event(kind, Some(ep), generation, msg.to_string(), now);
            }
        }

        // One step of the rolling update.
        let (mut next, actions) = {
            let health = &m.health;
            let readiness = |ep: &str| health.get(ep).map_or(!checked, |h| h.ready);
            rolling::step(&m.update, &readiness, now)
        };
        for action in &actions {
            match action {
                Action::Add(ep) => {
                    let ready = m.health.get(ep).map_or(!checked, |h| h.ready);
                    let obj = match m.objects.get(ep) {
                        Some(obj) => Some(obj.clone()),
                        None => Endpoint::new(ep),
                    };
                    let Some(obj) = obj else {
                        tracing::error!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep, "endpoint is not host:port; not added");
                        continue;
                    };
                    obj.ready.store(ready, Ordering::Relaxed);
                    obj.draining.store(false, Ordering::Relaxed);
                    obj.consecutive_failures.store(0, Ordering::Relaxed);
                    m.objects.insert(ep.clone(), obj);
                    m.draining_since.remove(ep);
                    tracing::info!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep, generation, "endpoint joins the rotation");
                    self.push_event(
                        "added",
                        Some(ep),
                        generation,
                        "joins the rotation".into(),
                        now,
                    );
                }
                Action::Remove(ep) => {
                    if let Some(obj) = m.objects.get(ep) {
                        obj.draining.store(true, Ordering::Relaxed);
                    }
                    m.draining_since.insert(ep.clone(), now);
                    tracing::info!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep, generation, "endpoint leaves the rotation; draining");
                    self.push_event(
                        "removed",
                        Some(ep),
                        generation,
                        "leaves the rotation, draining".into(),
                        now,
                    );
                }
            }
        }
        if !actions.is_empty() {
            let rot: Vec<Arc<Endpoint>> = next
                .rotation()
                .filter_map(|x| m.objects.get(&x.endpoint).cloned())
                .collect();
            rotation.store(Arc::new(rot));
            lock(&self.detector).set_endpoints(&rotation_addresses(&next));
        }

        // Drains: done when nothing is in flight any more, or the timeout passed.
        let mut finished: Vec<(String, bool)> = m
            .draining_since
            .iter()
            .filter_map(|(ep, since)| {
                let idle = m
                    .objects
                    .get(ep)
                    .is_none_or(|o| o.in_flight.load(Ordering::Relaxed) == 0);
                let expired = now.saturating_sub(*since) >= drain_timeout_ms;
                (idle || expired).then(|| (ep.clone(), idle))
            })
            .collect();
        finished.sort();
        for (ep, idle) in finished {
            next.drained(&ep);
            m.draining_since.remove(&ep);
            m.objects.remove(&ep);
            let msg = if idle {
                "drained".to_string()
            } else {
                format!("drain timeout ({drain_timeout_ms} ms) passed with requests in flight")
            };
            tracing::info!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep, "{msg}");
            self.push_event("drained", Some(&ep), generation, msg, now);
        }

        if next.phase_changed {
            let status = next.status();
            match next.phase {
                Phase::Stalled => {
                    tracing::warn!(target: "weir::endpoints", backend = %self.backend, generation, desired = status.desired, ready = status.ready, updated = status.updated, old = status.old, deadline_ms = next.config.progress_deadline_ms, "rolling update stalled: no progress within the progress deadline");
                    self.push_event(
                        "stalled",
                        None,
                        generation,
                        format!(
                            "no progress for {} ms: {} of {} desired endpoints in rotation, {} ready, {} old",
                            next.config.progress_deadline_ms,
                            status.updated,
                            status.desired,
                            status.ready,
                            status.old
                        ),
                        now,
                    );
                }
                Phase::Complete => {
                    tracing::info!(target: "weir::endpoints", backend = %self.backend, generation, "rolling update complete");
                    self.push_event(
                        "complete",
                        None,
                        generation,
                        "rotation is the desired list, all ready".into(),
                        now,
                    );
                }
                Phase::Progressing => {
                    tracing::info!(target: "weir::endpoints", backend = %self.backend, generation, "rolling update progressing again");
                    self.push_event(
                        "resumed",
                        None,
                        generation,
                        "progress after a stall".into(),
                        now,
                    );
                }
            }
        }

        let known: HashSet<&str> = next
            .members
            .iter()
            .map(|x| x.endpoint.as_str())
            .chain(next.desired.iter().map(String::as_str))
            .collect();
        m.health.retain(|ep, _| known.contains(ep.as_str()));
        let changed = next != m.update;
        m.update = next;
        if changed {
            self.publish(m);
        }

        // Re-admission: the ejection ran out; clearing the stamp keeps `pick` off the
        // clock.
        for ep in rotation.load().iter() {
            let until = ep.ejected_until_ms.load(Ordering::Relaxed);
            if until != 0
                && until <= now
                && ep
                    .ejected_until_ms
                    .compare_exchange(until, 0, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                tracing::info!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep.address, "ejection over; endpoint re-admitted");
                self.push_event(
                    "readmitted",
                    Some(&ep.address),
                    generation,
                    "ejection over".into(),
                    now,
                );
            }
        }
    }

    /// The request path reports one upstream result of `ep`: `failed` is a 5xx answer,
    /// a connect error, a broken exchange or a timeout. Cheap: see the module doc.
    pub fn observe(&self, ep: &Endpoint, failed: bool) {
        let threshold = self.outlier_threshold.load(Ordering::Relaxed);
        if threshold == 0 {
            return;
        }
        if !failed {
            if ep.consecutive_failures.load(Ordering::Relaxed) != 0 {
                ep.consecutive_failures.store(0, Ordering::Relaxed);
            }
            return;
        }
        let n = ep.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n < threshold {
            return;
        }
        ep.consecutive_failures.store(0, Ordering::Relaxed);
        let now = now_ms();
        let outcome = lock(&self.detector).on_threshold_reached(&ep.address, now);
        match outcome {
            Outcome::Ejected { until_ms } => {
                ep.ejected_until_ms.store(until_ms, Ordering::Relaxed);
                let ms = until_ms.saturating_sub(now);
                tracing::warn!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep.address, failures = threshold, ejected_ms = ms, "endpoint ejected");
                self.push_event(
                    "ejected",
                    Some(&ep.address),
                    self.status.borrow().generation,
                    format!("{threshold} consecutive failures; ejected for {ms} ms"),
                    now,
                );
            }
            Outcome::EjectionSkipped => {
                tracing::info!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep.address, "ejection skipped: maxEjectionPercent reached or last endpoint");
                self.push_event(
                    "ejectionSkipped",
                    Some(&ep.address),
                    self.status.borrow().generation,
                    format!("{threshold} consecutive failures, but maxEjectionPercent is reached or it is the last endpoint"),
                    now,
                );
            }
            Outcome::Recorded | Outcome::Ignored => {}
        }
    }

    /// Counts and phase of the current update.
    pub fn status(&self) -> RollingStatus {
        lock(&self.state).update.status()
    }

    /// Generation, desired list and status of the current update.
    pub fn snapshot(&self) -> RolloutSnapshot {
        self.status.borrow().clone()
    }

    /// A receiver that sees every new [`RolloutSnapshot`] (for async waiting, e.g.
    /// `rx.wait_for(|s| s.is_complete(generation))`).
    pub fn subscribe(&self) -> watch::Receiver<RolloutSnapshot> {
        self.status.subscribe()
    }

    /// Events with a sequence number above `after`, oldest first.
    pub fn events_since(&self, after: u64) -> Vec<EndpointEvent> {
        lock(&self.events)
            .recent
            .iter()
            .filter(|e| e.seq > after)
            .cloned()
            .collect()
    }

    /// Everything the API shows about the endpoints, at `now`.
    pub fn view(&self, now: u64) -> EndpointsView {
        let m = lock(&self.state);
        let u = &m.update;
        let desired: HashSet<&str> = u.desired.iter().map(String::as_str).collect();
        let mut endpoints: Vec<EndpointView> = Vec::new();
        let mut seen = HashSet::new();
        let checked = m.settings.health.is_some();
        let ready_of = |ep: &str| m.health.get(ep).map_or(!checked, |h| h.ready);
        let failed_probes = |ep: &str| m.health.get(ep).map_or(0, |h| h.consecutive_failures);
        for member in &u.members {
            seen.insert(member.endpoint.as_str());
            let obj = m.objects.get(&member.endpoint);
            let until = obj.map_or(0, |o| o.ejected_until_ms.load(Ordering::Relaxed));
            let ejected = until > now;
            endpoints.push(EndpointView {
                address: member.endpoint.clone(),
                desired: desired.contains(member.endpoint.as_str()),
                in_rotation: !member.draining,
                ready: obj.map_or(ready_of(&member.endpoint), |o| {
                    o.ready.load(Ordering::Relaxed)
                }),
                ejected,
                ejected_for_ms: ejected.then(|| until - now),
                draining: member.draining,
                in_flight: obj.map_or(0, |o| o.in_flight.load(Ordering::Relaxed)),
                failed_probes: failed_probes(&member.endpoint),
            });
        }
        for ep in &u.desired {
            if !seen.insert(ep.as_str()) {
                continue;
            }
            endpoints.push(EndpointView {
                address: ep.clone(),
                desired: true,
                in_rotation: false,
                ready: ready_of(ep),
                ejected: false,
                ejected_for_ms: None,
                draining: false,
                in_flight: 0,
                failed_probes: failed_probes(ep),
            });
        }
        EndpointsView {
            generation: m.generation,
            status: u.status(),
            desired_endpoints: u.desired.clone(),
            max_surge: u.config.max_surge,
            max_unavailable: u.config.max_unavailable,
            resolved: rolling::resolve(
                u.config.max_surge,
                u.config.max_unavailable,
                u.desired.len(),
            ),
            progress_deadline_ms: u.config.progress_deadline_ms,
            ms_since_start: now.saturating_sub(u.started_ms),
            ms_since_progress: now.saturating_sub(u.last_progress_ms),
            endpoints,
            events: lock(&self.events).recent.iter().cloned().collect(),
        }
    }

    /// The checks in force and the health of the rotation, at `now`.
    pub fn health_view(&self, rotation: &[Arc<Endpoint>], now: u64) -> HealthView {
        let (health_check, outlier_detection) = {
            let m = lock(&self.state);
            (m.settings.health.clone(), m.settings.outlier)
        };
        let mut view = HealthView {
            health_check,
            outlier_detection,
            ready: Vec::new(),
            not_ready: Vec::new(),
            ejected: Vec::new(),
        };
        for ep in rotation {
            if ep.ready.load(Ordering::Relaxed) {
                view.ready.push(ep.address.clone());
            } else {
                view.not_ready.push(ep.address.clone());
            }
            if ep.ejected_until_ms.load(Ordering::Relaxed) > now {
                view.ejected.push(ep.address.clone());
            }
        }
        view
    }

    fn publish(&self, m: &Managed) {
        self.status.send_replace(RolloutSnapshot {
            generation: m.generation,
            desired: m.update.desired.clone(),
            status: m.update.status(),
        });
    }

    fn push_event(
        &self,
        kind: &'static str,
        endpoint: Option<&str>,
        generation: u64,
        message: String,
        now: u64,
    ) {
        let mut log = lock(&self.events);
        log.last_seq += 1;
        let event = EndpointEvent {
            seq: log.last_seq,
            backend: self.backend.clone(),
            kind,
            endpoint: endpoint.map(str::to_string),
            generation,
            message,
            at_ms: now,
        };
        if log.recent.len() >= EVENT_LOG_CAPACITY {
            log.recent.pop_front();
        }
        log.recent.push_back(event);
    }
}

fn rotation_addresses(update: &RollingState) -> Vec<String> {
    update.rotation().map(|m| m.endpoint.clone()).collect()
}
