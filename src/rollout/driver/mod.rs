//! The engine: one task per canary driving the pure machine against real data planes.
//!
//! # One canary's loop (reconcile and requeue, as a kube-rs controller)
//! 1. **Owed writes.** Route changes decided by a step but not yet applied everywhere
//!    (a data plane was down) are retried first; they are absolute, so a retry is safe.
//!    A data plane that restarted is re-asserted (see *Restart*).
//! 2. **Plan.** [`plan`] says whether a tick is due; if not, the task sleeps until it is,
//!    waking for an operator's command or shutdown.
//! 3. **Observe.** Read the route from every data plane, the slots' revisions (the
//!    `revisionPath` of their endpoints with `watchRevision`, else their endpoint lists),
//!    then call the planned webhooks and take the metric checks in the plan's order,
//!    stopping at the first step that halts the tick. A command arriving meanwhile
//!    cancels the observation (nothing has changed yet) and is handled at once.
//! 4. **Step** with the plan's `now`, then persist the new state *with* the route changes
//!    it implies, publish the events, and apply the changes to every data plane.
//!
//! A data plane that cannot be read skips the tick (nothing is stepped, nothing is
//! counted) and it is retried a few seconds later; the canary's status and a warning
//! event say why.
//!
//! A tick that changes nothing publishes nothing, so the status counts what the loop
//! did: every step in `ticks`, every wake-up that stepped nothing (a skipped tick, an
//! owed write still failing, a fleet replica that may not drive) in `skippedTicks`.
//! Clients wait on them rather than on a clock.
//!
//! # Restart
//! The state file (`<stateDir>/<canary>.json`, written atomically: temp file, fsync,
//! rename) holds the machine's state, the slot names, the session-affinity cookie values,
//! the route writes still owed and the run history, and is written after every step. A restarted engine
//! **continues the run** from it: it re-asserts the recorded traffic on every data plane
//! (a restarted proxy comes back with its config file's weights, and with the slots of
//! the config file rather than those of the last swap), then goes on ticking. The first
//! analysis after a restart waits one full interval, so that the stats window holds
//! traffic measured after the restart rather than an empty window counted as a failed
//! check. A paused canary stays paused. The same re-assertion happens whenever a data
//! plane's table version goes backwards (that proxy restarted). A state file that cannot
//! be read, or that belongs to another route, is ignored: the canary initialises, which
//! routes all traffic to the primary — a safe rollback, never half-shifted traffic.
//! Without `rollout.stateDir` the state lives in memory only and a restarted weir
//! initialises every canary the same way.
//!
//! # Fleets (`cluster:`)
//! With an [`Ownership`] (the `cluster` module), every replica runs a task per canary
//! but only the canary's owner steps it:
//! - **Gate.** Before anything that could write (owed writes, a tick, a command), the
//!   task asks [`Ownership::may_drive`], and it holds the [`Ownership::guard`] across
//!   step → save → apply, so a release waits for a tick in progress.
//! - **Takeover.** On gaining a canary the task loads the record from etcd
//!   ([`Ownership::load_state`]) and continues it exactly as after a restart
//!   (re-assert on every data plane, first analysis after one interval); with no record
//!   it initialises.
//! - **Save.** The record goes to etcd instead of `stateDir`, fenced by the owner key
//!   ([`Ownership::save_state`]): a refused save means the canary was lost, and the
//!   step is dropped (not published, not applied).
//! - **Data planes.** A canary without `dataPlanes` drives this process and every
//!   other live replica's control API ([`Ownership::peers`]); the fleet follows the
//!   members, and a replica that joins gets the recorded traffic re-asserted.
//! - **Not the owner.** The task idles; it refreshes its status from the stored record
//!   now and then (so any replica shows the run), and refuses commands (the API
//!   forwards them to the owner).
//!
//! # Layout
//! - this file: the [`Engine`] (one task per canary), its options and status types;
//! - [`record`]: the state record and its file;
//! - `runner`: one canary's loop, owed writes and re-assertion;
//! - `observe`: one tick's observation (route, revisions, hooks, metrics) and the route
//!   changes made outside the engine;
//! - `commit`: commands, events and hooks of a step, persisting, applying;
//! - `fleet`: the ownership gate, take-over, following the members, the status (and the
//!   rollout series, written with it: see [`super::exporter`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::alerts::{Alerter, NotificationStatus};
use super::convert::{canary_def, CanaryDef};
use super::dataplane::{DataPlane, Fleet, InProcess, Remote};
use super::exporter::RolloutMetrics;
use super::http::HttpClient;
use super::machine::{LastChecks, ManualCommand, MetricResult, Phase};
use super::spec::{MetricSpec, Promotion, Strategy};
use crate::clock::Clock;
use crate::cluster::Ownership;
use crate::config::CanaryConfig;
use crate::dataplane::store::TableStore;

