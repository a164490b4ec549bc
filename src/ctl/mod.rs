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
//! `--count` ticks. The canary commands (`weir ctl canaries ...`: list,
//! start/promote/abort/pause/resume and `watch`, the rollout live) are in
//! [`canaries`].
//!
//! Nothing the API says reaches the terminal raw: every command writes through
//! [`Terminal`], which shows each control character escaped (`\u001b`), so a
//! revision, a hook's answer or a member name cannot drive the terminal (an
//! `ESC ] 52` clipboard write, an `ESC [2J`). The one sequence weir itself sends is
//! the redraw of `watch` ([`CLEAR_SCREEN`]).

pub mod canaries;
mod client;
mod deploy;
pub mod live;
mod views;
mod watch;

pub use client::ApiClient;
use client::*;
use deploy::*;
use views::*;
use watch::*;

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

/// Home and clear: the start of every screen `watch` redraws in place.
pub const CLEAR_SCREEN: &str = "\x1b[H\x1b[2J";

/// The writer every command prints through: text passes with its newlines, any other
/// control character is shown escaped ([`crate::text::for_terminal_block`]). With
/// `redraw`, [`CLEAR_SCREEN`] passes where a screen starts: at the start of a write
/// that begins a line.
pub struct Terminal<'a> {
    /// Where the text goes (stdout, or a buffer in tests).
    inner: &'a mut (dyn Write + Send),
    /// Whether [`CLEAR_SCREEN`] may pass (a redrawing `watch` on a terminal).
    redraw: bool,
    /// The last byte written ended a line (or nothing was written yet).
    at_line_start: bool,
}

impl<'a> Terminal<'a> {
    /// A terminal writer over `inner`; `redraw`: the command redraws screens in place.
    pub fn new(inner: &'a mut (dyn Write + Send), redraw: bool) -> Self {
        Terminal {
            inner,
            redraw,
            at_line_start: true,
        }
    }
}

impl Write for Terminal<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let clear = CLEAR_SCREEN.as_bytes();
        let rest = if self.redraw && self.at_line_start && buf.starts_with(clear) {
            self.inner.write_all(clear)?;
            &buf[clear.len()..]
        } else {
            buf
        };
        let text = crate::text::for_terminal_block(&String::from_utf8_lossy(rest));
        self.inner.write_all(text.as_bytes())?;
        self.at_line_start = buf.ends_with(b"\n");
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

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
    /// Set a backend's endpoint list (a rolling update) and wait until it is rolled out.
    Deploy {
        /// Backend name.
        backend: String,
        /// The new endpoint list, `host:port` each.
        endpoints: Vec<String>,
        /// Give up waiting after this long (the update goes on in the server).
        timeout: Duration,
    },
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
    /// The API answered, but what the command waited for did not happen (a rolling
    /// update stalled or timed out).
    Failed(String),
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
            CtlError::Usage(m) | CtlError::Failed(m) => write!(f, "{m}"),
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

/// Runs one command, writing to `out`.
pub async fn run(
    opts: &CtlOptions,
    cmd: &CtlCommand,
    out: &mut (dyn Write + Send),
) -> Result<(), CtlError> {
    let out = &mut Terminal::new(out, opts.redraw && !opts.json);
    let api = ApiClient::new(&opts.api, opts.token.clone())?;
    match cmd {
        CtlCommand::Status => status(&api, opts, out).await,
        CtlCommand::Routes => routes(&api, opts, out).await,
        CtlCommand::Stats { route, window } => {
            let v = fetch_stats(&api, route.as_deref(), window).await?;
            if opts.json {
                writeln!(out, "{}", pretty(&v.json))?;
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
        CtlCommand::Deploy {
            backend,
            endpoints,
            timeout,
        } => deploy(&api, opts, backend, endpoints, *timeout, out).await,
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
                let doc = serde_json::from_value(v).map_err(|e| {
                    CtlError::Transport(format!("unexpected cluster document: {e}"))
                })?;
                write!(out, "{}", crate::cluster::api::render_doc(&doc, now))?;
            }
            Ok(())
        }
    }
}

fn pretty(v: &impl serde::Serialize) -> String {
    // Documents of the API always serialise (string keys, finite numbers).
    serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("(not printable: {e})"))
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
fn idle_slot(route: &crate::wire::table::Route) -> Option<&str> {
    let canary = route.canary.as_deref()?;
    let weight = route.canary_weight.unwrap_or(0);
    let has_match = !route.matches.is_empty();
    let mirror_on = route
        .mirror
        .as_ref()
        .is_some_and(|m| m.enabled != Some(false));
    (weight == 0 && !has_match && !mirror_on).then_some(canary)
}

