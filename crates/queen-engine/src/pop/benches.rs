//! Benches of the crate-private hot paths (the hot-list ring and the
//! limiter's permit cycle), built only with the `bench` feature and run by
//! `benches/hot_path.rs`: the modules stay private, and the benches live
//! beside them.

// Benches set up fixtures; a panic there is a broken bench, not input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Instant;

use criterion::{BenchmarkId, Criterion, Throughput};

use crate::pop::hotlist::{HotList, Outcome};
use crate::pop::limiter::{Limiter, LimiterConfig};

/// The hot-list ring: a push's mark, a parked re-poll's empty check, one
/// pop's take and check-in.
pub fn hotlist(c: &mut Criterion) {
    let mut group = c.benchmark_group("hotlist");
    let now = Instant::now();
    for n_groups in [1usize, 16] {
        // A push marks its partition in every group's ring of the queue.
        let hot = HotList::default();
        for g in 0..n_groups {
            hot.reseed("q", &format!("g{g}"), Vec::new(), now);
        }
        let names: Vec<String> = (0..1024).map(|i| format!("p{i}")).collect();
        let mut i = 0usize;
        group.bench_with_input(
            BenchmarkId::new("mark_ready", n_groups),
            &n_groups,
            |b, _| {
                b.iter(|| {
                    hot.mark_ready("q", &names[i % names.len()]);
                    i += 1;
                });
            },
        );
    }
    // The same push with 10,000 other queues' rings on the broker
    // (a flat map of rings made this walk all of them), and the wheel's tick
    // over them with nothing due.
    {
        let hot = HotList::default();
        for q in 0..10_000 {
            hot.reseed(&format!("other{q}"), "g", Vec::new(), now);
        }
        hot.reseed("q", "g", Vec::new(), now);
        let names: Vec<String> = (0..1024).map(|i| format!("p{i}")).collect();
        let mut i = 0usize;
        group.bench_function("mark_ready_among_10k_queues", |b| {
            b.iter(|| {
                hot.mark_ready("q", &names[i % names.len()]);
                i += 1;
            });
        });
        group.bench_function("wheel_tick_10k_rings_idle", |b| {
            b.iter(|| black_box(hot.promote_due(Instant::now())));
        });
    }
    // The empty check a parked consumer's re-poll makes (nothing ready).
    let hot = HotList::default();
    hot.reseed("q", "g", Vec::new(), now);
    group.bench_function("has_ready_empty", |b| {
        b.iter(|| black_box(hot.has_ready("q", "g", now)));
    });
    // One pop's candidate cycle: take 16, check the verdicts back in.
    for n_partitions in [100usize, 10_000] {
        let hot = HotList::default();
        let names: Vec<String> = (0..n_partitions).map(|i| format!("p{i}")).collect();
        hot.reseed("q", "g", names, now);
        group.throughput(Throughput::Elements(16));
        group.bench_with_input(
            BenchmarkId::new("take_check_in_16", n_partitions),
            &n_partitions,
            |b, _| {
                b.iter(|| {
                    let taken = hot.take("q", "g", 16, now);
                    let outcomes: Vec<(String, Outcome)> = taken
                        .names
                        .into_iter()
                        .map(|name| (name, Outcome::Delivered))
                        .collect();
                    hot.check_in("q", "g", &outcomes, Vec::new(), now);
                });
            },
        );
    }
    group.finish();
}

/// The Vegas limiter's permit cycle.
pub fn limiter(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let limiter = Limiter::new(LimiterConfig::default());
    c.bench_function("limiter_acquire_release", |b| {
        b.to_async(&runtime).iter(|| async {
            let permit = limiter.acquire().await;
            permit.release();
        });
    });
}
