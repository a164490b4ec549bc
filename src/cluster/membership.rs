//! One replica's membership in the fleet: its lease, its shard claims and the owner
//! keys of the canaries it drives, kept in etcd by three tasks.
//!
//! - **heartbeat** (every `heartbeat`): grants the lease if there is none (and writes
//!   `<prefix>/members/<name>`), else renews it with a keepalive and refreshes the
//!   member and shard records' heartbeat time in a transaction guarded by the lease.
//!   A failed keepalive stops every canary at once ([`Cluster::may_drive`] turns
//!   false); a keepalive answered "no such lease" means the lease expired: every shard
//!   and owner key is gone, so everything is dropped and a new lease is granted.
//! - **reconcile** (every `heartbeat`, and at once when the watch sees a member, shard
//!   or owner key come or go): reads members, shards and owners in one transaction
//!   (one consistent revision), checks that the keys this replica believes it holds
//!   are still bound to its lease, applies at most one shard claim or release
//!   ([`plan_shards`]), then releases the canaries no longer assigned to its shards
//!   and takes the owner keys of the newly assigned ones.
//! - **watch**: a `/v3/watch` on the prefix that wakes the reconcile; if it breaks the
//!   periodic reconcile still converges.
//!
//! # Safety: never two owners
//! A canary's owner key is created only if absent (`create_revision == 0`) and bound
//! to the owner's lease. The old owner gives it up by (1) marking the canary
//! *releasing* (`may_drive` false), (2) waiting for the engine's [`DriveGuard`] of a
//! tick in progress (bounded), (3) deleting the key in a transaction guarded by the
//! key's create revision. If the old owner died instead, the key goes with its lease,
//! 3 × heartbeat after its last renewal. The key's create revision is a fencing
//! token: [`Cluster::save_state`] writes the rollout state only while the owner key
//! still has the revision this replica created, so a stale owner cannot overwrite the
//! state of the new one.
//!
//! Locally, a lease counts as valid only while the last keepalive succeeded and less
//! than `TTL − heartbeat` has passed since that keepalive was *sent* (etcd extends the
//! lease at some point after that, so the local deadline is always earlier than
//! etcd's).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{broadcast, watch, Notify, OwnedRwLockReadGuard, RwLock};
use tokio::task::JoinHandle;

use super::config::{ClusterSettings, Replicas};
use super::etcd::{CmpOp, Compare, EtcdClient, EtcdError, Op, Target};
use super::view::{
    assignment, desired, plan_shards, Keys, MemberRecord, OwnerRecord, ShardAction, ShardRecord,
    View,
};

/// Events kept in memory for the API.
pub const EVENT_LOG: usize = 1000;

/// Longest wait for a tick in progress before an owner key is deleted anyway (the
/// fencing revision still stops a stale save).
pub const RELEASE_WAIT: Duration = Duration::from_secs(10);

/// Milliseconds since the Unix epoch (records and events).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// `<hostname>:<port>`: the default replica name.
pub fn default_name(admin_port: u16) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "weir".into());
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(100)
        .collect();
    format!("{host}:{admin_port}")
}

/// One ownership change or notable happening (the in-memory log, `tracing` and
/// subscribers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterEvent {
    /// Order of the event on this replica (from 1).
    pub seq: u64,
    /// When (ms since the Unix epoch).
    pub time_ms: u64,
    /// The replica that logged it.
    pub replica: String,
    /// `LeaseGranted`, `LeaseRestored`, `EtcdUnavailable`, `LeaseExpired`,
    /// `ShardClaimed`, `ShardReleased`, `ShardLost`, `CanaryAcquired`,
    /// `CanaryReleased`, `CanaryLost`, `CanaryStopped`.
    pub kind: String,
    /// The canary concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<String>,
    /// The shard concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    /// The etcd revision of the change (0 when none was written or it is unknown): an
    /// owner's `CanaryAcquired` revision is its key's create revision, its
    /// `CanaryReleased` revision that of the deletion.
    pub revision: i64,
    /// What happened, in words.
    pub message: String,
}

/// Why a state save was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SaveError {
    /// This replica does not (or no longer) own the canary: the state was not written
    /// and the step must not be applied.
    NotOwner(String),
    /// etcd could not be reached: the state was not written.
    Unavailable(String),
}

impl std::fmt::Display for SaveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SaveError::NotOwner(m) => write!(f, "not the owner: {m}"),
            SaveError::Unavailable(m) => write!(f, "state not saved: {m}"),
        }
    }
}

/// Held by the engine while it steps a canary and applies the step: a release of the
/// canary waits for it (bounded by [`RELEASE_WAIT`]).
pub struct DriveGuard {
    _guard: OwnedRwLockReadGuard<()>,
    /// The ownership token (owner key's create revision) the guard was taken under.
    pub token: i64,
}

impl DriveGuard {
    /// Holds `lock` for reading under `token` (an [`crate::cluster::Ownership`] other
    /// than [`Cluster`], e.g. a test's).
    pub async fn hold(lock: Arc<RwLock<()>>, token: i64) -> DriveGuard {
        DriveGuard {
            _guard: lock.read_owned().await,
            token,
        }
    }
}

/// Another replica's control API, for the owner's remote data planes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Peer {
    /// Replica name.
    pub name: String,
    /// Control-API URL.
    pub api_url: String,
    /// This replica itself.
    pub is_self: bool,
}

