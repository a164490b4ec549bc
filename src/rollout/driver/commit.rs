//! After a step or a command: events, hooks, persisting the record, then applying.

use super::*;
use std::collections::BTreeMap;

use crate::cluster::SaveError;
use crate::rollout::convert::NAMESPACE;
use crate::rollout::convert::{checksum, next_affinity_state, RouteChange};
use crate::rollout::dataplane::probe_revision;
use crate::rollout::machine::{
    command_refusal, step, CanaryState, Command, ManualCommand, Observation, Phase,
};
use crate::rollout::spec::{HookKind, TOTAL_WEIGHT};
use crate::rollout::webhooks::{HookPayload, Notification};

impl Runner {
    pub(super) async fn command(&mut self, msg: CommandMsg) {
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
        let refusal = match &msg.cmd {
            ManualCommand::Start { revision } if msg.check_revision => {
                command_refusal(&self.rec.state, &msg.cmd).or(self.revision_refusal(revision).await)
            }
            _ => command_refusal(&self.rec.state, &msg.cmd),
        };
        if let Some(reason) = refusal {
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
        let now = self.clock.now_ms();
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

    /// Why a start of `revision` is refused: the canary watches its slot's revision
    /// and the slot reports another one (or none: mixed, unreachable, rolling).
    async fn revision_refusal(&self, revision: &str) -> Option<String> {
        if !self.def.watch_revision {
            return None;
        }
        let slot = match self.fleet.read_route(&self.def.route).await {
            Ok(routes) => routes.first().and_then(|r| r.route.canary.clone()),
            Err(e) => {
                return Some(format!(
                    "start refused: cannot read route {} to check the revision: {e} (--force starts anyway)",
                    self.def.route
                ))
            }
        };
        let Some(slot) = slot else {
            return Some(format!(
                "start refused: route {} has no canary slot (--force starts anyway)",
                self.def.route
            ));
        };
        let report = match self.fleet.backend(&slot).await {
            Ok(b) => probe_revision(&self.client, &b).await,
            Err(e) => {
                return Some(format!(
                    "start refused: cannot read backend {slot}: {e} (--force starts anyway)"
                ))
            }
        };
        match report.revision {
            Some(r) if r == revision => None,
            Some(r) => Some(format!(
                "start refused: the canary slot {slot} reports revision {r:?}, not {revision:?} (--force starts anyway)"
            )),
            None => Some(format!(
                "start refused: the canary slot {slot} reports no single revision ({}) (--force starts anyway)",
                report.detail
            )),
        }
    }

    /// Persists, applies and publishes the outcome of a step, in that order: a crash
    /// after the state is saved re-applies its writes from the file, and whoever hears
    /// of a step (the status, the broadcast, the sink) finds its traffic on the data
    /// planes, unless a write is owed (then the `DataPlaneError` event follows).
    /// False when the step was dropped (fleet mode: its save was refused).
    pub(super) async fn commit(&mut self, events: Vec<RolloutEvent>) -> bool {
        if !self.persist().await {
            // Fleet mode: the save was refused (ownership lost, or etcd unreachable):
            // the step never happened. The next owner continues from the last saved
            // record; this replica reloads it if it gets the canary back.
            if let Some(f) = self.fleet_mode.as_mut() {
                f.driving = None;
            }
            self.update_status();
            return false;
        }
        // The status is written below, with the events: not before them.
        let applied = self.write_owed().await;
        // `publish` writes the status with each event; a step without events still
        // changed the state.
        if events.is_empty() {
            self.update_status();
        }
        for e in events {
            self.publish(e);
        }
        if let Err(e) = applied {
            self.set_dp_error(Some(e));
        }
        true
    }

    /// Turns a step's commands into owed writes, hook calls and events.
    pub(super) fn absorb(
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
        let reason = events.last().map_or("", |e| e.message.as_str());
        if let Some(run) = record::finished_run(prev, &next, reason, now) {
            record::push_history(&mut self.rec.history, run);
        }
        self.rec.state = next;
        events
    }

    pub(super) fn queue_hooks(
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
                ca_file: self.def.hook_ca_files.get(i).cloned().flatten(),
                payload,
            });
        }
    }

    pub(super) fn event(
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

    pub(super) fn driver_event(&mut self, reason: &str, warning: bool, message: String, now: u64) {
        let e = self.event(&self.rec.state, reason.to_string(), warning, message, now);
        // `publish` writes the status too.
        self.publish(e);
    }

    /// Logs and keeps one event, writes the status, then broadcasts and forwards the event
    /// (and calls the `event` hooks).
    pub(super) fn publish(&mut self, e: RolloutEvent) {
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
    pub(super) fn set_dp_error(&mut self, e: Option<String>) {
        if self.dp_error == e {
            return;
        }
        let now = self.clock.now_ms();
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
    pub(super) async fn persist(&mut self) -> bool {
        if let Some(f) = &self.fleet_mode {
            let o = f.ownership.clone();
            self.rec.saved_at_ms = self.clock.now_ms();
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
                    let ev = self.event(
                        &self.rec.state,
                        reason.into(),
                        true,
                        msg,
                        self.clock.now_ms(),
                    );
                    self.publish(ev);
                    false
                }
            };
        }
        let Some(path) = self.path.clone() else {
            return true;
        };
        self.rec.saved_at_ms = self.clock.now_ms();
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
                    let ev = self.event(
                        &self.rec.state,
                        "StateNotSaved".into(),
                        true,
                        msg,
                        self.clock.now_ms(),
                    );
                    self.publish(ev);
                }
            }
        }
        true
    }

    // ------------------------------------------------------------ fleet mode
}
