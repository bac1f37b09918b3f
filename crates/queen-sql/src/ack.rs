//! Typed calls of `sql/procedures/ack.sql`.

use std::time::SystemTime;

use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;
use uuid::Uuid;

use crate::prepared::{self, Conn};
use crate::SqlError;

const ACK_BATCH: &str = "SELECT * FROM queen.log_ack_batch_v1($1, $2, $3, $4)";
const ACK: &str = "SELECT * FROM queen.log_ack_v2($1, $2, $3, $4, $5, $6, $7, $8)";
const DLQ_HEAD: &str =
    "SELECT * FROM queen.log_dlq_head_v2($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";
const LEASE_EXTEND: &str = "SELECT * FROM queen.log_lease_extend_v2($1, $2, $3, $4)";

/// Result of a positional whole-batch ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchAck {
    /// False when the lease is no longer held with that batch end.
    pub acked: bool,
    /// Data is left behind the new cursor.
    pub pending: bool,
}

/// Advance the cursor to `batch_end`, guarded by the lease. Not by a
/// tenant: the caller has checked the partition is the acking tenant's (the
/// broker takes this path only for a batch it served that tenant's pop).
pub async fn ack_batch(
    conn: &impl Conn,
    partition_id: Uuid,
    group: &str,
    lease: Uuid,
    batch_end: i64,
) -> Result<BatchAck, SqlError> {
    let row = prepared::query_one(
        conn,
        ACK_BATCH,
        &[Type::UUID, Type::TEXT, Type::UUID, Type::INT8],
        &[&partition_id, &group, &lease, &batch_end],
    )
    .await?;
    Ok(BatchAck {
        acked: row.try_get("o_acked")?,
        pending: row.try_get("o_pending")?,
    })
}

/// One item of a per-hash ack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemResult {
    /// Applied, or already covered by the cursor.
    Ok,
    /// The hash is not in the partition's recent sidecar.
    NotFound,
    /// The lease given is not the live one.
    InvalidLease,
    /// The status is not one the broker knows.
    UnknownStatus,
    /// A frame must be filed as a dead letter (see [`DlqRequest`]).
    Dlq(DlqRequest),
    /// Not processed; resubmit after the dead letter is filed.
    Deferred,
}

/// The frame `log_ack_v1` asks the broker to file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlqRequest {
    /// Offset of the frame to file.
    pub offset: i64,
    /// The segment holding it (`None` if retention removed it).
    pub segment: Option<(i64, Vec<u8>, SystemTime)>,
    /// The error text to store.
    pub error: String,
    /// Retries spent.
    pub retry_count: i32,
}

/// What a per-hash ack call answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckResults {
    /// Per input item (by index): its result.
    pub items: Vec<(usize, ItemResult)>,
    /// The lease was released by this call.
    pub lease_released: bool,
    /// Data is left behind the cursor.
    pub pending: bool,
    /// Queue name (for the response and the hot-list).
    pub queue: Option<String>,
    /// Partition name.
    pub partition: Option<String>,
}

/// Ack by transaction-id hashes (16 bytes each, concatenated), on a
/// partition of `tenant` (another tenant's answers `NotFound` per item).
#[allow(clippy::too_many_arguments)] // mirrors the procedure's parameters one to one
pub async fn ack(
    conn: &impl Conn,
    tenant: &str,
    partition_id: Uuid,
    group: &str,
    lease: Option<Uuid>,
    hashes: &[u8],
    statuses: &[&str],
    errors: &[Option<&str>],
    failed_to_dlq: bool,
) -> Result<AckResults, SqlError> {
    let rows = prepared::query(
        conn,
        ACK,
        &[
            Type::TEXT,
            Type::UUID,
            Type::TEXT,
            Type::UUID,
            Type::BYTEA,
            Type::TEXT_ARRAY,
            Type::TEXT_ARRAY,
            Type::BOOL,
        ],
        &[
            &tenant,
            &partition_id,
            &group,
            &lease,
            &hashes,
            &statuses,
            &errors,
            &failed_to_dlq,
        ],
    )
    .await?;
    let mut results = AckResults {
        items: Vec::with_capacity(statuses.len()),
        lease_released: false,
        pending: false,
        queue: None,
        partition: None,
    };
    for row in rows {
        let kind: &str = row.try_get("o_result")?;
        results.queue = row.try_get("o_queue")?;
        results.partition = row.try_get("o_partition")?;
        if kind == "state" {
            results.lease_released = row
                .try_get::<_, Option<bool>>("o_lease_released")?
                .unwrap_or(false);
            results.pending = row
                .try_get::<_, Option<bool>>("o_pending")?
                .unwrap_or(false);
            continue;
        }
        let idx: i32 = row.try_get("o_idx")?;
        let idx = usize::try_from(idx).map_err(|_| SqlError::Protocol {
            what: "log_ack_v1 returned a negative index",
        })?;
        let result = match kind {
            "ok" => ItemResult::Ok,
            "not_found" => ItemResult::NotFound,
            "invalid_lease" => ItemResult::InvalidLease,
            "unknown_status" => ItemResult::UnknownStatus,
            "deferred" => ItemResult::Deferred,
            "dlq" => {
                let base: Option<i64> = row.try_get("o_dlq_base")?;
                let blob: Option<Vec<u8>> = row.try_get("o_dlq_blob")?;
                let created: Option<SystemTime> = row.try_get("o_dlq_created_at")?;
                ItemResult::Dlq(DlqRequest {
                    offset: row.try_get("o_dlq_offset")?,
                    segment: match (base, blob, created) {
                        (Some(base), Some(blob), Some(created)) => Some((base, blob, created)),
                        _ => None,
                    },
                    error: row.try_get("o_dlq_error")?,
                    retry_count: row.try_get("o_retry_count")?,
                })
            }
            _ => {
                return Err(SqlError::Protocol {
                    what: "log_ack_v1 returned an unknown result",
                })
            }
        };
        results.items.push((idx, result));
    }
    Ok(results)
}

