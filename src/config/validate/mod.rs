//! Validation and compilation of raw configuration. Every check pushes an
//! error with its field path and carries on, so a user sees all problems at
//! once. Only a config with zero errors is turned into runtime values.
//!
//! One file per part of the document: [`listeners`] (and admin, proxy settings),
//! [`backends`], [`routes`] (matches, affinity), [`canary`]; [`types`] holds the
//! validated values they produce. The children share this module's imports and
//! its error collector.

mod alerts;
mod backends;
mod canary;
mod canary_types;
mod judge;
mod lint;
mod listeners;
mod policies;
mod providers;
mod routes;
mod templates;
mod types;

use alerts::*;
pub use alerts::{
    AlertProvider, AlertRule, ProviderKind, Secret, Severity, DEFAULT_ALERT_RETRIES,
    DEFAULT_ALERT_TIMEOUT,
};
use backends::*;
pub use canary::defaults as canary_defaults;
use canary::*;
pub use canary::{
    CanaryAnalysis, CanaryConfig, CanaryMatches, CanaryMetric, CanaryWebhook, HookKind, MetricKind,
    Promotion,
};
pub use judge::{JudgeSpec, OnInconclusive, DEFAULT_MAX_HOLDS};
use listeners::*;
use policies::*;
pub use policies::{
    BudgetSettings, CircuitBreakerLimits, RateKey, RateLimitPolicy, RetryOn, RetryPolicy,
    RoutePolicies, MAX_RETRY_ATTEMPTS,
};
use providers::validate_providers;
pub use providers::{
    provider_notes, DockerEndpoint, DockerSettings, DockerTlsFiles, ProvidersConfig,
    DEFAULT_DOCKER_DEBOUNCE, DEFAULT_DOCKER_ENDPOINT, DEFAULT_DOCKER_RESYNC,
    DEFAULT_DOCKER_TIMEOUT,
};
use routes::*;
use templates::*;
pub use templates::{validate_json_path, MetricTemplate, WebMetric, DEFAULT_WEB_TIMEOUT};
pub use types::*;

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
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// Largest compiled regex accepted (bytes of the compiled program). Guards
/// the data plane against patterns that would blow up memory or time.
pub const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// Default `limits.maxTableRegexBytes`: the compiled regexes of one table together.
pub const DEFAULT_MAX_TABLE_REGEX_BYTES: usize = 64 << 20;
/// Longest regex source accepted.
pub const REGEX_MAX_LEN: usize = 4096;

/// Errors (`.0`, any refuses the config), warnings (`.1`, reported only), and the
/// regex budget of the table being compiled (`.2`).
struct Errors(Vec<ConfigError>, Vec<ConfigError>, RegexBudget);

/// What the regexes compiled so far cost, against `limits.maxTableRegexBytes`.
#[derive(Debug, Clone, Copy, Default)]
struct RegexBudget {
    /// The budget; `None`: not compiling a table (a canary's own match block).
    limit: Option<usize>,
    /// Bytes of the regexes compiled so far.
    used: usize,
    /// How many.
    count: usize,
    /// The budget was passed (and said): no further regex is compiled.
    over: bool,
}

