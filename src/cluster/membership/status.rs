//! What `GET /api/v1/cluster` shows, read from the replica's state.

use super::*;
use std::collections::BTreeSet;

use serde::Serialize;

use crate::cluster::view::assignment;
use crate::config::cluster::Replicas;

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

impl Inner {
    // ------------------------------------------------------------ status

    pub(super) fn status(&self) -> ClusterStatus {
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
        let now = self.clock.instant();
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
