//! Data-plane runtime state: what the proxy reads on every request and the
//! control plane writes, kept below both so neither imports the other.
//!
//! - [`store`]: the one `ArcSwap` table ([`store::TableStore`]) with its
//!   [`store::Snapshot`] and per-route [`store::RouteRuntime`] handles; every
//!   write is validated and swapped whole (the write lock and the swap are one
//!   invariant, so they stay together).
//! - [`backend`]: backends and endpoints by name, kept across swaps.
//! - [`idle_pool`]: the fast path's idle upstream connections, per endpoint.
//! - [`mirror`]: per-route mirror counters and in-flight cap.
//! - [`metrics`]: the per-app Prometheus registry and its per-route handles.
//! - [`providers`]: what endpoint providers (Docker) share with the engine and the
//!   API: endpoint revisions from labels, each provider's connection state.
//! - [`resilience`]: retry budgets, rate-limit buckets and circuit breakers (PURE
//!   decisions on a passed-in clock, and the state they keep).
//!
//! Layering: imports only `config`, `wire` (documents) and `stats`; `proxy`, `control` and the
//! features (`endpoints`, `rollout`, `cluster`, `table_api`) build on it.

pub mod backend;
pub mod endpoints;
pub mod idle_pool;
pub mod metrics;
pub mod mirror;
pub mod providers;
pub mod resilience;
pub mod store;
