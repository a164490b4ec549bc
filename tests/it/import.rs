//! `weir import flagger` through the real binary, on two sets of manifests:
//!
//! - the repository's own, `tests/fixtures/flagger/`: manifests written for
//!   these tests in Flagger's format (Canary, MetricTemplate, AlertProvider and
//!   the Kubernetes kinds beside them), each saying at its top what it covers.
//!   The output is YAML with the mapped sections, lists what it could not map,
//!   passes `weir check` once its placeholders are filled (unless a metric refers
//!   to a template that is not in the input: then check refuses it, naming it),
//!   and one of them runs a canary analysis with the builtin metrics under
//!   `weir serve`;
//! - Flagger's real manifests, read from `../shared/flagger_manifests/` next to
//!   the checkout when it is there (CI always has it; a plain clone does not, and
//!   those tests then print a SKIP line and pass): each imports with the
//!   canaries, templates, providers and notes it gives today, and its filled
//!   output passes `weir check`, or is refused for the metrics that cannot run.

use crate::proto_support;

use proto_support::support::{client, send};
use proto_support::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The repository's own manifests in Flagger's format.
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flagger");

/// Flagger's real manifests, kept outside the repository (see [`real_manifests`]).
const REAL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/flagger_manifests");

/// The load tester's URL in the fixtures' webhooks (Flagger's `flagger-loadtester`).
const LOADTESTER: &str = "http://flagger-loadtester.shop-qa/";

/// The directory of Flagger's real manifests, or `None` when this checkout has
/// none (a plain clone): the test then says so on stderr and passes. CI always
/// has the directory, so there its absence fails the test.
fn real_manifests(test: &str) -> Option<&'static Path> {
    let dir = Path::new(REAL);
    if dir.is_dir() {
        return Some(dir);
    }
    // "In CI" as `support::tool_available` reads it: CI set, and not to "" or "false".
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
        panic!("{test}: {REAL} not found, and CI always has Flagger's real manifests there");
    }
    eprintln!(
        "SKIP {test}: ../shared/flagger_manifests not found ({REAL}); \
         Flagger's real manifests are not imported in this checkout (CI fails here instead)"
    );
    None
}

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
    import_paths(&paths)
}

