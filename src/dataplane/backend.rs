//! Backend runtime state: the endpoints in rotation, their in-flight counts,
//! health and outlier state, and the registry that keeps it all by name.
//!
//! Backend state outlives table swaps: a new table that still names backend
//! `app-blue` gets the same `Arc<Backend>`, so in-flight counts, outlier
//! state and pooled connections carry over.
//!
//! A table write that changes a backend's endpoint list does not touch the
//! rotation: it starts a readiness-gated rolling update
//! ([`EndpointControl::sync`]), which the backend's driver task
//! (`endpoints::driver`) applies one step per tick (DESIGN §7).

use crate::config::{BackendSpec, LoadBalancer};
use crate::dataplane::endpoints::rolling::RollingStatus;
use crate::dataplane::endpoints::runtime::{
    now_ms, EndpointControl, EndpointsView, HealthView, RolloutSnapshot,
};
use crate::dataplane::resilience::breaker::Breaker;
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One upstream address.
#[derive(Debug)]
pub struct Endpoint {
    /// `host:port` as configured.
    pub address: String,
    /// Pre-parsed, so building the upstream URI costs no parsing.
    pub authority: http::uri::Authority,
    /// Requests sent and not yet finished (least-request balancing, draining).
    pub in_flight: AtomicUsize,
    /// Health state: false keeps it out of the pick (set by health checks).
    pub ready: AtomicBool,
    /// Set when the endpoint leaves the rotation: no new requests.
    pub draining: AtomicBool,
    /// Outlier ejection: skipped by the pick until this time on the endpoint
    /// clock (`endpoints::runtime::now_ms`); 0 = not ejected, so the pick reads
    /// the clock only while an ejection is recent.
    pub ejected_until_ms: AtomicU64,
    /// Failed upstream results in a row, counted without a lock on the request
    /// path (outlier detection).
    pub consecutive_failures: AtomicU32,
    /// Idle connections of the HTTP/1 fast path (`proxy::express`).
    pub(crate) idle: super::idle_pool::IdlePool,
}

impl Endpoint {
    /// A ready endpoint. `address` must have passed config validation.
    pub fn new(address: &str) -> Option<Arc<Self>> {
        let authority = address.parse().ok()?;
        Some(Arc::new(Endpoint {
            address: address.to_string(),
            authority,
            in_flight: AtomicUsize::new(0),
            ready: AtomicBool::new(true),
            draining: AtomicBool::new(false),
            ejected_until_ms: AtomicU64::new(0),
            consecutive_failures: AtomicU32::new(0),
            idle: Default::default(),
        }))
    }

    /// Ejected by outlier detection right now (the API shows it).
    pub fn is_ejected(&self) -> bool {
        let until = self.ejected_until_ms.load(Ordering::Relaxed);
        until != 0 && until > now_ms()
    }

    /// Ready and not draining: may serve, unless ejected.
    fn serving(&self) -> bool {
        self.ready.load(Ordering::Relaxed) && !self.draining.load(Ordering::Relaxed)
    }

    /// Serving and not ejected; `now` is read from the clock at most once per pick,
    /// and only when some endpoint carries an ejection stamp.
    fn usable(&self, now: &mut Option<u64>) -> bool {
        if !self.serving() {
            return false;
        }
        let until = self.ejected_until_ms.load(Ordering::Relaxed);
        until == 0 || until <= *now.get_or_insert_with(now_ms)
    }
}

/// Counts a request against its endpoint until dropped.
pub struct InFlight(pub Arc<Endpoint>);

