//! Traffic through the proxy and what it saw: the generator the demo and the end-to-end
//! tests share ([`Traffic`]), and the demo's own clients on it.

use super::*;
use std::collections::BTreeMap;
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

/// Where the run is, as the workers need it, set from the event stream. A step's events
/// are published after its route writes, so a flag can lag the traffic by that much:
/// it only bounds promises whose traffic change comes a tick after the event that ends
/// them (an A/B run ends at Promoting, the swap comes with Finalising). The blue/green
/// cut-over, written in the very step of its event, is read from the route table
/// instead ([`clients_reach_green`]).
#[derive(Default)]
pub(super) struct RunFlags {
    /// Between `Started` and the end of the analysis (A/B: Promoting; affinity: the end
    /// of the run).
    pub(super) analysing: AtomicBool,
}

pub(super) fn apply_event_flags(scenario: Scenario, flags: &RunFlags, e: &RolloutEvent) {
    if e.reason == "Started" {
        flags.analysing.store(true, Ordering::SeqCst);
        return;
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
    }
}

/// Whether the route table sends clients to the `app-green` slot (where v2 is
/// deployed): as its primary, or as a canary with a weight. Read on both sides of a
/// request, it tells whether a client could have been sent there.
fn clients_reach_green(store: &TableStore) -> bool {
    let snap = store.load();
    snap.spec
        .raw
        .routes
        .iter()
        .find(|r| r.name == "app")
        .is_some_and(|r| {
            r.primary == "app-green"
                || (r.canary.as_deref() == Some("app-green") && r.canary_weight.unwrap_or(0) > 0)
        })
}

/// The demo's client for one worker: an insider on the A/B run, cookie jars for the
/// affinity run, and the promise checks against the run flags or the route table.
struct DemoWorker {
    scenario: Scenario,
    worker: usize,
    insider: bool,
    seen: Arc<Seen>,
    flags: Arc<RunFlags>,
    /// The proxy's table, for the blue/green promise.
    store: Arc<TableStore>,
    jars: Vec<CookieJar>,
    last: Vec<Option<String>>,
    /// The flags read just before the request, for the checks after it.
    analysing: bool,
    /// Whether clients could reach the green slot just before the request.
    green_open: bool,
    user: usize,
}

const USERS_PER_WORKER: usize = 6;

impl Worker for DemoWorker {
    fn headers(&mut self, n: u64) -> Vec<(String, String)> {
        self.user = (n as usize) % USERS_PER_WORKER;
        let mut headers = Vec::new();
        if self.insider {
            headers.push(("x-canary".to_string(), "insider".to_string()));
        }
        if self.scenario == Scenario::Affinity {
            if let Some(c) = self.jars[self.user].header() {
                headers.push(("cookie".to_string(), c));
            }
        }
        self.analysing = self.flags.analysing.load(Ordering::SeqCst);
        if matches!(self.scenario, Scenario::Bluegreen | Scenario::Mirror) {
            self.green_open = clients_reach_green(&self.store);
        }
        headers
    }

