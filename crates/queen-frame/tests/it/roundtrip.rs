//! Round trips: arbitrary frames through `SegmentBuilder`, zstd, `decompress` and back.

use bytes::BytesMut;
use proptest::prelude::*;
use queen_frame::{
    build_sidecar, decompress, sidecar_find, sidecar_get, sidecar_iter, txn_hash, validate, Frame,
    FrameError, SegmentBuilder,
};

use crate::{owned_frame, owned_frames, OwnedFrame};

fn views(frames: &[OwnedFrame]) -> Vec<Frame<'_>> {
    frames.iter().map(OwnedFrame::view).collect()
}

proptest! {
    #[test]
    fn single_frame_encode_decode_round_trips(frame in owned_frame()) {
        let view = frame.view();
        let mut buf = BytesMut::new();
        view.encode(&mut buf).unwrap();
        prop_assert_eq!(buf.len(), view.encoded_size());
        let (decoded, consumed) = Frame::decode(&buf).unwrap();
        prop_assert_eq!(consumed, buf.len());
        prop_assert_eq!(decoded, view);
    }

    #[test]
    fn segment_round_trips_and_slices_any_range(
        frames in owned_frames(),
        level in -3i32..=9,
        start in 0usize..28,
        take in 0usize..28,
    ) {
        let expected = views(&frames);
        let mut builder = SegmentBuilder::with_level(level);
        for frame in &expected {
            builder.push(frame).unwrap();
        }
        let encoded = builder.finish().unwrap();
        prop_assert_eq!(encoded.n_frames, expected.len());

        let segment = decompress(&encoded.blob).unwrap();
        prop_assert_eq!(segment.bytes().len(), encoded.raw_len);
        let decoded: Vec<Frame<'_>> = segment.frames().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(&decoded, &expected);
        prop_assert_eq!(segment.count_frames().unwrap(), expected.len());
        prop_assert_eq!(segment.validate().unwrap(), expected.len());
        prop_assert_eq!(validate(&encoded.blob).unwrap(), expected.len());

        let n = expected.len();
        match segment.slice(start, take) {
            Ok(slice) => {
                prop_assert!(start + take <= n);
                prop_assert_eq!(&slice[..], &expected[start..start + take]);
            }
            Err(FrameError::SliceOutOfRange { start: s, take: t, count }) => {
                prop_assert!(start + take > n);
                prop_assert_eq!((s, t, count), (start, take, n));
            }
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }

    #[test]
    fn slices_partition_the_segment(frames in owned_frames(), cut in 0usize..24) {
        // Any split point divides the segment into two slices that concatenate back.
        let expected = views(&frames);
        let mut builder = SegmentBuilder::new();
        for frame in &expected {
            builder.push(frame).unwrap();
        }
        let segment = decompress(&builder.finish().unwrap().blob).unwrap();
        let cut = cut.min(expected.len());
        let mut joined = segment.slice(0, cut).unwrap();
        joined.extend(segment.slice(cut, expected.len() - cut).unwrap());
        prop_assert_eq!(joined, expected);
    }

    #[test]
    fn sidecar_mirrors_frame_order(frames in owned_frames()) {
        let hashes: Vec<[u8; 16]> = frames.iter().map(|f| txn_hash(&f.transaction_id)).collect();
        let sidecar = build_sidecar(&hashes);
        prop_assert_eq!(sidecar.len(), 16 * frames.len());
        prop_assert_eq!(sidecar_iter(&sidecar).unwrap().len(), frames.len());
        for (idx, frame) in frames.iter().enumerate() {
            let hash = txn_hash(&frame.transaction_id);
            prop_assert_eq!(sidecar_get(&sidecar, idx).unwrap(), hash);
            let first = frames.iter().position(|f| f.transaction_id == frame.transaction_id);
            prop_assert_eq!(sidecar_find(&sidecar, &hash).unwrap(), first);
        }
        for (idx, hash) in sidecar_iter(&sidecar).unwrap() {
            prop_assert_eq!(hash, hashes[idx]);
        }
    }
}
