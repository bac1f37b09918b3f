//! The pop path (life-of-a-pop.md): choosing candidate partitions, deciding
//! whether to wait, and rendering what SQL claimed.
//!
//! The order of the serve path is deliberate:
//! 1. pop maintenance mode answers empty at once;
//! 2. a cheap in-memory check (the hot-list ring has something, or a reseed
//!    is due) before any permit or pooled connection, so parked consumers
//!    re-polling an empty queue never touch the limiter or the pool;
//! 3. only real work takes a Vegas permit, then a connection;
//! 4. one `log_pop_list_v1` (or `log_pop_specific_v1`, or the SQL candidate
//!    scan with `QUEEN_HOTLIST=0`), then verdicts go back into the ring;
//! 5. frames are decompressed, sliced and decrypted here, after PostgreSQL
//!    answered, with the connection already returned;
//! 6. an empty answer with `wait` parks on the queue's wake gate, bounded by
//!    the backoff floor and the deadline, holding nothing; on the SQL path a
//!    wake first tries the partitions the gate's pushed-partition hints name.
//!
//! Transient database trouble never becomes a 5xx for a pop: it counts as an
//! empty attempt, so the pop answers empty after its wait (clients' consume
//! loops die on repeated 5xx).

#[cfg(feature = "bench")]
#[doc(hidden)]
pub mod benches;
mod hot;
mod hotlist;
mod limiter;
mod queue_cache;
mod ready;
mod render;
mod request;
mod reseeder;
mod scan;
mod wake;
mod wheel;

use hot::unvisited;
pub use limiter::{LimiterConfig, LimiterStats};
pub(crate) use ready::Ready;
use request::{params, wait_key_of};
pub use request::{
    PopRequest, PopTarget, PopWait, Popped, PoppedMessage, SubscriptionMode, QUEUE_MODE_GROUP,
};
use wheel::run_wheel;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use parking_lot::Mutex;
use queen_sql::pop::{PopParams, PopRow, QueueInfo, Verdict};
use uuid::Uuid;

use crate::crypto::AtRest;
use crate::naming::{queue_key, QueueRef};
use crate::pop::hotlist::{HotList, Outcome};
use crate::pop::wake::{Gate, WaitKey, WakeGates};
use crate::registry::AckRegistry;
use crate::EngineError;
use limiter::Limiter;

/// Per-broker caches of the pop path.
#[derive(Debug, Default)]
pub(crate) struct PopState {
    queues: crate::pop::queue_cache::QueueCache,
    /// The queues each (namespace, task) discovery pop found.
    discovery: crate::pop::queue_cache::DiscoveryCache,
    /// (queue, group) pairs whose first contact ran (legacy path).
    contacted: Mutex<std::collections::HashSet<(Uuid, String)>>,
    /// One first contact at a time per (queue, group) on the hot-list path.
    first_contacts: SingleFlight,
    /// False until some queue is seen with `min_pop_wait_time`: the default
    /// path then pays one relaxed load, not a map lookup.
    any_min_pop_wait: AtomicBool,
    /// Pop maintenance mode: every pop answers empty at once.
    pub(crate) maintenance: AtomicBool,
    /// Pops in progress (serving or parked); a cancelled pop (client gone)
    /// leaves at once.
    pub(crate) parked: AtomicUsize,
    /// Connections checked out by the pop path.
    checkouts: AtomicU64,
    /// Parked pops a gate woke (`queen_pop_wakeups`): what a push costs the
    /// pops parked on its queue.
    wakeups: AtomicU64,
    /// Reseed statements and rings reseeded.
    reseeds: Arc<reseeder::ReseedCounts>,
    /// Parked pops that looked again because their re-check timer (not a
    /// gate) ended the wait (`queen_pop_rechecks`).
    rechecks: AtomicU64,
}

