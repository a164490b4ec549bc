//! Round trips of the wire types, their parse of the documented shapes, and of what
//! today's server code serialises.

use super::cluster::*;
use serde_json::{json, Value};

/// The `GET /api/v1/cluster` example of docs/api.md.
const DOC_CLUSTER: &str = r#"{"enabled": true, "replica": "edge-1", "apiUrl": "http://10.0.0.7:9901",
 "prefix": "/weir", "etcd": ["http://10.0.0.5:2379"], "algorithm": "round-robin",
 "replicas": "3", "heartbeatMs": 10000, "leaseTtlSecs": 30, "ready": true,
 "lease": {"id": "2040829aa3c5b1a6", "ttlSecs": 30, "valid": true, "expiresInMs": 19870},
 "etcdError": null, "revision": 1742,
 "members": [{"name": "edge-1", "apiUrl": "http://10.0.0.7:9901", "heartbeatMs": 1746100060000, "shards": [0],
              "tableVersion": 57, "lagMs": 0, "waiting": [], "trusted": true}],
 "shards": [{"shard": 0, "replica": "edge-1", "heartbeatMs": 1746100060000, "canaries": ["app"]}],
 "canaries": [{"canary": "app", "shard": 0, "owner": "edge-1", "ownerRevision": 1207}],
 "owned": ["app"],
 "events": [{"seq": 4, "timeMs": 1746100000000, "replica": "edge-1", "kind": "CanaryAcquired",
             "canary": "app", "shard": 0, "revision": 1207, "message": "owner key taken through shard 0: driving"}],
 "refusedPeers": [], "peersRefusedTotal": 0}"#;

fn round_trip(doc: &ClusterDoc) {
    let text = serde_json::to_string(doc).unwrap();
    let back: ClusterDoc = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, doc, "{text}");
}

