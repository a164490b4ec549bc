//! Windowed request statistics for one route: request count, success rate and
//! latency percentiles per role (primary, canary, mirror) over a sliding window
//! of whole seconds.
//!
//! The proxy records every request it finishes ([`RouteStats::record`]); the
//! control API (`GET /api/v1/stats`) and the rollout engine read a
//! [`WindowSnapshot`] and turn it into a [`Summary`]. A snapshot carries the
//! latency *histogram*, not percentiles, so the engine can sum the snapshots of
//! a whole fleet ([`WindowSnapshot::merge`]) and take percentiles of the sum;
//! averaging percentiles would be wrong.
//!
//! What this module must never do: IO, reading a clock (`now` is always a
//! parameter), spawning threads, sleeping, allocating or taking a mutex on
//! the recording path (its one short wait, after an idle second, is explained
//! in `window.rs`), or panicking on any input. A registry of routes is not
//! here: the caller keeps one [`RouteStats`] per route.
//!
//! Layout:
//! - `histogram`: the fixed log-linear latency histogram (bucket maths,
//!   quantiles, its sparse serde form).
//! - `compare`: the baseline-comparison judge (Mann-Whitney U and Hodges-Lehmann on
//!   two histograms, a two-proportion test on their error counts), PURE.
//! - `window`: [`RouteStats`], a lock-free ring of per-second buckets per
//!   role, and the [`WindowSnapshot`] / [`Summary`] read from it.

pub mod compare;
mod histogram;
pub mod sequential;
mod window;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use std::fmt;

pub use histogram::{
    bucket_index, bucket_lower_bound, bucket_representative, bucket_upper_bound, Histogram,
    BUCKETS, MAX_RELATIVE_ERROR, MAX_TRACKABLE_US, SUB_BUCKET_BITS,
};
pub use window::{seconds_within, RouteStats, Summary, WindowSnapshot, MAX_CAPACITY_SECS};

/// Which side of a route served a request. Stats are kept per role because the
/// rollout engine judges the canary against its own numbers, never mixed with
/// the primary's; mirror (shadow) traffic is kept apart so it is visible but
/// never counted as user-facing traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The backend serving the stable version.
    Primary,
    /// The backend under analysis.
    Canary,
    /// Shadow copies of requests; their responses are discarded.
    Mirror,
}

impl Role {
    /// Every role, in a fixed order, so callers (API, Prometheus export) can
    /// iterate without listing the variants themselves.
    pub const ALL: [Role; 3] = [Role::Primary, Role::Canary, Role::Mirror];

    /// The name used in JSON, metrics labels and logs (same as the serde form).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Canary => "canary",
            Role::Mirror => "mirror",
        }
    }

    /// Position in [`Role::ALL`]; indexes the per-role rings of [`RouteStats`].
    fn index(self) -> usize {
        match self {
            Role::Primary => 0,
            Role::Canary => 1,
            Role::Mirror => 2,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
