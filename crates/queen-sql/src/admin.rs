//! The admin views (`procedures/admin.sql`): one function per procedure,
//! each returning the route's JSON body as the procedure built it (`None`
//! where the procedure answers NULL: the named thing does not exist).

use std::time::SystemTime;

use serde_json::Value;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::GenericClient;
use uuid::Uuid;

use crate::SqlError;

/// Run one view: a `SELECT queen.<procedure>(...)` returning one jsonb.
async fn view(
    client: &impl GenericClient,
    statement: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Option<Value>, SqlError> {
    let row = client.query_typed_one(statement, params).await?;
    Ok(row.try_get(0)?)
}

/// A view that always answers (never NULL).
async fn always(
    client: &impl GenericClient,
    statement: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Value, SqlError> {
    Ok(view(client, statement, params)
        .await?
        .unwrap_or(Value::Null))
}

/// Filters shared by the status and analytics views.
#[derive(Debug, Clone, Copy)]
pub struct Range<'a> {
    /// Window start.
    pub from: SystemTime,
    /// Window end.
    pub to: SystemTime,
    /// Only this queue.
    pub queue: Option<&'a str>,
    /// Only queues of this namespace.
    pub namespace: Option<&'a str>,
    /// Only queues of this task.
    pub task: Option<&'a str>,
}

/// `GET /resources/overview` (`admin_overview_v3`).
pub async fn overview(client: &impl GenericClient, tenant: &str) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_overview_v3($1)",
        &[(&tenant, Type::TEXT)],
    )
    .await
}

/// `GET /resources/queues` (`admin_queues_v2`).
pub async fn queues(client: &impl GenericClient, tenant: &str) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_queues_v2($1)",
        &[(&tenant, Type::TEXT)],
    )
    .await
}

/// `GET /resources/queues/:queue` (`admin_queue_v2`).
pub async fn queue(
    client: &impl GenericClient,
    tenant: &str,
    queue: &str,
) -> Result<Option<Value>, SqlError> {
    view(
        client,
        "SELECT queen.admin_queue_v2($1, $2)",
        &[(&tenant, Type::TEXT), (&queue, Type::TEXT)],
    )
    .await
}

/// `GET /resources/namespaces` (`by` = `namespace`) and `/resources/tasks`
/// (`task`) (`admin_groupings_v2`).
pub async fn groupings(
    client: &impl GenericClient,
    tenant: &str,
    by: &str,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_groupings_v2($1, $2)",
        &[(&tenant, Type::TEXT), (&by, Type::TEXT)],
    )
    .await
}

/// `GET /status/queues/:queue` (`admin_queue_detail_v2`).
pub async fn queue_detail(
    client: &impl GenericClient,
    tenant: &str,
    queue: &str,
) -> Result<Option<Value>, SqlError> {
    view(
        client,
        "SELECT queen.admin_queue_detail_v2($1, $2)",
        &[(&tenant, Type::TEXT), (&queue, Type::TEXT)],
    )
    .await
}

/// `GET /status/queues` (`admin_status_queues_v2`).
pub async fn status_queues(
    client: &impl GenericClient,
    tenant: &str,
    range: &Range<'_>,
    limit: i32,
    offset: i32,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_status_queues_v2($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            (&tenant, Type::TEXT),
            (&range.namespace, Type::TEXT),
            (&range.task, Type::TEXT),
            (&range.queue, Type::TEXT),
            (&range.from, Type::TIMESTAMPTZ),
            (&range.to, Type::TIMESTAMPTZ),
            (&limit, Type::INT4),
            (&offset, Type::INT4),
        ],
    )
    .await
}

/// `GET /status` (`admin_status_v2`).
pub async fn status(
    client: &impl GenericClient,
    tenant: &str,
    range: &Range<'_>,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_status_v2($1, $2, $3, $4, $5, $6)",
        &[
            (&tenant, Type::TEXT),
            (&range.from, Type::TIMESTAMPTZ),
            (&range.to, Type::TIMESTAMPTZ),
            (&range.queue, Type::TEXT),
            (&range.namespace, Type::TEXT),
            (&range.task, Type::TEXT),
        ],
    )
    .await
}

