//! End-to-end tests of the control API (DESIGN §8): real sockets on
//! 127.0.0.1, in-process echo backends, the whole app.

use crate::support;

use bytes::Bytes;
use http::Method;
use http_body_util::{BodyExt, Full};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::*;
use weir::app::RunningApp;

/// Starts an app from `yaml` with its admin API on an ephemeral port.
async fn app_with_admin(yaml: &str) -> RunningApp {
    let yaml = if yaml.contains("admin:") {
        yaml.to_string()
    } else {
        format!("admin:\n  address: 127.0.0.1:0\n{yaml}")
    };
    proxy(&yaml).await
}

/// The usual blue/green app: route `app`, primary `app-blue` (v1), canary
/// `app-green` (v2), weight 0.
async fn blue_green(
    route_extra: &str,
) -> (RunningApp, weir::echo::EchoHandle, weir::echo::EchoHandle) {
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let app = app_with_admin(&two_slot_config(blue.addr, green.addr, route_extra)).await;
    (app, blue, green)
}

/// An admin request with an optional JSON body and extra headers.
fn api_req(
    admin: SocketAddr,
    method: Method,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> http::Request<Full<Bytes>> {
    let mut b = http::Request::builder()
        .method(method.clone())
        .uri(format!("http://{admin}{path}"));
    let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    if body.is_some() && !has("content-type") {
        b = b.header("content-type", "application/json");
    }
    // A command without a body says it comes from a program, as weir's clients do.
    let write = !matches!(method, Method::GET | Method::HEAD);
    if body.is_none() && write && !has("content-type") && !has("x-weir-request") {
        b = b.header("x-weir-request", "1");
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Full::new(Bytes::from(body.unwrap_or("").to_string())))
        .unwrap()
}

async fn api(
    c: &TestClient,
    app: &RunningApp,
    method: Method,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> Resp {
    send(c, api_req(app.admin_addr, method, path, body, headers)).await
}

/// `PATCH /api/v1/routes/app` with a JSON `body` and extra `headers`.
async fn patch_app(c: &TestClient, app: &RunningApp, body: &str, headers: &[(&str, &str)]) -> Resp {
    api(
        c,
        app,
        Method::PATCH,
        "/api/v1/routes/app",
        Some(body),
        headers,
    )
    .await
}

/// `PUT /api/v1/table` with a JSON `body` and extra `headers`.
async fn put_table(c: &TestClient, app: &RunningApp, body: &str, headers: &[(&str, &str)]) -> Resp {
    api(c, app, Method::PUT, "/api/v1/table", Some(body), headers).await
}

fn etag_version(r: &Resp) -> u64 {
    r.header("etag")
        .and_then(|e| e.trim_matches('"').parse().ok())
        .unwrap_or_else(|| panic!("no ETag in {:?}", r.headers))
}

/// Sends an invalid write and checks the answer and that nothing changed:
/// same version, same raw table.
async fn assert_refused(
    method: Method,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
    status: u16,
    field: Option<&str>,
) -> serde_json::Value {
    let (app, _b, _g) = blue_green("    canaryWeight: 10\n").await;
    let c = client();
    let before = api(&c, &app, Method::GET, "/api/v1/table", None, &[]).await;
    assert_eq!(before.status, 200);
    let r = api(&c, &app, method, path, Some(body), headers).await;
    assert_eq!(r.status, status, "answer: {}", r.text());
    let err = r.json();
    assert!(err["error"].is_string(), "{err}");
    assert!(err["reason"].is_string(), "{err}");
    match field {
        Some(f) => assert_eq!(err["field"], f, "{err}"),
        None => assert!(err["field"].is_null() || err["field"] == "", "{err}"),
    }
    let after = api(&c, &app, Method::GET, "/api/v1/table", None, &[]).await;
    assert_eq!(etag_version(&after), etag_version(&before), "version moved");
    assert_eq!(after.json(), before.json(), "table changed");
    assert_eq!(app.store.load().version, 1);
    app.shutdown().await;
    err
}

/// [`assert_refused`] for `PATCH /api/v1/routes/app` with a JSON `body`.
async fn patch_refused(body: &str, status: u16, field: Option<&str>) -> serde_json::Value {
    assert_refused(
        Method::PATCH,
        "/api/v1/routes/app",
        body,
        &[],
        status,
        field,
    )
    .await
}

/// [`assert_refused`] for `PUT /api/v1/table` with a JSON `body`.
async fn put_table_refused(body: &str, status: u16, field: Option<&str>) -> serde_json::Value {
    assert_refused(Method::PUT, "/api/v1/table", body, &[], status, field).await
}

/// The two load-generating tests take it so they never compete for the CPU
/// with each other (the latency comparison would suffer, not the product).
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ------------------------------------------------------------ hot swap

/// Under a steady load a second task swaps the table 100 times per
/// second, alternating canaryWeight 0/100, through the API. Every swap also
/// sets a response header `x-test-gen: <generation>` on the route (a header
/// edit of the same table), so each response carries the generation of the
/// snapshot that routed it: an even generation has weight 0 and must have
/// been served by v1, an odd one weight 100 and v2. A request that mixed two
/// snapshots (the header edits of one, the weights of another) shows up as a
/// mismatch. No request may fail or see a connection error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn swap_under_load_never_mixes_versions() {
    /// Offered load and duration: 2,500 req/s for 10 s.
    const RATE: u64 = 2_500;
    const TOTAL: u64 = 25_000;
    const WORKERS: usize = 64;
    /// Hard stop for the whole load (a guard against hanging, not an assertion).
    const GUARD: Duration = Duration::from_secs(120);
    let _heavy = HEAVY.lock().await;

    let (app, _blue, _green) = blue_green(
        "    canaryWeight: 0\n    headers:\n      response:\n        set:\n          x-test-gen: \"0\"\n",
    )
    .await;
    let proxy_addr = app.proxy_addr();
    let admin = app.admin_addr;
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let start = tokio::time::Instant::now();

    // The swapper: PATCH every 10 ms until the load is over.
    let swapper = {
        let done = done.clone();
        tokio::spawn(async move {
            let c = client();
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            let mut gen = 0u64;
            let mut failed = 0u64;
            while !done.load(Ordering::Relaxed) {
                tick.tick().await;
                gen += 1;
                let weight = if gen % 2 == 1 { 100 } else { 0 };
                let body = format!(
                    r#"{{"canaryWeight":{weight},"headers":{{"response":{{"set":{{"x-test-gen":"{gen}"}}}}}}}}"#
                );
                let req = api_req(admin, Method::PATCH, "/api/v1/routes/app", Some(&body), &[]);
                match c.request(req).await {
                    Ok(r) if r.status() == 200 => {
                        let _ = r.into_body().collect().await;
                    }
                    _ => failed += 1,
                }
            }
            (gen, failed)
        })
    };

    #[derive(Default)]
    struct Tally {
        sent: u64,
        non_2xx: u64,
        conn_errors: u64,
        missing_headers: u64,
        mismatches: u64,
        v1: u64,
        v2: u64,
        gens: BTreeSet<u64>,
    }
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let next = next.clone();
        workers.push(tokio::spawn(async move {
            let c = client();
            let mut t = Tally::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= TOTAL || start.elapsed() > GUARD {
                    return t;
                }
                // Open-loop pacing: request i is due at i / RATE seconds.
                tokio::time::sleep_until(start + Duration::from_micros(i * 1_000_000 / RATE)).await;
                t.sent += 1;
                let resp = match c.request(get(proxy_addr, "/", &[])).await {
                    Ok(r) => r,
                    Err(_) => {
                        t.conn_errors += 1;
                        continue;
                    }
                };
                let status = resp.status();
                let version = resp
                    .headers()
                    .get("x-weir-version")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                let gen = resp
                    .headers()
                    .get("x-test-gen")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                if resp.into_body().collect().await.is_err() {
                    t.conn_errors += 1;
                    continue;
                }
                if !status.is_success() {
                    t.non_2xx += 1;
                    continue;
                }
                let (Some(version), Some(gen)) = (version, gen) else {
                    t.missing_headers += 1;
                    continue;
                };
                let expected = if gen % 2 == 0 { "v1" } else { "v2" };
                if version != expected {
                    t.mismatches += 1;
                }
                if version == "v1" {
                    t.v1 += 1;
                } else {
                    t.v2 += 1;
                }
                t.gens.insert(gen);
            }
        }));
    }
    let mut total = Tally::default();
    for w in workers {
        let t = w.await.unwrap();
        total.sent += t.sent;
        total.non_2xx += t.non_2xx;
        total.conn_errors += t.conn_errors;
        total.missing_headers += t.missing_headers;
        total.mismatches += t.mismatches;
        total.v1 += t.v1;
        total.v2 += t.v2;
        total.gens.extend(t.gens);
    }
    let elapsed = start.elapsed();
    done.store(true, Ordering::Relaxed);
    let (swaps, swap_failures) = swapper.await.unwrap();
    println!(
        "sent {} requests in {:.2?} ({:.0} req/s offered at {RATE}/s); {swaps} swaps; v1 {} v2 {}; {} generations seen",
        total.sent,
        elapsed,
        total.sent as f64 / elapsed.as_secs_f64(),
        total.v1,
        total.v2,
        total.gens.len()
    );
    assert_eq!(total.non_2xx, 0, "non-2xx answers");
    assert_eq!(total.conn_errors, 0, "connection errors");
    assert_eq!(
        total.missing_headers, 0,
        "answers without version or generation"
    );
    assert_eq!(
        total.mismatches, 0,
        "answers from the side their snapshot did not choose"
    );
    assert_eq!(swap_failures, 0, "refused swaps");
    // The test only means something if the swaps interleaved with the load.
    assert!(total.v1 > 0 && total.v2 > 0, "both sides must have served");
    assert!(total.gens.len() >= 2);
    assert_eq!(app.store.load().version, swaps + 1);
    app.shutdown().await;
}

