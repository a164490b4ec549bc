//! Mann-Whitney U and the Hodges-Lehmann shift on *grouped* samples: a sorted list of
//! `(value, count)` pairs. A histogram is such a list (each bucket's representative with
//! its count, every bucket a group of ties); raw samples are too (each distinct value
//! with its multiplicity), so one implementation serves both and the tests compare them.
//!
//! Formulas (x = canary, n samples; y = primary, m samples; N = n + m):
//! - U = Σ over pairs of [x > y] + ½[x = y]; per group, `a·(y below) + ½·a·b`.
//! - Tie-corrected variance (Lehmann, *Nonparametrics*, 1975, eq. 1.53; SciPy's
//!   `mannwhitneyu`): σ² = nm/12 · ((N+1) − Σ(t³ − t) / (N(N−1))), t the size of each
//!   group of equal values in the pooled sample.
//! - z = sign(U − nm/2) · max(|U − nm/2| − ½, 0) / σ (continuity correction), two-sided
//!   p = erfc(|z|/√2), as `scipy.stats.mannwhitneyu(method="asymptotic")`.
//! - Hodges-Lehmann: the median of the nm pairwise differences x − y (Hodges & Lehmann,
//!   1963); here the differences of the group values, each weighted by `a·b`.
//! - Its interval is the one R's `wilcox.test(conf.int = TRUE, exact = FALSE)` and
//!   Kayenta's `MannWhitney.scala` find by root-finding: the shifts d where
//!   (U(d) − nm/2 ∓ ½)/σ' = ±z_{1−α/2}, U(d) the statistic of x − d against y. U(d) is
//!   a step function that jumps at the pairwise differences, so the roots are order
//!   statistics of the weighted differences: with c = nm/2 + ½ + z·σ', the upper end is
//!   the smallest difference with at least c differences at or below it, the lower end
//!   the largest with at least c at or above it. σ' is the variance at a shift between
//!   two differences, where x − d and y share no value: the tie term counts the groups
//!   of each side apart. When c > nm the interval is the whole range of differences
//!   (R's and Kayenta's root finders return the end of the search range there).

use statrs::function::erf::erfc;

/// `(value, count)` pairs in increasing value order, counts above zero.
pub type Groups = Vec<(f64, f64)>;

/// Groups of raw samples: each distinct value with its multiplicity. NaNs are dropped.
pub fn groups_from_samples(samples: &[f64]) -> Groups {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    let mut out: Groups = Vec::new();
    for x in v {
        match out.last_mut() {
            Some((value, count)) if *value == x => *count += 1.0,
            _ => out.push((x, 1.0)),
        }
    }
    out
}

/// Number of samples in `groups`.
pub fn total(groups: &[(f64, f64)]) -> f64 {
    groups.iter().map(|(_, c)| c).sum()
}

/// Mean of the samples, `None` when there are none.
pub fn mean(groups: &[(f64, f64)]) -> Option<f64> {
    let n = total(groups);
    (n > 0.0).then(|| groups.iter().map(|(v, c)| v * c).sum::<f64>() / n)
}

/// The result of a two-sided Mann-Whitney U test of x against y.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MannWhitney {
    /// U of x (SciPy's `statistic`): pairs with x above y, ties counted one half.
    pub u: f64,
    /// The normal score with continuity correction (positive: x tends to be larger).
    pub z: f64,
    /// Two-sided p-value of the normal approximation.
    pub p_value: f64,
}

/// Σ(t³ − t) over the tie groups of one side.
fn tie_term(groups: &[(f64, f64)]) -> f64 {
    groups.iter().map(|(_, t)| t * t * t - t).sum()
}

/// σ of U for sample sizes n, m with the given tie term; 0 when undefined.
fn sigma(n: f64, m: f64, ties: f64) -> f64 {
    let big_n = n + m;
    if big_n < 2.0 {
        return 0.0;
    }
    let var = n * m / 12.0 * ((big_n + 1.0) - ties / (big_n * (big_n - 1.0)));
    if var > 0.0 {
        var.sqrt()
    } else {
        0.0
    }
}

/// The U test; `None` when a side is empty or every sample is tied (σ = 0).
pub fn mann_whitney(x: &[(f64, f64)], y: &[(f64, f64)]) -> Option<MannWhitney> {
    let (n, m) = (total(x), total(y));
    if n == 0.0 || m == 0.0 {
        return None;
    }
    let (mut u, mut ties, mut y_below) = (0.0, 0.0, 0.0);
    let (mut i, mut j) = (0, 0);
    // Walk the pooled values in order; a value on both sides is one tie group.
    while i < x.len() || j < y.len() {
        let vx = x.get(i).map_or(f64::INFINITY, |g| g.0);
        let vy = y.get(j).map_or(f64::INFINITY, |g| g.0);
        let v = vx.min(vy);
        let a = if vx == v {
            i += 1;
            x[i - 1].1
        } else {
            0.0
        };
        let b = if vy == v {
            j += 1;
            y[j - 1].1
        } else {
            0.0
        };
        u += a * (y_below + 0.5 * b);
        y_below += b;
        let t = a + b;
        ties += t * t * t - t;
    }
    let s = sigma(n, m, ties);
    if s == 0.0 {
        return None;
    }
    let d = u - n * m / 2.0;
    let z = d.signum() * (d.abs() - 0.5).max(0.0) / s;
    let z = if d == 0.0 { 0.0 } else { z };
    Some(MannWhitney {
        u,
        z,
        p_value: erfc(z.abs() / std::f64::consts::SQRT_2).min(1.0),
    })
}

