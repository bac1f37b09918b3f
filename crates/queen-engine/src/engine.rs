//! The facade: [`Engine`] builds the components, wires them together,
//! forwards push, pop, ack and transactions to them and exposes the
//! lifecycle types. It holds no mechanism of its own beyond the wiring, the
//! cluster-state refresh and the shutdown order.
//!
//! The components, and what each may touch (the types say it):
//!
//! | component | owns | holds of others |
//! | --- | --- | --- |
//! | push fusion (`push::Fusion`) | lanes, flushers, dedup cache | [`Ready`](crate::pop::Ready), the at-rest flags |
//! | pop serving (`pop::Serving`) | hot-list, wake gates, limiter, pop caches, revisit wheel | the ack registry (writes), the at-rest key |
//! | acks (`ack::Acks`) | ack counters | the ack registry (reads), `Ready` |
//! | transactions (`txn::Transactions`), dead-letter replay (`txn::replay`) | nothing | acks, `Ready`, the at-rest flags and key |
//! | lifecycle (`lifecycle::{Queues, Groups, DeadLetters, Messages, Streams, Traces}`) | nothing | the at-rest key; queues and groups `mesh::Changes`, queues the bounded set, dead letters and streams the transactions |
//! | retention (`retention::Retention`) | its loop task, counters | nothing |
//! | push routing (`push::Pushes`) | the spool (`spool::Spool`: files, writer thread, drainer task) | fusion, transactions, bounded queues, maintenance, the at-rest flags, statistics |
//! | invalidation (`mesh::Changes`) | nothing | pop serving, fusion, acks, the at-rest flags, the mesh's sending half |
//! | maintenance (`maintenance::Maintenance`) | the two persisted flags | nothing |
//! | bounded queues (`bounded::Bounded`) | the names of the queues with `maxSize` | nothing |
//!
//! Every component holds its own handle on the one connection pool.
//!
//! The facade also runs the cluster-state refresh: every
//! `maintenance_refresh` it reads the persisted maintenance flags and
//! applies them to the spool and the pop path, and reads which queues have
//! `maxSize` (a task holding a weak reference, so it ends with the engine).

use std::sync::{Arc, Weak};
use std::time::{Instant, SystemTime};

use uuid::Uuid;

use crate::ack::Acks;
use crate::bounded::Bounded;
use crate::crypto::AtRest;
use crate::health::HealthProbe;
use crate::lifecycle::{Db, DeadLetters, Groups, Messages, Queues, Streams, Traces};
use crate::maintenance::Maintenance;
use crate::mesh::{Changes, Hint, Mesh, Reread};
use crate::metrics::{ClusterCache, ProcessMetrics, Scrape};
use crate::naming::queue_key;
use crate::pop::{Serving, ServingConfig};
use crate::push::{Fusion, FusionConfig, Pushed, Pushes, RouteParts};
use crate::registry::AckRegistry;
use crate::retention::Retention;
use crate::spool::SpoolStats;
use crate::stats::Stats;
use crate::stats_writer::WriterState;
use crate::txn::Transactions;
use crate::{
    AckItem, AckOutcome, EngineConfig, EngineError, LeaseError, LimiterStats, PopRequest, Popped,
    PushItem, PushStats, RetentionStats, TxnOp, TxnResult,
};

/// The broker. Cheap to share: hand out `Arc<Engine>`.
pub struct Engine {
    /// The other brokers on this database, when configured.
    mesh: Option<Mesh>,
    pool: deadpool_postgres::Pool,
    config: EngineConfig,
    started_at: Instant,
    at_rest: Arc<AtRest>,
    push: Arc<Fusion>,
    pushes: Arc<Pushes>,
    maintenance: Arc<Maintenance>,
    bounded: Arc<Bounded>,
    serving: Arc<Serving>,
    changes: Arc<Changes>,
    acks: Arc<Acks>,
    txns: Arc<Transactions>,
    queues: Queues,
    groups: Groups,
    dead_letters: DeadLetters,
    messages: Messages,
    streams: Streams,
    traces: Traces,
    health: HealthProbe,
    retention: Retention,
    stats: Arc<Stats>,
    cluster: ClusterCache,
    writer: WriterState,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .field("push", &self.push.stats())
            .finish_non_exhaustive()
    }
}

