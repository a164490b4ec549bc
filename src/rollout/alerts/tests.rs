use super::payload::*;
use super::*;
use crate::config::ProviderKind;
use crate::rollout::machine::MetricResult;
use serde_json::Value;
use std::time::Duration;

fn alert(severity: Severity, reason: &str, message: &str) -> Alert {
    Alert {
        canary: "app".into(),
        severity,
        reason: reason.into(),
        phase: "Failed".into(),
        revision: Some("v2".into()),
        message: message.into(),
        canary_weight: 0,
        primary_weight: 100,
        failed_checks: 5,
        threshold: 5,
        checks: vec![
            MetricResult {
                name: "request-success-rate".into(),
                value: Some(91.5),
                passed: false,
                reason: "91.50 < 99".into(),
                dry_run: false,
                judgement: None,
                ..Default::default()
            },
            MetricResult {
                name: "request-duration".into(),
                value: Some(12.0),
                passed: true,
                reason: "12.00 <= 500".into(),
                dry_run: false,
                judgement: None,
                ..Default::default()
            },
        ],
        checksum: "abc".into(),
        time_ms: 1_700_000_000_000,
    }
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{ptr} is not a string in {v}"))
}

fn chars(v: &Value, ptr: &str) -> usize {
    s(v, ptr).chars().count()
}

#[test]
fn severity_follows_flaggers_rules() {
    use Severity::*;
    // info every notified event, warn failures and waiting for approval, error failures only.
    assert_eq!(severity_of("Succeeded"), Some(Info));
    assert_eq!(severity_of("Started"), Some(Info));
    assert_eq!(severity_of("WaitingApproval"), Some(Warn));
    assert_eq!(severity_of("WaitingPromotion"), Some(Warn));
    assert_eq!(severity_of("TrafficIncreaseHeld"), Some(Warn));
    assert_eq!(severity_of("CheckFailed"), Some(Warn));
    assert_eq!(severity_of("RolledBack"), Some(Error));
    assert_eq!(severity_of("PromotionFailed"), Some(Error));
    assert_eq!(severity_of("RollingUpdateStalled"), Some(Error));
    assert_eq!(severity_of("LeaseLost"), Some(Error));
    // Each weight step and the engine's bookkeeping are not notified (as in Flagger).
    for quiet in [
        "Advanced",
        "Initialized",
        "Finalising",
        "DataPlaneRecovered",
    ] {
        assert_eq!(severity_of(quiet), None, "{quiet}");
    }
    let table = [
        (Info, Info, true),
        (Info, Warn, true),
        (Info, Error, true),
        (Warn, Info, false),
        (Warn, Warn, true),
        (Warn, Error, true),
        (Error, Info, false),
        (Error, Warn, false),
        (Error, Error, true),
    ];
    for (rule, event, want) in table {
        assert_eq!(sends(rule, event), want, "alert {rule:?}, event {event:?}");
    }
}

#[test]
fn slack_is_flaggers_attachment_with_the_facts() {
    let v = render(
        ProviderKind::Slack,
        "#deploys",
        "weir",
        &alert(
            Severity::Error,
            "RolledBack",
            "Canary failed! Rolling back v2",
        ),
    );
    assert_eq!(s(&v, "/channel"), "#deploys");
    assert_eq!(s(&v, "/username"), "weir");
    assert_eq!(s(&v, "/icon_emoji"), ":rocket:");
    assert_eq!(s(&v, "/attachments/0/color"), "danger");
    assert_eq!(s(&v, "/attachments/0/author_name"), "app.default");
    assert_eq!(
        s(&v, "/attachments/0/text"),
        "Canary failed! Rolling back v2"
    );
    assert_eq!(
        v["attachments"][0]["mrkdwn_in"],
        serde_json::json!(["text"])
    );
    assert!(v["attachments"][0]["ts"].is_u64());
    let fields = v["attachments"][0]["fields"].as_array().unwrap();
    for f in fields {
        assert!(
            f["title"].is_string() && f["value"].is_string() && f["short"].is_boolean(),
            "{f}"
        );
    }
    let text = v.to_string();
    for want in [
        "v2",
        "Failed",
        "canary 0% / primary 100%",
        "5/5",
        "request-success-rate",
        "91.50",
    ] {
        assert!(text.contains(want), "{want} missing in {text}");
    }
    assert!(
        !text.contains("request-duration"),
        "a passing check is not a failed check: {text}"
    );
}

