//! PostgreSQL counters read around a measured window.
//!
//! **Commits** come from `pg_stat_database.xact_commit` of the case's database.
//! That counter is not live: a backend accumulates its counts locally and
//! flushes them to shared memory when it goes idle, at most once a second;
//! a backend that goes idle less than a second after its last flush keeps its
//! counts for up to 10 s (`PGSTAT_IDLE_INTERVAL` in PostgreSQL 15), or until
//! it exits. Sleeping ~1 s after the window is therefore not enough. The push
//! scenario reads the counter only at quiet points where every count is known
//! to be flushed: before the window, after the load has drained and
//! [`SETTLE`] has passed; after the window, once the broker has exited (a
//! backend flushes its counts on exit) and no client session remains on the
//! database. The reads come from a session on the `postgres` database, so they
//! add nothing to the bench database's counters, and each read is its own
//! transaction, so no stale statistics snapshot is reused.
//!
//! **Write transactions** are counted exactly and without delay as transaction
//! ids handed out (`pg_current_snapshot()`'s xmax: the next xid, read without
//! assigning one). Every transaction that writes gets one, whichever database
//! it runs in, so this includes autovacuum/autoanalyze if they ran.
//!
//! **WAL** bytes are the difference of `pg_current_wal_lsn()`, cluster-wide.
//!
//! **Checkpoints** are the checkpointer's count of checkpoints started (timed
//! and requested), cluster-wide; it is live, so a window's difference says
//! whether a checkpoint (and its burst of full-page images) fell inside it.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use serde_json::json;

use crate::error::{Context, Error, Result};

/// How long after the load drains before `xact_commit` is complete: PostgreSQL
/// 15's `PGSTAT_IDLE_INTERVAL` (10 s) plus a margin.
pub(crate) const SETTLE: Duration = Duration::from_secs(11);

/// Counters of one database, from `pg_stat_database`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DbCounters {
    pub(crate) xact_commit: i64,
    pub(crate) xact_rollback: i64,
}

/// Cluster-wide positions, exact at the moment of reading.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClusterPoint {
    /// The next transaction id to be assigned.
    pub(crate) next_xid: i64,
    /// The current WAL insert position, in bytes.
    pub(crate) wal_lsn: i64,
    /// Checkpoints started so far (timed and requested).
    pub(crate) checkpoints: i64,
    /// The server's clock.
    pub(crate) now: SystemTime,
}

/// `pg_stat_database` counters of `dbname`.
pub(crate) async fn db_counters(
    admin: &tokio_postgres::Client,
    dbname: &str,
) -> Result<DbCounters> {
    let row = admin
        .query_one(
            "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = $1",
            &[&dbname],
        )
        .await
        .with_context(|| format!("read pg_stat_database for {dbname}"))?;
    Ok(DbCounters {
        xact_commit: row.get(0),
        xact_rollback: row.get(1),
    })
}