/// The sizes of the engine's maps keyed by names clients choose, and how each
/// is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    /// Wake gates: one per queue name popped; idle ones are swept when the
    /// map doubles (at least 1,024), so about the parked pops' gates plus as
    /// many idle ones.
    pub wake_gates: usize,
    /// The pop path's queue cache: entries past their TTL (1 s for a
    /// missing queue, 5 s for one that exists) are swept when the map
    /// doubles; at most 65,536.
    pub queue_cache_entries: usize,
    /// Leased batches the ack registry remembers: at most 100,000.
    pub ack_registry_batches: usize,
    /// Their bytes: at most 64 MiB.
    pub ack_registry_bytes: usize,
    /// The push dedup cache, names included: at most `QUEEN_DEDUP_CACHE_MB`.
    pub dedup_cache_bytes: usize,
}

/// What `/health` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// True when a round trip to PostgreSQL succeeded just now.
    pub database_connected: bool,
    /// Seconds since the engine was built.
    pub uptime_seconds: u64,
}

impl Engine {
    /// Build an engine over a pool whose database already carries the schema
    /// (see `queen_sql::apply_schema`). Must be called inside a tokio runtime:
    /// it starts the push flusher tasks and the revisit wheel.
    pub fn new(pool: deadpool_postgres::Pool, config: EngineConfig) -> Arc<Engine> {
        let engine = Arc::new_cyclic(|weak| Engine::build(pool, config, weak));
        tokio::spawn(refresh_maintenance(Arc::downgrade(&engine)));
        tokio::spawn(crate::stats_writer::sample_lag(Arc::downgrade(&engine)));
        if let Some(interval) = engine.config.stats_interval {
            tokio::spawn(crate::stats_writer::run(Arc::downgrade(&engine), interval));
        }
        engine
    }

    /// The components, wired; `weak` is the engine being built (the spool's
    /// drainer stores through it).
    fn build(pool: deadpool_postgres::Pool, config: EngineConfig, weak: &Weak<Engine>) -> Engine {
        let at_rest = Arc::new(AtRest::new(config.encryption_key.clone()));
        let stats = Arc::new(Stats::default());
        let registry = Arc::new(AckRegistry::default());
        let serving = Arc::new(Serving::start(
            pool.clone(),
            ServingConfig {
                hotlist: config.hotlist,
                hotlist_reseed: config.hotlist_reseed,
                pop_wait: config.pop_wait,
            },
            config.limiter,
            Arc::clone(&registry),
            Arc::clone(&at_rest),
        ));
        let mesh = config.mesh.as_ref().and_then(|mesh_config| {
            let engine = weak.clone();
            let apply: crate::mesh::Apply = Arc::new(move |hints| {
                if let Some(engine) = engine.upgrade() {
                    engine.apply_hints(hints);
                }
            });
            Mesh::start(mesh_config, pool.clone(), apply)
                .map_err(|error| {
                    tracing::error!(%error, "cannot start the mesh; peers will not hear of this broker's pushes");
                })
                .ok()
        });
        let ready = serving.ready().with_mesh(mesh.as_ref().map(Mesh::out));
        let push = Arc::new(Fusion::start(
            pool.clone(),
            FusionConfig {
                zstd_level: config.zstd_level,
                n_flushers: config.push_flushers,
                dedup_cache_bytes: config.dedup_cache_bytes,
            },
            Arc::clone(&at_rest),
            ready.clone(),
            Arc::clone(&stats),
        ));
        let maintenance = Arc::new(Maintenance::new(pool.clone()));
        let bounded = Arc::new(Bounded::new(pool.clone()));
        let acks = Arc::new(Acks::new(pool.clone(), registry, ready.clone()));
        let txns = Arc::new(Transactions::new(
            pool.clone(),
            config.zstd_level,
            Arc::clone(&at_rest),
            Arc::clone(&acks),
            ready,
        ));
        let pushes = Pushes::new(
            RouteParts {
                pool: pool.clone(),
                fusion: Arc::clone(&push),
                txns: Arc::clone(&txns),
                bounded: Arc::clone(&bounded),
                maintenance: Arc::clone(&maintenance),
                at_rest: Arc::clone(&at_rest),
                stats: Arc::clone(&stats),
            },
            config.spool.as_ref(),
        );
        let health = HealthProbe::new(pool.clone());
        let retention = Retention::start(
            pool.clone(),
            config.retention_interval,
            config.eviction_interval,
            config.partition_idle,
            config.stats_retention,
            Arc::clone(&stats),
        );
        let changes = Arc::new(Changes {
            serving: Arc::clone(&serving),
            at_rest: Arc::clone(&at_rest),
            push: Arc::clone(&push),
            acks: Arc::clone(&acks),
            out: mesh.as_ref().map(Mesh::out),
        });
        let db = Db::new(pool.clone(), Arc::clone(&at_rest));
        let queues = Queues::new(db.clone(), Arc::clone(&bounded), Arc::clone(&changes));
        let groups = Groups::new(db.clone(), Arc::clone(&changes));
        let dead_letters = DeadLetters::new(db.clone(), Arc::clone(&txns));
        let messages = Messages::new(db.clone());
        let streams = Streams::new(db.clone(), Arc::clone(&txns));
        let traces = Traces::new(db);
        Engine {
            mesh,
            cluster: ClusterCache::default(),
            writer: WriterState::default(),
            stats,
            pool,
            config,
            started_at: Instant::now(),
            at_rest,
            push,
            pushes,
            maintenance,
            bounded,
            changes,
            serving,
            acks,
            txns,
            queues,
            groups,
            dead_letters,
            messages,
            streams,
            traces,
            health,
            retention,
        }
    }

