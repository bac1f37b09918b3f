//! The facade: [`Engine`] builds the components, wires them together,
//! forwards push, pop, ack and transactions to them (counting each call in
//! `Stats`) and exposes the other components. It holds no mechanism of its
//! own beyond the wiring and the shutdown order.
//!
//! The components, and what each may touch (the types say it):
//!
//! | component | owns | holds of others |
//! | --- | --- | --- |
//! | push fusion (`push::Fusion`) | lanes, flushers, dedup cache | [`Ready`](crate::pop::Ready), the at-rest flags |
//! | pop serving (`pop::Serving`) | hot-list, wake gates, limiter, pop caches, revisit wheel, periodic reseeds | the ack registry (writes), the at-rest key |
//! | acks (`ack::Acks`) | ack counters | the ack registry (reads), `Ready` |
//! | transactions (`txn::Transactions`), dead-letter replay (`txn::replay`) | nothing | acks, `Ready`, the at-rest flags and key |
//! | lifecycle (`lifecycle::{Queues, Groups, DeadLetters, Messages, Streams, Traces}`) | nothing | the at-rest key; queues and groups `mesh::Changes`, queues the bounded set, dead letters and streams the transactions |
//! | retention (`retention::Retention`) | its loop task, counters | nothing |
//! | kept figures (`figures::Figures`) | its fold loop task, a counter | nothing |
//! | push routing (`push::Pushes`) | the spool (`spool::Spool`: files, writer thread, drainer task) | fusion, transactions, bounded queues, maintenance, the at-rest flags, statistics |
//! | invalidation (`mesh::Changes`) | nothing | pop serving, fusion, acks, the at-rest flags, the mesh's sending half |
//! | maintenance (`maintenance::Maintenance`) | the two persisted flags | nothing |
//! | bounded queues (`bounded::Bounded`) | the names of the queues with `maxSize` | nothing |
//! | cluster state (`cluster_state::ClusterState`) | its refresh task | maintenance, bounded queues, the at-rest flags, pop serving, push routing, invalidation |
//! | observer (`observe::Observer`) | the cluster-series cache, the statistics writer's state and tasks | every component it reads figures of |
//! | migration (`migration::Migration`) | the copy's state and task | nothing |
//!
//! Every component holds its own handle on the one connection pool; the
//! admin views and the consumer-group views read through the read pool,
//! which is the replica's when one is configured, else the same pool.

use std::sync::{Arc, Weak};
use std::time::SystemTime;

use uuid::Uuid;

use crate::ack::Acks;
use crate::bounded::Bounded;
use crate::cluster_state::ClusterState;
use crate::crypto::AtRest;
use crate::figures::Figures;
use crate::health::{Health, HealthProbe};
use crate::lifecycle::{Db, DeadLetters, Groups, Messages, Queues, Streams, Traces};
use crate::maintenance::Maintenance;
use crate::mesh::{Changes, Mesh};
use crate::migration::Migration;
use crate::observe::{Observed, Observer};
use crate::pop::{Serving, ServingConfig};
use crate::push::{Fusion, FusionConfig, Pushed, Pushes, RouteParts};
use crate::registry::AckRegistry;
use crate::retention::Retention;
use crate::stats::Stats;
use crate::txn::Transactions;
use crate::{
    AckItem, AckOutcome, EngineConfig, EngineError, LeaseError, PopRequest, Popped, PushItem,
    RetentionStats, TxnOp, TxnResult,
};

/// The broker. Cheap to share: hand out `Arc<Engine>`.
pub struct Engine {
    /// The other brokers on this database, when configured (its tasks end
    /// with the engine).
    _mesh: Option<Mesh>,
    pool: deadpool_postgres::Pool,
    /// The replica's pool, or `pool` (`EngineConfig::read_pool`).
    read_pool: deadpool_postgres::Pool,
    config: EngineConfig,
    push: Arc<Fusion>,
    pushes: Arc<Pushes>,
    serving: Arc<Serving>,
    acks: Arc<Acks>,
    txns: Arc<Transactions>,
    cluster_state: Arc<ClusterState>,
    observer: Arc<Observer>,
    queues: Queues,
    groups: Groups,
    dead_letters: DeadLetters,
    messages: Messages,
    streams: Streams,
    traces: Traces,
    migration: Migration,
    health: HealthProbe,
    retention: Arc<Retention>,
    figures: Figures,
    stats: Arc<Stats>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let config = &self.config;
        f.debug_struct("Engine")
            .field("config", config)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Build an engine over a pool whose database already carries the schema
    /// (see `queen_sql::apply_schema`). Must be called inside a tokio runtime:
    /// it starts the push flusher tasks and the revisit wheel.
    pub fn new(pool: deadpool_postgres::Pool, config: EngineConfig) -> Arc<Engine> {
        let engine = Arc::new_cyclic(|weak| Engine::build(pool, config, weak));
        engine
            .cluster_state
            .start_refresh(engine.config.maintenance_refresh);
        let observer = Arc::downgrade(&engine.observer);
        tokio::spawn(crate::stats_writer::sample_lag(observer.clone()));
        if let Some(interval) = engine.config.stats_interval {
            tokio::spawn(crate::stats_writer::run(observer, interval));
        }
        engine
    }

