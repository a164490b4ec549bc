//! PURE rendering of the live view of one canary: the screen redrawn on a terminal and
//! the plain lines printed when stdout is not one. Time comes in as a parameter.

use crate::ctl::canaries::{event_line, wire_name};
use crate::ctl::render_table;
use crate::rollout::driver::{CanaryStatus, RolloutEvent};
use crate::rollout::machine::Phase;
use crate::stats::Summary;
use crate::wire::table::RouteStats;

/// Events kept on the screen.
pub const SHOWN_EVENTS: usize = 8;

/// What the view shows: the canary's status, its route's stats and the last events.
#[derive(Clone, Debug)]
pub struct View {
    /// The canary as `GET /api/v1/canaries/{name}` answered last.
    pub status: CanaryStatus,
    /// Its route's stats over the watch window (`None` until read, or when the read
    /// failed: the screen says so rather than show zeros).
    pub stats: Option<RouteStats>,
    /// The last events, oldest first (at most [`SHOWN_EVENTS`]).
    pub events: Vec<RolloutEvent>,
    /// Why the last refresh failed, if it did.
    pub error: Option<String>,
}

impl View {
    /// Adds an event, keeping the last [`SHOWN_EVENTS`].
    pub fn push_event(&mut self, e: RolloutEvent) {
        self.events.push(e);
        let excess = self.events.len().saturating_sub(SHOWN_EVENTS);
        self.events.drain(..excess);
    }
}

/// Whether the event ends a run: promoted, rolled back, promotion failed, or cancelled
/// before it started. Not every event in phase `Succeeded` does (a new revision is
/// detected in the phase of the previous run).
pub fn run_finished(e: &RolloutEvent) -> bool {
    e.phase.is_idle()
        && matches!(
            e.reason.as_str(),
            "Succeeded" | "RolledBack" | "PromotionFailed" | "Aborted"
        )
}

/// The step plan with the current step in brackets: `0 → [20] → 40 → 60 → promote`
/// for a canary run, `iteration [2]/5 → promote` for A/B and blue/green.
pub fn step_plan(s: &CanaryStatus) -> String {
    let in_run = matches!(
        s.phase,
        Phase::Progressing | Phase::WaitingPromotion | Phase::Promoting | Phase::Finalising
    );
    if s.weight_plan.is_empty() {
        if s.iterations_total == 0 {
            return "-".into();
        }
        return format!(
            "iteration {}/{} → promote",
            if in_run {
                format!("[{}]", s.iterations)
            } else {
                s.iterations.to_string()
            },
            s.iterations_total
        );
    }
    let promoting = matches!(s.phase, Phase::Promoting | Phase::Finalising);
    let current = (in_run && !promoting).then_some(s.canary_weight);
    let mut parts = vec![mark("0", in_run && !promoting && s.canary_weight == 0)];
    for w in &s.weight_plan {
        parts.push(mark(&w.to_string(), current == Some(*w)));
    }
    parts.push(mark("promote", promoting));
    parts.join(" → ")
}

fn mark(s: &str, current: bool) -> String {
    if current {
        format!("[{s}]")
    } else {
        s.to_string()
    }
}

/// `in 4s (every 5s)`, `due (every 5s)`, `paused`, or `-` before the first tick.
pub fn countdown(s: &CanaryStatus, now_ms: u64) -> String {
    let every = if s.interval_ms > 0 {
        format!(
            " (every {})",
            humantime::format_duration(std::time::Duration::from_millis(s.interval_ms))
        )
    } else {
        String::new()
    };
    if s.paused {
        return "paused".into();
    }
    match s.next_tick_ms {
        None => "-".into(),
        Some(t) if t > now_ms => {
            let secs = (t - now_ms).div_ceil(1000);
            format!("in {secs}s{every}")
        }
        Some(_) => format!("due{every}"),
    }
}

fn side(name: &str, g: &Summary) -> Vec<String> {
    vec![
        name.to_string(),
        g.requests.to_string(),
        format!("{:.1}", g.rps),
        g.success_rate.map_or("-".into(), |p| format!("{p:.2}%")),
        g.p99_ms.map_or("-".into(), |v| format!("{v:.1}ms")),
    ]
}

/// The checks of the last analysed tick against their thresholds.
fn checks(s: &CanaryStatus) -> Vec<String> {
    let mut out = Vec::new();
    for m in &s.metrics {
        let range = match (m.min, m.max) {
            (Some(a), Some(b)) => format!("{a} ≤ x ≤ {b}"),
            (Some(a), None) => format!("≥ {a}"),
            (None, Some(b)) => format!("≤ {b}"),
            (None, None) => "no range".into(),
        };
        let last = s.last_checks.metrics.iter().find(|r| r.name == m.name);
        let verdict = match last {
            None => "not measured yet".to_string(),
            Some(r) => {
                let window = r
                    .window
                    .as_ref()
                    .map_or(String::new(), |w| format!(" [{}]", w.describe()));
                format!(
                    "{} {}{window}",
                    r.value.map_or("-".into(), |v| format!("{v:.2}")),
                    match (r.passed, r.inconclusive, r.dry_run) {
                        (true, _, _) => "ok".to_string(),
                        (false, true, _) => format!(
                            "INCONCLUSIVE, evidence {:.0}%, step held ({})",
                            100.0 * r.evidence.unwrap_or(0.0),
                            crate::text::for_terminal(&r.reason)
                        ),
                        (false, false, false) =>
                            format!("FAILED ({})", crate::text::for_terminal(&r.reason)),
                        (false, false, true) => format!(
                            "would fail, dry run ({})",
                            crate::text::for_terminal(&r.reason)
                        ),
                    }
                )
            }
        };
        out.push(format!("  {:<24} {:<16} {verdict}", m.name, range));
    }
    out
}

