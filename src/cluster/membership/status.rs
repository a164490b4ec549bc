//! What `GET /api/v1/cluster` shows, read from the replica's state.

use super::*;
use std::collections::BTreeSet;

use crate::cluster::view::assignment;
use crate::config::cluster::Replicas;

// The documents are the API's wire types, defined once for the server and
// `weir ctl cluster`.
pub use crate::wire::cluster::{
    CanaryOwnership, ClusterStatus, LeaseStatus, MemberStatus, RefusedPeer, ShardStatus,
};

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
        let mut lag = st.peers.lag(self.clock.now_ms());
        let members = view
            .members
            .iter()
            .map(|(name, e)| {
                let api_url = e
                    .record
                    .as_ref()
                    .map(|r| r.api_url.clone())
                    .unwrap_or_default();
                let (lag_ms, waiting) = lag.remove(name).unwrap_or_default();
                MemberStatus {
                    trusted: *name == self.opts.name || self.trusted(&st, name, &api_url),
                    name: name.clone(),
                    api_url,
                    heartbeat_ms: e.record.as_ref().map(|r| r.heartbeat_ms).unwrap_or(0),
                    shards: view.shards_of(e.lease).into_iter().collect(),
                    table_version: e.record.as_ref().and_then(|r| r.table_version),
                    lag_ms,
                    waiting,
                }
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
            refused_peers: st.peers.refused.values().cloned().collect(),
            peers_refused_total: st.peers.refused_total,
        }
    }
}
