//! Fleet coordination (DESIGN §10): several weir replicas, exactly one engine driving
//! each canary, through etcd.
//!
//! # Layout
//! - `config::cluster` (in the config layer, re-exported here): PURE. The `cluster:`
//!   block, validated (field-path errors).
//! - [`assign`]: PURE. Canary → shard: round-robin or rendezvous hashing.
//! - [`view`]: PURE. One consistent snapshot of members, shards and owner keys, the
//!   key layout ([`view::Keys`]) and the shard decision ([`view::plan_shards`]).
//! - [`etcd`]: a small client of etcd's v3 JSON gateway (no gRPC stack), over TLS and
//!   as an etcd user when configured.
//! - [`connect`]: the client of the settings (TLS and password files read) and the
//!   first contact's checks, whose failures name the config field to fix.
//! - [`api`]: `GET /api/v1/cluster`, the `/readyz` condition and the `weir ctl cluster` view.
//! - [`membership`]: the [`Cluster`]: lease and heartbeat, shard claims, owner keys,
//!   the fenced rollout-state store, events and status.
//!
//! # Key layout (under `prefix`, default `/weir`)
//! | key | value | bound to |
//! |---|---|---|
//! | `members/<name>` | [`view::MemberRecord`]: name, control-API URL, heartbeat time | the replica's lease |
//! | `shards/<n>` | [`view::ShardRecord`]: holder, its URL, heartbeat time | the holder's lease |
//! | `owners/<canary>` | [`view::OwnerRecord`]: owner, shard, since | the owner's lease |
//! | `state/<canary>` | the engine's state record (JSON) | nothing: it outlives owners |
//!
//! # What this module must never do
//! Let two replicas drive one canary at once, or drive anything without a valid lease.
//! Everything it cannot confirm in etcd means "do not drive": a replica cut off from
//! etcd keeps proxying with the traffic split as it is, and steps nothing.
//! Without `cluster:` none of this runs and the engine works alone, as before.

pub mod api;
pub mod assign;
pub mod connect;
pub mod etcd;
pub mod membership;
pub mod view;

use std::future::Future;
use std::pin::Pin;

pub use crate::config::cluster::{ClusterSettings, Replicas};
pub use assign::Algorithm;
pub use membership::{
    default_name, Cluster, ClusterEvent, ClusterOptions, ClusterStatus, DriveGuard, Peer, SaveError,
};

/// A boxed future, so [`Ownership`] can be used as `dyn Ownership`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the rollout engine asks of the fleet before it touches a canary.
pub trait Ownership: Send + Sync {
    /// True only while this replica may step `canary` (it holds a valid lease and the
    /// canary's owner key, and is not giving it up).
    fn may_drive<'a>(&'a self, canary: &'a str) -> BoxFuture<'a, bool>;

    /// The ownership token (owner key's create revision) while this replica may drive
    /// `canary`; a new token means the canary was lost and taken again meanwhile.
    fn token(&self, canary: &str) -> Option<i64>;

    /// Held across step → save → apply; `None` when the canary may not be driven.
    fn guard<'a>(&'a self, canary: &'a str) -> BoxFuture<'a, Option<DriveGuard>>;

    /// The stored rollout state of `canary` (`None`: none yet).
    fn load_state<'a>(&'a self, canary: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, String>>;

    /// Stores the rollout state; refused unless this replica still owns the canary
    /// (then the step must not be applied).
    fn save_state<'a>(
        &'a self,
        canary: &'a str,
        data: &'a [u8],
    ) -> BoxFuture<'a, Result<(), SaveError>>;

    /// Changes whenever ownership may have changed: re-check [`Ownership::may_drive`].
    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64>;

    /// Every live replica's control API (this one flagged `is_self`): the data planes
    /// the owner drives.
    fn peers(&self) -> Vec<Peer>;

    /// The replica owning `canary` now, as last seen (status, command forwarding).
    fn owner_of(&self, canary: &str) -> Option<Peer>;

    /// The members that have not acknowledged `canary`'s last routing step, each with
    /// when the wait began (ms since the Unix epoch); empty when every one has.
    fn report_waiting(&self, _canary: &str, _waiting: &[(String, u64)]) {}

    /// How long a step may wait for a member before the run reports it lagging.
    fn ack_timeout(&self) -> std::time::Duration {
        crate::config::cluster::DEFAULT_ACK_TIMEOUT
    }
}

impl Ownership for Cluster {
    fn may_drive<'a>(&'a self, canary: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async move { Cluster::may_drive(self, canary) })
    }

    fn token(&self, canary: &str) -> Option<i64> {
        Cluster::token(self, canary)
    }

    fn guard<'a>(&'a self, canary: &'a str) -> BoxFuture<'a, Option<DriveGuard>> {
        Box::pin(Cluster::guard(self, canary))
    }

    fn load_state<'a>(&'a self, canary: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, String>> {
        Box::pin(Cluster::load_state(self, canary))
    }

    fn save_state<'a>(
        &'a self,
        canary: &'a str,
        data: &'a [u8],
    ) -> BoxFuture<'a, Result<(), SaveError>> {
        Box::pin(Cluster::save_state(self, canary, data))
    }

    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        Cluster::subscribe(self)
    }

    fn peers(&self) -> Vec<Peer> {
        Cluster::peers(self)
    }

    fn owner_of(&self, canary: &str) -> Option<Peer> {
        Cluster::owner_of(self, canary)
    }

    fn report_waiting(&self, canary: &str, waiting: &[(String, u64)]) {
        Cluster::report_waiting(self, canary, waiting);
    }

    fn ack_timeout(&self) -> std::time::Duration {
        self.settings().ack_timeout
    }
}
