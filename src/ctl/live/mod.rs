//! `weir ctl watch CANARY`: one canary's release, live.
//!
//! It subscribes to `GET /api/v1/events` first (so no event falls between the first
//! read and the stream), then reads `GET /api/v1/canaries/{name}` (phase, step plan,
//! next tick, checks with their thresholds, events) and `GET /api/v1/stats?route=R`
//! (per-side requests, success rate, P99 over `--window`). It refreshes both every
//! `--interval` and at every rollout event of the canary.
//!
//! On a terminal it redraws one screen in place ([`view::screen`]); otherwise it prints
//! plain lines: a state line when the phase, weight, iteration, failed checks or
//! revision change, and a line per event. It ends when a run finishes (promoted,
//! rolled back or cancelled: [`view::run_finished`]; exit 0 either way, the last line
//! says which), after
//! `--count` events, when the stream ends, or on Ctrl-C.

pub mod view;

use super::*;
use crate::ctl::canaries::{event_line, parse_sse};
use crate::rollout::driver::{CanaryStatus, RolloutEvent};
use http::header::ACCEPT;
use http_body_util::Empty;
use view::*;

/// How `watch CANARY` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveOptions {
    /// The canary.
    pub name: String,
    /// Stop after this many events.
    pub count: Option<u64>,
    /// Time between two refreshes.
    pub interval: Duration,
    /// Stats window, e.g. `60s`.
    pub window: String,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

async fn read_status(api: &ApiClient, name: &str) -> Result<CanaryStatus, CtlError> {
    api.ok(
        Method::GET,
        &format!("/api/v1/canaries/{}", encode_segment(name)),
        None,
        None,
    )
    .await?
    .parse()
}

/// Re-reads the status and the stats into `v`. A failed stats read keeps the view
/// going (with the reason shown); a failed status read is returned.
async fn refresh(api: &ApiClient, o: &LiveOptions, v: &mut View) -> Result<(), CtlError> {
    v.status = read_status(api, &o.name).await?;
    match fetch_stats(api, Some(&v.status.route), &o.window).await {
        Ok(s) => {
            v.stats = s.routes.into_iter().next();
            v.error = None;
        }
        Err(e) => v.error = Some(format!("stats: {e}")),
    }
    Ok(())
}

/// Opens the server-sent event stream.
async fn subscribe(
    api: &ApiClient,
    token: Option<&str>,
) -> Result<hyper::body::Incoming, CtlError> {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build(connector);
    let mut b = Request::builder()
        .method(Method::GET)
        .uri(format!("{}/api/v1/events", api.base))
        .header(ACCEPT, "text/event-stream");
    if let Some(tok) = token {
        b = b.header(AUTHORIZATION, format!("Bearer {tok}"));
    }
    let req = b
        .body(Empty::new())
        .map_err(|e| CtlError::Usage(format!("bad request: {e}")))?;
    let resp = client.request(req).await.map_err(|e| {
        CtlError::Transport(format!(
            "cannot reach the weir API at {}: {}",
            api.base,
            error_chain(&e)
        ))
    })?;
    if !resp.status().is_success() {
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let reason = serde_json::from_slice::<crate::wire::error::ErrorBody>(&body)
            .map(|b| b.reason)
            .unwrap_or_else(|_| "the event stream was refused".into());
        return Err(CtlError::Api {
            status,
            reason,
            field: None,
        });
    }
    Ok(resp.into_body())
}

