//! `weir ctl`: the command-line client of the control API.
//!
//! Every command is a few HTTP/1.1 requests to the admin listener (hyper-util's
//! pooled client; plain HTTP, as the admin API binds loopback by default).
//! Output is a readable table, or the API's JSON with `--json`. API errors are
//! printed as `error: <reason> (field ...)` and exit 1.
//!
//! `watch` polls `/api/v1/stats` every `--interval`: on a terminal it redraws
//! one screen in place, when piped it prints one plain line per route and
//! tick (so it can be logged or grepped). It stops on Ctrl-C or after
//! `--count` ticks.

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, ETAG, IF_MATCH};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::fmt;
use std::io::Write;
use std::time::{Duration, SystemTime};

/// How to reach the API and how to print.
#[derive(Debug, Clone)]
pub struct CtlOptions {
    /// Base URL of the admin API, e.g. `http://127.0.0.1:9901`.
    pub api: String,
    /// Bearer token (read from `--token-file`).
    pub token: Option<String>,
    /// Print the API's JSON instead of tables.
    pub json: bool,
    /// Redraw in place (`watch` on a terminal) instead of printing lines.
    pub redraw: bool,
}

/// One `weir ctl` command.
#[derive(Debug, Clone, PartialEq)]
pub enum CtlCommand {
    /// Readiness, table version, routes with their weights and idle slots.
    Status,
    /// The routes of the table.
    Routes,
    /// Windowed stats per route and role.
    Stats {
        /// Only this route.
        route: Option<String>,
        /// Window, e.g. `60s`.
        window: String,
    },
    /// Set a route's canary weight.
    SetWeight {
        /// Route name.
        route: String,
        /// New weight (the API checks 0..=100).
        weight: i64,
    },
    /// Live view of weights, success rates and p99 per role.
    Watch {
        /// Only this route.
        route: Option<String>,
        /// Stats window, e.g. `10s`.
        window: String,
        /// Time between refreshes.
        interval: Duration,
        /// Stop after this many refreshes (default: until Ctrl-C).
        count: Option<u64>,
    },
    /// Fleet coordination: replicas, shards, heartbeats, owned canaries.
    Cluster,
}

/// Why a command failed.
#[derive(Debug)]
pub enum CtlError {
    /// Could not talk to the API at all.
    Transport(String),
    /// The API answered with an error.
    Api {
        /// HTTP status.
        status: u16,
        /// The `reason` of the error body (or the body).
        reason: String,
        /// The `field` of the error body, if any.
        field: Option<String>,
    },
    /// Bad local input (URL, token file, output).
    Usage(String),
}

impl fmt::Display for CtlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CtlError::Transport(m) => write!(f, "{m}"),
            CtlError::Api {
                status,
                reason,
                field: Some(field),
            } if !field.is_empty() => write!(f, "{reason} (field {field}, HTTP {status})"),
            CtlError::Api { status, reason, .. } => write!(f, "{reason} (HTTP {status})"),
            CtlError::Usage(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for CtlError {}

impl From<std::io::Error> for CtlError {
    fn from(e: std::io::Error) -> Self {
        CtlError::Usage(format!("cannot write output: {e}"))
    }
}

/// Reads a token file (trimmed; must not be empty).
pub fn read_token_file(path: &std::path::Path) -> Result<String, CtlError> {
    let t = std::fs::read_to_string(path)
        .map_err(|e| CtlError::Usage(format!("cannot read {}: {e}", path.display())))?;
    let t = t.trim().to_string();
    if t.is_empty() {
        return Err(CtlError::Usage(format!("{} is empty", path.display())));
    }
    Ok(t)
}

/// A small client of the admin API.
pub struct ApiClient {
    base: String,
    token: Option<String>,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// A response read whole.
struct Reply {
    status: StatusCode,
    etag: Option<String>,
    body: Bytes,
}

impl Reply {
    fn json(&self) -> Result<Value, CtlError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            CtlError::Transport(format!("the API answered something that is not JSON: {e}"))
        })
    }

    fn version(&self) -> Option<u64> {
        self.etag.as_deref()?.trim_matches('"').parse().ok()
    }
}

