//! Applying the schema at boot.
//!
//! [`apply_schema`] runs at every boot of every broker, so it is idempotent and,
//! on a database that already has the schema, cheap and lock-free on Queen's
//! tables (the `.sql` files guard every statement that would take a table
//! lock; see `sql/README.md`). The order:
//!
//! 1. Take a session-level advisory lock on [`SCHEMA_LOCK_KEY`], so brokers
//!    booting at once against one database apply one at a time. The lock is
//!    taken by polling `pg_try_advisory_lock`, never by a blocking
//!    `pg_advisory_lock`: a session blocked inside `pg_advisory_lock` is an open
//!    transaction holding a snapshot, and `CREATE INDEX CONCURRENTLY` in the
//!    broker that holds the lock waits for every older snapshot to go away, so
//!    a blocking waiter would stall (or deadlock) the very build it waits for.
//!    Between polls the waiting session holds no snapshot.
//! 2. Run every transactional file, in registry order, in one transaction.
//! 3. Run each `CREATE INDEX CONCURRENTLY` statement on its own, outside any
//!    transaction: a valid index of that name is left alone without running the
//!    statement; an INVALID one (a crashed or failed earlier build) is dropped
//!    with `DROP INDEX CONCURRENTLY` first, because `IF NOT EXISTS` would keep
//!    the broken index forever.
//! 4. Release the lock, also when a step failed. If the connection itself is
//!    gone the server has already released it with the session. If the returned
//!    future is dropped midway, the lock (and possibly an open transaction)
//!    stays with the session until the caller closes the connection.

use std::time::{Duration, Instant};

use tracing::{debug, error, info, warn};

use crate::registry::{ApplyMode, SqlFile, FILES};
use crate::SqlError;

/// Apply every schema and procedure file, idempotently, under an advisory lock.
///
/// `client` must not be inside a transaction. The session's settings are left
/// as they were (the only setting changed is `SET LOCAL`, scoped to the schema
/// transaction).
pub async fn apply_schema(client: &tokio_postgres::Client) -> Result<(), SqlError> {
    let started = Instant::now();
    // Parse the concurrent files before touching the database, so a malformed
    // embedded file fails the boot without taking the lock.
    let concurrent_indexes = concurrent_indexes()?;

    acquire_schema_lock(client).await?;
    let applied = apply_locked(client, &concurrent_indexes).await;
    let released = release_schema_lock(client).await;

    applied?;
    released?;
    info!(
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        n_files = FILES.len(),
        "schema applied"
    );
    match citus_placement(client).await? {
        CitusPlacement::Absent | CitusPlacement::Off => {}
        CitusPlacement::Distributed => {
            info!("the log tables are distributed on Citus (schema/020_citus.sql)");
        }
        CitusPlacement::Undistributed => tracing::warn!(
            "the citus extension is installed but Queen's tables are not distributed: \
             the database holds partitions created before partition ids were derived; \
             it is served undistributed (ALTER DATABASE ... SET queen.citus = 'off' \
             silences this)"
        ),
    }
    Ok(())
}

/// Where Queen's log tables live on a database with the `citus` extension
/// (`sql/schema/020_citus.sql` decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CitusPlacement {
    /// No `citus` extension: plain PostgreSQL.
    Absent,
    /// The operator set `queen.citus = 'off'`: left alone.
    Off,
    /// Distributed by partition.
    Distributed,
    /// The extension is there, the tables are not distributed (partitions
    /// with drawn ids).
    Undistributed,
}

const CITUS_PRESENT_SQL: &str = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension \
     WHERE extname = 'citus'), current_setting('queen.citus', true) = 'off'";
/// Asked only when the extension exists (`pg_dist_partition` is Citus's).
const CITUS_DISTRIBUTED_SQL: &str = "SELECT EXISTS (SELECT 1 FROM pg_dist_partition \
     WHERE logicalrelid = 'queen.log_partitions'::regclass)";

