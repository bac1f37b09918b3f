//! The spool drain's duplicate check beyond the dedup window.
//!
//! `log_push_v2` finds a repeated transaction id only inside the queue's
//! `dedupWindowSeconds`. A spooled item can reach the database much later
//! than the copy of it that is already stored: a direct attempt that timed
//! out but committed, a drain chunk stored before a crash and pushed again
//! after the restart, a `failed-*.log` or held record replayed. So before the
//! drain stores a chunk it asks the log itself, per partition, which of the
//! chunk's transaction ids were stored since the oldest of its items was
//! accepted (less the push timeout and [`CLOCK_SLACK`]):
//!
//! - the sidecar rows still held since then (`log_drain_probe_v1`, one
//!   snapshot, whatever the window), up to the drain pass's start (the
//!   database's clock at its first probe: what the pass stored itself is
//!   not probed again by its later chunks, so a long drain costs linear,
//!   not quadratic, time);
//! - below the sidecar's purge watermark (`txns_start` in that snapshot),
//!   the segments created since then, read newest first and matched on
//!   their frames' transaction ids (`log_drain_segments_v1`).
//!
//! What it finds is answered duplicate (with the stored copy's message id
//! when its segment is still there) and not pushed; the rest goes through
//! the normal push path, whose own probe covers what commits in between.
//! The bound: a stored copy is found while its sidecar row or its segment
//! is held, that is until retention removes the segment. The normal push
//! path never comes here.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use queen_sql::push::{DrainSegment, DrainSlot};
use uuid::Uuid;

use super::PushItem;
use crate::EngineError;

/// How far a broker's clock may be ahead of the database's: the probe looks
/// this much further back than an item's acceptance (less the push timeout).
pub(crate) const CLOCK_SLACK: Duration = Duration::from_secs(60);

/// Segments read per round trip below the sidecar.
const SEGMENT_PAGE: i32 = 8;

/// A drained item already stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stored {
    /// Its partition.
    pub(crate) partition_id: Uuid,
    /// The stored copy's message id (`None` when its segment is gone).
    pub(crate) message_id: Option<Uuid>,
}

struct Slot<'a> {
    tenant: &'a str,
    queue: &'a str,
    partition: &'a str,
    since: SystemTime,
    /// Each distinct hash once, 16 bytes apiece.
    hashes: Vec<u8>,
    /// The items of each transaction id.
    items: HashMap<&'a str, Vec<usize>>,
}

/// Per item of `items`, whether its transaction id is already stored in its
/// partition since `since[i]` (an item without a `since` entry is probed
/// back to the epoch: every row the partition holds) and before `until`, the
/// drain pass's bound: `None` on its first call, which answers the bound to
/// pass on (the database's clock then), so the rows the pass stores itself
/// are not probed again by its later chunks.
pub(crate) async fn already_stored(
    pool: &deadpool_postgres::Pool,
    items: &[PushItem],
    since: &[SystemTime],
    until: Option<SystemTime>,
) -> Result<(Vec<Option<Stored>>, Option<SystemTime>), EngineError> {
    let mut found: Vec<Option<Stored>> = vec![None; items.len()];
    let mut slots: Vec<Slot<'_>> = Vec::new();
    let mut slot_of: HashMap<(&str, &str, &str), usize> = HashMap::new();
    for (index, item) in items.iter().enumerate() {
        let Some(transaction_id) = item.transaction_id.as_deref() else {
            continue;
        };
        let at = since.get(index).copied().unwrap_or(UNIX_EPOCH);
        let key = (&*item.tenant, item.queue.as_str(), item.partition.as_str());
        let slot = *slot_of.entry(key).or_insert_with(|| {
            slots.push(Slot {
                tenant: key.0,
                queue: key.1,
                partition: key.2,
                since: at,
                hashes: Vec::new(),
                items: HashMap::new(),
            });
            slots.len() - 1
        });
        let Some(slot) = slots.get_mut(slot) else {
            continue;
        };
        slot.since = slot.since.min(at);
        let of_id = slot.items.entry(transaction_id).or_default();
        if of_id.is_empty() {
            slot.hashes
                .extend_from_slice(&queen_frame::txn_hash(transaction_id));
        }
        of_id.push(index);
    }
    if slots.is_empty() {
        return Ok((found, until));
    }
    let client = pool.get().await.map_err(queen_sql::SqlError::from)?;
    let asked: Vec<DrainSlot<'_>> = slots
        .iter()
        .map(|slot| DrainSlot {
            tenant: slot.tenant,
            queue: slot.queue,
            partition: slot.partition,
            since: slot.since,
            hashes: &slot.hashes,
        })
        .collect();
    let (probes, until) = queen_sql::push::drain_probe(&client, &asked, until).await?;
    for (slot, probe) in slots.iter().zip(probes) {
        // No partition: nothing of the slot is stored.
        let Some(probe) = probe else {
            continue;
        };
        let partition_id = probe.partition_id;
        let mut mark = |transaction_id: &str, message_id: Option<Uuid>| {
            for &index in slot.items.get(transaction_id).into_iter().flatten() {
                if let Some(entry) = found.get_mut(index) {
                    if entry.is_none_or(|stored| stored.message_id.is_none()) {
                        *entry = Some(Stored {
                            partition_id,
                            message_id,
                        });
                    }
                }
            }
        };
        // Sidecar matches: the hash says the id is stored; the segment (on
        // its first match) gives the message ids.
        let by_hash: HashMap<[u8; queen_frame::HASH_LEN], &str> = slot
            .items
            .keys()
            .map(|&id| (queen_frame::txn_hash(id), id))
            .collect();
        let mut ids_of: HashMap<i64, Vec<Uuid>> = HashMap::new();
        for matched in &probe.matches {
            if let Some(blob) = &matched.blob {
                ids_of.insert(matched.base_offset, super::segment::message_ids(blob));
            }
        }
        for matched in &probe.matches {
            let Some(&id) = <[u8; queen_frame::HASH_LEN]>::try_from(matched.hash.as_slice())
                .ok()
                .and_then(|hash| by_hash.get(&hash))
            else {
                continue;
            };
            let message_id = ids_of
                .get(&matched.base_offset)
                .and_then(|ids| ids.get(matched.frame))
                .copied();
            mark(id, message_id);
        }
        // Below the sidecar: the segments since `since`, newest first.
        let mut before = probe.txns_start;
        'pages: loop {
            let page: Vec<DrainSegment> =
                queen_sql::push::drain_segments(&client, partition_id, before, until, SEGMENT_PAGE)
                    .await?;
            let full = page.len() >= SEGMENT_PAGE as usize;
            for segment in page {
                if segment.created_at < slot.since {
                    break 'pages;
                }
                before = segment.base_offset;
                let Ok(decoded) = queen_frame::decompress(&segment.blob) else {
                    continue;
                };
                for frame in decoded.frames().map_while(Result::ok) {
                    if slot.items.contains_key(frame.transaction_id) {
                        mark(
                            frame.transaction_id,
                            Some(Uuid::from_bytes(frame.message_id)),
                        );
                    }
                }
            }
            if !full {
                break;
            }
        }
    }
    Ok((found, Some(until)))
}