impl InFlight {
    /// Starts counting.
    pub fn start(ep: Arc<Endpoint>) -> Self {
        ep.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(ep)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A backend's runtime state.
#[derive(Debug)]
pub struct Backend {
    /// Backend name from the config.
    pub name: String,
    /// How an endpoint is chosen.
    lb: ArcSwap<LoadBalancer>,
    /// Endpoints currently in rotation (swapped whole on change).
    pub rotation: ArcSwap<Vec<Arc<Endpoint>>>,
    /// Round-robin cursor.
    cursor: AtomicUsize,
    /// Health, rolling update and outlier state of the endpoints.
    control: EndpointControl,
    /// Set once a driver task runs for this backend (`endpoints::driver`).
    pub(crate) driver_started: AtomicBool,
    /// The circuit breaker, when the backend has one (a changed limit
    /// replaces it; requests admitted by the old one finish under it).
    pub breaker: ArcSwap<Option<Arc<Breaker>>>,
}

impl Backend {
    fn new(spec: &BackendSpec) -> Arc<Self> {
        let (control, eps) = EndpointControl::new(spec, now_ms());
        Arc::new(Backend {
            name: spec.name.clone(),
            lb: ArcSwap::from_pointee(spec.load_balancer),
            rotation: ArcSwap::from_pointee(eps),
            cursor: AtomicUsize::new(0),
            control,
            driver_started: AtomicBool::new(false),
            breaker: ArcSwap::from_pointee(spec.circuit_breaker.map(Breaker::new)),
        })
    }

    /// Picks an endpoint among the usable ones (ready, not draining, not
    /// ejected); `r` is a random word for the power-of-two-choices draw.
    /// If outlier ejection has left nothing usable, a ready ejected endpoint
    /// is used rather than failing (Envoy's panic routing): ejection must
    /// never be what takes a backend down. `None` when nothing is ready (→ 503).
    pub fn pick(&self, r: u64) -> Option<Arc<Endpoint>> {
        let rot = self.rotation.load();
        let n = rot.len();
        if n == 0 {
            return None;
        }
        let mut now = None;
        let picked = match **self.lb.load() {
            LoadBalancer::RoundRobin => {
                let start = self.cursor.fetch_add(1, Ordering::Relaxed);
                (0..n)
                    .map(|i| &rot[(start + i) % n])
                    .find(|e| e.usable(&mut now))
                    .cloned()
            }
            LoadBalancer::LeastRequest => {
                let a = &rot[(r as usize) % n];
                let b = &rot[((r >> 32) as usize) % n];
                let best = match (a.usable(&mut now), b.usable(&mut now)) {
                    (true, true) => {
                        if b.in_flight.load(Ordering::Relaxed) < a.in_flight.load(Ordering::Relaxed)
                        {
                            b
                        } else {
                            a
                        }
                    }
                    (true, false) => a,
                    (false, true) => b,
                    (false, false) => return rot.iter().find(|e| e.usable(&mut now)).cloned(),
                };
                Some(best.clone())
            }
        };
        picked.or_else(|| rot.iter().find(|e| e.serving()).cloned())
    }

    /// Reports one upstream result of `endpoint` (request path, after the
    /// answer or the error): `failed` is a 5xx, a connect error, a broken
    /// exchange or a timeout. Feeds passive outlier detection; costs one
    /// relaxed atomic operation unless this failure reaches the threshold.
    pub fn observe(&self, endpoint: &Endpoint, failed: bool) {
        self.control.observe(endpoint, failed);
    }

    /// Counts and phase of the endpoint rolling update (`Complete` when the
    /// rotation is the configured list, all ready).
    pub fn rollout_status(&self) -> RollingStatus {
        self.control.status()
    }

    /// Generation, desired list and status of the rolling update. The
    /// generation grows by one with every table write that changes the
    /// endpoint list.
    pub fn rollout(&self) -> RolloutSnapshot {
        self.control.snapshot()
    }

    /// Follows the rolling update: a new value after every change, e.g.
    /// `rx.wait_for(|s| s.is_complete(generation)).await`.
    pub fn subscribe_rollout(&self) -> tokio::sync::watch::Receiver<RolloutSnapshot> {
        self.control.subscribe()
    }

    /// Endpoints (in rotation, joining, draining; ready, ejected, in flight),
    /// rolling-update counts, phase and recent events, for the API.
    pub fn endpoints_view(&self) -> EndpointsView {
        self.control.view(now_ms())
    }

    /// Health checks and outlier detection in force, and which endpoints of
    /// the rotation pass them, for the API.
    pub fn health_view(&self) -> HealthView {
        self.control.health_view(&self.rotation.load(), now_ms())
    }

    /// The endpoint state machine (for the driver).
    pub(crate) fn control(&self) -> &EndpointControl {
        &self.control
    }

    /// The endpoint addresses in rotation, in order.
    pub fn addresses(&self) -> Vec<String> {
        self.rotation
            .load()
            .iter()
            .map(|e| e.address.clone())
            .collect()
    }
}

/// All backends by name; survives table swaps.
#[derive(Debug, Default)]
pub struct BackendRegistry {
    map: Mutex<HashMap<String, Arc<Backend>>>,
}

impl BackendRegistry {
    /// The runtime backend for `spec`, created on first sight (its endpoints
    /// serve at once). For a known backend, settings follow the spec and a
    /// changed endpoint list starts a rolling update: the rotation is left
    /// as it is and the backend's driver moves it one step per tick.
    pub fn sync(&self, spec: &BackendSpec) -> Arc<Backend> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = map.get(&spec.name) {
            b.lb.store(Arc::new(spec.load_balancer));
            b.control.sync(spec, &b.rotation, now_ms());
            let same = match (&**b.breaker.load(), spec.circuit_breaker) {
                (Some(old), Some(new)) => old.limits == new,
                (None, None) => true,
                _ => false,
            };
            if !same {
                b.breaker
                    .store(Arc::new(spec.circuit_breaker.map(Breaker::new)));
            }
            return b.clone();
        }
        let b = Backend::new(spec);
        map.insert(spec.name.clone(), b.clone());
        b
    }

    /// Looks a backend up by name.
    pub fn get(&self, name: &str) -> Option<Arc<Backend>> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Forgets backends no longer named by the table.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|k, _| keep(k));
    }
}
