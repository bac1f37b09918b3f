//! Reading dead letters (`GET /api/v1/dlq`).

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

/// Every consumer group's dead letter of one message (partition id,
/// transaction id), within the tenant.
const DELETE: &str = "DELETE FROM queen.log_dlq d \
      USING queen.log_partitions p, queen.queues q \
      WHERE d.partition_id = $2 AND d.transaction_id = $3 \
        AND p.id = d.partition_id AND q.id = p.queue_id AND q.tenant_id = $1";

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

/// Delete every consumer group's dead letter of the message
/// (`partition_id`, `transaction_id`); answers how many went.
pub async fn delete(
    client: &impl GenericClient,
    tenant: &str,
    partition_id: Uuid,
    transaction_id: &str,
) -> Result<u64, SqlError> {
    Ok(client
        .execute_typed(
            DELETE,
            &[
                (&tenant, Type::TEXT),
                (&partition_id, Type::UUID),
                (&transaction_id, Type::TEXT),
            ],
        )
        .await?)
}

/// Why a message delete was refused for one consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteBlock {
    /// The group holds the message in a live lease.
    Leased {
        /// The group.
        group: String,
    },
    /// The group has earlier messages to read; `next` is the offset it
    /// reads next.
    Behind {
        /// The group.
        group: String,
        /// Its next offset.
        next: i64,
    },
}

/// What `log_message_delete_v1` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageDeleted {
    /// Marked consumed for these groups (their cursors moved onto it; groups
    /// already past it are not named), and this many dead letters removed.
    Deleted {
        /// The groups whose cursors moved.
        moved: Vec<String>,
        /// Dead letters removed.
        dead_letters: u64,
    },
    /// Refused by these groups; nothing changed.
    Refused(Vec<DeleteBlock>),
    /// No group reads the partition and it holds no dead letter of the
    /// message; nothing changed.
    NoCursor,
    /// The partition is not the tenant's.
    NotFound,
}

/// Delete the message at `offset` of `partition_id` (transaction id
/// `transaction_id`), within the tenant (`log_message_delete_v1`).
pub async fn delete_message(
    client: &impl GenericClient,
    tenant: &str,
    partition_id: Uuid,
    offset: i64,
    transaction_id: &str,
) -> Result<MessageDeleted, SqlError> {
    let rows = client
        .query_typed(
            "SELECT * FROM queen.log_message_delete_v1($1, $2, $3, $4)",
            &[
                (&tenant, Type::TEXT),
                (&partition_id, Type::UUID),
                (&offset, Type::INT8),
                (&transaction_id, Type::TEXT),
            ],
        )
        .await?;
    let mut moved = Vec::new();
    let mut blocks = Vec::new();
    for row in &rows {
        let result: &str = row.try_get(0)?;
        let group: Option<String> = row.try_get(1)?;
        let next: Option<i64> = row.try_get(2)?;
        match (result, group) {
            ("moved", Some(group)) => moved.push(group),
            ("leased", Some(group)) => blocks.push(DeleteBlock::Leased { group }),
            ("behind", Some(group)) => blocks.push(DeleteBlock::Behind {
                group,
                next: next.unwrap_or(0),
            }),
            ("done", _) => {
                let dead: Option<i64> = row.try_get(3)?;
                return Ok(MessageDeleted::Deleted {
                    moved,
                    dead_letters: u64::try_from(dead.unwrap_or(0)).unwrap_or(0),
                });
            }
            ("no_cursor", _) => return Ok(MessageDeleted::NoCursor),
            ("not_found", _) => return Ok(MessageDeleted::NotFound),
            _ => {
                return Err(SqlError::Protocol {
                    what: "log_message_delete_v1 returned an unknown row",
                })
            }
        }
    }
    if blocks.is_empty() {
        return Err(SqlError::Protocol {
            what: "log_message_delete_v1 returned no outcome",
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