/// `weir import flagger` on these files: (stdout, stderr), exit 0 asserted.
fn import_paths(paths: &[String]) -> (String, String) {
    let mut args = vec!["import", "flagger"];
    args.extend(paths.iter().map(String::as_str));
    let out = weir(&args, None);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "import {paths:?} failed: {stderr}\n{stdout}"
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
                ("/listeners/0/address", json!("0.0.0.0:8000")),
                ("/backends/storefront-blue/rollingUpdate/progressDeadline", json!("420s")),
                ("/backends/storefront-green/endpoints/0", json!("<fill in storefront-green>:8080")),
                ("/routes/0/hosts", json!(["shop.example.net"])),
                ("/routes/0/pathPrefix", json!("/")),
                ("/routes/0/timeout", json!("20s")),
                ("/routes/0/primary", json!("storefront-blue")),
                ("/routes/0/canary", json!("storefront-green")),
                ("/canaries/0/route", json!("storefront")),
                ("/canaries/0/analysis/interval", json!("20s")),
                ("/canaries/0/analysis/threshold", json!(8)),
                ("/canaries/0/analysis/maxWeight", json!(60)),
                ("/canaries/0/analysis/stepWeight", json!(4)),
                ("/canaries/0/analysis/metrics/0/name", json!("request-success-rate")),
                ("/canaries/0/analysis/metrics/0/thresholdRange/min", json!(98)),
                ("/canaries/0/analysis/metrics/1/thresholdRange/max", json!(750)),
                ("/canaries/0/analysis/webhooks/0/type", json!("pre-rollout")),
                ("/canaries/0/analysis/webhooks/1/metadata/type", json!("cmd")),
            ],
            &[
                "Deployment default/storefront",
                "HorizontalPodAutoscaler default/storefront",
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
                ("/canaries/0/analysis/iterations", json!(12)),
                ("/canaries/0/analysis/match/0/headers/cookie/regex", json!("^(.*?;)?(cohort=early-access)(;.*)?$")),
                ("/canaries/0/analysis/match/1/headers/user-agent/regex", json!(".*(iPhone|Android).*")),
                ("/canaries/0/analysis/webhooks/1/metadata/cmd", json!("hey -z 2m -q 5 -c 2 -H 'Cookie: cohort=early-access' http://storefront.shop:8000/")),
            ],
            &["spec.autoscalerRef", "spec.service.portDiscovery"],
        ),
        (
            &["gatewayapi-mirror.yaml"],
            vec![
                ("/listeners/0/address", json!("0.0.0.0:8081")),
                ("/routes/0/hosts", json!(["shop.example.net"])),
                ("/canaries/0/analysis/iterations", json!(8)),
                ("/canaries/0/analysis/mirror", json!(true)),
                ("/canaries/0/analysis/metrics/1/name", json!("request-duration")),
            ],
            &["spec.service.gatewayRefs: weir's listeners take the place of the gateway"],
        ),
        (
            &["gatewayapi-session-affinity.yaml"],
            vec![
                ("/canaries/0/analysis/sessionAffinity/cookieName", json!("storefront-canary")),
                ("/canaries/0/analysis/sessionAffinity/primaryCookieName", json!("storefront-stable")),
                ("/canaries/0/analysis/sessionAffinity/maxAge", json!(7200)),
                ("/canaries/0/analysis/stepWeight", json!(8)),
                ("/backends/storefront-blue/rollingUpdate/progressDeadline", json!("90s")),
                ("/canaries/0/analysis/webhooks/0/metadata/logCmdOutput", json!("true")),
            ],
            &[
                "spec.service.portName",
                "metrics[0].templateRef: MetricTemplate \"error-ratio\" is not among the imported ones: metric \"error-ratio\" keeps its templateRef",
                "metrics[1].templateRef: MetricTemplate \"p95-latency\"",
            ],
        ),
        (
            &["linkerd-canary-steps.yaml"],
            vec![("/canaries/0/analysis/stepWeights", json!([2, 5, 10, 20, 35, 50, 70]))],
            &["spec.provider:"],
        ),
        (
            &["istio-canary-alerts.yaml", "alert-providers.yaml"],
            vec![
                ("/alertProviders/release-pager/type", json!("slack")),
                ("/alertProviders/release-pager/addressFile", json!("secrets/release-pager-webhook-address")),
                ("/alertProviders/release-pager/channel", json!("storefront-releases")),
                ("/alertProviders/release-pager/username", json!("rollout-bot")),
                ("/canaries/0/analysis/alerts/0/name", json!("release pager on Slack")),
                ("/canaries/0/analysis/alerts/0/severity", json!("error")),
                ("/canaries/0/analysis/alerts/0/providerRef/name", json!("release-pager")),
            ],
            &[
                "Secret alerting/release-pager-webhook",
                "spec.secretRef: weir reads the webhook URL from a file",
                "spec.proxy:",
                "alerts[1].providerRef: AlertProvider \"team-discord\" is not among the imported ones",
                "alerts[2].providerRef: AlertProvider \"ops-gchat\"",
            ],
        ),
        (
            &["alert-providers.yaml"],
            vec![("/alertProviders/release-pager/type", json!("slack"))],
            &["spec.address: the secretRef's address wins"],
        ),
    ]
}

/// The output with every `<fill in SLOT>:PORT` endpoint replaced by the
/// slot's address, the listeners and the admin API on free ports, the
/// fixtures' load tester replaced by `hooks`.
fn fill(yaml: &str, slots: &BTreeMap<String, SocketAddr>, hooks: Option<SocketAddr>) -> String {
    let out = replace_quoted(yaml, "<fill in ", |placeholder| {
        let slot = &placeholder[..placeholder.find('>').expect("placeholder end")];
        slots
            .get(slot)
            .unwrap_or_else(|| panic!("no address for slot {slot}"))
            .to_string()
    });
    let out = replace_quoted(&out, "127.0.0.1:9901", |_| "127.0.0.1:0".into());
    let out = replace_quoted(&out, "0.0.0.0:", |_| "127.0.0.1:0".into());
    match hooks {
        Some(h) => out.replace(LOADTESTER, &format!("http://{h}/")),
        None => out,
    }
}

