//! Criterion benches of the engine's in-memory hot paths: the hot-list ring
//! (what every pop consults before it may touch PostgreSQL) and the Vegas
//! limiter's permit cycle, defined inside the crate beside their private
//! modules (`queen_engine::benches`, the `bench` feature), and payload
//! sealing. Run with `cargo bench -p queen-engine --features bench`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use queen_engine::benches::{hotlist, limiter};
use queen_engine::EncryptionKey;

fn seal(c: &mut Criterion) {
    let key: EncryptionKey = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        .parse()
        .unwrap();
    let payload = vec![b'x'; 1024];
    let mut group = c.benchmark_group("aes_gcm_1k");
    group.throughput(Throughput::Bytes(1024));
    group.bench_function("seal", |b| {
        b.iter(|| black_box(key.seal(&payload).unwrap()));
    });
    let sealed = key.seal(&payload).unwrap();
    group.bench_function("open", |b| {
        b.iter(|| black_box(key.open(&sealed).unwrap()));
    });
    group.finish();
}

criterion_group!(benches, hotlist, limiter, seal);
criterion_main!(benches);