mod acks;
mod commit;
mod fleet;
mod observe;
mod runner;

pub mod record;

use fleet::{applied_revision, build_status};
pub use record::{load_record, save_record, Record, RunSummary, Slots};
use runner::{FleetMode, Runner};

#[cfg(test)]
mod tests;

/// Events kept per canary for `GET /api/v1/canaries/{name}`.
pub const EVENT_RING: usize = 100;

/// Longest wait before retrying a data plane that failed.
pub const RETRY_MAX: Duration = Duration::from_secs(5);

/// Format version of the state file.
pub const STATE_FORMAT: u32 = 1;

/// Receives every rollout event (the control API's event bus, in `app.rs`).
pub type EventSink = Arc<dyn Fn(&RolloutEvent) + Send + Sync>;

/// The proxy of this process, for canaries without `dataPlanes`.
#[derive(Clone)]
pub struct LocalPlane {
    /// Its table store.
    pub store: Arc<TableStore>,
    /// Origin of its stats clock (`ProxyShared::started`).
    pub started: Instant,
}

/// How the engine is started.
#[derive(Clone, Default)]
pub struct EngineOptions {
    /// Where state files go; `None` keeps the state in memory only.
    pub state_dir: Option<PathBuf>,
    /// The in-process data plane.
    pub local: Option<LocalPlane>,
    /// Also send every event there.
    pub sink: Option<EventSink>,
    /// Fleet mode (`cluster:`): only the canaries this replica owns are stepped, their
    /// state lives in etcd (`state_dir` is not used), and canaries without
    /// `dataPlanes` drive every live replica. `None`: this weir is alone.
    pub ownership: Option<Arc<dyn Ownership>>,
    /// Bearer token for the other replicas' control APIs (fleet mode: the
    /// `cluster.peerTokenFile` token, never the admin token).
    pub peer_token: Option<String>,
    /// The machine's time (milliseconds since the Unix epoch, persisted in state
    /// records, so it must mean the same after a restart) and the waits between ticks.
    pub clock: Clock,
    /// Where the rollout series of `/metrics` are kept; `None` exports none.
    pub exporter: Option<Arc<RolloutMetrics>>,
    /// Notifies the events to the canaries' `analysis.alerts` (and keeps the results
    /// the status shows).
    pub alerter: Option<Arc<Alerter>>,
}

/// How often a replica that does not own a canary refreshes its status from the
/// stored record.
pub const FOLLOWER_REFRESH: Duration = Duration::from_secs(2);

/// One transition or notable happening of a canary, with the numbers behind it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutEvent {
    /// The canary.
    pub canary: String,
    /// When (ms since the Unix epoch).
    pub time_ms: u64,
    /// Phase after the event.
    pub phase: Phase,
    /// One word: the machine's [`EventReason`](super::machine::EventReason), or the driver's own (`Restored`,
    /// `DataPlaneError`, `DataPlaneRecovered`, `TickSkipped`, `SlotsChanged`,
    /// `SlotsRestored`, `StateNotSaved`).
    pub reason: String,
    /// Deserves attention (Flagger's Warning events).
    pub warning: bool,
    /// What happened, with weights, check values and hook answers.
    pub message: String,
    /// Canary weight after the event.
    pub canary_weight: u8,
    /// Primary weight after the event.
    pub primary_weight: u8,
    /// A/B or blue/green iterations of the run.
    pub iterations: u32,
    /// Failed checks of the run; once the run has ended, the count it ended with (the
    /// status is back to 0 after a rollback).
    pub failed_checks: u32,
    /// Revision of the run.
    pub revision: Option<String>,
    /// The metric values of the tick that caused the event, if it took any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<MetricResult>,
}

