//! The configuration exactly as a user writes it (YAML file) or sends it (JSON
//! to the control API): serde structs, camelCase, unknown fields rejected.
//!
//! Nothing here is trusted: numbers are kept wide (`i64`) and strings raw so
//! that validation can name the field and the reason instead of serde giving a
//! bare "invalid value". Only `validate` turns these into runtime values.
//!
//! Kept whole although it is a little over 600 lines: it is one concern, the
//! schema, read top to bottom in the order of DESIGN §3 (a field is found by
//! its place in the file), and splitting it would only scatter that order.
//! The resilience policies' own blocks live in `raw_policies`, the metric templates'
//! in `raw_templates`, the cluster's etcd security in `raw_cluster`, all re-exported here.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use super::raw_cluster::{RawEtcdAuth, RawEtcdTls};
pub use super::raw_policies::{
    RawBackoff, RawCircuitBreaker, RawRateLimit, RawRetries, RawRetryBudget,
};
pub use super::raw_providers::{RawDockerProvider, RawDockerTls, RawProviders};
pub use super::raw_templates::{
    RawMetricTemplate, RawTemplateHeader, RawTemplateProvider, RawTemplateRef,
};

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawConfig {
    /// Where clients connect; each listener serves every route.
    #[serde(default)]
    pub listeners: Vec<RawListener>,
    /// The control API; absent means 127.0.0.1:9901 without a token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<RawAdmin>,
    /// Named upstream groups that routes point at.
    #[serde(default)]
    pub backends: BTreeMap<String, RawBackend>,
    /// Host + path prefix → primary/canary split.
    #[serde(default)]
    pub routes: Vec<RawRoute>,
    /// Progressive-delivery definitions driven by the rollout engine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canaries: Vec<RawCanary>,
    /// Data-plane limits and timeouts (defaults close to nginx/Envoy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<RawProxy>,
    /// Settings of the rollout engine itself (where it keeps its state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RawRollout>,
    /// Fleet coordination through etcd (one owner per canary); absent: this weir
    /// is the only replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<RawCluster>,
    /// Where `analysis.alerts` send their notifications, by name (Flagger's `AlertProvider`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub alert_providers: BTreeMap<String, RawAlertProvider>,
    /// Reusable metric queries by name (Flagger's `MetricTemplate`), used by
    /// `analysis.metrics[].templateRef`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metric_templates: BTreeMap<String, RawMetricTemplate>,
    /// Sources of endpoint lists besides the file (`providers.docker`, DESIGN §16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub providers: Option<RawProviders>,
    /// Bounds on what a configuration or an API write may cost the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<RawLimits>,
}

/// `limits:`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawLimits {
    /// Bytes the compiled regexes of one routing table may take together (default
    /// 64 MiB); a table over it is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_table_regex_bytes: Option<i64>,
}

/// One `alertProviders:` entry. Its `Debug` hides `address` (a chat webhook URL is a secret).
#[derive(Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawAlertProvider {
    /// `slack`, `msteams`, `discord`, `rocket`, `gchat` or `generic`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The webhook URL (`http://` or `https://`); or `addressFile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// A file holding the webhook URL (kept out of the config file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_file: Option<String>,
    /// Channel for Slack and Rocket.Chat (default `general`, as Flagger).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Sender name shown by Slack, Discord and Rocket.Chat (default `weir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// PEM CA certificates to trust for an `https://` address instead of the Mozilla roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// Bound on one delivery attempt (default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Extra attempts after a failed delivery, with jittered exponential backoff (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<i64>,
}

impl std::fmt::Debug for RawAlertProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawAlertProvider")
            .field("kind", &self.kind)
            .field("address", &self.address.as_ref().map(|_| "<redacted>"))
            .field("address_file", &self.address_file)
            .field("channel", &self.channel)
            .field("username", &self.username)
            .field("ca_file", &self.ca_file)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .finish()
    }
}

/// One `analysis.alerts` entry (Flagger's `CanaryAlert`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawAlert {
    /// Shown in the canary's notification status.
    pub name: String,
    /// `info` (default), `warn` or `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    /// The `alertProviders` entry to send to.
    pub provider_ref: RawProviderRef,
}

