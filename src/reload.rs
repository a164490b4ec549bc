//! `weir serve` re-reads its config file on SIGHUP, as `nginx -s reload` does.
//!
//! What it applies: the routing table (`backends` and `routes`), through the table
//! store, exactly as `PUT /api/v1/table` does: validated as a whole, swapped
//! atomically under a new version; endpoint-list changes then run as rolling updates.
//! With it `limits.maxTableRegexBytes`, which every later table write is held to.
//! The file is the truth for the table: a route added over the API and not in the
//! file is gone after a reload.
//!
//! What it must never do: apply an invalid file (the running state stays and the
//! errors are returned with their positions); change a route a canary drives (the
//! engine owns its weights, match, mirror, affinity state and, after a swap, its
//! slots: that route keeps its running definition, and the file's applies at the next
//! start); apply listeners, admin, proxy, canaries, metric templates, alert providers, rollout or cluster
//! changes (they are named as needing a restart).

use crate::config::raw::RawConfig;
use crate::config::{self, ConfigErrors};
use crate::dataplane::store::{TableStore, WriteError};
use std::path::Path;

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// The table version now serving.
    pub version: u64,
    /// Canary-driven routes whose file definition differs from the running one
    /// and was therefore not applied.
    pub kept: Vec<String>,
    /// Top-level sections that changed in the file but apply only at a restart.
    pub needs_restart: Vec<&'static str>,
}

/// The config file as it was when the process started: what a reload compares
/// the new file with (the restart-only sections, the canary-driven routes).
#[derive(Debug, Clone)]
pub struct Started {
    raw: RawConfig,
}

impl Started {
    /// `raw` is the file the process started from, as [`config::load_file_with_raw`]
    /// parsed it.
    pub fn new(raw: RawConfig) -> Started {
        Started { raw }
    }
}

/// Re-reads `path` and applies its table to `store`. On `Err` nothing changed.
pub fn reload(path: &Path, started: &Started, store: &TableStore) -> Result<Reloaded, String> {
    // The whole file must validate, not only the table: a reload that would not
    // also start is refused.
    // Errors and warnings in `weir check`'s form, without colour (a log line).
    let checked = config::diagnostics::check_file(path);
    let Some((raw, cfg)) = checked.loaded else {
        return Err(checked.report.render(false));
    };
    if checked.report.warnings() > 0 {
        tracing::warn!("{}", checked.report.render(false));
    }

    let was = &started.raw;
    let needs_restart: Vec<&'static str> = [
        ("listeners", was.listeners != raw.listeners),
        ("admin", was.admin != raw.admin),
        ("proxy", was.proxy != raw.proxy),
        ("canaries", was.canaries != raw.canaries),
        (
            "metricTemplates",
            was.metric_templates != raw.metric_templates,
        ),
        ("alertProviders", was.alert_providers != raw.alert_providers),
        ("rollout", was.rollout != raw.rollout),
        ("cluster", was.cluster != raw.cluster),
    ]
    .into_iter()
    .filter_map(|(name, changed)| changed.then_some(name))
    .collect();

    let running = store.load();
    let mut table = cfg.table.raw;
    let mut kept = Vec::new();
    for name in was.canaries.iter().map(|c| &c.route) {
        let Some(live) = running.spec.raw.routes.iter().find(|r| &r.name == name) else {
            continue;
        };
        match table.routes.iter_mut().find(|r| &r.name == name) {
            Some(r) if r == live => {}
            Some(r) => {
                *r = live.clone();
                kept.push(name.clone());
            }
            None => {
                table.routes.push(live.clone());
                kept.push(name.clone());
            }
        }
    }
    // The file's budget for the table's regexes applies from this write on (the
    // file validated under it); a refused write leaves the running one.
    let was_budget = store.max_table_regex_bytes();
    store.set_max_table_regex_bytes(cfg.limits.max_table_regex_bytes);
    let written = store.replace(table, None, "reload");
    if written.is_err() {
        store.set_max_table_regex_bytes(was_budget);
    }
    match written {
        Ok(snap) => Ok(Reloaded {
            version: snap.version,
            kept,
            needs_restart,
        }),
        Err(WriteError::Invalid(errors)) => Err(ConfigErrors {
            file: path.display().to_string(),
            errors,
        }
        .to_string()),
        Err(WriteError::Conflict { current }) => Err(format!(
            "{}: the table changed during the reload (version {current})",
            path.display()
        )),
        Err(WriteError::NotFound(what)) => Err(format!("{}: {what} not found", path.display())),
    }
}
