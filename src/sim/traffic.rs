//! Synthetic traffic shaped like weir's: requests, failures and latencies in weir's
//! histogram buckets, drawn fast from a seeded generator.
//!
//! Every check window, each tenth of the route's traffic (a *share*: canary weights are
//! multiples of 10 %) gets a Poisson number of requests, and each request is drawn as
//! the canary would serve it and as the primary would (only the shares some weight can
//! give to that side). A judge at weight `w` sees the canary version of the first
//! `w / 10` shares and the primary version of the rest. So the judges of one run see
//! the same requests, split by their own weights, and a judge's numbers do not depend
//! on which other judges run beside it.
//!
//! A latency is a bucket index drawn from an alias table (Vose) of the log-normal's
//! mass in each bucket of weir's layout, exactly what recording a log-normal latency
//! (in whole µs) would give; a failure is a Bernoulli draw per request.

use rand::rngs::SmallRng;
use rand::{Rng, RngCore};
use statrs::distribution::{ContinuousCDF, Normal};
use statrs::function::gamma::ln_gamma;

use crate::stats::{bucket_lower_bound, bucket_upper_bound, Histogram, WindowSnapshot, BUCKETS};

use super::scenario::Scenario;
use super::{MAX_WEIGHT, START_WEIGHT};

/// Tenths of the route's traffic.
pub const SHARES: usize = 10;

/// Vose's alias table over the latency buckets: one draw is one 64-bit random number.
#[derive(Clone, Debug)]
pub struct AliasTable {
    /// Keep the drawn bucket when the low 32 bits are below this (out of 2^32).
    keep_below: Vec<u64>,
    /// The bucket taken otherwise.
    alias: Vec<u16>,
}

impl AliasTable {
    /// From probabilities of the buckets (summing to about 1).
    pub fn new(p: &[f64]) -> AliasTable {
        let n = p.len();
        let total: f64 = p.iter().sum();
        let mut scaled: Vec<f64> = p.iter().map(|x| x / total * n as f64).collect();
        let mut keep_below = vec![1u64 << 32; n];
        let mut alias: Vec<u16> = (0..n as u16).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) =
            (0..n).partition(|&i| scaled[i] < 1.0);
        while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
            keep_below[s] = (scaled[s] * (1u64 << 32) as f64).round() as u64;
            alias[s] = l as u16;
            scaled[l] -= 1.0 - scaled[s];
            if scaled[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // What remains is 1 up to rounding: always kept.
        AliasTable { keep_below, alias }
    }

    /// The mass of a log-normal latency (median in ms, shape `sigma`) recorded in whole
    /// µs, per bucket: bucket `i` holds the latencies in `[lower, upper + 1)` µs.
    pub fn log_normal(median_ms: f64, sigma: f64) -> AliasTable {
        let normal = Normal::standard();
        let mu = (median_ms * 1000.0).ln();
        let cdf = |us: f64| {
            if us <= 0.0 {
                0.0
            } else {
                normal.cdf((us.ln() - mu) / sigma)
            }
        };
        let p: Vec<f64> = (0..BUCKETS)
            .map(|i| {
                let lo = cdf(bucket_lower_bound(i) as f64);
                // Larger values are clamped into the last bucket.
                let hi = if i == BUCKETS - 1 {
                    1.0
                } else {
                    cdf((bucket_upper_bound(i) + 1) as f64)
                };
                (hi - lo).max(0.0)
            })
            .collect();
        AliasTable::new(&p)
    }

    /// One bucket index.
    #[inline]
    pub fn sample(&self, rng: &mut SmallRng) -> usize {
        let u = rng.next_u64();
        let i = (((u >> 32) * self.keep_below.len() as u64) >> 32) as usize;
        if (u & 0xffff_ffff) < self.keep_below[i] {
            i
        } else {
            usize::from(self.alias[i])
        }
    }
}

/// Exact Poisson draws: inversion for a small mean, Hörmann's transformed rejection
/// with squeeze (PTRS, 1993; what NumPy uses) from [`Poisson::PTRS_FROM`], whose cost
/// does not grow with the mean.
#[derive(Clone, Copy, Debug)]
pub struct Poisson {
    mean: f64,
    /// `exp(-mean)`, the inversion's start.
    p0: f64,
    /// PTRS constants (unused below `PTRS_FROM`).
    ptrs: Ptrs,
}

