//! The raw schema of the resilience policies (DESIGN §11): a route's
//! `retries` and `rateLimit`, a backend's `circuitBreaker`. Kept beside
//! `raw` (which re-exports them) so that file stays the DESIGN §3 schema in
//! its order; the rules of `raw` hold here too (wide numbers, raw strings,
//! unknown fields rejected).

use serde::{Deserialize, Serialize};

/// `routes[].retries`: off unless present.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawRetries {
    /// Extra attempts after the first (0..10, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i64>,
    /// Conditions: `connect-failure`, `reset`, `gateway-error`, `5xx`,
    /// `retriable-status-codes` (default the first three).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<Vec<String>>,
    /// Statuses for `retriable-status-codes`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status_codes: Vec<i64>,
    /// Limit of one attempt (default: the route timeout, which stays the
    /// overall deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_try_timeout: Option<String>,
    /// Jittered exponential backoff between attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<RawBackoff>,
    /// Methods that may be retried (default: the idempotent ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    /// Largest request body kept for replay (default 65536).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<i64>,
    /// Retries as a share of requests, with a floor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<RawRetryBudget>,
}

/// `retries.backoff`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawBackoff {
    /// First interval (default 25ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Largest interval (default 10 × base).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<String>,
}

/// `retries.budget`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawRetryBudget {
    /// Retries allowed as a percent of requests over the window (0..100, default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    /// Retries per second always allowed (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_retries_per_second: Option<i64>,
}

/// `routes[].rateLimit`: a local token bucket.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawRateLimit {
    /// Tokens added per second (required, > 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<f64>,
    /// Bucket size (default: requestsPerSecond, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<i64>,
    /// `route` (default), `client-ip` or `header:NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// `backends[].circuitBreaker`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawCircuitBreaker {
    /// Upstream exchanges at once, over all endpoints (default 1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<i64>,
    /// Requests waiting for one of those (default 1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pending_requests: Option<i64>,
    /// Requests at once, waiting or active (default 1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<i64>,
}
