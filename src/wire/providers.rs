//! `GET /api/v1/providers` and the `providers` part of `/readyz`: what each
//! endpoint provider (`providers.docker`) sees and whether it is connected.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `GET /api/v1/providers`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvidersDoc {
    /// One document per configured provider.
    pub providers: Vec<ProviderStatus>,
}

/// One provider's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderStatus {
    /// `docker`.
    pub provider: String,
    /// Where it connects (`unix:///var/run/docker.sock`, `tcp://host:2376`).
    pub endpoint: String,
    /// Connected and following events now. While `false` the backends keep the
    /// endpoint lists last computed.
    pub connected: bool,
    /// Why the last connection failed or ended, while not connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Full listings of the containers done since the start.
    pub syncs: u64,
    /// Events received since the start.
    pub events: u64,
    /// Connections lost since the start.
    pub disconnects: u64,
    /// The backends this provider fills: the endpoint list it last wrote.
    pub backends: BTreeMap<String, ProvidedBackend>,
    /// Every labelled container seen at the last listing, ready or not.
    pub containers: Vec<ContainerStatus>,
    /// What the provider reported lately, oldest first (at most
    /// [`RECENT_EVENTS`]): `ProviderLabelIgnored`, a container labelled for a
    /// backend that does not say `provider: docker`, once per container and backend.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_events: Vec<ProviderEvent>,
}

/// Events a provider keeps in its status document.
pub const RECENT_EVENTS: usize = 100;

/// Something a provider reports (also on `GET /api/v1/events`, kind `providers`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderEvent {
    /// `ProviderLabelIgnored`.
    pub reason: String,
    /// When (ms since the Unix epoch).
    pub time_ms: u64,
    /// The container ID (12 characters).
    pub container: String,
    /// Its name.
    pub name: String,
    /// The backend its label names.
    pub backend: String,
    /// What happened, in a sentence.
    pub message: String,
}

/// One backend as a provider fills it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvidedBackend {
    /// The endpoint list written: the `ip:port` of every running container,
    /// ready or not (the rolling update lets one join only once it is ready).
    pub endpoints: Vec<String>,
    /// Endpoint → revision (`weir.revision`, default the image ID).
    pub revisions: BTreeMap<String, String>,
    /// Endpoints of the list that are not ready, with the reason (a HEALTHCHECK
    /// `starting` or `unhealthy`, a container restarting or gone).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub not_ready: BTreeMap<String, String>,
    /// Set when no container is running and the previous list is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One labelled container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    /// The container ID (12 characters).
    pub id: String,
    /// Its name, without the leading `/`.
    pub name: String,
    /// `weir.backend`.
    pub backend: String,
    /// `ip:port`, when one could be made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// `weir.revision`, or the image ID.
    pub revision: String,
    /// Docker's state: `running`, `restarting`, `exited`, ...
    pub state: String,
    /// The HEALTHCHECK status (`starting`, `healthy`, `unhealthy`); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// Running and, with a HEALTHCHECK, healthy: may serve once in rotation.
    pub ready: bool,
    /// Why not, when not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A provider in `/readyz`: connected or why not.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderStatusBrief {
    /// `docker`.
    pub provider: String,
    /// Connected and following events now.
    pub connected: bool,
    /// Why not, while not connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}
