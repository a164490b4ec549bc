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
//!
//! The time (records, events, the local lease deadline, the waits) is the injected
//! [`Clock`] ([`Cluster::start_with_clock`]).
//!
//! # Layout
//! - this file: the [`Cluster`] handle, its options, events and the local state;
//! - `lease`: the heartbeat task (grant, keepalive, record refresh);
//! - `reconcile`: the reconcile and watch tasks (shard claims, owner keys, fenced save);
//! - `peers`: which members are trusted as peers, and their acknowledgement lag;
//! - `status`: what `GET /api/v1/cluster` shows.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{broadcast, watch, Notify, OwnedRwLockReadGuard, RwLock};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::etcd::EtcdClient;
use super::view::{Keys, View};
use crate::clock::Clock;
use crate::config::cluster::ClusterSettings;

mod lease;
mod peers;
mod reconcile;
mod status;

pub use peers::vet_url;

pub use status::{
    CanaryOwnership, ClusterStatus, LeaseStatus, MemberStatus, RefusedPeer, ShardStatus,
};

#[cfg(test)]
mod tests;

/// Events kept in memory for the API.
pub const EVENT_LOG: usize = 1000;

/// Longest wait for a tick in progress before an owner key is deleted anyway (the
/// fencing revision still stops a stale save).
pub const RELEASE_WAIT: Duration = Duration::from_secs(10);

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

pub use crate::wire::cluster::ClusterEvent;

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
    /// The members vetted as peers, the refused ones, the engine's waits.
    peers: peers::PeerState,
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
    /// Records' and events' times, the local lease deadline, the waits.
    clock: Clock,
    /// This replica's routing-table version, for its member record.
    table_version: Mutex<Option<TableVersion>>,
}

type TableVersion = Arc<dyn Fn() -> u64 + Send + Sync>;

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
    /// Joins the fleet: starts the heartbeat, reconcile and watch tasks at once, without
    /// a first contact ([`Cluster::join`] makes one). Nothing is driven until the lease
    /// is granted and a first snapshot confirmed ownership.
    pub fn start(opts: ClusterOptions) -> Result<Cluster, String> {
        Cluster::start_with_clock(opts, Clock::system())
    }

    /// [`Cluster::start`] on `clock` (records' times, the local lease deadline, waits).
    pub fn start_with_clock(opts: ClusterOptions, clock: Clock) -> Result<Cluster, String> {
        Ok(Cluster::spawn(Arc::new(Inner::new(opts, clock)?)))
    }

    /// Joins the fleet after a first contact with etcd: the TLS and password files are
    /// read, every endpoint is checked (TLS both ways, the user, reading and writing
    /// under the prefix), and only then do the tasks start. A wrong configuration is
    /// an error naming the field to fix; etcd out of reach is not (it is logged, and
    /// the tasks keep trying as after losing etcd later).
    pub async fn join(opts: ClusterOptions) -> Result<Cluster, String> {
        let inner = Inner::new(opts, Clock::system())?;
        let notes = super::connect::first_contact(
            &inner.etcd,
            &inner.opts.settings,
            &inner.keys,
            &inner.opts.name,
        )
        .await?;
        for note in notes {
            tracing::warn!(target: "weir::cluster", replica = %inner.opts.name, "{note}");
        }
        Ok(Cluster::spawn(Arc::new(inner)))
    }

    fn spawn(inner: Arc<Inner>) -> Cluster {
        let (shutdown, rx) = watch::channel(false);
        let tasks = vec![
            tokio::spawn(inner.clone().heartbeat_loop(rx.clone())),
            tokio::spawn(inner.clone().reconcile_loop(rx.clone())),
            tokio::spawn(inner.clone().watch_loop(rx)),
        ];
        Cluster {
            inner,
            tasks: Arc::new(Mutex::new(tasks)),
            shutdown: Arc::new(shutdown),
        }
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

    /// Every live member's control API (from the last snapshot), this one included;
    /// a member not trusted as a peer (bound to no lease, or its `apiUrl` outside
    /// `peerAllow`) is left out.
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
                        let is_self = Some(e.lease) == me || *name == self.inner.opts.name;
                        if !is_self && !self.inner.trusted(&st, name, &r.api_url) {
                            return None;
                        }
                        Some(Peer {
                            name: name.clone(),
                            api_url: r.api_url.clone(),
                            is_self,
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
    /// API (for forwarding an operator's command to it); `None` as well when that
    /// replica is not trusted as a peer.
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
        let is_self = Some(owner.lease) == me;
        // A command is forwarded with the peer token: never to an untrusted address.
        if !is_self && !self.inner.trusted(&st, &name, &api_url) {
            return None;
        }
        Some(Peer {
            is_self,
            name,
            api_url,
        })
    }

    /// Wakes the reconcile task now (tests, and after a configuration change).
    pub fn poke(&self) {
        self.inner.wake.notify_one();
    }

    /// How many times etcd refused this replica's auth token (expired, or lost in an
    /// etcd restart) and a new one was obtained; 0 without `etcdAuth`.
    pub fn token_renewals(&self) -> u64 {
        self.inner.etcd.token_renewals()
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
    fn new(opts: ClusterOptions, clock: Clock) -> Result<Inner, String> {
        let timeout = opts
            .settings
            .heartbeat
            .clamp(Duration::from_millis(500), Duration::from_secs(5));
        let etcd = super::connect::client(&opts.settings, timeout)?;
        let (events, _) = broadcast::channel(1024);
        let (changes, _) = watch::channel(0u64);
        Ok(Inner {
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
            clock,
            table_version: Mutex::new(None),
        })
    }

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
            time_ms: self.clock.now_ms(),
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
            .is_some_and(|l| l.ok && self.clock.instant() + self.heartbeat() < l.valid_until)
    }

    fn drivable(&self, st: &State) -> bool {
        self.lease_valid(st) && st.verified
    }

    fn may_drive(&self, canary: &str) -> bool {
        let st = lock(&self.state);
        self.drivable(&st) && st.owned.get(canary).is_some_and(|o| !o.releasing)
    }
}
