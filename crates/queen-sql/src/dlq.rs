//! Reading dead letters (`GET /api/v1/dlq`), taking them for a replay, and
//! deleting a message (its copies found, then marked consumed).

use std::time::SystemTime;

use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;
use uuid::Uuid;

use crate::SqlError;

const LIST: &str = "SELECT d.message_id, d.transaction_id, d.partition_id, q.name, p.name, \
            d.consumer_group, d.error, d.retry_count, d.payload, d.encrypted, d.producer_sub, \
            d.message_created_at, d.failed_at, d.message_offset \
       FROM queen.log_dlq d \
       JOIN queen.log_partitions p ON p.id = d.partition_id \
       JOIN queen.queues q ON q.id = p.queue_id \
      WHERE q.tenant_id = $1 \
        AND ($2::text IS NULL OR q.name = $2) \
        AND ($3::text IS NULL OR d.consumer_group = $3) \
        AND ($4::text IS NULL OR p.name = $4) \
        AND ($7::timestamptz IS NULL OR d.failed_at >= $7) \
        AND ($8::timestamptz IS NULL OR d.failed_at <= $8) \
      ORDER BY d.failed_at DESC, d.message_offset DESC \
      LIMIT $5 OFFSET $6";

const COUNT: &str = "SELECT count(*) \
       FROM queen.log_dlq d \
       JOIN queen.log_partitions p ON p.id = d.partition_id \
       JOIN queen.queues q ON q.id = p.queue_id \
      WHERE q.tenant_id = $1 \
        AND ($2::text IS NULL OR q.name = $2) \
        AND ($3::text IS NULL OR d.consumer_group = $3) \
        AND ($4::text IS NULL OR p.name = $4) \
        AND ($5::timestamptz IS NULL OR d.failed_at >= $5) \
        AND ($6::timestamptz IS NULL OR d.failed_at <= $6)";

/// A dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterRow {
    /// Message id.
    pub message_id: Uuid,
    /// Transaction id.
    pub transaction_id: String,
    /// Partition id.
    pub partition_id: Uuid,
    /// Queue name.
    pub queue: String,
    /// Partition name.
    pub partition: String,
    /// Consumer group whose cursor moved past it.
    pub consumer_group: String,
    /// Why it was filed.
    pub error: Option<String>,
    /// Retries spent.
    pub retry_count: i32,
    /// The payload as stored (sealed when `encrypted`).
    pub payload: Vec<u8>,
    /// Payload is sealed.
    pub encrypted: bool,
    /// Producer sub.
    pub producer_sub: Option<String>,
    /// The message's original timestamp.
    pub created_at: SystemTime,
    /// When it was filed.
    pub failed_at: SystemTime,
    /// Its offset.
    pub offset: i64,
}

/// Filters of a DLQ listing; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub struct DlqFilter<'a> {
    /// Queue name.
    pub queue: Option<&'a str>,
    /// Consumer group.
    pub group: Option<&'a str>,
    /// Partition name.
    pub partition: Option<&'a str>,
    /// Filed at or after.
    pub from: Option<SystemTime>,
    /// Filed at or before.
    pub to: Option<SystemTime>,
}

/// Dead letters, newest first.
pub async fn list(
    client: &impl GenericClient,
    tenant: &str,
    filter: &DlqFilter<'_>,
    limit: i64,
    offset: i64,
) -> Result<Vec<DeadLetterRow>, SqlError> {
    let rows = client
        .query_typed(
            LIST,
            &[
                (&tenant, Type::TEXT),
                (&filter.queue, Type::TEXT),
                (&filter.group, Type::TEXT),
                (&filter.partition, Type::TEXT),
                (&limit, Type::INT8),
                (&offset, Type::INT8),
                (&filter.from, Type::TIMESTAMPTZ),
                (&filter.to, Type::TIMESTAMPTZ),
            ],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(DeadLetterRow {
                message_id: row.try_get(0)?,
                transaction_id: row.try_get(1)?,
                partition_id: row.try_get(2)?,
                queue: row.try_get(3)?,
                partition: row.try_get(4)?,
                consumer_group: row.try_get(5)?,
                error: row.try_get(6)?,
                retry_count: row.try_get(7)?,
                payload: row.try_get(8)?,
                encrypted: row.try_get(9)?,
                producer_sub: row.try_get(10)?,
                created_at: row.try_get(11)?,
                failed_at: row.try_get(12)?,
                offset: row.try_get(13)?,
            })
        })
        .collect()
}

