//! Segments: many frames packed back to back and compressed as one zstd blob.
//!
//! [`SegmentBuilder`] is the push side: it packs frames and compresses the buffer.
//! [`decompress`] and [`Segment`] are the pop side: inflate under a hard size cap,
//! then walk frames, borrowing each one from the decompressed buffer.

use std::{
    cell::RefCell,
    fmt,
    io::{self, Read},
};

use bytes::{Bytes, BytesMut};
use zstd::zstd_safe;

use crate::{
    error::{Field, FrameError},
    frame::{decode_at, skip_at, Frame, MIN_FRAME_LEN},
};

/// The zstd level segments are compressed at unless configured (`QUEEN_V2_ZSTD_LEVEL`).
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// The largest decompressed segment, 1 GiB.
///
/// [`SegmentBuilder`] refuses to grow a segment past it and [`decompress`] refuses
/// to inflate a blob past it, so every blob the builder writes can be read back,
/// and a corrupt or hostile blob (a zip bomb) fails instead of exhausting memory.
pub const MAX_SEGMENT_SIZE: usize = 1 << 30;

/// Packs frames into one buffer and compresses it into a segment blob.
///
/// The builder is reusable: [`SegmentBuilder::finish`] leaves it empty but keeps
/// its buffer capacity and its zstd context, so a flusher that keeps one builder
/// allocates neither per segment.
pub struct SegmentBuilder {
    buf: BytesMut,
    n_frames: usize,
    level: i32,
    /// [`MAX_SEGMENT_SIZE`]; a field only so tests can lower it.
    max_raw_len: usize,
    /// Created on the first `finish`, then reused; a zstd context is worth keeping.
    compressor: Option<zstd::bulk::Compressor<'static>>,
    /// The same for segments under [`SMALL_SEGMENT`], at [`SMALL_LEVEL`].
    small: Option<zstd::bulk::Compressor<'static>>,
}

/// Packed frames shorter than this are compressed at [`SMALL_LEVEL`]: at
/// that size entropy coding saves a few bytes and costs most of the time
/// (building its Huffman table took 7% of the broker's CPU with
/// single-message segments). Still one zstd frame, read the same.
pub(crate) const SMALL_SEGMENT: usize = 1024;

/// zstd's fastest level, which leaves literals unencoded.
pub(crate) const SMALL_LEVEL: i32 = -1;

/// A compressed segment, ready for a `log_segments` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedSegment {
    /// The zstd blob: one zstd frame whose content is the packed frames.
    pub blob: Vec<u8>,
    /// How many frames the blob holds.
    pub n_frames: usize,
    /// The packed frames' size before compression.
    pub raw_len: usize,
}

/// A decompressed segment: frames back to back in one shared buffer.
///
/// Frames decoded from it borrow from its buffer; payloads are never copied.
/// The buffer is [`Bytes`], so a caller that must outlive the borrow can cut
/// owned, zero-copy pieces with [`Bytes::slice_ref`] on [`Segment::bytes`].
#[derive(Clone)]
pub struct Segment {
    buf: Bytes,
}

/// An iterator over the frames of a [`Segment`], in order.
///
/// Yields `Err` once for the first malformed frame and then stops.
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
}

/// Decompresses a segment blob, capped at [`MAX_SEGMENT_SIZE`] decompressed bytes.
///
/// # Errors
///
/// [`FrameError::DecompressLimit`] when the blob inflates past the cap,
/// [`FrameError::Decompress`] when zstd rejects the blob.
pub fn decompress(blob: &[u8]) -> Result<Segment, FrameError> {
    decompress_with_limit(blob, MAX_SEGMENT_SIZE)
}

/// Decompresses a segment blob, failing once it would exceed `limit` decompressed bytes.
///
/// When the zstd header declares the content size (every blob [`SegmentBuilder`] writes
/// does), an oversized declaration fails before anything is allocated, and the output is
/// allocated once at its exact size. Otherwise the blob is streamed and reading stops at
/// `limit + 1` bytes, so memory stays bounded whatever the blob claims.
///
/// # Errors
///
/// As for [`decompress`].
pub fn decompress_with_limit(blob: &[u8], limit: usize) -> Result<Segment, FrameError> {
    if let Some(declared) = declared_size(blob) {
        let size = usize::try_from(declared)
            .ok()
            .filter(|&size| size <= limit)
            .ok_or(FrameError::DecompressLimit { limit })?;
        let mut out = Vec::with_capacity(size);
        decompress_one_shot(blob, &mut out).map_err(FrameError::Decompress)?;
        return Ok(Segment::new(Bytes::from(out)));
    }

    let decoder = zstd::stream::read::Decoder::with_buffer(blob).map_err(FrameError::Decompress)?;
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    decoder
        .take(cap)
        .read_to_end(&mut out)
        .map_err(FrameError::Decompress)?;
    if out.len() > limit {
        return Err(FrameError::DecompressLimit { limit });
    }
    Ok(Segment::new(Bytes::from(out)))
}