/// Where the log tables live, read after the schema is applied.
pub async fn citus_placement(client: &tokio_postgres::Client) -> Result<CitusPlacement, SqlError> {
    let row = client.query_one(CITUS_PRESENT_SQL, &[]).await?;
    let (present, off): (bool, Option<bool>) = (row.try_get(0)?, row.try_get(1)?);
    if !present {
        return Ok(CitusPlacement::Absent);
    }
    if off == Some(true) {
        return Ok(CitusPlacement::Off);
    }
    let distributed: bool = client
        .query_one(CITUS_DISTRIBUTED_SQL, &[])
        .await?
        .try_get(0)?;
    Ok(if distributed {
        CitusPlacement::Distributed
    } else {
        CitusPlacement::Undistributed
    })
}

/// Session-level advisory lock key that serialises schema application.
/// The bytes spell "QUEENSCH"; any fixed value works as long as every broker
/// version uses the same one.
pub(crate) const SCHEMA_LOCK_KEY: i64 = 0x5155_4545_4E53_4348;

/// How long a booting broker sleeps between two tries of the schema lock.
const LOCK_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How often a broker still waiting for the schema lock says so.
const LOCK_WAIT_LOG_INTERVAL: Duration = Duration::from_secs(10);

const TRY_LOCK_SQL: &str = "SELECT pg_try_advisory_lock($1)";
const UNLOCK_SQL: &str = "SELECT pg_advisory_unlock($1)";
const BEGIN_SQL: &str = "BEGIN";
/// The transactional files are full of `IF NOT EXISTS`, each of which would
/// otherwise send a "already exists, skipping" notice at every boot.
const QUIET_NOTICES_SQL: &str = "SET LOCAL client_min_messages = warning";
const COMMIT_SQL: &str = "COMMIT";
const ROLLBACK_SQL: &str = "ROLLBACK";
/// `Some(valid)` when an index of that qualified name exists, no row otherwise.
const INDEX_VALIDITY_SQL: &str =
    "SELECT i.indisvalid FROM pg_catalog.pg_index i WHERE i.indexrelid = to_regclass($1)::oid";
/// Followed by the qualified index name (a validated bare lower-case identifier
/// from an embedded file, so it needs no quoting).
const DROP_INDEX_CONCURRENTLY_SQL: &str = "DROP INDEX CONCURRENTLY IF EXISTS";

/// Every concurrently built index lives in this schema: a `CREATE INDEX` names
/// its index bare, and the index goes into its table's schema.
const INDEX_SCHEMA: &str = "queen";

/// The statement prefix every statement of a concurrent file must start with.
const CONCURRENT_PREFIX: [&str; 6] = ["CREATE", "INDEX", "CONCURRENTLY", "IF", "NOT", "EXISTS"];

/// PostgreSQL's identifier length limit (NAMEDATALEN - 1).
const MAX_IDENTIFIER_LEN: usize = 63;

/// One statement of a concurrent file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConcurrentIndex {
    /// The file it came from, for logs.
    pub(crate) file: &'static str,
    /// The index name, bare (it lives in [`INDEX_SCHEMA`]).
    pub(crate) name: String,
    /// The whole `CREATE INDEX CONCURRENTLY IF NOT EXISTS ...` statement.
    pub(crate) statement: String,
}

/// Every statement of every concurrent file in [`FILES`], in apply order.
pub(crate) fn concurrent_indexes() -> Result<Vec<ConcurrentIndex>, SqlError> {
    let mut indexes = Vec::new();
    for file in FILES.iter().filter(|f| f.mode == ApplyMode::Concurrent) {
        indexes.extend(parse_concurrent_file(file)?);
    }
    Ok(indexes)
}