    /// The components, wired; `weak` is the engine being built (the mesh
    /// hands peers' hints to its cluster state through it).
    fn build(pool: deadpool_postgres::Pool, config: EngineConfig, weak: &Weak<Engine>) -> Engine {
        let at_rest = Arc::new(AtRest::new(config.encryption_key.clone()));
        let stats = Arc::new(Stats::default());
        let registry = Arc::new(AckRegistry::default());
        let figures = Figures::start(pool.clone(), config.figures_interval);
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
            figures.marks(),
        ));
        let mesh = config.mesh.as_ref().and_then(|mesh_config| {
            let engine = weak.clone();
            let apply: crate::mesh::Apply = Arc::new(move |hints| {
                if let Some(engine) = engine.upgrade() {
                    Arc::clone(&engine.cluster_state).apply_hints(hints);
                }
            });
            Mesh::start(mesh_config, pool.clone(), apply)
        });
        let out = mesh.as_ref().map(Mesh::out);
        let ready = serving.ready().with_mesh(out.clone());
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
            Arc::clone(&bounded),
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
                marks: figures.marks(),
            },
            config.spool.as_ref(),
        );
        let retention = Arc::new(Retention::start(pool.clone(), &config, Arc::clone(&stats)));
        let changes = Arc::new(Changes {
            serving: Arc::clone(&serving),
            at_rest: Arc::clone(&at_rest),
            push: Arc::clone(&push),
            acks: Arc::clone(&acks),
            out: out.clone(),
        });
        let cluster_state = ClusterState::new(
            maintenance,
            Arc::clone(&bounded),
            Arc::clone(&at_rest),
            Arc::clone(&serving),
            Arc::clone(&pushes),
            Arc::clone(&changes),
        );
        let observer = Observer::new(Observed {
            pool: pool.clone(),
            identity: (config.hostname.clone(), config.port),
            stats: Arc::clone(&stats),
            serving: Arc::clone(&serving),
            acks: Arc::clone(&acks),
            fusion: Arc::clone(&push),
            pushes: Arc::clone(&pushes),
            retention: Arc::clone(&retention),
            cluster_state: Arc::clone(&cluster_state),
            mesh: out,
            figures: figures.gauge(),
        });
        let read_pool = config.read_pool.clone().unwrap_or_else(|| pool.clone());
        let db = Db::new(pool.clone(), read_pool.clone(), at_rest);
        Engine {
            migration: Migration::new(config.migration.clone(), pool.clone()),
            read_pool,
            _mesh: mesh,
            health: HealthProbe::new(pool.clone()),
            queues: Queues::new(db.clone(), bounded, Arc::clone(&changes)),
            groups: Groups::new(db.clone(), changes, figures.publisher()),
            dead_letters: DeadLetters::new(db.clone(), Arc::clone(&txns)),
            messages: Messages::new(db.clone(), figures.marks()),
            streams: Streams::new(db.clone(), Arc::clone(&txns)),
            traces: Traces::new(db),
            stats,
            pool,
            config,
            push,
            pushes,
            serving,
            acks,
            txns,
            cluster_state,
            observer,
            retention,
            figures,
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
        let target = request.target.queue().map(str::to_owned);
        let tenant = Arc::clone(&request.tenant);
        let popped = self.serving.pop(request).await;
        self.stats.pop_call(&tenant, target.as_deref(), &popped);
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
        let queues = Stats::transaction_queues(tenant, &ops);
        let done = self.txns.transaction(tenant, ops).await;
        self.stats.transaction_call(&queues, &done);
        done
    }

    // ---- the components an operator reaches ----

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

    /// Maintenance modes and the other cluster-wide state.
    pub fn cluster_state(&self) -> &ClusterState {
        &self.cluster_state
    }

    /// The broker's figures: metrics, statistics rows, counters.
    pub fn observe(&self) -> &Observer {
        &self.observer
    }

    /// Copying the database to another PostgreSQL.
    pub fn migration(&self) -> &Migration {
        &self.migration
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
        self.health.report().await
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

    /// Run one fold pass of the admin views' kept figures now (the loop
    /// runs them every `figures_interval`): the partitions it folded (0
    /// when another broker was folding).
    pub async fn figures_pass(&self) -> Result<u64, EngineError> {
        self.figures.pass().await
    }

    /// Write this broker's push marks as dirty rows now (every admin view
    /// does so first), so the views count its pushes.
    pub async fn figures_publish(&self) -> Result<(), EngineError> {
        self.figures.publish().await
    }

    /// Partitions this broker's fold passes folded since it started.
    pub fn figures_folded(&self) -> u64 {
        self.figures.counts().0
    }

    /// Answer an admin view (`procedures/admin.sql`) from the read pool
    /// (the replica's, when configured; `postgres-stats` always from the
    /// primary, whose server it describes); `None` when what it names
    /// does not exist. The traces by name also carry each message's
    /// payload, decoded here from its segment.
    pub async fn admin_view(
        &self,
        tenant: &str,
        view: crate::AdminView<'_>,
    ) -> Result<Option<serde_json::Value>, EngineError> {
        let pool = match view {
            crate::AdminView::PostgresStats => &self.pool,
            _ => &self.read_pool,
        };
        if !matches!(view, crate::AdminView::PostgresStats) {
            self.figures.publisher().publish().await;
        }
        let mut answer = crate::admin::read(pool, tenant, view).await?;
        if let (crate::AdminView::TracesByName { .. }, Some(body)) = (view, answer.as_mut()) {
            self.messages.add_trace_payloads(tenant, body).await?;
        }
        Ok(answer)
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
    /// then push fusion (it drains), then the spool, the revisit wheel and
    /// the periodic reseeds, retention, the figures fold (its marks written),
    /// and the pool.
    pub async fn shutdown(&self) {
        self.serving.begin_shutdown();
        self.migration.shutdown();
        self.push.shutdown().await;
        if let Some(spool) = self.pushes.spool() {
            spool.shutdown().await;
        }
        self.serving.shutdown().await;
        self.retention.shutdown().await;
        self.figures.shutdown().await;
        self.pool.close();
    }
}
