//! Request bodies: ~1 KiB JSON payloads that differ per message, so zstd sees
//! text with realistic redundancy (words from a small vocabulary, in random
//! order) rather than one repeated string or incompressible noise.

use std::io::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// Characters of the `body` field of each payload. With the `id` and `ts`
/// fields around it a payload is about 1 KiB.
const BODY_LEN: usize = 980;

/// Distinct bodies generated up front; message `id` uses body `id % BODIES`.
/// More than the largest batch, so a segment never holds the same body twice.
const BODIES: usize = 4096;

const WORDS: &[&str] = &[
    "order",
    "invoice",
    "customer",
    "shipment",
    "payment",
    "refund",
    "account",
    "balance",
    "credit",
    "debit",
    "warehouse",
    "parcel",
    "status",
    "pending",
    "approved",
    "rejected",
    "priority",
    "express",
    "standard",
    "region",
    "north",
    "south",
    "east",
    "west",
    "euro",
    "dollar",
    "amount",
    "total",
    "tax",
    "discount",
    "item",
    "quantity",
    "price",
    "sku",
    "vendor",
    "supplier",
    "contract",
    "renewal",
    "trial",
    "premium",
    "basic",
    "user",
    "session",
    "login",
    "logout",
    "device",
    "mobile",
    "desktop",
    "browser",
    "event",
    "click",
    "view",
    "cart",
    "checkout",
    "coupon",
    "gift",
    "card",
    "bank",
    "transfer",
    "wire",
    "ledger",
    "audit",
    "report",
    "daily",
    "weekly",
    "monthly",
    "quarter",
    "annual",
    "alpha",
    "beta",
    "gamma",
    "delta",
    "queue",
    "stream",
    "partition",
    "offset",
    "segment",
    "commit",
];

/// The pre-generated bodies.
pub(crate) struct Bodies {
    texts: Vec<String>,
}

impl Bodies {
    /// Generate [`BODIES`] bodies from a fixed seed (the same on every run).
    pub(crate) fn generate() -> Bodies {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            // xorshift64*
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let texts = (0..BODIES)
            .map(|_| {
                let mut text = String::with_capacity(BODY_LEN + 16);
                while text.len() < BODY_LEN {
                    let pick = next();
                    let word = WORDS[usize::try_from(pick % WORDS.len() as u64).unwrap_or(0)];
                    text.push_str(word);
                    // Every few words a number, as real records have.
                    if pick & 0x700 == 0 {
                        text.push_str(&format!("-{}", (pick >> 20) % 100_000));
                    }
                    text.push(' ');
                }
                text.truncate(BODY_LEN);
                text
            })
            .collect();
        Bodies { texts }
    }

    fn body(&self, id: u64) -> &str {
        let index = usize::try_from(id % BODIES as u64).unwrap_or(0);
        &self.texts[index]
    }
}

/// How the items of a request get their transaction ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnIds {
    /// A fresh UUIDv7 each, as the SDKs send (push, latency).
    Fresh,
    /// [`sequential_txn_id`] of the payload `id`, so a consumer can map every
    /// delivered message back to the message it pushed (pop's exactly-once check).
    Sequential,
    /// None: the broker generates them (and, knowing they cannot repeat,
    /// skips its duplicate probe).
    Broker,
}

/// The transaction id of payload `id` under [`TxnIds::Sequential`]: UUID-shaped
/// (36 characters, like the SDKs' UUIDv7), with `id` in the last 12 hex digits.
pub(crate) fn sequential_txn_id(id: u64) -> String {
    format!("00000000-0000-7000-8000-{id:012x}")
}

/// The payload `id` a [`sequential_txn_id`] was made from.
pub(crate) fn parse_sequential_txn_id(text: &str) -> Option<u64> {
    let hex = text.strip_prefix("00000000-0000-7000-8000-")?;
    if hex.len() != 12 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// Append a whole push request body to `out`: `n` items for one partition, with
/// message ids `first_id..first_id + n`.
pub(crate) fn push_request(
    out: &mut Vec<u8>,
    bodies: &Bodies,
    queue: &str,
    partition: &str,
    first_id: u64,
    n: usize,
    txn: TxnIds,
) {
    let ts = unix_millis();
    out.extend_from_slice(b"{\"items\":[");
    for (i, id) in (first_id..).take(n).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        item(out, bodies, queue, partition, id, ts, txn);
    }
    out.extend_from_slice(b"]}");
}

/// Append a push request body with one item per partition of `partitions`
/// (message ids `first_id..`): creates every partition in one request.
pub(crate) fn push_request_spread(
    out: &mut Vec<u8>,
    bodies: &Bodies,
    queue: &str,
    partitions: &[String],
    first_id: u64,
    txn: TxnIds,
) {
    let ts = unix_millis();
    out.extend_from_slice(b"{\"items\":[");
    for (i, (partition, id)) in partitions.iter().zip(first_id..).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        item(out, bodies, queue, partition, id, ts, txn);
    }
    out.extend_from_slice(b"]}");
}

