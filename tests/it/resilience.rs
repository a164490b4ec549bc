//! Resilience policies end to end (DESIGN §11): retries against fault
//! backends (refusing, resetting mid-response, 503 one time in three,
//! hanging past `perTryTimeout`), where they must not happen (a POST, a
//! streamed body, an exhausted budget), never across sides, honest
//! analysis of a failing canary behind retries (a real rollout run), the
//! circuit breaker under a burst, the rate limit and the body limit.
//!
//! Counts of fault hits are exact where the round-robin order makes them
//! so (one client, requests in sequence); no assertion depends on timing.

use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::*;
use weir::app::RunningApp;

/// Statuses of `n` sequential GETs of `path`.
async fn statuses(addr: SocketAddr, path: &str, n: usize) -> Vec<u16> {
    let c = client();
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(get_once(&c, addr, path, &[]).await.status);
    }
    out
}

fn count(v: &[u16], status: u16) -> usize {
    v.iter().filter(|s| **s == status).count()
}

/// `/api/v1/stats` of route `r`, role `role`: (requests, attempts, failures).
async fn role_stats(app: &RunningApp, route: &str, role: &str) -> (u64, u64, u64) {
    let r = get_once(
        &client(),
        app.admin_addr,
        &format!("/api/v1/stats?route={route}&window=600s"),
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    let s = &j["roles"][role];
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k} in {s}"));
    (n("requests"), n("attempts"), n("failures"))
}

async fn metrics_text(app: &RunningApp) -> String {
    get_once(&client(), app.admin_addr, "/metrics", &[])
        .await
        .text()
}

/// The value of one exact series line in the exposition text (0 if absent).
fn series(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit_once(' '))
        .map_or(0.0, |(_, v)| v.parse().unwrap())
}

#[tokio::test]
async fn a_refused_endpoint_is_retried_on_another_for_gets_but_not_for_posts() {
    let (_hold, refused) = refusing_addr();
    let good = echo("v1").await;
    let app = proxy(&format!(
        "backends:\n  b: {{ endpoints: [\"{refused}\", \"{}\"] }}\nroutes:\n  - name: r\n    primary: b\n    retries: {{ attempts: 2, on: [connect-failure] }}\n  - name: plain\n    pathPrefix: /plain\n    primary: b\n",
        good.addr
    ))
    .await;
    let addr = app.proxy_addr();
    // Round robin alternates: every other request meets the refused endpoint.
    let with = statuses(addr, "/", 20).await;
    assert_eq!(count(&with, 200), 20, "{with:?}");
    let without = statuses(addr, "/plain", 20).await;
    assert_eq!(count(&without, 502), 10, "{without:?}");
    // A POST is not idempotent: it is never retried by default.
    let c = client();
    let mut posts = Vec::new();
    for _ in 0..10 {
        let req = http::Request::post(format!("http://{addr}/"))
            .body(http_body_util::Full::new(bytes::Bytes::from_static(b"x")))
            .unwrap();
        posts.push(send(&c, req).await.status);
    }
    assert!(count(&posts, 502) >= 4, "{posts:?}");
    assert_eq!(count(&posts, 502) + count(&posts, 200), 10, "{posts:?}");
    // The analysis sees the failed attempts; the clients saw none of them.
    let (requests, attempts, failures) = role_stats(&app, "r", "primary").await;
    assert_eq!(requests, 30);
    assert!(attempts > requests, "attempts {attempts}");
    assert_eq!(failures, attempts - 30 + count(&posts, 502) as u64);
    let m = metrics_text(&app).await;
    assert!(
        series(
            &m,
            "weir_retries_total{route=\"r\",role=\"primary\",reason=\"connect-failure\"}"
        ) >= 10.0,
        "{m}"
    );
}

