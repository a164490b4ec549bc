//! Acknowledged steps: a routing step is done only when every data plane has
//! answered it, and a run that waits for a replica says which one and for how long.
//!
//! Every call the run makes to the whole fleet (the route read that opens a tick,
//! the route writes of a step) goes to every plane at once. While some plane has not
//! answered after [`ACK_GRACE`], or answered with an error, the run waits: one
//! `WaitingForReplicas` event names them (again when the set changes), and one
//! `ReplicaLagging` event when the wait passes the fleet's `ackTimeout`. The
//! fleet's ownership hears of every wait ([`Ownership::report_waiting`]: the lag
//! gauge, the cluster status). The first pass that every plane answers ends the
//! wait (`ReplicasAcknowledged`). Nothing is stepped meanwhile: the next tick
//! starts only from a route every plane has, so no slot is drained or redeployed
//! (a promote or post-rollout hook) while a replica may still route to it. A
//! replica that leaves the fleet (its lease expired) drops out of the next pass.

use super::runner::Runner;
use std::time::Duration;

use crate::rollout::convert::RouteChange;
use crate::rollout::dataplane::{BoxFuture, DpError, RouteRead};

/// How long a plane may take to answer before the run reports that it waits.
pub const ACK_GRACE: Duration = Duration::from_millis(500);

/// How often a wait re-checks which planes are still out.
const ACK_POLL: Duration = Duration::from_millis(100);

/// The wait, kept across passes until one is answered by every plane.
#[derive(Clone, Debug, Default)]
pub(super) struct AckWait {
    /// When the first unanswered pass began (ms).
    pub(super) since_ms: u64,
    /// The replicas the last `WaitingForReplicas` named.
    pub(super) named: Vec<String>,
    /// `ReplicaLagging` was reported for this wait.
    lagging: bool,
}

impl Runner {
    /// Every plane's route, read at once; `Err` when one of them did not answer.
    pub(super) async fn read_fleet(&mut self) -> Result<Vec<RouteRead>, String> {
        let route = self.def.route.clone();
        let calls = self
            .fleet
            .planes()
            .iter()
            .map(|p| {
                let (p, route) = (p.clone(), route.clone());
                Box::pin(async move { p.read_route(&route).await })
                    as BoxFuture<'static, Result<RouteRead, DpError>>
            })
            .collect();
        let answers = self
            .on_every_plane(calls, "the route read of the next tick")
            .await;
        collect(answers)
    }

    /// Applies `change` on every plane at once; the version each one answered, or
    /// every failure.
    pub(super) async fn write_fleet(
        &mut self,
        change: &RouteChange,
    ) -> Result<Vec<u64>, Vec<DpError>> {
        let calls = self
            .fleet
            .planes()
            .iter()
            .map(|p| {
                let (p, route, change, def) = (
                    p.clone(),
                    self.def.route.clone(),
                    change.clone(),
                    self.def.clone(),
                );
                Box::pin(async move { p.write_route(&route, &change, &def).await })
                    as BoxFuture<'static, Result<u64, DpError>>
            })
            .collect();
        let what = describe(change);
        let answers = self.on_every_plane(calls, &what).await;
        let mut ok = Vec::with_capacity(answers.len());
        let mut errors = Vec::new();
        for a in answers {
            match a {
                Ok(v) => ok.push(v),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(ok)
        } else {
            Err(errors)
        }
    }

    /// Runs one call per plane concurrently and waits for all of them, reporting the
    /// planes the run waits for. Answers are in plane order.
    async fn on_every_plane<T: Send + 'static>(
        &mut self,
        calls: Vec<BoxFuture<'static, Result<T, DpError>>>,
        what: &str,
    ) -> Vec<Result<T, DpError>> {
        let n = calls.len();
        let ids = self.fleet.ids();
        let mut set = tokio::task::JoinSet::new();
        for (i, c) in calls.into_iter().enumerate() {
            set.spawn(async move { (i, c.await) });
        }
        let mut out: Vec<Option<Result<T, DpError>>> = (0..n).map(|_| None).collect();
        let started = self.clock.now_ms();
        let grace = u64::try_from(ACK_GRACE.as_millis()).unwrap_or(u64::MAX);
        loop {
            tokio::select! {
                joined = set.join_next() => match joined {
                    None => break,
                    Some(Ok((i, answer))) => out[i] = Some(answer),
                    // A call that panicked stays unanswered: an error below.
                    Some(Err(_)) => {}
                },
                _ = self.clock.sleep(ACK_POLL) => {
                    let now = self.clock.now_ms();
                    if now.saturating_sub(started) >= grace {
                        let out_now: Vec<usize> = (0..n).filter(|i| out[*i].is_none()).collect();
                        let reason = format!("no answer to {what} for {}", secs(now - started));
                        self.waiting_for(&out_now, &reason, started, now);
                    }
                }
            }
        }
        let answers: Vec<Result<T, DpError>> = out
            .into_iter()
            .enumerate()
            .map(|(i, a)| {
                a.unwrap_or_else(|| {
                    Err(DpError {
                        plane: ids.get(i).cloned().unwrap_or_default(),
                        reason: "the call ended without an answer".into(),
                    })
                })
            })
            .collect();
        let now = self.clock.now_ms();
        let failed: Vec<usize> = answers
            .iter()
            .enumerate()
            .filter(|(_, a)| a.is_err())
            .map(|(i, _)| i)
            .collect();
        if failed.is_empty() {
            self.acknowledged(now);
        } else {
            let reasons: Vec<String> = answers
                .iter()
                .filter_map(|a| a.as_ref().err().map(|e| e.reason.clone()))
                .collect();
            let reason = format!("{what} failed: {}", reasons.join("; "));
            self.waiting_for(&failed, &reason, started, now);
        }
        answers
    }