/// One item of a push request.
fn item(
    out: &mut Vec<u8>,
    bodies: &Bodies,
    queue: &str,
    partition: &str,
    id: u64,
    ts: u128,
    txn: TxnIds,
) {
    let mut uuid_text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let sequential;
    let transaction_id: Option<&str> = match txn {
        TxnIds::Fresh => Some(
            uuid::Uuid::now_v7()
                .hyphenated()
                .encode_lower(&mut uuid_text),
        ),
        TxnIds::Sequential => {
            sequential = sequential_txn_id(id);
            Some(&sequential)
        }
        TxnIds::Broker => None,
    };
    // Writing to a Vec cannot fail.
    let _ = write!(
        out,
        "{{\"queue\":\"{queue}\",\"partition\":\"{partition}\","
    );
    if let Some(transaction_id) = transaction_id {
        let _ = write!(out, "\"transactionId\":\"{transaction_id}\",");
    }
    let _ = write!(out, "\"payload\":{}}}", Payload { bodies, id, ts });
}

/// The `payload` value of message `id`: `{"id":..,"ts":..,"body":".."}`.
pub(crate) struct Payload<'a> {
    pub(crate) bodies: &'a Bodies,
    pub(crate) id: u64,
    /// Unix milliseconds.
    pub(crate) ts: u128,
}

impl std::fmt::Display for Payload<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{{\"id\":{},\"ts\":{},\"body\":\"{}\"}}",
            self.id,
            self.ts,
            self.bodies.body(self.id)
        )
    }
}

/// The long-poll timeout of every pop, milliseconds.
const POP_TIMEOUT_MS: u64 = 1000;

/// Partition names `p0`, `p1`, ... of a queue with `n` partitions.
pub(crate) fn partition_names(n: usize) -> Vec<String> {
    (0..n).map(|p| format!("p{p}")).collect()
}

/// The path of a long-polling pop of up to `batch` messages from `queue`,
/// consumed at delivery with `auto_ack`.
pub(crate) fn pop_path(queue: &str, batch: usize, auto_ack: bool) -> String {
    let mut path =
        format!("/api/v1/pop/queue/{queue}?batch={batch}&wait=true&timeout={POP_TIMEOUT_MS}");
    if auto_ack {
        path.push_str("&autoAck=true");
    }
    path
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_millis() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis())
        .unwrap_or_default()
}

/// Bytes of one payload (the `payload` value only), for the report.
pub(crate) fn payload_len(bodies: &Bodies) -> usize {
    Payload {
        bodies,
        id: 1_000_000,
        ts: 1_700_000_000_000,
    }
    .to_string()
    .len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_json_with_n_distinct_items() {
        let bodies = Bodies::generate();
        let mut out = Vec::new();
        push_request(&mut out, &bodies, "q", "p0", 10, 3, TxnIds::Fresh);
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let items = value["items"].as_array().unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[2]["payload"]["id"], 12);
        assert_eq!(items[0]["partition"], "p0");
        assert_ne!(items[0]["transactionId"], items[1]["transactionId"]);
        assert_ne!(items[0]["payload"]["body"], items[1]["payload"]["body"]);
        out.clear();
        push_request(&mut out, &bodies, "q", "p0", 10, 2, TxnIds::Broker);
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(value["items"][1].get("transactionId").is_none());
        assert_eq!(value["items"][1]["payload"]["id"], 11);
        let len = payload_len(&bodies);
        assert!((1000..1100).contains(&len), "{len}");
    }

    #[test]
    fn sequential_ids_round_trip_and_spread_requests_hit_every_partition() {
        let bodies = Bodies::generate();
        let partitions = partition_names(3);
        let mut out = Vec::new();
        push_request_spread(&mut out, &bodies, "q", &partitions, 7, TxnIds::Sequential);
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let items = value["items"].as_array().unwrap();
        assert_eq!(items.len(), 3);
        for (i, item) in items.iter().enumerate() {
            assert_eq!(item["partition"], format!("p{i}"));
            let txn = item["transactionId"].as_str().unwrap();
            assert_eq!(txn.len(), 36);
            let id = parse_sequential_txn_id(txn).unwrap();
            assert_eq!(id, 7 + i as u64);
            assert_eq!(item["payload"]["id"], id);
        }
        assert_eq!(parse_sequential_txn_id("nope"), None);
        assert_eq!(
            parse_sequential_txn_id(&sequential_txn_id(0xabc_def0_1234)),
            Some(0xabc_def0_1234)
        );
    }
}