/// Async gates by key hash: a fixed set of stripes (so no map keyed by client
/// names to bound), each a tokio mutex held across the awaits of the one
/// task it lets through. Unrelated keys share a stripe only by hash, and
/// only contend while both are inside.
#[derive(Debug)]
pub(crate) struct SingleFlight {
    stripes: Vec<tokio::sync::Mutex<()>>,
}

/// Stripes of a [`SingleFlight`].
const FLIGHT_STRIPES: usize = 64;

impl Default for SingleFlight {
    fn default() -> SingleFlight {
        SingleFlight {
            stripes: (0..FLIGHT_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        }
    }
}

impl SingleFlight {
    /// Wait until no other task is inside for `key` (or a key sharing its
    /// stripe), then enter; leaving is dropping the guard.
    pub(crate) async fn enter(
        &self,
        key: &impl std::hash::Hash,
    ) -> tokio::sync::MutexGuard<'_, ()> {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let hash = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .hash_one(key);
        let stripe = usize::try_from(hash % FLIGHT_STRIPES as u64).unwrap_or(0);
        self.stripes[stripe].lock().await
    }
}

/// Counts a pop in progress for as long as it lives.
struct ParkedGuard<'a>(&'a AtomicUsize);

impl<'a> ParkedGuard<'a> {
    fn new(counter: &'a AtomicUsize) -> ParkedGuard<'a> {
        counter.fetch_add(1, Ordering::Relaxed);
        ParkedGuard(counter)
    }
}

impl Drop for ParkedGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl PopState {
    pub(crate) fn forget_queue(&self, queue: &str) {
        self.queues.forget(queue);
    }

    /// Forget which (queue, group) pairs had their first contact (`queue`
    /// `None`: every queue of the group).
    pub(crate) fn forget_contacts(&self, group: &str) {
        self.contacted.lock().retain(|(_, g)| g != group);
    }
}

/// Settings of pop serving.
#[derive(Debug, Clone)]
pub(crate) struct ServingConfig {
    /// Candidate selection by the hot-list (off: the SQL candidate scan).
    pub(crate) hotlist: bool,
    /// How often a hot-list ring is reseeded from SQL.
    pub(crate) hotlist_reseed: Duration,
    /// Long-poll backoff floor.
    pub(crate) pop_wait: PopWait,
}

/// The pop-serving component. It owns what only the pop path reads: the
/// hot-list rings, the wake gates, the limiter, the pop caches and the
/// revisit wheel. Writers reach the rings and gates only through the
/// [`Ready`] handle it hands out; it records what it served in the ack
/// registry, which the ack component reads.
pub(crate) struct Serving {
    pool: deadpool_postgres::Pool,
    config: ServingConfig,
    state: PopState,
    limiter: Arc<Limiter>,
    gates: Arc<WakeGates>,
    hotlist: Arc<HotList>,
    registry: Arc<AckRegistry>,
    at_rest: Arc<AtRest>,
    shutting_down: Arc<AtomicBool>,
    /// The admin views' figures: what a committed write marks (`figures.rs`).
    figures: Arc<crate::figures::Marks>,
    wheel: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The periodic reseeds (`reseeder.rs`; none on the SQL path).
    reseeder: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Serving {
    /// Build pop serving and start its revisit wheel on the current runtime.
    pub(crate) fn start(
        pool: deadpool_postgres::Pool,
        config: ServingConfig,
        limiter: LimiterConfig,
        registry: Arc<AckRegistry>,
        at_rest: Arc<AtRest>,
        figures: Arc<crate::figures::Marks>,
    ) -> Serving {
        let gates = Arc::new(WakeGates::new(!config.hotlist));
        let hotlist = Arc::new(HotList::default());
        let shutting_down = Arc::new(AtomicBool::new(false));
        let wheel = tokio::spawn(run_wheel(
            Arc::clone(&gates),
            Arc::clone(&hotlist),
            Arc::clone(&shutting_down),
        ));
        let state = PopState::default();
        let reseeder = config.hotlist.then(|| {
            tokio::spawn(
                reseeder::Reseeder {
                    pool: pool.clone(),
                    hotlist: Arc::clone(&hotlist),
                    gates: Arc::clone(&gates),
                    counts: Arc::clone(&state.reseeds),
                    period: config.hotlist_reseed,
                    shutting_down: Arc::clone(&shutting_down),
                }
                .run(),
            )
        });
        Serving {
            pool,
            config,
            state,
            limiter: Limiter::new(limiter),
            gates,
            hotlist,
            registry,
            at_rest,
            shutting_down,
            figures,
            wheel: Mutex::new(Some(wheel)),
            reseeder: Mutex::new(reseeder),
        }
    }

    /// The handle writers announce committed work through.
    pub(crate) fn ready(&self) -> Ready {
        Ready::new(
            Arc::clone(&self.hotlist),
            Arc::clone(&self.gates),
            Arc::clone(&self.figures),
        )
    }

    /// True once shutdown began: pops answer empty at once.
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }

