//! Copying Queen's schemas and data to another PostgreSQL (the dashboard's
//! Migration page): test a target, copy to it with PostgreSQL's own
//! `pg_dump | pg_restore` (`copy.rs`), report the run, compare row counts.
//!
//! [`Migration`] runs one copy at a time on this broker: idle, then
//! dumping (connecting to the target and taking its migration lock,
//! checking it is not the source, dropping its Queen schemas unless
//! objects elsewhere depend on them), restoring (the pipe, then emptying
//! the partitions when the messages were skipped), then complete or error;
//! [`Migration::reset`] goes back to idle from either end, never while a
//! copy runs. The state is this broker's, in memory; the target's lock, a
//! session-level advisory lock held for the whole copy, is what keeps two
//! brokers from copying to one target at once.
//!
//! The source is the broker's own database ([`MigrationConfig::source`]).
//! What a request may skip is the data of the tables in [`SKIPPABLE`], a
//! list fixed here: the names the dashboard sends map to Queen's tables,
//! and nothing a request says reaches a command line but through it.

mod copy;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::EngineError;

/// Where a copy starts from.
#[derive(Debug, Clone)]
pub struct MigrationConfig {
    /// The broker's own database (its `QUEEN_DATABASE_URL`, or the managed
    /// cluster's socket).
    pub source: tokio_postgres::Config,
    /// Where `pg_dump` and `pg_restore` are (`QUEEN_PG_BIN_DIR`); `None`:
    /// `PATH`, then `/usr/lib/postgresql/*/bin`.
    pub bin_dir: Option<std::path::PathBuf>,
}

/// The database a copy goes to.
#[derive(Clone, PartialEq, Eq)]
pub struct MigrationTarget {
    /// Host name, address, or a Unix socket directory (starting with `/`).
    pub host: String,
    /// Port.
    pub port: u16,
    /// Database name.
    pub database: String,
    /// Role.
    pub user: String,
    /// Password (empty: none).
    pub password: String,
    /// Whether the connection must use TLS.
    pub ssl: bool,
}

impl std::fmt::Debug for MigrationTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MigrationTarget")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("database", &self.database)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// How long connecting to a target may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl MigrationTarget {
    /// The target as connection settings (no TLS: see [`Migration::start`]).
    fn config(&self) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&self.host)
            .port(self.port)
            .dbname(&self.database)
            .user(&self.user)
            .application_name("queen-migration")
            .connect_timeout(CONNECT_TIMEOUT)
            .ssl_mode(tokio_postgres::config::SslMode::Disable);
        if !self.password.is_empty() {
            config.password(self.password.as_bytes());
        }
        config
    }

    /// Refuse what this broker cannot connect to.
    fn check(&self) -> Result<(), EngineError> {
        if self.ssl {
            return Err(EngineError::MigrationRefused(
                "TLS to the target is not supported: this broker connects to PostgreSQL \
                 without TLS (use a target reachable without ssl)"
                    .to_owned(),
            ));
        }
        Ok(())
    }
}

/// The tables of [`queen_sql::migration::TABLES`] holding messages.
const MESSAGES: &[&str] = &["queen.log_segments", "queen.log_txns"];
/// The statistics tables.
const STATS: &[&str] = &["queen.stats_queue_minute", "queen.stats_broker_minute"];
/// The trace table.
const TRACES: &[&str] = &["queen.message_traces"];
/// The dead-letter table.
const DLQ: &[&str] = &["queen.log_dlq"];

/// The data a copy may skip (the tables are still created, empty), by the
/// name a request gives: the reference dashboard's table names, mapped to
/// Queen's tables, and Queen's own. `messages_consumed` (a history Queen
/// does not keep) skips nothing. Everything else is always copied: queues,
/// partitions, cursors, subscriptions, maintenance flags, streams.
pub const SKIPPABLE: &[(&str, &[&str])] = &[
    ("messages", MESSAGES),
    ("dead_letter_queue", DLQ),
    ("message_traces", TRACES),
    ("message_trace_names", TRACES),
    ("messages_consumed", &[]),
    ("stats", STATS),
    ("stats_history", STATS),
    ("system_metrics", STATS),
    ("worker_metrics", STATS),
    ("worker_metrics_summary", STATS),
    ("queue_lag_metrics", STATS),
    ("retention_history", STATS),
    ("log_segments", MESSAGES),
    ("log_txns", MESSAGES),
    ("log_dlq", DLQ),
    ("stats_queue_minute", STATS),
    ("stats_broker_minute", STATS),
];

