//! The judge against values computed independently, from the module documentation, by
//! `tests/fixtures/sequential/reference.py` (NumPy/SciPy; it solves the likelihood ratio
//! for the half-width and the growth factor by root search, where the Rust uses the
//! closed form and bisection).
//!
//! Tolerances: closed forms (half-widths, estimates, interval ends, lines) agree to a
//! relative `1e-9`; the evidence (`1/k`, a root found both sides to about 1e-15) to
//! `1e-9` too; `needed` is `ceil(n (k − 1))` of two roots of the same equation, so it
//! may differ by one request when `n (k − 1)` falls within rounding of an integer.

use serde::Deserialize;

use super::*;

const REFERENCE: &str = include_str!("../../../tests/fixtures/sequential/reference.json");

/// Relative tolerance of closed forms and of the evidence.
const RELATIVE: f64 = 1e-9;

#[derive(Deserialize)]
struct Reference {
    representatives: Vec<(usize, u64)>,
    #[serde(rename = "halfWidths")]
    half_widths: Vec<HalfWidth>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct HalfWidth {
    v: f64,
    tau2: f64,
    alpha: f64,
    w: f64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Case {
    name: String,
    judge: String,
    baseline: ReferenceBaseline,
    params: SequentialParams,
    canary: WindowSnapshot,
    primary: WindowSnapshot,
    expected: Expected,
}

#[derive(Deserialize)]
struct ReferenceBaseline {
    against: String,
    value: Option<f64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Expected {
    outcome: Outcome,
    alpha: f64,
    canary_requests: u64,
    primary_requests: Option<u64>,
    quantities: Vec<ExpectedQuantity>,
    evidence: f64,
    needed: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExpectedQuantity {
    name: String,
    outcome: Outcome,
    estimate: Option<f64>,
    lower: Option<f64>,
    upper: Option<f64>,
    pass_below: f64,
    fail_above: f64,
    evidence: f64,
    needed: Option<u64>,
}

fn reference() -> Reference {
    serde_json::from_str(REFERENCE).expect("reference.json parses")
}

fn close(got: f64, want: f64) -> bool {
    got == want || (got - want).abs() <= RELATIVE * got.abs().max(want.abs())
}

fn close_opt(got: Option<f64>, want: Option<f64>) -> bool {
    match (got, want) {
        (Some(g), Some(w)) => close(g, w),
        (None, None) => true,
        _ => false,
    }
}

fn needed_close(got: Option<u64>, want: Option<u64>) -> bool {
    match (got, want) {
        (Some(g), Some(w)) => g.abs_diff(w) <= 1,
        (None, None) => true,
        _ => false,
    }
}

fn judge(case: &Case) -> Judgement {
    let baseline = match (case.baseline.against.as_str(), case.baseline.value) {
        ("primary", _) => Baseline::Primary,
        ("threshold", Some(v)) => Baseline::Threshold(v),
        other => panic!("{}: baseline {other:?}", case.name),
    };
    let (c, pr, p) = (&case.canary, &case.primary, &case.params);
    match case.judge.as_str() {
        "compare" => compare(c, pr, p),
        "errors" => single(errors(c, baseline, pr, p), c, pr, p),
        "latency" => single(latency(c, baseline, pr, p), c, pr, p),
        other => panic!("{}: judge {other}", case.name),
    }
}

#[test]
fn bucket_representatives_match_the_layout_reproduced_in_python() {
    for (i, want) in reference().representatives {
        assert_eq!(crate::stats::bucket_representative(i), want, "bucket {i}");
    }
}

#[test]
fn half_widths_match_the_root_of_the_likelihood_ratio() {
    for h in reference().half_widths {
        let got = half_width(h.v, h.tau2, h.alpha);
        assert!(
            close(got, h.w),
            "v {} tau2 {} alpha {}: {got} vs {}",
            h.v,
            h.tau2,
            h.alpha,
            h.w
        );
    }
}

#[test]
fn every_case_matches_the_reference() {
    let cases = reference().cases;
    assert!(cases.len() >= 20, "{} cases", cases.len());
    let mut wrong = Vec::new();
    for case in &cases {
        let got = judge(case);
        let want = &case.expected;
        let mut check = |ok: bool, what: &str, g: String, w: String| {
            if !ok {
                wrong.push(format!("{}: {what}: got {g}, want {w}", case.name));
            }
        };
        check(
            got.outcome == want.outcome,
            "outcome",
            format!("{:?}", got.outcome),
            format!("{:?}", want.outcome),
        );
        check(
            close(got.alpha, want.alpha),
            "alpha",
            got.alpha.to_string(),
            want.alpha.to_string(),
        );
        check(
            got.canary_requests == want.canary_requests
                && got.primary_requests == want.primary_requests,
            "requests",
            format!("{} / {:?}", got.canary_requests, got.primary_requests),
            format!("{} / {:?}", want.canary_requests, want.primary_requests),
        );
        check(
            close(got.evidence, want.evidence),
            "evidence",
            got.evidence.to_string(),
            want.evidence.to_string(),
        );
        check(
            needed_close(got.needed, want.needed),
            "needed",
            format!("{:?}", got.needed),
            format!("{:?}", want.needed),
        );
        check(
            got.quantities.len() == want.quantities.len(),
            "quantities",
            got.quantities.len().to_string(),
            want.quantities.len().to_string(),
        );
        for (g, w) in got.quantities.iter().zip(&want.quantities) {
            let n = &w.name;
            let f = |x: Option<f64>| format!("{x:?}");
            check(g.name == *n, "name", g.name.clone(), n.clone());
            check(
                g.outcome == w.outcome,
                &format!("{n} outcome"),
                format!("{:?}", g.outcome),
                format!("{:?}", w.outcome),
            );
            check(
                close_opt(g.estimate, w.estimate),
                &format!("{n} estimate"),
                f(g.estimate),
                f(w.estimate),
            );
            check(
                close_opt(g.lower, w.lower),
                &format!("{n} lower"),
                f(g.lower),
                f(w.lower),
            );
            check(
                close_opt(g.upper, w.upper),
                &format!("{n} upper"),
                f(g.upper),
                f(w.upper),
            );
            check(
                close(g.pass_below, w.pass_below) && close(g.fail_above, w.fail_above),
                &format!("{n} lines"),
                format!("{} / {}", g.pass_below, g.fail_above),
                format!("{} / {}", w.pass_below, w.fail_above),
            );
            check(
                close(g.evidence, w.evidence),
                &format!("{n} evidence"),
                g.evidence.to_string(),
                w.evidence.to_string(),
            );
            check(
                needed_close(g.needed, w.needed),
                &format!("{n} needed"),
                format!("{:?}", g.needed),
                format!("{:?}", w.needed),
            );
        }
    }
    assert!(
        wrong.is_empty(),
        "{} disagreements with reference.json:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn the_reference_covers_every_outcome_and_baseline() {
    let cases = reference().cases;
    let has = |pred: &dyn Fn(&Case) -> bool| cases.iter().any(pred);
    for outcome in [Outcome::Pass, Outcome::Fail, Outcome::Inconclusive] {
        assert!(has(&|c| c.expected.outcome == outcome), "{outcome:?}");
    }
    assert!(has(&|c| c.expected.needed.is_some_and(|n| n > 10)));
    for (judge, against) in [("errors", "threshold"), ("latency", "threshold")] {
        assert!(has(&|c| c.judge == judge && c.baseline.against == against));
    }
}
