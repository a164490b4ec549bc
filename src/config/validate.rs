//! Validation and compilation of raw configuration. Every check pushes an
//! error with its field path and carries on, so a user sees all problems at
//! once. Only a config with zero errors is turned into runtime values.

use super::duration::parse_duration;
use super::locate::join_key;
use super::raw::*;
use super::ConfigError;
use crate::affinity::{AffinityConfig, AffinityState, PinCookies, MIN_VALUE_LEN};
use crate::routing::{
    CookieProbe, HeaderEdits, HostPattern, MatchRule, MirrorPolicy, Route, RoutingTable,
    StringMatcher,
};
use cookie::SameSite;
use http::{HeaderName, HeaderValue};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// Largest compiled regex accepted (bytes of the compiled program). Guards
/// the data plane against patterns that would blow up memory or time.
pub const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// Longest regex source accepted.
pub const REGEX_MAX_LEN: usize = 4096;

/// A listener, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    pub name: String,
    pub address: SocketAddr,
    /// TLS termination; `None` = clear text (HTTP/1.1 and h2c).
    pub tls: Option<ListenerTls>,
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
    pub load_balancer: LoadBalancer,
    pub health_check: Option<HealthSettings>,
    pub rolling_update: RollingSettings,
    pub outlier: Option<OutlierSettings>,
    pub revision_path: Option<String>,
    /// HTTP version to the endpoints.
    pub protocol: UpstreamProtocol,
    /// TLS to the endpoints; `None` = clear text.
    pub tls: Option<UpstreamTls>,
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
}

/// A canary definition, validated (the engine builds its spec from it).
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryConfig {
    pub raw: RawCanary,
    pub interval: Duration,
    pub progress_deadline: Duration,
    /// Bearer token for the remote data planes, read from `dataPlaneTokenFile`.
    pub data_plane_token: Option<String>,
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
    pub cluster: Option<super::cluster::ClusterSettings>,
    /// Values accepted but changed or worth a second look, each with its field path
    /// (and `file:line:col` once located); `weir check` and `weir serve` print them.
    pub warnings: Vec<ConfigError>,
}

/// Errors (`.0`, any refuses the config) and warnings (`.1`, reported only).
struct Errors(Vec<ConfigError>, Vec<ConfigError>);

impl Errors {
    fn new() -> Self {
        Errors(Vec::new(), Vec::new())
    }

    fn push(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.0.push(ConfigError::new(path, reason));
    }

    fn warn(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.1.push(ConfigError::new(path, reason));
    }

    fn duration(&mut self, path: &str, v: &Option<String>, default: Duration) -> Duration {
        match v {
            None => default,
            Some(s) => match parse_duration(s) {
                Ok(d) if d.is_zero() => {
                    self.push(path, "must be greater than 0");
                    default
                }
                Ok(d) => d,
                Err(e) => {
                    self.push(path, e);
                    default
                }
            },
        }
    }

    fn int_in(&mut self, path: &str, v: Option<i64>, lo: i64, hi: i64, default: i64) -> i64 {
        match v {
            None => default,
            Some(n) if n < lo || n > hi => {
                self.push(path, format!("must be between {lo} and {hi} (got {n})"));
                default
            }
            Some(n) => n,
        }
    }
}

/// Validates a whole file's worth of configuration.
pub fn validate(raw: RawConfig, base: &Path) -> Result<Config, Vec<ConfigError>> {
    let mut errs = Errors::new();
    let listeners = validate_listeners(&raw.listeners, base, &mut errs);
    let admin = validate_admin(raw.admin.as_ref(), base, &mut errs);
    let proxy = validate_proxy(raw.proxy.as_ref(), &mut errs);
    let mut table_raw = RawTable {
        backends: raw.backends,
        routes: raw.routes,
    };
    // Files named in the table are relative to the config file; the table
    // is also written through the API, which has no directory, so the paths
    // are made absolute here, once.
    for b in table_raw.backends.values_mut() {
        if let Some(ca) = b.tls.as_mut().and_then(|t| t.ca_file.as_mut()) {
            *ca = base.join(&*ca).to_string_lossy().into_owned();
        }
    }
    let table = compile_into(&table_raw, &mut errs);
    let canaries = validate_canaries(&raw.canaries, &table_raw, base, &mut errs);
    let rollout = RolloutSettings {
        state_dir: raw
            .rollout
            .as_ref()
            .and_then(|r| r.state_dir.as_ref())
            .map(|d| base.join(d)),
    };
    let cluster = raw.cluster.as_ref().and_then(|c| {
        super::cluster::validate(c)
            .map_err(|list| {
                for (path, reason) in list {
                    errs.push(path, reason);
                }
            })
            .ok()
    });
    if !errs.0.is_empty() {
        return Err(errs.0);
    }
    Ok(Config {
        listeners,
        admin,
        table: table.expect("no errors implies a table"),
        canaries,
        proxy,
        rollout,
        cluster,
        warnings: errs.1,
    })
}

/// Validates and compiles backends + routes (used by the loader and by every
/// API write).
pub fn compile_table(raw: &RawTable) -> Result<TableSpec, Vec<ConfigError>> {
    let mut errs = Errors::new();
    let t = compile_into(raw, &mut errs);
    match t {
        Some(t) if errs.0.is_empty() => Ok(t),
        _ => Err(errs.0),
    }
}

