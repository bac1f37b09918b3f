//! What copying Queen's database to another PostgreSQL needs in SQL: the
//! schemas and tables Queen owns, a target's summary, clearing a target's
//! Queen schemas before a restore, row counts for validation, and a check
//! that a target is not the source itself. The copy itself is `pg_dump`
//! and `pg_restore` (`queen_engine`'s migration component).

use tokio_postgres::error::SqlState;
use tokio_postgres::GenericClient;

use crate::SqlError;

/// The schemas Queen owns; a copy holds exactly these.
pub const SCHEMAS: &[&str] = &["queen", "queen_streams"];

/// Every table of [`SCHEMAS`], qualified (a test checks this against the
/// catalog of a database with the schema applied).
pub const TABLES: &[&str] = &[
    "queen.queues",
    "queen.consumer_groups_metadata",
    "queen.log_partitions",
    "queen.log_segments",
    "queen.log_txns",
    "queen.log_consumers",
    "queen.log_dlq",
    "queen.message_traces",
    "queen.system_state",
    "queen.database_identity",
    "queen.stats_queue_minute",
    "queen.stats_broker_minute",
    "queen_streams.queries",
    "queen_streams.state",
];

/// What a target database holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSummary {
    /// `version()`.
    pub version: String,
    /// Tables outside PostgreSQL's own schemas.
    pub user_tables: i64,
    /// Whether any of [`SCHEMAS`] exists (a copy replaces them).
    pub has_queen_schema: bool,
}

const SUMMARY: &str = "SELECT version(), \
     (SELECT count(*) FROM pg_catalog.pg_tables \
       WHERE schemaname NOT IN ('pg_catalog', 'information_schema')), \
     EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = ANY($1::text[]))";

/// The target's version and whether it holds tables, Queen's or others.
pub async fn target_summary(client: &impl GenericClient) -> Result<TargetSummary, SqlError> {
    let schemas: Vec<&str> = SCHEMAS.to_vec();
    let row = client.query_one(SUMMARY, &[&schemas]).await?;
    Ok(TargetSummary {
        version: row.try_get(0)?,
        user_tables: row.try_get(1)?,
        has_queen_schema: row.try_get(2)?,
    })
}

const DROP_SCHEMAS: &str =
    "DROP SCHEMA IF EXISTS queen CASCADE; DROP SCHEMA IF EXISTS queen_streams CASCADE";

/// Drop [`SCHEMAS`] and everything in them (before a restore into the
/// target; never run on the source).
pub async fn drop_queen_schemas(client: &impl GenericClient) -> Result<(), SqlError> {
    client.batch_execute(DROP_SCHEMAS).await?;
    Ok(())
}

/// The rows of `table`, one of [`TABLES`]; `None` when the table does not
/// exist there (a target the copy has not reached), or `table` is not one
/// of [`TABLES`].
pub async fn count_rows(client: &impl GenericClient, table: &str) -> Result<Option<i64>, SqlError> {
    // The name comes from the fixed list, never from a request.
    let Some(table) = TABLES.iter().find(|known| **known == table) else {
        return Ok(None);
    };
    match client
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
    {
        Ok(row) => Ok(Some(row.try_get(0)?)),
        Err(error)
            if matches!(
                error.code(),
                Some(&SqlState::UNDEFINED_TABLE | &SqlState::INVALID_SCHEMA_NAME)
            ) =>
        {
            Ok(None)
        }
        Err(error) => Err(error.into()),
    }
}

const SESSION_SEEN: &str = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity \
     WHERE application_name = $1 AND datname = current_database())";

/// Whether a session named `application_name` is connected to this
/// session's database: with a name only the source's own session carries,
/// true means the target is the source.
pub async fn session_seen(
    client: &impl GenericClient,
    application_name: &str,
) -> Result<bool, SqlError> {
    let row = client.query_one(SESSION_SEEN, &[&application_name]).await?;
    Ok(row.try_get(0)?)
}