/// How many dead letters match `filter`.
pub async fn count(
    client: &impl GenericClient,
    tenant: &str,
    filter: &DlqFilter<'_>,
) -> Result<i64, SqlError> {
    let row = client
        .query_typed_one(
            COUNT,
            &[
                (&tenant, Type::TEXT),
                (&filter.queue, Type::TEXT),
                (&filter.group, Type::TEXT),
                (&filter.partition, Type::TEXT),
                (&filter.from, Type::TIMESTAMPTZ),
                (&filter.to, Type::TIMESTAMPTZ),
            ],
        )
        .await?;
    Ok(row.try_get(0)?)
}

/// Where the copies of a message are (`log_message_find_v1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundMessage {
    /// The partition's first live offset.
    pub log_start: i64,
    /// Its last offset.
    pub last_offset: i64,
    /// The lowest offset the sidecar search covered: every offset from it up
    /// was searched.
    pub covered: i64,
    /// The least advanced position of the queue's known groups here
    /// (`log_start - 1` when one has no cursor here; `None`: no group known).
    pub least: Option<i64>,
    /// Offsets whose transaction-id hash matched, newest first (at most the
    /// `max` asked for).
    pub sidecar: Vec<i64>,
    /// Offsets its dead letters were filed from.
    pub dead: Vec<i64>,
}

/// Where the copies of the message (`partition_id`, `transaction_id`, whose
/// hash is `hash`) are, within the tenant: among the partition's newest
/// `rows` sidecar rows (at most `max` matches) and its dead letters; `None`
/// when the partition is not the tenant's (`log_message_find_v1`).
pub async fn find_message(
    client: &impl GenericClient,
    tenant: &str,
    partition_id: Uuid,
    hash: &[u8],
    transaction_id: &str,
    rows: i32,
    max: i32,
) -> Result<Option<FoundMessage>, SqlError> {
    let rows = client
        .query_typed(
            "SELECT * FROM queen.log_message_find_v1($1, $2, $3, $4, $5, $6)",
            &[
                (&tenant, Type::TEXT),
                (&partition_id, Type::UUID),
                (&hash, Type::BYTEA),
                (&transaction_id, Type::TEXT),
                (&rows, Type::INT4),
                (&max, Type::INT4),
            ],
        )
        .await?;
    let mut found: Option<FoundMessage> = None;
    for row in &rows {
        let kind: &str = row.try_get(0)?;
        let offset: i64 = row.try_get(1)?;
        match (kind, found.as_mut()) {
            ("partition", None) => {
                found = Some(FoundMessage {
                    log_start: offset,
                    last_offset: row.try_get(2)?,
                    covered: row.try_get(3)?,
                    least: row.try_get(4)?,
                    sidecar: Vec::new(),
                    dead: Vec::new(),
                });
            }
            ("sidecar", Some(found)) => found.sidecar.push(offset),
            ("dead", Some(found)) => found.dead.push(offset),
            _ => {
                return Err(SqlError::Protocol {
                    what: "log_message_find_v1 returned an unexpected row",
                })
            }
        }
    }
    Ok(found)
}

/// One segment read by [`message_segments`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedSegment {
    /// Offset of its first frame.
    pub base_offset: i64,
    /// Offset of its last frame.
    pub end_offset: i64,
    /// The compressed frames, as stored.
    pub blob: Vec<u8>,
}