/// `GET /status/analytics` (`admin_analytics_v1`).
pub async fn analytics(
    client: &impl GenericClient,
    tenant: &str,
    range: &Range<'_>,
    interval: &str,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_analytics_v1($1, $2, $3, $4, $5, $6, $7)",
        &[
            (&tenant, Type::TEXT),
            (&range.from, Type::TIMESTAMPTZ),
            (&range.to, Type::TIMESTAMPTZ),
            (&range.queue, Type::TEXT),
            (&range.namespace, Type::TEXT),
            (&range.task, Type::TEXT),
            (&interval, Type::TEXT),
        ],
    )
    .await
}

/// `GET /analytics/system-metrics` (`admin_system_metrics_v2`).
pub async fn system_metrics(
    client: &impl GenericClient,
    range: &Range<'_>,
    hostname: Option<&str>,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_system_metrics_v2($1, $2, $3)",
        &[
            (&range.from, Type::TIMESTAMPTZ),
            (&range.to, Type::TIMESTAMPTZ),
            (&hostname, Type::TEXT),
        ],
    )
    .await
}

/// `GET /analytics/worker-metrics` (`admin_worker_metrics_v2`).
pub async fn worker_metrics(
    client: &impl GenericClient,
    range: &Range<'_>,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_worker_metrics_v2($1, $2)",
        &[
            (&range.from, Type::TIMESTAMPTZ),
            (&range.to, Type::TIMESTAMPTZ),
        ],
    )
    .await
}

/// A per-queue analytics view of one tenant: `queue_lag`, `queue_ops` or
/// `queue_parked` (`admin_<view>_v1`).
pub async fn queue_series(
    client: &impl GenericClient,
    tenant: &str,
    view_name: QueueSeries,
    range: &Range<'_>,
) -> Result<Value, SqlError> {
    let statement = match view_name {
        QueueSeries::Lag => "SELECT queen.admin_queue_lag_v1($1, $2, $3, $4)",
        QueueSeries::Ops => "SELECT queen.admin_queue_ops_v1($1, $2, $3, $4)",
        QueueSeries::Parked => "SELECT queen.admin_queue_parked_v1($1, $2, $3, $4)",
    };
    always(
        client,
        statement,
        &[
            (&tenant, Type::TEXT),
            (&range.from, Type::TIMESTAMPTZ),
            (&range.to, Type::TIMESTAMPTZ),
            (&range.queue, Type::TEXT),
        ],
    )
    .await
}

/// Which per-queue analytics view [`queue_series`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueSeries {
    /// `GET /analytics/queue-lag`.
    Lag,
    /// `GET /analytics/queue-ops`.
    Ops,
    /// `GET /analytics/queue-parked-replicas`.
    Parked,
}

/// `GET /analytics/retention` (`admin_retention_v1`).
pub async fn retention(
    client: &impl GenericClient,
    tenant: &str,
    range: &Range<'_>,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_retention_v1($1, $2, $3, $4)",
        &[
            (&tenant, Type::TEXT),
            (&range.from, Type::TIMESTAMPTZ),
            (&range.to, Type::TIMESTAMPTZ),
            (&range.queue, Type::TEXT),
        ],
    )
    .await
}

/// `GET /analytics/postgres-stats` (`admin_postgres_stats_v2`).
pub async fn postgres_stats(client: &impl GenericClient) -> Result<Value, SqlError> {
    always(client, "SELECT queen.admin_postgres_stats_v2()", &[]).await
}

