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
//! a call that cannot *connect* (a refused TLS handshake included) moves to the next
//! endpoint and retries there (the request never reached etcd, so the retry is safe);
//! any other failure is returned and the next call starts at the next endpoint.
//!
//! Security ([`EtcdOptions`]): `https://` endpoints are spoken over rustls through the
//! proxy's upstream connector (etcd's CA or the Mozilla roots, an optional client
//! certificate; `tls`); with credentials every call, the watch included, carries an
//! etcd auth token, renewed when etcd refuses it (`auth`).
//!
//! Layout: this file holds the client and its unary calls; `watch` the watch stream;
//! `types` the values calls take and return (re-exported here); `wire` the gateway's
//! JSON answers and proto3 base64; `tls` the TLS config and failures; `auth` the
//! credentials and the token.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};

use crate::proxy::client::Connector;

mod auth;
mod tls;
mod types;
mod watch;
mod wire;

pub use auth::{token_refused, Credentials};
use auth::{with_token, Tokens};
pub use tls::{client_config, TlsProblem};
pub use types::*;
pub use watch::Watch;
use wire::*;
pub use wire::{b64, prefix_end, unb64};

#[cfg(test)]
mod tests;

/// Largest unary answer read from etcd (a range over the whole prefix included).
pub const MAX_RESPONSE: usize = 16 << 20;

/// Largest single watch message buffered.
pub const MAX_WATCH_MESSAGE: usize = 16 << 20;

/// How the client reaches etcd beyond plain HTTP as nobody in particular.
#[derive(Clone, Debug, Default)]
pub struct EtcdOptions {
    /// The TLS config of `https://` endpoints ([`client_config`]): required with
    /// them, refused with `http://` ones.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The etcd user every call is made as; `None`: no authentication.
    pub credentials: Option<Credentials>,
}

/// The etcd client: a list of endpoints and a pooled HTTP/1.1 client.
pub struct EtcdClient {
    /// Base URLs (`http://host:port` or `https://host:port`), without a trailing slash.
    endpoints: Vec<String>,
    /// The endpoint tried first (moves on after a failure).
    current: AtomicUsize,
    /// Keep-alive pool shared by every call (TLS when the endpoints are `https://`).
    http: Client<Connector, Full<Bytes>>,
    /// Bound on one unary call (connect, answer and body).
    timeout: Duration,
    /// The user and its token; `None`: calls carry no token.
    auth: Option<Auth>,
}

struct Auth {
    credentials: Credentials,
    tokens: Tokens,
}

/// Why one exchange with one endpoint failed.
struct Failed {
    /// It failed before the request was sent (another endpoint may be tried).
    connect: bool,
    error: EtcdError,
}

/// `err` and its sources, joined (`client error (Connect): tcp connect error: ...`).
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = e.source();
    }
    out
}

