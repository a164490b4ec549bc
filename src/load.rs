//! `weir load URL`: a small, bounded load generator for demos and quick starts (a
//! release's analysis needs traffic), not a benchmark tool (`benches/` uses wrk, oha
//! and h2load).
//!
//! Open loop: requests start at `--rate` per second whatever the answers, as a steady
//! stream of users would send them, with at most `--concurrency` in flight (a request
//! due while all are busy is counted as `skipped`, not queued, so a slow target shows
//! as such instead of as a lower rate). Every second it prints what completed in that
//! second: sent, 2xx, 4xx, 5xx, transport errors, p50/p99 latency and, when the target
//! answers with `x-weir-version` (as `weir echo` does), how many answers each version
//! gave; then one total line. The bounds ([`MAX_RATE`], [`MAX_DURATION`],
//! [`MAX_CONCURRENCY`]) keep a typo from turning it into a flood.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, COOKIE};
use http::{Request, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::stats::Histogram;

/// Highest `--rate` (requests per second).
pub const MAX_RATE: u32 = 10_000;
/// Longest `--duration`.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
/// Highest `--concurrency`.
pub const MAX_CONCURRENCY: usize = 1024;
/// A request without its answer in this time counts as an error.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the pacer looks at the clock.
const PACE: Duration = Duration::from_millis(5);

/// A validated load run.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// `http://host:port/path`.
    pub url: Uri,
    /// Requests started per second.
    pub rate: u32,
    /// How long to send.
    pub duration: Duration,
    /// Requests in flight at most.
    pub concurrency: usize,
    /// Extra request headers (`-H 'name: value'`, `--cookie`).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl LoadOptions {
    /// Checks the command line's values; each error names its flag.
    pub fn new(
        url: &str,
        rate: u32,
        duration: Duration,
        concurrency: usize,
        headers: &[String],
        cookie: Option<&str>,
    ) -> Result<LoadOptions, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("URL {url:?} is not a URL: {e}"))?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            return Err(format!(
                "URL {url:?}: expected http://host:port/path (https is not supported)"
            ));
        }
        if rate == 0 || rate > MAX_RATE {
            return Err(format!("--rate must be 1..={MAX_RATE} (got {rate})"));
        }
        if duration.is_zero() || duration > MAX_DURATION {
            return Err(format!(
                "--duration must be more than 0 and at most {} (got {})",
                humantime::format_duration(MAX_DURATION),
                humantime::format_duration(duration)
            ));
        }
        if concurrency == 0 || concurrency > MAX_CONCURRENCY {
            return Err(format!(
                "--concurrency must be 1..={MAX_CONCURRENCY} (got {concurrency})"
            ));
        }
        let mut parsed = Vec::new();
        for h in headers {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| format!("-H {h:?}: expected 'name: value'"))?;
            let name = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|e| format!("-H {h:?}: bad header name: {e}"))?;
            let value = HeaderValue::from_str(value.trim())
                .map_err(|e| format!("-H {h:?}: bad header value: {e}"))?;
            parsed.push((name, value));
        }
        if let Some(c) = cookie {
            let value = HeaderValue::from_str(c).map_err(|e| format!("--cookie {c:?}: {e}"))?;
            parsed.push((COOKIE, value));
        }
        Ok(LoadOptions {
            url: uri,
            rate,
            duration,
            concurrency,
            headers: parsed,
        })
    }
}

/// Counts over one second or the whole run.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Requests started.
    pub sent: u64,
    /// Requests due while `concurrency` were in flight: not sent.
    pub skipped: u64,
    /// Answers by status class: 2xx.
    pub ok: u64,
    /// 3xx answers.
    pub redirects: u64,
    /// 4xx answers.
    pub client_errors: u64,
    /// 5xx answers.
    pub server_errors: u64,
    /// No answer: connect failure, reset, timeout.
    pub errors: u64,
    /// Answers by `x-weir-version`.
    pub versions: BTreeMap<String, u64>,
    /// Latency of the answers (µs).
    pub latency: Histogram,
}

impl Tally {
    /// Records one finished request: its status (`None`: no answer), version and
    /// latency.
    pub fn record(&mut self, status: Option<u16>, version: Option<String>, latency_us: u64) {
        match status {
            None => {
                self.errors += 1;
                return;
            }
            Some(200..=299) => self.ok += 1,
            Some(300..=399) => self.redirects += 1,
            Some(400..=499) => self.client_errors += 1,
            Some(_) => self.server_errors += 1,
        }
        if let Some(v) = version {
            *self.versions.entry(v).or_default() += 1;
        }
        self.latency.record(latency_us);
    }

