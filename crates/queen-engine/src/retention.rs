//! The retention and eviction loops (decisions.md §8): every
//! `RETENTION_INTERVAL` one pass of `log_retention_step_v1` steps, and every
//! `EVICTION_INTERVAL` one of `log_eviction_step_v1` steps (queue option
//! `maxWaitTimeSeconds`), each step one transaction of bounded work, until a
//! step reports nothing more to do (or [`MAX_STEPS_PER_PASS`]).
//!
//! What a step deletes and why its cost scales with deletable work, not with
//! the partition count, is in `sql/procedures/retention.sql`. Only one broker
//! sweeps at a time (the step's advisory try-lock); the others' steps answer
//! skipped and wait for their next tick. Errors are logged and the pass ends;
//! the next tick tries again.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use queen_sql::retention::RetentionStep;
use queen_sql::SqlError;
use tokio::sync::watch;

use crate::EngineError;

/// Partitions one step looks at, per phase. Small: the rows a step locks
/// stay locked until it commits, and a push to one of them waits for that.
const MAX_PARTITIONS_PER_STEP: i32 = 32;

/// Segments (or sidecar rows) one step deletes per partition.
const MAX_SEGMENTS_PER_STEP: i32 = 256;
/// Statistics rows of each table one retention pass purges at most.
const MAX_STATS_ROWS_PER_PASS: i32 = 10_000;

/// Steps one pass runs before it waits for the next tick.
const MAX_STEPS_PER_PASS: usize = 512;

/// What retention removed since the engine started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionStats {
    /// Passes run (a pass another broker's sweep held off counts too).
    pub passes: u64,
    /// Segments deleted.
    pub segments: u64,
    /// Messages in them.
    pub messages: u64,
    /// Sidecar rows purged.
    pub txn_rows: u64,
    /// Segments evicted (`maxWaitTimeSeconds`).
    pub evicted_segments: u64,
    /// Empty, idle partitions removed (`QUEEN_PARTITION_IDLE_SECONDS`).
    pub partitions_removed: u64,
    /// Messages in them.
    pub evicted_messages: u64,
    /// Statistics rows purged (older than `QUEEN_STATS_RETENTION_DAYS`).
    pub stats_rows: u64,
}

impl RetentionStats {
    /// Count `other` in as well (its `passes` too).
    fn add(&mut self, other: &RetentionStats) {
        self.passes += other.passes;
        self.segments += other.segments;
        self.messages += other.messages;
        self.txn_rows += other.txn_rows;
        self.evicted_segments += other.evicted_segments;
        self.evicted_messages += other.evicted_messages;
        self.partitions_removed += other.partitions_removed;
        self.stats_rows += other.stats_rows;
    }
}

/// What retention removed since start, shared by the loops and the facade.
type Counters = Mutex<RetentionStats>;

/// Which loop a pass belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sweep {
    /// Retention steps, then partition cleanup when `partition_idle` is set.
    Retention {
        partition_idle: Option<Duration>,
        /// Statistics rows older than this are purged.
        stats_retention: Duration,
    },
    Eviction,
}

/// The retention component: its loop task and its counters.
pub(crate) struct Retention {
    pool: deadpool_postgres::Pool,
    /// Idle time after which an empty partition is removed (`None`: never).
    partition_idle: Option<Duration>,
    /// Age past which statistics rows are purged.
    stats_retention: Duration,
    /// Where per-queue removals are counted for the statistics rows.
    stats: Arc<crate::stats::Stats>,
    counters: Arc<Counters>,
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Retention {
    /// Start the loops on the current runtime: retention every
    /// `retention_interval`, eviction every `eviction_interval` of `config`
    /// (`None`: no such loop; passes run only when asked).
    pub(crate) fn start(
        pool: deadpool_postgres::Pool,
        config: &crate::EngineConfig,
        stats: Arc<crate::stats::Stats>,
    ) -> Retention {
        let partition_idle = config.partition_idle;
        let stats_retention = config.stats_retention;
        let (retention, eviction) = (config.retention_interval, config.eviction_interval);
        let counters = Arc::new(Counters::default());
        let (stop, stopped) = watch::channel(false);
        let tasks = [
            (
                Sweep::Retention {
                    partition_idle,
                    stats_retention,
                },
                retention,
            ),
            (Sweep::Eviction, eviction),
        ]
        .into_iter()
        .filter_map(|(sweep, interval)| {
            let interval = interval?;
            Some(tokio::spawn(run(
                pool.clone(),
                Arc::clone(&counters),
                Arc::clone(&stats),
                sweep,
                interval,
                stopped.clone(),
            )))
        })
        .collect();
        Retention {
            pool,
            partition_idle,
            stats_retention,
            stats,
            counters,
            stop,
            tasks: Mutex::new(tasks),
        }
    }

    /// Run one retention pass now.
    pub(crate) async fn pass(&self) -> Result<RetentionStats, EngineError> {
        let sweep = Sweep::Retention {
            partition_idle: self.partition_idle,
            stats_retention: self.stats_retention,
        };
        pass(&self.pool, &self.counters, &self.stats, sweep).await
    }

    /// Run one eviction pass now.
    pub(crate) async fn evict(&self) -> Result<RetentionStats, EngineError> {
        pass(&self.pool, &self.counters, &self.stats, Sweep::Eviction).await
    }

    /// What retention removed since start.
    pub(crate) fn stats(&self) -> RetentionStats {
        *self.counters.lock()
    }

    /// Stop the loops (after their current step).
    pub(crate) async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let tasks = std::mem::take(&mut *self.tasks.lock());
        for task in tasks {
            let _ = task.await;
        }
    }
}

