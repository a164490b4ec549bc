//! The control plane of one weir: the admin HTTP API framework in front of
//! the table store.
//!
//! - `api`: the admin listener, the route table and dispatch, auth and error
//!   responses, JSON helpers and the OpenAPI document. It knows no feature:
//!   each feature's handlers are passed in by `app` (see
//!   `app::api_routes`).
//! - `server`: the admin listener loop and request dispatch.
//! - `conns`: the open admin connections, and which idle one gives way when
//!   the listener is full.
//! - `guard`: the `Host` check (`admin.allowedHosts`, 421) and the refusal of
//!   writes a page of another site could send (403).
//! - `core`: the routes every weir serves (probes, `/metrics`,
//!   `/openapi.json`, the event stream).
//! - `auth`: bearer-token check in constant time.
//! - `events`: the event bus behind `GET /api/v1/events` (SSE).
//! - `store`: the table store as the control plane names it (it lives in
//!   `dataplane::store`, below the proxy and this module).
//!
//! Layering: imports `config`, `dataplane` and `stats`; the features
//! (`endpoints::api`, `rollout::api`, `cluster::api`) import this module.

pub mod api;
pub mod auth;
pub mod conns;
pub mod core;
pub mod events;
pub mod guard;
pub mod server;

/// The table store lives in the data-plane state layer; this is its name for
/// callers of the control plane.
pub mod store {
    pub use crate::dataplane::store::*;
}
