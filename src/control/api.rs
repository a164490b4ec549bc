//! The admin HTTP API (DESIGN §8): HTTP/1.1 + JSON on the admin listener.
//!
//! # Shape
//! - [`serve`] accepts connections (capped by a semaphore), serves HTTP/1.1
//!   with a header-read timeout, and drains on shutdown.
//! - [`handle`] runs the fixed phases of every request: match the path
//!   against [`routes`] → authenticate → check the media type and read the
//!   body (capped at [`MAX_BODY_BYTES`]) → call the handler → turn an
//!   [`ApiError`] into the JSON error body `{error, field, reason}`.
//! - Handlers are plain functions over [`ApiState`] and an [`ApiRequest`].
//!
//! # Extending
//! The route table is data: [`routes`] chains `&'static [RouteDef]` slices.
//! Another module (e.g. `control/canaries.rs`) declares its own
//! `pub static ROUTES: &[RouteDef]` with `{param}` templates and handlers,
//! and adds one `.chain(..)` line in [`routes`]. Its handlers reach their own
//! state through [`ApiState::ext`] (a type map filled by `app.rs`). The
//! OpenAPI test walks [`routes`], so a new path must also be documented in
//! `openapi.json`.
//!
//! # Rules
//! Every write is validated in full by the table store before it is
//! applied; a refused write leaves the running table and its version as they
//! were. Syntax and schema problems (malformed JSON, unknown field, wrong
//! type) answer 400, semantic ones (a weight out of range, an unknown
//! backend, a regex over the size limit) 422, a version conflict 409. The
//! bearer token is never logged.

use super::auth::{self, AuthResult};
use super::events::EventBus;
use super::store::{TableStore, WriteError, STATS_CAPACITY_SECS};
use crate::config::raw::{RawRoute, RawTable};
use crate::config::{ConfigError, LoadBalancer};
use crate::metrics::Metrics;
use crate::proxy::service::ProxyShared;
use crate::stats::{Role, Summary, WindowSnapshot};
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, ALLOW, CONTENT_LENGTH, CONTENT_TYPE, ETAG, IF_MATCH};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};

/// Largest request body accepted (413 above).
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Admin connections served at once; more wait in the accept queue.
pub const MAX_CONNECTIONS: usize = 256;

/// Time a client has to send its request head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Interval of SSE keep-alive comments (proxies close silent streams).
pub const SSE_KEEPALIVE: Duration = Duration::from_secs(15);

/// Default stats window of `GET /api/v1/stats`.
pub const DEFAULT_STATS_WINDOW_SECS: u64 = 60;

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

/// One entry of the route table.
pub struct RouteDef {
    /// The method served.
    pub method: Method,
    /// Path template; `{name}` segments capture one path segment.
    pub path: &'static str,
    /// Whether the bearer token is required (when one is configured).
    /// Only the probes (`/healthz`, `/readyz`) are public.
    pub auth: bool,
    /// The handler.
    pub handler: Handler,
}

/// Everything the handlers share, built once by `app::start`.
pub struct ApiState {
    /// The routing table store (reads and writes).
    pub store: Arc<TableStore>,
    /// The proxy's shared state (the stats clock).
    pub shared: Arc<ProxyShared>,
    /// The app's Prometheus registry.
    pub metrics: Arc<Metrics>,
    /// Event stream of `/api/v1/events`.
    pub events: Arc<EventBus>,
    /// Bearer token, if configured.
    pub token: Option<String>,
    /// True once every listener is bound and the table is loaded; false
    /// again while draining (`/readyz`).
    pub ready: Arc<AtomicBool>,
    /// Turns true on shutdown; ends SSE streams so the drain can finish.
    pub shutdown: watch::Receiver<bool>,
    /// State of handlers added by other modules (the rollout engine puts its
    /// handle here), looked up by type.
    pub ext: http::Extensions,
}

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

/// The route table: core routes, then those of other modules.
pub fn routes() -> impl Iterator<Item = &'static RouteDef> {
    CORE_ROUTES
        .iter()
        .chain(crate::rollout::api::ROUTES.iter())
        .chain(crate::endpoints::api::ROUTES.iter())
        .chain(crate::cluster::api::ROUTES.iter())
}

