//! The push spool (decisions.md §9, wire-api.md §2.2 and §4): a local,
//! append-only, fsync'd log of pushes the database did not take, drained to
//! PostgreSQL in order and idempotently.
//!
//! A push is spooled, and answered `buffered` once its records are on disk,
//! while the spool is *spooling*:
//! - push maintenance mode is on (the cluster-wide flag, `maintenance.rs`);
//! - the database is unreachable: a push failed with a transient error or
//!   did not commit within the bound (`QUEEN_SPOOL_PUSH_TIMEOUT_MS`); that
//!   push is spooled whole and every later one until the drainer reaches the
//!   database again;
//! - records are still waiting to be drained: new pushes queue behind them,
//!   so a partition's messages reach the log in the order they were answered.
//!
//! Records carry their transaction id (the broker fixes one before the
//! first attempt when the client sent none), so a replay is idempotent: the
//! drainer pushes through fusion with the duplicate probe on, behind its own
//! check beyond the dedup window (`push/replay.rs`), and the
//! drained offset of each log is recorded after every chunk, so after a
//! crash only the chunk in flight is pushed again (and found duplicate).
//!
//! The drainer runs while push maintenance is off and the database answers:
//! it closes the active log, pushes the closed logs oldest first in chunks,
//! and removes each log once pushed. Records it cannot push for a reason a
//! retry cannot fix (a queue that needs an encryption key this broker lacks)
//! go to a `failed-*.log` file and are counted as failed.
//!
//! Records whose queue is full (`maxSize`) when they are drained are *held*
//!: moved to `held.log`, in order, and retried with
//! backoff ([`HELD_FIRST_RETRY`](held::HELD_FIRST_RETRY) doubling to [`HELD_MAX_RETRY`](held::HELD_MAX_RETRY), back to the
//! first after a retry stored some), each retry storing as long a prefix as
//! the queue takes (attempts of one record while it is full, doubling as
//! they are stored, halving when refused). While a queue
//! has held records, later records of it are held behind them, and a direct
//! push naming it answers 429 (`EngineError::QueueFull`) instead of jumping
//! the queue; other queues' pushes go to the database as usual.
//!
//! The spool is bounded by `QUEEN_SPOOL_MAX_MB` of undrained and held
//! records: past it a push answers 503 (`EngineError::SpoolFull`) and
//! nothing of it is written. File layout and record format: `file.rs`;
//! the writer thread: `writer.rs`; the drainer: `drain.rs`; held records:
//! `held.rs`.

mod drain;
mod file;
mod held;
mod writer;

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, watch, Notify};

use crate::naming::queue_key;
use crate::push::{PushItem, PushOutcome};
use crate::EngineError;
use file::Record;
use held::HeldQueue;
use writer::Command;

/// How the spool is set up (`FILE_BUFFER_DIR`, `QUEEN_SPOOL_MAX_MB`,
/// `QUEEN_SPOOL_PUSH_TIMEOUT_MS`).
#[derive(Debug, Clone)]
pub struct SpoolConfig {
    /// The directory of the spool files; created if missing. One broker
    /// process per directory.
    pub dir: PathBuf,
    /// The most bytes of undrained records the spool holds.
    pub max_bytes: u64,
    /// How long a push may take to commit before it is spooled instead.
    pub push_timeout: Duration,
    /// A directory an earlier version spooled into (the broker's old default
    /// directory): the spool files it holds are moved into `dir` when the
    /// spool opens, if `dir` holds no records, `adopt` names no other
    /// database than `database`, and no other running broker holds it
    /// (else they stay, and a warning says why).
    pub adopt: Option<PathBuf>,
    /// The Queen database the broker stores into (`queen.database_identity`,
    /// `queen_sql::system::database_id`). The spool records it in `dir`
    /// (file `DATABASE`) and refuses to open a directory that holds records
    /// spooled for another one, so they are never drained there. `None`
    /// checks and records nothing: only for a caller that keeps one spool
    /// directory per database itself (the server always sets it).
    pub database: Option<uuid::Uuid>,
}

