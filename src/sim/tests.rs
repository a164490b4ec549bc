//! The simulator's parts, its determinism, and the sequential judge's error rates on it.

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::*;
use crate::stats::{bucket_index, bucket_representative};

fn scenario(name: &str, rps: f64, errors_pp: f64, factor: f64) -> Scenario {
    Scenario::new(name, rps, errors_pp, factor)
}

#[test]
fn poisson_draws_have_the_mean_and_variance_of_a_poisson() {
    let mut rng = SmallRng::seed_from_u64(11);
    // Both methods: inversion below 10, PTRS from 10.
    for mean in [0.5, 3.0, 9.9, 10.0, 50.0, 500.0] {
        let n = 40_000;
        let draws: Vec<f64> = (0..n)
            .map(|_| Poisson::new(mean).sample(&mut rng) as f64)
            .collect();
        let m = draws.iter().sum::<f64>() / n as f64;
        let v = draws.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64;
        // The sample mean's standard error is sqrt(mean / n); 5 of them fail once in
        // 3.5 million. The variance's is about mean * sqrt(2 / n) (plus a term of
        // the fourth cumulant, mean, which 6 of them cover).
        let se = (mean / n as f64).sqrt();
        assert!((m - mean).abs() < 5.0 * se, "mean {mean}: got {m}");
        let se_v = mean * (2.0 / n as f64).sqrt() + (mean / n as f64).sqrt();
        assert!((v - mean).abs() < 6.0 * se_v, "mean {mean}: variance {v}");
    }
    assert_eq!(Poisson::new(0.0).sample(&mut rng), 0);
}

#[test]
fn the_alias_table_draws_each_bucket_with_its_probability() {
    let p = [0.5, 0.0, 0.25, 0.125, 0.125];
    let table = AliasTable::new(&p);
    let mut rng = SmallRng::seed_from_u64(5);
    let n = 200_000;
    let mut seen = [0u64; 5];
    for _ in 0..n {
        seen[table.sample(&mut rng)] += 1;
    }
    assert_eq!(seen[1], 0, "a bucket of probability 0 is never drawn");
    for (i, &q) in p.iter().enumerate() {
        let share = seen[i] as f64 / n as f64;
        // 5 standard errors of a binomial share.
        let se = (q * (1.0 - q) / n as f64).sqrt();
        assert!((share - q).abs() <= 5.0 * se, "bucket {i}: {share} vs {q}");
    }
}

#[test]
fn log_normal_latencies_land_in_weirs_buckets_around_the_median() {
    let table = AliasTable::log_normal(50.0, 0.5);
    let mut rng = SmallRng::seed_from_u64(9);
    let n = 100_000u64;
    let median = bucket_index(50_000);
    let below = (0..n).filter(|_| table.sample(&mut rng) < median).count() as f64;
    // Half the mass is below 50 ms, less the part of the median's own bucket below it
    // (the bucket is 1/32 wide: under 2.5 % of the mass); 5 standard errors (0.008)
    // either side.
    let share = below / n as f64;
    assert!((0.475 - 0.008..0.5 + 0.008).contains(&share), "{share}");
    assert!(bucket_representative(median).abs_diff(50_000) < 800);
}

#[test]
fn a_window_turns_into_the_snapshot_the_judges_read() {
    let traffic = Traffic::new(&scenario("t", 100.0, 0.0, 1.0));
    let mut rng = SmallRng::seed_from_u64(1);
    let mut w = traffic::Window::default();
    traffic.fill(&mut rng, &mut w);
    let mut c = w.canary_at(MAX_WEIGHT);
    let snap = c.snapshot(10);
    assert_eq!(snap.window_secs, 10);
    assert_eq!(snap.histogram.total(), snap.requests);
    // 500 requests or so at 50 ms median: the median within a few buckets of it.
    let p50 = snap.histogram.quantile(0.5).unwrap() as f64 / 1000.0;
    assert!((40.0..62.0).contains(&p50), "p50 {p50} ms");
    c.clear();
    assert_eq!(c.snapshot(10), crate::stats::WindowSnapshot::empty(10));
}