    /// The engine's settings.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    // ---- push, pop, ack, transactions ----

    /// Push `items`; answers one outcome per item, in input order, once every
    /// item is committed (or found to be a duplicate), or once all are in the
    /// spool (see `push/route.rs`).
    ///
    /// A transaction id repeated within one partition, in this request or in
    /// another request fused into the same flush, is a duplicate of its first
    /// occurrence (fusion settles that, see `fusion.rs`).
    ///
    /// If PostgreSQL fails, the whole call fails, although partitions whose
    /// flush committed keep their messages: retrying with the same
    /// transaction ids is safe, the committed ones come back as duplicates.
    pub async fn push(&self, items: Vec<PushItem>) -> Result<Pushed, EngineError> {
        self.pushes.push(items).await
    }

    /// Pop: claim and return messages, long-polling when asked.
    pub async fn pop(&self, request: PopRequest) -> Result<Popped, EngineError> {
        let target = match &request.target {
            crate::PopTarget::Queue { queue } | crate::PopTarget::Partition { queue, .. } => {
                Some(queue.clone())
            }
            crate::PopTarget::Discovery { .. } => None,
        };
        let tenant = Arc::clone(&request.tenant);
        let popped = self.serving.pop(request).await;
        match &popped {
            Ok(popped) => self.stats.popped(
                popped
                    .queue
                    .as_deref()
                    .or(target.as_deref())
                    .map(|queue| queue_key(&tenant, queue))
                    .as_deref(),
                popped.messages.len() as u64,
            ),
            Err(error) => self.stats.failed(error),
        }
        popped
    }

    /// Acknowledge `items` for consumer group `group`, on `tenant`'s
    /// partitions only: another tenant's partition id answers "Message not
    /// found" and changes nothing.
    pub async fn ack(
        &self,
        tenant: &str,
        group: &str,
        items: Vec<AckItem>,
    ) -> Result<Vec<AckOutcome>, EngineError> {
        let statuses: Vec<crate::AckStatus> =
            items.iter().map(|item| item.status.clone()).collect();
        let acked = self.acks.ack(tenant, group, items).await;
        self.stats.ack_call(tenant, &statuses, &acked);
        acked
    }

    /// Extend `lease` on every partition it holds by `seconds` from now.
    /// Returns the new expiry, or the reason it could not be extended.
    pub async fn extend_lease(
        &self,
        tenant: &str,
        lease: Uuid,
        seconds: i32,
    ) -> Result<Result<SystemTime, LeaseError>, EngineError> {
        self.acks.extend_lease(tenant, lease, seconds).await
    }

