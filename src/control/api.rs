//! The admin HTTP API framework: HTTP/1.1 + JSON on the admin listener. It
//! knows none of the features it serves.
//!
//! # Shape
//! - [`serve`] accepts connections (at most [`MAX_CONNECTIONS`]; when full,
//!   the longest-idle connection gives way, see `control::conns`), serves
//!   HTTP/1.1 with a header-read timeout, and drains on shutdown
//!   (`control::server`).
//! - [`handle`] runs the fixed phases of every request: match the path
//!   against [`ApiState::routes`] → check the `Host` (421, see
//!   `control::guard`) → authenticate → refuse a write a page of another site
//!   could have sent (403) → check the media type and read the body (capped at
//!   [`MAX_BODY_BYTES`], within [`ApiState::body_timeout`]) → call the handler
//!   → turn an [`ApiError`] into the JSON error body `{error, field, reason}`.
//! - Handlers are plain functions over [`ApiState`] and an [`ApiRequest`].
//!
//! # Extending
//! The route table is data: each feature declares its own
//! `pub static ROUTES: &[RouteDef]` with `{param}` templates and handlers
//! (`table_api`, `endpoints::api`, `rollout::api`, `cluster::api`), and
//! `app::api_routes` chains them after the core routes (`control::core`).
//! Handlers reach their feature's state through [`ApiState::ext`] (a type
//! map filled by `app.rs`). The OpenAPI test walks `app::api_routes`, so a
//! new path must also be documented in `openapi.json`.
//!
//! # Rules
//! Every write is validated in full by the table store before it is
//! applied; a refused write leaves the running table and its version as they
//! were. Syntax and schema problems (malformed JSON, unknown field, wrong
//! type) answer 400, semantic ones (a weight out of range, an unknown
//! backend, a regex over the size limit) 422, a version conflict 409. The
//! bearer token is never logged.

use super::events::EventBus;
use crate::config::ConfigError;
use crate::dataplane::metrics::Metrics;
use crate::dataplane::store::{TableStore, WriteError};
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, ETAG, IF_MATCH};
use http::{HeaderMap, Method, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub use super::server::{handle, match_template, serve};

/// Largest request body accepted (413 above).
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Admin connections open at once. A new connection beyond it closes the
/// longest-idle one (no request in progress); when every one is busy it waits in
/// the accept queue.
pub const MAX_CONNECTIONS: usize = 256;

/// Event streams (`/api/v1/events`) one client address may hold open at once
/// (429 beyond), so that no single client holds every connection slot.
pub const MAX_EVENT_STREAMS_PER_CLIENT: usize = 8;

/// Time a client has to send its request head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Interval of SSE keep-alive comments (proxies close silent streams).
pub const SSE_KEEPALIVE: Duration = Duration::from_secs(15);

/// The OpenAPI 3 document served at `/openapi.json`.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

/// The body type of every admin response (full JSON or an SSE stream).
pub type ApiBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// An admin response.
pub type ApiResponse = Response<ApiBody>;

/// What a handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<ApiResponse, ApiError>> + Send>>;

/// A handler: state and request in, response (or error) out.
pub type Handler = fn(Arc<ApiState>, ApiRequest) -> HandlerFuture;

/// Which tokens an endpoint takes when the API requires one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// None needed: the console's files.
    Public,
    /// None needed, and answered whatever the `Host` (a health check calls by
    /// address): the probes `/healthz` and `/readyz`. Under a `Host` that
    /// `admin.allowedHosts` does not list they say only up or ready
    /// ([`ApiRequest::host_allowed`]).
    Probe,
    /// The admin token (or, for a GET, the read-only token).
    Token,
    /// As [`Auth::Token`], or the peer token: the calls one replica's engine makes
    /// to another's data plane, and a canary command forwarded to its owner.
    TokenOrPeer,
}

