//! Notifications end to end (DESIGN §12): a whole weir runs releases and posts to a local
//! https receiver whose certificate comes from a test CA (rcgen), trusted through each
//! provider's `caFile`. Also webhooks and a Prometheus metric provider over https.
//!
//! Waits are bounded polls on the engine's status or on what the receiver recorded; no
//! assertion depends on how long something took.

use crate::proto_support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use proto_support::support::{echo, echo_with, eventually};
use proto_support::{Ca, TempDir};
use serde_json::Value;
use weir::app::RunningApp;
use weir::demo::traffic::TrafficSpec;
use weir::rollout::{CanaryStatus, ManualCommand, Phase};

/// Longest wait for any one condition.
const WAIT: Duration = Duration::from_secs(40);

const TYPES: [&str; 6] = ["slack", "msteams", "discord", "rocket", "gchat", "generic"];

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Call {
    path: String,
    body: Value,
}

/// An https server on 127.0.0.1:0 answering by path: `/fail…` 500, `/hang…` never,
/// `/services/…` 403 quoting the URL it was called on (with terminal escapes),
/// `/api/v1/query` a Prometheus vector of 100, anything else 200. Records every request
/// (in arrival order) before answering.
struct Receiver {
    addr: SocketAddr,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Receiver {
    async fn spawn(ca: &Ca) -> Receiver {
        let leaf = ca.leaf(&["127.0.0.1"]);
        let key = weir::proxy::tls::parse_pair(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes())
            .expect("leaf pair");
        let mut cfg = rustls::ServerConfig::builder_with_provider(weir::proxy::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(key)));
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
        let rec = calls.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let rec = rec.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let rec = rec.clone();
                        async move {
                            let path = req.uri().path().to_string();
                            let host = req
                                .headers()
                                .get("host")
                                .and_then(|h| h.to_str().ok())
                                .unwrap_or("")
                                .to_string();
                            let bytes = req.into_body().collect().await.map(|b| b.to_bytes());
                            let body = bytes
                                .ok()
                                .and_then(|b| serde_json::from_slice(&b).ok())
                                .unwrap_or(Value::Null);
                            rec.lock().unwrap().push(Call {
                                path: path.clone(),
                                body,
                            });
                            if path.starts_with("/hang") {
                                std::future::pending::<()>().await;
                            }
                            let (status, text) = if path.starts_with("/fail") {
                                (500, "down".to_string())
                            } else if path.starts_with("/services/") {
                                (403, format!("invalid_token: https://{host}{path} ({path}) \u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2J"))
                            } else if path == "/api/v1/query" {
                                (200, r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000,"100"]}]}}"#.to_string())
                            } else {
                                (200, "ok".to_string())
                            };
                            Ok::<_, Infallible>(
                                http::Response::builder()
                                    .status(status)
                                    .body(Full::new(Bytes::from(text)))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        Receiver { addr, calls }
    }

    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    fn calls_to(&self, path: &str) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.path == path)
            .cloned()
            .collect()
    }
}

/// The event a notification tells of, read from its payload: the generic one (Flagger's
/// `namespace` field) says it,
/// the chat ones in their headline.
fn reason_of(body: &Value) -> String {
    if body.get("namespace").is_some() {
        return body["reason"].as_str().unwrap_or("?").to_string();
    }
    let text = body.to_string();
    for (phrase, reason) in [
        ("analysis started", "Started"),
        ("promotion finished", "Succeeded"),
        ("rolled back", "RolledBack"),
        ("check failed", "CheckFailed"),
        ("promoting", "Promoting"),
    ] {
        if text.contains(&format!("app: {phrase}")) {
            return reason.to_string();
        }
    }
    "?".to_string()
}

fn reasons(rx: &Receiver, path: &str) -> Vec<String> {
    rx.calls_to(path)
        .iter()
        .map(|c| reason_of(&c.body))
        .collect()
}

/// Two slots, route `app`, a canary `app` with a 300 ms interval stepping 20 → 60,
/// the success-rate check, `alerts`, and `top` (alertProviders).
fn config(blue: SocketAddr, green: SocketAddr, top: &str, threshold: u32, more: &str) -> String {
    format!(
        "{top}backends:\n  app-blue:\n    endpoints: [\"{blue}\"]\n  app-green:\n    endpoints: [\"{green}\"]\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\ncanaries:\n  - name: app\n    route: app\n    analysis:\n      interval: 300ms\n      threshold: {threshold}\n      stepWeight: 20\n      maxWeight: 60\n      metrics:\n        - name: request-success-rate\n          thresholdRange: {{ min: 99 }}\n          interval: 2s\n          minRequests: 5\n{more}"
    )
}

