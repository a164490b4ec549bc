//! The reconcile and watch tasks: shard claims, owner keys, and the fenced state save.

use super::*;
use std::sync::Arc;

use tokio::sync::watch;

use crate::cluster::etcd::{CmpOp, Compare, EtcdError, Op, Target};
use crate::cluster::view::{desired, plan_shards, OwnerRecord, ShardAction, View};

impl Inner {
    // ------------------------------------------------------------ reconcile

    pub(super) async fn reconcile_loop(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = self.clock.sleep(self.heartbeat()) => {}
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

    pub(super) async fn read_view(&self) -> Result<View, EtcdError> {
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
    pub(super) fn valid_lease(&self) -> Option<i64> {
        let st = lock(&self.state);
        if self.lease_valid(&st) {
            st.lease.as_ref().map(|l| l.id)
        } else {
            None
        }
    }

    /// One pass; `Ok(true)` asks for another pass at once (a shard changed).
    pub(super) async fn reconcile(&self) -> Result<bool, EtcdError> {
        let Some(me) = self.valid_lease() else {
            return Ok(false);
        };
        let view = self.read_view().await?;
        if !self.verify(me, &view) {
            return Ok(false);
        }
        self.vet_peers(&view).await;
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
    pub(super) fn verify(&self, me: i64, view: &View) -> bool {
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

    pub(super) async fn claim_shard(&self, me: i64, shard: u32) -> Result<(), EtcdError> {
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

    pub(super) async fn release_shard(&self, me: i64, shard: u32) -> Result<(), EtcdError> {
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
    pub(super) async fn release_canary(&self, canary: &str, why: &str) -> Result<(), EtcdError> {
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

    pub(super) async fn acquire(&self, me: i64, canary: &str, shard: u32) -> Result<(), EtcdError> {
        let key = self.keys.owner(canary);
        let rec = serde_json::to_vec(&OwnerRecord {
            canary: canary.to_string(),
            replica: self.opts.name.clone(),
            shard,
            acquired_ms: self.clock.now_ms(),
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

    pub(super) async fn save_state(&self, canary: &str, data: &[u8]) -> Result<(), SaveError> {
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

    pub(super) async fn watch_loop(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
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
                _ = self.clock.sleep(self.heartbeat()) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}