fn compile_into(raw: &RawTable, errs: &mut Errors) -> Option<TableSpec> {
    let before = errs.0.len();
    let mut backends = BTreeMap::new();
    for (name, b) in &raw.backends {
        let path = join_key("backends", name);
        if let Some(spec) = validate_backend(&path, name, b, errs) {
            backends.insert(name.clone(), spec);
        }
    }
    let mut names = BTreeSet::new();
    let mut routes = Vec::new();
    for (i, r) in raw.routes.iter().enumerate() {
        let path = format!("routes[{i}]");
        if !names.insert(r.name.as_str()) {
            errs.push(
                format!("{path}.name"),
                format!("duplicate route name {:?}", r.name),
            );
        }
        if let Some(route) = compile_route(&path, r, raw, errs) {
            routes.push(route);
        }
    }
    // Two routes with the same host and prefix: the second could never match.
    let mut seen = BTreeSet::new();
    for (i, r) in raw.routes.iter().enumerate() {
        let prefix = r.path_prefix.clone().unwrap_or_else(|| "/".into());
        let hosts: Vec<String> = if r.hosts.is_empty() {
            vec![String::new()]
        } else {
            r.hosts.iter().map(|h| h.to_ascii_lowercase()).collect()
        };
        for h in hosts {
            if !seen.insert((h.clone(), prefix.clone())) {
                errs.push(
                    format!("routes[{i}].pathPrefix"),
                    format!(
                        "another route already serves host {:?} with prefix {prefix:?}; this route could never match",
                        if h.is_empty() { "*" } else { &h }
                    ),
                );
            }
        }
    }
    if errs.0.len() > before {
        return None;
    }
    Some(TableSpec {
        raw: raw.clone(),
        routing: RoutingTable::new(routes),
        backends,
    })
}

fn validate_listeners(raw: &[RawListener], base: &Path, errs: &mut Errors) -> Vec<ListenerConfig> {
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    let mut addrs = BTreeSet::new();
    for (i, l) in raw.iter().enumerate() {
        let path = format!("listeners[{i}]");
        if l.name.trim().is_empty() {
            errs.push(format!("{path}.name"), "must not be empty");
        } else if !names.insert(l.name.clone()) {
            errs.push(
                format!("{path}.name"),
                format!("duplicate listener name {:?}", l.name),
            );
        }
        let addr = match l.address.parse::<SocketAddr>() {
            Ok(a) => {
                if a.port() != 0 && !addrs.insert(a) {
                    errs.push(
                        format!("{path}.address"),
                        format!("address {a} is used twice"),
                    );
                }
                Some(a)
            }
            Err(_) => {
                errs.push(
                    format!("{path}.address"),
                    format!(
                        "expected ip:port such as 0.0.0.0:8080 (got {:?})",
                        l.address
                    ),
                );
                None
            }
        };
        let tls = l
            .tls
            .as_ref()
            .map(|t| validate_listener_tls(&format!("{path}.tls"), t, base, errs));
        if let Some(address) = addr {
            out.push(ListenerConfig {
                name: l.name.clone(),
                address,
                tls,
            });
        }
    }
    out
}

/// Both TLS forms of a listener; every file is read and parsed so that a
/// bad certificate is a config error with its field path, not a start-up
/// failure.
fn validate_listener_tls(path: &str, t: &RawTls, base: &Path, errs: &mut Errors) -> ListenerTls {
    let mut pairs: Vec<(String, Option<&String>, Option<&String>)> = Vec::new();
    if t.cert_file.is_some() || t.key_file.is_some() {
        pairs.push((path.to_string(), t.cert_file.as_ref(), t.key_file.as_ref()));
    }
    for (i, c) in t.certificates.iter().enumerate() {
        pairs.push((
            format!("{path}.certificates[{i}]"),
            Some(&c.cert_file),
            Some(&c.key_file),
        ));
    }
    if pairs.is_empty() {
        errs.push(
            path,
            "set certFile and keyFile, or a certificates list of {certFile, keyFile}",
        );
    }
    let mut certificates = Vec::new();
    for (p, cert, key) in pairs {
        let (Some(cert), Some(key)) = (cert, key) else {
            let missing = if cert.is_none() {
                "certFile"
            } else {
                "keyFile"
            };
            errs.push(format!("{p}.{missing}"), "certFile and keyFile go together");
            continue;
        };
        let files = CertFiles {
            cert_file: base.join(cert),
            key_file: base.join(key),
        };
        match super::tls::load_pair(&files.cert_file, &files.key_file) {
            Ok(_) => {}
            Err(super::tls::PairError::Cert(m)) => errs.push(format!("{p}.certFile"), m),
            Err(super::tls::PairError::Key(m)) => errs.push(format!("{p}.keyFile"), m),
        }
        certificates.push(files);
    }
    ListenerTls { certificates }
}

fn validate_admin(raw: Option<&RawAdmin>, base: &Path, errs: &mut Errors) -> AdminConfig {
    let default = AdminConfig {
        address: SocketAddr::from(([127, 0, 0, 1], 9901)),
        token: None,
    };
    let Some(a) = raw else { return default };
    let address = match a.address.parse::<SocketAddr>() {
        Ok(addr) => addr,
        Err(_) => {
            errs.push(
                "admin.address",
                format!(
                    "expected ip:port such as 127.0.0.1:9901 (got {:?})",
                    a.address
                ),
            );
            return default;
        }
    };
    let token = match &a.token_file {
        None => None,
        Some(f) => match std::fs::read_to_string(base.join(f)) {
            Ok(t) if t.trim().len() >= 16 => Some(t.trim().to_string()),
            Ok(_) => {
                errs.push(
                    "admin.tokenFile",
                    "the token must be at least 16 characters",
                );
                None
            }
            Err(e) => {
                errs.push("admin.tokenFile", format!("cannot read {f}: {e}"));
                None
            }
        },
    };
    if token.is_none() && a.token_file.is_none() && !address.ip().is_loopback() {
        errs.push(
            "admin.tokenFile",
            format!("required because admin.address {address} is not a loopback address"),
        );
    }
    AdminConfig { address, token }
}