#[derive(Clone, Copy, Debug, Default)]
struct Ptrs {
    ln_mean: f64,
    a: f64,
    b: f64,
    ln_inv_alpha: f64,
    vr: f64,
}

impl Poisson {
    /// The mean from which PTRS is used (its constants hold from 10).
    pub const PTRS_FROM: f64 = 10.0;

    /// Draws of mean `mean` (≥ 0).
    pub fn new(mean: f64) -> Poisson {
        let mean = mean.max(0.0);
        let b = 0.931 + 2.53 * mean.sqrt();
        let ptrs = Ptrs {
            ln_mean: mean.ln(),
            a: -0.059 + 0.02483 * b,
            b,
            ln_inv_alpha: (1.1239 + 1.1328 / (b - 3.4)).ln(),
            vr: 0.9277 - 3.6224 / (b - 2.0),
        };
        Poisson {
            mean,
            p0: (-mean).exp(),
            ptrs,
        }
    }

    /// One draw.
    pub fn sample(&self, rng: &mut SmallRng) -> u64 {
        if self.mean < Self::PTRS_FROM {
            self.invert(rng)
        } else {
            self.ptrs(rng)
        }
    }

    fn invert(&self, rng: &mut SmallRng) -> u64 {
        let u: f64 = rng.random();
        let (mut k, mut p, mut cdf) = (0u64, self.p0, self.p0);
        // The cap only guards against a u within rounding of 1.
        while u > cdf && k < 1_000 {
            k += 1;
            p *= self.mean / k as f64;
            cdf += p;
        }
        k
    }

    fn ptrs(&self, rng: &mut SmallRng) -> u64 {
        let c = &self.ptrs;
        loop {
            let u = rng.random::<f64>() - 0.5;
            let v: f64 = rng.random();
            let us = 0.5 - u.abs();
            let k = ((2.0 * c.a / us + c.b) * u + self.mean + 0.43).floor();
            if us >= 0.07 && v <= c.vr {
                return k as u64;
            }
            if k < 0.0 || (us < 0.013 && v > us) {
                continue;
            }
            let lhs = v.ln() + c.ln_inv_alpha - (c.a / (us * us) + c.b).ln();
            let rhs = -self.mean + k * c.ln_mean - ln_gamma(k + 1.0);
            if lhs <= rhs {
                return k as u64;
            }
        }
    }
}

/// One side's requests in a window: counts and latency buckets, dense, with the range
/// of buckets touched so sums and conversions skip the empty ones.
#[derive(Clone, Debug)]
pub struct Counts {
    /// Requests (each one attempt: the simulation has no retries).
    pub requests: u64,
    /// Failed requests.
    pub failures: u64,
    buckets: Vec<u64>,
    /// Touched buckets are within `lo..hi` (empty when `lo >= hi`).
    lo: usize,
    hi: usize,
}

impl Default for Counts {
    fn default() -> Self {
        Counts {
            requests: 0,
            failures: 0,
            buckets: vec![0; BUCKETS],
            lo: BUCKETS,
            hi: 0,
        }
    }
}

impl Counts {
    /// Empties it, keeping the allocation.
    pub fn clear(&mut self) {
        if self.lo < self.hi {
            self.buckets[self.lo..self.hi].fill(0);
        }
        (self.requests, self.failures, self.lo, self.hi) = (0, 0, BUCKETS, 0);
    }

    #[inline]
    fn record(&mut self, bucket: usize, failed: bool) {
        self.requests += 1;
        self.failures += u64::from(failed);
        self.buckets[bucket] += 1;
        self.lo = self.lo.min(bucket);
        self.hi = self.hi.max(bucket + 1);
    }

    /// Adds another side's counts (windows of several shares, or checks of a run).
    pub fn add(&mut self, other: &Counts) {
        self.requests += other.requests;
        self.failures += other.failures;
        if other.lo < other.hi {
            for i in other.lo..other.hi {
                self.buckets[i] += other.buckets[i];
            }
            self.lo = self.lo.min(other.lo);
            self.hi = self.hi.max(other.hi);
        }
    }

