//! Queen's broker logic, independent of HTTP.
//!
//! The engine owns the connection pool and every in-memory mechanism of the
//! design pages (push fusion, the hot-list, wake gates, the limiter, the ack
//! registry, retention). `queen-http` is one front end for it; another Rust
//! service can embed it directly.
//!
//! **Invariant:** nothing here knows about hyper, HTTP status codes or wire JSON.

// A panic on input is a bug: no unwrap or expect outside tests (clippy.toml
// allows them in tests).
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod ack;
#[cfg(feature = "bench")]
#[doc(hidden)]
pub mod benches;
mod configure;
pub mod crypto;
mod dlq;
mod error;
mod hotlist;
mod lifecycle;
mod limiter;
pub mod naming;
mod pop;
mod push;
mod queue_cache;
mod registry;
mod traces;
mod txn;
mod wake;
mod warm;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub use ack::{AckItem, AckOutcome, AckStatus, LeaseError, INVALID_LEASE};
pub use configure::{ConfigureQueue, Configured, QueueSettings, MAX_NAME_BYTES};
pub use crypto::EncryptionKey;
pub use dlq::DeadLetter;
pub use error::EngineError;
pub use lifecycle::{CursorLag, GroupDeletion, GroupSummary, SeekTarget, Seeked, Subscription};
pub use limiter::{LimiterConfig, LimiterStats};
pub use pop::{
    PopRequest, PopTarget, PopWait, Popped, PoppedMessage, SubscriptionMode, QUEUE_MODE_GROUP,
};
pub use push::{PushItem, PushOutcome, PushStats, PushStatus, DEFAULT_DEDUP_CACHE_BYTES};
pub use queen_sql::dlq::DlqFilter;
pub use queen_sql::{error_chain, SqlError};
pub use traces::TraceEvent;
pub use txn::{TxnOp, TxnResult};

/// Engine-wide settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Identifies this broker in health output and logs.
    pub server_name: String,
    /// The at-rest key for queues with `encryptionEnabled` (`QUEEN_ENCRYPTION_KEY`).
    pub encryption_key: Option<EncryptionKey>,
    /// zstd level of new segments (`QUEEN_V2_ZSTD_LEVEL`).
    pub zstd_level: i32,
    /// Push flusher tasks: how many flush transactions may run at once
    /// (`QUEEN_PUSH_FLUSHERS`).
    pub push_flushers: usize,
    /// The push dedup cache's budget in bytes (`QUEEN_DEDUP_CACHE_MB`); 0
    /// turns the cache off. See [`DEFAULT_DEDUP_CACHE_BYTES`].
    pub dedup_cache_bytes: usize,
    /// Candidate selection by the in-memory hot-list (`QUEEN_HOTLIST`, default
    /// on); off means the SQL candidate scan.
    pub hotlist: bool,
    /// How often a hot-list ring is reseeded from SQL (`QUEEN_HOTLIST_RESEED_MS`).
    pub hotlist_reseed: Duration,
    /// Long-poll backoff floor (`POP_WAIT_*`).
    pub pop_wait: PopWait,
    /// The serving limiter's bounds.
    pub limiter: LimiterConfig,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            server_name: "queen".to_owned(),
            encryption_key: None,
            zstd_level: queen_frame::DEFAULT_ZSTD_LEVEL,
            push_flushers: 4,
            dedup_cache_bytes: DEFAULT_DEDUP_CACHE_BYTES,
            hotlist: true,
            hotlist_reseed: Duration::from_millis(5000),
            pop_wait: PopWait::default(),
            limiter: LimiterConfig::default(),
        }
    }
}

