//! The canary commands of `weir ctl`: list and show canaries, and send an operator's
//! command.
//!
//! `canaries` and the commands read and write `/api/v1/canaries...`. The live view of a
//! release (`watch CANARY`) is [`super::live`]; it prints events with [`event_line`].

use std::io::Write;
use std::time::Duration;

use http::Method;
use serde_json::Value;

use crate::ctl::{render_table, CtlError};
use crate::rollout::api::{CanaryList, CommandAnswer};
use crate::rollout::driver::{CanaryStatus, RolloutEvent};
use crate::rollout::http::HttpClient;
use crate::text::for_terminal as shown;

/// One canary command of `weir ctl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CanaryCommand {
    /// Every canary (one line each), or one canary with its recent events.
    Show {
        /// Only this canary, in detail.
        name: Option<String>,
    },
    /// Start a run of `revision`.
    Start {
        /// Canary name.
        name: String,
        /// Revision label of the run.
        revision: String,
        /// Start even if the canary slot reports another revision.
        force: bool,
    },
    /// Skip the remaining analysis and promote.
    Promote {
        /// Canary name.
        name: String,
    },
    /// Roll the run back.
    Abort {
        /// Canary name.
        name: String,
    },
    /// Freeze the canary.
    Pause {
        /// Canary name.
        name: String,
    },
    /// Continue after a pause.
    Resume {
        /// Canary name.
        name: String,
    },
}

/// How `weir ctl` reaches the API.
#[derive(Debug, Clone)]
pub struct Target {
    /// Base URL, e.g. `http://127.0.0.1:9901`.
    pub api: String,
    /// Bearer token.
    pub token: Option<String>,
    /// Print JSON.
    pub json: bool,
}

const TIMEOUT: Duration = Duration::from_secs(30);

/// The token, and the header that marks a call of weir's own client (the API
/// takes a command without a JSON body only with it).
fn headers(t: &Target) -> Vec<(&'static str, String)> {
    let mut h = vec![(crate::control::guard::WEIR_REQUEST_HEADER, "1".to_string())];
    if let Some(tok) = &t.token {
        h.push(("authorization", format!("Bearer {tok}")));
    }
    h
}

async fn call(
    t: &Target,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Result<Value, CtlError> {
    let base = t.api.trim_end_matches('/');
    let url = format!("{base}{path}");
    let h = headers(t);
    let r = HttpClient::new()
        .send(
            method,
            &url,
            &h,
            body.map(|b| b.to_string().into_bytes()),
            TIMEOUT,
        )
        .await
        .map_err(|e| CtlError::Transport(format!("cannot reach the weir API at {base}: {e}")))?;
    if (200..300).contains(&r.status) {
        return Ok(serde_json::from_slice(&r.body).unwrap_or(Value::Null));
    }
    let (reason, field) = match serde_json::from_slice::<crate::wire::error::ErrorBody>(&r.body) {
        Ok(b) => (b.reason, b.field),
        Err(_) => (r.snippet(300), None),
    };
    Err(CtlError::Api {
        status: r.status,
        reason,
        field,
    })
}

/// The name a value has on the wire (`canary`, `swap`, `Progressing`).
pub(crate) fn wire_name<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "-".into(),
    }
}

/// The value, or `-`; as a terminal may show it (it may come from a backend).
fn or_dash(v: &Option<String>) -> String {
    shown(v.as_deref().unwrap_or("-"))
}

fn value(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.2}"))
}

/// Parses an answer of the canary API into its type.
fn parse<T: serde::de::DeserializeOwned>(v: Value, what: &str) -> Result<T, CtlError> {
    serde_json::from_value(v)
        .map_err(|e| CtlError::Transport(format!("unexpected {what} document: {e}")))
}

/// The table of `weir ctl canaries`.
pub fn canaries_table(list: &[CanaryStatus]) -> String {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|c| {
            let iterations = if c.iterations_total > 0 {
                format!("{}/{}", c.iterations, c.iterations_total)
            } else {
                "-".to_string()
            };
            vec![
                shown(&c.name),
                shown(&c.route),
                format!(
                    "{}{}",
                    wire_name(&c.phase),
                    if c.paused { " (paused)" } else { "" }
                ),
                format!("{}%", c.canary_weight),
                iterations,
                format!("{}/{}", c.failed_checks, c.threshold),
                or_dash(&c.revision),
                or_dash(&c.primary_backend),
                or_dash(&c.canary_backend),
            ]
        })
        .collect();
    render_table(
        &[
            "CANARY",
            "ROUTE",
            "PHASE",
            "WEIGHT",
            "ITER",
            "FAILED",
            "REVISION",
            "PRIMARY",
            "CANARY-SLOT",
        ],
        &rows,
    )
}