thread_local! {
    /// One zstd decompression context per thread, reused by every [`decompress`] on it.
    ///
    /// Creating a context costs about ten times more than inflating a one-message
    /// segment, and one-message segments are what an idle partition writes.
    /// Pops run on a few runtime threads, so this is a few contexts in total.
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// Inflates a single-frame blob into `out`'s spare capacity with this thread's context.
fn decompress_one_shot(blob: &[u8], out: &mut Vec<u8>) -> io::Result<usize> {
    DECOMPRESSOR.with(|cell| {
        // The borrow can only be taken already if zstd called back into us, which it
        // never does; a fresh context keeps even that case correct instead of panicking.
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return zstd::bulk::Decompressor::new()?.decompress_to_buffer(blob, out);
        };
        let decompressor = match &mut *slot {
            Some(decompressor) => decompressor,
            empty => empty.insert(zstd::bulk::Decompressor::new()?),
        };
        decompressor.decompress_to_buffer(blob, out)
    })
}

/// The content size a blob declares, when it is exactly one zstd frame that declares one.
///
/// A malformed header yields `None` rather than an error: the streaming path
/// then reports zstd's own error for it.
fn declared_size(blob: &[u8]) -> Option<u64> {
    let declared = zstd_safe::get_frame_content_size(blob).ok()??;
    let frame_len = zstd_safe::find_frame_compressed_size(blob).ok()?;
    (frame_len == blob.len()).then_some(declared)
}

/// Decompresses a blob and decodes every frame in it; returns the frame count.
///
/// # Errors
///
/// Any decompression error, or the first frame error.
pub fn validate(blob: &[u8]) -> Result<usize, FrameError> {
    decompress(blob)?.validate()
}

impl SegmentBuilder {
    /// An empty builder compressing at [`DEFAULT_ZSTD_LEVEL`].
    #[must_use]
    pub fn new() -> Self {
        Self::with_level(DEFAULT_ZSTD_LEVEL)
    }

    /// An empty builder compressing at `level` (zstd clamps it to its supported range).
    #[must_use]
    pub fn with_level(level: i32) -> Self {
        SegmentBuilder {
            buf: BytesMut::new(),
            n_frames: 0,
            level,
            max_raw_len: MAX_SEGMENT_SIZE,
            compressor: None,
            small: None,
        }
    }

    /// Appends one frame.
    ///
    /// # Errors
    ///
    /// The frame's own [`Frame::encode`] errors, or [`FrameError::TooLarge`] with
    /// [`Field::Segment`] when the packed buffer would pass [`MAX_SEGMENT_SIZE`].
    /// On error the builder is unchanged.
    pub fn push(&mut self, frame: &Frame<'_>) -> Result<(), FrameError> {
        let len = self.buf.len().saturating_add(frame.encoded_size());
        if len > self.max_raw_len {
            return Err(FrameError::TooLarge {
                field: Field::Segment,
                len,
                max: self.max_raw_len,
            });
        }
        frame.encode(&mut self.buf)?;
        self.n_frames += 1;
        Ok(())
    }

    /// Frames pushed since the last [`SegmentBuilder::finish`].
    #[must_use]
    pub fn len(&self) -> usize {
        self.n_frames
    }

    /// True when no frame has been pushed since the last [`SegmentBuilder::finish`].
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.n_frames == 0
    }

    /// Bytes packed so far, before compression.
    #[must_use]
    pub fn raw_len(&self) -> usize {
        self.buf.len()
    }

    /// Compresses the packed frames into a blob and empties the builder for reuse.
    ///
    /// An empty builder produces a valid blob holding zero frames.
    ///
    /// # Errors
    ///
    /// [`FrameError::Compress`] when zstd fails; the builder keeps its frames.
    pub fn finish(&mut self) -> Result<EncodedSegment, FrameError> {
        let (slot, level) = if self.buf.len() < SMALL_SEGMENT && self.level > SMALL_LEVEL {
            (&mut self.small, SMALL_LEVEL)
        } else {
            (&mut self.compressor, self.level)
        };
        let compressor = match slot {
            Some(compressor) => compressor,
            empty => {
                empty.insert(zstd::bulk::Compressor::new(level).map_err(FrameError::Compress)?)
            }
        };
        let blob = compressor
            .compress(&self.buf)
            .map_err(FrameError::Compress)?;
        let segment = EncodedSegment {
            blob,
            n_frames: self.n_frames,
            raw_len: self.buf.len(),
        };
        self.buf.clear();
        self.n_frames = 0;
        Ok(segment)
    }
}

