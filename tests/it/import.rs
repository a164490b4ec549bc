//! `weir import flagger` on Flagger's own example manifests
//! (`tests/fixtures/flagger/`, each naming its source), through the real
//! binary: the output is YAML with the mapped sections, lists what it could
//! not map, passes `weir check` once its placeholders are filled, and one of
//! them runs a canary analysis with the builtin metrics.

use crate::proto_support;

use proto_support::support::{client, send};
use proto_support::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flagger");

fn weir(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run weir");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().expect("weir output")
}

/// `weir import flagger` on these fixtures: (stdout, stderr), exit 0 asserted.
fn import(files: &[&str]) -> (String, String) {
    let paths: Vec<String> = files.iter().map(|f| format!("{FIXTURES}/{f}")).collect();
    let mut args = vec!["import", "flagger"];
    args.extend(paths.iter().map(String::as_str));
    let out = weir(&args, None);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "import {files:?} failed: {stderr}\n{stdout}"
    );
    (stdout, stderr)
}

/// The trailing comment block that lists what was not mapped.
fn notes(yaml: &str) -> &str {
    let i = yaml
        .find("\n# Not mapped (")
        .expect("a list of unmapped fields");
    &yaml[i..]
}

/// What each fixture must give: `(files, values at JSON pointers, words the
/// unmapped list must contain)`.
type Case = (
    &'static [&'static str],
    Vec<(&'static str, Value)>,
    &'static [&'static str],
);

fn cases() -> Vec<Case> {
    vec![
        (
            &["istio-canary.yaml"],
            vec![
                ("/listeners/0/address", json!("0.0.0.0:80")),
                ("/backends/podinfo-blue/rollingUpdate/progressDeadline", json!("600s")),
                ("/backends/podinfo-green/endpoints/0", json!("<fill in podinfo-green>:9898")),
                ("/routes/0/hosts", json!(["app.example.com"])),
                ("/routes/0/pathPrefix", json!("/")),
                ("/routes/0/timeout", json!("30s")),
                ("/routes/0/primary", json!("podinfo-blue")),
                ("/routes/0/canary", json!("podinfo-green")),
                ("/canaries/0/route", json!("podinfo")),
                ("/canaries/0/analysis/interval", json!("15s")),
                ("/canaries/0/analysis/threshold", json!(10)),
                ("/canaries/0/analysis/maxWeight", json!(50)),
                ("/canaries/0/analysis/stepWeight", json!(5)),
                ("/canaries/0/analysis/metrics/0/name", json!("request-success-rate")),
                ("/canaries/0/analysis/metrics/0/thresholdRange/min", json!(99)),
                ("/canaries/0/analysis/metrics/1/thresholdRange/max", json!(500)),
                ("/canaries/0/analysis/webhooks/0/type", json!("pre-rollout")),
                ("/canaries/0/analysis/webhooks/1/metadata/type", json!("cmd")),
            ],
            &[
                "Deployment default/podinfo",
                "HorizontalPodAutoscaler default/podinfo",
                "spec.autoscalerRef: weir does not scale",
                "spec.service.gateways:",
                "spec.service.trafficPolicy:",
                "spec.service.rewrite:",
                "spec.provider:",
            ],
        ),
        (
            &["istio-abtest.yaml"],
            vec![
                ("/canaries/0/analysis/iterations", json!(10)),
                ("/canaries/0/analysis/match/0/headers/cookie/regex", json!("^(.*?;)?(type=insider)(;.*)?$")),
                ("/canaries/0/analysis/match/1/headers/user-agent/regex", json!(".*Firefox.*")),
                ("/canaries/0/analysis/webhooks/1/metadata/cmd", json!("hey -z 1m -q 10 -c 2 -H 'Cookie: type=insider' http://podinfo.test/")),
            ],
            &["spec.autoscalerRef", "spec.service.portDiscovery"],
        ),
        (
            &["gatewayapi-mirror.yaml"],
            vec![
                ("/listeners/0/address", json!("0.0.0.0:9898")),
                ("/routes/0/hosts", json!(["www.example.com"])),
                ("/canaries/0/analysis/iterations", json!(10)),
                ("/canaries/0/analysis/mirror", json!(true)),
                ("/canaries/0/analysis/metrics/1/name", json!("request-duration")),
            ],
            &["spec.service.gatewayRefs: weir's listeners take the place of the gateway"],
        ),
        (
            &["gatewayapi-session-affinity.yaml"],
            vec![
                ("/canaries/0/analysis/sessionAffinity/cookieName", json!("canary-flagger-cookie")),
                ("/canaries/0/analysis/sessionAffinity/primaryCookieName", json!("primary-flagger-cookie")),
                ("/canaries/0/analysis/stepWeight", json!(10)),
                ("/backends/podinfo-blue/rollingUpdate/progressDeadline", json!("60s")),
                ("/canaries/0/analysis/webhooks/0/metadata/logCmdOutput", json!("true")),
            ],
            &[
                "spec.service.portName",
                "metrics[0].templateRef: MetricTemplate \"error-rate\" is not among the imported ones",
                "metrics[1].templateRef: MetricTemplate \"latency\"",
            ],
        ),
        (
            &["linkerd-canary-steps.yaml"],
            vec![("/canaries/0/analysis/stepWeights", json!([5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55]))],
            &["spec.provider:"],
        ),
        (
            &["istio-canary-alerts.yaml", "alert-providers.yaml"],
            vec![
                ("/alertProviders/on-call/type", json!("slack")),
                ("/alertProviders/on-call/addressFile", json!("secrets/on-call-url-address")),
                ("/alertProviders/on-call/channel", json!("on-call-alerts")),
                ("/alertProviders/on-call/username", json!("flagger")),
                ("/canaries/0/analysis/alerts/0/name", json!("on-call Slack")),
                ("/canaries/0/analysis/alerts/0/severity", json!("error")),
                ("/canaries/0/analysis/alerts/0/providerRef/name", json!("on-call")),
            ],
            &[
                "Secret flagger/on-call-url",
                "spec.secretRef: weir reads the webhook URL from a file",
                "spec.proxy:",
                "alerts[1].providerRef: AlertProvider \"qa-discord\" is not among the imported ones",
                "alerts[2].providerRef: AlertProvider \"dev-msteams\"",
            ],
        ),
        (
            &["alert-providers.yaml"],
            vec![("/alertProviders/on-call/type", json!("slack"))],
            &["spec.address: the secretRef's address wins"],
        ),
    ]
}