/// The broker. Cheap to share: hand out `Arc<Engine>`.
pub struct Engine {
    pool: deadpool_postgres::Pool,
    config: EngineConfig,
    started_at: Instant,
    fusion: push::Fusion,
    gates: Arc<wake::WakeGates>,
    hotlist: Arc<hotlist::HotList>,
    limiter: Arc<limiter::Limiter>,
    pop_state: pop::PopState,
    registry: registry::AckRegistry,
    /// (positional, by-hash) ack calls.
    ack_counts: (std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64),
    shutting_down: Arc<AtomicBool>,
    wheel: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .field("push", &self.fusion.stats())
            .finish_non_exhaustive()
    }
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
    /// it starts the push flusher tasks.
    pub fn new(pool: deadpool_postgres::Pool, config: EngineConfig) -> Arc<Engine> {
        let gates = Arc::new(wake::WakeGates::new(!config.hotlist));
        let hotlist = Arc::new(hotlist::HotList::default());
        let fusion = push::Fusion::start(
            pool.clone(),
            push::FusionConfig {
                key: config.encryption_key.clone(),
                zstd_level: config.zstd_level,
                n_flushers: config.push_flushers,
                dedup_cache_bytes: config.dedup_cache_bytes,
            },
            Arc::clone(&gates),
            Arc::clone(&hotlist),
        );
        let shutting_down = Arc::new(AtomicBool::new(false));
        let wheel = tokio::spawn(run_wheel(
            Arc::clone(&gates),
            Arc::clone(&hotlist),
            Arc::clone(&shutting_down),
        ));
        Arc::new(Engine {
            pool,
            limiter: limiter::Limiter::new(config.limiter),
            config,
            started_at: Instant::now(),
            fusion,
            gates,
            hotlist,
            pop_state: pop::PopState::default(),
            registry: registry::AckRegistry::default(),
            ack_counts: Default::default(),
            shutting_down,
            wheel: Mutex::new(Some(wheel)),
        })
    }

    /// True once shutdown began: pops answer empty at once.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }

    /// The serving limiter's current figures.
    pub fn limiter_stats(&self) -> LimiterStats {
        self.limiter.stats()
    }

    /// Begin shutdown: parked pops wake and answer empty, new pops answer
    /// empty at once. Pushes still commit until [`Engine::shutdown`].
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
        self.gates.open_all();
    }

    /// Forget cached configuration of this queue (push caches its encryption
    /// flag). Called after the queue is configured.
    pub(crate) fn queue_configured(&self, _tenant: &str, name: &str) {
        self.fusion.forget_queue(name);
        self.pop_state.forget_queue(name);
    }

    /// The engine's settings.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Check the database with one round trip.
    pub async fn health(&self) -> Health {
        let database_connected = self.ping().await.is_ok();
        Health {
            database_connected,
            uptime_seconds: self.started_at.elapsed().as_secs(),
        }
    }

    async fn ping(&self) -> Result<(), EngineError> {
        let client = self.pool.get().await.map_err(SqlError::from)?;
        queen_sql::connect::ping(&**client).await?;
        Ok(())
    }

    /// Forget everything cached about `queue` after it was deleted: hot-list
    /// rings, configuration, encryption flag, ack registry entries; parked
    /// pops on it answer empty at once.
    pub fn queue_deleted(&self, name: &str) {
        self.hotlist.forget_queue(name);
        self.pop_state.forget_queue(name);
        self.fusion.forget_queue(name);
        self.registry.forget_queue(name);
        self.gates.forget(name);
    }

    /// Forget cached state of consumer group `group` (on `queue`, or on every
    /// queue) after its cursors were deleted or moved: its next pop contacts
    /// SQL afresh and reseeds its rings.
    pub fn group_changed(&self, group: &str, queue: Option<&str>) {
        self.hotlist.forget_group(group, queue);
        self.pop_state.forget_contacts(group);
        if let Some(queue) = queue {
            self.gates.open(queue);
        }
    }

    /// Stop background work after it has finished what was already submitted
    /// (push fusion writes every pending segment), then close the pool.
    /// The last step of the shutdown order.
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        self.fusion.shutdown().await;
        let wheel = self.wheel.lock().take();
        if let Some(wheel) = wheel {
            let _ = wheel.await;
        }
        self.pool.close();
    }
}

/// How often the revisit wheel ticks: a lease expiry or a visibility hold is
/// noticed at most this late.
const WHEEL_TICK: Duration = Duration::from_millis(50);

/// How often idle hot-list rings are expired.
const RING_EXPIRY_EVERY: Duration = Duration::from_secs(60);

/// The revisit wheel: promotes due hot-list revisits and opens their queues'
/// gates, so a parked pop wakes when a lease expires or a hold ends.
async fn run_wheel(
    gates: Arc<wake::WakeGates>,
    hotlist: Arc<hotlist::HotList>,
    shutting_down: Arc<AtomicBool>,
) {
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
