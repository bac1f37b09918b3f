//! The retention loop's step (`procedures/retention.sql`).

use tokio_postgres::GenericClient;

use crate::SqlError;

const STEP: &str = "SELECT * FROM queen.log_retention_step_v1($1, $2)";

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
