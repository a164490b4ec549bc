//! Resilience policies (DESIGN §11): a route's `retries`, `rateLimit` and
//! `maxRequestBodyBytes`, a backend's `circuitBreaker`. Validated with
//! field paths like the rest; defaults follow Envoy where it has one
//! (docs/resilience.md lists them).

use super::*;

/// Most extra attempts a route may ask for.
pub const MAX_RETRY_ATTEMPTS: i64 = 10;

/// Conditions under which an attempt is retried (`retries.on`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryOn {
    /// `connect-failure`: no connection could be made.
    pub connect_failure: bool,
    /// `reset`: the connection broke before a whole response head, or the
    /// attempt passed its `perTryTimeout`.
    pub reset: bool,
    /// `gateway-error`: a 502, 503 or 504 answer (and a per-try timeout).
    pub gateway_error: bool,
    /// `5xx`: any 5xx answer, and everything `connect-failure` and `reset` cover.
    pub server_error: bool,
    /// `retriable-status-codes`: an answer whose status is in `statusCodes`.
    pub status_codes: bool,
}

/// Retries as a share of requests (Linkerd's `retry_ratio` and
/// `min_retries_per_second`, Envoy's `budget_percent`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetSettings {
    /// Retries allowed per 100 requests over the window.
    pub percent: f64,
    /// Retries per second always allowed, whatever the traffic.
    pub min_retries_per_second: u32,
}

/// `routes[].retries`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Extra attempts after the first.
    pub attempts: u32,
    /// What is retried.
    pub on: RetryOn,
    /// Statuses of `retriable-status-codes`.
    pub status_codes: Vec<u16>,
    /// Limit of one attempt; `None`: the route timeout.
    pub per_try_timeout: Option<Duration>,
    /// First backoff interval.
    pub backoff_base: Duration,
    /// Largest backoff interval.
    pub backoff_max: Duration,
    /// Methods that may be retried.
    pub methods: Vec<http::Method>,
    /// Largest request body kept for replay.
    pub max_body_bytes: u64,
    /// The retry budget.
    pub budget: BudgetSettings,
}

/// What a rate limit counts by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RateKey {
    /// One bucket for the route.
    Route,
    /// One bucket per client address (the TCP peer).
    ClientIp,
    /// One bucket per value of this header (a request without it shares
    /// the bucket of the empty value).
    Header(HeaderName),
}

/// `routes[].rateLimit`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitPolicy {
    /// Tokens added per second.
    pub requests_per_second: f64,
    /// Bucket size.
    pub burst: u32,
    /// What a bucket belongs to.
    pub key: RateKey,
}

/// The policies of one route; all `None` when it has none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoutePolicies {
    /// Retries; `None`: every answer goes to the client as it is.
    pub retries: Option<RetryPolicy>,
    /// Local rate limit.
    pub rate_limit: Option<RateLimitPolicy>,
    /// Largest request body (413 above it).
    pub max_request_body_bytes: Option<u64>,
}

impl RoutePolicies {
    /// Whether the route has no policy at all (the request path then skips them).
    pub fn is_empty(&self) -> bool {
        self.retries.is_none() && self.rate_limit.is_none() && self.max_request_body_bytes.is_none()
    }
}

/// `backends[].circuitBreaker`, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitBreakerLimits {
    /// Upstream exchanges at once over all endpoints (each holds a connection).
    pub max_connections: u32,
    /// Requests queued for one of those.
    pub max_pending_requests: u32,
    /// Requests at once, queued or active.
    pub max_requests: u32,
}

/// Envoy's default for each circuit-breaker threshold.
const BREAKER_DEFAULT: i64 = 1024;

pub(super) fn compile_policies(path: &str, r: &RawRoute, errs: &mut Errors) -> RoutePolicies {
    RoutePolicies {
        retries: r
            .retries
            .as_ref()
            .map(|x| compile_retries(&format!("{path}.retries"), x, errs)),
        rate_limit: r
            .rate_limit
            .as_ref()
            .and_then(|x| compile_rate_limit(&format!("{path}.rateLimit"), x, errs)),
        max_request_body_bytes: r.max_request_body_bytes.map(|n| {
            errs.int_in(
                &format!("{path}.maxRequestBodyBytes"),
                Some(n),
                0,
                i64::MAX,
                0,
            ) as u64
        }),
    }
}