/// One entry of the route table.
pub struct RouteDef {
    /// The method served.
    pub method: Method,
    /// Path template; `{name}` segments capture one path segment.
    pub path: &'static str,
    /// Which bearer tokens it takes (when the API requires one).
    pub auth: Auth,
    /// The handler.
    pub handler: Handler,
}

/// Everything the handlers share, built once by `app::start`.
pub struct ApiState {
    /// The routing table store (reads and writes).
    pub store: Arc<TableStore>,
    /// The route table served: core routes, then each feature's, in the
    /// order `app` composes them (see `app::api_routes`).
    pub routes: Vec<&'static RouteDef>,
    /// The app's Prometheus registry.
    pub metrics: Arc<Metrics>,
    /// Event stream of `/api/v1/events`.
    pub events: Arc<EventBus>,
    /// Bearer token, if configured.
    pub token: Option<String>,
    /// The token that may only read (`admin.readOnlyTokenFile`), if configured.
    pub read_only_token: Option<String>,
    /// The token other replicas present (`cluster.peerTokenFile`), if configured:
    /// taken only on [`Auth::TokenOrPeer`] endpoints.
    pub peer_token: Option<String>,
    /// The `Host` values answered (`admin.allowedHosts`, plus this replica's
    /// `cluster.apiUrl` host); 421 for others.
    pub allowed_hosts: crate::config::admin_hosts::AllowedHosts,
    /// Time a write's body has to arrive, from its head on (`admin.bodyTimeout`).
    pub body_timeout: Duration,
    /// Open event streams per client address ([`MAX_EVENT_STREAMS_PER_CLIENT`]).
    pub event_streams: Arc<super::events::StreamCounts>,
    /// True once every listener is bound and the table is loaded; false
    /// again while draining (`/readyz`).
    pub ready: Arc<AtomicBool>,
    /// Turns true on shutdown; ends SSE streams so the drain can finish.
    pub shutdown: watch::Receiver<bool>,
    /// State of the features' handlers, looked up by type and filled by
    /// `app`: the rollout engine, the cluster and its [`ReadinessCheck`],
    /// the proxy's shared state (the stats clock of `/api/v1/stats`).
    pub ext: http::Extensions,
}

/// An extra `/readyz` condition a feature puts in [`ApiState::ext`]: `Some(reason)`
/// makes a ready replica answer 503 `no-lease` with that reason.
#[derive(Clone, Copy)]
pub struct ReadinessCheck(pub fn(&ApiState) -> Option<String>);

/// A request as handlers see it: the body already read (capped).
#[derive(Debug)]
pub struct ApiRequest {
    /// Request method.
    pub method: Method,
    /// Values of the template's `{name}` segments, percent-decoded.
    pub params: Vec<(String, String)>,
    /// Raw query string.
    pub query: Option<String>,
    /// Request headers.
    pub headers: HeaderMap,
    /// The body (at most [`MAX_BODY_BYTES`]).
    pub body: Bytes,
    /// The client's address (audit log).
    pub peer: SocketAddr,
    /// What the presented token may do (`Write` on a public route).
    pub access: super::auth::Access,
    /// The `Host` is on the allowed list (always true but on [`Auth::Probe`]
    /// routes, which answer any).
    pub host_allowed: bool,
}

impl ApiRequest {
    /// A path parameter of the template (empty if absent).
    pub fn param(&self, name: &str) -> &str {
        self.params
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }

    /// First value of a query parameter.
    pub fn query_param(&self, name: &str) -> Option<String> {
        let q = self.query.as_deref()?;
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    /// Who is writing, for the audit log (`api:<client ip>`).
    pub fn actor(&self) -> String {
        format!("api:{}", self.peer.ip())
    }

    /// The body parsed as `T`, errors naming the field (400).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        parse_json(&self.body)
    }

    /// The `If-Match` version, if any (`*` means any version).
    pub fn if_match(&self) -> Result<Option<u64>, ApiError> {
        let Some(v) = self.headers.get(IF_MATCH) else {
            return Ok(None);
        };
        let s = v.to_str().unwrap_or("").trim();
        if s == "*" {
            return Ok(None);
        }
        let s = s.strip_prefix("W/").unwrap_or(s).trim_matches('"');
        s.parse::<u64>().map(Some).map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad-request",
                Some("If-Match"),
                "expected a table version as returned in ETag, e.g. \"7\"",
            )
        })
    }
}