impl ApiClient {
    /// A client of the API at `base` (`http://host:port`).
    pub fn new(base: &str, token: Option<String>) -> Result<Self, CtlError> {
        let base = base.trim_end_matches('/').to_string();
        let uri: http::Uri = base
            .parse()
            .map_err(|e| CtlError::Usage(format!("--api {base:?} is not a URL: {e}")))?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            return Err(CtlError::Usage(format!(
                "--api {base:?}: expected http://host:port"
            )));
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        connector.set_nodelay(true);
        Ok(ApiClient {
            base,
            token,
            client: Client::builder(TokioExecutor::new()).build(connector),
        })
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<u64>,
    ) -> Result<Reply, CtlError> {
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path));
        if let Some(t) = &self.token {
            b = b.header(AUTHORIZATION, format!("Bearer {t}"));
        }
        if let Some(v) = if_match {
            b = b.header(IF_MATCH, format!("\"{v}\""));
        }
        let body = match body {
            Some(v) => {
                b = b.header(CONTENT_TYPE, "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let req = b
            .body(Full::new(body))
            .map_err(|e| CtlError::Usage(format!("bad request: {e}")))?;
        let fut = self.client.request(req);
        let resp = match tokio::time::timeout(Duration::from_secs(30), fut).await {
            Err(_) => {
                return Err(CtlError::Transport(format!(
                    "{}: no answer within 30s",
                    self.base
                )))
            }
            Ok(Err(e)) => {
                return Err(CtlError::Transport(format!(
                    "cannot reach the weir API at {}: {}",
                    self.base,
                    error_chain(&e)
                )))
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        let etag = resp
            .headers()
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| CtlError::Transport(format!("reading the answer: {e}")))?
            .to_bytes();
        Ok(Reply { status, etag, body })
    }

    /// Sends a request and turns a non-2xx answer into [`CtlError::Api`].
    async fn ok(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<u64>,
    ) -> Result<Reply, CtlError> {
        let r = self.call(method, path, body, if_match).await?;
        if r.status.is_success() {
            return Ok(r);
        }
        Err(api_error(&r))
    }
}

fn api_error(r: &Reply) -> CtlError {
    let parsed: Option<Value> = serde_json::from_slice(&r.body).ok();
    let reason = parsed
        .as_ref()
        .and_then(|v| v.get("reason"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(&r.body).trim().to_string());
    let field = parsed
        .as_ref()
        .and_then(|v| v.get("field"))
        .and_then(Value::as_str)
        .map(str::to_string);
    CtlError::Api {
        status: r.status.as_u16(),
        reason,
        field,
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// Runs one command, writing to `out`.
pub async fn run(
    opts: &CtlOptions,
    cmd: &CtlCommand,
    out: &mut (dyn Write + Send),
) -> Result<(), CtlError> {
    let api = ApiClient::new(&opts.api, opts.token.clone())?;
    match cmd {
        CtlCommand::Status => status(&api, opts, out).await,
        CtlCommand::Routes => routes(&api, opts, out).await,
        CtlCommand::Stats { route, window } => {
            let v = fetch_stats(&api, route.as_deref(), window).await?;
            if opts.json {
                writeln!(out, "{}", pretty(&v))?;
            } else {
                write!(out, "{}", stats_table(&v))?;
            }
            Ok(())
        }
        CtlCommand::SetWeight { route, weight } => {
            set_weight(&api, opts, route, *weight, out).await
        }
        CtlCommand::Watch {
            route,
            window,
            interval,
            count,
        } => watch(&api, opts, route.as_deref(), window, *interval, *count, out).await,
        CtlCommand::Cluster => {
            let v = api
                .ok(Method::GET, "/api/v1/cluster", None, None)
                .await?
                .json()?;
            if opts.json {
                writeln!(out, "{}", pretty(&v))?;
            } else {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    .unwrap_or(0);
                write!(out, "{}", crate::cluster::api::render(&v, now))?;
            }
            Ok(())
        }
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// Renders rows as aligned columns (two spaces apart).
pub fn render_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut s = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let pad = widths[i].saturating_sub(c.chars().count());
                l.push_str(c);
                l.push_str(&" ".repeat(pad + 2));
            }
        }
        s.push_str(l.trim_end());
        s.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    s
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

/// The backend a new version can be deployed to without touching traffic:
/// the canary slot of a route that sends it nothing (weight 0, no match
/// rules, no mirroring).
fn idle_slot(route: &Value) -> Option<&str> {
    let canary = route.get("canary").and_then(Value::as_str)?;
    let weight = route
        .get("canaryWeight")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let has_match = route
        .get("match")
        .and_then(Value::as_array)
        .is_some_and(|m| !m.is_empty());
    let mirror_on = route
        .get("mirror")
        .is_some_and(|m| m.get("enabled").and_then(Value::as_bool) != Some(false));
    (weight == 0 && !has_match && !mirror_on).then_some(canary)
}

fn fmt_pct(v: &Value) -> String {
    v.as_f64()
        .map(|p| format!("{p:.2}%"))
        .unwrap_or_else(|| "-".into())
}

fn fmt_ms(v: &Value) -> String {
    match v.as_f64() {
        Some(ms) if ms >= 1000.0 => format!("{:.2}s", ms / 1000.0),
        Some(ms) => format!("{ms:.1}ms"),
        None => "-".into(),
    }
}

async fn status(
    api: &ApiClient,
    opts: &CtlOptions,
    out: &mut (dyn Write + Send),
) -> Result<(), CtlError> {
    let ready = api.call(Method::GET, "/readyz", None, None).await?;
    let ready_json = ready.json().unwrap_or(Value::Null);
    let table = api.ok(Method::GET, "/api/v1/table", None, None).await?;
    let version = table.version();
    let table_json = table.json()?;
    let stats = fetch_stats(api, None, "60s").await?;
    if opts.json {
        let doc = serde_json::json!({
            "api": api.base,
            "ready": ready.status.is_success(),
            "readyz": ready_json,
            "tableVersion": version,
            "table": table_json,
            "stats": stats,
        });
        writeln!(out, "{}", pretty(&doc))?;
        return Ok(());
    }
    writeln!(
        out,
        "weir at {}: {}, table version {}",
        api.base,
        if ready.status.is_success() {
            "ready".to_string()
        } else {
            str_of(&ready_json, "status").to_string()
        },
        version.map_or("?".into(), |v| v.to_string())
    )?;
    let by_route = stats_by_route(&stats);
    let mut rows = Vec::new();
    for r in table_json
        .get("routes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = str_of(r, "name");
        let s = by_route.iter().find(|s| str_of(s, "route") == name);
        let role = |role: &str, key: &str| s.map_or(Value::Null, |s| role_stat(s, role, key));
        rows.push(vec![
            name.to_string(),
            str_of(r, "primary").to_string(),
            or_dash(str_of(r, "canary")),
            r.get("canaryWeight")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                .to_string(),
            idle_slot(r).map_or("-".into(), str::to_string),
            fmt_pct(&role("primary", "successRate")),
            fmt_pct(&role("canary", "successRate")),
        ]);
    }
    writeln!(out)?;
    write!(
        out,
        "{}",
        render_table(
            &[
                "ROUTE",
                "PRIMARY",
                "CANARY",
                "WEIGHT",
                "IDLE SLOT",
                "PRIMARY OK (60s)",
                "CANARY OK (60s)"
            ],
            &rows
        )
    )?;
    Ok(())
}

async fn routes(
    api: &ApiClient,
    opts: &CtlOptions,
    out: &mut (dyn Write + Send),
) -> Result<(), CtlError> {
    let table = api.ok(Method::GET, "/api/v1/table", None, None).await?;
    let v = table.json()?;
    if opts.json {
        writeln!(out, "{}", pretty(v.get("routes").unwrap_or(&Value::Null)))?;
        return Ok(());
    }
    let mut rows = Vec::new();
    for r in v
        .get("routes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let hosts: Vec<&str> = r
            .get("hosts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let matches = r.get("match").and_then(Value::as_array).map_or(0, Vec::len);
        let mirror = match r.get("mirror") {
            None => "-".to_string(),
            Some(m) if m.get("enabled").and_then(Value::as_bool) == Some(false) => "off".into(),
            Some(m) => format!(
                "{}%",
                m.get("weight").and_then(Value::as_i64).unwrap_or(100)
            ),
        };
        let affinity = r
            .get("sessionAffinity")
            .map(|a| str_of(a, "cookieName").to_string())
            .unwrap_or_default();
        rows.push(vec![
            str_of(r, "name").to_string(),
            if hosts.is_empty() {
                "*".into()
            } else {
                hosts.join(",")
            },
            r.get("pathPrefix")
                .and_then(Value::as_str)
                .unwrap_or("/")
                .to_string(),
            str_of(r, "primary").to_string(),
            or_dash(str_of(r, "canary")),
            r.get("canaryWeight")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                .to_string(),
            if matches == 0 {
                "-".into()
            } else {
                matches.to_string()
            },
            mirror,
            or_dash(&affinity),
        ]);
    }
    write!(
        out,
        "{}",
        render_table(
            &[
                "NAME", "HOSTS", "PATH", "PRIMARY", "CANARY", "WEIGHT", "MATCH", "MIRROR",
                "AFFINITY"
            ],
            &rows
        )
    )?;
    Ok(())
}

async fn fetch_stats(
    api: &ApiClient,
    route: Option<&str>,
    window: &str,
) -> Result<Value, CtlError> {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("window", window);
    if let Some(r) = route {
        q.append_pair("route", r);
    }
    let r = api
        .ok(
            Method::GET,
            &format!("/api/v1/stats?{}", q.finish()),
            None,
            None,
        )
        .await?;
    r.json()
}

/// The per-route objects of a stats answer (one route or all).
fn stats_by_route(v: &Value) -> Vec<Value> {
    match v.get("routes").and_then(Value::as_array) {
        Some(all) => all.clone(),
        None if v.get("route").is_some() => vec![v.clone()],
        None => Vec::new(),
    }
}

/// `route.roles[role][key]` of a stats document, `null` when absent.
fn role_stat(route: &Value, role: &str, key: &str) -> Value {
    route
        .get("roles")
        .and_then(|x| x.get(role))
        .and_then(|x| x.get(key))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Roles shown for a route: primary always, canary when the route has one
/// or it saw traffic, mirror when it saw traffic.
fn shown_roles(route: &Value) -> Vec<&'static str> {
    let requests = |role: &str| role_stat(route, role, "requests").as_u64().unwrap_or(0);
    let mut roles = vec!["primary"];
    if route.get("canary").is_some_and(|c| !c.is_null()) || requests("canary") > 0 {
        roles.push("canary");
    }
    if requests("mirror") > 0 {
        roles.push("mirror");
    }
    roles
}

fn stats_table(v: &Value) -> String {
    let routes = stats_by_route(v);
    let window = routes
        .first()
        .and_then(|r| r.get("windowSecs"))
        .or_else(|| v.get("windowSecs"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let mut rows = Vec::new();
    for r in &routes {
        for role in shown_roles(r) {
            let g = |k: &str| role_stat(r, role, k);
            rows.push(vec![
                str_of(r, "route").to_string(),
                role.to_string(),
                g("requests").as_u64().unwrap_or(0).to_string(),
                format!("{:.1}", g("rps").as_f64().unwrap_or(0.0)),
                fmt_pct(&g("successRate")),
                fmt_ms(&g("p50Ms")),
                fmt_ms(&g("p90Ms")),
                fmt_ms(&g("p99Ms")),
            ]);
        }
    }
    format!(
        "window {window}s\n{}",
        render_table(
            &["ROUTE", "ROLE", "REQUESTS", "RPS", "SUCCESS", "P50", "P90", "P99"],
            &rows
        )
    )
}

async fn set_weight(
    api: &ApiClient,
    opts: &CtlOptions,
    route: &str,
    weight: i64,
    out: &mut (dyn Write + Send),
) -> Result<(), CtlError> {
    let path = format!("/api/v1/routes/{}", encode_segment(route));
    // Read-modify-write with If-Match, so a concurrent change (the engine
    // stepping) is not silently overwritten; retry a few times on conflict.
    let mut attempt = 0;
    loop {
        attempt += 1;
        let cur = api.ok(Method::GET, &path, None, None).await?;
        let old_version = cur.version();
        let old_weight = cur
            .json()?
            .get("canaryWeight")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let patch = serde_json::json!({ "canaryWeight": weight });
        let r = api
            .call(Method::PATCH, &path, Some(&patch), old_version)
            .await?;
        if r.status == StatusCode::CONFLICT && attempt < 3 {
            continue;
        }
        if !r.status.is_success() {
            return Err(api_error(&r));
        }
        if opts.json {
            writeln!(out, "{}", pretty(&r.json()?))?;
        } else {
            writeln!(
                out,
                "{route}: canaryWeight {old_weight} -> {weight} (table version {} -> {})",
                old_version.map_or("?".into(), |v| v.to_string()),
                r.version().map_or("?".into(), |v| v.to_string()),
            )?;
        }
        return Ok(());
    }
}

/// Percent-encodes a path segment (route names are plain, but be safe).
fn encode_segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One piped line per route: weights, then per role success rate and p99.
fn watch_lines(v: &Value, now: &str) -> String {
    let mut s = String::new();
    for r in stats_by_route(v) {
        let weight = r
            .get("canaryWeight")
            .and_then(Value::as_u64)
            .map_or("-".into(), |w| w.to_string());
        s.push_str(&format!(
            "{now} route={} weight={weight}",
            str_of(&r, "route")
        ));
        for role in shown_roles(&r) {
            let g = |k: &str| role_stat(&r, role, k);
            s.push_str(&format!(
                " {role}: rps={:.1} success={} p99={}",
                g("rps").as_f64().unwrap_or(0.0),
                fmt_pct(&g("successRate")),
                fmt_ms(&g("p99Ms")),
            ));
        }
        s.push('\n');
    }
    s
}

/// The in-place screen of `watch` on a terminal.
fn watch_screen(api: &str, v: &Value, now: &str, interval: Duration) -> String {
    let mut rows = Vec::new();
    for r in stats_by_route(v) {
        let weight = r
            .get("canaryWeight")
            .and_then(Value::as_u64)
            .map_or("-".into(), |w| w.to_string());
        for (i, role) in shown_roles(&r).into_iter().enumerate() {
            let g = |k: &str| role_stat(&r, role, k);
            rows.push(vec![
                if i == 0 {
                    str_of(&r, "route").to_string()
                } else {
                    String::new()
                },
                if i == 0 {
                    weight.clone()
                } else {
                    String::new()
                },
                role.to_string(),
                format!("{:.1}", g("rps").as_f64().unwrap_or(0.0)),
                fmt_pct(&g("successRate")),
                fmt_ms(&g("p99Ms")),
            ]);
        }
    }
    let window = stats_by_route(v)
        .first()
        .and_then(|r| r.get("windowSecs"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    format!(
        "\x1b[H\x1b[2Jweir watch  {api}  {now}  (window {window}s, every {:?}; Ctrl-C to stop)\n\n{}",
        interval,
        render_table(
            &["ROUTE", "WEIGHT", "ROLE", "RPS", "SUCCESS", "P99"],
            &rows
        )
    )
}

async fn watch(
    api: &ApiClient,
    opts: &CtlOptions,
    route: Option<&str>,
    window: &str,
    interval: Duration,
    count: Option<u64>,
    out: &mut (dyn Write + Send),
) -> Result<(), CtlError> {
    let mut tick = tokio::time::interval(interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut done = 0u64;
    loop {
        if count.is_some_and(|c| done >= c) {
            return Ok(());
        }
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut ctrl_c => {
                if opts.redraw {
                    writeln!(out)?;
                }
                return Ok(());
            }
        }
        done += 1;
        let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        match fetch_stats(api, route, window).await {
            Ok(v) => {
                if opts.json {
                    writeln!(out, "{v}")?;
                } else if opts.redraw {
                    write!(out, "{}", watch_screen(&api.base, &v, &now, interval))?;
                } else {
                    write!(out, "{}", watch_lines(&v, &now))?;
                }
            }
            // A live view keeps going through API restarts; a bad request
            // (unknown route, bad window) will not fix itself.
            Err(
                e @ CtlError::Api {
                    status: 400..=499, ..
                },
            ) => return Err(e),
            Err(e) => {
                if opts.redraw {
                    writeln!(out, "\x1b[H\x1b[2J{now}  error: {e}")?;
                } else {
                    writeln!(out, "{now} error: {e}")?;
                }
            }
        }
        out.flush()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_alignment() {
        let t = render_table(
            &["A", "BB"],
            &[
                vec!["long-cell".into(), "x".into()],
                vec!["y".into(), "".into()],
            ],
        );
        assert_eq!(t, "A          BB\nlong-cell  x\ny\n");
    }

    #[test]
    fn idle_slot_rules() {
        let r = serde_json::json!({"canary": "green", "canaryWeight": 0});
        assert_eq!(idle_slot(&r), Some("green"));
        let r = serde_json::json!({"canary": "green", "canaryWeight": 5});
        assert_eq!(idle_slot(&r), None);
        let r = serde_json::json!({"canary": "green", "mirror": {"weight": 10}});
        assert_eq!(idle_slot(&r), None);
        let r = serde_json::json!({"canary": "green", "mirror": {"enabled": false}});
        assert_eq!(idle_slot(&r), Some("green"));
        let r = serde_json::json!({"primary": "blue"});
        assert_eq!(idle_slot(&r), None);
    }

    #[test]
    fn piped_watch_line() {
        let v = serde_json::json!({"windowSecs": 10, "routes": [{
            "route": "app", "canaryWeight": 10, "canary": "g", "windowSecs": 10,
            "roles": {
                "primary": {"requests": 10, "rps": 1.0, "successRate": 100.0, "p99Ms": 2.5},
                "canary": {"requests": 0, "rps": 0.0, "successRate": null, "p99Ms": null},
                "mirror": {"requests": 0}
            }
        }]});
        assert_eq!(
            watch_lines(&v, "T"),
            "T route=app weight=10 primary: rps=1.0 success=100.00% p99=2.5ms canary: rps=0.0 success=- p99=-\n"
        );
    }

    #[test]
    fn segments_are_encoded() {
        assert_eq!(encode_segment("app-1.x"), "app-1.x");
        assert_eq!(encode_segment("a/b c"), "a%2Fb%20c");
    }
}