/// The routes of this module.
pub static CORE_ROUTES: &[RouteDef] = &[
    RouteDef {
        method: Method::GET,
        path: "/healthz",
        auth: false,
        handler: |_, _| {
            Box::pin(async {
                Ok(json_response(
                    StatusCode::OK,
                    &serde_json::json!({"status": "ok"}),
                ))
            })
        },
    },
    RouteDef {
        method: Method::GET,
        path: "/readyz",
        auth: false,
        handler: |s, _| Box::pin(async move { Ok(readyz(&s)) }),
    },
    RouteDef {
        method: Method::GET,
        path: "/metrics",
        auth: true,
        handler: |s, _| Box::pin(async move { Ok(metrics(&s)) }),
    },
    RouteDef {
        method: Method::GET,
        path: "/openapi.json",
        auth: true,
        handler: |_, _| {
            Box::pin(async {
                Ok(raw_json(
                    StatusCode::OK,
                    Bytes::from_static(OPENAPI_JSON.as_bytes()),
                ))
            })
        },
    },
    RouteDef {
        method: Method::GET,
        path: "/api/v1/table",
        auth: true,
        handler: |s, _| Box::pin(async move { get_table(&s) }),
    },
    RouteDef {
        method: Method::PUT,
        path: "/api/v1/table",
        auth: true,
        handler: |s, r| Box::pin(async move { put_table(&s, &r) }),
    },
    RouteDef {
        method: Method::GET,
        path: "/api/v1/routes/{name}",
        auth: true,
        handler: |s, r| Box::pin(async move { get_route(&s, &r) }),
    },
    RouteDef {
        method: Method::PATCH,
        path: "/api/v1/routes/{name}",
        auth: true,
        handler: |s, r| Box::pin(async move { patch_route(&s, &r) }),
    },
    RouteDef {
        method: Method::GET,
        path: "/api/v1/backends/{name}",
        auth: true,
        handler: |s, r| Box::pin(async move { get_backend(&s, &r) }),
    },
    RouteDef {
        method: Method::GET,
        path: "/api/v1/stats",
        auth: true,
        handler: |s, r| Box::pin(async move { get_stats(&s, &r) }),
    },
    RouteDef {
        method: Method::GET,
        path: "/api/v1/events",
        auth: true,
        handler: |s, _| Box::pin(async move { Ok(events(&s)) }),
    },
];

// ---------------------------------------------------------------- serving

/// Serves the admin API on `listener` until `shutdown` turns true, then
/// waits up to `drain` for open requests (SSE streams end on shutdown).
pub async fn serve(
    listener: TcpListener,
    state: Arc<ApiState>,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = shutdown.changed() => break,
        };
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(target: "weir::admin", error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let st = state.clone();
                let svc = service_fn(move |req| handle(st.clone(), peer, req));
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), svc);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _permit = permit;
                    if let Err(e) = conn.await {
                        tracing::debug!(target: "weir::admin", %peer, error = %e, "admin connection ended with error");
                    }
                });
            }
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(target: "weir::admin", ?drain, "admin drain timeout reached");
    }
}

/// Splits a path into its non-empty segments.
fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

/// Matches `segs` against a template; returns the captured parameters.
pub fn match_template(template: &str, segs: &[&str]) -> Option<Vec<(String, String)>> {
    let tsegs = segments(template);
    if tsegs.len() != segs.len() {
        return None;
    }
    let mut params = Vec::new();
    for (t, s) in tsegs.iter().zip(segs) {
        if let Some(name) = t.strip_prefix('{').and_then(|n| n.strip_suffix('}')) {
            params.push((name.to_string(), percent_decode(s)));
        } else if t != s {
            return None;
        }
    }
    Some(params)
}

