//! Transactions (`POST /api/v1/transaction`): push and ack operations applied
//! in order in one PostgreSQL transaction; any failure rolls back everything.
//!
//! Differences from the plain routes (wire-api.md §2.6): a pushed transaction
//! id that is already stored fails the whole transaction (there is no
//! `duplicate` answer here); an ack of a missing message or with a wrong lease
//! fails it too; `failed` acks go straight to the dead-letter queue.
//! Pushes here bypass fusion (they must share the transaction), and are
//! announced to the hot-list and wake gates only after the commit.

mod atomic;
mod replay;
mod stream;

use std::collections::HashSet;
use std::sync::Arc;

use uuid::Uuid;

use crate::ack::{AckItem, AckOutcome, AckStatus, Acks};
use crate::bounded::Bounded;
use crate::crypto::AtRest;
use crate::pop::Ready;
use crate::push::{group_by_partition, EntryResult, PushItem, PushOutcome, PushStatus};
use crate::EngineError;

pub use replay::{Replayed, MAX_REPLAY};
pub use stream::{CycleAck, CycleDone, StateOp, StreamCycle};

/// One operation of a transaction.
#[derive(Debug, Clone)]
pub enum TxnOp {
    /// Push these items.
    Push(Vec<PushItem>),
    /// Acknowledge one message for a group.
    Ack {
        /// Consumer group.
        group: String,
        /// The acknowledgement.
        item: AckItem,
    },
}

/// An operation that passed the checks made before the transaction begins.
enum Checked {
    Push(CheckedPush),
    Ack { group: String, item: AckItem },
}

/// A push operation's items grouped by partition, with no transaction id
/// repeated within a partition.
struct CheckedPush {
    groups: Vec<crate::push::Group>,
    /// Per item, in input order: (slot in `groups`, position in its entries).
    entries_by_item: Vec<(usize, usize)>,
}

impl Checked {
    /// Refuse what needs no database: an unknown ack status, a transaction
    /// id repeated within one partition of a push (named by its first
    /// repetition in item order; one pass over the items).
    fn check(tenant: &str, index: usize, op: TxnOp) -> Result<Checked, EngineError> {
        match op {
            TxnOp::Push(items) => {
                let (groups, entries_by_item) = group_by_partition(in_tenant(tenant, items), &[]);
                let mut seen: Vec<HashSet<&[u8; queen_frame::HASH_LEN]>> = groups
                    .iter()
                    .map(|(_, _, _, entries)| HashSet::with_capacity(entries.len()))
                    .collect();
                for &(slot, position) in &entries_by_item {
                    let entry = groups
                        .get(slot)
                        .and_then(|(_, _, _, entries)| entries.get(position))
                        .ok_or(EngineError::Internal("a pushed item lost its group"))?;
                    if !seen[slot].insert(&entry.hash) {
                        return Err(duplicate(index, &entry.transaction_id));
                    }
                }
                drop(seen);
                Ok(Checked::Push(CheckedPush {
                    groups,
                    entries_by_item,
                }))
            }
            TxnOp::Ack { group, item } => {
                if let AckStatus::Other(status) = &item.status {
                    return Err(EngineError::TransactionFailed {
                        index,
                        message: format!("ACK operation failed: unknown status {status:?}"),
                    });
                }
                Ok(Checked::Ack { group, item })
            }
        }
    }
}

/// `items`, every one in `tenant`: the tenant a transaction or a stream
/// cycle acts for wins over whatever its items say.
pub(crate) fn in_tenant(tenant: &str, mut items: Vec<PushItem>) -> Vec<PushItem> {
    if items.iter().any(|item| *item.tenant != *tenant) {
        let tenant: Arc<str> = Arc::from(tenant);
        for item in &mut items {
            item.tenant = Arc::clone(&tenant);
        }
    }
    items
}

/// The failure of push operation `index` on a repeated transaction id.
fn duplicate(index: usize, transaction_id: &str) -> EngineError {
    EngineError::TransactionFailed {
        index,
        message: format!("PUSH operation failed: duplicate transactionId {transaction_id}"),
    }
}

/// The result of one operation, in input order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnResult {
    /// What the push stored.
    Push(Vec<PushOutcome>),
    /// What the ack did.
    Ack(AckOutcome),
}

/// The transaction component: encodes its own segments (with the queues'
/// encryption flags), acks through the ack component on its own
/// transaction, and announces its pushes only after the commit.
pub(crate) struct Transactions {
    pool: deadpool_postgres::Pool,
    zstd_level: i32,
    at_rest: Arc<AtRest>,
    acks: Arc<Acks>,
    ready: Ready,
    bounded: Arc<Bounded>,
}

impl Transactions {
    pub(crate) fn new(
        pool: deadpool_postgres::Pool,
        zstd_level: i32,
        at_rest: Arc<AtRest>,
        acks: Arc<Acks>,
        ready: Ready,
        bounded: Arc<Bounded>,
    ) -> Transactions {
        Transactions {
            pool,
            zstd_level,
            at_rest,
            acks,
            ready,
            bounded,
        }
    }