/// `providerRef: {name, namespace}`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawProviderRef {
    /// Key in `alertProviders`.
    pub name: String,
    /// Accepted for Flagger compatibility, ignored (weir has no namespaces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `cluster:`: the replicas of a fleet coordinate through etcd (see the `cluster` module).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawCluster {
    /// etcd client URLs (`http://host:port` or `https://host:port`, all alike),
    /// tried in order.
    #[serde(default)]
    pub etcd: Vec<String>,
    /// Key prefix of every key weir writes (default `/weir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Shard count: a number, or `auto` (one shard per live replica, the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<RawReplicas>,
    /// Lease renewal period (default 10s); the lease TTL is 3 × heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<String>,
    /// `round-robin` (default) or `hash`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// This replica's name (default `<hostname>:<admin port>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// This replica's control-API URL as the other replicas reach it (default
    /// `http://<admin address>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_url: Option<String>,
    /// File holding the token replicas present to each other's control API (at least
    /// 16 characters; required when `admin.tokenFile` is set). Never the admin token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_token_file: Option<String>,
    /// CIDRs another replica's `apiUrl` must resolve into (default: loopback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_allow: Option<Vec<String>>,
    /// How long a routing step may wait for a replica's acknowledgement before the
    /// run reports it lagging (default 5s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack_timeout: Option<String>,
    /// TLS to `https://` etcd endpoints: etcd's CA and weir's client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_tls: Option<RawEtcdTls>,
    /// An etcd v3 user weir logs in as (etcd with authentication enabled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_auth: Option<RawEtcdAuth>,
}

/// `replicas: 3` or `replicas: auto`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum RawReplicas {
    /// A fixed shard count.
    Count(i64),
    /// `auto`.
    Word(String),
}

/// The rollout engine's own settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawRollout {
    /// Directory of the per-canary state files (`<canary>.json`), relative to the
    /// config file; created if missing. Absent: state is kept in memory only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<String>,
}

/// The part of the configuration the control API can replace at run time
/// (`PUT /api/v1/table`): backends and routes.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawTable {
    /// Same as [`RawConfig::backends`].
    #[serde(default)]
    pub backends: BTreeMap<String, RawBackend>,
    /// Same as [`RawConfig::routes`].
    #[serde(default)]
    pub routes: Vec<RawRoute>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawListener {
    /// Used in logs and metrics.
    pub name: String,
    /// `ip:port`; port 0 asks the OS for a free port (tests).
    pub address: String,
    /// Terminate TLS on this listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<RawTls>,
    /// CIDRs (or addresses) of the proxies in front of this listener whose
    /// client-address headers are believed; from any other peer they are replaced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_proxies: Vec<String>,
}

/// TLS termination on a listener: one certificate (`certFile` + `keyFile`),
/// several chosen by SNI (`certificates`), or both (the single pair comes
/// first and is the default for clients that send no matching name).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawTls {
    /// PEM certificate chain (leaf first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<String>,
    /// PEM private key of `certFile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
    /// More certificates; the one whose names cover the client's SNI is
    /// served, the first one otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<RawCertificate>,
}

/// One certificate chain and its key (PEM files, reloaded when they change).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawCertificate {
    /// PEM certificate chain (leaf first).
    pub cert_file: String,
    /// PEM private key.
    pub key_file: String,
}