impl Errors {
    fn new() -> Self {
        Errors(Vec::new(), Vec::new(), RegexBudget::default())
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

/// Validates a whole file's worth of configuration: the config or every
/// error, and every warning either way (`weir check` prints both).
pub fn validate_all(
    raw: RawConfig,
    base: &Path,
) -> (Result<Config, Vec<ConfigError>>, Vec<ConfigError>) {
    let mut errs = Errors::new();
    lint::warn_ignored(&raw, &mut errs);
    let listeners = validate_listeners(&raw.listeners, base, &mut errs);
    let mut admin = validate_admin(raw.admin.as_ref(), base, &mut errs);
    let proxy = validate_proxy(raw.proxy.as_ref(), &mut errs);
    let providers = validate_providers(raw.providers.as_ref(), base, &mut errs);
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
    let limits = validate_limits(raw.limits.as_ref(), &mut errs);
    let rules = TableRules {
        docker_provider: raw.providers.as_ref().is_some_and(|p| p.docker.is_some()),
        max_table_regex_bytes: limits.max_table_regex_bytes,
    };
    let table = compile_into(&table_raw, rules, &mut errs);
    if rules.docker_provider
        && !table_raw
            .backends
            .values()
            .any(|b| b.provider.as_deref() == Some("docker"))
    {
        errs.warn(
            "providers.docker",
            "no backend says `provider: docker`: container labels fill nothing",
        );
    }
    let alert_providers = validate_alert_providers(&raw.alert_providers, base, &mut errs);
    let templates = validate_templates(&raw.metric_templates, &raw.canaries, base, &mut errs);
    let canaries = validate_canaries(
        &raw.canaries,
        &table_raw,
        &raw.alert_providers,
        (&templates, &raw.metric_templates),
        base,
        rules,
        &mut errs,
    );
    let rollout = RolloutSettings {
        state_dir: raw
            .rollout
            .as_ref()
            .and_then(|r| r.state_dir.as_ref())
            .map(|d| base.join(d)),
    };
    let cluster = raw.cluster.as_ref().and_then(|c| {
        let mut s = crate::config::cluster::validate(c, base)
            .map_err(|list| {
                for (path, reason) in list {
                    errs.push(path, reason);
                }
            })
            .ok()?;
        s.peer_token = listeners::peer_token(c, &admin, base, &mut errs);
        Some(s)
    });
    if let Some(f) = raw
        .cluster
        .as_ref()
        .and_then(|c| c.peer_token_file.as_ref())
    {
        admin
            .token_files
            .push(("cluster.peerTokenFile", base.join(f)));
    }
    if !errs.0.is_empty() {
        return (Err(errs.0), errs.1);
    }
    let warnings = errs.1.clone();
    let cfg = Config {
        listeners,
        admin,
        table: table.expect("no errors implies a table"),
        canaries,
        proxy,
        rollout,
        cluster,
        alert_providers,
        providers,
        limits,
        warnings: errs.1,
    };
    (Ok(cfg), warnings)
}

/// Validates and compiles backends + routes (used by the loader and by every
/// API write).
pub fn compile_table(raw: &RawTable) -> Result<TableSpec, Vec<ConfigError>> {
    compile_table_with(raw, TableRules::default())
}

/// What a table may hold: the settings of the rest of the file it is checked under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableRules {
    /// `providers.docker` is configured: a backend may say `provider: docker` (and
    /// then list no endpoints).
    pub docker_provider: bool,
    /// `limits.maxTableRegexBytes`: the compiled regexes of the table together.
    pub max_table_regex_bytes: usize,
}

impl Default for TableRules {
    fn default() -> Self {
        TableRules {
            docker_provider: false,
            max_table_regex_bytes: DEFAULT_MAX_TABLE_REGEX_BYTES,
        }
    }
}

/// `limits:`, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes the compiled regexes of one routing table may take together.
    pub max_table_regex_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_table_regex_bytes: DEFAULT_MAX_TABLE_REGEX_BYTES,
        }
    }
}

fn validate_limits(raw: Option<&RawLimits>, errs: &mut Errors) -> Limits {
    let mut out = Limits::default();
    if let Some(n) = raw.and_then(|l| l.max_table_regex_bytes) {
        match usize::try_from(n) {
            Ok(n) if n > 0 => out.max_table_regex_bytes = n,
            _ => errs.push(
                "limits.maxTableRegexBytes",
                format!("expected a number of bytes greater than 0 (got {n})"),
            ),
        }
    }
    out
}

/// `67108864` as `64 MiB`, `1500` as `1500 bytes`: a budget in a message.
pub fn fmt_bytes(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20))
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

/// [`compile_table`] under `rules`.
pub fn compile_table_with(
    raw: &RawTable,
    rules: TableRules,
) -> Result<TableSpec, Vec<ConfigError>> {
    let mut errs = Errors::new();
    let t = compile_into(raw, rules, &mut errs);
    match t {
        Some(t) if errs.0.is_empty() => Ok(t),
        _ => Err(errs.0),
    }
}

fn compile_into(raw: &RawTable, rules: TableRules, errs: &mut Errors) -> Option<TableSpec> {
    // Every regex of the table counts against one budget; other regexes (a
    // canary's own match block) only against the per-pattern limit.
    errs.2 = RegexBudget {
        limit: Some(rules.max_table_regex_bytes),
        ..RegexBudget::default()
    };
    let table = compile_table_parts(raw, rules, errs);
    errs.2 = RegexBudget::default();
    table
}

fn compile_table_parts(raw: &RawTable, rules: TableRules, errs: &mut Errors) -> Option<TableSpec> {
    let before = errs.0.len();
    let mut backends = BTreeMap::new();
    for (name, b) in &raw.backends {
        let path = join_key("backends", name);
        if let Some(spec) = validate_backend(&path, name, b, rules, errs) {
            backends.insert(name.clone(), spec);
        }
    }
    let mut names = BTreeSet::new();
    let mut routes = Vec::new();
    let mut policies = BTreeMap::new();
    for (i, r) in raw.routes.iter().enumerate() {
        let path = format!("routes[{i}]");
        if !names.insert(r.name.as_str()) {
            errs.push(
                format!("{path}.name"),
                format!("duplicate route name {:?}", r.name),
            );
        }
        let p = compile_policies(&path, r, errs);
        if !p.is_empty() {
            policies.insert(r.name.clone(), std::sync::Arc::new(p));
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
        policies,
    })
}