/// `text` with each double-quoted string that starts with `start` replaced by
/// `with` of what follows `start` in it.
fn replace_quoted(text: &str, start: &str, with: impl Fn(&str) -> String) -> String {
    let open = format!("\"{start}");
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(&open) {
        out.push_str(&rest[..i]);
        let inner = &rest[i + 1..];
        let close = inner.find('"').expect("closing quote");
        out.push_str(&format!("\"{}\"", with(&inner[start.len()..close])));
        rest = &inner[close + 1..];
    }
    out.push_str(rest);
    out
}

/// `weir check` on the output in a fresh directory, with a placeholder URL in
/// each file an `addressFile` names: its exit status and output.
fn check(yaml: &str, tag: &str) -> (bool, String) {
    let dir = TempDir::new(tag);
    let doc: Value = serde_saphyr::from_str(yaml).expect("the output is YAML");
    let providers = doc.get("alertProviders").and_then(Value::as_object);
    for file in providers
        .into_iter()
        .flat_map(|p| p.values())
        .filter_map(|p| p.get("addressFile").and_then(Value::as_str))
    {
        let path = dir.path(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "https://hooks.slack.example/services/T/B/X\n").unwrap();
    }
    let cfg = dir.write("weir.yaml", yaml);
    let out = weir(&["check", "-c", cfg.to_str().unwrap()], None);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// An address for each of the two slots (`<target>-blue`, `<target>-green`)
/// of these targets.
fn slots(targets: &[&str]) -> BTreeMap<String, SocketAddr> {
    targets
        .iter()
        .flat_map(|t| [format!("{t}-blue"), format!("{t}-green")])
        .enumerate()
        .map(|(i, s)| (s, SocketAddr::from(([127, 0, 0, 1], 9001 + i as u16))))
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
                !ok && text.contains("<fill in storefront-blue>"),
                "{files:?}: {text}"
            );
        }
    }
}

/// What `weir check` must say when it refuses the filled output of these fixtures:
/// their metrics refer to templates that are not in the input. The other fixtures pass.
fn refused_once_filled(files: &[&str]) -> &'static [&'static str] {
    match files {
        ["gatewayapi-session-affinity.yaml"] => &[
            "canaries[0].analysis.metrics[0].templateRef.name: unknown metric template \"error-ratio\"",
            "canaries[0].analysis.metrics[1].templateRef.name: unknown metric template \"p95-latency\"",
        ],
        _ => &[],
    }
}

#[test]
fn filled_outputs_pass_weir_check_unless_a_metric_cannot_run() {
    for (files, _, _) in cases() {
        let (yaml, _) = import(files);
        let (ok, text) = check(&fill(&yaml, &slots(&["storefront"]), None), "import-check");
        let refused = refused_once_filled(files);
        if refused.is_empty() {
            assert!(ok, "{files:?}: weir check failed:\n{text}\n---\n{yaml}");
            continue;
        }
        assert!(!ok, "{files:?}: weir check passed:\n{text}\n---\n{yaml}");
        for word in refused {
            assert!(text.contains(word), "{files:?}: {word:?} not in: {text}");
        }
        assert!(
            text.contains(&format!("due to {} previous errors", refused.len())),
            "{files:?}: other errors than the metrics': {text}"
        );
    }
}