#[test]
fn long_messages_are_cut_to_each_services_limits() {
    let long = "x".repeat(10_000);
    let mut a = alert(Severity::Warn, "CheckFailed", &long);
    a.canary = "c".repeat(300);
    a.checks = (0..40)
        .map(|i| MetricResult {
            name: format!("m{i}-{}", "n".repeat(300)),
            value: Some(1.0),
            passed: false,
            reason: "r".repeat(2000),
            dry_run: false,
            judgement: None,
            ..Default::default()
        })
        .collect();
    let slack = render(ProviderKind::Slack, "general", "weir", &a);
    assert_eq!(chars(&slack, "/attachments/0/text"), CHAT_TEXT_MAX);
    assert!(s(&slack, "/attachments/0/text").ends_with('…'));
    let rocket = render(ProviderKind::Rocket, "general", "weir", &a);
    assert_eq!(chars(&rocket, "/attachments/0/text"), CHAT_TEXT_MAX);
    let teams = render(ProviderKind::Msteams, "general", "weir", &a);
    assert_eq!(
        chars(&teams, "/attachments/0/content/body/1/text"),
        CHAT_TEXT_MAX
    );
    let gchat = render(ProviderKind::Gchat, "general", "weir", &a);
    assert!(chars(&gchat, "/text") <= GCHAT_TEXT_MAX);
    assert_eq!(
        chars(
            &gchat,
            "/cardsV2/0/card/sections/0/widgets/0/textParagraph/text"
        ),
        GCHAT_TEXT_MAX
    );

    let d = render(ProviderKind::Discord, "general", "weir", &a);
    assert!(chars(&d, "/content") <= DISCORD_CONTENT_MAX);
    let e = &d["embeds"][0];
    let title = e["title"].as_str().unwrap().chars().count();
    let description = e["description"].as_str().unwrap().chars().count();
    assert!(title <= DISCORD_TITLE_MAX, "title {title}");
    assert_eq!(description, DISCORD_DESCRIPTION_MAX);
    let fields = e["fields"].as_array().unwrap();
    assert!(!fields.is_empty() && fields.len() <= DISCORD_FIELDS_MAX);
    let mut total = title + description;
    for f in fields {
        let n = f["name"].as_str().unwrap().chars().count();
        let v = f["value"].as_str().unwrap().chars().count();
        assert!(
            n <= DISCORD_FIELD_NAME_MAX && v <= DISCORD_FIELD_VALUE_MAX,
            "{f}"
        );
        assert!(f["inline"].is_boolean());
        total += n + v;
    }
    assert!(
        total <= DISCORD_EMBED_TOTAL_MAX,
        "embed of {total} characters"
    );
}

#[test]
fn teams_is_an_adaptive_card_for_workflows() {
    let v = render(
        ProviderKind::Msteams,
        "general",
        "weir",
        &alert(Severity::Error, "RolledBack", "Canary failed!"),
    );
    assert_eq!(s(&v, "/type"), "message");
    let att = &v["attachments"][0];
    assert_eq!(
        s(att, "/contentType"),
        "application/vnd.microsoft.card.adaptive"
    );
    assert!(att["contentUrl"].is_null());
    let card = &att["content"];
    assert_eq!(s(card, "/type"), "AdaptiveCard");
    assert_eq!(
        s(card, "/$schema"),
        "http://adaptivecards.io/schemas/adaptive-card.json"
    );
    assert_eq!(s(card, "/version"), "1.4");
    assert_eq!(s(card, "/body/0/type"), "TextBlock");
    assert_eq!(s(card, "/body/0/color"), "Attention");
    assert_eq!(s(card, "/body/2/type"), "FactSet");
    let facts = card["body"][2]["facts"].as_array().unwrap();
    assert!(facts
        .iter()
        .any(|f| f["title"] == "Revision" && f["value"] == "v2"));
    assert!(facts
        .iter()
        .all(|f| f["title"].is_string() && f["value"].is_string()));
}