#[test]
fn a_judge_at_weight_w_sees_w_tenths_of_the_requests() {
    let traffic = Traffic::new(&scenario("t", 1_000.0, 0.0, 1.0));
    let mut rng = SmallRng::seed_from_u64(2);
    let mut w = traffic::Window::default();
    let (mut canary, mut primary) = (0u64, 0u64);
    for _ in 0..20 {
        traffic.fill(&mut rng, &mut w);
        canary += w.canary_at(30).requests;
        primary += w.primary_at(30).requests;
    }
    // 20 windows of 10 s at 1,000 rps: 200,000 requests, 30 % of them to the canary.
    let share = canary as f64 / (canary + primary) as f64;
    let total = (canary + primary) as f64;
    let se = (0.3 * 0.7 / total).sqrt();
    assert!((share - 0.3).abs() < 5.0 * se, "{share}");
    assert!(
        (total - 200_000.0).abs() < 5.0 * 200_000f64.sqrt(),
        "{total}"
    );
}

#[test]
fn the_same_seed_gives_the_same_report_with_any_number_of_threads() {
    let list = vec![
        scenario("A/A", 50.0, 0.0, 1.0),
        scenario("errors +5pp", 500.0, 5.0, 1.0),
    ];
    let one = Options {
        threads: 1,
        ..Options::new(40, 7)
    };
    let two = Options {
        threads: 2,
        ..Options::new(40, 7)
    };
    let a = simulate(&list, &one);
    assert_eq!(a, simulate(&list, &two));
    assert_eq!(a, simulate(&list, &one));
    assert_ne!(a, simulate(&list, &Options::new(40, 8)), "the seed matters");
    // A scenario's rows do not depend on the others beside it, nor on the judges.
    let alone = simulate(&list[1..], &one);
    assert_eq!(alone.scenarios[0], a.scenarios[1]);
    let seq = Options {
        judges: vec![JudgeKind::Sequential],
        ..one.clone()
    };
    let only = simulate(&list, &seq);
    assert_eq!(only.scenarios[0].judges[0], a.scenarios[0].judges[2]);
}

#[test]
fn results_count_every_run_and_rate_only_the_wrong_endings() {
    use judges::Ending::*;
    let endings = [Promoted(50), RolledBack(30), Undecided, RolledBack(90)];
    let good = JudgeResult::new(JudgeKind::Threshold, false, &endings);
    assert_eq!((good.promoted, good.rolled_back, good.undecided), (1, 2, 1));
    assert_eq!(good.false_rollback_rate, Some(0.5));
    assert_eq!(good.false_promotion_rate, None);
    assert_eq!(good.median_decision_secs, Some(50.0));
    let bad = JudgeResult::new(JudgeKind::Threshold, true, &endings[..2]);
    assert_eq!(bad.false_promotion_rate, Some(0.5));
    assert_eq!(bad.median_decision_secs, Some(40.0));
    let none = JudgeResult::new(JudgeKind::Sequential, true, &[Undecided]);
    assert_eq!(none.median_decision_secs, None);
}

#[test]
fn the_judges_follow_the_engines_rules() {
    let opts = Options {
        threads: 1,
        ..Options::new(20, 3)
    };
    // A canary failing half its requests at plenty of traffic: the threshold and the
    // comparison judges need five failed checks (50 s), the sequential one fails at once.
    let r = simulate(&[scenario("broken", 500.0, 50.0, 1.0)], &opts);
    let by = |k: JudgeKind| r.scenarios[0].judges.iter().find(|j| j.judge == k).unwrap();
    for k in [JudgeKind::Threshold, JudgeKind::Comparison] {
        assert_eq!(by(k).rolled_back, 20, "{k:?}");
        assert_eq!(by(k).median_decision_secs, Some(50.0), "{k:?}");
    }
    assert_eq!(by(JudgeKind::Sequential).median_decision_secs, Some(10.0));
    // A/A at plenty of traffic: five passing checks promote at the fifth (50 s).
    let r = simulate(&[scenario("A/A", 2_000.0, 0.0, 1.0)], &opts);
    for j in &r.scenarios[0].judges {
        assert_eq!(j.promoted, 20, "{:?}", j.judge);
        assert_eq!(j.median_decision_secs, Some(50.0), "{:?}", j.judge);
    }
    // No traffic reaching minRequests: the sequential judge holds until the time
    // limit, the others count failed checks.
    let mut quiet = scenario("quiet", 0.1, 0.0, 1.0);
    quiet.max_checks = 8;
    let r = simulate(&[quiet], &opts);
    let by = |k: JudgeKind| r.scenarios[0].judges.iter().find(|j| j.judge == k).unwrap();
    assert_eq!(by(JudgeKind::Sequential).undecided, 20);
    assert_eq!(by(JudgeKind::Comparison).rolled_back, 20);
}

