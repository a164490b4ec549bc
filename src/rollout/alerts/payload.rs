//! PURE. One notification ([`Alert`]) → the JSON each service documents, cut to the
//! service's limits so that a long message is shortened rather than refused.
//!
//! | type | shape | limits kept |
//! |---|---|---|
//! | `slack` | `{channel, username, icon_emoji, text, attachments: [{color, author_name, title, text, mrkdwn_in, fields: [{title, value, short}], ts}]}` (Flagger's form) | text 3,000 chars |
//! | `msteams` | `{type: "message", attachments: [{contentType: "application/vnd.microsoft.card.adaptive", content: AdaptiveCard 1.4 {body: [TextBlock, TextBlock, FactSet]}}]}` (Workflows) | text 3,000 chars |
//! | `discord` | `{username, content, embeds: [{title, description, color, fields: [{name, value, inline}], timestamp}]}` | content 2,000, title 256, description 4,096, field name 256 / value 1,024, 25 fields, 6,000 per embed |
//! | `rocket` | `{channel, alias, emoji, text, attachments: [{color, title, text, fields: [{title, value, short}]}]}` | text 3,000 chars |
//! | `gchat` | `{text, cardsV2: [{cardId, card: {header: {title, subtitle}, sections: [{widgets: [textParagraph, decoratedText…]}]}}]}` | text 4,096 chars |
//! | `generic` | Flagger's event-webhook `{name, namespace, phase, checksum, metadata: {eventMessage, eventType, timestamp}}` plus `severity`, `reason`, `revision`, `canaryWeight`, `primaryWeight`, `failedChecks`, `threshold`, `checks` | none |
//!
//! Text in a chat message may come from a backend (a revision) or a receiver (a hook's
//! answer in an event's message); it is made inert in each service's markup before it
//! is cut ([`crate::text::chat`]): Slack and Rocket.Chat get `&`, `<`, `>` as entities
//! (so `<!channel>` and `<https://evil|Approve>` show as typed), Discord, Teams and
//! Google Chat's text break `@`, `<` and `](` with a zero-width space, Google Chat's
//! cards get HTML entities; every `@` is followed by one, so nothing mentions anyone.
//! Discord payloads also say `allowed_mentions: {parse: []}`. The generic payload is
//! data for a program and is sent as it is.

use serde::Serialize;
use serde_json::{json, Value};

use crate::config::{ProviderKind, Severity};
use crate::rollout::machine::MetricResult;
use crate::text::chat;

/// Longest Slack / Rocket.Chat / Teams message text kept (Slack's section-text limit).
pub const CHAT_TEXT_MAX: usize = 3000;
/// Discord `content` limit.
pub const DISCORD_CONTENT_MAX: usize = 2000;
/// Discord embed `title` limit.
pub const DISCORD_TITLE_MAX: usize = 256;
/// Discord embed `description` limit.
pub const DISCORD_DESCRIPTION_MAX: usize = 4096;
/// Discord embed field `name` limit.
pub const DISCORD_FIELD_NAME_MAX: usize = 256;
/// Discord embed field `value` limit.
pub const DISCORD_FIELD_VALUE_MAX: usize = 1024;
/// Discord fields per embed.
pub const DISCORD_FIELDS_MAX: usize = 25;
/// Discord characters per embed (title + description + fields).
pub const DISCORD_EMBED_TOTAL_MAX: usize = 6000;
/// Google Chat message `text` limit.
pub const GCHAT_TEXT_MAX: usize = 4096;

/// One notification, whatever the service: what happened to which canary, with the
/// numbers behind it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    /// The canary.
    pub canary: String,
    /// How important (decides which alerts send it).
    pub severity: Severity,
    /// One word: the event's reason (`RolledBack`, `RollingUpdateStalled`, …).
    pub reason: String,
    /// The canary's phase after the event.
    pub phase: String,
    /// Revision of the run, if known.
    pub revision: Option<String>,
    /// The event's message.
    pub message: String,
    /// Canary weight after the event.
    pub canary_weight: u8,
    /// Primary weight after the event.
    pub primary_weight: u8,
    /// Failed checks of the run.
    pub failed_checks: u32,
    /// Failed checks that roll back.
    pub threshold: u32,
    /// The metric values of the tick behind the event (failed ones are named in fields).
    pub checks: Vec<MetricResult>,
    /// Flagger's checksum of the run (for the generic payload).
    pub checksum: String,
    /// When (ms since the Unix epoch).
    pub time_ms: u64,
}

