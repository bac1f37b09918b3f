//! The kept message figures of the admin views (`sql/schema/010_figures.sql`):
//! this broker's push marks and the fold loop.
//!
//! A committed push marks its partition here ([`Marks`], through
//! `pop::Ready::pushed`): in memory, once per partition until the next
//! fold, because a trigger per push statement costs PostgreSQL more than a
//! fifth of a single-message push. Every `figures_interval` a pass hands
//! the marks to the first fold step, and in the same statement tells the
//! others this broker is alive (`figures_watch_v1`); steps follow until one
//! finds nothing dirty (or [`MAX_STEPS_PER_PASS`]), each one transaction of
//! at most [`MAX_PARTITIONS_PER_STEP`] partitions. Before an admin view is
//! read, [`Figures::publish`] writes the marks as dirty rows, so the view
//! counts this broker's pushes; a clean shutdown writes them too.
//!
//! A mark is lost when a broker dies holding it or drops it past
//! [`MAX_MARKS`]: the dead broker's row outlives its time, or this broker
//! says so, and a verify cycle marks every partition dirty in turn,
//! [`VERIFY_PER_PASS`] a pass. Without a loss a pass reads nothing it was
//! not told of. The build pass of an upgraded database walks the same way.
//!
//! One broker folds at a time (the step's advisory try-lock); another's step
//! writes its marks as dirty rows and answers skipped. Errors are logged,
//! the marks are kept, and the next tick tries again.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use queen_sql::figures::Fold;
use queen_sql::SqlError;
use tokio::sync::watch;
use uuid::Uuid;

use crate::EngineError;

/// Partitions one step folds from the dirty rows (a row names the
/// partitions of one writing statement, thousands when it created them: a
/// step takes rows while their partitions fit, and writes the rest of its
/// last row back). A step is one transaction; the rows it writes stay
/// locked until it commits, and only the views and other folds read them.
/// The first step of a pass also folds the marks, when they fit too.
const MAX_PARTITIONS_PER_STEP: i32 = 4096;

/// Steps one pass runs before it waits for the next tick.
const MAX_STEPS_PER_PASS: usize = 64;

/// Partitions one pass counts for the first time while a build pass walks
/// (a database upgraded from before the figures), or marks dirty while a
/// verify cycle runs (after a broker died holding marks or this one
/// dropped one): a million partitions take about an hour at one pass a
/// second. With neither, a pass reads no partition it was not told of.
const VERIFY_PER_PASS: i32 = 256;

/// Ticks of the loop per pass while idle (no marks held, the last pass
/// folded nothing): a pass is a statement, and an idle broker's statements
/// are an idle database's load. What triggers mark meanwhile (a seek, a
/// retention step) waits up to this many intervals for its fold; the views
/// count it live until then.
const IDLE_TICKS: u32 = 5;

/// How long this broker counts as alive to the others after a pass, at
/// least (ten fold intervals when that is longer, which covers an idle
/// loop's [`IDLE_TICKS`]): a broker whose row outlives this died holding
/// marks.
const MIN_ALIVE: Duration = Duration::from_secs(60);

/// Distinct partitions [`Marks`] holds until the next fold. Past it, a
/// mark is dropped (counted: `queen_figures_marks_dropped`), and the
/// partition's figure waits for a later mark or the verify cycle; the loop
/// is woken to fold at once. (Writing a full set as dirty rows instead, at
/// once, was tried: at 200,000 partitions the extra rows left the fold
/// minutes behind after the partitions' creation, see docs/benchmarks.md.)
pub(crate) const MAX_MARKS: usize = 65_536;

/// (tenant, queue, partition) of a partition pushed to since the last fold.
type Pushed = (String, String, String);

/// The marks a fold or a publish takes: the partitions pushed to, by name
/// (a push knows names), and those consumed from, by id (an ack knows ids).
#[derive(Default)]
struct Taken {
    tenants: Vec<String>,
    queues: Vec<String>,
    partitions: Vec<String>,
    ids: Vec<Uuid>,
}

impl Taken {
    fn is_empty(&self) -> bool {
        self.partitions.is_empty() && self.ids.is_empty()
    }

    fn len(&self) -> usize {
        self.partitions.len() + self.ids.len()
    }
}

/// What [`Marks`] holds.
#[derive(Default)]
struct Held {
    pushed: HashSet<Pushed>,
    consumed: HashSet<Uuid>,
}

impl Held {
    fn len(&self) -> usize {
        self.pushed.len() + self.consumed.len()
    }
}