/// Percent-decodes one path segment (invalid escapes are kept as written).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The hyper service: every request of the admin listener. Never fails.
pub async fn handle(
    state: Arc<ApiState>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<ApiResponse, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = match dispatch(state, peer, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    tracing::debug!(target: "weir::admin", %peer, %method, path, status = resp.status().as_u16(), "admin request");
    Ok(resp)
}

async fn dispatch(
    state: Arc<ApiState>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<ApiResponse, ApiError> {
    let path = req.uri().path().to_string();
    let segs = segments(&path);
    let mut matched: Option<(&'static RouteDef, Vec<(String, String)>)> = None;
    let mut allowed: Vec<&'static str> = Vec::new();
    let mut needs_auth = true;
    for def in routes() {
        if let Some(params) = match_template(def.path, &segs) {
            allowed.push(def.method.as_str());
            if def.method == req.method() {
                needs_auth = def.auth;
                matched = Some((def, params));
            }
        }
    }
    // Authenticate before telling anything about paths.
    if needs_auth {
        match auth::check(state.token.as_deref(), req.headers()) {
            AuthResult::Allowed => {}
            r => {
                let reason = if r == AuthResult::Missing {
                    "missing bearer token (Authorization: Bearer <token>)"
                } else {
                    "wrong bearer token"
                };
                let mut e = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", None, reason);
                e.headers.push((
                    http::header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"weir\""),
                ));
                return Err(e);
            }
        }
    }
    let Some((def, params)) = matched else {
        if allowed.is_empty() {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not-found",
                None,
                format!("no endpoint {path}"),
            ));
        }
        let mut e = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            None,
            format!("{} is not served on {path}", req.method()),
        );
        if let Ok(v) = HeaderValue::from_str(&allowed.join(", ")) {
            e.headers.push((ALLOW, v));
        }
        return Err(e);
    };
    let (parts, body) = req.into_parts();
    let is_write = !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
    let body = if is_write {
        read_write_body(&parts.method, &parts.headers, body).await?
    } else {
        Bytes::new()
    };
    let api_req = ApiRequest {
        method: parts.method,
        params,
        query: parts.uri.query().map(str::to_string),
        headers: parts.headers,
        body,
        peer,
    };
    (def.handler)(state, api_req).await
}

/// Checks the media type and reads a write's body, capped.
async fn read_write_body(
    method: &Method,
    headers: &HeaderMap,
    body: Incoming,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            None,
            format!("request bodies are limited to {MAX_BODY_BYTES} bytes"),
        )
    };
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let media = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    let json_ok = |m: &str| {
        m == "application/json" || (*method == Method::PATCH && m == "application/merge-patch+json")
    };
    let unsupported = |m: Option<&str>| {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            Some("Content-Type"),
            format!(
                "writes take application/json (got {})",
                m.unwrap_or("no Content-Type")
            ),
        )
    };
    match media.as_deref() {
        Some(m) if !json_ok(m) => return Err(unsupported(Some(m))),
        None if matches!(*method, Method::PUT | Method::PATCH) => return Err(unsupported(None)),
        _ => {}
    }
    let bytes = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad-request",
                None,
                "the request body could not be read",
            ))
        }
    };
    if media.is_none() && !bytes.is_empty() {
        return Err(unsupported(None));
    }
    Ok(bytes)
}

// ---------------------------------------------------------------- helpers