/// `HH:MM:SS` (UTC) of a time in ms since the Unix epoch.
fn clock_time(ms: u64) -> String {
    let secs = ms / 1000;
    format!(
        "{:02}:{:02}:{:02}",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60
    )
}

/// One event as a line: time, canary, phase, weights, failed checks, message, checks.
pub fn event_line(e: &RolloutEvent) -> String {
    let clock = clock_time(e.time_ms);
    let mut line = format!(
        "{clock} {} {:<16} canary {:>3}% primary {:>3}%  failed {}  {}{}: {}",
        shown(&e.canary),
        wire_name(&e.phase),
        e.canary_weight,
        e.primary_weight,
        e.failed_checks,
        if e.warning { "WARNING " } else { "" },
        shown(&e.reason),
        shown(&e.message)
    );
    let parts: Vec<String> = e
        .checks
        .iter()
        .map(|c| {
            format!(
                "{}={}{}",
                shown(&c.name),
                value(c.value),
                match (c.passed, c.dry_run) {
                    (true, _) => "",
                    (false, false) => " FAILED",
                    (false, true) => " would fail (dry run)",
                }
            )
        })
        .collect();
    if !parts.is_empty() {
        line.push_str(&format!("  [{}]", parts.join(", ")));
    }
    line
}

/// The judge's quantities as indented rows: class, estimate, interval, effect, p-value
/// and the sample sizes of both sides.
pub fn judgement_table(j: &crate::stats::compare::Judgement) -> String {
    let num = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    let mut out = String::new();
    for q in &j.quantities {
        let unit = if q.name == "latency" { "ms" } else { "pp" };
        out.push_str(&format!(
            "    {:<8} {:<6} estimate {}{unit} [{}, {}] at {}%  ratio {}  p {}  canary {} / primary {}\n",
            q.name,
            q.class.as_str(),
            num(q.estimate),
            num(q.lower),
            num(q.upper),
            j.confidence * 100.0,
            num(q.effect),
            num(q.p_value),
            q.canary_requests,
            q.primary_requests
        ));
    }
    out
}

/// The detail view of `weir ctl canaries NAME`.
pub fn canary_detail(c: &CanaryStatus) -> String {
    let mut out = canaries_table(std::slice::from_ref(c));
    out.push_str(&format!(
        "strategy {}, promotion {}, data planes {}\n",
        wire_name(&c.strategy),
        wire_name(&c.promotion),
        c.data_planes.join(", ")
    ));
    if let Some(e) = &c.data_plane_error {
        out.push_str(&format!("data plane problem: {}\n", shown(e)));
    }
    if !c.waiting_for_replicas.is_empty() {
        out.push_str(&format!(
            "WAITING FOR REPLICAS {}{}: no step until they answer; do not redeploy a slot meanwhile\n",
            // Member names come from etcd: no control character reaches the terminal.
            shown(&c.waiting_for_replicas.join(", ")),
            c.waiting_since_ms
                .map(|t| format!(" since {}", clock_time(t)))
                .unwrap_or_default()
        ));
    }
    for m in &c.last_checks.metrics {
        let verdict = match (m.passed, m.inconclusive, m.dry_run) {
            (true, _, false) => "ok".to_string(),
            (false, true, _) => format!(
                "INCONCLUSIVE (evidence {:.0}%, step held)",
                100.0 * m.evidence.unwrap_or(0.0)
            ),
            (false, false, false) => "FAILED".to_string(),
            (true, _, true) => "ok (dry run)".to_string(),
            (false, false, true) => "would fail (dry run)".to_string(),
        };
        out.push_str(&format!(
            "check {}: {} ({}) {verdict}\n",
            shown(&m.name),
            value(m.value),
            shown(&m.reason),
        ));
        if let Some(j) = &m.judgement {
            out.push_str(&judgement_table(j));
        }
    }
    for n in &c.notifications {
        out.push_str(&format!(
            "notification {} ({}, alert {}): {} {} at {}: {} after {} attempt(s)\n",
            shown(&n.provider),
            shown(&n.kind),
            shown(&n.alert),
            shown(&n.event),
            if n.ok { "ok" } else { "FAILED" },
            clock_time(n.time_ms),
            shown(&n.reason),
            n.attempts
        ));
    }
    out.push_str("events:\n");
    for e in &c.events {
        out.push_str("  ");
        out.push_str(&event_line(e));
        out.push('\n');
    }
    out
}

