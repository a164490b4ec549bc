//! Endpoint management: active health checks, passive outlier ejection and
//! readiness-gated rolling updates of a backend's endpoint list (DESIGN §7).
//!
//! `rolling`, `health` and `outlier` are PURE (time is a parameter, no IO):
//! one tick of a rolling update is one call of `rolling::step`, as in the
//! Kubernetes Deployment controller. The IO driver that probes endpoints and
//! applies the steps to the proxy's rotation lives beside them.

pub mod health;
pub mod outlier;
pub mod rolling;