/// `GET /traces/:partitionId/:transactionId` (`admin_message_traces_v2`).
pub async fn message_traces(
    client: &impl GenericClient,
    tenant: &str,
    partition_id: Uuid,
    transaction_id: &str,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_message_traces_v2($1, $2, $3)",
        &[
            (&tenant, Type::TEXT),
            (&partition_id, Type::UUID),
            (&transaction_id, Type::TEXT),
        ],
    )
    .await
}

/// `GET /traces/by-name/:name` (`admin_traces_by_name_v2`).
pub async fn traces_by_name(
    client: &impl GenericClient,
    tenant: &str,
    name: &str,
    limit: i32,
    offset: i32,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_traces_by_name_v2($1, $2, $3, $4)",
        &[
            (&tenant, Type::TEXT),
            (&name, Type::TEXT),
            (&limit, Type::INT4),
            (&offset, Type::INT4),
        ],
    )
    .await
}

/// `GET /traces/names` (`admin_trace_names_v1`).
pub async fn trace_names(
    client: &impl GenericClient,
    tenant: &str,
    limit: i32,
    offset: i32,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_trace_names_v1($1, $2, $3)",
        &[
            (&tenant, Type::TEXT),
            (&limit, Type::INT4),
            (&offset, Type::INT4),
        ],
    )
    .await
}

/// The filters of the message listing.
#[derive(Debug, Clone, Copy)]
pub struct MessageFilter<'a> {
    /// Only this queue.
    pub queue: Option<&'a str>,
    /// Only partitions of this name.
    pub partition: Option<&'a str>,
    /// Only queues of this namespace.
    pub namespace: Option<&'a str>,
    /// Only queues of this task.
    pub task: Option<&'a str>,
    /// Committed at or after.
    pub from: SystemTime,
    /// Committed at or before.
    pub to: SystemTime,
}

/// One segment of a listing page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageSegment {
    /// Its partition.
    pub partition_id: Uuid,
    /// Queue name.
    pub queue: String,
    /// Partition name.
    pub partition: String,
    /// The queue's namespace.
    pub namespace: String,
    /// The queue's task.
    pub task: String,
    /// First offset.
    pub base_offset: i64,
    /// Last offset.
    pub end_offset: i64,
    /// Commit time.
    pub created_at: SystemTime,
    /// The compressed frames.
    pub blob: Vec<u8>,
    /// The queue's priority.
    pub priority: i32,
}

/// The segments of one listing page, newest first, covering `need`
/// messages, at most `max_segments` of them (`admin_message_segments_v2`);
/// the flag says the cap cut the page short.
pub async fn message_segments(
    client: &impl GenericClient,
    tenant: &str,
    filter: &MessageFilter<'_>,
    need: i32,
    max_segments: i32,
) -> Result<(Vec<PageSegment>, bool), SqlError> {
    let rows = client
        .query_typed(
            "SELECT * FROM queen.admin_message_segments_v2($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[
                (&tenant, Type::TEXT),
                (&filter.queue, Type::TEXT),
                (&filter.partition, Type::TEXT),
                (&filter.namespace, Type::TEXT),
                (&filter.task, Type::TEXT),
                (&filter.from, Type::TIMESTAMPTZ),
                (&filter.to, Type::TIMESTAMPTZ),
                (&need, Type::INT4),
                (&max_segments, Type::INT4),
            ],
        )
        .await?;
    let mut more = false;
    let segments = rows
        .iter()
        .map(|row| {
            more |= row.try_get::<_, bool>(9)?;
            Ok(PageSegment {
                partition_id: row.try_get(0)?,
                queue: row.try_get(1)?,
                partition: row.try_get(2)?,
                namespace: row.try_get(3)?,
                task: row.try_get(4)?,
                base_offset: row.try_get(5)?,
                end_offset: row.try_get(6)?,
                created_at: row.try_get(7)?,
                blob: row.try_get(8)?,
                priority: row.try_get(10)?,
            })
        })
        .collect::<Result<Vec<_>, SqlError>>()?;
    Ok((segments, more))
}

