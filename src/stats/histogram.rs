//! A fixed log-linear latency histogram in microseconds.
//!
//! Layout (the same idea as HdrHistogram with 5 significant bits): values below
//! 64 µs have one bucket each (exact); above, every power of two `[2^m, 2^(m+1))`
//! is cut into 32 equal sub-buckets of width `2^(m-5)`. A bucket's lower bound
//! is therefore at least 32 times its width, and its representative (the
//! middle) is within `1/64` (1.5625 %) of every value in it. The last bucket
//! ends at `2^30 - 1` µs (about 17.9 minutes); larger values are clamped into
//! it. That gives 832 buckets.
//!
//! The bucket layout is part of the wire format of a serialised
//! [`Histogram`] (sparse `[[index, count], ...]`): every member of a fleet must
//! use the same constants.

use serde::{Deserialize, Serialize, Serializer};
use std::fmt;

/// Bits of the value kept below its most significant bit; sets the precision
/// (`2^SUB_BUCKET_BITS` sub-buckets per power of two).
pub const SUB_BUCKET_BITS: u32 = 5;

/// Sub-buckets per power of two.
const SUB_BUCKETS: u64 = 1 << SUB_BUCKET_BITS;

/// Most significant bit of the largest value tracked without clamping.
const MAX_MSB: u32 = 29;

/// Largest latency, in µs, that lands in its own bucket (about 17.9 minutes,
/// more than any sane request timeout); larger values go to the last bucket.
pub const MAX_TRACKABLE_US: u64 = (1 << (MAX_MSB + 1)) - 1;

/// Number of buckets: 64 exact ones, then 32 per power of two from 2^6 to 2^29.
pub const BUCKETS: usize = ((MAX_MSB - SUB_BUCKET_BITS + 2) as usize) << SUB_BUCKET_BITS;

// The sparse serde form stores indexes as u16.
const _: () = assert!(BUCKETS <= 1 << 16);

/// Bound on `|representative - value| / value` for every value in
/// `1..=MAX_TRACKABLE_US`; callers use it to state the precision of percentiles.
pub const MAX_RELATIVE_ERROR: f64 = 1.0 / (2 * SUB_BUCKETS) as f64;

/// The bucket holding `value_us`. This runs on every request, so it is
/// branch-free apart from the clamp (a conditional move): the position of the
/// top bit picks the power of two, the next 5 bits the sub-bucket. OR-ing in
/// `SUB_BUCKETS` makes values below 64 take the exact (shift 0) path with the
/// same formula.
#[inline]
pub fn bucket_index(value_us: u64) -> usize {
    let v = value_us.min(MAX_TRACKABLE_US);
    let msb = 63 - (v | SUB_BUCKETS).leading_zeros();
    let shift = msb - SUB_BUCKET_BITS;
    ((u64::from(shift) << SUB_BUCKET_BITS) + (v >> shift)) as usize
}

/// Width of a bucket as a power of two (its `shift`); indexes past the end are
/// treated as the last bucket so no input can panic.
fn bucket_shift(index: usize) -> (usize, u32) {
    let index = index.min(BUCKETS - 1);
    if index < 2 * SUB_BUCKETS as usize {
        (index, 0)
    } else {
        (index, ((index >> SUB_BUCKET_BITS) - 1) as u32)
    }
}

/// Smallest value (µs) that maps to `index`; with [`bucket_upper_bound`] it
/// lets tests and readers reason about the exact range of a bucket.
pub fn bucket_lower_bound(index: usize) -> u64 {
    let (index, shift) = bucket_shift(index);
    if shift == 0 {
        index as u64
    } else {
        (SUB_BUCKETS + (index as u64 & (SUB_BUCKETS - 1))) << shift
    }
}

/// Largest value (µs) that maps to `index` (inclusive); the last bucket's
/// bound is [`MAX_TRACKABLE_US`] even though larger values are clamped into it.
pub fn bucket_upper_bound(index: usize) -> u64 {
    let (_, shift) = bucket_shift(index);
    bucket_lower_bound(index) + ((1u64 << shift) - 1)
}

/// The value (µs) reported for every sample in `index`: the middle of the
/// bucket, which keeps the relative error under [`MAX_RELATIVE_ERROR`] at both
/// ends.
pub fn bucket_representative(index: usize) -> u64 {
    let (_, shift) = bucket_shift(index);
    bucket_lower_bound(index) + ((1u64 << shift) >> 1)
}