fn full(b: impl Into<Bytes>) -> ApiBody {
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

fn raw_json(status: StatusCode, body: Bytes) -> ApiResponse {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn with_etag(mut r: ApiResponse, version: u64) -> ApiResponse {
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
fn from_value<T: DeserializeOwned>(v: serde_json::Value) -> Result<T, ApiError> {
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
fn write_error(e: WriteError, map_path: impl Fn(&str) -> String) -> ApiError {
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

fn audit_refused(req: &ApiRequest, what: &str, e: &ApiError) {
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

// ---------------------------------------------------------------- handlers

fn readyz(s: &ApiState) -> ApiResponse {
    // In a fleet, a replica without a valid etcd lease drives nothing: not ready
    // (it still proxies).
    if let Some(reason) = crate::cluster::api::not_ready_reason(s) {
        if s.ready.load(Ordering::Acquire) {
            return json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &serde_json::json!({"status": "no-lease", "reason": reason}),
            );
        }
    }
    if s.ready.load(Ordering::Acquire) {
        json_response(
            StatusCode::OK,
            &serde_json::json!({"status": "ready", "tableVersion": s.store.load().version}),
        )
    } else {
        let status = if *s.shutdown.borrow() {
            "draining"
        } else {
            "starting"
        };
        json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({ "status": status }),
        )
    }
}

fn metrics(s: &ApiState) -> ApiResponse {
    let text = s.metrics.render(&s.store);
    let mut r = Response::new(full(text));
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

fn get_table(s: &ApiState) -> Result<ApiResponse, ApiError> {
    let snap = s.store.load();
    Ok(with_etag(
        json_response(StatusCode::OK, &snap.spec.raw),
        snap.version,
    ))
}

/// The answer to a successful write.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WriteResult {
    version: u64,
}

fn put_table(s: &ApiState, r: &ApiRequest) -> Result<ApiResponse, ApiError> {
    let result = (|| {
        let raw: RawTable = r.json()?;
        let if_match = r.if_match()?;
        s.store
            .replace(raw, if_match, &r.actor())
            .map_err(|e| write_error(e, str::to_string))
    })();
    match result {
        Ok(snap) => Ok(with_etag(
            json_response(
                StatusCode::OK,
                &WriteResult {
                    version: snap.version,
                },
            ),
            snap.version,
        )),
        Err(e) => {
            audit_refused(r, "replace table", &e);
            Err(e)
        }
    }
}

fn get_route(s: &ApiState, r: &ApiRequest) -> Result<ApiResponse, ApiError> {
    let name = r.param("name");
    let snap = s.store.load();
    let route = snap
        .spec
        .raw
        .routes
        .iter()
        .find(|x| x.name == name)
        .ok_or_else(|| ApiError::not_found("route", name))?;
    Ok(with_etag(
        json_response(StatusCode::OK, route),
        snap.version,
    ))
}

fn patch_route(s: &ApiState, r: &ApiRequest) -> Result<ApiResponse, ApiError> {
    let name = r.param("name").to_string();
    let what = format!("update route {name}");
    let result = (|| {
        let patch: serde_json::Value = r.json()?;
        if !patch.is_object() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "schema",
                Some(""),
                "a PATCH body is a JSON object of route fields (JSON merge patch)",
            ));
        }
        let if_match = r.if_match()?;
        // Paths from validation name the route by index; report them
        // relative to the route, as the client wrote them.
        let idx = s
            .store
            .load()
            .spec
            .raw
            .routes
            .iter()
            .position(|x| x.name == name);
        let prefix = idx.map(|i| format!("routes[{i}]"));
        let map_path = |p: &str| match &prefix {
            Some(pre) => match p.strip_prefix(pre.as_str()) {
                Some(rest) => rest.strip_prefix('.').unwrap_or(rest).to_string(),
                None => p.to_string(),
            },
            None => p.to_string(),
        };
        let mut parse_error: Option<ApiError> = None;
        let res = s.store.update_route(&name, if_match, &r.actor(), |route| {
            let mut v = match serde_json::to_value(&*route) {
                Ok(v) => v,
                Err(e) => {
                    parse_error = Some(ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "internal",
                        None,
                        e.to_string(),
                    ));
                    return Err(Vec::new());
                }
            };
            merge_patch(&mut v, &patch);
            match from_value::<RawRoute>(v) {
                Ok(new) if new.name != route.name => {
                    parse_error = Some(ApiError::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "invalid",
                        Some("name"),
                        "a route cannot be renamed; replace the table instead",
                    ));
                    Err(Vec::new())
                }
                Ok(new) => {
                    *route = new;
                    Ok(())
                }
                Err(e) => {
                    parse_error = Some(e);
                    Err(Vec::new())
                }
            }
        });
        match res {
            Ok(snap) => Ok(snap),
            Err(e) => Err(parse_error
                .take()
                .unwrap_or_else(|| write_error(e, map_path))),
        }
    })();
    match result {
        Ok(snap) => {
            let route = snap
                .spec
                .raw
                .routes
                .iter()
                .find(|x| x.name == name)
                .cloned();
            Ok(with_etag(
                json_response(StatusCode::OK, &route),
                snap.version,
            ))
        }
        Err(e) => {
            audit_refused(r, &what, &e);
            Err(e)
        }
    }
}

/// `GET /api/v1/backends/{name}`: what the proxy sends to now.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendStatus {
    /// Backend name.
    pub name: String,
    /// `round-robin` or `least-request`.
    pub load_balancer: &'static str,
    /// The endpoint list of the table (the desired state).
    pub configured: Vec<String>,
    /// Endpoints in rotation now, in order (the actual state).
    pub endpoints: Vec<EndpointStatus>,
    /// Routes using this backend and as what (`primary` or `canary`); a
    /// canary slot at weight 0 is the idle slot of a blue/green pair.
    pub routes: Vec<BackendUse>,
    /// Path answering the endpoints' revision, if configured.
    pub revision_path: Option<String>,
    /// Health checks and outlier detection in force and which endpoints
    /// pass them (`endpoints::runtime::HealthView`).
    pub health: Option<serde_json::Value>,
    /// The endpoint rolling update: counts, phase, deadline, every endpoint
    /// (joining and draining too) and recent events
    /// (`endpoints::runtime::EndpointsView`).
    pub rolling_update: Option<serde_json::Value>,
}