/// The segments of `partition_id` (of the tenant) holding offsets in
/// `[from, to)`, in offset order: at most `max_rows`, none starting after
/// `max_bytes` of blob (`log_message_segments_v1`).
pub async fn message_segments(
    client: &impl GenericClient,
    tenant: &str,
    partition_id: Uuid,
    from: i64,
    to: i64,
    max_rows: i32,
    max_bytes: i64,
) -> Result<Vec<ScannedSegment>, SqlError> {
    let rows = client
        .query_typed(
            "SELECT * FROM queen.log_message_segments_v1($1, $2, $3, $4, $5, $6)",
            &[
                (&tenant, Type::TEXT),
                (&partition_id, Type::UUID),
                (&from, Type::INT8),
                (&to, Type::INT8),
                (&max_rows, Type::INT4),
                (&max_bytes, Type::INT8),
            ],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(ScannedSegment {
                base_offset: row.try_get(0)?,
                end_offset: row.try_get(1)?,
                blob: row.try_get(2)?,
            })
        })
        .collect()
}

/// Why a message delete was refused for one consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteBlock {
    /// The group holds a live lease and has a copy to read.
    Leased {
        /// The group.
        group: String,
    },
    /// The group reads `next` first, which is not a copy.
    Behind {
        /// The group.
        group: String,
        /// Its next offset.
        next: i64,
    },
    /// The group reads offsets from `next` that were not searched.
    Unsearched {
        /// The group.
        group: String,
        /// Its next offset.
        next: i64,
    },
    /// A pop is creating the group's cursor on the partition now.
    Busy {
        /// The group.
        group: String,
    },
    /// The group has no cursor on the partition and no subscription record,
    /// so where it would start is not known.
    Unseeded {
        /// The group.
        group: String,
    },
}

/// What `log_message_delete_v2` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageDeleted {
    /// Marked consumed: these groups' cursors moved (or were created) past
    /// the copies, in group order, and this many dead letters removed.
    Deleted {
        /// The groups whose cursors moved or were created.
        moved: Vec<String>,
        /// Dead letters removed.
        dead_letters: u64,
    },
    /// Refused by these groups; nothing changed.
    Refused(Vec<DeleteBlock>),
    /// A copy is live and no consumer group is known on the queue; nothing
    /// changed.
    NoGroup,
    /// The partition is not the tenant's.
    NotFound,
}

/// The copies of a message to delete and what was not searched
/// (`log_message_delete_v2`).
#[derive(Debug, Clone, Copy)]
pub struct Copies<'a> {
    /// Their offsets, ascending.
    pub offsets: &'a [i64],
    /// Each one's audience (its frame's, groups separated by a newline;
    /// `None`: every group).
    pub audiences: &'a [Option<&'a str>],
    /// Offsets `[lo, hi)` not searched for copies (empty when `lo >= hi`).
    pub gap: (i64, i64),
}