/// One loop: a pass of `sweep` every `interval` until stopped.
async fn run(
    pool: deadpool_postgres::Pool,
    counters: Arc<Counters>,
    stats: Arc<crate::stats::Stats>,
    sweep: Sweep,
    interval: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stopped.changed() => return,
        }
        if let Err(error) = pass(&pool, &counters, &stats, sweep).await {
            if error.is_transient() {
                tracing::debug!(error = %crate::error_chain(&error), ?sweep, "pass failed");
            } else {
                tracing::warn!(error = %crate::error_chain(&error), ?sweep, "pass failed");
            }
        }
    }
}

/// One pass of `sweep`: steps until one says there is no more, then (a
/// retention pass with a partition idle time) one partition cleanup step,
/// answering what this pass removed.
async fn pass(
    pool: &deadpool_postgres::Pool,
    counters: &Counters,
    stats: &crate::stats::Stats,
    sweep: Sweep,
) -> Result<RetentionStats, EngineError> {
    counters.lock().passes += 1;
    let client = pool.get().await.map_err(SqlError::from)?;
    let mut removed = RetentionStats {
        passes: 1,
        ..RetentionStats::default()
    };
    for _ in 0..MAX_STEPS_PER_PASS {
        let (step, done) = match sweep {
            Sweep::Retention { .. } => {
                let step: RetentionStep = queen_sql::retention::step(
                    &**client,
                    MAX_PARTITIONS_PER_STEP,
                    MAX_SEGMENTS_PER_STEP,
                )
                .await?;
                for (queue, by_time, completed) in &step.by_queue {
                    stats.retained(queue, *by_time, *completed);
                }
                let removed = RetentionStats {
                    segments: u64::from(step.segments),
                    messages: step.messages,
                    txn_rows: u64::from(step.txn_rows),
                    ..RetentionStats::default()
                };
                (removed, step.skipped || !step.more)
            }
            Sweep::Eviction => {
                let step = queen_sql::retention::evict_step(
                    &**client,
                    MAX_PARTITIONS_PER_STEP,
                    MAX_SEGMENTS_PER_STEP,
                )
                .await?;
                for (queue, messages) in &step.by_queue {
                    stats.evicted(queue, *messages);
                }
                let removed = RetentionStats {
                    evicted_segments: u64::from(step.segments),
                    evicted_messages: step.messages,
                    ..RetentionStats::default()
                };
                (removed, step.skipped || !step.more)
            }
        };
        counters.lock().add(&step);
        removed.add(&step);
        if done {
            break;
        }
    }
    if let Sweep::Retention {
        stats_retention, ..
    } = sweep
    {
        let before = std::time::SystemTime::now()
            .checked_sub(stats_retention)
            .unwrap_or(std::time::UNIX_EPOCH);
        let purged = queen_sql::stats::purge(&**client, before, MAX_STATS_ROWS_PER_PASS).await?;
        let step = RetentionStats {
            stats_rows: u64::try_from(purged).unwrap_or(0),
            ..RetentionStats::default()
        };
        counters.lock().add(&step);
        removed.add(&step);
    }
    if let Sweep::Retention {
        partition_idle: Some(idle),
        ..
    } = sweep
    {
        let idle = i32::try_from(idle.as_secs()).unwrap_or(i32::MAX);
        let gone =
            queen_sql::retention::cleanup_step(&**client, idle, MAX_PARTITIONS_PER_STEP).await?;
        for (queue, partitions) in &gone.by_queue {
            stats.partitions_removed(queue, *partitions);
        }
        let step = RetentionStats {
            partitions_removed: u64::from(gone.removed),
            ..RetentionStats::default()
        };
        counters.lock().add(&step);
        removed.add(&step);
    }
    if removed.segments
        + removed.txn_rows
        + removed.evicted_segments
        + removed.partitions_removed
        + removed.stats_rows
        > 0
    {
        tracing::info!(
            segments = removed.segments,
            messages = removed.messages,
            sidecar_rows = removed.txn_rows,
            evicted_segments = removed.evicted_segments,
            evicted_messages = removed.evicted_messages,
            partitions_removed = removed.partitions_removed,
            stats_rows = removed.stats_rows,
            ?sweep,
            "retention pass"
        );
    }
    Ok(removed)
}
