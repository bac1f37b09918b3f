//! The everyday lifecycle operations: deleting a queue, deleting a consumer
//! group's cursors, seeking, re-timing a subscription, and the consumer-group
//! views computed from the cursor model.
//!
//! Each write is one procedure call, so one transaction; a deadlock or
//! serialisation failure (a seek or delete racing a multi-partition
//! transaction) is retried a few times. After the commit the broker's caches
//! are told: [`Engine::queue_deleted`] or [`Engine::group_changed`].

pub(crate) mod configure;
pub(crate) mod dlq;
pub(crate) mod messages;
pub(crate) mod streams;
pub(crate) mod traces;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use queen_sql::lifecycle::{GroupDeleted, SeekMoved, SeekTo};
use queen_sql::SqlError;

use crate::crypto::AtRest;
use crate::EngineError;

pub use queen_sql::lifecycle::{CursorLag, Subscription};

/// How often a lifecycle write is tried when it conflicts (deadlock or
/// serialisation failure) with concurrent work.
const MAX_CONFLICT_ATTEMPTS: u32 = 3;

/// Where a seek moves a consumer group's cursors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekTarget {
    /// To the end: everything pending now is skipped.
    End,
    /// Just before the first message stored at or after this instant: every
    /// message from then on is delivered (again).
    Timestamp(SystemTime),
}

/// What a seek did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seeked {
    /// One entry per cursor moved or created: partition name and the new
    /// committed offset (every offset up to it counts as consumed).
    pub partitions: Vec<(String, i64)>,
}

/// What deleting a consumer group removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupDeletion {
    /// Cursors (one per partition) deleted, with their leases.
    pub partitions: u64,
    /// Subscription records deleted (or, when they were kept, reset).
    pub metadata_rows: u64,
}

/// One (consumer group, queue) pair, summarised from its cursors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    /// Consumer group.
    pub group: String,
    /// Queue.
    pub queue: String,
    /// Live leases: partitions held by a consumer right now.
    pub leases: usize,
    /// Cursors of the group on the queue.
    pub partitions: usize,
    /// Cursors with unconsumed messages behind them.
    pub partitions_with_lag: usize,
    /// Sum of the cursors' offset lags.
    pub total_lag: i64,
    /// The largest time lag of the cursors, seconds.
    pub max_time_lag_seconds: i64,
    /// The subscription record, when the group registered on the queue.
    pub subscription: Option<Subscription>,
}

/// The lifecycle component: the administrative reads and writes (configure,
/// delete, seek, group listings, dead letters, traces). It holds only the
/// pool and the at-rest key: telling the caches what changed is the
/// facade's wiring (`engine.rs`), so this part cannot touch them.
pub(crate) struct Lifecycle {
    pool: deadpool_postgres::Pool,
    at_rest: Arc<AtRest>,
}

impl Lifecycle {
    pub(crate) fn new(pool: deadpool_postgres::Pool, at_rest: Arc<AtRest>) -> Lifecycle {
        Lifecycle { pool, at_rest }
    }

    /// Whether this broker holds an at-rest key (`QUEEN_ENCRYPTION_KEY`).
    pub(crate) fn has_key(&self) -> bool {
        self.at_rest.key().is_some()
    }

    /// A stored payload as the admin views show it: opened when `encrypted`
    /// (`None` when this broker has no key that opens it), else as stored.
    pub(crate) fn open_payload(&self, encrypted: bool, payload: &[u8]) -> Option<bytes::Bytes> {
        if encrypted {
            self.at_rest
                .key()
                .and_then(|key| key.open(payload).ok())
                .map(bytes::Bytes::from)
        } else {
            Some(bytes::Bytes::copy_from_slice(payload))
        }
    }

    /// A pooled connection.
    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, EngineError> {
        Ok(self.pool.get().await.map_err(SqlError::from)?)
    }

    /// Delete `queue` with everything it owns (partitions, segments, sidecar,
    /// cursors, subscriptions, dead letters, traces) in one transaction.
    /// Returns whether it existed (deleting a missing queue succeeds).
    pub(crate) async fn delete_queue(
        &self,
        tenant: &str,
        queue: &str,
    ) -> Result<bool, EngineError> {
        let existed = self
            .retry_conflicts(|client| async move {
                queen_sql::lifecycle::delete_queue(&**client, tenant, queue).await
            })
            .await?;
        Ok(existed)
    }

    /// Delete consumer group `group`'s cursors and leases on `queue` (`None`:
    /// every queue), and its subscription records when `delete_metadata`.
    pub(crate) async fn delete_consumer_group(
        &self,
        tenant: &str,
        group: &str,
        queue: Option<&str>,
        delete_metadata: bool,
    ) -> Result<GroupDeletion, EngineError> {
        let GroupDeleted {
            partitions,
            metadata_rows,
        } = self
            .retry_conflicts(|client| async move {
                queen_sql::lifecycle::delete_consumer_group(
                    &**client,
                    tenant,
                    group,
                    queue,
                    delete_metadata,
                )
                .await
            })
            .await?;
        Ok(GroupDeletion {
            partitions: u64::try_from(partitions).unwrap_or(0),
            metadata_rows: u64::try_from(metadata_rows).unwrap_or(0),
        })
    }