impl Default for SegmentBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SegmentBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SegmentBuilder")
            .field("n_frames", &self.n_frames)
            .field("raw_len", &self.buf.len())
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

impl Segment {
    /// Wraps an already decompressed buffer of packed frames. Nothing is checked until read.
    #[must_use]
    pub fn new(buf: Bytes) -> Self {
        Segment { buf }
    }

    /// The decompressed buffer.
    #[must_use]
    pub fn bytes(&self) -> &Bytes {
        &self.buf
    }

    /// The decompressed buffer, owned.
    #[must_use]
    pub fn into_bytes(self) -> Bytes {
        self.buf
    }

    /// Every frame, in order.
    #[must_use]
    pub fn frames(&self) -> Frames<'_> {
        Frames {
            buf: &self.buf,
            pos: 0,
            failed: false,
        }
    }

    /// Frames `[start, start + take)`, decoded and borrowed from this segment.
    ///
    /// The frames before `start` are stepped over by their `body_len` alone, never decoded,
    /// and the walk stops after the last frame asked for, so frames past the slice are not read.
    /// `take == 0` with `start` at most the frame count is an empty slice.
    ///
    /// # Errors
    ///
    /// [`FrameError::SliceOutOfRange`] when the segment ends before `start + take`
    /// (`count` is then the segment's frame count), or the first frame error on the way.
    pub fn slice(&self, start: usize, take: usize) -> Result<Vec<Frame<'_>>, FrameError> {
        let buf: &[u8] = &self.buf;
        let out_of_range = |count| FrameError::SliceOutOfRange { start, take, count };
        let mut pos = 0;
        for idx in 0..start {
            if pos == buf.len() {
                return Err(out_of_range(idx));
            }
            pos = skip_at(buf, pos)?;
        }

        // `take` comes from the caller: bound the allocation by what the bytes could hold.
        let fits = buf.len().saturating_sub(pos) / MIN_FRAME_LEN;
        let mut frames = Vec::with_capacity(take.min(fits));
        while frames.len() < take {
            if pos == buf.len() {
                return Err(out_of_range(start + frames.len()));
            }
            let (frame, next) = decode_at(buf, pos)?;
            frames.push(frame);
            pos = next;
        }
        Ok(frames)
    }

    /// Counts frames by stepping over bodies by length; bodies are not decoded.
    ///
    /// # Errors
    ///
    /// [`FrameError::Truncated`] when a length prefix or body runs past the buffer.
    pub fn count_frames(&self) -> Result<usize, FrameError> {
        let buf: &[u8] = &self.buf;
        let mut pos = 0;
        let mut n_frames = 0;
        while pos < buf.len() {
            pos = skip_at(buf, pos)?;
            n_frames += 1;
        }
        Ok(n_frames)
    }

    /// Decodes every frame; returns the frame count.
    ///
    /// # Errors
    ///
    /// The first frame error.
    pub fn validate(&self) -> Result<usize, FrameError> {
        self.frames()
            .try_fold(0, |n_frames, frame| frame.map(|_| n_frames + 1))
    }
}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The buffer can be a gigabyte of payloads; its length is what a log needs.
        f.debug_struct("Segment")
            .field("len", &self.buf.len())
            .finish()
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        match decode_at(self.buf, self.pos) {
            Ok((frame, next)) => {
                self.pos = next;
                Some(Ok(frame))
            }
            Err(err) => {
                self.failed = true;
                Some(Err(err))
            }
        }
    }
}

