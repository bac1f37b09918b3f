//! Typed calls of `sql/procedures/lifecycle.sql`: deleting a queue, deleting,
//! seeking and re-timing a consumer group, and the consumer-group views.

use std::time::SystemTime;

use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;
use uuid::Uuid;

use crate::SqlError;

const DELETE_QUEUE: &str = "SELECT queen.delete_queue_v1($1, $2)";
const DELETE_GROUP: &str = "SELECT * FROM queen.delete_consumer_group_v1($1, $2, $3, $4)";
const SEEK: &str = "SELECT * FROM queen.seek_consumer_group_v1($1, $2, $3, $4, $5, $6)";
const SET_SUBSCRIPTION: &str = "SELECT queen.set_subscription_timestamp_v1($1, $2, $3)";
const CURSORS: &str = "SELECT * FROM queen.consumer_group_cursors_v1($1, $2, $3)";
const SUBSCRIPTIONS: &str = "SELECT * FROM queen.consumer_group_subscriptions_v1($1, $2)";
const GROUP_COUNTS: &str = "SELECT * FROM queen.figures_group_counts_v1($1)";

/// Delete queue `(tenant, name)` with everything it owns, in one transaction.
/// Returns whether it existed.
pub async fn delete_queue(
    client: &impl GenericClient,
    tenant: &str,
    name: &str,
) -> Result<bool, SqlError> {
    let row = client
        .query_typed_one(DELETE_QUEUE, &[(&tenant, Type::TEXT), (&name, Type::TEXT)])
        .await?;
    Ok(row.try_get(0)?)
}

/// What deleting a consumer group removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupDeleted {
    /// Cursor rows (one per partition) deleted.
    pub partitions: i64,
    /// Subscription records deleted, or reset when they were kept.
    pub metadata_rows: i64,
}

/// Delete `group`'s cursors and leases on `queue` (`None`: every queue of the
/// tenant); its subscription records too when `delete_metadata`, otherwise
/// they are reset so the next first contact seeds again.
pub async fn delete_consumer_group(
    client: &impl GenericClient,
    tenant: &str,
    group: &str,
    queue: Option<&str>,
    delete_metadata: bool,
) -> Result<GroupDeleted, SqlError> {
    let row = client
        .query_typed_one(
            DELETE_GROUP,
            &[
                (&tenant, Type::TEXT),
                (&group, Type::TEXT),
                (&queue, Type::TEXT),
                (&delete_metadata, Type::BOOL),
            ],
        )
        .await?;
    Ok(GroupDeleted {
        partitions: row.try_get("o_deleted_partitions")?,
        metadata_rows: row.try_get("o_metadata_rows")?,
    })
}

/// Where a seek moves cursors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekTo {
    /// To `last_offset`: everything pending is skipped.
    End,
    /// Just before the first segment at or after this instant.
    Timestamp(SystemTime),
}

/// One cursor a seek moved (or created).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeekMoved {
    /// Partition name.
    pub partition: String,
    /// Partition id.
    pub partition_id: Uuid,
    /// The new committed offset.
    pub committed: i64,
}

/// Seek `group` on `queue`: every partition, or only `partition`. `None`
/// when the queue does not exist; an unknown partition moves nothing.
pub async fn seek(
    client: &impl GenericClient,
    tenant: &str,
    group: &str,
    queue: &str,
    partition: Option<&str>,
    to: SeekTo,
) -> Result<Option<Vec<SeekMoved>>, SqlError> {
    let (to_end, ts) = match to {
        SeekTo::End => (true, None),
        SeekTo::Timestamp(at) => (false, Some(at)),
    };
    let rows = client
        .query_typed(
            SEEK,
            &[
                (&tenant, Type::TEXT),
                (&group, Type::TEXT),
                (&queue, Type::TEXT),
                (&partition, Type::TEXT),
                (&to_end, Type::BOOL),
                (&ts, Type::TIMESTAMPTZ),
            ],
        )
        .await?;
    let mut moved = Vec::with_capacity(rows.len());
    for row in rows {
        if !row.try_get::<_, bool>("o_queue_found")? {
            return Ok(None);
        }
        moved.push(SeekMoved {
            partition: row.try_get("o_partition")?,
            partition_id: row.try_get("o_partition_id")?,
            committed: row.try_get("o_committed")?,
        });
    }
    Ok(Some(moved))
}

/// Set the stored subscription timestamp of every record of `group`; returns
/// the number of records updated.
pub async fn set_subscription_timestamp(
    client: &impl GenericClient,
    tenant: &str,
    group: &str,
    at: SystemTime,
) -> Result<i64, SqlError> {
    let row = client
        .query_typed_one(
            SET_SUBSCRIPTION,
            &[
                (&tenant, Type::TEXT),
                (&group, Type::TEXT),
                (&at, Type::TIMESTAMPTZ),
            ],
        )
        .await?;
    Ok(row.try_get(0)?)
}