/// MetricTemplates become `metricTemplates` (the shape of
/// docs/metric-templates.md) and the canary's metrics refer to them; the
/// result passes `weir check`.
#[test]
fn metric_templates_and_template_refs_map_to_designs_shape_and_pass_weir_check() {
    let (yaml, _) = import(&["gatewayapi-metric-templates.yaml"]);
    let doc: Value = serde_saphyr::from_str(&yaml).expect("YAML");
    for (ptr, want) in [
        (
            "/metricTemplates/error-ratio/provider/type",
            json!("prometheus"),
        ),
        (
            "/metricTemplates/error-ratio/provider/address",
            json!("http://prometheus.monitoring:9090"),
        ),
        (
            "/metricTemplates/p95-latency/provider/type",
            json!("prometheus"),
        ),
        ("/canaries/0/analysis/metrics/0/name", json!("error-ratio")),
        (
            "/canaries/0/analysis/metrics/0/templateRef",
            json!({"name": "error-ratio", "namespace": "observability"}),
        ),
        (
            "/canaries/0/analysis/metrics/0/thresholdRange/max",
            json!(2),
        ),
        (
            "/canaries/0/analysis/metrics/1/templateRef/name",
            json!("p95-latency"),
        ),
        ("/canaries/0/analysis/metrics/1/interval", json!("40s")),
        ("/admin/flaggerMetrics", json!(true)),
    ] {
        assert_eq!(doc.pointer(ptr), Some(&want), "{ptr}\n{yaml}");
    }
    let q = doc
        .pointer("/metricTemplates/error-ratio/query")
        .and_then(Value::as_str)
        .unwrap();
    assert!(
        q.contains("destination_workload=~\"{{ target }}\"") && q.contains("[{{ interval }}]"),
        "{q}"
    );
    assert!(notes(&yaml).contains("spec.service.gatewayRefs"), "{yaml}");
    // The template that selects reporter="source" is the one named, and only it:
    // p95-latency selects reporter="destination".
    let reporter: Vec<&str> = notes(&yaml)
        .lines()
        .filter(|l| l.contains("selects reporter=\"source\""))
        .collect();
    assert!(
        reporter.len() == 1 && reporter[0].contains("MetricTemplate observability/error-ratio"),
        "{yaml}"
    );
    let (ok, text) = check(
        &fill(&yaml, &slots(&["storefront"]), None),
        "import-templates",
    );
    assert!(ok, "weir check failed:\n{text}\n---\n{yaml}");
}

#[test]
fn stdin_bad_input_and_nothing_to_import_are_told_apart() {
    let text = std::fs::read_to_string(format!("{FIXTURES}/istio-abtest.yaml")).unwrap();
    let out = weir(&["import", "flagger", "-"], Some(&text));
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("cohort=early-access"));

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
/// the analysis interval (20s → 1s), so the test takes seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_imported_canary_runs_on_weir_serve() {
    let (blue, green, hooks) = (
        echo_backend("v1", Duration::ZERO).await,
        echo_backend("v2", Duration::ZERO).await,
        echo_backend("hooks", Duration::ZERO).await,
    );
    let (yaml, _) = import(&["istio-canary.yaml"]);
    let slots = BTreeMap::from([
        ("storefront-blue".to_string(), blue.addr),
        ("storefront-green".to_string(), green.addr),
    ]);
    let filled = fill(&yaml, &slots, Some(hooks.addr)).replacen("interval: 20s", "interval: 1s", 1);
    let w = Weir::start(&filled);
    let c = client();
    let api = |path: &str| format!("http://{}{path}", w.admin_addr);
    let status = || async {
        let r = send(
            &c,
            http::Request::get(api("/api/v1/canaries/storefront"))
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
                .header("host", "shop.example.net")
                .body(Default::default())
                .unwrap();
            let r = send(&c, req).await;
            *seen.entry(r.text().trim().to_string()).or_default() += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        seen
    });
    let start = http::Request::post(api("/api/v1/canaries/storefront/start"))
        .header("content-type", "application/json")
        .body(r#"{"revision": "v2"}"#.into())
        .unwrap();
    let r = send(&c, start).await;
    assert!(r.status < 300, "start: {} {}", r.status, r.text());
    // The builtin metrics judged real traffic and passed, and the weight
    // moved on by at least three steps of 4 % (at such small one-second
    // steps, a first check may still lack traffic: that is a failed check,
    // never a pass, and fewer than the threshold of 8).
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
                && s["canaryWeight"].as_u64().unwrap_or(0) >= 12
                && passed(&s)
        })
        .await,
        "the run did not advance on passing builtin checks: {}",
        status().await
    );
    let s = status().await;
    assert!(s["failedChecks"].as_u64().unwrap() < 8, "{s}");
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