#[test]
fn discord_rocket_and_gchat_use_their_documented_fields() {
    let a = alert(Severity::Info, "Succeeded", "Promotion completed");
    let d = render(ProviderKind::Discord, "general", "weir", &a);
    assert_eq!(s(&d, "/username"), "weir");
    assert!(d["embeds"][0]["color"].is_u64());
    assert_eq!(d["embeds"][0]["color"], 0x2eb886);
    assert!(humantime::parse_rfc3339(s(&d, "/embeds/0/timestamp")).is_ok());

    let r = render(ProviderKind::Rocket, "#deploys", "weir", &a);
    assert_eq!(s(&r, "/channel"), "#deploys");
    assert_eq!(s(&r, "/alias"), "weir");
    assert_eq!(s(&r, "/emoji"), ":rocket:");
    assert!(s(&r, "/attachments/0/color").starts_with('#'));
    assert!(r["attachments"][0]["fields"][0]["short"].is_boolean());

    let g = render(ProviderKind::Gchat, "general", "weir", &a);
    assert!(s(&g, "/text").contains("app: promotion finished (revision v2)"));
    assert!(s(&g, "/cardsV2/0/cardId").starts_with("weir-app-"));
    assert!(s(&g, "/cardsV2/0/card/header/title").contains("app"));
    let widgets = g["cardsV2"][0]["card"]["sections"][0]["widgets"]
        .as_array()
        .unwrap();
    assert!(widgets[0]["textParagraph"]["text"].is_string());
    assert!(widgets[1..]
        .iter()
        .all(|w| w["decoratedText"]["topLabel"].is_string()
            && w["decoratedText"]["text"].is_string()));
}

#[test]
fn generic_is_flaggers_event_payload_plus_weirs_numbers() {
    let v = render(
        ProviderKind::Generic,
        "general",
        "weir",
        &alert(Severity::Error, "RolledBack", "Canary failed!"),
    );
    assert_eq!(s(&v, "/name"), "app");
    assert_eq!(s(&v, "/namespace"), "default");
    assert_eq!(s(&v, "/phase"), "Failed");
    assert_eq!(s(&v, "/checksum"), "abc");
    assert_eq!(s(&v, "/metadata/eventMessage"), "Canary failed!");
    assert_eq!(s(&v, "/metadata/eventType"), "Warning");
    assert_eq!(s(&v, "/metadata/timestamp"), "1700000000000");
    assert_eq!(s(&v, "/severity"), "error");
    assert_eq!(s(&v, "/reason"), "RolledBack");
    assert_eq!(s(&v, "/revision"), "v2");
    assert_eq!(v["canaryWeight"], 0);
    assert_eq!(v["primaryWeight"], 100);
    assert_eq!(v["failedChecks"], 5);
    assert_eq!(v["threshold"], 5);
    assert_eq!(v["checks"][0]["name"], "request-success-rate");
    assert_eq!(v["checks"][0]["value"], 91.5);
}

#[test]
fn backoff_doubles_to_its_cap_with_jitter_in_the_upper_half() {
    assert_eq!(backoff(0, 0.0), Duration::from_millis(250));
    assert_eq!(backoff(0, 1.0), Duration::from_millis(500));
    assert_eq!(backoff(1, 1.0), Duration::from_secs(1));
    assert_eq!(backoff(3, 0.5), Duration::from_secs(3));
    assert_eq!(backoff(10, 1.0), Duration::from_secs(30));
    assert_eq!(backoff(40, 0.0), Duration::from_secs(15));
}

#[test]
fn notification_status_round_trips() {
    let n = NotificationStatus {
        provider: "team-slack".into(),
        kind: "slack".into(),
        alert: "deploys".into(),
        event: "Succeeded".into(),
        time_ms: 5,
        ok: true,
        status: Some(200),
        reason: "HTTP 200".into(),
        attempts: 1,
    };
    let text = serde_json::to_string(&n).unwrap();
    assert!(
        text.contains("\"type\":\"slack\"") && text.contains("\"timeMs\":5"),
        "{text}"
    );
    assert_eq!(
        serde_json::from_str::<NotificationStatus>(&text).unwrap(),
        n
    );
}