/// Delete the message (`partition_id`, `transaction_id`) of the tenant whose
/// copies are `copies` (`log_message_delete_v2`).
pub async fn delete_message(
    client: &impl GenericClient,
    tenant: &str,
    partition_id: Uuid,
    transaction_id: &str,
    copies: &Copies<'_>,
) -> Result<MessageDeleted, SqlError> {
    let rows = client
        .query_typed(
            "SELECT * FROM queen.log_message_delete_v2($1, $2, $3, $4, $5, $6, $7)",
            &[
                (&tenant, Type::TEXT),
                (&partition_id, Type::UUID),
                (&transaction_id, Type::TEXT),
                (&copies.offsets, Type::INT8_ARRAY),
                (&copies.audiences, Type::TEXT_ARRAY),
                (&copies.gap.0, Type::INT8),
                (&copies.gap.1, Type::INT8),
            ],
        )
        .await?;
    let mut moved = Vec::new();
    let mut blocks = Vec::new();
    for row in &rows {
        let result: &str = row.try_get(0)?;
        let group: Option<String> = row.try_get(1)?;
        let next: Option<i64> = row.try_get(2)?;
        match (result, group, next) {
            ("moved" | "created", Some(group), _) => moved.push(group),
            ("leased", Some(group), _) => blocks.push(DeleteBlock::Leased { group }),
            ("behind", Some(group), Some(next)) => blocks.push(DeleteBlock::Behind { group, next }),
            ("unsearched", Some(group), Some(next)) => {
                blocks.push(DeleteBlock::Unsearched { group, next });
            }
            ("busy", Some(group), _) => blocks.push(DeleteBlock::Busy { group }),
            ("unseeded", Some(group), _) => blocks.push(DeleteBlock::Unseeded { group }),
            ("done", _, _) => {
                let dead: Option<i64> = row.try_get(3)?;
                moved.sort_unstable();
                return Ok(MessageDeleted::Deleted {
                    moved,
                    dead_letters: u64::try_from(dead.unwrap_or(0)).unwrap_or(0),
                });
            }
            ("no_group", _, _) => return Ok(MessageDeleted::NoGroup),
            ("not_found", _, _) => return Ok(MessageDeleted::NotFound),
            _ => {
                return Err(SqlError::Protocol {
                    what: "log_message_delete_v2 returned an unknown row",
                })
            }
        }
    }
    if blocks.is_empty() {
        return Err(SqlError::Protocol {
            what: "log_message_delete_v2 returned no outcome",
        });
    }
    Ok(MessageDeleted::Refused(blocks))
}

const TAKE: &str = "SELECT * FROM queen.log_dlq_take_v1($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// Which dead letters a replay takes: one message's rows (`partition_id`
/// and `transaction_id`), or a range by `filter`; both narrow together.
#[derive(Debug, Clone, Default)]
pub struct DlqTake<'a> {
    /// Queue, consumer group, partition name and filing-time filters.
    pub filter: DlqFilter<'a>,
    /// One partition, by id.
    pub partition_id: Option<Uuid>,
    /// One transaction id.
    pub transaction_id: Option<&'a str>,
    /// At most this many rows.
    pub limit: i32,
}

/// A dead letter taken out of `queen.log_dlq` for replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenLetter {
    /// Queue name.
    pub queue: String,
    /// Partition name.
    pub partition: String,
    /// Partition id.
    pub partition_id: Uuid,
    /// The offset it had.
    pub offset: i64,
    /// The group it failed in.
    pub consumer_group: String,
    /// Transaction id.
    pub transaction_id: String,
    /// Trace id.
    pub trace_id: Option<Uuid>,
    /// Producer sub.
    pub producer_sub: Option<String>,
    /// The payload as stored (sealed when `encrypted`).
    pub payload: Vec<u8>,
    /// Payload is sealed.
    pub encrypted: bool,
}

/// Delete the dead letters `take` selects and return them, oldest filing
/// first (`log_dlq_take_v1`): call it inside the transaction that pushes
/// them back, so they leave the table exactly when the replay commits.
pub async fn take(
    client: &impl GenericClient,
    tenant: &str,
    take: &DlqTake<'_>,
) -> Result<Vec<TakenLetter>, SqlError> {
    let filter = &take.filter;
    let rows = client
        .query_typed(
            TAKE,
            &[
                (&tenant, Type::TEXT),
                (&filter.queue, Type::TEXT),
                (&take.partition_id, Type::UUID),
                (&take.transaction_id, Type::TEXT),
                (&filter.partition, Type::TEXT),
                (&filter.group, Type::TEXT),
                (&filter.from, Type::TIMESTAMPTZ),
                (&filter.to, Type::TIMESTAMPTZ),
                (&take.limit, Type::INT4),
            ],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(TakenLetter {
                queue: row.try_get(0)?,
                partition: row.try_get(1)?,
                partition_id: row.try_get(2)?,
                offset: row.try_get(3)?,
                consumer_group: row.try_get(4)?,
                transaction_id: row.try_get(5)?,
                trace_id: row.try_get(6)?,
                producer_sub: row.try_get(7)?,
                payload: row.try_get(8)?,
                encrypted: row.try_get(9)?,
            })
        })
        .collect()
}