/// The CI assertion: 1,000 runs, seed 1, A/A and +5 pp of errors at 50 rps. The
/// sequential judge's false-rollback rate must stay within alpha plus the Monte-Carlo
/// margin of 1,000 runs (3 standard errors of a binomial proportion at alpha: 0.0207),
/// and it must catch +5 pp in at least 90 % of the runs.
#[test]
fn the_sequential_judge_keeps_its_alpha_and_catches_five_points_of_errors() {
    let alpha = crate::stats::sequential::SequentialParams::DEFAULT.alpha;
    let runs = 1_000u32;
    let list = vec![
        scenario("A/A", 50.0, 0.0, 1.0),
        scenario("errors +5pp", 50.0, 5.0, 1.0),
    ];
    let report = simulate(&list, &Options::new(runs, 1));
    let seq = |i: usize| {
        report.scenarios[i]
            .judges
            .iter()
            .find(|j| j.judge == JudgeKind::Sequential)
            .unwrap()
            .clone()
    };
    let margin = 3.0 * (alpha * (1.0 - alpha) / f64::from(runs)).sqrt();
    let aa = seq(0);
    let false_rollbacks = aa.false_rollback_rate.unwrap();
    assert!(
        false_rollbacks <= alpha + margin,
        "A/A false rollbacks {false_rollbacks} > {alpha} + {margin:.4}"
    );
    let bad = seq(1);
    let caught = f64::from(bad.rolled_back) / f64::from(runs);
    assert!(caught >= 0.9, "+5pp caught in {caught} of the runs");
}

#[test]
fn a_scenario_file_sets_any_field_and_reports_every_error_with_its_path() {
    let list = parse(
        "scenarios:\n  - rps: 50\n  - {rps: 50, errorDeltaPp: 5, interval: 30s, maxChecks: 12}\n  - {name: slow, rps: 5, latencyFactor: 1.5, medianMs: 20, sigma: 0.3}\n",
    )
    .unwrap();
    assert_eq!(list.len(), 3);
    assert_eq!(list[0], scenario("A/A", 50.0, 0.0, 1.0));
    assert_eq!(list[1].name, "errors +5pp");
    assert_eq!((list[1].interval_secs, list[1].max_checks), (30, 12));
    assert_eq!(list[2].name, "slow");
    assert_eq!((list[2].median_ms, list[2].sigma), (20.0, 0.3));
    // JSON is YAML.
    let json = parse(r#"{"scenarios": [{"rps": 500, "latencyFactor": 1.1}]}"#).unwrap();
    assert_eq!(json[0].name, "latency +10%");

    let errors = parse(
        "scenarios:\n  - {rps: 0}\n  - {rps: 5, errorDeltaPp: 120, interval: 1500ms, sigma: -1}\n",
    )
    .unwrap_err();
    for path in [
        "scenarios[0].rps",
        "scenarios[1].errorDeltaPp",
        "scenarios[1].interval",
        "scenarios[1].sigma",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(path)),
            "{path} missing in {errors:?}"
        );
    }
    assert_eq!(errors.len(), 4, "{errors:?}");
    let typo = parse("scenarios:\n  - {rps: 5, errorDelta: 1}\n").unwrap_err();
    assert!(typo[0].contains("errorDelta"), "{typo:?}");
    assert!(parse("scenarios: []\n").is_err());
}

#[test]
fn the_default_set_is_five_kinds_at_three_rates() {
    let d = defaults();
    assert_eq!(d.len(), 15);
    assert_eq!(d.iter().filter(|s| !s.canary_is_worse()).count(), 3);
    for s in &d {
        let mut errors = Vec::new();
        s.validate("s", &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
    }
    let table = simulate(&d[..1], &Options::new(3, 1)).table();
    let header = table.lines().next().unwrap();
    assert!(header.starts_with("scenario  rps  judge"), "{header}");
    assert_eq!(table.lines().count(), 1 + 3);
}