/// TLS from the proxy to a backend's endpoints.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawUpstreamTls {
    /// PEM file of the CA certificates to trust; absent: the Mozilla roots
    /// built into weir (`webpki-roots`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// Name sent as SNI and checked against the certificate; absent: the
    /// endpoint's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawAdmin {
    /// `ip:port` of the control API.
    pub address: String,
    /// File holding the bearer token; required off loopback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
    /// Also export the rollout series under Flagger's names and labels
    /// (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flagger_metrics: Option<bool>,
    /// File holding a second token that may read (every GET, `/metrics`, the
    /// console) but never write; needs `tokenFile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_token_file: Option<String>,
    /// The names and addresses clients may put in `Host` (each optionally with
    /// `:port`, `*` for any); other requests answer 421. Default: `localhost`,
    /// `127.0.0.1`, `::1` and the listen address. A fleet replica's own
    /// `cluster.apiUrl` host is always added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_hosts: Option<Vec<String>>,
    /// How long a client has to send a request's whole body, from its head on
    /// (default 10s); over it: 408.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_timeout: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawProxy {
    /// Per-connection idle time of pooled upstream connections (default 90s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_idle_timeout: Option<String>,
    /// Idle pooled connections kept per upstream endpoint (default 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_max_idle_per_host: Option<i64>,
    /// TCP connect timeout to upstreams (default 5s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<String>,
    /// Time to read a request's header block (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_read_timeout: Option<String>,
    /// How long a graceful shutdown waits for in-flight requests (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_timeout: Option<String>,
    /// Log one line per request at info level (default false: the access log
    /// is at debug level under target `weir::access`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_log: Option<bool>,
    /// Serve simple clear-text HTTP/1.1 requests on weir's own HTTP/1 fast
    /// path (`proxy::express`; default true); false sends every request
    /// through hyper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http1_fast_path: Option<bool>,
    /// Largest HTTP/1 request head or HTTP/2 header list, bytes (default
    /// 61440 = 60 KiB, Envoy's) → 431.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_header_bytes: Option<i64>,
    /// Most header fields in a request (default 100, Envoy's) → 431.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_headers: Option<i64>,
    /// Longest request target (path + query), bytes (default 8192, nginx's) → 414.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_uri_bytes: Option<i64>,
    /// Longest wait for the next frame of a request or response body
    /// (default 60s, nginx's client_body_timeout / proxy_read_timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_idle_timeout: Option<String>,
    /// Longest time to receive a whole request body, from the request head
    /// on (default: off; Envoy's request_timeout) → 408.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_body_timeout: Option<String>,
    /// Longest silence in both directions of an upgraded connection (WebSocket)
    /// before the tunnel is closed (default 5m, Envoy's stream idle timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel_idle_timeout: Option<String>,
    /// Open client connections per listener (default 10000); more wait in
    /// the listen backlog until one closes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<i64>,
    /// HTTP/2 streams a client may open at once per connection (default 128, nginx's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2_max_concurrent_streams: Option<i64>,
    /// Rapid-reset guard: streams reset by the client before the proxy
    /// accepted them, per connection, before it is closed (default 20, h2's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2_max_pending_accept_reset_streams: Option<i64>,
    /// Streams the proxy may reset because of client protocol errors, per
    /// connection, before it sends GOAWAY (default 1024, hyper's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2_max_local_error_reset_streams: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawBackend {
    /// `host:port` list; names are resolved at connect time.
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// `docker`: the Docker provider fills the list from the containers labelled
    /// `weir.backend=<name>` (the file may then list none). Absent: the list is the
    /// file's and the API's only; no container label touches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// `round-robin` (default) or `least-request` (power of two choices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<String>,
    /// Active health checks (see the endpoints module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<RawHealthCheck>,
    /// Rolling-update bounds when the endpoint list changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RawRollingUpdate>,
    /// Passive outlier ejection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier_detection: Option<RawOutlier>,
    /// Path answering the endpoint's revision (GET).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_path: Option<String>,
    /// HTTP version spoken to the endpoints: `http1` (default), `http2`
    /// (prior knowledge, h2c in clear text; what gRPC needs) or `auto`
    /// (ALPN over TLS, HTTP/1.1 in clear text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Connect to the endpoints with TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<RawUpstreamTls>,
    /// Limits on what is sent to the backend at once; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_breaker: Option<RawCircuitBreaker>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawRoute {
    /// Unique; used by the API, stats and canaries.
    pub name: String,
    /// Exact names or `*.suffix` wildcards; empty = any host.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Plain string prefix of the path (default `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    /// Backend serving by default.
    pub primary: String,
    /// Backend receiving the canary share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<String>,
    /// Percent of unpinned, unmatched traffic sent to the canary (0..100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_weight: Option<i64>,
    /// Upstream response-header timeout (default 15s) → 504.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Header edits on the way up and down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<RawHeaderPolicy>,
    /// A/B rules in Flagger's form: any item matching sends to the canary.
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<RawMatch>,
    /// Shadow a share of the primary's traffic to the canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<RawMirror>,
    /// Sticky canary/primary cookies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<RawAffinity>,
    /// Cookie values of the current run; written by the engine or filled in by
    /// the table store (DESIGN §5). Users normally leave this out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity_state: Option<RawAffinityState>,
    /// Retry policy; absent: no retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<RawRetries>,
    /// Local rate limit; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RawRateLimit>,
    /// Largest request body accepted (413 above it); absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_request_body_bytes: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawHeaderPolicy {
    /// Edits applied to the request sent upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RawHeaderEdits>,
    /// Edits applied to the response sent to the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<RawHeaderEdits>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawHeaderEdits {
    /// Replace (or create) these headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, String>,
    /// Append these values, keeping existing ones.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub add: BTreeMap<String, String>,
    /// Delete these headers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