#[tokio::test]
async fn a_reset_mid_response_is_retried() {
    // Sends half a head, then closes.
    let broken =
        scripted(|_, _| Reply::Send(vec![b"HTTP/1.1 200 OK\r\nContent-Le".to_vec()], true)).await;
    let good = echo("v1").await;
    let app = proxy(&format!(
        "backends:\n  b: {{ endpoints: [\"{}\", \"{}\"] }}\nroutes:\n  - name: r\n    primary: b\n    retries: {{ attempts: 1, on: [reset] }}\n  - name: plain\n    pathPrefix: /plain\n    primary: b\n",
        broken.addr, good.addr
    ))
    .await;
    let with = statuses(app.proxy_addr(), "/", 20).await;
    assert_eq!(count(&with, 200), 20, "{with:?}");
    let without = statuses(app.proxy_addr(), "/plain", 20).await;
    assert_eq!(count(&without, 502), 10, "{without:?}");
}

/// A backend answering 503 to every third request it sees.
async fn one_in_three() -> (Scripted, Arc<AtomicUsize>) {
    let n = Arc::new(AtomicUsize::new(0));
    let seen = n.clone();
    let s = scripted(move |_, _| {
        if seen.fetch_add(1, Ordering::SeqCst) % 3 == 2 {
            Reply::Send(
                vec![b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy".to_vec()],
                false,
            )
        } else {
            ok("fine")
        }
    })
    .await;
    (s, n)
}

#[tokio::test]
async fn a_503_one_time_in_three_is_retried_with_the_attempt_header_until_the_budget_is_spent() {
    let (flaky, _) = one_in_three().await;
    let app = proxy(&format!(
        "backends:\n  b: {{ endpoints: [\"{}\"] }}\nroutes:\n  - name: r\n    primary: b\n    retries: {{ attempts: 2, on: [gateway-error], backoff: {{ base: 1ms, max: 5ms }} }}\n  - name: broke\n    pathPrefix: /broke\n    primary: b\n    retries: {{ attempts: 2, on: [gateway-error], budget: {{ percent: 0, minRetriesPerSecond: 0 }} }}\n",
        flaky.addr
    ))
    .await;
    let with = statuses(app.proxy_addr(), "/", 30).await;
    assert_eq!(count(&with, 200), 30, "{with:?}");
    // Every retry (and only a retry) said which attempt it was.
    let heads = flaky.heads.lock().unwrap().clone();
    // Seen requests 2, 5, 8, … are the 503s: 44 seen hold 30 successes and
    // the 14 failures before them.
    assert_eq!(heads.len(), 44);
    let retried = heads
        .iter()
        .filter(|h| header(h, "x-weir-attempt") == Some("2"))
        .count();
    assert_eq!(retried, heads.len() - 30);
    // An empty budget: the first answer goes back as it was.
    let spent = statuses(app.proxy_addr(), "/broke", 30).await;
    assert_eq!(count(&spent, 503), 10, "{spent:?}");
    let (requests, attempts, failures) = role_stats(&app, "broke", "primary").await;
    assert_eq!((requests, attempts, failures), (30, 30, 10));
}

#[tokio::test]
async fn an_endpoint_hanging_past_the_per_try_timeout_is_left_for_another() {
    let hang = scripted(|_, _| Reply::Stall).await;
    let good = echo("v1").await;
    let app = proxy(&format!(
        "backends:\n  b: {{ endpoints: [\"{}\", \"{}\"] }}\nroutes:\n  - name: r\n    primary: b\n    timeout: 10s\n    retries: {{ attempts: 1, on: [reset], perTryTimeout: 200ms }}\n",
        hang.addr, good.addr
    ))
    .await;
    let got = statuses(app.proxy_addr(), "/", 10).await;
    assert_eq!(count(&got, 200), 10, "{got:?}");
    // The retry's pick moves the round-robin cursor too, so every request's
    // first pick is the hanging endpoint: one per-try timeout each.
    let m = metrics_text(&app).await;
    assert_eq!(
        series(
            &m,
            "weir_retries_total{route=\"r\",role=\"primary\",reason=\"per-try-timeout\"}"
        ),
        10.0,
        "{m}"
    );
}

#[tokio::test]
async fn a_kept_body_is_replayed_whole_and_a_streamed_one_is_never_retried() {
    let (_hold, refused) = refusing_addr();
    let good = scripted(|_, _| ok("got it")).await;
    let app = proxy(&format!(
        "backends:\n  b: {{ endpoints: [\"{refused}\", \"{}\"] }}\nroutes:\n  - name: r\n    primary: b\n    retries: {{ attempts: 1, on: [connect-failure], methods: [POST], maxBodyBytes: 64 }}\n",
        good.addr
    ))
    .await;
    let addr = app.proxy_addr();
    let mut kept = Vec::new();
    for i in 0..6 {
        let mut raw = Raw::to(addr).await;
        let body = format!("payload-{i}");
        let g = raw
            .send(
                &format!(
                    "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                ),
                false,
            )
            .await;
        kept.push(g.status);
    }
    assert_eq!(count(&kept, 200), 6, "{kept:?}");
    let bodies = good.bodies.lock().unwrap().clone();
    for i in 0..6 {
        assert!(
            bodies.contains(&format!("payload-{i}").into_bytes()),
            "{bodies:?}"
        );
    }
    // Chunked: no declared length, so it streams and is sent once.
    let mut streamed = Vec::new();
    for _ in 0..6 {
        let mut raw = Raw::to(addr).await;
        let g = raw
            .send(
                "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                false,
            )
            .await;
        streamed.push(g.status);
    }
    assert_eq!(count(&streamed, 502), 3, "{streamed:?}");
    assert_eq!(count(&streamed, 200), 3, "{streamed:?}");
}

#[tokio::test]
async fn a_retry_never_crosses_sides() {
    let (_hold, refused) = refusing_addr();
    let primary = echo("v1").await;
    let app = proxy(&format!(
        "backends:\n  blue: {{ endpoints: [\"{}\"] }}\n  green: {{ endpoints: [\"{refused}\"] }}\nroutes:\n  - name: r\n    primary: blue\n    canary: green\n    canaryWeight: 100\n    retries: {{ attempts: 3, on: [connect-failure], backoff: {{ base: 1ms, max: 2ms }} }}\n",
        primary.addr
    ))
    .await;
    let c = client();
    for _ in 0..10 {
        let r = get_once(&c, app.proxy_addr(), "/", &[]).await;
        assert_eq!(
            r.status,
            502,
            "a canary-bound request answered by {:?}",
            r.version()
        );
    }
    let (requests, attempts, failures) = role_stats(&app, "r", "canary").await;
    assert_eq!((requests, attempts, failures), (10, 40, 40));
    assert_eq!(role_stats(&app, "r", "primary").await, (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_failing_30_percent_of_attempts_behind_retries_serves_clients_and_still_rolls_back(
) {
    let v1 = echo("v1").await;
    let v2 = echo_with("v2", 0.3, Duration::ZERO).await;
    let yaml = format!(
        "backends:\n  app-blue:\n    endpoints: [\"{}\"]\n  app-green:\n    endpoints: [\"{}\"]\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\n    retries: {{ attempts: 3, on: [5xx], backoff: {{ base: 1ms, max: 2ms }}, budget: {{ percent: 100, minRetriesPerSecond: 1000 }} }}\ncanaries:\n  - name: app\n    route: app\n    analysis:\n      interval: 300ms\n      threshold: 7\n      stepWeight: 20\n      maxWeight: 60\n      metrics:\n        - name: request-success-rate\n          thresholdRange: {{ min: 99 }}\n          interval: 2s\n          minRequests: 5\n",
        v1.addr, v2.addr
    );
    let app = proxy(&yaml).await;
    let engine = app.engine.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while engine.status("app").unwrap().phase != weir::rollout::Phase::Initialized {
        assert!(tokio::time::Instant::now() < deadline, "never initialised");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Client traffic all along the run, counted by outcome.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok_n, bad_n, canary_n) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let traffic = {
        let (stop, ok_n, bad_n, canary_n) =
            (stop.clone(), ok_n.clone(), bad_n.clone(), canary_n.clone());
        let addr = app.proxy_addr();
        tokio::spawn(async move {
            let c = client();
            while !stop.load(Ordering::Relaxed) {
                let r = get_once(&c, addr, "/", &[]).await;
                if r.version() == Some("v2") {
                    canary_n.fetch_add(1, Ordering::Relaxed);
                }
                if r.status < 500 { &ok_n } else { &bad_n }.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let out = engine
        .command(
            "app",
            weir::rollout::ManualCommand::Start {
                revision: "v2".into(),
            },
        )
        .await
        .unwrap();
    assert!(out.accepted, "{}", out.message);
    let done = loop {
        let s = engine.status("app").unwrap();
        if matches!(
            s.phase,
            weir::rollout::Phase::Succeeded | weir::rollout::Phase::Failed
        ) {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run never ended: {s:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.store(true, Ordering::Relaxed);
    traffic.await.unwrap();
    assert_eq!(done.phase, weir::rollout::Phase::Failed, "{done:#?}");
    let (ok, bad, canary) = (
        ok_n.load(Ordering::Relaxed),
        bad_n.load(Ordering::Relaxed),
        canary_n.load(Ordering::Relaxed),
    );
    // A client request fails only when the canary failed all 4 of its
    // attempts: p = 0.3^4 = 0.81 % per canary-bound request (the primary
    // never fails). Canary-bound requests are the v2 answers plus the
    // failures; the failures stay under the 4-sigma binomial upper bound
    // for that many requests at 0.81 % (and at least 2).
    let n = (ok + bad) as u64;
    assert!(
        n >= 50 && canary >= 20,
        "too little traffic: {n} requests, {canary} on the canary"
    );
    let canary_bound = binomial_bounds(canary as u64 + bad as u64, 0.0081, 4.0).1;
    assert!(
        bad as u64 <= canary_bound.max(2),
        "{bad} client failures of {n} ({canary} canary answers)"
    );
    assert!(
        done.events
            .iter()
            .any(|e| e.reason == "CheckFailed" && e.message.contains("request-success-rate")),
        "{:#?}",
        done.events
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_the_circuit_breaker_is_refused_with_overflow() {
    let slow = echo_with("v1", 0.0, Duration::from_millis(300)).await;
    let app = proxy(&format!(
        "backends:\n  b:\n    endpoints: [\"{}\"]\n    circuitBreaker: {{ maxConnections: 2, maxPendingRequests: 2, maxRequests: 10 }}\nroutes:\n  - {{ name: r, primary: b }}\n",
        slow.addr
    ))
    .await;
    let addr = app.proxy_addr();
    let mut tasks = Vec::new();
    for _ in 0..12 {
        tasks.push(tokio::spawn(async move {
            let r = get_once(&client(), addr, "/", &[]).await;
            (r.status, r.header("x-weir-error").map(str::to_string))
        }));
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.unwrap());
    }
    // At most 2 running and 2 queued at any moment: of 12 sent together,
    // the ones beyond were refused at once.
    let overflow = got
        .iter()
        .filter(|(s, e)| *s == 503 && e.as_deref() == Some("overflow"))
        .count();
    assert!(overflow >= 1, "{got:?}");
    assert_eq!(
        overflow + got.iter().filter(|(s, _)| *s == 200).count(),
        12,
        "{got:?}"
    );
    let m = metrics_text(&app).await;
    assert_eq!(
        series(
            &m,
            "weir_overflows_total{backend=\"b\",limit=\"max-pending-requests\"}"
        ),
        overflow as f64,
        "{m}"
    );
    // Once the burst is over, the backend takes requests again.
    assert_eq!(get_once(&client(), addr, "/", &[]).await.status, 200);
}

#[tokio::test]
async fn over_the_rate_limit_is_a_429_with_retry_after() {
    let good = echo("v1").await;
    let app = proxy(&format!(
        "backends:\n  b: {{ endpoints: [\"{}\"] }}\nroutes:\n  - name: r\n    primary: b\n    rateLimit: {{ requestsPerSecond: 0.1, burst: 3, key: client-ip }}\n",
        good.addr
    ))
    .await;
    let c = client();
    let mut got = Vec::new();
    for _ in 0..6 {
        got.push(get_once(&c, app.proxy_addr(), "/", &[]).await);
    }
    let codes: Vec<u16> = got.iter().map(|r| r.status).collect();
    assert_eq!(codes, [200, 200, 200, 429, 429, 429]);
    for r in &got[3..] {
        assert_eq!(r.header("x-weir-error"), Some("rate-limited"));
        let after: u64 = r.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=10).contains(&after), "{after}");
    }
    let m = metrics_text(&app).await;
    assert_eq!(
        series(&m, "weir_rate_limited_total{route=\"r\"}"),
        3.0,
        "{m}"
    );
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_413_and_nothing_reaches_the_backend() {
    let backend = scripted(|_, _| ok("fine")).await;
    let app = proxy(&format!(
        "backends:\n  b: {{ endpoints: [\"{}\"] }}\nroutes:\n  - name: r\n    primary: b\n    maxRequestBodyBytes: 8\n",
        backend.addr
    ))
    .await;
    let mut raw = Raw::to(app.proxy_addr()).await;
    let g = raw
        .send(
            "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 20\r\n\r\n01234567890123456789",
            false,
        )
        .await;
    assert_eq!(g.status, 413, "{}", g.head);
    assert!(g
        .head
        .to_ascii_lowercase()
        .contains("x-weir-error: request-body-too-large"));
    assert_eq!(backend.conns.load(Ordering::SeqCst), 0);
    // A chunked body is cut when it grows past the limit.
    let mut raw = Raw::to(app.proxy_addr()).await;
    let g = raw
        .send(
            "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n14\r\n01234567890123456789\r\n0\r\n\r\n",
            false,
        )
        .await;
    assert_eq!(g.status, 413, "{}", g.head);
    // A small one passes.
    let mut raw = Raw::to(app.proxy_addr()).await;
    let g = raw
        .send(
            "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\n\r\nabcd",
            false,
        )
        .await;
    assert_eq!(g.status, 200);
    assert!(backend.bodies.lock().unwrap().iter().all(|b| b.len() <= 8));
}

#[tokio::test]
async fn bad_policies_are_refused_with_their_field_paths() {
    let yaml = "backends:\n  b:\n    endpoints: [\"127.0.0.1:1\"]\n    circuitBreaker: { maxRequests: 0 }\nroutes:\n  - name: r\n    primary: b\n    maxRequestBodyBytes: -1\n    retries: { attempts: 11, on: [sometimes], perTryTimeout: soon, budget: { percent: 120 } }\n    rateLimit: { requestsPerSecond: 0, key: \"cookie:x\" }\n";
    let err = weir::config::parse_yaml(yaml, "t.yaml", std::path::Path::new("."))
        .expect_err("invalid")
        .to_string();
    for path in [
        "backends.b.circuitBreaker.maxRequests",
        "routes[0].maxRequestBodyBytes",
        "routes[0].retries.attempts",
        "routes[0].retries.on[0]",
        "routes[0].retries.perTryTimeout",
        "routes[0].retries.budget.percent",
        "routes[0].rateLimit.requestsPerSecond",
    ] {
        assert!(err.contains(path), "{path} missing in:\n{err}");
    }
}