/// Runs one canary command, writing to `out`.
pub async fn run(
    t: &Target,
    cmd: &CanaryCommand,
    out: &mut (dyn Write + Send),
) -> Result<(), CtlError> {
    let out = &mut crate::ctl::Terminal::new(out, false);
    let path = |name: &str| {
        format!(
            "/api/v1/canaries/{}",
            crate::rollout::dataplane::encode(name)
        )
    };
    let (name, verb, body) = match cmd {
        CanaryCommand::Show { name: None } => {
            let v = call(t, Method::GET, "/api/v1/canaries", None).await?;
            if t.json {
                writeln!(out, "{v:#}")?;
            } else {
                let list: CanaryList = parse(v, "canary list")?;
                write!(out, "{}", canaries_table(&list.canaries))?;
            }
            return Ok(());
        }
        CanaryCommand::Show { name: Some(name) } => {
            let v = call(t, Method::GET, &path(name), None).await?;
            if t.json {
                writeln!(out, "{v:#}")?;
            } else {
                let c: CanaryStatus = parse(v, "canary")?;
                write!(out, "{}", canary_detail(&c))?;
            }
            return Ok(());
        }
        CanaryCommand::Start {
            name,
            revision,
            force,
        } => (
            name,
            "start",
            serde_json::to_value(crate::wire::canary::StartRequest {
                revision: revision.clone(),
                force: *force,
            })
            .ok(),
        ),
        CanaryCommand::Promote { name } => (name, "promote", None),
        CanaryCommand::Abort { name } => (name, "abort", None),
        CanaryCommand::Pause { name } => (name, "pause", None),
        CanaryCommand::Resume { name } => (name, "resume", None),
    };
    let v = call(t, Method::POST, &format!("{}/{verb}", path(name)), body).await?;
    if t.json {
        writeln!(out, "{v:#}")?;
    } else {
        let answer: CommandAnswer = parse(v, "command answer")?;
        writeln!(
            out,
            "{}: {verb} done: {} at canary weight {}% — {}",
            shown(name),
            wire_name(&answer.status.phase),
            answer.status.canary_weight,
            shown(&answer.message)
        )?;
        // The state after the command, as `weir ctl canaries` shows it.
        write!(
            out,
            "{}",
            canaries_table(std::slice::from_ref(&answer.status))
        )?;
    }
    Ok(())
}