/// `alertProviders:` with one provider per type, each posting to `/<type>`.
fn every_type(rx: &Receiver) -> String {
    let mut s = "alertProviders:\n".to_string();
    for t in TYPES {
        s.push_str(&format!(
            "  p-{t}: {{ type: {t}, address: \"{}\", caFile: ca.pem, channel: \"#deploys\", timeout: 5s }}\n",
            rx.url(&format!("/{t}"))
        ));
    }
    s
}

fn alerts(list: &[(&str, &str, &str)]) -> String {
    let mut s = "      alerts:\n".to_string();
    for (name, severity, provider) in list {
        s.push_str(&format!(
            "        - {{ name: {name}, severity: {severity}, providerRef: {{ name: {provider} }} }}\n"
        ));
    }
    s
}

fn status(app: &RunningApp) -> CanaryStatus {
    app.engine.status("app").expect("canary app")
}

async fn wait_for(app: &RunningApp, what: &str, f: impl Fn(&CanaryStatus) -> bool) -> CanaryStatus {
    let ok = eventually(WAIT, || {
        let s = status(app);
        let hit = f(&s);
        async move { hit }
    })
    .await;
    assert!(ok, "timed out waiting for {what}: {:#?}", status(app));
    status(app)
}

fn ended(s: &CanaryStatus) -> bool {
    matches!(s.phase, Phase::Succeeded | Phase::Failed) && s.revision.is_some()
}

async fn run_release(app: &RunningApp) -> CanaryStatus {
    wait_for(app, "initialisation", |s| s.phase == Phase::Initialized).await;
    let out = app
        .engine
        .command(
            "app",
            ManualCommand::Start {
                revision: "v2".into(),
            },
        )
        .await
        .expect("command delivered");
    assert!(out.accepted, "{}", out.message);
    let traffic = TrafficSpec::new(app.proxy_addr()).start();
    let done = wait_for(app, "the end of the run", ended).await;
    traffic.stop().await;
    done
}

fn dir_with_ca(ca: &Ca, tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    dir.write("ca.pem", &ca.pem());
    dir
}

