//! The per-route ring of per-second buckets, and what is read out of it.
//!
//! # Layout
//!
//! One [`Ring`] per [`Role`]. A ring has `capacity + 1` slots; second `s` lives
//! in slot `s % (capacity + 1)`. A slot holds the second it currently belongs
//! to (its *epoch*), a failure counter and the 832 latency counters of that
//! second. The request count of a second is the sum of its latency counters
//! (every request lands in exactly one), which saves one atomic add per record
//! and keeps requests and histogram consistent by construction.
//!
//! # Recording and the reset race
//!
//! A slot whose epoch is older than `now` must be emptied before it is reused.
//! The reset is claimed with a compare-and-swap of the epoch to the
//! `RESETTING` marker; only the winner zeroes the counters, then publishes the
//! new epoch with a `Release` store. A recorder adds to a slot only after it
//! has read (`Acquire`) the epoch equal to its own second, so its increments
//! are ordered after the zeroing and can never be wiped by it, and stale
//! counts can never be attributed to the new second. Increments themselves are
//! `Relaxed`: they are independent counters and readers tolerate seeing a
//! moment-ago value.
//!
//! A recorder that meets `RESETTING` in its own slot spins until the reset is
//! published (832 plain stores, well under a microsecond). That wait is the
//! only non-lock-free step, and it is made rare by *resetting ahead*: every
//! record also checks the slot of `now + 1` and, if it still holds an old
//! second, resets it then. Under steady traffic the slot of every second is
//! therefore ready before the second starts, and recorders never wait; only
//! the first request after an idle second of that role resets on the hot path.
//! The extra (`+ 1`) slot exists so that resetting ahead never erases a second
//! that a full-capacity window still needs.
//!
//! Bounded errors that remain, all from callers with badly skewed clocks: a
//! record whose second is a whole ring lap behind the slot is dropped (it is
//! older than any window); a recorder stalled for more than a lap between
//! reading the epoch and adding could add into a newer second; a recorder
//! still at `now - capacity` while another is at `now` can lose its sample to
//! the reset-ahead. None of these happen with clocks that agree within a
//! second.
//!
//! # Reading
//!
//! A snapshot visits the seconds of the window, reads each slot whose epoch is
//! that second, and re-checks the epoch after reading (a sequence lock): if the
//! slot was reset meanwhile, its counts are discarded rather than mixed.

use super::histogram::{bucket_index, Histogram, BUCKETS};
use super::Role;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Epoch value while a slot is being zeroed; never a real second.
const RESETTING: u64 = u64::MAX;

/// Last second that can be recorded: `now + 1` must stay below `RESETTING`.
/// (u64 seconds reach that in 585 billion years; the check only guards against
/// garbage input hanging the ring.)
const LAST_RECORDABLE_SEC: u64 = u64::MAX - 2;

/// Largest ring accepted by [`RouteStats::new`] (one day of seconds); larger
/// requests are clamped so a typo cannot allocate gigabytes.
pub const MAX_CAPACITY_SECS: usize = 86_400;

/// The small per-second part of a slot, on its own cache line so that
/// resetting ahead (which writes the next slot's epoch) does not invalidate the
/// line every recorder of the current second reads.
#[repr(align(64))]
struct SlotHead {
    /// The second this slot currently counts, or `RESETTING`.
    epoch: AtomicU64,
    /// Requests of that second the caller called failures.
    failures: AtomicU64,
    /// Requests of that second that failed by the client's doing (not in
    /// the request count nor the histogram).
    client_errors: AtomicU64,
    /// Attempts of that second that were followed by another attempt of the
    /// same request (a retry): counted in the histogram like any attempt,
    /// subtracted to get the client requests. Only a retry writes it, so a
    /// request without one costs no extra atomic.
    retried: AtomicU64,
    /// Of those, the ones that failed.
    retried_failures: AtomicU64,
}

/// One role's ring of per-second slots.
struct Ring {
    /// One per slot.
    heads: Box<[SlotHead]>,
    /// `heads.len() * BUCKETS` latency counters, slot after slot. 32 bits are
    /// plenty: one counter holds one latency bucket of one second of one role,
    /// and 4 billion requests per second is out of reach. Halving them halves
    /// the memory of the ring (the bulk of it).
    counts: Box<[AtomicU32]>,
}