/// One cursor with its lag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorLag {
    /// Consumer group.
    pub group: String,
    /// Queue name.
    pub queue: String,
    /// Partition name.
    pub partition: String,
    /// Partition id.
    pub partition_id: Uuid,
    /// The cursor: every offset up to it is done.
    pub committed: i64,
    /// The partition's last allocated offset.
    pub last_offset: i64,
    /// `last_offset - committed` (never negative).
    pub offset_lag: i64,
    /// The lease holder, if any (possibly expired).
    pub worker_id: Option<Uuid>,
    /// A holder whose lease has not expired.
    pub lease_active: bool,
    /// Messages consumed through this cursor.
    pub total_consumed: i64,
    /// When the cursor last moved forward by consumption.
    pub last_consumed_at: Option<SystemTime>,
    /// `created_at` of the oldest unconsumed message's segment; `None` when
    /// nothing is pending (or retention removed it all).
    pub oldest_unconsumed_at: Option<SystemTime>,
    /// Seconds since `oldest_unconsumed_at` (0 without one).
    pub time_lag_seconds: i64,
}

/// Every cursor of `group` (`None`: every group) with its lag; with
/// `min_time_lag`, only cursors whose oldest unconsumed message is at least
/// that many seconds old. Ordered by group, queue, partition.
pub async fn cursors(
    client: &impl GenericClient,
    tenant: &str,
    group: Option<&str>,
    min_time_lag: Option<i64>,
) -> Result<Vec<CursorLag>, SqlError> {
    let rows = client
        .query_typed(
            CURSORS,
            &[
                (&tenant, Type::TEXT),
                (&group, Type::TEXT),
                (&min_time_lag, Type::INT8),
            ],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(CursorLag {
                group: row.try_get("o_group")?,
                queue: row.try_get("o_queue")?,
                partition: row.try_get("o_partition")?,
                partition_id: row.try_get("o_partition_id")?,
                committed: row.try_get("o_committed")?,
                last_offset: row.try_get("o_last_offset")?,
                offset_lag: row.try_get("o_offset_lag")?,
                worker_id: row.try_get("o_worker_id")?,
                lease_active: row.try_get("o_lease_active")?,
                total_consumed: row.try_get("o_total_consumed")?,
                last_consumed_at: row.try_get("o_last_consumed_at")?,
                oldest_unconsumed_at: row.try_get("o_oldest_unconsumed_at")?,
                time_lag_seconds: row.try_get("o_time_lag_seconds")?,
            })
        })
        .collect()
}

/// What the consumer-groups list shows of one (group, queue) with cursors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCounts {
    /// Consumer group.
    pub group: String,
    /// Queue.
    pub queue: String,
    /// Cursors of the group on the queue.
    pub cursors: i64,
    /// Live leases among them.
    pub leases: i64,
    /// Cursors with messages behind them.
    pub lagging: i64,
    /// Their summed offset lag.
    pub lag: i64,
    /// The largest time lag of the cursors, seconds.
    pub max_time_lag_seconds: i64,
}

/// Per (group, queue) of the tenant with cursors, its [`GroupCounts`]
/// (`figures_group_counts_v1`: the kept figures, so the cost follows the
/// cursors with lag, not every cursor).
pub async fn group_counts(
    client: &impl GenericClient,
    tenant: &str,
) -> Result<Vec<GroupCounts>, SqlError> {
    let rows = client
        .query_typed(GROUP_COUNTS, &[(&tenant, Type::TEXT)])
        .await?;
    rows.iter()
        .map(|row| {
            Ok(GroupCounts {
                group: row.try_get("o_group")?,
                queue: row.try_get("o_queue")?,
                cursors: row.try_get("o_cursors")?,
                leases: row.try_get("o_leases")?,
                lagging: row.try_get("o_lagging")?,
                lag: row.try_get("o_lag")?,
                max_time_lag_seconds: row.try_get("o_max_time_lag")?,
            })
        })
        .collect()
}

/// One subscription record of a (group, queue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Consumer group.
    pub group: String,
    /// Queue name.
    pub queue: String,
    /// The mode the group registered with (`all`, `new`, `timestamp`).
    pub mode: String,
    /// Where cursors the group creates start, if set.
    pub timestamp: Option<SystemTime>,
    /// When the record was created.
    pub created_at: SystemTime,
}

/// The subscription records of `group` (`None`: every group), ordered by
/// group and queue.
pub async fn subscriptions(
    client: &impl GenericClient,
    tenant: &str,
    group: Option<&str>,
) -> Result<Vec<Subscription>, SqlError> {
    let rows = client
        .query_typed(
            SUBSCRIPTIONS,
            &[(&tenant, Type::TEXT), (&group, Type::TEXT)],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(Subscription {
                group: row.try_get("o_group")?,
                queue: row.try_get("o_queue")?,
                mode: row.try_get("o_mode")?,
                timestamp: row.try_get("o_timestamp")?,
                created_at: row.try_get("o_created_at")?,
            })
        })
        .collect()
}
