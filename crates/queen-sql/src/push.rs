//! Typed call of `queen.log_push_v1` (`sql/procedures/push.sql`): the flush
//! transaction that writes one segment per slot, for several partitions, in one
//! statement and one round trip.

use std::time::SystemTime;

use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;
use uuid::Uuid;

use crate::SqlError;

const PUSH_SEGMENTS: &str =
    "SELECT * FROM queen.log_push_v1($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

/// One segment to write: a partition's packed, compressed frames and their hashes.
#[derive(Debug, Clone, Copy)]
pub struct SegmentWrite<'a> {
    /// Queue name (created with defaults if missing).
    pub queue: &'a str,
    /// Partition name (created if missing).
    pub partition: &'a str,
    /// Namespace for an implicitly created queue.
    pub namespace: &'a str,
    /// Task for an implicitly created queue.
    pub task: &'a str,
    /// Id for the queue row, used only if it must be created.
    pub new_queue_id: Uuid,
    /// Id for the partition row, used only if it must be created.
    pub new_partition_id: Uuid,
    /// True when the frames' payloads are sealed (frame flag 4).
    pub encrypted: bool,
    /// Number of frames in `blob`.
    pub n_frames: i32,
    /// The zstd segment blob.
    pub blob: &'a [u8],
    /// The sidecar: 16 bytes per frame, in frame order.
    pub hashes: &'a [u8],
}

/// What happened to one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotOutcome {
    /// Committed: the frames hold offsets `base_offset ..`.
    Queued {
        /// The queue's id.
        queue_id: Uuid,
        /// The partition's id.
        partition_id: Uuid,
        /// The offset of the slot's first frame.
        base_offset: i64,
        /// The segment's `created_at`.
        created_at: SystemTime,
    },
    /// Nothing written: the queue's `encryptionEnabled` differs from the slot's.
    EncryptionMismatch {
        /// The queue's id.
        queue_id: Uuid,
        /// The queue's actual setting.
        encryption_enabled: bool,
    },
    /// Nothing written: some frames repeat transaction ids already stored
    /// inside the queue's dedup window.
    Duplicates {
        /// The partition's id.
        partition_id: Uuid,
        /// One entry per duplicate frame.
        duplicates: Vec<Duplicate>,
    },
}

/// A frame of the slot whose transaction id is already stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    /// Index of the frame within the slot.
    pub item: usize,
    /// Index of the winner within `winner_blob`.
    pub winner_frame: usize,
    /// The winner's segment blob; `None` when retention already removed it.
    pub winner_blob: Option<Vec<u8>>,
}

/// Write `writes` in one transaction (one statement). Returns one outcome per
/// slot, in slot order.
pub async fn push_segments(
    client: &impl GenericClient,
    tenant: &str,
    writes: &[SegmentWrite<'_>],
) -> Result<Vec<SlotOutcome>, SqlError> {
    let queues: Vec<&str> = writes.iter().map(|w| w.queue).collect();
    let partitions: Vec<&str> = writes.iter().map(|w| w.partition).collect();
    let namespaces: Vec<&str> = writes.iter().map(|w| w.namespace).collect();
    let tasks: Vec<&str> = writes.iter().map(|w| w.task).collect();
    let queue_ids: Vec<Uuid> = writes.iter().map(|w| w.new_queue_id).collect();
    let partition_ids: Vec<Uuid> = writes.iter().map(|w| w.new_partition_id).collect();
    let encrypted: Vec<bool> = writes.iter().map(|w| w.encrypted).collect();
    let counts: Vec<i32> = writes.iter().map(|w| w.n_frames).collect();
    let blobs: Vec<&[u8]> = writes.iter().map(|w| w.blob).collect();
    let hashes: Vec<&[u8]> = writes.iter().map(|w| w.hashes).collect();
    // `query_typed` sends parse, bind and execute together: one round trip,
    // where `query` with SQL text would first prepare (a second round trip).
    let rows = client
        .query_typed(
            PUSH_SEGMENTS,
            &[
                (&tenant, Type::TEXT),
                (&queues, Type::TEXT_ARRAY),
                (&partitions, Type::TEXT_ARRAY),
                (&namespaces, Type::TEXT_ARRAY),
                (&tasks, Type::TEXT_ARRAY),
                (&queue_ids, Type::UUID_ARRAY),
                (&partition_ids, Type::UUID_ARRAY),
                (&encrypted, Type::BOOL_ARRAY),
                (&counts, Type::INT4_ARRAY),
                (&blobs, Type::BYTEA_ARRAY),
                (&hashes, Type::BYTEA_ARRAY),
            ],
        )
        .await?;

    let mut outcomes: Vec<Option<SlotOutcome>> = vec![None; writes.len()];
    for row in rows {
        let slot: i32 = row.try_get("o_slot")?;
        let Some(entry) = usize::try_from(slot).ok().and_then(|s| outcomes.get_mut(s)) else {
            return Err(SqlError::Protocol {
                what: "log_push_v1 returned a slot out of range",
            });
        };
        let status: &str = row.try_get("o_status")?;
        match status {
            "queued" => {
                *entry = Some(SlotOutcome::Queued {
                    queue_id: row.try_get("o_queue_id")?,
                    partition_id: row.try_get("o_partition_id")?,
                    base_offset: row.try_get("o_base_offset")?,
                    created_at: row.try_get("o_created_at")?,
                });
            }
            "encryption" => {
                *entry = Some(SlotOutcome::EncryptionMismatch {
                    queue_id: row.try_get("o_queue_id")?,
                    encryption_enabled: row.try_get("o_encryption_enabled")?,
                });
            }
            "duplicate" => {
                let item: i32 = row.try_get("o_dup_item")?;
                let frame: i32 = row.try_get("o_dup_frame")?;
                let duplicate = Duplicate {
                    item: usize::try_from(item).unwrap_or(usize::MAX),
                    winner_frame: usize::try_from(frame).unwrap_or(usize::MAX),
                    winner_blob: row.try_get("o_dup_blob")?,
                };
                match entry {
                    Some(SlotOutcome::Duplicates { duplicates, .. }) => duplicates.push(duplicate),
                    _ => {
                        *entry = Some(SlotOutcome::Duplicates {
                            partition_id: row.try_get("o_partition_id")?,
                            duplicates: vec![duplicate],
                        });
                    }
                }
            }
            _ => {
                return Err(SqlError::Protocol {
                    what: "log_push_v1 returned an unknown status",
                })
            }
        }
    }
    outcomes
        .into_iter()
        .map(|outcome| {
            outcome.ok_or(SqlError::Protocol {
                what: "log_push_v1 returned no row for a slot",
            })
        })
        .collect()
}
