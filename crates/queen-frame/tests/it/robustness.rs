//! Hostile input: arbitrary, truncated and bit-flipped bytes into every decoder.
//!
//! Each property only needs the decoder to return (`Ok` or `Err`) rather than panic,
//! plus the consistency checks that hold for any input.

use bytes::{Bytes, BytesMut};
use proptest::{collection::vec, prelude::*, sample::Index};
use queen_frame::{
    decompress, decompress_with_limit, sidecar_find, sidecar_get, sidecar_iter, validate, Frame,
    Segment, SegmentBuilder,
};

use crate::{owned_frame, owned_frames, OwnedFrame};

/// Runs every reader of a decompressed buffer and checks they agree with each other.
fn exercise_segment(raw: &[u8], start: usize, take: usize) {
    if let Ok((frame, consumed)) = Frame::decode(raw) {
        // Decoding is exact: re-encoding the view gives back the bytes it came from.
        assert_eq!(consumed, frame.encoded_size());
        let mut again = BytesMut::new();
        frame.encode(&mut again).unwrap();
        assert_eq!(&again[..], &raw[..consumed]);
    }

    let segment = Segment::new(Bytes::copy_from_slice(raw));
    let items: Vec<_> = segment.frames().collect();
    let n_ok = items.iter().take_while(|item| item.is_ok()).count();
    // The iterator stops at the first error.
    assert!(items.len() == n_ok || items.len() == n_ok + 1);

    let counted = segment.count_frames();
    match segment.validate() {
        Ok(n) => {
            assert_eq!(n, n_ok);
            assert_eq!(items.len(), n_ok);
            assert_eq!(counted.unwrap(), n);
            assert_eq!(segment.slice(0, n).unwrap().len(), n);
        }
        Err(_) => assert_eq!(items.len(), n_ok + 1),
    }
    if let Ok(slice) = segment.slice(start, take) {
        assert_eq!(slice.len(), take);
        // Frames a slice returns are the same frames the iterator yields, when it gets that far.
        for (offset, frame) in slice.iter().enumerate() {
            if let Some(Ok(expected)) = items.get(start + offset) {
                assert_eq!(frame, expected);
            }
        }
    }
}

/// Runs every reader of a compressed blob.
fn exercise_blob(blob: &[u8], start: usize, take: usize) {
    let _ = validate(blob);
    if let Ok(segment) = decompress_with_limit(blob, 1 << 20) {
        exercise_segment(segment.bytes(), start, take);
    }
}

fn encode_all(frames: &[OwnedFrame]) -> Vec<u8> {
    let mut raw = BytesMut::new();
    for frame in frames {
        frame.view().encode(&mut raw).unwrap();
    }
    raw.to_vec()
}

fn compress_all(frames: &[OwnedFrame]) -> Vec<u8> {
    let mut builder = SegmentBuilder::with_level(1);
    for frame in frames {
        builder.push(&frame.view()).unwrap();
    }
    builder.finish().unwrap().blob
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_any_decoder(
        bytes in vec(any::<u8>(), 0..2048),
        start in 0usize..8,
        take in 0usize..8,
        idx in any::<usize>(),
        hash in any::<[u8; 16]>(),
    ) {
        exercise_segment(&bytes, start, take);
        exercise_blob(&bytes, start, take);
        let _ = decompress(&bytes);

        let _ = sidecar_get(&bytes, idx);
        let _ = sidecar_get(&bytes, idx % 256);
        let _ = sidecar_find(&bytes, &hash);
        if let Ok(it) = sidecar_iter(&bytes) {
            prop_assert_eq!(it.count(), bytes.len() / 16);
        }
    }

    #[test]
    fn arbitrary_bytes_in_a_valid_zstd_envelope_reach_the_frame_parser(
        bytes in vec(any::<u8>(), 0..4096),
        start in 0usize..8,
        take in 0usize..8,
    ) {
        let blob = zstd::bulk::compress(&bytes, 1).unwrap();
        let segment = decompress(&blob).unwrap();
        prop_assert_eq!(segment.bytes().as_ref(), &bytes[..]);
        exercise_blob(&blob, start, take);
    }

    #[test]
    fn frame_shaped_bytes_in_a_zstd_envelope_reach_the_frame_parser(
        body_len in 0u32..64,
        flags in any::<u8>(),
        rest in vec(any::<u8>(), 0..96),
        start in 0usize..4,
        take in 0usize..4,
    ) {
        // Plausible headers get further into the parser than uniform noise does.
        let mut raw = body_len.to_le_bytes().to_vec();
        raw.push(flags);
        raw.extend_from_slice(&rest);
        exercise_segment(&raw, start, take);
        exercise_blob(&zstd::bulk::compress(&raw, 1).unwrap(), start, take);
    }

    #[test]
    fn truncated_segment_fails_unless_cut_on_a_frame_boundary(
        frames in owned_frames(),
        cut in any::<Index>(),
    ) {
        let raw = encode_all(&frames);
        let cut = cut.index(raw.len() + 1);
        let boundaries: Vec<usize> = frames
            .iter()
            .scan(0, |end, frame| {
                *end += frame.view().encoded_size();
                Some(*end)
            })
            .collect();
        let segment = Segment::new(Bytes::copy_from_slice(&raw[..cut]));
        let whole = boundaries.iter().take_while(|&&end| end <= cut).count();
        match segment.validate() {
            Ok(n) => {
                prop_assert!(cut == 0 || boundaries.contains(&cut));
                prop_assert_eq!(n, whole);
            }
            Err(_) => prop_assert!(!(cut == 0 || boundaries.contains(&cut))),
        }
        // The frames before the cut still decode.
        prop_assert_eq!(segment.frames().take_while(Result::is_ok).count(), whole);
        exercise_segment(&raw[..cut], 0, whole);
    }

    #[test]
    fn bit_flipped_segment_never_panics(
        frames in owned_frames(),
        flips in vec((any::<Index>(), 0u8..8), 1..4),
        start in 0usize..24,
        take in 0usize..24,
    ) {
        let mut raw = encode_all(&frames);
        if !raw.is_empty() {
            for (at, bit) in &flips {
                let at = at.index(raw.len());
                raw[at] ^= 1 << bit;
            }
        }
        exercise_segment(&raw, start, take);
    }

    #[test]
    fn corrupted_blob_never_panics(
        frames in vec(owned_frame(), 0..8),
        flips in vec((any::<Index>(), 0u8..8), 0..4),
        cut in any::<Index>(),
        start in 0usize..8,
        take in 0usize..8,
    ) {
        let mut blob = compress_all(&frames);
        for (at, bit) in &flips {
            let at = at.index(blob.len());
            blob[at] ^= 1 << bit;
        }
        let cut = cut.index(blob.len() + 1);
        exercise_blob(&blob, start, take);
        exercise_blob(&blob[..cut], start, take);
    }
}