/// Reads one HTTP/1.1 request with a Content-Length body and answers 200.
async fn one_post(l: &tokio::net::TcpListener) -> Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut s, _) = l.accept().await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed before a whole request");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await
                    .unwrap();
                return serde_json::from_slice(&buf[end + 4..end + 4 + len]).unwrap();
            }
        }
    }
}

/// What the engine does not see is notified from the event bus: a stalled rolling update
/// of either slot of the canary's route, and a canary lost with the etcd lease. Events of
/// other backends, canaries or kinds are not.
#[tokio::test]
async fn stalled_updates_and_lost_leases_are_notified_from_the_bus() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let yaml = format!(
        "backends:\n  a: {{ endpoints: [\"127.0.0.1:9001\"] }}\n  b: {{ endpoints: [\"127.0.0.1:9002\"] }}\n  other: {{ endpoints: [\"127.0.0.1:9003\"] }}\nroutes:\n  - {{ name: app, primary: a, canary: b }}\n  - {{ name: o, pathPrefix: /o, primary: other }}\nalertProviders:\n  hook: {{ type: generic, address: \"http://{addr}/x\", retries: 0 }}\ncanaries:\n  - name: app\n    route: app\n    analysis:\n      stepWeight: 10\n      alerts: [{{ name: pager, severity: error, providerRef: {{ name: hook }} }}]\n"
    );
    let cfg = crate::config::parse_yaml(&yaml, "t.yaml", std::path::Path::new(".")).unwrap();
    let alerter = Alerter::start(
        &cfg,
        &crate::rollout::http::HttpClient::new(),
        crate::clock::Clock::system(),
    )
    .unwrap()
    .expect("an alerter: a canary has alerts");
    let bus = crate::control::events::EventBus::new();
    let _follow = alerter.follow(&bus);
    // Not ours: another backend, another kind, another canary, an info event.
    bus.publish(
        "endpoints",
        serde_json::json!({"backend": "other", "kind": "stalled", "message": "x"}),
    );
    bus.publish(
        "endpoints",
        serde_json::json!({"backend": "b", "kind": "ready", "message": "x"}),
    );
    bus.publish(
        "cluster",
        serde_json::json!({"kind": "CanaryLost", "canary": "nope", "replica": "r1", "message": "x"}),
    );
    bus.publish(
        "endpoints",
        serde_json::json!({"backend": "b", "kind": "stalled", "message": "no progress for 600000 ms"}),
    );
    let first = one_post(&l).await;
    assert_eq!(first["reason"], "RollingUpdateStalled", "{first}");
    assert_eq!(first["severity"], "error");
    assert_eq!(first["name"], "app");
    assert!(first["metadata"]["eventMessage"]
        .as_str()
        .unwrap()
        .contains("backend b stalled: no progress"));
    bus.publish(
        "cluster",
        serde_json::json!({"kind": "CanaryLost", "canary": "app", "replica": "r1", "message": "lost with the lease"}),
    );
    let second = one_post(&l).await;
    assert_eq!(second["reason"], "LeaseLost", "{second}");
    assert!(second["metadata"]["eventMessage"]
        .as_str()
        .unwrap()
        .contains("Replica r1 lost its etcd lease"));
}

