//! Deleting a message (`Messages::delete`).
//!
//! There is no row per message: a message is a frame in a segment and a
//! group's progress is its cursor. So a message is deleted by marking it
//! consumed for every consumer group known to read its queue, where that
//! moves no cursor over another message, and its dead letters go with it;
//! `log_message_delete_v2` decides and writes in one transaction.
//!
//! A transaction id can be stored more than once (a replayed dead letter is
//! the message again at a new offset, for the groups its frame's audience
//! names; a push after the dedup window stores the id again), so the broker
//! first finds every copy a group may still read, and decodes each frame for
//! its audience:
//!
//! - the sidecar's newest [`LOCATE_ROWS`] rows and the offsets the message's
//!   dead letters were filed from (`log_message_find_v1`);
//! - the offsets below what that search covered (retention purges the
//!   sidecar after max(dedup window, `completedRetentionSeconds`, 900 s))
//!   that some known group has not consumed: their segments are read and
//!   decoded here, from the least advanced group on, at most
//!   [`MAX_SCAN_SEGMENTS`] segments and [`MAX_SCAN_BYTES`] of blob
//!   (`log_message_segments_v1`).
//!
//! What the scan could not reach is passed on as unsearched: a group that
//! would still read into it refuses the delete, since another copy may be
//! there. A message found nowhere is not found only when nothing was left
//! unsearched; otherwise the answer says it cannot be located.

use std::collections::BTreeMap;

use queen_sql::dlq::{Copies, FoundMessage};
use uuid::Uuid;

use crate::lifecycle::messages::LOCATE_ROWS;
use crate::lifecycle::Db;
use crate::EngineError;

/// The most copies of one transaction id a delete acts on; more is refused.
pub const MAX_COPIES: usize = 64;

/// The most segments one delete decodes looking for copies the sidecar no
/// longer indexes.
pub const MAX_SCAN_SEGMENTS: usize = 4096;

/// The most compressed bytes one delete decodes looking for copies.
pub const MAX_SCAN_BYTES: i64 = 64 << 20;

/// Segments read per round trip of a scan, and their bytes.
const SCAN_CHUNK_ROWS: usize = 16;
const SCAN_CHUNK_BYTES: i64 = 8 << 20;

/// What deleting a message did (`Messages::delete`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageDeletion {
    /// Deleted: marked consumed for `groups` (their cursors moved past the
    /// copies, or were created there; groups already past them are not
    /// named) and `dead_letters` removed.
    Deleted {
        /// The offsets of the copies still in the partition, ascending
        /// (empty: only dead letters were left).
        offsets: Vec<i64>,
        /// The groups whose cursors moved or were created, in name order.
        groups: Vec<String>,
        /// Dead letters of it removed.
        dead_letters: u64,
    },
    /// Refused, nothing changed: each group in the way.
    Refused {
        /// The offsets of the copies, ascending.
        offsets: Vec<i64>,
        /// Each group in the way, and why.
        blocks: Vec<DeleteBlock>,
    },
    /// Refused, nothing changed: no consumer group is known on the queue, so
    /// there is no cursor to mark it consumed on.
    NoGroup {
        /// The offsets of the copies, ascending.
        offsets: Vec<i64>,
    },
    /// Refused, nothing changed: not found where it was searched, and offsets
    /// `from..=to`, which the sidecar no longer indexes, were more than a
    /// delete reads.
    NotLocated {
        /// First unsearched offset.
        from: i64,
        /// Last unsearched offset.
        to: i64,
    },
    /// Refused, nothing changed: the transaction id is stored more than
    /// [`MAX_COPIES`] times in the partition.
    TooManyCopies,
    /// No such message in the partition, and no dead letter of it.
    NotFound,
}

/// Why one group refused a delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteBlock {
    /// It holds a live lease and has a copy to read.
    Leased {
        /// The group.
        group: String,
    },
    /// It reads `next` first, which is not a copy: marking the copy consumed
    /// would skip the offsets from `next` up to it.
    Behind {
        /// The group.
        group: String,
        /// The offset it reads next.
        next: i64,
    },
    /// It reads offsets `next..=to`, which were not searched for copies.
    Unsearched {
        /// The group.
        group: String,
        /// The offset it reads next.
        next: i64,
        /// The last unsearched offset.
        to: i64,
    },
    /// A pop is creating its cursor on the partition right now.
    Busy {
        /// The group.
        group: String,
    },
    /// It has no cursor on the partition and no subscription record (it pops
    /// single partitions), so where it would start reading is not known.
    StartUnknown {
        /// The group.
        group: String,
    },
}

/// The copies found: offset to audience (`None`: every group).
type Found = BTreeMap<i64, Option<String>>;

