//! The ack path (decisions.md §4).
//!
//! Items are grouped by (partition, lease). A group that is exactly a batch
//! this broker served, all `completed`, becomes one positional advance
//! (`log_ack_batch_v1`). Anything else (a partial ack, another broker's pop,
//! a restart, a failure) resolves transaction ids to offsets through the
//! hash sidecar (`log_ack_v1`, called through `log_ack_v2`, which first checks
//! the partition is the caller's tenant's; the positional path needs no such
//! check: the registry entry it uses is of a pop of that tenant). When that
//! asks for a dead letter, the frame is
//! decoded here and filed with `log_dlq_head_v1`, and the deferred items are
//! resubmitted.
//!
//! After an ack that released a lease with data left behind the cursor, the
//! partition goes back into the group's hot-list ring and the queue's gate
//! opens (ack-promote).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use queen_sql::ack::{DeadLetter, DlqRequest, ItemResult};
use uuid::Uuid;

use crate::naming::split_queue_key;
use crate::ready::Ready;
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

/// Rounds of dead-letter filing one group of items may need.
const MAX_DLQ_ROUNDS: usize = 64;

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
                        if acked.pending {
                            self.ready.promoted(tenant, queue, group, &served.partition);
                        }
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

        // The hash path. An item keeps the "no result" error unless a row of
        // the answer speaks for it.
        self.by_hash.fetch_add(1, Ordering::Relaxed);
        let mut outcomes = vec![
            AckOutcome {
                error: Some(NO_RESULT.to_owned()),
                ..AckOutcome::default()
            };
            items.len()
        ];
        let mut todo: Vec<usize> = (0..items.len()).collect();
        for _round in 0..MAX_DLQ_ROUNDS {
            if todo.is_empty() {
                break;
            }
            let round_hashes: Vec<u8> = todo.iter().flat_map(|&i| hashes[i]).collect();
            let statuses: Vec<&str> = todo.iter().map(|&i| items[i].status.as_sql()).collect();
            let errors: Vec<Option<&str>> =
                todo.iter().map(|&i| items[i].error.as_deref()).collect();
            let results = queen_sql::ack::ack(
                client,
                tenant,
                partition_id,
                group,
                lease,
                &round_hashes,
                &statuses,
                &errors,
                failed_to_dlq,
            )
            .await?;
            let mut next = Vec::new();
            let mut filed_pending = None;
            for (round_idx, result) in &results.items {
                let Some(&item_idx) = todo.get(*round_idx) else {
                    continue;
                };
                let outcome = &mut outcomes[item_idx];
                outcome.queue.clone_from(&results.queue);
                outcome.partition.clone_from(&results.partition);
                outcome.error = None;
                match result {
                    ItemResult::Ok => outcome.success = true,
                    ItemResult::NotFound => {
                        outcome.error = Some("Message not found".to_owned());
                    }
                    ItemResult::InvalidLease => {
                        outcome.error = Some(INVALID_LEASE.to_owned());
                    }
                    ItemResult::UnknownStatus => {}
                    ItemResult::Deferred => {
                        outcome.error = Some(NO_RESULT.to_owned());
                        next.push(item_idx);
                    }
                    ItemResult::Dlq(request) => {
                        let filed = self
                            .file_dead_letter(client.client(), partition_id, group, lease, request)
                            .await?;
                        if filed.applied {
                            filed_pending = Some(filed.pending);
                            outcome.success = true;
                            outcome.dlq = true;
                            outcome.lease_released = true;
                        } else {
                            // The lease ended and another worker re-claimed the
                            // batch between the decision and the filing.
                            outcome.error = Some(INVALID_LEASE.to_owned());
                        }
                    }
                }
            }
            let released = results.lease_released || filed_pending.is_some();
            if released {
                if let Some(lease) = lease {
                    self.registry.forget(lease, partition_id);
                }
                for &idx in &todo {
                    outcomes[idx].lease_released |= results.lease_released;
                }
            }
            let pending = filed_pending.unwrap_or(results.pending);
            if released && pending {
                if let (Some(queue), Some(partition)) = (&results.queue, &results.partition) {
                    self.ready.promoted(tenant, queue, group, partition);
                }
            }
            todo = next;
        }
        for idx in todo {
            outcomes[idx].error = Some("ack could not be completed; retry it".to_owned());
        }
        Ok(outcomes)
    }

    /// Decode the frame `request` names and file it (or drop it), unless
    /// another worker holds a live lease now (the decision was made under
    /// `lease`).
    async fn file_dead_letter(
        &self,
        client: &impl queen_sql::GenericClient,
        partition_id: Uuid,
        group: &str,
        lease: Option<Uuid>,
        request: &DlqRequest,
    ) -> Result<queen_sql::ack::DlqFiled, EngineError> {
        let Some((base, blob, created_at)) = &request.segment else {
            // Retention removed the segment: nothing to file, but the cursor
            // must still move past the poison offset.
            let letter = DeadLetter {
                partition_id,
                group,
                lease,
                offset: request.offset,
                message_id: Uuid::nil(),
                transaction_id: "",
                trace_id: None,
                producer_sub: None,
                payload: b"null",
                encrypted: false,
                created_at: std::time::SystemTime::now(),
                error: &request.error,
                retry_count: request.retry_count,
            };
            return Ok(queen_sql::ack::dlq_head(client, &letter).await?);
        };
        let estimate = crate::offload::inflated_estimate(blob.len());
        let segment = crate::offload::cpu(estimate, || queen_frame::decompress(blob)).await?;
        let idx = usize::try_from(request.offset - base)
            .map_err(|_| EngineError::Internal("dead-letter offset before its segment"))?;
        let frames = segment.slice(idx, 1)?;
        let frame = frames
            .first()
            .ok_or(EngineError::Internal("dead-letter frame missing"))?;
        let letter = DeadLetter {
            partition_id,
            group,
            lease,
            offset: request.offset,
            message_id: Uuid::from_bytes(frame.message_id),
            transaction_id: frame.transaction_id,
            trace_id: frame.trace_id.map(Uuid::from_bytes),
            producer_sub: frame.producer_sub,
            payload: frame.payload,
            encrypted: frame.encrypted,
            created_at: *created_at,
            error: &request.error,
            retry_count: request.retry_count,
        };
        Ok(queen_sql::ack::dlq_head(client, &letter).await?)
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