/// A pushed item that was spooled, not yet stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buffered {
    /// Queue name.
    pub queue: String,
    /// Partition name.
    pub partition: String,
    /// The transaction id it will be stored under.
    pub transaction_id: String,
}

/// What the spool holds and how it fares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpoolStats {
    /// Records waiting to be drained (held ones included).
    pub pending: u64,
    /// Their bytes.
    pub pending_bytes: u64,
    /// Of them, records held because their queue was full at drain.
    pub held: u64,
    /// Queues with held records.
    pub held_queues: u64,
    /// Retries of held records (since start).
    pub held_retries: u64,
    /// How long ago the oldest waiting record was accepted (`None` when
    /// nothing waits, or its record does not say).
    pub oldest_age: Option<Duration>,
    /// Records the drainer could not push (kept in `failed-*.log`).
    pub failed: u64,
    /// Files of failed records, and their bytes.
    pub failed_files: u64,
    /// Bytes of the failed-record files.
    pub failed_bytes: u64,
    /// Records spooled because the database was unreachable (since start).
    pub failover: u64,
    /// Records drained into the database (since start).
    pub drained: u64,
    /// False while the database is considered unreachable.
    pub db_healthy: bool,
    /// False after the last spool write failed.
    pub healthy: bool,
    /// True while pushes are spooled.
    pub spooling: bool,
}

/// Why a push is spooled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// The spool was already spooling.
    Spooling,
    /// The push could not reach the database.
    Outage,
}

/// How the drainer stores what it drains: the engine's push path without the
/// spool (fusion, or one transaction for a bounded queue), behind the
/// drain's duplicate check, handed in by the facade. With each item, how far
/// back that check looks (when it was accepted, less the push timeout and
/// clock slack; the epoch for records that do not say), and the drain
/// pass it belongs to.
pub(crate) type Store = Arc<
    dyn Fn(
            Vec<PushItem>,
            Vec<SystemTime>,
            Pass,
        ) -> Pin<Box<dyn Future<Output = Result<Vec<PushOutcome>, EngineError>> + Send>>
        + Send
        + Sync,
>;

/// One drain pass (a drain of the closed logs, `drain.rs`, or a retry of held records, `held.rs`):
/// the upper bound of its duplicate check, the database's clock at its first
/// probe (`None` until then). What the pass stores itself is newer, and not
/// probed again by its later chunks.
pub(crate) type Pass = Arc<Mutex<Option<SystemTime>>>;

/// Where a push goes (see [`Spool::route`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// To the database.
    Direct,
    /// To the spool.
    Spool,
    /// Refused: the queue has held records (it was full at drain).
    Held(String),
}

struct State {
    /// False until the maintenance flags were read once: a spool left by an
    /// earlier run must not drain into a database in maintenance mode.
    flags_known: bool,
    maintenance: bool,
    outage: bool,
    /// Log records not yet drained.
    pending: u64,
    pending_bytes: u64,
    /// Records in `held.log`, their bytes, and their queues (by queue key).
    held: u64,
    held_bytes: u64,
    held_queues: HashMap<String, HeldQueue>,
    held_retries: u64,
    /// When the oldest undrained log record was accepted, and the oldest
    /// held one (`None`: none, or not recorded).
    log_front: Option<SystemTime>,
    held_oldest: Option<SystemTime>,
    failed: u64,
    failover: u64,
    /// The failed-records files and their bytes (counted at open, then
    /// kept up to date by the drainer, so a status read does no I/O).
    failed_files: u64,
    failed_bytes: u64,
    drained: u64,
    healthy: bool,
}

impl State {
    fn spooling(&self) -> bool {
        self.maintenance || self.outage || self.pending > 0
    }
}

