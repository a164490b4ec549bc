//! weir: a traffic-splitting L7 reverse proxy with a built-in
//! progressive-delivery engine (Flagger's analysis loop, without a cluster).
//!
//! # Layout
//! - [`cli`]: the clap command line (`serve`, `check`, `echo`, `ctl`, `load`, `demo`, `sim`, `import`).
//! - [`app`]: wiring: build the state, bind listeners, admin API and engine; drain on shutdown.
//!   Composes the admin API's route table from the features (`app::api_routes`).
//! - [`config`]: raw serde schema → validated config → compiled routing table, errors with field paths;
//!   also the `cluster:` settings, PEM/CA file loading, the raw affinity-state rule, the PURE syntax of
//!   Flagger's query templates (`config::template`, shared by validation and the engine) and the one list of the series
//!   weir exports (`config::series`, held to the exporters by their tests); `config::diagnostics`
//!   collects every parse and validation error and warning of a file and renders them as cargo does
//!   (`weir check`, `weir serve`, a SIGHUP reload).
//! - [`routing`]: PURE route lookup, A/B matchers, weighted split, `decide()`.
//! - [`affinity`]: PURE sticky canary/primary cookies and the rule that renews their values.
//! - [`headers`]: PURE HTTP header facts shared by config and the proxy (the hop-by-hop table).
//! - [`text`]: PURE untrusted text made safe where it is shown (a terminal, a chat message) and secret
//!   addresses kept out of it (`scheme://host/…`); the one sanitiser every layer uses.
//! - [`dataplane`]: data-plane runtime state: the table store (one `ArcSwap`) with its snapshot and
//!   per-route handles, backends, endpoint state (`dataplane::endpoints`: PURE health, outlier and
//!   rolling-update steps, each backend's `EndpointControl`), mirror counters, the Prometheus registry.
//! - [`proxy`]: the data plane: listeners, the request core (`proxy::phases`) and its two transports: the HTTP/1
//!   fast path (`proxy::express`, clear-text HTTP/1.1 as bytes), which hands a connection it does not serve to
//!   the hyper path (`proxy::service`, also HTTP/2 and TLS) through `proxy::server`; upstream clients, errors,
//!   mirroring.
//! - [`stats`]: PURE windowed success rate and latency histograms.
//! - [`clock`]: the time the long-running drivers read and wait on (system, or tokio's paused time in tests).
//! - [`wire`]: the admin API's JSON documents as types (Serialize + Deserialize), shared by the server and its clients.
//! - [`reload`]: SIGHUP re-reads the config file and applies its routing table (never a canary-driven route, never an invalid file).
//! - [`control`]: the admin API framework (listener, route table, auth, errors, JSON helpers,
//!   OpenAPI), its core routes and the event bus; the `Host` and cross-site checks
//!   (`control::guard`) and the connection slots that idle connections give up
//!   (`control::conns`).
//! - [`table_api`]: the admin API's table, route, backend and stats handlers.
//! - [`ctl`]: `weir ctl`, the command-line client of the admin API (its canary commands in `ctl::canaries`,
//!   the live view of one release in `ctl::live`, `deploy` in `ctl::deploy`).
//! - [`load`]: `weir load URL`, a small bounded load generator (per-second summaries) for demos and quick starts.
//! - [`endpoints`]: the endpoint feature: the tasks that probe endpoints and tick rolling updates, and the
//!   endpoint routes of the admin API (the state they drive is `dataplane::endpoints`).
//! - [`providers`]: endpoint lists from outside the file: the Docker provider (container labels and
//!   events → rolling updates, revisions for the engine) and `GET /api/v1/providers`.
//! - [`rollout`]: the progressive-delivery engine: PURE state machine, driver, data planes, webhooks, metric checks
//!   (built-ins, Prometheus, `metricTemplates` with the `web` provider),
//!   its `/metrics` series (`rollout::exporter`, also under Flagger's names).
//! - [`console`]: the web console at `/ui/` (files compiled in, strict CSP); it reads the API like any client.
//! - [`cluster`]: fleet coordination through etcd: shard claims with lease heartbeats, PURE canary → shard assignment, one owner per canary.
//! - [`import`]: `weir import flagger`: Flagger's Canary, MetricTemplate and AlertProvider manifests → a weir config
//!   (PURE mapping; the fields it cannot map listed with the reason, the metrics it cannot complete kept for
//!   `weir check` to refuse).
//! - [`sim`]: `weir sim judge`, the PURE judges (threshold, comparison, sequential) replayed on seeded
//!   synthetic traffic: false rollbacks, false promotions and time to a decision per scenario.
//! - [`demo`]: `weir demo`, a release end to end in one process (and its webhook receiver and cookie jar fixtures).
//! - [`probe`]: `weir probe URL`, the blocking readiness check used by the image's HEALTHCHECK.
//! - [`echo`]: the small backend used by tests, demos and benchmarks.
//!
//! # Layering
//! A module imports only modules below it (`use crate::…`), bottom to top:
//! 1. pure or leaf: `text` (below everything), `stats`, `affinity` (beside `stats`), `routing` (uses `affinity`), `headers`,
//!    `clock`;
//! 2. `config`, then `wire` (the API's documents; the table is config's raw schema);
//! 3. `dataplane` (state the proxy reads and the control plane writes);
//! 4. `proxy`, `control` (the API framework, knowing no feature), `reload`;
//! 5. features with their handlers: `table_api`, `endpoints`, `providers`, `rollout`, `cluster`, then `console`;
//! 6. `app` (composition), `ctl`, `load`, `demo`, `sim`, `import`, `cli`.
//!
//! `tests/it/layering.rs` holds every `crate::…` path in `src/` to this order.

pub mod affinity;
pub mod app;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod console;
pub mod control;
pub mod ctl;
pub mod dataplane;
pub mod demo;
pub mod echo;
pub mod endpoints;
pub mod headers;
pub mod import;
pub mod load;
pub mod probe;
pub mod providers;
pub mod proxy;
pub mod reload;
pub mod rollout;
pub mod routing;
pub mod sim;
pub mod stats;
pub mod table_api;
pub mod text;
pub mod wire;
