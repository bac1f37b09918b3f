//! Frame benches: segment build and compress, decompress and slice, transaction-id hashes, sidecar.
//!
//! Payloads are 1 KiB JSON objects that differ per message, so zstd sees realistic input
//! rather than one repeated string.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use queen_frame::{
    build_sidecar, decompress, sidecar_find, txn_hash, Frame, SegmentBuilder, DEFAULT_ZSTD_LEVEL,
};

/// Sizes of the segments benched: an idle partition's flush (one message), a busy one, a heavy one.
const SEGMENT_SIZES: [usize; 3] = [1, 100, 1000];
/// Bytes of JSON per payload.
const PAYLOAD_LEN: usize = 1024;

/// An owned message, so frames can borrow from it.
struct Message {
    message_id: [u8; 16],
    transaction_id: String,
    payload: Vec<u8>,
}

impl Message {
    fn frame(&self) -> Frame<'_> {
        Frame {
            message_id: self.message_id,
            trace_id: None,
            transaction_id: &self.transaction_id,
            producer_sub: None,
            encrypted: false,
            audience: None,
            payload: &self.payload,
        }
    }
}

/// `n_messages` messages with UUID-shaped transaction ids and 1 KiB JSON payloads.
fn messages(n_messages: usize) -> Vec<Message> {
    (0..n_messages)
        .map(|idx| {
            let mut message_id = [0x01, 0x93, 0x5a, 0x7c, 0x00, 0x00, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 0];
            message_id[8..].copy_from_slice(&(idx as u64).to_be_bytes());
            let transaction_id = format!("0193a5c7-{:04x}-7000-8000-{:012x}", idx % 0xffff, idx * 7919);
            let mut payload = format!(
                r#"{{"orderId":"ord-{idx:08}","customer":{{"id":{},"tier":"gold"}},"amount":{}.{:02},"currency":"EUR","items":["#,
                idx * 31 % 10_007,
                idx * 17 % 1000,
                idx % 100,
            );
            let mut item = 0;
            while payload.len() < PAYLOAD_LEN - 64 {
                payload.push_str(&format!(
                    r#"{{"sku":"SKU-{:06}","qty":{},"price":{}}},"#,
                    (idx * 13 + item * 101) % 1_000_000,
                    item % 9 + 1,
                    (idx + item) * 3 % 500
                ));
                item += 1;
            }
            payload.push_str(r#"{"sku":"END","qty":0,"price":0}],"note":""#);
            while payload.len() < PAYLOAD_LEN - 2 {
                payload.push('x');
            }
            payload.push_str("\"}");
            Message {
                message_id,
                transaction_id,
                payload: payload.into_bytes(),
            }
        })
        .collect()
}

fn blob(messages: &[Message]) -> Vec<u8> {
    let mut builder = SegmentBuilder::new();
    for message in messages {
        builder.push(&message.frame()).unwrap();
    }
    builder.finish().unwrap().blob
}

fn build(c: &mut Criterion) {
    let mut group = c.benchmark_group("segment_build");
    for n_messages in SEGMENT_SIZES {
        let messages = messages(n_messages);
        let raw_len: usize = messages.iter().map(|m| m.frame().encoded_size()).sum();
        group.throughput(Throughput::Bytes(raw_len as u64));
        // The builder is reused across iterations, as a flusher would keep it.
        let mut builder = SegmentBuilder::with_level(DEFAULT_ZSTD_LEVEL);
        group.bench_with_input(
            BenchmarkId::new("reused", n_messages),
            &messages,
            |b, messages| {
                b.iter(|| {
                    for message in messages {
                        builder.push(&message.frame()).unwrap();
                    }
                    black_box(builder.finish().unwrap())
                });
            },
        );
        group.bench_with_input(
            BenchmarkId::new("fresh", n_messages),
            &messages,
            |b, messages| {
                b.iter(|| {
                    let mut builder = SegmentBuilder::new();
                    for message in messages {
                        builder.push(&message.frame()).unwrap();
                    }
                    black_box(builder.finish().unwrap())
                });
            },
        );
    }
    group.finish();

    let messages = messages(1000);
    let segment = blob(&messages);
    let raw_len: usize = messages.iter().map(|m| m.frame().encoded_size()).sum();
    eprintln!(
        "1000 frames of {PAYLOAD_LEN} B JSON: raw {raw_len} B, blob {} B (ratio {:.1})",
        segment.len(),
        raw_len as f64 / segment.len() as f64
    );
}

fn read(c: &mut Criterion) {
    let mut group = c.benchmark_group("segment_read");
    for n_messages in SEGMENT_SIZES {
        let messages = messages(n_messages);
        let blob = blob(&messages);
        let raw_len: usize = messages.iter().map(|m| m.frame().encoded_size()).sum();
        group.throughput(Throughput::Bytes(raw_len as u64));
        group.bench_with_input(
            BenchmarkId::new("decompress", n_messages),
            &blob,
            |b, blob| {
                b.iter(|| black_box(decompress(blob).unwrap()));
            },
        );
        // A pop's typical shape: the batch starts mid-segment and takes a tenth of it.
        let (start, take) = (n_messages / 2, (n_messages / 10).max(1));
        group.bench_with_input(
            BenchmarkId::new("decompress_slice_tenth", n_messages),
            &blob,
            |b, blob| {
                b.iter(|| {
                    let segment = decompress(blob).unwrap();
                    black_box(segment.slice(start, take).unwrap().len())
                });
            },
        );
        group.bench_with_input(
            BenchmarkId::new("decompress_slice_all", n_messages),
            &blob,
            |b, blob| {
                b.iter(|| {
                    let segment = decompress(blob).unwrap();
                    black_box(segment.slice(0, n_messages).unwrap().len())
                });
            },
        );
        // The frame walk alone, on an already decompressed segment: skip to the last tenth.
        let segment = decompress(&blob).unwrap();
        let take = (n_messages / 10).max(1);
        let start = n_messages - take;
        group.throughput(Throughput::Elements(take as u64));
        group.bench_function(BenchmarkId::new("slice_last_tenth", n_messages), |b| {
            b.iter(|| black_box(segment.slice(start, take).unwrap().len()));
        });
    }
    group.finish();
}

fn hashes(c: &mut Criterion) {
    let transaction_id = "0193a5c7-1f2e-7000-8000-00000001e3b7";
    c.bench_function("txn_hash/uuid", |b| {
        b.iter(|| black_box(txn_hash(black_box(transaction_id))));
    });

    let mut group = c.benchmark_group("sidecar");
    for n_messages in SEGMENT_SIZES {
        let hashes: Vec<[u8; 16]> = messages(n_messages)
            .iter()
            .map(|m| txn_hash(&m.transaction_id))
            .collect();
        group.bench_with_input(
            BenchmarkId::new("build", n_messages),
            &hashes,
            |b, hashes| {
                b.iter(|| black_box(build_sidecar(hashes)));
            },
        );
        let sidecar = build_sidecar(&hashes);
        let last = hashes[n_messages - 1];
        group.bench_with_input(
            BenchmarkId::new("find_last", n_messages),
            &sidecar,
            |b, sidecar| {
                b.iter(|| black_box(sidecar_find(sidecar, black_box(&last)).unwrap()));
            },
        );
        let missing = [0xa5; 16];
        group.bench_with_input(
            BenchmarkId::new("find_missing", n_messages),
            &sidecar,
            |b, sidecar| {
                b.iter(|| black_box(sidecar_find(sidecar, black_box(&missing)).unwrap()));
            },
        );
    }
    group.finish();
}

criterion_group!(benches, build, read, hashes);
criterion_main!(benches);
