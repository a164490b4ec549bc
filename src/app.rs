//! Wiring: from a validated [`Config`] to running listeners, and back down.
//!
//! `start` binds everything first (proxy listeners and the admin listener)
//! and fails as a whole (naming the listener) if any address cannot be
//! bound, so a half-started proxy never serves. `/readyz` turns ready once
//! everything is bound and the table is loaded, and unready again when a
//! shutdown starts.

use crate::config::Config;
use crate::control::api::{self, ApiState, ReadinessCheck, RouteDef};
use crate::control::events::{self, EventBus};
use crate::dataplane::metrics::Metrics;
use crate::dataplane::store::TableStore;
use crate::proxy::server;
use crate::proxy::service::ProxyShared;
use crate::proxy::upstream::build_client;
use crate::rollout::Engine;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The admin API's route table: the core routes, then each feature's. The
/// framework (`control::api`) knows none of them; this is where they meet.
pub fn api_routes() -> impl Iterator<Item = &'static RouteDef> {
    crate::control::core::ROUTES
        .iter()
        .chain(crate::table_api::ROUTES.iter())
        .chain(crate::rollout::api::ROUTES.iter())
        .chain(crate::endpoints::api::ROUTES.iter())
        .chain(crate::providers::api::ROUTES.iter())
        .chain(crate::cluster::api::ROUTES.iter())
        .chain(crate::console::ROUTES.iter())
}