/// One dead letter to file.
#[derive(Debug, Clone)]
pub struct DeadLetter<'a> {
    /// Partition.
    pub partition_id: Uuid,
    /// Consumer group.
    pub group: &'a str,
    /// The lease the filing was decided under (`None`: an ack without one).
    pub lease: Option<Uuid>,
    /// Offset of the message.
    pub offset: i64,
    /// Message id.
    pub message_id: Uuid,
    /// Transaction id.
    pub transaction_id: &'a str,
    /// Trace id.
    pub trace_id: Option<Uuid>,
    /// Producer sub.
    pub producer_sub: Option<&'a str>,
    /// Payload as stored (sealed when `encrypted`).
    pub payload: &'a [u8],
    /// Payload is sealed.
    pub encrypted: bool,
    /// The message's segment timestamp.
    pub created_at: SystemTime,
    /// Why.
    pub error: &'a str,
    /// Retries spent.
    pub retry_count: i32,
}

/// What filing a dead letter did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DlqFiled {
    /// False: another worker holds a live lease now; nothing was done.
    pub applied: bool,
    /// The frame went to the DLQ (false when dead-lettering is off).
    pub filed: bool,
    /// Data is left behind the cursor.
    pub pending: bool,
}

/// File (or drop) a dead letter and move the cursor past it, unless another
/// worker holds a live lease on the cursor now (`log_dlq_head_v2`).
pub async fn dlq_head(
    client: &impl GenericClient,
    letter: &DeadLetter<'_>,
) -> Result<DlqFiled, SqlError> {
    let row = client
        .query_typed_one(
            DLQ_HEAD,
            &[
                (&letter.partition_id, Type::UUID),
                (&letter.group, Type::TEXT),
                (&letter.lease, Type::UUID),
                (&letter.offset, Type::INT8),
                (&letter.message_id, Type::UUID),
                (&letter.transaction_id, Type::TEXT),
                (&letter.trace_id, Type::UUID),
                (&letter.producer_sub, Type::TEXT),
                (&letter.payload, Type::BYTEA),
                (&letter.encrypted, Type::BOOL),
                (&letter.created_at, Type::TIMESTAMPTZ),
                (&letter.error, Type::TEXT),
                (&letter.retry_count, Type::INT4),
            ],
        )
        .await?;
    Ok(DlqFiled {
        applied: row.try_get("o_applied")?,
        filed: row.try_get("o_filed")?,
        pending: row.try_get("o_pending")?,
    })
}

/// Extend a lease on its partitions (`pids` when known). Returns the new
/// expiry, or `None` with `found` telling whether the lease existed at all.
pub async fn lease_extend(
    client: &impl GenericClient,
    tenant: &str,
    lease: Uuid,
    seconds: i32,
    pids: Option<&[Uuid]>,
) -> Result<(Option<SystemTime>, bool), SqlError> {
    let row = client
        .query_typed_one(
            LEASE_EXTEND,
            &[
                (&tenant, Type::TEXT),
                (&lease, Type::UUID),
                (&seconds, Type::INT4),
                (&pids, Type::UUID_ARRAY),
            ],
        )
        .await?;
    Ok((row.try_get("o_expires_at")?, row.try_get("o_found")?))
}
