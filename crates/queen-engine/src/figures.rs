//! The fold loop of the kept message figures (`sql/schema/010_figures.sql`):
//! every `figures_interval`, fold steps until one finds nothing dirty (or
//! [`MAX_STEPS_PER_PASS`]), each one transaction of bounded work.
//!
//! The admin views are exact without it (they count what is still dirty
//! themselves, `figures_queue_counts_v1`); folding keeps what they count
//! small. One broker folds at a time (the step's advisory try-lock); the
//! others' steps answer skipped. Errors are logged and the pass ends; the
//! next tick tries again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use queen_sql::figures::Fold;
use queen_sql::SqlError;
use tokio::sync::watch;

use crate::EngineError;

/// Dirty rows one step takes (each names the partitions of one writing
/// statement). The rows a step writes stay locked until it commits; only
/// the views and other folds read them.
const MAX_ROWS_PER_STEP: i32 = 512;

/// Steps one pass runs before it waits for the next tick.
const MAX_STEPS_PER_PASS: usize = 64;

/// The fold component: its loop task and what it folded.
pub(crate) struct Figures {
    pool: deadpool_postgres::Pool,
    folded: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Figures {
    /// Start the loop on the current runtime, a pass every `interval`
    /// (`None`: no loop; passes run only when asked).
    pub(crate) fn start(pool: deadpool_postgres::Pool, interval: Option<Duration>) -> Figures {
        let folded = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = watch::channel(false);
        let task = interval.map(|interval| {
            tokio::spawn(run(pool.clone(), Arc::clone(&folded), interval, stopped))
        });
        Figures {
            pool,
            folded,
            stop,
            task: Mutex::new(task),
        }
    }

    /// Run one pass now: the partitions it folded (0 when another broker
    /// was folding).
    pub(crate) async fn pass(&self) -> Result<u64, EngineError> {
        pass(&self.pool, &self.folded).await
    }

    /// Partitions folded since start.
    pub(crate) fn folded(&self) -> u64 {
        self.folded.load(Ordering::Relaxed)
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

/// The loop: a pass every `interval` until stopped.
async fn run(
    pool: deadpool_postgres::Pool,
    folded: Arc<AtomicU64>,
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
        if let Err(error) = pass(&pool, &folded).await {
            if error.is_transient() {
                tracing::debug!(error = %crate::error_chain(&error), "figures fold failed");
            } else {
                tracing::warn!(error = %crate::error_chain(&error), "figures fold failed");
            }
        }
    }
}

/// One pass: fold steps until one folds nothing or another broker folds.
async fn pass(pool: &deadpool_postgres::Pool, folded: &AtomicU64) -> Result<u64, EngineError> {
    let client = pool.get().await.map_err(SqlError::from)?;
    let mut total = 0;
    for _ in 0..MAX_STEPS_PER_PASS {
        match queen_sql::figures::fold(&**client, MAX_ROWS_PER_STEP).await? {
            Fold::Skipped | Fold::Folded(0) => break,
            Fold::Folded(n) => {
                folded.fetch_add(u64::from(n), Ordering::Relaxed);
                total += u64::from(n);
            }
        }
    }
    Ok(total)
}
