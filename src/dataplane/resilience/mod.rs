//! Resilience state of the data plane (DESIGN §11): what a route's retry
//! budget and rate limit, and a backend's circuit breaker, remember between
//! requests, with the counters `/metrics` reads at scrape time.
//!
//! The decisions are PURE and take time as a parameter ([`retry`],
//! [`budget`], [`bucket`]); the request core (`proxy::phases`) passes the
//! proxy's millisecond clock and holds the short locks here. A route
//! without policies has no [`RouteGuards`] at all, so it pays nothing.
//!
//! State is kept across table swaps by route name (the rollout engine
//! rewrites the table at every step; a budget or a bucket must not refill
//! because a weight moved) and rebuilt when the route's policies change.

pub mod breaker;
pub mod bucket;
pub mod budget;
pub mod retry;

#[cfg(test)]
mod tests;

use crate::config::{RateKey, RoutePolicies};
use crate::stats::Role;
use bucket::{TokenBucket, KEYED_SLOTS};
use budget::RetryBudget;
use retry::RetryReason;
use std::collections::hash_map::RandomState;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Locks over a keyed limit's buckets: enough that clients on different
/// cores rarely meet on one.
const SHARDS: usize = 64;

/// The runtime state of one route's policies.
#[derive(Debug)]
pub struct RouteGuards {
    /// The validated policies this state was built for.
    pub policies: Arc<RoutePolicies>,
    /// Requests and retries of the budget window.
    budget: Mutex<RetryBudget>,
    /// The rate limit's buckets: one for `key: route`, [`KEYED_SLOTS`]
    /// over [`SHARDS`] locks otherwise.
    buckets: Vec<Mutex<Vec<TokenBucket>>>,
    /// Keys the bucket of a keyed limit.
    hasher: RandomState,
    /// `weir_retries_total` per role (primary, canary) and reason.
    retries: [[AtomicU64; RetryReason::ALL.len()]; 2],
    /// `weir_rate_limited_total`.
    pub rate_limited: AtomicU64,
}

/// What a request is rate limited by.
#[derive(Debug, Clone, Copy)]
pub enum LimitKey<'a> {
    /// The route's one bucket.
    Route,
    /// The client's address.
    Ip(IpAddr),
    /// A header value (empty when absent).
    Value(&'a [u8]),
}

impl RouteGuards {
    /// Fresh state for `policies`.
    pub fn new(policies: Arc<RoutePolicies>) -> Arc<Self> {
        let buckets = match policies.rate_limit.as_ref().map(|r| &r.key) {
            None => Vec::new(),
            Some(RateKey::Route) => vec![Mutex::new(vec![TokenBucket::default()])],
            Some(_) => (0..SHARDS)
                .map(|_| Mutex::new(vec![TokenBucket::default(); KEYED_SLOTS / SHARDS]))
                .collect(),
        };
        Arc::new(RouteGuards {
            policies,
            budget: Mutex::new(RetryBudget::new()),
            buckets,
            hasher: RandomState::new(),
            retries: Default::default(),
            rate_limited: AtomicU64::new(0),
        })
    }

    /// Takes a token for a request at `now_ms`: `Ok`, or the milliseconds
    /// until one is there (the request is then counted as rate limited).
    /// Always `Ok` without a rate limit.
    pub fn admit(&self, key: LimitKey<'_>, now_ms: u64) -> Result<(), u64> {
        let Some(limit) = &self.policies.rate_limit else {
            return Ok(());
        };
        let (shard, index) = match key {
            LimitKey::Route => (0, 0),
            LimitKey::Ip(ip) => self.keyed(&ip),
            LimitKey::Value(v) => self.keyed(v),
        };
        let Some(lock) = self.buckets.get(shard) else {
            return Ok(());
        };
        let mut buckets = lock.lock().unwrap_or_else(|p| p.into_inner());
        let Some(b) = buckets.get_mut(index) else {
            return Ok(());
        };
        let r = b.take(now_ms, limit.requests_per_second, limit.burst);
        if r.is_err() {
            self.rate_limited.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn keyed<K: std::hash::Hash + ?Sized>(&self, key: &K) -> (usize, usize) {
        let slot = bucket::slot_of(&self.hasher, key, KEYED_SLOTS);
        (slot % SHARDS, slot / SHARDS)
    }

    /// Runs `f` on the retry budget (a short lock).
    pub fn with_budget<T>(&self, f: impl FnOnce(&mut RetryBudget) -> T) -> T {
        f(&mut self.budget.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Counts a retry.
    pub fn count_retry(&self, role: Role, reason: RetryReason) {
        let r = usize::from(role == Role::Canary);
        self.retries[r][reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Retries counted for `role` and `reason`.
    pub fn retries(&self, role: Role, reason: RetryReason) -> u64 {
        let r = usize::from(role == Role::Canary);
        self.retries[r][reason.index()].load(Ordering::Relaxed)
    }
}