impl Alert {
    /// `app: canary failed (v2)`: the one line a phone shows.
    pub fn headline(&self) -> String {
        let what = match self.reason.as_str() {
            "RolledBack" => "rolled back",
            "PromotionFailed" => "promotion failed",
            "Succeeded" => "promotion finished",
            "Started" => "analysis started",
            "Restarted" => "analysis restarted",
            "CheckFailed" => "check failed",
            "WaitingApproval" => "waiting for approval to start",
            "TrafficIncreaseHeld" => "waiting for approval to increase traffic",
            "WaitingPromotion" => "waiting for approval to promote",
            "PromoteHookFailed" => "promote hook failed",
            "Aborted" => "aborted",
            "Paused" => "paused",
            "Resumed" => "resumed",
            "Promoting" => "promoting",
            "RollingUpdateStalled" => "rolling update stalled",
            "LeaseLost" => "engine lost its etcd lease",
            other => other,
        };
        match &self.revision {
            Some(r) => format!("{}: {what} (revision {r})", self.canary),
            None => format!("{}: {what}", self.canary),
        }
    }

    /// Label/value pairs every chat payload shows.
    pub fn facts(&self) -> Vec<(String, String)> {
        let mut f = vec![
            ("Canary".to_string(), self.canary.clone()),
            (
                "Revision".to_string(),
                self.revision.clone().unwrap_or_else(|| "-".into()),
            ),
            ("Phase".to_string(), self.phase.clone()),
            (
                "Weights".to_string(),
                format!(
                    "canary {}% / primary {}%",
                    self.canary_weight, self.primary_weight
                ),
            ),
            (
                "Failed checks".to_string(),
                format!("{}/{}", self.failed_checks, self.threshold),
            ),
        ];
        for c in self.checks.iter().filter(|c| !c.passed) {
            let value = c
                .value
                .map_or_else(|| "no value".to_string(), |v| format!("{v:.2}"));
            f.push((
                format!("Failed check {}", c.name),
                format!("{value} ({})", c.reason),
            ));
        }
        f
    }
}

/// Cuts `s` to at most `max` characters, marking the cut with `…`.
pub fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `s` made inert by `escape` and cut to `max` characters (the escaped text counts).
fn fit(s: &str, max: usize, escape: fn(&str) -> String) -> String {
    chat::cut(&escape(&cut(s, max)), max)
}

/// Slack's attachment colours (Flagger's: `good`, `danger`, plus `warning`).
fn slack_color(s: Severity) -> &'static str {
    match s {
        Severity::Info => "good",
        Severity::Warn => "warning",
        Severity::Error => "danger",
    }
}

/// The same colours as hex, for services that want one.
fn hex_color(s: Severity) -> &'static str {
    match s {
        Severity::Info => "#2eb886",
        Severity::Warn => "#daa038",
        Severity::Error => "#a30200",
    }
}

fn int_color(s: Severity) -> u32 {
    u32::from_str_radix(&hex_color(s)[1..], 16).unwrap_or(0)
}

fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// The body POSTed to a provider of `kind`.
pub fn render(kind: ProviderKind, channel: &str, username: &str, a: &Alert) -> Value {
    match kind {
        ProviderKind::Slack => slack(channel, username, a),
        ProviderKind::Msteams => msteams(a),
        ProviderKind::Discord => discord(username, a),
        ProviderKind::Rocket => rocket(channel, username, a),
        ProviderKind::Gchat => gchat(a),
        ProviderKind::Generic => generic(a),
    }
}

fn slack(channel: &str, username: &str, a: &Alert) -> Value {
    let fields: Vec<Value> = a
        .facts()
        .into_iter()
        .map(|(t, v)| json!({"title": fit(&t, CHAT_TEXT_MAX, chat::slack), "value": fit(&v, CHAT_TEXT_MAX, chat::slack), "short": t != "Weights" && !t.starts_with("Failed check ")}))
        .collect();
    json!({
        "channel": channel,
        "username": username,
        "icon_emoji": ":rocket:",
        "text": fit(&a.headline(), CHAT_TEXT_MAX, chat::slack),
        "attachments": [{
            "color": slack_color(a.severity),
            "author_name": chat::slack(&format!("{}.default", a.canary)),
            "title": fit(&a.headline(), CHAT_TEXT_MAX, chat::slack),
            "text": fit(&a.message, CHAT_TEXT_MAX, chat::slack),
            "mrkdwn_in": ["text"],
            "fields": fields,
            "ts": a.time_ms / 1000,
        }],
    })
}