/// A failing pre-rollout hook is notified (Flagger does not), a muted hook's failure is
/// not, and the event's numbers reach the payload.
#[tokio::test]
async fn muted_hooks_are_silent_and_a_failing_pre_rollout_hook_is_not() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let yaml = format!(
        "backends:\n  a: {{ endpoints: [\"127.0.0.1:9001\"] }}\n  b: {{ endpoints: [\"127.0.0.1:9002\"] }}\nroutes:\n  - {{ name: app, primary: a, canary: b }}\nalertProviders:\n  hook: {{ type: generic, address: \"http://{addr}/x\", retries: 0 }}\ncanaries:\n  - name: app\n    route: app\n    analysis:\n      threshold: 4\n      stepWeight: 10\n      webhooks:\n        - {{ name: load, url: \"http://127.0.0.1:1/\", muteAlert: true }}\n        - {{ name: gate, type: pre-rollout, url: \"http://127.0.0.1:1/\" }}\n      alerts: [{{ name: watch, severity: warn, providerRef: {{ name: hook }} }}]\n"
    );
    let cfg = crate::config::parse_yaml(&yaml, "t.yaml", std::path::Path::new(".")).unwrap();
    let alerter = Alerter::start(
        &cfg,
        &crate::rollout::http::HttpClient::new(),
        crate::clock::Clock::system(),
    )
    .unwrap()
    .unwrap();
    let event = |reason: &str, message: &str| RolloutEvent {
        canary: "app".into(),
        time_ms: 1_700_000_000_000,
        phase: crate::rollout::Phase::Progressing,
        reason: reason.into(),
        warning: true,
        message: message.into(),
        canary_weight: 10,
        primary_weight: 90,
        iterations: 0,
        failed_checks: 1,
        revision: Some("v2".into()),
        checks: Vec::new(),
    };
    alerter.on_event(&event("Started", "New revision v2: analysis started"));
    alerter.on_event(&event(
        "CheckFailed",
        "Halt advancement of v2 at canary 10: rollout webhook load failed (HTTP 500)",
    ));
    alerter.on_event(&event(
        "CheckFailed",
        "Halt advancement of v2 at canary 0: pre-rollout webhook gate failed (HTTP 500)",
    ));
    let got = one_post(&l).await;
    assert_eq!(got["reason"], "CheckFailed");
    assert!(
        got["metadata"]["eventMessage"]
            .as_str()
            .unwrap()
            .contains("pre-rollout webhook gate failed"),
        "{got}"
    );
    assert_eq!(
        (got["canaryWeight"].as_u64(), got["threshold"].as_u64()),
        (Some(10), Some(4))
    );
    assert_eq!(got["revision"], "v2");
    assert!(
        delivered(&alerter).await,
        "no delivery recorded: {:?}",
        alerter.results("app")
    );
}