/// The first `Started` comes before everything else the run says, and `last` ends it.
fn in_order(got: &[String], last: &str) -> bool {
    got.first().map(String::as_str) == Some("Started")
        && got.last().map(String::as_str) == Some(last)
        && got.iter().filter(|r| *r == "Started").count() == 1
        && got.iter().filter(|r| *r == last).count() == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_run_is_told_to_every_provider_type_in_order() {
    let ca = Ca::new();
    let rx = Receiver::spawn(&ca).await;
    let dir = dir_with_ca(&ca, "alerts-ok");
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let list: Vec<(String, String)> = TYPES
        .iter()
        .map(|t| (format!("a-{t}"), format!("p-{t}")))
        .collect();
    let rules: Vec<(&str, &str, &str)> = list
        .iter()
        .map(|(a, p)| (a.as_str(), "info", p.as_str()))
        .collect();
    let yaml = config(v1.addr, v2.addr, &every_type(&rx), 6, &alerts(&rules));
    let app = proto_support::start_in(&yaml, &dir.0).await;
    let done = run_release(&app).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    for t in TYPES {
        let path = format!("/{t}");
        assert!(
            eventually(WAIT, || {
                let got = reasons(&rx, &path);
                async move { got.last().map(String::as_str) == Some("Succeeded") }
            })
            .await,
            "{t}: never told of the success: {:?}",
            reasons(&rx, &path)
        );
        let got = reasons(&rx, &path);
        assert!(in_order(&got, "Succeeded"), "{t}: {got:?}");
        assert!(got.contains(&"Promoting".to_string()), "{t}: {got:?}");
        assert!(
            !got.contains(&"?".to_string()),
            "{t}: unreadable message in {:?}",
            rx.calls_to(&path)
        );
    }
    // Each message names the canary, the revision and the weights.
    let slack = rx.calls_to("/slack");
    let text = slack.last().unwrap().body.to_string();
    for want in ["app", "v2", "canary 0% / primary 100%", "Succeeded"] {
        assert!(text.contains(want), "{want} not in {text}");
    }
    let generic = rx.calls_to("/generic");
    let last = &generic.last().unwrap().body;
    assert_eq!(
        (last["name"].as_str(), last["namespace"].as_str()),
        (Some("app"), Some("default"))
    );
    assert_eq!(last["phase"], "Succeeded");
    assert_eq!(last["revision"], "v2");
    assert_eq!(last["metadata"]["eventType"], "Normal");
    // The status shows the last delivery per provider; never the address.
    let s = wait_for(&app, "six delivered notifications", |s| {
        s.notifications.len() == 6
            && s.notifications
                .iter()
                .all(|n| n.ok && n.event == "Succeeded")
    })
    .await;
    assert!(
        s.notifications
            .iter()
            .all(|n| n.status == Some(200) && n.attempts == 1),
        "{:#?}",
        s.notifications
    );
    let api = serde_json::to_string(&s).unwrap();
    assert!(
        !api.contains(&rx.addr.to_string()),
        "the address leaked into the status: {api}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_run_is_told_in_order_and_error_alerts_hear_only_the_failure() {
    let ca = Ca::new();
    let rx = Receiver::spawn(&ca).await;
    let dir = dir_with_ca(&ca, "alerts-fail");
    let (v1, v2) = (echo("v1").await, echo_with("v2", 1.0, Duration::ZERO).await);
    let mut rules: Vec<(String, String, String)> = TYPES
        .iter()
        .map(|t| (format!("a-{t}"), "info".to_string(), format!("p-{t}")))
        .collect();
    let top = format!(
        "{}  oncall: {{ type: generic, address: \"{}\", caFile: ca.pem }}\n  warned: {{ type: generic, address: \"{}\", caFile: ca.pem }}\n",
        every_type(&rx),
        rx.url("/oncall"),
        rx.url("/warned")
    );
    rules.push(("pager".into(), "error".into(), "oncall".into()));
    rules.push(("watch".into(), "warn".into(), "warned".into()));
    let refs: Vec<(&str, &str, &str)> = rules
        .iter()
        .map(|(a, s, p)| (a.as_str(), s.as_str(), p.as_str()))
        .collect();
    let yaml = config(v1.addr, v2.addr, &top, 7, &alerts(&refs));
    let app = proto_support::start_in(&yaml, &dir.0).await;
    let done = run_release(&app).await;
    assert_eq!(done.phase, Phase::Failed, "{done:#?}");
    for t in TYPES {
        let path = format!("/{t}");
        assert!(
            eventually(WAIT, || {
                let got = reasons(&rx, &path);
                async move { got.last().map(String::as_str) == Some("RolledBack") }
            })
            .await,
            "{t}: never told of the rollback: {:?}",
            reasons(&rx, &path)
        );
        let got = reasons(&rx, &path);
        assert!(in_order(&got, "RolledBack"), "{t}: {got:?}");
        assert!(got.iter().any(|r| r == "CheckFailed"), "{t}: {got:?}");
    }
    // The failed check and its value are in the messages.
    let failed = rx
        .calls_to("/generic")
        .into_iter()
        .find(|c| c.body["reason"] == "CheckFailed" && c.body["checks"][0]["value"].is_number())
        .expect("a CheckFailed with the measured value");
    assert_eq!(failed.body["checks"][0]["name"], "request-success-rate");
    assert_eq!(failed.body["severity"], "warn");
    let discord = rx
        .calls_to("/discord")
        .into_iter()
        .map(|c| c.body.to_string())
        .collect::<Vec<_>>();
    assert!(
        discord
            .iter()
            .any(|t| t.contains("Failed check request-success-rate")),
        "{discord:?}"
    );
    // severity error: the rollback only; warn: failures, never the start.
    assert!(
        eventually(WAIT, || {
            let n = rx.calls_to("/oncall").len();
            async move { n >= 1 }
        })
        .await
    );
    assert_eq!(reasons(&rx, "/oncall"), vec!["RolledBack".to_string()]);
    let warned = reasons(&rx, "/warned");
    assert!(
        warned
            .iter()
            .all(|r| r == "CheckFailed" || r == "RolledBack"),
        "{warned:?}"
    );
    assert_eq!(
        warned.last().map(String::as_str),
        Some("RolledBack"),
        "{warned:?}"
    );
    let oncall = &rx.calls_to("/oncall")[0].body;
    assert_eq!(oncall["severity"], "error");
    assert_eq!(oncall["metadata"]["eventType"], "Warning");
    assert!(
        oncall["metadata"]["eventMessage"]
            .as_str()
            .unwrap()
            .contains("Rolling back"),
        "{oncall}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_and_failing_receivers_never_hold_a_release() {
    let ca = Ca::new();
    let rx = Receiver::spawn(&ca).await;
    let dir = dir_with_ca(&ca, "alerts-dead");
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    // `stuck` holds its first message for two minutes, far longer than the run.
    let top = format!(
        "alertProviders:\n  stuck: {{ type: generic, address: \"{}\", caFile: ca.pem, timeout: 120s, retries: 0 }}\n  slow: {{ type: slack, address: \"{}\", caFile: ca.pem, timeout: 300ms, retries: 1 }}\n  broken: {{ type: discord, address: \"{}\", caFile: ca.pem, retries: 2 }}\n  fine: {{ type: generic, address: \"{}\", caFile: ca.pem }}\n",
        rx.url("/hang-long"),
        rx.url("/hang-short"),
        rx.url("/fail"),
        rx.url("/fine")
    );
    let more = alerts(&[
        ("a1", "info", "stuck"),
        ("a2", "info", "slow"),
        ("a3", "info", "broken"),
        ("a4", "info", "fine"),
    ]);
    let yaml = config(v1.addr, v2.addr, &top, 6, &more);
    let app = proto_support::start_in(&yaml, &dir.0).await;
    let done = run_release(&app).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    // The run ended while the stuck receiver still held the first message: the engine
    // never waited on it.
    assert_eq!(rx.calls_to("/hang-long").len(), 1);
    assert!(
        !status(&app)
            .notifications
            .iter()
            .any(|n| n.provider == "stuck"),
        "the stuck delivery cannot have ended yet: {:#?}",
        status(&app).notifications
    );
    assert!(
        eventually(WAIT, || {
            let got = reasons(&rx, "/fine");
            async move { got.last().map(String::as_str) == Some("Succeeded") }
        })
        .await,
        "the healthy provider was held up by the others"
    );
    let s = wait_for(&app, "the failed deliveries", |s| {
        let by = |p: &str| s.notifications.iter().find(|n| n.provider == p).cloned();
        by("slow").is_some_and(|n| n.event == "Succeeded")
            && by("broken").is_some_and(|n| n.event == "Succeeded")
    })
    .await;
    let by = |p: &str| s.notifications.iter().find(|n| n.provider == p).unwrap();
    let slow = by("slow");
    assert!(
        !slow.ok && slow.reason.contains("timed out") && slow.attempts == 2,
        "{slow:#?}"
    );
    let broken = by("broken");
    assert_eq!(
        (broken.ok, broken.status, broken.attempts),
        (false, Some(500), 3),
        "{broken:#?}"
    );
    assert!(by("fine").ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_and_a_prometheus_metric_work_over_https() {
    let ca = Ca::new();
    let rx = Receiver::spawn(&ca).await;
    let dir = dir_with_ca(&ca, "alerts-hooks");
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let more = format!(
        "        - name: up\n          query: up\n          prometheusUrl: \"{}\"\n          caFile: ca.pem\n          thresholdRange: {{ min: 99 }}\n      webhooks:\n        - {{ name: gate, type: pre-rollout, url: \"{}\", caFile: ca.pem }}\n        - {{ name: load, type: rollout, url: \"{}\", caFile: ca.pem }}\n",
        format_args!("https://{}", rx.addr),
        rx.url("/pre"),
        rx.url("/load")
    );
    let yaml = config(v1.addr, v2.addr, "", 6, &more);
    let app = proto_support::start_in(&yaml, &dir.0).await;
    let done = run_release(&app).await;
    assert_eq!(done.phase, Phase::Succeeded, "{done:#?}");
    assert_eq!(rx.calls_to("/pre").len(), 1);
    assert!(!rx.calls_to("/load").is_empty());
    assert_eq!(rx.calls_to("/load")[0].body["name"], "app");
    assert!(!rx.calls_to("/api/v1/query").is_empty());
    assert!(
        done.events.iter().any(|e| e
            .checks
            .iter()
            .any(|c| c.name == "up" && c.value == Some(100.0))),
        "the https Prometheus value was never judged: {:#?}",
        done.events
    );
}

#[tokio::test]
async fn the_client_trusts_the_ca_file_it_is_given_and_nothing_else() {
    let ca = Ca::new();
    let rx = Receiver::spawn(&ca).await;
    let dir = dir_with_ca(&ca, "alerts-trust");
    let c = weir::rollout::http::HttpClient::new();
    let url = rx.url("/x");
    let err = c
        .get(&url, &[], Duration::from_secs(5))
        .await
        .expect_err("the test CA is not a Mozilla root");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    let trusted = c.trusting(Some(&dir.path("ca.pem"))).unwrap();
    let r = trusted
        .get(&url, &[], Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let err = c
        .get("ftp://127.0.0.1/x", &[], Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(err.contains("http:// or https://"), "{err}");
}

/// A receiver that quotes its secret URL back (Slack's path token, a hook's path), with
/// terminal escapes in the answer: the read-only API, `weir ctl canaries` and its
/// detail view show the address as `https://host/…`, never its path, and print no
/// control character.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quoted_secret_url_shows_nowhere_and_its_escapes_reach_no_terminal() {
    let ca = Ca::new();
    let rx = Receiver::spawn(&ca).await;
    let dir = dir_with_ca(&ca, "alerts-secret");
    dir.write("token", "write-token-0123456789");
    dir.write("ro-token", "read-token-0123456789");
    let (v1, v2) = (echo("v1").await, echo("v2").await);
    let top = format!(
        "admin:\n  address: 127.0.0.1:0\n  tokenFile: token\n  readOnlyTokenFile: ro-token\nalertProviders:\n  team: {{ type: slack, address: \"{}\", caFile: ca.pem, retries: 0 }}\n",
        rx.url("/services/T0001/B0002/SECRET")
    );
    let more = format!(
        "      webhooks:\n        - {{ name: load, type: rollout, url: \"{}\", caFile: ca.pem }}\n{}",
        rx.url("/services/hooks/SECRETHOOK"),
        alerts(&[("deploys", "info", "team")])
    );
    let yaml = config(v1.addr, v2.addr, &top, 50, &more);
    let app = proto_support::start_in(&yaml, &dir.0).await;
    wait_for(&app, "initialisation", |s| s.phase == Phase::Initialized).await;
    let out = app
        .engine
        .command(
            "app",
            ManualCommand::Start {
                revision: "v2".into(),
            },
        )
        .await
        .expect("command delivered");
    assert!(out.accepted, "{}", out.message);
    wait_for(&app, "a failed notification and a failed hook", |s| {
        s.notifications
            .iter()
            .any(|n| n.provider == "team" && !n.ok)
            && s.events
                .iter()
                .any(|e| e.message.contains("webhook load failed"))
    })
    .await;
    let secrets = ["SECRET", "T0001", "/services/"];
    // The API, as a read-only client reads it.
    let c = proto_support::support::client();
    for path in ["/api/v1/canaries", "/api/v1/canaries/app"] {
        let r = proto_support::support::send(
            &c,
            proto_support::support::get(
                app.admin_addr,
                path,
                &[("authorization", "Bearer read-token-0123456789")],
            ),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let text = r.text();
        for s in secrets {
            assert!(!text.contains(s), "{s} in {path}: {text}");
        }
        assert!(text.contains(&format!("https://{}/…", rx.addr)), "{text}");
    }
    // `weir ctl`, its table and its detail view.
    let ro = dir.path("ro-token");
    for args in [vec!["canaries"], vec!["canaries", "app"]] {
        let mut full = vec!["--token-file", ro.to_str().unwrap()];
        full.extend(args.iter().copied());
        let out = crate::support::weir_ctl::ctl(&app, &full).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        for s in secrets {
            assert!(
                !out.stdout.contains(s),
                "{s} in weir ctl {args:?}: {}",
                out.stdout
            );
        }
        assert!(
            !out.stdout.chars().any(|ch| ch.is_control() && ch != '\n'),
            "a control character reached the terminal: {:?}",
            out.stdout
        );
    }
    let detail = crate::support::weir_ctl::ctl(
        &app,
        &["--token-file", ro.to_str().unwrap(), "canaries", "app"],
    )
    .await;
    assert!(detail.stdout.contains("\\u001b]52;c;"), "{}", detail.stdout);
    app.shutdown().await;
}
