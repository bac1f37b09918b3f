//! The entry point of the `frame` fuzz target (`fuzz/`) and its corpus
//! regression test, built only with the `fuzz` feature: arbitrary bytes as a
//! compressed segment, as an inflated segment, as one frame and as a
//! sidecar. Every reader must return (an error is fine) rather than panic.

use bytes::Bytes;

use crate::{decompress_with_limit, sidecar_iter, Frame, Segment};

/// Feed `data` to every decoder.
pub fn decode(data: &[u8]) {
    // As a stored blob (bounded, as pops read them).
    if let Ok(segment) = decompress_with_limit(data, 1 << 20) {
        walk(&segment);
    }
    // As an already inflated segment.
    walk(&Segment::new(Bytes::copy_from_slice(data)));
    let _ = Frame::decode(data);
    if let Ok(hashes) = sidecar_iter(data) {
        for _ in hashes {}
    }
}

fn walk(segment: &Segment) {
    let count = segment.frames().take_while(Result::is_ok).count();
    let _ = segment.validate();
    let _ = segment.count_frames();
    let _ = segment.slice(0, count);
    let _ = segment.slice(count / 2, count - count / 2);
    let _ = segment.slice(count, 1);
}