/// The `event:` and joined `data:` fields of one SSE block.
pub fn parse_sse(block: &str) -> (Option<String>, String) {
    let mut kind = None;
    let mut data = Vec::new();
    for line in block.lines() {
        if let Some(k) = line.strip_prefix("event:") {
            kind = Some(k.trim().to_string());
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push(d.strip_prefix(' ').unwrap_or(d).to_string());
        }
    }
    (kind, data.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_and_lines_show_the_numbers() {
        let c: CanaryStatus = serde_json::from_str(
            r#"{
            "name": "app", "route": "app", "phase": "Progressing", "paused": false,
            "canaryWeight": 40, "iterations": 0, "iterationsTotal": 0, "failedChecks": 1,
            "threshold": 5, "revision": "v2", "primaryBackend": "app-blue",
            "canaryBackend": "app-green", "strategy": "canary", "promotion": "swap",
            "dataPlanes": ["in-process"],
            "primaryWeight": 60, "matchActive": false, "mirror": false,
            "promotedRevision": null, "pendingRevision": null, "message": "Advance v2",
            "lastTransitionMs": 3723000, "pendingWrites": 0, "dataPlaneError": null,
            "lastChecks": {"metrics": [{"name": "request-success-rate", "value": 99.5, "passed": true, "reason": "120 canary requests"}]},
            "events": [{"canary": "app", "timeMs": 3723000, "phase": "Progressing", "reason": "Advanced",
                        "warning": false, "message": "Advance v2", "canaryWeight": 40, "primaryWeight": 60,
                        "iterations": 0, "revision": "v2",
                        "failedChecks": 1, "checks": [{"name": "request-success-rate", "value": 99.5, "passed": true}]}]
        }"#,
        )
        .unwrap();
        let table = canaries_table(std::slice::from_ref(&c));
        assert!(table.starts_with("CANARY"), "{table}");
        for want in ["Progressing", "40%", "1/5", "v2", "app-blue", "app-green"] {
            assert!(table.contains(want), "{want} missing:\n{table}");
        }
        let detail = canary_detail(&c);
        assert!(detail.contains("01:02:03 app Progressing"), "{detail}");
        assert!(detail.contains("[request-success-rate=99.50]"), "{detail}");
        assert!(
            detail.contains("check request-success-rate: 99.50"),
            "{detail}"
        );
        assert!(!detail.contains("WAITING FOR REPLICAS"), "{detail}");
        let mut waiting = c.clone();
        waiting.waiting_for_replicas = vec!["r2\u{1b}[2J".into()];
        waiting.waiting_since_ms = Some(3_723_000);
        let detail = canary_detail(&waiting);
        assert!(
            detail.contains("WAITING FOR REPLICAS r2\\u001b[2J since 01:02:03"),
            "{detail}"
        );
        let mut failed = c.clone();
        failed.notifications = vec![crate::rollout::alerts::NotificationStatus {
            provider: "oncall".into(),
            kind: "generic".into(),
            alert: "on-call".into(),
            event: "RolledBack".into(),
            time_ms: 3723000,
            ok: false,
            status: Some(500),
            reason: "HTTP 500".into(),
            attempts: 4,
        }];
        let detail = canary_detail(&failed);
        assert!(
            detail.contains("notification oncall (generic, alert on-call): RolledBack FAILED at 01:02:03: HTTP 500 after 4 attempt(s)"),
            "{detail}"
        );
        let text = serde_json::to_string(&failed).unwrap();
        assert_eq!(serde_json::from_str::<CanaryStatus>(&text).unwrap(), failed);
        let (kind, data) = parse_sse("id: 3\nevent: rollout\ndata: {\"a\":1}\n\n");
        assert_eq!(
            (kind.as_deref(), data.as_str()),
            (Some("rollout"), "{\"a\":1}")
        );
    }

    #[test]
    fn the_detail_view_shows_the_judgement_and_dry_runs() {
        let mut c: CanaryStatus = serde_json::from_str(
            r#"{
            "name": "app", "route": "app", "phase": "Progressing", "paused": false,
            "canaryWeight": 40, "iterations": 0, "iterationsTotal": 0, "failedChecks": 0,
            "threshold": 5, "revision": "v2", "primaryBackend": "app-blue",
            "canaryBackend": "app-green", "strategy": "canary", "promotion": "swap",
            "dataPlanes": ["in-process"], "primaryWeight": 60, "matchActive": false,
            "mirror": false, "promotedRevision": null, "pendingRevision": null, "message": "",
            "lastTransitionMs": 0, "pendingWrites": 0, "dataPlaneError": null,
            "lastChecks": {"metrics": []}, "events": []
        }"#,
        )
        .unwrap();
        let snap = |base: u64| {
            let s = crate::stats::RouteStats::new(60);
            for i in 0..200 {
                s.record(crate::stats::Role::Canary, 0, false, base + i * 100);
            }
            s.snapshot(crate::stats::Role::Canary, 0, 5)
        };
        let j = crate::stats::compare::judge(
            &snap(60_000),
            &snap(20_000),
            &crate::stats::compare::CompareParams::DEFAULT,
        );
        c.last_checks
            .metrics
            .push(crate::rollout::machine::MetricResult {
                name: "baseline-comparison".into(),
                value: j.score,
                passed: false,
                reason: j.describe(),
                dry_run: true,
                judgement: Some(j),
                ..Default::default()
            });
        let detail = canary_detail(&c);
        assert!(detail.contains("would fail (dry run)"), "{detail}");
        assert!(detail.contains("latency  High"), "{detail}");
        assert!(detail.contains("errors   Pass"), "{detail}");
        assert!(detail.contains("canary 200 / primary 200"), "{detail}");
        assert!(detail.contains("at 98%"), "{detail}");
    }

    /// The list and command answers round-trip through their one type, and a status
    /// without a required field (`phase`) is refused, not shown as a default phase.
    #[test]
    fn canary_documents_round_trip() {
        let c: CanaryStatus = serde_json::from_str(
            r#"{
            "name": "app", "route": "app", "strategy": "abTesting", "promotion": "webhook",
            "phase": "Promoting", "canaryWeight": 0, "primaryWeight": 100, "matchActive": true,
            "mirror": false, "iterations": 2, "iterationsTotal": 5, "failedChecks": 0,
            "threshold": 1, "revision": null, "promotedRevision": "v1", "pendingRevision": null,
            "paused": true, "primaryBackend": null, "canaryBackend": null, "message": "",
            "lastTransitionMs": 1, "lastChecks": {"atMs": 0, "hooks": [], "metrics": []},
            "dataPlanes": [], "pendingWrites": 1, "dataPlaneError": "x", "events": []
        }"#,
        )
        .unwrap();
        let list = CanaryList {
            canaries: vec![c.clone()],
        };
        let text = serde_json::to_string(&list).unwrap();
        assert_eq!(serde_json::from_str::<CanaryList>(&text).unwrap(), list);
        let answer = CommandAnswer {
            accepted: true,
            message: "paused".into(),
            status: c.clone(),
        };
        let text = serde_json::to_string(&answer).unwrap();
        assert_eq!(
            serde_json::from_str::<CommandAnswer>(&text).unwrap(),
            answer
        );
        let mut v = serde_json::to_value(&c).unwrap();
        v.as_object_mut().unwrap().remove("phase");
        let err = serde_json::from_value::<CanaryStatus>(v).unwrap_err();
        assert!(err.to_string().contains("phase"), "{err}");
    }

    /// What a backend or a receiver said reaches the terminal with no control
    /// character: a hook's answer with a clipboard write (`ESC ] 52`) and a screen
    /// clear (`ESC [2J`), a revision with a newline, through `canaries` and its
    /// detail view, and through the writer every command prints with.
    #[test]
    fn answers_and_revisions_reach_the_terminal_escaped() {
        let evil = "HTTP 500: \u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2Jpwned\r\nfake line";
        let mut c: CanaryStatus = serde_json::from_value(serde_json::json!({
            "name": "app", "route": "app", "phase": "Progressing", "paused": false,
            "canaryWeight": 40, "iterations": 0, "iterationsTotal": 0, "failedChecks": 1,
            "threshold": 5, "revision": "v2\nFAKE", "primaryBackend": "app-blue",
            "canaryBackend": "app-green", "strategy": "canary", "promotion": "swap",
            "dataPlanes": ["in-process"],
            "primaryWeight": 60, "matchActive": false, "mirror": false,
            "promotedRevision": null, "pendingRevision": null, "message": evil,
            "lastTransitionMs": 3723000, "pendingWrites": 0, "dataPlaneError": null,
            "lastChecks": {"metrics": [{"name": "load", "value": null, "passed": false, "reason": evil}]},
            "events": []
        }))
        .unwrap();
        c.events = vec![RolloutEvent {
            canary: "app".into(),
            time_ms: 3_723_000,
            phase: crate::rollout::Phase::Progressing,
            reason: "CheckFailed".into(),
            warning: true,
            message: format!("rollout webhook load failed ({evil})"),
            canary_weight: 40,
            primary_weight: 60,
            iterations: 0,
            failed_checks: 1,
            revision: Some("v2\nFAKE".into()),
            checks: Vec::new(),
        }];
        c.notifications = vec![crate::rollout::alerts::NotificationStatus {
            provider: "p".into(),
            kind: "slack".into(),
            alert: "a".into(),
            event: "CheckFailed".into(),
            time_ms: 0,
            ok: false,
            status: Some(500),
            reason: evil.into(),
            attempts: 1,
        }];
        for text in [canaries_table(std::slice::from_ref(&c)), canary_detail(&c)] {
            assert!(
                !text.chars().any(|ch| ch.is_control() && ch != '\n'),
                "{text:?}"
            );
            assert!(
                !text.contains("\nfake line") && !text.contains("\nFAKE"),
                "{text}"
            );
        }
        assert!(
            canary_detail(&c).contains("\\u001b]52;c;"),
            "{}",
            canary_detail(&c)
        );
        // Whatever a view forgets, the writer shows escaped; JSON stays JSON.
        let mut buf: Vec<u8> = Vec::new();
        {
            let mut t = crate::ctl::Terminal::new(&mut buf, false);
            write!(t, "{evil}\n\"x\u{9b}y\"").unwrap();
        }
        let got = String::from_utf8(buf).unwrap();
        assert!(
            !got.chars().any(|ch| ch.is_control() && ch != '\n'),
            "{got:?}"
        );
        let json_line = got.lines().nth(2).unwrap();
        assert_eq!(
            serde_json::from_str::<String>(json_line).unwrap(),
            "x\u{9b}y"
        );
        // Only a redrawing watch sends its own clear, where a screen starts.
        let mut buf: Vec<u8> = Vec::new();
        {
            let mut t = crate::ctl::Terminal::new(&mut buf, true);
            writeln!(t, "{}screen", crate::ctl::CLEAR_SCREEN).unwrap();
            write!(t, "x: ").unwrap();
            write!(t, "{}", crate::ctl::CLEAR_SCREEN).unwrap();
        }
        let got = String::from_utf8(buf).unwrap();
        assert_eq!(got, "\u{1b}[H\u{1b}[2Jscreen\nx: \\u001b[H\\u001b[2J");
    }
}
