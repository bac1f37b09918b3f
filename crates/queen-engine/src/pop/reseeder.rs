//! The periodic reseeds (`QUEEN_HOTLIST_RESEED_MS`) of the rings pops keep
//! using, all due rings in one statement (`log_hot_reseed_many_v1`): with
//! long-polls parked on many queues and nothing pushed, a broker sends one
//! reseed statement per period, not one per ring (and its parked pops need
//! no queue lookup to find out there is still nothing). What a reseed finds
//! opens the queue's gate for each name, so a parked pop wakes for it.
//!
//! A ring nobody polled within two periods is left alone; its next pop
//! reseeds it (`HotList::probe` says so once two periods passed, so a ring
//! this task keeps fresh is never reseeded by a pop too). A pop parked on a
//! caught-up ring looks at it once a period (`Serving::recheck_interval`),
//! which keeps it polled. A ring still catching up is walked by its pops
//! (`hot.rs`).

#[allow(clippy::wildcard_imports)] // the pop module's own names
use super::*;

/// Most rings one statement reseeds; more wait for the next round.
const MAX_BATCH: usize = 512;

/// Most names of one ring's reseed that open its gate (each wakes one
/// parked pop of each group); the ring holds them all.
const MAX_WAKES: usize = 64;

/// Reseed statements and the rings they reseeded, since start (the pop
/// path's own reseeds included): `queen_hotlist_reseed_statements` and
/// `queen_hotlist_reseeds`.
#[derive(Debug, Default)]
pub(crate) struct ReseedCounts {
    statements: AtomicU64,
    rings: AtomicU64,
}

impl ReseedCounts {
    /// One statement reseeded `rings` rings.
    pub(super) fn counted(&self, rings: usize) {
        self.statements.fetch_add(1, Ordering::Relaxed);
        self.rings
            .fetch_add(u64::try_from(rings).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// (statements, rings) since start.
    pub(super) fn get(&self) -> (u64, u64) {
        (
            self.statements.load(Ordering::Relaxed),
            self.rings.load(Ordering::Relaxed),
        )
    }
}

/// What the reseeder works with.
pub(super) struct Reseeder {
    pub(super) pool: deadpool_postgres::Pool,
    pub(super) hotlist: Arc<HotList>,
    pub(super) gates: Arc<WakeGates>,
    pub(super) counts: Arc<ReseedCounts>,
    pub(super) period: Duration,
    pub(super) shutting_down: Arc<AtomicBool>,
}

impl Reseeder {
    /// Reseed the due rings every quarter period until shutdown.
    pub(super) async fn run(self) {
        let tick = (self.period / 4).max(Duration::from_millis(50));
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !self.shutting_down.load(Ordering::Relaxed) {
            ticker.tick().await;
            if let Err(error) = self.round(tick).await {
                tracing::debug!(error = %crate::error_chain(&error), "periodic reseed failed; pops reseed their rings");
            }
        }
    }

    /// One round: every ring due before the next one (up to
    /// [`MAX_BATCH`]) in one statement.
    async fn round(&self, tick: Duration) -> Result<(), EngineError> {
        let due = self
            .hotlist
            .due_reseeds(Instant::now(), self.period, tick, MAX_BATCH);
        if due.is_empty() {
            return Ok(());
        }
        let asks: Vec<queen_sql::pop::ReseedAsk> = due
            .iter()
            .map(|due| queen_sql::pop::ReseedAsk {
                queue_id: due.queue_id,
                group: due.group.clone(),
                since: due.walk.since,
                after: due.walk.after.clone(),
                page: due.walk.page(),
            })
            .collect();
        let limit = crate::pop::hotlist::MAX_RING_PARTITIONS;
        let found = {
            let client = self.pool.get().await.map_err(queen_sql::SqlError::from)?;
            queen_sql::pop::hot_reseed_many(
                &**client,
                &asks,
                i32::try_from(limit).unwrap_or(i32::MAX),
            )
            .await?
        };
        self.counts.counted(due.len());
        let now = Instant::now();
        for (due, reseed) in due.into_iter().zip(found) {
            let wake: Vec<String> = reseed.names.iter().take(MAX_WAKES).cloned().collect();
            let known = self
                .hotlist
                .reseeded_if_known(&due.queue, &due.group, reseed, limit, now);
            for name in wake.iter().filter(|_| known.is_some()) {
                self.gates.open_partition(&due.queue, name);
            }
        }
        Ok(())
    }
}
