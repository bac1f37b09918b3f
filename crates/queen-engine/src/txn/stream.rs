//! A streaming query's cycle (`POST /streams/v1/cycle`, wire-api.md §6):
//! its state writes, its sink pushes and its source ack in one PostgreSQL
//! transaction, so a stream's progress and its output commit together or
//! not at all.
//!
//! In order, inside the transaction: the query row is locked for share (a
//! reset or delete of the query waits), the state ops are folded so each key
//! is written once (the last op on a key wins) and applied in one call of
//! two statements, the sink items are written like a pushed request (broker
//! message ids, the duplicate probe for client transaction ids, duplicates
//! answered `duplicate`; one segment per partition), and the ack is applied
//! on the cycle's connection (`failed` files the message as a dead letter, as
//! in a transaction). An ack that does not apply, or any error, rolls all of
//! it back. With `release_lease` the lease is given back even when the ack
//! covered only part of the batch. Pushes and a released cursor are
//! announced after the commit.

use std::collections::HashMap;

use serde_json::Value;
use uuid::Uuid;

use super::Transactions;
use crate::ack::{AckItem, AckStatus};
use crate::push::{prepare, PushItem, PushOutcome};
use crate::EngineError;

/// One state operation of a cycle.
#[derive(Debug, Clone, PartialEq)]
pub enum StateOp {
    /// Set `key` to `value`.
    Upsert {
        /// The key.
        key: String,
        /// Its new value.
        value: Value,
    },
    /// Remove `key`.
    Delete {
        /// The key.
        key: String,
    },
}

/// A cycle to commit.
#[derive(Debug, Clone)]
pub struct StreamCycle {
    /// The registered query.
    pub query_id: Uuid,
    /// The source partition the cycle processed.
    pub partition_id: Uuid,
    /// The consumer group the source was popped with.
    pub group: String,
    /// State operations, in order.
    pub state_ops: Vec<StateOp>,
    /// Sink messages.
    pub push_items: Vec<PushItem>,
    /// The source ack, if any.
    pub ack: Option<AckItem>,
    /// Give the lease back even if the ack covered part of the batch.
    pub release_lease: bool,
}

/// What a committed cycle did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CycleDone {
    /// The query's source queue.
    pub queue: String,
    /// State operations applied (after folding: keys written or removed).
    pub state_ops_applied: usize,
    /// One outcome per sink item, in order.
    pub pushed: Vec<PushOutcome>,
    /// The ack's result.
    pub ack: Option<CycleAck>,
}

/// The ack of a committed cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CycleAck {
    /// The lease is no longer held.
    pub lease_released: bool,
    /// The message was filed as a dead letter.
    pub dlq: bool,
}

impl Transactions {
    /// Commit `cycle`; [`EngineError::CycleRefused`] when it was refused and
    /// nothing of it applied (no such query, an ack that did not apply).
    pub(crate) async fn stream_cycle(
        &self,
        tenant: &str,
        cycle: StreamCycle,
    ) -> Result<CycleDone, EngineError> {
        let StreamCycle {
            query_id,
            partition_id,
            group,
            state_ops,
            push_items,
            ack,
            release_lease,
        } = cycle;
        if let Some(AckStatus::Other(status)) = ack.as_ref().map(|a| &a.status) {
            return Err(EngineError::CycleRefused(format!(
                "unknown ack status {status:?}"
            )));
        }
        let mut client = self.pool.get().await.map_err(queen_sql::SqlError::from)?;
        let tx = client
            .transaction()
            .await
            .map_err(queen_sql::SqlError::from)?;
        let Some(queue) = queen_sql::streams::cycle_query(&*tx, tenant, query_id).await? else {
            return Err(EngineError::CycleRefused("query not found".to_owned()));
        };

        // The last op on a key wins.
        let mut last: HashMap<&str, Option<&Value>> = HashMap::new();
        for op in &state_ops {
            match op {
                StateOp::Upsert { key, value } => last.insert(key, Some(value)),
                StateOp::Delete { key } => last.insert(key, None),
            };
        }
        let state_ops_applied = last.len();
        if !last.is_empty() {
            let (mut keys, mut values, mut deleted) = (Vec::new(), Vec::new(), Vec::new());
            for (key, value) in last {
                match value {
                    Some(value) => {
                        keys.push(key);
                        values.push(value);
                    }
                    None => deleted.push(key),
                }
            }
            queen_sql::streams::state_apply(&*tx, query_id, partition_id, &keys, &values, &deleted)
                .await?;
        }

        let (groups, answering) = prepare(super::in_tenant(tenant, push_items), &[])?;
        let results = self.write_resolving(&tx, &groups).await?;
        let pushed = answering.outcomes(&results)?;

        let mut acked = None;
        let mut promote = None;
        if let Some(item) = ack {
            let lease = item.lease_id;
            let outcome = self
                .acks
                .ack_group(
                    &tx,
                    tenant,
                    &group,
                    item.partition_id,
                    lease,
                    &[&item],
                    true,
                )
                .await?
                .into_iter()
                .next()
                .ok_or(EngineError::Internal("an ack answered no outcome"))?;
            if !outcome.success {
                return Err(EngineError::CycleRefused(format!(
                    "ack failed: {}",
                    outcome.error.as_deref().unwrap_or("not applied")
                )));
            }
            let mut lease_released = outcome.lease_released;
            if release_lease && !lease_released {
                if let Some(lease) = lease {
                    lease_released =
                        queen_sql::streams::release_lease(&*tx, item.partition_id, &group, lease)
                            .await?;
                    if lease_released {
                        promote = outcome.queue.clone().zip(outcome.partition.clone());
                    }
                }
            }
            acked = Some(CycleAck {
                lease_released,
                dlq: outcome.dlq,
            });
        }
        tx.commit().await.map_err(queen_sql::SqlError::from)?;
        for (tenant, queue, partition, _) in &groups {
            self.ready.pushed(tenant, queue, partition);
        }
        if let Some((queue, partition)) = promote {
            self.ready.promoted(tenant, &queue, &group, &partition);
        }
        Ok(CycleDone {
            queue,
            state_ops_applied,
            pushed,
            ack: acked,
        })
    }
}