/// Follows one canary until its run finishes (or `count` events, or Ctrl-C).
pub async fn watch(
    opts: &CtlOptions,
    o: &LiveOptions,
    out: &mut (dyn Write + Send),
) -> Result<(), CtlError> {
    let out = &mut Terminal::new(out, opts.redraw && !opts.json);
    let api = ApiClient::new(&opts.api, opts.token.clone())?;
    let mut body = subscribe(&api, opts.token.as_deref()).await?;
    let status = read_status(&api, &o.name).await?;
    let mut v = View {
        events: Vec::new(),
        stats: None,
        error: None,
        status,
    };
    for e in v.status.events.clone() {
        v.push_event(e);
    }
    let _ = refresh(&api, o, &mut v).await;
    let mut key = state_key(&v.status);
    if opts.json {
        writeln!(out, "{}", pretty_line(&v.status))?;
    } else if opts.redraw {
        write!(out, "{}", screen(&api.base, &v, &o.window, now_ms()))?;
    } else {
        writeln!(out, "{}", state_line(&v, now_ms()))?;
    }
    out.flush()?;
    let mut tick = tokio::time::interval(o.interval.max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut buf = String::new();
    let mut printed = 0u64;
    loop {
        if o.count.is_some_and(|c| printed >= c) {
            return Ok(());
        }
        let frame = tokio::select! {
            f = body.frame() => f,
            _ = tick.tick() => {
                match refresh(&api, o, &mut v).await {
                    Ok(()) => {}
                    // An unknown canary will not come back; an API restart may.
                    Err(e @ CtlError::Api { status: 404, .. }) => return Err(e),
                    Err(e) => v.error = Some(e.to_string()),
                }
                let now = now_ms();
                if opts.redraw && !opts.json {
                    write!(out, "{}", screen(&api.base, &v, &o.window, now))?;
                } else if !opts.json && state_key(&v.status) != key {
                    key = state_key(&v.status);
                    writeln!(out, "{}", state_line(&v, now))?;
                }
                out.flush()?;
                continue;
            }
            _ = &mut ctrl_c => {
                if opts.redraw {
                    writeln!(out)?;
                }
                return Ok(());
            }
        };
        let Some(frame) = frame else {
            return Err(CtlError::Transport(
                "the API closed the event stream".into(),
            ));
        };
        let frame = frame.map_err(|e| CtlError::Transport(format!("event stream: {e}")))?;
        let Some(data) = frame.data_ref() else {
            continue;
        };
        buf.push_str(&String::from_utf8_lossy(data));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (kind, data) = parse_sse(&block);
            if kind.as_deref() != Some("rollout") {
                continue;
            }
            let e = match serde_json::from_str::<RolloutEvent>(&data) {
                Ok(e) => e,
                Err(err) => {
                    writeln!(out, "error: unexpected rollout event: {err}: {data}")?;
                    continue;
                }
            };
            if e.canary != o.name {
                continue;
            }
            let finished = run_finished(&e);
            v.push_event(e.clone());
            if let Err(err) = refresh(&api, o, &mut v).await {
                v.error = Some(err.to_string());
            }
            let now = now_ms();
            if opts.json {
                writeln!(out, "{data}")?;
            } else if opts.redraw {
                write!(out, "{}", screen(&api.base, &v, &o.window, now))?;
            } else {
                writeln!(out, "{}", event_line(&e))?;
                if state_key(&v.status) != key {
                    key = state_key(&v.status);
                    writeln!(out, "{}", state_line(&v, now))?;
                }
            }
            printed += 1;
            if finished {
                if !opts.json {
                    // The event's phase, not the refreshed status: a next run may
                    // already have started.
                    let mut last = v.status.clone();
                    last.phase = e.phase;
                    last.revision = e.revision.clone();
                    writeln!(out, "{}", finished_line(&last))?;
                }
                out.flush()?;
                return Ok(());
            }
            if o.count.is_some_and(|c| printed >= c) {
                out.flush()?;
                return Ok(());
            }
        }
        out.flush()?;
    }
}

/// `weir ctl watch CANARY` as a command: its exit code (0 ok, 2 bad local input, 1
/// anything else, the reason on stderr).
pub fn main(opts: &CtlOptions, o: &LiveOptions) -> std::process::ExitCode {
    use std::process::ExitCode;
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(watch(opts, o, &mut std::io::stdout())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", crate::text::for_terminal_block(&e.to_string()));
            match e {
                CtlError::Usage(_) => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

fn pretty_line(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| format!("(not printable: {e})"))
}