/// One item of a Flagger `match` list: every condition present must hold.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawMatch {
    /// Header name (case-insensitive) → condition; `cookie` works as in Flagger.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, RawStringMatch>,
    /// Cookie name → condition, on parsed cookies.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cookies: BTreeMap<String, RawStringMatch>,
    /// Query parameter name → condition.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query_params: BTreeMap<String, RawStringMatch>,
    /// Condition on the method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<RawStringMatch>,
    /// Condition on the path (without the query string), as Istio's `uri`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<RawStringMatch>,
    /// Client address in any of these CIDRs (Flagger's `sourceLabels` analogue).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_ip: Vec<String>,
    /// Header name → condition that must NOT hold (Istio's `withoutHeaders`):
    /// the item fails when any of them holds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub without_headers: BTreeMap<String, RawStringMatch>,
    /// `uri` compares ignoring ASCII case (Istio's `ignoreUriCase`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_uri_case: Option<bool>,
    /// Condition on the scheme of the listener the request came in on
    /// (`http` or `https`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<RawStringMatch>,
    /// Condition on the authority as the client sent it (the Host header or
    /// HTTP/2 `:authority`, port included when sent), as Istio's `authority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority: Option<RawStringMatch>,
    /// The port of the listener the request arrived on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    /// Accepted only to be refused with a pointer to `sourceIp`: weir has no
    /// workload labels to select clients by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_labels: Option<BTreeMap<String, String>>,
}

/// Exactly one of the kinds must be set.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawStringMatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// `true`: the value exists (any content); `false`: it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub present: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawMirror {
    /// Mirroring on or off (default true when the block is present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Percent of primary requests copied (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
    /// Largest request body copied (default 1 MiB); larger ones are not mirrored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<i64>,
    /// Mirror requests in flight at most (default 256); more are dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawAffinity {
    /// Cookie pinning a client to the canary.
    pub cookie_name: String,
    /// Max-Age of the canary cookie in seconds (default 86400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<i64>,
    /// Cookie pinning a client to the primary for one step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_cookie_name: Option<String>,
    /// Max-Age of the primary cookie (default: the analysis interval, else 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_max_age: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_only: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure: Option<bool>,
    /// `Strict`, `Lax` or `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_site: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitioned: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawAffinityState {
    /// Value of the canary cookie for the current run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_value: Option<String>,
    /// Value of the primary cookie for the current step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_value: Option<String>,
    /// The last run's canary value, expired on sight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_canary_value: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawHealthCheck {
    /// Path probed with GET (default `/healthz`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Time between probes (default 5s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Probe timeout (default 1s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Consecutive passes to become ready (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_threshold: Option<i64>,
    /// Consecutive failures to become not ready (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_threshold: Option<i64>,
    /// Statuses counted as healthy (default 200..399).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expected_status: Vec<i64>,
}

/// An integer or a percentage string such as `"25%"`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum RawIntOrPercent {
    Int(i64),
    Str(String),
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawRollingUpdate {
    /// Extra endpoints allowed above the desired count (default 25%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<RawIntOrPercent>,
    /// Ready endpoints allowed below the desired count (default 25%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<RawIntOrPercent>,
    /// Time without progress before the update is reported stalled (default 600s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawOutlier {
    /// Consecutive 5xx/connect failures that eject an endpoint (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_failures: Option<i64>,
    /// Ejection time, multiplied by the number of ejections (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_ejection_time: Option<String>,
    /// Share of a backend's endpoints that may be ejected at once (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ejection_percent: Option<i64>,
}