impl Ring {
    fn new(slots: usize) -> Self {
        Ring {
            heads: (0..slots)
                .map(|_| SlotHead {
                    epoch: AtomicU64::new(0),
                    failures: AtomicU64::new(0),
                    client_errors: AtomicU64::new(0),
                    retried: AtomicU64::new(0),
                    retried_failures: AtomicU64::new(0),
                })
                .collect(),
            counts: zeroed_counters(slots * BUCKETS),
        }
    }

    fn slot_of(&self, second: u64) -> usize {
        // heads.len() >= 2 by construction; the remainder fits in usize.
        (second % self.heads.len() as u64) as usize
    }

    fn counters(&self, slot: usize) -> &[AtomicU32] {
        let start = slot * BUCKETS;
        self.counts.get(start..start + BUCKETS).unwrap_or(&[])
    }

    /// Makes `slot` count second `now`, resetting it if it holds an older one.
    /// False when the slot already holds a newer second: the caller's second is
    /// more than a lap old and must be dropped.
    fn enter(&self, slot: usize, now: u64) -> bool {
        let Some(head) = self.heads.get(slot) else {
            return false;
        };
        loop {
            let epoch = head.epoch.load(Ordering::Acquire);
            if epoch == now {
                return true;
            }
            if epoch == RESETTING {
                // Another recorder is zeroing this slot; see the module doc.
                std::hint::spin_loop();
                continue;
            }
            if epoch > now {
                return false;
            }
            if self.try_reset(slot, head, epoch, now) {
                return true;
            }
            // Lost the claim: loop to see what the winner publishes.
        }
    }

    /// Resets `slot` for second `next` ahead of time if it holds an older
    /// second and nobody else is doing it; never waits.
    fn prepare(&self, slot: usize, next: u64) {
        let Some(head) = self.heads.get(slot) else {
            return;
        };
        let epoch = head.epoch.load(Ordering::Relaxed);
        // `>=` also skips RESETTING (u64::MAX).
        if epoch < next {
            self.try_reset(slot, head, epoch, next);
        }
    }

