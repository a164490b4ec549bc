//! The endpoint part of the control API, as plain functions over the table store
//! (the admin router in `control/api.rs` calls them):
//!
//! * `PUT /api/v1/backends/{name}/endpoints` with `{"endpoints": ["host:port", ...]}`:
//!   [`put_endpoints`] writes the new list into the routing table through the store,
//!   with the same validation as the config file, so `GET /api/v1/table` stays the
//!   source of truth. The write starts a rolling update (it does not swap the
//!   rotation); its progress shows in [`view`].
//! * `GET /api/v1/backends/{name}`: [`view`] gives the endpoints (in rotation, joining,
//!   draining; ready, ejected, in flight), the update's counts and phase
//!   (`Progressing`, `Complete`, `Stalled`), its deadline and recent events.

use crate::config::ConfigError;
use crate::control::api::{
    json_response, ApiError, ApiRequest, ApiResponse, ApiState, Auth, RouteDef,
};
use crate::dataplane::endpoints::runtime::{EndpointsView, RolloutSnapshot};
use crate::dataplane::store::{TableStore, WriteError};
use http::header::{HeaderValue, ETAG};
use http::{Method, StatusCode};
use serde::{Deserialize, Serialize};

/// The routes this module adds to the admin router (`control::api::routes`).
/// `GET /api/v1/backends/{name}` is the router's own handler, which calls [`view`].
pub static ROUTES: &[RouteDef] = &[RouteDef {
    method: Method::PUT,
    path: "/api/v1/backends/{name}/endpoints",
    auth: Auth::Token,
    handler: |s, r| Box::pin(async move { handle_put(&s, &r) }),
}];

/// `PUT /api/v1/backends/{name}/endpoints`: 202 with [`Accepted`] and the new table
/// version as `ETag`; 400 for a malformed body, 404 for an unknown backend, 409 on an
/// `If-Match` conflict, 422 naming `endpoints[i]` for an invalid list.
fn handle_put(s: &ApiState, r: &ApiRequest) -> Result<ApiResponse, ApiError> {
    let name = r.param("name");
    let body: EndpointsBody = r.json()?;
    let if_match = r.if_match()?;
    match put_endpoints(&s.store, name, body, if_match, &r.actor()) {
        Ok(accepted) => {
            let mut resp = json_response(StatusCode::ACCEPTED, &accepted);
            if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", accepted.version)) {
                resp.headers_mut().insert(ETAG, v);
            }
            Ok(resp)
        }
        Err(PutError::NotFound(name)) => Err(ApiError::not_found("backend", &name)),
        Err(PutError::Conflict { current }) => {
            let mut err = ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                Some("If-Match"),
                format!("the table is at version {current}; re-read it and retry"),
            );
            if let Ok(v) = HeaderValue::from_str(&format!("\"{current}\"")) {
                err.headers.push((ETAG, v));
            }
            Err(err)
        }
        Err(PutError::Invalid(errors)) => Err(ApiError::invalid(&errors, str::to_string)),
    }
}

/// How often a write without `If-Match` is retried when another writer got in between
/// (the store's compare-and-swap answered a conflict).
const MAX_ATTEMPTS: usize = 8;

/// The body of `PUT /api/v1/backends/{name}/endpoints`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointsBody {
    /// The new endpoint list, `host:port` each, no duplicates, at least one.
    pub endpoints: Vec<String>,
}

/// What an accepted write started.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    /// The table version the write produced (the new ETag).
    pub version: u64,
    /// The backend's rolling update right after the write: its generation, the desired
    /// list and the phase (`Complete` at once when the list is what already serves).
    pub rollout: RolloutSnapshot,
}

/// Why a write was refused.
#[derive(Debug)]
pub enum PutError {
    /// No backend of that name in the table (→ 404).
    NotFound(String),
    /// `If-Match` named another table version (→ 409).
    Conflict {
        /// The version that is current.
        current: u64,
    },
    /// The list does not validate (→ 422); paths are relative to the body, e.g.
    /// `endpoints[1]`.
    Invalid(Vec<ConfigError>),
}

/// Writes `body.endpoints` as backend `name`'s list. With `if_match`, only if the table
/// is at that version; without, retried over concurrent writers. `actor` goes to the
/// audit log.
pub fn put_endpoints(
    store: &TableStore,
    name: &str,
    body: EndpointsBody,
    if_match: Option<u64>,
    actor: &str,
) -> Result<Accepted, PutError> {
    // Said here, not left to the table's validation: with a provider configured
    // the store keeps a backend's list when a write gives it none.
    if body.endpoints.is_empty() {
        return Err(PutError::Invalid(vec![ConfigError::new(
            "endpoints",
            "at least one endpoint is required",
        )]));
    }
    let mut attempts = 0;
    loop {
        attempts += 1;
        let current = store.load();
        let mut raw = current.spec.raw.clone();
        let Some(backend) = raw.backends.get_mut(name) else {
            return Err(PutError::NotFound(name.to_string()));
        };
        backend.endpoints = body.endpoints.clone();
        let expected = if_match.unwrap_or(current.version);
        drop(current);
        match store.replace(raw, Some(expected), actor) {
            Ok(snap) => {
                let rollout = store
                    .backend(name)
                    .map(|b| b.rollout())
                    .ok_or_else(|| PutError::NotFound(name.to_string()))?;
                tracing::info!(target: "weir::audit", actor, backend = name, endpoints = ?body.endpoints, version = snap.version, generation = rollout.generation, "backend endpoints set");
                return Ok(Accepted {
                    version: snap.version,
                    rollout,
                });
            }
            Err(WriteError::Conflict { current }) => {
                if if_match.is_some() || attempts >= MAX_ATTEMPTS {
                    return Err(PutError::Conflict { current });
                }
            }
            Err(WriteError::Invalid(errors)) => {
                return Err(PutError::Invalid(relative_errors(name, errors)));
            }
            Err(WriteError::NotFound(what)) => return Err(PutError::NotFound(what)),
        }
    }
}

