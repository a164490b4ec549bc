//! Round trips of the table documents and their parse of the examples in
//! docs/api.md (read from the file itself, so the docs cannot drift).

use super::probe::Readiness;
use super::table::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;

const API_MD: &str = include_str!("../../docs/api.md");

/// The first ```json block after the heading `heading` of docs/api.md.
fn doc_example(heading: &str) -> &'static str {
    let at = API_MD
        .find(&format!("\n### `{heading}`"))
        .unwrap_or_else(|| panic!("docs/api.md has no heading {heading}"));
    let rest = &API_MD[at..];
    let start = rest.find("```json\n").expect("a json example") + "```json\n".len();
    let len = rest[start..].find("```").expect("a closed example");
    &rest[start..start + len]
}

/// Serialise → parse gives the same value, and the serialised form is the
/// JSON the value came from (no field renamed, dropped or added).
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(doc: &T) {
    let text = serde_json::to_string(doc).unwrap();
    let back: T = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, doc, "{text}");
}

/// Parses `text` as `T`, round-trips it, and checks that every field of the
/// original is in the re-serialised form with the same value.
fn parses_as<T: Serialize + DeserializeOwned + PartialEq + Debug>(text: &str) -> T {
    let doc: T = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    round_trip(&doc);
    let original: serde_json::Value = serde_json::from_str(text).unwrap();
    let again = serde_json::to_value(&doc).unwrap();
    assert_contains(&again, &original, "");
    doc
}

/// Every key of `want` is in `got` with the same value (`got` may carry
/// more: fields a documented example leaves out).
fn assert_contains(got: &serde_json::Value, want: &serde_json::Value, path: &str) {
    match (got, want) {
        (serde_json::Value::Object(g), serde_json::Value::Object(w)) => {
            for (k, wv) in w {
                let gv = g.get(k).unwrap_or_else(|| panic!("{path}.{k} lost: {got}"));
                assert_contains(gv, wv, &format!("{path}.{k}"));
            }
        }
        (serde_json::Value::Array(g), serde_json::Value::Array(w)) if g.len() == w.len() => {
            for (i, (gv, wv)) in g.iter().zip(w).enumerate() {
                assert_contains(gv, wv, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(got, want, "at {path}"),
    }
}

#[test]
fn the_documented_table_parses_and_round_trips() {
    let t: Table = parses_as(doc_example("GET /api/v1/table"));
    assert_eq!(t.routes[0].name, "app");
    assert_eq!(t.routes[0].canary_weight, Some(10));
    let r: Route = parses_as(&serde_json::to_string(&t.routes[0]).unwrap());
    assert_eq!(r, t.routes[0]);
}

#[test]
fn the_documented_backend_parses_and_round_trips() {
    let b: BackendStatus = parses_as(doc_example("GET /api/v1/backends/{name}"));
    assert_eq!(b.name, "app-blue");
    assert_eq!(b.load_balancer, "round-robin");
    assert!(b.endpoints[0].ready && !b.endpoints[0].draining);
    assert_eq!(b.routes[0].role, "primary");
    assert_eq!(b.revision_path, None);
    assert!(b.health.is_some() && b.rolling_update.is_some());
}

#[test]
fn the_documented_stats_parse_and_round_trip() {
    let s: RouteStats = parses_as(doc_example("GET /api/v1/stats?route=R&window=60s"));
    assert_eq!(s.route, "app");
    assert_eq!(s.roles.primary.requests, 5400);
    assert_eq!(s.roles.mirror.success_rate, None);
    assert_eq!(s.snapshots.primary.requests, 5400);
    // Requests and attempts per role (retries are attempts, not requests).
    assert_eq!(
        (s.roles.primary.requests, s.roles.primary.attempts),
        (5400, 5412)
    );
    assert_eq!(s.roles.primary.request_success_rate, Some(99.96));
    assert_eq!(s.snapshots.primary.attempts(), 5412);
    assert_eq!(s.snapshots.primary.summary().attempts, 5412);
    // A replica without retries sends no `attempts`: it reads as requests.
    assert_eq!(s.snapshots.canary.attempts(), 600);
    let all = StatsDoc {
        window_secs: 60,
        routes: vec![s],
    };
    round_trip(&all);
}

#[test]
fn small_documents_round_trip() {
    let w: WriteResult = parses_as(r#"{"version": 8}"#);
    assert_eq!(w.version, 8);
    let r: Readiness = parses_as(r#"{"status": "ready", "tableVersion": 7}"#);
    assert_eq!(r.table_version, Some(7));
    let r: Readiness = parses_as(r#"{"status": "no-lease", "reason": "lease expired"}"#);
    assert_eq!(r.reason.as_deref(), Some("lease expired"));
    parses_as::<Readiness>(r#"{"status": "draining"}"#);
}

/// A required field missing (or renamed) is an error naming it, never a
/// default that looks ready, healthy or idle.
#[test]
fn missing_required_fields_are_errors() {
    let backend = doc_example("GET /api/v1/backends/{name}");
    for field in [
        "\"ready\": true, ",
        "\"draining\": false, ",
        "\"configured\": [\"127.0.0.1:9001\"],",
    ] {
        assert!(backend.contains(field), "{field}");
        let cut = backend.replacen(field, "", 1);
        let got = serde_json::from_str::<BackendStatus>(&cut);
        let err = got.expect_err(field).to_string();
        let name = field.split('"').nth(1).unwrap();
        assert!(err.contains(name), "{err}");
    }
    let stats = doc_example("GET /api/v1/stats?route=R&window=60s");
    let without_mirror = stats.replacen("\"mirror\":", "\"shadow\":", 1);
    let err = serde_json::from_str::<RouteStats>(&without_mirror)
        .expect_err("a stats document without `mirror`")
        .to_string();
    assert!(err.contains("mirror"), "{err}");
    assert!(serde_json::from_str::<Readiness>(r#"{"state": "ready"}"#).is_err());
    assert!(serde_json::from_str::<WriteResult>("{}").is_err());
}