/// What `GET /api/v1/canaries/{name}` shows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStatus {
    /// The canary.
    pub name: String,
    /// Its route.
    pub route: String,
    /// Canary, A/B testing or blue/green.
    pub strategy: Strategy,
    /// Swap or webhook.
    pub promotion: Promotion,
    /// Current phase.
    pub phase: Phase,
    /// Canary weight.
    pub canary_weight: u8,
    /// Primary weight.
    pub primary_weight: u8,
    /// A/B match rules active.
    pub match_active: bool,
    /// Traffic mirrored to the canary.
    pub mirror: bool,
    /// Iterations done.
    pub iterations: u32,
    /// Iterations of an A/B or blue/green run (0 for the canary strategy).
    pub iterations_total: u32,
    /// Failed checks of the run.
    pub failed_checks: u32,
    /// Failed checks that roll back.
    pub threshold: u32,
    /// Inconclusive checks in a row of the run (the sequential judge held the step).
    #[serde(default)]
    pub holds: u32,
    /// Time between two ticks (the analysis `interval`).
    #[serde(default)]
    pub interval_ms: u64,
    /// When the next tick is due (ms since the Unix epoch); `None` while paused or
    /// before the first tick. A time in the past means the tick is under way or
    /// waits for a data plane.
    #[serde(default)]
    pub next_tick_ms: Option<u64>,
    /// Ticks this replica's engine stepped for the canary since it started, whether or
    /// not they changed anything: a client can wait for "N more intervals were
    /// decided" instead of guessing from the clock. Counted in memory only (a
    /// restarted weir starts again from 0).
    #[serde(default)]
    pub ticks: u64,
    /// Wake-ups of the canary's task since it started that stepped nothing: a data
    /// plane could not be read or a route write is still owed (the tick is retried a
    /// few seconds later), or, in a fleet, this replica may not drive the canary (not
    /// its owner, or no valid lease: such a task wakes every 2 s and on every
    /// ownership change). In memory only, like `ticks`.
    #[serde(default)]
    pub skipped_ticks: u64,
    /// The canary weights of a canary-strategy run, step by step (empty for A/B and
    /// blue/green: their plan is `iterationsTotal`).
    #[serde(default)]
    pub weight_plan: Vec<u8>,
    /// The metric checks with their threshold ranges.
    #[serde(default)]
    pub metrics: Vec<MetricSpec>,
    /// Revision of the current (or last) run.
    pub revision: Option<String>,
    /// Revision of the last promotion.
    pub promoted_revision: Option<String>,
    /// A revision waiting for its confirm-rollout tick.
    pub pending_revision: Option<String>,
    /// Paused by an operator.
    pub paused: bool,
    /// Backend serving as primary.
    pub primary_backend: Option<String>,
    /// Backend in the canary slot (the idle slot between runs: deploy the next
    /// version there).
    pub canary_backend: Option<String>,
    /// Last event's message.
    pub message: String,
    /// When the phase last changed (ms since the Unix epoch).
    pub last_transition_ms: u64,
    /// Hook answers and metric values of the last analysed tick.
    pub last_checks: LastChecks,
    /// The data planes driven (`in-process` or URLs).
    pub data_planes: Vec<String>,
    /// Route writes decided but not yet applied everywhere.
    pub pending_writes: usize,
    /// Why the last tick could not run, if it could not.
    pub data_plane_error: Option<String>,
    /// The replicas (or data planes) the run waits for: they have not answered its
    /// last routing step or read; empty when every one has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_for_replicas: Vec<String>,
    /// Since when it waits for them (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_since_ms: Option<u64>,
    /// Fleet mode: the replica that owns (drives) the canary, as last seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Fleet mode: this replica drives the canary now (else the status is the owner's
    /// last stored record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driven_here: Option<bool>,
    /// Recent events, oldest first.
    pub events: Vec<RolloutEvent>,
    /// Finished runs, oldest first (at most [`record::HISTORY_LEN`]; kept across a
    /// restart with `rollout.stateDir`, and in etcd in a fleet).
    #[serde(default)]
    pub history: Vec<RunSummary>,
    /// The last notification per alert provider of this canary's `analysis.alerts`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notifications: Vec<NotificationStatus>,
}

/// The answer to an operator's command.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandOutcome {
    /// False when the command did not apply in the current phase (nothing changed).
    pub accepted: bool,
    /// The events' messages.
    pub message: String,
    /// The canary after the command.
    pub status: CanaryStatus,
}

/// Why a command could not be delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EngineError {
    /// No canary of that name.
    NotFound(String),
    /// The engine is shutting down.
    Stopped,
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::NotFound(n) => write!(f, "no canary named {n:?}"),
            EngineError::Stopped => f.write_str("the rollout engine is stopped"),
        }
    }
}