/// The screen drawn in place on a terminal (with the ANSI home + clear prefix).
pub fn screen(api: &str, v: &View, window: &str, now_ms: u64) -> String {
    let s = &v.status;
    let mut o = String::from(crate::ctl::CLEAR_SCREEN);
    o.push_str(&format!(
        "weir ctl watch {}  {api}  {} UTC  (Ctrl-C to stop)\n\n",
        s.name,
        clock(now_ms)
    ));
    o.push_str(&format!(
        "phase      {}{}   revision {} (promoted {})\n",
        wire_name(&s.phase),
        if s.paused { " (paused)" } else { "" },
        crate::text::for_terminal(s.revision.as_deref().unwrap_or("-")),
        crate::text::for_terminal(s.promoted_revision.as_deref().unwrap_or("-")),
    ));
    o.push_str(&format!(
        "steps      {}   ({}, promotion {})\n",
        step_plan(s),
        wire_name(&s.strategy),
        wire_name(&s.promotion)
    ));
    o.push_str(&format!(
        "weights    canary {}%  primary {}%   slots {} ← primary, {} ← canary\n",
        s.canary_weight,
        s.primary_weight,
        s.primary_backend.as_deref().unwrap_or("-"),
        s.canary_backend.as_deref().unwrap_or("-"),
    ));
    o.push_str(&format!("next tick  {}\n", countdown(s, now_ms)));
    o.push_str(&format!(
        "failed     {}/{} checks (rolls back at {})\n",
        s.failed_checks, s.threshold, s.threshold
    ));
    if let Some(e) = &s.data_plane_error {
        o.push_str(&format!("data plane {}\n", crate::text::for_terminal(e)));
    }
    o.push('\n');
    match &v.stats {
        Some(st) => {
            let rows = vec![
                side("primary", &st.roles.primary),
                side("canary", &st.roles.canary),
            ];
            o.push_str(&format!("traffic over the last {window}:\n"));
            o.push_str(&render_table(
                &["SIDE", "REQUESTS", "RPS", "SUCCESS", "P99"],
                &rows,
            ));
        }
        None => o.push_str("traffic: not read yet\n"),
    }
    let checks = checks(s);
    if !checks.is_empty() {
        o.push_str("\nchecks of the last tick:\n");
        for c in checks {
            o.push_str(&c);
            o.push('\n');
        }
    }
    o.push_str("\nevents:\n");
    for e in &v.events {
        o.push_str("  ");
        o.push_str(&event_line(e));
        o.push('\n');
    }
    if let Some(e) = &v.error {
        o.push_str(&format!("\nerror: {e}\n"));
    }
    o
}

/// What a plain state line changes with: a new line is printed only when it differs.
pub fn state_key(s: &CanaryStatus) -> (Phase, u8, u32, u32, bool, Option<String>) {
    (
        s.phase,
        s.canary_weight,
        s.iterations,
        s.failed_checks,
        s.paused,
        s.revision.clone(),
    )
}

/// One plain line of the state: phase, step, countdown, failed checks and both sides.
pub fn state_line(v: &View, now_ms: u64) -> String {
    let s = &v.status;
    let mut l = format!(
        "{} {} {}{} steps {} weight {}% next {} failed {}/{}",
        clock(now_ms),
        s.name,
        wire_name(&s.phase),
        if s.paused { " (paused)" } else { "" },
        step_plan(s),
        s.canary_weight,
        countdown(s, now_ms),
        s.failed_checks,
        s.threshold
    );
    if let Some(st) = &v.stats {
        for (name, g) in [("primary", &st.roles.primary), ("canary", &st.roles.canary)] {
            l.push_str(&format!(
                " {name}: {} req {} p99 {}",
                g.requests,
                g.success_rate.map_or("-".into(), |p| format!("{p:.2}%")),
                g.p99_ms.map_or("-".into(), |v| format!("{v:.1}ms"))
            ));
        }
    }
    l
}

/// The last line of a finished run.
pub fn finished_line(s: &CanaryStatus) -> String {
    let rev = crate::text::for_terminal(s.revision.as_deref().unwrap_or("-"));
    match s.phase {
        Phase::Succeeded => format!("{}: run finished: Succeeded ({rev} promoted)", s.name),
        _ => format!(
            "{}: run finished: Failed ({rev} rolled back; {} serves) — {}",
            s.name,
            crate::text::for_terminal(s.promoted_revision.as_deref().unwrap_or("the primary")),
            crate::text::for_terminal(&s.message)
        ),
    }
}

/// `HH:MM:SS` (UTC) of a time in ms since the Unix epoch.
fn clock(ms: u64) -> String {
    let secs = ms / 1000;
    format!(
        "{:02}:{:02}:{:02}",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests;
