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
mod hotlist;
mod limiter;
mod queue_cache;
mod ready;
mod wake;

pub use limiter::{LimiterConfig, LimiterStats};
pub(crate) use ready::Ready;

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

/// The consumer group of queue mode: one shared cursor per partition.
pub const QUEUE_MODE_GROUP: &str = "__QUEUE_MODE__";

/// What to pop from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PopTarget {
    /// One named partition.
    Partition {
        /// Queue name.
        queue: String,
        /// Partition name.
        partition: String,
    },
    /// Any partitions of a queue.
    Queue {
        /// Queue name.
        queue: String,
    },
    /// Any queue with this namespace and/or task.
    Discovery {
        /// Namespace filter.
        namespace: Option<String>,
        /// Task filter.
        task: Option<String>,
    },
}

/// Where a new cursor of a named group starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriptionMode {
    /// Everything retained.
    All,
    /// Only what arrives after the subscription (`new`, `new-only`, `now`).
    New,
}

/// A pop, as the engine needs it (the HTTP layer applies the wire defaults).
#[derive(Debug, Clone)]
pub struct PopRequest {
    /// The tenant whose queues are popped.
    pub tenant: Arc<str>,
    /// What to pop from.
    pub target: PopTarget,
    /// Consumer group; [`QUEUE_MODE_GROUP`] for queue mode.
    pub group: String,
    /// Most messages, across partitions.
    pub batch: usize,
    /// Most partitions (wildcard pops).
    pub max_partitions: usize,
    /// Long-poll until a message or the timeout.
    pub wait: bool,
    /// Long-poll deadline.
    pub timeout: Duration,
    /// At-most-once delivery: no lease.
    pub auto_ack: bool,
    /// Subscription mode for a cursor this pop creates.
    pub subscription_mode: SubscriptionMode,
    /// Subscription timestamp for a cursor this pop creates.
    pub subscription_from: Option<SystemTime>,
}

/// One delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoppedMessage {
    /// Message id.
    pub id: Uuid,
    /// Transaction id.
    pub transaction_id: String,
    /// Trace id, if the producer sent one.
    pub trace_id: Option<Uuid>,
    /// Producer `sub`, when auth stamped one.
    pub producer_sub: Option<String>,
    /// The payload, decrypted, exactly as the producer sent it.
    pub payload: Bytes,
    /// The segment's commit timestamp.
    pub created_at: SystemTime,
    /// The partition's id.
    pub partition_id: Uuid,
    /// The partition's name.
    pub partition: Arc<str>,
    /// The message's offset in its partition (admin and tests only).
    pub offset: i64,
}

/// The answer of a pop.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Popped {
    /// Queue the messages came from.
    pub queue: Option<String>,
    /// Messages, partition by partition, in offset order within each.
    pub messages: Vec<PoppedMessage>,
    /// The lease id (`None` for auto-ack or an empty pop).
    pub lease_id: Option<Uuid>,
    /// Partitions that delivered.
    pub partitions_claimed: usize,
}

/// Long-poll backoff (decisions.md §6): `initial` for the first `threshold`
/// attempts, then `initial × attempt × multiplier`, capped at `max`.
#[derive(Debug, Clone, Copy)]
pub struct PopWait {
    /// `POP_WAIT_INITIAL_INTERVAL_MS`.
    pub initial: Duration,
    /// `POP_WAIT_BACKOFF_THRESHOLD`.
    pub threshold: u32,
    /// `POP_WAIT_BACKOFF_MULTIPLIER`.
    pub multiplier: u32,
    /// `POP_WAIT_MAX_INTERVAL_MS`.
    pub max: Duration,
}

impl Default for PopWait {
    fn default() -> PopWait {
        PopWait {
            initial: Duration::from_millis(100),
            threshold: 3,
            multiplier: 2,
            max: Duration::from_millis(1000),
        }
    }
}

impl PopWait {
    /// The re-poll interval after `attempt` empty attempts since the last wake.
    pub fn interval(&self, attempt: u32) -> Duration {
        if attempt < self.threshold {
            return self.initial.min(self.max);
        }
        self.initial
            .saturating_mul(attempt.saturating_mul(self.multiplier.max(1)))
            .min(self.max)
    }
}