impl std::iter::FusedIterator for Frames<'_> {}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn frame(transaction_id: &str) -> Frame<'_> {
        Frame {
            message_id: [7; 16],
            trace_id: None,
            transaction_id,
            producer_sub: None,
            encrypted: false,
            audience: None,
            payload: br#"{"n":1}"#,
        }
    }

    fn encoded(txn_ids: &[&str]) -> EncodedSegment {
        let mut builder = SegmentBuilder::new();
        for txn_id in txn_ids {
            builder.push(&frame(txn_id)).unwrap();
        }
        builder.finish().unwrap()
    }

    /// A zstd blob whose header declares `size` content bytes, with one empty raw block.
    fn declared_size_blob(size: u64) -> Vec<u8> {
        let mut blob = vec![0x28, 0xb5, 0x2f, 0xfd]; // magic, little-endian 0xFD2FB528
        blob.push(0xe0); // 8-byte content size, single segment, no checksum, no dictionary
        blob.extend_from_slice(&size.to_le_bytes());
        blob.extend_from_slice(&[0x01, 0x00, 0x00]); // last block, raw, 0 bytes
        blob
    }

    #[test]
    fn builder_round_trips_and_is_reusable() {
        let mut builder = SegmentBuilder::with_level(1);
        for txn_id in ["a", "b", "c"] {
            builder.push(&frame(txn_id)).unwrap();
        }
        assert_eq!(builder.len(), 3);
        let raw_len = builder.raw_len();
        let first = builder.finish().unwrap();
        assert_eq!((first.n_frames, first.raw_len), (3, raw_len));
        assert!(builder.is_empty());
        assert_eq!(builder.raw_len(), 0);

        builder.push(&frame("d")).unwrap();
        let second = builder.finish().unwrap();
        assert_eq!(second.n_frames, 1);

        let segment = decompress(&first.blob).unwrap();
        let txn_ids: Vec<&str> = segment
            .frames()
            .map(|f| f.unwrap().transaction_id)
            .collect();
        assert_eq!(txn_ids, ["a", "b", "c"]);
        assert_eq!(validate(&second.blob).unwrap(), 1);
    }

    #[test]
    fn empty_builder_makes_a_zero_frame_blob() {
        let segment = SegmentBuilder::new().finish().unwrap();
        assert_eq!(segment.n_frames, 0);
        let decoded = decompress(&segment.blob).unwrap();
        assert_eq!(decoded.count_frames().unwrap(), 0);
        assert_eq!(decoded.slice(0, 0).unwrap(), []);
        assert!(matches!(
            decoded.slice(0, 1),
            Err(FrameError::SliceOutOfRange {
                start: 0,
                take: 1,
                count: 0
            })
        ));
    }

    #[test]
    fn slice_returns_the_asked_range() {
        let segment = decompress(&encoded(&["0", "1", "2", "3", "4"]).blob).unwrap();
        let txn_ids = |start, take| -> Vec<&str> {
            segment
                .slice(start, take)
                .unwrap()
                .iter()
                .map(|f| f.transaction_id)
                .collect()
        };
        assert_eq!(txn_ids(0, 5), ["0", "1", "2", "3", "4"]);
        assert_eq!(txn_ids(2, 2), ["2", "3"]);
        assert_eq!(txn_ids(4, 1), ["4"]);
        assert_eq!(txn_ids(5, 0), Vec::<&str>::new());
    }

    #[test]
    fn slice_past_the_end_is_out_of_range() {
        let segment = decompress(&encoded(&["0", "1", "2"]).blob).unwrap();
        for (start, take) in [
            (3, 1),
            (2, 2),
            (4, 0),
            (0, 4),
            (usize::MAX, 1),
            (1, usize::MAX),
        ] {
            assert!(
                matches!(
                    segment.slice(start, take),
                    Err(FrameError::SliceOutOfRange { start: s, take: t, count: 3 }) if s == start && t == take
                ),
                "slice({start}, {take})"
            );
        }
    }

    #[test]
    fn slice_skips_frames_before_start_without_decoding_them() {
        // Frame 0 has an unknown flag bit; stepping over it by length must not notice.
        let mut raw = BytesMut::new();
        frame("bad").encode(&mut raw).unwrap();
        raw[4] = 0x80;
        frame("good").encode(&mut raw).unwrap();
        let segment = Segment::new(raw.freeze());
        assert_eq!(segment.slice(1, 1).unwrap()[0].transaction_id, "good");
        assert_eq!(segment.count_frames().unwrap(), 2);
        assert!(matches!(
            segment.validate(),
            Err(FrameError::InvalidFlags {
                offset: 4,
                flags: 0x80
            })
        ));
        assert!(matches!(
            segment.slice(0, 1),
            Err(FrameError::InvalidFlags { .. })
        ));
    }

    #[test]
    fn slice_stops_after_the_last_frame_asked_for() {
        // Garbage after frame 1 is never read by a slice that ends at frame 1.
        let mut raw = BytesMut::new();
        frame("0").encode(&mut raw).unwrap();
        frame("1").encode(&mut raw).unwrap();
        raw.extend_from_slice(&[0xff, 0xff]);
        let segment = Segment::new(raw.freeze());
        assert_eq!(segment.slice(0, 2).unwrap().len(), 2);
        assert!(matches!(
            segment.count_frames(),
            Err(FrameError::Truncated {
                need: 4,
                have: 2,
                ..
            })
        ));
    }

    #[test]
    fn frames_stop_after_the_first_error() {
        let mut raw = BytesMut::new();
        frame("0").encode(&mut raw).unwrap();
        raw.extend_from_slice(&[1, 0, 0]);
        let segment = Segment::new(raw.freeze());
        let items: Vec<_> = segment.frames().collect();
        assert_eq!(items.len(), 2);
        assert!(items[0].is_ok());
        assert!(matches!(
            items[1],
            Err(FrameError::Truncated {
                need: 4,
                have: 3,
                ..
            })
        ));
    }

    #[test]
    fn decompress_rejects_garbage() {
        for blob in [&b""[..], b"not zstd", &[0x28, 0xb5, 0x2f, 0xfd]] {
            assert!(
                matches!(decompress(blob), Err(FrameError::Decompress(_))),
                "{blob:?}"
            );
        }
    }

    #[test]
    fn declared_size_over_the_default_cap_fails_before_allocating() {
        let blob = declared_size_blob(MAX_SEGMENT_SIZE as u64 + 1);
        assert!(matches!(
            decompress(&blob),
            Err(FrameError::DecompressLimit {
                limit: MAX_SEGMENT_SIZE
            })
        ));
        let blob = declared_size_blob(1 << 40);
        assert!(matches!(
            decompress(&blob),
            Err(FrameError::DecompressLimit { .. })
        ));
    }

    #[test]
    fn declared_size_that_lies_is_a_decompress_error() {
        // Claims 1000 bytes, holds none: zstd checks the content size it decoded.
        assert!(matches!(
            decompress(&declared_size_blob(1000)),
            Err(FrameError::Decompress(_))
        ));
    }

    #[test]
    fn thread_context_is_reusable_after_an_error() {
        let good = encoded(&["a", "b"]).blob;
        for _ in 0..3 {
            assert!(decompress(&declared_size_blob(1000)).is_err());
            assert!(decompress(&good[..good.len() - 1]).is_err());
            assert_eq!(decompress(&good).unwrap().count_frames().unwrap(), 2);
        }
    }

    #[test]
    fn bomb_over_the_limit_errors_with_and_without_declared_size() {
        let zeros = vec![0u8; 1 << 20];
        let limit = 64 << 10;

        // Declared size (one-shot compression writes it).
        let declared = zstd::bulk::compress(&zeros, 3).unwrap();
        assert!(declared.len() < 1024);
        assert!(matches!(
            decompress_with_limit(&declared, limit),
            Err(FrameError::DecompressLimit { limit: l }) if l == limit
        ));

        // No declared size (streaming compression does not know it up front).
        let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        encoder.include_contentsize(false).unwrap();
        encoder.write_all(&zeros).unwrap();
        let streamed = encoder.finish().unwrap();
        assert_eq!(declared_size(&streamed), None);
        assert!(matches!(
            decompress_with_limit(&streamed, limit),
            Err(FrameError::DecompressLimit { .. })
        ));

        // Exactly at the limit is fine on both paths.
        assert_eq!(
            decompress_with_limit(&declared, 1 << 20)
                .unwrap()
                .bytes()
                .len(),
            1 << 20
        );
        assert_eq!(
            decompress_with_limit(&streamed, 1 << 20)
                .unwrap()
                .bytes()
                .len(),
            1 << 20
        );
    }

    #[test]
    fn builder_refuses_to_grow_past_the_segment_cap() {
        // The real cap is a gigabyte; the check is the same with a small one.
        let mut builder = SegmentBuilder::new();
        let one = frame("a").encoded_size();
        builder.max_raw_len = 2 * one;
        builder.push(&frame("a")).unwrap();
        builder.push(&frame("b")).unwrap();
        let err = builder.push(&frame("c")).unwrap_err();
        assert!(matches!(
            err,
            FrameError::TooLarge { field: Field::Segment, len, max } if len == 3 * one && max == 2 * one
        ));
        assert_eq!((builder.len(), builder.raw_len()), (2, 2 * one));
    }

    #[test]
    fn segment_debug_shows_length_not_contents() {
        let segment = Segment::new(Bytes::from_static(b"abcdef"));
        assert_eq!(format!("{segment:?}"), "Segment { len: 6 }");
    }
}