struct CommandMsg {
    cmd: ManualCommand,
    /// A `start` whose revision must match what the canary slot reports (with
    /// `watchRevision`): refused otherwise.
    check_revision: bool,
    reply: oneshot::Sender<CommandOutcome>,
}

struct CanaryHandle {
    cmd: mpsc::Sender<CommandMsg>,
    status: Arc<Mutex<CanaryStatus>>,
}

/// The rollout engine of one weir: a task per canary.
pub struct Engine {
    canaries: BTreeMap<String, CanaryHandle>,
    alerter: Option<Arc<Alerter>>,
    events: broadcast::Sender<RolloutEvent>,
    shutdown: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Engine {
    /// Starts one task per canary. Fails (starting nothing) when a canary needs the
    /// in-process data plane and there is none, or the state directory cannot be made.
    pub fn start(canaries: &[CanaryConfig], opts: EngineOptions) -> Result<Engine, String> {
        let client = HttpClient::new();
        let fleet_mode = opts.ownership.is_some();
        if let (Some(dir), false) = (&opts.state_dir, fleet_mode) {
            if !canaries.is_empty() {
                std::fs::create_dir_all(dir).map_err(|e| {
                    format!("rollout.stateDir {}: cannot create: {e}", dir.display())
                })?;
            }
        }
        let mut runners = Vec::new();
        for cfg in canaries {
            let def = canary_def(cfg);
            let planes: Vec<Arc<dyn DataPlane>> = if def.data_planes.is_empty() {
                let local = opts.local.as_ref().ok_or_else(|| {
                    format!(
                        "canary {}: no dataPlanes and no in-process proxy to drive",
                        def.spec.name
                    )
                })?;
                vec![Arc::new(InProcess::new(
                    local.store.clone(),
                    local.started,
                    format!("engine:{}", def.spec.name),
                ))]
            } else {
                let client = client
                    .trusting(def.data_plane_ca_file.as_deref())
                    .map_err(|e| format!("canary {}: dataPlaneCaFile: {e}", def.spec.name))?;
                def.data_planes
                    .iter()
                    .map(|u| {
                        Arc::new(Remote::new(
                            u.clone(),
                            def.data_plane_token.clone(),
                            client.clone(),
                        )) as Arc<dyn DataPlane>
                    })
                    .collect()
            };
            runners.push((def, Fleet::new(planes)));
        }
        Ok(Engine::start_on(runners, opts))
    }

    /// Starts one task per canary on the given data planes.
    fn start_on(runners: Vec<(CanaryDef, Fleet)>, mut opts: EngineOptions) -> Engine {
        let client = HttpClient::new();
        if let Some(alerter) = opts.alerter.clone() {
            let inner = opts.sink.take();
            opts.sink = Some(Arc::new(move |e: &RolloutEvent| {
                if let Some(s) = &inner {
                    s(e);
                }
                alerter.on_event(e);
            }));
        }
        let fleet_mode = opts.ownership.is_some();
        let (events, _) = broadcast::channel(1024);
        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut handles = BTreeMap::new();
        let mut tasks = Vec::new();
        for (def, fleet) in runners {
            let name = def.spec.name.clone();
            // In a fleet the state lives in etcd.
            let path = opts
                .state_dir
                .as_ref()
                .filter(|_| !fleet_mode)
                .map(|d| d.join(format!("{name}.json")));
            let (restored, load_error) = match &path {
                None => (None, None),
                Some(p) => match load_record(p, &name, &def.route) {
                    Ok(r) => (r, None),
                    Err(e) => (None, Some(e)),
                },
            };
            let (cmd_tx, cmd_rx) = mpsc::channel(16);
            let follow_members = fleet_mode && def.data_planes.is_empty();
            let mut runner = Runner::new(
                def,
                fleet,
                client.clone(),
                path,
                restored,
                events.clone(),
                opts.sink.clone(),
            );
            runner.clock = opts.clock;
            runner.exporter = opts.exporter.clone();
            runner.fleet_mode = opts.ownership.clone().map(|o| FleetMode {
                owner_rx: o.subscribe(),
                ownership: o,
                driving: None,
                follow_members,
                peer_token: opts.peer_token.clone(),
                remotes: Vec::new(),
            });
            runner.update_status();
            let status = runner.status.clone();
            handles.insert(
                name,
                CanaryHandle {
                    cmd: cmd_tx,
                    status,
                },
            );
            tasks.push(tokio::spawn(runner.run(
                cmd_rx,
                shutdown_rx.clone(),
                load_error,
            )));
        }
        Engine {
            canaries: handles,
            alerter: opts.alerter,
            events,
            shutdown,
            tasks: Mutex::new(tasks),
        }
    }

    /// The canaries' names.
    pub fn names(&self) -> Vec<String> {
        self.canaries.keys().cloned().collect()
    }

    /// One canary's status.
    pub fn status(&self, name: &str) -> Option<CanaryStatus> {
        self.canaries.get(name).map(|h| self.status_of(h))
    }

    /// Every canary's status, by name.
    pub fn statuses(&self) -> Vec<CanaryStatus> {
        self.canaries.values().map(|h| self.status_of(h)).collect()
    }

    fn status_of(&self, h: &CanaryHandle) -> CanaryStatus {
        let mut s = h.status.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(a) = &self.alerter {
            s.notifications = a.results(&s.name);
        }
        s
    }

    /// Every event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<RolloutEvent> {
        self.events.subscribe()
    }

