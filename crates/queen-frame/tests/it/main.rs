//! Property tests of `queen-frame` through its public API: one binary, suites as modules.

mod robustness;
mod roundtrip;

use proptest::{collection::vec, option, prelude::*};
use queen_frame::Frame;

/// An owned frame, so strategies can generate what a [`Frame`] borrows.
#[derive(Debug, Clone)]
struct OwnedFrame {
    message_id: [u8; 16],
    trace_id: Option<[u8; 16]>,
    transaction_id: String,
    producer_sub: Option<String>,
    encrypted: bool,
    audience: Option<String>,
    payload: Vec<u8>,
}

impl OwnedFrame {
    fn view(&self) -> Frame<'_> {
        Frame {
            message_id: self.message_id,
            trace_id: self.trace_id,
            transaction_id: &self.transaction_id,
            producer_sub: self.producer_sub.as_deref(),
            encrypted: self.encrypted,
            audience: self.audience.as_deref(),
            payload: &self.payload,
        }
    }
}

/// Arbitrary frames: any ids, optional fields chosen independently (so every flag
/// combination occurs), transaction ids of 0..300 arbitrary unicode scalars, payloads up to 4 KiB.
fn owned_frame() -> impl Strategy<Value = OwnedFrame> {
    (
        any::<[u8; 16]>(),
        option::of(any::<[u8; 16]>()),
        vec(any::<char>(), 0..300).prop_map(String::from_iter),
        option::of(vec(any::<char>(), 0..64).prop_map(String::from_iter)),
        any::<bool>(),
        option::of(vec("[a-z_]{1,12}", 1..4).prop_map(|groups| groups.join("\n"))),
        payload(),
    )
        .prop_map(
            |(message_id, trace_id, transaction_id, producer_sub, encrypted, audience, payload)| {
                OwnedFrame {
                    message_id,
                    trace_id,
                    transaction_id,
                    producer_sub,
                    encrypted,
                    audience,
                    payload,
                }
            },
        )
}

/// Payloads of 0..4096 arbitrary bytes.
///
/// Drawn from a length and a seed rather than byte by byte: a per-byte strategy keeps
/// a shrink tree per byte, which made generation the slowest part of every test.
/// Shrinking still finds the shortest failing payload through the length.
fn payload() -> impl Strategy<Value = Vec<u8>> {
    (0usize..4096, any::<u64>()).prop_map(|(len, seed)| {
        // xorshift64*, seeded away from zero.
        let mut state = seed | 1;
        (0..len)
            .map(|_| {
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes()[7]
            })
            .collect()
    })
}

/// Up to 24 arbitrary frames.
fn owned_frames() -> impl Strategy<Value = Vec<OwnedFrame>> {
    vec(owned_frame(), 0..24)
}
