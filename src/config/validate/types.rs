//! The validated configuration's types: what the data plane, the admin API and the
//! engine are built from (every value checked, defaults applied).

use super::*;

/// A listener, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    pub name: String,
    pub address: SocketAddr,
    /// TLS termination; `None` = clear text (HTTP/1.1 and h2c).
    pub tls: Option<ListenerTls>,
    /// Peers whose X-Forwarded-For, Forwarded, X-Real-IP and True-Client-IP are
    /// passed on (`trustedProxies`); every other peer's are replaced.
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

/// TLS termination of a listener, validated (every file read and parsed once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTls {
    /// Certificate pairs in SNI preference order; the first is the default.
    pub certificates: Vec<CertFiles>,
}

/// One certificate chain and its key (resolved paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub cert_file: std::path::PathBuf,
    pub key_file: std::path::PathBuf,
}

/// HTTP version spoken to a backend's endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum UpstreamProtocol {
    /// HTTP/1.1 (the default).
    #[default]
    Http1,
    /// HTTP/2 with prior knowledge (h2c in clear text, h2 over TLS).
    Http2,
    /// ALPN decides over TLS (h2 preferred); HTTP/1.1 in clear text.
    Auto,
}

/// TLS to a backend's endpoints, validated.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UpstreamTls {
    /// Trusted CA certificates (PEM); `None` = the built-in Mozilla roots.
    pub ca_file: Option<std::path::PathBuf>,
    /// SNI and verified name; `None` = the endpoint's host.
    pub server_name: Option<String>,
}

/// The control API listener, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    pub address: SocketAddr,
    /// Bearer token read from `tokenFile` (trimmed); `None` = no auth (loopback only).
    pub token: Option<String>,
    /// `flaggerMetrics`: the rollout series also under Flagger's names.
    pub flagger_metrics: bool,
    /// Read-only bearer token from `readOnlyTokenFile` (trimmed): GETs only.
    pub read_only_token: Option<String>,
    /// `allowedHosts`: the `Host` values answered (421 otherwise).
    pub allowed_hosts: crate::config::admin_hosts::AllowedHosts,
    /// `bodyTimeout`: time for a request's whole body (408 over it).
    pub body_timeout: Duration,
    /// The files holding tokens (`admin.tokenFile`, `admin.readOnlyTokenFile`,
    /// `cluster.peerTokenFile`), by field, resolved: checked at start for
    /// permissions that let other users read them.
    pub token_files: Vec<(&'static str, std::path::PathBuf)>,
}

/// Upstream endpoint choice within a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadBalancer {
    RoundRobin,
    /// Power of two choices on in-flight requests.
    LeastRequest,
}

/// Active health checks, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSettings {
    pub path: String,
    pub interval: Duration,
    pub timeout: Duration,
    pub healthy_threshold: u32,
    pub unhealthy_threshold: u32,
    /// Healthy statuses; empty = 200..=399.
    pub expected_status: Vec<u16>,
}

/// A rolling-update bound: absolute or percent of the desired count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(u32),
    Percent(u32),
}

/// Rolling-update settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollingSettings {
    pub max_surge: IntOrPercent,
    pub max_unavailable: IntOrPercent,
    pub progress_deadline: Duration,
}

/// Passive outlier detection, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutlierSettings {
    pub consecutive_failures: u32,
    pub base_ejection_time: Duration,
    pub max_ejection_percent: u8,
}

/// One backend, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendSpec {
    pub name: String,
    /// `host:port` strings, in order.
    pub endpoints: Vec<String>,
    /// `provider: docker`: the Docker provider fills the list from container labels;
    /// false: no label may touch it.
    pub from_docker: bool,
    pub load_balancer: LoadBalancer,
    pub health_check: Option<HealthSettings>,
    pub rolling_update: RollingSettings,
    pub outlier: Option<OutlierSettings>,
    pub revision_path: Option<String>,
    /// HTTP version to the endpoints.
    pub protocol: UpstreamProtocol,
    /// TLS to the endpoints; `None` = clear text.
    pub tls: Option<UpstreamTls>,
    /// Limits on what is sent at once; `None`: no limit (and no cost).
    pub circuit_breaker: Option<CircuitBreakerLimits>,
}