/// Split a concurrent file into its statements and name each one's index.
pub(crate) fn parse_concurrent_file(file: &SqlFile) -> Result<Vec<ConcurrentIndex>, SqlError> {
    let malformed = |reason: &'static str| SqlError::SchemaFile {
        file: file.name,
        reason,
    };
    let without_comments: String = file
        .text
        .lines()
        .map(|line| line.find("--").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n");
    let mut pieces: Vec<&str> = without_comments.split(';').collect();
    // Whatever follows the last ';' must be blank: every statement is terminated.
    let tail = pieces.pop().unwrap_or_default();
    if !tail.trim().is_empty() {
        return Err(malformed(
            "text after the last ';' (unterminated statement)",
        ));
    }

    let mut indexes = Vec::with_capacity(pieces.len());
    for piece in pieces {
        let statement = piece.trim();
        if statement.is_empty() {
            return Err(malformed("empty statement"));
        }
        let mut words = statement.split_whitespace();
        if !CONCURRENT_PREFIX
            .iter()
            .all(|want| words.next() == Some(*want))
        {
            return Err(malformed(
                "statement does not start with CREATE INDEX CONCURRENTLY IF NOT EXISTS",
            ));
        }
        let Some(name) = words.next() else {
            return Err(malformed("statement names no index"));
        };
        let name_is_plain = !name.is_empty()
            && name.len() <= MAX_IDENTIFIER_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !name_is_plain {
            return Err(malformed(
                "index name is not a bare lower-case identifier of at most 63 bytes",
            ));
        }
        if words.next() != Some("ON") {
            return Err(malformed("index name is not followed by ON"));
        }
        indexes.push(ConcurrentIndex {
            file: file.name,
            name: name.to_owned(),
            statement: statement.to_owned(),
        });
    }
    if indexes.is_empty() {
        return Err(malformed("no statements"));
    }
    Ok(indexes)
}

async fn acquire_schema_lock(client: &tokio_postgres::Client) -> Result<(), SqlError> {
    let try_lock = client.prepare(TRY_LOCK_SQL).await?;
    let mut waiting_since: Option<Instant> = None;
    let mut last_log = Instant::now();
    loop {
        let acquired: bool = client
            .query_one(&try_lock, &[&SCHEMA_LOCK_KEY])
            .await?
            .try_get(0)?;
        if acquired {
            if let Some(since) = waiting_since {
                info!(
                    waited_ms = u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX),
                    "schema lock acquired"
                );
            }
            return Ok(());
        }
        match waiting_since {
            None => {
                info!("another session is applying the schema; waiting for the schema lock");
                waiting_since = Some(Instant::now());
                last_log = Instant::now();
            }
            Some(since) if last_log.elapsed() >= LOCK_WAIT_LOG_INTERVAL => {
                info!(
                    waited_s = since.elapsed().as_secs(),
                    "still waiting for the schema lock"
                );
                last_log = Instant::now();
            }
            Some(_) => {}
        }
        tokio::time::sleep(LOCK_POLL_INTERVAL).await;
    }
}

async fn release_schema_lock(client: &tokio_postgres::Client) -> Result<(), SqlError> {
    let released: bool = client
        .query_one(UNLOCK_SQL, &[&SCHEMA_LOCK_KEY])
        .await
        .inspect_err(|e| warn!(error = %e, "could not release the schema lock"))?
        .try_get(0)?;
    if !released {
        warn!("schema lock was not held at release");
    }
    Ok(())
}

async fn apply_locked(
    client: &tokio_postgres::Client,
    concurrent_indexes: &[ConcurrentIndex],
) -> Result<(), SqlError> {
    apply_transactional(client).await?;
    for index in concurrent_indexes {
        apply_concurrent_index(client, index).await?;
    }
    Ok(())
}

async fn apply_transactional(client: &tokio_postgres::Client) -> Result<(), SqlError> {
    client.batch_execute(BEGIN_SQL).await?;
    if let Err(e) = client.batch_execute(QUIET_NOTICES_SQL).await {
        rollback(client).await;
        return Err(e.into());
    }
    for file in FILES.iter().filter(|f| f.mode == ApplyMode::Transactional) {
        debug!(file = file.name, "applying schema file");
        if let Err(e) = client.batch_execute(file.text).await {
            error!(file = file.name, error = %e, "schema file failed; rolling back");
            rollback(client).await;
            return Err(e.into());
        }
    }
    client.batch_execute(COMMIT_SQL).await?;
    Ok(())
}

