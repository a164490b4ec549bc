//! Active health-check state of one endpoint: thresholds turn a stream of probe results
//! into a ready / not-ready flag, as Kubernetes readiness probes and Envoy's active
//! health checking do.
//!
//! This file only counts: the driver sends `GET {path}` every `interval` with a
//! `timeout`, turns the answer into a [`ProbeResult`] with
//! [`HealthConfig::probe_result`], and feeds it to [`HealthState::observe`]. No IO, no
//! clock, no panics.
//!
//! # Defaults
//!
//! They follow Kubernetes' readiness probe, which is what most users of weir know
//! (Envoy has no defaults for these fields and accepts only 200 unless told otherwise):
//! `path: /healthz` (what `weir echo` answers; Kubernetes has no default path),
//! `interval: 10s` (`periodSeconds`), `timeout: 1s` (`timeoutSeconds`),
//! `healthyThreshold: 1` (`successThreshold`), `unhealthyThreshold: 3`
//! (`failureThreshold`), `expectedStatus: ["200-399"]` (Kubernetes' httpGet success).
//!
//! # Initial state (the choice weir makes)
//!
//! * An endpoint without a health check is always ready (only outlier detection can take
//!   it out).
//! * An endpoint of the **initial** list, the one in the config when the process starts,
//!   starts **ready**: weir must serve at once after a restart, and waiting for a probe
//!   round would turn every restart into an outage of up to `interval`. If it is in fact
//!   down, `unhealthyThreshold` failed probes take it out, and passive outlier detection
//!   usually does so earlier (connect errors count).
//! * An endpoint **added later** (config reload, API, rolling update) starts **not
//!   ready** and must pass `healthyThreshold` consecutive probes first, like a
//!   Kubernetes pod behind a readiness probe. This is what gates rolling updates.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;

/// One accepted probe status: a single code or an inclusive range. In YAML/JSON: `200`,
/// `"204"` or `"200-399"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedStatus {
    /// Exactly this status code.
    Code(u16),
    /// Any status in `from..=to`.
    Range {
        /// First accepted code.
        from: u16,
        /// Last accepted code (inclusive, as people write "200-299").
        to: u16,
    },
}

impl ExpectedStatus {
    /// Whether a probe that answered `status` passes.
    pub fn matches(self, status: u16) -> bool {
        match self {
            ExpectedStatus::Code(c) => status == c,
            ExpectedStatus::Range { from, to } => (from..=to).contains(&status),
        }
    }

    /// Codes must be real HTTP statuses (100..=599) and a range must not be reversed;
    /// anything else is a typo that would silently make every probe fail.
    pub fn validate(self) -> Result<(), String> {
        let valid = |c: u16| (100..=599).contains(&c);
        match self {
            ExpectedStatus::Code(c) if !valid(c) => {
                Err(format!("{c} is not an HTTP status (100-599)"))
            }
            ExpectedStatus::Range { from, to } if !valid(from) || !valid(to) => Err(format!(
                "{from}-{to} is not a range of HTTP statuses (100-599)"
            )),
            ExpectedStatus::Range { from, to } if from > to => {
                Err(format!("{from}-{to} is reversed: write {to}-{from}"))
            }
            _ => Ok(()),
        }
    }

    /// Parses `"204"` or `"200-399"`.
    pub fn parse(s: &str) -> Result<ExpectedStatus, String> {
        let code = |part: &str| {
            part.trim()
                .parse::<u16>()
                .map_err(|_| format!("invalid status {s:?}: expected 200 or \"200-399\""))
        };
        match s.split_once('-') {
            Some((from, to)) => Ok(ExpectedStatus::Range {
                from: code(from)?,
                to: code(to)?,
            }),
            None => code(s).map(ExpectedStatus::Code),
        }
    }
}

impl fmt::Display for ExpectedStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpectedStatus::Code(c) => write!(f, "{c}"),
            ExpectedStatus::Range { from, to } => write!(f, "{from}-{to}"),
        }
    }
}

impl Serialize for ExpectedStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ExpectedStatus::Code(c) => serializer.serialize_u16(*c),
            ExpectedStatus::Range { .. } => serializer.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for ExpectedStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StatusVisitor;

        impl Visitor<'_> for StatusVisitor {
            type Value = ExpectedStatus;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a status code like 200 or a range like \"200-399\"")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ExpectedStatus, E> {
                u16::try_from(v)
                    .map(ExpectedStatus::Code)
                    .map_err(|_| E::custom(format!("{v} is not an HTTP status")))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ExpectedStatus, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(format!("{v} is not an HTTP status")))
                    .and_then(|v| self.visit_u64(v))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<ExpectedStatus, E> {
                ExpectedStatus::parse(v).map_err(E::custom)
            }
        }

        deserializer.deserialize_any(StatusVisitor)
    }
}