/// The tables whose data `names` skip, each once; the first name not in
/// [`SKIPPABLE`] is refused, named.
fn skipped_tables(names: &[String]) -> Result<Vec<&'static str>, EngineError> {
    let mut tables: Vec<&'static str> = Vec::new();
    for name in names {
        let Some((_, skips)) = SKIPPABLE.iter().find(|(known, _)| *known == name) else {
            let known: Vec<&str> = SKIPPABLE.iter().map(|(known, _)| *known).collect();
            return Err(EngineError::MigrationRefused(format!(
                "the data of {name:?} cannot be skipped; the names that can: {}",
                known.join(", ")
            )));
        };
        for table in *skips {
            if !tables.contains(table) {
                tables.push(table);
            }
        }
    }
    Ok(tables)
}

/// Where a copy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationPhase {
    /// No copy since start or the last reset.
    Idle,
    /// Preparing the target.
    Dumping,
    /// `pg_dump | pg_restore` running.
    Restoring,
    /// The last copy finished.
    Complete,
    /// The last copy failed ([`MigrationStatus::error`] says why).
    Error,
}

impl MigrationPhase {
    /// The phase's name on the dashboard.
    pub fn as_str(self) -> &'static str {
        match self {
            MigrationPhase::Idle => "idle",
            MigrationPhase::Dumping => "dumping",
            MigrationPhase::Restoring => "restoring",
            MigrationPhase::Complete => "complete",
            MigrationPhase::Error => "error",
        }
    }

    /// True while a copy runs.
    pub fn is_running(self) -> bool {
        matches!(self, MigrationPhase::Dumping | MigrationPhase::Restoring)
    }
}

/// The bytes of a program's output a status keeps: its last ones.
pub const MAX_OUTPUT_BYTES: usize = 16 * 1024;

/// The end of a program's output, at most [`MAX_OUTPUT_BYTES`].
#[derive(Debug, Clone, Default)]
struct Tail(String);

impl Tail {
    fn push(&mut self, text: &str) {
        self.0.push_str(text);
        if self.0.len() > MAX_OUTPUT_BYTES {
            let mut cut = self.0.len() - MAX_OUTPUT_BYTES;
            while !self.0.is_char_boundary(cut) {
                cut += 1;
            }
            self.0.drain(..cut);
        }
    }

    /// The last line that reports an error, else the last line.
    fn last_error(&self) -> Option<&str> {
        let mut lines = self.0.lines().map(str::trim).filter(|l| !l.is_empty());
        let last = lines.clone().next_back();
        lines.rfind(|line| line.contains("error")).or(last)
    }
}

/// A copy as the status shows it.
#[derive(Debug, Clone)]
pub struct MigrationStatus {
    /// The phase.
    pub phase: MigrationPhase,
    /// What it is doing (or did last).
    pub step: String,
    /// Since the copy started; its whole length once it ended; zero idle.
    pub elapsed: Duration,
    /// Why it failed.
    pub error: Option<String>,
    /// The end of `pg_dump`'s output.
    pub dump_output: String,
    /// The end of `pg_restore`'s output.
    pub restore_output: String,
}

/// The state of this broker's copy.
#[derive(Debug)]
struct Run {
    phase: MigrationPhase,
    step: String,
    started: Option<Instant>,
    ended: Option<Duration>,
    error: Option<String>,
    dump: Tail,
    restore: Tail,
}

impl Run {
    fn idle() -> Run {
        Run {
            phase: MigrationPhase::Idle,
            step: String::new(),
            started: None,
            ended: None,
            error: None,
            dump: Tail::default(),
            restore: Tail::default(),
        }
    }

    fn finish(&mut self, outcome: Result<(), String>) {
        self.ended = self.started.map(|started| started.elapsed());
        match outcome {
            Ok(()) => {
                self.phase = MigrationPhase::Complete;
                "Migration complete".clone_into(&mut self.step);
            }
            Err(error) => {
                self.phase = MigrationPhase::Error;
                self.error = Some(error);
            }
        }
    }
}

/// The copy's state, shared with its task.
type Shared = Arc<Mutex<Run>>;

/// What testing a target found.
#[derive(Debug, Clone)]
pub struct ConnectionTest {
    /// Whether a session could be opened.
    pub ok: bool,
    /// A sentence for the operator.
    pub message: String,
    /// `version()`.
    pub version: Option<String>,
    /// Tables the target holds outside PostgreSQL's own schemas.
    pub user_tables: i64,
    /// Whether it holds Queen's schemas (a copy replaces them).
    pub has_queen_schema: bool,
    /// Why it failed.
    pub error: Option<String>,
}

/// One table in both databases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableCount {
    /// Qualified name.
    pub table: &'static str,
    /// Rows in the source (`None`: no such table there).
    pub source: Option<i64>,
    /// Rows in the target (`None`: no such table there).
    pub target: Option<i64>,
}