fn validate_proxy(raw: Option<&RawProxy>, errs: &mut Errors) -> ProxySettings {
    let d = ProxySettings::default();
    let Some(p) = raw else { return d };
    ProxySettings {
        upstream_idle_timeout: errs.duration(
            "proxy.upstreamIdleTimeout",
            &p.upstream_idle_timeout,
            d.upstream_idle_timeout,
        ),
        upstream_max_idle_per_host: errs.int_in(
            "proxy.upstreamMaxIdlePerHost",
            p.upstream_max_idle_per_host,
            0,
            65536,
            256,
        ) as usize,
        connect_timeout: errs.duration(
            "proxy.connectTimeout",
            &p.connect_timeout,
            d.connect_timeout,
        ),
        header_read_timeout: errs.duration(
            "proxy.headerReadTimeout",
            &p.header_read_timeout,
            d.header_read_timeout,
        ),
        drain_timeout: errs.duration("proxy.drainTimeout", &p.drain_timeout, d.drain_timeout),
        access_log: p.access_log.unwrap_or(false),
        http1_fast_path: p.http1_fast_path.unwrap_or(true),
        // hyper refuses a read buffer under 8 KiB.
        max_header_bytes: errs.int_in(
            "proxy.maxHeaderBytes",
            p.max_header_bytes,
            8192,
            1 << 20,
            d.max_header_bytes as i64,
        ) as usize,
        max_headers: errs.int_in(
            "proxy.maxHeaders",
            p.max_headers,
            1,
            10_000,
            d.max_headers as i64,
        ) as usize,
        max_uri_bytes: errs.int_in(
            "proxy.maxUriBytes",
            p.max_uri_bytes,
            64,
            65_534,
            d.max_uri_bytes as i64,
        ) as usize,
        body_idle_timeout: errs.duration(
            "proxy.bodyIdleTimeout",
            &p.body_idle_timeout,
            d.body_idle_timeout,
        ),
        request_body_timeout: p
            .request_body_timeout
            .is_some()
            .then(|| {
                errs.duration(
                    "proxy.requestBodyTimeout",
                    &p.request_body_timeout,
                    Duration::ZERO,
                )
            })
            .filter(|d| !d.is_zero()),
        tunnel_idle_timeout: errs.duration(
            "proxy.tunnelIdleTimeout",
            &p.tunnel_idle_timeout,
            d.tunnel_idle_timeout,
        ),
        max_connections: errs.int_in(
            "proxy.maxConnections",
            p.max_connections,
            1,
            1_000_000,
            d.max_connections as i64,
        ) as usize,
        http2_max_concurrent_streams: errs.int_in(
            "proxy.http2MaxConcurrentStreams",
            p.http2_max_concurrent_streams,
            1,
            1_000_000,
            d.http2_max_concurrent_streams as i64,
        ) as u32,
        http2_max_pending_accept_reset_streams: errs.int_in(
            "proxy.http2MaxPendingAcceptResetStreams",
            p.http2_max_pending_accept_reset_streams,
            1,
            100_000,
            d.http2_max_pending_accept_reset_streams as i64,
        ) as usize,
        http2_max_local_error_reset_streams: errs.int_in(
            "proxy.http2MaxLocalErrorResetStreams",
            p.http2_max_local_error_reset_streams,
            1,
            100_000,
            d.http2_max_local_error_reset_streams as i64,
        ) as usize,
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// `host:port` with a non-empty host and a port in 1..65535.
pub fn validate_endpoint(s: &str) -> Result<(), String> {
    if s.contains("://") || s.contains('/') {
        return Err(format!(
            "expected host:port without scheme or path (got {s:?})"
        ));
    }
    let (host, port) = match s.rsplit_once(':') {
        Some(hp) => hp,
        None => {
            return Err(format!(
                "expected host:port (got {s:?}): the port is missing"
            ))
        }
    };
    if host.is_empty() || host.chars().any(|c| c.is_whitespace()) {
        return Err(format!("invalid host in {s:?}"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(format!("invalid port in {s:?}: expected 1..65535")),
    }
}

fn validate_backend(
    path: &str,
    name: &str,
    b: &RawBackend,
    errs: &mut Errors,
) -> Option<BackendSpec> {
    let before = errs.0.len();
    if !valid_name(name) {
        errs.push(
            path,
            "backend names use letters, digits, '-', '_' and '.' only",
        );
    }
    if b.endpoints.is_empty() {
        errs.push(
            format!("{path}.endpoints"),
            "at least one endpoint is required",
        );
    }
    let mut seen = BTreeSet::new();
    for (i, e) in b.endpoints.iter().enumerate() {
        if let Err(reason) = validate_endpoint(e) {
            errs.push(format!("{path}.endpoints[{i}]"), reason);
        } else if !seen.insert(e.as_str()) {
            errs.push(
                format!("{path}.endpoints[{i}]"),
                format!("duplicate endpoint {e:?}"),
            );
        }
    }
    let load_balancer = match b.load_balancer.as_deref() {
        None | Some("round-robin") => LoadBalancer::RoundRobin,
        Some("least-request") => LoadBalancer::LeastRequest,
        Some(other) => {
            errs.push(
                format!("{path}.loadBalancer"),
                format!("unknown load balancer {other:?}; expected round-robin or least-request"),
            );
            LoadBalancer::RoundRobin
        }
    };
    let health_check = b.health_check.as_ref().map(|h| {
        let p = format!("{path}.healthCheck");
        let hpath = h.path.clone().unwrap_or_else(|| "/healthz".into());
        if !hpath.starts_with('/') {
            errs.push(format!("{p}.path"), "must start with '/'");
        }
        let interval = errs.duration(
            &format!("{p}.interval"),
            &h.interval,
            Duration::from_secs(5),
        );
        let timeout = errs.duration(&format!("{p}.timeout"), &h.timeout, Duration::from_secs(1));
        let mut expected = Vec::new();
        for (i, s) in h.expected_status.iter().enumerate() {
            if (100..=599).contains(s) {
                expected.push(*s as u16);
            } else {
                errs.push(
                    format!("{p}.expectedStatus[{i}]"),
                    format!("not an HTTP status (got {s})"),
                );
            }
        }
        HealthSettings {
            path: hpath,
            interval,
            timeout,
            healthy_threshold: errs.int_in(
                &format!("{p}.healthyThreshold"),
                h.healthy_threshold,
                1,
                100,
                1,
            ) as u32,
            unhealthy_threshold: errs.int_in(
                &format!("{p}.unhealthyThreshold"),
                h.unhealthy_threshold,
                1,
                100,
                3,
            ) as u32,
            expected_status: expected,
        }
    });
    let rolling_update = {
        let p = format!("{path}.rollingUpdate");
        let r = b.rolling_update.clone().unwrap_or_default();
        let surge = int_or_percent(&format!("{p}.maxSurge"), &r.max_surge, errs);
        let unavail = int_or_percent(&format!("{p}.maxUnavailable"), &r.max_unavailable, errs);
        let zero = |v: &IntOrPercent| matches!(v, IntOrPercent::Int(0) | IntOrPercent::Percent(0));
        if zero(&surge) && zero(&unavail) {
            errs.push(
                format!("{p}.maxUnavailable"),
                "maxSurge and maxUnavailable cannot both be 0: the update could never make progress",
            );
        }
        RollingSettings {
            max_surge: surge,
            max_unavailable: unavail,
            progress_deadline: errs.duration(
                &format!("{p}.progressDeadline"),
                &r.progress_deadline,
                Duration::from_secs(600),
            ),
        }
    };
    let outlier = b.outlier_detection.as_ref().map(|o| {
        let p = format!("{path}.outlierDetection");
        OutlierSettings {
            consecutive_failures: errs.int_in(
                &format!("{p}.consecutiveFailures"),
                o.consecutive_failures,
                1,
                1000,
                5,
            ) as u32,
            base_ejection_time: errs.duration(
                &format!("{p}.baseEjectionTime"),
                &o.base_ejection_time,
                Duration::from_secs(30),
            ),
            max_ejection_percent: errs.int_in(
                &format!("{p}.maxEjectionPercent"),
                o.max_ejection_percent,
                0,
                100,
                50,
            ) as u8,
        }
    });
    if let Some(rp) = &b.revision_path {
        if !rp.starts_with('/') {
            errs.push(format!("{path}.revisionPath"), "must start with '/'");
        }
    }
    let protocol = match b.protocol.as_deref() {
        None | Some("http1") => UpstreamProtocol::Http1,
        Some("http2") => UpstreamProtocol::Http2,
        Some("auto") => UpstreamProtocol::Auto,
        Some(other) => {
            errs.push(
                format!("{path}.protocol"),
                format!("unknown protocol {other:?}; expected http1, http2 or auto"),
            );
            UpstreamProtocol::Http1
        }
    };
    let tls = b.tls.as_ref().map(|t| {
        let p = format!("{path}.tls");
        let ca_file = t.ca_file.as_ref().map(std::path::PathBuf::from);
        if let Some(f) = &ca_file {
            if let Err(e) = super::tls::load_ca_file(f) {
                errs.push(format!("{p}.caFile"), e);
            }
        }
        if let Some(n) = &t.server_name {
            if rustls::pki_types::ServerName::try_from(n.as_str()).is_err() {
                errs.push(
                    format!("{p}.serverName"),
                    format!("not a DNS name or IP address: {n:?}"),
                );
            }
        }
        UpstreamTls {
            ca_file,
            server_name: t.server_name.clone(),
        }
    });
    if errs.0.len() > before {
        return None;
    }
    Some(BackendSpec {
        name: name.to_string(),
        endpoints: b.endpoints.clone(),
        load_balancer,
        health_check,
        rolling_update,
        outlier,
        revision_path: b.revision_path.clone(),
        protocol,
        tls,
    })
}

fn int_or_percent(path: &str, v: &Option<RawIntOrPercent>, errs: &mut Errors) -> IntOrPercent {
    match v {
        None => IntOrPercent::Percent(25),
        Some(RawIntOrPercent::Int(n)) if *n >= 0 && *n <= 10_000 => IntOrPercent::Int(*n as u32),
        Some(RawIntOrPercent::Int(n)) => {
            errs.push(path, format!("must be between 0 and 10000 (got {n})"));
            IntOrPercent::Percent(25)
        }
        Some(RawIntOrPercent::Str(s)) => match s.strip_suffix('%').map(|n| n.trim().parse::<u32>())
        {
            Some(Ok(p)) if p <= 100 => IntOrPercent::Percent(p),
            _ => {
                errs.push(
                    path,
                    format!("expected an integer or a percentage such as \"25%\" (got {s:?})"),
                );
                IntOrPercent::Percent(25)
            }
        },
    }
}

fn compile_route(path: &str, r: &RawRoute, table: &RawTable, errs: &mut Errors) -> Option<Route> {
    let before = errs.0.len();
    if !valid_name(&r.name) {
        errs.push(
            format!("{path}.name"),
            "route names use letters, digits, '-', '_' and '.' only",
        );
    }
    let mut hosts = Vec::new();
    for (i, h) in r.hosts.iter().enumerate() {
        let hp = format!("{path}.hosts[{i}]");
        let lower = h.trim().to_ascii_lowercase();
        if let Some(suffix) = lower.strip_prefix("*.") {
            if suffix.is_empty() || suffix.contains('*') {
                errs.push(
                    hp,
                    format!("invalid wildcard host {h:?}; expected *.example.com"),
                );
            } else {
                hosts.push(HostPattern::Suffix(format!(".{suffix}")));
            }
        } else if lower.is_empty() || lower.contains(['*', '/', ' ', ':']) {
            errs.push(
                hp,
                format!("invalid host {h:?}; expected a name such as app.example.com (no port)"),
            );
        } else {
            hosts.push(HostPattern::Exact(lower.trim_end_matches('.').to_string()));
        }
    }
    let path_prefix = r.path_prefix.clone().unwrap_or_else(|| "/".into());
    if !path_prefix.starts_with('/') {
        errs.push(
            format!("{path}.pathPrefix"),
            format!("must start with '/' (got {path_prefix:?})"),
        );
    }
    if !table.backends.contains_key(&r.primary) {
        errs.push(
            format!("{path}.primary"),
            format!("unknown backend {:?}", r.primary),
        );
    }
    if let Some(c) = &r.canary {
        if !table.backends.contains_key(c) {
            errs.push(format!("{path}.canary"), format!("unknown backend {c:?}"));
        } else if *c == r.primary {
            errs.push(format!("{path}.canary"), "must differ from primary");
        }
    }
    let weight = errs.int_in(&format!("{path}.canaryWeight"), r.canary_weight, 0, 100, 0) as u8;
    if r.canary.is_none() {
        if weight > 0 {
            errs.push(
                format!("{path}.canaryWeight"),
                "a weight above 0 needs a canary backend",
            );
        }
        if !r.matches.is_empty() {
            errs.push(format!("{path}.match"), "match rules need a canary backend");
        }
        if r.mirror.as_ref().is_some_and(|m| m.enabled != Some(false)) {
            errs.push(format!("{path}.mirror"), "mirroring needs a canary backend");
        }
    }
    let timeout = errs.duration(
        &format!("{path}.timeout"),
        &r.timeout,
        Duration::from_secs(15),
    );
    let (request_headers, response_headers) = match &r.headers {
        None => (HeaderEdits::default(), HeaderEdits::default()),
        Some(h) => (
            compile_edits(&format!("{path}.headers.request"), h.request.as_ref(), errs),
            compile_edits(
                &format!("{path}.headers.response"),
                h.response.as_ref(),
                errs,
            ),
        ),
    };
    let matches = compile_matches(&format!("{path}.match"), &r.matches, errs);
    let mirror = r.mirror.as_ref().and_then(|m| {
        let p = format!("{path}.mirror");
        let policy = MirrorPolicy {
            weight: errs.int_in(&format!("{p}.weight"), m.weight, 0, 100, 100) as u8,
            max_body_bytes: errs.int_in(
                &format!("{p}.maxBodyBytes"),
                m.max_body_bytes,
                0,
                64 << 20,
                1 << 20,
            ) as usize,
            max_in_flight: errs.int_in(
                &format!("{p}.maxInFlight"),
                m.max_in_flight,
                1,
                100_000,
                256,
            ) as usize,
        };
        (m.enabled != Some(false)).then_some(policy)
    });
    let affinity = r
        .session_affinity
        .as_ref()
        .map(|a| compile_affinity(&format!("{path}.sessionAffinity"), a, errs));
    let affinity_state = match &r.affinity_state {
        None => AffinityState::default(),
        Some(s) => {
            let p = format!("{path}.affinityState");
            for (field, v) in [
                ("canaryValue", &s.canary_value),
                ("primaryValue", &s.primary_value),
                ("previousCanaryValue", &s.previous_canary_value),
            ] {
                if let Some(v) = v {
                    if v.len() < MIN_VALUE_LEN || !v.bytes().all(|b| b.is_ascii_alphanumeric()) {
                        errs.push(
                            format!("{p}.{field}"),
                            format!("must be at least {MIN_VALUE_LEN} ASCII letters or digits"),
                        );
                    }
                }
            }
            AffinityState {
                canary_value: s.canary_value.clone(),
                primary_value: s.primary_value.clone(),
                previous_canary_value: s.previous_canary_value.clone(),
            }
        }
    };
    if errs.0.len() > before {
        return None;
    }
    Some(Route {
        name: r.name.clone(),
        hosts,
        path_prefix,
        primary: r.primary.clone(),
        canary: r.canary.clone(),
        canary_weight: weight,
        cookie_probe: CookieProbe::new(&matches, affinity.as_ref()),
        pin_cookies: affinity
            .as_ref()
            .map(|a| PinCookies::new(a, &affinity_state))
            .unwrap_or_default(),
        matches,
        mirror,
        affinity,
        affinity_state,
        timeout,
        request_headers,
        response_headers,
    })
}

fn compile_edits(path: &str, raw: Option<&RawHeaderEdits>, errs: &mut Errors) -> HeaderEdits {
    let mut out = HeaderEdits::default();
    let Some(raw) = raw else { return out };
    let mut pair = |p: String, k: &str, v: &str| -> Option<(HeaderName, HeaderValue)> {
        let name = match HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()) {
            Ok(n) => n,
            Err(_) => {
                errs.push(p, format!("invalid header name {k:?}"));
                return None;
            }
        };
        if crate::headers::is_hop_by_hop(&name) || name == http::header::HOST {
            errs.push(
                p,
                format!("header {k:?} is managed by the proxy and cannot be edited"),
            );
            return None;
        }
        match HeaderValue::from_str(v) {
            Ok(val) => Some((name, val)),
            Err(_) => {
                errs.push(p, format!("invalid header value {v:?}"));
                None
            }
        }
    };
    for (k, v) in &raw.set {
        out.set.extend(pair(format!("{path}.set.{k}"), k, v));
    }
    for (k, v) in &raw.add {
        out.add.extend(pair(format!("{path}.add.{k}"), k, v));
    }
    for (i, k) in raw.remove.iter().enumerate() {
        match HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()) {
            Ok(n) => out.remove.push(n),
            Err(_) => errs.push(
                format!("{path}.remove[{i}]"),
                format!("invalid header name {k:?}"),
            ),
        }
    }
    out
}

/// Compiles a Flagger `match` list (also used for canary analysis blocks).
#[allow(dead_code)] // used by the rollout engine (analysis match blocks)
pub fn compile_matches_checked(
    path: &str,
    raw: &[RawMatch],
) -> Result<Vec<MatchRule>, Vec<ConfigError>> {
    let mut errs = Errors::new();
    let m = compile_matches(path, raw, &mut errs);
    if errs.0.is_empty() {
        Ok(m)
    } else {
        Err(errs.0)
    }
}

fn compile_matches(path: &str, raw: &[RawMatch], errs: &mut Errors) -> Vec<MatchRule> {
    let mut out = Vec::new();
    for (i, m) in raw.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let mut rule = MatchRule::default();
        let empty = m.headers.is_empty()
            && m.cookies.is_empty()
            && m.query_params.is_empty()
            && m.method.is_none()
            && m.uri.is_none()
            && m.source_ip.is_empty();
        if empty {
            errs.push(&p, "a match item needs at least one condition (an empty item would match every request)");
        }
        for (k, sm) in &m.headers {
            let hp = join_key(&format!("{p}.headers"), k);
            match HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()) {
                Ok(name) => {
                    if let Some(c) = string_matcher(&hp, sm, errs) {
                        rule.headers.push((name, c));
                    }
                }
                Err(_) => errs.push(hp, format!("invalid header name {k:?}")),
            }
        }
        for (k, sm) in &m.cookies {
            let cp = join_key(&format!("{p}.cookies"), k);
            if k.is_empty() {
                errs.push(&cp, "cookie name must not be empty");
            } else if let Some(c) = string_matcher(&cp, sm, errs) {
                rule.cookies.push((k.clone(), c));
            }
        }
        for (k, sm) in &m.query_params {
            let qp = join_key(&format!("{p}.queryParams"), k);
            if let Some(c) = string_matcher(&qp, sm, errs) {
                rule.query_params.push((k.clone(), c));
            }
        }
        if let Some(sm) = &m.method {
            rule.method = string_matcher(&format!("{p}.method"), sm, errs);
        }
        if let Some(sm) = &m.uri {
            rule.uri = string_matcher(&format!("{p}.uri"), sm, errs);
        }
        for (j, cidr) in m.source_ip.iter().enumerate() {
            let parsed = cidr
                .parse::<ipnet::IpNet>()
                .or_else(|_| cidr.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
            match parsed {
                Ok(n) => rule.source_ip.push(n),
                Err(_) => errs.push(
                    format!("{p}.sourceIp[{j}]"),
                    format!("expected a CIDR such as 10.0.0.0/8 or an address (got {cidr:?})"),
                ),
            }
        }
        out.push(rule);
    }
    out
}

fn string_matcher(path: &str, m: &RawStringMatch, errs: &mut Errors) -> Option<StringMatcher> {
    let set = [
        m.exact.is_some(),
        m.prefix.is_some(),
        m.suffix.is_some(),
        m.regex.is_some(),
        m.present.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if set != 1 {
        errs.push(
            path,
            format!(
                "exactly one of exact, prefix, suffix, regex, present must be set (found {set})"
            ),
        );
        return None;
    }
    if let Some(s) = &m.exact {
        return Some(StringMatcher::Exact(s.clone()));
    }
    if let Some(s) = &m.prefix {
        return Some(StringMatcher::Prefix(s.clone()));
    }
    if let Some(s) = &m.suffix {
        return Some(StringMatcher::Suffix(s.clone()));
    }
    if let Some(p) = m.present {
        return Some(StringMatcher::Present(p));
    }
    let re = m.regex.as_deref().unwrap_or_default();
    let rp = format!("{path}.regex");
    if re.len() > REGEX_MAX_LEN {
        errs.push(
            rp,
            format!(
                "pattern is {} bytes; the limit is {REGEX_MAX_LEN}",
                re.len()
            ),
        );
        return None;
    }
    match crate::routing::RegexMatcher::compile(re, REGEX_SIZE_LIMIT) {
        Ok(r) => Some(StringMatcher::Regex(r)),
        Err(regex::Error::CompiledTooBig(limit)) => {
            errs.push(
                rp,
                format!("pattern compiles to more than {limit} bytes (size limit)"),
            );
            None
        }
        Err(e) => {
            errs.push(
                rp,
                format!(
                    "invalid regex: {}",
                    e.to_string()
                        .lines()
                        .last()
                        .unwrap_or("syntax error")
                        .trim()
                ),
            );
            None
        }
    }
}

/// Compiles a `sessionAffinity` block (route or canary analysis).
fn compile_affinity(path: &str, a: &RawAffinity, errs: &mut Errors) -> AffinityConfig {
    let token_ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b))
    };
    if !token_ok(&a.cookie_name) {
        errs.push(
            format!("{path}.cookieName"),
            format!("invalid cookie name {:?}", a.cookie_name),
        );
    }
    if let Some(p) = &a.primary_cookie_name {
        if !token_ok(p) {
            errs.push(
                format!("{path}.primaryCookieName"),
                format!("invalid cookie name {p:?}"),
            );
        } else if *p == a.cookie_name {
            errs.push(
                format!("{path}.primaryCookieName"),
                "must differ from cookieName",
            );
        }
    }
    let same_site = match a.same_site.as_deref() {
        None => None,
        Some(s) if s.eq_ignore_ascii_case("strict") => Some(SameSite::Strict),
        Some(s) if s.eq_ignore_ascii_case("lax") => Some(SameSite::Lax),
        Some(s) if s.eq_ignore_ascii_case("none") => Some(SameSite::None),
        Some(s) => {
            errs.push(
                format!("{path}.sameSite"),
                format!("expected Strict, Lax or None (got {s:?})"),
            );
            None
        }
    };
    let attr_ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic() && b != b';');
    if let Some(d) = &a.domain {
        if !attr_ok(d) {
            errs.push(
                format!("{path}.domain"),
                format!("invalid cookie domain {d:?}"),
            );
        }
    }
    if let Some(p) = &a.path {
        if !attr_ok(p) || !p.starts_with('/') {
            errs.push(
                format!("{path}.path"),
                format!("invalid cookie path {p:?}; must start with '/'"),
            );
        }
    }
    AffinityConfig {
        cookie_name: a.cookie_name.clone(),
        max_age: errs.int_in(&format!("{path}.maxAge"), a.max_age, 1, 400 * 86400, 86400),
        primary_cookie_name: a.primary_cookie_name.clone(),
        primary_max_age: errs.int_in(
            &format!("{path}.primaryMaxAge"),
            a.primary_max_age,
            1,
            400 * 86400,
            60,
        ),
        domain: a.domain.clone(),
        path: a.path.clone(),
        http_only: a.http_only.unwrap_or(false),
        secure: a.secure.unwrap_or(false),
        same_site,
        partitioned: a.partitioned.unwrap_or(false),
    }
}