fn msteams(a: &Alert) -> Value {
    let facts: Vec<Value> = a
        .facts()
        .into_iter()
        .map(|(t, v)| json!({"title": fit(&t, CHAT_TEXT_MAX, chat::markdown), "value": fit(&v, CHAT_TEXT_MAX, chat::markdown)}))
        .collect();
    let color = match a.severity {
        Severity::Info => "Good",
        Severity::Warn => "Warning",
        Severity::Error => "Attention",
    };
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": [
                    {"type": "TextBlock", "text": fit(&a.headline(), CHAT_TEXT_MAX, chat::markdown), "weight": "Bolder", "size": "Medium", "color": color, "wrap": true},
                    {"type": "TextBlock", "text": fit(&a.message, CHAT_TEXT_MAX, chat::markdown), "wrap": true},
                    {"type": "FactSet", "facts": facts},
                ],
            },
        }],
    })
}

fn discord(username: &str, a: &Alert) -> Value {
    let title = fit(&a.headline(), DISCORD_TITLE_MAX, chat::markdown);
    let description = fit(&a.message, DISCORD_DESCRIPTION_MAX, chat::markdown);
    let mut budget = DISCORD_EMBED_TOTAL_MAX
        .saturating_sub(title.chars().count())
        .saturating_sub(description.chars().count());
    let mut fields = Vec::new();
    for (n, v) in a.facts().into_iter().take(DISCORD_FIELDS_MAX) {
        let n = fit(&n, DISCORD_FIELD_NAME_MAX, chat::markdown);
        let v = fit(&v, DISCORD_FIELD_VALUE_MAX, chat::markdown);
        let len = n.chars().count() + v.chars().count();
        if len > budget {
            break;
        }
        budget -= len;
        let inline = !n.starts_with("Failed check ");
        fields.push(json!({"name": n, "value": v, "inline": inline}));
    }
    json!({
        "username": username,
        "content": fit(&a.headline(), DISCORD_CONTENT_MAX, chat::markdown),
        // Whatever the text says, the message pings no one.
        "allowed_mentions": {"parse": []},
        "embeds": [{
            "title": title,
            "description": description,
            "color": int_color(a.severity),
            "fields": fields,
            "timestamp": rfc3339(a.time_ms),
        }],
    })
}

fn rocket(channel: &str, username: &str, a: &Alert) -> Value {
    let fields: Vec<Value> = a
        .facts()
        .into_iter()
        .map(|(t, v)| json!({"title": fit(&t, CHAT_TEXT_MAX, chat::slack), "value": fit(&v, CHAT_TEXT_MAX, chat::slack), "short": !t.starts_with("Failed check ")}))
        .collect();
    json!({
        "channel": channel,
        "alias": username,
        "emoji": ":rocket:",
        "text": fit(&a.headline(), CHAT_TEXT_MAX, chat::slack),
        "attachments": [{
            "color": hex_color(a.severity),
            "title": fit(&a.headline(), CHAT_TEXT_MAX, chat::slack),
            "text": fit(&a.message, CHAT_TEXT_MAX, chat::slack),
            "fields": fields,
        }],
    })
}

fn gchat(a: &Alert) -> Value {
    let mut widgets =
        vec![json!({"textParagraph": {"text": fit(&a.message, GCHAT_TEXT_MAX, chat::html)}})];
    for (t, v) in a.facts() {
        widgets.push(json!({"decoratedText": {"topLabel": fit(&t, GCHAT_TEXT_MAX, chat::html), "text": fit(&v, GCHAT_TEXT_MAX, chat::html)}}));
    }
    json!({
        "text": fit(&a.headline(), GCHAT_TEXT_MAX, chat::markdown),
        "cardsV2": [{
            "cardId": format!("weir-{}-{}", a.canary, a.time_ms),
            "card": {
                "header": {
                    "title": fit(&a.headline(), 200, chat::html),
                    "subtitle": chat::html(&format!("{} · {}", a.severity.name(), a.reason)),
                },
                "sections": [{"widgets": widgets}],
            },
        }],
    })
}

fn generic(a: &Alert) -> Value {
    let event_type = if a.severity == Severity::Info {
        "Normal"
    } else {
        "Warning"
    };
    json!({
        "name": a.canary,
        "namespace": crate::rollout::convert::NAMESPACE,
        "phase": a.phase,
        "checksum": a.checksum,
        "metadata": {
            "eventMessage": a.message,
            "eventType": event_type,
            "timestamp": a.time_ms.to_string(),
        },
        "severity": a.severity,
        "reason": a.reason,
        "revision": a.revision,
        "canaryWeight": a.canary_weight,
        "primaryWeight": a.primary_weight,
        "failedChecks": a.failed_checks,
        "threshold": a.threshold,
        "checks": a.checks,
    })
}
