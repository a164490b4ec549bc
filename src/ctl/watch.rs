//! `watch`: stats polled every interval, one screen on a terminal, lines when piped.

use super::*;

/// One piped line per route: weights, then per role success rate and p99.
pub(super) fn watch_lines(v: &Stats, now: &str) -> String {
    let mut s = String::new();
    for r in &v.routes {
        let weight = r.canary_weight.map_or("-".into(), |w| w.to_string());
        s.push_str(&format!(
            "{now} route={} weight={weight}",
            crate::text::for_terminal(&r.route)
        ));
        for (role, g) in shown_roles(r) {
            s.push_str(&format!(
                " {role}: rps={:.1} success={} p99={}",
                g.rps,
                fmt_pct(g.success_rate),
                fmt_ms(g.p99_ms),
            ));
        }
        s.push('\n');
    }
    s
}

/// The in-place screen of `watch` on a terminal.
pub(super) fn watch_screen(api: &str, v: &Stats, now: &str, interval: Duration) -> String {
    let mut rows = Vec::new();
    for r in &v.routes {
        let weight = r.canary_weight.map_or("-".into(), |w| w.to_string());
        for (i, (role, g)) in shown_roles(r).into_iter().enumerate() {
            rows.push(vec![
                if i == 0 {
                    r.route.clone()
                } else {
                    String::new()
                },
                if i == 0 {
                    weight.clone()
                } else {
                    String::new()
                },
                role.to_string(),
                format!("{:.1}", g.rps),
                fmt_pct(g.success_rate),
                fmt_ms(g.p99_ms),
            ]);
        }
    }
    let window = v.routes.first().map_or(0, |r| r.window_secs);
    format!(
        "{CLEAR_SCREEN}weir watch  {api}  {now}  (window {window}s, every {:?}; Ctrl-C to stop)\n\n{}",
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
                    writeln!(out, "{}", v.json)?;
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
                    writeln!(out, "{CLEAR_SCREEN}{now}  error: {e}")?;
                } else {
                    writeln!(out, "{now} error: {e}")?;
                }
            }
        }
        out.flush()?;
    }
}