    /// Begin shutdown: parked pops wake and answer empty, new pops answer
    /// empty at once.
    pub(crate) fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
        self.gates.open_all();
    }

    /// Stop the revisit wheel and the reseeder (after
    /// [`Serving::begin_shutdown`]).
    pub(crate) async fn shutdown(&self) {
        self.begin_shutdown();
        let wheel = self.wheel.lock().take();
        if let Some(wheel) = wheel {
            let _ = wheel.await;
        }
        // It may sleep a quarter period before it looks at the flag.
        let reseeder = self.reseeder.lock().take();
        if let Some(reseeder) = reseeder {
            reseeder.abort();
            let _ = reseeder.await;
        }
    }

    /// The limiter's current figures.
    pub(crate) fn limiter_stats(&self) -> LimiterStats {
        self.limiter.stats()
    }

    /// Pops parked on each queue's gate now.
    pub(crate) fn parked(&self) -> Vec<(String, usize)> {
        self.gates.parked()
    }

    /// (rings, names they hold, their bytes) of the hot-list.
    pub(crate) fn hotlist_size(&self) -> (usize, usize, usize) {
        self.hotlist.size()
    }

    /// What the client-keyed maps of pop serving hold now.
    pub(crate) fn memory(&self) -> (usize, usize) {
        (self.gates.len(), self.state.queues.len())
    }

    /// `queue` was configured: its cached configuration is stale.
    pub(crate) fn queue_configured(&self, queue: &str) {
        self.state.forget_queue(queue);
    }

    /// `queue` was deleted: drop its rings, configuration and gate; parked
    /// pops on it answer empty at once.
    pub(crate) fn queue_deleted(&self, queue: &str) {
        self.hotlist.forget_queue(queue);
        self.state.forget_queue(queue);
        self.gates.forget(queue);
    }

    /// `group`'s cursors were deleted or moved (on `queue`, or everywhere):
    /// its next pop contacts SQL afresh and reseeds its rings.
    pub(crate) fn group_changed(&self, group: &str, queue: Option<&str>) {
        self.hotlist.forget_group(group, queue);
        self.state.forget_contacts(group);
        if let Some(queue) = queue {
            self.gates.open(queue);
        }
    }

