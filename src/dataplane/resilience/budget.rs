//! PURE: the retry budget, Linkerd's model (`retry_ratio`,
//! `min_retries_per_second`, `ttl`) with Envoy's name for the ratio
//! (`budget_percent`): over a sliding window of [`WINDOW_SECS`] seconds,
//! retries may reach `minRetriesPerSecond × window + percent/100 ×
//! requests`. The window is a ring of one-second slots on the caller's
//! millisecond clock, so a burst ten seconds ago no longer counts.

use crate::config::BudgetSettings;

/// The window the budget looks back over (Linkerd's default `ttl`).
pub const WINDOW_SECS: u64 = 10;

/// One second of the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Slot {
    /// Which second (ms / 1000) the slot holds.
    second: u64,
    /// Requests deposited in it.
    requests: u64,
    /// Retries withdrawn in it.
    retries: u64,
}

/// Requests and retries of the last [`WINDOW_SECS`] seconds.
#[derive(Debug, Clone, Default)]
pub struct RetryBudget {
    slots: [Slot; WINDOW_SECS as usize],
}

impl RetryBudget {
    /// An empty window.
    pub fn new() -> Self {
        Self::default()
    }

    fn slot(&mut self, now_ms: u64) -> &mut Slot {
        let second = now_ms / 1000;
        let s = &mut self.slots[(second % WINDOW_SECS) as usize];
        if s.second != second {
            *s = Slot {
                second,
                requests: 0,
                retries: 0,
            };
        }
        s
    }

    /// Counts one client request.
    pub fn deposit(&mut self, now_ms: u64) {
        self.slot(now_ms).requests += 1;
    }

    /// (requests, retries) of the window ending at `now_ms`.
    pub fn totals(&self, now_ms: u64) -> (u64, u64) {
        let now = now_ms / 1000;
        self.slots
            .iter()
            .filter(|s| s.second <= now && s.second + WINDOW_SECS > now)
            .fold((0, 0), |(q, r), s| (q + s.requests, r + s.retries))
    }

    /// Spends one retry if the budget allows it.
    pub fn try_withdraw(&mut self, now_ms: u64, settings: &BudgetSettings) -> bool {
        let (requests, retries) = self.totals(now_ms);
        let allowed = settings.min_retries_per_second as f64 * WINDOW_SECS as f64
            + settings.percent / 100.0 * requests as f64;
        if (retries as f64) + 1.0 > allowed {
            return false;
        }
        self.slot(now_ms).retries += 1;
        true
    }
}