    /// Seek `group` on `queue` (every partition, or only the one named).
    /// `None` when the queue does not exist.
    pub(crate) async fn seek(
        &self,
        tenant: &str,
        group: &str,
        queue: &str,
        partition: Option<&str>,
        target: SeekTarget,
    ) -> Result<Option<Seeked>, EngineError> {
        let to = match target {
            SeekTarget::End => SeekTo::End,
            SeekTarget::Timestamp(at) => SeekTo::Timestamp(at),
        };
        let moved = self
            .retry_conflicts(|client| async move {
                queen_sql::lifecycle::seek(&**client, tenant, group, queue, partition, to).await
            })
            .await?;
        let Some(moved) = moved else {
            return Ok(None);
        };
        Ok(Some(Seeked {
            partitions: moved
                .into_iter()
                .map(
                    |SeekMoved {
                         partition,
                         committed,
                         ..
                     }| (partition, committed),
                )
                .collect(),
        }))
    }

    /// Set the stored subscription timestamp of every queue `group` is
    /// registered on. Returns the records updated.
    pub(crate) async fn set_subscription_timestamp(
        &self,
        tenant: &str,
        group: &str,
        at: SystemTime,
    ) -> Result<u64, EngineError> {
        let rows = self
            .retry_conflicts(|client| async move {
                queen_sql::lifecycle::set_subscription_timestamp(&**client, tenant, group, at).await
            })
            .await?;
        Ok(u64::try_from(rows).unwrap_or(0))
    }

    /// Every (consumer group, queue) pair that has a subscription record or a
    /// cursor, summarised, ordered by group then queue.
    pub(crate) async fn consumer_groups(
        &self,
        tenant: &str,
    ) -> Result<Vec<GroupSummary>, EngineError> {
        let (cursors, subscriptions) = {
            let client = self.client().await?;
            let cursors = queen_sql::lifecycle::cursors(&**client, tenant, None, None).await?;
            let subscriptions =
                queen_sql::lifecycle::subscriptions(&**client, tenant, None).await?;
            (cursors, subscriptions)
        };
        Ok(summarise(cursors, subscriptions))
    }

    /// `group`'s cursors with their lag, by queue (queue name order; a queue
    /// the group is registered on without any cursor yet has none). Empty for
    /// an unknown group.
    pub(crate) async fn consumer_group(
        &self,
        tenant: &str,
        group: &str,
    ) -> Result<Vec<(String, Vec<CursorLag>)>, EngineError> {
        let (cursors, subscriptions) = {
            let client = self.client().await?;
            let cursors =
                queen_sql::lifecycle::cursors(&**client, tenant, Some(group), None).await?;
            let subscriptions =
                queen_sql::lifecycle::subscriptions(&**client, tenant, Some(group)).await?;
            (cursors, subscriptions)
        };
        let mut queues: BTreeMap<String, Vec<CursorLag>> = subscriptions
            .into_iter()
            .map(|subscription| (subscription.queue, Vec::new()))
            .collect();
        for cursor in cursors {
            queues.entry(cursor.queue.clone()).or_default().push(cursor);
        }
        Ok(queues.into_iter().collect())
    }

    /// Cursors of every group whose oldest unconsumed message is at least
    /// `min_lag_seconds` old, most lagging first.
    pub(crate) async fn lagging_partitions(
        &self,
        tenant: &str,
        min_lag_seconds: i64,
    ) -> Result<Vec<CursorLag>, EngineError> {
        let mut cursors = {
            let client = self.client().await?;
            queen_sql::lifecycle::cursors(&**client, tenant, None, Some(min_lag_seconds)).await?
        };
        cursors.sort_by_key(|c| std::cmp::Reverse(c.time_lag_seconds));
        Ok(cursors)
    }

    /// Run `op` on a pooled connection, again (on a fresh connection) when it
    /// conflicted with concurrent work.
    async fn retry_conflicts<T, F, Fut>(&self, op: F) -> Result<T, EngineError>
    where
        F: Fn(deadpool_postgres::Object) -> Fut,
        Fut: Future<Output = Result<T, SqlError>>,
    {
        let mut attempt = 1;
        loop {
            let client = self.client().await?;
            match op(client).await {
                Err(error) if error.is_conflict() && attempt < MAX_CONFLICT_ATTEMPTS => {
                    tracing::debug!(attempt, "lifecycle write conflicted; retrying");
                    attempt += 1;
                }
                result => return Ok(result?),
            }
        }
    }
}

/// Group cursors and subscription records into one summary per
/// (group, queue).
fn summarise(cursors: Vec<CursorLag>, subscriptions: Vec<Subscription>) -> Vec<GroupSummary> {
    let mut pairs: BTreeMap<(String, String), GroupSummary> = BTreeMap::new();
    for subscription in subscriptions {
        let summary = summary_of(&mut pairs, &subscription.group, &subscription.queue);
        summary.subscription = Some(subscription);
    }
    for cursor in cursors {
        let summary = summary_of(&mut pairs, &cursor.group, &cursor.queue);
        summary.partitions += 1;
        if cursor.lease_active {
            summary.leases += 1;
        }
        if cursor.offset_lag > 0 {
            summary.partitions_with_lag += 1;
            summary.total_lag = summary.total_lag.saturating_add(cursor.offset_lag);
        }
        summary.max_time_lag_seconds = summary.max_time_lag_seconds.max(cursor.time_lag_seconds);
    }
    pairs.into_values().collect()
}

/// The summary of (`group`, `queue`), created empty on first use.
fn summary_of<'a>(
    pairs: &'a mut BTreeMap<(String, String), GroupSummary>,
    group: &str,
    queue: &str,
) -> &'a mut GroupSummary {
    pairs
        .entry((group.to_owned(), queue.to_owned()))
        .or_insert_with(|| GroupSummary {
            group: group.to_owned(),
            queue: queue.to_owned(),
            leases: 0,
            partitions: 0,
            partitions_with_lag: 0,
            total_lag: 0,
            max_time_lag_seconds: 0,
            subscription: None,
        })
}
