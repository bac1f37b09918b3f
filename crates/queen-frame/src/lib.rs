//! The inside of a segment: frame encoding and decoding, zstd, and 16-byte transaction-id hashes.
//!
//! `queen-frame` does no I/O, does not depend on tokio, and never parses a payload.
//! Its input on the pop path is a `log_segments.blob` read back from the database,
//! which it treats as untrusted: every decoder checks lengths before it slices and
//! reports a problem as a [`FrameError`] carrying the offset, never a panic.
//!
//! # Frame
//!
//! One message is one frame. All integers are little-endian.
//!
//! ```text
//!  offset  size        field
//!  ------  ----------  ---------------------------------------------------------------
//!  0       4           u32 body_len            bytes after this field
//!  4       1           u8  flags               1 trace id | 2 producer sub | 4 encrypted
//!  5       16          message_id              UUIDv7 bytes
//!  .       16          trace_id                only when flag 1
//!  .       2           u16 txn_len
//!  .       txn_len     transaction_id          UTF-8
//!  .       2           u16 psub_len            only when flag 2
//!  .       psub_len    producer_sub            UTF-8, only when flag 2
//!  .       rest        payload                 raw client JSON, or nonce + ciphertext (flag 4)
//!
//!  +--------+-------+------------+------------+---------+--------+-----------+---------+---------+
//!  |body_len| flags | message_id | [trace_id] | txn_len | txn id | [psub_len | psub]   | payload |
//!  |  u32   |  u8   |   16 B     |  [16 B]    |   u16   |  n B   | [u16      | m B]    |  rest   |
//!  +--------+-------+------------+------------+---------+--------+-----------+---------+---------+
//!           |<------------------------------- body_len bytes ------------------------------------>|
//! ```
//!
//! Unknown flag bits are a decode error rather than ignored, so a future field can
//! never be silently misread as payload. The payload has no length of its own:
//! it is whatever the body holds after the last header field.
//!
//! # Segment
//!
//! A segment is frames packed back to back with no header, no count and no padding,
//! compressed as a whole by zstd (level [`DEFAULT_ZSTD_LEVEL`] unless configured).
//! Frame `i` of a segment based at offset `B` is the message at offset `B + i`.
//!
//! ```text
//!  log_segments.blob = zstd( frame 0 | frame 1 | frame 2 | ... | frame n-1 )
//!                              ^ offset B  ^ B+1     ^ B+2           ^ B+n-1
//! ```
//!
//! [`SegmentBuilder`] packs and compresses. [`decompress`] inflates under a hard cap of
//! [`MAX_SEGMENT_SIZE`] (the builder refuses to grow past the same cap, so everything it
//! writes can be read back). The resulting [`Segment`] owns the decompressed buffer and
//! hands out [`Frame`]s that borrow from it: [`Segment::frames`] walks all of them,
//! [`Segment::slice`] steps over the frames before `start` by `body_len` alone and
//! decodes only `[start, start + take)`.
//!
//! # Sidecar
//!
//! Each segment has a hash sidecar, the `log_txns.hashes` bytea: one [`txn_hash`]
//! (BLAKE3 of the transaction id, first 16 bytes) per frame, in frame order.
//!
//! ```text
//!  log_txns.hashes = | hash(txn 0) | hash(txn 1) | hash(txn 2) | ... |
//!                    0            16            32            48
//!                      frame 0       frame 1       frame 2
//! ```
//!
//! Position is the address: the index of a matching 16-byte slot ([`sidecar_find`])
//! is the frame, so an ack carrying only a transaction id resolves to an offset.
//!
//! # Layout
//!
//! - `frame`: [`Frame`], its encoder and decoder.
//! - `segment`: [`SegmentBuilder`], [`decompress`], [`Segment`].
//! - `sidecar`: [`txn_hash`] and the sidecar functions.
//! - `error`: [`FrameError`], the crate's one error type.

#![deny(missing_docs)]
#![warn(clippy::pedantic)]

mod error;
mod frame;
mod segment;
mod sidecar;

#[cfg(feature = "fuzz")]
#[doc(hidden)]
pub mod fuzz;

pub use crate::{
    error::{Field, FrameError},
    frame::{
        Frame, AUDIENCE_SEPARATOR, FLAG_AUDIENCE, FLAG_ENCRYPTED, FLAG_PRODUCER_SUB, FLAG_TRACE_ID,
        KNOWN_FLAGS,
    },
    segment::{
        decompress, decompress_with_limit, validate, EncodedSegment, Frames, Segment,
        SegmentBuilder, DEFAULT_ZSTD_LEVEL, MAX_SEGMENT_SIZE,
    },
    sidecar::{
        build_sidecar, sidecar_find, sidecar_get, sidecar_iter, txn_hash, SidecarIter, HASH_LEN,
    },
};
