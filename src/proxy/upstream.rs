//! Upstream side: backend runtime state (the endpoints in rotation, their
//! in-flight counts) and the one pooled HTTP client shared by every route.
//!
//! Backend state outlives table swaps: a new table that still names backend
//! `app-blue` gets the same `Arc<Backend>`, so in-flight counts, outlier
//! state and pooled connections carry over.

use crate::config::{BackendSpec, LoadBalancer, ProxySettings};
use crate::proxy::body::ProxyBody;
use arc_swap::ArcSwap;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The pooled upstream client type.
pub type UpstreamClient = Client<HttpConnector, ProxyBody>;

/// Builds the shared client: keep-alive pool with idle timeout (needs the
/// timer, or idle connections are never reaped), per-host idle cap,
/// TCP_NODELAY and a connect timeout. Names are resolved at connect time, so
/// a `host:port` endpoint follows DNS changes on its next new connection.
pub fn build_client(settings: &ProxySettings) -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(settings.connect_timeout));
    connector.set_keepalive(Some(std::time::Duration::from_secs(60)));
    connector.enforce_http(true);
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .pool_idle_timeout(settings.upstream_idle_timeout)
        .pool_max_idle_per_host(settings.upstream_max_idle_per_host)
        .build(connector)
}

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
        }))
    }

    fn usable(&self) -> bool {
        self.ready.load(Ordering::Relaxed) && !self.draining.load(Ordering::Relaxed)
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
}

impl Backend {
    fn new(spec: &BackendSpec) -> Arc<Self> {
        let eps: Vec<Arc<Endpoint>> = spec
            .endpoints
            .iter()
            .filter_map(|e| Endpoint::new(e))
            .collect();
        Arc::new(Backend {
            name: spec.name.clone(),
            lb: ArcSwap::from_pointee(spec.load_balancer),
            rotation: ArcSwap::from_pointee(eps),
            cursor: AtomicUsize::new(0),
        })
    }

    /// Picks an endpoint among the usable ones; `r` is a random word for
    /// the power-of-two-choices draw. `None` when nothing is usable (→ 503).
    pub fn pick(&self, r: u64) -> Option<Arc<Endpoint>> {
        let rot = self.rotation.load();
        let n = rot.len();
        if n == 0 {
            return None;
        }
        match **self.lb.load() {
            LoadBalancer::RoundRobin => {
                let start = self.cursor.fetch_add(1, Ordering::Relaxed);
                (0..n)
                    .map(|i| &rot[(start + i) % n])
                    .find(|e| e.usable())
                    .cloned()
            }
            LoadBalancer::LeastRequest => {
                let a = &rot[(r as usize) % n];
                let b = &rot[((r >> 32) as usize) % n];
                let best = match (a.usable(), b.usable()) {
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
                    (false, false) => return rot.iter().find(|e| e.usable()).cloned(),
                };
                Some(best.clone())
            }
        }
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
    /// The runtime backend for `spec`, created on first sight. A changed
    /// endpoint list replaces the rotation, keeping the state of endpoints
    /// that stay (readiness-gated rolling updates live in `endpoints/`).
    pub fn sync(&self, spec: &BackendSpec) -> Arc<Backend> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = map.get(&spec.name) {
            b.lb.store(Arc::new(spec.load_balancer));
            let current = b.rotation.load();
            let same = current.len() == spec.endpoints.len()
                && current
                    .iter()
                    .zip(&spec.endpoints)
                    .all(|(e, s)| e.address == *s);
            if !same {
                let next: Vec<Arc<Endpoint>> = spec
                    .endpoints
                    .iter()
                    .filter_map(|s| {
                        current
                            .iter()
                            .find(|e| e.address == *s)
                            .cloned()
                            .or_else(|| Endpoint::new(s))
                    })
                    .collect();
                for old in current.iter() {
                    if !next.iter().any(|e| Arc::ptr_eq(e, old)) {
                        old.draining.store(true, Ordering::Relaxed);
                    }
                }
                b.rotation.store(Arc::new(next));
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