impl TableCount {
    /// Whether both sides have the table with as many rows.
    pub fn matches(&self) -> bool {
        self.source.is_some() && self.source == self.target
    }
}

/// Row counts of Queen's tables in the source and a target.
#[derive(Debug, Clone)]
pub struct Validation {
    /// One per table of [`queen_sql::migration::TABLES`]; empty when the
    /// target could not be reached.
    pub tables: Vec<TableCount>,
    /// Why the target could not be reached.
    pub error: Option<String>,
}

impl Validation {
    /// Whether every table matches (false without tables).
    pub fn all_match(&self) -> bool {
        self.error.is_none()
            && !self.tables.is_empty()
            && self.tables.iter().all(TableCount::matches)
    }
}

/// This broker's copies to other databases.
pub struct Migration {
    config: Option<MigrationConfig>,
    pool: deadpool_postgres::Pool,
    run: Shared,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Migration {
    pub(crate) fn new(config: Option<MigrationConfig>, pool: deadpool_postgres::Pool) -> Migration {
        Migration {
            config,
            pool,
            run: Arc::new(Mutex::new(Run::idle())),
            task: Mutex::new(None),
        }
    }

    fn config(&self) -> Result<&MigrationConfig, EngineError> {
        self.config
            .as_ref()
            .ok_or(EngineError::MigrationUnavailable)
    }

    /// Connect to `target` and read what it holds; a failure is an answer,
    /// not an error.
    pub async fn test_connection(&self, target: &MigrationTarget) -> ConnectionTest {
        let failed = |message: String, error: Option<String>| ConnectionTest {
            ok: false,
            message,
            version: None,
            user_tables: 0,
            has_queen_schema: false,
            error,
        };
        if let Err(refused) = target.check() {
            return failed(refused.to_string(), Some(refused.to_string()));
        }
        let summary = async {
            let client = queen_sql::connect::connect_one(&target.config()).await?;
            queen_sql::migration::target_summary(&client).await
        };
        match summary.await {
            Ok(summary) => {
                let message = match (summary.has_queen_schema, summary.user_tables) {
                    (true, _) => "Connection successful; the target holds Queen's schemas, \
                                  which a migration replaces"
                        .to_owned(),
                    (false, 0) => "Connection successful; the target is empty".to_owned(),
                    (false, tables) => format!(
                        "Connection successful; the target holds {tables} other tables, \
                         which a migration leaves alone"
                    ),
                };
                ConnectionTest {
                    ok: true,
                    message,
                    version: Some(summary.version),
                    user_tables: summary.user_tables,
                    has_queen_schema: summary.has_queen_schema,
                    error: None,
                }
            }
            Err(error) => {
                let reason = queen_sql::error_chain(&error);
                failed(format!("Connection failed: {reason}"), Some(reason))
            }
        }
    }

    /// Start copying the source to `target`, skipping the data of `skip`
    /// (names of [`SKIPPABLE`]). Returns once the copy runs, having
    /// connected to the target and taken its migration lock; its progress
    /// and outcome are in [`Migration::status`] (a target that cannot be
    /// reached is a failed copy there). Refused while a copy runs here
    /// ([`EngineError::MigrationInProgress`]) or another broker's copy holds
    /// the target's lock ([`EngineError::MigrationTargetBusy`]).
    pub async fn start(&self, target: MigrationTarget, skip: &[String]) -> Result<(), EngineError> {
        let config = self.config()?.clone();
        target.check()?;
        let skip = skipped_tables(skip)?;
        let previous = {
            let mut run = self.run.lock();
            if run.phase.is_running() {
                return Err(EngineError::MigrationInProgress);
            }
            let mut starting = Run::idle();
            starting.phase = MigrationPhase::Dumping;
            starting.started = Some(Instant::now());
            "Connecting to the target".clone_into(&mut starting.step);
            std::mem::replace(&mut *run, starting)
        };
        tracing::info!(host = %target.host, port = target.port, database = %target.database, ?skip, "migration started");
        // The task connects and locks, then says whether it holds the
        // lock: it, not this caller, puts the state back on a refusal, so
        // a caller that goes away cannot leave the phase running.
        let (locked_tx, locked_rx) = tokio::sync::oneshot::channel();
        let run = Arc::clone(&self.run);
        let task = tokio::spawn(async move {
            let locked = match copy::lock_target(&target).await {
                Ok(Some(locked)) => {
                    let _ = locked_tx.send(true);
                    locked
                }
                Ok(None) => {
                    *run.lock() = previous;
                    let _ = locked_tx.send(false);
                    tracing::warn!(database = %target.database, "migration refused: the target's migration lock is held");
                    return;
                }
                Err(error) => {
                    let _ = locked_tx.send(true);
                    tracing::warn!(%error, "migration failed");
                    run.lock().finish(Err(error));
                    return;
                }
            };
            let outcome = copy::copy(&config, &target, locked, &skip, &run).await;
            match &outcome {
                Ok(()) => tracing::info!(database = %target.database, "migration complete"),
                Err(error) => tracing::warn!(%error, "migration failed"),
            }
            run.lock().finish(outcome);
        });
        *self.task.lock() = Some(task);
        match locked_rx.await {
            Ok(false) => Err(EngineError::MigrationTargetBusy),
            // Started, or the task is gone (aborted at shutdown).
            Ok(true) | Err(_) => Ok(()),
        }
    }

    /// The copy now.
    pub fn status(&self) -> MigrationStatus {
        let run = self.run.lock();
        let elapsed = match (run.ended, run.started) {
            (Some(ended), _) => ended,
            (None, Some(started)) => started.elapsed(),
            (None, None) => Duration::ZERO,
        };
        MigrationStatus {
            phase: run.phase,
            step: run.step.clone(),
            elapsed,
            error: run.error.clone(),
            dump_output: run.dump.0.clone(),
            restore_output: run.restore.0.clone(),
        }
    }

    /// Back to idle after a copy ended; refused while one runs.
    pub fn reset(&self) -> Result<(), EngineError> {
        let mut run = self.run.lock();
        if run.phase.is_running() {
            return Err(EngineError::MigrationInProgress);
        }
        *run = Run::idle();
        Ok(())
    }

    /// Count the rows of Queen's tables in the source and in `target`.
    pub async fn validate(&self, target: &MigrationTarget) -> Result<Validation, EngineError> {
        target.check()?;
        let source = {
            let client = self.pool.get().await.map_err(queen_sql::SqlError::from)?;
            let mut counts = Vec::new();
            for table in queen_sql::migration::TABLES {
                counts.push(queen_sql::migration::count_rows(&**client, table).await?);
            }
            counts
        };
        let target_counts = async {
            let client = queen_sql::connect::connect_one(&target.config()).await?;
            let mut counts = Vec::new();
            for table in queen_sql::migration::TABLES {
                counts.push(queen_sql::migration::count_rows(&client, table).await?);
            }
            Ok::<_, queen_sql::SqlError>(counts)
        };
        match target_counts.await {
            Ok(targets) => Ok(Validation {
                tables: queen_sql::migration::TABLES
                    .iter()
                    .zip(source)
                    .zip(targets)
                    .map(|((table, source), target)| TableCount {
                        table,
                        source,
                        target,
                    })
                    .collect(),
                error: None,
            }),
            Err(error) => Ok(Validation {
                tables: Vec::new(),
                error: Some(format!(
                    "cannot read the target: {}",
                    queen_sql::error_chain(&error)
                )),
            }),
        }
    }

    /// Stop a running copy (its programs are killed): the engine is
    /// shutting down.
    pub(crate) fn shutdown(&self) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
    }
}