const METRIC_SUCCESS: &str = "request-success-rate";
const METRIC_DURATION: &str = "request-duration";
const HOOK_TYPES: &[&str] = &[
    "confirm-rollout",
    "pre-rollout",
    "rollout",
    "confirm-traffic-increase",
    "confirm-promotion",
    "post-rollout",
    "rollback",
    "event",
    "promote",
];

fn validate_canaries(
    raw: &[RawCanary],
    table: &RawTable,
    base: &Path,
    errs: &mut Errors,
) -> Vec<CanaryConfig> {
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    let mut routes_taken = BTreeSet::new();
    for (i, c) in raw.iter().enumerate() {
        let p = format!("canaries[{i}]");
        let before = errs.0.len();
        if !valid_name(&c.name) {
            errs.push(
                format!("{p}.name"),
                "canary names use letters, digits, '-', '_' and '.' only",
            );
        } else if !names.insert(c.name.clone()) {
            errs.push(
                format!("{p}.name"),
                format!("duplicate canary name {:?}", c.name),
            );
        }
        match table.routes.iter().find(|r| r.name == c.route) {
            None => errs.push(format!("{p}.route"), format!("unknown route {:?}", c.route)),
            Some(r) => {
                if r.canary.is_none() {
                    errs.push(
                        format!("{p}.route"),
                        format!("route {:?} has no canary backend", c.route),
                    );
                }
                if !routes_taken.insert(c.route.clone()) {
                    errs.push(
                        format!("{p}.route"),
                        format!("route {:?} is already driven by another canary", c.route),
                    );
                }
            }
        }
        match c.promotion.as_deref() {
            None | Some("swap") | Some("webhook") => {}
            Some(other) => errs.push(
                format!("{p}.promotion"),
                format!("expected swap or webhook (got {other:?})"),
            ),
        }
        for (j, u) in c.data_planes.iter().enumerate() {
            if u.parse::<http::Uri>()
                .ok()
                .and_then(|u| u.host().map(|_| ()))
                .is_none()
                || !u.starts_with("http")
            {
                errs.push(
                    format!("{p}.dataPlanes[{j}]"),
                    format!("expected a URL such as http://10.0.0.2:9901 (got {u:?})"),
                );
            }
        }
        let a = &c.analysis;
        let ap = format!("{p}.analysis");
        let interval = errs.duration(
            &format!("{ap}.interval"),
            &a.interval,
            Duration::from_secs(60),
        );
        let progress_deadline = errs.duration(
            &format!("{p}.progressDeadline"),
            &c.progress_deadline,
            Duration::from_secs(600),
        );
        errs.int_in(&format!("{ap}.threshold"), a.threshold, 1, 1000, 5);
        errs.int_in(&format!("{ap}.maxWeight"), a.max_weight, 1, 100, 50);
        errs.int_in(&format!("{ap}.stepWeight"), a.step_weight, 1, 100, 10);
        errs.int_in(
            &format!("{ap}.stepWeightPromotion"),
            a.step_weight_promotion,
            0,
            100,
            0,
        );
        errs.int_in(&format!("{ap}.iterations"), a.iterations, 0, 100_000, 0);
        errs.int_in(&format!("{ap}.mirrorWeight"), a.mirror_weight, 0, 100, 100);
        let mut last = 0;
        for (j, w) in a.step_weights.iter().enumerate() {
            if *w < 1 {
                errs.push(
                    format!("{ap}.stepWeights[{j}]"),
                    format!("must be at least 1 (got {w})"),
                );
            } else if *w <= last {
                errs.push(
                    format!("{ap}.stepWeights[{j}]"),
                    "step weights must increase",
                );
            } else if *w > 100 {
                // Flagger accepts it and never routes more than 100 %; so does weir.
                errs.warn(
                    format!("{ap}.stepWeights[{j}]"),
                    format!("{w} is above 100: capped at 100, as Flagger does"),
                );
            }
            last = *w;
        }
        // Flagger's CRD: `analysis` is oneOf required [iterations], [stepWeight],
        // [stepWeights]; any two of them together are refused there.
        if a.step_weight.is_some() && !a.step_weights.is_empty() {
            errs.push(
                format!("{ap}.stepWeights"),
                "cannot be combined with stepWeight (Flagger's Canary allows one of iterations, stepWeight, stepWeights)",
            );
        }
        if a.iterations.is_some() && (a.step_weight.is_some() || !a.step_weights.is_empty()) {
            let other = if a.step_weight.is_some() {
                "stepWeight"
            } else {
                "stepWeights"
            };
            errs.push(
                format!("{ap}.iterations"),
                format!("cannot be combined with {other} (Flagger's Canary allows one of iterations, stepWeight, stepWeights)"),
            );
        }
        if !a.matches.is_empty() && a.iterations.unwrap_or(0) == 0 {
            errs.push(
                format!("{ap}.iterations"),
                "A/B testing (match) needs iterations > 0",
            );
        }
        if a.mirror == Some(true) && !a.matches.is_empty() {
            errs.push(
                format!("{ap}.mirror"),
                "mirroring cannot be combined with match",
            );
        }
        if a.session_affinity.is_some() && a.iterations.unwrap_or(0) > 0 {
            errs.push(
                format!("{ap}.sessionAffinity"),
                "session affinity works with the canary (weight) strategy, not with iterations",
            );
        }
        compile_matches(&format!("{ap}.match"), &a.matches, errs);
        if let Some(sa) = &a.session_affinity {
            compile_affinity(&format!("{ap}.sessionAffinity"), sa, errs);
        }
        let mut metric_names = BTreeSet::new();
        for (j, m) in a.metrics.iter().enumerate() {
            let mp = format!("{ap}.metrics[{j}]");
            if !metric_names.insert(m.name.clone()) {
                errs.push(
                    format!("{mp}.name"),
                    format!("duplicate metric {:?}", m.name),
                );
            }
            let builtin = m.name == METRIC_SUCCESS || m.name == METRIC_DURATION;
            if !builtin && m.query.is_none() {
                errs.push(
                    format!("{mp}.query"),
                    format!("metric {:?} is not built in ({METRIC_SUCCESS}, {METRIC_DURATION}); a custom metric needs a query", m.name),
                );
            }
            if m.query.is_some() && m.prometheus_url.is_none() {
                errs.push(
                    format!("{mp}.prometheusUrl"),
                    "a custom query needs the Prometheus server URL",
                );
            }
            match &m.threshold_range {
                None => errs.push(format!("{mp}.thresholdRange"), "required (min and/or max)"),
                Some(t) => {
                    if t.min.is_none() && t.max.is_none() {
                        errs.push(format!("{mp}.thresholdRange"), "set min and/or max");
                    }
                    if let (Some(lo), Some(hi)) = (t.min, t.max) {
                        if lo > hi {
                            errs.push(
                                format!("{mp}.thresholdRange"),
                                format!("min {lo} is above max {hi}"),
                            );
                        }
                    }
                }
            }
            errs.duration(&format!("{mp}.interval"), &m.interval, interval);
            errs.int_in(
                &format!("{mp}.minRequests"),
                m.min_requests,
                0,
                1_000_000_000,
                10,
            );
        }
        let mut hook_names = BTreeSet::new();
        for (j, w) in a.webhooks.iter().enumerate() {
            let wp = format!("{ap}.webhooks[{j}]");
            if !hook_names.insert(w.name.clone()) {
                errs.push(
                    format!("{wp}.name"),
                    format!("duplicate webhook {:?}", w.name),
                );
            }
            let kind = w.kind.as_deref().unwrap_or("rollout");
            if !HOOK_TYPES.contains(&kind) {
                errs.push(
                    format!("{wp}.type"),
                    format!(
                        "unknown webhook type {kind:?}; expected one of {}",
                        HOOK_TYPES.join(", ")
                    ),
                );
            }
            if kind == "promote" && c.promotion.as_deref() != Some("webhook") {
                errs.push(
                    format!("{wp}.type"),
                    "a promote hook needs promotion: webhook",
                );
            }
            let ok_url = w
                .url
                .parse::<http::Uri>()
                .ok()
                .is_some_and(|u| u.scheme_str() == Some("http") && u.host().is_some());
            if !ok_url {
                errs.push(
                    format!("{wp}.url"),
                    format!("expected an http:// URL (got {:?})", w.url),
                );
            }
            errs.duration(
                &format!("{wp}.timeout"),
                &w.timeout,
                Duration::from_secs(10),
            );
            errs.int_in(&format!("{wp}.retries"), w.retries, 0, 10, 0);
        }
        if c.promotion.as_deref() == Some("webhook")
            && !a
                .webhooks
                .iter()
                .any(|w| w.kind.as_deref() == Some("promote"))
        {
            errs.push(
                format!("{p}.promotion"),
                "promotion: webhook needs a webhook of type promote",
            );
        }
        // The canary strategy moves by stepWeight or stepWeights; without either a run
        // could never leave weight 0 (A/B and blue/green move by iterations).
        if c.skip_analysis != Some(true)
            && a.iterations.unwrap_or(0) == 0
            && a.step_weight.is_none()
            && a.step_weights.is_empty()
        {
            errs.push(
                format!("{ap}.stepWeight"),
                "set stepWeight or stepWeights (canary strategy), or iterations (A/B, blue/green)",
            );
        }
        // Revisions are read from the slots' revisionPath: both slots, since a swap
        // exchanges them.
        if let Some(r) = table.routes.iter().find(|r| r.name == c.route) {
            let needs = |why: &str, slot: &str, errs: &mut Errors| {
                let has = table
                    .backends
                    .get(slot)
                    .is_some_and(|b| b.revision_path.is_some());
                if !has && table.backends.contains_key(slot) {
                    errs.push(
                        format!("{p}.{why}"),
                        format!(
                            "backend {slot:?} of route {:?} needs a revisionPath",
                            r.name
                        ),
                    );
                }
            };
            let mut slots = vec![r.primary.clone()];
            slots.extend(r.canary.clone());
            if c.watch_revision == Some(true) {
                for s in &slots {
                    needs("watchRevision", s, errs);
                }
            }
            if c.promotion.as_deref() == Some("webhook") {
                for s in &slots {
                    needs("promotion", s, errs);
                }
            }
        }
        let data_plane_token = match &c.data_plane_token_file {
            None => None,
            Some(f) => match std::fs::read_to_string(base.join(f)) {
                Ok(t) if !t.trim().is_empty() => Some(t.trim().to_string()),
                Ok(_) => {
                    errs.push(format!("{p}.dataPlaneTokenFile"), "the token file is empty");
                    None
                }
                Err(e) => {
                    errs.push(
                        format!("{p}.dataPlaneTokenFile"),
                        format!("cannot read {f}: {e}"),
                    );
                    None
                }
            },
        };
        if errs.0.len() == before {
            out.push(CanaryConfig {
                raw: c.clone(),
                interval,
                progress_deadline,
                data_plane_token,
            });
        }
    }
    out
}