    /// What the proxies would report for these requests over `window_secs`.
    pub fn snapshot(&self, window_secs: u64) -> WindowSnapshot {
        let pairs: Vec<(u16, u64)> = (self.lo..self.hi)
            .filter(|&i| self.buckets[i] != 0)
            .map(|i| (i as u16, self.buckets[i]))
            .collect();
        WindowSnapshot {
            requests: self.requests,
            failures: self.failures,
            window_secs,
            // Indexes come from the layout itself, so never out of range.
            histogram: Histogram::try_from(pairs).unwrap_or_default(),
            ..WindowSnapshot::default()
        }
    }
}

/// How one version (canary or primary) answers.
#[derive(Clone, Debug)]
struct Version {
    latency: AliasTable,
    /// A request fails when a 32-bit draw is below this (out of 2^32).
    fail_below: u64,
}

impl Version {
    fn new(error_pct: f64, median_ms: f64, sigma: f64) -> Version {
        let p = (error_pct / 100.0).clamp(0.0, 1.0);
        Version {
            latency: AliasTable::log_normal(median_ms, sigma),
            fail_below: (p * (1u64 << 32) as f64).round() as u64,
        }
    }

    fn draw(&self, rng: &mut SmallRng, n: u64, into: &mut Counts) {
        for _ in 0..n {
            let bucket = self.latency.sample(rng);
            let failed = u64::from(rng.next_u32()) < self.fail_below;
            into.record(bucket, failed);
        }
    }
}

/// A scenario's traffic, ready to draw windows from.
#[derive(Clone, Debug)]
pub struct Traffic {
    arrivals: Poisson,
    canary: Version,
    primary: Version,
}

/// One check window, per share: the canary version of the shares a canary weight can
/// reach, the primary version of the shares the primary keeps at the lowest weight.
#[derive(Clone, Debug)]
pub struct Window {
    canary: Vec<Counts>,
    primary: Vec<Counts>,
}

/// Shares whose canary version is drawn: `0..CANARY_SHARES`.
const CANARY_SHARES: usize = (MAX_WEIGHT / 10) as usize;
/// Shares whose primary version is drawn: `PRIMARY_FROM..SHARES`.
const PRIMARY_FROM: usize = (START_WEIGHT / 10) as usize;

impl Default for Window {
    fn default() -> Self {
        Window {
            canary: vec![Counts::default(); CANARY_SHARES],
            primary: vec![Counts::default(); SHARES - PRIMARY_FROM],
        }
    }
}

impl Window {
    /// The canary's requests at weight `weight` (percent, a multiple of 10).
    pub fn canary_at(&self, weight: u32) -> Counts {
        let mut c = Counts::default();
        for s in &self.canary[..(weight / 10) as usize] {
            c.add(s);
        }
        c
    }

    /// The primary's requests at weight `weight`.
    pub fn primary_at(&self, weight: u32) -> Counts {
        let mut c = Counts::default();
        for s in &self.primary[(weight / 10) as usize - PRIMARY_FROM..] {
            c.add(s);
        }
        c
    }
}

impl Traffic {
    /// The traffic of `s`: Poisson arrivals at `rps`, the primary's error rate and
    /// latency, the canary's shifted by the scenario's regression.
    pub fn new(s: &Scenario) -> Traffic {
        let per_share = s.rps * s.interval_secs as f64 / SHARES as f64;
        Traffic {
            arrivals: Poisson::new(per_share),
            canary: Version::new(
                s.base_error_pct + s.error_delta_pp,
                s.median_ms * s.latency_factor,
                s.sigma,
            ),
            primary: Version::new(s.base_error_pct, s.median_ms, s.sigma),
        }
    }

    /// Draws the next window into `w` (its previous contents are cleared).
    pub fn fill(&self, rng: &mut SmallRng, w: &mut Window) {
        for share in 0..SHARES {
            let n = self.arrivals.sample(rng);
            if let Some(c) = w.canary.get_mut(share) {
                c.clear();
                self.canary.draw(rng, n, c);
            }
            if let Some(p) = share
                .checked_sub(PRIMARY_FROM)
                .and_then(|i| w.primary.get_mut(i))
            {
                p.clear();
                self.primary.draw(rng, n, p);
            }
        }
    }
}
