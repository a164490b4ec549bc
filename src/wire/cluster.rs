//! `GET /api/v1/cluster` (docs/api.md): `{"enabled": false}` without `cluster:`,
//! else the replica's view of the fleet with `"enabled": true`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The whole answer of `GET /api/v1/cluster`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub enum ClusterDoc {
    /// No `cluster:` block: single-replica mode.
    Disabled,
    /// Fleet coordination through etcd, as this replica last read it.
    Enabled(Box<ClusterStatus>),
}

impl TryFrom<Value> for ClusterDoc {
    type Error = String;

    fn try_from(mut v: Value) -> Result<Self, String> {
        let enabled = match v.as_object_mut().map(|m| m.remove("enabled")) {
            None => return Err("expected a JSON object".into()),
            Some(None) => return Err("missing field `enabled`".into()),
            Some(Some(Value::Bool(b))) => b,
            Some(Some(other)) => return Err(format!("`enabled` is not a boolean: {other}")),
        };
        if !enabled {
            return Ok(ClusterDoc::Disabled);
        }
        serde_json::from_value(v)
            .map(|s| ClusterDoc::Enabled(Box::new(s)))
            .map_err(|e| e.to_string())
    }
}

impl From<ClusterDoc> for Value {
    fn from(doc: ClusterDoc) -> Value {
        match doc {
            ClusterDoc::Disabled => serde_json::json!({"enabled": false}),
            ClusterDoc::Enabled(status) => {
                let mut v = serde_json::to_value(*status).unwrap_or(Value::Null);
                if let Value::Object(m) = &mut v {
                    m.insert("enabled".into(), Value::Bool(true));
                }
                v
            }
        }
    }
}

/// One replica's view of the fleet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// This replica's name.
    pub replica: String,
    /// Its control-API URL as advertised.
    pub api_url: String,
    /// Key prefix in etcd.
    pub prefix: String,
    /// etcd endpoints.
    pub etcd: Vec<String>,
    /// `round-robin` or `hash`.
    pub algorithm: String,
    /// `auto` or the fixed shard count.
    pub replicas: String,
    /// Heartbeat in ms.
    pub heartbeat_ms: u64,
    /// Lease TTL asked of etcd, seconds.
    pub lease_ttl_secs: i64,
    /// Holds a valid lease (`/readyz`).
    pub ready: bool,
    /// The lease, once granted.
    pub lease: Option<LeaseStatus>,
    /// The last etcd problem, while it lasts.
    pub etcd_error: Option<String>,
    /// Revision of the last snapshot.
    pub revision: i64,
    /// Live members.
    pub members: Vec<MemberStatus>,
    /// Every shard of the assignment, held or not.
    pub shards: Vec<ShardStatus>,
    /// Every configured canary: its shard and owner.
    pub canaries: Vec<CanaryOwnership>,
    /// Canaries this replica may drive now.
    pub owned: Vec<String>,
    /// Recent ownership events of this replica, oldest first.
    pub events: Vec<ClusterEvent>,
    /// Member records not trusted as peers now (no lease, or an `apiUrl` outside
    /// `peerAllow`).
    #[serde(default)]
    pub refused_peers: Vec<RefusedPeer>,
    /// Refusals reported since this replica started.
    #[serde(default)]
    pub peers_refused_total: u64,
}

/// A member record refused as a peer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefusedPeer {
    /// The name in its key.
    pub name: String,
    /// The control-API URL it claims.
    pub api_url: String,
    /// Why it is refused.
    pub reason: String,
}

/// The lease part of the status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseStatus {
    /// Lease id (a string: it does not fit a JSON double).
    pub id: String,
    /// TTL granted, seconds.
    pub ttl_secs: i64,
    /// Renewed and not past its local deadline.
    pub valid: bool,
    /// Time left before the local deadline, ms (0 when past).
    pub expires_in_ms: u64,
}

/// A live member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// Replica name.
    pub name: String,
    /// Control-API URL.
    pub api_url: String,
    /// Last heartbeat written (ms since the Unix epoch, the member's clock).
    pub heartbeat_ms: u64,
    /// Shards it holds; empty: a standby.
    pub shards: Vec<u32>,
    /// The routing-table version it had applied at its last heartbeat.
    #[serde(default)]
    pub table_version: Option<u64>,
    /// How long it has left a routing step of a canary this replica drives
    /// unacknowledged, ms (0: up to date).
    #[serde(default)]
    pub lag_ms: u64,
    /// The canaries driven here that wait for it.
    #[serde(default)]
    pub waiting: Vec<String>,
    /// Trusted as a peer (this replica itself always is).
    #[serde(default = "yes")]
    pub trusted: bool,
}

fn yes() -> bool {
    true
}

/// A shard of the assignment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    /// Shard number.
    pub shard: u32,
    /// Holder, `None` for a free shard.
    pub replica: Option<String>,
    /// Holder's heartbeat (ms since the Unix epoch).
    pub heartbeat_ms: Option<u64>,
    /// Canaries assigned to it.
    pub canaries: Vec<String>,
}

/// One canary's ownership.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanaryOwnership {
    /// The canary.
    pub canary: String,
    /// Assigned shard (none while no shard exists).
    pub shard: Option<u32>,
    /// Replica holding its owner key; `None` while it waits for one.
    pub owner: Option<String>,
    /// Owner key's create revision.
    pub owner_revision: Option<i64>,
}

/// One ownership event of a replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterEvent {
    /// Order of the event on this replica (from 1).
    pub seq: u64,
    /// When (ms since the Unix epoch).
    pub time_ms: u64,
    /// The replica that logged it.
    pub replica: String,
    /// `LeaseGranted`, `CanaryAcquired`, ... (docs/cluster.md).
    pub kind: String,
    /// The canary concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<String>,
    /// The shard concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    /// The etcd revision of the change (0 when none).
    pub revision: i64,
    /// What happened, in words.
    pub message: String,
}