    /// Apply `ops` atomically. On failure nothing is applied and the error
    /// names the operation (`EngineError::TransactionFailed`).
    pub(crate) async fn transaction(
        &self,
        tenant: &str,
        ops: Vec<TxnOp>,
    ) -> Result<Vec<TxnResult>, EngineError> {
        // Everything that can be refused without the database is, before a
        // connection is taken or a transaction begun.
        let ops = ops
            .into_iter()
            .enumerate()
            .map(|(index, op)| Checked::check(tenant, index, op))
            .collect::<Result<Vec<Checked>, EngineError>>()?;
        let mut client = self.pool.get().await.map_err(queen_sql::SqlError::from)?;
        let tx = client
            .transaction()
            .await
            .map_err(queen_sql::SqlError::from)?;
        let mut results = Vec::with_capacity(ops.len());
        let mut pushed: Vec<(String, String)> = Vec::new();
        let mut acked: Vec<uuid::Uuid> = Vec::new();
        // How many of `acked` are marked inside the transaction already.
        let mut marked = 0;
        for (index, op) in ops.into_iter().enumerate() {
            let result = match op {
                Checked::Push(push) => {
                    // A bounded queue's depth (log_push_v2) counts a
                    // consumption once it is marked: this transaction's own
                    // acks are marked in it first, so its push counts them.
                    if acked.len() > marked && self.any_bounded(&push) {
                        let none: &[String] = &[];
                        queen_sql::figures::mark(&*tx, (none, none, none), &acked[marked..])
                            .await?;
                        marked = acked.len();
                    }
                    let (outcomes, partitions) = self.txn_push(&tx, index, push).await?;
                    pushed.extend(partitions);
                    TxnResult::Push(outcomes)
                }
                Checked::Ack { group, item } => {
                    acked.push(item.partition_id);
                    let outcomes = self
                        .acks
                        .ack_group(
                            &tx,
                            tenant,
                            &group,
                            item.partition_id,
                            item.lease_id,
                            &[&item],
                            true,
                        )
                        .await?;
                    let Some(outcome) = outcomes.into_iter().next() else {
                        return Err(EngineError::TransactionFailed {
                            index,
                            message: "ACK operation failed: no outcome for this ack".to_owned(),
                        });
                    };
                    if !outcome.success {
                        return Err(EngineError::TransactionFailed {
                            index,
                            message: format!(
                                "ACK operation failed: {}",
                                outcome.error.as_deref().unwrap_or("not applied")
                            ),
                        });
                    }
                    TxnResult::Ack(outcome)
                }
            };
            results.push(result);
        }
        tx.commit().await.map_err(queen_sql::SqlError::from)?;
        for (queue, partition) in pushed {
            self.ready.pushed(tenant, &queue, &partition);
        }
        for partition_id in acked {
            self.ready.consumed(partition_id);
        }
        Ok(results)
    }

    /// True when `push` writes to a queue this broker knows has `maxSize`.
    fn any_bounded(&self, push: &CheckedPush) -> bool {
        self.bounded.any_named(
            push.groups
                .iter()
                .map(|(tenant, queue, _, _)| (&**tenant, &**queue)),
        )
    }

    /// The pushes of one operation, inside the transaction.
    async fn txn_push(
        &self,
        client: &impl queen_sql::Conn,
        index: usize,
        push: CheckedPush,
    ) -> Result<(Vec<PushOutcome>, Vec<(String, String)>), EngineError> {
        let CheckedPush {
            groups,
            entries_by_item,
        } = push;
        let partition_ids = self.write_groups(client, index, &groups).await?;

        let mut outcomes = Vec::with_capacity(entries_by_item.len());
        for (slot, position) in entries_by_item {
            let (_, queue, _, entries) = &groups[slot];
            let (Some(partition_id), Some(entry)) = (partition_ids[slot], entries.get(position))
            else {
                return Err(EngineError::Internal("a transaction push was not written"));
            };
            outcomes.push(PushOutcome {
                status: PushStatus::Queued,
                transaction_id: entry.transaction_id.clone(),
                message_id: Some(entry.message_id),
                partition_id,
                trace_id: entry.trace_id,
                queue: Arc::from(queue.as_str()),
            });
        }
        let partitions = groups.into_iter().map(|(_, q, p, _)| (q, p)).collect();
        Ok((outcomes, partitions))
    }

    /// Write `groups` inside the transaction `client` is in (the
    /// one-transaction writer of `atomic.rs`); answers each group's partition
    /// id, in `groups` order. A duplicate transaction id fails the operation
    /// `index` (the caller rolls back what was written).
    pub(crate) async fn write_groups(
        &self,
        client: &impl queen_sql::Conn,
        index: usize,
        groups: &[crate::push::Group],
    ) -> Result<Vec<Option<Uuid>>, EngineError> {
        let results = self.write_resolving(client, groups).await?;
        let mut partition_ids = Vec::with_capacity(groups.len());
        for ((_, _, _, entries), results) in groups.iter().zip(&results) {
            let mut partition = None;
            for (entry, result) in entries.iter().zip(results) {
                match *result {
                    EntryResult::Queued { partition_id } => partition = Some(partition_id),
                    EntryResult::Duplicate { .. } => {
                        return Err(duplicate(index, &entry.transaction_id))
                    }
                }
            }
            partition_ids.push(partition);
        }
        Ok(partition_ids)
    }
}