    /// Adds another tally into this one.
    pub fn merge(&mut self, other: &Tally) {
        self.sent += other.sent;
        self.skipped += other.skipped;
        self.ok += other.ok;
        self.redirects += other.redirects;
        self.client_errors += other.client_errors;
        self.server_errors += other.server_errors;
        self.errors += other.errors;
        for (v, n) in &other.versions {
            *self.versions.entry(v.clone()).or_default() += n;
        }
        self.latency.merge(&other.latency);
    }

    /// `sent 50 ok 49 3xx 0 4xx 0 5xx 1 errors 0 skipped 0 p50 1.2ms p99 3.4ms versions v1=45 v2=5`.
    pub fn line(&self) -> String {
        let ms = |q: f64| {
            self.latency
                .quantile(q)
                .map_or("-".to_string(), |us| format!("{:.1}ms", us as f64 / 1000.0))
        };
        let mut l = format!(
            "sent {} ok {} 3xx {} 4xx {} 5xx {} errors {} skipped {} p50 {} p99 {}",
            self.sent,
            self.ok,
            self.redirects,
            self.client_errors,
            self.server_errors,
            self.errors,
            self.skipped,
            ms(0.5),
            ms(0.99)
        );
        if !self.versions.is_empty() {
            let v: Vec<String> = self
                .versions
                .iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            l.push_str(&format!(" versions {}", v.join(" ")));
        }
        l
    }
}

type LoadClient = Client<HttpConnector, Empty<Bytes>>;

/// Sends one request and records its outcome into `current`.
async fn one(client: LoadClient, opts: Arc<LoadOptions>, current: Arc<Mutex<Tally>>) {
    let mut b = Request::builder().uri(opts.url.clone());
    for (n, v) in &opts.headers {
        b = b.header(n, v);
    }
    let Ok(req) = b.body(Empty::new()) else {
        lock(&current).record(None, None, 0);
        return;
    };
    let start = Instant::now();
    let answer = tokio::time::timeout(REQUEST_TIMEOUT, async {
        let resp = client.request(req).await.ok()?;
        let status = resp.status().as_u16();
        let version = resp
            .headers()
            .get("x-weir-version")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        // The whole answer is part of the exchange (and frees the connection).
        resp.into_body().collect().await.ok()?;
        Some((status, version))
    })
    .await
    .ok()
    .flatten();
    let us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
    let mut t = lock(&current);
    match answer {
        Some((status, version)) => t.record(Some(status), version, us),
        None => t.record(None, None, us),
    }
}

fn lock(m: &Mutex<Tally>) -> std::sync::MutexGuard<'_, Tally> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the load, printing a line per second and a total; returns the total.
pub async fn run(opts: LoadOptions, out: &mut (dyn Write + Send)) -> std::io::Result<Tally> {
    let opts = Arc::new(opts);
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(2)));
    connector.set_nodelay(true);
    let client: LoadClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(opts.concurrency)
        .build(connector);
    let permits = Arc::new(Semaphore::new(opts.concurrency));
    let current = Arc::new(Mutex::new(Tally::default()));
    let mut total = Tally::default();
    writeln!(
        out,
        "weir load {}: {}/s for {}, at most {} in flight",
        opts.url,
        opts.rate,
        humantime::format_duration(opts.duration),
        opts.concurrency
    )?;
    out.flush()?;
    let start = Instant::now();
    let end = start + opts.duration;
    let mut started = 0u64;
    let mut second = 1u64;
    let mut pace = tokio::time::interval(PACE);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = pace.tick() => {}
            _ = &mut ctrl_c => break,
        }
        let now = Instant::now().min(end);
        let elapsed = now.duration_since(start);
        // Due so far: rate × elapsed, so a late tick sends what it owes.
        let due = u64::try_from(elapsed.as_micros() * u128::from(opts.rate) / 1_000_000)
            .unwrap_or(u64::MAX);
        while started < due {
            started += 1;
            match permits.clone().try_acquire_owned() {
                Ok(permit) => {
                    lock(&current).sent += 1;
                    let (client, opts, current) = (client.clone(), opts.clone(), current.clone());
                    tokio::spawn(async move {
                        one(client, opts, current).await;
                        drop(permit);
                    });
                }
                Err(_) => lock(&current).skipped += 1,
            }
        }
        if elapsed >= Duration::from_secs(second) {
            let t = std::mem::take(&mut *lock(&current));
            writeln!(out, "{second:>4}s  {}", t.line())?;
            out.flush()?;
            total.merge(&t);
            second += 1;
        }
        if now >= end {
            break;
        }
    }
    // The answers still on their way belong to the run (bounded by the request timeout).
    let _ = tokio::time::timeout(
        REQUEST_TIMEOUT + Duration::from_secs(1),
        permits.acquire_many(u32::try_from(opts.concurrency).unwrap_or(u32::MAX)),
    )
    .await;
    let t = std::mem::take(&mut *lock(&current));
    total.merge(&t);
    let secs = Instant::now().duration_since(start).as_secs_f64();
    writeln!(out, "total {secs:.1}s  {}", total.line())?;
    out.flush()?;
    Ok(total)
}

