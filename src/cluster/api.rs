//! `GET /api/v1/cluster` (plugged into `control::api::routes`), and the text view of
//! `weir ctl cluster`.
//!
//! The [`Cluster`] is found in [`ApiState::ext`] (put there by `app.rs`); without
//! `cluster:` the endpoint answers `{"enabled": false}` so a client can tell
//! single-replica mode from an error.

use http::{Method, StatusCode};
use serde_json::Value;

use super::Cluster;
use crate::control::api::{json_response, ApiState, Auth, RouteDef};
use crate::wire::cluster::ClusterDoc;
use serde::Deserialize;
use std::fmt::Write as _;

use crate::dataplane::metrics::{label_value, ScrapeSection};

/// The cluster routes of the admin API.
pub static ROUTES: &[RouteDef] = &[RouteDef {
    method: Method::GET,
    path: "/api/v1/cluster",
    auth: Auth::Token,
    handler: |s, _| Box::pin(async move { Ok(get(&s)) }),
}];

fn get(s: &ApiState) -> crate::control::api::ApiResponse {
    match s.ext.get::<Cluster>() {
        None => json_response(StatusCode::OK, &ClusterDoc::Disabled),
        Some(c) => {
            let mut v = serde_json::to_value(c.status()).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                m.insert("enabled".into(), Value::Bool(true));
            }
            json_response(StatusCode::OK, &v)
        }
    }
}

/// The fleet's series, rendered at scrape time from the [`Cluster`]:
/// `weir_cluster_peers_refused_total` and, per live member,
/// `weir_cluster_replica_lag_seconds{member}`.
pub struct ClusterMetrics(pub Cluster);