    fn saw(&mut self, answer: Option<&Answer>) {
        let (seen, flags, user, w) = (&self.seen, &self.flags, self.user, self.worker);
        let Some(a) = answer else {
            seen.failed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if a.status >= 500 {
            seen.failed.fetch_add(1, Ordering::Relaxed);
        }
        let version = a.version.clone();
        let on_v2 = version.as_deref() == Some("v2");
        if on_v2 {
            seen.v2.fetch_add(1, Ordering::Relaxed);
        } else {
            seen.v1.fetch_add(1, Ordering::Relaxed);
        }
        let (analysing, insider) = (self.analysing, self.insider);
        match self.scenario {
            Scenario::Ab if analysing && flags.analysing.load(Ordering::SeqCst) => {
                if insider && on_v2 {
                    seen.insiders_on_v2.fetch_add(1, Ordering::Relaxed);
                } else if !insider && on_v2 {
                    seen.violate(
                        "a request without x-canary: insider reached v2 during the A/B run".into(),
                    );
                }
            }
            Scenario::Bluegreen | Scenario::Mirror
                if on_v2 && !self.green_open && !clients_reach_green(&self.store) =>
            {
                seen.violate("a client reached v2 before the cutover".into());
            }
            Scenario::Affinity => {
                self.jars[user].absorb(&a.headers);
                if analysing
                    && flags.analysing.load(Ordering::SeqCst)
                    && self.last[user].as_deref() == Some("v2")
                    && version.as_deref() == Some("v1")
                {
                    seen.violate(format!(
                        "client {w}/{user} went back from v2 to v1 during the run"
                    ));
                }
                self.last[user] = if analysing { version } else { None };
            }
            _ => {}
        }
    }
}

/// Starts the demo's traffic: four workers of six users each, one request every 15 ms.
pub(super) fn spawn_traffic(
    scenario: Scenario,
    proxy: SocketAddr,
    store: Arc<TableStore>,
    seen: Arc<Seen>,
    flags: Arc<RunFlags>,
) -> Traffic {
    let spec = TrafficSpec {
        workers: 4,
        pause: Duration::from_millis(15),
        ..TrafficSpec::new(proxy)
    };
    Traffic::start_with(spec, move |w| DemoWorker {
        scenario,
        worker: w,
        insider: scenario == Scenario::Ab && w == 0,
        seen: seen.clone(),
        flags: flags.clone(),
        store: store.clone(),
        jars: vec![CookieJar::default(); USERS_PER_WORKER],
        last: vec![None; USERS_PER_WORKER],
        analysing: false,
        green_open: false,
        user: 0,
    })
}

/// What to send: where, with which headers, how many workers, how fast, how many at most.
#[derive(Clone, Debug)]
pub struct TrafficSpec {
    /// The proxy's listener.
    pub addr: SocketAddr,
    /// The request path of every GET.
    pub path: String,
    /// `Host` headers taken in turn, one per request (empty: the address is the host),
    /// so one generator can cover several routes.
    pub hosts: Vec<String>,
    /// Headers on every request.
    pub headers: Vec<(String, String)>,
    /// Concurrent client loops.
    pub workers: usize,
    /// Pause after each answer, so the load is steady and leaves the machine some room.
    pub pause: Duration,
    /// Per-request timeout: a hung exchange counts as failed instead of stalling a worker.
    pub timeout: Duration,
    /// Requests per worker at most: a generator nobody stops still ends.
    pub max_per_worker: u64,
}

impl TrafficSpec {
    /// One worker sending `GET /` to `addr` every few milliseconds.
    pub fn new(addr: SocketAddr) -> TrafficSpec {
        TrafficSpec {
            addr,
            path: "/".to_string(),
            hosts: Vec::new(),
            headers: Vec::new(),
            workers: 1,
            pause: Duration::from_millis(4),
            timeout: Duration::from_secs(5),
            max_per_worker: 200_000,
        }
    }

