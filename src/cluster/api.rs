//! `GET /api/v1/cluster` (plugged into `control::api::routes`), and the text view of
//! `weir ctl cluster`.
//!
//! The [`Cluster`] is found in [`ApiState::ext`] (put there by `app.rs`); without
//! `cluster:` the endpoint answers `{"enabled": false}` so a client can tell
//! single-replica mode from an error.

use http::{Method, StatusCode};
use serde_json::Value;

use super::Cluster;
use crate::control::api::{json_response, ApiState, RouteDef};

/// The cluster routes of the admin API.
pub static ROUTES: &[RouteDef] = &[RouteDef {
    method: Method::GET,
    path: "/api/v1/cluster",
    auth: true,
    handler: |s, _| Box::pin(async move { Ok(get(&s)) }),
}];

fn get(s: &ApiState) -> crate::control::api::ApiResponse {
    match s.ext.get::<Cluster>() {
        None => json_response(StatusCode::OK, &serde_json::json!({"enabled": false})),
        Some(c) => {
            let mut v = serde_json::to_value(c.status()).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                m.insert("enabled".into(), Value::Bool(true));
            }
            json_response(StatusCode::OK, &v)
        }
    }
}

/// `/readyz`'s extra condition: in a fleet, ready only while the lease is valid.
/// `None` when it holds (or there is no fleet); else the reason.
pub fn not_ready_reason(s: &ApiState) -> Option<String> {
    let c = s.ext.get::<Cluster>()?;
    if c.has_valid_lease() {
        None
    } else {
        Some(
            c.status()
                .etcd_error
                .map(|e| format!("no valid etcd lease: {e}"))
                .unwrap_or_else(|| "no valid etcd lease yet".into()),
        )
    }
}

fn age(now_ms: u64, then_ms: u64) -> String {
    if then_ms == 0 {
        return "-".into();
    }
    let ms = now_ms.saturating_sub(then_ms);
    if ms < 10_000 {
        format!("{:.1}s ago", ms as f64 / 1000.0)
    } else {
        format!("{}s ago", ms / 1000)
    }
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// Renders a `GET /api/v1/cluster` document for people (`now_ms`: the local clock,
/// for heartbeat ages).
pub fn render(doc: &Value, now_ms: u64) -> String {
    if doc.get("enabled").and_then(Value::as_bool) == Some(false) {
        return "cluster: not configured (single-replica mode)\n".into();
    }
    let mut out = String::new();
    let ready = doc.get("ready").and_then(Value::as_bool).unwrap_or(false);
    out.push_str(&format!(
        "replica {} ({})  {}\n",
        s(doc, "replica"),
        s(doc, "apiUrl"),
        if ready {
            "lease valid"
        } else {
            "NO VALID LEASE: drives nothing"
        }
    ));
    out.push_str(&format!(
        "etcd {}  prefix {}  replicas {}  algorithm {}  heartbeat {}ms  lease TTL {}s  revision {}\n",
        doc.get("etcd")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","))
            .unwrap_or_default(),
        s(doc, "prefix"),
        s(doc, "replicas"),
        s(doc, "algorithm"),
        doc.get("heartbeatMs").and_then(Value::as_u64).unwrap_or(0),
        doc.get("leaseTtlSecs").and_then(Value::as_i64).unwrap_or(0),
        doc.get("revision").and_then(Value::as_i64).unwrap_or(0),
    ));
    if let Some(e) = doc.get("etcdError").and_then(Value::as_str) {
        out.push_str(&format!("etcd error: {e}\n"));
    }
    out.push_str("\nREPLICA                  SHARDS   HEARTBEAT     API\n");
    for m in doc
        .get("members")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let shards: Vec<String> = m
            .get("shards")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_u64)
            .map(|n| n.to_string())
            .collect();
        out.push_str(&format!(
            "{:<24} {:<8} {:<13} {}\n",
            s(m, "name"),
            if shards.is_empty() {
                "standby".into()
            } else {
                shards.join(",")
            },
            age(
                now_ms,
                m.get("heartbeatMs").and_then(Value::as_u64).unwrap_or(0)
            ),
            s(m, "apiUrl"),
        ));
    }
    out.push_str("\nSHARD  HOLDER                   HEARTBEAT     CANARIES\n");
    for sh in doc
        .get("shards")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let canaries: Vec<&str> = sh
            .get("canaries")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        out.push_str(&format!(
            "{:<6} {:<24} {:<13} {}\n",
            sh.get("shard").and_then(Value::as_u64).unwrap_or(0),
            sh.get("replica")
                .and_then(Value::as_str)
                .unwrap_or("(free)"),
            age(
                now_ms,
                sh.get("heartbeatMs").and_then(Value::as_u64).unwrap_or(0)
            ),
            if canaries.is_empty() {
                "-".into()
            } else {
                canaries.join(",")
            },
        ));
    }
    out.push_str("\nCANARY                   SHARD  OWNER\n");
    for c in doc
        .get("canaries")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.push_str(&format!(
            "{:<24} {:<6} {}\n",
            s(c, "canary"),
            c.get("shard")
                .and_then(Value::as_u64)
                .map_or("-".into(), |n| n.to_string()),
            c.get("owner")
                .and_then(Value::as_str)
                .unwrap_or("(none: waiting)"),
        ));
    }
    let owned: Vec<&str> = doc
        .get("owned")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    out.push_str(&format!(
        "\nthis replica drives: {}\n",
        if owned.is_empty() {
            "nothing".into()
        } else {
            owned.join(", ")
        }
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_status_document() {
        let doc = serde_json::json!({
            "enabled": true, "replica": "a", "apiUrl": "http://a:9901", "ready": true,
            "etcd": ["http://e:2379"], "prefix": "/weir", "replicas": "3",
            "algorithm": "hash", "heartbeatMs": 500, "leaseTtlSecs": 2, "revision": 42,
            "members": [{"name": "a", "apiUrl": "http://a:9901", "heartbeatMs": 9_000, "shards": [0, 2]},
                        {"name": "b", "apiUrl": "http://b:9901", "heartbeatMs": 9_500, "shards": []}],
            "shards": [{"shard": 0, "replica": "a", "heartbeatMs": 9_000, "canaries": ["app"]},
                       {"shard": 1, "replica": null, "heartbeatMs": null, "canaries": []}],
            "canaries": [{"canary": "app", "shard": 0, "owner": "a"},
                         {"canary": "web", "shard": null, "owner": null}],
            "owned": ["app"]
        });
        let text = render(&doc, 10_000);
        assert!(
            text.contains("replica a (http://a:9901)  lease valid"),
            "{text}"
        );
        assert!(text.contains("revision 42"));
        assert!(
            text.lines()
                .any(|l| l.starts_with("a ") && l.contains("0,2") && l.contains("1.0s ago")),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("b ") && l.contains("standby")),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("1 ") && l.contains("(free)")),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("web ") && l.contains("(none: waiting)")),
            "{text}"
        );
        assert!(text.contains("this replica drives: app"));
        assert_eq!(
            render(&serde_json::json!({"enabled": false}), 0),
            "cluster: not configured (single-replica mode)\n"
        );
        let down = serde_json::json!({"enabled": true, "replica": "a", "ready": false, "etcdError": "etcd unavailable: x"});
        let text = render(&down, 0);
        assert!(
            text.contains("NO VALID LEASE") && text.contains("etcd error: etcd unavailable: x")
        );
        assert!(text.contains("this replica drives: nothing"));
    }
}