/// A progressive-delivery definition (Flagger's Canary, reduced to what a
/// proxy needs).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawCanary {
    /// Unique; used by the API.
    pub name: String,
    /// The route whose traffic this canary moves.
    pub route: String,
    /// Start a run when the canary backend reports a new revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch_revision: Option<bool>,
    /// Promote without analysis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_analysis: Option<bool>,
    /// `swap` (default) or `webhook`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotion: Option<String>,
    /// Deadline for the primary to become ready with `promotion: webhook` (default 600s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline: Option<String>,
    /// Control API URLs of remote weirs to drive; empty = this process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_planes: Vec<String>,
    /// File with the bearer token for the remote data planes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_plane_token_file: Option<String>,
    /// PEM CA certificates to trust for `https://` data planes instead of the Mozilla roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_plane_ca_file: Option<String>,
    /// Flagger's analysis block.
    pub analysis: RawAnalysis,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawAnalysis {
    /// Time between steps (default 1m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Failed checks before rollback (default 5... as Flagger: required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_weight: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_weight: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_weights: Vec<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_weight_promotion: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<i64>,
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<RawMatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_weight: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<RawAffinity>,
    /// Accepted for Flagger compatibility; weir checks readiness itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_ready_threshold: Option<i64>,
    /// Accepted for Flagger compatibility; weir checks readiness itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_ready_threshold: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<RawMetric>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<RawWebhook>,
    /// Notifications of this canary's events (Flagger's `analysis.alerts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alerts: Vec<RawAlert>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawThresholdRange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawMetric {
    /// `request-success-rate`, `request-duration`, or any name with a `query`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_range: Option<RawThresholdRange>,
    /// Window of the check (default: the analysis interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Fewer requests than this in the window fails the check (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_requests: Option<i64>,
    /// PromQL for a custom metric (needs `prometheusUrl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Prometheus server for `query` (`http://` or `https://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus_url: Option<String>,
    /// PEM CA certificates to trust for an `https://` `prometheusUrl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// The judge's settings, for `baseline-comparison` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare: Option<RawCompare>,
    /// The sequential judge (Pass, Fail or Inconclusive), for the built-ins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<RawJudge>,
    /// Measure, show and export the metric, but never count it as a failed check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// The `metricTemplates` entry this metric runs (instead of `query`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ref: Option<RawTemplateRef>,
    /// Values of `{{ variables.X }}` in the template or the query.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub template_variables: BTreeMap<String, String>,
}

/// `compare:` of the `baseline-comparison` metric (DESIGN §15).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawCompare {
    /// What the canary is compared with; only `primary`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<String>,
    /// Confidence of the intervals and tests (default 0.98, Kayenta's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// Requests per side below which the judgement is NoData (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_requests: Option<i64>,
    /// The latency comparison.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<RawAllowed>,
    /// The error-rate comparison.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<RawAllowed>,
}

/// `judge:` of a built-in metric: the sequential test and what an Inconclusive check does.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawJudge {
    /// The anytime-valid test (the only method): `{ alpha: 0.05 }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<RawSequential>,
    /// The smallest regression worth catching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_effect: Option<RawMinimumEffect>,
    /// `hold` (default), `pause`, `rollback` or `promote`: applied once `maxHolds`
    /// Inconclusive checks in a row have held the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_inconclusive: Option<String>,
    /// Inconclusive checks in a row that only hold (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_holds: Option<i64>,
}

/// `judge.sequential`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawSequential {
    /// Bound on the probability of failing a canary that is not worse (default 0.05).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
}

/// `judge.minimumEffect`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawMinimumEffect {
    /// Percentage points of failed requests (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<f64>,
    /// Ratio of latencies (default 1.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<f64>,
}

/// How much worse the canary may be before it is High.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawAllowed {
    /// Ratio canary ÷ primary (of mean latencies, or of error rates); default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_increase: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawWebhook {
    pub name: String,
    /// Flagger's hook type (default `rollout`), or weir's `promote`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub url: String,
    /// Default 10s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Extra attempts after a failed call (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<i64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// A failure of this hook sends no notification (Flagger's `muteAlert`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mute_alert: Option<bool>,
    /// PEM CA certificates to trust for an `https://` `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
}
