//! The ack path (decisions.md §4).
//!
//! Items are grouped by (partition, lease). A group that is exactly a batch
//! this broker served, all `completed`, becomes one positional advance
//! (`log_ack_batch_v1`). Anything else (a partial ack, another broker's pop,
//! a restart, a failure, dead letters) is one `log_ack_v3` statement that
//! resolves transaction ids through the hash sidecar and applies every item
//! in offset order (it first checks the partition is the caller's tenant's;
//! the positional path needs no such check: the registry entry it uses is of
//! a pop of that tenant). Frames SQL cannot read (a dead letter's, or the
//! leased span's once the sidecar was purged) are decoded here and handed to
//! a second call.
//!
//! After an ack that released a lease with data left behind the cursor, the
//! partition goes back into the group's hot-list ring and the queue's gate
//! opens (ack-promote).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use queen_sql::ack::{AckAnswer, AckCall, AckNeeds, AckResults, DlqFrame, ItemResult};
use uuid::Uuid;

use crate::naming::split_queue_key;
use crate::pop::Ready;
use crate::registry::AckRegistry;
use crate::EngineError;

/// The error an ack item gets when its lease is not the live one (the wire
/// contract's wording).
pub const INVALID_LEASE: &str = "Invalid or expired lease";

/// What a consumer says about one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckStatus {
    /// Processed (`completed` or `success`).
    Completed,
    /// Processing failed: spend a retry, or dead-letter once the budget is spent.
    Failed,
    /// Dead-letter it now.
    Dlq,
    /// Give the batch back without spending the retry budget.
    Retry,
    /// Anything else: answered unsuccessful, nothing done.
    Other(String),
}

impl AckStatus {
    /// Parse a wire status; `None` means `completed`.
    pub fn parse(status: Option<&str>) -> AckStatus {
        match status {
            None | Some("completed" | "success") => AckStatus::Completed,
            Some("failed") => AckStatus::Failed,
            Some("dlq") => AckStatus::Dlq,
            Some("retry") => AckStatus::Retry,
            Some(other) => AckStatus::Other(other.to_owned()),
        }
    }

    fn as_sql(&self) -> &str {
        match self {
            AckStatus::Completed => "completed",
            AckStatus::Failed => "failed",
            AckStatus::Dlq => "dlq",
            AckStatus::Retry => "retry",
            AckStatus::Other(other) => other,
        }
    }
}

/// One acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckItem {
    /// The message's transaction id.
    pub transaction_id: String,
    /// The message's partition.
    pub partition_id: Uuid,
    /// What happened to it.
    pub status: AckStatus,
    /// Error text (stored with a dead letter).
    pub error: Option<String>,
    /// The lease it was delivered under (`None`: no lease check, as for
    /// auto-acked messages).
    pub lease_id: Option<Uuid>,
}

/// The answer for one acknowledgement, in input order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckOutcome {
    /// Applied (or already applied).
    pub success: bool,
    /// Why not.
    pub error: Option<String>,
    /// The lease was released by this ack call.
    pub lease_released: bool,
    /// The message was filed as a dead letter.
    pub dlq: bool,
    /// Queue name.
    pub queue: Option<String>,
    /// Partition name.
    pub partition: Option<String>,
}

/// Acks are applied per (partition, lease).
type GroupKey = (Uuid, Option<Uuid>);

/// The error of an item `log_ack_v1` returned no row for (it always should).
const NO_RESULT: &str = "ack not applied: no result for this item";

/// The error of an item after a `failed` or `retry` item of its partition:
/// the cursor stops before that one, so this one is delivered again.
pub(crate) const NOT_APPLIED: &str =
    "Not applied: an earlier message of this partition failed or was \
     retried in this ack, and this one is delivered again after it";

/// Calls one group of items may need: a first call, one after resolving
/// hashes the purged sidecar lost, one after decoding dead letters' frames,
/// and one spare for a cursor that moved meanwhile.
const MAX_ACK_ROUNDS: usize = 4;

