//! The demo's clients: traffic through the proxy and what they saw.

use super::*;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::watch;

use crate::rollout::{Phase, RolloutEvent};

pub(super) type DemoClient = Client<HttpConnector, Full<Bytes>>;

/// One GET through the proxy: status, version header, response headers.
pub(super) async fn get(
    client: &DemoClient,
    addr: SocketAddr,
    headers: &[(&str, String)],
) -> Option<(u16, Option<String>, http::HeaderMap)> {
    let mut b = Request::get(format!("http://{addr}/"));
    for (k, v) in headers {
        b = b.header(*k, v.as_str());
    }
    let req = b.body(Full::new(Bytes::new())).ok()?;
    let resp = tokio::time::timeout(Duration::from_secs(5), client.request(req))
        .await
        .ok()?
        .ok()?;
    let (parts, body) = resp.into_parts();
    let _ = body.collect().await;
    let version = parts
        .headers
        .get("x-weir-version")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Some((parts.status.as_u16(), version, parts.headers))
}

/// What the clients saw, counted by the traffic workers.
#[derive(Default)]
pub(super) struct Seen {
    pub(super) v1: AtomicU64,
    pub(super) v2: AtomicU64,
    pub(super) failed: AtomicU64,
    /// Insider requests answered by v2 during the run (A/B).
    pub(super) insiders_on_v2: AtomicU64,
    /// Promise broken: a plain client on v2 during an A/B run, a client on v2 before a
    /// blue/green cutover, a cookie-jar client back from v2 to v1.
    pub(super) violations: AtomicU64,
    /// First violation, for the report.
    pub(super) first_violation: Mutex<Option<String>>,
}

impl Seen {
    pub(super) fn violate(&self, what: String) {
        if self.violations.fetch_add(1, Ordering::Relaxed) == 0 {
            *self
                .first_violation
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(what);
        }
    }
}

/// Where the run is, as the workers need it (set from the event stream, which is
/// published before the route writes of the same step, so it is never late).
#[derive(Default)]
pub(super) struct RunFlags {
    /// Between `Started` and the end of the analysis (A/B: Promoting; affinity: the end
    /// of the run).
    pub(super) analysing: AtomicBool,
    /// Between `Started` and the first event with canary weight > 0 (blue/green).
    pub(super) before_cutover: AtomicBool,
}

pub(super) fn apply_event_flags(scenario: Scenario, flags: &RunFlags, e: &RolloutEvent) {
    if e.reason == "Started" {
        flags.analysing.store(true, Ordering::SeqCst);
        flags.before_cutover.store(true, Ordering::SeqCst);
        return;
    }
    if e.canary_weight > 0 {
        flags.before_cutover.store(false, Ordering::SeqCst);
    }
    let ends = match scenario {
        Scenario::Ab => matches!(
            e.phase,
            Phase::Promoting | Phase::Finalising | Phase::Succeeded | Phase::Failed
        ),
        _ => matches!(e.phase, Phase::Succeeded | Phase::Failed),
    };
    if ends {
        flags.analysing.store(false, Ordering::SeqCst);
        flags.before_cutover.store(false, Ordering::SeqCst);
    }
}

/// Starts the traffic workers; they stop when `stop` turns true.
pub(super) fn spawn_traffic(
    scenario: Scenario,
    proxy: SocketAddr,
    seen: Arc<Seen>,
    flags: Arc<RunFlags>,
    stop: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let client: DemoClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(32)
        .build_http();
    const WORKERS: usize = 4;
    const USERS_PER_WORKER: usize = 6;
    (0..WORKERS)
        .map(|w| {
            let (client, seen, flags, stop) =
                (client.clone(), seen.clone(), flags.clone(), stop.clone());
            tokio::spawn(async move {
                let insider = scenario == Scenario::Ab && w == 0;
                let mut jars = vec![CookieJar::default(); USERS_PER_WORKER];
                let mut last: Vec<Option<String>> = vec![None; USERS_PER_WORKER];
                let mut n = 0usize;
                while !*stop.borrow() {
                    let user = n % USERS_PER_WORKER;
                    n += 1;
                    let mut headers = Vec::new();
                    if insider {
                        headers.push(("x-canary", "insider".to_string()));
                    }
                    if scenario == Scenario::Affinity {
                        if let Some(c) = jars[user].header() {
                            headers.push(("cookie", c));
                        }
                    }
                    let analysing = flags.analysing.load(Ordering::SeqCst);
                    let before_cutover = flags.before_cutover.load(Ordering::SeqCst);
                    match get(&client, proxy, &headers).await {
                        Some((status, version, h)) => {
                            if status >= 500 {
                                seen.failed.fetch_add(1, Ordering::Relaxed);
                            }
                            let on_v2 = version.as_deref() == Some("v2");
                            if on_v2 {
                                seen.v2.fetch_add(1, Ordering::Relaxed);
                            } else {
                                seen.v1.fetch_add(1, Ordering::Relaxed);
                            }
                            match scenario {
                                Scenario::Ab if analysing && flags.analysing.load(Ordering::SeqCst) => {
                                    if insider && on_v2 {
                                        seen.insiders_on_v2.fetch_add(1, Ordering::Relaxed);
                                    } else if !insider && on_v2 {
                                        seen.violate("a request without x-canary: insider reached v2 during the A/B run".into());
                                    }
                                }
                                Scenario::Bluegreen | Scenario::Mirror
                                    if before_cutover
                                        && flags.before_cutover.load(Ordering::SeqCst)
                                        && on_v2 =>
                                {
                                    seen.violate("a client reached v2 before the cutover".into());
                                }
                                Scenario::Affinity => {
                                    jars[user].absorb(&h);
                                    if analysing
                                        && flags.analysing.load(Ordering::SeqCst)
                                        && last[user].as_deref() == Some("v2")
                                        && version.as_deref() == Some("v1")
                                    {
                                        seen.violate(format!(
                                            "client {w}/{user} went back from v2 to v1 during the run"
                                        ));
                                    }
                                    last[user] = if analysing { version } else { None };
                                }
                                _ => {}
                            }
                        }
                        None => {
                            seen.failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(15)).await;
                }
            })
        })
        .collect()
}

pub(super) fn say(t0: Instant, line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "[{:>5.1}s] {line}", t0.elapsed().as_secs_f64());
    let _ = out.flush();
}