/// Rewrites `backends.{name}.endpoints[i]` to `endpoints[i]`, the field as the body
/// spells it.
fn relative_errors(name: &str, errors: Vec<ConfigError>) -> Vec<ConfigError> {
    let prefix = format!("backends.{name}.");
    errors
        .into_iter()
        .map(|mut e| {
            if let Some(rest) = e.path.strip_prefix(&prefix) {
                e.path = rest.to_string();
            }
            e
        })
        .collect()
}

/// The endpoint status of backend `name`, or `None` if the table has no such backend.
pub fn view(store: &TableStore, name: &str) -> Option<EndpointsView> {
    if !store.load().spec.backends.contains_key(name) {
        return None;
    }
    store.backend(name).map(|b| b.endpoints_view())
}

/// The `health` and `rollingUpdate` members of `GET /api/v1/backends/{name}`, as JSON
/// (`None` for an unknown backend).
pub fn status_json(
    store: &TableStore,
    name: &str,
) -> (Option<serde_json::Value>, Option<serde_json::Value>) {
    let Some(backend) = store.backend(name) else {
        return (None, None);
    };
    let health = serde_json::to_value(backend.health_view()).ok();
    let rolling = serde_json::to_value(backend.endpoints_view()).ok();
    (health, rolling)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_paths_are_relative_to_the_body() {
        let errors = vec![
            ConfigError::new("backends.app-blue.endpoints[1]", "invalid port"),
            ConfigError::new("backends.app-blue.endpoints", "at least one endpoint"),
            ConfigError::new("routes[0].primary", "unknown backend"),
        ];
        let paths: Vec<String> = relative_errors("app-blue", errors)
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(paths, ["endpoints[1]", "endpoints", "routes[0].primary"]);
    }

    fn store() -> std::sync::Arc<TableStore> {
        let raw: crate::config::raw::RawTable = serde_json::from_value(serde_json::json!({
            "backends": {"b": {"endpoints": ["127.0.0.1:1001", "127.0.0.1:1002"]}},
            "routes": [{"name": "r", "primary": "b"}],
        }))
        .unwrap();
        TableStore::new(crate::config::compile_table(&raw).unwrap())
    }

    fn body(eps: &[&str]) -> EndpointsBody {
        EndpointsBody {
            endpoints: eps.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn a_put_writes_the_table_and_starts_an_update() {
        let store = store();
        let accepted = put_endpoints(&store, "b", body(&["127.0.0.1:2001"]), None, "test").unwrap();
        assert_eq!(accepted.version, 2);
        assert_eq!(accepted.rollout.generation, 2);
        assert_eq!(accepted.rollout.desired, ["127.0.0.1:2001"]);
        let snap = store.load();
        assert_eq!(snap.spec.raw.backends["b"].endpoints, ["127.0.0.1:2001"]);
        // The rotation is the driver's business: unchanged by the write.
        let b = store.backend("b").unwrap();
        assert_eq!(b.addresses(), ["127.0.0.1:1001", "127.0.0.1:1002"]);
        let v = view(&store, "b").unwrap();
        assert_eq!(v.desired_endpoints, ["127.0.0.1:2001"]);
        assert_eq!(v.status.old, 2);
        assert!(view(&store, "nope").is_none());
    }

    #[test]
    fn refused_puts_leave_the_table_alone() {
        let store = store();
        let invalid = put_endpoints(
            &store,
            "b",
            body(&["127.0.0.1:2001", "nope", "127.0.0.1:2001"]),
            None,
            "test",
        );
        let Err(PutError::Invalid(errors)) = invalid else {
            panic!("expected Invalid, got {invalid:?}");
        };
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["endpoints[1]", "endpoints[2]"]);
        assert!(matches!(
            put_endpoints(&store, "b", body(&[]), None, "test"),
            Err(PutError::Invalid(_))
        ));
        assert!(matches!(
            put_endpoints(&store, "x", body(&["127.0.0.1:1"]), None, "test"),
            Err(PutError::NotFound(n)) if n == "x"
        ));
        assert!(matches!(
            put_endpoints(&store, "b", body(&["127.0.0.1:1"]), Some(7), "test"),
            Err(PutError::Conflict { current: 1 })
        ));
        assert_eq!(store.load().version, 1);
        assert_eq!(store.backend("b").unwrap().rollout().generation, 1);
    }

    #[test]
    fn body_rejects_unknown_fields() {
        let ok: EndpointsBody = serde_json::from_str(r#"{"endpoints": ["a:1"]}"#).unwrap();
        assert_eq!(ok.endpoints, ["a:1"]);
        assert!(serde_json::from_str::<EndpointsBody>(r#"{"endpoint": ["a:1"]}"#).is_err());
        assert!(serde_json::from_str::<EndpointsBody>(r#"{"endpoints": "a:1"}"#).is_err());
    }
}