/// One field problem in an error body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    /// Field path, e.g. `routes[0].canaryWeight` (empty: the whole body).
    pub field: String,
    /// Why it was refused.
    pub reason: String,
}

/// An error answer: status plus the JSON body `{error, field, reason}`
/// (and `errors` listing every problem of a refused write).
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code (`malformed-json`, `invalid`, ...).
    pub error: &'static str,
    /// The field at fault, if one is.
    pub field: Option<String>,
    /// Human-readable reason.
    pub reason: String,
    /// Every problem found (validation reports all of them at once).
    pub errors: Vec<FieldError>,
    /// Extra response headers (e.g. the current `ETag` on a conflict).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl ApiError {
    /// An error with one field (or none).
    pub fn new(
        status: StatusCode,
        error: &'static str,
        field: Option<&str>,
        reason: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            error,
            field: field.map(str::to_string),
            reason: reason.into(),
            errors: Vec::new(),
            headers: Vec::new(),
        }
    }

    /// 404 for a named thing.
    pub fn not_found(what: &str, name: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not-found",
            Some("name"),
            format!("no {what} named {name:?}"),
        )
    }

    /// 422 from validation errors (paths mapped by `map_path`).
    pub fn invalid(errors: &[ConfigError], map_path: impl Fn(&str) -> String) -> Self {
        let list: Vec<FieldError> = errors
            .iter()
            .map(|e| FieldError {
                field: map_path(&e.path),
                reason: e.reason.clone(),
            })
            .collect();
        let first = list.first().cloned().unwrap_or(FieldError {
            field: String::new(),
            reason: "invalid".into(),
        });
        ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            error: "invalid",
            field: Some(first.field),
            reason: first.reason,
            errors: list,
            headers: Vec::new(),
        }
    }

    /// The JSON response.
    pub fn into_response(self) -> ApiResponse {
        #[derive(Serialize)]
        struct Body<'a> {
            error: &'a str,
            field: &'a Option<String>,
            reason: &'a str,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            errors: &'a Vec<FieldError>,
        }
        let body = Body {
            error: self.error,
            field: &self.field,
            reason: &self.reason,
            errors: &self.errors,
        };
        let mut resp = json_response(self.status, &body);
        for (k, v) in self.headers {
            resp.headers_mut().insert(k, v);
        }
        resp
    }
}

// ---------------------------------------------------------------- helpers

/// A full (non-streaming) body.
pub fn full(b: impl Into<Bytes>) -> ApiBody {
    Full::new(b.into()).boxed()
}

/// A JSON response of `value`.
pub fn json_response<T: Serialize + ?Sized>(status: StatusCode, value: &T) -> ApiResponse {
    match serde_json::to_vec(value) {
        Ok(mut v) => {
            v.push(b'\n');
            raw_json(status, Bytes::from(v))
        }
        Err(e) => {
            tracing::error!(target: "weir::admin", error = %e, "cannot serialize a response");
            let mut r = Response::new(full(
                "{\"error\":\"internal\",\"field\":null,\"reason\":\"cannot serialize the response\"}\n",
            ));
            *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
    }
}

/// A response with an already serialised JSON body.
pub fn raw_json(status: StatusCode, body: Bytes) -> ApiResponse {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// Sets the table version as the response's `ETag`.
pub fn with_etag(mut r: ApiResponse, version: u64) -> ApiResponse {
    if let Ok(v) = HeaderValue::from_str(&format!("\"{version}\"")) {
        r.headers_mut().insert(ETAG, v);
    }
    r
}

/// Parses JSON into `T`; errors name the field path and answer 400.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        json_error(&path, &inner)
    })?;
    de.end().map_err(|e| json_error(".", &e))?;
    Ok(value)
}

