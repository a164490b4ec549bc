//! The probes' documents (docs/api.md, `GET /readyz`).

use serde::{Deserialize, Serialize};

/// `/readyz`: `{"status": "ready", ...}` or why not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Readiness {
    /// `ready`, `draining`, `no-lease`, ...
    pub status: String,
    /// The table version, when ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table_version: Option<u64>,
    /// Why not ready, when a feature says so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Endpoint providers and whether each is connected (a disconnected one
    /// keeps its backends' last lists, so it does not make weir unready).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<super::providers::ProviderStatusBrief>,
}
