//! Endpoint state: what each backend knows of its endpoints, read by the
//! proxy on every request and changed by the endpoints driver and the API.
//!
//! `rolling`, `health` and `outlier` are PURE (time is a parameter, no IO):
//! one tick of a rolling update is one call of `rolling::step`, as in the
//! Kubernetes Deployment controller. [`runtime`] holds each backend's state
//! (its `EndpointControl`): starts updates on table writes, applies one step
//! per tick to the proxy's rotation, drains, and counts upstream failures for
//! outlier ejection on the request path. No IO. The tasks that probe and tick
//! are the `endpoints` feature, above this layer.

pub mod health;
pub mod outlier;
pub mod rolling;
pub mod runtime;