/// A started weir: its bound addresses and the handles to stop it.
pub struct RunningApp {
    /// Listener name → bound address (port 0 resolved).
    pub listeners: Vec<(String, SocketAddr)>,
    /// Bound address of the admin API (port 0 resolved).
    pub admin_addr: SocketAddr,
    /// The event stream of `/api/v1/events`; the rollout engine publishes
    /// its events here.
    pub events: Arc<EventBus>,
    /// The app's Prometheus registry.
    pub metrics: Arc<Metrics>,
    /// Readiness as reported by `/readyz`.
    pub ready: Arc<AtomicBool>,
    /// The table store (the in-process data plane of the engine, and tests).
    pub store: Arc<TableStore>,
    /// Shared request-path state.
    pub shared: Arc<ProxyShared>,
    /// The rollout engine driving the config's canaries (also reachable by the
    /// admin API's canary routes).
    pub engine: Arc<Engine>,
    /// Fleet membership through etcd (`cluster:`); `None`: single replica.
    pub cluster: Option<crate::cluster::Cluster>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningApp {
    /// Address of the first listener (tests and the demo use one).
    pub fn proxy_addr(&self) -> SocketAddr {
        self.listeners[0].1
    }

    /// Stops accepting, drains in-flight requests (bounded by the drain
    /// timeout) and waits for every task.
    pub async fn shutdown(self) {
        self.ready.store(false, Ordering::Release);
        // Stop the engine first: no table write during the drain.
        self.engine.shutdown().await;
        // Then leave the fleet: the lease is revoked, the others take over at once.
        if let Some(c) = &self.cluster {
            c.shutdown().await;
        }
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Binds and starts every part of the configuration.
pub async fn start(cfg: Config) -> Result<RunningApp, String> {
    if cfg.listeners.is_empty() {
        return Err("no listeners configured".into());
    }
    crate::control::auth::warn_readable_token_files(&cfg.admin.token_files);
    let mut bound = Vec::new();
    for l in &cfg.listeners {
        // Certificates are loaded before anything binds: a bad file fails the start.
        let tls = match &l.tls {
            Some(t) => Some(
                crate::proxy::tls::Terminator::new(t)
                    .map_err(|e| format!("listener {}: TLS: {e}", l.name))?,
            ),
            None => None,
        };
        let listener = TcpListener::bind(l.address)
            .await
            .map_err(|e| format!("listener {}: cannot bind {}: {e}", l.name, l.address))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        bound.push((
            l.name.clone(),
            addr,
            listener,
            tls,
            l.trusted_proxies.clone(),
        ));
    }
    let admin_address = cfg.admin.address;
    let admin_listener = TcpListener::bind(admin_address)
        .await
        .map_err(|e| format!("admin: cannot bind {admin_address}: {e}"))?;
    let admin_addr = admin_listener.local_addr().map_err(|e| e.to_string())?;
    let metrics = Metrics::new();
    let store = TableStore::with_metrics(cfg.table.clone(), metrics.clone());
    if cfg.providers.any() {
        store.enable_providers();
    }
    store.set_max_table_regex_bytes(cfg.limits.max_table_regex_bytes);
    let shared = Arc::new(ProxyShared {
        store: store.clone(),
        client: build_client(&cfg.proxy),
        settings: cfg.proxy.clone(),
        started: Instant::now(),
    });
    let events = EventBus::new();
    let (shutdown, rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let cluster = match &cfg.cluster {
        None => None,
        Some(settings) => {
            let c = start_cluster(settings, &cfg, admin_addr).await?;
            let table = store.clone();
            c.set_table_version(Arc::new(move || table.load().version));
            metrics.add_section(Arc::new(crate::cluster::api::ClusterMetrics(c.clone())));
            tasks.push(tokio::spawn(forward_cluster_events(
                c.clone(),
                events.clone(),
                rx.clone(),
            )));
            Some(c)
        }
    };
    let engine = Arc::new(crate::rollout::driver::start_for_app(
        &cfg,
        store.clone(),
        shared.started,
        events.clone(),
        cluster
            .clone()
            .map(|c| Arc::new(c) as Arc<dyn crate::cluster::Ownership>),
    )?);
    let mut listeners = Vec::new();
    for (name, addr, listener, tls, trusted) in bound {
        tracing::info!(listener = %name, %addr, tls = tls.is_some(), "proxy listening");
        listeners.push((name, addr));
        tasks.push(tokio::spawn(server::serve(
            listener,
            shared.clone(),
            tls,
            trusted.into(),
            rx.clone(),
            cfg.proxy.drain_timeout,
        )));
    }
    // Endpoint drivers: health checks and readiness-gated rolling updates (DESIGN §7);
    // the rollout engine reads a deployment as finished once its rotation caught up.
    tasks.push(crate::endpoints::driver::spawn(
        store.clone(),
        crate::endpoints::driver::DriverOptions {
            drain_timeout: cfg.proxy.drain_timeout,
            on_event: Some({
                let bus = events.clone();
                Arc::new(move |e| {
                    if let Ok(v) = serde_json::to_value(e) {
                        bus.publish("endpoints", v);
                    }
                })
            }),
        },
        rx.clone(),
    ));
    tasks.push(tokio::spawn(events::forward_table_changes(
        store.subscribe(),
        events.clone(),
        rx.clone(),
    )));
    tasks.push(tokio::spawn(metrics_upkeep(metrics.clone(), rx.clone())));
    // Endpoint providers (DESIGN §16): their lists are rolling updates like the API's.
    let board = crate::dataplane::providers::ProviderBoard::new();
    if let Some(docker) = &cfg.providers.docker {
        metrics.add_section(Arc::new(crate::providers::api::ProviderMetrics(
            board.clone(),
        )));
        tasks.push(crate::providers::docker::spawn(
            docker.clone(),
            store.clone(),
            board.clone(),
            crate::providers::docker::client::connector(docker),
            crate::clock::Clock::system(),
            rand::random(),
            Some(events.clone()),
            rx.clone(),
        ));
    }
    let ready = Arc::new(AtomicBool::new(false));
    let allowed_hosts = admin_allowed_hosts(&cfg, admin_addr);
    let state = Arc::new(ApiState {
        store: store.clone(),
        routes: api_routes().collect(),
        metrics: metrics.clone(),
        events: events.clone(),
        token: cfg.admin.token.clone(),
        read_only_token: cfg.admin.read_only_token.clone(),
        peer_token: cfg
            .cluster
            .as_ref()
            .and_then(|c| c.peer_token.as_ref())
            .map(|t| t.0.clone()),
        allowed_hosts,
        body_timeout: cfg.admin.body_timeout,
        event_streams: crate::control::events::StreamCounts::new(api::MAX_EVENT_STREAMS_PER_CLIENT),
        ready: ready.clone(),
        shutdown: rx.clone(),
        ext: {
            let mut ext = http::Extensions::new();
            ext.insert(engine.clone());
            ext.insert(shared.clone());
            ext.insert(board.clone());
            if let Some(c) = &cluster {
                ext.insert(c.clone());
                ext.insert(ReadinessCheck(crate::cluster::api::not_ready_reason));
            }
            ext
        },
    });
    tracing::info!(%admin_addr, auth = cfg.admin.token.is_some(), "admin API listening");
    tasks.push(tokio::spawn(api::serve(
        admin_listener,
        state,
        rx.clone(),
        cfg.proxy.drain_timeout,
    )));
    // Every listener is bound and the table is installed: ready.
    ready.store(true, Ordering::Release);
    Ok(RunningApp {
        listeners,
        admin_addr,
        events,
        metrics,
        ready,
        store,
        shared,
        engine,
        cluster,
        shutdown,
        tasks,
    })
}

/// Joins the fleet (`cluster:`): this replica's name and advertised control-API URL
/// default to `<hostname>:<admin port>` and `http://<admin address>` (the hostname
/// when the admin listener binds every interface). A configuration etcd refuses (its
/// certificate, weir's, the user, a permission) fails the start with the field to fix.
async fn start_cluster(
    settings: &crate::cluster::ClusterSettings,
    cfg: &Config,
    admin_addr: SocketAddr,
) -> Result<crate::cluster::Cluster, String> {
    let name = settings
        .name
        .clone()
        .unwrap_or_else(|| crate::cluster::default_name(admin_addr.port()));
    let api_url = advertised_api_url(settings, admin_addr);
    let canaries = cfg.canaries.iter().map(|c| c.raw.name.clone()).collect();
    tracing::info!(target: "weir::cluster", replica = %name, %api_url, etcd = ?settings.etcd, "joining the fleet");
    crate::cluster::Cluster::join(crate::cluster::ClusterOptions {
        settings: settings.clone(),
        name,
        api_url,
        canaries,
    })
    .await
}

/// The `Host` values the admin API answers: `admin.allowedHosts` (or its
/// defaults) and, in a fleet, the host of this replica's advertised URL, by
/// which the other replicas call it.
fn admin_allowed_hosts(
    cfg: &Config,
    admin_addr: SocketAddr,
) -> crate::config::admin_hosts::AllowedHosts {
    let mut allowed = cfg.admin.allowed_hosts.clone();
    if let Some(settings) = &cfg.cluster {
        allowed.add_url(&advertised_api_url(settings, admin_addr));
    }
    allowed
}

/// The control-API URL this replica gives the others: `cluster.apiUrl`, or
/// `http://<admin address>` (the hostname when the admin listener binds every
/// interface).
fn advertised_api_url(
    settings: &crate::cluster::ClusterSettings,
    admin_addr: SocketAddr,
) -> String {
    settings.api_url.clone().unwrap_or_else(|| {
        if admin_addr.ip().is_unspecified() {
            let host = crate::cluster::default_name(admin_addr.port());
            format!("http://{host}")
        } else {
            format!("http://{admin_addr}")
        }
    })
}

/// Publishes every ownership event on the control API's bus (SSE kind `cluster`).
async fn forward_cluster_events(
    cluster: crate::cluster::Cluster,
    bus: Arc<EventBus>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut rx = cluster.events();
    loop {
        tokio::select! {
            e = rx.recv() => match e {
                Ok(e) => {
                    if let Ok(v) = serde_json::to_value(&e) {
                        bus.publish("cluster", v);
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return,
            },
            _ = shutdown.changed() => return,
        }
    }
}

/// Folds recorded histogram samples into their buckets every few seconds
/// (the exporter keeps raw samples until then).
async fn metrics_upkeep(metrics: Arc<Metrics>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            _ = tick.tick() => metrics.upkeep(),
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        let yaml = format!(
            "listeners:\n  - name: web\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:9901\nbackends:\n  b: {{ endpoints: [\"127.0.0.1:9\"] }}\nroutes:\n  - name: r\n    primary: b\n{extra}"
        );
        crate::config::parse_yaml(&yaml, "t.yaml", std::path::Path::new(".")).unwrap()
    }

    #[test]
    fn a_replica_answers_the_name_the_others_call_it_by() {
        let admin: SocketAddr = "127.0.0.1:9901".parse().unwrap();
        let alone = admin_allowed_hosts(&config(""), admin);
        assert_eq!(alone.describe(), "localhost, 127.0.0.1, ::1");
        let fleet =
            config("cluster:\n  etcd: [\"http://127.0.0.1:2379\"]\n  apiUrl: http://r1:9901\n");
        let allowed = admin_allowed_hosts(&fleet, admin);
        assert!(allowed.allows("r1", Some(9901)));
        assert!(!allowed.allows("r2", Some(9901)));
        // Without apiUrl, the advertised URL is the admin address: loopback here.
        let fleet = config("cluster:\n  etcd: [\"http://127.0.0.1:2379\"]\n");
        let allowed = admin_allowed_hosts(&fleet, admin);
        assert!(allowed.allows("127.0.0.1", Some(9901)));
    }
}
