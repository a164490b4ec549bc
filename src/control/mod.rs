//! The control plane of one weir: the table store every writer goes
//! through, and the admin HTTP API in front of it.
//!
//! - `store`: the one `ArcSwap` routing table, validated writes, versions.
//! - `api`: the admin HTTP API (routes, handlers, the admin listener).
//! - `auth`: bearer-token check in constant time.
//! - `events`: the event bus behind `GET /api/v1/events` (SSE).

pub mod api;
pub mod auth;
pub mod events;
pub mod store;