/// Who `request` waits as on its queue's gate: its group, and its partition
/// when it pops only that one.
fn wait_key_of(request: &PopRequest) -> WaitKey {
    match &request.target {
        PopTarget::Partition { partition, .. } => WaitKey::new(&request.group, Some(partition)),
        _ => WaitKey::new(&request.group, None),
    }
}

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
    wheel: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Serving {
    /// Build pop serving and start its revisit wheel on the current runtime.
    pub(crate) fn start(
        pool: deadpool_postgres::Pool,
        config: ServingConfig,
        limiter: LimiterConfig,
        registry: Arc<AckRegistry>,
        at_rest: Arc<AtRest>,
    ) -> Serving {
        let gates = Arc::new(WakeGates::new(!config.hotlist));
        let hotlist = Arc::new(HotList::default());
        let shutting_down = Arc::new(AtomicBool::new(false));
        let wheel = tokio::spawn(run_wheel(
            Arc::clone(&gates),
            Arc::clone(&hotlist),
            Arc::clone(&shutting_down),
        ));
        Serving {
            pool,
            config,
            state: PopState::default(),
            limiter: Limiter::new(limiter),
            gates,
            hotlist,
            registry,
            at_rest,
            shutting_down,
            wheel: Mutex::new(Some(wheel)),
        }
    }

    /// The handle writers announce committed work through.
    pub(crate) fn ready(&self) -> Ready {
        Ready::new(Arc::clone(&self.hotlist), Arc::clone(&self.gates))
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

    /// Stop the revisit wheel (after [`Serving::begin_shutdown`]).
    pub(crate) async fn shutdown(&self) {
        self.begin_shutdown();
        let wheel = self.wheel.lock().take();
        if let Some(wheel) = wheel {
            let _ = wheel.await;
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
            let popped = match self.pop_once(&request, woken.then_some(&*gate)).await {
                Ok(popped) => popped,
                Err(error) if error.is_transient() => {
                    tracing::warn!(error = %crate::error_chain(&error), "pop attempt failed; answering empty");
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
            let interval = self.config.pop_wait.interval(attempt).min(deadline - now);
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
                }
            }
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
    async fn pop_client(&self) -> Result<deadpool_postgres::Object, EngineError> {
        self.state.checkouts.fetch_add(1, Ordering::Relaxed);
        Ok(self.pool.get().await.map_err(queen_sql::SqlError::from)?)
    }

    /// Parked pops a wake gate woke since start.
    pub(crate) fn wakeups(&self) -> u64 {
        self.state.wakeups.load(Ordering::Relaxed)
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

    /// One look at the ring of (queue, group): `None` when this broker has
    /// none yet (first contact).
    fn hot_probe(&self, queue: &QueueRef<'_>, group: &str) -> Option<crate::pop::hotlist::Probe> {
        let probe = self.hotlist.probe(
            &queue.key,
            group,
            Instant::now(),
            self.config.hotlist_reseed,
        );
        probe.known.then_some(probe)
    }

    /// The hot-list path. `probe` is the cheap check the caller made (`None`:
    /// no ring yet, so this is the first contact).
    async fn pop_hot(
        &self,
        request: &PopRequest,
        queue: &QueueRef<'_>,
        info: &QueueInfo,
        probe: Option<crate::pop::hotlist::Probe>,
    ) -> Result<Popped, EngineError> {
        let group = request.group.as_str();
        let first_contact = probe.is_none();
        let reseed = probe.is_none_or(|probe| probe.reseed_due);
        let worker = Uuid::now_v7();
        let params = params(request, worker, request.max_partitions);
        let permit = self.limiter.acquire().await;
        let (rows, candidates) = {
            let client = self.pop_client().await?;
            if first_contact {
                first_contact_of(&**client, info.id, &params).await?;
            }
            if reseed {
                let limit =
                    i64::try_from(crate::pop::hotlist::MAX_RING_PARTITIONS).unwrap_or(i64::MAX);
                let names =
                    queen_sql::pop::pending_partitions(&**client, info.id, group, limit).await?;
                self.hotlist
                    .reseed(&queue.key, group, names, Instant::now());
            }
            let k = (request.max_partitions.saturating_mul(8)).clamp(16, 256);
            let candidates = self.hotlist.take_share(
                &queue.key,
                group,
                k,
                request.max_partitions.saturating_mul(2),
                self.limiter.stats().in_flight,
                Instant::now(),
            );
            if candidates.names.is_empty() {
                permit.release();
                return Ok(Popped::default());
            }
            let skip_window = candidates.skip_window;
            // Out of the ring until checked in: if this future is dropped
            // first (the client went away mid-statement), the guard puts
            // every name back.
            let taken = Taken {
                serving: self,
                queue,
                group,
                names: candidates.names,
            };
            let names: Vec<&str> = taken.names.iter().map(String::as_str).collect();
            let rows =
                queen_sql::pop::pop_list(&client, info.id, &names, &params, skip_window).await;
            (rows, taken)
        };
        permit.release();
        let rows = match rows {
            // Nothing was claimed: every candidate goes back (the guard).
            Err(error) => return Err(error.into()),
            Ok(rows) => rows,
        };
        let candidates = candidates.into_names();
        if rows.is_empty() {
            // Every visited name yields a verdict, and the first is always
            // visited: no row at all means the cached queue id is gone (the
            // queue was deleted or re-created through another broker). Its
            // rings name the old queue's partitions: the next pop looks the
            // queue up again and makes first contact afresh.
            self.state.forget_queue(&queue.key);
            self.hotlist.forget_queue(&queue.key);
            return Ok(Popped::default());
        }
        self.check_in(queue, group, &rows, candidates);
        self.render(queue, request, worker, &rows).await
    }

    /// The SQL candidate path after a wake (life-of-a-pop step 7): a targeted
    /// pop of the partitions the gate's hints name, instead of another
    /// candidate scan. One `log_pop_list_v1` call visits them in turn, as a
    /// single-partition pop of each would, in one round trip rather than one
    /// per hint. Names it did not reach go back to the gate; when nothing is
    /// delivered the caller falls through to the wildcard scan, the backstop
    /// for missed wakes and older backlog. Before first contact there is no
    /// cursor to pop from: the scan's first contact comes first.
    async fn pop_hinted(
        &self,
        request: &PopRequest,
        queue: &QueueRef<'_>,
        info: &QueueInfo,
        gate: &Gate,
    ) -> Result<Popped, EngineError> {
        let key = (info.id, request.group.clone());
        if !self.state.contacted.lock().contains(&key) {
            return Ok(Popped::default());
        }
        let hints = gate.take_hints();
        if hints.is_empty() {
            return Ok(Popped::default());
        }
        let worker = Uuid::now_v7();
        let params = params(request, worker, request.max_partitions);
        // Given back to the gate when this future is dropped first.
        let hints = TakenHints { gate, hints };
        let names: Vec<&str> = hints.hints.iter().map(String::as_str).collect();
        let permit = self.limiter.acquire().await;
        let rows = async {
            let client = self.pop_client().await?;
            Ok::<_, EngineError>(
                queen_sql::pop::pop_list(&client, info.id, &names, &params, false).await?,
            )
        }
        .await;
        permit.release();
        // An error claimed nothing: every hint goes back (the guard).
        let rows = rows?;
        gate.return_hints(unvisited(&rows, hints.into_hints()));
        self.render(queue, request, worker, &rows).await
    }

    /// The SQL candidate path (`QUEEN_HOTLIST=0`).
    async fn pop_scan(
        &self,
        request: &PopRequest,
        queue: &QueueRef<'_>,
        info: &QueueInfo,
    ) -> Result<Popped, EngineError> {
        let group = request.group.as_str();
        let worker = Uuid::now_v7();
        let params = params(request, worker, request.max_partitions);
        let key = (info.id, request.group.clone());
        let contacted = self.state.contacted.lock().contains(&key);
        {
            let client = self.pop_client().await?;
            if !contacted {
                first_contact_of(&**client, info.id, &params).await?;
                self.state.contacted.lock().insert(key);
            } else if !queen_sql::pop::has_pending(&**client, info.id, group).await? {
                // The cheap probe, before any permit: definitively nothing.
                return Ok(Popped::default());
            }
        }
        let permit = self.limiter.acquire().await;
        let rows = {
            let client = self.pop_client().await?;
            queen_sql::pop::pop_wildcard(&client, info.id, &params).await?
        };
        permit.release();
        self.render(queue, request, worker, &rows).await
    }

    /// Check verdicts back into the ring.
    fn check_in(
        &self,
        queue: &QueueRef<'_>,
        group: &str,
        rows: &[PopRow],
        candidates: Vec<String>,
    ) {
        let now = Instant::now();
        let wall = SystemTime::now();
        let to_instant = |at: Option<SystemTime>| at.map(|at| instant_of(at, now, wall));
        let mut outcomes = Vec::new();
        for row in rows {
            let PopRow::Verdict {
                partition,
                verdict,
                revisit_at,
                ..
            } = row
            else {
                continue;
            };
            let outcome = match verdict {
                // A leased batch locks the partition for the group until its
                // ack (whose promote brings the name back) or its expiry: no
                // other pop could claim it meanwhile, so it waits instead of
                // drawing every parked consumer to a partition they cannot
                // have. Auto-acked, there may be more for anyone: keep it.
                Verdict::Delivered => match to_instant(*revisit_at) {
                    Some(at) => Outcome::RevisitAt(at),
                    None => Outcome::Delivered,
                },
                // A drained partition leaves the ring; a leased batch comes back
                // at its lease expiry in case it is never acked, an auto-acked
                // one when its hidden delayedProcessing tail shows.
                Verdict::Drained => match to_instant(*revisit_at) {
                    Some(at) => Outcome::RevisitAt(at),
                    None => Outcome::Empty,
                },
                // A name with no partition leaves the ring like an empty one.
                Verdict::Empty | Verdict::Missing => Outcome::Empty,
                // A lease's expiry, or when a delayedProcessing tail shows;
                // the latter goes through every gate again (no window skip).
                Verdict::Leased | Verdict::Delayed => Outcome::RevisitAt(
                    to_instant(*revisit_at).unwrap_or_else(|| HotList::busy_revisit(now)),
                ),
                Verdict::Busy => Outcome::RevisitAt(HotList::busy_revisit(now)),
                // Only windowBuffer's hold is the wheel's to end (its
                // revisit skips the SQL debounce).
                Verdict::Deferred => match to_instant(*revisit_at) {
                    Some(at) => Outcome::WindowUntil(at),
                    None => Outcome::RevisitAt(HotList::busy_revisit(now)),
                },
            };
            outcomes.push((partition.clone(), outcome));
        }
        let unvisited = unvisited(rows, candidates);
        if self
            .hotlist
            .check_in(&queue.key, group, &outcomes, unvisited, now)
        {
            // A pop found the ring empty while these names were out, and
            // parked: without this it would sleep until its backoff re-poll.
            self.gates.open(&queue.key);
        }
    }

    /// Decompress, slice and decrypt the delivered frames: off the worker
    /// thread when the segments are large (`offload.rs`).
    async fn render(
        &self,
        queue: &QueueRef<'_>,
        request: &PopRequest,
        worker: Uuid,
        rows: &[PopRow],
    ) -> Result<Popped, EngineError> {
        let bytes = rows
            .iter()
            .map(|row| match row {
                PopRow::Segment { blob, .. } => crate::offload::inflated_estimate(blob.len()),
                PopRow::Verdict { .. } => 0,
            })
            .sum();
        // Per partition the claimed span's last offset, and whether any of
        // its frames is this group's: a replayed dead letter is for the
        // groups that dead-lettered it only (its frame's audience).
        let mut spans: HashMap<Uuid, (i64, bool)> = HashMap::new();
        let rendered = crate::offload::cpu(bytes, || -> Result<Popped, EngineError> {
            let mut messages = Vec::new();
            let mut names: HashMap<Uuid, Arc<str>> = HashMap::new();
            for row in rows {
                let PopRow::Segment {
                    partition_id,
                    partition,
                    base_offset,
                    start_idx,
                    take,
                    created_at,
                    blob,
                    ..
                } = row
                else {
                    continue;
                };
                let name = Arc::clone(
                    names
                        .entry(*partition_id)
                        .or_insert_with(|| Arc::from(partition.as_str())),
                );
                let segment = queen_frame::decompress(blob)?;
                let first = base_offset.saturating_add(i64::try_from(*start_idx).unwrap_or(0));
                let last = first.saturating_add(i64::try_from(*take).unwrap_or(0)) - 1;
                let span = spans.entry(*partition_id).or_insert((last, false));
                span.0 = span.0.max(last);
                for (idx, frame) in segment.slice(*start_idx, *take)?.iter().enumerate() {
                    if !frame.delivered_to(&request.group) {
                        continue;
                    }
                    spans.entry(*partition_id).or_insert((last, false)).1 = true;
                    let payload = if frame.encrypted {
                        let key = self.at_rest.key().ok_or_else(|| {
                            EngineError::EncryptionKeyMissing {
                                queue: queue.name.to_owned(),
                            }
                        })?;
                        Bytes::from(key.open(frame.payload)?)
                    } else {
                        segment.bytes().slice_ref(frame.payload)
                    };
                    let offset_in_segment = i64::try_from(start_idx + idx).unwrap_or(i64::MAX);
                    messages.push(PoppedMessage {
                        id: Uuid::from_bytes(frame.message_id),
                        transaction_id: frame.transaction_id.to_owned(),
                        trace_id: frame.trace_id.map(Uuid::from_bytes),
                        producer_sub: frame.producer_sub.map(str::to_owned),
                        payload,
                        created_at: *created_at,
                        partition_id: *partition_id,
                        partition: Arc::clone(&name),
                        offset: base_offset.saturating_add(offset_in_segment),
                    });
                }
            }
            let lease_id = (!messages.is_empty() && !request.auto_ack).then_some(worker);
            if let Some(lease) = lease_id {
                self.register_leased(queue, &request.group, lease, rows, &messages, &spans);
            }
            Ok(Popped {
                queue: (!messages.is_empty()).then(|| queue.name.to_owned()),
                messages,
                lease_id,
                partitions_claimed: names.len(),
            })
        })
        .await;
        if rendered.is_err() && request.auto_ack {
            self.give_back(queue, &request.group, rows).await;
        }
        if rendered.is_ok() && !request.auto_ack {
            self.release_hidden(queue, &request.group, worker, rows, &spans)
                .await;
        }
        rendered
    }

    /// A leased claim whose span held no frame for this group (only replayed
    /// dead letters of other groups) delivered nothing: move the cursor over
    /// it and release the lease at once instead of at its expiry.
    async fn release_hidden(
        &self,
        queue: &QueueRef<'_>,
        group: &str,
        lease: Uuid,
        rows: &[PopRow],
        spans: &HashMap<Uuid, (i64, bool)>,
    ) {
        let hidden: Vec<(Uuid, &str, i64)> = rows
            .iter()
            .filter_map(|row| match row {
                PopRow::Verdict {
                    partition_id,
                    partition,
                    verdict: Verdict::Delivered | Verdict::Drained,
                    ..
                } => match spans.get(partition_id) {
                    Some(&(end, false)) => Some((*partition_id, partition.as_str(), end)),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        if hidden.is_empty() {
            return;
        }
        let Ok(client) = self.pop_client().await else {
            return; // The lease's expiry releases it.
        };
        for (partition_id, partition, end) in hidden {
            match queen_sql::ack::ack_batch(&client, partition_id, group, lease, end).await {
                Ok(acked) if acked.acked && acked.pending => {
                    self.ready()
                        .promoted(queue.tenant, queue.name, group, partition);
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(%error, %partition_id, "releasing a claim with nothing for this group failed; its lease expires");
                }
            }
        }
    }

    /// An auto-acked claim moved the cursors in the claiming statement, but
    /// its messages cannot be delivered (a payload sealed with a key this
    /// broker does not hold): put each partition's cursor back before what
    /// it claimed, so the messages are delivered again (once the key is
    /// there) instead of lost. When another pop moved a cursor meanwhile,
    /// that partition's rewind is refused and logged.
    async fn give_back(&self, queue: &QueueRef<'_>, group: &str, rows: &[PopRow]) {
        let mut claimed: Vec<(Uuid, &str, i64, i64)> = Vec::new();
        for row in rows {
            let PopRow::Segment {
                partition_id,
                partition,
                base_offset,
                start_idx,
                take,
                ..
            } = row
            else {
                continue;
            };
            let first = base_offset.saturating_add(i64::try_from(*start_idx).unwrap_or(0));
            let last = first.saturating_add(i64::try_from(*take).unwrap_or(0)) - 1;
            match claimed.iter_mut().find(|(id, ..)| id == partition_id) {
                Some((_, _, from, to)) => {
                    *from = (*from).min(first);
                    *to = (*to).max(last);
                }
                None => claimed.push((*partition_id, partition, first, last)),
            }
        }
        let Ok(client) = self.pop_client().await else {
            tracing::error!(
                queue = queue.name,
                "an undeliverable auto-ack claim could not be given back: no connection"
            );
            return;
        };
        for (partition_id, partition, from, to) in claimed {
            match queen_sql::pop::rewind_auto_ack(&**client, partition_id, group, from, to).await {
                Ok(true) => {
                    // Pending again: the ring offers it (no gate opens, so a
                    // message that cannot be opened is not retried in a loop).
                    self.hotlist.mark_ready_for(&queue.key, group, partition);
                    tracing::warn!(queue = queue.name, %partition_id, from, to, "auto-ack claim given back: its messages could not be opened");
                }
                Ok(false) | Err(_) => {
                    tracing::error!(queue = queue.name, %partition_id, from, to, "an undeliverable auto-ack claim could not be given back; a seek reaches its messages");
                }
            }
        }
    }

    /// Remember what a leased pop served, per partition, so a full ack is one
    /// positional advance.
    fn register_leased(
        &self,
        queue: &QueueRef<'_>,
        group: &str,
        lease: Uuid,
        rows: &[PopRow],
        messages: &[PoppedMessage],
        spans: &HashMap<Uuid, (i64, bool)>,
    ) {
        let now = Instant::now();
        let wall = SystemTime::now();
        for row in rows {
            let PopRow::Verdict {
                partition_id,
                partition,
                verdict: Verdict::Delivered | Verdict::Drained,
                revisit_at,
            } = row
            else {
                continue;
            };
            let served: Vec<&PoppedMessage> = messages
                .iter()
                .filter(|m| m.partition_id == *partition_id)
                .collect();
            let Some(last) = served.last() else {
                continue;
            };
            // The claimed span's end, past frames of other groups' replays
            // this group does not see: acking every served message moves the
            // cursor over those too.
            let batch_end = spans
                .get(partition_id)
                .map_or(last.offset, |&(end, _)| end.max(last.offset));
            let lease_ends = revisit_at.map_or(now, |at| instant_of(at, now, wall));
            self.registry.register(
                lease,
                *partition_id,
                crate::registry::Served {
                    group: group.to_owned(),
                    queue: queue.key.clone().into_owned(),
                    partition: partition.clone(),
                    batch_end,
                    hashes: served
                        .iter()
                        .map(|m| queen_frame::txn_hash(&m.transaction_id))
                        .collect(),
                    forget_at: lease_ends,
                },
                lease_ends,
            );
        }
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

/// The first contact of (queue, group) on this broker: register, and if this
/// call wins the election, bulk-seed every partition's cursor chunk by chunk.
/// No chunk waits on a pop creating a cursor, and no pop waits on a chunk.
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

/// Names a pop took from a hot-list ring: checked back in, all unvisited,
/// if dropped before [`Taken::into_names`] (the pop's future was dropped
/// mid-statement, or its statement failed), so no partition stays out of
/// the ring until the next reseed.
struct Taken<'a> {
    serving: &'a Serving,
    queue: &'a QueueRef<'a>,
    group: &'a str,
    names: Vec<String>,
}

impl Taken<'_> {
    /// The names, for the caller to check in with their verdicts.
    fn into_names(mut self) -> Vec<String> {
        std::mem::take(&mut self.names)
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if !self.names.is_empty() {
            let names = std::mem::take(&mut self.names);
            self.serving.check_in(self.queue, self.group, &[], names);
        }
    }
}

/// Pushed-partition hints a pop took from a gate: given back if dropped
/// before [`TakenHints::into_hints`].
struct TakenHints<'a> {
    gate: &'a Gate,
    hints: Vec<String>,
}

impl TakenHints<'_> {
    fn into_hints(mut self) -> Vec<String> {
        std::mem::take(&mut self.hints)
    }
}

impl Drop for TakenHints<'_> {
    fn drop(&mut self) {
        if !self.hints.is_empty() {
            self.gate.return_hints(std::mem::take(&mut self.hints));
        }
    }
}

/// Candidates a pop list never reached: the names with no verdict row (every
/// visited partition yields one), in candidate order.
fn unvisited(rows: &[PopRow], candidates: Vec<String>) -> Vec<String> {
    let visited: HashSet<&str> = rows
        .iter()
        .filter_map(|row| match row {
            PopRow::Verdict { partition, .. } => Some(partition.as_str()),
            PopRow::Segment { .. } => None,
        })
        .collect();
    candidates
        .into_iter()
        .filter(|name| !visited.contains(name.as_str()))
        .collect()
}

/// The monotonic instant of a wall-clock time from PostgreSQL (a lease
/// expiry, the end of a hold), given one reading of both clocks; a time
/// already past is `now`.
fn instant_of(at: SystemTime, now: Instant, wall: SystemTime) -> Instant {
    now + at.duration_since(wall).unwrap_or(Duration::ZERO)
}

fn params(request: &PopRequest, worker: Uuid, max_partitions: usize) -> PopParams<'_> {
    PopParams {
        group: &request.group,
        worker,
        budget: i32::try_from(request.batch.max(1)).unwrap_or(i32::MAX),
        max_partitions: i32::try_from(max_partitions.max(1)).unwrap_or(i32::MAX),
        lease_seconds: None,
        auto_ack: request.auto_ack,
        sub_mode: match request.subscription_mode {
            SubscriptionMode::All => "all",
            SubscriptionMode::New => "new",
        },
        sub_from: request.subscription_from,
    }
}

/// How often the revisit wheel ticks: a lease expiry or a visibility hold is
/// noticed at most this late.
const WHEEL_TICK: Duration = Duration::from_millis(50);

/// How often idle hot-list rings are expired.
const RING_EXPIRY_EVERY: Duration = Duration::from_secs(60);

/// The revisit wheel: promotes due hot-list revisits and opens their queues'
/// gates, so a parked pop wakes when a lease expires or a hold ends.
async fn run_wheel(gates: Arc<WakeGates>, hotlist: Arc<HotList>, shutting_down: Arc<AtomicBool>) {
    let mut ticker = tokio::time::interval(WHEEL_TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_expiry = Instant::now();
    while !shutting_down.load(Ordering::Relaxed) {
        ticker.tick().await;
        let now = Instant::now();
        for queue in hotlist.promote_due(now) {
            gates.open(&queue);
        }
        if now.duration_since(last_expiry) >= RING_EXPIRY_EVERY {
            hotlist.expire_idle(now);
            last_expiry = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_floor_matches_the_documented_schedule() {
        let wait = PopWait::default();
        let ms = |attempt| wait.interval(attempt).as_millis();
        assert_eq!([ms(0), ms(1), ms(2)], [100, 100, 100]);
        assert_eq!(ms(3), 600);
        assert_eq!(ms(4), 800);
        assert_eq!(ms(5), 1000);
        assert_eq!(ms(50), 1000);
    }
}