/// The next xid, the WAL position and the server clock.
pub(crate) async fn cluster_point(admin: &tokio_postgres::Client) -> Result<ClusterPoint> {
    let row = admin
        .query_one(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, \
             (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, clock_timestamp()",
            &[],
        )
        .await
        .context("read xid, WAL position and clock")?;
    Ok(ClusterPoint {
        next_xid: row.get(0),
        wal_lsn: row.get(1),
        checkpoints: checkpoints(admin).await?,
        now: row.get(2),
    })
}

/// Checkpoints started so far: `pg_stat_checkpointer` (PostgreSQL 17 and
/// later), else `pg_stat_bgwriter`.
async fn checkpoints(admin: &tokio_postgres::Client) -> Result<i64> {
    if let Ok(row) = admin
        .query_one(
            "SELECT num_timed + num_requested FROM pg_stat_checkpointer",
            &[],
        )
        .await
    {
        return Ok(row.get(0));
    }
    let row = admin
        .query_one(
            "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter",
            &[],
        )
        .await
        .context("read the checkpoint count")?;
    Ok(row.get(0))
}

/// Server settings the push and latency figures depend on; the report records
/// their values, with every `--pg-setting` name added.
const REPORTED_SETTINGS: &[&str] = &[
    "shared_buffers",
    "synchronous_commit",
    "fsync",
    "full_page_writes",
    "wal_compression",
    "wal_level",
    "wal_buffers",
    "max_wal_size",
    "min_wal_size",
    "checkpoint_timeout",
    "checkpoint_completion_target",
    "commit_delay",
    "commit_siblings",
    "max_connections",
];

/// The `--pg-setting`s of the run and the value the server runs with for
/// each of them and for [`REPORTED_SETTINGS`] (`current_setting` text, and
/// where the value came from: `default`, `command line`, ...).
pub(crate) async fn server_settings(
    admin: &tokio_postgres::Client,
    requested: &[String],
) -> Result<serde_json::Value> {
    let mut names: Vec<String> = REPORTED_SETTINGS.iter().map(|&n| n.to_owned()).collect();
    for setting in requested {
        let name = setting.split_once('=').map_or(setting.as_str(), |(n, _)| n);
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    let rows = admin
        .query(
            "SELECT name, current_setting(name), source FROM pg_settings \
             WHERE name = ANY($1) ORDER BY name",
            &[&names],
        )
        .await
        .context("read the server settings")?;
    let mut effective = serde_json::Map::new();
    for row in rows {
        let name: String = row.get(0);
        let value: String = row.get(1);
        let source: String = row.get(2);
        effective.insert(
            name,
            serde_json::json!({ "value": value, "source": source }),
        );
    }
    Ok(serde_json::json!({
        "pg_settings": requested,
        "effective": effective,
    }))
}

/// Wait until no client session is connected to `dbname`.
pub(crate) async fn wait_sessions_gone(
    admin: &tokio_postgres::Client,
    dbname: &str,
    limit: Duration,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let row = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = $1 AND backend_type = 'client backend'",
                &[&dbname],
            )
            .await
            .context("read pg_stat_activity")?;
        let sessions: i64 = row.get(0);
        if sessions == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::msg(format!(
                "{sessions} sessions still connected to {dbname} after {limit:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The server's version string.
pub(crate) async fn server_version(admin: &tokio_postgres::Client) -> Result<String> {
    let row = admin
        .query_one("SELECT current_setting('server_version')", &[])
        .await
        .context("read server_version")?;
    Ok(row.get(0))
}

/// What the segments table holds.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Segments {
    /// Segment rows.
    pub(crate) rows: i64,
    /// Messages in them.
    pub(crate) messages: i64,
    /// Stored (compressed) blob bytes.
    pub(crate) blob_bytes: i64,
}

/// Segments of the case's database: those created at or after `since`, and all.
/// Reads `pg_column_size`, which does not fetch the out-of-line blobs.
pub(crate) async fn segments(
    config: &tokio_postgres::Config,
    since: SystemTime,
) -> Result<(Segments, Segments, i64)> {
    let client = queen_sql::connect::connect_one(config)
        .await
        .context("connect to the bench database")?;
    let query = "SELECT count(*), coalesce(sum(msg_count), 0)::bigint, \
                 coalesce(sum(pg_column_size(blob)), 0)::bigint \
                 FROM queen.log_segments WHERE created_at >= $1";
    let read = |row: tokio_postgres::Row| Segments {
        rows: row.get(0),
        messages: row.get(1),
        blob_bytes: row.get(2),
    };
    let window = client
        .query_one(query, &[&since])
        .await
        .context("count the window's segments")?;
    let all = client
        .query_one(query, &[&SystemTime::UNIX_EPOCH])
        .await
        .context("count all segments")?;
    let partitions = client
        .query_one("SELECT count(*) FROM queen.log_partitions", &[])
        .await
        .context("count partitions")?;
    Ok((read(window), read(all), partitions.get(0)))
}

/// What a case's database must hold after its run.
pub(crate) struct Expected<'a> {
    /// Messages written in the window.
    pub(crate) window_messages: u64,
    /// Messages written in all: the window's and those before it.
    pub(crate) total_messages: u64,
    pub(crate) partitions: usize,
    /// How the messages were counted, e.g. `acknowledged as queued`.
    pub(crate) counted: &'a str,
    /// What wrote the messages before the window, e.g. `the warm-up and
    /// partition creation`.
    pub(crate) besides: &'a str,
}

/// Check the case's database holds exactly the `expected` messages, from the
/// window (segments created at or after `since`) and in all, and partitions.
/// Returns the window's segments.
pub(crate) async fn check_segments(
    config: &tokio_postgres::Config,
    since: SystemTime,
    expected: Expected<'_>,
) -> Result<Segments> {
    let (window, all, partitions) = segments(config, since).await?;
    let window_messages = i64::try_from(expected.window_messages).context("message count")?;
    let total_messages = i64::try_from(expected.total_messages).context("message count")?;
    if window.messages != window_messages || all.messages != total_messages {
        return Err(Error::msg(format!(
            "the database holds {} messages from the window ({} in all), but {} were \
             {} ({} with {})",
            window.messages,
            all.messages,
            window_messages,
            expected.counted,
            total_messages,
            expected.besides
        )));
    }
    if partitions != i64::try_from(expected.partitions).context("partition count")? {
        return Err(Error::msg(format!(
            "the database holds {partitions} partitions, expected {}",
            expected.partitions
        )));
    }
    Ok(window)
}

/// `pg_stat_database` counters of one database.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct DbStat {
    /// `xact_commit`: statements, for the broker (each runs in its own
    /// transaction).
    pub(crate) commits: i64,
    pub(crate) tup_returned: i64,
    pub(crate) tup_fetched: i64,
    pub(crate) tup_inserted: i64,
    pub(crate) tup_updated: i64,
    /// Buffer accesses (`blks_hit + blks_read`): the work a statement did,
    /// where rows read can mislead (a seq scan of a tiny table reads every
    /// row, cheaply).
    pub(crate) blocks: i64,
}

impl DbStat {
    /// The counters of `dbname` now, read from the admin session (which is
    /// on another database, so it adds nothing to them).
    pub(crate) async fn read(admin: &tokio_postgres::Client, dbname: &str) -> Result<DbStat> {
        let row = admin
            .query_one(
                "SELECT xact_commit, tup_returned, tup_fetched, tup_inserted, tup_updated, \
                        blks_hit + blks_read \
                 FROM pg_stat_database WHERE datname = $1",
                &[&dbname],
            )
            .await
            .with_context(|| format!("read pg_stat_database for {dbname}"))?;
        Ok(DbStat {
            commits: row.get(0),
            tup_returned: row.get(1),
            tup_fetched: row.get(2),
            tup_inserted: row.get(3),
            tup_updated: row.get(4),
            blocks: row.get(5),
        })
    }

    /// What was counted from `before` to these.
    pub(crate) fn since(self, before: DbStat) -> DbStat {
        DbStat {
            commits: self.commits - before.commits,
            tup_returned: self.tup_returned - before.tup_returned,
            tup_fetched: self.tup_fetched - before.tup_fetched,
            tup_inserted: self.tup_inserted - before.tup_inserted,
            tup_updated: self.tup_updated - before.tup_updated,
            blocks: self.blocks - before.blocks,
        }
    }

    /// Rows read: returned by scans plus fetched through indexes.
    pub(crate) fn rows_read(self) -> i64 {
        self.tup_returned + self.tup_fetched
    }
}

/// Rows read per table, catalogs included (`seq_tup_read + idx_tup_fetch`
/// of `pg_stat_all_tables`), to say where a window's rows went. Read on a
/// session of its own, closed at once so its own counts are flushed (they
/// are a few hundred catalog rows).
pub(crate) async fn table_reads(config: &tokio_postgres::Config) -> Result<HashMap<String, i64>> {
    let sql = queen_sql::connect::connect_one(config)
        .await
        .context("connect to the case's database")?;
    let rows = sql
        .query(
            "SELECT schemaname || '.' || relname, \
                    (coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::bigint \
             FROM pg_stat_all_tables",
            &[],
        )
        .await
        .context("read pg_stat_all_tables")?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// The tables that read the most rows from `before` to `after`, most first
/// (at most 5, none that read nothing): `[{"table", "rows"}, ..]`.
pub(crate) fn top_reads(
    before: &HashMap<String, i64>,
    after: &HashMap<String, i64>,
) -> serde_json::Value {
    let mut reads: Vec<(&String, i64)> = after
        .iter()
        .map(|(table, &n)| (table, n - before.get(table).copied().unwrap_or(0)))
        .filter(|&(_, n)| n > 0)
        .collect();
    reads.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    reads
        .into_iter()
        .take(5)
        .map(|(table, n)| json!({"table": table, "rows": n}))
        .collect()
}