/// A row of [`message_state`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageState {
    /// A consumer group's cursor on the partition.
    Cursor {
        /// Partition.
        partition_id: Uuid,
        /// Group.
        group: String,
        /// Every offset at or below is consumed.
        committed: i64,
        /// The leased batch's end, if leased.
        batch_end: Option<i64>,
        /// A live lease holds `(committed, batch_end]`.
        active: bool,
        /// The lease's expiry.
        lease_expires_at: Option<SystemTime>,
    },
    /// A dead letter of the partition in the asked range.
    Dead {
        /// Partition.
        partition_id: Uuid,
        /// The group it failed in.
        group: String,
        /// Its offset.
        offset: i64,
        /// Retries it spent.
        retry_count: i64,
        /// The error it was filed with.
        error: Option<String>,
        /// When.
        failed_at: SystemTime,
    },
}

/// Cursors of the partitions `ids` and their dead letters in `[min, max]`
/// (parallel slices; `admin_message_state_v1`).
pub async fn message_state(
    client: &impl GenericClient,
    ids: &[Uuid],
    min: &[i64],
    max: &[i64],
) -> Result<Vec<MessageState>, SqlError> {
    let rows = client
        .query_typed(
            "SELECT * FROM queen.admin_message_state_v1($1, $2, $3)",
            &[
                (&ids, Type::UUID_ARRAY),
                (&min, Type::INT8_ARRAY),
                (&max, Type::INT8_ARRAY),
            ],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let kind: String = row.try_get(0)?;
            let partition_id: Uuid = row.try_get(1)?;
            let group: String = row.try_get(2)?;
            let a: i64 = row.try_get(3)?;
            Ok(if kind == "cursor" {
                MessageState::Cursor {
                    partition_id,
                    group,
                    committed: a,
                    batch_end: row.try_get(4)?,
                    active: row.try_get(5)?,
                    lease_expires_at: row.try_get(6)?,
                }
            } else {
                MessageState::Dead {
                    partition_id,
                    group,
                    offset: a,
                    retry_count: row.try_get::<_, Option<i64>>(4)?.unwrap_or(0),
                    error: row.try_get(7)?,
                    failed_at: row
                        .try_get::<_, Option<SystemTime>>(6)?
                        .unwrap_or(std::time::UNIX_EPOCH),
                }
            })
        })
        .collect()
}

/// Where a message is (`admin_message_locate_v1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Its offset.
    pub offset: i64,
    /// Queue name.
    pub queue: String,
    /// Partition name.
    pub partition: String,
    /// The queue's namespace.
    pub namespace: String,
    /// The queue's task.
    pub task: String,
    /// The queue's id.
    pub queue_id: Uuid,
}

/// Find the tenant's message with transaction-id hash `hash` in partition
/// `partition_id` among its newest `rows` sidecar rows.
pub async fn locate_message(
    client: &impl GenericClient,
    tenant: &str,
    partition_id: Uuid,
    hash: &[u8],
    rows: i32,
) -> Result<Option<Located>, SqlError> {
    let row = client
        .query_typed_opt(
            "SELECT * FROM queen.admin_message_locate_v1($1, $2, $3, $4)",
            &[
                (&tenant, Type::TEXT),
                (&partition_id, Type::UUID),
                (&hash, Type::BYTEA),
                (&rows, Type::INT4),
            ],
        )
        .await?;
    row.map(|row| {
        Ok(Located {
            offset: row.try_get(0)?,
            queue: row.try_get(1)?,
            partition: row.try_get(2)?,
            namespace: row.try_get(3)?,
            task: row.try_get(4)?,
            queue_id: row.try_get(5)?,
        })
    })
    .transpose()
}

/// A queue's configuration as the admin views show it (`admin_queue_config`).
pub async fn queue_config(client: &impl GenericClient, queue_id: Uuid) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_queue_config($1)",
        &[(&queue_id, Type::UUID)],
    )
    .await
}
