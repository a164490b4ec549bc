//! The Docker Engine API as the provider needs it, behind a small trait so the
//! driver can be tested without a daemon: list the labelled containers, inspect
//! one, follow the event stream. [`Bollard`] is the real client (unix socket, or
//! `tcp://` with or without TLS); the documents it returns are turned into the
//! provider's own [`Container`] and [`Event`] values here, so the pure parts
//! (`labels`, `events`) never see the client's types.

use super::events::Event;
use super::labels::{Container, LABEL_BACKEND};
use crate::config::{DockerEndpoint, DockerSettings};
use bollard::models::{ContainerInspectResponse, EventMessage};
use bollard::query_parameters::{EventsOptions, ListContainersOptions};
use futures_core::Stream;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed future of the Engine API.
pub type EngineFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;
/// The event stream: ends (or yields an error) when the connection is lost.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<Event, String>> + Send>>;

/// What the provider asks of a Docker daemon.
pub trait Engine: Send + Sync {
    /// `GET /version` and `GET /_ping`: the daemon answers, and the client speaks
    /// the API version it supports (an older daemon refuses a newer client's requests).
    fn ping(&self) -> EngineFuture<'_, ()>;
    /// IDs of every container (running or not) that has a `weir.backend` label.
    fn list(&self) -> EngineFuture<'_, Vec<String>>;
    /// One container's details; `Ok(None)` when it no longer exists.
    fn inspect<'a>(&'a self, id: &'a str) -> EngineFuture<'a, Option<Container>>;
    /// Container events of labelled containers from now on.
    fn events(&self) -> EventStream;
}

/// Makes a fresh [`Engine`] for each connection attempt.
pub type Connector = Arc<dyn Fn() -> Result<Arc<dyn Engine>, String> + Send + Sync>;

/// The real Engine API client.
pub struct Bollard {
    docker: bollard::Docker,
}

/// A [`Connector`] for `settings.endpoint`.
pub fn connector(settings: &DockerSettings) -> Connector {
    let settings = settings.clone();
    Arc::new(move || Bollard::connect(&settings).map(|b| Arc::new(b) as Arc<dyn Engine>))
}

impl Bollard {
    /// A client for `settings.endpoint` (connections are made per request).
    pub fn connect(settings: &DockerSettings) -> Result<Bollard, String> {
        let timeout = settings.timeout.as_secs().max(1);
        let version = bollard::API_DEFAULT_VERSION;
        let docker = match &settings.endpoint {
            DockerEndpoint::Unix(path) => {
                bollard::Docker::connect_with_unix(&path.to_string_lossy(), timeout, version)
            }
            DockerEndpoint::Tcp { address, tls: None } => {
                bollard::Docker::connect_with_http(&format!("tcp://{address}"), timeout, version)
            }
            DockerEndpoint::Tcp {
                address,
                tls: Some(t),
            } => {
                // Makes sure rustls has its process-wide provider (ring) before the client builds its config.
                let _ = crate::config::tls::provider();
                bollard::Docker::connect_with_ssl(
                    &format!("tcp://{address}"),
                    &t.key_file,
                    &t.cert_file,
                    &t.ca_file,
                    timeout,
                    version,
                )
            }
        }
        .map_err(|e| format!("{}: {e}", settings.endpoint))?;
        Ok(Bollard { docker })
    }
}

fn label_filter() -> HashMap<String, Vec<String>> {
    HashMap::from([("label".to_string(), vec![LABEL_BACKEND.to_string()])])
}

impl Engine for Bollard {
    fn ping(&self) -> EngineFuture<'_, ()> {
        Box::pin(async move {
            // The clones share their version setting: this one negotiates it for all.
            self.docker
                .clone()
                .negotiate_version()
                .await
                .map_err(|e| format!("GET /version: {e}"))?;
            self.docker.ping().await.map_err(|e| e.to_string())?;
            Ok(())
        })
    }

    fn list(&self) -> EngineFuture<'_, Vec<String>> {
        Box::pin(async move {
            let opts = ListContainersOptions {
                all: true,
                filters: Some(label_filter()),
                ..Default::default()
            };
            let list = self
                .docker
                .list_containers(Some(opts))
                .await
                .map_err(|e| e.to_string())?;
            Ok(list.into_iter().filter_map(|c| c.id).collect())
        })
    }

    fn inspect<'a>(&'a self, id: &'a str) -> EngineFuture<'a, Option<Container>> {
        Box::pin(async move {
            match self.docker.inspect_container(id, None).await {
                Ok(doc) => Ok(Some(container_from_inspect(&doc))),
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        })
    }

    fn events(&self) -> EventStream {
        let mut filters = label_filter();
        filters.insert("type".into(), vec!["container".into()]);
        let opts = EventsOptions {
            filters: Some(filters),
            ..Default::default()
        };
        let stream = self.docker.events(Some(opts));
        Box::pin(MapEvents {
            inner: Box::pin(stream),
        })
    }
}

/// The event stream with bollard's messages turned into [`Event`]s.
struct MapEvents<S> {
    inner: Pin<Box<S>>,
}

impl<S> Stream for MapEvents<S>
where
    S: Stream<Item = Result<EventMessage, bollard::errors::Error>>,
{
    type Item = Result<Event, String>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.inner
            .as_mut()
            .poll_next(cx)
            .map(|o| o.map(|r| r.map(|m| event_from_message(&m)).map_err(|e| e.to_string())))
    }
}

/// The provider's view of `GET /containers/{id}/json`.
pub fn container_from_inspect(doc: &ContainerInspectResponse) -> Container {
    let state = doc.state.as_ref();
    let health = state
        .and_then(|s| s.health.as_ref())
        .and_then(|h| h.status)
        .map(|s| s.to_string())
        .filter(|s| !s.is_empty() && s != "none");
    let networks = doc
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.as_ref())
        .map(|n| {
            n.iter()
                .map(|(name, ep)| (name.clone(), ep.ip_address.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    Container {
        id: doc.id.clone().unwrap_or_default(),
        name: doc
            .name
            .as_deref()
            .unwrap_or("")
            .trim_start_matches('/')
            .to_string(),
        labels: doc
            .config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .map(|l| l.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default(),
        state: state
            .and_then(|s| s.status)
            .map(|s| s.to_string())
            .unwrap_or_default(),
        health,
        image_id: doc.image.clone().unwrap_or_default(),
        networks,
    }
}

/// The provider's view of one `/events` message.
pub fn event_from_message(m: &EventMessage) -> Event {
    let actor = m.actor.as_ref();
    Event {
        kind: m.typ.map(|t| t.to_string()).unwrap_or_default(),
        action: m.action.clone().unwrap_or_default(),
        id: actor.and_then(|a| a.id.clone()).unwrap_or_default(),
        attributes: actor
            .and_then(|a| a.attributes.as_ref())
            .map(|a| a.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default(),
    }
}
