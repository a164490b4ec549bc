//! The Docker Engine API as the provider needs it, behind a small trait so the
//! driver can be tested without a daemon: list the labelled containers, inspect
//! one, follow the event stream. [`Bollard`] is the real client (unix socket, or
//! `tcp://` with or without TLS) over weir's own [`Transport`], which caps every
//! answer at 16 MiB; the documents it returns are turned into the
//! provider's own [`Container`] and [`Event`] values here, so the pure parts
//! (`labels`, `events`) never see the client's types.

use super::events::Event;
use super::labels::{Container, LABEL_BACKEND};
use super::transport::{error_chain, Meter, Transport};
use crate::config::DockerSettings;
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
    /// Bound on a list or an inspect, answer read whole.
    timeout: std::time::Duration,
    /// The event stream's byte count, restarted at each event.
    events: Meter,
}

/// A [`Connector`] for `settings.endpoint`.
pub fn connector(settings: &DockerSettings) -> Connector {
    let settings = settings.clone();
    Arc::new(move || Bollard::connect(&settings).map(|b| Arc::new(b) as Arc<dyn Engine>))
}

impl Bollard {
    /// A client for `settings.endpoint` (a connection per request, every answer
    /// capped: [`super::transport`]).
    pub fn connect(settings: &DockerSettings) -> Result<Bollard, String> {
        let transport =
            Arc::new(Transport::new(settings).map_err(|e| format!("{}: {e}", settings.endpoint))?);
        let events = transport.events_meter();
        let docker = bollard::Docker::connect_with_custom_transport(
            move |req: bollard::BollardRequest| {
                let t = transport.clone();
                async move { t.request(req).await }
            },
            Some("http://docker"),
            settings.timeout.as_secs().max(1),
            bollard::API_DEFAULT_VERSION,
        )
        .map_err(|e| format!("{}: {e}", settings.endpoint))?;
        Ok(Bollard {
            docker,
            timeout: settings.timeout,
            events,
        })
    }

    /// `f` within the timeout, its error as one line naming `what`.
    async fn bounded<T>(
        &self,
        what: &str,
        f: impl Future<Output = Result<T, bollard::errors::Error>>,
    ) -> Result<T, String> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(r) => r.map_err(|e| format!("{what}: {}", error_chain(&e))),
            Err(_) => Err(format!("{what}: no whole answer within {:?}", self.timeout)),
        }
    }
}

fn label_filter() -> HashMap<String, Vec<String>> {
    HashMap::from([("label".to_string(), vec![LABEL_BACKEND.to_string()])])
}

impl Engine for Bollard {
    fn ping(&self) -> EngineFuture<'_, ()> {
        Box::pin(async move {
            // The clones share their version setting: this one negotiates it for all.
            self.bounded("GET /version", self.docker.clone().negotiate_version())
                .await?;
            self.bounded("GET /_ping", self.docker.ping()).await?;
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
                .bounded(
                    "GET /containers/json",
                    self.docker.list_containers(Some(opts)),
                )
                .await?;
            Ok(list.into_iter().filter_map(|c| c.id).collect())
        })
    }

    fn inspect<'a>(&'a self, id: &'a str) -> EngineFuture<'a, Option<Container>> {
        Box::pin(async move {
            let what = format!("GET /containers/{id}/json");
            match tokio::time::timeout(self.timeout, self.docker.inspect_container(id, None)).await
            {
                Ok(Ok(doc)) => Ok(Some(container_from_inspect(&doc))),
                Ok(Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404,
                    ..
                })) => Ok(None),
                Ok(Err(e)) => Err(format!("{what}: {}", error_chain(&e))),
                Err(_) => Err(format!("{what}: no whole answer within {:?}", self.timeout)),
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
            meter: self.events.clone(),
        })
    }
}

/// The event stream with bollard's messages turned into [`Event`]s.
struct MapEvents<S> {
    inner: Pin<Box<S>>,
    /// Restarted at each event: the cap is per event.
    meter: Meter,
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
        let next = std::task::ready!(self.inner.as_mut().poll_next(cx));
        if matches!(next, Some(Ok(_))) {
            self.meter.restart();
        }
        std::task::Poll::Ready(next.map(|r| {
            r.map(|m| event_from_message(&m))
                .map_err(|e| format!("GET /events: {}", error_chain(&e)))
        }))
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