    /// Claims the slot by moving its epoch from `seen` to `RESETTING`, zeroes
    /// it and publishes `second`. False if another thread changed the epoch
    /// first.
    fn try_reset(&self, slot: usize, head: &SlotHead, seen: u64, second: u64) -> bool {
        if head
            .epoch
            .compare_exchange(seen, RESETTING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Orders the marker before the zeroing for readers (sequence lock): a
        // reader that sees any zeroed counter then sees the epoch changed.
        fence(Ordering::Release);
        head.failures.store(0, Ordering::Relaxed);
        head.client_errors.store(0, Ordering::Relaxed);
        head.retried.store(0, Ordering::Relaxed);
        head.retried_failures.store(0, Ordering::Relaxed);
        for counter in self.counters(slot) {
            counter.store(0, Ordering::Relaxed);
        }
        head.epoch.store(second, Ordering::Release);
        true
    }

    /// Adds second `second` into `into` if its slot holds it, using `scratch`
    /// (BUCKETS long) to hold the counts until the epoch is re-checked.
    fn add_second(&self, second: u64, scratch: &mut [u32], into: &mut WindowSnapshot) {
        if second == RESETTING {
            return;
        }
        let slot = self.slot_of(second);
        let Some(head) = self.heads.get(slot) else {
            return;
        };
        if head.epoch.load(Ordering::Acquire) != second {
            return;
        }
        let failures = head.failures.load(Ordering::Relaxed);
        let client_errors = head.client_errors.load(Ordering::Relaxed);
        let retried = head.retried.load(Ordering::Relaxed);
        let retried_failures = head.retried_failures.load(Ordering::Relaxed);
        for (dst, counter) in scratch.iter_mut().zip(self.counters(slot)) {
            *dst = counter.load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        if head.epoch.load(Ordering::Relaxed) != second {
            // Reset while we read: the counts may mix two seconds.
            return;
        }
        let mut requests = 0u64;
        for (index, count) in scratch.iter().enumerate() {
            if *count != 0 {
                requests += u64::from(*count);
                into.histogram.add_to_bucket(index, u64::from(*count));
            }
        }
        // An attempt is counted in the histogram before the retry that
        // follows it is marked, so `retried` never exceeds the attempts.
        let retried = retried.min(requests);
        into.requests = into.requests.saturating_add(requests - retried);
        into.retries = into.retries.saturating_add(retried);
        into.failures = into.failures.saturating_add(failures);
        into.retried_failures = into
            .retried_failures
            .saturating_add(retried_failures.min(failures));
        into.client_errors = into.client_errors.saturating_add(client_errors);
    }
}

/// Zero-filled counters straight from the allocator. A route's rings are a few
/// megabytes (see [`RouteStats::new`]); asking for zeroed memory lets the OS
/// hand out untouched pages lazily, so a role or route that never sees traffic
/// (the mirror ring of most routes, idle routes of a big config) costs address
/// space, not RAM. Building the slice element by element would touch it all.
fn zeroed_counters(len: usize) -> Box<[AtomicU32]> {
    let zeroed = Box::<[AtomicU32]>::new_zeroed_slice(len);
    // SAFETY: `AtomicU32` has the same size and bit validity as `u32`, so
    // all-zero bytes are a valid `AtomicU32` holding 0.
    unsafe { zeroed.assume_init() }
}

/// Request statistics of one route: one ring of per-second buckets per role.
///
/// Shared between the proxy's threads as `Arc<RouteStats>`: recording takes
/// `&self`, uses only atomics and never allocates or locks (see the module
/// doc of `window.rs` for the one bounded wait after an idle second).
pub struct RouteStats {
    /// Longest window that can be read, in seconds.
    capacity: usize,
    /// Indexed by `Role::index`.
    rings: [Ring; 3],
}

impl RouteStats {
    /// Stats able to answer windows up to `capacity_secs` seconds (clamped to
    /// `1..=MAX_CAPACITY_SECS`; pick the longest metric interval the engine
    /// may ask for, e.g. 600).
    ///
    /// Memory: about `(capacity_secs + 1) * 3.4 KB` per role, so 6 MB per route
    /// for 600 s. The counters come zeroed from the allocator, so only roles
    /// that receive traffic actually use RAM.
    pub fn new(capacity_secs: usize) -> Self {
        let capacity = capacity_secs.clamp(1, MAX_CAPACITY_SECS);
        // One spare slot for resetting ahead; see the module doc.
        let slots = capacity + 1;
        RouteStats {
            capacity,
            rings: [Ring::new(slots), Ring::new(slots), Ring::new(slots)],
        }
    }

    /// The longest window [`RouteStats::snapshot`] can answer; longer windows
    /// are clamped to it.
    pub fn capacity_secs(&self) -> usize {
        self.capacity
    }

    /// Counts one finished request of `role` in second `now_sec` (any epoch,
    /// typically Unix seconds, the same clock for recorders and readers).
    /// `failure` is the caller's call (5xx including the proxy's own
    /// 502/503/504, or a non-zero gRPC status). Latencies above
    /// [`super::MAX_TRACKABLE_US`] are clamped into the last bucket.
    ///
    /// A request whose second is more than a ring lap behind what the slot
    /// already holds is dropped: it is older than any window.
    #[inline]
    pub fn record(&self, role: Role, now_sec: u64, failure: bool, latency_us: u64) {
        if now_sec > LAST_RECORDABLE_SEC {
            return;
        }
        let ring = &self.rings[role.index()];
        let bucket = bucket_index(latency_us);
        let slot = ring.slot_of(now_sec);
        if !ring.enter(slot, now_sec) {
            return;
        }
        if let Some(counter) = ring.counters(slot).get(bucket) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        if failure {
            if let Some(head) = ring.heads.get(slot) {
                head.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        let next = if slot + 1 == ring.heads.len() {
            0
        } else {
            slot + 1
        };
        ring.prepare(next, now_sec + 1);
    }

    /// Counts one upstream attempt of `role` that is followed by another
    /// attempt of the same request (it was retried): it weighs in the
    /// success rate and the latency like every attempt (the analysis judges
    /// attempts, so a retry cannot hide a failing side), but it is not a
    /// client request; the request is counted once, by the [`record`] of
    /// its last attempt.
    ///
    /// [`record`]: RouteStats::record
    pub fn record_retried(&self, role: Role, now_sec: u64, failure: bool, latency_us: u64) {
        self.record(role, now_sec, failure, latency_us);
        if now_sec > LAST_RECORDABLE_SEC {
            return;
        }
        let ring = &self.rings[role.index()];
        let slot = ring.slot_of(now_sec);
        if !ring.enter(slot, now_sec) {
            return;
        }
        if let Some(head) = ring.heads.get(slot) {
            head.retried.fetch_add(1, Ordering::Relaxed);
            if failure {
                head.retried_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts one request of `role` in second `now_sec` that failed by the
    /// client's doing (a malformed or abandoned body, a stalled upload).
    /// It is kept out of the request count, the failures and the latency
    /// histogram, so a client cannot move a side's success rate or P99.
    pub fn record_client_error(&self, role: Role, now_sec: u64) {
        if now_sec > LAST_RECORDABLE_SEC {
            return;
        }
        let ring = &self.rings[role.index()];
        let slot = ring.slot_of(now_sec);
        if !ring.enter(slot, now_sec) {
            return;
        }
        if let Some(head) = ring.heads.get(slot) {
            head.client_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The sum of `role`'s seconds in `(now_sec - window_secs, now_sec]`, i.e.
    /// the last `window_secs` seconds including the current, partial one.
    ///
    /// `window_secs` is clamped to the capacity (the ring holds nothing older);
    /// the snapshot's `window_secs` says which window was actually used, so
    /// rates stay correct. A window of 0 is empty. Seconds before 0 do not
    /// exist, so early in a process's life (with a clock starting at 0) the
    /// window is effectively shorter than stated; with Unix seconds this never
    /// happens.
    pub fn snapshot(&self, role: Role, now_sec: u64, window_secs: u64) -> WindowSnapshot {
        let window = window_secs.min(self.capacity as u64);
        let mut snapshot = WindowSnapshot::empty(window);
        if window == 0 {
            return snapshot;
        }
        let ring = &self.rings[role.index()];
        let first = now_sec.saturating_sub(window - 1);
        let mut scratch = vec![0u32; BUCKETS];
        for second in first..=now_sec {
            ring.add_second(second, &mut scratch, &mut snapshot);
        }
        snapshot
    }
}

/// The whole seconds a window of at most `window_secs` may cover at `now_ms` (on the
/// recorder's clock) without reaching back more than `max_age_ms`: the last second
/// counted is the current one, the first one the first that *starts* no earlier than
/// `now_ms - max_age_ms`. So no request recorded before that moment is read, and the
/// current second counts from its start. 0 when no whole second fits.
pub fn seconds_within(now_ms: u64, max_age_ms: u64, window_secs: u64) -> u64 {
    let now_sec = now_ms / 1000;
    let earliest = now_ms.saturating_sub(max_age_ms);
    let first = earliest.div_ceil(1000);
    if first > now_sec {
        return 0;
    }
    (now_sec - first + 1).min(window_secs)
}

impl fmt::Debug for RouteStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouteStats")
            .field("capacity_secs", &self.capacity)
            .finish_non_exhaustive()
    }
}

/// The totals of one role over one window, possibly summed over several
/// proxies. Carries the histogram rather than percentiles so that sums are
/// exact; [`WindowSnapshot::summary`] turns it into numbers.
///
/// JSON: `{"requests":..,"failures":..,"windowSecs":..,"histogram":[[index,count],..]}`,
/// plus `retries` and `retriedFailures` when a request was retried.
///
/// The histogram and `failures` count **attempts** (every upstream try);
/// `requests` counts client requests. Attempts are `requests + retries`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowSnapshot {
    /// Client requests finished in the window (each counted once, by its
    /// last attempt).
    pub requests: u64,
    /// Attempts that were retried (attempts beyond a request's last); absent
    /// from replicas without retries, and left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u64,
    /// Attempts the recorder called failures (the success rate's numerator
    /// is attempts minus these).
    pub failures: u64,
    /// Of the failures, the attempts that were retried; `failures -
    /// retriedFailures` is what clients saw fail.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retried_failures: u64,
    /// Requests that failed by the client's doing, not part of `requests`
    /// (absent from replicas that do not count them, and left out when 0,
    /// so the wire form of a window without any is unchanged).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub client_errors: u64,
    /// Length of the window actually covered, in seconds (after clamping to
    /// the ring's capacity); the divisor of the request rate.
    pub window_secs: u64,
    /// Latencies of the window's requests, for percentiles.
    pub histogram: Histogram,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl WindowSnapshot {
    /// A snapshot of no traffic over `window_secs`; the identity of `merge`
    /// when summing a fleet.
    pub fn empty(window_secs: u64) -> Self {
        WindowSnapshot {
            window_secs,
            ..WindowSnapshot::default()
        }
    }

    /// Adds `other` (another proxy's snapshot of the same role and window):
    /// counts and histograms are summed, so percentiles of the result are the
    /// fleet's percentiles. `window_secs` becomes the larger of the two, which
    /// only matters if the windows differ, and then under-states the rate
    /// rather than inflating it.
    pub fn merge(&mut self, other: &WindowSnapshot) {
        self.requests = self.requests.saturating_add(other.requests);
        self.retries = self.retries.saturating_add(other.retries);
        self.failures = self.failures.saturating_add(other.failures);
        self.retried_failures = self.retried_failures.saturating_add(other.retried_failures);
        self.client_errors = self.client_errors.saturating_add(other.client_errors);
        self.window_secs = self.window_secs.max(other.window_secs);
        self.histogram.merge(&other.histogram);
    }

    /// Upstream attempts in the window: every client request plus its retries.
    pub fn attempts(&self) -> u64 {
        self.requests.saturating_add(self.retries)
    }

    /// The numbers the API shows and the engine checks. Percentiles are the
    /// bucket representatives (within [`super::MAX_RELATIVE_ERROR`]).
    pub fn summary(&self) -> Summary {
        let rps = if self.window_secs == 0 {
            0.0
        } else {
            self.requests as f64 / self.window_secs as f64
        };
        let attempts = self.attempts();
        let rate = |total: u64, failed: u64| {
            (total > 0).then(|| 100.0 * (total - failed.min(total)) as f64 / total as f64)
        };
        let success_rate = rate(attempts, self.failures);
        let request_success_rate = rate(
            self.requests,
            self.failures.saturating_sub(self.retried_failures),
        );
        let percentile_ms = |q: f64| self.histogram.quantile(q).map(|us| us as f64 / 1000.0);
        Summary {
            requests: self.requests,
            attempts,
            failures: self.failures,
            request_success_rate,
            client_errors: self.client_errors,
            rps,
            success_rate,
            p50_ms: percentile_ms(0.50),
            p90_ms: percentile_ms(0.90),
            p99_ms: percentile_ms(0.99),
        }
    }
}

/// What `GET /api/v1/stats` shows per role and what the rollout engine checks
/// (`request-success-rate` against `successRate`, `request-duration` against
/// `p99Ms`). JSON field names are a contract: `requests`, `failures`, `rps`,
/// `successRate`, `p50Ms`, `p90Ms`, `p99Ms`; and `clientErrors`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Client requests in the window; the engine compares it with its
    /// minimum before trusting the rates (no traffic is not a pass).
    pub requests: u64,
    /// Upstream attempts in the window (requests plus their retries; equal
    /// to `requests` without retries). Absent from older replicas.
    #[serde(default)]
    pub attempts: u64,
    /// Failed attempts in the window.
    pub failures: u64,
    /// Percent of client requests whose final answer did not fail; `None`
    /// without requests.
    #[serde(default)]
    pub request_success_rate: Option<f64>,
    /// Requests the client broke (malformed or abandoned body, stalled
    /// upload), outside `requests` and the success rate.
    #[serde(default)]
    pub client_errors: u64,
    /// Requests per second over the window.
    pub rps: f64,
    /// Percent (0..=100) of attempts that did not fail; `None` without
    /// requests, because 100 % of nothing must not pass a check.
    pub success_rate: Option<f64>,
    /// Median latency in milliseconds; `None` without requests.
    pub p50_ms: Option<f64>,
    /// 90th percentile latency in milliseconds; `None` without requests.
    pub p90_ms: Option<f64>,
    /// 99th percentile latency in milliseconds (Flagger's
    /// `request-duration`); `None` without requests.
    pub p99_ms: Option<f64>,
}