fn fmt_pct(v: Option<f64>) -> String {
    v.map(|p| format!("{p:.2}%")).unwrap_or_else(|| "-".into())
}

fn fmt_ms(v: Option<f64>) -> String {
    match v {
        Some(ms) if ms >= 1000.0 => format!("{:.2}s", ms / 1000.0),
        Some(ms) => format!("{ms:.1}ms"),
        None => "-".into(),
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
        let route = |v: Value| -> crate::wire::table::Route {
            serde_json::from_value(v).expect("a route document")
        };
        let r = route(
            serde_json::json!({"name": "r", "primary": "blue", "canary": "green", "canaryWeight": 0}),
        );
        assert_eq!(idle_slot(&r), Some("green"));
        let r = route(
            serde_json::json!({"name": "r", "primary": "blue", "canary": "green", "canaryWeight": 5}),
        );
        assert_eq!(idle_slot(&r), None);
        let r = route(
            serde_json::json!({"name": "r", "primary": "blue", "canary": "green", "mirror": {"weight": 10}}),
        );
        assert_eq!(idle_slot(&r), None);
        let r = route(
            serde_json::json!({"name": "r", "primary": "blue", "canary": "green", "mirror": {"enabled": false}}),
        );
        assert_eq!(idle_slot(&r), Some("green"));
        let r = route(serde_json::json!({"name": "r", "primary": "blue"}));
        assert_eq!(idle_slot(&r), None);
    }

    #[test]
    fn piped_watch_line() {
        let v = serde_json::json!({"windowSecs": 10, "routes": [{
            "route": "app", "canaryWeight": 10, "primary": "p", "canary": "g", "windowSecs": 10,
            "roles": {
                "primary": {"requests": 10, "failures": 0, "clientErrors": 0, "rps": 1.0,
                            "successRate": 100.0, "p50Ms": 1.0, "p90Ms": 2.0, "p99Ms": 2.5},
                "canary": {"requests": 0, "failures": 0, "clientErrors": 0, "rps": 0.0,
                           "successRate": null, "p50Ms": null, "p90Ms": null, "p99Ms": null},
                "mirror": {"requests": 0, "failures": 0, "clientErrors": 0, "rps": 0.0,
                           "successRate": null, "p50Ms": null, "p90Ms": null, "p99Ms": null}
            },
            "snapshots": {
                "primary": {"requests": 10, "failures": 0, "windowSecs": 10, "histogram": []},
                "canary": {"requests": 0, "failures": 0, "windowSecs": 10, "histogram": []},
                "mirror": {"requests": 0, "failures": 0, "windowSecs": 10, "histogram": []}
            }
        }]});
        let v = Stats::from_json(v, false).expect("a stats document");
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

    #[test]
    fn the_fleet_lines_show_versions_lag_and_trust() {
        let doc: crate::wire::cluster::ClusterStatus = serde_json::from_value(serde_json::json!({
            "replica": "r0", "apiUrl": "http://127.0.0.1:1", "prefix": "/weir", "etcd": [],
            "algorithm": "hash", "replicas": "auto", "heartbeatMs": 500, "leaseTtlSecs": 2,
            "ready": true, "lease": null, "etcdError": null, "revision": 3,
            "members": [
                {"name": "r0", "apiUrl": "http://127.0.0.1:1", "heartbeatMs": 1, "shards": [0],
                 "tableVersion": 9, "lagMs": 0, "waiting": [], "trusted": true},
                {"name": "r1", "apiUrl": "http://127.0.0.1:2", "heartbeatMs": 1, "shards": [1],
                 "tableVersion": 8, "lagMs": 2500, "waiting": ["app"], "trusted": true},
                {"name": "x", "apiUrl": "http://10.0.0.9:3", "heartbeatMs": 1, "shards": [],
                 "tableVersion": null, "lagMs": 0, "waiting": [], "trusted": false}],
            "shards": [], "canaries": [], "owned": [], "events": [],
            "refusedPeers": [{"name": "x", "apiUrl": "http://10.0.0.9:3", "reason": "outside"}],
            "peersRefusedTotal": 1
        }))
        .unwrap();
        let text = views::fleet_lines(&doc);
        assert!(
            text.starts_with("fleet: 3 members, this replica r0 (1 refused member records)"),
            "{text}"
        );
        assert!(
            text.lines().any(|l| l.starts_with("r1")
                && l.contains(" 8 ")
                && l.contains("2.5s (waited for by app)")),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("x ") && l.contains(" NO ")),
            "{text}"
        );
    }
}
