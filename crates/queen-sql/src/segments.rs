//! Typed reads of segment rows.
//!
//! A segment is one `queen.log_segments` row: the zstd-compressed frames of the
//! inclusive offset range `[base_offset, end_offset]` of one partition, plus, when
//! it has not been purged yet, the matching `queen.log_txns` hash sidecar row
//! (16 bytes per frame). Decoding the blob is `queen-frame`'s job; this module
//! only fetches rows.

use std::time::SystemTime;

use tokio_postgres::GenericClient;
use uuid::Uuid;

use crate::SqlError;

/// One `queen.log_segments` row and its hash sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentRow {
    /// The partition the segment belongs to.
    pub partition_id: Uuid,
    /// Offset of the segment's first frame.
    pub base_offset: i64,
    /// Offset of the segment's last frame (inclusive).
    pub end_offset: i64,
    /// Number of frames, `end_offset - base_offset + 1`.
    pub msg_count: i32,
    /// When the segment was committed; monotone within a partition.
    pub created_at: SystemTime,
    /// The packed, zstd-compressed frames, exactly as stored.
    pub blob: Vec<u8>,
    /// The `queen.log_txns` hashes (16 bytes per frame, frame order), or `None`
    /// when the sidecar row has already been purged.
    pub hashes: Option<Vec<u8>>,
}

/// The segment of `partition_id` whose range covers `offset`, with its hashes.
///
/// Returns [`SqlError::SegmentNotFound`] when no segment covers the offset: it
/// was never written, or retention has deleted it.
pub async fn fetch_segment(
    client: &impl GenericClient,
    partition_id: Uuid,
    offset: i64,
) -> Result<SegmentRow, SqlError> {
    let not_found = || SqlError::SegmentNotFound {
        partition_id,
        offset,
    };
    let Some(row) = client
        .query_opt(FETCH_SEGMENT_SQL, &[&partition_id, &offset])
        .await?
    else {
        return Err(not_found());
    };
    let segment = SegmentRow {
        partition_id,
        base_offset: row.try_get("base_offset")?,
        end_offset: row.try_get("end_offset")?,
        msg_count: row.try_get("msg_count")?,
        created_at: row.try_get("created_at")?,
        blob: row.try_get("blob")?,
        hashes: row.try_get("hashes")?,
    };
    // Ranges are disjoint, so if the nearest segment at or below `offset` does
    // not reach it, no earlier one can: the offset sits in a gap or past the end.
    if segment.end_offset < offset {
        return Err(not_found());
    }
    Ok(segment)
}

/// The head probe: one backward step on the primary key to the greatest
/// `base_offset <= offset`, written as a bare `LIMIT 1` with the coverage test
/// applied by the caller, so a miss can never walk the partition. The sidecar
/// row mirrors the segment's range and is joined on its full key.
const FETCH_SEGMENT_SQL: &str = "\
SELECT s.base_offset, s.end_offset, s.msg_count, s.created_at, s.blob, t.hashes
  FROM (SELECT base_offset, end_offset, msg_count, created_at, blob
          FROM queen.log_segments
         WHERE partition_id = $1 AND base_offset <= $2
         ORDER BY base_offset DESC
         LIMIT 1) AS s
  LEFT JOIN queen.log_txns AS t
    ON t.partition_id = $1 AND t.base_offset = s.base_offset AND t.end_offset = s.end_offset";