/// The partitions this broker pushed to or consumed from since its last
/// fold, each once. Bounded by [`MAX_MARKS`] together.
#[derive(Default)]
pub(crate) struct Marks {
    held: Mutex<Held>,
    dropped: AtomicU64,
    /// A mark was dropped since the last fold said so: a verify cycle is
    /// due.
    lost: AtomicBool,
    full: tokio::sync::Notify,
}

impl Marks {
    /// A push to `partition` of `queue` committed.
    pub(crate) fn pushed(&self, tenant: &str, queue: &str, partition: &str) {
        self.hold(true, |held| {
            held.pushed
                .insert((tenant.to_owned(), queue.to_owned(), partition.to_owned()));
        });
    }

    /// A commit consumed messages of `partition_id` (an ack, an auto-ack
    /// pop, a give-back, a message delete).
    pub(crate) fn consumed(&self, partition_id: Uuid) {
        self.hold(true, |held| {
            held.consumed.insert(partition_id);
        });
    }

    /// Add a mark unless [`MAX_MARKS`] are held: then count it dropped and,
    /// with `wake`, wake the loop to fold at once (a restore after a failed
    /// write does not, or a database outage would spin the loop).
    fn hold(&self, wake: bool, add: impl FnOnce(&mut Held)) {
        let mut held = self.held.lock();
        if held.len() < MAX_MARKS {
            add(&mut held);
            return;
        }
        drop(held);
        self.dropped.fetch_add(1, Ordering::Relaxed);
        self.lost.store(true, Ordering::Relaxed);
        if wake {
            self.full.notify_one();
        }
    }

    /// Take every mark, as the arrays the procedures take.
    fn take(&self) -> Taken {
        let held = std::mem::take(&mut *self.held.lock());
        let mut taken = Taken {
            ids: held.consumed.into_iter().collect(),
            ..Taken::default()
        };
        for (tenant, queue, partition) in held.pushed {
            taken.tenants.push(tenant);
            taken.queues.push(queue);
            taken.partitions.push(partition);
        }
        taken
    }

    /// Put marks back that could not be written (bounded as always).
    fn restore(&self, taken: Taken) {
        let Taken {
            tenants,
            queues,
            partitions,
            ids,
        } = taken;
        for pushed in tenants.into_iter().zip(queues).zip(partitions) {
            let ((tenant, queue), partition) = pushed;
            self.hold(false, |held| {
                held.pushed.insert((tenant, queue, partition));
            });
        }
        for id in ids {
            self.hold(false, |held| {
                held.consumed.insert(id);
            });
        }
    }

    /// True when a consumption is marked here and not yet written: a
    /// bounded queue's depth (`figures_queue_depth_v1`) may count it.
    pub(crate) fn consumed_any(&self) -> bool {
        !self.held.lock().consumed.is_empty()
    }

    /// Marks held now.
    pub(crate) fn len(&self) -> usize {
        self.held.lock().len()
    }
}

/// Reads the fold's counts: what the metrics hold of [`Figures`].
#[derive(Clone)]
pub(crate) struct Gauge {
    marks: Arc<Marks>,
    folded: Arc<AtomicU64>,
}

impl Gauge {
    /// Partitions folded since start, marks held now, marks dropped at
    /// [`MAX_MARKS`] since start.
    pub(crate) fn counts(&self) -> (u64, usize, u64) {
        (
            self.folded.load(Ordering::Relaxed),
            self.marks.len(),
            self.marks.dropped.load(Ordering::Relaxed),
        )
    }
}

/// The fold component: the marks, its loop task and what it folded.
pub(crate) struct Figures {
    folder: Arc<Folder>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// What a pass needs: the marks, what it folded, and who this broker is
/// to the others (`figures_watch_v1`).
struct Folder {
    pool: deadpool_postgres::Pool,
    marks: Arc<Marks>,
    folded: Arc<AtomicU64>,
    /// This broker among the folding ones; a new one every start.
    broker: Uuid,
    /// How long it counts as alive after a pass.
    alive_ms: i32,
}

impl Figures {
    /// Start the loop on the current runtime, a pass every `interval`
    /// (`None`: no loop; passes run only when asked).
    pub(crate) fn start(pool: deadpool_postgres::Pool, interval: Option<Duration>) -> Figures {
        let marks = Arc::new(Marks::default());
        let folded = Arc::new(AtomicU64::new(0));
        let alive = interval.map_or(MIN_ALIVE, |interval| (interval * 10).max(MIN_ALIVE));
        let folder = Arc::new(Folder {
            pool,
            marks,
            folded,
            broker: Uuid::new_v4(),
            alive_ms: i32::try_from(alive.as_millis()).unwrap_or(i32::MAX),
        });
        let (stop, stopped) = watch::channel(false);
        let task =
            interval.map(|interval| tokio::spawn(run(Arc::clone(&folder), interval, stopped)));
        Figures {
            folder,
            stop,
            task: Mutex::new(task),
        }
    }