/// The accepted statuses when `expectedStatus` is empty or not given: Kubernetes'
/// httpGet rule, 200 <= status < 400.
pub const DEFAULT_EXPECTED_STATUS: ExpectedStatus = ExpectedStatus::Range { from: 200, to: 399 };

/// A backend's `healthCheck` block, parsed (durations in milliseconds). Defaults in the
/// module doc. Serialize only, for the API: the YAML form (durations as strings) is the
/// config loader's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthConfig {
    /// Path the probe GETs on each endpoint.
    pub path: String,
    /// Time between two probes of one endpoint.
    pub interval_ms: u64,
    /// A probe without an answer within this time failed.
    pub timeout_ms: u64,
    /// Consecutive passing probes that make a not-ready endpoint ready.
    pub healthy_threshold: u32,
    /// Consecutive failed probes that make a ready endpoint not ready.
    pub unhealthy_threshold: u32,
    /// Statuses that count as passing; empty means [`DEFAULT_EXPECTED_STATUS`].
    pub expected_status: Vec<ExpectedStatus>,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            path: "/healthz".to_string(),
            interval_ms: 10_000,
            timeout_ms: 1_000,
            healthy_threshold: 1,
            unhealthy_threshold: 3,
            expected_status: vec![DEFAULT_EXPECTED_STATUS],
        }
    }
}

impl HealthConfig {
    /// Every problem, each prefixed with its field name as the config spells it, so the
    /// config loader can prepend the path (`backends.app-blue.healthCheck.`).
    pub fn validate(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if !self.path.starts_with('/') {
            errors.push(format!("path: must start with '/', got {:?}", self.path));
        }
        if self.interval_ms == 0 {
            errors.push("interval: must be greater than 0".to_string());
        }
        if self.timeout_ms == 0 {
            errors.push("timeout: must be greater than 0".to_string());
        }
        if self.healthy_threshold == 0 {
            errors.push("healthyThreshold: must be at least 1".to_string());
        }
        if self.unhealthy_threshold == 0 {
            errors.push("unhealthyThreshold: must be at least 1".to_string());
        }
        for (i, status) in self.expected_status.iter().enumerate() {
            if let Err(e) = status.validate() {
                errors.push(format!("expectedStatus[{i}]: {e}"));
            }
        }
        errors
    }

    /// Whether a probe answered with `status` passes.
    pub fn status_ok(&self, status: u16) -> bool {
        if self.expected_status.is_empty() {
            return DEFAULT_EXPECTED_STATUS.matches(status);
        }
        self.expected_status.iter().any(|s| s.matches(status))
    }

    /// Turns what the probe got into a result: `None` is a connect error or a timeout,
    /// which fails like a bad status.
    pub fn probe_result(&self, status: Option<u16>) -> ProbeResult {
        ProbeResult {
            ok: status.is_some_and(|s| self.status_ok(s)),
        }
    }
}

/// The outcome of one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeResult {
    /// The probe answered in time with an expected status.
    pub ok: bool,
}

/// Where an endpoint comes from, which decides its initial readiness (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// In the config when the process started: serve at once.
    Initial,
    /// Added afterwards (reload, API, rolling update): prove health first.
    Added,
}

/// The health of one endpoint as its probes have shown it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthState {
    /// Whether the endpoint may receive traffic and may join a rotation.
    pub ready: bool,
    /// Passing probes in a row; reaches `healthyThreshold` to become ready.
    pub consecutive_successes: u32,
    /// Failed probes in a row; reaches `unhealthyThreshold` to become not ready.
    pub consecutive_failures: u32,
}

impl HealthState {
    /// The state an endpoint starts in; `health_checked` is whether its backend has a
    /// `healthCheck` (see the module doc for the rule).
    pub fn initial(health_checked: bool, origin: Origin) -> HealthState {
        HealthState {
            ready: !health_checked || origin == Origin::Initial,
            consecutive_successes: 0,
            consecutive_failures: 0,
        }
    }

    /// Counts one probe result; returns true when readiness flipped, so the driver
    /// can log it and tell the load balancer. A threshold of 0 (rejected by
    /// `validate`, but never trusted) acts as 1.
    pub fn observe(&mut self, result: ProbeResult, cfg: &HealthConfig) -> bool {
        if result.ok {
            self.consecutive_failures = 0;
            self.consecutive_successes = self.consecutive_successes.saturating_add(1);
            if !self.ready && self.consecutive_successes >= cfg.healthy_threshold.max(1) {
                self.ready = true;
                return true;
            }
        } else {
            self.consecutive_successes = 0;
            self.consecutive_failures = self.consecutive_failures.saturating_add(1);
            if self.ready && self.consecutive_failures >= cfg.unhealthy_threshold.max(1) {
                self.ready = false;
                return true;
            }
        }
        false
    }
}
