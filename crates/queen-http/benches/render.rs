//! Criterion bench of the pop response: rendering the wire JSON of a batch of
//! messages (payloads copied verbatim, never re-serialised).

use std::hint::black_box;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use queen_engine::{Popped, PoppedMessage};

fn popped(n_messages: usize) -> Popped {
    let payload = Bytes::from(format!(r#"{{"body":"{}"}}"#, "x".repeat(1000)));
    let partition: Arc<str> = Arc::from("orders-7");
    Popped {
        queue: Some("orders".to_owned()),
        messages: (0..n_messages)
            .map(|i| PoppedMessage {
                id: uuid::Uuid::now_v7(),
                transaction_id: format!("txn-{i:08}"),
                trace_id: None,
                producer_sub: None,
                payload: payload.clone(),
                created_at: SystemTime::now(),
                partition_id: uuid::Uuid::now_v7(),
                partition: Arc::clone(&partition),
                offset: i64::try_from(i).unwrap_or(0),
            })
            .collect(),
        lease_id: Some(uuid::Uuid::now_v7()),
        partitions_claimed: 1,
    }
}

fn render(c: &mut Criterion) {
    let mut group = c.benchmark_group("pop_response_json");
    for n_messages in [1usize, 100, 1000] {
        let popped = popped(n_messages);
        group.throughput(Throughput::Elements(n_messages as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(n_messages),
            &popped,
            |b, popped| {
                b.iter(|| black_box(queen_http::render_pop_response(popped, "__QUEUE_MODE__")));
            },
        );
    }
    group.finish();
}

criterion_group!(benches, render);
criterion_main!(benches);
