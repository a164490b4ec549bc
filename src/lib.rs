//! weir: a traffic-splitting L7 reverse proxy with a built-in
//! progressive-delivery engine (Flagger's analysis loop, without a cluster).
//!
//! # Layout
//! - [`cli`]: the clap command line (`serve`, `check`, `echo`, `ctl`, `demo`).
//! - [`app`]: wiring: build the state, bind listeners, admin API and engine; drain on shutdown.
//! - [`config`]: raw serde schema → validated config → compiled routing table, errors with field paths.
//! - [`routing`]: PURE route lookup, A/B matchers, weighted split, `decide()`.
//! - [`affinity`]: PURE sticky canary/primary cookies.
//! - [`proxy`]: the data plane: listeners, request path, upstream client, errors.
//! - [`mirror`]: bounded shadow traffic to the canary.
//! - [`stats`]: PURE windowed success rate and latency histograms.
//! - [`control`]: the table store (one `ArcSwap`) and the admin API.
//! - [`endpoints`]: health checks, outlier ejection, readiness-gated rolling updates (pure steps + driver).
//! - [`echo`]: the small backend used by tests, demos and benchmarks.

pub mod affinity;
pub mod app;
pub mod cli;
pub mod config;
pub mod control;
pub mod echo;
pub mod endpoints;
pub mod mirror;
pub mod proxy;
pub mod routing;
pub mod stats;
