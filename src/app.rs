//! Wiring: from a validated [`Config`] to running listeners, and back down.
//!
//! `start` binds everything first and fails as a whole (naming the listener)
//! if any address cannot be bound, so a half-started proxy never serves.

use crate::config::Config;
use crate::control::store::TableStore;
use crate::proxy::server;
use crate::proxy::service::ProxyShared;
use crate::proxy::upstream::build_client;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A started weir: its bound addresses and the handles to stop it.
pub struct RunningApp {
    /// Listener name → bound address (port 0 resolved).
    pub listeners: Vec<(String, SocketAddr)>,
    /// The table store (the in-process data plane of the engine, and tests).
    pub store: Arc<TableStore>,
    /// Shared request-path state.
    pub shared: Arc<ProxyShared>,
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
    let mut bound = Vec::new();
    for l in &cfg.listeners {
        if l.tls.is_some() {
            return Err(format!(
                "listener {}: TLS termination is not available in this build yet",
                l.name
            ));
        }
        let listener = TcpListener::bind(l.address)
            .await
            .map_err(|e| format!("listener {}: cannot bind {}: {e}", l.name, l.address))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        bound.push((l.name.clone(), addr, listener));
    }
    let store = TableStore::new(cfg.table.clone());
    let shared = Arc::new(ProxyShared {
        store: store.clone(),
        client: build_client(&cfg.proxy),
        settings: cfg.proxy.clone(),
        started: Instant::now(),
    });
    let (shutdown, rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let mut listeners = Vec::new();
    for (name, addr, listener) in bound {
        tracing::info!(listener = %name, %addr, "proxy listening");
        listeners.push((name, addr));
        tasks.push(tokio::spawn(server::serve(
            listener,
            shared.clone(),
            false,
            rx.clone(),
            cfg.proxy.drain_timeout,
        )));
    }
    Ok(RunningApp {
        listeners,
        store,
        shared,
        shutdown,
        tasks,
    })
}
