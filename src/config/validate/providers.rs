//! `providers:`: where endpoint lists come from besides the file (DESIGN §16).
//! Only `providers.docker` exists: the Engine API address, TLS files, the
//! network whose IP is the endpoint, and the timings of the watch loop.

use super::*;
use std::path::PathBuf;

/// Default `providers.docker.endpoint`.
pub const DEFAULT_DOCKER_ENDPOINT: &str = "unix:///var/run/docker.sock";
/// Default `providers.docker.debounce`.
pub const DEFAULT_DOCKER_DEBOUNCE: Duration = Duration::from_millis(250);
/// Default `providers.docker.resyncInterval`.
pub const DEFAULT_DOCKER_RESYNC: Duration = Duration::from_secs(30);
/// Default `providers.docker.timeout`.
pub const DEFAULT_DOCKER_TIMEOUT: Duration = Duration::from_secs(10);

/// The validated `providers:` block.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProvidersConfig {
    /// `providers.docker`, when configured.
    pub docker: Option<DockerSettings>,
}

impl ProvidersConfig {
    /// Whether any provider fills endpoint lists (a backend may then be declared empty).
    pub fn any(&self) -> bool {
        self.docker.is_some()
    }
}

/// How weir reaches the Docker Engine API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DockerEndpoint {
    /// A unix socket path (`unix:///var/run/docker.sock`).
    Unix(PathBuf),
    /// `host:port` over TCP, in clear text or with TLS.
    Tcp {
        /// `host:port`.
        address: String,
        /// Client certificate, key and the daemon's CA; `None`: plain HTTP.
        tls: Option<DockerTlsFiles>,
    },
}

impl std::fmt::Display for DockerEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DockerEndpoint::Unix(p) => write!(f, "unix://{}", p.display()),
            DockerEndpoint::Tcp { address, .. } => write!(f, "tcp://{address}"),
        }
    }
}

/// `providers.docker.tls`, paths resolved against the config file's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerTlsFiles {
    /// CA of the daemon's certificate.
    pub ca_file: PathBuf,
    /// Client certificate.
    pub cert_file: PathBuf,
    /// Client key.
    pub key_file: PathBuf,
}

/// The validated `providers.docker`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerSettings {
    /// Where the Engine API is.
    pub endpoint: DockerEndpoint,
    /// The network whose container IP is the endpoint address.
    pub network: Option<String>,
    /// Quiet time after an event before the lists are recomputed.
    pub debounce: Duration,
    /// A full re-list this often, events or not.
    pub resync_interval: Duration,
    /// Bound on one Engine API request.
    pub timeout: Duration,
}

pub(super) fn validate_providers(
    raw: Option<&RawProviders>,
    base: &Path,
    errs: &mut Errors,
) -> ProvidersConfig {
    let Some(raw) = raw else {
        return ProvidersConfig::default();
    };
    ProvidersConfig {
        docker: raw
            .docker
            .as_ref()
            .and_then(|d| validate_docker("providers.docker", d, base, errs)),
    }
}

fn validate_docker(
    path: &str,
    d: &RawDockerProvider,
    base: &Path,
    errs: &mut Errors,
) -> Option<DockerSettings> {
    let before = errs.0.len();
    let text = d.endpoint.as_deref().unwrap_or(DEFAULT_DOCKER_ENDPOINT);
    let endpoint = if let Some(p) = text.strip_prefix("unix://") {
        if !p.starts_with('/') {
            errs.push(
                format!("{path}.endpoint"),
                format!(
                    "{text:?}: a unix socket needs an absolute path (unix:///var/run/docker.sock)"
                ),
            );
        }
        if d.tls.is_some() {
            errs.push(
                format!("{path}.tls"),
                "TLS applies to a tcp:// endpoint only",
            );
        }
        DockerEndpoint::Unix(PathBuf::from(p))
    } else if let Some(a) = text.strip_prefix("tcp://") {
        if let Err(reason) = super::backends::validate_endpoint(a) {
            errs.push(format!("{path}.endpoint"), reason);
        }
        let tls = d
            .tls
            .as_ref()
            .and_then(|t| validate_docker_tls(&format!("{path}.tls"), t, base, errs));
        DockerEndpoint::Tcp {
            address: a.to_string(),
            tls,
        }
    } else {
        errs.push(
            format!("{path}.endpoint"),
            format!("{text:?}: expected unix:///path/to/docker.sock or tcp://host:port"),
        );
        DockerEndpoint::Unix(PathBuf::new())
    };
    if let Some(n) = &d.network {
        if n.trim().is_empty() {
            errs.push(format!("{path}.network"), "must not be empty");
        }
    }
    let debounce = match &d.debounce {
        // Zero is allowed: every event then recomputes at once.
        Some(s) if parse_duration(s).is_ok_and(|d| d.is_zero()) => Duration::ZERO,
        v => errs.duration(&format!("{path}.debounce"), v, DEFAULT_DOCKER_DEBOUNCE),
    };
    let resync_interval = errs.duration(
        &format!("{path}.resyncInterval"),
        &d.resync_interval,
        DEFAULT_DOCKER_RESYNC,
    );
    let timeout = errs.duration(
        &format!("{path}.timeout"),
        &d.timeout,
        DEFAULT_DOCKER_TIMEOUT,
    );
    // The Engine API client counts its timeout in whole seconds.
    if timeout < Duration::from_secs(1) {
        errs.push(format!("{path}.timeout"), "must be at least 1s");
    }
    (errs.0.len() == before).then(|| DockerSettings {
        endpoint,
        network: d.network.clone(),
        debounce,
        resync_interval,
        timeout,
    })
}

fn validate_docker_tls(
    path: &str,
    t: &RawDockerTls,
    base: &Path,
    errs: &mut Errors,
) -> Option<DockerTlsFiles> {
    let mut file = |field: &str, v: &Option<String>| -> Option<PathBuf> {
        match v {
            None => {
                errs.push(
                    format!("{path}.{field}"),
                    "required: the daemon's TLS needs caFile, certFile and keyFile",
                );
                None
            }
            Some(f) => Some(base.join(f)),
        }
    };
    let ca = file("caFile", &t.ca_file);
    let cert = file("certFile", &t.cert_file);
    let key = file("keyFile", &t.key_file);
    let (ca, cert, key) = (ca?, cert?, key?);
    if let Err(e) = crate::config::tls::load_ca_file(&ca) {
        errs.push(format!("{path}.caFile"), e);
    }
    match crate::config::tls::load_pair(&cert, &key) {
        Ok(_) => {}
        Err(crate::config::tls::PairError::Cert(e)) => errs.push(format!("{path}.certFile"), e),
        Err(crate::config::tls::PairError::Key(e)) => errs.push(format!("{path}.keyFile"), e),
    }
    Some(DockerTlsFiles {
        ca_file: ca,
        cert_file: cert,
        key_file: key,
    })
}

/// The lines `weir check` prints about provider-filled backends: each backend
/// that says `provider: docker`, and whether the file lists endpoints for it.
pub fn provider_notes(cfg: &Config) -> Vec<String> {
    if cfg.providers.docker.is_none() {
        return Vec::new();
    }
    cfg.table
        .backends
        .iter()
        .filter(|(_, b)| b.from_docker)
        .map(|(name, b)| {
            let listed = if b.endpoints.is_empty() {
                "no endpoints in the file"
            } else {
                "the file's endpoints serve until the first listing"
            };
            format!(
                "backends.{name}: {listed}; providers.docker fills them from running containers labelled weir.backend={name}"
            )
        })
        .collect()
}

#[cfg(test)]
#[path = "providers_tests.rs"]
mod tests;
