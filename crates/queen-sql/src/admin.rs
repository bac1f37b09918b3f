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

/// `GET /resources/overview` (`admin_overview_v1`).
pub async fn overview(client: &impl GenericClient, tenant: &str) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_overview_v1($1)",
        &[(&tenant, Type::TEXT)],
    )
    .await
}

/// `GET /resources/queues` (`admin_queues_v1`).
pub async fn queues(client: &impl GenericClient, tenant: &str) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_queues_v1($1)",
        &[(&tenant, Type::TEXT)],
    )
    .await
}

/// `GET /resources/queues/:queue` (`admin_queue_v1`).
pub async fn queue(
    client: &impl GenericClient,
    tenant: &str,
    queue: &str,
) -> Result<Option<Value>, SqlError> {
    view(
        client,
        "SELECT queen.admin_queue_v1($1, $2)",
        &[(&tenant, Type::TEXT), (&queue, Type::TEXT)],
    )
    .await
}

/// `GET /resources/namespaces` (`by` = `namespace`) and `/resources/tasks`
/// (`task`) (`admin_groupings_v1`).
pub async fn groupings(
    client: &impl GenericClient,
    tenant: &str,
    by: &str,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_groupings_v1($1, $2)",
        &[(&tenant, Type::TEXT), (&by, Type::TEXT)],
    )
    .await
}

/// `GET /status/queues/:queue` (`admin_queue_detail_v1`).
pub async fn queue_detail(
    client: &impl GenericClient,
    tenant: &str,
    queue: &str,
) -> Result<Option<Value>, SqlError> {
    view(
        client,
        "SELECT queen.admin_queue_detail_v1($1, $2)",
        &[(&tenant, Type::TEXT), (&queue, Type::TEXT)],
    )
    .await
}

/// `GET /status/queues` (`admin_status_queues_v1`).
pub async fn status_queues(
    client: &impl GenericClient,
    tenant: &str,
    range: &Range<'_>,
    limit: i32,
    offset: i32,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_status_queues_v1($1, $2, $3, $4, $5, $6, $7, $8)",
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

/// `GET /status` (`admin_status_v1`).
pub async fn status(
    client: &impl GenericClient,
    tenant: &str,
    range: &Range<'_>,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_status_v1($1, $2, $3, $4, $5, $6)",
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

/// `GET /analytics/system-metrics` (`admin_system_metrics_v1`).
pub async fn system_metrics(
    client: &impl GenericClient,
    range: &Range<'_>,
    hostname: Option<&str>,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_system_metrics_v1($1, $2, $3)",
        &[
            (&range.from, Type::TIMESTAMPTZ),
            (&range.to, Type::TIMESTAMPTZ),
            (&hostname, Type::TEXT),
        ],
    )
    .await
}

/// `GET /analytics/worker-metrics` (`admin_worker_metrics_v1`).
pub async fn worker_metrics(
    client: &impl GenericClient,
    range: &Range<'_>,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_worker_metrics_v1($1, $2)",
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
pub async fn retention(client: &impl GenericClient, range: &Range<'_>) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_retention_v1($1, $2)",
        &[
            (&range.from, Type::TIMESTAMPTZ),
            (&range.to, Type::TIMESTAMPTZ),
        ],
    )
    .await
}

/// `GET /analytics/postgres-stats` (`admin_postgres_stats_v1`).
pub async fn postgres_stats(client: &impl GenericClient) -> Result<Value, SqlError> {
    always(client, "SELECT queen.admin_postgres_stats_v1()", &[]).await
}

/// `GET /traces/:partitionId/:transactionId` (`admin_message_traces_v1`).
pub async fn message_traces(
    client: &impl GenericClient,
    tenant: &str,
    partition_id: Uuid,
    transaction_id: &str,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_message_traces_v1($1, $2, $3)",
        &[
            (&tenant, Type::TEXT),
            (&partition_id, Type::UUID),
            (&transaction_id, Type::TEXT),
        ],
    )
    .await
}

/// `GET /traces/by-name/:name` (`admin_traces_by_name_v1`).
pub async fn traces_by_name(
    client: &impl GenericClient,
    tenant: &str,
    name: &str,
    limit: i32,
    offset: i32,
) -> Result<Value, SqlError> {
    always(
        client,
        "SELECT queen.admin_traces_by_name_v1($1, $2, $3, $4)",
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