#[test]
fn the_documented_cluster_document_parses_and_round_trips() {
    let doc: ClusterDoc = serde_json::from_str(DOC_CLUSTER).unwrap();
    let ClusterDoc::Enabled(s) = &doc else {
        panic!("{doc:?}")
    };
    assert_eq!(
        (s.replica.as_str(), s.ready, s.revision),
        ("edge-1", true, 1742)
    );
    assert_eq!(s.lease.as_ref().map(|l| l.ttl_secs), Some(30));
    assert_eq!(s.members[0].shards, vec![0]);
    assert_eq!(s.canaries[0].owner_revision, Some(1207));
    assert_eq!(s.events[0].kind, "CanaryAcquired");
    round_trip(&doc);
    let original: Value = serde_json::from_str(DOC_CLUSTER).unwrap();
    assert_eq!(serde_json::to_value(&doc).unwrap(), original);

    let off: ClusterDoc = serde_json::from_str(r#"{"enabled": false}"#).unwrap();
    assert_eq!(off, ClusterDoc::Disabled);
    round_trip(&off);
}

/// A required field missing or renamed is an error naming it, never a default:
/// a replica without `ready` must not read as holding its lease.
#[test]
fn a_missing_or_renamed_cluster_field_is_an_error() {
    let full: Value = serde_json::from_str(DOC_CLUSTER).unwrap();
    for field in ["ready", "enabled", "members", "owned", "replica"] {
        let mut v = full.clone();
        let removed = v.as_object_mut().unwrap().remove(field).unwrap();
        let err = serde_json::from_value::<ClusterDoc>(v.clone()).unwrap_err();
        assert!(err.to_string().contains(field), "{field}: {err}");
        v.as_object_mut()
            .unwrap()
            .insert(format!("{field}Renamed"), removed);
        assert!(serde_json::from_value::<ClusterDoc>(v).is_err(), "{field}");
    }
    assert!(serde_json::from_value::<ClusterDoc>(json!({"enabled": "yes"})).is_err());
    assert!(serde_json::from_value::<ClusterDoc>(json!([])).is_err());
}

/// What the server serialises today (`cluster::membership::ClusterStatus` plus
/// `enabled`) parses into the wire type with nothing lost.
#[test]
fn the_servers_cluster_status_parses_into_the_wire_type() {
    use crate::cluster::membership as m;
    let status = m::ClusterStatus {
        replica: "a".into(),
        api_url: "http://a:9901".into(),
        prefix: "/weir".into(),
        etcd: vec!["http://e:2379".into()],
        algorithm: "hash".into(),
        replicas: "auto".into(),
        heartbeat_ms: 500,
        lease_ttl_secs: 2,
        ready: false,
        lease: Some(m::LeaseStatus {
            id: "1f".into(),
            ttl_secs: 2,
            valid: false,
            expires_in_ms: 0,
        }),
        etcd_error: Some("etcd unavailable: x".into()),
        revision: 9,
        members: vec![m::MemberStatus {
            name: "a".into(),
            api_url: "http://a:9901".into(),
            heartbeat_ms: 7,
            shards: vec![1],
            table_version: Some(12),
            lag_ms: 1500,
            waiting: vec!["app".into()],
            trusted: true,
        }],
        shards: vec![m::ShardStatus {
            shard: 1,
            replica: None,
            heartbeat_ms: None,
            canaries: vec!["app".into()],
        }],
        canaries: vec![m::CanaryOwnership {
            canary: "app".into(),
            shard: Some(1),
            owner: None,
            owner_revision: None,
        }],
        owned: vec![],
        events: vec![m::ClusterEvent {
            seq: 1,
            time_ms: 5,
            replica: "a".into(),
            kind: "LeaseExpired".into(),
            canary: None,
            shard: None,
            revision: 0,
            message: "lease expired".into(),
        }],
        refused_peers: vec![m::RefusedPeer {
            name: "evil".into(),
            api_url: "http://203.0.113.9:9901".into(),
            reason: "its member record is bound to no lease".into(),
        }],
        peers_refused_total: 1,
    };
    let mut served = serde_json::to_value(&status).unwrap();
    served
        .as_object_mut()
        .unwrap()
        .insert("enabled".into(), Value::Bool(true));
    let doc: ClusterDoc = serde_json::from_value(served.clone()).unwrap();
    assert_eq!(serde_json::to_value(&doc).unwrap(), served);
    round_trip(&doc);
}

#[test]
fn the_documented_error_body_parses_and_round_trips() {
    use super::error::*;
    let doc = r#"{"error": "invalid", "field": "canaryWeight", "reason": "must be between 0 and 100 (got 101)",
 "errors": [{"field": "canaryWeight", "reason": "must be between 0 and 100 (got 101)"}]}"#;
    let b: ErrorBody = serde_json::from_str(doc).unwrap();
    assert_eq!(b.field.as_deref(), Some("canaryWeight"));
    assert_eq!(b.errors.as_ref().map(Vec::len), Some(1));
    let back: ErrorBody = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
    assert_eq!(back, b);
    let plain = ErrorBody {
        error: "not-found".into(),
        field: None,
        reason: "no route \"x\"".into(),
        errors: None,
    };
    let v = serde_json::to_value(&plain).unwrap();
    assert_eq!(
        v,
        json!({"error": "not-found", "field": null, "reason": "no route \"x\""})
    );
    assert_eq!(serde_json::from_value::<ErrorBody>(v).unwrap(), plain);
    assert!(serde_json::from_value::<ErrorBody>(json!({"reason": "x"})).is_err());
}

/// What the server's error type writes today parses as the wire body.
#[tokio::test]
async fn the_servers_error_answer_parses_into_the_wire_type() {
    use crate::config::ConfigError;
    use crate::control::api::ApiError;
    use http_body_util::BodyExt;
    let errors = vec![ConfigError::new(
        "canaryWeight",
        "must be between 0 and 100",
    )];
    let resp = ApiError::invalid(&errors, str::to_string).into_response();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let b: super::error::ErrorBody = serde_json::from_slice(&body).unwrap();
    assert_eq!(b.field.as_deref(), Some("canaryWeight"));
    assert_eq!(b.reason, "must be between 0 and 100");
}