/// What `GET /api/v1/cluster` and `weir ctl cluster` show.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// This replica's name.
    pub replica: String,
    /// Its control-API URL as advertised.
    pub api_url: String,
    /// Key prefix.
    pub prefix: String,
    /// etcd endpoints.
    pub etcd: Vec<String>,
    /// `round-robin` or `hash`.
    pub algorithm: String,
    /// `auto` or the fixed shard count.
    pub replicas: String,
    /// Heartbeat in ms.
    pub heartbeat_ms: u64,
    /// Lease TTL asked of etcd, seconds.
    pub lease_ttl_secs: i64,
    /// Holds a valid lease (`/readyz`).
    pub ready: bool,
    /// The lease (id as a string: it does not fit a JSON double).
    pub lease: Option<LeaseStatus>,
    /// The last etcd problem, while it lasts.
    pub etcd_error: Option<String>,
    /// Revision of the last snapshot.
    pub revision: i64,
    /// Live members.
    pub members: Vec<MemberStatus>,
    /// Every shard of the assignment, held or not.
    pub shards: Vec<ShardStatus>,
    /// Every configured canary: its shard and owner.
    pub canaries: Vec<CanaryOwnership>,
    /// Canaries this replica may drive now.
    pub owned: Vec<String>,
    /// Recent events of this replica, oldest first.
    pub events: Vec<ClusterEvent>,
}

/// The lease part of the status.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseStatus {
    /// Lease id.
    pub id: String,
    /// TTL granted, seconds.
    pub ttl_secs: i64,
    /// Renewed and not past its local deadline.
    pub valid: bool,
    /// Time left before the local deadline, ms (0 when past).
    pub expires_in_ms: u64,
}

/// A member in the status.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// Replica name.
    pub name: String,
    /// Control-API URL.
    pub api_url: String,
    /// Last heartbeat written (ms since the Unix epoch, the member's clock).
    pub heartbeat_ms: u64,
    /// Shards it holds.
    pub shards: Vec<u32>,
}

/// A shard in the status.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    /// Shard number.
    pub shard: u32,
    /// Holder, if held.
    pub replica: Option<String>,
    /// Holder's heartbeat (ms since the Unix epoch).
    pub heartbeat_ms: Option<u64>,
    /// Canaries assigned to it.
    pub canaries: Vec<String>,
}

/// One canary's ownership in the status.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CanaryOwnership {
    /// The canary.
    pub canary: String,
    /// Assigned shard (none while no shard exists).
    pub shard: Option<u32>,
    /// Replica holding its owner key.
    pub owner: Option<String>,
    /// Owner key's create revision.
    pub owner_revision: Option<i64>,
}

/// How a replica joins the fleet.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// The validated `cluster:` block.
    pub settings: ClusterSettings,
    /// This replica's name (resolved: the setting, or [`default_name`]).
    pub name: String,
    /// Its control-API URL (resolved).
    pub api_url: String,
    /// Every configured canary (all replicas must share the list).
    pub canaries: Vec<String>,
}

struct LeaseState {
    id: i64,
    ttl: i64,
    /// Local deadline: keepalive send time + TTL.
    valid_until: Instant,
    /// The last keepalive succeeded.
    ok: bool,
}

struct Owned {
    /// The owner key's create revision (fencing token).
    create_revision: i64,
    /// The shard it is owned through.
    shard: u32,
    /// Being given up: no more driving.
    releasing: bool,
}

#[derive(Default)]
struct State {
    lease: Option<LeaseState>,
    /// Shards held → their key's create revision.
    shards: BTreeMap<u32, i64>,
    owned: BTreeMap<String, Owned>,
    /// The last snapshot.
    view: Option<View>,
    /// A snapshot confirmed this replica's keys since the lease was last (re)validated.
    verified: bool,
    /// The member key is written for the current lease.
    member_written: bool,
    etcd_error: Option<String>,
}

struct Inner {
    opts: ClusterOptions,
    keys: Keys,
    etcd: EtcdClient,
    state: Mutex<State>,
    log: Mutex<VecDeque<ClusterEvent>>,
    seq: AtomicU64,
    events: broadcast::Sender<ClusterEvent>,
    /// Bumped whenever what this replica may drive can have changed.
    changes: watch::Sender<u64>,
    /// Wakes the reconcile task.
    wake: Notify,
    /// Per-canary drive locks ([`DriveGuard`]).
    locks: Mutex<BTreeMap<String, Arc<RwLock<()>>>>,
    /// Stopped (halted or shut down): drives nothing.
    stopped: AtomicBool,
}