/// Polls (bounded) until the provider's status shows a delivery.
async fn delivered(a: &Alerter) -> bool {
    for _ in 0..200 {
        if a.results("app")
            .iter()
            .any(|n| n.ok && n.provider == "hook")
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Captures log lines written while it is the thread's subscriber.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A receiver that quotes the webhook URL back in its error answer (as Slack-like
/// services do) never shows the secret: not in the status the API and `weir ctl`
/// read, not in the log. The address shows as `scheme://host/…`.
#[tokio::test]
async fn a_receiver_quoting_the_secret_url_back_shows_scheme_and_host_only() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let url = format!("http://{addr}/services/T0001/B0002/SECRET");
    let quoted = url.clone();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; 65536];
        let _ = s.read(&mut buf).await;
        let body = format!(
            "invalid_token for {quoted}: no hook at /services/T0001/B0002/SECRET (token SECRET)"
        );
        let head = format!(
            "HTTP/1.1 403 Forbidden\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        let _ = s.write_all(head.as_bytes()).await;
        let _ = s.write_all(body.as_bytes()).await;
    });
    let yaml = format!(
        "backends:\n  a: {{ endpoints: [\"127.0.0.1:9001\"] }}\n  b: {{ endpoints: [\"127.0.0.1:9002\"] }}\nroutes:\n  - {{ name: app, primary: a, canary: b }}\nalertProviders:\n  team: {{ type: slack, address: \"{url}\", retries: 0 }}\ncanaries:\n  - name: app\n    route: app\n    analysis:\n      stepWeight: 10\n      alerts: [{{ name: deploys, severity: info, providerRef: {{ name: team }} }}]\n"
    );
    let cfg = crate::config::parse_yaml(&yaml, "t.yaml", std::path::Path::new(".")).unwrap();
    let log = Captured::default();
    let sub = tracing_subscriber::fmt()
        .with_writer({
            let log = log.clone();
            move || log.clone()
        })
        .with_ansi(false)
        .with_env_filter("weir=debug")
        .finish();
    let _on = tracing::subscriber::set_default(sub);
    let alerter = Alerter::start(
        &cfg,
        &crate::rollout::http::HttpClient::new(),
        crate::clock::Clock::system(),
    )
    .unwrap()
    .unwrap();
    alerter.on_event(&RolloutEvent {
        canary: "app".into(),
        time_ms: 1_700_000_000_000,
        phase: crate::rollout::Phase::Progressing,
        reason: "Started".into(),
        warning: false,
        message: "New revision v2: analysis started".into(),
        canary_weight: 0,
        primary_weight: 100,
        iterations: 0,
        failed_checks: 0,
        revision: Some("v2".into()),
        checks: Vec::new(),
    });
    let mut status = None;
    for _ in 0..500 {
        if let Some(n) = alerter
            .results("app")
            .into_iter()
            .find(|n| n.provider == "team")
        {
            status = Some(n);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let n = status.expect("a delivery result");
    assert_eq!((n.ok, n.status), (false, Some(403)), "{n:?}");
    assert!(
        n.reason.starts_with(&format!(
            "HTTP 403: invalid_token for http://{addr}/…: no hook at …"
        )),
        "{}",
        n.reason
    );
    let api = serde_json::to_string(&alerter.results("app")).unwrap();
    let logged = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert!(logged.contains("notification failed"), "{logged}");
    for shown in [&api, &logged] {
        for secret in ["SECRET", "T0001", "/services/"] {
            assert!(!shown.contains(secret), "{secret} shown: {shown}");
        }
    }
}

/// A revision and a hook answer written to get attention: mentions (`<!channel>`,
/// `@everyone`, `<users/all>`) and disguised links. No chat payload carries them
/// in a form its service acts on; Discord's also forbids every mention outright.
#[test]
fn revisions_and_answers_reach_no_chat_as_markup() {
    let evil = "<!channel> @everyone <https://evil.example|Approve> <users/all> [Approve](https://evil.example) <@&123>";
    let mut a = alert(Severity::Error, "RolledBack", &format!("hook said: {evil}"));
    a.revision = Some(evil.into());
    a.checks[0].reason = evil.into();
    for kind in [
        ProviderKind::Slack,
        ProviderKind::Rocket,
        ProviderKind::Discord,
        ProviderKind::Msteams,
        ProviderKind::Gchat,
    ] {
        let v = render(kind, "general", "weir", &a);
        let mut texts = Vec::new();
        collect_strings(&v, &mut texts);
        for t in &texts {
            for raw in [
                "<!channel>",
                "@everyone",
                "<https://evil",
                "<users/all>",
                "](https",
                "<@&",
            ] {
                assert!(!t.contains(raw), "{kind:?}: {raw:?} in {t:?}");
            }
        }
        let all = texts.join("\n");
        assert!(
            all.contains("everyone"),
            "{kind:?}: the text itself is kept: {all}"
        );
    }
    let slack = render(ProviderKind::Slack, "general", "weir", &a);
    assert!(
        s(&slack, "/text")
            .contains("&lt;!channel&gt; @\u{200b}everyone &lt;https://evil.example|Approve&gt;"),
        "{}",
        s(&slack, "/text")
    );
    let discord = render(ProviderKind::Discord, "general", "weir", &a);
    assert_eq!(
        discord["allowed_mentions"],
        serde_json::json!({"parse": []})
    );
    // A message of pure entities is still cut to the limit, never mid-entity.
    let mut long = alert(Severity::Warn, "CheckFailed", &"<&>".repeat(3000));
    long.revision = None;
    let slack = render(ProviderKind::Slack, "general", "weir", &long);
    let text = s(&slack, "/attachments/0/text");
    assert_eq!(text.chars().count(), CHAT_TEXT_MAX, "{text}");
    assert!(text.ends_with(";…"), "{}", &text[text.len() - 20..]);
    // The generic payload is data for a program: kept as it came.
    let generic = render(ProviderKind::Generic, "general", "weir", &a);
    assert_eq!(generic["revision"], evil);
}

fn collect_strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| collect_strings(x, out)),
        _ => {}
    }
}
