//! The analysed phases: Progressing and its canary, A/B and blue/green steps, the
//! promotion (swap or webhook) and Finalising.

use super::*;

impl Tick<'_> {
    pub(super) fn progressing(&mut self) {
        if let Some(r) = self.detect() {
            return self.restart(r);
        }
        match &self.obs.canary_deploy {
            SlotDeploy::Ready => {}
            SlotDeploy::Rolling(why) => {
                let msg = format!(
                    "Waiting for the canary slot to finish deploying {}: {why}",
                    self.rev()
                );
                return self.event(EventReason::WaitingCanary, msg);
            }
            SlotDeploy::Stalled(why) => {
                let why = format!("progress deadline exceeded: {why}");
                return self.rollback(why);
            }
        }
        if self.spec.skip_analysis {
            return self.skip_analysis();
        }
        if let Some(name) = self.rollback_signal() {
            return self.rollback(format!("rollback webhook {name} signalled a rollback"));
        }
        let threshold = self.analysis().effective_threshold();
        if self.s.failed_checks >= threshold {
            let fc = self.s.failed_checks;
            return self.rollback(format!("failed checks threshold reached {fc}/{threshold}"));
        }
        if starting(self.analysis(), &self.s) {
            if let Err(r) = self.gate(HookKind::PreRollout) {
                return self.check_failed(format!(
                    "pre-rollout webhook {} failed ({})",
                    r.name, r.reason
                ));
            }
        } else {
            if let Err(r) = self.gate(HookKind::Rollout) {
                return self
                    .check_failed(format!("rollout webhook {} failed ({})", r.name, r.reason));
            }
            let failures = self.metric_failures();
            if !failures.is_empty() {
                self.s.holds = 0;
                return self.check_failed(failures.join("; "));
            }
            let held = self.inconclusive_metrics();
            if held.is_empty() {
                self.s.holds = 0;
            } else if self.hold(held) {
                return;
            }
        }
        match self.analysis().strategy() {
            Strategy::Canary => self.run_canary(),
            Strategy::AbTesting => self.run_ab(),
            Strategy::BlueGreen => self.run_blue_green(),
        }
    }

    /// `confirm-promotion`: a refusal moves to (or holds in) WaitingPromotion.
    pub(super) fn promotion_approved(&mut self) -> bool {
        match self.gate(HookKind::ConfirmPromotion) {
            Ok(()) => true,
            Err(r) => {
                if self.s.phase != Phase::WaitingPromotion {
                    self.set_phase(Phase::WaitingPromotion);
                    let msg = format!(
                        "Halt advancement of {} at {}: waiting for promotion approval from confirm-promotion webhook {} ({})",
                        self.rev(),
                        self.weights(),
                        r.name,
                        r.reason
                    );
                    self.event(EventReason::WaitingPromotion, msg);
                }
                false
            }
        }
    }

    pub(super) fn enter_promoting(&mut self, why: &str) {
        self.set_phase(Phase::Promoting);
        self.s.promote_hooks_done = false;
        self.s.promotion_wait_since_ms = Some(self.now);
        let how = match self.spec.promotion {
            Promotion::Swap => "the slots will be swapped",
            Promotion::Webhook => "calling the promote webhooks",
        };
        let msg = format!(
            "Promoting {} of {} ({why}, at {}): {how}",
            self.rev(),
            self.spec.name,
            self.weights()
        );
        self.event(EventReason::Promoting, msg);
    }

    pub(super) fn run_canary(&mut self) {
        let a = self.analysis();
        let weight = self.s.canary_weight;
        let next = a.next_step_weight(weight);
        let max = a.max_weight();
        let mirror_first = a.mirror;
        if next == 0 {
            // Flagger does nothing either; the config loader rejects such a spec.
            return;
        }
        if !self.s.mirror && self.s.phase == Phase::Progressing {
            if let Err(r) = self.gate(HookKind::ConfirmTrafficIncrease) {
                let msg = format!(
                    "Halt advancement of {} at {}: waiting for traffic increase approval from confirm-traffic-increase webhook {} ({})",
                    self.rev(),
                    self.weights(),
                    r.name,
                    r.reason
                );
                return self.event(EventReason::TrafficIncreaseHeld, msg);
            }
        }
        if weight < max {
            if mirror_first && weight == 0 {
                if !self.s.mirror {
                    self.route(0, false, true);
                    let msg = format!(
                        "Advance {}: mirroring traffic to the canary before shifting it ({})",
                        self.rev(),
                        self.weights()
                    );
                    return self.event(EventReason::Advanced, msg);
                }
                self.route(next, false, false);
            } else {
                let w = u32::from(weight) + u32::from(next);
                self.route(
                    u8::try_from(w.min(u32::from(TOTAL_WEIGHT))).unwrap_or(TOTAL_WEIGHT),
                    false,
                    false,
                );
            }
            let msg = format!("Advance {}: {}", self.rev(), self.weights());
            return self.event(EventReason::Advanced, msg);
        }
        if self.promotion_approved() {
            self.enter_promoting("analysis passed at the max weight");
        }
    }

    pub(super) fn run_ab(&mut self) {
        let n = self.analysis().iterations;
        if self.s.iterations < n {
            self.route(0, true, false);
            self.s.iterations = self.s.iterations.saturating_add(1);
            let msg = format!(
                "Advance {}: iteration {}/{n}, requests matching the A/B rules go to the canary",
                self.rev(),
                self.s.iterations
            );
            return self.event(EventReason::Advanced, msg);
        }
        if self.promotion_approved() {
            self.enter_promoting("A/B iterations passed");
        }
    }

    pub(super) fn run_blue_green(&mut self) {
        let a = self.analysis();
        let n = a.iterations;
        let mirror = a.mirror;
        if self.s.iterations < n {
            if mirror && !self.s.mirror {
                self.route(0, false, true);
            }
            self.s.iterations = self.s.iterations.saturating_add(1);
            let msg = format!(
                "Advance {}: iteration {}/{n}{}",
                self.rev(),
                self.s.iterations,
                if self.s.mirror {
                    ", traffic mirrored to the canary"
                } else {
                    ""
                }
            );
            return self.event(EventReason::Advanced, msg);
        }
        if !self.promotion_approved() {
            return;
        }
        if self.s.iterations == n {
            let how = if self.s.mirror {
                "stop traffic mirroring and route all traffic to the canary"
            } else {
                "route all traffic to the canary"
            };
            self.route(TOTAL_WEIGHT, false, false);
            self.s.iterations = self.s.iterations.saturating_add(1);
            let msg = format!("Advance {}: {how} ({})", self.rev(), self.weights());
            return self.event(EventReason::Advanced, msg);
        }
        self.enter_promoting("blue/green iterations passed");
    }

    /// Records the swap: the canary's revision is now the primary's, and the idle slot's
    /// revision (the old primary's, when the driver knows it) is the new baseline.
    pub(super) fn apply_swap(&mut self) {
        self.out.push(Command::SwapSlots);
        self.s.promoted_revision = self.s.revision.clone();
        self.s.canary_weight = 0;
        self.s.match_active = false;
        self.s.mirror = false;
        match &self.obs.primary_revision {
            Some(p) => {
                self.s.observed_revision = Some(p.clone());
                self.s.rebaseline = false;
            }
            None => {
                self.s.observed_revision = None;
                self.s.rebaseline = true;
            }
        }
    }

    pub(super) fn end_promotion(&mut self) {
        self.s.promote_hooks_done = false;
        self.s.promotion_wait_since_ms = None;
        if self.s.pending_revision.is_some() {
            self.due_now();
        }
    }

    /// skipAnalysis: promote at once (cancelling any analysis), Succeeded, then the
    /// `post-rollout` hooks (Flagger's `shouldSkipAnalysis` since fluxcd/flagger#1195).
    pub(super) fn skip_analysis(&mut self) {
        self.s.last_run_failed_checks = self.s.failed_checks;
        match self.spec.promotion {
            Promotion::Swap => {
                self.apply_swap();
                self.set_phase(Phase::Succeeded);
                let msg = format!(
                    "Promotion completed! Canary analysis was skipped for {}: slots swapped, {} is the primary",
                    self.spec.name,
                    self.rev()
                );
                self.event(EventReason::Succeeded, msg);
                self.post_rollout();
            }
            Promotion::Webhook => {
                if !self.s.promote_hooks_done {
                    if let Err(r) = self.gate(HookKind::Promote) {
                        let msg = format!(
                            "Promote webhook {} failed for {} ({}); retrying at the next tick",
                            r.name,
                            self.rev(),
                            r.reason
                        );
                        return self.event(EventReason::PromoteHookFailed, msg);
                    }
                }
                self.all_to_primary();
                self.s.promoted_revision = self.s.revision.clone();
                self.set_phase(Phase::Succeeded);
                let msg = format!(
                    "Promotion completed! Canary analysis was skipped for {}: promote webhooks passed, all traffic routed to the primary",
                    self.spec.name
                );
                self.event(EventReason::Succeeded, msg);
                self.post_rollout();
            }
        }
        self.end_promotion();
    }

    pub(super) fn promoting(&mut self) {
        if let Some(r) = self.detect() {
            return self.restart(r);
        }
        if self.spec.skip_analysis {
            return self.skip_analysis();
        }
        match self.spec.promotion {
            Promotion::Swap => {
                self.apply_swap();
                self.set_phase(Phase::Finalising);
                let msg = format!(
                    "Promotion completed! Slots swapped: {} is the primary of {}, the old primary is the idle slot",
                    self.rev(),
                    self.spec.name
                );
                self.event(EventReason::Finalising, msg);
            }
            Promotion::Webhook => self.webhook_promotion(),
        }
    }

    pub(super) fn deadline_passed(&self) -> bool {
        let since = self.s.promotion_wait_since_ms.unwrap_or(self.now);
        self.now.saturating_sub(since) > self.spec.progress_deadline_ms
    }

    /// Webhook promotion missed its deadline: Failed, traffic left on the canary (see the
    /// module docs for why).
    pub(super) fn promotion_failed(&mut self, why: String) {
        self.set_phase(Phase::Failed);
        self.reset_failed_checks();
        self.s.promote_hooks_done = false;
        self.s.promotion_wait_since_ms = None;
        let msg = format!(
            "Promotion of {} failed: {why}, progress deadline of {} ms exceeded; traffic left on the canary, which passed its analysis ({})",
            self.rev(),
            self.spec.progress_deadline_ms,
            self.weights()
        );
        self.event(EventReason::PromotionFailed, msg);
        self.post_rollout();
        if self.s.pending_revision.is_some() {
            self.due_now();
        }
    }

    pub(super) fn webhook_promotion(&mut self) {
        if !self.s.promote_hooks_done {
            if let Err(r) = self.gate(HookKind::Promote) {
                let why = format!("promote webhook {} failed ({})", r.name, r.reason);
                if self.deadline_passed() {
                    return self.promotion_failed(why);
                }
                let msg = format!("{why} for {}; retrying at the next tick", self.rev());
                return self.event(EventReason::PromoteHookFailed, msg);
            }
            self.s.promote_hooks_done = true;
        }
        let want = self.s.revision.as_ref();
        let primary = self.obs.primary_revision.as_ref();
        if !(self.obs.primary_ready && want.is_some() && primary == want) {
            let seen = format!(
                "primary reports revision {} and is {}",
                primary.map_or("(unknown)", String::as_str),
                if self.obs.primary_ready {
                    "ready"
                } else {
                    "not ready"
                }
            );
            if self.deadline_passed() {
                return self.promotion_failed(format!(
                    "waiting for the primary to run {} and be ready: {seen}",
                    self.rev()
                ));
            }
            let msg = format!(
                "Waiting for the primary to run {} and be ready: {seen}",
                self.rev()
            );
            return self.event(EventReason::WaitingPrimary, msg);
        }
        // Progress: a later stall gets a full deadline of its own.
        self.s.promotion_wait_since_ms = Some(self.now);
        let step = self.analysis().step_weight_promotion;
        let weight = self.s.canary_weight;
        let next = if step == 0 || self.s.match_active {
            0
        } else {
            weight.saturating_sub(step)
        };
        self.route(next, false, false);
        if next == 0 {
            self.set_phase(Phase::Finalising);
            let msg = format!(
                "Promotion completed! All traffic routed to the primary, which runs {}",
                self.rev()
            );
            self.event(EventReason::Finalising, msg);
        } else {
            let msg = format!("Advance promotion of {}: {}", self.rev(), self.weights());
            self.event(EventReason::Advanced, msg);
        }
    }

    pub(super) fn finalising(&mut self) {
        self.s.promoted_revision = self.s.revision.clone();
        self.s.last_run_failed_checks = self.s.failed_checks;
        self.set_phase(Phase::Succeeded);
        let msg = format!(
            "Promotion completed! {} of {} promoted",
            self.rev(),
            self.spec.name
        );
        self.event(EventReason::Succeeded, msg);
        self.post_rollout();
        self.end_promotion();
    }
}
