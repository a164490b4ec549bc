//! PURE: the token bucket of a rate limit, and the bounded set of buckets
//! of a keyed one.
//!
//! Key memory is bounded by hashing, not by an LRU: a keyed limit has
//! [`KEYED_SLOTS`] buckets and a key uses the one its hash picks (SipHash
//! with a per-process random key, so a client cannot aim at another's
//! bucket). Two keys that share a slot share a bucket, which can only make
//! the limit stricter for them, never looser; with 4096 slots and a few
//! hundred active keys that is rare. Memory is fixed (about 64 KiB per
//! keyed route) and nothing is ever evicted or allocated per key.

use std::hash::{BuildHasher, Hash};

/// Buckets of a keyed rate limit.
pub const KEYED_SLOTS: usize = 4096;

/// One bucket: `tokens` at `last_ms`, refilled continuously.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    tokens: f64,
    last_ms: u64,
    /// False until first used: a new bucket starts full.
    started: bool,
}

impl Default for TokenBucket {
    fn default() -> Self {
        TokenBucket {
            tokens: 0.0,
            last_ms: 0,
            started: false,
        }
    }
}

impl TokenBucket {
    /// Takes a token at `now_ms` from a bucket of `burst` refilled at
    /// `rate` per second: `Ok`, or how many milliseconds until one is there.
    pub fn take(&mut self, now_ms: u64, rate: f64, burst: u32) -> Result<(), u64> {
        let burst = f64::from(burst.max(1));
        if !self.started {
            self.started = true;
            self.tokens = burst;
            self.last_ms = now_ms;
        }
        let elapsed = now_ms.saturating_sub(self.last_ms) as f64 / 1000.0;
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.last_ms = self.last_ms.max(now_ms);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        let missing = 1.0 - self.tokens;
        Err(((missing / rate) * 1000.0).ceil().max(1.0) as u64)
    }
}

/// The slot of `key` among `slots` buckets.
pub fn slot_of<K: Hash + ?Sized>(hasher: &impl BuildHasher, key: &K, slots: usize) -> usize {
    (hasher.hash_one(key) % slots.max(1) as u64) as usize
}

/// The `Retry-After` value (whole seconds, at least 1) for a wait of `ms`.
pub fn retry_after_secs(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}
