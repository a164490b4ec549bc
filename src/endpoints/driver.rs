//! The IO side of endpoint management: one task per backend that health-checks its
//! endpoints and drives its rolling update, one step per tick (DESIGN §7).
//!
//! [`spawn`] starts a supervisor that makes sure every backend of the table has a
//! driver (backends appear with table writes) and stops them all on shutdown. A
//! driver ([`drive`]) loops:
//!
//! 1. ask the backend what to probe ([`EndpointControl::probe_plan`]: the rotation and
//!    the desired endpoints waiting to join);
//! 2. probe them all concurrently: `GET {healthCheck.path}` over a fresh connection
//!    (so a probe also checks that the endpoint still accepts connections, like a
//!    Kubernetes `httpGet` probe), `Connection: close`, bounded by `timeout`;
//! 3. [`EndpointControl::tick`]: readiness, one rolling step applied to the rotation,
//!    drains, re-admissions;
//! 4. forward new events, then sleep for the interval (the health-check interval, or
//!    one second without health checks) or until a table write starts an update.
//!
//! A driver holds only a `Weak` reference between ticks: when a table write removes
//! its backend, it ends on its own.
//!
//! The waits go through the injected [`Clock`] ([`spawn_with_clock`]); the tick's time
//! is the endpoint clock ([`now_ms`]), which the request path's outlier ejection
//! shares and which already follows tokio's clock, so paused time drives both.

use crate::clock::Clock;
use crate::dataplane::backend::Backend;
use crate::dataplane::endpoints::health::{HealthConfig, ProbeResult};
use crate::dataplane::endpoints::runtime::{now_ms, EndpointControl, EndpointEvent};
use crate::dataplane::store::TableStore;
use bytes::Bytes;
use http::header::{CONNECTION, HOST, USER_AGENT};
use http::{HeaderValue, Request, Uri};
use http_body_util::Empty;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tokio::task::{JoinHandle, JoinSet};

/// The health-check client: no pooling, so every probe opens its own connection.
pub type ProbeClient = Client<HttpConnector, Empty<Bytes>>;

/// Receives every endpoint event once (the app forwards them to `/api/v1/events`).
pub type EventSink = Arc<dyn Fn(&EndpointEvent) + Send + Sync>;

/// How the drivers behave.
#[derive(Clone)]
pub struct DriverOptions {
    /// Longest a removed endpoint stays draining while requests are still in flight;
    /// after it, the endpoint is forgotten (the requests themselves are not cut).
    pub drain_timeout: Duration,
    /// Where events go besides the log and the backend's own recent list.
    pub on_event: Option<EventSink>,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            drain_timeout: Duration::from_secs(30),
            on_event: None,
        }
    }
}

impl std::fmt::Debug for DriverOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverOptions")
            .field("drain_timeout", &self.drain_timeout)
            .field("on_event", &self.on_event.is_some())
            .finish()
    }
}

/// Builds the probe client: `TCP_NODELAY`, no idle connections kept.
pub fn probe_client() -> ProbeClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.enforce_http(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(connector)
}

/// Starts the supervisor: a driver for every backend of the table now and after every
/// table write, all stopped when `shutdown` turns true (the returned task ends once
/// every driver has).
pub fn spawn(
    store: Arc<TableStore>,
    opts: DriverOptions,
    shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    spawn_with_clock(store, opts, Clock::system(), shutdown)
}

/// [`spawn`] with the drivers waiting on `clock`.
pub fn spawn_with_clock(
    store: Arc<TableStore>,
    opts: DriverOptions,
    clock: Clock,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        // Subscribe before the first scan so that no backend added in between is missed.
        let mut changes = store.subscribe();
        let client = probe_client();
        let opts = Arc::new(opts);
        let mut drivers = JoinSet::new();
        loop {
            if *shutdown.borrow() {
                break;
            }
            let snap = store.load();
            for name in snap.spec.backends.keys() {
                let Some(backend) = store.backend(name) else {
                    continue;
                };
                if backend.driver_started.swap(true, Ordering::AcqRel) {
                    continue;
                }
                drivers.spawn(drive(
                    Arc::downgrade(&backend),
                    client.clone(),
                    opts.clone(),
                    clock,
                    shutdown.clone(),
                ));
            }
            drop(snap);
            tokio::select! {
                r = changes.recv() => {
                    if let Err(broadcast::error::RecvError::Closed) = r {
                        break;
                    }
                }
                r = shutdown.changed() => {
                    if r.is_err() {
                        break;
                    }
                }
                Some(_) = drivers.join_next(), if !drivers.is_empty() => {}
            }
        }
        // Drivers watch the same signal; wait for them so a shutdown is complete.
        while drivers.join_next().await.is_some() {}
    })
}