    /// Apply `ops` atomically. On failure nothing is applied and the error
    /// names the operation (`EngineError::TransactionFailed`). Every
    /// operation acts for `tenant`, whatever its items say.
    pub async fn transaction(
        &self,
        tenant: &str,
        ops: Vec<TxnOp>,
    ) -> Result<Vec<TxnResult>, EngineError> {
        let mut queues: Vec<String> = Vec::new();
        for op in &ops {
            if let TxnOp::Push(items) = op {
                for item in items {
                    let key = queue_key(tenant, &item.queue);
                    if !queues.iter().any(|queue| *queue == *key) {
                        queues.push(key.into_owned());
                    }
                }
            }
        }
        let done = self.txns.transaction(tenant, ops).await;
        match &done {
            Ok(_) => self.stats.transaction(queues.iter().map(String::as_str)),
            Err(error) => self.stats.failed(error),
        }
        done
    }

    // ---- the administrative reads and writes (`lifecycle/`) ----

    /// Configuring and deleting queues.
    pub fn queues(&self) -> &Queues {
        &self.queues
    }

    /// Consumer groups: delete, seek, re-time, and their views.
    pub fn groups(&self) -> &Groups {
        &self.groups
    }

    /// Dead letters: browse, delete, replay.
    pub fn dead_letters(&self) -> &DeadLetters {
        &self.dead_letters
    }

    /// The message listing and detail; moving a live message to the DLQ.
    pub fn messages(&self) -> &Messages {
        &self.messages
    }

    /// Streaming queries, their state and cycles.
    pub fn streams(&self) -> &Streams {
        &self.streams
    }

    /// Trace events.
    pub fn traces(&self) -> &Traces {
        &self.traces
    }

    // ---- the mesh ----

    /// Apply what a peer told this broker (`mesh/changes.rs`), then read
    /// again what its hints changed in the database.
    pub(crate) fn apply_hints(self: Arc<Self>, hints: Vec<Hint>) {
        let reread = self.changes.apply(hints);
        if reread == Reread::default() {
            return;
        }
        tokio::spawn(async move {
            if reread.marked {
                let _ = self.refresh_marked().await;
            }
            if reread.maintenance {
                if let Err(error) = self.refresh_maintenance().await {
                    tracing::debug!(error = %crate::error_chain(&error), "maintenance refresh after a peer's hint failed");
                }
            }
        });
    }

    /// What the mesh has sent and received (`None`: no mesh).
    pub fn mesh_stats(&self) -> Option<crate::MeshStats> {
        self.mesh.as_ref().map(Mesh::stats)
    }

    // ---- operation ----

    /// Warm up to `connections` pooled connections (capped at the pool's
    /// size): the statements of the push, first contact, pop and ack paths
    /// run once on each, in a transaction that is rolled back (see
    /// `warm.rs`). Returns how many were warmed; a failure is logged and
    /// only means the next requests on those connections are slower.
    pub async fn warm_up(&self, connections: usize) -> usize {
        crate::warm::warm_up(&self.pool, self.config.zstd_level, connections).await
    }

    /// Check the database with one round trip on a dedicated connection
    /// (not the pool, so a busy pool never reads as a database that is
    /// down), bounded by 2 s (see `health.rs`).
    pub async fn health(&self) -> Health {
        Health {
            database_connected: self.health.check().await,
            uptime_seconds: self.started_at.elapsed().as_secs(),
        }
    }

    /// Enable or disable pop maintenance mode (every pop answers empty) for
    /// every broker on the database: persisted, applied here at once, by the
    /// others within their refresh period. Enabling it wakes every parked
    /// pop, which then answers empty at once rather than delivering what
    /// arrives while it waited.
    pub async fn set_pop_maintenance(&self, enabled: bool) -> Result<(), EngineError> {
        self.maintenance
            .set_pop(enabled, |enabled| self.serving.set_maintenance(enabled))
            .await?;
        self.changes.tell(Hint::Maintenance);
        Ok(())
    }

    /// Whether pop maintenance mode is on.
    pub fn pop_maintenance(&self) -> bool {
        self.serving.maintenance()
    }

