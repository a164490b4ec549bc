//! Endpoint management, the feature: the tasks that probe endpoints and tick
//! their rolling updates, and the admin API's endpoint routes (DESIGN §7).
//! The state they drive (health, outlier ejection, the rolling-update step,
//! each backend's `EndpointControl`) lives below the proxy and the control
//! plane, in `dataplane::endpoints`.
//!
//! - [`driver`]: the tasks that probe endpoints and tick, one per backend.
//! - [`api`]: `PUT /api/v1/backends/{name}/endpoints` and the endpoint part of
//!   `GET /api/v1/backends/{name}`, as plain functions over the table store.

pub mod api;
pub mod driver;
