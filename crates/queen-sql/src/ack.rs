//! Typed calls of `sql/procedures/ack.sql`.

use std::time::SystemTime;

use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;
use uuid::Uuid;

use crate::prepared::{self, Conn};
use crate::SqlError;

const ACK_BATCH: &str = "SELECT * FROM queen.log_ack_batch_v1($1, $2, $3, $4)";
const ACK: &str = "SELECT * FROM queen.log_ack_v3($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
                   $12, $13, $14, $15, $16, $17)";
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
    /// The hash is neither in the partition's sidecar nor, where the sidecar
    /// was purged, among the span's frames.
    NotFound,
    /// The lease given is not the live one.
    InvalidLease,
    /// The status is not one the broker knows.
    UnknownStatus,
    /// Filed as a dead letter (or dropped, with dead-lettering off); the
    /// cursor moved past it.
    Dlq,
    /// Not applied: an earlier item of the partition failed or was retried,
    /// so this one is delivered again after it.
    NotApplied,
}

/// A segment `log_ack_v3` needs decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeededSegment {
    /// Its first offset.
    pub base_offset: i64,
    /// Its compressed frames.
    pub blob: Vec<u8>,
    /// Its timestamp.
    pub created_at: SystemTime,
}

/// What only the broker can do before an ack applies: the call changed
/// nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckNeeds {
    /// Items (by index) whose hash the purged sidecar no longer holds: find
    /// their offsets among the segments' frames.
    pub resolve: Vec<usize>,
    /// Offsets of frames to file as dead letters.
    pub frames: Vec<i64>,
    /// The segments holding both.
    pub segments: Vec<NeededSegment>,
    /// The cursor the call saw: a hash resolves to its first occurrence
    /// after it.
    pub committed: i64,
}

/// A decoded frame the broker hands in to be filed as a dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlqFrame {
    /// Its offset.
    pub offset: i64,
    /// Message id.
    pub message_id: Uuid,
    /// Transaction id (no NUL: the text column refuses it).
    pub transaction_id: String,
    /// Trace id.
    pub trace_id: Option<Uuid>,
    /// Producer sub (no NUL).
    pub producer_sub: Option<String>,
    /// Payload as stored (sealed when `encrypted`).
    pub payload: Vec<u8>,
    /// Payload is sealed.
    pub encrypted: bool,
    /// Its segment's timestamp.
    pub created_at: SystemTime,
}

/// What a per-hash ack call answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckAnswer {
    /// Applied: per input item (by index) its result.
    Applied(AckResults),
    /// Nothing applied yet: call again with what this asks for.
    Needs(AckNeeds),
}

/// An applied per-hash ack.
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

/// One per-hash ack call's input.
#[derive(Debug, Clone, Copy)]
pub struct AckCall<'a> {
    /// The acking tenant (another tenant's partition answers `NotFound`).
    pub tenant: &'a str,
    /// The partition.
    pub partition_id: Uuid,
    /// The consumer group.
    pub group: &'a str,
    /// The lease the items were delivered under.
    pub lease: Option<Uuid>,
    /// Transaction-id hashes, 16 bytes each, concatenated.
    pub hashes: &'a [u8],
    /// Per item: its status.
    pub statuses: &'a [&'a str],
    /// Per item: its error text (no NUL).
    pub errors: &'a [Option<&'a str>],
    /// File `failed` straight to the DLQ (transactions).
    pub failed_to_dlq: bool,
    /// Per item: the offset the broker resolved (`None` on a first call).
    pub offsets: Option<&'a [Option<i64>]>,
    /// Frames to file as dead letters.
    pub frames: &'a [DlqFrame],
}

