//! Consumer groups: deleting a group's cursors, seeking, re-timing a
//! subscription, and the views computed from the cursor model. Every write
//! tells the pop caches here and the peers (`mesh::Changes`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use queen_sql::lifecycle::{GroupCounts, GroupDeleted, SeekMoved, SeekTo};

use crate::figures::Publisher;
use crate::lifecycle::{CursorLag, Db, Subscription};
use crate::mesh::Changes;
use crate::EngineError;

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

/// Consumer groups' cursors and subscriptions.
pub struct Groups {
    db: Db,
    changes: Arc<Changes>,
    figures: Publisher,
}

impl Groups {
    pub(crate) fn new(db: Db, changes: Arc<Changes>, figures: Publisher) -> Groups {
        Groups {
            db,
            changes,
            figures,
        }
    }

    /// Delete consumer group `group`'s cursors and leases on `queue` (`None`:
    /// every queue), and its subscription records when `delete_metadata`.
    pub async fn delete(
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
            .db
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
        self.changes.group_changed(tenant, group, queue);
        Ok(GroupDeletion {
            partitions: u64::try_from(partitions).unwrap_or(0),
            metadata_rows: u64::try_from(metadata_rows).unwrap_or(0),
        })
    }

    /// Seek `group` on `queue` (every partition, or only the one named).
    /// `None` when the queue does not exist.
    pub async fn seek(
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
            .db
            .retry_conflicts(|client| async move {
                queen_sql::lifecycle::seek(&**client, tenant, group, queue, partition, to).await
            })
            .await?;
        let Some(moved) = moved else {
            return Ok(None);
        };
        self.changes.group_changed(tenant, group, Some(queue));
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
    pub async fn set_subscription_timestamp(
        &self,
        tenant: &str,
        group: &str,
        at: SystemTime,
    ) -> Result<u64, EngineError> {
        let rows = self
            .db
            .retry_conflicts(|client| async move {
                queen_sql::lifecycle::set_subscription_timestamp(&**client, tenant, group, at).await
            })
            .await?;
        self.changes.group_changed(tenant, group, None);
        Ok(u64::try_from(rows).unwrap_or(0))
    }

    /// Every (consumer group, queue) pair that has a subscription record or a
    /// cursor, summarised, ordered by group then queue.
    pub async fn summaries(&self, tenant: &str) -> Result<Vec<GroupSummary>, EngineError> {
        // The kept figures count this broker's latest pushes and acks once
        // its marks are written.
        self.figures.publish().await;
        let (counts, subscriptions) = {
            let client = self.db.read_client().await?;
            let counts = queen_sql::lifecycle::group_counts(&**client, tenant).await?;
            let subscriptions =
                queen_sql::lifecycle::subscriptions(&**client, tenant, None).await?;
            (counts, subscriptions)
        };
        Ok(summarise(counts, subscriptions))
    }

    /// `group`'s cursors with their lag, by queue (queue name order; a queue
    /// the group is registered on without any cursor yet has none). Empty for
    /// an unknown group.
    pub async fn cursors(
        &self,
        tenant: &str,
        group: &str,
    ) -> Result<Vec<(String, Vec<CursorLag>)>, EngineError> {
        let (cursors, subscriptions) = {
            let client = self.db.read_client().await?;
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
    pub async fn lagging(
        &self,
        tenant: &str,
        min_lag_seconds: i64,
    ) -> Result<Vec<CursorLag>, EngineError> {
        let mut cursors = {
            let client = self.db.read_client().await?;
            queen_sql::lifecycle::cursors(&**client, tenant, None, Some(min_lag_seconds)).await?
        };
        cursors.sort_by_key(|c| std::cmp::Reverse(c.time_lag_seconds));
        Ok(cursors)
    }
}

/// Group cursors and subscription records into one summary per
/// (group, queue).
fn summarise(counts: Vec<GroupCounts>, subscriptions: Vec<Subscription>) -> Vec<GroupSummary> {
    let mut pairs: BTreeMap<(String, String), GroupSummary> = BTreeMap::new();
    for subscription in subscriptions {
        let summary = summary_of(&mut pairs, &subscription.group, &subscription.queue);
        summary.subscription = Some(subscription);
    }
    let count = |n: i64| usize::try_from(n).unwrap_or(0);
    for counts in counts {
        let summary = summary_of(&mut pairs, &counts.group, &counts.queue);
        summary.partitions = count(counts.cursors);
        summary.leases = count(counts.leases);
        summary.partitions_with_lag = count(counts.lagging);
        summary.total_lag = counts.lag;
        summary.max_time_lag_seconds = counts.max_time_lag_seconds;
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
