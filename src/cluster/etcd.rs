//! A small etcd v3 client over etcd's JSON gRPC gateway (etcd ≥ 3.4, `/v3/*`).
//!
//! Why not the `etcd-client` crate: it pulls tonic and prost, too heavy for the
//! project's 2-core CI. The gateway maps every gRPC method to `POST /v3/<service>/<verb>`
//! with the protobuf message as JSON (proto3 mapping: `bytes` fields are base64,
//! 64-bit integers are strings, zero values are omitted, enums are their names):
//!
//! | call | path | request → response |
//! |---|---|---|
//! | [`EtcdClient::range`] | `/v3/kv/range` | `{key, range_end}` → `{header, kvs[], count}` |
//! | [`EtcdClient::put`] | `/v3/kv/put` | `{key, value, lease}` → `{header}` |
//! | [`EtcdClient::delete`] | `/v3/kv/deleterange` | `{key, range_end}` → `{header, deleted}` |
//! | [`EtcdClient::txn`] | `/v3/kv/txn` | `{compare[], success[], failure[]}` → `{header, succeeded, responses[]}` |
//! | [`EtcdClient::lease_grant`] | `/v3/lease/grant` | `{TTL}` → `{ID, TTL}` |
//! | [`EtcdClient::lease_keepalive`] | `/v3/lease/keepalive` | `{ID}` → `{result: {ID, TTL}}` (TTL absent = the lease is gone) |
//! | [`EtcdClient::lease_revoke`] | `/v3/lease/revoke` | `{ID}` → `{header}` |
//! | [`EtcdClient::watch`] | `/v3/watch` | `{create_request: {key, range_end, start_revision}}` → a stream of `{result: {header, created, events[]}}` |
//!
//! Errors come back as a non-2xx status with `{error, message, code}` (gRPC code).
//!
//! Every unary call is bounded by the client's timeout. Endpoints are tried in order:
//! a call that cannot *connect* moves to the next endpoint and retries there (the
//! request never reached etcd, so the retry is safe); any other failure is returned
//! and the next call starts at the next endpoint.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};

/// Largest unary answer read from etcd (a range over the whole prefix included).
pub const MAX_RESPONSE: usize = 16 << 20;

/// Largest single watch message buffered.
pub const MAX_WATCH_MESSAGE: usize = 16 << 20;