/// This replica's handle on the fleet (cheap to clone).
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    shutdown: Arc<watch::Sender<bool>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Cluster {
    /// Joins the fleet: starts the heartbeat, reconcile and watch tasks. Nothing is
    /// driven until the lease is granted and a first snapshot confirmed ownership.
    pub fn start(opts: ClusterOptions) -> Result<Cluster, String> {
        let timeout = opts
            .settings
            .heartbeat
            .clamp(Duration::from_millis(500), Duration::from_secs(5));
        let etcd = EtcdClient::new(&opts.settings.etcd, timeout)?;
        let (events, _) = broadcast::channel(1024);
        let (changes, _) = watch::channel(0u64);
        let inner = Arc::new(Inner {
            keys: Keys::new(&opts.settings.prefix),
            opts,
            etcd,
            state: Mutex::new(State::default()),
            log: Mutex::new(VecDeque::new()),
            seq: AtomicU64::new(0),
            events,
            changes,
            wake: Notify::new(),
            locks: Mutex::new(BTreeMap::new()),
            stopped: AtomicBool::new(false),
        });
        let (shutdown, rx) = watch::channel(false);
        let tasks = vec![
            tokio::spawn(inner.clone().heartbeat_loop(rx.clone())),
            tokio::spawn(inner.clone().reconcile_loop(rx.clone())),
            tokio::spawn(inner.clone().watch_loop(rx)),
        ];
        Ok(Cluster {
            inner,
            tasks: Arc::new(Mutex::new(tasks)),
            shutdown: Arc::new(shutdown),
        })
    }

    /// This replica's name.
    pub fn name(&self) -> &str {
        &self.inner.opts.name
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &ClusterSettings {
        &self.inner.opts.settings
    }

    /// True only while this replica holds a valid lease, a snapshot confirmed its
    /// keys, and it holds the canary's owner key and is not giving it up.
    pub fn may_drive(&self, canary: &str) -> bool {
        self.inner.may_drive(canary)
    }

    /// The ownership token of `canary` while this replica may drive it: the create
    /// revision of its owner key. A different token than before means the canary was
    /// lost and taken again meanwhile (another replica may have driven it): the engine
    /// must reload its state.
    pub fn token(&self, canary: &str) -> Option<i64> {
        let st = lock(&self.inner.state);
        if !self.inner.drivable(&st) {
            return None;
        }
        st.owned
            .get(canary)
            .filter(|o| !o.releasing)
            .map(|o| o.create_revision)
    }

    /// Holds a valid lease (`/readyz`).
    pub fn has_valid_lease(&self) -> bool {
        self.inner.lease_valid(&lock(&self.inner.state))
    }

    /// Canaries this replica may drive now.
    pub fn owned(&self) -> Vec<String> {
        let st = lock(&self.inner.state);
        if !self.inner.drivable(&st) {
            return Vec::new();
        }
        st.owned
            .iter()
            .filter(|(_, o)| !o.releasing)
            .map(|(c, _)| c.clone())
            .collect()
    }

    /// A guard to hold while stepping `canary` and applying the step; `None` when this
    /// replica may not drive it.
    pub async fn guard(&self, canary: &str) -> Option<DriveGuard> {
        if !self.may_drive(canary) {
            return None;
        }
        let l = self.inner.drive_lock(canary);
        let g = l.read_owned().await;
        self.token(canary)
            .map(|token| DriveGuard { _guard: g, token })
    }

    /// The rollout state stored for `canary` (`None`: never saved).
    pub async fn load_state(&self, canary: &str) -> Result<Option<Vec<u8>>, String> {
        self.inner
            .etcd
            .get(&self.inner.keys.state(canary))
            .await
            .map(|kv| kv.map(|kv| kv.value))
            .map_err(|e| e.to_string())
    }

    /// Stores the rollout state of `canary`, only while this replica still holds the
    /// owner key it created (compared by create revision in the same transaction).
    pub async fn save_state(&self, canary: &str, data: &[u8]) -> Result<(), SaveError> {
        self.inner.save_state(canary, data).await
    }

    /// Changes whenever what this replica may drive can have changed (gain, loss,
    /// lease problems): the engine re-checks [`Cluster::may_drive`].
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Every ownership event from now on.
    pub fn events(&self) -> broadcast::Receiver<ClusterEvent> {
        self.inner.events.subscribe()
    }

    /// The in-memory event log, oldest first.
    pub fn event_log(&self) -> Vec<ClusterEvent> {
        lock(&self.inner.log).iter().cloned().collect()
    }

    /// Every live member's control API (from the last snapshot), this one included.
    pub fn peers(&self) -> Vec<Peer> {
        let st = lock(&self.inner.state);
        let me = st.lease.as_ref().map(|l| l.id);
        let mut out: Vec<Peer> = st
            .view
            .as_ref()
            .map(|v| {
                v.members
                    .iter()
                    .filter_map(|(name, e)| {
                        let r = e.record.as_ref()?;
                        Some(Peer {
                            name: name.clone(),
                            api_url: r.api_url.clone(),
                            is_self: Some(e.lease) == me || *name == self.inner.opts.name,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        if !out.iter().any(|p| p.is_self) {
            out.push(Peer {
                name: self.inner.opts.name.clone(),
                api_url: self.inner.opts.api_url.clone(),
                is_self: true,
            });
        }
        out
    }

    /// The replica holding `canary`'s owner key in the last snapshot, with its control
    /// API (for forwarding an operator's command to it).
    pub fn owner_of(&self, canary: &str) -> Option<Peer> {
        let st = lock(&self.inner.state);
        let view = st.view.as_ref()?;
        let owner = view.owners.get(canary)?;
        let name = owner.record.as_ref()?.replica.clone();
        let api_url = view
            .members
            .get(&name)
            .and_then(|m| m.record.as_ref())
            .map(|r| r.api_url.clone())?;
        let me = st.lease.as_ref().map(|l| l.id);
        Some(Peer {
            is_self: Some(owner.lease) == me,
            name,
            api_url,
        })
    }

    /// Wakes the reconcile task now (tests, and after a configuration change).
    pub fn poke(&self) {
        self.inner.wake.notify_one();
    }

    /// The status page.
    pub fn status(&self) -> ClusterStatus {
        self.inner.status()
    }

    /// Stops as a crashed process would: the tasks end, nothing is released, the
    /// lease runs out on its own. Drives nothing afterwards. (Tests and chaos drills.)
    pub fn halt(&self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        let _ = self.shutdown.send(true);
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
        self.inner.bump();
    }

    /// Leaves the fleet: stops the tasks, stops driving, waits (bounded) for ticks in
    /// progress, then revokes the lease, which deletes the member, shard and owner
    /// keys at once so the other replicas take over without waiting for the TTL.
    pub async fn shutdown(&self) {
        if self.inner.stopped.swap(true, Ordering::SeqCst) {
            // Halted (a simulated crash keeps its keys until the lease expires) or
            // already shut down.
            return;
        }
        let _ = self.shutdown.send(true);
        let tasks: Vec<JoinHandle<()>> = lock(&self.tasks).drain(..).collect();
        for t in tasks {
            let _ = t.await;
        }
        self.inner.bump();
        let (lease, owned): (Option<i64>, Vec<String>) = {
            let mut st = lock(&self.inner.state);
            for o in st.owned.values_mut() {
                o.releasing = true;
            }
            (
                st.lease.as_ref().map(|l| l.id),
                st.owned.keys().cloned().collect(),
            )
        };
        for c in &owned {
            let l = self.inner.drive_lock(c);
            let _ = tokio::time::timeout(RELEASE_WAIT, l.write_owned()).await;
        }
        if let Some(id) = lease {
            match self.inner.etcd.lease_revoke(id).await {
                Ok(rev) => {
                    for c in &owned {
                        self.inner.event(
                            "CanaryReleased",
                            Some(c),
                            None,
                            rev,
                            "released on shutdown (lease revoked)".into(),
                        );
                    }
                    self.inner
                        .event("LeaseRevoked", None, None, rev, "left the fleet".into());
                }
                Err(e) => {
                    self.inner.event(
                        "EtcdUnavailable",
                        None,
                        None,
                        0,
                        format!(
                            "could not revoke the lease on shutdown ({e}); it expires on its own"
                        ),
                    );
                }
            }
        }
        let mut st = lock(&self.inner.state);
        st.owned.clear();
        st.shards.clear();
        st.lease = None;
    }
}

impl Inner {
    fn heartbeat(&self) -> Duration {
        self.opts.settings.heartbeat
    }

    fn bump(&self) {
        self.changes.send_modify(|g| *g += 1);
    }

    fn event(
        &self,
        kind: &str,
        canary: Option<&str>,
        shard: Option<u32>,
        revision: i64,
        message: String,
    ) {
        let e = ClusterEvent {
            seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
            time_ms: now_ms(),
            replica: self.opts.name.clone(),
            kind: kind.to_string(),
            canary: canary.map(str::to_string),
            shard,
            revision,
            message,
        };
        let warn = matches!(
            kind,
            "EtcdUnavailable" | "LeaseExpired" | "CanaryLost" | "ShardLost"
        );
        if warn {
            tracing::warn!(target: "weir::cluster", replica = %e.replica, kind = %e.kind, canary = ?e.canary, shard = ?e.shard, revision = e.revision, "{}", e.message);
        } else {
            tracing::info!(target: "weir::cluster", replica = %e.replica, kind = %e.kind, canary = ?e.canary, shard = ?e.shard, revision = e.revision, "{}", e.message);
        }
        {
            let mut log = lock(&self.log);
            if log.len() >= EVENT_LOG {
                log.pop_front();
            }
            log.push_back(e.clone());
        }
        let _ = self.events.send(e);
    }

    fn drive_lock(&self, canary: &str) -> Arc<RwLock<()>> {
        lock(&self.locks)
            .entry(canary.to_string())
            .or_insert_with(|| Arc::new(RwLock::new(())))
            .clone()
    }

    fn lease_valid(&self, st: &State) -> bool {
        if self.stopped.load(Ordering::SeqCst) {
            return false;
        }
        st.lease
            .as_ref()
            .is_some_and(|l| l.ok && Instant::now() + self.heartbeat() < l.valid_until)
    }

    fn drivable(&self, st: &State) -> bool {
        self.lease_valid(st) && st.verified
    }

    fn may_drive(&self, canary: &str) -> bool {
        let st = lock(&self.state);
        self.drivable(&st) && st.owned.get(canary).is_some_and(|o| !o.releasing)
    }

    // ------------------------------------------------------------ heartbeat

    async fn heartbeat_loop(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.heartbeat());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            if *shutdown.borrow() {
                return;
            }
            self.beat().await;
        }
    }

    fn member_record(&self) -> Vec<u8> {
        serde_json::to_vec(&MemberRecord {
            name: self.opts.name.clone(),
            api_url: self.opts.api_url.clone(),
            heartbeat_ms: now_ms(),
            started_ms: now_ms(),
        })
        .unwrap_or_default()
    }

    fn shard_record(&self, shard: u32) -> Vec<u8> {
        serde_json::to_vec(&ShardRecord {
            shard,
            replica: self.opts.name.clone(),
            api_url: self.opts.api_url.clone(),
            heartbeat_ms: now_ms(),
        })
        .unwrap_or_default()
    }

    /// One heartbeat: grant, or renew and refresh the records.
    async fn beat(&self) {
        let lease = lock(&self.state).lease.as_ref().map(|l| l.id);
        let Some(id) = lease else {
            self.grant().await;
            return;
        };
        let sent = Instant::now();
        match self.etcd.lease_keepalive(id).await {
            Ok(Some(ttl)) => {
                let restored = {
                    let mut st = lock(&self.state);
                    st.etcd_error = None;
                    match st.lease.as_mut() {
                        Some(l) if l.id == id => {
                            l.valid_until = sent + Duration::from_secs(ttl.max(0) as u64);
                            l.ttl = ttl;
                            let was = l.ok;
                            l.ok = true;
                            if !was {
                                st.verified = false;
                            }
                            !was
                        }
                        _ => false,
                    }
                };
                if restored {
                    self.event(
                        "LeaseRestored",
                        None,
                        None,
                        0,
                        "etcd reachable again and the lease is alive: driving resumes after the next snapshot".into(),
                    );
                    self.wake.notify_one();
                }
                self.refresh(id).await;
            }
            Ok(None) => {
                self.lease_gone(
                    id,
                    "the lease expired in etcd (renewals failed for longer than its TTL)",
                );
                self.grant().await;
            }
            Err(e) => {
                let was = {
                    let mut st = lock(&self.state);
                    st.etcd_error = Some(e.to_string());
                    match st.lease.as_mut() {
                        Some(l) if l.id == id => std::mem::replace(&mut l.ok, false),
                        _ => false,
                    }
                };
                if was {
                    let n = lock(&self.state).owned.len();
                    self.event(
                        "EtcdUnavailable",
                        None,
                        None,
                        0,
                        format!("lease renewal failed ({e}): stopped driving {n} canaries; traffic stays where it is"),
                    );
                    self.bump();
                }
            }
        }
    }

    /// Drops everything held under lease `id` (it is gone in etcd, and its keys with it).
    fn lease_gone(&self, id: i64, why: &str) {
        let (shards, owned) = {
            let mut st = lock(&self.state);
            if st.lease.as_ref().map(|l| l.id) != Some(id) {
                return;
            }
            st.lease = None;
            st.verified = false;
            st.member_written = false;
            let shards: Vec<u32> = std::mem::take(&mut st.shards).into_keys().collect();
            let owned: Vec<String> = std::mem::take(&mut st.owned).into_keys().collect();
            (shards, owned)
        };
        self.event("LeaseExpired", None, None, 0, why.to_string());
        for c in owned {
            self.event(
                "CanaryLost",
                Some(&c),
                None,
                0,
                "lost with the lease".into(),
            );
        }
        for s in shards {
            self.event("ShardLost", None, Some(s), 0, "lost with the lease".into());
        }
        self.bump();
    }

    async fn grant(&self) {
        let sent = Instant::now();
        let ttl = self.opts.settings.lease_ttl_secs();
        match self.etcd.lease_grant(ttl).await {
            Ok(l) => {
                {
                    let mut st = lock(&self.state);
                    st.lease = Some(LeaseState {
                        id: l.id,
                        ttl: l.ttl,
                        valid_until: sent + Duration::from_secs(l.ttl.max(0) as u64),
                        ok: true,
                    });
                    st.verified = false;
                    st.member_written = false;
                    st.etcd_error = None;
                }
                self.event(
                    "LeaseGranted",
                    None,
                    None,
                    0,
                    format!("lease {:x} granted for {}s", l.id, l.ttl),
                );
                self.write_member(l.id).await;
                self.wake.notify_one();
            }
            Err(e) => {
                let first = {
                    let mut st = lock(&self.state);
                    let first = st.etcd_error.is_none();
                    st.etcd_error = Some(e.to_string());
                    first
                };
                if first {
                    self.event(
                        "EtcdUnavailable",
                        None,
                        None,
                        0,
                        format!("cannot get a lease: {e}"),
                    );
                }
            }
        }
    }

    async fn write_member(&self, id: i64) {
        match self
            .etcd
            .put(
                &self.keys.member(&self.opts.name),
                &self.member_record(),
                id,
            )
            .await
        {
            Ok(_) => lock(&self.state).member_written = true,
            Err(e) => lock(&self.state).etcd_error = Some(e.to_string()),
        }
    }

    /// Rewrites the member and shard records with the current heartbeat time, only
    /// where the keys are still bound to this lease.
    async fn refresh(&self, id: i64) {
        let (written, shards): (bool, Vec<u32>) = {
            let st = lock(&self.state);
            (st.member_written, st.shards.keys().copied().collect())
        };
        if !written {
            self.write_member(id).await;
            return;
        }
        let mut cmp = vec![Compare::new(
            self.keys.member(&self.opts.name),
            CmpOp::Equal,
            Target::Lease(id),
        )];
        let mut ops = vec![Op::Put {
            key: self.keys.member(&self.opts.name),
            value: self.member_record(),
            lease: id,
        }];
        for s in &shards {
            cmp.push(Compare::new(
                self.keys.shard(*s),
                CmpOp::Equal,
                Target::Lease(id),
            ));
            ops.push(Op::Put {
                key: self.keys.shard(*s),
                value: self.shard_record(*s),
                lease: id,
            });
        }
        match self.etcd.txn(&cmp, &ops, &[]).await {
            Ok(r) if r.succeeded => {}
            Ok(_) => {
                // A key is no longer ours (or the member key vanished): the reconcile
                // sorts out which; the member key is ours by name, write it back.
                self.write_member(id).await;
                self.wake.notify_one();
            }
            Err(e) => lock(&self.state).etcd_error = Some(e.to_string()),
        }
    }

    // ------------------------------------------------------------ reconcile

    async fn reconcile_loop(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(self.heartbeat()) => {}
                _ = shutdown.changed() => return,
            }
            if *shutdown.borrow() {
                return;
            }
            match self.reconcile().await {
                Ok(again) => {
                    if again {
                        self.wake.notify_one();
                    }
                }
                Err(e) => {
                    lock(&self.state).etcd_error = Some(e.to_string());
                }
            }
        }
    }

    async fn read_view(&self) -> Result<View, EtcdError> {
        let ops = [
            Op::Get {
                key: self.keys.members(),
                prefix: true,
            },
            Op::Get {
                key: self.keys.shards(),
                prefix: true,
            },
            Op::Get {
                key: self.keys.owners(),
                prefix: true,
            },
        ];
        let r = self.etcd.txn(&[], &ops, &[]).await?;
        Ok(View::parse(
            &self.keys,
            r.revision,
            r.range(0),
            r.range(1),
            r.range(2),
        ))
    }

    /// The lease id while it is valid.
    fn valid_lease(&self) -> Option<i64> {
        let st = lock(&self.state);
        if self.lease_valid(&st) {
            st.lease.as_ref().map(|l| l.id)
        } else {
            None
        }
    }

    /// One pass; `Ok(true)` asks for another pass at once (a shard changed).
    async fn reconcile(&self) -> Result<bool, EtcdError> {
        let Some(me) = self.valid_lease() else {
            return Ok(false);
        };
        let view = self.read_view().await?;
        if !self.verify(me, &view) {
            return Ok(false);
        }
        let settings = &self.opts.settings;
        match plan_shards(&view, me, &self.opts.name, settings.replicas) {
            ShardAction::Claim(s) => {
                self.claim_shard(me, s).await?;
                return Ok(true);
            }
            ShardAction::Release(s) => {
                self.release_shard(me, s).await?;
                return Ok(true);
            }
            ShardAction::Keep => {}
        }
        let my_shards = view.shards_of(me);
        let want = desired(
            &view,
            &self.opts.canaries,
            &my_shards,
            settings.replicas,
            settings.algorithm,
        );
        let to_release: Vec<String> = {
            let mut st = lock(&self.state);
            let mut out = Vec::new();
            for (c, o) in st.owned.iter_mut() {
                match want.get(c) {
                    Some(s) => o.shard = *s,
                    None => out.push(c.clone()),
                }
            }
            out
        };
        for c in to_release {
            self.release_canary(&c, "no longer assigned to a shard of this replica")
                .await?;
        }
        for (c, s) in &want {
            if lock(&self.state).owned.contains_key(c) {
                continue;
            }
            if view.owners.contains_key(c) {
                // Another replica still holds it: it gives it up (or its lease
                // expires), then the watch wakes us.
                continue;
            }
            if self.valid_lease() != Some(me) {
                return Ok(false);
            }
            self.acquire(me, c, *s).await?;
        }
        Ok(false)
    }

    /// Checks this replica's beliefs against the snapshot; false when the lease
    /// changed meanwhile (the pass is abandoned).
    fn verify(&self, me: i64, view: &View) -> bool {
        let mut lost_shards = Vec::new();
        let mut lost = Vec::new();
        let mut adopted = Vec::new();
        let changed;
        {
            let mut st = lock(&self.state);
            if st.lease.as_ref().map(|l| l.id) != Some(me) {
                return false;
            }
            let mine = view.shards_of(me);
            let before: Vec<u32> = st.shards.keys().copied().collect();
            for s in before {
                if !mine.contains(&s) {
                    st.shards.remove(&s);
                    lost_shards.push(s);
                }
            }
            for s in &mine {
                if let Some(e) = view.shards.get(s) {
                    st.shards.entry(*s).or_insert(e.create_revision);
                }
            }
            let names: Vec<String> = st.owned.keys().cloned().collect();
            for c in names {
                let still = view.owners.get(&c).is_some_and(|e| {
                    e.lease == me
                        && Some(e.create_revision) == st.owned.get(&c).map(|o| o.create_revision)
                });
                if !still {
                    st.owned.remove(&c);
                    lost.push(c);
                }
            }
            for (c, e) in &view.owners {
                if e.lease == me && !st.owned.contains_key(c) {
                    let shard = e.record.as_ref().map(|r| r.shard).unwrap_or(0);
                    st.owned.insert(
                        c.clone(),
                        Owned {
                            create_revision: e.create_revision,
                            shard,
                            releasing: false,
                        },
                    );
                    adopted.push((c.clone(), e.create_revision));
                }
            }
            changed = !st.verified || !lost.is_empty() || !adopted.is_empty();
            st.verified = true;
            st.view = Some(view.clone());
        }
        for s in lost_shards {
            self.event(
                "ShardLost",
                None,
                Some(s),
                view.revision,
                "the shard key is no longer bound to this replica's lease".into(),
            );
        }
        for c in lost {
            self.event(
                "CanaryLost",
                Some(&c),
                None,
                view.revision,
                "the owner key is gone or no longer ours: stopped driving".into(),
            );
        }
        for (c, rev) in adopted {
            self.event(
                "CanaryAcquired",
                Some(&c),
                None,
                rev,
                "owner key already bound to this lease: driving".into(),
            );
        }
        if changed {
            self.bump();
        }
        true
    }

    async fn claim_shard(&self, me: i64, shard: u32) -> Result<(), EtcdError> {
        let key = self.keys.shard(shard);
        let r = self
            .etcd
            .txn(
                &[Compare::new(key.clone(), CmpOp::Equal, Target::Create(0))],
                &[Op::Put {
                    key,
                    value: self.shard_record(shard),
                    lease: me,
                }],
                &[],
            )
            .await?;
        if r.succeeded {
            lock(&self.state).shards.insert(shard, r.revision);
            self.event(
                "ShardClaimed",
                None,
                Some(shard),
                r.revision,
                format!("claimed shard {shard}"),
            );
        }
        Ok(())
    }

    async fn release_shard(&self, me: i64, shard: u32) -> Result<(), EtcdError> {
        let canaries: Vec<String> = lock(&self.state)
            .owned
            .iter()
            .filter(|(_, o)| o.shard == shard)
            .map(|(c, _)| c.clone())
            .collect();
        for c in canaries {
            self.release_canary(&c, &format!("shard {shard} is being given back"))
                .await?;
        }
        let key = self.keys.shard(shard);
        let r = self
            .etcd
            .txn(
                &[Compare::new(key.clone(), CmpOp::Equal, Target::Lease(me))],
                &[Op::Delete { key, prefix: false }],
                &[],
            )
            .await?;
        lock(&self.state).shards.remove(&shard);
        if r.succeeded {
            self.event(
                "ShardReleased",
                None,
                Some(shard),
                r.revision,
                format!("gave shard {shard} back"),
            );
        }
        Ok(())
    }

    /// Stops driving `canary`, waits for a tick in progress, deletes the owner key.
    async fn release_canary(&self, canary: &str, why: &str) -> Result<(), EtcdError> {
        let rev = {
            let mut st = lock(&self.state);
            match st.owned.get_mut(canary) {
                None => return Ok(()),
                Some(o) => {
                    let first = !o.releasing;
                    o.releasing = true;
                    (o.create_revision, first)
                }
            }
        };
        let (rev, first) = rev;
        if first {
            self.bump();
            self.event(
                "CanaryStopped",
                Some(canary),
                None,
                0,
                format!("{why}: stopped driving, releasing"),
            );
        }
        let l = self.drive_lock(canary);
        let guard = tokio::time::timeout(RELEASE_WAIT, l.write_owned()).await;
        if guard.is_err() {
            tracing::warn!(target: "weir::cluster", canary, "a tick still runs after {RELEASE_WAIT:?}: releasing anyway (its save is fenced)");
        }
        let key = self.keys.owner(canary);
        let r = self
            .etcd
            .txn(
                &[Compare::new(key.clone(), CmpOp::Equal, Target::Create(rev))],
                &[Op::Delete { key, prefix: false }],
                &[],
            )
            .await?;
        lock(&self.state).owned.remove(canary);
        if r.succeeded {
            self.event(
                "CanaryReleased",
                Some(canary),
                None,
                r.revision,
                format!("{why}: owner key deleted"),
            );
        } else {
            self.event(
                "CanaryLost",
                Some(canary),
                None,
                r.revision,
                "the owner key was already gone".into(),
            );
        }
        self.bump();
        Ok(())
    }

    async fn acquire(&self, me: i64, canary: &str, shard: u32) -> Result<(), EtcdError> {
        let key = self.keys.owner(canary);
        let rec = serde_json::to_vec(&OwnerRecord {
            canary: canary.to_string(),
            replica: self.opts.name.clone(),
            shard,
            acquired_ms: now_ms(),
        })
        .unwrap_or_default();
        let r = self
            .etcd
            .txn(
                &[Compare::new(key.clone(), CmpOp::Equal, Target::Create(0))],
                &[Op::Put {
                    key,
                    value: rec,
                    lease: me,
                }],
                &[],
            )
            .await?;
        if !r.succeeded {
            return Ok(());
        }
        let took = {
            let mut st = lock(&self.state);
            if st.lease.as_ref().map(|l| l.id) == Some(me) {
                st.owned.insert(
                    canary.to_string(),
                    Owned {
                        create_revision: r.revision,
                        shard,
                        releasing: false,
                    },
                );
                true
            } else {
                false
            }
        };
        if took {
            self.event(
                "CanaryAcquired",
                Some(canary),
                Some(shard),
                r.revision,
                format!("owner key taken through shard {shard}: driving"),
            );
            self.bump();
        }
        Ok(())
    }

    async fn save_state(&self, canary: &str, data: &[u8]) -> Result<(), SaveError> {
        let rev = {
            let st = lock(&self.state);
            if !self.drivable(&st) {
                return Err(SaveError::NotOwner("no valid lease".into()));
            }
            match st.owned.get(canary) {
                Some(o) if !o.releasing => o.create_revision,
                Some(_) => return Err(SaveError::NotOwner("the canary is being released".into())),
                None => {
                    return Err(SaveError::NotOwner(
                        "this replica does not own the canary".into(),
                    ))
                }
            }
        };
        let r = self
            .etcd
            .txn(
                &[Compare::new(
                    self.keys.owner(canary),
                    CmpOp::Equal,
                    Target::Create(rev),
                )],
                &[Op::Put {
                    key: self.keys.state(canary),
                    value: data.to_vec(),
                    lease: 0,
                }],
                &[],
            )
            .await
            .map_err(|e| SaveError::Unavailable(e.to_string()))?;
        if r.succeeded {
            return Ok(());
        }
        let removed = {
            let mut st = lock(&self.state);
            match st.owned.get(canary) {
                Some(o) if o.create_revision == rev => st.owned.remove(canary).is_some(),
                _ => false,
            }
        };
        if removed {
            self.event(
                "CanaryLost",
                Some(canary),
                None,
                r.revision,
                "state save refused: the owner key is no longer ours".into(),
            );
            self.bump();
            self.wake.notify_one();
        }
        Err(SaveError::NotOwner(
            "the owner key is no longer ours".into(),
        ))
    }

    // ------------------------------------------------------------ watch

    async fn watch_loop(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let all = self.keys.all();
        let state_prefix = self.keys.state("");
        loop {
            if *shutdown.borrow() {
                return;
            }
            let start = tokio::select! {
                w = self.etcd.watch(&all, 0) => w,
                _ = shutdown.changed() => return,
            };
            match start {
                Ok(mut w) => loop {
                    let next = tokio::select! {
                        n = w.next() => n,
                        _ = shutdown.changed() => return,
                    };
                    match next {
                        Some(Ok(events)) => {
                            let relevant = events.iter().any(|e| {
                                !e.kv.key.starts_with(&state_prefix)
                                    && (e.deleted
                                        || e.kv.version <= 1
                                        || e.kv.key.contains("/owners/"))
                            });
                            if relevant {
                                self.wake.notify_one();
                            }
                        }
                        Some(Err(e)) => {
                            tracing::debug!(target: "weir::cluster", error = %e, "watch ended");
                            break;
                        }
                        None => break,
                    }
                },
                Err(e) => {
                    tracing::debug!(target: "weir::cluster", error = %e, "watch not started");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.heartbeat()) => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    // ------------------------------------------------------------ status

    fn status(&self) -> ClusterStatus {
        let st = lock(&self.state);
        let settings = &self.opts.settings;
        let valid = self.lease_valid(&st);
        let view = st.view.clone().unwrap_or_default();
        let assigned = assignment(
            &view,
            &self.opts.canaries,
            settings.replicas,
            settings.algorithm,
        );
        let mut shard_nums: BTreeSet<u32> = view.shard_set(settings.replicas).into_iter().collect();
        shard_nums.extend(view.shards.keys().copied());
        let shards = shard_nums
            .iter()
            .map(|s| {
                let e = view.shards.get(s);
                ShardStatus {
                    shard: *s,
                    replica: view.holder(*s),
                    heartbeat_ms: e.and_then(|e| e.record.as_ref()).map(|r| r.heartbeat_ms),
                    canaries: assigned
                        .iter()
                        .filter(|(_, a)| *a == s)
                        .map(|(c, _)| c.clone())
                        .collect(),
                }
            })
            .collect();
        let members = view
            .members
            .iter()
            .map(|(name, e)| MemberStatus {
                name: name.clone(),
                api_url: e
                    .record
                    .as_ref()
                    .map(|r| r.api_url.clone())
                    .unwrap_or_default(),
                heartbeat_ms: e.record.as_ref().map(|r| r.heartbeat_ms).unwrap_or(0),
                shards: view.shards_of(e.lease).into_iter().collect(),
            })
            .collect();
        let canaries = self
            .opts
            .canaries
            .iter()
            .map(|c| {
                let o = view.owners.get(c);
                CanaryOwnership {
                    canary: c.clone(),
                    shard: assigned.get(c).copied(),
                    owner: o.map(|o| {
                        o.record
                            .as_ref()
                            .map(|r| r.replica.clone())
                            .unwrap_or_else(|| "?".into())
                    }),
                    owner_revision: o.map(|o| o.create_revision),
                }
            })
            .collect();
        let drivable = valid && st.verified;
        let owned = if drivable {
            st.owned
                .iter()
                .filter(|(_, o)| !o.releasing)
                .map(|(c, _)| c.clone())
                .collect()
        } else {
            Vec::new()
        };
        let now = Instant::now();
        ClusterStatus {
            replica: self.opts.name.clone(),
            api_url: self.opts.api_url.clone(),
            prefix: settings.prefix.clone(),
            etcd: settings.etcd.clone(),
            algorithm: settings.algorithm.as_str().to_string(),
            replicas: match settings.replicas {
                Replicas::Auto => "auto".into(),
                Replicas::Fixed(n) => n.to_string(),
            },
            heartbeat_ms: u64::try_from(settings.heartbeat.as_millis()).unwrap_or(u64::MAX),
            lease_ttl_secs: settings.lease_ttl_secs(),
            ready: valid,
            lease: st.lease.as_ref().map(|l| LeaseStatus {
                id: format!("{:x}", l.id),
                ttl_secs: l.ttl,
                valid,
                expires_in_ms: u64::try_from(
                    l.valid_until.saturating_duration_since(now).as_millis(),
                )
                .unwrap_or(u64::MAX),
            }),
            etcd_error: st.etcd_error.clone(),
            revision: view.revision,
            members,
            shards,
            canaries,
            owned,
            events: lock(&self.log).iter().cloned().collect(),
        }
    }
}
