//! Endpoint providers: sources that fill backends' endpoint lists from outside
//! the config file (DESIGN §16), and their admin API route and metrics.
//!
//! - [`docker`]: backends from Docker container labels.
//! - [`api`]: `GET /api/v1/providers` and the `weir_provider_*` series.
//!
//! Layering: a feature above `endpoints` (its writes are the endpoint API's
//! rolling updates); what it shares with the engine and `/readyz` lives in
//! `dataplane::providers`, so nothing below imports this module.

pub mod api;
pub mod docker;