/// Like [`parse_json`] from an already parsed value (PATCH after merging).
pub fn from_value<T: DeserializeOwned>(v: serde_json::Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        json_error(&path, e.inner())
    })
}

fn json_error(path: &str, e: &serde_json::Error) -> ApiError {
    use serde_json::error::Category;
    let path = if path == "." { "" } else { path };
    let msg = e.to_string();
    // serde_json appends " at line L column C"; keep it for syntax errors
    // (it locates the problem) and drop it for data errors (the field does).
    match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => ApiError::new(
            StatusCode::BAD_REQUEST,
            "malformed-json",
            None,
            format!("malformed JSON: {msg}"),
        ),
        Category::Data => {
            let reason = match msg.rfind(" at line ") {
                Some(i) => msg[..i].to_string(),
                None => msg.clone(),
            };
            // For unknown and missing fields the field is named in the
            // message; the path points at the enclosing object.
            let named = ["unknown field `", "missing field `"]
                .iter()
                .find_map(|p| reason.strip_prefix(p))
                .and_then(|rest| rest.split('`').next());
            let field = match named {
                Some(n) if !path.ends_with(n) => {
                    if path.is_empty() {
                        n.to_string()
                    } else {
                        format!("{path}.{n}")
                    }
                }
                _ => path.to_string(),
            };
            ApiError::new(StatusCode::BAD_REQUEST, "schema", Some(&field), reason)
        }
    }
}

/// Maps a refused store write to its answer.
pub fn write_error(e: WriteError, map_path: impl Fn(&str) -> String) -> ApiError {
    match e {
        WriteError::Conflict { current } => {
            let mut err = ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                Some("If-Match"),
                format!("the table is at version {current}; re-read it and retry"),
            );
            if let Ok(v) = HeaderValue::from_str(&format!("\"{current}\"")) {
                err.headers.push((ETAG, v));
            }
            err
        }
        WriteError::Invalid(errs) => ApiError::invalid(&errs, map_path),
        WriteError::NotFound(name) => ApiError::not_found("route", &name),
    }
}

/// Logs a refused write to the audit log.
pub fn audit_refused(req: &ApiRequest, what: &str, e: &ApiError) {
    tracing::info!(
        target: "weir::audit",
        actor = %req.actor(),
        what,
        status = e.status.as_u16(),
        field = e.field.as_deref().unwrap_or(""),
        reason = %e.reason,
        "write refused"
    );
}

/// RFC 7396 JSON merge patch: objects merge key by key, `null` removes a
/// key, anything else replaces.
pub fn merge_patch(target: &mut serde_json::Value, patch: &serde_json::Value) {
    use serde_json::Value;
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::raw::RawTable;

    #[test]
    fn merge_patch_rfc7396() {
        let mut t = serde_json::json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1]});
        merge_patch(
            &mut t,
            &serde_json::json!({"a": null, "b": {"c": 5}, "e": [2, 3], "f": "x"}),
        );
        assert_eq!(
            t,
            serde_json::json!({"b": {"c": 5, "d": 3}, "e": [2, 3], "f": "x"})
        );
    }

    #[test]
    fn json_errors_name_fields() {
        let e = parse_json::<RawTable>(
            br#"{"routes":[{"name":"a","primary":"b","canaryWeight":"x"}]}"#,
        )
        .unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.field.as_deref(), Some("routes[0].canaryWeight"));
        let e = parse_json::<RawTable>(br#"{"routes":[{"name":"a","primary":"b","bogus":1}]}"#)
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("routes[0].bogus"), "{e:?}");
        let e = parse_json::<RawTable>(br#"{"routes":[{"name":"a"}]}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("routes[0].primary"), "{e:?}");
        let e = parse_json::<RawTable>(br#"{"routes":["#).unwrap_err();
        assert_eq!(e.error, "malformed-json");
        let e = parse_json::<RawTable>(br#"{} x"#).unwrap_err();
        assert_eq!(e.error, "malformed-json");
    }
}
