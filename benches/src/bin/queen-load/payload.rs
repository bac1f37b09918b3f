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

/// Append a whole push request body to `out`: `n` items for one partition, with
/// message ids `first_id..first_id + n` and a fresh UUIDv7 transaction id each.
pub(crate) fn push_request(
    out: &mut Vec<u8>,
    bodies: &Bodies,
    queue: &str,
    partition: &str,
    first_id: u64,
    n: usize,
) {
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis())
        .unwrap_or_default();
    let mut uuid_text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    out.extend_from_slice(b"{\"items\":[");
    for (i, id) in (first_id..).take(n).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let transaction_id = uuid::Uuid::now_v7()
            .hyphenated()
            .encode_lower(&mut uuid_text);
        // Writing to a Vec cannot fail.
        let _ = write!(
            out,
            "{{\"queue\":\"{queue}\",\"partition\":\"{partition}\",\"transactionId\":\"{transaction_id}\",\
             \"payload\":{{\"id\":{id},\"ts\":{ts},\"body\":\"{}\"}}}}",
            bodies.body(id)
        );
    }
    out.extend_from_slice(b"]}");
}

/// Bytes of one payload (the `payload` value only), for the report.
pub(crate) fn payload_len(bodies: &Bodies) -> usize {
    let mut out = Vec::new();
    let _ = write!(
        out,
        "{{\"id\":{},\"ts\":{},\"body\":\"{}\"}}",
        1_000_000u64,
        1_700_000_000_000u64,
        bodies.body(0)
    );
    out.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_json_with_n_distinct_items() {
        let bodies = Bodies::generate();
        let mut out = Vec::new();
        push_request(&mut out, &bodies, "q", "p0", 10, 3);
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let items = value["items"].as_array().unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[2]["payload"]["id"], 12);
        assert_eq!(items[0]["partition"], "p0");
        assert_ne!(items[0]["transactionId"], items[1]["transactionId"]);
        assert_ne!(items[0]["payload"]["body"], items[1]["payload"]["body"]);
        let len = payload_len(&bodies);
        assert!((1000..1100).contains(&len), "{len}");
    }
}