/// One endpoint in rotation.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointStatus {
    /// `host:port`.
    pub address: String,
    /// Passing health checks (endpoints without checks are ready).
    pub ready: bool,
    /// Leaving the rotation: gets no new requests.
    pub draining: bool,
    /// Ejected by outlier detection: gets no new requests until re-admitted.
    pub ejected: bool,
    /// Requests in flight now.
    pub in_flight: usize,
}

/// A route that sends traffic to a backend.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendUse {
    /// Route name.
    pub route: String,
    /// `primary` or `canary`.
    pub role: &'static str,
    /// The route's canary weight.
    pub canary_weight: u8,
}

fn get_backend(s: &ApiState, r: &ApiRequest) -> Result<ApiResponse, ApiError> {
    let name = r.param("name");
    let snap = s.store.load();
    let spec = snap
        .spec
        .backends
        .get(name)
        .ok_or_else(|| ApiError::not_found("backend", name))?;
    let endpoints = s
        .store
        .backend(name)
        .map(|b| {
            b.rotation
                .load()
                .iter()
                .map(|e| EndpointStatus {
                    address: e.address.clone(),
                    ready: e.ready.load(Ordering::Relaxed),
                    draining: e.draining.load(Ordering::Relaxed),
                    ejected: e.is_ejected(),
                    in_flight: e.in_flight.load(Ordering::Relaxed),
                })
                .collect()
        })
        .unwrap_or_default();
    let mut routes = Vec::new();
    for route in &snap.spec.routing.routes {
        if route.primary == name {
            routes.push(BackendUse {
                route: route.name.clone(),
                role: "primary",
                canary_weight: route.canary_weight,
            });
        }
        if route.canary.as_deref() == Some(name) {
            routes.push(BackendUse {
                route: route.name.clone(),
                role: "canary",
                canary_weight: route.canary_weight,
            });
        }
    }
    let (health, rolling_update) = crate::endpoints::api::status_json(&s.store, name);
    let status = BackendStatus {
        name: spec.name.clone(),
        load_balancer: match spec.load_balancer {
            LoadBalancer::RoundRobin => "round-robin",
            LoadBalancer::LeastRequest => "least-request",
        },
        configured: spec.endpoints.clone(),
        endpoints,
        routes,
        revision_path: spec.revision_path.clone(),
        health,
        rolling_update,
    };
    Ok(with_etag(
        json_response(StatusCode::OK, &status),
        snap.version,
    ))
}

/// Stats of one route in `GET /api/v1/stats`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteStatsView {
    /// Route name.
    pub route: String,
    /// Current canary weight (`null` if the route left the table).
    pub canary_weight: Option<u8>,
    /// Primary backend name (`null` if the route left the table).
    pub primary: Option<String>,
    /// Canary backend name, if any.
    pub canary: Option<String>,
    /// Seconds actually covered.
    pub window_secs: u64,
    /// Summary per role (`primary`, `canary`, `mirror`).
    pub roles: BTreeMap<&'static str, Summary>,
    /// The mergeable histogram snapshot per role: a remote engine sums these
    /// over replicas ([`WindowSnapshot::merge`]) and takes percentiles of
    /// the sum.
    pub snapshots: BTreeMap<&'static str, WindowSnapshot>,
}

/// Parses `60s`, `1m`, `500ms`→ whole seconds in `1..=STATS_CAPACITY_SECS`.
pub fn parse_window(s: Option<&str>) -> Result<u64, ApiError> {
    let Some(s) = s else {
        return Ok(DEFAULT_STATS_WINDOW_SECS);
    };
    let bad = |reason: String| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad-request",
            Some("window"),
            reason,
        )
    };
    let d = crate::config::parse_duration(s).map_err(bad)?;
    let secs = d.as_secs();
    if secs == 0 || secs > STATS_CAPACITY_SECS as u64 || d.subsec_nanos() != 0 {
        return Err(bad(format!(
            "must be whole seconds between 1s and {STATS_CAPACITY_SECS}s (got {s:?})"
        )));
    }
    Ok(secs)
}