/// Move what an earlier version left in `from` into `to` (locked by the
/// caller, spooling for `database`), under `from`'s lock: a broker still
/// running there keeps it. Only into a `to` that holds no records (else the
/// two spools' orders could not both be kept), and only a spool that names
/// no other database (an earlier version's names none: nothing tells which
/// database it spooled for, and it is taken as this broker's).
fn adopt(from: &Path, to: &Path, database: Option<uuid::Uuid>) -> std::io::Result<()> {
    if from == to || !from.is_dir() {
        return Ok(());
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(from.join("LOCK"))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            tracing::warn!(
                from = %from.display(),
                to = %to.display(),
                "another running broker holds the spool directory of an earlier version; \
                 what it holds stays there (moved here at a start when nothing holds it)"
            );
            return Ok(());
        }
        Err(std::fs::TryLockError::Error(error)) => return Err(error),
    }
    if !file::holds_records(from)? {
        return Ok(());
    }
    if let (Some(theirs), Some(ours)) = (file::recorded_database(from)?, database) {
        if theirs != ours {
            tracing::warn!(
                from = %from.display(),
                to = %to.display(),
                spooled_for = %theirs,
                database = %ours,
                "the spool directory of an earlier version holds pushes for another Queen \
                 database; they stay there (a broker of that database drains them)"
            );
            return Ok(());
        }
    }
    if !file::can_adopt_into(to)? {
        tracing::warn!(
            from = %from.display(),
            to = %to.display(),
            "this broker's spool directory already holds pushes, so what an earlier version \
             spooled stays where it is; drain it with FILE_BUFFER_DIR set to it"
        );
        return Ok(());
    }
    let adopted = file::adopt(from, to)?;
    if adopted != file::Adopted::default() {
        tracing::info!(
            from = %from.display(),
            to = %to.display(),
            logs = adopted.logs,
            failed_files = adopted.failed,
            held_records = adopted.held,
            "moved the spool an earlier version left into this broker's spool directory"
        );
    }
    Ok(())
}

/// Check that `dir` spools for `database` and record it there: a directory
/// that holds records of another database is refused, an empty one is
/// taken over.
fn claim(dir: &Path, database: uuid::Uuid) -> std::io::Result<()> {
    match file::recorded_database(dir)? {
        Some(recorded) if recorded == database => Ok(()),
        Some(recorded) if file::holds_records(dir)? => Err(std::io::Error::other(format!(
            "{} holds pushes spooled for Queen database {recorded}, and this broker's database \
             is {database}: a spool is never drained into another database. Drain it with a \
             broker of that database (FILE_BUFFER_DIR set to it), or move it away",
            dir.display()
        ))),
        _ => file::record_database(dir, database),
    }
}

/// Remove the progress files of `dir` whose log is gone (left by a crash
/// between the two removals of a drained log); answers the largest such
/// sequence number, which is never handed out again.
fn remove_orphan_positions(dir: &Path) -> std::io::Result<Option<u64>> {
    let seqs = file::logs(dir)?;
    let mut largest = None;
    for seq in file::positions(dir)?
        .into_iter()
        .filter(|seq| !seqs.contains(seq))
    {
        file::remove_position(dir, seq)?;
        largest = largest.max(Some(seq));
    }
    Ok(largest)
}

/// The spool component.
pub(crate) struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    push_timeout: Duration,
    state: Mutex<State>,
    writer: mpsc::UnboundedSender<Command>,
    wake: Notify,
    stop: watch::Sender<bool>,
    drainer: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The directory's lock, held while the spool lives.
    _lock: std::fs::File,
}