/// The ack component: applies acks and lease extensions. It reads the
/// batches pop serving registered (the registry is their one shared
/// interface) and announces ack-promotes through [`Ready`].
pub(crate) struct Acks {
    pool: deadpool_postgres::Pool,
    registry: Arc<AckRegistry>,
    ready: Ready,
    /// Positional ack calls since start.
    positional: AtomicU64,
    /// By-hash ack calls since start.
    by_hash: AtomicU64,
}

impl Acks {
    pub(crate) fn new(
        pool: deadpool_postgres::Pool,
        registry: Arc<AckRegistry>,
        ready: Ready,
    ) -> Acks {
        Acks {
            pool,
            registry,
            ready,
            positional: AtomicU64::new(0),
            by_hash: AtomicU64::new(0),
        }
    }

    /// Acknowledge `items` for consumer group `group` on `tenant`'s
    /// partitions (another tenant's partition answers "Message not found").
    pub(crate) async fn ack(
        &self,
        tenant: &str,
        group: &str,
        items: Vec<AckItem>,
    ) -> Result<Vec<AckOutcome>, EngineError> {
        let mut outcomes = vec![AckOutcome::default(); items.len()];
        let mut groups: Vec<(GroupKey, Vec<usize>)> = Vec::new();
        let mut index: HashMap<GroupKey, usize> = HashMap::new();
        for (idx, item) in items.iter().enumerate() {
            let key = (item.partition_id, item.lease_id);
            let slot = *index.entry(key).or_insert_with(|| {
                groups.push((key, Vec::new()));
                groups.len() - 1
            });
            groups[slot].1.push(idx);
        }
        let client = self.pool.get().await.map_err(queen_sql::SqlError::from)?;
        for ((partition_id, lease), indices) in groups {
            let members: Vec<&AckItem> = indices.iter().map(|&i| &items[i]).collect();
            let results = self
                .ack_group(&client, tenant, group, partition_id, lease, &members, false)
                .await?;
            // Committed (the connection is not in a transaction).
            self.ready.consumed(partition_id);
            for (idx, outcome) in indices.into_iter().zip(results) {
                outcomes[idx] = outcome;
            }
        }
        Ok(outcomes)
    }

