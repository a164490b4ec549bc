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
//!
//! Layout: this file holds the client and its watch stream; `types` the values calls take
//! and return (re-exported here); `wire` the gateway's JSON answers and proto3 base64.

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

mod types;
mod wire;

pub use types::*;
use wire::*;
pub use wire::{b64, prefix_end, unb64};

#[cfg(test)]
mod tests;

/// Largest unary answer read from etcd (a range over the whole prefix included).
pub const MAX_RESPONSE: usize = 16 << 20;

/// Largest single watch message buffered.
pub const MAX_WATCH_MESSAGE: usize = 16 << 20;

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
