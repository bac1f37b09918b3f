//! Transaction-id hashes and the sidecar that stores one per frame.
//!
//! The sidecar is the `log_txns.hashes` bytea of a segment: 16 bytes per frame,
//! concatenated in frame order, so hash `i` belongs to frame `i` and position is the address.
//! SQL only stores and compares these bytes; the broker computes them here.

use crate::error::FrameError;

/// Bytes in one transaction-id hash, and the stride of a sidecar.
pub const HASH_LEN: usize = 16;

/// The 16-byte hash of a transaction id: BLAKE3 of its UTF-8 bytes, truncated to the first 128 bits.
///
/// BLAKE3 is cryptographic, so no producer can craft a transaction id that collides
/// with another producer's and gets it treated as a duplicate.
#[must_use]
pub fn txn_hash(transaction_id: &str) -> [u8; HASH_LEN] {
    let digest = blake3::hash(transaction_id.as_bytes());
    let mut hash = [0; HASH_LEN];
    hash.copy_from_slice(&digest.as_bytes()[..HASH_LEN]);
    hash
}

/// Concatenates hashes, in frame order, into a sidecar.
#[must_use]
pub fn build_sidecar(hashes: &[[u8; HASH_LEN]]) -> Vec<u8> {
    hashes.as_flattened().to_vec()
}

/// The hash of frame `idx`.
///
/// # Errors
///
/// [`FrameError::SidecarLength`] for a sidecar that is not a whole number of hashes,
/// [`FrameError::SidecarIndex`] when `idx` is past the last hash.
pub fn sidecar_get(sidecar: &[u8], idx: usize) -> Result<[u8; HASH_LEN], FrameError> {
    let hashes = sidecar_iter(sidecar)?;
    let count = hashes.len();
    let start = idx.saturating_mul(HASH_LEN);
    sidecar
        .get(start..)
        .and_then(<[u8]>::first_chunk::<HASH_LEN>)
        .copied()
        .ok_or(FrameError::SidecarIndex { idx, count })
}

/// Every `(idx, hash)` in frame order.
///
/// # Errors
///
/// [`FrameError::SidecarLength`] for a sidecar that is not a whole number of hashes.
pub fn sidecar_iter(sidecar: &[u8]) -> Result<SidecarIter<'_>, FrameError> {
    if !sidecar.len().is_multiple_of(HASH_LEN) {
        return Err(FrameError::SidecarLength { len: sidecar.len() });
    }
    Ok(SidecarIter {
        rest: sidecar,
        idx: 0,
    })
}

/// The index of the first frame whose hash is `hash`, if any.
///
/// Deduplication keeps hashes unique within a partition's window, so "first" only
/// matters for a sidecar that was written without it.
///
/// # Errors
///
/// [`FrameError::SidecarLength`] for a sidecar that is not a whole number of hashes.
pub fn sidecar_find(sidecar: &[u8], hash: &[u8; HASH_LEN]) -> Result<Option<usize>, FrameError> {
    Ok(sidecar_iter(sidecar)?.find_map(|(idx, candidate)| (&candidate == hash).then_some(idx)))
}

/// An iterator over the `(idx, hash)` pairs of a sidecar, from [`sidecar_iter`].
#[derive(Debug, Clone)]
pub struct SidecarIter<'a> {
    rest: &'a [u8],
    idx: usize,
}

impl Iterator for SidecarIter<'_> {
    type Item = (usize, [u8; HASH_LEN]);

    fn next(&mut self) -> Option<Self::Item> {
        let (hash, rest) = self.rest.split_first_chunk::<HASH_LEN>()?;
        let item = (self.idx, *hash);
        self.rest = rest;
        self.idx += 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.rest.len() / HASH_LEN;
        (n, Some(n))
    }
}

impl ExactSizeIterator for SidecarIter<'_> {}

impl std::iter::FusedIterator for SidecarIter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txn_hash_is_blake3_truncated_to_16_bytes() {
        // BLAKE3("abc") = 6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85.
        assert_eq!(
            txn_hash("abc"),
            [
                0x64, 0x37, 0xb3, 0xac, 0x38, 0x46, 0x51, 0x33, 0xff, 0xb6, 0x3b, 0x75, 0x27, 0x3a,
                0x8d, 0xb5
            ]
        );
        // BLAKE3("") = af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262.
        assert_eq!(
            txn_hash(""),
            [
                0xaf, 0x13, 0x49, 0xb9, 0xf5, 0xf9, 0xa1, 0xa6, 0xa0, 0x40, 0x4d, 0xea, 0x36, 0xdc,
                0xc9, 0x49
            ]
        );
    }

    #[test]
    fn sidecar_is_hashes_concatenated_in_frame_order() {
        let hashes = [[1; 16], [2; 16], [3; 16]];
        let sidecar = build_sidecar(&hashes);
        assert_eq!(sidecar.len(), 48);
        assert_eq!(&sidecar[16..32], &[2; 16]);
        for (idx, hash) in hashes.iter().enumerate() {
            assert_eq!(&sidecar_get(&sidecar, idx).unwrap(), hash);
            assert_eq!(sidecar_find(&sidecar, hash).unwrap(), Some(idx));
        }
        let pairs: Vec<_> = sidecar_iter(&sidecar).unwrap().collect();
        assert_eq!(pairs, [(0, [1; 16]), (1, [2; 16]), (2, [3; 16])]);
        assert_eq!(sidecar_iter(&sidecar).unwrap().len(), 3);
        assert_eq!(sidecar_find(&sidecar, &[4; 16]).unwrap(), None);
    }

    #[test]
    fn sidecar_find_returns_the_first_match() {
        let sidecar = build_sidecar(&[[9; 16], [5; 16], [5; 16]]);
        assert_eq!(sidecar_find(&sidecar, &[5; 16]).unwrap(), Some(1));
    }

    #[test]
    fn empty_sidecar_is_valid_and_empty() {
        assert_eq!(sidecar_iter(&[]).unwrap().count(), 0);
        assert_eq!(sidecar_find(&[], &[0; 16]).unwrap(), None);
        assert!(matches!(
            sidecar_get(&[], 0),
            Err(FrameError::SidecarIndex { idx: 0, count: 0 })
        ));
    }

    #[test]
    fn sidecar_index_past_the_end_is_an_error() {
        let sidecar = build_sidecar(&[[1; 16], [2; 16]]);
        for idx in [2, 3, usize::MAX / 16 + 1, usize::MAX] {
            assert!(matches!(
                sidecar_get(&sidecar, idx),
                Err(FrameError::SidecarIndex { idx: i, count: 2 }) if i == idx
            ));
        }
    }

    #[test]
    fn sidecar_length_not_a_multiple_of_16_is_an_error() {
        for len in [1, 15, 17, 31, 33] {
            let sidecar = vec![0; len];
            assert!(
                matches!(sidecar_iter(&sidecar), Err(FrameError::SidecarLength { len: l }) if l == len)
            );
            assert!(matches!(
                sidecar_get(&sidecar, 0),
                Err(FrameError::SidecarLength { .. })
            ));
            assert!(matches!(
                sidecar_find(&sidecar, &[0; 16]),
                Err(FrameError::SidecarLength { .. })
            ));
        }
        assert_eq!(
            FrameError::SidecarLength { len: 17 }.to_string(),
            "sidecar length 17 is not a multiple of 16"
        );
    }
}
