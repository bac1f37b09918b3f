//! The admin views (wire-api.md §5, dashboard-routes.md): resources, status,
//! analytics and traces. Each parses its query string, asks the engine for
//! the view and sends the body the view's procedure built.
//!
//! Time windows: `from` and `to` are ISO-8601 (`from` defaults to an hour
//! before `to`, `to` to now); anything else is 400 naming the field. Page
//! sizes are clamped to 1..=1000, offsets to 0 and above.

use std::time::Duration;

use hyper::StatusCode;
use queen_engine::{AdminRange, AdminView, Engine, QueueSeries};

use crate::context::Request;
use crate::error::HttpError;
use crate::query::Query;
use crate::response::{self, Response};

/// The default window of the status and analytics views.
const DEFAULT_WINDOW: Duration = Duration::from_secs(3600);

/// The window and the queue / namespace / task filters of `query`.
fn range(query: &Query) -> Result<AdminRange<'_>, HttpError> {
    let (from, to) = query.window(DEFAULT_WINDOW)?;
    Ok(AdminRange {
        from,
        to,
        queue: query.name("queue")?,
        namespace: query.name("namespace")?,
        task: query.name("task")?,
    })
}

/// `limit` (clamped to 1..=1000) and `offset` of `query`.
fn page(query: &Query, default_limit: i64) -> (i32, i32) {
    let limit = query.int("limit", default_limit).clamp(1, 1000);
    let offset = query.int("offset", 0).clamp(0, i64::from(i32::MAX));
    (
        i32::try_from(limit).unwrap_or(1000),
        i32::try_from(offset).unwrap_or(0),
    )
}

/// Answer `view`: 200 with its body, or 404 `{"error": not_found}`.
async fn answer(
    engine: &Engine,
    tenant: &str,
    view: AdminView<'_>,
    not_found: &str,
) -> Result<Response, HttpError> {
    match engine.admin_view(tenant, view).await? {
        Some(body) => Ok(response::json(StatusCode::OK, &body)),
        None => Err(HttpError::NotFound(not_found.to_owned())),
    }
}

/// The resource views: overview, queues, one queue, namespaces, tasks.
pub(crate) async fn resources(
    engine: &Engine,
    tenant: &str,
    view: AdminView<'_>,
) -> Result<Response, HttpError> {
    answer(engine, tenant, view, "Queue not found").await
}

/// `GET /api/v1/status/queues/:queue`.
pub(crate) async fn queue_detail(
    engine: &Engine,
    tenant: &str,
    queue: &str,
) -> Result<Response, HttpError> {
    answer(
        engine,
        tenant,
        AdminView::QueueDetail(queue),
        "Queue not found",
    )
    .await
}

/// `GET /api/v1/status/queues`.
pub(crate) async fn status_queues(
    engine: &Engine,
    req: &Request,
    tenant: &str,
) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    let (limit, offset) = page(&query, 100);
    let view = AdminView::StatusQueues {
        range: range(&query)?,
        limit,
        offset,
    };
    answer(engine, tenant, view, "").await
}

/// `GET /api/v1/status`.
pub(crate) async fn status(
    engine: &Engine,
    req: &Request,
    tenant: &str,
) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    answer(engine, tenant, AdminView::Status(range(&query)?), "").await
}

/// `GET /api/v1/status/analytics`.
pub(crate) async fn analytics(
    engine: &Engine,
    req: &Request,
    tenant: &str,
) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    let interval = query.non_empty("interval").unwrap_or("hour");
    if !matches!(interval, "minute" | "hour" | "day") {
        return Err(HttpError::Validation(
            "interval must be minute, hour or day".to_owned(),
        ));
    }
    let view = AdminView::Analytics {
        range: range(&query)?,
        interval,
    };
    answer(engine, tenant, view, "").await
}

/// Which `/api/v1/analytics/*` view a route reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Analytics {
    SystemMetrics,
    WorkerMetrics,
    QueueLag,
    QueueOps,
    QueueParked,
    Retention,
    PostgresStats,
}

/// `GET /api/v1/analytics/*`.
pub(crate) async fn analytics_view(
    engine: &Engine,
    req: &Request,
    tenant: &str,
    which: Analytics,
) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    let range = range(&query)?;
    let view = match which {
        Analytics::SystemMetrics => AdminView::SystemMetrics {
            range,
            hostname: query.non_empty("hostname"),
        },
        Analytics::WorkerMetrics => AdminView::WorkerMetrics(range),
        Analytics::QueueLag => AdminView::QueueSeries(QueueSeries::Lag, range),
        Analytics::QueueOps => AdminView::QueueSeries(QueueSeries::Ops, range),
        Analytics::QueueParked => AdminView::QueueSeries(QueueSeries::Parked, range),
        Analytics::Retention => AdminView::Retention(range),
        Analytics::PostgresStats => AdminView::PostgresStats,
    };
    answer(engine, tenant, view, "").await
}

/// `GET /api/v1/traces/:partitionId/:transactionId`.
pub(crate) async fn message_traces(
    engine: &Engine,
    tenant: &str,
    partition_id: &str,
    transaction_id: &str,
) -> Result<Response, HttpError> {
    let partition_id = uuid::Uuid::parse_str(partition_id)
        .map_err(|_| HttpError::Validation("partitionId must be a UUID".to_owned()))?;
    let view = AdminView::MessageTraces {
        partition_id,
        transaction_id,
    };
    answer(engine, tenant, view, "").await
}

/// `GET /api/v1/traces/by-name/:name`.
pub(crate) async fn traces_by_name(
    engine: &Engine,
    req: &Request,
    tenant: &str,
    name: &str,
) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    let (limit, offset) = page(&query, 100);
    let view = AdminView::TracesByName {
        name,
        limit,
        offset,
    };
    answer(engine, tenant, view, "").await
}

/// `GET /api/v1/traces/names`.
pub(crate) async fn trace_names(
    engine: &Engine,
    req: &Request,
    tenant: &str,
) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    let (limit, offset) = page(&query, 50);
    answer(engine, tenant, AdminView::TraceNames { limit, offset }, "").await
}

/// `POST /api/v1/stats/refresh`: write this broker's statistics rows now.
pub(crate) async fn refresh_stats(engine: &Engine) -> Result<Response, HttpError> {
    let queues = engine.observe().write_stats().await?;
    Ok(response::json(
        StatusCode::OK,
        &serde_json::json!({"success": true, "queuesWritten": queues,
                            "message": "statistics written"}),
    ))
}
