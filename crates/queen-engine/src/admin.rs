//! The admin views: read-only answers for operators and the dashboard,
//! computed by the procedures of `procedures/admin.sql`.
//!
//! Decision (differs from the engine's rule of never seeing wire JSON): a
//! view's body is the JSON its procedure builds, passed through unread. The
//! contract defines these bodies as procedure results, and building the same
//! shapes again in Rust would double dozens of field lists for no gain: the
//! engine adds nothing to them. Views that need frames decoded (message
//! listing and detail) are built in Rust instead (`lifecycle/messages.rs`).

use std::time::SystemTime;

use serde_json::Value;
use uuid::Uuid;

use crate::EngineError;

/// The window and filters of the status and analytics views.
#[derive(Debug, Clone, Copy)]
pub struct AdminRange<'a> {
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

impl<'a> AdminRange<'a> {
    fn sql(&self) -> queen_sql::admin::Range<'a> {
        queen_sql::admin::Range {
            from: self.from,
            to: self.to,
            queue: self.queue,
            namespace: self.namespace,
            task: self.task,
        }
    }
}

/// Which per-queue analytics series a view reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueSeries {
    /// `GET /analytics/queue-lag`.
    Lag,
    /// `GET /analytics/queue-ops`.
    Ops,
    /// `GET /analytics/queue-parked-replicas`.
    Parked,
}

impl QueueSeries {
    fn sql(self) -> queen_sql::admin::QueueSeries {
        match self {
            QueueSeries::Lag => queen_sql::admin::QueueSeries::Lag,
            QueueSeries::Ops => queen_sql::admin::QueueSeries::Ops,
            QueueSeries::Parked => queen_sql::admin::QueueSeries::Parked,
        }
    }
}

/// One admin view and its parameters.
#[derive(Debug, Clone, Copy)]
pub enum AdminView<'a> {
    /// `GET /resources/overview`.
    Overview,
    /// `GET /resources/queues`.
    Queues,
    /// `GET /resources/queues/:queue` (`None`: no such queue).
    Queue(&'a str),
    /// `GET /resources/namespaces`.
    Namespaces,
    /// `GET /resources/tasks`.
    Tasks,
    /// `GET /status/queues/:queue` (`None`: no such queue).
    QueueDetail(&'a str),
    /// `GET /status/queues`.
    StatusQueues {
        /// Window and filters.
        range: AdminRange<'a>,
        /// Page size.
        limit: i32,
        /// Page start.
        offset: i32,
    },
    /// `GET /status`.
    Status(AdminRange<'a>),
    /// `GET /status/analytics`.
    Analytics {
        /// Window and filters.
        range: AdminRange<'a>,
        /// `minute`, `hour` or `day`.
        interval: &'a str,
    },
    /// `GET /analytics/system-metrics`.
    SystemMetrics {
        /// Window.
        range: AdminRange<'a>,
        /// Only this host.
        hostname: Option<&'a str>,
    },
    /// `GET /analytics/worker-metrics`.
    WorkerMetrics(AdminRange<'a>),
    /// `GET /analytics/queue-lag`, `queue-ops`, `queue-parked-replicas`.
    QueueSeries(QueueSeries, AdminRange<'a>),
    /// `GET /analytics/retention`.
    Retention(AdminRange<'a>),
    /// `GET /analytics/postgres-stats`.
    PostgresStats,
    /// `GET /traces/:partitionId/:transactionId`.
    MessageTraces {
        /// The message's partition.
        partition_id: Uuid,
        /// Its transaction id.
        transaction_id: &'a str,
    },
    /// `GET /traces/by-name/:name`.
    TracesByName {
        /// The trace name.
        name: &'a str,
        /// Page size.
        limit: i32,
        /// Page start.
        offset: i32,
    },
    /// `GET /traces/names`.
    TraceNames {
        /// Page size.
        limit: i32,
        /// Page start.
        offset: i32,
    },
}

/// Answer `view` on one pooled connection; `None` when what it names does
/// not exist.
pub(crate) async fn read(
    pool: &deadpool_postgres::Pool,
    tenant: &str,
    view: AdminView<'_>,
) -> Result<Option<Value>, EngineError> {
    use queen_sql::admin as sql;
    let client = pool.get().await.map_err(queen_sql::SqlError::from)?;
    let started = std::time::Instant::now();
    let c = &**client;
    let t = tenant;
    let answer = match view {
        AdminView::Overview => Some(sql::overview(c, t).await?),
        AdminView::Queues => Some(sql::queues(c, t).await?),
        AdminView::Queue(queue) => sql::queue(c, t, queue).await?,
        AdminView::Namespaces => Some(sql::groupings(c, t, "namespace").await?),
        AdminView::Tasks => Some(sql::groupings(c, t, "task").await?),
        AdminView::QueueDetail(queue) => sql::queue_detail(c, t, queue).await?,
        AdminView::StatusQueues {
            range,
            limit,
            offset,
        } => Some(sql::status_queues(c, t, &range.sql(), limit, offset).await?),
        AdminView::Status(range) => Some(sql::status(c, t, &range.sql()).await?),
        AdminView::Analytics { range, interval } => {
            Some(sql::analytics(c, t, &range.sql(), interval).await?)
        }
        AdminView::SystemMetrics { range, hostname } => {
            Some(sql::system_metrics(c, &range.sql(), hostname).await?)
        }
        AdminView::WorkerMetrics(range) => Some(sql::worker_metrics(c, &range.sql()).await?),
        AdminView::QueueSeries(kind, range) => {
            Some(sql::queue_series(c, t, kind.sql(), &range.sql()).await?)
        }
        AdminView::Retention(range) => Some(sql::retention(c, t, &range.sql()).await?),
        AdminView::PostgresStats => Some(sql::postgres_stats(c).await?),
        AdminView::MessageTraces {
            partition_id,
            transaction_id,
        } => Some(sql::message_traces(c, t, partition_id, transaction_id).await?),
        AdminView::TracesByName {
            name,
            limit,
            offset,
        } => Some(sql::traces_by_name(c, t, name, limit, offset).await?),
        AdminView::TraceNames { limit, offset } => {
            Some(sql::trace_names(c, t, limit, offset).await?)
        }
    };
    crate::stats::warn_if_slow("admin view", started.elapsed());
    Ok(answer)
}
