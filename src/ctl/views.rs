//! `status`, `routes`, `stats` and `set-weight`: requests and their tables.

use super::*;

pub(super) async fn status(
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

pub(super) async fn routes(
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

pub(super) async fn fetch_stats(
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
pub(super) fn stats_by_route(v: &Value) -> Vec<Value> {
    match v.get("routes").and_then(Value::as_array) {
        Some(all) => all.clone(),
        None if v.get("route").is_some() => vec![v.clone()],
        None => Vec::new(),
    }
}

/// `route.roles[role][key]` of a stats document, `null` when absent.
pub(super) fn role_stat(route: &Value, role: &str, key: &str) -> Value {
    route
        .get("roles")
        .and_then(|x| x.get(role))
        .and_then(|x| x.get(key))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Roles shown for a route: primary always, canary when the route has one
/// or it saw traffic, mirror when it saw traffic.
pub(super) fn shown_roles(route: &Value) -> Vec<&'static str> {
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

pub(super) fn stats_table(v: &Value) -> String {
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

pub(super) async fn set_weight(
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
pub(super) fn encode_segment(s: &str) -> String {
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
