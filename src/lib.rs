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
//! - [`clock`]: the time the long-running drivers read and wait on (system, or tokio's paused time in tests).
//! - [`metrics`]: the per-app Prometheus registry (`/metrics`), handles pre-registered per route.
//! - [`reload`]: SIGHUP re-reads the config file and applies its routing table (never a canary-driven route, never an invalid file).
//! - [`control`]: the table store (one `ArcSwap`), the admin API, auth and the event bus.
//! - [`ctl`]: `weir ctl`, the command-line client of the admin API.
//! - [`endpoints`]: health checks, outlier ejection, readiness-gated rolling updates (pure steps + driver).
//! - [`rollout`]: the progressive-delivery engine: PURE state machine, driver, data planes, webhooks, metric checks.
//! - [`cluster`]: fleet coordination through etcd: shard claims with lease heartbeats, PURE canary → shard assignment, one owner per canary.
//! - [`demo`]: `weir demo`, a release end to end in one process (and its webhook receiver and cookie jar fixtures).
//! - [`probe`]: `weir probe URL`, the blocking readiness check used by the image's HEALTHCHECK.
//! - [`echo`]: the small backend used by tests, demos and benchmarks.

pub mod affinity;
pub mod app;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod control;
pub mod ctl;
pub mod demo;
pub mod echo;
pub mod endpoints;
pub mod metrics;
pub mod mirror;
pub mod probe;
pub mod proxy;
pub mod reload;
pub mod rollout;
pub mod routing;
pub mod stats;
