//! The raw schema of `providers:` (DESIGN §16): sources that fill backends'
//! endpoint lists from outside the file. Kept beside `raw` (which re-exports
//! it); the rules of `raw` hold here too (raw strings, unknown fields rejected).

use serde::{Deserialize, Serialize};

/// `providers:`: each key is one kind of provider, absent when unused.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawProviders {
    /// Backends from Docker container labels (`weir.backend`, `weir.port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<RawDockerProvider>,
}

/// `providers.docker`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawDockerProvider {
    /// `unix:///var/run/docker.sock` (default) or `tcp://host:port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Client certificate, key and CA of a `tcp://` daemon with TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<RawDockerTls>,
    /// The Docker network whose container IP is the endpoint address; absent:
    /// the container's only network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// Quiet time after an event before the endpoint lists are recomputed, so a
    /// burst (`compose up` of several replicas) is one rolling update (default 250ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce: Option<String>,
    /// A full re-list of the containers this often even without events (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_interval: Option<String>,
    /// Bound on one Engine API request (default 10s; the event stream is not bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// `providers.docker.tls`: all three files, PEM.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawDockerTls {
    /// The CA that signed the daemon's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// weir's client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<String>,
    /// Its private key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
}
