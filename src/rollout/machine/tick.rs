//! `Tick`'s bookkeeping: phase and traffic changes, events, gates on hook results,
//! revision detection and the start, restart and rollback of a run.

use super::*;

impl<'a> Tick<'a> {
    pub(super) fn analysis(&self) -> &'a AnalysisSpec {
        &self.spec.analysis
    }

    pub(super) fn rev(&self) -> String {
        self.s
            .revision
            .clone()
            .unwrap_or_else(|| "(unknown revision)".to_string())
    }

    pub(super) fn set_phase(&mut self, phase: Phase) {
        if self.s.phase != phase {
            self.s.phase = phase;
            self.s.last_transition_ms = self.now;
        }
        // Flagger's setStatusPhase zeroes the iterations outside the phases of a run
        // (WaitingPromotion keeps them here: see the module docs).
        if !matches!(
            phase,
            Phase::Progressing | Phase::Waiting | Phase::WaitingPromotion | Phase::Promoting
        ) {
            self.s.iterations = 0;
        }
    }

    /// A run ended in Failed: Flagger's status goes back to 0 failed checks, the count
    /// that caused it stays with the run's record for its events.
    pub(super) fn reset_failed_checks(&mut self) {
        self.s.last_run_failed_checks = self.s.failed_checks;
        self.s.failed_checks = 0;
    }

    /// After a Failed run Flagger re-syncs `lastAppliedSpec` to the canary as it is now,
    /// so the `confirm-rollout` hooks of the next run get the new revision's checksum.
    pub(super) fn resync_after_failure(&mut self) {
        if self.s.phase == Phase::Failed && self.s.pending_revision.is_some() {
            self.s.applied_revision = self.s.pending_revision.clone();
        }
    }

    pub(super) fn event(&mut self, reason: EventReason, message: String) {
        self.s.message = message.clone();
        self.out.push(Command::Event {
            phase: self.s.phase,
            reason,
            message,
        });
    }

    pub(super) fn weights(&self) -> String {
        format!(
            "canary weight {}, primary weight {}",
            self.s.canary_weight,
            TOTAL_WEIGHT - self.s.canary_weight.min(TOTAL_WEIGHT)
        )
    }

    /// Sets the traffic state and emits it whole.
    pub(super) fn route(&mut self, canary_weight: u8, match_active: bool, mirror: bool) {
        self.s.canary_weight = canary_weight.min(TOTAL_WEIGHT);
        self.s.match_active = match_active;
        self.s.mirror = mirror;
        let a = self.analysis();
        self.out.push(Command::SetTraffic {
            canary_weight: self.s.canary_weight,
            match_active,
            mirror_weight: mirror
                .then(|| a.mirror_weight.unwrap_or(TOTAL_WEIGHT).min(TOTAL_WEIGHT)),
            affinity_active: a.session_affinity && self.s.canary_weight > 0,
        });
    }

    pub(super) fn all_to_primary(&mut self) {
        self.route(0, false, false);
    }

    pub(super) fn traffic_on_primary(&self) -> bool {
        self.s.canary_weight == 0 && !self.s.match_active && !self.s.mirror
    }

    pub(super) fn post_rollout(&mut self) {
        self.out.push(Command::CallHooks {
            kind: HookKind::PostRollout,
            phase: self.s.phase,
        });
    }

    /// Makes the next tick due at once.
    pub(super) fn due_now(&mut self) {
        self.s.last_tick_ms = None;
    }

    pub(super) fn record_checks(&mut self) {
        if self.obs.hooks.is_empty() && self.obs.metrics.is_empty() {
            return;
        }
        let metrics = self
            .obs
            .metrics
            .iter()
            .map(|m| MetricResult {
                // A NaN would not survive a JSON round trip; keep only real numbers.
                value: m.value.filter(|v| v.is_finite()),
                ..m.clone()
            })
            .collect();
        self.s.last_checks = LastChecks {
            at_ms: self.now,
            hooks: self.obs.hooks.clone(),
            metrics,
        };
    }

    pub(super) fn hook_result(&self, index: usize, kind: HookKind) -> Option<&HookResult> {
        self.obs
            .hooks
            .iter()
            .find(|r| r.index == index && r.kind == kind)
    }

    /// All hooks of `kind` passed (in spec order; the first refusal is reported).
    pub(super) fn gate(&self, kind: HookKind) -> Result<(), Refusal> {
        for (index, hook) in self.analysis().webhooks.iter().enumerate() {
            if hook.kind != kind {
                continue;
            }
            match self.hook_result(index, kind) {
                Some(r) if r.passed => {}
                Some(r) => {
                    return Err(Refusal {
                        name: hook.name.clone(),
                        reason: r.reason.clone(),
                    })
                }
                None => {
                    return Err(Refusal {
                        name: hook.name.clone(),
                        reason: "no answer".to_string(),
                    })
                }
            }
        }
        Ok(())
    }

    /// The first rollback hook that passed, if any.
    pub(super) fn rollback_signal(&self) -> Option<String> {
        self.analysis()
            .webhooks
            .iter()
            .enumerate()
            .filter(|(_, h)| h.kind == HookKind::Rollback)
            .find(|(i, _)| {
                self.hook_result(*i, HookKind::Rollback)
                    .is_some_and(|r| r.passed)
            })
            .map(|(_, h)| h.name.clone())
    }

    /// One description per failed (or unreported) metric, in spec order; `dryRun`
    /// metrics never count.
    pub(super) fn metric_failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        // A dry-run metric is measured and shown, never a failure.
        for m in self.analysis().metrics.iter().filter(|m| !m.dry_run) {
            match self.obs.metrics.iter().find(|r| r.name == m.name) {
                Some(r) if r.passed => {}
                // Only a metric with a judge may answer "not yet".
                Some(r) if r.inconclusive && m.judge.is_some() => {}
                Some(r) => {
                    let value = r
                        .value
                        .filter(|v| v.is_finite())
                        .map_or("no value".to_string(), |v| format!("{v:.2}"));
                    failures.push(format!("{} {} ({})", m.name, value, r.reason));
                }
                None => failures.push(format!("{} not measured", m.name)),
            }
        }
        failures
    }

    /// The Inconclusive checks of this tick (metrics with a judge, not dry-run), in
    /// spec order: each one's judge and its description.
    pub(super) fn inconclusive_metrics(&self) -> Vec<(JudgeSpec, String)> {
        self.analysis()
            .metrics
            .iter()
            .filter(|m| !m.dry_run)
            .filter_map(|m| {
                let judge = m.judge?;
                let r = self.obs.metrics.iter().find(|r| r.name == m.name)?;
                (r.inconclusive && !r.passed).then(|| (judge, format!("{} {}", m.name, r.reason)))
            })
            .collect()
    }

    /// An Inconclusive check holds the step: no weight change, no failed check. After
    /// `maxHolds` holds in a row the next one applies `onInconclusive` (the first
    /// undecided metric's). True when the tick ends here; false when the check is
    /// taken as passed (`promote`) and the run steps on.
    pub(super) fn hold(&mut self, held: Vec<(JudgeSpec, String)>) -> bool {
        let Some(judge) = held.first().map(|(j, _)| *j) else {
            return false;
        };
        let what: Vec<String> = held.into_iter().map(|(_, d)| d).collect();
        let what = what.join("; ");
        self.s.holds = self.s.holds.saturating_add(1);
        let max = judge.max_holds;
        if self.s.holds <= max {
            let msg = format!(
                "Holding {} at {}: inconclusive {}/{max}: {what}",
                self.rev(),
                self.weights(),
                self.s.holds
            );
            self.event(EventReason::Inconclusive, msg);
            return true;
        }
        self.s.holds = 0;
        match judge.on_inconclusive {
            OnInconclusive::Hold | OnInconclusive::Pause => {
                let msg = format!(
                    "Inconclusive after {max} held checks, pausing {} at {}: {what}",
                    self.rev(),
                    self.weights()
                );
                self.event(EventReason::Inconclusive, msg);
                self.s.paused = true;
                let msg = format!(
                    "Paused {} at {}: the judge could not decide in {max} held checks; resume to hold again, promote or abort",
                    self.rev(),
                    self.weights()
                );
                self.event(EventReason::Paused, msg);
                true
            }
            OnInconclusive::Rollback => {
                self.rollback(format!("inconclusive after {max} held checks ({what})"));
                true
            }
            OnInconclusive::Promote => {
                let msg = format!(
                    "Inconclusive after {max} held checks, taken as passed (onInconclusive: promote) for {} at {}: {what}",
                    self.rev(),
                    self.weights()
                );
                self.event(EventReason::Inconclusive, msg);
                false
            }
        }
    }

    /// A changed canary revision reported by the driver, if any; updates the baseline.
    pub(super) fn detect(&mut self) -> Option<String> {
        let seen = self.obs.canary_revision.as_ref()?;
        if self.s.rebaseline {
            self.s.rebaseline = false;
            self.s.observed_revision = Some(seen.clone());
            if self.s.applied_revision.is_none() {
                self.s.applied_revision = Some(seen.clone());
            }
            return None;
        }
        if self.s.observed_revision.as_ref() == Some(seen) {
            return None;
        }
        self.s.observed_revision = Some(seen.clone());
        Some(seen.clone())
    }

    pub(super) fn reset_run(&mut self) {
        self.s.failed_checks = 0;
        self.s.holds = 0;
        self.s.measured_since_ms = None;
        self.s.iterations = 0;
        self.s.promote_hooks_done = false;
        self.s.promotion_wait_since_ms = None;
    }

    /// Leaves the idle phases for `phase` with a fresh run of `revision`. Traffic goes back
    /// to the primary if a failed webhook promotion had left it on the canary: the canary
    /// slot now carries an unanalysed build.
    pub(super) fn begin_run(&mut self, revision: Option<String>, phase: Phase) {
        self.s.revision = revision;
        self.s.pending_revision = None;
        self.reset_run();
        self.s.started_at_ms = Some(self.now);
        if !self.traffic_on_primary() {
            self.all_to_primary();
        }
        self.set_phase(phase);
    }

    pub(super) fn initialize(&mut self) {
        self.all_to_primary();
        match &self.obs.canary_revision {
            Some(r) => {
                self.s.observed_revision = Some(r.clone());
                self.s.rebaseline = false;
            }
            None => self.s.rebaseline = true,
        }
        self.s.applied_revision = self.s.observed_revision.clone();
        self.set_phase(Phase::Initialized);
        let baseline = self
            .s
            .observed_revision
            .clone()
            .unwrap_or_else(|| "not known yet".to_string());
        self.event(
            EventReason::Initialized,
            format!(
                "Initialization done! {}: all traffic on the primary; canary revision {baseline} is the baseline",
                self.spec.name
            ),
        );
        if self.s.pending_revision.is_some() {
            self.due_now();
        }
    }

    pub(super) fn idle(&mut self) {
        let detected = self.detect();
        if self.s.pending_revision.is_none() {
            if let Some(r) = detected {
                self.s.pending_revision = Some(r.clone());
                self.resync_after_failure();
                self.due_now();
                self.event(
                    EventReason::NewRevision,
                    format!(
                        "New revision {r} detected on the canary of {}",
                        self.spec.name
                    ),
                );
            }
            return;
        }
        if let Some(r) = detected {
            // The latest deployment wins over an older pending one.
            self.s.pending_revision = Some(r);
            self.resync_after_failure();
        }
        let pending = self.s.pending_revision.clone();
        match self.gate(HookKind::ConfirmRollout) {
            Err(refusal) => {
                self.begin_run(pending, Phase::Waiting);
                let msg = format!(
                    "Halt advancement of {}: waiting for approval from confirm-rollout webhook {} ({})",
                    self.rev(),
                    refusal.name,
                    refusal.reason
                );
                self.event(EventReason::WaitingApproval, msg);
            }
            Ok(()) => self.start(pending),
        }
    }

    pub(super) fn start(&mut self, revision: Option<String>) {
        self.s.applied_revision = revision.clone();
        self.begin_run(revision, Phase::Progressing);
        let msg = format!(
            "New revision {} detected! Starting canary analysis of {}",
            self.rev(),
            self.spec.name
        );
        self.event(EventReason::Started, msg);
    }

    pub(super) fn waiting(&mut self) {
        if let Some(r) = self.detect() {
            self.s.revision = Some(r.clone());
            self.event(
                EventReason::NewRevision,
                format!("New revision {r} detected while waiting for approval"),
            );
        }
        if self.gate(HookKind::ConfirmRollout).is_ok() {
            let revision = self.s.revision.clone();
            self.start(revision);
        }
    }

    pub(super) fn restart(&mut self, revision: String) {
        self.s.applied_revision = Some(revision.clone());
        self.s.revision = Some(revision);
        self.reset_run();
        self.s.started_at_ms = Some(self.now);
        self.all_to_primary();
        self.set_phase(Phase::Progressing);
        let msg = format!(
            "New revision {} detected! Restarting analysis of {}: all traffic routed to the primary",
            self.rev(),
            self.spec.name
        );
        self.event(EventReason::Restarted, msg);
    }

    pub(super) fn rollback(&mut self, why: String) {
        let was = self.weights();
        self.all_to_primary();
        self.s.promote_hooks_done = false;
        self.s.promotion_wait_since_ms = None;
        self.set_phase(Phase::Failed);
        self.reset_failed_checks();
        let msg = format!(
            "Canary failed! Rolling back {}: {why} (at {was}); all traffic routed to the primary",
            self.rev()
        );
        self.event(EventReason::RolledBack, msg);
        self.post_rollout();
        if self.s.pending_revision.is_some() {
            self.due_now();
        }
    }

    pub(super) fn check_failed(&mut self, what: String) {
        self.s.failed_checks = self.s.failed_checks.saturating_add(1);
        let threshold = self.analysis().effective_threshold();
        if self.s.failed_checks >= threshold {
            self.due_now();
        }
        let msg = format!(
            "Halt advancement of {} at {}: {what} (failed checks {}/{threshold})",
            self.rev(),
            self.weights(),
            self.s.failed_checks
        );
        self.event(EventReason::CheckFailed, msg);
    }
}