// ------------------------------------------------------------ stats

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// After N requests with a known mix of 500s (echo --error-rate)
/// and latencies (echo --latency plus a slow tenth), the API's successRate
/// and p99 match the client's own count within 1 % and 10 %.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stats_match_the_clients_own_count() {
    const N: usize = 1_000;
    const ERROR_RATE: f64 = 0.1;
    const CONCURRENCY: usize = 20;
    /// Extra sleep of every tenth request: it makes p99 land in a group of
    /// known latency (about 30 + 200 ms), far from the bulk (30 ms).
    const SLOW_MS: u64 = 200;
    let _heavy = HEAVY.lock().await;
    let blue = echo_with("v1", ERROR_RATE, Duration::from_millis(30)).await;
    let green = echo("v2").await;
    let app = app_with_admin(&two_slot_config(
        blue.addr,
        green.addr,
        "    canaryWeight: 0\n",
    ))
    .await;
    let proxy_addr = app.proxy_addr();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let c = client();
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= N {
                    return out;
                }
                // Every tenth request sleeps SLOW_MS more (when it does not fail).
                let path = if i.is_multiple_of(10) {
                    format!("/sleep?ms={SLOW_MS}")
                } else {
                    "/".to_string()
                };
                // Timed to the response head, as the proxy times it.
                let t0 = std::time::Instant::now();
                let resp = c
                    .request(get(proxy_addr, &path, &[]))
                    .await
                    .expect("request");
                let ms = t0.elapsed().as_secs_f64() * 1000.0;
                let status = resp.status().as_u16();
                resp.into_body().collect().await.expect("body");
                out.push((status, ms));
            }
        }));
    }
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await.unwrap());
    }
    assert_eq!(samples.len(), N);
    let failures = samples.iter().filter(|(s, _)| *s == 500).count() as u64;
    assert!(samples.iter().all(|(s, _)| *s == 200 || *s == 500));
    // The echo's error draw is binomial: check the mix is what was asked for
    // (99.99 % two-sided bound), so the comparison below is meaningful.
    let (lo, hi) = binomial_bounds(N as u64, ERROR_RATE, Z_9999);
    assert!(
        (lo..=hi).contains(&failures),
        "{failures} failures outside {lo}..={hi}"
    );
    let client_success = 100.0 * (N as u64 - failures) as f64 / N as f64;
    let mut lat: Vec<f64> = samples.iter().map(|(_, ms)| *ms).collect();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let client_p99 = percentile(&lat, 0.99);

    let c = client();
    let r = api(
        &c,
        &app,
        Method::GET,
        "/api/v1/stats?route=app&window=600s",
        None,
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let primary = &v["roles"]["primary"];
    assert_eq!(primary["requests"], N as u64, "{v}");
    assert_eq!(primary["failures"], failures, "{v}");
    assert_eq!(v["roles"]["canary"]["requests"], 0);
    let api_success = primary["successRate"].as_f64().unwrap();
    let api_p99 = primary["p99Ms"].as_f64().unwrap();
    println!("success: client {client_success:.2}% api {api_success:.2}%; p99: client {client_p99:.1}ms api {api_p99:.1}ms");
    assert!(
        (api_success - client_success).abs() <= 0.01 * client_success,
        "successRate {api_success} vs client {client_success}"
    );
    assert!(
        (api_p99 - client_p99).abs() <= 0.10 * client_p99,
        "p99 {api_p99} ms vs client {client_p99} ms"
    );
    // The mergeable snapshot is there too, and agrees with the summary.
    let snap: weir::stats::WindowSnapshot =
        serde_json::from_value(v["snapshots"]["primary"].clone()).unwrap();
    assert_eq!(snap.requests, N as u64);
    assert_eq!(snap.summary().p99_ms, Some(api_p99));
    // maxAge cuts the window at a moment: a window that began after every request
    // counts none of them (what a check of a run started now would read).
    let r = api(
        &c,
        &app,
        Method::GET,
        "/api/v1/stats?route=app&window=600s&maxAge=0ms",
        None,
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (
            v["windowSecs"].clone(),
            v["roles"]["primary"]["requests"].clone()
        ),
        (0.into(), 0.into()),
        "{v}"
    );
    let r = api(
        &c,
        &app,
        Method::GET,
        "/api/v1/stats?route=app&maxAge=soon",
        None,
        &[],
    )
    .await;
    assert_eq!(
        (r.status, r.json()["field"].clone()),
        (400, "maxAge".into())
    );
    app.shutdown().await;
}

