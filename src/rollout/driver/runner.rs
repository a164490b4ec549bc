//! One canary's task: the loop (owed writes, plan, observe, step) and its observation.

use super::*;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};

use crate::clock::Clock;
use crate::cluster::Ownership;
use crate::rollout::convert::{CanaryDef, RouteChange};
use crate::rollout::dataplane::{Fleet, RouteRead};
use crate::rollout::exporter::RolloutMetrics;
use crate::rollout::http::HttpClient;
use crate::rollout::machine::{plan, step, Observation, Phase};
use crate::rollout::spec::TOTAL_WEIGHT;
use crate::rollout::webhooks::Notifier;

pub(super) enum Wake {
    Timeout,
    Command(CommandMsg),
    Stop,
}

pub(super) async fn wait(
    clock: &Clock,
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
            Some(d) => clock.sleep(d).await,
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
pub(super) struct FleetMode {
    /// Who may drive.
    pub(super) ownership: Arc<dyn Ownership>,
    /// Ownership-change notifications.
    pub(super) owner_rx: watch::Receiver<u64>,
    /// This replica drives the canary now, under this ownership token (it took over
    /// and has not lost it since).
    pub(super) driving: Option<i64>,
    /// The canary has no `dataPlanes`: its fleet is this process plus every other live
    /// replica.
    pub(super) follow_members: bool,
    /// Token for the other replicas' control APIs.
    pub(super) peer_token: Option<String>,
    /// The remote planes' URLs now in the fleet (after the in-process one).
    pub(super) remotes: Vec<String>,
}

/// What a tick's observation found.
pub(super) enum Observed {
    /// Ready to step.
    Ready(Observation, Vec<RouteRead>),
    /// These data planes restarted (their table version went backwards): re-assert first.
    Restarted(Vec<usize>),
}

/// One canary's task.
pub(super) struct Runner {
    pub(super) def: CanaryDef,
    pub(super) fleet: Fleet,
    pub(super) client: HttpClient,
    pub(super) rec: Record,
    pub(super) path: Option<PathBuf>,
    pub(super) restored: bool,
    pub(super) status: Arc<Mutex<CanaryStatus>>,
    pub(super) ring: VecDeque<RolloutEvent>,
    pub(super) events: broadcast::Sender<RolloutEvent>,
    pub(super) sink: Option<EventSink>,
    pub(super) notifier: Notifier,
    /// Table version last seen per plane.
    pub(super) versions: Vec<Option<u64>>,
    /// Planes whose route must be re-asserted from the record.
    pub(super) reassert: Vec<bool>,
    /// The current data-plane problem, reported once until it clears.
    pub(super) dp_error: Option<String>,
    /// The current state-file problem, reported once until it clears.
    pub(super) persist_error: Option<String>,
    /// Fleet mode (`cluster:`); `None` when this weir is alone.
    pub(super) fleet_mode: Option<FleetMode>,
    /// The machine's time and the waits ([`EngineOptions::clock`]).
    pub(super) clock: Clock,
    /// The rollout series, updated with the status ([`EngineOptions::exporter`]).
    pub(super) exporter: Option<Arc<RolloutMetrics>>,
    /// Ticks stepped since the task started (the status's `ticks`).
    pub(super) ticks: u64,
    /// Wake-ups that stepped nothing (the status's `skippedTicks`).
    pub(super) skipped_ticks: u64,
    /// The replicas the run waits for, while it does.
    pub(super) ack_wait: Option<super::acks::AckWait>,
}

/// A change of an analysed run's route that the engine did not make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OutsideChange {
    /// Another backend in a role.
    Slots,
    /// Another canary weight: `set` on the route, `ran` the run's.
    Weight { set: i64, ran: u8 },
}

