//! The canary endpoints of the control API (DESIGN §8), plugged into the admin router
//! (`control::api::routes`) as [`ROUTES`]; the [`Engine`] is found in
//! [`ApiState::ext`] (put there by `app.rs`).
//!
//! - `GET /api/v1/canaries`: every canary's status, without its events.
//! - `GET /api/v1/canaries/{name}`: phase, weights, iteration, failed checks, the last
//!   check values and the recent events.
//! - `POST /api/v1/canaries/{name}/start` with `{"revision": "v2"}` (and `"force": true`
//!   to skip the check that a `watchRevision` canary's slot reports that revision), and
//!   `POST .../promote|abort|pause|resume` (no body, or `{}`): an operator's command,
//!   applied before the answer (it interrupts a tick in progress). 200 with
//!   `{accepted, message, status}`; 409 `command-refused` when the command does not
//!   apply in the current phase (nothing changed, no event; e.g. promote with no run in
//!   progress), decided by the machine's [`command_refusal`](super::machine::command_refusal).
//!
//! In a fleet (`cluster:`) a command sent to a replica that does not own the canary is
//! forwarded to the owner's control API (once: a forwarded command is marked with
//! `x-weir-forwarded` and never forwarded again) and its answer relayed; with no owner
//! at the moment it answers 503. Reads answer from any replica (a replica that does not
//! drive the canary shows the owner's last stored record, with `owner` and
//! `drivenHere`).

use std::sync::Arc;

use http::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use super::driver::{CanaryStatus, CommandOutcome, Engine, EngineError};
use super::machine::ManualCommand;
use crate::control::api::{
    json_response, ApiError, ApiRequest, ApiResponse, ApiState, Auth, RouteDef,
};
use crate::wire::canary::StartRequest;

/// Longest revision label accepted by `start`.
pub const MAX_REVISION_LEN: usize = 128;

/// The canary routes of the admin API.
pub static ROUTES: &[RouteDef] = &[
    RouteDef {
        method: Method::GET,
        path: "/api/v1/canaries",
        auth: Auth::Token,
        handler: |s, _| Box::pin(async move { list(&s) }),
    },
    RouteDef {
        method: Method::GET,
        path: "/api/v1/canaries/{name}",
        auth: Auth::Token,
        handler: |s, r| Box::pin(async move { get(&s, &r) }),
    },
    RouteDef {
        method: Method::POST,
        path: "/api/v1/canaries/{name}/start",
        auth: Auth::TokenOrPeer,
        handler: |s, r| Box::pin(async move { command(&s, &r, "start").await }),
    },
    RouteDef {
        method: Method::POST,
        path: "/api/v1/canaries/{name}/promote",
        auth: Auth::TokenOrPeer,
        handler: |s, r| Box::pin(async move { command(&s, &r, "promote").await }),
    },
    RouteDef {
        method: Method::POST,
        path: "/api/v1/canaries/{name}/abort",
        auth: Auth::TokenOrPeer,
        handler: |s, r| Box::pin(async move { command(&s, &r, "abort").await }),
    },
    RouteDef {
        method: Method::POST,
        path: "/api/v1/canaries/{name}/pause",
        auth: Auth::TokenOrPeer,
        handler: |s, r| Box::pin(async move { command(&s, &r, "pause").await }),
    },
    RouteDef {
        method: Method::POST,
        path: "/api/v1/canaries/{name}/resume",
        auth: Auth::TokenOrPeer,
        handler: |s, r| Box::pin(async move { command(&s, &r, "resume").await }),
    },
];

fn engine(s: &ApiState) -> Result<Arc<Engine>, ApiError> {
    s.ext.get::<Arc<Engine>>().cloned().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            None,
            "the rollout engine is not running",
        )
    })
}

/// `GET /api/v1/canaries`: every canary, without its events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CanaryList {
    /// One status per configured canary (`events` and `history` empty: see each
    /// canary's own page).
    pub canaries: Vec<CanaryStatus>,
}

/// The answer to `POST /api/v1/canaries/{name}/{command}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandAnswer {
    /// False when the command did not apply in the current phase (nothing changed).
    pub accepted: bool,
    /// The events' messages.
    pub message: String,
    /// The canary after the command.
    pub status: CanaryStatus,
}

impl From<CommandOutcome> for CommandAnswer {
    fn from(o: CommandOutcome) -> Self {
        CommandAnswer {
            accepted: o.accepted,
            message: o.message,
            status: o.status,
        }
    }
}

fn list(s: &ApiState) -> Result<ApiResponse, ApiError> {
    let e = engine(s)?;
    let canaries: Vec<CanaryStatus> = e
        .statuses()
        .into_iter()
        .map(|mut st| {
            st.events.clear();
            st.history.clear();
            st
        })
        .collect();
    Ok(json_response(StatusCode::OK, &CanaryList { canaries }))
}

fn get(s: &ApiState, r: &ApiRequest) -> Result<ApiResponse, ApiError> {
    let name = r.param("name");
    let st = engine(s)?
        .status(name)
        .ok_or_else(|| ApiError::not_found("canary", name))?;
    Ok(json_response(StatusCode::OK, &st))
}

/// Body of the other commands: nothing, or an empty object.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptyBody {}

