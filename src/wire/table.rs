//! The routing-table documents (docs/api.md): `GET/PUT /api/v1/table`,
//! `GET/PATCH /api/v1/routes/{name}`, `GET /api/v1/backends/{name}` and
//! `GET /api/v1/stats`.
//!
//! The table and its routes are the config's raw schema itself, so what is
//! read can be edited and sent back; the other documents are defined here.

use crate::stats::{Summary, WindowSnapshot};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `GET/PUT /api/v1/table`: the raw table, the schema of the config file.
pub use crate::config::raw::RawTable as Table;

/// `GET/PATCH /api/v1/routes/{name}`: one route as written in the table.
pub use crate::config::raw::RawRoute as Route;

/// The answer to a successful table write: `{"version": 8}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteResult {
    /// The table version after the write (also the `ETag`).
    pub version: u64,
}

/// `GET /api/v1/backends/{name}`: what the proxy sends to now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendStatus {
    /// Backend name.
    pub name: String,
    /// `round-robin` or `least-request`.
    pub load_balancer: String,
    /// The endpoint list of the table (the desired state).
    pub configured: Vec<String>,
    /// Endpoints in rotation now, in order (the actual state).
    pub endpoints: Vec<EndpointStatus>,
    /// Routes using this backend and as what (`primary` or `canary`); a
    /// canary slot at weight 0 is the idle slot of a blue/green pair.
    pub routes: Vec<BackendUse>,
    /// Path answering the endpoints' revision, if configured.
    pub revision_path: Option<String>,
    /// Health checks and outlier detection in force and which endpoints
    /// pass them (`endpoints::runtime::HealthView`), kept as JSON: no client
    /// reads it, and its shape belongs to the endpoints feature.
    pub health: Option<Value>,
    /// The endpoint rolling update: counts, phase, deadline, every endpoint
    /// (joining and draining too) and recent events
    /// (`endpoints::runtime::EndpointsView`), kept as JSON like `health`.
    pub rolling_update: Option<Value>,
}

/// One endpoint in rotation. Every field is required: a document without
/// `ready` or `draining` is an error, never an endpoint that looks ready.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointStatus {
    /// `host:port`.
    pub address: String,
    /// Passing health checks (endpoints without checks are ready).
    pub ready: bool,
    /// Leaving the rotation: gets no new requests.
    pub draining: bool,
    /// Ejected by outlier detection: gets no new requests until re-admitted.
    pub ejected: bool,
    /// Requests in flight now.
    pub in_flight: usize,
}

/// A route that sends traffic to a backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendUse {
    /// Route name.
    pub route: String,
    /// `primary` or `canary`.
    pub role: String,
    /// The route's canary weight.
    pub canary_weight: u8,
}

/// One value per role. All three are required: the server always sends
/// every role, so a missing one is a different document, not an idle role.
/// Fields are in the order the server has always written them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerRole<T> {
    /// Requests served by the canary.
    pub canary: T,
    /// Shadow copies sent to the canary.
    pub mirror: T,
    /// Requests served by the primary.
    pub primary: T,
}

/// `GET /api/v1/stats?route=R`: one route's stats.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteStats {
    /// Route name.
    pub route: String,
    /// Current canary weight (`null` if the route left the table).
    pub canary_weight: Option<u8>,
    /// Primary backend name (`null` if the route left the table).
    pub primary: Option<String>,
    /// Canary backend name, if any.
    pub canary: Option<String>,
    /// Seconds actually covered.
    pub window_secs: u64,
    /// Summary per role.
    pub roles: PerRole<Summary>,
    /// The mergeable histogram snapshot per role: a remote engine sums these
    /// over replicas ([`WindowSnapshot::merge`]) and takes percentiles of
    /// the sum.
    pub snapshots: PerRole<WindowSnapshot>,
}

/// `GET /api/v1/stats` without `route`: every route of the table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatsDoc {
    /// The window asked for, in seconds.
    pub window_secs: u64,
    /// One entry per route of the table.
    pub routes: Vec<RouteStats>,
}
