//! The rollout engine (DESIGN §6): Flagger's analysis loop, without Kubernetes.
//!
//! # Layout
//! - [`spec`], [`machine`]: PURE. What a canary asks for, and the state machine
//!   (`plan` + `step`) that decides every transition. No IO, no clock, no randomness:
//!   the machine's module doc is the rule book and the contract with the driver.
//! - [`convert`]: PURE. A validated `canaries[]` entry → the machine's spec; the
//!   machine's traffic commands → route edits (weights, A/B `match`, mirroring, session
//!   affinity, slot swap).
//! - [`dataplane`]: the proxies a canary drives: this process's table store
//!   ([`dataplane::InProcess`]) or other weirs over their control API
//!   ([`dataplane::Remote`]), as a [`dataplane::Fleet`] that writes to all of them and
//!   sums their stats.
//! - [`metrics`]: the built-in checks (`request-success-rate`, `request-duration`, the
//!   `baseline-comparison` judge) from the summed stats, with the no-traffic guard, and
//!   custom Prometheus queries; [`templates`] renders `metricTemplates` and queries with
//!   their variables, [`web_metric`] is the `web` provider (JSON over HTTP, a JSONPath).
//! - [`webhooks`]: Flagger's webhook payload and pass rule, retries, and the per-canary
//!   queue of non-gating calls.
//! - [`driver`]: the [`Engine`]: one task per canary running tick → plan → hooks and
//!   metrics → step → persist → apply → publish, manual commands, revision watching and
//!   the state file that lets a restarted weir continue a run.
//! - [`exporter`]: the rollout series of `/metrics` (and Flagger's names), kept from the
//!   states the driver shows.
//! - [`alerts`]: notifications of the canaries' events to chat services and webhooks
//!   (`alertProviders`, `analysis.alerts`), off the tick path.
//! - [`http`]: the small HTTP client all of the above share (bounded time and size,
//!   `http://` and `https://`).
//! - [`api`]: the canary endpoints of the control API (`/api/v1/canaries...`).
//!
//! What the engine must never do: block or slow the proxy's request path (it runs in
//! its own tasks and writes the table through the store, one validated swap per change),
//! pass a check it could not measure, or leave traffic shifted with no engine watching
//! it (see the restart rules in [`driver`]).

pub mod alerts;
pub mod api;
pub mod convert;

pub mod dataplane;
pub mod driver;
pub mod exporter;
pub mod http;
pub mod machine;
pub mod metrics;
pub mod spec;
pub mod templates;
pub mod web_metric;
pub mod webhooks;

pub use convert::{canary_def, CanaryDef, RouteChange};
pub use driver::{
    CanaryStatus, CommandOutcome, Engine, EngineError, EngineOptions, EventSink, LocalPlane,
    RolloutEvent,
};
pub use machine::{ManualCommand, Phase};