/// A parsed command: the machine's command, and for `start` whether to skip the
/// revision check.
struct Parsed {
    cmd: ManualCommand,
    force: bool,
}

fn parse_command(r: &ApiRequest, what: &str) -> Result<Parsed, ApiError> {
    match what {
        "start" => {
            if r.body.is_empty() {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "schema",
                    Some("revision"),
                    "start needs a body {\"revision\": \"...\"}",
                ));
            }
            let b: StartRequest = r.json()?;
            let rev = b.revision.trim();
            if rev.is_empty() || rev.len() > MAX_REVISION_LEN || rev.chars().any(|c| c.is_control())
            {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid",
                    Some("revision"),
                    format!("a revision label of 1 to {MAX_REVISION_LEN} printable characters"),
                ));
            }
            Ok(Parsed {
                cmd: ManualCommand::Start {
                    revision: rev.to_string(),
                },
                force: b.force,
            })
        }
        other => {
            if !r.body.is_empty() {
                let _: EmptyBody = r.json()?;
            }
            let cmd = match other {
                "promote" => ManualCommand::Promote,
                "abort" => ManualCommand::Abort,
                "pause" => ManualCommand::Pause,
                _ => ManualCommand::Resume,
            };
            Ok(Parsed { cmd, force: false })
        }
    }
}

/// Marks a command forwarded by another replica of the fleet.
pub const FORWARDED_HEADER: &str = "x-weir-forwarded";

/// Fleet mode: sends the command to the canary's owner and relays its answer. `None`
/// when this replica is the owner (or there is no fleet).
async fn forward(
    s: &ApiState,
    r: &ApiRequest,
    name: &str,
    what: &str,
) -> Option<Result<ApiResponse, ApiError>> {
    let cluster = s.ext.get::<crate::cluster::Cluster>()?;
    if cluster.may_drive(name) {
        return None;
    }
    let unavailable = |reason: String| {
        Some(Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            None,
            reason,
        )))
    };
    if r.headers.contains_key(FORWARDED_HEADER) {
        return Some(Err(ApiError::new(
            StatusCode::CONFLICT,
            "not-owner",
            None,
            format!(
                "replica {} does not own canary {name} (the fleet is moving it); retry",
                cluster.name()
            ),
        )));
    }
    let Some(owner) = cluster.owner_of(name).filter(|o| !o.is_self) else {
        return unavailable(format!(
            "no replica owns canary {name} right now (the fleet is converging, or etcd is unreachable); retry"
        ));
    };
    let url = format!(
        "{}/api/v1/canaries/{}/{what}",
        owner.api_url.trim_end_matches('/'),
        super::dataplane::encode(name)
    );
    let mut headers = vec![
        ("content-type", "application/json".to_string()),
        (crate::control::guard::WEIR_REQUEST_HEADER, "1".to_string()),
        (FORWARDED_HEADER, cluster.name().to_string()),
    ];
    // The peer token, never the admin token: the owner is another process whose
    // address came from etcd.
    if let Some(t) = &s.peer_token {
        headers.push(("authorization", format!("Bearer {t}")));
    }
    tracing::info!(target: "weir::audit", actor = %r.actor(), canary = %name, command = what, owner = %owner.name, "canary command forwarded to the owner");
    let client = super::http::HttpClient::new();
    match client
        .send(
            Method::POST,
            &url,
            &headers,
            Some(r.body.to_vec()),
            super::dataplane::REMOTE_TIMEOUT,
        )
        .await
    {
        Ok(resp) => {
            let status = StatusCode::from_u16(resp.status).unwrap_or(StatusCode::BAD_GATEWAY);
            let body: serde_json::Value = serde_json::from_slice(&resp.body).unwrap_or_else(
                |_| serde_json::json!({"error": "bad-gateway", "reason": resp.snippet(300)}),
            );
            Some(Ok(json_response(status, &body)))
        }
        Err(e) => Some(Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "bad-gateway",
            None,
            format!(
                "the owner of canary {name} ({}, {}) did not answer: {e}",
                owner.name, owner.api_url
            ),
        ))),
    }
}

async fn command(s: &ApiState, r: &ApiRequest, what: &str) -> Result<ApiResponse, ApiError> {
    let name = r.param("name").to_string();
    let e = engine(s)?;
    if e.status(&name).is_none() {
        return Err(ApiError::not_found("canary", &name));
    }
    let Parsed { cmd, force } = parse_command(r, what)?;
    if let Some(answer) = forward(s, r, &name, what).await {
        return answer;
    }
    tracing::info!(target: "weir::audit", actor = %r.actor(), canary = %name, command = what, "canary command");
    let outcome = match cmd {
        ManualCommand::Start { revision } => e.start_run(&name, revision, force).await,
        cmd => e.command(&name, cmd).await,
    };
    match outcome {
        Ok(out) if out.accepted => Ok(json_response(StatusCode::OK, &CommandAnswer::from(out))),
        // The machine's own refusal, for this caller only (no event is published).
        Ok(out) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "command-refused",
            None,
            out.message,
        )),
        Err(EngineError::NotFound(n)) => Err(ApiError::not_found("canary", &n)),
        Err(EngineError::Stopped) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            None,
            "the rollout engine is stopping",
        )),
    }
}
