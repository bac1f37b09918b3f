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
      ORDER BY d.failed_at DESC, d.message_offset DESC \
      LIMIT $5 OFFSET $6";

const COUNT: &str = "SELECT count(*) \
       FROM queen.log_dlq d \
       JOIN queen.log_partitions p ON p.id = d.partition_id \
       JOIN queen.queues q ON q.id = p.queue_id \
      WHERE q.tenant_id = $1 \
        AND ($2::text IS NULL OR q.name = $2) \
        AND ($3::text IS NULL OR d.consumer_group = $3) \
        AND ($4::text IS NULL OR p.name = $4)";

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
            ],
        )
        .await?;
    Ok(row.try_get(0)?)
}
