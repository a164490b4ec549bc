//! The values etcd calls take and return: keys, leases, transactions, watch events,
//! errors.

use serde_json::{json, Value};

use super::tls::TlsProblem;
use super::wire::{b64, range_json};

/// Why an etcd call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtcdError {
    /// No answer: connection refused or reset, or the timeout passed.
    Unavailable(String),
    /// TLS with `endpoint` failed (a certificate refused on either side, or no TLS
    /// there).
    Tls {
        /// The endpoint (`https://host:port`).
        endpoint: String,
        /// What failed.
        problem: TlsProblem,
    },
    /// etcd refused the user's name and password (`/v3/auth/authenticate`).
    AuthFailed {
        /// The user name.
        user: String,
        /// etcd's reason (its `etcdserver: ` prefix removed).
        message: String,
    },
    /// etcd answered with an error (`code` is the gRPC status code).
    Status {
        /// HTTP status of the gateway's answer.
        http: u16,
        /// gRPC code (5 = not found, 14 = unavailable, ...).
        code: i64,
        /// etcd's message.
        message: String,
    },
    /// The answer was not what the gateway documents.
    Decode(String),
}

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EtcdError::Unavailable(e) => write!(f, "etcd unavailable: {e}"),
            EtcdError::Tls { endpoint, problem } => write!(f, "etcd at {endpoint}: {problem}"),
            EtcdError::AuthFailed { user, message } => {
                write!(f, "etcd refused user {user:?}: {message}")
            }
            EtcdError::Status {
                http,
                code,
                message,
            } => write!(f, "etcd error (HTTP {http}, code {code}): {message}"),
            EtcdError::Decode(e) => write!(f, "unexpected etcd answer: {e}"),
        }
    }
}

impl std::error::Error for EtcdError {}

/// One key as stored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyValue {
    /// The key (weir's keys are UTF-8; anything else is decoded lossily).
    pub key: String,
    /// The value bytes.
    pub value: Vec<u8>,
    /// Revision of the key's creation: unique per creation, the fencing token of an
    /// owner key (a deleted and re-created key gets a new one).
    pub create_revision: i64,
    /// Revision of the last change.
    pub mod_revision: i64,
    /// Changes since creation.
    pub version: i64,
    /// The lease the key is bound to (0 = none).
    pub lease: i64,
}

/// A granted lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Lease id.
    pub id: i64,
    /// Time to live in seconds, as etcd granted it (etcd may raise a short TTL to its
    /// minimum).
    pub ttl: i64,
}

/// What a comparison looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `create_revision` (0 = the key does not exist).
    Create(i64),
    /// `mod_revision`.
    Mod(i64),
    /// `version` (0 = the key does not exist).
    Version(i64),
    /// The lease id the key is bound to.
    Lease(i64),
    /// The value.
    Value(Vec<u8>),
}

/// How a comparison compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`
    Equal,
    /// `!=`
    NotEqual,
    /// `>`
    Greater,
    /// `<`
    Less,
}

/// One guard of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compare {
    /// The key compared.
    pub key: String,
    /// The comparison.
    pub op: CmpOp,
    /// What is compared, and with which value.
    pub target: Target,
}

impl Compare {
    /// `key`'s target `op` value.
    pub fn new(key: impl Into<String>, op: CmpOp, target: Target) -> Self {
        Compare {
            key: key.into(),
            op,
            target,
        }
    }

    pub(super) fn to_json(&self) -> Value {
        let op = match self.op {
            CmpOp::Equal => "EQUAL",
            CmpOp::NotEqual => "NOT_EQUAL",
            CmpOp::Greater => "GREATER",
            CmpOp::Less => "LESS",
        };
        let mut v = json!({"key": b64(self.key.as_bytes()), "result": op});
        let (target, field, value) = match &self.target {
            Target::Create(r) => ("CREATE", "create_revision", json!(r.to_string())),
            Target::Mod(r) => ("MOD", "mod_revision", json!(r.to_string())),
            Target::Version(r) => ("VERSION", "version", json!(r.to_string())),
            Target::Lease(l) => ("LEASE", "lease", json!(l.to_string())),
            Target::Value(b) => ("VALUE", "value", json!(b64(b))),
        };
        v["target"] = json!(target);
        v[field] = value;
        v
    }
}

/// One operation of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read a key, or every key under a prefix.
    Get {
        /// The key or prefix.
        key: String,
        /// Read the whole prefix.
        prefix: bool,
    },
    /// Write a key (bound to `lease` when not 0).
    Put {
        /// The key.
        key: String,
        /// The value.
        value: Vec<u8>,
        /// Lease id, 0 for none.
        lease: i64,
    },
    /// Delete a key, or every key under a prefix.
    Delete {
        /// The key or prefix.
        key: String,
        /// Delete the whole prefix.
        prefix: bool,
    },
}

impl Op {
    pub(super) fn to_json(&self) -> Value {
        match self {
            Op::Get { key, prefix } => json!({"request_range": range_json(key, *prefix)}),
            Op::Put { key, value, lease } => {
                let mut p = json!({"key": b64(key.as_bytes()), "value": b64(value)});
                if *lease != 0 {
                    p["lease"] = json!(lease.to_string());
                }
                json!({"request_put": p})
            }
            Op::Delete { key, prefix } => {
                json!({"request_delete_range": range_json(key, *prefix)})
            }
        }
    }
}

/// The result of one transaction operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    /// Keys read.
    Range(Vec<KeyValue>),
    /// A put done.
    Put,
    /// Keys deleted.
    Delete(i64),
}

/// A transaction's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnResponse {
    /// All comparisons held (the `success` branch ran).
    pub succeeded: bool,
    /// The store's revision after the transaction (the revision of its writes, if any).
    pub revision: i64,
    /// One result per operation of the branch that ran.
    pub results: Vec<OpResult>,
}

impl TxnResponse {
    /// Keys read by the `i`-th operation (empty if it was not a read).
    pub fn range(&self, i: usize) -> &[KeyValue] {
        match self.results.get(i) {
            Some(OpResult::Range(kvs)) => kvs,
            _ => &[],
        }
    }
}

/// One change seen by a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    /// The key was deleted (or its lease expired); else it was written.
    pub deleted: bool,
    /// The key after the change (for a delete: key and `mod_revision` only).
    pub kv: KeyValue,
}
