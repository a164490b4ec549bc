//! Fleet mode (the ownership gate, take-over, following the members) and the status.

use super::*;
use std::collections::VecDeque;
use std::sync::Arc;

use crate::cluster::{DriveGuard, Ownership};
use crate::rollout::convert::CanaryDef;
use crate::rollout::dataplane::{DataPlane, Fleet, Remote};
use crate::rollout::machine::{CanaryState, Phase};
use crate::rollout::spec::TOTAL_WEIGHT;

impl Runner {
    /// True when this task may drive the canary now. Fleet mode: asks the ownership,
    /// takes over on a gain (state from etcd), stops on a loss, and keeps the fleet in
    /// step with the live members. Single replica: always true.
    pub(super) async fn gate(&mut self) -> bool {
        let Some(f) = &self.fleet_mode else {
            return true;
        };
        let o = f.ownership.clone();
        let was = f.driving;
        // The token, not just "may drive": a canary lost and taken back while this task
        // looked away (a long observation) has a new token, and another replica may
        // have driven it meanwhile: it is taken over again from the stored state.
        let token = o.token(&self.def.spec.name);
        let now = self.clock.now_ms();
        if token.is_none() || (was.is_some() && was != token) {
            if was.is_some() {
                if let Some(f) = self.fleet_mode.as_mut() {
                    f.driving = None;
                }
                // The new owner waits for the replicas from now on, if it must.
                if self.ack_wait.take().is_some() {
                    o.report_waiting(&self.def.spec.name, &[]);
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
            // The take-over's events were shown while not yet driving: show the
            // taken-over state as driven (the rollout series appear now, not a tick later).
            self.update_status();
        }
        true
    }

    /// The fleet-mode guard held across step → save → apply; `None` when this replica
    /// may not drive (single replica: a dummy `Some`).
    pub(super) async fn drive_guard(&self) -> Option<Option<DriveGuard>> {
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
    pub(super) async fn take_over(&mut self, o: &dyn Ownership, now: u64) -> bool {
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
    pub(super) fn sync_fleet(&mut self, o: &dyn Ownership) {
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
    pub(super) async fn follow(&mut self) {
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

    pub(super) fn update_status(&self) {
        let mut s = build_status(
            &self.def,
            &self.fleet,
            &self.rec,
            &self.ring,
            self.dp_error.clone(),
        );
        s.ticks = self.ticks;
        s.skipped_ticks = self.skipped_ticks;
        if let Some(w) = &self.ack_wait {
            s.waiting_for_replicas = w.named.clone();
            s.waiting_since_ms = Some(w.since_ms);
        }
        if let Some(f) = &self.fleet_mode {
            s.owner = f.ownership.owner_of(&self.def.spec.name).map(|p| p.name);
            s.driven_here = Some(f.driving.is_some());
        }
        if let Some(x) = &self.exporter {
            // A replica that does not drive the canary exports none of its gauges.
            x.update(&self.def, &self.rec.state, s.driven_here != Some(false));
        }
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }
}

/// The revision of Flagger's `lastAppliedSpec`, which the payloads' `checksum` is computed
/// over; a state saved before weir tracked it falls back to the run's revision.
pub(super) fn applied_revision(st: &CanaryState) -> Option<&str> {
    st.applied_revision.as_deref().or(st.revision.as_deref())
}

pub(super) fn build_status(
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
        holds: st.holds,
        interval_ms: a.interval_ms,
        next_tick_ms: match st.last_tick_ms {
            Some(last) if !st.paused => Some(last.saturating_add(a.interval_ms)),
            _ => None,
        },
        ticks: 0,
        skipped_ticks: 0,
        weight_plan: a.weight_plan(),
        metrics: a.metrics.clone(),
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
        waiting_for_replicas: Vec::new(),
        waiting_since_ms: None,
        owner: None,
        driven_here: None,
        events: ring.iter().cloned().collect(),
        history: rec.history.clone(),
        notifications: Vec::new(),
    }
}