/// The replaceable part of the configuration, compiled.
#[derive(Debug, Clone)]
pub struct TableSpec {
    /// What the user wrote, for `GET /api/v1/table` and PATCH merges.
    pub raw: RawTable,
    /// Routes compiled for the data plane.
    pub routing: RoutingTable,
    /// Backends by name.
    pub backends: BTreeMap<String, BackendSpec>,
    /// Resilience policies by route name (routes without any are absent).
    pub policies: BTreeMap<String, std::sync::Arc<RoutePolicies>>,
}

/// The rollout engine's own settings, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RolloutSettings {
    /// Directory of the per-canary state files (resolved against the config file's
    /// directory); `None` keeps the state in memory only.
    pub state_dir: Option<std::path::PathBuf>,
}

/// Data-plane settings with defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxySettings {
    pub upstream_idle_timeout: Duration,
    pub upstream_max_idle_per_host: usize,
    pub connect_timeout: Duration,
    pub header_read_timeout: Duration,
    pub drain_timeout: Duration,
    pub access_log: bool,
    /// Simple clear-text HTTP/1.1 requests bypass hyper (`proxy::express`).
    pub http1_fast_path: bool,
    /// HTTP/1 request head / HTTP/2 header list limit in bytes (→ 431).
    pub max_header_bytes: usize,
    /// Header fields per request (→ 431).
    pub max_headers: usize,
    /// Request-target length in bytes (→ 414).
    pub max_uri_bytes: usize,
    /// Longest silence inside a request or response body.
    pub body_idle_timeout: Duration,
    /// Longest time to receive a whole request body (`None`: no limit; the
    /// body idle timeout still applies).
    pub request_body_timeout: Option<Duration>,
    /// Longest silence, both ways, of an upgraded connection (WebSocket).
    pub tunnel_idle_timeout: Duration,
    /// Open connections per listener; more wait in the backlog.
    pub max_connections: usize,
    /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS.
    pub http2_max_concurrent_streams: u32,
    /// HTTP/2 rapid-reset guard (client resets before accept).
    pub http2_max_pending_accept_reset_streams: usize,
    /// HTTP/2 guard on resets caused by client protocol errors.
    pub http2_max_local_error_reset_streams: usize,
}

impl Default for ProxySettings {
    fn default() -> Self {
        ProxySettings {
            upstream_idle_timeout: Duration::from_secs(90),
            upstream_max_idle_per_host: 256,
            connect_timeout: Duration::from_secs(5),
            header_read_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
            access_log: false,
            http1_fast_path: true,
            max_header_bytes: 60 * 1024,
            max_headers: 100,
            max_uri_bytes: 8192,
            body_idle_timeout: Duration::from_secs(60),
            request_body_timeout: None,
            tunnel_idle_timeout: Duration::from_secs(300),
            max_connections: 10_000,
            http2_max_concurrent_streams: 128,
            http2_max_pending_accept_reset_streams: 20,
            http2_max_local_error_reset_streams: 1024,
        }
    }
}

/// A whole validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listeners: Vec<ListenerConfig>,
    pub admin: AdminConfig,
    pub table: TableSpec,
    pub canaries: Vec<CanaryConfig>,
    pub proxy: ProxySettings,
    pub rollout: RolloutSettings,
    /// Fleet coordination through etcd; `None`: single-replica mode.
    pub cluster: Option<crate::config::cluster::ClusterSettings>,
    /// `alertProviders:` by name (addresses resolved from `addressFile`).
    pub alert_providers: BTreeMap<String, super::alerts::AlertProvider>,
    /// `providers:` (endpoint lists from outside the file).
    pub providers: super::providers::ProvidersConfig,
    /// `limits:` (what a table may cost).
    pub limits: super::Limits,
    /// Values accepted but changed or worth a second look, each with its field path
    /// (and `file:line:col` once located); `weir check` and `weir serve` print them.
    pub warnings: Vec<ConfigError>,
}
