//! The retention and eviction loops' steps (`procedures/retention.sql`).

use tokio_postgres::GenericClient;

use crate::SqlError;

const STEP: &str = "SELECT * FROM queen.log_retention_step_v3($1, $2)";
const EVICT: &str = "SELECT * FROM queen.log_eviction_step_v2($1, $2)";
const CLEANUP: &str = "SELECT * FROM queen.log_partition_cleanup_step_v3($1, $2)";

/// The per-queue counts of a step (`o_by_queue`: an object of queue name to
/// a count, or to an array of counts), as (queue, counts) pairs.
fn by_queue(value: &serde_json::Value) -> Vec<(String, Vec<u64>)> {
    value
        .as_object()
        .map(|object| {
            object
                .iter()
                .map(|(queue, counts)| {
                    let counts = match counts {
                        serde_json::Value::Array(items) => {
                            items.iter().map(|n| n.as_u64().unwrap_or(0)).collect()
                        }
                        other => vec![other.as_u64().unwrap_or(0)],
                    };
                    (queue.clone(), counts)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionStep {
    /// Another session holds the sweep's lock: nothing was done.
    pub skipped: bool,
    /// Partitions whose segment prefix moved.
    pub partitions: u32,
    /// Segments deleted.
    pub segments: u32,
    /// Messages in them.
    pub messages: u64,
    /// Sidecar rows purged.
    pub txn_rows: u32,
    /// Some partition had more deletable work past the bounds.
    pub more: bool,
    /// Per queue: (name, messages past `retentionSeconds`, messages consumed
    /// and past `completedRetentionSeconds`).
    pub by_queue: Vec<(String, u64, u64)>,
}

/// Run one step: at most `max_partitions` partitions per phase, at most
/// `max_segments` segments (or sidecar rows) per partition, in one
/// transaction.
pub async fn step(
    client: &impl GenericClient,
    max_partitions: i32,
    max_segments: i32,
) -> Result<RetentionStep, SqlError> {
    let row = client
        .query_one(STEP, &[&max_partitions, &max_segments])
        .await?;
    let count = |name: &str| -> Result<u32, SqlError> {
        let value: i32 = row.try_get(name)?;
        Ok(u32::try_from(value).unwrap_or(0))
    };
    let messages: i64 = row.try_get("o_messages")?;
    Ok(RetentionStep {
        skipped: row.try_get("o_skipped")?,
        partitions: count("o_partitions")?,
        segments: count("o_segments")?,
        messages: u64::try_from(messages).unwrap_or(0),
        txn_rows: count("o_txn_rows")?,
        more: row.try_get("o_more")?,
        by_queue: by_queue(&row.try_get::<_, serde_json::Value>("o_by_queue")?)
            .into_iter()
            .map(|(queue, counts)| {
                let count = |i: usize| counts.get(i).copied().unwrap_or(0);
                (queue, count(0), count(1))
            })
            .collect(),
    })
}

/// What one eviction step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvictionStep {
    /// Another session holds the eviction lock: nothing was done.
    pub skipped: bool,
    /// Segments deleted.
    pub segments: u32,
    /// Messages in them.
    pub messages: u64,
    /// Some partition had more to evict past the bounds.
    pub more: bool,
    /// Per queue: (name, messages evicted).
    pub by_queue: Vec<(String, u64)>,
}

/// Run one eviction step (queues with `maxWaitTimeSeconds`), with the same
/// bounds as [`step`].
pub async fn evict_step(
    client: &impl GenericClient,
    max_partitions: i32,
    max_segments: i32,
) -> Result<EvictionStep, SqlError> {
    let row = client
        .query_one(EVICT, &[&max_partitions, &max_segments])
        .await?;
    let segments: i32 = row.try_get("o_segments")?;
    let messages: i64 = row.try_get("o_messages")?;
    Ok(EvictionStep {
        skipped: row.try_get("o_skipped")?,
        segments: u32::try_from(segments).unwrap_or(0),
        messages: u64::try_from(messages).unwrap_or(0),
        more: row.try_get("o_more")?,
        by_queue: single(&row.try_get::<_, serde_json::Value>("o_by_queue")?),
    })
}

fn single(value: &serde_json::Value) -> Vec<(String, u64)> {
    by_queue(value)
        .into_iter()
        .map(|(queue, counts)| (queue, counts.first().copied().unwrap_or(0)))
        .collect()
}

/// What one cleanup step removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleanup {
    /// Partitions removed.
    pub removed: u32,
    /// Per queue: (name, partitions removed).
    pub by_queue: Vec<(String, u64)>,
}

/// Remove at most `max_partitions` partitions that are empty, idle for
/// `idle_seconds` and hold no dead letter; answers how many went, per queue.
pub async fn cleanup_step(
    client: &impl GenericClient,
    idle_seconds: i32,
    max_partitions: i32,
) -> Result<Cleanup, SqlError> {
    let row = client
        .query_one(CLEANUP, &[&idle_seconds, &max_partitions])
        .await?;
    let removed: i32 = row.try_get(0)?;
    Ok(Cleanup {
        removed: u32::try_from(removed).unwrap_or(0),
        by_queue: single(&row.try_get::<_, serde_json::Value>(1)?),
    })
}