    /// Where pushes mark their partitions.
    pub(crate) fn marks(&self) -> Arc<Marks> {
        Arc::clone(&self.folder.marks)
    }

    /// Run one pass now: the partitions it folded (0 when another broker
    /// was folding).
    pub(crate) async fn pass(&self) -> Result<u64, EngineError> {
        pass(&self.folder, None).await
    }

    /// Write the marks as dirty rows, so the views count them.
    pub(crate) async fn publish(&self) -> Result<(), EngineError> {
        publish(&self.folder.pool, &self.folder.marks).await
    }

    /// A handle that does [`Figures::publish`], for another view's owner.
    pub(crate) fn publisher(&self) -> Publisher {
        Publisher {
            pool: self.folder.pool.clone(),
            marks: Arc::clone(&self.folder.marks),
        }
    }

    /// Partitions folded since start, marks held now, marks dropped at
    /// [`MAX_MARKS`] since start.
    pub(crate) fn counts(&self) -> (u64, usize, u64) {
        self.gauge().counts()
    }

    /// A handle that reads [`Figures::counts`] (for the metrics).
    pub(crate) fn gauge(&self) -> Gauge {
        Gauge {
            marks: Arc::clone(&self.folder.marks),
            folded: Arc::clone(&self.folder.folded),
        }
    }

    /// Stop the loop (after its current step), write the marks, and leave
    /// the folding brokers. When the marks cannot be written the broker
    /// stays listed, so its row's expiry starts a verify cycle, as a
    /// broker's death does.
    pub(crate) async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let task = self.task.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
        let left = async {
            publish(&self.folder.pool, &self.folder.marks).await?;
            let client = self.folder.pool.get().await.map_err(SqlError::from)?;
            queen_sql::figures::leave(&**client, self.folder.broker).await?;
            Ok::<(), EngineError>(())
        };
        if let Err(error) = left.await {
            tracing::warn!(
                error = %crate::error_chain(&error),
                "figures marks not written at shutdown: a verify cycle will re-count"
            );
        }
    }
}

/// Writes this broker's marks as dirty rows before a view reads the kept
/// figures ([`Figures::publisher`]).
#[derive(Clone)]
pub(crate) struct Publisher {
    pool: deadpool_postgres::Pool,
    marks: Arc<Marks>,
}

impl Publisher {
    /// Write the marks; a failure is logged, not answered: a view that
    /// cannot see this broker's latest changes is still an answer, and the
    /// marks stay for the next fold.
    pub(crate) async fn publish(&self) {
        if let Err(error) = publish(&self.pool, &self.marks).await {
            tracing::debug!(error = %crate::error_chain(&error), "figures marks not written");
        }
    }
}

/// Write `marks` as dirty rows (kept on failure, for the next fold).
pub(crate) async fn publish(
    pool: &deadpool_postgres::Pool,
    marks: &Marks,
) -> Result<(), EngineError> {
    let taken = marks.take();
    if taken.is_empty() {
        return Ok(());
    }
    let client = match pool.get().await {
        Ok(client) => client,
        Err(error) => {
            marks.restore(taken);
            return Err(SqlError::from(error).into());
        }
    };
    let named = (&taken.tenants[..], &taken.queues[..], &taken.partitions[..]);
    if let Err(error) = queen_sql::figures::mark(&**client, named, &taken.ids).await {
        marks.restore(taken);
        return Err(error.into());
    }
    Ok(())
}

/// The loop: a pass every `interval`, or at once when the marks are full,
/// until stopped.
async fn run(folder: Arc<Folder>, interval: Duration, mut stopped: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    let mut pace = Pace::default();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = folder.marks.full.notified() => {}
            _ = stopped.changed() => return,
        }
        if !pace.due(folder.marks.len() > 0) {
            continue;
        }
        let folded = match pass(&folder, Some(&stopped)).await {
            Ok(folded) => folded,
            Err(error) => {
                if error.is_transient() {
                    tracing::debug!(error = %crate::error_chain(&error), "figures fold failed");
                } else {
                    tracing::warn!(error = %crate::error_chain(&error), "figures fold failed");
                }
                0
            }
        };
        pace.passed(folded);
    }
}