fn compile_retries(path: &str, r: &RawRetries, errs: &mut Errors) -> RetryPolicy {
    let attempts = errs.int_in(
        &format!("{path}.attempts"),
        r.attempts,
        0,
        MAX_RETRY_ATTEMPTS,
        1,
    ) as u32;
    let mut on = RetryOn::default();
    match &r.on {
        None => {
            on.connect_failure = true;
            on.reset = true;
            on.gateway_error = true;
        }
        Some(list) => {
            if list.is_empty() {
                errs.push(format!("{path}.on"), "must name at least one condition");
            }
            for (i, c) in list.iter().enumerate() {
                match c.as_str() {
                    "connect-failure" => on.connect_failure = true,
                    "reset" => on.reset = true,
                    "gateway-error" => on.gateway_error = true,
                    "5xx" => on.server_error = true,
                    "retriable-status-codes" => on.status_codes = true,
                    other => errs.push(
                        format!("{path}.on[{i}]"),
                        format!("unknown condition {other:?}; expected connect-failure, reset, gateway-error, 5xx or retriable-status-codes"),
                    ),
                }
            }
        }
    }
    let mut status_codes = Vec::new();
    for (i, c) in r.status_codes.iter().enumerate() {
        match u16::try_from(*c) {
            Ok(s) if (100..=599).contains(&s) => status_codes.push(s),
            _ => errs.push(
                format!("{path}.statusCodes[{i}]"),
                format!("must be an HTTP status 100..599 (got {c})"),
            ),
        }
    }
    if on.status_codes && r.status_codes.is_empty() {
        errs.push(
            format!("{path}.statusCodes"),
            "retriable-status-codes needs at least one status code",
        );
    }
    if !on.status_codes && !r.status_codes.is_empty() {
        errs.push(
            format!("{path}.statusCodes"),
            "is only used with the retriable-status-codes condition (add it to `on`)",
        );
    }
    let per_try_timeout = r.per_try_timeout.as_ref().map(|_| {
        errs.duration(
            &format!("{path}.perTryTimeout"),
            &r.per_try_timeout,
            Duration::from_secs(1),
        )
    });
    let (backoff_base, backoff_max) = match &r.backoff {
        None => (Duration::from_millis(25), Duration::from_millis(250)),
        Some(b) => {
            let base = errs.duration(
                &format!("{path}.backoff.base"),
                &b.base,
                Duration::from_millis(25),
            );
            let max = errs.duration(&format!("{path}.backoff.max"), &b.max, base * 10);
            if max < base {
                errs.push(
                    format!("{path}.backoff.max"),
                    "must not be shorter than backoff.base",
                );
            }
            (base, max)
        }
    };
    let methods = match &r.methods {
        None => ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"]
            .iter()
            .filter_map(|m| http::Method::from_bytes(m.as_bytes()).ok())
            .collect(),
        Some(list) => {
            let mut out = Vec::new();
            for (i, m) in list.iter().enumerate() {
                let upper = m.to_ascii_uppercase();
                match http::Method::from_bytes(upper.as_bytes()) {
                    Ok(method) if !upper.is_empty() && method != http::Method::CONNECT => {
                        out.push(method)
                    }
                    _ => errs.push(
                        format!("{path}.methods[{i}]"),
                        format!("{m:?} is not a method that can be retried"),
                    ),
                }
            }
            out
        }
    };
    let max_body_bytes = errs.int_in(
        &format!("{path}.maxBodyBytes"),
        r.max_body_bytes,
        0,
        64 << 20,
        64 << 10,
    ) as u64;
    let budget = match &r.budget {
        None => BudgetSettings {
            percent: 20.0,
            min_retries_per_second: 10,
        },
        Some(b) => {
            let percent = match b.percent {
                None => 20.0,
                Some(p) if p.is_finite() && (0.0..=100.0).contains(&p) => p,
                Some(p) => {
                    errs.push(
                        format!("{path}.budget.percent"),
                        format!("must be between 0 and 100 (got {p})"),
                    );
                    20.0
                }
            };
            BudgetSettings {
                percent,
                min_retries_per_second: errs.int_in(
                    &format!("{path}.budget.minRetriesPerSecond"),
                    b.min_retries_per_second,
                    0,
                    1_000_000,
                    10,
                ) as u32,
            }
        }
    };
    RetryPolicy {
        attempts,
        on,
        status_codes,
        per_try_timeout,
        backoff_base,
        backoff_max,
        methods,
        max_body_bytes,
        budget,
    }
}

fn compile_rate_limit(path: &str, r: &RawRateLimit, errs: &mut Errors) -> Option<RateLimitPolicy> {
    let rps = match r.requests_per_second {
        None => {
            errs.push(format!("{path}.requestsPerSecond"), "is required");
            return None;
        }
        Some(v) if v.is_finite() && v > 0.0 && v <= 1e9 => v,
        Some(v) => {
            errs.push(
                format!("{path}.requestsPerSecond"),
                format!("must be greater than 0 and at most 1e9 (got {v})"),
            );
            return None;
        }
    };
    let default_burst = (rps.ceil() as i64).max(1);
    let burst = errs.int_in(
        &format!("{path}.burst"),
        r.burst,
        1,
        u32::MAX as i64,
        default_burst,
    ) as u32;
    let key = match r.key.as_deref() {
        None | Some("route") => RateKey::Route,
        Some("client-ip") => RateKey::ClientIp,
        Some(k) => match k.strip_prefix("header:") {
            Some(name) => match HeaderName::from_bytes(name.trim().as_bytes()) {
                Ok(h) => RateKey::Header(h),
                Err(_) => {
                    errs.push(
                        format!("{path}.key"),
                        format!("{name:?} is not a header name"),
                    );
                    return None;
                }
            },
            None => {
                errs.push(
                    format!("{path}.key"),
                    format!("unknown key {k:?}; expected route, client-ip or header:NAME"),
                );
                return None;
            }
        },
    };
    Some(RateLimitPolicy {
        requests_per_second: rps,
        burst,
        key,
    })
}

pub(super) fn compile_circuit_breaker(
    path: &str,
    c: &RawCircuitBreaker,
    errs: &mut Errors,
) -> CircuitBreakerLimits {
    let mut limit = |field: &str, v: Option<i64>| {
        errs.int_in(
            &format!("{path}.{field}"),
            v,
            1,
            u32::MAX as i64,
            BREAKER_DEFAULT,
        ) as u32
    };
    CircuitBreakerLimits {
        max_connections: limit("maxConnections", c.max_connections),
        max_pending_requests: limit("maxPendingRequests", c.max_pending_requests),
        max_requests: limit("maxRequests", c.max_requests),
    }
}