    /// Sends an operator's command and waits until it is applied (it interrupts a tick
    /// in progress, so it never waits for a slow webhook).
    pub async fn command(
        &self,
        name: &str,
        cmd: ManualCommand,
    ) -> Result<CommandOutcome, EngineError> {
        self.send_command(name, cmd, false).await
    }

    /// Starts a run of `revision`. Unless `force`, a canary with `watchRevision` refuses
    /// (not accepted, nothing changed) a revision its canary slot does not report: an
    /// operator's typo or a deployment that has not landed would otherwise run the
    /// analysis on a version nobody meant.
    pub async fn start_run(
        &self,
        name: &str,
        revision: String,
        force: bool,
    ) -> Result<CommandOutcome, EngineError> {
        self.send_command(name, ManualCommand::Start { revision }, !force)
            .await
    }

    async fn send_command(
        &self,
        name: &str,
        cmd: ManualCommand,
        check_revision: bool,
    ) -> Result<CommandOutcome, EngineError> {
        let h = self
            .canaries
            .get(name)
            .ok_or_else(|| EngineError::NotFound(name.to_string()))?;
        let (reply, rx) = oneshot::channel();
        h.cmd
            .send(CommandMsg {
                cmd,
                check_revision,
                reply,
            })
            .await
            .map_err(|_| EngineError::Stopped)?;
        rx.await.map_err(|_| EngineError::Stopped)
    }

    /// Stops every canary task (a tick in progress is abandoned before its step; the
    /// state file holds the last completed step).
    pub async fn shutdown(&self) {
        let _ = self.shutdown.send(true);
        let tasks: Vec<JoinHandle<()>> =
            std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for t in tasks {
            let _ = t.await;
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

/// Starts the engine of a weir process: its canaries drive the in-process table store
/// (or their `dataPlanes`), and every event is also published on the control API's
/// event bus as an SSE event of kind `rollout`. With `ownership` (fleet mode) only the
/// owned canaries are driven, over every live replica, with their state in etcd. The
/// rollout series are added to the store's `/metrics` (Flagger's names too with
/// `admin.flaggerMetrics`).
pub fn start_for_app(
    cfg: &crate::config::Config,
    store: Arc<TableStore>,
    started: Instant,
    bus: Arc<crate::control::events::EventBus>,
    ownership: Option<Arc<dyn Ownership>>,
) -> Result<Engine, String> {
    let exporter = Arc::new(
        RolloutMetrics::new(cfg.admin.flagger_metrics).with_canary_routes(
            cfg.canaries
                .iter()
                .map(|c| (c.route.clone(), c.name.clone())),
        ),
    );
    store.metrics().add_section(exporter.clone());
    let alerter = Alerter::start(cfg, &HttpClient::new(), Clock::system())?;
    if let Some(a) = &alerter {
        a.follow(&bus);
    }
    let sink: EventSink = Arc::new(move |e: &RolloutEvent| {
        if let Ok(v) = serde_json::to_value(e) {
            bus.publish("rollout", v);
        }
    });
    Engine::start(
        &cfg.canaries,
        EngineOptions {
            state_dir: cfg.rollout.state_dir.clone(),
            local: Some(LocalPlane { store, started }),
            sink: Some(sink),
            ownership,
            peer_token: cfg
                .cluster
                .as_ref()
                .and_then(|c| c.peer_token.as_ref())
                .map(|t| t.0.clone()),
            clock: Clock::system(),
            exporter: Some(exporter),
            alerter,
        },
    )
}
