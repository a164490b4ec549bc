//! `RouteStats::record`, the per-request stats write (atomics only).
//!
//! - `same_second`: steady traffic inside one second (the common case).
//! - `second_rollover`: the second advances every 1,000 records, so the
//!   reset-ahead of the next slot (832 counter stores) is amortised in.
//! - `two_threads`: two threads record into the same route and second
//!   (cache-line contention on the shared counters; needs 2 cores).
//! - `snapshot_60s`: the reader side (the engine's tick, `GET /stats`).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir::stats::{Role, RouteStats};

/// Same window as the proxy's table store (`STATS_CAPACITY_SECS`).
const CAPACITY: usize = 600;

fn bench_record(c: &mut Criterion) {
    let mut g = c.benchmark_group("stats_record");
    g.throughput(Throughput::Elements(1));

    let stats = RouteStats::new(CAPACITY);
    let mut lat = 0u64;
    g.bench_function("same_second", |b| {
        b.iter(|| {
            lat = (lat + 37) % 5_000;
            stats.record(
                black_box(Role::Primary),
                black_box(1_000),
                lat.is_multiple_of(97),
                black_box(200 + lat),
            );
        })
    });

    let stats = RouteStats::new(CAPACITY);
    let mut i = 0u64;
    g.bench_function("second_rollover", |b| {
        b.iter(|| {
            i += 1;
            stats.record(
                black_box(Role::Canary),
                black_box(10 + i / 1_000),
                false,
                black_box(250 + i % 4_000),
            );
        })
    });

    g.bench_function("two_threads", |b| {
        b.iter_custom(|iters| {
            let stats = Arc::new(RouteStats::new(CAPACITY));
            let other = {
                let stats = stats.clone();
                std::thread::spawn(move || {
                    for k in 0..iters {
                        stats.record(Role::Primary, 5, false, black_box(300 + k % 1_000));
                    }
                })
            };
            let start = Instant::now();
            for k in 0..iters {
                stats.record(Role::Primary, 5, false, black_box(300 + k % 1_000));
            }
            let t = start.elapsed();
            let _ = other.join();
            t
        })
    });
    g.finish();

    let stats = RouteStats::new(CAPACITY);
    for s in 0..60u64 {
        for k in 0..500u64 {
            stats.record(
                Role::Primary,
                1_000 + s,
                k % 100 == 0,
                100 + (k * 13) % 20_000,
            );
        }
    }
    c.bench_function("stats_snapshot_60s", |b| {
        b.iter(|| black_box(stats.snapshot(black_box(Role::Primary), 1_059, 60)))
    });
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

criterion_group! { name = benches; config = config(); targets = bench_record }
criterion_main!(benches);