    /// The names of planes `idx` for people: the fleet member behind each, else
    /// its id.
    fn plane_names(&self, idx: &[usize]) -> Vec<String> {
        let ids = self.fleet.ids();
        let peers = self
            .fleet_mode
            .as_ref()
            .map(|f| f.ownership.peers())
            .unwrap_or_default();
        idx.iter()
            .map(|i| {
                let id = ids.get(*i).cloned().unwrap_or_default();
                peers
                    .iter()
                    .find(|p| p.api_url.trim_end_matches('/') == id)
                    .map_or(id, |p| p.name.clone())
            })
            .collect()
    }

    /// The fleet's `ackTimeout` (a lone weir: the default).
    fn ack_timeout(&self) -> Duration {
        self.fleet_mode
            .as_ref()
            .map_or(crate::config::cluster::DEFAULT_ACK_TIMEOUT, |f| {
                f.ownership.ack_timeout()
            })
    }

    /// The run waits for planes `idx` (since `started` unless an earlier pass began
    /// the wait): events once per set of names, `ReplicaLagging` once past the
    /// timeout, the ownership told.
    fn waiting_for(&mut self, idx: &[usize], reason: &str, started: u64, now: u64) {
        if idx.is_empty() {
            return;
        }
        let names = self.plane_names(idx);
        let mut wait = self.ack_wait.clone().unwrap_or(AckWait {
            since_ms: started,
            ..AckWait::default()
        });
        let waited = now.saturating_sub(wait.since_ms);
        let timeout = self.ack_timeout();
        let newly_named = wait.named != names;
        wait.named = names.clone();
        let newly_lagging = !wait.lagging && u128::from(waited) >= timeout.as_millis();
        wait.lagging |= newly_lagging;
        if let Some(f) = &self.fleet_mode {
            let list: Vec<(String, u64)> =
                names.iter().map(|n| (n.clone(), wait.since_ms)).collect();
            f.ownership.report_waiting(&self.def.spec.name, &list);
        }
        // Kept before the events go out: each event writes the status, which must
        // already name whom the run waits for.
        self.ack_wait = Some(wait);
        let (one, who) = (names.len() == 1, names.join(", "));
        if newly_named {
            let msg = format!(
                "Waiting for {} {who} (canary weight {}): {reason}; the run takes no step until every replica has the route",
                if one { "replica" } else { "replicas" },
                self.rec.state.canary_weight,
            );
            self.driver_event("WaitingForReplicas", true, msg, now);
        }
        if newly_lagging {
            let msg = format!(
                "{} {who} lagging: no acknowledgement for {} (cluster.ackTimeout {}); the run holds until {} or leaves the fleet",
                if one { "Replica" } else { "Replicas" },
                secs(waited),
                humantime::format_duration(timeout),
                if one { "it answers" } else { "they answer" },
            );
            self.driver_event("ReplicaLagging", true, msg, now);
        }
    }

    /// Every plane answered a whole pass: the wait, if any, is over.
    fn acknowledged(&mut self, now: u64) {
        let Some(wait) = self.ack_wait.take() else {
            return;
        };
        if let Some(f) = &self.fleet_mode {
            f.ownership.report_waiting(&self.def.spec.name, &[]);
        }
        let msg = format!(
            "Every replica answered after {} (last waited for: {}); the run continues",
            secs(now.saturating_sub(wait.since_ms)),
            wait.named.join(", ")
        );
        self.driver_event("ReplicasAcknowledged", false, msg, now);
    }
}

/// Every answer, or the failures joined.
fn collect<T>(answers: Vec<Result<T, DpError>>) -> Result<Vec<T>, String> {
    let mut ok = Vec::with_capacity(answers.len());
    let mut errors = Vec::new();
    for a in answers {
        match a {
            Ok(v) => ok.push(v),
            Err(e) => errors.push(e.to_string()),
        }
    }
    if errors.is_empty() {
        Ok(ok)
    } else {
        Err(errors.join("; "))
    }
}

/// A change as a waiting event names it.
fn describe(change: &RouteChange) -> String {
    match change {
        RouteChange::Traffic { canary_weight, .. } => {
            format!("the step to canary weight {canary_weight}")
        }
        RouteChange::Swap { primary, .. } => format!("the promotion swap (primary {primary})"),
    }
}

/// Milliseconds as `1.2s`.
fn secs(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}
