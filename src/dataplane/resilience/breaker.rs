//! A backend's circuit breaker (`backends[].circuitBreaker`): Envoy's three
//! thresholds in HAProxy's shape, since weir has no per-endpoint queue of
//! its own. `maxConnections` exchanges run at once over all endpoints (an
//! HTTP/1 exchange holds one connection); a request beyond them waits in a
//! queue of at most `maxPendingRequests`; `maxRequests` bounds both
//! together. Beyond any of them the request is refused at once (503
//! `x-weir-error: overflow`), never queued without bound.

use crate::config::CircuitBreakerLimits;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Which threshold refused a request: the `limit` label of `weir_overflows_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// `maxRequests`.
    MaxRequests,
    /// `maxPendingRequests` (the queue was full).
    MaxPendingRequests,
}

impl Overflow {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Overflow::MaxRequests => "max-requests",
            Overflow::MaxPendingRequests => "max-pending-requests",
        }
    }
}

/// The live state of one backend's breaker.
#[derive(Debug)]
pub struct Breaker {
    /// The thresholds it was built for (a change builds a new breaker).
    pub limits: CircuitBreakerLimits,
    /// Requests admitted and not finished (queued or active).
    requests: AtomicU32,
    /// Requests waiting in the queue.
    pending: AtomicU32,
    /// One permit per exchange that may run.
    slots: Arc<Semaphore>,
    /// Refusals by `maxRequests`.
    pub overflow_requests: AtomicU64,
    /// Refusals by `maxPendingRequests`.
    pub overflow_pending: AtomicU64,
}

/// Held while a request is admitted; dropping it frees its place.
#[derive(Debug)]
pub struct BreakerPermit {
    breaker: Arc<Breaker>,
    _slot: OwnedSemaphorePermit,
}

impl Drop for BreakerPermit {
    fn drop(&mut self) {
        self.breaker.requests.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Undoes a queued request's counts if its wait is abandoned.
struct Queued<'a>(&'a Breaker, bool);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::Relaxed);
        if self.1 {
            self.0.requests.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Breaker {
    /// A breaker with nothing admitted.
    pub fn new(limits: CircuitBreakerLimits) -> Arc<Self> {
        Arc::new(Breaker {
            limits,
            requests: AtomicU32::new(0),
            pending: AtomicU32::new(0),
            slots: Arc::new(Semaphore::new(limits.max_connections as usize)),
            overflow_requests: AtomicU64::new(0),
            overflow_pending: AtomicU64::new(0),
        })
    }

    /// Requests admitted now (queued or active), for the API and tests.
    pub fn requests(&self) -> u32 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Admits a request: at once when an exchange slot is free, after a
    /// wait in the queue otherwise, or refuses it. The caller bounds the
    /// wait (the route timeout); dropping the future leaves the queue.
    pub async fn admit(self: &Arc<Self>) -> Result<BreakerPermit, Overflow> {
        let n = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        if n > self.limits.max_requests {
            self.requests.fetch_sub(1, Ordering::Relaxed);
            self.overflow_requests.fetch_add(1, Ordering::Relaxed);
            return Err(Overflow::MaxRequests);
        }
        if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            return Ok(BreakerPermit {
                breaker: self.clone(),
                _slot: slot,
            });
        }
        let queued = self.pending.fetch_add(1, Ordering::Relaxed) + 1;
        let mut guard = Queued(self, true);
        if queued > self.limits.max_pending_requests {
            drop(guard);
            self.overflow_pending.fetch_add(1, Ordering::Relaxed);
            return Err(Overflow::MaxPendingRequests);
        }
        // The semaphore is never closed, so this only fails if it were.
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            drop(guard);
            self.overflow_pending.fetch_add(1, Ordering::Relaxed);
            return Err(Overflow::MaxPendingRequests);
        };
        // Admitted: the request count now belongs to the permit.
        guard.1 = false;
        drop(guard);
        Ok(BreakerPermit {
            breaker: self.clone(),
            _slot: slot,
        })
    }
}