/// How much a delete's scans have read.
#[derive(Debug, Default)]
struct Budget {
    segments: usize,
    bytes: i64,
}

impl Budget {
    fn spent(&self) -> bool {
        self.segments >= MAX_SCAN_SEGMENTS || self.bytes >= MAX_SCAN_BYTES
    }
}

/// Delete the message (`partition_id`, `transaction_id`) of `tenant` (see the
/// module).
pub(super) async fn delete(
    db: &Db,
    tenant: &str,
    partition_id: Uuid,
    transaction_id: &str,
) -> Result<MessageDeletion, EngineError> {
    let hash = queen_frame::txn_hash(transaction_id);
    let found = {
        let client = db.client().await?;
        queen_sql::dlq::find_message(
            &**client,
            tenant,
            partition_id,
            &hash,
            transaction_id,
            LOCATE_ROWS,
            i32::try_from(MAX_COPIES + 1).unwrap_or(i32::MAX),
        )
        .await?
    };
    let Some(found) = found else {
        return Ok(MessageDeletion::NotFound);
    };
    if found.sidecar.len() > MAX_COPIES {
        return Ok(MessageDeletion::TooManyCopies);
    }
    let mut copies = Found::new();
    resolve(db, partition_id, transaction_id, &found, &mut copies).await?;

    // Below what the sidecar search covered, the offsets a known group has
    // not consumed yet.
    let scan_from = found
        .least
        .map_or(found.log_start, |least| least.saturating_add(1))
        .max(found.log_start);
    let mut budget = Budget::default();
    let scan = Scan {
        db,
        tenant,
        partition_id,
        transaction_id,
    };
    let mut gap = (scan_from, found.covered);
    if gap.0 < gap.1 {
        gap.0 = scan.run(gap, &mut budget, &mut copies).await?;
    }
    if copies.is_empty() && found.dead.is_empty() {
        if gap.0 < gap.1 {
            return Ok(MessageDeletion::NotLocated {
                from: gap.0,
                to: gap.1 - 1,
            });
        }
        // Every known group is past the offsets below: it may be there,
        // consumed by all of them.
        if let Some(refusal) = scan
            .consumed(&found, scan_from, &mut budget, &mut copies)
            .await?
        {
            return Ok(refusal);
        }
        if copies.is_empty() {
            return Ok(MessageDeletion::NotFound);
        }
    }
    if copies.len() > MAX_COPIES {
        return Ok(MessageDeletion::TooManyCopies);
    }

    let offsets: Vec<i64> = copies.keys().copied().collect();
    let audiences: Vec<Option<&str>> = copies.values().map(Option::as_deref).collect();
    let sql_copies = Copies {
        offsets: &offsets,
        audiences: &audiences,
        gap,
    };
    let deleted = db
        .retry_conflicts(|client| async move {
            queen_sql::dlq::delete_message(
                &**client,
                tenant,
                partition_id,
                transaction_id,
                &sql_copies,
            )
            .await
        })
        .await?;
    use queen_sql::dlq::{DeleteBlock as Sql, MessageDeleted};
    Ok(match deleted {
        MessageDeleted::Deleted {
            moved,
            dead_letters,
        } => MessageDeletion::Deleted {
            offsets,
            groups: moved,
            dead_letters,
        },
        MessageDeleted::Refused(blocks) => MessageDeletion::Refused {
            blocks: blocks
                .into_iter()
                .map(|block| match block {
                    Sql::Leased { group } => DeleteBlock::Leased { group },
                    Sql::Behind { group, next } => DeleteBlock::Behind { group, next },
                    Sql::Unsearched { group, next } => DeleteBlock::Unsearched {
                        group,
                        next,
                        to: gap.1 - 1,
                    },
                    Sql::Busy { group } => DeleteBlock::Busy { group },
                    Sql::Unseeded { group } => DeleteBlock::StartUnknown { group },
                })
                .collect(),
            offsets,
        },
        MessageDeleted::NoGroup => MessageDeletion::NoGroup { offsets },
        MessageDeleted::NotFound => MessageDeletion::NotFound,
    })
}

