//! Statistics (`procedures/stats.sql`, `schema/009_stats.sql`): the cluster
//! series of `/metrics`, the per-minute rows and their purge.

use std::time::SystemTime;

use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use crate::SqlError;

/// One row of [`cluster_metrics`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterRow {
    /// A queue.
    Queue {
        /// Its name.
        queue: String,
        /// Partitions it has.
        partitions: i64,
        /// Live messages (what retention has not removed).
        messages: i64,
        /// Dead letters of every group.
        dead_letters: i64,
    },
    /// A consumer group on a queue.
    Group {
        /// The queue.
        queue: String,
        /// The group (`__QUEUE_MODE__` for queue mode).
        group: String,
        /// Messages behind the cursors.
        lag_messages: i64,
        /// Age of the oldest unconsumed message, seconds.
        lag_seconds: i64,
        /// Partitions with lag.
        partitions_with_lag: i64,
    },
}

/// The cluster series of `/metrics`, every tenant's, in one call: each row
/// with its tenant.
pub async fn cluster_metrics(
    client: &impl GenericClient,
) -> Result<Vec<(String, ClusterRow)>, SqlError> {
    let rows = client
        .query_typed(
            "SELECT o_tenant, o_kind, o_queue, o_group, o_a, o_b, o_c \
               FROM queen.metrics_cluster_v3()",
            &[],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let tenant: String = row.try_get(0)?;
            let kind: String = row.try_get(1)?;
            let queue: String = row.try_get(2)?;
            let (a, b, c): (i64, i64, i64) = (row.try_get(4)?, row.try_get(5)?, row.try_get(6)?);
            Ok((
                tenant,
                if kind == "group" {
                    ClusterRow::Group {
                        queue,
                        group: row.try_get::<_, Option<String>>(3)?.unwrap_or_default(),
                        lag_messages: a,
                        lag_seconds: b,
                        partitions_with_lag: c,
                    }
                } else {
                    ClusterRow::Queue {
                        queue,
                        partitions: a,
                        messages: b,
                        dead_letters: c,
                    }
                },
            ))
        })
        .collect()
}

/// Write one broker's statistics of the minute starting at `bucket`: one
/// statement (`queen.stats_write_v2`). `broker` and `queues` are the
/// objects that function documents. Returns the queue rows written.
pub async fn write_minute(
    client: &impl GenericClient,
    tenant: &str,
    bucket: SystemTime,
    broker_id: &str,
    broker: &serde_json::Value,
    queues: &serde_json::Value,
) -> Result<i32, SqlError> {
    let row = client
        .query_typed_one(
            "SELECT queen.stats_write_v2($1, $2, $3, $4, $5)",
            &[
                (&tenant, Type::TEXT),
                (&bucket, Type::TIMESTAMPTZ),
                (&broker_id, Type::TEXT),
                (broker, Type::JSONB),
                (queues, Type::JSONB),
            ],
        )
        .await?;
    Ok(row.try_get(0)?)
}

/// Delete at most `limit` rows of each statistics table older than
/// `before`; the rows deleted.
pub async fn purge(
    client: &impl GenericClient,
    before: SystemTime,
    limit: i32,
) -> Result<i64, SqlError> {
    let row = client
        .query_typed_one(
            "SELECT queen.stats_purge_v1($1, $2)",
            &[(&before, Type::TIMESTAMPTZ), (&limit, Type::INT4)],
        )
        .await?;
    Ok(row.try_get(0)?)
}
