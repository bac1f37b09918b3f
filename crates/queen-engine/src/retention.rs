//! The retention loop (decisions.md §8): every `RETENTION_INTERVAL` one pass
//! of `log_retention_step_v1` steps, each one transaction of bounded work,
//! until a step reports nothing more to do (or [`MAX_STEPS_PER_PASS`]).
//!
//! What a step deletes and why its cost scales with deletable work, not with
//! the partition count, is in `sql/procedures/retention.sql`. Only one broker
//! sweeps at a time (the step's advisory try-lock); the others' steps answer
//! skipped and wait for their next tick. Errors are logged and the pass ends;
//! the next tick tries again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use queen_sql::retention::RetentionStep;
use queen_sql::SqlError;
use tokio::sync::watch;

use crate::EngineError;

/// Partitions one step looks at, per phase.
const MAX_PARTITIONS_PER_STEP: i32 = 256;

/// Segments (or sidecar rows) one step deletes per partition.
const MAX_SEGMENTS_PER_STEP: i32 = 1024;

/// Steps one pass runs before it waits for the next tick.
const MAX_STEPS_PER_PASS: usize = 64;

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
}

#[derive(Debug, Default)]
struct Counters {
    passes: AtomicU64,
    segments: AtomicU64,
    messages: AtomicU64,
    txn_rows: AtomicU64,
}

/// The retention component: its loop task and its counters.
pub(crate) struct Retention {
    pool: deadpool_postgres::Pool,
    counters: Arc<Counters>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Retention {
    /// Start the loop on the current runtime, every `interval` (`None`: no
    /// loop; passes run only when asked).
    pub(crate) fn start(pool: deadpool_postgres::Pool, interval: Option<Duration>) -> Retention {
        let counters = Arc::new(Counters::default());
        let (stop, mut stopped) = watch::channel(false);
        let task = interval.map(|interval| {
            let pool = pool.clone();
            let counters = Arc::clone(&counters);
            tokio::spawn(async move {
                let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                ticker.tick().await;
                loop {
                    tokio::select! {
                        _ = ticker.tick() => {}
                        _ = stopped.changed() => return,
                    }
                    if let Err(error) = pass(&pool, &counters).await {
                        if error.is_transient() {
                            tracing::debug!(error = %crate::error_chain(&error), "retention pass failed");
                        } else {
                            tracing::warn!(error = %crate::error_chain(&error), "retention pass failed");
                        }
                    }
                }
            })
        });
        Retention {
            pool,
            counters,
            stop,
            task: Mutex::new(task),
        }
    }

    /// Run one pass now.
    pub(crate) async fn pass(&self) -> Result<RetentionStats, EngineError> {
        pass(&self.pool, &self.counters).await
    }

    /// What retention removed since start.
    pub(crate) fn stats(&self) -> RetentionStats {
        self.counters.snapshot()
    }

    /// Stop the loop (after its current step).
    pub(crate) async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let task = self.task.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

impl Counters {
    fn snapshot(&self) -> RetentionStats {
        RetentionStats {
            passes: self.passes.load(Ordering::Relaxed),
            segments: self.segments.load(Ordering::Relaxed),
            messages: self.messages.load(Ordering::Relaxed),
            txn_rows: self.txn_rows.load(Ordering::Relaxed),
        }
    }

    fn add(&self, step: &RetentionStep) {
        self.segments
            .fetch_add(u64::from(step.segments), Ordering::Relaxed);
        self.messages.fetch_add(step.messages, Ordering::Relaxed);
        self.txn_rows
            .fetch_add(u64::from(step.txn_rows), Ordering::Relaxed);
    }
}

/// One pass: steps until one says there is no more, answering what this
/// pass removed.
async fn pass(
    pool: &deadpool_postgres::Pool,
    counters: &Counters,
) -> Result<RetentionStats, EngineError> {
    counters.passes.fetch_add(1, Ordering::Relaxed);
    let client = pool.get().await.map_err(SqlError::from)?;
    let mut removed = RetentionStats {
        passes: 1,
        ..RetentionStats::default()
    };
    for _ in 0..MAX_STEPS_PER_PASS {
        let step =
            queen_sql::retention::step(&**client, MAX_PARTITIONS_PER_STEP, MAX_SEGMENTS_PER_STEP)
                .await?;
        counters.add(&step);
        removed.segments += u64::from(step.segments);
        removed.messages += step.messages;
        removed.txn_rows += u64::from(step.txn_rows);
        if step.skipped || !step.more {
            break;
        }
    }
    if removed.segments > 0 || removed.txn_rows > 0 {
        tracing::info!(
            segments = removed.segments,
            messages = removed.messages,
            sidecar_rows = removed.txn_rows,
            "retention pass"
        );
    }
    Ok(removed)
}