/// What `weir import flagger` gives today on one of Flagger's real manifests
/// (in [`REAL`]).
struct RealCase {
    file: &'static str,
    /// The names of the canaries, metric templates and alert providers
    /// imported (the stderr summary counts them).
    canaries: &'static [&'static str],
    templates: &'static [&'static str],
    providers: &'static [&'static str],
    /// Values at JSON pointers of the output; `Value::Null`: nothing there.
    values: Vec<(&'static str, Value)>,
    /// The notes, in their order: the manifest and the field each names.
    notes: &'static [&'static str],
    /// Words the notes must hold (the reasons that matter).
    words: &'static [&'static str],
    /// Words `weir check` must say on the filled output.
    check_says: &'static [&'static str],
    /// `weir check` refuses the filled output (for metrics that cannot run, which
    /// `check_says` names: that many errors and no other).
    refused: bool,
}

fn real_cases() -> Vec<RealCase> {
    vec![
        RealCase {
            file: "gatewayapi-test-ab.yaml",
            canaries: &["podinfo"],
            templates: &[],
            providers: &[],
            values: vec![
                ("/listeners/0/address", json!("0.0.0.0:9898")),
                ("/routes/0/hosts", json!(["www.example.com"])),
                ("/backends/podinfo-blue/rollingUpdate/progressDeadline", json!("60s")),
                ("/canaries/0/analysis/iterations", json!(10)),
                ("/canaries/0/analysis/match/0/headers/x-canary/exact", json!("insider")),
                ("/canaries/0/analysis/webhooks/0/metadata/logCmdOutput", json!("true")),
                // Both metrics refer to templates that are not in the file: kept, for
                // weir check to refuse until the user gives the templates.
                (
                    "/canaries/0/analysis/metrics/0",
                    json!({"name": "error-rate", "templateRef": {"name": "error-rate", "namespace": "flagger-system"},
                           "thresholdRange": {"max": 1}, "interval": "1m"}),
                ),
                (
                    "/canaries/0/analysis/metrics/1/templateRef",
                    json!({"name": "latency", "namespace": "flagger-system"}),
                ),
            ],
            notes: &[
                "Canary ab-test/podinfo spec.service.gatewayRefs",
                "Canary ab-test/podinfo spec.service.portName",
                "Canary ab-test/podinfo spec.analysis.metrics[0].templateRef",
                "Canary ab-test/podinfo spec.analysis.metrics[1].templateRef",
            ],
            words: &[
                "MetricTemplate \"error-rate\" is not among the imported ones: metric \"error-rate\" keeps its templateRef, and weir check refuses it",
                "MetricTemplate \"latency\" is not among the imported ones: metric \"latency\" keeps its templateRef",
            ],
            check_says: &[
                "canaries[0].analysis.metrics[0].templateRef.name: unknown metric template \"error-rate\": metricTemplates is empty",
                "canaries[0].analysis.metrics[1].templateRef.name: unknown metric template \"latency\": metricTemplates is empty",
            ],
            refused: true,
        },
        RealCase {
            file: "gatewayapi-test-bg.yaml",
            canaries: &["podinfo"],
            templates: &[],
            providers: &[],
            values: vec![
                ("/canaries/0/analysis/interval", json!("10s")),
                ("/canaries/0/analysis/threshold", json!(5)),
                ("/canaries/0/analysis/iterations", json!(5)),
                ("/canaries/0/analysis/webhooks/0/type", json!("pre-rollout")),
                ("/canaries/0/analysis/webhooks/1/name", json!("load-test")),
                (
                    "/canaries/0/analysis/metrics/0/templateRef/name",
                    json!("request-duration"),
                ),
            ],
            notes: &[
                "Canary bg-test/podinfo spec.service.gatewayRefs",
                "Canary bg-test/podinfo spec.service.portName",
                "Canary bg-test/podinfo spec.analysis.metrics[0].templateRef",
                "Canary bg-test/podinfo spec.analysis.metrics[0].threshold",
            ],
            words: &[
                "MetricTemplate \"request-duration\" is not among the imported ones",
                "metric \"custom-requst-duration\" keeps its templateRef",
            ],
            check_says: &[
                "canaries[0].analysis.metrics[0].templateRef.name: unknown metric template \"request-duration\"",
            ],
            refused: true,
        },
        RealCase {
            file: "istio-podinfo-alertprovider.yaml",
            canaries: &["podinfo"],
            templates: &[],
            providers: &["on-call"],
            values: vec![
                ("/listeners/0/address", json!("0.0.0.0:80")),
                ("/backends/podinfo-green/endpoints/0", json!("<fill in podinfo-green>:9898")),
                ("/routes/0/hosts", json!(["app.example.com"])),
                ("/routes/0/pathPrefix", json!("/")),
                ("/routes/0/timeout", json!("30s")),
                ("/alertProviders/on-call/type", json!("slack")),
                ("/alertProviders/on-call/addressFile", json!("secrets/on-call-url-address")),
                ("/alertProviders/on-call/channel", json!("on-call-alerts")),
                ("/canaries/0/analysis/stepWeight", json!(5)),
                ("/canaries/0/analysis/metrics/0/name", json!("request-success-rate")),
                ("/canaries/0/analysis/metrics/1/name", json!("request-duration")),
            ],
            notes: &[
                "AlertProvider flagger/on-call spec.secretRef",
                "AlertProvider flagger/on-call spec.address",
                "AlertProvider flagger/on-call spec.proxy",
                "Canary test/podinfo spec.service.gateways",
                "Canary test/podinfo spec.service.name",
                "Canary test/podinfo spec.service.portDiscovery",
                "Canary test/podinfo spec.service.portName",
                "Canary test/podinfo spec.service.rewrite",
                "Canary test/podinfo spec.service.trafficPolicy",
                "Canary test/podinfo spec.autoscalerRef",
                "Canary test/podinfo spec.provider",
            ],
            words: &[
                "write the `address` key of Secret \"on-call-url\" into secrets/on-call-url-address",
                "the secretRef's address wins",
            ],
            check_says: &[],
            refused: false,
        },
        RealCase {
            file: "kubernetes-blue-green.yaml",
            canaries: &["podinfo"],
            templates: &["not-found-percentage"],
            providers: &[],
            values: vec![
                ("/routes/0/hosts", Value::Null),
                ("/canaries/0/analysis/threshold", json!(2)),
                ("/canaries/0/analysis/iterations", json!(10)),
                ("/canaries/0/analysis/metrics/1/thresholdRange/max", json!(500)),
                (
                    "/metricTemplates/not-found-percentage/provider/address",
                    json!("http://flagger-prometheus.flagger:9090"),
                ),
                // Its query reads the application's own series, not Istio's.
                ("/admin/flaggerMetrics", Value::Null),
            ],
            notes: &[
                "MetricTemplate test/not-found-percentage spec.query",
                "MetricTemplate test/not-found-percentage spec.query",
                "Canary test/podinfo spec.service.portDiscovery",
                "Canary test/podinfo spec.autoscalerRef",
                "Canary test/podinfo spec.provider",
            ],
            words: &[
                "there is no mesh or ingress controller to drive",
                // podinfo's own series, selected by pod name.
                "reads http_request_duration_seconds_count, which weir does not export: weir check cannot know it",
                "selects by kubernetes_pod_name: weir's slots are not Kubernetes pods",
            ],
            // The template is imported although the canary does not use it.
            check_says: &["metricTemplates.not-found-percentage: no metric uses this template"],
            refused: false,
        },
        linkerd_case("linkerd-podinfo-templates.yaml"),
        linkerd_case("linkerd-tutorial.yaml"),
    ]
}

