//! Passive outlier detection: Envoy's `consecutive_5xx` ejection for one backend.
//!
//! The proxy reports every upstream result ([`OutlierDetector::on_result`]); an endpoint
//! that fails `consecutiveFailures` times in a row (a 5xx answer, or a connect error /
//! reset / timeout: the proxy decides what "failed" means) is ejected: the balancer skips
//! it until the ejection is over, then it is re-admitted automatically. No IO, no clock
//! (time is `now_ms`), no panics.
//!
//! # Semantics (Envoy's, with the differences written down)
//!
//! * Ejection lasts `baseEjection × times_ejected`, capped at `maxEjection` (Envoy's
//!   `base_ejection_time` and `max_ejection_time`). `times_ejected` grows by one per
//!   ejection, but stops growing once the duration has reached the cap (as Envoy's
//!   backoff counter does), so a long-flapping endpoint does not need ages to recover.
//! * Decay: for every full `interval` (default 10 s, Envoy's `interval`) that an endpoint
//!   spends re-admitted, `times_ejected` goes down by one, so an endpoint that has been
//!   fine for a while is ejected briefly again if it fails again. Envoy decrements on a
//!   sweep timer; here it is computed lazily when the next result or ejection comes,
//!   which gives the same multiplier without a timer.
//! * Capacity: an ejection happens only if afterwards at most `maxEjectionPercent` of the
//!   backend's endpoints are ejected **and** at least one endpoint is left. The default
//!   is 50%, not Envoy's 10%: with 10% a backend of fewer than 10 endpoints (the usual
//!   case for weir) could never eject anything. Unlike Envoy we do not always allow the
//!   first ejection: the percentage is a hard cap.
//! * When the threshold is reached but capacity forbids the ejection, the counter is
//!   reset anyway (as in Envoy): another `consecutiveFailures` failures retry it.
//! * A success resets the counter. Results that arrive while an endpoint is ejected
//!   (requests that were in flight) are ignored.
//!
//! # Cost
//!
//! The data plane calls `on_result` and `is_ejected` for every request behind a mutex:
//! both are one hash lookup and a few integer operations. Only the rare call that reaches
//! the threshold scans the backend's endpoints to count current ejections.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

#[cfg(test)]
#[path = "outlier_tests.rs"]
mod tests;

/// A backend's `outlierDetection` block, parsed (durations in milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutlierConfig {
    /// Failures in a row that eject an endpoint; default 5 (Envoy). 0 turns detection
    /// off.
    pub consecutive_failures: u32,
    /// First ejection length, multiplied by the number of ejections; default 30 s.
    pub base_ejection_ms: u64,
    /// Upper bound of one ejection; default 300 s (Envoy). A value below
    /// `base_ejection_ms` acts as `base_ejection_ms`, as in Envoy.
    pub max_ejection_ms: u64,
    /// Most of the backend's endpoints that may be ejected at once, in percent; default
    /// 50 (see the module doc for why not Envoy's 10).
    pub max_ejection_percent: u32,
    /// Healthy time that takes one off the ejection multiplier; default 10 s.
    pub interval_ms: u64,
}

impl Default for OutlierConfig {
    fn default() -> Self {
        OutlierConfig {
            consecutive_failures: 5,
            base_ejection_ms: 30_000,
            max_ejection_ms: 300_000,
            max_ejection_percent: 50,
            interval_ms: 10_000,
        }
    }
}

impl OutlierConfig {
    /// Every problem, each prefixed with its field name as the config spells it.
    pub fn validate(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.max_ejection_percent > 100 {
            errors.push(format!(
                "maxEjectionPercent: must be between 0 and 100, got {}",
                self.max_ejection_percent
            ));
        }
        if self.base_ejection_ms == 0 {
            errors.push("baseEjectionTime: must be greater than 0".to_string());
        }
        if self.interval_ms == 0 {
            errors.push("interval: must be greater than 0".to_string());
        }
        errors
    }
}

/// What one reported result did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Counted; nothing changed for the balancer.
    Recorded,
    /// The endpoint is ejected until `until_ms` (log it, count it).
    Ejected {
        /// When it is re-admitted.
        until_ms: u64,
    },
    /// The threshold was reached but ejecting would exceed `maxEjectionPercent` or leave
    /// no endpoint (Envoy's `ejections_overflow`).
    EjectionSkipped,
    /// Not counted: the endpoint is unknown or currently ejected.
    Ignored,
}

/// Outlier state of one endpoint, also shown by the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointOutlier {
    /// Failures in a row since the last success or ejection.
    pub consecutive_failures: u32,
    /// The ejection multiplier: ejections so far, less the decay.
    pub times_ejected: u32,
    /// Ejected while `now < ejected_until_ms`; 0 if never ejected.
    pub ejected_until_ms: u64,
    /// Decay counts whole intervals from here (the end of the last ejection, then the
    /// last decrement).
    decay_from_ms: u64,
}

impl EndpointOutlier {
    /// Whether the endpoint is out of the balancer at `now_ms`.
    pub fn is_ejected(&self, now_ms: u64) -> bool {
        now_ms < self.ejected_until_ms
    }

    /// Takes one off `times_ejected` per full interval spent re-admitted.
    fn decay(&mut self, now_ms: u64, interval_ms: u64) {
        if self.times_ejected == 0 || interval_ms == 0 || now_ms <= self.decay_from_ms {
            return;
        }
        let periods = (now_ms - self.decay_from_ms) / interval_ms;
        if periods == 0 {
            return;
        }
        let taken = u32::try_from(periods)
            .unwrap_or(u32::MAX)
            .min(self.times_ejected);
        self.times_ejected -= taken;
        self.decay_from_ms = self
            .decay_from_ms
            .saturating_add(periods.saturating_mul(interval_ms));
    }
}

