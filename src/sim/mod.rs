//! `weir sim judge`: the PURE judges replayed on seeded synthetic traffic, to measure
//! how often each one rolls back a good canary, promotes a bad one, or cannot decide,
//! and how long it takes.
//!
//! # The model
//!
//! - **Traffic**: Poisson arrivals at the scenario's `rps` on the route; the canary gets
//!   its weight's share. Within a check interval the weight is fixed, so a window's
//!   requests are drawn at once (a sum of per-second Poisson counts is Poisson).
//! - **Errors**: each request fails with the side's rate (the primary's base rate, the
//!   canary's base + `errorDeltaPp`). **Latency**: log-normal (median, sigma), the
//!   canary's times `latencyFactor`, recorded in weir's histogram buckets.
//! - **The run**, as the rollout engine drives a canary: the weight starts at
//!   [`START_WEIGHT`] %, a passing check adds [`STEP_WEIGHT`] up to [`MAX_WEIGHT`], a
//!   passing check at the max promotes; a check every `interval`; a run still going
//!   after `maxChecks` checks is undecided.
//! - **The judges**, each on the same requests (`traffic` says how):
//!   - `threshold`: Flagger's built-ins over the last interval: success rate ≥ 99 %,
//!     P99 ≤ `p99MaxMs`, at least 10 canary requests; anything else is a failed
//!     check, and [`FAILED_CHECKS_THRESHOLD`] of them roll back.
//!   - `comparison`: `baseline-comparison` with its defaults over the last interval,
//!     passing at a score of 90 (both quantities Pass); NoData (below 100 requests a
//!     side) is a failed check, as in weir; the same rollback threshold.
//!   - `sequential`: `stats::sequential::compare` over everything since the run
//!     started, alpha 0.05, 1 pp of errors, 1.1× latency: Pass steps, Fail rolls back
//!     at once, Inconclusive holds (no step, no failed check).
//!
//! Every run has its own seed, derived from `--seed`, the scenario's name and rps and
//! the run's number; the same arguments give the same report on any machine and with
//! any number of threads.

mod judges;
mod report;
mod scenario;
mod traffic;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::process::ExitCode;

pub use judges::{Ending, JudgeKind, MIN_REQUESTS, MIN_SUCCESS_PCT, PASS_SCORE};
pub use report::{JudgeResult, Report, ScenarioResult};
pub use scenario::{defaults, parse, Scenario, MAX_CHECKS, MAX_RPS};
pub use traffic::{AliasTable, Counts, Poisson, Traffic};

/// The canary weight of a run's first analysed interval, percent.
pub const START_WEIGHT: u32 = 10;
/// Added per passing check.
pub const STEP_WEIGHT: u32 = 10;
/// The last weight; a passing check there promotes.
pub const MAX_WEIGHT: u32 = 50;
/// Failed checks that roll a run back (Flagger's usual `threshold`).
pub const FAILED_CHECKS_THRESHOLD: u32 = 5;

/// Most runs per scenario.
pub const MAX_RUNS: u32 = 1_000_000;

/// How much to simulate.
#[derive(Clone, Debug)]
pub struct Options {
    /// Runs per scenario.
    pub runs: u32,
    /// Where every run's seed comes from.
    pub seed: u64,
    /// The judges to replay (the table's order is this one).
    pub judges: Vec<JudgeKind>,
    /// Worker threads; the report does not depend on it.
    pub threads: usize,
}

impl Options {
    /// Every judge, on the machine's cores.
    pub fn new(runs: u32, seed: u64) -> Options {
        Options {
            runs,
            seed,
            judges: JudgeKind::ALL.to_vec(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// SplitMix64's finaliser: spreads nearby inputs over the whole range.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed of run `run` of `s`: from the scenario's identity, not its position, so a
/// scenario file that picks a few scenarios reproduces their rows of the full table.
pub fn run_seed(seed: u64, s: &Scenario, run: u32) -> u64 {
    // FNV-1a of the name: stable across platforms and Rust versions.
    let name = s.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    mix(mix(mix(seed) ^ name) ^ s.rps.to_bits()) ^ mix(u64::from(run))
}

/// Runs every scenario `opts.runs` times with every judge of `opts`.
pub fn simulate(scenarios: &[Scenario], opts: &Options) -> Report {
    let results = scenarios
        .iter()
        .map(|s| {
            let traffic = Traffic::new(s);
            let endings = run_all(s, &traffic, opts);
            let worse = s.canary_is_worse();
            let judges = opts
                .judges
                .iter()
                .enumerate()
                .map(|(j, &kind)| {
                    let mine: Vec<Ending> = endings.iter().map(|e| e[j]).collect();
                    JudgeResult::new(kind, worse, &mine)
                })
                .collect();
            ScenarioResult {
                scenario: s.clone(),
                canary_is_worse: worse,
                judges,
            }
        })
        .collect();
    Report {
        runs: opts.runs,
        seed: opts.seed,
        scenarios: results,
    }
}

/// Every run of one scenario, in run order, spread over the threads in contiguous
/// blocks (each run's seed is its own, so the split changes nothing).
fn run_all(s: &Scenario, traffic: &Traffic, opts: &Options) -> Vec<Vec<Ending>> {
    let one = |run: u32| judges::run(s, traffic, &opts.judges, run_seed(opts.seed, s, run));
    let threads = opts.threads.clamp(1, 64).min(opts.runs.max(1) as usize) as u32;
    if threads <= 1 {
        return (0..opts.runs).map(one).collect();
    }
    let block = opts.runs.div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let from = t * block;
                let to = ((t + 1) * block).min(opts.runs);
                scope.spawn(move || (from..to).map(one).collect::<Vec<_>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(v) => v,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

/// `weir sim judge`: the default scenarios or a file's, a table or `--json`.
pub fn judge_main(runs: u32, seed: u64, scenarios: Option<&Path>, json: bool) -> ExitCode {
    if runs == 0 || runs > MAX_RUNS {
        eprintln!("--runs must be 1..={MAX_RUNS} (got {runs})");
        return ExitCode::from(2);
    }
    let list = match scenarios {
        None => defaults(),
        Some(path) => {
            let text = match std::fs::read_to_string(path) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("{}: {e}", path.display());
                    return ExitCode::from(2);
                }
            };
            match parse(&text) {
                Ok(list) => list,
                Err(errors) => {
                    for e in &errors {
                        eprintln!("{}: {e}", path.display());
                    }
                    return ExitCode::from(2);
                }
            }
        }
    };
    let started = std::time::Instant::now();
    let report = simulate(&list, &Options::new(runs, seed));
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("cannot write the report: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        println!(
            "{runs} runs per scenario, seed {seed}; weight {START_WEIGHT}% + {STEP_WEIGHT} per pass up to {MAX_WEIGHT}% (a pass there promotes)"
        );
        println!();
        print!("{}", report.table());
        println!();
        println!("false rollback: rolled back a canary that is not worse (A/A); false promotion: promoted a worse one.");
    }
    // On stderr: the report itself stays the same on every machine.
    eprintln!(
        "simulated {} runs in {:.2}s",
        u64::from(runs) * list.len() as u64,
        started.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}