/// Ack by transaction-id hashes on one partition (`log_ack_v3`): every
/// item applied in offset order in one statement, or, when the broker must
/// decode frames first, nothing applied and [`AckAnswer::Needs`].
pub async fn ack(conn: &impl Conn, call: &AckCall<'_>) -> Result<AckAnswer, SqlError> {
    let offsets: Option<Vec<Option<i64>>> = call.offsets.map(<[Option<i64>]>::to_vec);
    let f = call.frames;
    let frame_offsets: Vec<i64> = f.iter().map(|x| x.offset).collect();
    let frame_ids: Vec<Uuid> = f.iter().map(|x| x.message_id).collect();
    let frame_txns: Vec<&str> = f.iter().map(|x| x.transaction_id.as_str()).collect();
    let frame_traces: Vec<Option<Uuid>> = f.iter().map(|x| x.trace_id).collect();
    let frame_subs: Vec<Option<&str>> = f.iter().map(|x| x.producer_sub.as_deref()).collect();
    let frame_payloads: Vec<&[u8]> = f.iter().map(|x| x.payload.as_slice()).collect();
    let frame_encrypted: Vec<bool> = f.iter().map(|x| x.encrypted).collect();
    let frame_created: Vec<SystemTime> = f.iter().map(|x| x.created_at).collect();
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
            Type::INT8_ARRAY,
            Type::INT8_ARRAY,
            Type::UUID_ARRAY,
            Type::TEXT_ARRAY,
            Type::UUID_ARRAY,
            Type::TEXT_ARRAY,
            Type::BYTEA_ARRAY,
            Type::BOOL_ARRAY,
            Type::TIMESTAMPTZ_ARRAY,
        ],
        &[
            &call.tenant,
            &call.partition_id,
            &call.group,
            &call.lease,
            &call.hashes,
            &call.statuses,
            &call.errors,
            &call.failed_to_dlq,
            &offsets,
            &frame_offsets,
            &frame_ids,
            &frame_txns,
            &frame_traces,
            &frame_subs,
            &frame_payloads,
            &frame_encrypted,
            &frame_created,
        ],
    )
    .await?;
    let mut results = AckResults {
        items: Vec::with_capacity(call.statuses.len()),
        lease_released: false,
        pending: false,
        queue: None,
        partition: None,
    };
    let mut needs = AckNeeds::default();
    for row in rows {
        let kind: &str = row.try_get("o_result")?;
        match kind {
            "state" => {
                results.queue = row.try_get("o_queue")?;
                results.partition = row.try_get("o_partition")?;
                results.lease_released = row
                    .try_get::<_, Option<bool>>("o_lease_released")?
                    .unwrap_or(false);
                results.pending = row
                    .try_get::<_, Option<bool>>("o_pending")?
                    .unwrap_or(false);
                continue;
            }
            "segment" => {
                needs.committed = row.try_get("o_offset")?;
                needs.segments.push(NeededSegment {
                    base_offset: row.try_get("o_seg_base")?,
                    blob: row.try_get("o_seg_blob")?,
                    created_at: row.try_get("o_seg_created_at")?,
                });
                continue;
            }
            "need_frame" => {
                needs.frames.push(row.try_get("o_offset")?);
                continue;
            }
            _ => {}
        }
        let idx: i32 = row.try_get("o_idx")?;
        let idx = usize::try_from(idx).map_err(|_| SqlError::Protocol {
            what: "log_ack_v3 returned a negative index",
        })?;
        let result = match kind {
            "need_resolve" => {
                needs.resolve.push(idx);
                continue;
            }
            "ok" => ItemResult::Ok,
            "not_found" => ItemResult::NotFound,
            "invalid_lease" => ItemResult::InvalidLease,
            "unknown_status" => ItemResult::UnknownStatus,
            "dlq" => ItemResult::Dlq,
            "not_applied" => ItemResult::NotApplied,
            _ => {
                return Err(SqlError::Protocol {
                    what: "log_ack_v3 returned an unknown result",
                })
            }
        };
        results.items.push((idx, result));
    }
    if needs.resolve.is_empty() && needs.frames.is_empty() {
        Ok(AckAnswer::Applied(results))
    } else {
        Ok(AckAnswer::Needs(needs))
    }
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