impl Runner {
    pub(super) fn new(
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
            clock: Clock::system(),
            exporter: None,
            ticks: 0,
            skipped_ticks: 0,
            ack_wait: None,
        }
    }

    /// Counts a wake-up that stepped nothing and shows it at once: a client waiting
    /// for "the task went round and did nothing" must not wait for the next status
    /// write.
    pub(super) fn skipped(&mut self) {
        self.skipped_ticks += 1;
        self.update_status();
    }

    pub(super) fn retry_delay(&self) -> Duration {
        Duration::from_millis(self.def.spec.analysis.interval_ms.max(100)).min(RETRY_MAX)
    }

    pub(super) async fn run(
        mut self,
        mut cmd_rx: mpsc::Receiver<CommandMsg>,
        mut shutdown: watch::Receiver<bool>,
        load_error: Option<String>,
    ) {
        let now = self.clock.now_ms();
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
                self.skipped();
                let owner_rx = self.fleet_mode.as_mut().map(|f| &mut f.owner_rx);
                match wait(
                    &self.clock,
                    &mut cmd_rx,
                    &mut shutdown,
                    Some(FOLLOWER_REFRESH),
                    owner_rx,
                )
                .await
                {
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
                if self.retry_later(e, &mut cmd_rx, &mut shutdown).await {
                    break;
                }
                continue;
            }
            let now = self.clock.now_ms();
            let p = plan(&self.def.spec, &self.rec.state, now);
            if !p.due {
                let d = p
                    .next_due_ms
                    .map(|t| Duration::from_millis(t.saturating_sub(now).max(1)));
                let owner_rx = self.fleet_mode.as_mut().map(|f| &mut f.owner_rx);
                match wait(&self.clock, &mut cmd_rx, &mut shutdown, d, owner_rx).await {
                    Wake::Stop => break,
                    Wake::Command(m) => self.command(m).await,
                    Wake::Timeout => {}
                }
                continue;
            }
            // Every plane's route, read at once: a replica that does not answer
            // holds the tick, named (acks.rs).
            let routes = match self.read_fleet().await {
                Ok(r) => r,
                Err(e) => {
                    let why = format!("tick skipped: {e}");
                    if self.retry_later(why, &mut cmd_rx, &mut shutdown).await {
                        break;
                    }
                    continue;
                }
            };
            enum Next {
                Observed(Result<Observed, String>),
                Command(Option<CommandMsg>),
                Stop,
            }
            let next = tokio::select! {
                o = self.observe(&p, routes) => Next::Observed(o),
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
                    if let Some(change) =
                        routes.first().and_then(|r| self.changed_outside(&r.route))
                    {
                        // The checks count requests from now on: the traffic before was
                        // not the run's.
                        self.rec.state.measured_since_ms = Some(now);
                        // A change of slots has its own event (`adopt_slots`).
                        if let OutsideChange::Weight { set, ran } = change {
                            let msg = format!(
                                "The route's canary weight was set to {set} outside the engine (the run had set {ran}); checks count requests from now on"
                            );
                            self.driver_event("TrafficChanged", true, msg, now);
                        }
                    }
                    self.adopt_slots(&routes, now);
                    self.tick(&obs, now).await;
                }
                Next::Observed(Err(e)) => {
                    let why = format!("tick skipped: {e}");
                    if self.retry_later(why, &mut cmd_rx, &mut shutdown).await {
                        break;
                    }
                }
            }
        }
        tracing::debug!(target: "weir::rollout", canary = %self.def.spec.name, "canary task stopped");
    }

    /// A tick that could not run: the reason shown, the wake-up counted as skipped,
    /// then a wait of [`Runner::retry_delay`] (ended early by a command, which is
    /// applied). True when the task must stop.
    async fn retry_later(
        &mut self,
        why: String,
        cmd_rx: &mut mpsc::Receiver<CommandMsg>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> bool {
        self.set_dp_error(Some(why));
        self.skipped();
        let d = Some(self.retry_delay());
        let owner_rx = self.fleet_mode.as_mut().map(|f| &mut f.owner_rx);
        match wait(&self.clock, cmd_rx, shutdown, d, owner_rx).await {
            Wake::Stop => return true,
            Wake::Command(m) => self.command(m).await,
            Wake::Timeout => {}
        }
        false
    }

    /// A run restored from the state file continues; its first analysis waits one
    /// interval so the stats window refills.
    pub(super) fn on_restore(&mut self, now: u64, from: &str) {
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
    pub(super) async fn settle(&mut self) -> Result<(), String> {
        self.flush().await?;
        for i in 0..self.reassert.len() {
            if self.reassert[i] {
                self.reassert_plane(i).await?;
                self.reassert[i] = false;
            }
        }
        Ok(())
    }

    /// Applies the owed writes, then shows what is left owed in the status.
    pub(super) async fn flush(&mut self) -> Result<(), String> {
        if self.write_owed().await? {
            self.update_status();
        }
        Ok(())
    }

    /// Applies the owed writes, in order, persisting what was written; `Ok(true)` when
    /// something was (the status's owed writes are then out of date), `Err` says what
    /// is still owed. The caller writes the status.
    pub(super) async fn write_owed(&mut self) -> Result<bool, String> {
        let mut wrote = false;
        while let Some(change) = self.rec.pending.first().cloned() {
            match self.write_fleet(&change).await {
                Ok(versions) => {
                    self.rec.pending.remove(0);
                    wrote = true;
                    // Our own writes moved the planes' versions forward.
                    for (v, new) in self.versions.iter_mut().zip(versions) {
                        *v = Some(new);
                    }
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
        }
        Ok(wrote)
    }

    /// The traffic the record says the route has.
    pub(super) fn desired_traffic(&self) -> RouteChange {
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
    pub(super) async fn reassert_plane(&mut self, i: usize) -> Result<(), String> {
        let Some(plane) = self.fleet.planes().get(i).cloned() else {
            return Ok(());
        };
        let route = self.def.route.clone();
        let read = plane.read_route(&route).await.map_err(|e| e.to_string())?;
        let now = self.clock.now_ms();
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
    pub(super) fn adopt_slots(&mut self, routes: &[RouteRead], now: u64) {
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

    pub(super) async fn tick(&mut self, obs: &Observation, now: u64) {
        let prev = self.rec.state.clone();
        let (next, cmds) = step(&self.def.spec, &prev, obs, now);
        let events = self.absorb(&prev, next, cmds, now);
        if self.commit(events).await {
            self.ticks += 1;
            self.update_status();
        } else {
            // Fleet mode: the save was refused and the step dropped.
            self.skipped();
        }
    }
}