/// The Linkerd tutorial's two MetricTemplates (with `variables.direction`, on
/// Linkerd's own series) and its Canary that uses them; two of the real files hold it.
fn linkerd_case(file: &'static str) -> RealCase {
    RealCase {
        file,
        canaries: &["podinfo"],
        templates: &["latency", "success-rate"],
        providers: &[],
        values: vec![
            (
                "/canaries/0/analysis/metrics/0/templateRef",
                json!({"name": "success-rate", "namespace": "test"}),
            ),
            (
                "/canaries/0/analysis/metrics/0/templateVariables",
                json!({"direction": "inbound"}),
            ),
            (
                "/canaries/0/analysis/metrics/1/templateRef/name",
                json!("latency"),
            ),
            (
                "/metricTemplates/latency/provider/address",
                json!("http://prometheus.linkerd-viz:9090"),
            ),
            ("/admin/flaggerMetrics", Value::Null),
        ],
        notes: &[
            "MetricTemplate test/success-rate spec.query",
            "MetricTemplate test/latency spec.query",
            "Canary test/podinfo spec.service.gatewayRefs",
            "Canary test/podinfo spec.autoscalerRef",
        ],
        words: &[
            "weir's listeners take the place of the gateway",
            // Linkerd's series: weir check cannot know them, the notes say where they
            // must come from.
            "success-rate (FILE) spec.query: reads response_total (from Linkerd's proxy), which weir does not export: weir check cannot know it; unless it comes from your Prometheus",
            "latency (FILE) spec.query: reads response_latency_ms_bucket (from Linkerd's proxy), which weir does not export",
        ],
        check_says: &[],
        refused: false,
    }
}

