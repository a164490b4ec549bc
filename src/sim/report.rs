//! What the runs add up to, per scenario and judge: the table and its JSON form.

use serde::{Deserialize, Serialize};

use super::judges::{Ending, JudgeKind};
use super::scenario::Scenario;

/// Every scenario's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Runs per scenario.
    pub runs: u32,
    /// The seed every run's own seed is derived from.
    pub seed: u64,
    /// In the order given.
    pub scenarios: Vec<ScenarioResult>,
}

/// One scenario's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScenarioResult {
    /// What was simulated.
    pub scenario: Scenario,
    /// Whether a promotion is a false one (else a rollback is).
    pub canary_is_worse: bool,
    /// One per judge.
    pub judges: Vec<JudgeResult>,
}

/// One judge's endings over a scenario's runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JudgeResult {
    /// Which judge.
    pub judge: JudgeKind,
    /// Runs it promoted.
    pub promoted: u32,
    /// Runs it rolled back.
    pub rolled_back: u32,
    /// Runs still undecided at the scenario's last check.
    pub undecided: u32,
    /// Share of runs rolled back although the canary is not worse; none when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub false_rollback_rate: Option<f64>,
    /// Share of runs promoted although the canary is worse; none when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub false_promotion_rate: Option<f64>,
    /// Median seconds from the start to a promotion or rollback, over the decided runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_decision_secs: Option<f64>,
}

impl JudgeResult {
    /// Counts `endings` (one per run).
    pub fn new(judge: JudgeKind, canary_is_worse: bool, endings: &[Ending]) -> JudgeResult {
        let mut times = Vec::new();
        let (mut promoted, mut rolled_back, mut undecided) = (0u32, 0u32, 0u32);
        for e in endings {
            match *e {
                Ending::Promoted(t) => {
                    promoted += 1;
                    times.push(t);
                }
                Ending::RolledBack(t) => {
                    rolled_back += 1;
                    times.push(t);
                }
                Ending::Undecided => undecided += 1,
            }
        }
        let runs = endings.len().max(1) as f64;
        times.sort_unstable();
        let median = match times.len() {
            0 => None,
            n if n % 2 == 1 => Some(times[n / 2] as f64),
            n => Some((times[n / 2 - 1] + times[n / 2]) as f64 / 2.0),
        };
        JudgeResult {
            judge,
            promoted,
            rolled_back,
            undecided,
            false_rollback_rate: (!canary_is_worse).then(|| f64::from(rolled_back) / runs),
            false_promotion_rate: canary_is_worse.then(|| f64::from(promoted) / runs),
            median_decision_secs: median,
        }
    }
}

impl Report {
    /// The results as a plain table, one line per scenario and judge.
    pub fn table(&self) -> String {
        let header = [
            "scenario",
            "rps",
            "judge",
            "promoted",
            "rolled back",
            "undecided",
            "false rollback",
            "false promotion",
            "median decision",
        ];
        let pct = |x: Option<f64>| x.map_or("-".to_string(), |r| format!("{:.1}%", 100.0 * r));
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        for s in &self.scenarios {
            for j in &s.judges {
                rows.push(vec![
                    s.scenario.name.clone(),
                    format!("{}", s.scenario.rps),
                    j.judge.as_str().to_string(),
                    j.promoted.to_string(),
                    j.rolled_back.to_string(),
                    j.undecided.to_string(),
                    pct(j.false_rollback_rate),
                    pct(j.false_promotion_rate),
                    j.median_decision_secs
                        .map_or("-".to_string(), |t| format!("{t}s")),
                ]);
            }
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for r in &rows {
            let cells: Vec<String> = r
                .iter()
                .enumerate()
                .map(|(c, cell)| {
                    // Names left, numbers right, as a reader scans them.
                    if c == 0 || c == 2 {
                        format!("{cell:<w$}", w = widths[c])
                    } else {
                        format!("{cell:>w$}", w = widths[c])
                    }
                })
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}
