//! The heartbeat task: granting and renewing the lease, refreshing the member and shard records.

use super::*;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::cluster::etcd::{CmpOp, Compare, Op, Target};
use crate::cluster::view::{MemberRecord, ShardRecord};

impl Inner {
    // ------------------------------------------------------------ heartbeat

    pub(super) async fn heartbeat_loop(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
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

    pub(super) fn member_record(&self) -> Vec<u8> {
        serde_json::to_vec(&MemberRecord {
            name: self.opts.name.clone(),
            api_url: self.opts.api_url.clone(),
            heartbeat_ms: self.clock.now_ms(),
            started_ms: self.clock.now_ms(),
            table_version: lock(&self.table_version).as_ref().map(|f| f()),
        })
        .unwrap_or_default()
    }

    pub(super) fn shard_record(&self, shard: u32) -> Vec<u8> {
        serde_json::to_vec(&ShardRecord {
            shard,
            replica: self.opts.name.clone(),
            api_url: self.opts.api_url.clone(),
            heartbeat_ms: self.clock.now_ms(),
        })
        .unwrap_or_default()
    }

    /// One heartbeat: grant, or renew and refresh the records.
    pub(super) async fn beat(&self) {
        let lease = lock(&self.state).lease.as_ref().map(|l| l.id);
        let Some(id) = lease else {
            self.grant().await;
            return;
        };
        let sent = self.clock.instant();
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
    pub(super) fn lease_gone(&self, id: i64, why: &str) {
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

    pub(super) async fn grant(&self) {
        let sent = self.clock.instant();
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

    pub(super) async fn write_member(&self, id: i64) {
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
    pub(super) async fn refresh(&self, id: i64) {
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
}