    /// Pop: claim and return messages, long-polling when asked.
    pub(crate) async fn pop(&self, request: PopRequest) -> Result<Popped, EngineError> {
        if self.state.maintenance.load(Ordering::Relaxed) || self.is_shutting_down() {
            return Ok(Popped::default());
        }
        let started = Instant::now();
        let deadline = started
            + if request.wait {
                request.timeout
            } else {
                Duration::ZERO
            };
        let gate = match &request.target {
            PopTarget::Partition { queue, .. } | PopTarget::Queue { queue } => {
                self.gates.gate(&queue_key(&request.tenant, queue))
            }
            PopTarget::Discovery { .. } => self.gates.discovery(&request.tenant),
        };
        self.hold_for_min_pop_wait(&request, deadline).await;
        // Who this pop waits as, made only if it ever parks.
        let mut wait_key: Option<WaitKey> = None;
        let _parked = ParkedGuard::new(&self.state.parked);
        let mut attempt = 0u32;
        // Whether the gate (not the timer) ended the last wait.
        let mut woken = false;
        loop {
            let seen = gate.generation();
            if self.state.maintenance.load(Ordering::Relaxed) {
                // Switched on while this pop waited: no more work.
                return Ok(Popped::default());
            }
            let mut failed = false;
            let popped = match self.pop_once(&request, woken.then_some(&*gate)).await {
                Ok(popped) => popped,
                Err(error) if error.is_transient() => {
                    tracing::warn!(error = %crate::error_chain(&error), "pop attempt failed; answering empty");
                    failed = true;
                    Popped::default()
                }
                Err(error) => return Err(error),
            };
            if !popped.messages.is_empty()
                || !request.wait
                || self.is_shutting_down()
                || gate.is_closed()
            {
                return Ok(popped);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(popped);
            }
            let interval = self
                .recheck_interval(&request, attempt, failed)
                .min(deadline - now);
            let wait_key = wait_key.get_or_insert_with(|| wait_key_of(&request));
            tokio::select! {
                () = gate.wait_past(seen, wait_key) => {
                    attempt = 0;
                    woken = true;
                    self.state.wakeups.fetch_add(1, Ordering::Relaxed);
                }
                () = tokio::time::sleep(interval) => {
                    attempt = attempt.saturating_add(1);
                    woken = false;
                    self.state.rechecks.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// How long a parked pop waits for its gate before it looks again. The
    /// backoff (`POP_WAIT_*`), except for a queue pop on the hot-list path
    /// whose ring has caught up, after an attempt that did not fail: every
    /// way work appears for it opens its gate (a push here or a peer's
    /// hint, an ack-promote, the wheel's lease expiries and holds, and the
    /// periodic reseeds, which find what a lost hint missed), so it looks
    /// once a reseed period, which keeps its ring among those reseeded.
    /// Ten thousand parked pops re-checking every second cost a broker 7%
    /// of a core doing nothing.
    fn recheck_interval(&self, request: &PopRequest, attempt: u32, failed: bool) -> Duration {
        let backoff = self.config.pop_wait.interval(attempt);
        match &request.target {
            PopTarget::Queue { queue }
                if self.config.hotlist
                    && !failed
                    && self
                        .hotlist
                        .caught_up(&queue_key(&request.tenant, queue), &request.group) =>
            {
                backoff.max(self.config.hotlist_reseed)
            }
            _ => backoff,
        }
    }

    /// Enable or disable pop maintenance mode (every pop answers empty).
    /// Enabling it wakes every parked pop, which then answers empty at once
    /// rather than delivering what arrives while it waited.
    pub(crate) fn set_maintenance(&self, enabled: bool) {
        self.state.maintenance.store(enabled, Ordering::Relaxed);
        if enabled {
            self.gates.open_all();
        }
    }

    /// A pooled connection for the pop path, counted.
    /// One claiming round trip: a Vegas permit first (only real work takes
    /// one), then a pooled connection, then `work`; the permit goes back
    /// with its round-trip sample once `work` answered, success or error.
    /// The hot-list path takes its permit itself (it checks its ring in
    /// between and may give the permit back unused).
    async fn claim<T>(
        &self,
        work: impl AsyncFnOnce(&deadpool_postgres::Object) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let permit = self.limiter.acquire().await;
        let result = match self.pop_client().await {
            Ok(client) => work(&client).await,
            Err(error) => Err(error),
        };
        permit.release();
        result
    }

    async fn pop_client(&self) -> Result<deadpool_postgres::Object, EngineError> {
        self.state.checkouts.fetch_add(1, Ordering::Relaxed);
        Ok(self.pool.get().await.map_err(queen_sql::SqlError::from)?)
    }

    /// Parked pops a wake gate woke since start.
    pub(crate) fn wakeups(&self) -> u64 {
        self.state.wakeups.load(Ordering::Relaxed)
    }

    /// Timed re-checks of parked pops since start.
    pub(crate) fn rechecks(&self) -> u64 {
        self.state.rechecks.load(Ordering::Relaxed)
    }

    /// (reseed statements, rings they reseeded) since start.
    pub(crate) fn reseeds(&self) -> (u64, u64) {
        self.state.reseeds.get()
    }

    /// Connections the pop path has checked out since start: each is at
    /// least one SQL round trip. A caught-up queue polled through the
    /// hot-list costs none.
    pub(crate) fn checkouts(&self) -> u64 {
        self.state.checkouts.load(Ordering::Relaxed)
    }

    /// Pops in progress right now, waiting or serving.
    pub(crate) fn in_progress(&self) -> usize {
        self.state.parked.load(Ordering::Relaxed)
    }

    /// Whether pop maintenance mode is on.
    pub(crate) fn maintenance(&self) -> bool {
        self.state.maintenance.load(Ordering::Relaxed)
    }

    /// `min_pop_wait_time`: hold an under-full claim back so one commit carries
    /// more messages. In the broker, before any permit (a `pg_sleep` in SQL
    /// would pin a connection, a permit and row locks), and gated by one
    /// relaxed atomic that stays false unless some queue uses it.
    ///
    /// The hold ends at the first of: the batch would be full, the window
    /// elapsed, the deadline. Only a non-empty queue is held (waiting on an
    /// empty one is long-poll's job). What a claim could take now is one short
    /// `log_pending_count_v1` call, on a connection returned before waiting,
    /// made again each time a push or a wake opens the queue's gate; with the
    /// hot-list, a ring with nothing ready skips even that.
    async fn hold_for_min_pop_wait(&self, request: &PopRequest, deadline: Instant) {
        if !self.state.any_min_pop_wait.load(Ordering::Relaxed) || request.batch <= 1 {
            return;
        }
        let PopTarget::Queue { queue } = &request.target else {
            return;
        };
        let queue = QueueRef::new(&request.tenant, queue);
        if self.config.hotlist
            && !self
                .hotlist
                .has_ready(&queue.key, &request.group, Instant::now())
        {
            return;
        }
        let Ok(Some(info)) = self.queue_info(&queue).await else {
            return;
        };
        let Ok(window) = u64::try_from(info.min_pop_wait_time) else {
            return;
        };
        if window == 0 {
            return;
        }
        let until = (Instant::now() + Duration::from_millis(window)).min(deadline);
        let gate = self.gates.gate(&queue.key);
        let wait_key = wait_key_of(request);
        let batch = i32::try_from(request.batch).unwrap_or(i32::MAX);
        let max_partitions = i32::try_from(request.max_partitions.max(1)).unwrap_or(i32::MAX);
        loop {
            let seen = gate.generation();
            let pending = async {
                let client = self.pop_client().await?;
                Ok::<_, EngineError>(
                    queen_sql::pop::pending_count(
                        &**client,
                        info.id,
                        &request.group,
                        max_partitions,
                        batch,
                    )
                    .await?,
                )
            }
            .await;
            match pending {
                Ok(pending) if pending > 0 && pending < batch => {}
                // Empty, full, or unknown (the database is in trouble): no hold.
                _ => return,
            }
            tokio::select! {
                () = tokio::time::sleep_until(until.into()) => return,
                () = gate.wait_past(seen, &wait_key) => {}
            }
        }
    }

    /// One attempt. `woken`: the gate that just woke this pop, whose
    /// pushed-partition hints the SQL path tries first.
    async fn pop_once(
        &self,
        request: &PopRequest,
        woken: Option<&Gate>,
    ) -> Result<Popped, EngineError> {
        match &request.target {
            PopTarget::Partition { queue, partition } => {
                let queue = QueueRef::new(&request.tenant, queue);
                self.pop_partition(request, &queue, partition).await
            }
            PopTarget::Queue { queue } => {
                let queue = &QueueRef::new(&request.tenant, queue);
                if !self.config.hotlist {
                    let Some(info) = self.queue_or_subscribe(request, queue).await? else {
                        return Ok(Popped::default());
                    };
                    if let Some(gate) = woken {
                        let popped = self.pop_hinted(request, queue, &info, gate).await?;
                        if !popped.messages.is_empty() {
                            return Ok(popped);
                        }
                    }
                    return self.pop_scan(request, queue, &info).await;
                }
                // The cheap check comes before the queue lookup too, so a
                // caught-up queue's re-polls never take a connection.
                let probe = self.hot_probe(queue, &request.group);
                if probe.is_some_and(|probe| probe.idle()) {
                    return Ok(Popped::default());
                }
                let Some(info) = self.queue_or_subscribe(request, queue).await? else {
                    return Ok(Popped::default());
                };
                if probe.is_some() {
                    return self.pop_hot(request, queue, &info, probe).await;
                }
                // First contact here: one pop at a time per (queue, group).
                // Consumers woken together by the push that created their
                // queue used to run it side by side, and the ones that were
                // not elected met the seeder's locks ("busy", revisited 100 ms
                // later). The others wait in memory, then use the ring the
                // first one built.
                let _flight = self
                    .state
                    .first_contacts
                    .enter(&(info.id, request.group.as_str()))
                    .await;
                let probe = self.hot_probe(queue, &request.group);
                if probe.is_some_and(|probe| probe.idle()) {
                    return Ok(Popped::default());
                }
                self.pop_hot(request, queue, &info, probe).await
            }
            PopTarget::Discovery { namespace, task } => {
                let generation = self.gates.discovery(&request.tenant).generation();
                let queues = self
                    .state
                    .discovery
                    .get(
                        &request.tenant,
                        namespace.as_deref(),
                        task.as_deref(),
                        generation,
                        || async {
                            let client = self.pop_client().await?;
                            Ok(queen_sql::pop::queues_by_namespace_task(
                                &**client,
                                &request.tenant,
                                namespace.as_deref(),
                                task.as_deref(),
                            )
                            .await?)
                        },
                    )
                    .await?;
                for queue in queues.iter() {
                    let queue = &QueueRef::new(&request.tenant, queue);
                    let probe = self.hot_probe(queue, &request.group);
                    if self.config.hotlist && probe.is_some_and(|probe| probe.idle()) {
                        continue;
                    }
                    let Some(info) = self.queue_info(queue).await? else {
                        continue;
                    };
                    let popped = if self.config.hotlist {
                        self.pop_hot(request, queue, &info, probe).await?
                    } else {
                        self.pop_scan(request, queue, &info).await?
                    };
                    if !popped.messages.is_empty() {
                        return Ok(popped);
                    }
                }
                Ok(Popped::default())
            }
        }
    }

    /// The single-partition route.
    async fn pop_partition(
        &self,
        request: &PopRequest,
        queue: &QueueRef<'_>,
        partition: &str,
    ) -> Result<Popped, EngineError> {
        let worker = Uuid::now_v7();
        let params = params(request, worker, 1);
        let permit = self.limiter.acquire().await;
        let rows = {
            let client = self.pop_client().await?;
            queen_sql::pop::pop_specific(&client, queue.tenant, queue.name, partition, &params)
                .await?
        };
        permit.release();
        self.render(queue, request, worker, &rows).await
    }

    /// A queue's pop-relevant configuration (`queue_cache.rs`: cached, a
    /// missing queue only until its gate opens, one lookup at a time).
    pub(crate) async fn queue_info(
        &self,
        queue: &QueueRef<'_>,
    ) -> Result<Option<QueueInfo>, EngineError> {
        let generation = self.gates.generation(&queue.key);
        let info = self
            .state
            .queues
            .get(&queue.key, generation, || async {
                let client = self.pop_client().await?;
                Ok(queen_sql::pop::queue_info(&**client, queue.tenant, queue.name).await?)
            })
            .await?;
        self.note_min_pop_wait(info.as_ref());
        Ok(info)
    }

    fn note_min_pop_wait(&self, info: Option<&QueueInfo>) {
        if info.is_some_and(|i| i.min_pop_wait_time > 0) {
            self.state.any_min_pop_wait.store(true, Ordering::Relaxed);
        }
    }

    /// The queue of a pop, or `None` when it does not exist. A named group
    /// subscribing `new` or from a timestamp to a queue that does not exist
    /// yet provisions the queue row and records its subscription now
    /// (storage-model.md: "the first push, or an early subscription,
    /// provisions the row"), so what is pushed after the subscription is
    /// delivered, not skipped as older than the group's first contact.
    async fn queue_or_subscribe(
        &self,
        request: &PopRequest,
        queue: &QueueRef<'_>,
    ) -> Result<Option<QueueInfo>, EngineError> {
        if let Some(info) = self.queue_info(queue).await? {
            return Ok(Some(info));
        }
        let subscribes = request.group != QUEUE_MODE_GROUP
            && (request.subscription_mode == SubscriptionMode::New
                || request.subscription_from.is_some());
        if !subscribes {
            return Ok(None);
        }
        let params = params(request, Uuid::nil(), 1);
        let info = {
            let client = self.pop_client().await?;
            queen_sql::pop::subscribe_early(
                &**client,
                queue.tenant,
                queue.name,
                Uuid::now_v7(),
                &request.group,
                params.sub_mode,
                params.sub_from,
            )
            .await?
        };
        self.note_min_pop_wait(Some(&info));
        self.state.queues.put(&queue.key, info.clone());
        Ok(Some(info))
    }
}

/// Partitions the elected seeder seeds per transaction: few enough that a
/// chunk's advisory try-locks fit PostgreSQL's shared lock table beside
/// everything else (it holds `max_locks_per_transaction` × `max_connections`,
/// 6,400 at the defaults), many enough that 10,000 partitions take ten round
/// trips (about 1.3 times the old single statement's time).
const SEED_CHUNK: i32 = 1024;

/// The SQL candidate path's first contact of (queue, group) on this broker:
/// register, and if this call wins the election, bulk-seed every partition's
/// cursor chunk by chunk (the path's candidate filters count a missing
/// cursor as pending). No chunk waits on a pop creating a cursor, and no pop
/// waits on a chunk. The hot-list path seeds nothing: it registers the
/// subscription, and `log_hot_reseed_v1` applies it to missing cursors.
pub(crate) async fn first_contact_of(
    client: &impl queen_sql::GenericClient,
    queue_id: Uuid,
    params: &PopParams<'_>,
) -> Result<(), EngineError> {
    let seeder = queen_sql::pop::first_contact(
        client,
        queue_id,
        params.group,
        params.sub_mode,
        params.sub_from,
    )
    .await?;
    if !seeder {
        return Ok(());
    }
    let mut after = None;
    loop {
        after = queen_sql::pop::seed_cursors(
            client,
            queue_id,
            params.group,
            params.sub_mode,
            params.sub_from,
            after.as_deref(),
            SEED_CHUNK,
        )
        .await?;
        if after.is_none() {
            return Ok(());
        }
    }
}

/// The monotonic instant of a wall-clock time from PostgreSQL (a lease
/// expiry, the end of a hold), given one reading of both clocks; a time
/// already past is `now`.
fn instant_of(at: SystemTime, now: Instant, wall: SystemTime) -> Instant {
    now + at.duration_since(wall).unwrap_or(Duration::ZERO)
}