/// Why an etcd call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtcdError {
    /// No answer: connection refused or reset, or the timeout passed.
    Unavailable(String),
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

    fn to_json(&self) -> Value {
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
    fn to_json(&self) -> Value {
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

/// The etcd client: a list of endpoints and a pooled HTTP/1.1 client.
pub struct EtcdClient {
    /// Base URLs (`http://host:port`), without a trailing slash.
    endpoints: Vec<String>,
    /// The endpoint tried first (moves on after a failure).
    current: AtomicUsize,
    /// Keep-alive pool shared by every call.
    http: Client<HttpConnector, Full<Bytes>>,
    /// Bound on one unary call (connect, answer and body).
    timeout: Duration,
}

impl EtcdClient {
    /// A client of these endpoints (`http://host:port`; at least one), every call
    /// bounded by `timeout`.
    pub fn new(endpoints: &[String], timeout: Duration) -> Result<EtcdClient, String> {
        if endpoints.is_empty() {
            return Err("no etcd endpoint".into());
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        let http = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(4)
            .build(connector);
        Ok(EtcdClient {
            endpoints: endpoints
                .iter()
                .map(|e| e.trim_end_matches('/').to_string())
                .collect(),
            current: AtomicUsize::new(0),
            http,
            timeout,
        })
    }

    /// The endpoints, in order.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The timeout of one call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn request(
        &self,
        base: &str,
        path: &str,
        body: &Value,
    ) -> Result<Request<Full<Bytes>>, EtcdError> {
        Request::builder()
            .method(Method::POST)
            .uri(format!("{base}{path}"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| EtcdError::Unavailable(format!("{base}: {e}")))
    }

    /// One unary call: POST `path` with `body`, the answer parsed as `T`.
    async fn call<T: DeserializeOwned>(&self, path: &str, body: &Value) -> Result<T, EtcdError> {
        let n = self.endpoints.len();
        let start = self.current.load(Ordering::Relaxed) % n;
        let mut last = None;
        for i in 0..n {
            let idx = (start + i) % n;
            let base = &self.endpoints[idx];
            let req = self.request(base, path, body)?;
            let exchange = async {
                let resp = self.http.request(req).await.map_err(|e| {
                    let connect = e.is_connect();
                    (connect, format!("{base}: {e}"))
                })?;
                let status = resp.status();
                let bytes = Limited::new(resp.into_body(), MAX_RESPONSE)
                    .collect()
                    .await
                    .map_err(|e| (false, format!("{base}: reading the answer: {e}")))?
                    .to_bytes();
                Ok::<_, (bool, String)>((status, bytes))
            };
            match tokio::time::timeout(self.timeout, exchange).await {
                Err(_) => {
                    self.current.store((idx + 1) % n, Ordering::Relaxed);
                    return Err(EtcdError::Unavailable(format!(
                        "{base}: no answer within {:?}",
                        self.timeout
                    )));
                }
                Ok(Err((connect, e))) => {
                    self.current.store((idx + 1) % n, Ordering::Relaxed);
                    if connect {
                        last = Some(e);
                        continue;
                    }
                    return Err(EtcdError::Unavailable(e));
                }
                Ok(Ok((status, bytes))) => {
                    if idx != start {
                        self.current.store(idx, Ordering::Relaxed);
                    }
                    return decode_answer(status, &bytes);
                }
            }
        }
        Err(EtcdError::Unavailable(
            last.unwrap_or_else(|| "no endpoint".into()),
        ))
    }

    /// Reads `key`, or every key under it with `prefix`. Returns the keys and the
    /// store's revision at the read.
    pub async fn range(&self, key: &str, prefix: bool) -> Result<(Vec<KeyValue>, i64), EtcdError> {
        let r: RangeJson = self.call("/v3/kv/range", &range_json(key, prefix)).await?;
        Ok((decode_kvs(r.kvs)?, r.header.revision))
    }

    /// Reads one key.
    pub async fn get(&self, key: &str) -> Result<Option<KeyValue>, EtcdError> {
        Ok(self.range(key, false).await?.0.into_iter().next())
    }

    /// Writes `key` (bound to `lease` unless 0); returns the revision of the write.
    pub async fn put(&self, key: &str, value: &[u8], lease: i64) -> Result<i64, EtcdError> {
        let mut body = json!({"key": b64(key.as_bytes()), "value": b64(value)});
        if lease != 0 {
            body["lease"] = json!(lease.to_string());
        }
        let r: HeaderOnly = self.call("/v3/kv/put", &body).await?;
        Ok(r.header.revision)
    }

    /// Deletes `key` (or the prefix); returns how many keys went and the revision.
    pub async fn delete(&self, key: &str, prefix: bool) -> Result<(i64, i64), EtcdError> {
        let r: DeleteJson = self
            .call("/v3/kv/deleterange", &range_json(key, prefix))
            .await?;
        Ok((r.deleted, r.header.revision))
    }

    /// Runs a transaction: if every comparison holds, `success`, else `failure`.
    pub async fn txn(
        &self,
        compare: &[Compare],
        success: &[Op],
        failure: &[Op],
    ) -> Result<TxnResponse, EtcdError> {
        let body = json!({
            "compare": compare.iter().map(Compare::to_json).collect::<Vec<_>>(),
            "success": success.iter().map(Op::to_json).collect::<Vec<_>>(),
            "failure": failure.iter().map(Op::to_json).collect::<Vec<_>>(),
        });
        let r: TxnJson = self.call("/v3/kv/txn", &body).await?;
        let mut results = Vec::with_capacity(r.responses.len());
        for op in r.responses {
            results.push(if let Some(range) = op.response_range {
                OpResult::Range(decode_kvs(range.kvs)?)
            } else if let Some(d) = op.response_delete_range {
                OpResult::Delete(d.deleted)
            } else {
                OpResult::Put
            });
        }
        Ok(TxnResponse {
            succeeded: r.succeeded,
            revision: r.header.revision,
            results,
        })
    }

    /// Grants a lease of `ttl_secs` seconds.
    pub async fn lease_grant(&self, ttl_secs: i64) -> Result<Lease, EtcdError> {
        let r: GrantJson = self
            .call("/v3/lease/grant", &json!({"TTL": ttl_secs.to_string()}))
            .await?;
        if r.id == 0 {
            return Err(EtcdError::Decode(format!(
                "lease grant without an ID ({})",
                r.error
            )));
        }
        Ok(Lease {
            id: r.id,
            ttl: r.ttl,
        })
    }

    /// Renews a lease once. `Ok(Some(ttl))`: renewed for `ttl` seconds; `Ok(None)`:
    /// the lease no longer exists (it expired or was revoked, and its keys are gone).
    pub async fn lease_keepalive(&self, id: i64) -> Result<Option<i64>, EtcdError> {
        let r: KeepAliveJson = self
            .call("/v3/lease/keepalive", &json!({"ID": id.to_string()}))
            .await?;
        let result = r.result.ok_or_else(|| {
            EtcdError::Decode(
                r.error
                    .map_or_else(|| "keepalive without a result".into(), |e| e.to_string()),
            )
        })?;
        Ok((result.ttl > 0).then_some(result.ttl))
    }

    /// Revokes a lease: every key bound to it is deleted at once. Returns the revision
    /// of the deletion (0 when the lease no longer existed, which is not an error).
    pub async fn lease_revoke(&self, id: i64) -> Result<i64, EtcdError> {
        match self
            .call::<HeaderOnly>("/v3/lease/revoke", &json!({"ID": id.to_string()}))
            .await
        {
            Ok(h) => Ok(h.header.revision),
            Err(EtcdError::Status { code: 5, .. }) => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Watches every key under `prefix` from `start_revision` (0 = from now).
    pub async fn watch(&self, prefix: &str, start_revision: i64) -> Result<Watch, EtcdError> {
        let mut create = range_json(prefix, true);
        if start_revision > 0 {
            create["start_revision"] = json!(start_revision.to_string());
        }
        let body = json!({ "create_request": create });
        let n = self.endpoints.len();
        let idx = self.current.load(Ordering::Relaxed) % n;
        let base = &self.endpoints[idx];
        let req = self.request(base, "/v3/watch", &body)?;
        let resp = match tokio::time::timeout(self.timeout, self.http.request(req)).await {
            Err(_) => {
                self.current.store((idx + 1) % n, Ordering::Relaxed);
                return Err(EtcdError::Unavailable(format!("{base}: watch: no answer")));
            }
            Ok(Err(e)) => {
                self.current.store((idx + 1) % n, Ordering::Relaxed);
                return Err(EtcdError::Unavailable(format!("{base}: watch: {e}")));
            }
            Ok(Ok(r)) => r,
        };
        if resp.status() != StatusCode::OK {
            let status = resp.status();
            let bytes = Limited::new(resp.into_body(), MAX_RESPONSE)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(decode_answer::<Value>(status, &bytes)
                .err()
                .unwrap_or_else(|| EtcdError::Decode(format!("watch answered HTTP {status}"))));
        }
        Ok(Watch {
            body: resp.into_body(),
            buf: BytesMut::new(),
        })
    }
}

/// A running watch: a stream of change batches. Dropping it closes the stream.
pub struct Watch {
    body: Incoming,
    buf: BytesMut,
}

impl Watch {
    /// The next batch of changes (an empty batch is a progress or creation notice).
    /// `None` when the stream ended; `Some(Err)` when it failed or was cancelled.
    pub async fn next(&mut self) -> Option<Result<Vec<WatchEvent>, EtcdError>> {
        loop {
            match parse_one(&mut self.buf) {
                Ok(Some(msg)) => return Some(watch_message(msg)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
            if self.buf.len() > MAX_WATCH_MESSAGE {
                return Some(Err(EtcdError::Decode("watch message too large".into())));
            }
            match self.body.frame().await {
                None => return None,
                Some(Err(e)) => return Some(Err(EtcdError::Unavailable(format!("watch: {e}")))),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}

/// Takes one complete JSON value off the front of `buf`, if there is one.
fn parse_one(buf: &mut BytesMut) -> Result<Option<Value>, EtcdError> {
    let mut it = serde_json::Deserializer::from_slice(buf).into_iter::<Value>();
    match it.next() {
        None => {
            buf.clear(); // only whitespace
            Ok(None)
        }
        Some(Ok(v)) => {
            let used = it.byte_offset();
            buf.advance(used);
            Ok(Some(v))
        }
        Some(Err(e)) if e.is_eof() => Ok(None),
        Some(Err(e)) => Err(EtcdError::Decode(format!("watch stream: {e}"))),
    }
}

fn watch_message(msg: Value) -> Result<Vec<WatchEvent>, EtcdError> {
    let m: WatchJson = serde_json::from_value(msg).map_err(|e| EtcdError::Decode(e.to_string()))?;
    if let Some(err) = m.error {
        return Err(EtcdError::Status {
            http: 200,
            code: err.code,
            message: err.message,
        });
    }
    let Some(r) = m.result else {
        return Ok(Vec::new());
    };
    if r.canceled {
        return Err(EtcdError::Status {
            http: 200,
            code: 0,
            message: format!(
                "watch cancelled{}",
                if r.compact_revision > 0 {
                    format!(" (compacted at revision {})", r.compact_revision)
                } else {
                    format!(": {}", r.cancel_reason)
                }
            ),
        });
    }
    r.events
        .into_iter()
        .map(|e| {
            Ok(WatchEvent {
                deleted: e.kind == "DELETE",
                kv: decode_kv(e.kv)?,
            })
        })
        .collect()
}

fn decode_answer<T: DeserializeOwned>(status: StatusCode, bytes: &[u8]) -> Result<T, EtcdError> {
    if !status.is_success() {
        let err: ErrorJson = serde_json::from_slice(bytes).unwrap_or_else(|_| ErrorJson {
            code: 0,
            message: String::from_utf8_lossy(bytes).chars().take(300).collect(),
        });
        return Err(EtcdError::Status {
            http: status.as_u16(),
            code: err.code,
            message: err.message,
        });
    }
    serde_json::from_slice(bytes).map_err(|e| EtcdError::Decode(e.to_string()))
}

/// The `{key, range_end}` of a key or a prefix.
fn range_json(key: &str, prefix: bool) -> Value {
    let mut v = json!({"key": b64(key.as_bytes())});
    if prefix {
        v["range_end"] = json!(b64(&prefix_end(key.as_bytes())));
    }
    v
}

/// The first key after every key starting with `prefix` (etcd's `range_end` of a
/// prefix): the prefix with its last byte below 0xff incremented; `\0` (every key)
/// when there is none.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn decode_kvs(kvs: Vec<KvJson>) -> Result<Vec<KeyValue>, EtcdError> {
    kvs.into_iter().map(decode_kv).collect()
}

fn decode_kv(kv: KvJson) -> Result<KeyValue, EtcdError> {
    let key = unb64(&kv.key).map_err(EtcdError::Decode)?;
    Ok(KeyValue {
        key: String::from_utf8_lossy(&key).into_owned(),
        value: unb64(&kv.value).map_err(EtcdError::Decode)?,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        lease: kv.lease,
    })
}

// ------------------------------------------------------------- JSON shapes

/// proto3 JSON writes 64-bit integers as strings; accept numbers too.
fn de_i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum N {
        S(String),
        I(i64),
    }
    match N::deserialize(d)? {
        N::S(s) => s.parse().map_err(serde::de::Error::custom),
        N::I(i) => Ok(i),
    }
}

#[derive(Deserialize, Default)]
struct HeaderJson {
    #[serde(default, deserialize_with = "de_i64")]
    revision: i64,
}

#[derive(Deserialize)]
struct HeaderOnly {
    #[serde(default)]
    header: HeaderJson,
}

#[derive(Deserialize)]
struct KvJson {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default, deserialize_with = "de_i64")]
    create_revision: i64,
    #[serde(default, deserialize_with = "de_i64")]
    mod_revision: i64,
    #[serde(default, deserialize_with = "de_i64")]
    version: i64,
    #[serde(default, deserialize_with = "de_i64")]
    lease: i64,
}

#[derive(Deserialize)]
struct RangeJson {
    #[serde(default)]
    header: HeaderJson,
    #[serde(default)]
    kvs: Vec<KvJson>,
}

#[derive(Deserialize)]
struct DeleteJson {
    #[serde(default)]
    header: HeaderJson,
    #[serde(default, deserialize_with = "de_i64")]
    deleted: i64,
}

#[derive(Deserialize)]
struct TxnJson {
    #[serde(default)]
    header: HeaderJson,
    #[serde(default)]
    succeeded: bool,
    #[serde(default)]
    responses: Vec<TxnOpJson>,
}

#[derive(Deserialize)]
struct TxnOpJson {
    #[serde(default)]
    response_range: Option<RangeJson>,
    #[serde(default)]
    response_delete_range: Option<DeleteJson>,
}

#[derive(Deserialize)]
struct GrantJson {
    #[serde(default, rename = "ID", deserialize_with = "de_i64")]
    id: i64,
    #[serde(default, rename = "TTL", deserialize_with = "de_i64")]
    ttl: i64,
    #[serde(default)]
    error: String,
}

#[derive(Deserialize)]
struct KeepAliveJson {
    #[serde(default)]
    result: Option<KeepAliveResult>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct KeepAliveResult {
    #[serde(default, rename = "TTL", deserialize_with = "de_i64")]
    ttl: i64,
}

#[derive(Deserialize)]
struct ErrorJson {
    #[serde(default, deserialize_with = "de_i64")]
    code: i64,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct WatchJson {
    #[serde(default)]
    result: Option<WatchResult>,
    #[serde(default)]
    error: Option<ErrorJson>,
}

#[derive(Deserialize)]
struct WatchResult {
    #[serde(default)]
    canceled: bool,
    #[serde(default, deserialize_with = "de_i64")]
    compact_revision: i64,
    #[serde(default)]
    cancel_reason: String,
    #[serde(default)]
    events: Vec<EventJson>,
}

#[derive(Deserialize)]
struct EventJson {
    #[serde(default, rename = "type")]
    kind: String,
    kv: KvJson,
}

// ------------------------------------------------------------------ base64

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (what proto3 JSON writes for `bytes`).
pub fn b64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard or URL-safe base64, padded or not (proto3 JSON parsers accept
/// both).
pub fn unb64(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    for (i, c) in s.bytes().enumerate() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' => {
                if s[i..].bytes().all(|p| p == b'=') {
                    break;
                }
                return Err(format!("invalid base64 padding at {i}"));
            }
            _ => return Err(format!("invalid base64 character at {i}")),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_vectors() {
        let vectors: &[(&[u8], &str)] = &[
            (b"", ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"fooba", "Zm9vYmE="),
            (b"foobar", "Zm9vYmFy"),
            (&[0xff, 0xfe, 0x00], "//4A"),
        ];
        for (raw, enc) in vectors {
            assert_eq!(b64(raw), *enc);
            assert_eq!(unb64(enc).as_deref(), Ok(*raw));
        }
        assert_eq!(unb64("Zm8").as_deref(), Ok(&b"fo"[..]), "unpadded");
        assert_eq!(
            unb64("__4A").as_deref(),
            Ok(&[0xff, 0xfe, 0x00][..]),
            "url-safe"
        );
        assert!(unb64("Zm=9").is_err());
        assert!(unb64("Z!").is_err());
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(unb64(&b64(&all)), Ok(all));
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"/weir/"), b"/weir0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }

    #[test]
    fn compare_and_op_json() {
        let c = Compare::new("/k", CmpOp::Equal, Target::Create(0));
        assert_eq!(
            c.to_json(),
            json!({"key": "L2s=", "result": "EQUAL", "target": "CREATE", "create_revision": "0"})
        );
        let c = Compare::new("/k", CmpOp::NotEqual, Target::Lease(42));
        assert_eq!(c.to_json()["lease"], json!("42"));
        assert_eq!(c.to_json()["result"], json!("NOT_EQUAL"));
        let p = Op::Put {
            key: "/k".into(),
            value: b"v".to_vec(),
            lease: 7,
        };
        assert_eq!(
            p.to_json(),
            json!({"request_put": {"key": "L2s=", "value": "dg==", "lease": "7"}})
        );
        let g = Op::Get {
            key: "/a/".into(),
            prefix: true,
        };
        assert_eq!(
            g.to_json(),
            json!({"request_range": {"key": "L2Ev", "range_end": "L2Ew"}})
        );
    }

    #[test]
    fn answers_decode() {
        // Shapes recorded from etcd 3.4.23.
        let r: RangeJson = serde_json::from_str(
            r#"{"header":{"cluster_id":"1","member_id":"2","revision":"4","raft_term":"2"},
               "kvs":[{"key":"bGw=","create_revision":"4","mod_revision":"4","version":"1",
                       "value":"YmFy","lease":"2324035702370882316"}],"count":"1"}"#,
        )
        .expect("range");
        let kvs = decode_kvs(r.kvs).expect("kvs");
        assert_eq!(kvs[0].key, "ll");
        assert_eq!(kvs[0].value, b"bar");
        assert_eq!(kvs[0].lease, 2324035702370882316);
        assert_eq!(r.header.revision, 4);

        let t: TxnJson = serde_json::from_str(
            r#"{"header":{"revision":"9"},"responses":[{"response_range":{"header":{"revision":"9"},"kvs":[],"count":"0"}}]}"#,
        )
        .expect("txn");
        assert!(!t.succeeded, "an omitted `succeeded` is false");

        let k: KeepAliveJson =
            serde_json::from_str(r#"{"result":{"header":{"revision":"5"},"ID":"23"}}"#)
                .expect("ka");
        assert_eq!(
            k.result.map(|r| r.ttl),
            Some(0),
            "an expired lease has no TTL"
        );

        let e = decode_answer::<HeaderOnly>(
            StatusCode::BAD_REQUEST,
            br#"{"error":"illegal base64 data at input byte 0","message":"illegal base64 data at input byte 0","code":3}"#,
        )
        .err();
        assert_eq!(
            e,
            Some(EtcdError::Status {
                http: 400,
                code: 3,
                message: "illegal base64 data at input byte 0".into()
            })
        );
    }

    #[test]
    fn watch_stream_splits_messages() {
        let mut buf = BytesMut::from(
            &br#"{"result":{"header":{"revision":"9"},"created":true}}
{"result":{"header":{"revision":"10"},"events":[{"kv":{"key":"d3gx","create_revision":"10","mod_revision":"10","version":"1","value":"YmFy"}},{"type":"DELETE","kv":{"key":"d3gx","mod_revision":"11"}}]}}
{"result":{"hea"#[..],
        );
        let first = parse_one(&mut buf).expect("ok").expect("one");
        assert_eq!(watch_message(first), Ok(vec![]));
        let second = parse_one(&mut buf).expect("ok").expect("two");
        let events = watch_message(second).expect("events");
        assert_eq!(events.len(), 2);
        assert!(!events[0].deleted && events[1].deleted);
        assert_eq!(events[1].kv.key, "wx1");
        assert_eq!(events[1].kv.mod_revision, 11);
        assert_eq!(
            parse_one(&mut buf),
            Ok(None),
            "a partial message waits for more"
        );
        buf.extend_from_slice(br#"der":{},"canceled":true,"compact_revision":"3"}}"#);
        let third = parse_one(&mut buf).expect("ok").expect("three");
        assert!(watch_message(third).is_err());
    }
}
