//! Configuration in three stages (as in sozu): raw serde structs
//! ([`raw`]) → validation that collects *every* error with its field path and
//! `file:line:col` → compiled runtime values ([`Config`], a
//! [`RoutingTable`](crate::routing::RoutingTable)).
//!
//! The control API reuses the same validation for every write, so a table
//! that could not be loaded from a file can never be installed at run time
//! either. Nothing in this module panics on user input.
//!
//! Reporting: [`diagnostics`] finds every problem of a file at once (parse
//! errors too: `recover` repairs a copy of the text where the reader stopped,
//! through `yaml_edit`, and reads on; `yaml_tree` keeps the byte spans by field
//! path; `suggest` gives "did you mean"), and the warnings of `validate::lint`.
//!
//! Layering: `config` imports only the pure modules (`routing`, `affinity`,
//! `headers`); what it validates for the layers above lives here too
//! ([`cluster`] settings, [`tls`] file loading, the raw [`affinity`] rule).

pub mod admin_hosts;
pub mod affinity;
pub mod cluster;
mod cluster_etcd;
pub mod diagnostics;
mod duration;
mod locate;
mod network;
pub mod raw;
mod raw_cluster;
mod raw_policies;
mod raw_providers;
mod raw_templates;
mod recover;
pub mod series;
mod suggest;
pub mod template;
pub mod tls;
mod validate;
mod yaml_edit;
mod yaml_tree;

pub use duration::{parse_duration, parse_go_duration, GoDurationError};
pub use locate::Locations;
pub use network::parse_network;
pub use validate::{
    canary_defaults, compile_table, AdminConfig, BackendSpec, CanaryAnalysis, CanaryConfig,
    CanaryMatches, CanaryMetric, CanaryWebhook, CertFiles, Config, HealthSettings, HookKind,
    IntOrPercent, ListenerConfig, ListenerTls, LoadBalancer, MetricKind, OutlierSettings,
    Promotion, ProxySettings, RollingSettings, RolloutSettings, TableSpec, UpstreamProtocol,
    UpstreamTls,
};
pub use validate::{
    compile_table_with, fmt_bytes, provider_notes, DockerEndpoint, DockerSettings, DockerTlsFiles,
    Limits, ProvidersConfig, TableRules, DEFAULT_DOCKER_DEBOUNCE, DEFAULT_DOCKER_ENDPOINT,
    DEFAULT_DOCKER_RESYNC, DEFAULT_DOCKER_TIMEOUT, DEFAULT_MAX_TABLE_REGEX_BYTES,
};
pub use validate::{validate_json_path, MetricTemplate, WebMetric, DEFAULT_WEB_TIMEOUT};
pub use validate::{
    AlertProvider, AlertRule, BudgetSettings, CircuitBreakerLimits, ProviderKind, RateKey,
    RateLimitPolicy, RetryOn, RetryPolicy, RoutePolicies, Secret, Severity, DEFAULT_ALERT_RETRIES,
    DEFAULT_ALERT_TIMEOUT, MAX_RETRY_ATTEMPTS,
};
pub use validate::{JudgeSpec, OnInconclusive, DEFAULT_MAX_HOLDS};

use std::fmt;
use std::path::Path;

/// One problem in a configuration or an API write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Field path, e.g. `routes[0].canaryWeight`.
    pub path: String,
    /// Why the value is refused.
    pub reason: String,
    /// 1-based line and column in the source file, when known.
    pub location: Option<(usize, usize)>,
}

impl ConfigError {
    /// An error at `path` (location filled in later from the source).
    pub fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            reason: reason.into(),
            location: None,
        }
    }
}

/// All errors of one file or write, printable one per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The file name used as prefix (`-` for API bodies).
    pub file: String,
    /// Every error found, in document order where known.
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            match e.location {
                Some((l, c)) => write!(f, "{}:{}:{}: ", self.file, l, c)?,
                None => write!(f, "{}: ", self.file)?,
            }
            if e.path.is_empty() {
                write!(f, "{}", e.reason)?;
            } else {
                write!(f, "{}: {}", e.path, e.reason)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Reads and validates a YAML file.
pub fn load_file(path: &Path) -> Result<Config, ConfigErrors> {
    load_file_with_raw(path).map(|(_, cfg)| cfg)
}

/// [`load_file`], also returning the file as parsed before validation (what a
/// SIGHUP reload compares the new file with).
pub fn load_file_with_raw(path: &Path) -> Result<(raw::RawConfig, Config), ConfigErrors> {
    let label = path.display().to_string();
    let src = std::fs::read_to_string(path).map_err(|e| ConfigErrors {
        file: label.clone(),
        errors: vec![ConfigError::new("", format!("cannot read file: {e}"))],
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse_yaml_with_raw(&src, &label, base)
}

/// Parses and validates YAML text. Relative file paths inside (TLS, tokens)
/// are resolved against `base`.
pub fn parse_yaml(src: &str, label: &str, base: &Path) -> Result<Config, ConfigErrors> {
    parse_yaml_with_raw(src, label, base).map(|(_, cfg)| cfg)
}

/// [`parse_yaml`], also returning the text as parsed before validation. The
/// errors are every parse and validation error of the text
/// ([`diagnostics::check_source`]).
pub fn parse_yaml_with_raw(
    src: &str,
    label: &str,
    base: &Path,
) -> Result<(raw::RawConfig, Config), ConfigErrors> {
    let checked = diagnostics::check_source(src, label, base);
    match checked.loaded {
        Some(loaded) => Ok(loaded),
        None => Err(checked.report.config_errors()),
    }
}

/// The warnings of a loaded config, one per line, as errors are printed
/// (`file:line:col: warning: path: reason`).
pub fn format_warnings(file: &str, warnings: &[ConfigError]) -> String {
    let mut out = String::new();
    for w in warnings {
        let at = match w.location {
            Some((l, c)) => format!("{file}:{l}:{c}"),
            None => file.to_string(),
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("{at}: warning: {}: {}", w.path, w.reason));
    }
    out
}

#[cfg(test)]
mod match_tests;
#[cfg(test)]
mod tests;