impl Spool {
    /// Open the spool in `config.dir` (counting what earlier runs left
    /// undrained), start its writer thread and its drainer.
    pub(crate) fn open(
        config: &SpoolConfig,
        store: Store,
        pool: deadpool_postgres::Pool,
    ) -> std::io::Result<Arc<Spool>> {
        std::fs::create_dir_all(&config.dir)?;
        // One broker per directory: a second one would drain (and remove)
        // the first one's logs. The lock also proves the directory writable.
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(config.dir.join("LOCK"))?;
        lock.try_lock().map_err(|error| match error {
            std::fs::TryLockError::WouldBlock => std::io::Error::other(format!(
                "{} is the spool of another running broker (FILE_BUFFER_DIR must differ per \
                 broker; unset, it is ./queen-buffers/<PORT>, one per port)",
                config.dir.display()
            )),
            std::fs::TryLockError::Error(error) => error,
        })?;
        // A crash between the two removals of a drained log leaves its
        // progress file: remove it (before an adoption, whose files keep
        // their numbers), and never hand out its number again.
        let mut orphan = remove_orphan_positions(&config.dir)?;
        if let Some(database) = config.database {
            claim(&config.dir, database)?;
        }
        if let Some(from) = &config.adopt {
            adopt(from, &config.dir, config.database)?;
            orphan = orphan.max(remove_orphan_positions(&config.dir)?);
        }
        let seqs = file::logs(&config.dir)?;
        let (mut pending, mut pending_bytes) = (0u64, 0u64);
        let mut log_front = None;
        for &seq in &seqs {
            let bytes = std::fs::read(file::log_path(&config.dir, seq))?;
            let from = usize::try_from(file::drained(&config.dir, seq)?).unwrap_or(usize::MAX);
            let (records, _) = file::records(bytes.get(from..).unwrap_or_default());
            if pending == 0 {
                log_front = records.first().and_then(|(record, _)| record.accepted_at());
            }
            pending += records.len() as u64;
            pending_bytes += records.last().map_or(0, |(_, end)| *end as u64);
        }
        // Held records of an earlier run: retried soon. A torn tail (a
        // crash while appending, before the source log's progress was
        // recorded: those records are drained again) is cut off, so later
        // appends follow a whole record.
        let held_bytes = file::read_held(&config.dir)?;
        let (held_records, torn) = file::records(&held_bytes);
        let held_len = held_records.last().map_or(0, |(_, end)| *end);
        if torn {
            file::rewrite_held(&config.dir, held_bytes.get(..held_len).unwrap_or_default())?;
        }
        let mut held_queues = HashMap::new();
        for (record, _) in &held_records {
            held_queues
                .entry(queue_key(&record.tenant, &record.queue).into_owned())
                .or_insert_with(HeldQueue::now);
        }
        let held_oldest = held_records
            .iter()
            .filter_map(|(record, _)| record.accepted_at())
            .min();
        if pending > 0 || !held_records.is_empty() {
            tracing::info!(
                records = pending,
                held = held_records.len(),
                "the spool holds pushes from an earlier run; draining them"
            );
        }
        let (failed_files, failed_bytes) = file::failed_files(&config.dir);
        let next_seq = seqs
            .iter()
            .copied()
            .chain(orphan)
            .max()
            .map_or(1, |last| last + 1);
        let (writer, commands) = mpsc::unbounded_channel();
        let dir = config.dir.clone();
        std::thread::Builder::new()
            .name("queen-spool".to_owned())
            .spawn(move || writer::run_writer(&dir, next_seq, commands))?;
        let (stop, stopped) = watch::channel(false);
        let spool = Arc::new(Spool {
            dir: config.dir.clone(),
            max_bytes: config.max_bytes,
            push_timeout: config.push_timeout,
            state: Mutex::new(State {
                flags_known: false,
                maintenance: false,
                outage: false,
                pending,
                pending_bytes,
                held: held_records.len() as u64,
                held_bytes: held_len as u64,
                held_queues,
                held_retries: 0,
                log_front,
                held_oldest,
                failed: 0,
                failover: 0,
                drained: 0,
                healthy: true,
                failed_files,
                failed_bytes,
            }),
            writer,
            wake: Notify::new(),
            stop,
            drainer: Mutex::new(None),
            _lock: lock,
        });
        let handle = tokio::spawn(drain::run_drainer(Arc::clone(&spool), store, pool, stopped));
        *spool.drainer.lock() = Some(handle);
        Ok(spool)
    }

    /// How long a direct push may take before it is spooled.
    pub(crate) fn push_timeout(&self) -> Duration {
        self.push_timeout
    }

