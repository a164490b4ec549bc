//! The state record of one canary: what a restart or a new owner continues from.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::raw::RawAffinityState;
use crate::rollout::convert::RouteChange;
use crate::rollout::machine::{CanaryState, Phase};

/// Finished runs kept per canary (oldest dropped first).
pub const HISTORY_LEN: usize = 20;

/// One finished run of a canary, as the console's run history shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RunSummary {
    /// The run's revision.
    pub revision: Option<String>,
    /// `Succeeded` or `Failed`.
    pub result: Phase,
    /// When the run started (ms since the Unix epoch).
    pub started_ms: u64,
    /// When it ended.
    pub finished_ms: u64,
    /// Failed checks it ended with.
    pub failed_checks: u32,
    /// The message of the event that ended it (why it was promoted or rolled back).
    pub reason: String,
}

impl RunSummary {
    /// How long the run took.
    pub fn duration_ms(&self) -> u64 {
        self.finished_ms.saturating_sub(self.started_ms)
    }
}

/// The run a step from `prev` to `next` finished, if it finished one: a run that had
/// started (its analysis or promotion was under way) and is now Succeeded or Failed.
/// `reason` is the message of the step's last event. A run cancelled before it
/// started (Waiting → Aborted) is not a run.
pub fn finished_run(
    prev: &CanaryState,
    next: &CanaryState,
    reason: &str,
    now_ms: u64,
) -> Option<RunSummary> {
    let running = matches!(
        prev.phase,
        Phase::Progressing | Phase::WaitingPromotion | Phase::Promoting | Phase::Finalising
    );
    let ended = matches!(next.phase, Phase::Succeeded | Phase::Failed);
    if !(running && ended) {
        return None;
    }
    Some(RunSummary {
        revision: prev.revision.clone(),
        result: next.phase,
        started_ms: prev.started_at_ms.unwrap_or(now_ms),
        finished_ms: now_ms,
        failed_checks: if next.phase == Phase::Failed {
            next.last_run_failed_checks.max(prev.failed_checks)
        } else {
            prev.failed_checks
        },
        reason: reason.to_string(),
    })
}

/// Appends `run` to `history`, keeping the newest [`HISTORY_LEN`].
pub fn push_history(history: &mut Vec<RunSummary>, run: RunSummary) {
    history.push(run);
    if history.len() > HISTORY_LEN {
        let extra = history.len() - HISTORY_LEN;
        history.drain(..extra);
    }
}

/// The two slots of a route as the engine last wrote or saw them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slots {
    /// The backend serving as primary.
    pub primary: String,
    /// The backend in the canary slot.
    pub canary: String,
}

/// The state file of one canary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Record {
    /// [`STATE_FORMAT`].
    pub format: u32,
    /// The canary.
    pub canary: String,
    /// Its route (a record of another route is ignored).
    pub route: String,
    /// The machine's state.
    pub state: CanaryState,
    /// The slots, so a restart can put a swap back.
    pub slots: Option<Slots>,
    /// The session-affinity cookie values the engine wrote.
    pub affinity_state: Option<RawAffinityState>,
    /// Route writes decided and not yet applied everywhere.
    pub pending: Vec<RouteChange>,
    /// Finished runs, oldest first, at most [`HISTORY_LEN`].
    pub history: Vec<RunSummary>,
    /// When the file was written (ms since the Unix epoch).
    pub saved_at_ms: u64,
}

/// Reads a state file; `None` when missing, unreadable or not this canary's.
pub fn load_record(path: &Path, canary: &str, route: &str) -> Result<Option<Record>, String> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let rec: Record = serde_json::from_slice(&text)
        .map_err(|e| format!("{} is not a weir state file: {e}", path.display()))?;
    if rec.canary != canary || rec.route != route {
        return Err(format!(
            "{} belongs to canary {:?} on route {:?}, not {canary:?} on {route:?}",
            path.display(),
            rec.canary,
            rec.route
        ));
    }
    Ok(Some(rec))
}

/// Writes a state file atomically: a crash leaves the old file or the new one.
pub async fn save_record(path: &Path, rec: &Record) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let data = serde_json::to_vec_pretty(rec)?;
    let tmp = path.with_extension("json.tmp");
    let mut f = tokio::fs::File::create(&tmp).await?;
    f.write_all(&data).await?;
    f.sync_all().await?;
    drop(f);
    tokio::fs::rename(&tmp, path).await?;
    if let Some(dir) = path.parent() {
        // Persist the rename itself; not every platform can open a directory.
        if let Ok(d) = tokio::fs::File::open(dir).await {
            let _ = d.sync_all().await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(phase: Phase, failed: u32) -> CanaryState {
        CanaryState {
            phase,
            failed_checks: failed,
            revision: Some("v2".into()),
            started_at_ms: Some(1_000),
            ..CanaryState::default()
        }
    }

    #[test]
    fn a_run_ends_on_succeeded_or_failed_only_after_it_started() {
        let prev = state(Phase::Finalising, 1);
        let next = state(Phase::Succeeded, 0);
        let run = finished_run(&prev, &next, "Promotion completed", 61_000).unwrap();
        assert_eq!(run.result, Phase::Succeeded);
        assert_eq!(run.revision.as_deref(), Some("v2"));
        assert_eq!(run.duration_ms(), 60_000);
        assert_eq!(run.failed_checks, 1);
        assert_eq!(run.reason, "Promotion completed");

        let prev = state(Phase::Progressing, 2);
        let mut next = state(Phase::Failed, 0);
        next.last_run_failed_checks = 3;
        let run = finished_run(&prev, &next, "Rolled back", 5_000).unwrap();
        assert_eq!((run.result, run.failed_checks), (Phase::Failed, 3));

        // Still running, or never started, or idle to idle: no run ended.
        assert!(finished_run(&prev, &state(Phase::Progressing, 3), "", 9).is_none());
        assert!(finished_run(&state(Phase::Waiting, 0), &state(Phase::Failed, 0), "", 9).is_none());
        assert!(finished_run(
            &state(Phase::Succeeded, 0),
            &state(Phase::Succeeded, 0),
            "",
            9
        )
        .is_none());
    }

    #[test]
    fn history_keeps_the_newest_runs() {
        let mut h = Vec::new();
        for i in 0..(HISTORY_LEN as u64 + 5) {
            push_history(
                &mut h,
                RunSummary {
                    finished_ms: i,
                    ..RunSummary::default()
                },
            );
        }
        assert_eq!(h.len(), HISTORY_LEN);
        assert_eq!(h.first().unwrap().finished_ms, 5);
        assert_eq!(h.last().unwrap().finished_ms, HISTORY_LEN as u64 + 4);
    }

    #[test]
    fn a_record_with_history_round_trips_and_an_old_one_reads_empty() {
        let rec = Record {
            format: 1,
            canary: "app".into(),
            route: "app".into(),
            history: vec![RunSummary {
                revision: Some("v3".into()),
                result: Phase::Failed,
                started_ms: 10,
                finished_ms: 70,
                failed_checks: 2,
                reason: "Canary failed checks threshold reached 2".into(),
            }],
            ..Record::default()
        };
        let text = serde_json::to_string(&rec).unwrap();
        assert!(
            text.contains(r#""history":[{"revision":"v3","result":"Failed""#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), rec);
        let old: Record =
            serde_json::from_str(r#"{"format":1,"canary":"app","route":"app"}"#).unwrap();
        assert!(old.history.is_empty());
    }
}