/// Add to `copies` the frames at the offsets the sidecar matched and the dead
/// letters name, where they are still in the partition and hold the
/// transaction id (a sidecar match is a hash).
async fn resolve(
    db: &Db,
    partition_id: Uuid,
    transaction_id: &str,
    found: &FoundMessage,
    copies: &mut Found,
) -> Result<(), EngineError> {
    let mut named: Vec<i64> = found
        .sidecar
        .iter()
        .chain(&found.dead)
        .copied()
        .filter(|offset| (found.log_start..=found.last_offset).contains(offset))
        .collect();
    named.sort_unstable();
    named.dedup();
    let mut rows: Vec<queen_sql::segments::SegmentRow> = Vec::new();
    {
        let client = db.client().await?;
        for &offset in &named {
            if rows
                .last()
                .is_some_and(|row| (row.base_offset..=row.end_offset).contains(&offset))
            {
                continue;
            }
            match queen_sql::segments::fetch_segment(&**client, partition_id, offset).await {
                Ok(row) => rows.push(row),
                // Retention removed it meanwhile.
                Err(queen_sql::SqlError::SegmentNotFound { .. }) => {}
                Err(error) => return Err(error.into()),
            }
        }
    }
    for row in &rows {
        let wanted: Vec<i64> = named
            .iter()
            .copied()
            .filter(|offset| (row.base_offset..=row.end_offset).contains(offset))
            .collect();
        for (offset, audience) in
            matching_frames(row.base_offset, &row.blob, transaction_id, |offset| {
                wanted.contains(&offset)
            })
            .await?
        {
            copies.insert(offset, audience);
        }
    }
    Ok(())
}

/// The frames of a segment (first offset `base`, compressed `blob`) at
/// offsets `keep` accepts whose transaction id is `transaction_id`, with
/// their audiences.
async fn matching_frames(
    base: i64,
    blob: &[u8],
    transaction_id: &str,
    keep: impl Fn(i64) -> bool,
) -> Result<Vec<(i64, Option<String>)>, EngineError> {
    crate::offload::cpu(crate::offload::inflated_estimate(blob.len()), || {
        let segment = queen_frame::decompress(blob)?;
        let mut out = Vec::new();
        for (index, frame) in segment.frames().enumerate() {
            let frame = frame?;
            let offset = base.saturating_add(i64::try_from(index).unwrap_or(i64::MAX));
            if keep(offset) && frame.transaction_id == transaction_id {
                out.push((offset, frame.audience.map(str::to_owned)));
            }
        }
        Ok(out)
    })
    .await
}

/// A scan of one partition's segments for a message's frames.
struct Scan<'a> {
    db: &'a Db,
    tenant: &'a str,
    partition_id: Uuid,
    transaction_id: &'a str,
}

impl Scan<'_> {
    /// Add to `copies` the message's frames at offsets `[from, to)`, in
    /// offset order, until the budget is spent; answers the offset the
    /// search reached (`to` when it covered the range).
    async fn run(
        &self,
        (from, to): (i64, i64),
        budget: &mut Budget,
        copies: &mut Found,
    ) -> Result<i64, EngineError> {
        let mut at = from;
        while at < to {
            // Past the copies a delete acts on, the answer is known already.
            if budget.spent() || copies.len() > MAX_COPIES {
                return Ok(at);
            }
            let rows = {
                let client = self.db.client().await?;
                queen_sql::dlq::message_segments(
                    &**client,
                    self.tenant,
                    self.partition_id,
                    at,
                    to,
                    i32::try_from(SCAN_CHUNK_ROWS.min(MAX_SCAN_SEGMENTS - budget.segments))
                        .unwrap_or(1),
                    SCAN_CHUNK_BYTES.min(MAX_SCAN_BYTES - budget.bytes),
                )
                .await?
            };
            let Some(last) = rows.last() else {
                // Nothing stored from `at` on (retention's gaps, or the end).
                return Ok(to);
            };
            let next = last.end_offset.saturating_add(1);
            for row in &rows {
                budget.segments += 1;
                budget.bytes = budget
                    .bytes
                    .saturating_add(i64::try_from(row.blob.len()).unwrap_or(i64::MAX));
                let range = at..to;
                for (offset, audience) in
                    matching_frames(row.base_offset, &row.blob, self.transaction_id, |offset| {
                        range.contains(&offset)
                    })
                    .await?
                {
                    copies.insert(offset, audience);
                }
            }
            at = next;
        }
        Ok(to)
    }

    /// Nothing was found where a known group may still read it: look in the
    /// offsets below `scan_from` (every known group has consumed them) that
    /// the sidecar search did not cover. `None` when they were searched (a
    /// copy found there is added to `copies`); a refusal when they were
    /// more than the budget allows.
    async fn consumed(
        &self,
        found: &FoundMessage,
        scan_from: i64,
        budget: &mut Budget,
        copies: &mut Found,
    ) -> Result<Option<MessageDeletion>, EngineError> {
        let below = (found.log_start, scan_from.min(found.covered));
        if below.0 >= below.1 {
            return Ok(None);
        }
        let reached = self.run(below, budget, copies).await?;
        Ok(
            (copies.is_empty() && reached < below.1).then(|| MessageDeletion::NotLocated {
                from: reached,
                to: below.1 - 1,
            }),
        )
    }
}