    /// Enable or disable push maintenance mode for every broker on the
    /// database: while on, pushes go to the spool; turning it off drains it.
    pub async fn set_maintenance(&self, enabled: bool) -> Result<(), EngineError> {
        self.maintenance
            .set_push(enabled, |enabled| {
                if let Some(spool) = self.pushes.spool() {
                    spool.set_maintenance(enabled);
                }
            })
            .await?;
        self.changes.tell(Hint::Maintenance);
        Ok(())
    }

    /// Whether push maintenance mode is on.
    pub fn maintenance(&self) -> bool {
        self.maintenance.push()
    }

    /// Read the cluster-wide state now (the maintenance flags, applied here;
    /// which queues have `maxSize`). The engine does this every
    /// `maintenance_refresh`; a server calls it once before it serves.
    pub async fn refresh_maintenance(&self) -> Result<(), EngineError> {
        self.refresh_marked().await?;
        self.maintenance
            .refresh(|push, pop| {
                if let Some(spool) = self.pushes.spool() {
                    spool.set_maintenance(push);
                }
                if self.serving.maintenance() != pop {
                    self.serving.set_maintenance(pop);
                }
            })
            .await
    }

    /// Read which queues have `maxSize` (for the push routing) and
    /// `encryptionEnabled` (what a keyless broker must not spool), in one
    /// statement.
    async fn refresh_marked(&self) -> Result<(), EngineError> {
        let encrypted = self.bounded.refresh().await?;
        self.at_rest.set_sealed(encrypted);
        Ok(())
    }

    /// What the push spool holds; `None` without a spool.
    pub fn spool_stats(&self) -> Option<SpoolStats> {
        self.pushes.spool().map(|spool| spool.stats())
    }

    /// Counters of the push path since the engine started.
    pub fn push_stats(&self) -> PushStats {
        self.push.stats()
    }

    /// (positional, by-hash) ack calls since start: how often the registry
    /// turned a full-batch ack into one cursor advance.
    pub fn ack_stats(&self) -> (u64, u64) {
        self.acks.stats()
    }

    /// What the maps keyed by client-chosen names hold now, with their
    /// bounds (see [`MemoryStats`]).
    pub fn memory_stats(&self) -> MemoryStats {
        let (wake_gates, queue_cache_entries) = self.serving.memory();
        let (ack_registry_batches, ack_registry_bytes) = self.acks.registry_size();
        let push = self.push.stats();
        MemoryStats {
            wake_gates,
            queue_cache_entries,
            ack_registry_batches,
            ack_registry_bytes,
            dedup_cache_bytes: usize::try_from(push.dedup_cache_bytes).unwrap_or(usize::MAX),
        }
    }

    /// Run one retention pass now (the loop runs them every
    /// `retention_interval`): what it removed.
    pub async fn retention_pass(&self) -> Result<RetentionStats, EngineError> {
        self.retention.pass().await
    }

    /// Run one eviction pass now (queue option `maxWaitTimeSeconds`; the loop
    /// runs them every `eviction_interval`): what it removed.
    pub async fn eviction_pass(&self) -> Result<RetentionStats, EngineError> {
        self.retention.evict().await
    }

    // ---- admin views ----

    /// Answer an admin view (`procedures/admin.sql`); `None` when what it
    /// names does not exist.
    pub async fn admin_view(
        &self,
        tenant: &str,
        view: crate::AdminView<'_>,
    ) -> Result<Option<serde_json::Value>, EngineError> {
        crate::admin::read(&self.pool, tenant, view).await
    }

    // ---- metrics and statistics ----

    /// The process series now: every component's figures, no database.
    pub fn process_metrics(&self) -> ProcessMetrics {
        let status = self.pool.status();
        let hotlist = self.serving.hotlist_size();
        ProcessMetrics {
            uptime: self.stats.uptime(),
            totals: self.stats.totals(),
            pool: (status.size, status.available, status.waiting),
            pool_max: status.max_size,
            limiter: self.serving.limiter_stats(),
            pops_in_progress: self.serving.in_progress(),
            parked: self.serving.parked(),
            hotlist: (hotlist.0, hotlist.1),
            hotlist_bytes: hotlist.2,
            pop_wakeups: self.serving.wakeups(),
            memory: self.memory_stats(),
            spool: self.spool_stats(),
            retention: self.retention.stats(),
            maintenance: (self.maintenance(), self.pop_maintenance()),
            cpu: crate::metrics::cpu_times(),
            rss_bytes: crate::metrics::rss_bytes(),
            mesh: self.mesh_stats(),
        }
    }