    /// Adds a header sent on every request.
    pub fn header(mut self, name: &str, value: &str) -> TrafficSpec {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// `Host` headers to take in turn.
    pub fn hosts<S: Into<String>>(mut self, hosts: impl IntoIterator<Item = S>) -> TrafficSpec {
        self.hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    pub fn workers(mut self, workers: usize) -> TrafficSpec {
        self.workers = workers;
        self
    }

    pub fn pause(mut self, pause: Duration) -> TrafficSpec {
        self.pause = pause;
        self
    }

    /// Starts plain workers with this spec.
    pub fn start(self) -> Traffic {
        Traffic::start(self)
    }
}

/// One answer as a worker saw it.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The `x-weir-version` header, if any.
    pub version: Option<String>,
    /// Every response header (the demo's cookie jars read `set-cookie`).
    pub headers: http::HeaderMap,
    /// The whole body (empty if it could not be read in time).
    pub body: Bytes,
}

/// A worker's own state between requests (cookie jars, checks on what it saw).
pub trait Worker: Send + 'static {
    /// Headers for the `n`th request of this worker, added to the spec's.
    fn headers(&mut self, _n: u64) -> Vec<(String, String)> {
        Vec::new()
    }
    /// What came back (`None`: no answer: error or timeout).
    fn saw(&mut self, _answer: Option<&Answer>) {}
}

/// A worker that only sends.
struct Plain;
impl Worker for Plain {}

/// What every worker saw, counted.
#[derive(Debug, Default)]
pub struct Tally {
    /// Requests sent (counted before each is sent, so a waiting test sees progress).
    pub sent: AtomicU64,
    /// Exchanges over: answered, failed or timed out.
    pub done: AtomicU64,
    /// Answers by status code.
    pub by_status: Mutex<BTreeMap<u16, u64>>,
    /// Answers by `x-weir-version` (`-` when absent).
    pub by_version: Mutex<BTreeMap<String, u64>>,
    /// Every answer other than a 200 and every failed exchange, described.
    pub failures: Mutex<Vec<String>>,
}

impl Tally {
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }
    pub fn failures(&self) -> Vec<String> {
        lock(&self.failures).clone()
    }
    pub fn by_version(&self) -> BTreeMap<String, u64> {
        lock(&self.by_version).clone()
    }
    pub fn by_status(&self) -> BTreeMap<u16, u64> {
        lock(&self.by_status).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A small, bounded traffic generator: client loops through a proxy until stopped,
/// counting what came back. Used by the demo and the end-to-end tests.
pub struct Traffic {
    stop: watch::Sender<bool>,
    tally: Arc<Tally>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Traffic {
    /// Starts `spec.workers` plain client loops.
    pub fn start(spec: TrafficSpec) -> Traffic {
        Traffic::start_with(spec, |_| Plain)
    }

    /// Starts the client loops, worker `w` with the state `worker(w)` makes.
    pub fn start_with<W: Worker, F: FnMut(usize) -> W>(
        spec: TrafficSpec,
        mut worker: F,
    ) -> Traffic {
        let (stop, rx) = watch::channel(false);
        let tally = Arc::new(Tally::default());
        let client: DemoClient = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(32)
            .build_http();
        let spec = Arc::new(spec);
        let tasks = (0..spec.workers)
            .map(|w| {
                let mut state = worker(w);
                let (client, tally, spec, rx) =
                    (client.clone(), tally.clone(), spec.clone(), rx.clone());
                tokio::spawn(async move {
                    for n in 0..spec.max_per_worker {
                        if *rx.borrow() {
                            return;
                        }
                        let mut b = Request::get(format!("http://{}{}", spec.addr, spec.path));
                        if !spec.hosts.is_empty() {
                            let i = (n as usize * spec.workers + w) % spec.hosts.len();
                            b = b.header("host", spec.hosts[i].as_str());
                        }
                        for (k, v) in spec.headers.iter().chain(&state.headers(n)) {
                            b = b.header(k.as_str(), v.as_str());
                        }
                        tally.sent.fetch_add(1, Ordering::Relaxed);
                        let answer = match b.body(Full::new(Bytes::new())) {
                            Ok(req) => exchange(&client, req, spec.timeout).await,
                            Err(e) => Err(format!("request: {e}")),
                        };
                        match &answer {
                            Ok(a) => {
                                let v = a.version.clone().unwrap_or_else(|| "-".to_string());
                                if a.status != 200 {
                                    lock(&tally.failures).push(format!("{} from {v}", a.status));
                                }
                                *lock(&tally.by_status).entry(a.status).or_default() += 1;
                                *lock(&tally.by_version).entry(v).or_default() += 1;
                            }
                            Err(e) => lock(&tally.failures).push(e.clone()),
                        }
                        tally.done.fetch_add(1, Ordering::Relaxed);
                        state.saw(answer.as_ref().ok());
                        tokio::time::sleep(spec.pause).await;
                    }
                })
            })
            .collect();
        Traffic { stop, tally, tasks }
    }

    /// The counts so far.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Stops every worker after its current request and waits for all of them.
    pub async fn stop(self) -> Arc<Tally> {
        let _ = self.stop.send(true);
        for t in self.tasks {
            if let Err(e) = t.await {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
        self.tally
    }
}

async fn exchange(
    client: &DemoClient,
    req: Request<Full<Bytes>>,
    timeout: Duration,
) -> Result<Answer, String> {
    let resp = match tokio::time::timeout(timeout, client.request(req)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Err(format!("request error: {e}")),
        Err(_) => return Err("timed out".to_string()),
    };
    let (parts, body) = resp.into_parts();
    let body = match tokio::time::timeout(timeout, body.collect()).await {
        Ok(Ok(b)) => b.to_bytes(),
        _ => Bytes::new(),
    };
    let version = parts
        .headers
        .get("x-weir-version")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok(Answer {
        status: parts.status.as_u16(),
        version,
        headers: parts.headers,
        body,
    })
}

pub(super) fn say(t0: Instant, line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "[{:>5.1}s] {line}", t0.elapsed().as_secs_f64());
    let _ = out.flush();
}