impl ScrapeSection for ClusterMetrics {
    fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP weir_cluster_peers_refused_total Member records refused as peers (bound to no lease, or an apiUrl outside cluster.peerAllow).\n# TYPE weir_cluster_peers_refused_total counter\nweir_cluster_peers_refused_total {}",
            self.0.peers_refused_total()
        );
        let _ = writeln!(
            out,
            "# HELP weir_cluster_replica_lag_seconds How long a member has left a routing step of a canary this replica drives unacknowledged (0: up to date).\n# TYPE weir_cluster_replica_lag_seconds gauge"
        );
        for (member, (lag_ms, _)) in self.0.lag() {
            let _ = writeln!(
                out,
                "weir_cluster_replica_lag_seconds{{member=\"{}\"}} {}",
                label_value(&member),
                lag_ms as f64 / 1000.0
            );
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

// Text that came from etcd, safe for a terminal: control characters (an escape
// sequence in a forged member name) are shown escaped, never sent raw.
use crate::text::for_terminal as clean;

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

/// Renders a `GET /api/v1/cluster` answer for people (`now_ms`: the local clock, for
/// heartbeat ages); a document that is not a [`ClusterDoc`] renders as the error
/// naming the field, never as a partial view.
pub fn render(doc: &Value, now_ms: u64) -> String {
    match ClusterDoc::deserialize(doc) {
        Ok(doc) => render_doc(&doc, now_ms),
        Err(e) => format!("error: unexpected cluster document: {e}\n"),
    }
}

/// [`render`] of a parsed document.
pub fn render_doc(doc: &ClusterDoc, now_ms: u64) -> String {
    let ClusterDoc::Enabled(doc) = doc else {
        return "cluster: not configured (single-replica mode)\n".into();
    };
    let mut out = String::new();
    out.push_str(&format!(
        "replica {} ({})  {}\n",
        doc.replica,
        doc.api_url,
        if doc.ready {
            "lease valid"
        } else {
            "NO VALID LEASE: drives nothing"
        }
    ));
    out.push_str(&format!(
        "etcd {}  prefix {}  replicas {}  algorithm {}  heartbeat {}ms  lease TTL {}s  revision {}\n",
        doc.etcd.join(","),
        doc.prefix,
        doc.replicas,
        doc.algorithm,
        doc.heartbeat_ms,
        doc.lease_ttl_secs,
        doc.revision,
    ));
    if let Some(e) = &doc.etcd_error {
        out.push_str(&format!("etcd error: {e}\n"));
    }
    out.push_str("\nREPLICA                  SHARDS   HEARTBEAT     TABLE  LAG      API\n");
    for m in &doc.members {
        let shards: Vec<String> = m.shards.iter().map(u32::to_string).collect();
        let lag = if m.lag_ms == 0 {
            "-".to_string()
        } else {
            format!("{:.1}s", m.lag_ms as f64 / 1000.0)
        };
        out.push_str(&format!(
            "{:<24} {:<8} {:<13} {:<6} {:<8} {}{}{}\n",
            clean(&m.name),
            if shards.is_empty() {
                "standby".into()
            } else {
                shards.join(",")
            },
            age(now_ms, m.heartbeat_ms),
            m.table_version.map_or("-".into(), |v| v.to_string()),
            lag,
            clean(&m.api_url),
            if m.trusted {
                ""
            } else {
                "  (NOT TRUSTED AS A PEER)"
            },
            if m.waiting.is_empty() {
                String::new()
            } else {
                format!("  waited for by {}", m.waiting.join(","))
            },
        ));
    }
    if !doc.refused_peers.is_empty() {
        out.push_str(&format!(
            "\nREFUSED MEMBER RECORDS ({} refusals since start)\n",
            doc.peers_refused_total
        ));
        for r in &doc.refused_peers {
            out.push_str(&format!(
                "{:<24} {}: {}\n",
                clean(&r.name),
                clean(&r.api_url),
                clean(&r.reason)
            ));
        }
    }
    out.push_str("\nSHARD  HOLDER                   HEARTBEAT     CANARIES\n");
    for sh in &doc.shards {
        out.push_str(&format!(
            "{:<6} {:<24} {:<13} {}\n",
            sh.shard,
            sh.replica.as_deref().unwrap_or("(free)"),
            age(now_ms, sh.heartbeat_ms.unwrap_or(0)),
            if sh.canaries.is_empty() {
                "-".into()
            } else {
                sh.canaries.join(",")
            },
        ));
    }
    out.push_str("\nCANARY                   SHARD  OWNER\n");
    for c in &doc.canaries {
        out.push_str(&format!(
            "{:<24} {:<6} {}\n",
            c.canary,
            c.shard.map_or("-".into(), |n| n.to_string()),
            c.owner.as_deref().unwrap_or("(none: waiting)"),
        ));
    }
    out.push_str(&format!(
        "\nthis replica drives: {}\n",
        if doc.owned.is_empty() {
            "nothing".into()
        } else {
            doc.owned.join(", ")
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
            "owned": ["app"], "events": []
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
        let refused = serde_json::json!({
            "enabled": true, "replica": "a", "apiUrl": "http://a:9901", "ready": true,
            "etcd": ["http://e:2379"], "prefix": "/weir", "replicas": "auto",
            "algorithm": "hash", "heartbeatMs": 500, "leaseTtlSecs": 2, "revision": 42,
            "members": [{"name": "a", "apiUrl": "http://a:9901", "heartbeatMs": 9_000, "shards": [0],
                         "tableVersion": 7, "lagMs": 0, "waiting": [], "trusted": true},
                        {"name": "b", "apiUrl": "http://b:9901", "heartbeatMs": 9_000, "shards": [1],
                         "tableVersion": 6, "lagMs": 4_200, "waiting": ["app"], "trusted": true}],
            "shards": [], "canaries": [], "owned": ["app"], "events": [],
            "refusedPeers": [{"name": "evil\u{1b}]52;c;x\u{7}", "apiUrl": "http://203.0.113.9:1",
                              "reason": "its member record is bound to no lease"}],
            "peersRefusedTotal": 1
        });
        let text = render(&refused, 10_000);
        assert!(
            text.lines().any(|l| l.starts_with("b ")
                && l.contains(" 6 ")
                && l.contains("4.2s")
                && l.contains("waited for by app")),
            "{text}"
        );
        assert!(
            text.contains("REFUSED MEMBER RECORDS (1 refusals since start)"),
            "{text}"
        );
        assert!(
            !text.contains('\u{1b}') && text.contains("evil\\u001b]52"),
            "{text}"
        );
        assert_eq!(
            render(&serde_json::json!({"enabled": false}), 0),
            "cluster: not configured (single-replica mode)\n"
        );
        let down = serde_json::json!({"enabled": true, "replica": "a", "ready": false, "etcdError": "etcd unavailable: x",
            "apiUrl": "http://a:9901", "etcd": ["http://e:2379"], "prefix": "/weir", "replicas": "auto",
            "algorithm": "hash", "heartbeatMs": 500, "leaseTtlSecs": 2, "lease": null, "revision": 0,
            "members": [], "shards": [], "canaries": [], "owned": [], "events": []});
        let text = render(&down, 0);
        assert!(
            text.contains("NO VALID LEASE") && text.contains("etcd error: etcd unavailable: x")
        );
        assert!(text.contains("this replica drives: nothing"));
    }

    /// A document missing a field renders as the error naming it, not as a view
    /// with blanks (which would read as "no members, nothing owned").
    #[test]
    fn a_partial_document_renders_as_an_error() {
        let text = render(
            &serde_json::json!({"enabled": true, "replica": "a", "ready": true}),
            0,
        );
        assert!(
            text.starts_with("error: unexpected cluster document: missing field"),
            "{text}"
        );
        assert!(!text.contains("lease valid"), "{text}");
    }
}
