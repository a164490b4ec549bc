//! Endpoint management: active health checks, passive outlier ejection and
//! readiness-gated rolling updates of a backend's endpoint list (DESIGN §7).
//!
//! `rolling`, `health` and `outlier` are PURE (time is a parameter, no IO):
//! one tick of a rolling update is one call of `rolling::step`, as in the
//! Kubernetes Deployment controller. Around them:
//! - [`runtime`]: each backend's state (its `EndpointControl`): starts updates on
//!   table writes, applies one step per tick to the proxy's rotation, drains, and
//!   counts upstream failures for outlier ejection on the request path. No IO.
//! - [`driver`]: the tasks that probe endpoints and tick, one per backend.
//! - [`api`]: `PUT /api/v1/backends/{name}/endpoints` and the endpoint part of
//!   `GET /api/v1/backends/{name}`, as plain functions over the table store.

pub mod api;
pub mod driver;
pub mod health;
pub mod outlier;
pub mod rolling;
pub mod runtime;