/// A transport failure with `base`: the TLS problem when there is one, else "unavailable".
fn transport_error(base: &str, err: &(dyn std::error::Error + 'static)) -> EtcdError {
    match tls::tls_problem(err) {
        Some(problem) => EtcdError::Tls {
            endpoint: base.to_string(),
            problem,
        },
        None => EtcdError::Unavailable(format!("{base}: {}", chain(err))),
    }
}

impl EtcdClient {
    /// A client of these `http://host:port` endpoints (at least one), without TLS or a
    /// user, every call bounded by `timeout`.
    pub fn new(endpoints: &[String], timeout: Duration) -> Result<EtcdClient, String> {
        EtcdClient::with_options(endpoints, timeout, EtcdOptions::default())
    }

    /// A client of these endpoints (at least one; all `https://` with `opts.tls`, all
    /// `http://` without), every call bounded by `timeout`, made as `opts.credentials`.
    pub fn with_options(
        endpoints: &[String],
        timeout: Duration,
        opts: EtcdOptions,
    ) -> Result<EtcdClient, String> {
        if endpoints.is_empty() {
            return Err("no etcd endpoint".into());
        }
        let scheme = if opts.tls.is_some() {
            "https://"
        } else {
            "http://"
        };
        if let Some(e) = endpoints.iter().find(|e| !e.starts_with(scheme)) {
            return Err(format!(
                "etcd endpoint {e}: expected {scheme} ({})",
                if opts.tls.is_some() {
                    "TLS is configured"
                } else {
                    "no TLS is configured"
                }
            ));
        }
        let connector = match opts.tls {
            Some(cfg) => Connector::tls(timeout, cfg, None)?,
            None => Connector::plain(timeout),
        };
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
            auth: opts.credentials.map(|credentials| Auth {
                credentials,
                tokens: Tokens::default(),
            }),
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

    /// The etcd user calls are made as, if any.
    pub fn username(&self) -> Option<&str> {
        self.auth.as_ref().map(|a| a.credentials.username())
    }

    /// How many times etcd refused a token (expired, or lost in an etcd restart) and a
    /// new one was obtained.
    pub fn token_renewals(&self) -> u64 {
        self.auth.as_ref().map_or(0, |a| a.tokens.renewals())
    }

    fn request(
        &self,
        base: &str,
        path: &str,
        body: &Value,
        token: Option<&str>,
    ) -> Result<Request<Full<Bytes>>, EtcdError> {
        // The gateway passes `Accept` on as metadata by which etcd tells a request
        // that came through its gateway: only then does it ignore the Common Name of
        // the certificate the gateway dials etcd with, instead of taking it for the
        // caller's user name.
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(format!("{base}{path}"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json");
        if let Some(t) = token {
            req = req.header(http::header::AUTHORIZATION, t);
        }
        req.body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| EtcdError::Unavailable(format!("{base}: {e}")))
    }

    /// One exchange with `base`, bounded by the timeout: the status and the body.
    async fn exchange(
        &self,
        base: &str,
        path: &str,
        body: &Value,
        token: Option<&str>,
    ) -> Result<(StatusCode, Bytes), Failed> {
        let req = self
            .request(base, path, body, token)
            .map_err(|error| Failed {
                connect: false,
                error,
            })?;
        let exchange = async {
            let resp = self.http.request(req).await.map_err(|e| Failed {
                connect: e.is_connect(),
                error: transport_error(base, &e),
            })?;
            let status = resp.status();
            let bytes = Limited::new(resp.into_body(), MAX_RESPONSE)
                .collect()
                .await
                .map_err(|e| Failed {
                    connect: false,
                    error: match tls::tls_problem(&*e) {
                        Some(problem) => EtcdError::Tls {
                            endpoint: base.to_string(),
                            problem,
                        },
                        None => EtcdError::Unavailable(format!(
                            "{base}: reading the answer: {}",
                            chain(&*e)
                        )),
                    },
                })?
                .to_bytes();
            Ok((status, bytes))
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => Err(Failed {
                connect: false,
                error: EtcdError::Unavailable(format!(
                    "{base}: no answer within {:?}",
                    self.timeout
                )),
            }),
            Ok(r) => r,
        }
    }

    /// One unary call with `token`: POST `path` with `body`, the answer parsed as `T`.
    async fn call_once<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
        token: Option<&str>,
    ) -> Result<T, EtcdError> {
        let n = self.endpoints.len();
        let start = self.current.load(Ordering::Relaxed) % n;
        let mut last = None;
        for i in 0..n {
            let idx = (start + i) % n;
            match self.exchange(&self.endpoints[idx], path, body, token).await {
                Err(f) => {
                    self.current.store((idx + 1) % n, Ordering::Relaxed);
                    if f.connect {
                        last = Some(f.error);
                        continue;
                    }
                    return Err(f.error);
                }
                Ok((status, bytes)) => {
                    if idx != start {
                        self.current.store(idx, Ordering::Relaxed);
                    }
                    return decode_answer(status, &bytes);
                }
            }
        }
        Err(last.unwrap_or_else(|| EtcdError::Unavailable("no endpoint".into())))
    }

    /// One unary call, made with the user's token when there is a user.
    async fn call<T: DeserializeOwned>(&self, path: &str, body: &Value) -> Result<T, EtcdError> {
        match &self.auth {
            None => self.call_once(path, body, None).await,
            Some(a) => {
                with_token(
                    &a.tokens,
                    || self.authenticate(a),
                    |t| async move { self.call_once(path, body, t.as_deref()).await },
                )
                .await
            }
        }
    }

    /// `/v3/auth/authenticate`: a new token (`None` when etcd has authentication
    /// switched off: calls then go without one).
    async fn authenticate(&self, a: &Auth) -> Result<Option<String>, EtcdError> {
        let user = a.credentials.username();
        let body = json!({"name": user, "password": a.credentials.password()});
        match self
            .call_once::<AuthJson>("/v3/auth/authenticate", &body, None)
            .await
        {
            Ok(r) if !r.token.is_empty() => Ok(Some(r.token)),
            Ok(_) => Err(EtcdError::Decode(
                "authenticate answered without a token".into(),
            )),
            Err(EtcdError::Status {
                code: 9, message, ..
            }) if message.contains("authentication is not enabled") => {
                tracing::debug!(target: "weir::cluster", user, "etcd has authentication switched off: calls go without a token");
                Ok(None)
            }
            Err(EtcdError::Status { code, message, .. })
                if code == 3 || message.contains("authentication failed") =>
            {
                Err(EtcdError::AuthFailed {
                    user: user.to_string(),
                    message: message
                        .strip_prefix("etcdserver: ")
                        .unwrap_or(&message)
                        .to_string(),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Authenticates now unless a token is held (the first contact's check): `Ok(true)`
    /// with a token, `Ok(false)` when etcd has authentication switched off, or there is
    /// no user to authenticate.
    pub async fn login(&self) -> Result<bool, EtcdError> {
        match &self.auth {
            None => Ok(false),
            Some(a) => Ok(a
                .tokens
                .current(|| self.authenticate(a))
                .await?
                .token
                .is_some()),
        }
    }

    /// Reads at most one key under `prefix` from endpoint `idx` alone, with the user's
    /// token (the first contact's check of each endpoint: TLS, user, read permission).
    pub async fn probe(&self, idx: usize, prefix: &str) -> Result<(), EtcdError> {
        let base = self
            .endpoints
            .get(idx)
            .ok_or_else(|| EtcdError::Unavailable(format!("no endpoint #{idx}")))?;
        let mut body = range_json(prefix, true);
        body["limit"] = json!("1");
        body["keys_only"] = json!(true);
        let once = |token: Option<Arc<str>>| {
            let body = &body;
            async move {
                let (status, bytes) = self
                    .exchange(base, "/v3/kv/range", body, token.as_deref())
                    .await
                    .map_err(|f| f.error)?;
                decode_answer::<RangeJson>(status, &bytes).map(|_| ())
            }
        };
        match &self.auth {
            None => once(None).await,
            Some(a) => with_token(&a.tokens, || self.authenticate(a), once).await,
        }
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
}
