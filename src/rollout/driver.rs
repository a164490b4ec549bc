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
//! # Restart
//! The state file (`<stateDir>/<canary>.json`, written atomically: temp file, fsync,
//! rename) holds the machine's state, the slot names, the session-affinity cookie values
//! and the route writes still owed, and is written after every step. A restarted engine
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

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::convert::NAMESPACE;
use super::convert::{
    canary_def, checksum, endpoints_revision, next_affinity_state, CanaryDef, RouteChange,
};
use super::dataplane::{
    probe_revision, BackendView, DataPlane, Fleet, InProcess, Remote, RouteRead,
};
use super::http::HttpClient;
use super::machine::{
    command_refusal, plan, step, CanaryState, Command, HookResult, LastChecks, ManualCommand,
    MetricResult, Observation, Phase, Plan, PlanStep,
};
use super::metrics;
use super::spec::{HookKind, Promotion, Strategy, TOTAL_WEIGHT};
use super::webhooks::{self, HookPayload, Notification, Notifier};
use crate::cluster::{DriveGuard, Ownership, SaveError};
use crate::config::raw::RawAffinityState;
use crate::config::CanaryConfig;
use crate::dataplane::store::TableStore;

/// Events kept per canary for `GET /api/v1/canaries/{name}`.
pub const EVENT_RING: usize = 100;

/// Longest wait before retrying a data plane that failed.
pub const RETRY_MAX: Duration = Duration::from_secs(5);

/// Format version of the state file.
pub const STATE_FORMAT: u32 = 1;

/// Milliseconds since the Unix epoch: the machine's clock, persisted in state files, so
/// it must mean the same after a restart.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

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
    /// Bearer token for the other replicas' control APIs (fleet mode; the fleet
    /// shares one admin token).
    pub peer_token: Option<String>,
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
    /// Fleet mode: the replica that owns (drives) the canary, as last seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Fleet mode: this replica drives the canary now (else the status is the owner's
    /// last stored record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driven_here: Option<bool>,
    /// Recent events, oldest first.
    pub events: Vec<RolloutEvent>,
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

/// The two slots of a route as the engine last wrote or saw them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slots {
    /// The backend serving as primary.
    pub primary: String,
    /// The backend in the canary slot.
    pub canary: String,
}

/// The state file of one canary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Record {
    /// [`STATE_FORMAT`].
    pub format: u32,
    /// The canary.
    pub canary: String,
    /// Its route (a record of another route is ignored).
    pub route: String,
    /// The machine's state.
    pub state: CanaryState,
    /// The slots, so a restart can put a swap back.
    pub slots: Option<Slots>,
    /// The session-affinity cookie values the engine wrote.
    pub affinity_state: Option<RawAffinityState>,
    /// Route writes decided and not yet applied everywhere.
    pub pending: Vec<RouteChange>,
    /// When the file was written (ms since the Unix epoch).
    pub saved_at_ms: u64,
}

/// Reads a state file; `None` when missing, unreadable or not this canary's.
pub fn load_record(path: &Path, canary: &str, route: &str) -> Result<Option<Record>, String> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let rec: Record = serde_json::from_slice(&text)
        .map_err(|e| format!("{} is not a weir state file: {e}", path.display()))?;
    if rec.canary != canary || rec.route != route {
        return Err(format!(
            "{} belongs to canary {:?} on route {:?}, not {canary:?} on {route:?}",
            path.display(),
            rec.canary,
            rec.route
        ));
    }
    Ok(Some(rec))
}

/// Writes a state file atomically: a crash leaves the old file or the new one.
pub async fn save_record(path: &Path, rec: &Record) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let data = serde_json::to_vec_pretty(rec)?;
    let tmp = path.with_extension("json.tmp");
    let mut f = tokio::fs::File::create(&tmp).await?;
    f.write_all(&data).await?;
    f.sync_all().await?;
    drop(f);
    tokio::fs::rename(&tmp, path).await?;
    if let Some(dir) = path.parent() {
        // Persist the rename itself; not every platform can open a directory.
        if let Ok(d) = tokio::fs::File::open(dir).await {
            let _ = d.sync_all().await;
        }
    }
    Ok(())
}

struct CommandMsg {
    cmd: ManualCommand,
    reply: oneshot::Sender<CommandOutcome>,
}

struct CanaryHandle {
    cmd: mpsc::Sender<CommandMsg>,
    status: Arc<Mutex<CanaryStatus>>,
}