/// Which ticks of the loop run a pass: every one while there is work (marks
/// held, or the last pass folded something), else one in [`IDLE_TICKS`].
#[derive(Debug)]
struct Pace {
    busy: bool,
    skipped: u32,
}

impl Default for Pace {
    fn default() -> Pace {
        Pace {
            busy: true,
            skipped: 0,
        }
    }
}

impl Pace {
    /// Whether this tick runs a pass, `marks` telling whether any are held.
    fn due(&mut self, marks: bool) -> bool {
        if !self.busy && !marks && self.skipped + 1 < IDLE_TICKS {
            self.skipped += 1;
            return false;
        }
        self.skipped = 0;
        true
    }

    /// A pass folded `folded` partitions.
    fn passed(&mut self, folded: u64) {
        self.busy = folded > 0;
    }
}

/// One pass: the first step takes the marks and verifies the next
/// partitions; steps follow until one folds nothing, another broker folds,
/// or `stopped` turns true.
async fn pass(
    folder: &Folder,
    stopped: Option<&watch::Receiver<bool>>,
) -> Result<u64, EngineError> {
    let Folder { marks, folded, .. } = folder;
    let client = folder.pool.get().await.map_err(SqlError::from)?;
    let mut taken = marks.take();
    if taken.len() > MAX_PARTITIONS_PER_STEP as usize {
        // More than one step folds: they go in as dirty rows, which the
        // steps take a bounded share of at a time.
        let named = (&taken.tenants[..], &taken.queues[..], &taken.partitions[..]);
        if let Err(error) = queen_sql::figures::mark(&**client, named, &taken.ids).await {
            marks.restore(taken);
            return Err(error.into());
        }
        taken = Taken::default();
    }
    let named = (&taken.tenants[..], &taken.queues[..], &taken.partitions[..]);
    let watch = queen_sql::figures::Watch {
        broker: folder.broker,
        lost: marks.lost.swap(false, Ordering::Relaxed),
        alive_ms: folder.alive_ms,
    };
    let first = queen_sql::figures::first_step(
        &**client,
        MAX_PARTITIONS_PER_STEP,
        VERIFY_PER_PASS,
        named,
        &taken.ids,
        &watch,
    )
    .await;
    let mut total = match first {
        Err(error) => {
            if watch.lost {
                marks.lost.store(true, Ordering::Relaxed);
            }
            marks.restore(taken);
            return Err(error.into());
        }
        // Nothing dirty, or another broker folds: the pass is over.
        Ok(Fold::Skipped | Fold::Folded(0)) => return Ok(0),
        Ok(Fold::Folded(n)) => u64::from(n),
    };
    folded.fetch_add(total, Ordering::Relaxed);
    let none: &[String] = &[];
    for _ in 1..MAX_STEPS_PER_PASS {
        // A shutdown waits for one step, not for the pass.
        if stopped.is_some_and(|stopped| *stopped.borrow()) {
            break;
        }
        match queen_sql::figures::fold(
            &**client,
            MAX_PARTITIONS_PER_STEP,
            0,
            (none, none, none),
            &[],
        )
        .await?
        {
            Fold::Skipped | Fold::Folded(0) => break,
            Fold::Folded(n) => {
                folded.fetch_add(u64::from(n), Ordering::Relaxed);
                total += u64::from(n);
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_loop_passes_once_in_five_ticks_a_busy_one_every_tick() {
        let mut pace = Pace::default();
        let ticks =
            |pace: &mut Pace, marks: bool, n: usize| (0..n).filter(|_| pace.due(marks)).count();
        assert_eq!(ticks(&mut pace, false, 1), 1, "the first tick passes");
        pace.passed(3);
        assert_eq!(ticks(&mut pace, false, 1), 1, "it folded: the next too");
        pace.passed(0);
        assert_eq!(ticks(&mut pace, false, 20), 4, "idle: one in five");
        assert_eq!(ticks(&mut pace, true, 3), 3, "marks held: every tick");
        pace.passed(0);
        assert_eq!(ticks(&mut pace, false, 5), 1);
    }

    #[test]
    fn a_dropped_mark_asks_for_a_verify_cycle() {
        let marks = Marks::default();
        for _ in 0..MAX_MARKS {
            marks.consumed(Uuid::new_v4());
        }
        assert!(!marks.lost.load(Ordering::Relaxed), "nothing dropped yet");
        marks.pushed("t", "q", "p");
        assert_eq!(marks.dropped.load(Ordering::Relaxed), 1);
        assert!(marks.lost.load(Ordering::Relaxed));
        assert_eq!(marks.len(), MAX_MARKS);
    }
}
