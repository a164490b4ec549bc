//! The endpoint rolling update as a client reads it: the answer to
//! `PUT /api/v1/backends/{name}/endpoints` and the `rollingUpdate` member of
//! `GET /api/v1/backends/{name}` (docs/endpoints.md). Only the members a client acts on
//! are typed here; the server's document has more (every endpoint, limits as written),
//! which serde skips. Each typed member is required.

use serde::{Deserialize, Serialize};

/// The body of `PUT /api/v1/backends/{name}/endpoints`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointsRequest {
    /// The new endpoint list, `host:port` each.
    pub endpoints: Vec<String>,
}

/// The 202 answer to the write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointsAccepted {
    /// The table version the write produced.
    pub version: u64,
    /// The update the write started.
    pub rollout: AcceptedRollout,
}

/// The update a write started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AcceptedRollout {
    /// Its generation: a status of an older generation is not this update's.
    pub generation: u64,
    /// The endpoint list it rolls to.
    pub desired: Vec<String>,
}

/// The `rollingUpdate` member of `GET /api/v1/backends/{name}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollingSummary {
    /// Update generation.
    pub generation: u64,
    /// Endpoints in the desired list.
    pub desired: usize,
    /// Ready endpoints in rotation (new and old).
    pub ready: usize,
    /// Desired endpoints in rotation.
    pub updated: usize,
    /// Old endpoints still in rotation.
    pub old: usize,
    /// All endpoints in rotation.
    pub total: usize,
    /// Endpoints removed from rotation whose requests are finishing.
    pub draining: usize,
    /// `Progressing`, `Complete` or `Stalled`.
    pub phase: String,
    /// The limits resolved against `desired`.
    pub resolved: ResolvedLimits,
    /// Without progress for this long the update is `Stalled`.
    pub progress_deadline_ms: u64,
    /// Time since the last progress.
    pub ms_since_progress: u64,
    /// Every endpoint known (in rotation, joining, draining).
    pub endpoints: Vec<RollingEndpoint>,
    /// Recent events, oldest first.
    pub events: Vec<RollingEvent>,
}

/// `maxSurge` / `maxUnavailable` as counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedLimits {
    /// Endpoints the rotation may hold above `desired`.
    pub max_surge: usize,
    /// Ready endpoints the rotation may fall below `desired`.
    pub max_unavailable: usize,
}

/// One endpoint of the update.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollingEndpoint {
    /// `host:port`.
    pub address: String,
    /// In the desired list.
    pub desired: bool,
    /// In the rotation now.
    pub in_rotation: bool,
    /// Passed its health check.
    pub ready: bool,
    /// Health probes failed in a row.
    pub failed_probes: u32,
}

/// One event of the backend's updates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollingEvent {
    /// `updateStarted`, `added`, `ready`, `stalled`, `complete`, ...
    pub kind: String,
    /// The update it belongs to.
    pub generation: u64,
    /// Human-readable detail.
    pub message: String,
}