/// The rollout engine of one weir: a task per canary.
pub struct Engine {
    canaries: BTreeMap<String, CanaryHandle>,
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
        Ok(Engine {
            canaries: handles,
            events,
            shutdown,
            tasks: Mutex::new(tasks),
        })
    }

    /// The canaries' names.
    pub fn names(&self) -> Vec<String> {
        self.canaries.keys().cloned().collect()
    }

    /// One canary's status.
    pub fn status(&self, name: &str) -> Option<CanaryStatus> {
        self.canaries
            .get(name)
            .map(|h| h.status.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// Every canary's status, by name.
    pub fn statuses(&self) -> Vec<CanaryStatus> {
        self.canaries
            .values()
            .map(|h| h.status.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .collect()
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
        let h = self
            .canaries
            .get(name)
            .ok_or_else(|| EngineError::NotFound(name.to_string()))?;
        let (reply, rx) = oneshot::channel();
        h.cmd
            .send(CommandMsg { cmd, reply })
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

enum Wake {
    Timeout,
    Command(CommandMsg),
    Stop,
}

async fn wait(
    cmd_rx: &mut mpsc::Receiver<CommandMsg>,
    shutdown: &mut watch::Receiver<bool>,
    d: Option<Duration>,
    owner_rx: Option<&mut watch::Receiver<u64>>,
) -> Wake {
    if *shutdown.borrow() {
        return Wake::Stop;
    }
    let sleep = async {
        match d {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending::<()>().await,
        }
    };
    // Fleet mode: an ownership change ends the wait (the loop re-checks the gate).
    let owner_change = async {
        match owner_rx {
            Some(rx) => {
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = sleep => Wake::Timeout,
        _ = owner_change => Wake::Timeout,
        m = cmd_rx.recv() => match m {
            Some(m) => Wake::Command(m),
            None => Wake::Stop,
        },
        _ = shutdown.changed() => Wake::Stop,
    }
}

/// A runner's fleet-mode state.
struct FleetMode {
    /// Who may drive.
    ownership: Arc<dyn Ownership>,
    /// Ownership-change notifications.
    owner_rx: watch::Receiver<u64>,
    /// This replica drives the canary now, under this ownership token (it took over
    /// and has not lost it since).
    driving: Option<i64>,
    /// The canary has no `dataPlanes`: its fleet is this process plus every other live
    /// replica.
    follow_members: bool,
    /// Token for the other replicas' control APIs.
    peer_token: Option<String>,
    /// The remote planes' URLs now in the fleet (after the in-process one).
    remotes: Vec<String>,
}

/// What a tick's observation found.
enum Observed {
    /// Ready to step.
    Ready(Observation, Vec<RouteRead>),
    /// These data planes restarted (their table version went backwards): re-assert first.
    Restarted(Vec<usize>),
}

/// One canary's task.
struct Runner {
    def: CanaryDef,
    fleet: Fleet,
    client: HttpClient,
    rec: Record,
    path: Option<PathBuf>,
    restored: bool,
    status: Arc<Mutex<CanaryStatus>>,
    ring: VecDeque<RolloutEvent>,
    events: broadcast::Sender<RolloutEvent>,
    sink: Option<EventSink>,
    notifier: Notifier,
    /// Table version last seen per plane.
    versions: Vec<Option<u64>>,
    /// Planes whose route must be re-asserted from the record.
    reassert: Vec<bool>,
    /// The current data-plane problem, reported once until it clears.
    dp_error: Option<String>,
    /// The current state-file problem, reported once until it clears.
    persist_error: Option<String>,
    /// Fleet mode (`cluster:`); `None` when this weir is alone.
    fleet_mode: Option<FleetMode>,
}

impl Runner {
    fn new(
        def: CanaryDef,
        fleet: Fleet,
        client: HttpClient,
        path: Option<PathBuf>,
        restored: Option<Record>,
        events: broadcast::Sender<RolloutEvent>,
        sink: Option<EventSink>,
    ) -> Self {
        let n = fleet.planes().len();
        let was_restored = restored.is_some();
        let mut rec = restored.unwrap_or_else(|| Record {
            format: STATE_FORMAT,
            canary: def.spec.name.clone(),
            route: def.route.clone(),
            ..Record::default()
        });
        rec.format = STATE_FORMAT;
        let live = rec.state.phase != Phase::Initializing;
        let notifier = Notifier::spawn(client.clone(), def.spec.name.clone());
        let status = Arc::new(Mutex::new(build_status(
            &def,
            &fleet,
            &rec,
            &VecDeque::new(),
            None,
        )));
        Runner {
            def,
            fleet,
            client,
            rec,
            path,
            restored: was_restored,
            status,
            ring: VecDeque::new(),
            events,
            sink,
            notifier,
            versions: vec![None; n],
            reassert: vec![was_restored && live; n],
            dp_error: None,
            persist_error: None,
            fleet_mode: None,
        }
    }

    fn retry_delay(&self) -> Duration {
        Duration::from_millis(self.def.spec.analysis.interval_ms.max(100)).min(RETRY_MAX)
    }

    async fn run(
        mut self,
        mut cmd_rx: mpsc::Receiver<CommandMsg>,
        mut shutdown: watch::Receiver<bool>,
        load_error: Option<String>,
    ) {
        let now = now_ms();
        if let Some(e) = load_error {
            self.driver_event(
                "StateIgnored",
                true,
                format!("{e}; starting from initialisation (all traffic to the primary)"),
                now,
            );
        }
        if self.restored {
            self.on_restore(now, "the state file");
        }
        self.update_status();
        loop {
            if *shutdown.borrow() {
                break;
            }
            if !self.gate().await {
                // Fleet mode, not the owner: idle until ownership changes, refreshing
                // the status from the owner's stored record.
                let owner_rx = self.fleet_mode.as_mut().map(|f| &mut f.owner_rx);
                match wait(&mut cmd_rx, &mut shutdown, Some(FOLLOWER_REFRESH), owner_rx).await {
                    Wake::Stop => break,
                    Wake::Command(m) => self.command(m).await,
                    Wake::Timeout => self.follow().await,
                }
                continue;
            }
            let settled = match self.drive_guard().await {
                Some(_g) => self.settle().await,
                None => continue,
            };
            if let Err(e) = settled {
                self.set_dp_error(Some(e));
                let d = Some(self.retry_delay());
                let owner_rx = self.fleet_mode.as_mut().map(|f| &mut f.owner_rx);
                match wait(&mut cmd_rx, &mut shutdown, d, owner_rx).await {
                    Wake::Stop => break,
                    Wake::Command(m) => self.command(m).await,
                    Wake::Timeout => {}
                }
                continue;
            }
            let now = now_ms();
            let p = plan(&self.def.spec, &self.rec.state, now);
            if !p.due {
                let d = p
                    .next_due_ms
                    .map(|t| Duration::from_millis(t.saturating_sub(now).max(1)));
                let owner_rx = self.fleet_mode.as_mut().map(|f| &mut f.owner_rx);
                match wait(&mut cmd_rx, &mut shutdown, d, owner_rx).await {
                    Wake::Stop => break,
                    Wake::Command(m) => self.command(m).await,
                    Wake::Timeout => {}
                }
                continue;
            }
            enum Next {
                Observed(Result<Observed, String>),
                Command(Option<CommandMsg>),
                Stop,
            }
            let next = tokio::select! {
                o = self.observe(&p) => Next::Observed(o),
                m = cmd_rx.recv() => Next::Command(m),
                _ = shutdown.changed() => Next::Stop,
            };
            match next {
                Next::Stop | Next::Command(None) => break,
                Next::Command(Some(m)) => self.command(m).await,
                Next::Observed(Ok(Observed::Restarted(planes))) => {
                    for i in planes {
                        if let Some(r) = self.reassert.get_mut(i) {
                            *r = true;
                        }
                    }
                }
                Next::Observed(Ok(Observed::Ready(obs, routes))) => {
                    // Fleet mode: step only while still the owner, and hold the guard
                    // until the step is saved and applied.
                    let Some(_g) = self.drive_guard().await else {
                        continue;
                    };
                    for (i, r) in routes.iter().enumerate() {
                        if let Some(v) = self.versions.get_mut(i) {
                            *v = Some(r.version);
                        }
                    }
                    self.set_dp_error(None);
                    self.adopt_slots(&routes, now);
                    self.tick(&obs, now).await;
                }
                Next::Observed(Err(e)) => {
                    self.set_dp_error(Some(format!("tick skipped: {e}")));
                    let d = Some(self.retry_delay());
                    let owner_rx = self.fleet_mode.as_mut().map(|f| &mut f.owner_rx);
                    match wait(&mut cmd_rx, &mut shutdown, d, owner_rx).await {
                        Wake::Stop => break,
                        Wake::Command(m) => self.command(m).await,
                        Wake::Timeout => {}
                    }
                }
            }
        }
        tracing::debug!(target: "weir::rollout", canary = %self.def.spec.name, "canary task stopped");
    }

    /// A run restored from the state file continues; its first analysis waits one
    /// interval so the stats window refills.
    fn on_restore(&mut self, now: u64, from: &str) {
        let st = &mut self.rec.state;
        let analysing = matches!(st.phase, Phase::Progressing | Phase::WaitingPromotion);
        if analysing && !st.paused {
            st.last_tick_ms = Some(now);
        }
        let age = now.saturating_sub(self.rec.saved_at_ms) / 1000;
        let msg = format!(
            "Restored from {from} (saved {age}s ago): {} at canary weight {}{}; route re-asserted on every data plane{}",
            st.phase,
            st.canary_weight,
            st.revision
                .as_ref()
                .map(|r| format!(", revision {r}"))
                .unwrap_or_default(),
            if analysing {
                "; the next analysis runs after one interval"
            } else {
                ""
            }
        );
        self.driver_event("Restored", false, msg, now);
    }

    /// Applies owed writes and re-assertions; `Err` says what is still owed.
    async fn settle(&mut self) -> Result<(), String> {
        self.flush().await?;
        for i in 0..self.reassert.len() {
            if self.reassert[i] {
                self.reassert_plane(i).await?;
                self.reassert[i] = false;
            }
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), String> {
        let mut wrote = false;
        while let Some(change) = self.rec.pending.first().cloned() {
            match self
                .fleet
                .write_route(&self.def.route, &change, &self.def)
                .await
            {
                Ok(()) => {
                    self.rec.pending.remove(0);
                    wrote = true;
                }
                Err(errors) => {
                    if wrote {
                        self.persist().await;
                    }
                    let list: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
                    return Err(format!("route write owed: {}", list.join("; ")));
                }
            }
        }
        if wrote {
            self.persist().await;
            self.refresh_versions().await;
            self.update_status();
        }
        Ok(())
    }

    /// Records the planes' versions after our own writes (they moved them forward).
    async fn refresh_versions(&mut self) {
        for (i, p) in self.fleet.planes().iter().enumerate() {
            if let Ok(r) = p.read_route(&self.def.route).await {
                self.versions[i] = Some(r.version);
            }
        }
    }

    /// The traffic the record says the route has.
    fn desired_traffic(&self) -> RouteChange {
        let st = &self.rec.state;
        let a = &self.def.spec.analysis;
        RouteChange::Traffic {
            canary_weight: st.canary_weight,
            match_active: st.match_active,
            mirror_weight: st
                .mirror
                .then(|| a.mirror_weight.unwrap_or(TOTAL_WEIGHT).min(TOTAL_WEIGHT)),
            affinity_active: a.session_affinity && st.canary_weight > 0,
            affinity_state: self.rec.affinity_state.clone(),
        }
    }

    /// Puts the recorded slots and traffic back on a plane that came back from its
    /// config file.
    async fn reassert_plane(&mut self, i: usize) -> Result<(), String> {
        let Some(plane) = self.fleet.planes().get(i).cloned() else {
            return Ok(());
        };
        let route = self.def.route.clone();
        let read = plane.read_route(&route).await.map_err(|e| e.to_string())?;
        let now = now_ms();
        if let Some(s) = self.rec.slots.clone() {
            let reverted = read.route.primary == s.canary
                && read.route.canary.as_deref() == Some(s.primary.as_str());
            if reverted {
                let swap = RouteChange::Swap {
                    primary: s.primary.clone(),
                    canary: s.canary.clone(),
                    affinity_state: self.rec.affinity_state.clone(),
                };
                plane
                    .write_route(&route, &swap, &self.def)
                    .await
                    .map_err(|e| e.to_string())?;
                self.driver_event(
                    "SlotsRestored",
                    true,
                    format!(
                        "Data plane {} came back with the slots of its config file; the promotion is put back: {} is the primary, {} the idle slot",
                        plane.id(),
                        s.primary,
                        s.canary
                    ),
                    now,
                );
            }
        }
        let change = self.desired_traffic();
        let v = plane
            .write_route(&route, &change, &self.def)
            .await
            .map_err(|e| e.to_string())?;
        self.versions[i] = Some(v);
        Ok(())
    }

    /// Takes the slot names from the first plane, unless they are the reverse of a
    /// swap the engine made (handled by re-assertion).
    fn adopt_slots(&mut self, routes: &[RouteRead], now: u64) {
        let Some(first) = routes.first() else { return };
        let Some(canary) = first.route.canary.clone() else {
            return;
        };
        let seen = Slots {
            primary: first.route.primary.clone(),
            canary,
        };
        match &self.rec.slots {
            Some(s) if *s == seen => {}
            Some(s) => {
                let msg = format!(
                    "The route's slots were changed outside the engine: primary {} (was {}), canary {} (was {})",
                    seen.primary, s.primary, seen.canary, s.canary
                );
                self.rec.slots = Some(seen);
                self.driver_event("SlotsChanged", true, msg, now);
            }
            None => self.rec.slots = Some(seen),
        }
    }

    fn payload(&self, phase: Phase) -> HookPayload {
        let st = &self.rec.state;
        let revision = st.pending_revision.clone().or_else(|| st.revision.clone());
        HookPayload {
            name: self.def.spec.name.clone(),
            namespace: NAMESPACE.to_string(),
            phase,
            checksum: checksum(&self.def.spec.name, applied_revision(st)),
            metadata: BTreeMap::new(),
            canary_weight: st.canary_weight,
            iteration: st.iterations,
            failed_checks: st.failed_checks,
            revision,
        }
    }

    /// The revision a slot reports: its endpoints' `revisionPath` answer when revisions
    /// are watched, else its endpoint list; none while a rolling update of the slot is
    /// in progress (a run starts from a finished deployment).
    async fn slot_revision(&self, b: &BackendView) -> Option<String> {
        if self.def.watch_revision {
            probe_revision(&self.client, b).await.revision
        } else if b.settled() {
            Some(endpoints_revision(&b.endpoints))
        } else {
            None
        }
    }

    async fn observe(&self, p: &Plan) -> Result<Observed, String> {
        let routes = self
            .fleet
            .read_route(&self.def.route)
            .await
            .map_err(|e| e.to_string())?;
        let restarted: Vec<usize> = routes
            .iter()
            .enumerate()
            .filter(|(i, r)| self.versions[*i].is_some_and(|v| r.version < v))
            .map(|(i, _)| i)
            .collect();
        if !restarted.is_empty() {
            return Ok(Observed::Restarted(restarted));
        }
        let route = &routes[0].route;
        let canary_name = route
            .canary
            .clone()
            .ok_or_else(|| format!("route {} has no canary backend", self.def.route))?;
        let canary = self
            .fleet
            .backend(&canary_name)
            .await
            .map_err(|e| e.to_string())?;
        let primary = self
            .fleet
            .backend(&route.primary)
            .await
            .map_err(|e| e.to_string())?;
        let mut obs = Observation {
            canary_revision: self.slot_revision(&canary).await,
            ..Observation::default()
        };
        if self.def.spec.promotion == Promotion::Webhook {
            let r = probe_revision(&self.client, &primary).await;
            obs.primary_revision = r.revision;
            obs.primary_ready = r.ready;
        } else {
            obs.primary_revision = self.slot_revision(&primary).await;
            obs.primary_ready = primary.ready;
        }
        for s in &p.steps {
            match s {
                PlanStep::Hook { index, kind, phase } => {
                    let Some(hook) = self.def.spec.analysis.webhooks.get(*index) else {
                        continue;
                    };
                    let retries = self.def.hook_retries.get(*index).copied().unwrap_or(0);
                    let payload = self.payload(*phase).for_hook(hook);
                    let out = webhooks::call(&self.client, hook, retries, &payload).await;
                    let halts = kind.halts(out.passed);
                    obs.hooks.push(HookResult {
                        index: *index,
                        name: hook.name.clone(),
                        kind: *kind,
                        passed: out.passed,
                        reason: out.reason,
                    });
                    if halts {
                        break;
                    }
                }
                PlanStep::Metrics => {
                    let results =
                        metrics::measure(&self.client, &self.def, &self.fleet, &self.rec.state)
                            .await;
                    let failed = results.iter().any(|r| !r.passed);
                    obs.metrics = results;
                    if failed {
                        break;
                    }
                }
            }
        }
        Ok(Observed::Ready(obs, routes))
    }

    async fn tick(&mut self, obs: &Observation, now: u64) {
        let prev = self.rec.state.clone();
        let (next, cmds) = step(&self.def.spec, &prev, obs, now);
        let events = self.absorb(&prev, next, cmds, now);
        self.commit(events).await;
    }

    async fn command(&mut self, msg: CommandMsg) {
        let guard = self.drive_guard().await;
        if guard.is_none() {
            // Fleet mode, not the owner: refuse (the API forwards to the owner).
            let status = self
                .status
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let owner = status
                .owner
                .clone()
                .unwrap_or_else(|| "no replica yet".into());
            let _ = msg.reply.send(CommandOutcome {
                accepted: false,
                message: format!(
                    "Not the owner: canary {} is driven by {owner}",
                    self.def.spec.name
                ),
                status,
            });
            return;
        }
        if let Some(reason) = command_refusal(&self.rec.state, &msg.cmd) {
            // Only the caller hears of it: nothing changed, so nothing is committed,
            // published or sent to the event hooks.
            let status = self
                .status
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let _ = msg.reply.send(CommandOutcome {
                accepted: false,
                message: reason,
                status,
            });
            return;
        }
        let now = now_ms();
        let prev = self.rec.state.clone();
        let (next, cmds) = step(
            &self.def.spec,
            &prev,
            &Observation::command(msg.cmd.clone()),
            now,
        );
        let events = self.absorb(&prev, next, cmds, now);
        let message = events
            .iter()
            .map(|e| e.message.clone())
            .collect::<Vec<_>>()
            .join(" | ");
        self.commit(events).await;
        let status = self
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let _ = msg.reply.send(CommandOutcome {
            accepted: true,
            message,
            status,
        });
    }

    /// Persists, publishes and applies the outcome of a step (in that order: a crash
    /// after the state is saved re-applies its writes from the file).
    async fn commit(&mut self, events: Vec<RolloutEvent>) {
        if !self.persist().await {
            // Fleet mode: the save was refused (ownership lost, or etcd unreachable):
            // the step never happened. The next owner continues from the last saved
            // record; this replica reloads it if it gets the canary back.
            if let Some(f) = self.fleet_mode.as_mut() {
                f.driving = None;
            }
            self.update_status();
            return;
        }
        // `publish` writes the status with each event; a step without events still
        // changed the state.
        if events.is_empty() {
            self.update_status();
        }
        for e in events {
            self.publish(e);
        }
        if let Err(e) = self.flush().await {
            self.set_dp_error(Some(e));
        }
    }

    /// Turns a step's commands into owed writes, hook calls and events.
    fn absorb(
        &mut self,
        prev: &CanaryState,
        next: CanaryState,
        cmds: Vec<Command>,
        now: u64,
    ) -> Vec<RolloutEvent> {
        let mut weight = prev.canary_weight;
        let mut events = Vec::new();
        let affinity = self.def.session_affinity.is_some();
        for c in cmds {
            match c {
                Command::SetTraffic {
                    canary_weight,
                    match_active,
                    mirror_weight,
                    affinity_active,
                } => {
                    if affinity {
                        let cur = self.rec.affinity_state.clone().unwrap_or_default();
                        self.rec.affinity_state = Some(next_affinity_state(
                            &cur,
                            weight,
                            canary_weight,
                            &mut rand::rng(),
                        ));
                    }
                    weight = canary_weight;
                    // Changes are absolute: an owed traffic write is replaced by the
                    // newer one rather than queued behind it.
                    if matches!(self.rec.pending.last(), Some(RouteChange::Traffic { .. })) {
                        self.rec.pending.pop();
                    }
                    self.rec.pending.push(RouteChange::Traffic {
                        canary_weight,
                        match_active,
                        mirror_weight,
                        affinity_active,
                        affinity_state: self.rec.affinity_state.clone(),
                    });
                }
                Command::SwapSlots => {
                    if affinity {
                        let cur = self.rec.affinity_state.clone().unwrap_or_default();
                        self.rec.affinity_state =
                            Some(next_affinity_state(&cur, weight, 0, &mut rand::rng()));
                    }
                    weight = 0;
                    match self.rec.slots.clone() {
                        Some(s) => {
                            self.rec.pending.push(RouteChange::Swap {
                                primary: s.canary.clone(),
                                canary: s.primary.clone(),
                                affinity_state: self.rec.affinity_state.clone(),
                            });
                            self.rec.slots = Some(Slots {
                                primary: s.canary,
                                canary: s.primary,
                            });
                        }
                        None => {
                            // Slots are read before every tick; without them no tick runs.
                            tracing::error!(target: "weir::rollout", canary = %self.def.spec.name, "swap decided with unknown slots: not applied");
                        }
                    }
                }
                Command::CallHooks { kind, phase } => {
                    self.queue_hooks(kind, phase, &next, BTreeMap::new());
                }
                Command::Event {
                    phase: _,
                    reason,
                    message,
                } => {
                    events.push(self.event(
                        &next,
                        format!("{reason:?}"),
                        reason.is_warning(),
                        message,
                        now,
                    ));
                }
            }
        }
        self.rec.state = next;
        events
    }

    fn queue_hooks(
        &self,
        kind: HookKind,
        phase: Phase,
        st: &CanaryState,
        extra: BTreeMap<String, String>,
    ) {
        for (i, hook) in self.def.spec.analysis.webhooks.iter().enumerate() {
            if hook.kind != kind {
                continue;
            }
            let revision = st.revision.clone();
            let payload = HookPayload {
                name: self.def.spec.name.clone(),
                namespace: NAMESPACE.to_string(),
                phase,
                checksum: checksum(&self.def.spec.name, applied_revision(st)),
                metadata: extra.clone(),
                canary_weight: st.canary_weight,
                iteration: st.iterations,
                failed_checks: st.failed_checks,
                revision,
            }
            .for_hook(hook);
            self.notifier.send(Notification {
                hook: hook.clone(),
                retries: self.def.hook_retries.get(i).copied().unwrap_or(0),
                payload,
            });
        }
    }

    fn event(
        &self,
        st: &CanaryState,
        reason: String,
        warning: bool,
        message: String,
        now: u64,
    ) -> RolloutEvent {
        let w = st.canary_weight.min(TOTAL_WEIGHT);
        RolloutEvent {
            canary: self.def.spec.name.clone(),
            time_ms: now,
            phase: st.phase,
            reason,
            warning,
            message,
            canary_weight: w,
            primary_weight: TOTAL_WEIGHT - w,
            iterations: st.iterations,
            failed_checks: if st.phase.is_idle() {
                st.last_run_failed_checks
            } else {
                st.failed_checks
            },
            revision: st.revision.clone(),
            checks: if st.last_checks.at_ms == now {
                st.last_checks.metrics.clone()
            } else {
                Vec::new()
            },
        }
    }

    fn driver_event(&mut self, reason: &str, warning: bool, message: String, now: u64) {
        let e = self.event(&self.rec.state, reason.to_string(), warning, message, now);
        // `publish` writes the status too.
        self.publish(e);
    }

    /// Logs and keeps one event, writes the status, then broadcasts and forwards the event
    /// (and calls the `event` hooks).
    fn publish(&mut self, e: RolloutEvent) {
        if e.warning {
            tracing::warn!(target: "weir::rollout", canary = %e.canary, phase = %e.phase, reason = %e.reason, canary_weight = e.canary_weight, failed_checks = e.failed_checks, "{}", e.message);
        } else {
            tracing::info!(target: "weir::rollout", canary = %e.canary, phase = %e.phase, reason = %e.reason, canary_weight = e.canary_weight, failed_checks = e.failed_checks, "{}", e.message);
        }
        if self.ring.len() >= EVENT_RING {
            self.ring.pop_front();
        }
        self.ring.push_back(e.clone());
        // The status first, then the broadcast and the sink: a client that subscribes
        // and then reads the status's events (the demo, `weir ctl watch`) must find
        // every event in one or the other. Broadcasting first left a window in which
        // a new subscriber saw neither (the demo waited for an `Initialized` it had
        // missed until its time limit).
        self.update_status();
        let _ = self.events.send(e.clone());
        if let Some(sink) = &self.sink {
            sink(&e);
        }
        let extra = BTreeMap::from([
            ("eventMessage".to_string(), e.message.clone()),
            (
                "eventType".to_string(),
                if e.warning { "Warning" } else { "Normal" }.to_string(),
            ),
        ]);
        self.queue_hooks(HookKind::Event, e.phase, &self.rec.state, extra);
    }

    /// Records a data-plane problem (one warning per distinct problem) or its end.
    fn set_dp_error(&mut self, e: Option<String>) {
        if self.dp_error == e {
            return;
        }
        let now = now_ms();
        match &e {
            Some(msg) => {
                self.dp_error = e.clone();
                self.driver_event("DataPlaneError", true, msg.clone(), now);
            }
            None => {
                self.dp_error = None;
                self.driver_event(
                    "DataPlaneRecovered",
                    false,
                    "Every data plane answers again".to_string(),
                    now,
                );
            }
        }
    }

    /// Saves the record. Single replica: to the state file (a failure is reported and
    /// the step still applies, as before). Fleet mode: to etcd, fenced by the owner key;
    /// `false` means the step must not be applied.
    async fn persist(&mut self) -> bool {
        if let Some(f) = &self.fleet_mode {
            let o = f.ownership.clone();
            self.rec.saved_at_ms = now_ms();
            let data = match serde_json::to_vec(&self.rec) {
                Ok(d) => d,
                Err(e) => {
                    tracing::error!(target: "weir::rollout", canary = %self.def.spec.name, error = %e, "cannot serialise the state record");
                    return false;
                }
            };
            return match o.save_state(&self.def.spec.name, &data).await {
                Ok(()) => {
                    self.persist_error = None;
                    true
                }
                Err(e) => {
                    let (reason, msg) = match &e {
                        SaveError::NotOwner(_) => (
                            "OwnershipLost",
                            format!("{e}: the step is dropped, traffic stays as it is"),
                        ),
                        SaveError::Unavailable(_) => (
                            "StateNotSaved",
                            format!("{e}: the step is dropped, traffic stays as it is"),
                        ),
                    };
                    let ev = self.event(&self.rec.state, reason.into(), true, msg, now_ms());
                    self.publish(ev);
                    false
                }
            };
        }
        let Some(path) = self.path.clone() else {
            return true;
        };
        self.rec.saved_at_ms = now_ms();
        match save_record(&path, &self.rec).await {
            Ok(()) => {
                if self.persist_error.take().is_some() {
                    tracing::info!(target: "weir::rollout", canary = %self.def.spec.name, path = %path.display(), "state file written again");
                }
            }
            Err(e) => {
                let msg = format!("cannot write the state file {}: {e}", path.display());
                if self.persist_error.as_ref() != Some(&msg) {
                    self.persist_error = Some(msg.clone());
                    let ev =
                        self.event(&self.rec.state, "StateNotSaved".into(), true, msg, now_ms());
                    self.publish(ev);
                }
            }
        }
        true
    }

    // ------------------------------------------------------------ fleet mode

    /// True when this task may drive the canary now. Fleet mode: asks the ownership,
    /// takes over on a gain (state from etcd), stops on a loss, and keeps the fleet in
    /// step with the live members. Single replica: always true.
    async fn gate(&mut self) -> bool {
        let Some(f) = &self.fleet_mode else {
            return true;
        };
        let o = f.ownership.clone();
        let was = f.driving;
        // The token, not just "may drive": a canary lost and taken back while this task
        // looked away (a long observation) has a new token, and another replica may
        // have driven it meanwhile: it is taken over again from the stored state.
        let token = o.token(&self.def.spec.name);
        let now = now_ms();
        if token.is_none() || (was.is_some() && was != token) {
            if was.is_some() {
                if let Some(f) = self.fleet_mode.as_mut() {
                    f.driving = None;
                }
                self.driver_event(
                    "OwnershipLost",
                    true,
                    "This replica no longer owns the canary: stopped driving it (traffic stays where it is)".into(),
                    now,
                );
            }
            if token.is_none() {
                return false;
            }
        }
        self.sync_fleet(&*o);
        if self
            .fleet_mode
            .as_ref()
            .is_some_and(|f| f.driving.is_none())
        {
            if !self.take_over(&*o, now).await {
                return false;
            }
            if let Some(f) = self.fleet_mode.as_mut() {
                f.driving = token;
            }
        }
        true
    }

    /// The fleet-mode guard held across step → save → apply; `None` when this replica
    /// may not drive (single replica: a dummy `Some`).
    async fn drive_guard(&self) -> Option<Option<DriveGuard>> {
        match &self.fleet_mode {
            None => Some(None),
            Some(FleetMode {
                driving: Some(t),
                ownership,
                ..
            }) => {
                let g = ownership.guard(&self.def.spec.name).await?;
                // Taken back under another token meanwhile: the gate reloads first.
                (g.token == *t).then_some(Some(g))
            }
            Some(_) => None,
        }
    }

    /// Continues the run from the record the previous owner stored (or initialises
    /// when there is none). False when the record cannot be read now (retried).
    async fn take_over(&mut self, o: &dyn Ownership, now: u64) -> bool {
        let name = self.def.spec.name.clone();
        let loaded = match o.load_state(&name).await {
            Ok(l) => l,
            Err(e) => {
                self.set_dp_error(Some(format!("cannot read the stored state: {e}")));
                return false;
            }
        };
        let fresh = Record {
            format: STATE_FORMAT,
            canary: name.clone(),
            route: self.def.route.clone(),
            ..Record::default()
        };
        let n = self.fleet.planes().len();
        self.versions = vec![None; n];
        match loaded.map(|b| serde_json::from_slice::<Record>(&b)) {
            Some(Ok(rec)) if rec.canary == name && rec.route == self.def.route => {
                self.rec = rec;
                self.rec.format = STATE_FORMAT;
                let live = self.rec.state.phase != Phase::Initializing;
                self.reassert = vec![live; n];
                self.on_restore(now, "etcd (the last owner's saved state)");
            }
            other => {
                let why = match other {
                    None => "no state stored yet".to_string(),
                    Some(Ok(r)) => format!(
                        "the stored state belongs to canary {:?} on route {:?}",
                        r.canary, r.route
                    ),
                    Some(Err(e)) => format!("the stored state is unreadable ({e})"),
                };
                self.rec = fresh;
                self.reassert = vec![false; n];
                self.driver_event(
                    "OwnershipAcquired",
                    false,
                    format!("This replica owns the canary: {why}; starting from initialisation (all traffic to the primary)"),
                    now,
                );
            }
        }
        true
    }

    /// Fleet mode, canaries without `dataPlanes`: this process plus every other live
    /// replica. A replica that joins gets the recorded traffic re-asserted.
    fn sync_fleet(&mut self, o: &dyn Ownership) {
        let Some(f) = &self.fleet_mode else { return };
        if !f.follow_members {
            return;
        }
        let mut urls: Vec<String> = o
            .peers()
            .into_iter()
            .filter(|p| !p.is_self && !p.api_url.is_empty())
            .map(|p| p.api_url)
            .collect();
        urls.sort();
        urls.dedup();
        if urls == f.remotes {
            return;
        }
        let token = f.peer_token.clone();
        let Some(local) = self.fleet.planes().first().cloned() else {
            return;
        };
        let old_ids = self.fleet.ids();
        let live = self.rec.state.phase != Phase::Initializing;
        let mut planes: Vec<Arc<dyn DataPlane>> = vec![local];
        for u in &urls {
            planes.push(Arc::new(Remote::new(
                u.clone(),
                token.clone(),
                self.client.clone(),
            )));
        }
        let fleet = Fleet::new(planes);
        let ids = fleet.ids();
        let mut versions = Vec::with_capacity(ids.len());
        let mut reassert = Vec::with_capacity(ids.len());
        for id in &ids {
            match old_ids.iter().position(|o| o == id) {
                Some(i) => {
                    versions.push(self.versions.get(i).copied().flatten());
                    reassert.push(self.reassert.get(i).copied().unwrap_or(false));
                }
                None => {
                    versions.push(None);
                    reassert.push(live);
                }
            }
        }
        tracing::info!(target: "weir::rollout", canary = %self.def.spec.name, planes = ?ids, "fleet follows the live replicas");
        self.fleet = fleet;
        self.versions = versions;
        self.reassert = reassert;
        if let Some(f) = self.fleet_mode.as_mut() {
            f.remotes = urls;
        }
        self.update_status();
    }

    /// Fleet mode, not the owner: shows the owner's last stored record.
    async fn follow(&mut self) {
        let Some(f) = &self.fleet_mode else { return };
        let o = f.ownership.clone();
        if let Ok(Some(b)) = o.load_state(&self.def.spec.name).await {
            if let Ok(rec) = serde_json::from_slice::<Record>(&b) {
                if rec.canary == self.def.spec.name && rec.route == self.def.route {
                    self.rec = rec;
                }
            }
        }
        self.update_status();
    }

    fn update_status(&self) {
        let mut s = build_status(
            &self.def,
            &self.fleet,
            &self.rec,
            &self.ring,
            self.dp_error.clone(),
        );
        if let Some(f) = &self.fleet_mode {
            s.owner = f.ownership.owner_of(&self.def.spec.name).map(|p| p.name);
            s.driven_here = Some(f.driving.is_some());
        }
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }
}

/// The revision of Flagger's `lastAppliedSpec`, which the payloads' `checksum` is computed
/// over; a state saved before weir tracked it falls back to the run's revision.
fn applied_revision(st: &CanaryState) -> Option<&str> {
    st.applied_revision.as_deref().or(st.revision.as_deref())
}

fn build_status(
    def: &CanaryDef,
    fleet: &Fleet,
    rec: &Record,
    ring: &VecDeque<RolloutEvent>,
    dp_error: Option<String>,
) -> CanaryStatus {
    let st = &rec.state;
    let a = &def.spec.analysis;
    let w = st.canary_weight.min(TOTAL_WEIGHT);
    CanaryStatus {
        name: def.spec.name.clone(),
        route: def.route.clone(),
        strategy: a.strategy(),
        promotion: def.spec.promotion,
        phase: st.phase,
        canary_weight: w,
        primary_weight: TOTAL_WEIGHT - w,
        match_active: st.match_active,
        mirror: st.mirror,
        iterations: st.iterations,
        iterations_total: a.iterations,
        failed_checks: st.failed_checks,
        threshold: a.effective_threshold(),
        revision: st.revision.clone(),
        promoted_revision: st.promoted_revision.clone(),
        pending_revision: st.pending_revision.clone(),
        paused: st.paused,
        primary_backend: rec.slots.as_ref().map(|s| s.primary.clone()),
        canary_backend: rec.slots.as_ref().map(|s| s.canary.clone()),
        message: st.message.clone(),
        last_transition_ms: st.last_transition_ms,
        last_checks: st.last_checks.clone(),
        data_planes: fleet.ids(),
        pending_writes: rec.pending.len(),
        data_plane_error: dp_error,
        owner: None,
        driven_here: None,
        events: ring.iter().cloned().collect(),
    }
}

/// Starts the engine of a weir process: its canaries drive the in-process table store
/// (or their `dataPlanes`), and every event is also published on the control API's
/// event bus as an SSE event of kind `rollout`. With `ownership` (fleet mode) only the
/// owned canaries are driven, over every live replica, with their state in etcd.
pub fn start_for_app(
    cfg: &crate::config::Config,
    store: Arc<TableStore>,
    started: Instant,
    bus: Arc<crate::control::events::EventBus>,
    ownership: Option<Arc<dyn Ownership>>,
) -> Result<Engine, String> {
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
            peer_token: cfg.admin.token.clone(),
        },
    )
}