/// The output with every `<fill in SLOT>:PORT` endpoint replaced by the
/// slot's address, the listeners and the admin API on free ports, the
/// webhook receivers replaced by `hooks`.
fn fill(yaml: &str, slots: &BTreeMap<String, SocketAddr>, hooks: Option<SocketAddr>) -> String {
    let mut out = String::new();
    let mut rest = yaml;
    while let Some(i) = rest.find("\"<fill in ") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 10..];
        let end = after.find('>').expect("placeholder end");
        let slot = &after[..end];
        let close = after.find("\"").expect("closing quote");
        let addr = slots
            .get(slot)
            .unwrap_or_else(|| panic!("no address for slot {slot}"));
        out.push_str(&format!("\"{addr}\""));
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    let mut out = out.replace("127.0.0.1:9901", "127.0.0.1:0");
    for port in ["80", "9898"] {
        out = out.replace(&format!("\"0.0.0.0:{port}\""), "\"127.0.0.1:0\"");
    }
    if let Some(h) = hooks {
        out = out.replace("http://flagger-loadtester.test/", &format!("http://{h}/"));
    }
    out
}

/// `weir check` on the filled output in a fresh directory (with the files
/// an `addressFile` names): its exit status and output.
fn check(yaml: &str, tag: &str) -> (bool, String) {
    let dir = TempDir::new(tag);
    std::fs::create_dir_all(dir.path("secrets")).unwrap();
    std::fs::write(
        dir.path("secrets/on-call-url-address"),
        "https://hooks.slack.example/services/T/B/X\n",
    )
    .unwrap();
    let cfg = dir.write("weir.yaml", yaml);
    let out = weir(&["check", "-c", cfg.to_str().unwrap()], None);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn slots() -> BTreeMap<String, SocketAddr> {
    ["podinfo-blue", "podinfo-green"]
        .iter()
        .enumerate()
        .map(|(i, s)| {
            (
                s.to_string(),
                SocketAddr::from(([127, 0, 0, 1], 9001 + i as u16)),
            )
        })
        .collect()
}

#[test]
fn every_fixture_maps_to_yaml_with_its_sections_and_lists_what_it_could_not_map() {
    for (files, values, unmapped) in cases() {
        let (yaml, stderr) = import(files);
        let doc: Value = serde_saphyr::from_str(&yaml)
            .unwrap_or_else(|e| panic!("{files:?}: not YAML: {e}\n{yaml}"));
        for (ptr, want) in &values {
            let got = doc.pointer(ptr);
            assert_eq!(got, Some(want), "{files:?}: {ptr}\n{yaml}");
        }
        let listed = notes(&yaml);
        for word in unmapped {
            assert!(
                listed.contains(word),
                "{files:?}: {word:?} not in the unmapped list:\n{listed}"
            );
        }
        let count = listed.lines().filter(|l| l.starts_with("# - ")).count();
        assert!(
            stderr.contains(&format!("{count} fields or manifests not mapped")),
            "{files:?}: stderr does not count the {count} notes: {stderr}"
        );
        if doc.get("canaries").is_some() {
            for section in ["listeners", "admin", "backends", "routes", "canaries"] {
                assert!(
                    doc.get(section).is_some(),
                    "{files:?}: no {section}:\n{yaml}"
                );
            }
            // Unfilled, the output is refused, naming the placeholder.
            let (ok, text) = check(&yaml, "import-unfilled");
            assert!(
                !ok && text.contains("<fill in podinfo-blue>"),
                "{files:?}: {text}"
            );
        }
    }
}

#[test]
fn filled_outputs_pass_weir_check() {
    for (files, _, _) in cases() {
        let (yaml, _) = import(files);
        let (ok, text) = check(&fill(&yaml, &slots(), None), "import-check");
        assert!(ok, "{files:?}: weir check failed:\n{text}\n---\n{yaml}");
    }
}

/// MetricTemplates become `metricTemplates` (DESIGN §13) and the canary's
/// metrics refer to them; the result passes `weir check`.
#[test]
fn metric_templates_and_template_refs_map_to_designs_shape_and_pass_weir_check() {
    let (yaml, _) = import(&["gatewayapi-metric-templates.yaml"]);
    let doc: Value = serde_saphyr::from_str(&yaml).expect("YAML");
    for (ptr, want) in [
        (
            "/metricTemplates/error-rate/provider/type",
            json!("prometheus"),
        ),
        (
            "/metricTemplates/error-rate/provider/address",
            json!("http://prometheus.istio-system:9090"),
        ),
        (
            "/metricTemplates/latency/provider/type",
            json!("prometheus"),
        ),
        ("/canaries/0/analysis/metrics/0/name", json!("error-rate")),
        (
            "/canaries/0/analysis/metrics/0/templateRef",
            json!({"name": "error-rate", "namespace": "flagger-system"}),
        ),
        (
            "/canaries/0/analysis/metrics/0/thresholdRange/max",
            json!(1),
        ),
        (
            "/canaries/0/analysis/metrics/1/templateRef/name",
            json!("latency"),
        ),
        ("/canaries/0/analysis/metrics/1/interval", json!("30s")),
        ("/admin/flaggerMetrics", json!(true)),
    ] {
        assert_eq!(doc.pointer(ptr), Some(&want), "{ptr}\n{yaml}");
    }
    let q = doc
        .pointer("/metricTemplates/error-rate/query")
        .and_then(Value::as_str)
        .unwrap();
    assert!(
        q.contains("destination_workload=~\"{{ target }}\"") && q.contains("[{{ interval }}]"),
        "{q}"
    );
    assert!(notes(&yaml).contains("spec.service.gatewayRefs"), "{yaml}");
    assert!(
        notes(&yaml).contains("MetricTemplate flagger-system/error-rate")
            && notes(&yaml).contains("selects reporter=\"source\""),
        "{yaml}"
    );
    let (ok, text) = check(&fill(&yaml, &slots(), None), "import-templates");
    assert!(ok, "weir check failed:\n{text}\n---\n{yaml}");
}

#[test]
fn stdin_bad_input_and_nothing_to_import_are_told_apart() {
    let text = std::fs::read_to_string(format!("{FIXTURES}/istio-abtest.yaml")).unwrap();
    let out = weir(&["import", "flagger", "-"], Some(&text));
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("type=insider"));

    let out = weir(
        &["import", "flagger", "-"],
        Some("kind: Canary\n  bad: [indent\n"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("-: not YAML"),
        "{err}"
    );

    let out = weir(
        &["import", "flagger", "-"],
        Some("apiVersion: v1\nkind: Service\nmetadata: {name: a}\n"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no Canary, MetricTemplate or AlertProvider"),
        "{err}"
    );

    let out = weir(&["import", "flagger", "/nonexistent/canary.yaml"], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("cannot read /nonexistent/canary.yaml"),
        "{err}"
    );
}

/// The canary fixture's output, filled with in-process echo backends, runs
/// under `weir serve`: the run starts, the builtin metrics pass on real
/// traffic, and the weight moves. The one edit besides the placeholders is
/// the analysis interval (15s → 1s), so the test takes seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_imported_canary_runs_on_weir_serve() {
    let (blue, green, hooks) = (
        echo_backend("v1", Duration::ZERO).await,
        echo_backend("v2", Duration::ZERO).await,
        echo_backend("hooks", Duration::ZERO).await,
    );
    let (yaml, _) = import(&["istio-canary.yaml"]);
    let slots = BTreeMap::from([
        ("podinfo-blue".to_string(), blue.addr),
        ("podinfo-green".to_string(), green.addr),
    ]);
    let filled = fill(&yaml, &slots, Some(hooks.addr)).replacen("interval: 15s", "interval: 1s", 1);
    let w = Weir::start(&filled);
    let c = client();
    let api = |path: &str| format!("http://{}{path}", w.admin_addr);
    let status = || async {
        let r = send(
            &c,
            http::Request::get(api("/api/v1/canaries/podinfo"))
                .body(Default::default())
                .unwrap(),
        )
        .await;
        r.json()
    };
    assert!(
        eventually(Duration::from_secs(20), || async {
            status().await["phase"] == "Initialized"
        })
        .await,
        "never initialised: {}",
        status().await
    );
    // Traffic for the builtin metrics, as Flagger's load tester would send it.
    let proxy = w.proxy_addr;
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let load = tokio::spawn(async move {
        let c = client();
        let mut seen = BTreeMap::<String, usize>::new();
        while !stopped.load(Ordering::Relaxed) {
            let req = http::Request::get(format!("http://{proxy}/version"))
                .header("host", "app.example.com")
                .body(Default::default())
                .unwrap();
            let r = send(&c, req).await;
            *seen.entry(r.text().trim().to_string()).or_default() += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        seen
    });
    let start = http::Request::post(api("/api/v1/canaries/podinfo/start"))
        .header("content-type", "application/json")
        .body(r#"{"revision": "v2"}"#.into())
        .unwrap();
    let r = send(&c, start).await;
    assert!(r.status < 300, "start: {} {}", r.status, r.text());
    // The builtin metrics judged real traffic and passed, and the weight
    // moved on (at 5 % and one-second steps, a first check may still lack
    // traffic: that is a failed check, never a pass).
    let passed = |s: &Value| {
        let m = s
            .pointer("/lastChecks/metrics")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        m.len() == 2
            && m.iter()
                .all(|c| c["passed"] == true && c["value"].is_number())
            && m[0]["name"] == "request-success-rate"
            && m[1]["name"] == "request-duration"
    };
    assert!(
        eventually(Duration::from_secs(30), || async {
            let s = status().await;
            s["phase"] == "Progressing"
                && s["canaryWeight"].as_u64().unwrap_or(0) >= 15
                && passed(&s)
        })
        .await,
        "the run did not advance on passing builtin checks: {}",
        status().await
    );
    let s = status().await;
    assert!(s["failedChecks"].as_u64().unwrap() < 10, "{s}");
    stop.store(true, Ordering::Relaxed);
    let seen = load.await.unwrap();
    assert_eq!(
        seen.keys()
            .filter(|k| !["v1", "v2"].contains(&k.as_str()))
            .count(),
        0,
        "{seen:?}"
    );
    assert!(
        seen.get("v2").copied().unwrap_or(0) > 0,
        "the canary never served: {seen:?}"
    );
}
