//! Comparing two error rates: canary e₁ failures of n, primary e₀ of m.
//!
//! - The test: the pooled two-proportion z-test (z = (p₁ − p₀) / √(p̂(1−p̂)(1/n + 1/m)),
//!   p̂ = (e₁+e₀)/(n+m)), and Fisher's exact test (two-sided, summing every table of the
//!   same margins no more likely than the observed one, as `scipy.stats.fisher_exact`
//!   and R's `fisher.test`) when an expected cell count is below 5, where the normal
//!   approximation is known to be poor (Cochran's rule; Agresti, *Categorical Data
//!   Analysis*, 3rd ed., §3.5).
//! - The interval of p₁ − p₀: Newcombe's hybrid score interval (Newcombe 1998,
//!   *Statistics in Medicine* 17:873, method 10), built from the two Wilson intervals;
//!   unlike the Wald interval it stays honest at 0 errors and small counts.

use statrs::function::erf::erfc;
use statrs::function::gamma::ln_gamma;

/// Expected cell count under which Fisher's exact test replaces the z-test.
pub const FISHER_BELOW: f64 = 5.0;

/// Which test produced a p-value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProportionTest {
    /// The pooled two-proportion z-test.
    ZTest,
    /// Fisher's exact test.
    Fisher,
}

/// The comparison of two rates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateComparison {
    /// p₁ − p₀.
    pub difference: f64,
    /// Lower end of Newcombe's interval of the difference.
    pub lower: f64,
    /// Upper end of Newcombe's interval of the difference.
    pub upper: f64,
    /// Two-sided p-value of `test`.
    pub p_value: f64,
    /// The test used.
    pub test: ProportionTest,
}

/// Wilson's score interval of `e` successes in `n` trials.
fn wilson(e: f64, n: f64, z: f64) -> (f64, f64) {
    let p = e / n;
    let z2 = z * z;
    let denom = 1.0 + z2 / n;
    let center = (p + z2 / (2.0 * n)) / denom;
    let half = z / denom * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((center - half).max(0.0), (center + half).min(1.0))
}

/// ln C(n, k).
fn ln_choose(n: f64, k: f64) -> f64 {
    ln_gamma(n + 1.0) - ln_gamma(k + 1.0) - ln_gamma(n - k + 1.0)
}

/// Two-sided Fisher's exact p-value of the table [[e1, n−e1], [e0, m−e0]].
pub fn fisher_exact(e1: u64, n: u64, e0: u64, m: u64) -> f64 {
    let (big_n, k) = ((n + m) as f64, (e1 + e0) as f64);
    let nf = n as f64;
    let ln_p = |x: f64| ln_choose(k, x) + ln_choose(big_n - k, nf - x) - ln_choose(big_n, nf);
    let observed = ln_p(e1 as f64);
    let lo = (e1 + e0).saturating_sub(m);
    let hi = (e1 + e0).min(n);
    // The relative tolerance SciPy and R use, so tables as likely as the observed one
    // up to rounding count as "no more likely".
    let limit = observed + (1.0 + 1e-7f64).ln();
    let p: f64 = (lo..=hi)
        .map(|x| ln_p(x as f64))
        .filter(|lp| *lp <= limit)
        .map(f64::exp)
        .sum();
    p.min(1.0)
}

/// Two-sided p-value of the pooled two-proportion z-test; 1 when no or every request
/// failed (the rates cannot differ).
pub fn z_test(e1: u64, n: u64, e0: u64, m: u64) -> f64 {
    let (nf, mf) = (n as f64, m as f64);
    let pooled = (e1 + e0) as f64 / (nf + mf);
    let se = (pooled * (1.0 - pooled) * (1.0 / nf + 1.0 / mf)).sqrt();
    if se == 0.0 || !se.is_finite() {
        return 1.0;
    }
    let z = (e1 as f64 / nf - e0 as f64 / mf) / se;
    erfc(z.abs() / std::f64::consts::SQRT_2).min(1.0)
}

/// Compares the rates e1/n and e0/m; `z` is the normal quantile of the interval.
/// `None` when a side has no trials. Failures above the trials are clamped.
pub fn compare_rates(e1: u64, n: u64, e0: u64, m: u64, z: f64) -> Option<RateComparison> {
    if n == 0 || m == 0 {
        return None;
    }
    let (e1, e0) = (e1.min(n), e0.min(m));
    let (nf, mf) = (n as f64, m as f64);
    let total = nf + mf;
    let k = (e1 + e0) as f64;
    let smallest_expected = [nf * k / total, mf * k / total]
        .into_iter()
        .chain([nf * (total - k) / total, mf * (total - k) / total])
        .fold(f64::INFINITY, f64::min);
    let (p_value, test) = if smallest_expected < FISHER_BELOW {
        (fisher_exact(e1, n, e0, m), ProportionTest::Fisher)
    } else {
        (z_test(e1, n, e0, m), ProportionTest::ZTest)
    };
    let (p1, p0) = (e1 as f64 / nf, e0 as f64 / mf);
    let (l1, u1) = wilson(e1 as f64, nf, z);
    let (l0, u0) = wilson(e0 as f64, mf, z);
    let difference = p1 - p0;
    Some(RateComparison {
        difference,
        lower: difference - ((p1 - l1).powi(2) + (u0 - p0).powi(2)).sqrt(),
        upper: difference + ((u1 - p1).powi(2) + (p0 - l0).powi(2)).sqrt(),
        p_value,
        test,
    })
}
