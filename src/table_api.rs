//! The routing-table feature of the admin API: the table, its routes, the
//! backends they send to and the per-route stats (DESIGN §8). Registered by
//! `app::api_routes`; the framework (`control::api`) knows nothing of it.

use crate::config::raw::{RawRoute, RawTable};
use crate::config::LoadBalancer;
use crate::control::api::{
    audit_refused, from_value, json_response, merge_patch, with_etag, write_error, ApiError,
    ApiRequest, ApiResponse, ApiState, Auth, RouteDef,
};
use crate::dataplane::store::STATS_CAPACITY_SECS;
use crate::proxy::service::ProxyShared;
use crate::stats::Role;
use crate::wire::table::{
    BackendStatus, BackendUse, EndpointStatus, PerRole, RouteStats, StatsDoc, WriteResult,
};
use http::{Method, StatusCode};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Default stats window of `GET /api/v1/stats`.
pub const DEFAULT_STATS_WINDOW_SECS: u64 = 60;

/// The routes of this feature.
pub static ROUTES: &[RouteDef] = &[
    RouteDef {
        method: Method::GET,
        path: "/api/v1/table",
        auth: Auth::Token,
        handler: |s, _| Box::pin(async move { get_table(&s) }),
    },
    RouteDef {
        method: Method::PUT,
        path: "/api/v1/table",
        auth: Auth::Token,
        handler: |s, r| Box::pin(async move { put_table(&s, &r) }),
    },
    RouteDef {
        method: Method::GET,
        path: "/api/v1/routes/{name}",
        auth: Auth::TokenOrPeer,
        handler: |s, r| Box::pin(async move { get_route(&s, &r) }),
    },
    RouteDef {
        method: Method::PATCH,
        path: "/api/v1/routes/{name}",
        auth: Auth::TokenOrPeer,
        handler: |s, r| Box::pin(async move { patch_route(&s, &r) }),
    },
    RouteDef {
        method: Method::GET,
        path: "/api/v1/backends/{name}",
        auth: Auth::TokenOrPeer,
        handler: |s, r| Box::pin(async move { get_backend(&s, &r) }),
    },
    RouteDef {
        method: Method::GET,
        path: "/api/v1/stats",
        auth: Auth::TokenOrPeer,
        handler: |s, r| Box::pin(async move { get_stats(&s, &r) }),
    },
];

/// The stats window's clock is the proxy's (seconds since it started), put
/// in [`ApiState::ext`] by `app`.
fn stats_clock(s: &ApiState) -> Result<&Arc<ProxyShared>, ApiError> {
    s.ext.get::<Arc<ProxyShared>>().ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            None,
            "the proxy's stats clock is not wired into the admin API",
        )
    })
}

fn get_table(s: &ApiState) -> Result<ApiResponse, ApiError> {
    let snap = s.store.load();
    Ok(with_etag(
        json_response(StatusCode::OK, &snap.spec.raw),
        snap.version,
    ))
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
                role: "primary".into(),
                canary_weight: route.canary_weight,
            });
        }
        if route.canary.as_deref() == Some(name) {
            routes.push(BackendUse {
                route: route.name.clone(),
                role: "canary".into(),
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
        }
        .into(),
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

/// `maxAge`: how far back a window may reach, in ms (`1500ms`, `30s`); none: no limit.
fn parse_max_age(s: Option<&str>) -> Result<Option<u64>, ApiError> {
    let Some(s) = s else { return Ok(None) };
    crate::config::parse_duration(s)
        .map(|d| Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad-request", Some("maxAge"), e))
}

fn get_stats(s: &ApiState, r: &ApiRequest) -> Result<ApiResponse, ApiError> {
    let window = parse_window(r.query_param("window").as_deref())?;
    let max_age = parse_max_age(r.query_param("maxAge").as_deref())?;
    let now_ms = stats_clock(s)?.now_ms(Instant::now());
    let now = now_ms / 1000;
    // A window cut at maxAge holds only the whole seconds that began within it.
    let window = max_age.map_or(window, |age| {
        crate::stats::seconds_within(now_ms, age, window)
    });
    let snap = s.store.load();
    let view = |name: &str| -> Option<RouteStats> {
        let route = snap.spec.routing.routes.iter().find(|x| x.name == name);
        let stats = match snap.spec.routing.index_of(name) {
            Some(i) => snap.routes.get(i).map(|rt| rt.stats.clone()),
            None => s.store.route_stats(name),
        }?;
        let snapshots = PerRole {
            canary: stats.snapshot(Role::Canary, now, window),
            mirror: stats.snapshot(Role::Mirror, now, window),
            primary: stats.snapshot(Role::Primary, now, window),
        };
        let roles = PerRole {
            canary: snapshots.canary.summary(),
            mirror: snapshots.mirror.summary(),
            primary: snapshots.primary.summary(),
        };
        let covered = snapshots.mirror.window_secs;
        Some(RouteStats {
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
            let all: Vec<RouteStats> = snap
                .spec
                .routing
                .routes
                .iter()
                .filter_map(|x| view(&x.name))
                .collect();
            json_response(
                StatusCode::OK,
                &StatsDoc {
                    window_secs: window,
                    routes: all,
                },
            )
        }
    };
    Ok(with_etag(resp, snap.version))
}

#[cfg(test)]
mod tests {
    use super::*;

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