/// The Hodges-Lehmann estimate of the shift x − y and its confidence interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shift {
    /// Median of the pairwise differences.
    pub estimate: f64,
    /// Lower end of the interval.
    pub lower: f64,
    /// Upper end of the interval.
    pub upper: f64,
}

/// Weight of the pairs with x − y ≤ d (two pointers over the sorted groups: x_i − d
/// rises with i, so the first y at or above it only moves right).
fn count_le(x: &[(f64, f64)], y_suffix: &[f64], y: &[(f64, f64)], d: f64) -> f64 {
    let mut j = 0;
    let mut count = 0.0;
    for (vx, a) in x {
        while j < y.len() && y[j].0 < vx - d {
            j += 1;
        }
        count += a * y_suffix[j];
    }
    count
}

/// The largest pairwise difference that [`count_le`] counts at `hi` (the same pointer
/// and the same rounding, so a difference it counted is never missed).
fn largest_counted(x: &[(f64, f64)], y: &[(f64, f64)], hi: f64) -> f64 {
    let mut best = f64::NEG_INFINITY;
    let mut j = 0;
    for (vx, _) in x {
        while j < y.len() && y[j].0 < vx - hi {
            j += 1;
        }
        if let Some((vy, _)) = y.get(j) {
            best = best.max(vx - vy);
        }
    }
    best
}

/// The k-th smallest pairwise difference x − y (weights a·b, 1-based, k clamped to
/// 1..=nm), without listing the nm differences: bisection on the value with a linear
/// count per step, then the largest difference counted at the bracket's top. The
/// bracket stops at 1e-13 of the range's scale, so two differences closer than that
/// may be confused.
pub(super) fn select(x: &[(f64, f64)], y: &[(f64, f64)], k: f64) -> f64 {
    let mut y_suffix = vec![0.0; y.len() + 1];
    for j in (0..y.len()).rev() {
        y_suffix[j] = y_suffix[j + 1] + y[j].1;
    }
    let k = k.ceil().clamp(1.0, total(x) * total(y));
    let mut lo = x[0].0 - y[y.len() - 1].0;
    let mut hi = x[x.len() - 1].0 - y[0].0;
    if count_le(x, &y_suffix, y, lo) >= k {
        return lo;
    }
    // Invariant: count_le(lo) < k ≤ count_le(hi).
    let width = 1e-13 * lo.abs().max(hi.abs()).max(f64::MIN_POSITIVE);
    while hi - lo > width {
        let mid = lo + (hi - lo) / 2.0;
        if mid <= lo || mid >= hi {
            break;
        }
        if count_le(x, &y_suffix, y, mid) >= k {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    largest_counted(x, y, hi)
}

/// The pairwise differences x − y with weights a·b, sorted, equal differences merged:
/// the plain definition the tests check [`select`] against.
#[cfg(test)]
pub(super) fn differences(x: &[(f64, f64)], y: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut d: Vec<(f64, f64)> = Vec::with_capacity(x.len() * y.len());
    for (vx, a) in x {
        for (vy, b) in y {
            d.push((vx - vy, a * b));
        }
    }
    d.sort_by(|p, q| p.0.total_cmp(&q.0));
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(d.len());
    for (v, w) in d {
        match merged.last_mut() {
            Some((last, lw)) if *last == v => *lw += w,
            _ => merged.push((v, w)),
        }
    }
    merged
}

/// The smallest listed difference with at least `k` weight at or below it.
#[cfg(test)]
pub(super) fn order_statistic(d: &[(f64, f64)], k: f64) -> f64 {
    let mut seen = 0.0;
    for (v, w) in d {
        seen += w;
        if seen >= k {
            return *v;
        }
    }
    d.last().map_or(f64::NAN, |p| p.0)
}

/// The largest listed difference with at least `k` weight at or above it.
#[cfg(test)]
pub(super) fn order_statistic_from_top(d: &[(f64, f64)], k: f64) -> f64 {
    let mut seen = 0.0;
    for (v, w) in d.iter().rev() {
        seen += w;
        if seen >= k {
            return *v;
        }
    }
    d.first().map_or(f64::NAN, |p| p.0)
}

/// The rank c = nm/2 + ½ + z·σ' of the interval's ends (see the module doc). σ' is
/// never 0 with both sides non-empty: the separate tie terms leave 3nm(n+m) in it.
pub(super) fn interval_rank(x: &[(f64, f64)], y: &[(f64, f64)], z: f64) -> f64 {
    let (n, m) = (total(x), total(y));
    n * m / 2.0 + 0.5 + z * sigma(n, m, tie_term(x) + tie_term(y))
}

/// The shift estimate and its interval at `confidence` (0.5..1); `None` when a side is
/// empty. `z` is the standard normal quantile at `1 − (1 − confidence)/2`.
pub fn hodges_lehmann(x: &[(f64, f64)], y: &[(f64, f64)], z: f64) -> Option<Shift> {
    let (n, m) = (total(x), total(y));
    if n == 0.0 || m == 0.0 {
        return None;
    }
    let nm = n * m;
    // The median of nm values: the middle one, or the mean of the two middle ones.
    let half = (nm / 2.0).floor();
    let estimate = if nm % 2.0 == 1.0 {
        select(x, y, half + 1.0)
    } else {
        (select(x, y, half) + select(x, y, half + 1.0)) / 2.0
    };
    let c = interval_rank(x, y, z);
    let (lower, upper) = if c > nm {
        (select(x, y, 1.0), select(x, y, nm))
    } else {
        // At least c at or above: the (nm − ⌈c⌉ + 1)-th smallest (integer weights).
        (select(x, y, nm - c.ceil() + 1.0), select(x, y, c))
    };
    Some(Shift {
        estimate,
        lower,
        upper,
    })
}
