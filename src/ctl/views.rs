//! `status`, `routes`, `stats` and `set-weight`: requests and their tables.

use super::*;
use crate::stats::Summary;
use crate::wire::probe::Readiness;
use crate::wire::table::{PerRole, Route, RouteStats, StatsDoc, Table};

pub(super) async fn status(
    api: &ApiClient,
    opts: &CtlOptions,
    out: &mut (dyn Write + Send),
) -> Result<(), CtlError> {
    let ready = api.call(Method::GET, "/readyz", None, None).await?;
    let ready_json = ready.json().unwrap_or(Value::Null);
    let table = api.ok(Method::GET, "/api/v1/table", None, None).await?;
    let version = table.version();
    let table_doc: Table = table.parse()?;
    let stats = fetch_stats(api, None, "60s").await?;
    if opts.json {
        let doc = serde_json::json!({
            "api": api.base,
            "ready": ready.status.is_success(),
            "readyz": ready_json,
            "tableVersion": version,
            "table": table_doc,
            "stats": stats.json,
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
            ready
                .parse::<Readiness>()
                .map(|r| r.status)
                .unwrap_or_default()
        },
        version.map_or("?".into(), |v| v.to_string())
    )?;
    let mut rows = Vec::new();
    for r in &table_doc.routes {
        let s = stats.routes.iter().find(|s| s.route == r.name);
        let rate = |role: fn(&PerRole<Summary>) -> &Summary| {
            fmt_pct(s.and_then(|s| role(&s.roles).success_rate))
        };
        rows.push(vec![
            r.name.clone(),
            r.primary.clone(),
            or_dash(r.canary.as_deref().unwrap_or("")),
            r.canary_weight.unwrap_or(0).to_string(),
            idle_slot(r).map_or("-".into(), str::to_string),
            rate(|x| &x.primary),
            rate(|x| &x.canary),
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
    // In a fleet: every member, the table version it applied, how far behind it is.
    let cluster = api.ok(Method::GET, "/api/v1/cluster", None, None).await?;
    if let crate::wire::cluster::ClusterDoc::Enabled(c) = cluster.parse()? {
        write!(out, "\n{}", fleet_lines(&c))?;
    }
    Ok(())
}

/// The fleet part of `weir ctl status`: one line per member.
pub(super) fn fleet_lines(c: &crate::wire::cluster::ClusterStatus) -> String {
    let clean = crate::text::for_terminal;
    let rows: Vec<Vec<String>> = c
        .members
        .iter()
        .map(|m| {
            vec![
                clean(&m.name),
                m.table_version.map_or("-".into(), |v| v.to_string()),
                if m.lag_ms == 0 {
                    "-".into()
                } else {
                    format!(
                        "{:.1}s (waited for by {})",
                        m.lag_ms as f64 / 1000.0,
                        m.waiting.join(",")
                    )
                },
                if m.trusted { "yes" } else { "NO" }.into(),
                clean(&m.api_url),
            ]
        })
        .collect();
    let mut out = format!(
        "fleet: {} members, this replica {} ({} refused member records)\n",
        c.members.len(),
        clean(&c.replica),
        c.refused_peers.len()
    );
    out.push_str(&render_table(
        &["MEMBER", "TABLE", "LAG", "PEER", "API"],
        &rows,
    ));
    out
}

pub(super) async fn routes(
    api: &ApiClient,
    opts: &CtlOptions,
    out: &mut (dyn Write + Send),
) -> Result<(), CtlError> {
    let table: Table = api
        .ok(Method::GET, "/api/v1/table", None, None)
        .await?
        .parse()?;
    if opts.json {
        writeln!(out, "{}", pretty(&table.routes))?;
        return Ok(());
    }
    let mut rows = Vec::new();
    for r in &table.routes {
        let mirror = match &r.mirror {
            None => "-".to_string(),
            Some(m) if m.enabled == Some(false) => "off".into(),
            Some(m) => format!("{}%", m.weight.unwrap_or(100)),
        };
        let affinity = r
            .session_affinity
            .as_ref()
            .map(|a| a.cookie_name.clone())
            .unwrap_or_default();
        rows.push(vec![
            r.name.clone(),
            if r.hosts.is_empty() {
                "*".into()
            } else {
                r.hosts.join(",")
            },
            r.path_prefix.as_deref().unwrap_or("/").to_string(),
            r.primary.clone(),
            or_dash(r.canary.as_deref().unwrap_or("")),
            r.canary_weight.unwrap_or(0).to_string(),
            if r.matches.is_empty() {
                "-".into()
            } else {
                r.matches.len().to_string()
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

/// A stats answer: the API's JSON as it came (for `--json`) and its routes.
pub(super) struct Stats {
    /// The document as the API sent it.
    pub(super) json: Value,
    /// The window of an all-routes answer (`None` for one route's).
    pub(super) window_secs: Option<u64>,
    /// The per-route objects (one route or all).
    pub(super) routes: Vec<RouteStats>,
}

impl Stats {
    /// Reads a stats answer: one route's object when `one` (`?route=`), else
    /// the all-routes document.
    pub(super) fn from_json(json: Value, one: bool) -> Result<Stats, CtlError> {
        let bad =
            |e: serde_json::Error| CtlError::Transport(format!("unexpected stats document: {e}"));
        let (window_secs, routes) = if one {
            let r: RouteStats = serde_json::from_value(json.clone()).map_err(bad)?;
            (None, vec![r])
        } else {
            let d: StatsDoc = serde_json::from_value(json.clone()).map_err(bad)?;
            (Some(d.window_secs), d.routes)
        };
        Ok(Stats {
            json,
            window_secs,
            routes,
        })
    }
}

pub(super) async fn fetch_stats(
    api: &ApiClient,
    route: Option<&str>,
    window: &str,
) -> Result<Stats, CtlError> {
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
    Stats::from_json(r.json()?, route.is_some())
}

/// Roles shown for a route: primary always, canary when the route has one
/// or it saw traffic, mirror when it saw traffic.
pub(super) fn shown_roles(route: &RouteStats) -> Vec<(&'static str, &Summary)> {
    let roles = &route.roles;
    let mut shown = vec![("primary", &roles.primary)];
    if route.canary.is_some() || roles.canary.requests > 0 {
        shown.push(("canary", &roles.canary));
    }
    if roles.mirror.requests > 0 {
        shown.push(("mirror", &roles.mirror));
    }
    shown
}

pub(super) fn stats_table(v: &Stats) -> String {
    let window = v
        .routes
        .first()
        .map(|r| r.window_secs)
        .or(v.window_secs)
        .unwrap_or(0);
    let mut rows = Vec::new();
    for r in &v.routes {
        for (role, g) in shown_roles(r) {
            rows.push(vec![
                r.route.clone(),
                role.to_string(),
                g.requests.to_string(),
                format!("{:.1}", g.rps),
                fmt_pct(g.success_rate),
                fmt_ms(g.p50_ms),
                fmt_ms(g.p90_ms),
                fmt_ms(g.p99_ms),
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
        let old_weight = cur.parse::<Route>()?.canary_weight.unwrap_or(0);
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
