//! One canary's observation of a tick: the route and slots read, the revisions, the
//! planned hooks called and the metrics measured, and what changed outside the engine.

use super::runner::{Observed, OutsideChange, Runner};
use super::*;

use crate::rollout::convert::{checksum, endpoints_revision, NAMESPACE};
use crate::rollout::dataplane::{probe_revision, BackendView, RouteRead};
use crate::rollout::machine::{HookResult, Observation, Phase, Plan, PlanStep};
use crate::rollout::metrics;
use crate::rollout::spec::Promotion;
use crate::rollout::webhooks::{self, HookPayload};

impl Runner {
    /// What changed in the route outside the engine during an analysed run (another
    /// backend in a role, or another canary weight), if anything: traffic the run's
    /// checks must not count.
    pub(super) fn changed_outside(
        &self,
        route: &crate::config::raw::RawRoute,
    ) -> Option<OutsideChange> {
        let st = &self.rec.state;
        if !matches!(st.phase, Phase::Progressing | Phase::WaitingPromotion) {
            return None;
        }
        if let Some(s) = &self.rec.slots {
            if route.primary != s.primary || route.canary.as_deref() != Some(s.canary.as_str()) {
                return Some(OutsideChange::Slots);
            }
        }
        let set = route.canary_weight.unwrap_or(0);
        (set != i64::from(st.canary_weight)).then_some(OutsideChange::Weight {
            set,
            ran: st.canary_weight,
        })
    }

    pub(super) fn payload(&self, phase: Phase) -> HookPayload {
        let st = &self.rec.state;
        let revision = st.pending_revision.clone().or_else(|| st.revision.clone());
        HookPayload {
            name: self.def.spec.name.clone(),
            namespace: NAMESPACE.to_string(),
            phase,
            checksum: checksum(&self.def.spec.name, applied_revision(st)),
            metadata: BTreeMap::new(),
            canary_weight: st.canary_weight,
            iteration: st.iterations,
            failed_checks: st.failed_checks,
            revision,
        }
    }

    /// The revision a slot reports: its endpoints' `revisionPath` answer when revisions
    /// are watched, else its endpoint list; none while a rolling update of the slot is
    /// in progress (a run starts from a finished deployment).
    pub(super) async fn slot_revision(&self, b: &BackendView) -> Option<String> {
        if self.def.watch_revision {
            probe_revision(&self.client, b).await.revision
        } else if b.settled() {
            Some(endpoints_revision(&b.endpoints))
        } else {
            None
        }
    }

    /// The tick's observation, from every plane's route as read at its start.
    pub(super) async fn observe(
        &self,
        p: &Plan,
        routes: Vec<RouteRead>,
    ) -> Result<Observed, String> {
        let restarted: Vec<usize> = routes
            .iter()
            .enumerate()
            .filter(|(i, r)| self.versions[*i].is_some_and(|v| r.version < v))
            .map(|(i, _)| i)
            .collect();
        if !restarted.is_empty() {
            return Ok(Observed::Restarted(restarted));
        }
        let route = &routes[0].route;
        let canary_name = route
            .canary
            .clone()
            .ok_or_else(|| format!("route {} has no canary backend", self.def.route))?;
        let canary = self
            .fleet
            .backend(&canary_name)
            .await
            .map_err(|e| e.to_string())?;
        let primary = self
            .fleet
            .backend(&route.primary)
            .await
            .map_err(|e| e.to_string())?;
        let mut obs = Observation {
            canary_revision: self.slot_revision(&canary).await,
            ..Observation::default()
        };
        if self.def.spec.promotion == Promotion::Webhook {
            let r = probe_revision(&self.client, &primary).await;
            obs.primary_revision = r.revision;
            obs.primary_ready = r.ready;
        } else {
            obs.primary_revision = self.slot_revision(&primary).await;
            obs.primary_ready = primary.ready;
        }
        obs.canary_deploy = canary.deploy();
        if let Some(x) = &self.exporter {
            let seen = [
                (&route.primary, &obs.primary_revision),
                (&canary_name, &obs.canary_revision),
            ];
            x.set_revisions(
                &self.def.spec.name,
                seen.iter()
                    .filter_map(|(b, r)| r.as_ref().map(|r| (b.to_string(), r.clone())))
                    .collect(),
            );
        }
        // An analysed tick on a slot still deploying only waits or rolls back:
        // its hooks and metrics would be asked for nothing.
        let analysed = matches!(
            self.rec.state.phase,
            Phase::Progressing | Phase::WaitingPromotion
        );
        let steps = if analysed && !obs.canary_deploy.is_ready() {
            &[][..]
        } else {
            &p.steps[..]
        };
        for s in steps {
            match s {
                PlanStep::Hook { index, kind, phase } => {
                    let Some(hook) = self.def.spec.analysis.webhooks.get(*index) else {
                        continue;
                    };
                    let retries = self.def.hook_retries.get(*index).copied().unwrap_or(0);
                    let payload = self.payload(*phase).for_hook(hook);
                    let ca = self.def.hook_ca_files.get(*index).cloned().flatten();
                    let out = match self.client.trusting(ca.as_deref()) {
                        Ok(c) => webhooks::call(&c, hook, retries, &payload).await,
                        Err(e) => webhooks::HookOutcome {
                            passed: false,
                            reason: format!("caFile: {e}"),
                        },
                    };
                    let halts = kind.halts(out.passed);
                    obs.hooks.push(HookResult {
                        index: *index,
                        name: hook.name.clone(),
                        kind: *kind,
                        passed: out.passed,
                        reason: out.reason,
                    });
                    if halts {
                        break;
                    }
                }
                PlanStep::Metrics => {
                    let now = self.clock.now_ms();
                    let mut state = self.rec.state.clone();
                    if self.changed_outside(route).is_some() {
                        state.measured_since_ms = Some(now);
                    }
                    let results =
                        metrics::measure(&self.client, &self.def, &self.fleet, &state, now).await;
                    // A dry-run metric never halts the tick: the machine goes on past it.
                    let failed = results.iter().any(|r| !r.passed && !r.dry_run);
                    obs.metrics = results;
                    if failed {
                        break;
                    }
                }
            }
        }
        Ok(Observed::Ready(obs, routes))
    }
}
