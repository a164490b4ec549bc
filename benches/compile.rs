//! Table compile time for 1,000 routes: `compile_table` (validation, regex
//! compilation, index build) on an already-deserialised table, which is what
//! every control-API write and every engine step pays; and the whole
//! `parse_yaml` pipeline (YAML → raw → validated) as a config load pays it.

mod support;

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::path::Path;
use std::time::Duration;
use support::{raw_table, table_yaml, Features};

fn bench_compile(c: &mut Criterion) {
    let mut g = c.benchmark_group("compile_1000_routes");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    for features in [Features::Plain, Features::MatchAffinity] {
        let yaml = table_yaml(1_000, features, false);
        let raw = raw_table(&yaml);
        g.bench_function(format!("compile_table/{}", features.name()), |b| {
            b.iter(|| black_box(weir::config::compile_table(black_box(&raw)).is_ok()))
        });
        let full = format!("listeners:\n  - name: http\n    address: 127.0.0.1:0\n{yaml}");
        g.bench_function(format!("parse_yaml/{}", features.name()), |b| {
            b.iter(|| {
                black_box(
                    weir::config::parse_yaml(black_box(&full), "bench.yaml", Path::new("."))
                        .is_ok(),
                )
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_compile);
criterion_main!(benches);
