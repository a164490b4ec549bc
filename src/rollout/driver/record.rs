//! The state record of one canary: what a restart or a new owner continues from.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::raw::RawAffinityState;
use crate::rollout::convert::RouteChange;
use crate::rollout::machine::CanaryState;

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
