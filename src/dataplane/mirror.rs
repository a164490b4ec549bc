//! Per-route mirror counters and the in-flight cap, kept across table swaps
//! by route name (the store hands them out; the proxy's mirror counts into
//! them; `/metrics` reads them).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Why a mirror copy was not sent (counted per route, exported as metrics).
#[derive(Debug, Default)]
pub struct MirrorCounters {
    /// Copies started.
    pub sent: AtomicU64,
    /// Dropped because `maxInFlight` copies were already running.
    pub dropped_busy: AtomicU64,
    /// Not mirrored because the body was over `maxBodyBytes`.
    pub dropped_too_large: AtomicU64,
    /// Dropped because the client's body failed or was abandoned.
    pub dropped_incomplete: AtomicU64,
    /// Copies in flight now; compared with `maxInFlight`.
    pub in_flight: AtomicUsize,
}

impl MirrorCounters {
    /// Takes an in-flight slot if fewer than `max` are used.
    pub fn try_acquire(self: &std::sync::Arc<Self>, max: usize) -> Option<InFlightSlot> {
        let mut cur = self.in_flight.load(Ordering::Relaxed);
        loop {
            if cur >= max {
                self.dropped_busy.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            match self.in_flight.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(InFlightSlot(self.clone())),
                Err(now) => cur = now,
            }
        }
    }
}

/// An in-flight mirror copy; released on drop.
pub struct InFlightSlot(std::sync::Arc<MirrorCounters>);

impl Drop for InFlightSlot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}