impl std::fmt::Debug for Migration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Migration")
            .field("phase", &self.run.lock().phase)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skippable_names_map_to_queen_tables_and_anything_else_is_refused() {
        let names = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            skipped_tables(&names(&[
                "messages",
                "log_segments",
                "stats",
                "system_metrics"
            ]))
            .unwrap(),
            [
                "queen.log_segments",
                "queen.log_txns",
                "queen.stats_queue_minute",
                "queen.stats_broker_minute"
            ]
        );
        assert!(skipped_tables(&names(&["messages_consumed"]))
            .unwrap()
            .is_empty());
        let refused = skipped_tables(&names(&["stats", "queues; rm -rf /"])).unwrap_err();
        assert!(
            refused.to_string().contains("\"queues; rm -rf /\""),
            "{refused}"
        );
        for (_, tables) in SKIPPABLE {
            for table in *tables {
                assert!(queen_sql::migration::TABLES.contains(table), "{table}");
            }
        }
    }

    #[test]
    fn a_tail_keeps_the_last_bytes_on_a_character_boundary() {
        let mut tail = Tail::default();
        tail.push("pg_restore: error: first\n");
        for _ in 0..MAX_OUTPUT_BYTES {
            tail.push("é");
        }
        tail.push("\npg_restore: error: last\nwarning: done\n");
        assert!(tail.0.len() <= MAX_OUTPUT_BYTES);
        assert_eq!(tail.last_error(), Some("pg_restore: error: last"));
    }
}