// ------------------------------------------------------------ auth

fn token_file(token: &str) -> std::path::PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let p = std::env::temp_dir().join(format!(
        "weir-api-test-token-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&p, format!("{token}\n")).unwrap();
    p
}

#[tokio::test]
async fn missing_or_wrong_token_is_401_right_token_200() {
    let token = "s3cret-token-0123456789";
    let path = token_file(token);
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let yaml = format!(
        "admin:\n  address: 127.0.0.1:0\n  tokenFile: {}\n{}",
        path.display(),
        two_slot_config(blue.addr, green.addr, "")
    );
    let app = app_with_admin(&yaml).await;
    let c = client();
    for p in [
        "/api/v1/table",
        "/metrics",
        "/api/v1/stats",
        "/openapi.json",
        "/no/such/path",
    ] {
        let r = api(&c, &app, Method::GET, p, None, &[]).await;
        assert_eq!(r.status, 401, "{p}");
        assert_eq!(r.json()["error"], "unauthorized");
        assert!(r.header("www-authenticate").unwrap().starts_with("Bearer"));
        let r = api(
            &c,
            &app,
            Method::GET,
            p,
            None,
            &[("authorization", "Bearer s3cret-token-012345678X")],
        )
        .await;
        assert_eq!(r.status, 401, "{p}");
        assert!(!r.text().contains(token), "the token must never be echoed");
    }
    let auth = format!("Bearer {token}");
    let r = api(
        &c,
        &app,
        Method::GET,
        "/api/v1/table",
        None,
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(r.status, 200);
    // A write with the right token works too; without it nothing changes.
    let r = patch_app(&c, &app, r#"{"canaryWeight":5}"#, &[]).await;
    assert_eq!(r.status, 401);
    assert_eq!(app.store.load().version, 1);
    let r = patch_app(
        &c,
        &app,
        r#"{"canaryWeight":5}"#,
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Probes stay open.
    assert_eq!(
        api(&c, &app, Method::GET, "/healthz", None, &[])
            .await
            .status,
        200
    );
    assert_eq!(
        api(&c, &app, Method::GET, "/readyz", None, &[])
            .await
            .status,
        200
    );
    app.shutdown().await;
    let _ = std::fs::remove_file(path);
}

#[test]
fn non_loopback_admin_without_token_is_refused_at_start() {
    let yaml = "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 0.0.0.0:0\nbackends:\n  b:\n    endpoints: [\"127.0.0.1:1\"]\nroutes:\n  - name: r\n    primary: b\n";
    let err = weir::config::parse_yaml(yaml, "test.yaml", std::path::Path::new("."))
        .expect_err("must be refused");
    assert!(
        err.errors
            .iter()
            .any(|e| e.path == "admin.tokenFile" && e.reason.contains("not a loopback")),
        "{err}"
    );
    // With a token file the same address is accepted.
    let path = token_file("another-token-0123456789");
    let yaml = yaml.replace(
        "address: 0.0.0.0:0\n",
        &format!("address: 0.0.0.0:0\n  tokenFile: {}\n", path.display()),
    );
    weir::config::parse_yaml(&yaml, "test.yaml", std::path::Path::new(".")).expect("valid");
    let _ = std::fs::remove_file(path);
}

// ------------------------------------------------------------ invalid writes

#[tokio::test]
async fn malformed_json_is_400() {
    let e = put_table_refused(r#"{"routes": ["#, 400, None).await;
    assert_eq!(e["error"], "malformed-json");
    let e = patch_refused("{canaryWeight: 5}", 400, None).await;
    assert_eq!(e["error"], "malformed-json");
}

#[tokio::test]
async fn unknown_field_is_400_naming_it() {
    let e = patch_refused(r#"{"canaryWieght": 5}"#, 400, Some("canaryWieght")).await;
    assert_eq!(e["error"], "schema");
    put_table_refused(
        r#"{"backends": {"b": {"endpoints": ["127.0.0.1:1"], "weight": 3}}, "routes": []}"#,
        400,
        Some("backends.b.weight"),
    )
    .await;
}

#[tokio::test]
async fn wrong_type_is_400_naming_the_field() {
    let e = patch_refused(r#"{"canaryWeight": "50"}"#, 400, Some("canaryWeight")).await;
    assert_eq!(e["error"], "schema");
    patch_refused(r#"{"canaryWeight": 50.5}"#, 400, Some("canaryWeight")).await;
    patch_refused(r#"[1, 2]"#, 400, Some("")).await;
}

#[tokio::test]
async fn weight_outside_0_to_100_is_422() {
    let e = patch_refused(r#"{"canaryWeight": 101}"#, 422, Some("canaryWeight")).await;
    assert_eq!(e["error"], "invalid");
    assert!(
        e["reason"].as_str().unwrap().contains("between 0 and 100"),
        "{e}"
    );
    patch_refused(r#"{"canaryWeight": -1}"#, 422, Some("canaryWeight")).await;
}

#[tokio::test]
async fn regex_over_the_size_limit_is_422() {
    let body = r#"{"match": [{"headers": {"x-user": {"regex": "\\w{1000}\\w{1000}\\w{1000}"}}}]}"#;
    let e = patch_refused(body, 422, Some("match[0].headers.x-user.regex")).await;
    assert!(e["reason"].as_str().unwrap().contains("size limit"), "{e}");
}

/// 600 small header regexes (`\w{5}`, about 280 KB each compiled): a 17 KB body
/// that would cost the process 160 MiB and more. `PUT /api/v1/table` and `PATCH`
/// are refused (422) naming `limits.maxTableRegexBytes` and its budget; nothing
/// changes.
#[tokio::test]
async fn a_table_whose_regexes_compile_past_the_budget_is_422() {
    let headers: serde_json::Map<String, serde_json::Value> = (0..600)
        .map(|i| (format!("x-h{i}"), serde_json::json!({"regex": "\\w{5}"})))
        .collect();
    let patch = serde_json::json!({"match": [{"headers": headers}]});
    let table = serde_json::json!({
        "backends": {"b": {"endpoints": ["127.0.0.1:1"]}, "c": {"endpoints": ["127.0.0.1:2"]}},
        "routes": [{"name": "r", "primary": "b", "canary": "c", "match": [{"headers": headers}]}],
    });
    let (app, _b, _g) = blue_green("    canaryWeight: 10\n").await;
    let c = client();
    let before = api(&c, &app, Method::GET, "/api/v1/table", None, &[]).await;
    for (method, path, body) in [
        (Method::PATCH, "/api/v1/routes/app", patch.to_string()),
        (Method::PUT, "/api/v1/table", table.to_string()),
    ] {
        let r = api(&c, &app, method, path, Some(&body), &[]).await;
        assert_eq!(r.status, 422, "{path}: {}", r.text());
        let e = r.json();
        let field = e["field"].as_str().unwrap_or_default();
        assert!(
            field.contains("match[0].headers.x-h") && field.ends_with(".regex"),
            "{e}"
        );
        assert!(
            e["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("limits.maxTableRegexBytes (64 MiB)"),
            "{e}"
        );
        assert_eq!(e["errors"].as_array().map(Vec::len), Some(1), "{e}");
    }
    let after = api(&c, &app, Method::GET, "/api/v1/table", None, &[]).await;
    assert_eq!(after.json(), before.json(), "table changed");
    assert_eq!(app.store.load().version, 1);
    app.shutdown().await;
}

#[tokio::test]
async fn unknown_backend_is_422() {
    patch_refused(r#"{"canary": "nope"}"#, 422, Some("canary")).await;
    let table = r#"{"backends": {"b": {"endpoints": ["127.0.0.1:1"]}}, "routes": [{"name": "r", "primary": "missing"}]}"#;
    put_table_refused(table, 422, Some("routes[0].primary")).await;
}

#[tokio::test]
async fn every_problem_is_listed() {
    let table = r#"{"backends": {"b": {"endpoints": ["127.0.0.1:1"]}}, "routes": [{"name": "r", "primary": "x", "canary": "y", "canaryWeight": 500}]}"#;
    let e = put_table_refused(table, 422, Some("routes[0].primary")).await;
    let fields: Vec<&str> = e["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["field"].as_str().unwrap())
        .collect();
    for f in [
        "routes[0].primary",
        "routes[0].canary",
        "routes[0].canaryWeight",
    ] {
        assert!(fields.contains(&f), "{f} missing in {fields:?}");
    }
}

#[tokio::test]
async fn renaming_a_route_by_patch_is_422() {
    patch_refused(r#"{"name": "other"}"#, 422, Some("name")).await;
}

#[tokio::test]
async fn non_json_write_is_403_or_with_the_weir_header_415() {
    // A text/plain write is what a page of another site can send: refused as such.
    let e = assert_refused(
        Method::PATCH,
        "/api/v1/routes/app",
        r#"{"canaryWeight": 5}"#,
        &[("content-type", "text/plain")],
        403,
        Some("Content-Type"),
    )
    .await;
    assert_eq!(e["error"], "write-header-missing");
    let e = assert_refused(
        Method::PATCH,
        "/api/v1/routes/app",
        r#"{"canaryWeight": 5}"#,
        &[("content-type", "text/plain"), ("x-weir-request", "1")],
        415,
        Some("Content-Type"),
    )
    .await;
    assert_eq!(e["error"], "unsupported-media-type");
}

#[tokio::test]
async fn body_over_1_mib_is_413() {
    let big = format!(
        r#"{{"canaryWeight": 5, "timeout": "{}"}}"#,
        "x".repeat(1 << 20)
    );
    let e = patch_refused(&big, 413, None).await;
    assert_eq!(e["error"], "payload-too-large");
}

#[tokio::test]
async fn patch_of_unknown_route_is_404() {
    assert_refused(
        Method::PATCH,
        "/api/v1/routes/nope",
        r#"{"canaryWeight": 5}"#,
        &[],
        404,
        Some("name"),
    )
    .await;
}

// ------------------------------------------------------------ versions

#[tokio::test]
async fn if_match_conflict_is_409() {
    let (app, _b, _g) = blue_green("").await;
    let c = client();
    let t = api(&c, &app, Method::GET, "/api/v1/table", None, &[]).await;
    assert_eq!(t.header("etag"), Some("\"1\""));
    let table = t.text();
    let r = patch_app(
        &c,
        &app,
        r#"{"canaryWeight": 20}"#,
        &[("if-match", "\"1\"")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("etag"), Some("\"2\""));
    assert_eq!(r.json()["canaryWeight"], 20);
    // A writer still holding version 1 loses.
    let r = put_table(&c, &app, &table, &[("if-match", "\"1\"")]).await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["field"], "If-Match");
    assert_eq!(r.header("etag"), Some("\"2\""));
    let r = patch_app(&c, &app, r#"{"canaryWeight": 0}"#, &[("if-match", "1")]).await;
    assert_eq!(r.status, 409);
    assert_eq!(app.store.load().version, 2);
    assert_eq!(app.store.load().spec.routing.routes[0].canary_weight, 20);
    // With the current version it goes through; the GET round-trips.
    let r = put_table(&c, &app, &table, &[("if-match", "\"2\"")]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["version"], 3);
    assert_eq!(app.store.load().spec.routing.routes[0].canary_weight, 0);
    // A garbled If-Match is a 400, not a silent unconditional write.
    let r = put_table(&c, &app, &table, &[("if-match", "abc")]).await;
    assert_eq!(r.status, 400);
    assert_eq!(app.store.load().version, 3);
    app.shutdown().await;
}

#[tokio::test]
async fn patch_merges_and_null_removes() {
    let (app, _b, _g) = blue_green("    canaryWeight: 5\n    timeout: 3s\n").await;
    let c = client();
    let body = r#"{"headers": {"request": {"set": {"x-a": "1"}}}, "mirror": {"weight": 50}, "timeout": null}"#;
    let r = patch_app(
        &c,
        &app,
        body,
        &[("content-type", "application/merge-patch+json")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let route = r.json();
    assert_eq!(route["canaryWeight"], 5, "untouched fields stay");
    assert_eq!(route["headers"]["request"]["set"]["x-a"], "1");
    assert_eq!(route["mirror"]["weight"], 50);
    assert!(route.get("timeout").is_none(), "null removes: {route}");
    let r = patch_app(&c, &app, r#"{"mirror": null}"#, &[]).await;
    assert!(r.json().get("mirror").is_none());
    let g = api(&c, &app, Method::GET, "/api/v1/routes/app", None, &[]).await;
    assert_eq!(g.status, 200);
    assert_eq!(g.header("etag"), Some("\"3\""));
    assert_eq!(g.json()["headers"]["request"]["set"]["x-a"], "1");
    app.shutdown().await;
}

// ------------------------------------------------------------ reads

#[tokio::test]
async fn probes_backend_and_unknown_paths() {
    let (app, blue, _g) = blue_green("").await;
    let c = client();
    let r = api(&c, &app, Method::GET, "/healthz", None, &[]).await;
    assert_eq!((r.status, r.json()["status"].clone()), (200, "ok".into()));
    let r = api(&c, &app, Method::GET, "/readyz", None, &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["tableVersion"], 1);
    let r = api(
        &c,
        &app,
        Method::GET,
        "/api/v1/backends/app-blue",
        None,
        &[],
    )
    .await;
    assert_eq!(r.status, 200);
    let b = r.json();
    assert_eq!(b["configured"][0], blue.addr.to_string());
    assert_eq!(b["endpoints"][0]["address"], blue.addr.to_string());
    assert_eq!(b["endpoints"][0]["ready"], true);
    assert_eq!(b["routes"][0]["route"], "app");
    assert_eq!(b["routes"][0]["role"], "primary");
    // The endpoints module's status (docs/endpoints.md): nothing is rolling.
    assert_eq!(b["rollingUpdate"]["phase"], "Complete");
    assert_eq!(b["rollingUpdate"]["generation"], 1);
    let r = api(&c, &app, Method::GET, "/api/v1/backends/nope", None, &[]).await;
    assert_eq!(r.status, 404);
    let r = api(&c, &app, Method::GET, "/api/v1/routes/nope", None, &[]).await;
    assert_eq!(
        (r.status, r.json()["error"].clone()),
        (404, "not-found".into())
    );
    let r = api(&c, &app, Method::GET, "/api/v1/nothing", None, &[]).await;
    assert_eq!(r.status, 404);
    let r = api(&c, &app, Method::DELETE, "/api/v1/table", None, &[]).await;
    assert_eq!(r.status, 405);
    assert!(r.header("allow").unwrap().contains("PUT"));
    let r = api(&c, &app, Method::GET, "/api/v1/stats?window=0s", None, &[]).await;
    assert_eq!(
        (r.status, r.json()["field"].clone()),
        (400, "window".into())
    );
    let r = api(&c, &app, Method::GET, "/api/v1/stats?route=nope", None, &[]).await;
    assert_eq!(r.status, 404);
    let r = api(&c, &app, Method::GET, "/api/v1/stats", None, &[]).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["windowSecs"], 60);
    assert_eq!(v["routes"][0]["route"], "app");
    assert_eq!(v["routes"][0]["roles"]["primary"]["requests"], 0);
    assert!(v["routes"][0]["roles"]["primary"]["successRate"].is_null());
    app.shutdown().await;
}

// ------------------------------------------------------------ events

/// Reads SSE frames from `body` until one contains `needle`.
async fn read_until(body: &mut hyper::body::Incoming, buf: &mut String, needle: &str) {
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        while !buf.contains(needle) {
            match body.frame().await {
                Some(Ok(f)) => {
                    if let Some(d) = f.data_ref() {
                        buf.push_str(&String::from_utf8_lossy(d));
                    }
                }
                _ => return false,
            }
        }
        true
    })
    .await;
    assert_eq!(found, Ok(true), "no {needle:?} in the stream; got:\n{buf}");
}

#[tokio::test]
async fn sse_receives_table_changes_and_engine_events() {
    let (app, _b, _g) = blue_green("").await;
    let c = client();
    let resp = c
        .request(api_req(
            app.admin_addr,
            Method::GET,
            "/api/v1/events",
            None,
            &[],
        ))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    let mut buf = String::new();
    read_until(&mut body, &mut buf, ": connected").await;
    let r = patch_app(&c, &app, r#"{"canaryWeight": 30}"#, &[]).await;
    assert_eq!(r.status, 200);
    read_until(&mut body, &mut buf, "\n\n").await;
    read_until(&mut body, &mut buf, "event: table\n").await;
    let data = buf
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("a data line");
    let v: serde_json::Value = serde_json::from_str(data).unwrap();
    assert_eq!(v["oldVersion"], 1);
    assert_eq!(v["newVersion"], 2);
    assert_eq!(v["what"], "update route app");
    assert!(v["actor"].as_str().unwrap().starts_with("api:127.0.0.1"));
    // The rollout engine publishes on the same stream.
    app.events.publish(
        "rollout",
        serde_json::json!({"canary": "app", "phase": "Progressing"}),
    );
    read_until(&mut body, &mut buf, "event: rollout\n").await;
    read_until(&mut body, &mut buf, "\"phase\":\"Progressing\"").await;
    drop(body);
    app.shutdown().await;
}

// ------------------------------------------------------------ metrics

#[tokio::test]
async fn metrics_export_the_documented_series() {
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let (_held, dead) = refusing_addr();
    let yaml = format!(
        "{}  dead:\n    endpoints: [\"{dead}\"]\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\n    canaryWeight: 0\n    mirror: {{ weight: 100 }}\n  - name: broken\n    pathPrefix: /broken\n    primary: dead\n",
        format_args!("backends:\n  app-blue:\n    endpoints: [\"{}\"]\n  app-green:\n    endpoints: [\"{}\"]\n", blue.addr, green.addr),
    );
    let app = app_with_admin(&yaml).await;
    let c = client();
    for _ in 0..20 {
        assert_eq!(get_once(&c, app.proxy_addr(), "/", &[]).await.status, 200);
    }
    for _ in 0..3 {
        assert_eq!(
            get_once(&c, app.proxy_addr(), "/broken", &[]).await.status,
            502
        );
    }
    let r = api(&c, &app, Method::GET, "/metrics", None, &[]).await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let text = r.text();
    for line in [
        r#"weir_requests_total{route="app",role="primary",backend="app-blue",code="200"} 20"#,
        r#"weir_requests_total{route="broken",role="primary",backend="dead",code="502"} 3"#,
        r#"weir_upstream_errors_total{route="broken",role="primary",kind="upstream"} 3"#,
        r#"weir_upstream_connect_errors_total{route="broken",role="primary"} 3"#,
        r#"weir_upstream_errors_total{route="app",role="canary",kind="timeout"} 0"#,
        r#"weir_request_duration_seconds_count{route="app",role="primary",backend="app-blue"} 20"#,
        r#"weir_request_duration_seconds_bucket{route="app",role="primary",backend="app-blue",le="+Inf"} 20"#,
        "weir_table_version 1",
        r#"weir_mirror_dropped_total{route="app",reason="busy"} 0"#,
        r#"weir_mirror_dropped_total{route="app",reason="too_large"} 0"#,
        r#"weir_mirror_in_flight{route="app"}"#,
        r#"weir_backend_endpoints{backend="app-blue"} 1"#,
        r#"weir_upstream_in_flight{backend="app-blue"}"#,
        "# TYPE weir_request_duration_seconds histogram",
        "# HELP weir_requests_total",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    // Mirror copies are counted once their body is complete (asynchronously).
    let ok = eventually(Duration::from_secs(5), || async {
        let t = api(&c, &app, Method::GET, "/metrics", None, &[])
            .await
            .text();
        t.contains(r#"weir_mirror_requests_total{route="app"} 20"#)
    })
    .await;
    assert!(ok, "mirror copies not exported");
    // The version follows writes.
    patch_app(&c, &app, r#"{"canaryWeight": 1}"#, &[]).await;
    let text = api(&c, &app, Method::GET, "/metrics", None, &[])
        .await
        .text();
    assert!(text.contains("weir_table_version 2"), "{text}");
    app.shutdown().await;
}

// ------------------------------------------------------------ openapi

/// Every route the router serves is in the OpenAPI document (and the other
/// way round), every `$ref` resolves, the documented examples are accepted
/// by the handlers' own types, and each documented GET is really served.
#[tokio::test]
async fn openapi_lists_every_path_the_router_serves() {
    let (app, _b, _g) = blue_green("").await;
    let c = client();
    let r = api(&c, &app, Method::GET, "/openapi.json", None, &[]).await;
    assert_eq!(r.status, 200);
    let doc = r.json();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    let mut served = BTreeSet::new();
    for def in weir::app::api_routes() {
        let m = def.method.as_str().to_ascii_lowercase();
        assert!(
            paths.get(def.path).and_then(|p| p.get(&m)).is_some(),
            "{} {} is served but not documented",
            def.method,
            def.path
        );
        served.insert((def.path.to_string(), m));
    }
    for (p, item) in paths {
        for m in item.as_object().unwrap().keys() {
            if m == "parameters" {
                continue;
            }
            assert!(
                served.contains(&(p.clone(), m.clone())),
                "{m} {p} documented but not served"
            );
        }
    }
    // All $refs point at something.
    fn refs(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    if k == "$ref" {
                        out.push(x.as_str().unwrap().to_string());
                    } else {
                        refs(x, out);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    refs(&doc, &mut all);
    for r in all {
        let ptr = r.strip_prefix('#').unwrap();
        assert!(doc.pointer(ptr).is_some(), "dangling $ref {r}");
    }
    // Examples are valid input for the handlers' types.
    let route: weir::config::raw::RawRoute =
        serde_json::from_value(doc["components"]["schemas"]["Route"]["example"].clone()).unwrap();
    assert_eq!(route.name, "app");
    let _: weir::config::raw::RawTable =
        serde_json::from_value(doc["components"]["schemas"]["Table"]["example"].clone()).unwrap();
    // Every property the Route schema names is a field the handler accepts.
    for prop in doc["components"]["schemas"]["Route"]["properties"]
        .as_object()
        .unwrap()
        .keys()
    {
        let mut v = serde_json::json!({"name": "x", "primary": "y"});
        let value = doc["components"]["schemas"]["Route"]["example"]
            .get(prop)
            .cloned()
            .unwrap_or(serde_json::json!({}));
        v[prop] = value;
        let res = serde_json::from_value::<weir::config::raw::RawRoute>(v);
        assert!(
            res.is_ok()
                || !res
                    .as_ref()
                    .unwrap_err()
                    .to_string()
                    .contains("unknown field"),
            "{prop}: {res:?}"
        );
    }
    // Each documented GET answers (path parameters filled with real names).
    for def in weir::app::api_routes().filter(|d| d.method == Method::GET) {
        if def.path == "/api/v1/events" {
            continue; // a stream; covered by the SSE test
        }
        if def.path == "/api/v1/canaries/{name}" {
            continue; // this app has no canary; covered by tests/it/rollout.rs
        }
        let path = def.path.replace(
            "{name}",
            if def.path.contains("backends") {
                "app-blue"
            } else {
                "app"
            },
        );
        // The console's files: one of them.
        let path = path.replace("{file}", "console.js");
        let r = api(&c, &app, Method::GET, &path, None, &[]).await;
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    }
    app.shutdown().await;
}

#[tokio::test]
async fn readyz_reports_draining_on_shutdown() {
    let (app, _b, _g) = blue_green("").await;
    let ready = app.ready.clone();
    assert!(ready.load(Ordering::Acquire));
    app.shutdown().await;
    assert!(!ready.load(Ordering::Acquire));
}

// ------------------------------------------------------------ durations

/// Durations in the API follow Go's grammar, as in the config: a bad `window` is a 400
/// naming the parameter and the accepted forms, a bad duration in a PATCH a 422 naming
/// the field; Go forms humantime lacked (`1.5m`, `+60s`) are accepted.
#[tokio::test]
async fn durations_outside_go_syntax_are_refused_naming_the_parameter() {
    let (app, _b, _g) = blue_green("").await;
    let c = client();
    for window in ["1min", "60sec", "1M", "-60s", "60"] {
        let r = api(
            &c,
            &app,
            Method::GET,
            &format!("/api/v1/stats?window={window}"),
            None,
            &[],
        )
        .await;
        assert_eq!(r.status, 400, "window={window}: {}", r.text());
        let e = r.json();
        assert_eq!(e["field"], "window", "{e}");
        assert_eq!(e["error"], "bad-request", "{e}");
        let reason = e["reason"].as_str().unwrap_or("");
        assert!(reason.contains("300ms, 1.5h, 1m30s"), "{window}: {reason}");
    }
    for (window, secs) in [("1.5m", 90), ("%2B60s", 60), ("1m30s", 90)] {
        let r = api(
            &c,
            &app,
            Method::GET,
            &format!("/api/v1/stats?window={window}"),
            None,
            &[],
        )
        .await;
        assert_eq!(r.status, 200, "window={window}: {}", r.text());
        assert_eq!(r.json()["windowSecs"], secs, "window={window}");
    }
    drop(c);
    app.shutdown().await;
    for timeout in ["15 seconds", "1M", "-1s"] {
        let e = patch_refused(
            &format!(r#"{{"timeout": "{timeout}"}}"#),
            422,
            Some("timeout"),
        )
        .await;
        let reason = e["reason"].as_str().unwrap_or("");
        assert!(reason.contains("300ms, 1.5h, 1m30s"), "{timeout}: {e}");
    }
}