/// `weir load`: validates the flags (exit 2 naming the bad one), runs, and exits 1 when
/// not one request got a 2xx answer (the target is down or failing).
pub fn main(
    url: &str,
    rate: u32,
    duration: Duration,
    concurrency: usize,
    headers: &[String],
    cookie: Option<&str>,
) -> std::process::ExitCode {
    use std::process::ExitCode;
    let opts = match LoadOptions::new(url, rate, duration, concurrency, headers, cookie) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(opts, &mut std::io::stdout())) {
        Ok(t) if t.sent > 0 && t.ok == 0 => {
            eprintln!("error: no request of {} got a 2xx answer", t.sent);
            ExitCode::FAILURE
        }
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write output: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_bounded_and_errors_name_the_flag() {
        let ok = |url: &str, rate, secs, conc, h: &[&str]| {
            let h: Vec<String> = h.iter().map(|s| s.to_string()).collect();
            LoadOptions::new(url, rate, Duration::from_secs(secs), conc, &h, None)
        };
        assert!(ok("http://127.0.0.1:8080/", 50, 10, 16, &[]).is_ok());
        for (e, want) in [
            (ok("https://x/", 50, 10, 16, &[]), "https is not supported"),
            (ok("nope", 50, 10, 16, &[]), "expected http://"),
            (ok("http://x/", 0, 10, 16, &[]), "--rate"),
            (ok("http://x/", MAX_RATE + 1, 10, 16, &[]), "--rate"),
            (ok("http://x/", 5, 0, 16, &[]), "--duration"),
            (ok("http://x/", 5, 3601, 16, &[]), "--duration"),
            (ok("http://x/", 5, 1, 0, &[]), "--concurrency"),
            (ok("http://x/", 5, 1, 4, &["nocolon"]), "-H"),
            (
                ok("http://x/", 5, 1, 4, &["bad name: v"]),
                "bad header name",
            ),
        ] {
            let e = e.expect_err(want);
            assert!(e.contains(want), "{e} lacks {want}");
        }
        let o = LoadOptions::new(
            "http://x/",
            5,
            Duration::from_secs(1),
            4,
            &["x-canary: insider".to_string()],
            Some("canary=always"),
        )
        .unwrap();
        assert_eq!(o.headers.len(), 2);
        assert_eq!(o.headers[0].0, "x-canary");
        assert_eq!(o.headers[0].1, "insider");
        assert_eq!(o.headers[1].0, COOKIE);
    }

    #[test]
    fn a_tally_counts_by_class_and_version() {
        let mut t = Tally {
            sent: 5,
            ..Tally::default()
        };
        t.record(Some(200), Some("v1".into()), 1000);
        t.record(Some(200), Some("v2".into()), 3000);
        t.record(Some(503), Some("v2".into()), 2000);
        t.record(Some(404), None, 500);
        t.record(None, None, 10_000_000);
        let mut total = Tally::default();
        total.merge(&t);
        total.merge(&t);
        assert_eq!(
            (
                total.sent,
                total.ok,
                total.client_errors,
                total.server_errors
            ),
            (10, 4, 2, 2)
        );
        assert_eq!(total.errors, 2);
        assert_eq!(total.versions["v2"], 4);
        let line = t.line();
        assert!(
            line.starts_with("sent 5 ok 2 3xx 0 4xx 1 5xx 1 errors 1 skipped 0 p50 1.0ms"),
            "{line}"
        );
        assert!(line.ends_with("versions v1=1 v2=2"), "{line}");
    }
}