/// The loop of one backend's driver (module doc). Ends when the backend is gone or
/// on shutdown.
pub async fn drive(
    backend: Weak<Backend>,
    client: ProbeClient,
    opts: Arc<DriverOptions>,
    clock: Clock,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(wake) = backend.upgrade().map(|b| b.control().waker()) else {
        return;
    };
    let drain_ms = u64::try_from(opts.drain_timeout.as_millis()).unwrap_or(u64::MAX);
    let mut forwarded = 0;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let Some(b) = backend.upgrade() else {
            return;
        };
        let plan = b.control().probe_plan();
        let results = match &plan.health {
            Some(cfg) => probe_all(&client, cfg, plan.targets).await,
            None => Vec::new(),
        };
        b.control().tick(&b.rotation, &results, now_ms(), drain_ms);
        forwarded = forward_events(b.control(), forwarded, opts.on_event.as_ref());
        drop(b);
        tokio::select! {
            _ = clock.sleep(plan.interval) => {}
            _ = wake.notified() => {}
            r = shutdown.changed() => {
                if r.is_err() {
                    return;
                }
            }
        }
    }
}

/// Hands the events after `after` to `sink`; returns the last sequence number seen.
fn forward_events(control: &EndpointControl, after: u64, sink: Option<&EventSink>) -> u64 {
    let events = control.events_since(after);
    let last = events.last().map_or(after, |e| e.seq);
    if let Some(sink) = sink {
        for e in &events {
            sink(e);
        }
    }
    last
}

/// Probes every target concurrently; each result comes back with its endpoint.
pub async fn probe_all(
    client: &ProbeClient,
    cfg: &HealthConfig,
    targets: Vec<String>,
) -> Vec<(String, ProbeResult)> {
    let mut set = JoinSet::new();
    for target in targets {
        let client = client.clone();
        let cfg = cfg.clone();
        set.spawn(async move {
            let result = probe(&client, &cfg, &target).await;
            (target, result)
        });
    }
    let mut results = Vec::with_capacity(set.len());
    while let Some(r) = set.join_next().await {
        if let Ok(r) = r {
            results.push(r);
        }
    }
    results
}

/// One probe: `GET http://{endpoint}{path}` within `timeout`; a connect error, a
/// timeout or a status outside `expectedStatus` fails it.
pub async fn probe(client: &ProbeClient, cfg: &HealthConfig, endpoint: &str) -> ProbeResult {
    let status = match probe_request(cfg, endpoint) {
        Some(req) => {
            let timeout = Duration::from_millis(cfg.timeout_ms);
            match tokio::time::timeout(timeout, client.request(req)).await {
                Ok(Ok(resp)) => Some(resp.status().as_u16()),
                Ok(Err(e)) => {
                    tracing::debug!(target: "weir::endpoints", endpoint, error = %e, "health probe failed");
                    None
                }
                Err(_) => {
                    tracing::debug!(target: "weir::endpoints", endpoint, timeout_ms = cfg.timeout_ms, "health probe timed out");
                    None
                }
            }
        }
        None => None,
    };
    cfg.probe_result(status)
}

fn probe_request(cfg: &HealthConfig, endpoint: &str) -> Option<Request<Empty<Bytes>>> {
    let uri: Uri = format!("http://{endpoint}{}", cfg.path).parse().ok()?;
    let mut req = Request::new(Empty::new());
    *req.uri_mut() = uri;
    let headers = req.headers_mut();
    headers.insert(HOST, HeaderValue::from_str(endpoint).ok()?);
    headers.insert(USER_AGENT, HeaderValue::from_static("weir-health-check"));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    Some(req)
}