/// The keys of the object at `ptr` of `doc`, sorted (none when absent).
fn keys(doc: &Value, ptr: &str) -> Vec<String> {
    let mut k: Vec<String> = doc
        .pointer(ptr)
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    k.sort();
    k
}

#[test]
fn flaggers_real_manifests_import_with_the_names_and_notes_they_give_today() {
    let test = "flaggers_real_manifests_import_with_the_names_and_notes_they_give_today";
    let Some(dir) = real_manifests(test) else {
        return;
    };
    let cases = real_cases();
    // Every manifest there has its expectations here.
    let mut present: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    present.sort();
    let mut known: Vec<&str> = cases.iter().map(|c| c.file).collect();
    known.sort();
    assert_eq!(present, known, "{REAL}: each manifest needs a RealCase");

    for c in &cases {
        let path = dir.join(c.file).to_string_lossy().into_owned();
        let (yaml, stderr) = import_paths(std::slice::from_ref(&path));
        let doc: Value = serde_saphyr::from_str(&yaml)
            .unwrap_or_else(|e| panic!("{}: not YAML: {e}\n{yaml}", c.file));
        let names: Vec<&str> = doc
            .get("canaries")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(names, c.canaries, "{}: canaries\n{yaml}", c.file);
        assert_eq!(
            keys(&doc, "/metricTemplates"),
            c.templates,
            "{}\n{yaml}",
            c.file
        );
        assert_eq!(
            keys(&doc, "/alertProviders"),
            c.providers,
            "{}\n{yaml}",
            c.file
        );
        for (ptr, want) in &c.values {
            let want = (!want.is_null()).then_some(want);
            assert_eq!(doc.pointer(ptr), want, "{}: {ptr}\n{yaml}", c.file);
        }
        let listed = notes(&yaml);
        let fields: Vec<String> = listed
            .lines()
            .filter_map(|l| l.strip_prefix("# - "))
            .map(|l| {
                let l = l.replace(&format!(" ({path})"), "");
                l.split_once(": ")
                    .map_or(l.clone(), |(head, _)| head.to_string())
            })
            .collect();
        assert_eq!(fields, c.notes, "{}: the notes\n{listed}", c.file);
        for word in c.words {
            let word = word.replace("FILE", &path);
            assert!(
                listed.contains(&word),
                "{}: {word:?} not in the notes:\n{listed}",
                c.file
            );
        }
        let summary = format!(
            "weir import: {} canaries, {} metric templates, {} alert providers; {} fields or manifests not mapped",
            c.canaries.len(),
            c.templates.len(),
            c.providers.len(),
            c.notes.len()
        );
        assert!(
            stderr.contains(&summary),
            "{}: {summary:?} not in: {stderr}",
            c.file
        );
    }
}