/// Best effort: the caller is already returning the error that made it roll
/// back, and if the connection is broken the server rolls back on its own.
async fn rollback(client: &tokio_postgres::Client) {
    if let Err(e) = client.batch_execute(ROLLBACK_SQL).await {
        warn!(error = %e, "rollback of the schema transaction failed");
    }
}

async fn apply_concurrent_index(
    client: &tokio_postgres::Client,
    index: &ConcurrentIndex,
) -> Result<(), SqlError> {
    let qualified = format!("{INDEX_SCHEMA}.{}", index.name);
    let validity: Option<bool> = client
        .query_opt(INDEX_VALIDITY_SQL, &[&qualified])
        .await?
        .map(|row| row.try_get(0))
        .transpose()?;
    match validity {
        // Running the statement anyway would take a SHARE UPDATE EXCLUSIVE lock
        // on the table before noticing the index exists.
        Some(true) => {
            debug!(index = %qualified, "index present and valid");
            return Ok(());
        }
        Some(false) => {
            warn!(
                index = %qualified,
                "dropping INVALID index left by an earlier failed build"
            );
            client
                .batch_execute(&format!("{DROP_INDEX_CONCURRENTLY_SQL} {qualified}"))
                .await?;
        }
        None => {}
    }
    info!(index = %qualified, file = index.file, "building index concurrently");
    client
        .batch_execute(&index.statement)
        .await
        .inspect_err(|e| error!(index = %qualified, error = %e, "concurrent index build failed"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &'static str) -> SqlFile {
        SqlFile {
            name: "schema/test.sql",
            text,
            mode: ApplyMode::Concurrent,
        }
    }

    #[test]
    fn embedded_concurrent_files_name_their_indexes() {
        let names: Vec<String> = concurrent_indexes()
            .unwrap()
            .into_iter()
            .map(|index| index.name)
            .collect();
        assert_eq!(
            names,
            [
                "idx_log_partitions_queue_oldest_live",
                "idx_log_partitions_queue_oldest_txn",
                "idx_log_partitions_oldest_txn",
                "idx_log_consumers_worker",
                "idx_log_partitions_queue_empty",
                "idx_log_partitions_empty",
                "idx_queues_retention",
                "idx_queues_eviction",
                "idx_queues_marked",
                "idx_message_traces_names",
            ]
        );
    }

    #[test]
    fn parse_strips_comments_and_keeps_statements_whole() {
        let parsed = parse_concurrent_file(&file(
            "-- header; with a semicolon\n\
             CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_a -- trailing; comment\n\
             ON queen.t (a) WHERE a IS NOT NULL;\n\
             \n\
             CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_b ON queen.t (b);\n",
        ))
        .unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].name, "idx_a");
        assert_eq!(
            parsed[0].statement,
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_a \nON queen.t (a) WHERE a IS NOT NULL"
        );
        assert_eq!(parsed[1].name, "idx_b");
        assert_eq!(
            parsed[1].statement,
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_b ON queen.t (b)"
        );
    }

    #[test]
    fn parse_rejects_malformed_files() {
        let cases: [(&'static str, &str); 6] = [
            ("CREATE INDEX idx_a ON queen.t (a);", "does not start with"),
            (
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_a ON queen.t (a)",
                "unterminated",
            ),
            (
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS \"Idx\" ON queen.t (a);",
                "bare lower-case",
            ),
            (
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS ON queen.t (a);",
                "bare lower-case",
            ),
            (
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_a USING btree ON queen.t (a);",
                "not followed by ON",
            ),
            ("-- nothing here\n", "no statements"),
        ];
        for (text, want) in cases {
            match parse_concurrent_file(&file(text)) {
                Err(SqlError::SchemaFile { file, reason }) => {
                    assert_eq!(file, "schema/test.sql");
                    assert!(reason.contains(want), "{text:?}: got {reason:?}");
                }
                other => panic!("{text:?}: expected SchemaFile error, got {other:?}"),
            }
        }
    }
}
