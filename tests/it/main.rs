//! The end-to-end tests, one crate: every area is a module here, sharing the
//! fixtures in `support` (backends, proxies, clients) and `proto_support`
//! (certificates, raw sockets, the real binary as a child process).
//!
//! One crate instead of one per file: each crate links the whole library and
//! its dependencies again, which on a 2-core machine cost more than running the
//! tests. `cargo test` builds and runs it with the unit and doc tests; one area
//! alone: `cargo test --test it rollout::`.
//!
//! The one other crate, `tests/streaming.rs`, says at its top why it stands
//! apart.

mod proto_support;
mod support;

mod admin_guard;
mod affinity;
mod alerts;
mod api;
mod check;
mod cli;
mod cluster;
mod cluster_tls;
mod commands;
mod console;
mod ctl;
mod demo;
mod docker_provider;
mod drain;
mod endpoints;
mod express;
mod fleet_acks;
mod fleet_trust;
mod heads;
mod import;
mod judge;
mod layering;
mod limits;
mod load;
mod logs;
mod match_vocabulary;
mod metrics;
mod mirror;
mod parity;
mod per_run;
mod protocols;
mod proxy;
mod readme;
mod reload;
mod resilience;
mod resilience_h2;
mod rollout;
mod sim;
mod stale_pool;
mod templates;
mod tls;
mod uploads;
mod wire;