#[test]
fn flaggers_real_manifests_once_filled_pass_weir_check_unless_a_metric_cannot_run() {
    let test = "flaggers_real_manifests_once_filled_pass_weir_check_unless_a_metric_cannot_run";
    let Some(dir) = real_manifests(test) else {
        return;
    };
    for c in real_cases() {
        let (yaml, _) = import_paths(&[dir.join(c.file).to_string_lossy().into_owned()]);
        let (ok, text) = check(&yaml, "import-real-unfilled");
        assert!(
            !ok && text.contains("<fill in podinfo-blue>"),
            "{}: {text}",
            c.file
        );
        let (ok, text) = check(&fill(&yaml, &slots(&["podinfo"]), None), "import-real");
        if c.refused {
            assert!(!ok, "{}: weir check passed:\n{text}\n---\n{yaml}", c.file);
            assert!(
                text.contains(&format!("due to {} previous error", c.check_says.len())),
                "{}: other errors than the metrics': {text}",
                c.file
            );
        } else {
            assert!(ok, "{}: weir check failed:\n{text}\n---\n{yaml}", c.file);
        }
        for word in c.check_says {
            assert!(text.contains(word), "{}: {word:?} not in: {text}", c.file);
        }
    }
}

/// Flagger's A/B test refers to two MetricTemplates it does not ship. The import keeps
/// both metrics, so the release is not judged on nothing: `weir check` refuses the
/// config until the templates are written, then passes.
#[test]
fn flaggers_ab_test_fails_closed_until_its_templates_are_written() {
    let test = "flaggers_ab_test_fails_closed_until_its_templates_are_written";
    let Some(dir) = real_manifests(test) else {
        return;
    };
    let path = dir.join("gatewayapi-test-ab.yaml");
    let (yaml, _) = import_paths(&[path.to_string_lossy().into_owned()]);
    let filled = fill(&yaml, &slots(&["podinfo"]), None);
    let (ok, text) = check(&filled, "import-ab-missing");
    assert!(
        !ok && text.contains("unknown metric template \"error-rate\"")
            && text.contains("unknown metric template \"latency\""),
        "{text}"
    );
    let templates = "metricTemplates:\n  error-rate:\n    provider: { type: prometheus, address: \"http://127.0.0.1:9090\" }\n    query: |\n      100 * sum(rate(weir_requests_total{route=\"{{ target }}\",role=\"canary\",code=~\"5..\"}[{{ interval }}]))\n        / sum(rate(weir_requests_total{route=\"{{ target }}\",role=\"canary\"}[{{ interval }}]))\n  latency:\n    provider: { type: prometheus, address: \"http://127.0.0.1:9090\" }\n    query: |\n      histogram_quantile(0.99, sum(rate(weir_request_duration_seconds_bucket{route=\"{{ target }}\",role=\"canary\"}[{{ interval }}])) by (le))\n";
    let (ok, text) = check(&format!("{templates}{filled}"), "import-ab-written");
    assert!(ok, "{text}");
    // A typo in a weir series is refused too, with the name meant.
    let typo = templates.replacen("weir_requests_total", "weir_request_total", 1);
    let (ok, text) = check(&format!("{typo}{filled}"), "import-ab-typo");
    assert!(
        !ok && text.contains("metricTemplates.error-rate.query: weir exports no series \"weir_request_total\": did you mean weir_requests_total?"),
        "{text}"
    );
}