    /// Ack one (partition, lease) group on `client` (a pooled connection, or
    /// a transaction).
    #[allow(clippy::too_many_arguments)] // the group's key, its items and the mode
    pub(crate) async fn ack_group(
        &self,
        client: &impl queen_sql::Conn,
        tenant: &str,
        group: &str,
        partition_id: Uuid,
        lease: Option<Uuid>,
        items: &[&AckItem],
        failed_to_dlq: bool,
    ) -> Result<Vec<AckOutcome>, EngineError> {
        let hashes: Vec<[u8; 16]> = items
            .iter()
            .map(|item| queen_frame::txn_hash(&item.transaction_id))
            .collect();

        // The positional path: exactly the batch this broker served, all completed.
        if let Some(lease) = lease {
            let all_completed = items.iter().all(|i| i.status == AckStatus::Completed);
            if let Some(served) = self.registry.get(lease, partition_id, Instant::now()) {
                // The registry knows the queue by its key: the batch was
                // served to a pop of that tenant, which proves the partition
                // is the tenant's (another tenant's ack takes the guarded
                // hash path, and is refused there).
                let (served_tenant, queue) = split_queue_key(&served.queue);
                if all_completed
                    && served_tenant == tenant
                    && served.group == group
                    && AckRegistry::covers_whole_batch(&served, &hashes)
                {
                    let acked = queen_sql::ack::ack_batch(
                        client,
                        partition_id,
                        group,
                        lease,
                        served.batch_end,
                    )
                    .await?;
                    if acked.acked {
                        self.positional.fetch_add(1, Ordering::Relaxed);
                        self.registry.forget(lease, partition_id);
                        self.ready.lease_ended(
                            tenant,
                            queue,
                            group,
                            &served.partition,
                            acked.pending,
                        );
                        let outcome = AckOutcome {
                            success: true,
                            error: None,
                            lease_released: true,
                            dlq: false,
                            queue: Some(queue.to_owned()),
                            partition: Some(served.partition.clone()),
                        };
                        return Ok(vec![outcome; items.len()]);
                    }
                }
            }
        }

        // The hash path: every item applied in offset order by one
        // `log_ack_v3` statement; a call that needs frames decoded first (a
        // dead letter's, or the span's when the sidecar was purged) changed
        // nothing and is made again with them.
        self.by_hash.fetch_add(1, Ordering::Relaxed);
        let flat_hashes: Vec<u8> = hashes.iter().flatten().copied().collect();
        let statuses: Vec<&str> = items.iter().map(|i| i.status.as_sql()).collect();
        let errors: Vec<Option<String>> = items
            .iter()
            .map(|i| i.error.as_deref().map(text_column))
            .collect();
        let errors: Vec<Option<&str>> = errors.iter().map(Option::as_deref).collect();
        let mut offsets: Option<Vec<Option<i64>>> = None;
        let mut frames: Vec<DlqFrame> = Vec::new();
        for _round in 0..MAX_ACK_ROUNDS {
            let call = AckCall {
                tenant,
                partition_id,
                group,
                lease,
                hashes: &flat_hashes,
                statuses: &statuses,
                errors: &errors,
                failed_to_dlq,
                offsets: offsets.as_deref(),
                frames: &frames,
            };
            match queen_sql::ack::ack(client, &call).await? {
                AckAnswer::Applied(results) => {
                    return Ok(self.applied(
                        tenant,
                        group,
                        partition_id,
                        lease,
                        items.len(),
                        &results,
                    ));
                }
                AckAnswer::Needs(needs) => {
                    let found = decode_needs(&needs, &hashes).await?;
                    let mut resolved = offsets.take().unwrap_or_else(|| vec![None; items.len()]);
                    for (idx, offset) in found.resolved {
                        if let Some(slot) = resolved.get_mut(idx) {
                            *slot = Some(offset);
                        }
                    }
                    offsets = Some(resolved);
                    for frame in found.frames {
                        if !frames.iter().any(|f| f.offset == frame.offset) {
                            frames.push(frame);
                        }
                    }
                }
            }
        }
        Ok(vec![
            AckOutcome {
                error: Some("ack could not be completed; retry it".to_owned()),
                ..AckOutcome::default()
            };
            items.len()
        ])
    }

    /// The outcomes of an applied by-hash ack, after forgetting a released
    /// lease and announcing an ack-promote.
    fn applied(
        &self,
        tenant: &str,
        group: &str,
        partition_id: Uuid,
        lease: Option<Uuid>,
        n: usize,
        results: &AckResults,
    ) -> Vec<AckOutcome> {
        let mut outcomes = vec![
            AckOutcome {
                error: Some(NO_RESULT.to_owned()),
                ..AckOutcome::default()
            };
            n
        ];
        for (idx, result) in &results.items {
            let Some(outcome) = outcomes.get_mut(*idx) else {
                continue;
            };
            outcome.queue.clone_from(&results.queue);
            outcome.partition.clone_from(&results.partition);
            outcome.lease_released = results.lease_released;
            outcome.error = None;
            match result {
                ItemResult::Ok => outcome.success = true,
                ItemResult::Dlq => {
                    outcome.success = true;
                    outcome.dlq = true;
                }
                ItemResult::NotFound => outcome.error = Some("Message not found".to_owned()),
                ItemResult::InvalidLease => outcome.error = Some(INVALID_LEASE.to_owned()),
                ItemResult::NotApplied => outcome.error = Some(NOT_APPLIED.to_owned()),
                ItemResult::UnknownStatus => {}
            }
        }
        if results.lease_released {
            if let Some(lease) = lease {
                self.registry.forget(lease, partition_id);
            }
            if let (Some(queue), Some(partition)) = (&results.queue, &results.partition) {
                self.ready
                    .lease_ended(tenant, queue, group, partition, results.pending);
            }
        }
        outcomes
    }

    /// (positional, by-hash) ack calls since start: how often the registry
    /// turned a full-batch ack into one cursor advance.
    pub(crate) fn stats(&self) -> (u64, u64) {
        (
            self.positional.load(Ordering::Relaxed),
            self.by_hash.load(Ordering::Relaxed),
        )
    }

