//! The manual commands (Pause, Resume, Abort, Promote, Start), applied whatever the tick.

use super::*;

impl Tick<'_> {
    pub(super) fn command(&mut self, command: &ManualCommand) {
        if command_refusal(&self.s, command).is_some() {
            return;
        }
        let phase = self.s.phase;
        match command {
            ManualCommand::Pause => {
                self.s.paused = true;
                let msg = format!(
                    "Paused by an operator at {phase}, {}: no step and no check until resumed",
                    self.weights()
                );
                self.event(EventReason::Paused, msg);
            }
            ManualCommand::Resume => {
                self.s.paused = false;
                if self.s.promotion_wait_since_ms.is_some() {
                    // The deadline does not run while paused.
                    self.s.promotion_wait_since_ms = Some(self.now);
                }
                let msg = format!("Resumed by an operator at {phase}, {}", self.weights());
                self.event(EventReason::Resumed, msg);
            }
            ManualCommand::Abort => {
                self.s.paused = false;
                if in_run(phase) {
                    self.rollback("aborted by an operator".to_string());
                } else {
                    let pending = self.s.pending_revision.take().unwrap_or_default();
                    self.event(
                        EventReason::Aborted,
                        format!("Run of {pending} cancelled by an operator before it started"),
                    );
                }
            }
            ManualCommand::Promote => {
                self.s.paused = false;
                self.enter_promoting("manual promotion, remaining analysis skipped");
                self.due_now();
            }
            ManualCommand::Start { revision } => {
                self.s.paused = false;
                match phase {
                    Phase::Progressing | Phase::WaitingPromotion | Phase::Promoting => {
                        self.restart(revision.clone());
                    }
                    Phase::Waiting => {
                        self.s.revision = Some(revision.clone());
                        self.due_now();
                        self.event(
                            EventReason::NewRevision,
                            format!(
                                "Run of {revision} requested by an operator; waiting for approval"
                            ),
                        );
                    }
                    Phase::Initializing
                    | Phase::Initialized
                    | Phase::Succeeded
                    | Phase::Failed
                    | Phase::Finalising => {
                        self.s.pending_revision = Some(revision.clone());
                        self.resync_after_failure();
                        self.due_now();
                        self.event(
                            EventReason::NewRevision,
                            format!("Run of {revision} requested by an operator"),
                        );
                    }
                }
            }
        }
    }
}