    /// Where a push to the queues `keys` (`naming::queue_key`) goes: the
    /// spool while it is spooling; refused while a queue it names has held
    /// records (they go first); else the database.
    pub(crate) fn route<'a>(&self, mut keys: impl Iterator<Item = &'a str>) -> Route {
        let state = self.state.lock();
        if state.spooling() {
            return Route::Spool;
        }
        if state.held_queues.is_empty() {
            return Route::Direct;
        }
        match keys.find(|key| state.held_queues.contains_key(*key)) {
            Some(key) => Route::Held(key.to_owned()),
            None => Route::Direct,
        }
    }

    /// Push maintenance mode on or off (off lets the drainer run).
    pub(crate) fn set_maintenance(&self, enabled: bool) {
        {
            let mut state = self.state.lock();
            state.maintenance = enabled;
            state.flags_known = true;
        }
        self.wake.notify_one();
    }

    /// Whether push maintenance mode is on.
    pub(crate) fn maintenance(&self) -> bool {
        self.state.lock().maintenance
    }

    /// Spool `items` (every one with its transaction id fixed); answers
    /// once they are on disk.
    pub(crate) async fn append(
        &self,
        items: &[PushItem],
        reason: Reason,
    ) -> Result<Vec<Buffered>, EngineError> {
        let mut bytes = Vec::with_capacity(items.iter().map(|i| i.payload.len() + 104).sum());
        let mut buffered = Vec::with_capacity(items.len());
        let accepted_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .ok()
            .and_then(|since| u64::try_from(since.as_millis()).ok());
        for item in items {
            let transaction_id = item.transaction_id.clone().ok_or(EngineError::Internal(
                "a spooled item has no transaction id",
            ))?;
            Record {
                tenant: item.tenant.to_string(),
                queue: item.queue.clone(),
                partition: item.partition.clone(),
                transaction_id: transaction_id.clone(),
                trace_id: item.trace_id,
                producer_sub: item.producer_sub.clone(),
                payload: item.payload.clone(),
                accepted_ms,
            }
            .encode(&mut bytes);
            buffered.push(Buffered {
                queue: item.queue.clone(),
                partition: item.partition.clone(),
                transaction_id,
            });
        }
        let (n, len) = (items.len() as u64, bytes.len() as u64);
        let (reply, answer) = oneshot::channel();
        {
            // Counted and queued under the lock: the drainer declares the
            // spool empty only under it, so no record is ever left behind.
            let mut state = self.state.lock();
            if state.pending_bytes + state.held_bytes + len > self.max_bytes {
                return Err(EngineError::SpoolFull);
            }
            if state.pending == 0 {
                state.log_front = accepted_ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
            }
            if reason == Reason::Outage {
                if !state.outage {
                    tracing::warn!("the database is unreachable; pushes go to the spool");
                }
                state.outage = true;
                state.failover += n;
            }
            state.pending += n;
            state.pending_bytes += len;
            if self.writer.send(Command::Append { bytes, reply }).is_err() {
                state.pending -= n;
                state.pending_bytes -= len;
                return Err(EngineError::ShuttingDown);
            }
        }
        let written = answer
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("the spool writer stopped")));
        let mut state = self.state.lock();
        match written {
            Ok(()) => {
                state.healthy = true;
                Ok(buffered)
            }
            Err(error) => {
                tracing::error!(%error, dir = %self.dir.display(), "cannot write the spool");
                state.healthy = false;
                state.pending = state.pending.saturating_sub(n);
                state.pending_bytes = state.pending_bytes.saturating_sub(len);
                Err(EngineError::SpoolWrite(error))
            }
        }
    }

    /// What the spool holds now.
    pub(crate) fn stats(&self) -> SpoolStats {
        let state = self.state.lock();
        let oldest = match (state.log_front, state.held_oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        SpoolStats {
            pending: state.pending + state.held,
            pending_bytes: state.pending_bytes + state.held_bytes,
            held: state.held,
            held_queues: state.held_queues.len() as u64,
            held_retries: state.held_retries,
            oldest_age: oldest.map(|at| SystemTime::now().duration_since(at).unwrap_or_default()),
            failed: state.failed,
            failed_files: state.failed_files,
            failed_bytes: state.failed_bytes,
            failover: state.failover,
            drained: state.drained,
            db_healthy: !state.outage,
            healthy: state.healthy,
            spooling: state.spooling(),
        }
    }

    /// Stop the drainer (what it holds stays on disk for the next start).
    pub(crate) async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let handle = self.drainer.lock().take();
        if let Some(handle) = handle {
            let _ = handle.await;
        }
    }

    /// How far back the drain's duplicate check looks for `record`: to when
    /// it was accepted, less the push timeout (a direct attempt that timed
    /// out may have committed that early) and the clock slack; to the epoch
    /// when the record does not say.
    fn probe_since(&self, record: &Record) -> SystemTime {
        record
            .accepted_at()
            .and_then(|at| at.checked_sub(self.push_timeout + crate::push::CLOCK_SLACK))
            .unwrap_or(UNIX_EPOCH)
    }

    /// Ask the writer to close the active log.
    async fn rotate(&self) -> Option<u64> {
        let (reply, answer) = oneshot::channel();
        self.writer.send(Command::Rotate { reply }).ok()?;
        answer.await.ok()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config(dir: &Path) -> SpoolConfig {
        SpoolConfig {
            dir: dir.to_owned(),
            max_bytes: 1 << 20,
            push_timeout: Duration::from_secs(1),
            adopt: None,
            database: None,
        }
    }

    /// A pool that reaches no server (the spool never needs it here) and a
    /// store that refuses (nothing is drained: maintenance is never read).
    fn parts() -> (Store, deadpool_postgres::Pool) {
        let mut db = deadpool_postgres::tokio_postgres::Config::new();
        db.host_path("/nonexistent-queen-socket-dir").user("nobody");
        let pool = queen_sql::connect::pool(db, 1).unwrap();
        let store: Store = Arc::new(|_, _, _| Box::pin(async { Err(EngineError::ShuttingDown) }));
        (store, pool)
    }

    fn item(n: usize) -> PushItem {
        PushItem {
            tenant: crate::naming::default_tenant(),
            queue: "q".to_owned(),
            partition: "p".to_owned(),
            transaction_id: Some(format!("t{n}")),
            trace_id: None,
            producer_sub: None,
            payload: bytes::Bytes::from_static(b"{}"),
        }
    }

    #[tokio::test]
    async fn a_second_spool_on_one_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (store, pool) = parts();
        let first = Spool::open(&config(dir.path()), Arc::clone(&store), pool.clone()).unwrap();
        let Err(error) = Spool::open(&config(dir.path()), store, pool) else {
            panic!("a second spool opened the same directory");
        };
        assert!(
            error
                .to_string()
                .contains("the spool of another running broker"),
            "{error}"
        );
        first.shutdown().await;
    }

    #[tokio::test]
    async fn a_progress_file_without_its_log_is_removed_and_its_number_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        // What a crash between the two removals of a drained log leaves.
        file::set_drained(dir.path(), 7, 123).unwrap();
        let (store, pool) = parts();
        let spool = Spool::open(&config(dir.path()), store, pool).unwrap();
        assert!(file::positions(dir.path()).unwrap().is_empty());
        spool
            .append(&[item(1), item(2)], Reason::Spooling)
            .await
            .unwrap();
        assert_eq!(file::logs(dir.path()).unwrap(), [8]);
        assert_eq!(file::drained(dir.path(), 8).unwrap(), 0);
        assert_eq!(spool.stats().pending, 2);
        spool.shutdown().await;
        drop(spool);
        // Reopened: what it holds is counted again.
        let (store, pool) = parts();
        let again = Spool::open(&config(dir.path()), store, pool).unwrap();
        assert_eq!(again.stats().pending, 2);
        again.shutdown().await;
    }

    /// A spool directory names the database it spools for: one holding
    /// records of another is refused (nothing of it is drained there), an
    /// empty one is taken over.
    #[tokio::test]
    async fn a_directory_holding_another_databases_records_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
        let of = |database| SpoolConfig {
            database: Some(database),
            ..config(dir.path())
        };
        let (store, pool) = parts();
        let spool = Spool::open(&of(a), store, pool).unwrap();
        assert_eq!(file::recorded_database(dir.path()).unwrap(), Some(a));
        spool.append(&[item(1)], Reason::Spooling).await.unwrap();
        spool.shutdown().await;
        drop(spool);

        let (store, pool) = parts();
        let Err(error) = Spool::open(&of(b), store, pool) else {
            panic!("a spool of database {a} opened for {b}");
        };
        let text = error.to_string();
        assert!(
            text.contains(&format!("spooled for Queen database {a}"))
                && text.contains(&format!("this broker's database is {b}")),
            "{text}"
        );
        assert_eq!(file::recorded_database(dir.path()).unwrap(), Some(a));
        assert_eq!(file::logs(dir.path()).unwrap().len(), 1, "nothing moved");

        // Its own database opens it; once empty, another takes it over.
        let (store, pool) = parts();
        let again = Spool::open(&of(a), store, pool).unwrap();
        assert_eq!(again.stats().pending, 1);
        again.shutdown().await;
        drop(again);
        for seq in file::logs(dir.path()).unwrap() {
            file::remove_log(dir.path(), seq).unwrap();
        }
        let (store, pool) = parts();
        let taken = Spool::open(&of(b), store, pool).unwrap();
        assert_eq!(file::recorded_database(dir.path()).unwrap(), Some(b));
        taken.shutdown().await;
    }

    /// An earlier version's spool is adopted only into a directory holding
    /// no records, and only when it names no other database.
    #[tokio::test]
    async fn an_old_spool_is_adopted_only_into_an_empty_directory_of_its_database() {
        let root = tempfile::tempdir().unwrap();
        let old = root.path().join("old");
        let ours = uuid::Uuid::now_v7();
        let open = |dir: &Path, adopt: Option<&Path>, database| {
            let (store, pool) = parts();
            Spool::open(
                &SpoolConfig {
                    adopt: adopt.map(Path::to_owned),
                    database: Some(database),
                    ..config(dir)
                },
                store,
                pool,
            )
            .unwrap()
        };
        // The earlier version's spool: two records, no database named.
        let earlier = open(&old, None, ours);
        earlier
            .append(&[item(1), item(2)], Reason::Spooling)
            .await
            .unwrap();
        earlier.shutdown().await;
        drop(earlier);
        std::fs::remove_file(old.join("DATABASE")).unwrap();

        // A directory with a record of its own keeps it and adopts nothing.
        let busy = root.path().join("busy");
        let spool = open(&busy, None, ours);
        spool.append(&[item(3)], Reason::Spooling).await.unwrap();
        spool.shutdown().await;
        drop(spool);
        let spool = open(&busy, Some(&old), ours);
        assert_eq!(spool.stats().pending, 1);
        assert_eq!(file::logs(&old).unwrap().len(), 1, "left where it was");
        spool.shutdown().await;
        drop(spool);

        // Another database's spool is not adopted.
        file::record_database(&old, uuid::Uuid::now_v7()).unwrap();
        let other = root.path().join("other");
        let spool = open(&other, Some(&old), ours);
        assert_eq!(spool.stats().pending, 0);
        assert_eq!(file::logs(&old).unwrap().len(), 1, "left where it was");
        spool.shutdown().await;
        drop(spool);

        // An empty directory adopts it, unnamed or named ours.
        for (dir, named) in [("fresh", None), ("named", Some(ours))] {
            let from = root.path().join(format!("{dir}-old"));
            std::fs::create_dir(&from).unwrap();
            for seq in file::logs(&old).unwrap() {
                std::fs::copy(file::log_path(&old, seq), file::log_path(&from, seq)).unwrap();
            }
            if let Some(id) = named {
                file::record_database(&from, id).unwrap();
            }
            let dir = root.path().join(dir);
            let spool = open(&dir, Some(&from), ours);
            assert_eq!(spool.stats().pending, 2, "{dir:?}");
            assert!(file::logs(&from).unwrap().is_empty());
            assert_eq!(file::recorded_database(&dir).unwrap(), Some(ours));
            spool.shutdown().await;
        }
    }
}