    /// (batches, bytes) the ack registry holds now.
    pub(crate) fn registry_size(&self) -> (usize, usize) {
        self.registry.size()
    }

    /// Forget the served batches of `queue` (its `naming::queue_key`; it was deleted).
    pub(crate) fn forget_queue(&self, queue: &str) {
        self.registry.forget_queue(queue);
    }

    /// Extend `lease` on every partition it holds by `seconds` from now.
    /// Returns the new expiry, or the reason it could not be extended.
    pub(crate) async fn extend_lease(
        &self,
        tenant: &str,
        lease: Uuid,
        seconds: i32,
    ) -> Result<Result<std::time::SystemTime, LeaseError>, EngineError> {
        let known = self.registry.partitions_of(lease);
        let client = self.pool.get().await.map_err(queen_sql::SqlError::from)?;
        let pids = (!known.is_empty()).then_some(known.as_slice());
        let (mut expires, mut found) =
            queen_sql::ack::lease_extend(&**client, tenant, lease, seconds.max(1), pids).await?;
        if expires.is_none() && pids.is_some() {
            // The registry may be stale: look everywhere before saying no.
            (expires, found) =
                queen_sql::ack::lease_extend(&**client, tenant, lease, seconds.max(1), None)
                    .await?;
        }
        Ok(match (expires, found) {
            (Some(at), _) => Ok(at),
            (None, true) => Err(LeaseError::Expired),
            (None, false) => Err(LeaseError::NotFound),
        })
    }
}

/// Why a lease could not be extended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseError {
    /// No partition holds a lease with that id.
    NotFound,
    /// It existed but already expired.
    Expired,
}

impl LeaseError {
    /// The contract's message.
    pub fn message(self) -> &'static str {
        match self {
            LeaseError::NotFound => "Lease not found",
            LeaseError::Expired => "Lease already expired",
        }
    }
}

/// A text column refuses NUL: a stored id or an error text that holds one
/// (accepted before pushes refused them) is filed with U+FFFD in its place,
/// so filing a dead letter cannot fail on what a client sent.
pub(crate) fn text_column(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}

/// What decoding the segments an ack call asked for found.
struct Decoded {
    /// (item index, offset) of each item the purged sidecar could not resolve.
    resolved: Vec<(usize, i64)>,
    /// The dead letters' frames.
    frames: Vec<DlqFrame>,
}

/// Decode `needs.segments` (off the async workers when large): find each
/// unresolved item's first offset after the cursor, and each frame to file.
async fn decode_needs(needs: &AckNeeds, hashes: &[[u8; 16]]) -> Result<Decoded, EngineError> {
    let mut out = Decoded {
        resolved: Vec::new(),
        frames: Vec::new(),
    };
    let mut unresolved: Vec<usize> = needs.resolve.clone();
    for segment in &needs.segments {
        let blob = &segment.blob;
        let estimate = crate::offload::inflated_estimate(blob.len());
        let decoded = crate::offload::cpu(estimate, || queen_frame::decompress(blob)).await?;
        for (i, frame) in decoded.frames().enumerate() {
            let frame = frame?;
            let offset = segment.base_offset
                + i64::try_from(i).map_err(|_| EngineError::Internal("segment too long"))?;
            if needs.frames.contains(&offset) {
                out.frames.push(DlqFrame {
                    offset,
                    message_id: Uuid::from_bytes(frame.message_id),
                    transaction_id: text_column(frame.transaction_id),
                    trace_id: frame.trace_id.map(Uuid::from_bytes),
                    producer_sub: frame.producer_sub.map(text_column),
                    payload: frame.payload.to_vec(),
                    encrypted: frame.encrypted,
                    created_at: segment.created_at,
                });
            }
            if offset > needs.committed && !unresolved.is_empty() {
                let hash = queen_frame::txn_hash(frame.transaction_id);
                unresolved.retain(|&idx| {
                    if hashes.get(idx) == Some(&hash) {
                        out.resolved.push((idx, offset));
                        false
                    } else {
                        true
                    }
                });
            }
        }
    }
    Ok(out)
}
