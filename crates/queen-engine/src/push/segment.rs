//! Entries to segment frames and back: packing a lane's or a transaction's
//! entries into one compressed segment with its hash sidecar (sealing
//! payloads of encrypted queues), and reading message ids out of a stored
//! segment to answer duplicates. Shared by fusion, transactions, the drain's
//! duplicate check and the pool warm-up; no I/O.

use std::collections::HashMap;

use queen_frame::{Frame, SegmentBuilder};
use uuid::Uuid;

use super::Entry;
use crate::EngineError;

/// The most payload bytes one segment holds: a push cuts a partition's items
/// into submissions of at most this much (`push/mod.rs`), and a lane's flush
/// takes no submission that would carry it past this (the first is always
/// taken). One item larger than this is a segment of its own. A safety bound
/// on a segment's size (pops inflate whole segments), not a batch size:
/// under ordinary load segments are far smaller.
pub(crate) const MAX_SEGMENT_PAYLOAD_BYTES: usize = 8 * 1024 * 1024;

/// Frames of `entries`, packed and compressed, with their sidecar.
pub(crate) struct Encoded {
    pub(crate) blob: Vec<u8>,
    pub(crate) hashes: Vec<u8>,
    pub(crate) n_frames: i32,
    /// Some transaction id came from a client: probe for duplicates.
    pub(crate) probe: bool,
}

/// Pack `entries` into one segment, sealing payloads when `encrypted` (which
/// needs `key`: without one the push fails, it never stores plaintext).
pub(crate) fn encode_entries<'a>(
    entries: impl Iterator<Item = &'a Entry>,
    encrypted: bool,
    key: Option<&crate::crypto::EncryptionKey>,
    queue: &str,
    builder: &mut SegmentBuilder,
) -> Result<Encoded, EngineError> {
    let key = match (key, encrypted) {
        (_, false) => None,
        (Some(key), true) => Some(key),
        (None, true) => {
            return Err(EngineError::EncryptionKeyMissing {
                queue: queue.to_owned(),
            })
        }
    };
    let mut hashes = Vec::new();
    let mut probe = false;
    for entry in entries {
        let sealed;
        let payload: &[u8] = match key {
            Some(key) => {
                sealed = key.seal(&entry.payload)?;
                &sealed
            }
            None => &entry.payload,
        };
        builder.push(&Frame {
            message_id: *entry.message_id.as_bytes(),
            trace_id: entry.trace_id.map(|id| *id.as_bytes()),
            transaction_id: &entry.transaction_id,
            producer_sub: entry.producer_sub.as_deref(),
            encrypted,
            audience: entry.audience.as_deref(),
            payload,
        })?;
        hashes.extend_from_slice(&entry.hash);
        probe |= entry.client_id;
    }
    let encoded = builder.finish()?;
    Ok(Encoded {
        n_frames: i32::try_from(encoded.n_frames).map_err(|_| EngineError::BatchTooLarge)?,
        blob: encoded.blob,
        hashes,
        probe,
    })
}

/// Each duplicate's frame index in its slot with its winner's message id
/// (`None` when the winner's segment is gone); each winner segment arrives
/// once and is inflated once. Also answers how many were inflated.
pub(crate) fn duplicate_winners(
    duplicates: Vec<queen_sql::push::Duplicate>,
) -> (u64, Vec<(usize, Option<Uuid>)>) {
    let mut segments: HashMap<i64, Vec<Uuid>> = HashMap::new();
    for duplicate in &duplicates {
        if let (Some(base), Some(blob)) = (duplicate.winner_base, &duplicate.winner_blob) {
            segments.insert(base, message_ids(blob));
        }
    }
    let winners = duplicates
        .into_iter()
        .map(|duplicate| {
            let winner = duplicate
                .winner_base
                .and_then(|base| segments.get(&base))
                .and_then(|ids| ids.get(duplicate.winner_frame).copied());
            (duplicate.item, winner)
        })
        .collect();
    (segments.len() as u64, winners)
}

/// The message ids of a stored segment, in frame order (as far as it
/// decodes; a duplicate whose winner cannot be read answers without one).
/// The drain's duplicate check (`replay.rs`) answers its duplicates the same way.
pub(crate) fn message_ids(blob: &[u8]) -> Vec<Uuid> {
    let Ok(segment) = queen_frame::decompress(blob) else {
        return Vec::new();
    };
    segment
        .frames()
        .map_while(Result::ok)
        .map(|frame| Uuid::from_bytes(frame.message_id))
        .collect()
}
