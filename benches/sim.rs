//! `weir sim judge`'s cost: 1,000 runs of one scenario (A/A at 50 rps, the three
//! judges, one thread), the unit its run time scales by. At 50 rps a run lasts
//! until the slowest judge decides (the sequential one, about 15 checks), so this
//! covers drawing the traffic and all three judges.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use weir::sim::{simulate, Options, Scenario};

fn bench_sim(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim_judge");
    let runs = 1_000;
    g.throughput(Throughput::Elements(runs.into()));
    let list = [Scenario::new("A/A", 50.0, 0.0, 1.0)];
    let opts = Options {
        threads: 1,
        ..Options::new(runs, 1)
    };
    g.bench_function("aa_50rps_1000_runs", |b| {
        b.iter(|| black_box(simulate(black_box(&list), &opts)))
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5))
        .sample_size(10)
}

criterion_group! { name = benches; config = config(); targets = bench_sim }
criterion_main!(benches);
