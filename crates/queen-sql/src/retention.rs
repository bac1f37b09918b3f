//! The retention and eviction loops' steps (`procedures/retention.sql`).

use tokio_postgres::GenericClient;

use crate::SqlError;

const STEP: &str = "SELECT * FROM queen.log_retention_step_v1($1, $2)";
const EVICT: &str = "SELECT * FROM queen.log_eviction_step_v1($1, $2)";
const CLEANUP: &str = "SELECT queen.log_partition_cleanup_step_v1($1, $2)";

/// What one step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
    })
}

/// What one eviction step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvictionStep {
    /// Another session holds the eviction lock: nothing was done.
    pub skipped: bool,
    /// Segments deleted.
    pub segments: u32,
    /// Messages in them.
    pub messages: u64,
    /// Some partition had more to evict past the bounds.
    pub more: bool,
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
    })
}

/// Remove at most `max_partitions` partitions that are empty, idle for
/// `idle_seconds` and hold no dead letter; answers how many went.
pub async fn cleanup_step(
    client: &impl GenericClient,
    idle_seconds: i32,
    max_partitions: i32,
) -> Result<u32, SqlError> {
    let row = client
        .query_one(CLEANUP, &[&idle_seconds, &max_partitions])
        .await?;
    let removed: i32 = row.try_get(0)?;
    Ok(u32::try_from(removed).unwrap_or(0))
}
