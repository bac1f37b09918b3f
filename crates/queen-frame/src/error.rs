//! The one error type of `queen-frame`, and the names of the fields it points at.

use std::{fmt, io};

/// Everything that can go wrong encoding, compressing, decoding or slicing a segment.
///
/// Every variant is a plain value: decoding never allocates to report a failure,
/// so a corrupt blob on the pop path costs no more than a good one.
/// Offsets are byte positions in the buffer handed to the decoder
/// (the decompressed segment for segment iteration, the frame buffer for [`Frame::decode`]).
///
/// [`Frame::decode`]: crate::Frame::decode
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// A field needed more bytes than its buffer (or its frame body) had left.
    #[error("truncated at byte {offset}: need {need} bytes, have {have}")]
    Truncated {
        /// Where the field starts.
        offset: usize,
        /// How many bytes the field needs.
        need: usize,
        /// How many bytes were left in the buffer or frame body.
        have: usize,
    },

    /// The flags byte has bits set that this version does not know.
    #[error("unknown flag bits in {flags:#04x} at byte {offset}")]
    InvalidFlags {
        /// Where the flags byte sits.
        offset: usize,
        /// The whole flags byte as read.
        flags: u8,
    },

    /// A text field is not valid UTF-8.
    #[error("{field} at byte {offset} is not valid utf-8")]
    InvalidUtf8 {
        /// Where the field's bytes start.
        offset: usize,
        /// Which field.
        field: Field,
    },

    /// A value is too long for its length prefix, or a segment would outgrow [`MAX_SEGMENT_SIZE`].
    ///
    /// [`MAX_SEGMENT_SIZE`]: crate::MAX_SEGMENT_SIZE
    #[error("{field} is {len} bytes, over the limit of {max}")]
    TooLarge {
        /// Which field.
        field: Field,
        /// Its length in bytes.
        len: usize,
        /// The largest length allowed.
        max: usize,
    },

    /// Decompressing a blob would produce more than the allowed number of bytes.
    #[error("decompressed segment exceeds the limit of {limit} bytes")]
    DecompressLimit {
        /// The limit that was hit.
        limit: usize,
    },

    /// zstd failed to compress a segment.
    #[error("zstd compression failed")]
    Compress(#[source] io::Error),

    /// zstd rejected a blob.
    #[error("zstd decompression failed")]
    Decompress(#[source] io::Error),

    /// A slice asked for frames the segment does not hold.
    #[error("frames {start}..{start}+{take} are out of range for a segment of {count} frames")]
    SliceOutOfRange {
        /// First frame asked for.
        start: usize,
        /// Number of frames asked for.
        take: usize,
        /// Frames the segment holds (counted up to where the walk stopped).
        count: usize,
    },

    /// A hash sidecar whose length is not a whole number of 16-byte hashes.
    #[error("sidecar length {len} is not a multiple of 16")]
    SidecarLength {
        /// The sidecar's length in bytes.
        len: usize,
    },

    /// A sidecar lookup past the last hash.
    #[error("sidecar index {idx} is out of range for {count} hashes")]
    SidecarIndex {
        /// The index asked for.
        idx: usize,
        /// Hashes the sidecar holds.
        count: usize,
    },
}

/// The part of a frame or segment an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The frame's transaction id.
    TransactionId,
    /// The frame's producer sub.
    ProducerSub,
    /// The frame's audience.
    Audience,
    /// A frame body (everything after `body_len`).
    Body,
    /// A whole decompressed segment.
    Segment,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::TransactionId => "transaction id",
            Field::ProducerSub => "producer sub",
            Field::Audience => "audience",
            Field::Body => "frame body",
            Field::Segment => "segment",
        })
    }
}
