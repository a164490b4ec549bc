//! `watch`: stats polled every interval, one screen on a terminal, lines when piped.

use super::*;

/// One piped line per route: weights, then per role success rate and p99.
pub(super) fn watch_lines(v: &Value, now: &str) -> String {
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
pub(super) fn watch_screen(api: &str, v: &Value, now: &str, interval: Duration) -> String {
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

pub(super) async fn watch(
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
