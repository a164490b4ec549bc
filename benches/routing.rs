//! Route lookup + `decide()` per request, for 1, 10 and 100 routes.
//!
//! Each iteration does what the proxy does between "request parsed" and
//! "backend chosen": normalise the host, `RoutingTable::find`, build the
//! `RequestView`, `decide()` with a fresh random draw. The request is a
//! typical browser request (8 headers, a 3-cookie Cookie header) that
//! matches no A/B rule and carries no pin, so every matcher of the route
//! is evaluated: the worst common case. `cases` adds the early exits.
//!
//! `route_decide_raw` does the same over the HTTP/1 fast path's raw header
//! list (what serves clear-text HTTP/1 requests); `route_decide` over hyper's
//! `HeaderMap` (HTTP/2, TLS, and requests the fast path hands over).
//!
//! Target: ≤ 150 ns for 100 routes with regex matchers.

mod support;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use http::{HeaderMap, HeaderValue, Method};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;
use support::{host, prefix, routing_table, Features};
use weir::routing::{decide, normalize_host, Draw, Headers, RequestView, RoutingTable};

fn browser_headers(
    extra_cookie: Option<&str>,
    extra: &[(&'static str, &'static str)],
) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        "user-agent",
        HeaderValue::from_static(
            "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
        ),
    );
    h.insert(
        "accept",
        HeaderValue::from_static("text/html,application/xhtml+xml,*/*;q=0.8"),
    );
    h.insert(
        "accept-language",
        HeaderValue::from_static("en-GB,en;q=0.5"),
    );
    h.insert(
        "accept-encoding",
        HeaderValue::from_static("gzip, deflate, br"),
    );
    h.insert(
        "x-request-id",
        HeaderValue::from_static("7f9c2ba4e88f827d616045507605853e"),
    );
    h.insert(
        "referer",
        HeaderValue::from_static("https://svc.bench.example/"),
    );
    let mut cookie = String::from("session=3b1f0c9e77aa; theme=dark; _ga=GA1.2.1234567.890");
    if let Some(c) = extra_cookie {
        cookie.push_str("; ");
        cookie.push_str(c);
    }
    h.insert(
        "cookie",
        HeaderValue::from_str(&cookie).expect("valid cookie header"),
    );
    for (k, v) in extra {
        h.insert(*k, HeaderValue::from_static(v));
    }
    h
}

/// One request's worth of routing work; returns something to black-box.
/// `headers`: hyper's map, or the fast path's raw list (`RequestView::raw`).
#[inline]
fn route_and_decide(
    table: &RoutingTable,
    host_raw: &str,
    path: &str,
    headers: Headers<'_>,
    method: &Method,
    r: u64,
) -> Option<(usize, bool)> {
    let host = normalize_host(host_raw);
    let idx = table.find(&host, path)?;
    let route = &table.routes[idx];
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let view = match headers {
        Headers::Map(m) => RequestView::new(&host, path, None, method, m, ip),
        Headers::Raw(h) => RequestView::raw(&host, path, None, method, h, ip),
    };
    let d = decide(&view, route, Draw::from_u64(r));
    Some((idx, d.mirror || !d.cookies.is_empty()))
}

/// A request head as a browser sends it, in `httparse`'s form (with the
/// Host header the map form carries separately).
fn raw_headers<'a>(map: &'a HeaderMap, host: &'a str) -> Vec<httparse::Header<'a>> {
    let mut v = vec![httparse::Header {
        name: "Host",
        value: host.as_bytes(),
    }];
    v.extend(map.iter().map(|(k, val)| httparse::Header {
        name: k.as_str(),
        value: val.as_bytes(),
    }));
    v
}

/// A cheap deterministic stream of random words (splitmix64 step).
fn next_rand(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn bench_decide(c: &mut Criterion) {
    let all = [
        Features::Plain,
        Features::Weight,
        Features::Match,
        Features::MatchAffinity,
    ];
    bench_decide_over(c, "route_decide", &all, false);
}

/// `route_decide` on the HTTP/1 fast path's raw header list, for the
/// feature sets with header rules.
fn bench_decide_raw(c: &mut Criterion) {
    let with_rules = [Features::Match, Features::MatchAffinity];
    bench_decide_over(c, "route_decide_raw", &with_rules, true);
}

fn bench_decide_over(c: &mut Criterion, group: &str, features: &[Features], raw: bool) {
    let method = Method::GET;
    let headers = browser_headers(None, &[]);
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    for &features in features {
        for n in [1usize, 10, 100] {
            let table = routing_table(n, features, false);
            // The last route: no help from configuration order.
            let host_raw = format!("{}:8080", host(n - 1));
            let path = format!("{}items/42", prefix(n - 1));
            let list = raw_headers(&headers, &host_raw);
            let view = if raw {
                Headers::Raw(&list)
            } else {
                Headers::Map(&headers)
            };
            assert!(route_and_decide(&table, &host_raw, &path, view, &method, 1).is_some());
            let mut seed = 1u64;
            g.bench_with_input(BenchmarkId::new(features.name(), n), &n, |b, _| {
                b.iter(|| {
                    let r = next_rand(&mut seed);
                    black_box(route_and_decide(
                        black_box(&table),
                        black_box(&host_raw),
                        black_box(&path),
                        black_box(view),
                        &method,
                        r,
                    ))
                })
            });
        }
    }
    g.finish();
}

/// All routes on one host: the lookup scans the prefix list (longest first).
fn bench_find_one_host(c: &mut Criterion) {
    let mut g = c.benchmark_group("find_one_host");
    g.throughput(Throughput::Elements(1));
    for n in [1usize, 10, 100] {
        let table = routing_table(n, Features::Plain, true);
        let host_raw = host(0);
        // Every prefix has the same length, so the last configured is scanned last.
        let path = format!("{}items/42", prefix(n - 1));
        assert!(table.find(&host_raw, &path).is_some());
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| black_box(table.find(black_box(&host_raw), black_box(&path))))
        });
    }
    g.finish();
}

/// The early exits of `decide()` on a 100-route table with everything on.
fn bench_cases(c: &mut Criterion) {
    let method = Method::GET;
    let table = routing_table(100, Features::MatchAffinity, false);
    let host_raw = host(99);
    let path = format!("{}items/42", prefix(99));
    let cases: [(&str, HeaderMap); 5] = [
        ("no_match_unpinned", browser_headers(None, &[])),
        (
            "header_exact_hit",
            browser_headers(None, &[("x-canary", "insider")]),
        ),
        (
            "cookie_regex_hit",
            browser_headers(Some("canary=always"), &[]),
        ),
        (
            "pinned_canary",
            browser_headers(Some("weir-canary=canaryrun0001"), &[]),
        ),
        (
            "pinned_primary",
            browser_headers(Some("weir-primary=primarystep0001"), &[]),
        ),
    ];
    let mut g = c.benchmark_group("decide_cases_100_routes");
    g.throughput(Throughput::Elements(1));
    for (name, headers) in &cases {
        let mut seed = 7u64;
        g.bench_function(*name, |b| {
            b.iter(|| {
                let r = next_rand(&mut seed);
                black_box(route_and_decide(
                    &table,
                    black_box(&host_raw),
                    black_box(&path),
                    black_box(Headers::Map(headers)),
                    &method,
                    r,
                ))
            })
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

criterion_group! { name = benches; config = config(); targets = bench_decide, bench_decide_raw, bench_find_one_host, bench_cases }
criterion_main!(benches);