fn get_stats(s: &ApiState, r: &ApiRequest) -> Result<ApiResponse, ApiError> {
    let window = parse_window(r.query_param("window").as_deref())?;
    let now = s.shared.now_sec(Instant::now());
    let snap = s.store.load();
    let view = |name: &str| -> Option<RouteStatsView> {
        let route = snap.spec.routing.routes.iter().find(|x| x.name == name);
        let stats = match snap.spec.routing.index_of(name) {
            Some(i) => snap.routes.get(i).map(|rt| rt.stats.clone()),
            None => s.store.route_stats(name),
        }?;
        let mut roles = BTreeMap::new();
        let mut snapshots = BTreeMap::new();
        let mut covered = window;
        for role in Role::ALL {
            let w = stats.snapshot(role, now, window);
            covered = w.window_secs;
            roles.insert(role.as_str(), w.summary());
            snapshots.insert(role.as_str(), w);
        }
        Some(RouteStatsView {
            route: name.to_string(),
            canary_weight: route.map(|x| x.canary_weight),
            primary: route.map(|x| x.primary.clone()),
            canary: route.and_then(|x| x.canary.clone()),
            window_secs: covered,
            roles,
            snapshots,
        })
    };
    let resp = match r.query_param("route") {
        Some(name) => {
            let v = view(&name).ok_or_else(|| ApiError::not_found("route", &name))?;
            json_response(StatusCode::OK, &v)
        }
        None => {
            let all: Vec<RouteStatsView> = snap
                .spec
                .routing
                .routes
                .iter()
                .filter_map(|x| view(&x.name))
                .collect();
            json_response(
                StatusCode::OK,
                &serde_json::json!({ "windowSecs": window, "routes": all }),
            )
        }
    };
    Ok(with_etag(resp, snap.version))
}

/// A body fed by a channel (the SSE stream); ends when the sender is gone.
struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

fn events(s: &ApiState) -> ApiResponse {
    // Subscribe before answering so that nothing published after the client
    // has seen the response head is missed.
    let mut rx = s.events.subscribe();
    let mut shutdown = s.shutdown.clone();
    let (tx, body_rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        // A stream opened while draining ends at once.
        if *shutdown.borrow_and_update() {
            return;
        }
        if tx
            .send(Bytes::from_static(b"retry: 2000\n: connected\n\n"))
            .await
            .is_err()
        {
            return;
        }
        let mut keepalive = tokio::time::interval(SSE_KEEPALIVE);
        keepalive.tick().await;
        loop {
            let chunk = tokio::select! {
                ev = rx.recv() => match ev {
                    Ok(e) => Bytes::from(e.to_sse()),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => Bytes::from(format!(
                        "event: lagged\ndata: {{\"missed\":{n}}}\n\n"
                    )),
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                },
                _ = keepalive.tick() => Bytes::from_static(b": keepalive\n\n"),
                _ = shutdown.changed() => break,
                _ = tx.closed() => break,
            };
            if tx.send(chunk).await.is_err() {
                break;
            }
        }
    });
    let mut r = Response::new(ChannelBody { rx: body_rx }.boxed());
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_and_capture() {
        let segs = segments("/api/v1/routes/my%2Droute");
        let p = match_template("/api/v1/routes/{name}", &segs).unwrap();
        assert_eq!(p, vec![("name".to_string(), "my-route".to_string())]);
        assert!(match_template("/api/v1/table", &segs).is_none());
        assert_eq!(
            match_template("/healthz", &segments("/healthz/")),
            Some(vec![])
        );
    }

    #[test]
    fn percent_decoding_keeps_bad_escapes() {
        assert_eq!(percent_decode("a%41b"), "aAb");
        assert_eq!(percent_decode("a%4"), "a%4");
        assert_eq!(percent_decode("%zz%"), "%zz%");
    }

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

    #[test]
    fn windows() {
        assert_eq!(parse_window(None).unwrap(), 60);
        assert_eq!(parse_window(Some("10s")).unwrap(), 10);
        assert_eq!(parse_window(Some("2m")).unwrap(), 120);
        assert!(parse_window(Some("0s")).is_err());
        assert!(parse_window(Some("1500ms")).is_err());
        assert!(parse_window(Some("1h")).is_err());
        assert!(parse_window(Some("abc")).is_err());
    }
}