/// Latency counts per bucket. This is the unit that is summed across seconds
/// and across the proxies of a fleet; percentiles are only taken at the end.
///
/// Serialised sparsely as `[[index, count], ...]` (non-zero buckets only, in
/// index order) because a window usually touches a few dozen of the 832
/// buckets.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Vec<(u16, u64)>")]
pub struct Histogram {
    /// Dense counts; boxed so a snapshot moves cheaply.
    counts: Box<[u64; BUCKETS]>,
}

impl Histogram {
    /// An empty histogram (what a window without traffic holds).
    pub fn new() -> Self {
        Histogram {
            counts: Box::new([0; BUCKETS]),
        }
    }

    /// Counts one sample; for callers building a histogram outside
    /// [`super::RouteStats`] (tests, other sources of latency).
    pub fn record(&mut self, value_us: u64) {
        self.add_to_bucket(bucket_index(value_us), 1);
    }

    /// Adds `count` samples to bucket `index` (saturating; an index past the
    /// end goes to the last bucket). Used when summing ring buckets.
    pub(super) fn add_to_bucket(&mut self, index: usize, count: u64) {
        let index = index.min(BUCKETS - 1);
        if let Some(c) = self.counts.get_mut(index) {
            *c = c.saturating_add(count);
        }
    }

    /// Adds every count of `other`: how windows of several proxies are summed.
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine = mine.saturating_add(*theirs);
        }
    }

    /// Number of samples (saturating), i.e. the denominator of every quantile.
    pub fn total(&self) -> u64 {
        self.counts
            .iter()
            .fold(0u64, |acc, c| acc.saturating_add(*c))
    }

    /// True when no sample was recorded, so percentiles are undefined.
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|c| *c == 0)
    }

    /// Count in bucket `index` (0 past the end); for exports and tests.
    pub fn count(&self, index: usize) -> u64 {
        self.counts.get(index).copied().unwrap_or(0)
    }

    /// The non-zero buckets as `(index, count)`, in index order; the sparse
    /// form used by serde and by a Prometheus exporter.
    pub fn nonzero(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c != 0)
            .map(|(i, c)| (i, *c))
    }

    /// The `q`-quantile (0.0 ..= 1.0, clamped) in µs, as the representative of
    /// the bucket holding the nearest-rank sample: the `ceil(q * n)`-th
    /// smallest (at least the first). Because bucket order is value order, the
    /// result is within [`MAX_RELATIVE_ERROR`] of the exact nearest-rank
    /// quantile of the recorded samples. `None` when empty or `q` is NaN.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if q.is_nan() {
            return None;
        }
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = nearest_rank(q, total);
        let mut seen = 0u64;
        for (index, count) in self.counts.iter().enumerate() {
            seen = seen.saturating_add(*count);
            if seen >= rank {
                return Some(bucket_representative(index));
            }
        }
        Some(bucket_representative(BUCKETS - 1))
    }
}

/// `ceil(q * n)` clamped to `1..=n`, forgiving the rounding of `q * n`: with
/// q = 0.7 and n = 10 the product is 7.000000000000001, which must give rank 7,
/// not 8. The tolerance (a few ulps of the product) only matters when the true
/// product is an integer.
fn nearest_rank(q: f64, n: u64) -> u64 {
    let x = q.clamp(0.0, 1.0) * n as f64;
    let rank = (x - x * 4.0 * f64::EPSILON).ceil();
    // `as` saturates on floats, so huge or negative values cannot wrap.
    (rank as u64).clamp(1, n)
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl fmt::Debug for Histogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // 832 mostly-zero numbers would drown any assertion message.
        f.debug_map().entries(self.nonzero()).finish()
    }
}

impl Serialize for Histogram {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.nonzero().map(|(i, c)| (i as u16, c)))
    }
}

impl TryFrom<Vec<(u16, u64)>> for Histogram {
    type Error = String;

    /// Rebuilds a histogram from its sparse form; a snapshot may come from
    /// another proxy, so an index outside the layout is an error, never a
    /// panic. Repeated indexes are summed.
    fn try_from(pairs: Vec<(u16, u64)>) -> Result<Self, Self::Error> {
        let mut histogram = Histogram::new();
        for (index, count) in pairs {
            let index = usize::from(index);
            if index >= BUCKETS {
                return Err(format!(
                    "histogram bucket index {index} is out of range (0..{BUCKETS})"
                ));
            }
            histogram.add_to_bucket(index, count);
        }
        Ok(histogram)
    }
}