/// The outlier detector of one backend: one entry per endpoint in its rotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutlierDetector {
    /// The limits in force.
    pub config: OutlierConfig,
    /// Per-endpoint state, keyed by `host:port`.
    endpoints: HashMap<String, EndpointOutlier>,
}

impl OutlierDetector {
    /// A detector for `endpoints`, none ejected.
    pub fn new(config: OutlierConfig, endpoints: &[String]) -> OutlierDetector {
        let mut detector = OutlierDetector {
            config,
            endpoints: HashMap::new(),
        };
        detector.set_endpoints(endpoints);
        detector
    }

    /// Follows a change of the rotation (rolling update step, reload): endpoints that
    /// stay keep their state, new ones start clean, removed ones are forgotten. The
    /// percentage cap is computed against this set.
    pub fn set_endpoints(&mut self, endpoints: &[String]) {
        let keep: HashSet<&str> = endpoints.iter().map(String::as_str).collect();
        self.endpoints.retain(|ep, _| keep.contains(ep.as_str()));
        for ep in endpoints {
            self.endpoints.entry(ep.clone()).or_default();
        }
    }

    /// Reports one upstream result of `endpoint`: `failed` is a 5xx or a connect error.
    pub fn on_result(&mut self, endpoint: &str, failed: bool, now_ms: u64) -> Outcome {
        let threshold = self.config.consecutive_failures;
        let interval = self.config.interval_ms;
        let Some(state) = self.endpoints.get_mut(endpoint) else {
            return Outcome::Ignored;
        };
        if state.is_ejected(now_ms) {
            return Outcome::Ignored;
        }
        state.decay(now_ms, interval);
        if !failed {
            state.consecutive_failures = 0;
            return Outcome::Recorded;
        }
        if threshold == 0 {
            return Outcome::Recorded;
        }
        state.consecutive_failures = state.consecutive_failures.saturating_add(1);
        if state.consecutive_failures < threshold {
            return Outcome::Recorded;
        }
        state.consecutive_failures = 0;
        self.eject_if_allowed(endpoint, now_ms)
    }

    /// The threshold has been reached for `endpoint`, counted by the caller: the proxy
    /// counts consecutive failures with one atomic per endpoint so that the request path
    /// takes no lock, and calls this (behind the lock) only when the count reaches
    /// `consecutiveFailures`. Decides the ejection exactly as [`Self::on_result`] does
    /// at its threshold: decay, capacity rule, growing duration. Results for an unknown
    /// or already ejected endpoint are [`Outcome::Ignored`].
    pub fn on_threshold_reached(&mut self, endpoint: &str, now_ms: u64) -> Outcome {
        let interval = self.config.interval_ms;
        let Some(state) = self.endpoints.get_mut(endpoint) else {
            return Outcome::Ignored;
        };
        if state.is_ejected(now_ms) {
            return Outcome::Ignored;
        }
        state.decay(now_ms, interval);
        state.consecutive_failures = 0;
        self.eject_if_allowed(endpoint, now_ms)
    }

    /// The common tail of both entry points: the capacity rule, then the ejection.
    fn eject_if_allowed(&mut self, endpoint: &str, now_ms: u64) -> Outcome {
        if !self.may_eject_one_more(now_ms) {
            return Outcome::EjectionSkipped;
        }
        let base = self.config.base_ejection_ms;
        let cap = self.config.max_ejection_ms.max(base);
        let Some(state) = self.endpoints.get_mut(endpoint) else {
            return Outcome::Ignored;
        };
        if base.saturating_mul(u64::from(state.times_ejected)) < cap {
            state.times_ejected = state.times_ejected.saturating_add(1);
        }
        let duration = base
            .saturating_mul(u64::from(state.times_ejected.max(1)))
            .min(cap);
        let until_ms = now_ms.saturating_add(duration);
        state.ejected_until_ms = until_ms;
        state.decay_from_ms = until_ms;
        Outcome::Ejected { until_ms }
    }

    /// Whether the balancer must skip `endpoint` at `now_ms`; unknown endpoints are not
    /// ejected. Re-admission needs no call: the ejection simply runs out.
    pub fn is_ejected(&self, endpoint: &str, now_ms: u64) -> bool {
        self.endpoints
            .get(endpoint)
            .is_some_and(|s| s.is_ejected(now_ms))
    }

    /// Endpoints ejected at `now_ms` (for metrics and the API). Scans all endpoints.
    pub fn ejected_count(&self, now_ms: u64) -> usize {
        self.endpoints
            .values()
            .filter(|s| s.is_ejected(now_ms))
            .count()
    }

    /// The state of one endpoint, for the API.
    pub fn endpoint(&self, endpoint: &str) -> Option<&EndpointOutlier> {
        self.endpoints.get(endpoint)
    }

    /// The capacity rule: after one more ejection, at most `maxEjectionPercent` of the
    /// endpoints are out and at least one is left.
    fn may_eject_one_more(&self, now_ms: u64) -> bool {
        let total = self.endpoints.len() as u128;
        let after = self.ejected_count(now_ms) as u128 + 1;
        after < total && after * 100 <= u128::from(self.config.max_ejection_percent) * total
    }
}