    /// One scrape: the process series, and the cluster series from one
    /// database call cached for `metrics::CLUSTER_TTL` (the last good copy,
    /// marked stale, when PostgreSQL does not answer within
    /// `metrics::CLUSTER_TIMEOUT`).
    pub async fn scrape(&self) -> Scrape {
        let (cluster, cluster_fresh) = self.cluster.get(&self.pool).await;
        Scrape {
            process: self.process_metrics(),
            cluster,
            cluster_fresh,
            histograms: Arc::clone(&self.stats),
        }
    }

    /// Write this broker's statistics rows for the current minute now (the
    /// writer does every `stats_interval`): one statement. Returns the queue
    /// rows written; on failure the counts wait for the next write.
    pub async fn write_stats(&self) -> Result<usize, EngineError> {
        let (cluster, _) = self.cluster.get(&self.pool).await;
        let process = self.process_metrics();
        let identity = (self.config.hostname.as_str(), self.config.port);
        self.writer
            .write(&self.pool, &self.stats, &process, &cluster, identity)
            .await
    }

    /// One event-loop lag sample (the sampler task's).
    pub(crate) fn record_event_loop_lag(&self, late: std::time::Duration) {
        self.stats.event_loop_lag(late);
    }

    /// What retention and eviction removed since the engine started.
    pub fn retention_stats(&self) -> RetentionStats {
        self.retention.stats()
    }

    /// The serving limiter's current figures.
    pub fn limiter_stats(&self) -> LimiterStats {
        self.serving.limiter_stats()
    }

    /// Connections the pop path has checked out since start: each is at
    /// least one SQL round trip. A caught-up queue polled through the
    /// hot-list costs none.
    pub fn pop_checkouts(&self) -> u64 {
        self.serving.checkouts()
    }

    /// Pops in progress right now, waiting or serving.
    pub fn pops_in_progress(&self) -> usize {
        self.serving.in_progress()
    }

    /// Pooled connections handed out right now.
    pub fn connections_in_use(&self) -> usize {
        let status = self.pool.status();
        status.size.saturating_sub(status.available)
    }

    // ---- shutdown ----

    /// True once shutdown began: pops answer empty at once.
    pub fn is_shutting_down(&self) -> bool {
        self.serving.is_shutting_down()
    }

    /// Begin shutdown: parked pops wake and answer empty, new pops answer
    /// empty at once. Pushes still commit until [`Engine::shutdown`].
    pub fn begin_shutdown(&self) {
        self.serving.begin_shutdown();
    }

    /// Stop background work after it has finished what was already submitted
    /// (push fusion writes every pending segment), then close the pool.
    /// The last step of the shutdown order: pops first (they answer empty),
    /// then push fusion (it drains), then the revisit wheel, then the pool.
    pub async fn shutdown(&self) {
        self.serving.begin_shutdown();
        self.push.shutdown().await;
        if let Some(spool) = self.pushes.spool() {
            spool.shutdown().await;
        }
        self.serving.shutdown().await;
        self.retention.shutdown().await;
        self.pool.close();
    }
}

/// The maintenance refresh: every `maintenance_refresh`, read and apply the
/// persisted flags, until the engine is dropped or shuts down.
async fn refresh_maintenance(engine: Weak<Engine>) {
    let mut first = true;
    loop {
        let period = {
            let Some(engine) = engine.upgrade() else {
                return;
            };
            if engine.is_shutting_down() {
                return;
            }
            if let Err(error) = engine.refresh_maintenance().await {
                if first {
                    tracing::debug!(error = %crate::error_chain(&error), "cannot read the maintenance flags yet");
                }
            }
            engine.config.maintenance_refresh
        };
        first = false;
        tokio::time::sleep(period).await;
    }
}
