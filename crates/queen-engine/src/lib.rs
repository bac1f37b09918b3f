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
mod admin;
mod bounded;
mod cluster_state;
pub mod crypto;
mod engine;
mod error;
mod figures;
mod health;
mod lifecycle;
mod maintenance;
mod mesh;
pub mod metrics;
mod migration;
pub mod naming;
mod observe;
mod offload;
mod pop;
#[cfg(feature = "bench")]
#[doc(hidden)]
pub use pop::benches;
mod push;
mod reader;
mod registry;
mod retention;
mod spool;
mod stats;
mod stats_writer;
mod txn;
mod warm;

use std::time::Duration;

pub use ack::{AckItem, AckOutcome, AckStatus, LeaseError, INVALID_LEASE};
pub use admin::{AdminRange, AdminView, QueueSeries};
pub use cluster_state::ClusterState;
pub use crypto::EncryptionKey;
pub use engine::Engine;
pub use error::EngineError;
pub use health::Health;
pub use lifecycle::configure::{ConfigureQueue, Configured, QueueSettings, MAX_NAME_BYTES};
pub use lifecycle::dlq::{DeadLetter, DlqFilter, DlqTake};
pub use lifecycle::groups::{GroupDeletion, GroupSummary, SeekTarget, Seeked};
pub use lifecycle::message_delete::{
    DeleteBlock, MessageDeletion, MAX_COPIES, MAX_SCAN_BYTES, MAX_SCAN_SEGMENTS,
};
pub use lifecycle::messages::{
    GroupView, ListedMessage, MessageDetail, MessageFilter, MessagePage, MessageStatus, MovedToDlq,
    MAX_PAGE_SEGMENTS,
};
pub use lifecycle::streams::{
    QueryRegistration, Registered, StateFilter, StateRow, MAX_CONFIG_HASH_BYTES,
    MAX_STATE_KEY_BYTES,
};
pub use lifecycle::traces::TraceEvent;
pub use lifecycle::{
    CursorLag, DeadLetters, Groups, Messages, Queues, Streams, Subscription, Traces,
};
pub use mesh::{
    test_datagram as mesh_test_datagram, Hint, MeshConfig, MeshState, MeshStats, MeshTransport,
    PeerHeard,
};
pub use migration::{
    ConnectionTest, Migration, MigrationConfig, MigrationPhase, MigrationStatus, MigrationTarget,
    TableCount, Validation, MAX_OUTPUT_BYTES as MIGRATION_MAX_OUTPUT_BYTES,
    SKIPPABLE as MIGRATION_SKIPPABLE,
};
pub use observe::{MemoryStats, Observer};
pub use pop::{LimiterConfig, LimiterStats};
pub use pop::{
    PopRequest, PopTarget, PopWait, Popped, PoppedMessage, SubscriptionMode, QUEUE_MODE_GROUP,
};
pub use push::{PushItem, PushOutcome, PushStats, PushStatus, Pushed, DEFAULT_DEDUP_CACHE_BYTES};
pub use queen_sql::{error_chain, SqlError};
pub use retention::RetentionStats;
pub use spool::{Buffered, SpoolConfig, SpoolStats};
pub use stats::{DeliveryLag, LagWindow, QueueMinute, TotalsSnapshot, MAX_QUEUES_PER_MINUTE};
pub use txn::{CycleAck, CycleDone, Replayed, StateOp, StreamCycle, TxnOp, TxnResult, MAX_REPLAY};

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
    /// How often the retention loop runs (`RETENTION_INTERVAL`); `None`: no
    /// loop, passes run only through [`Engine::retention_pass`].
    pub retention_interval: Option<Duration>,
    /// How often the eviction loop runs (`EVICTION_INTERVAL`); `None`: no
    /// loop, passes run only through [`Engine::eviction_pass`].
    pub eviction_interval: Option<Duration>,
    /// How often the admin views' kept figures are folded
    /// (`QUEEN_FIGURES_FOLD_MS`); `None`: no loop, passes run only through
    /// [`Engine::figures_pass`] (the views stay exact, and slow down with
    /// what is left unfolded).
    pub figures_interval: Option<Duration>,
    /// How long an empty partition must stay idle before the retention pass
    /// removes it (`QUEEN_PARTITION_IDLE_SECONDS`); `None`: never.
    pub partition_idle: Option<Duration>,
    /// The push spool (`FILE_BUFFER_DIR` and its limits); `None`: no spool,
    /// a push the database does not take fails, and pushes during
    /// maintenance mode answer [`EngineError::NoSpool`].
    pub spool: Option<SpoolConfig>,
    /// How often the maintenance flags are read from the database
    /// (`QUEEN_MAINTENANCE_REFRESH_MS`).
    pub maintenance_refresh: Duration,
    /// How often this broker writes its statistics rows
    /// (`QUEEN_STATS_INTERVAL_MS`, one minute); `None`: never.
    pub stats_interval: Option<Duration>,
    /// Statistics rows older than this are purged by the retention loop
    /// (`QUEEN_STATS_RETENTION_DAYS`, 7 days).
    pub stats_retention: Duration,
    /// The host name the statistics rows carry.
    pub hostname: String,
    /// The port the broker listens on, for the statistics rows.
    pub port: u16,
    /// The mesh with the other brokers on this database (`mesh/`); `None`:
    /// this broker tells nobody, and learns of other brokers' pushes at
    /// its hot-list reseeds.
    pub mesh: Option<MeshConfig>,
    /// Where a database migration copies from (`Engine::migration`); `None`:
    /// the migration answers that this broker cannot migrate.
    pub migration: Option<MigrationConfig>,
    /// A pool on a read replica (`QUEEN_DATABASE_READ_URL`) for the
    /// read-only admin and statistics views; `None`: they read the primary.
    /// Nothing that writes, or must see its own writes, uses it.
    pub read_pool: Option<deadpool_postgres::Pool>,
}

/// This machine's host name (`localhost` when it cannot be read).
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "localhost".to_owned())
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
            retention_interval: Some(Duration::from_millis(300_000)),
            eviction_interval: Some(Duration::from_millis(60_000)),
            figures_interval: Some(Duration::from_millis(1000)),
            partition_idle: Some(Duration::from_secs(86_400)),
            spool: None,
            maintenance_refresh: Duration::from_millis(1000),
            stats_interval: Some(Duration::from_secs(60)),
            stats_retention: Duration::from_secs(7 * 86_400),
            hostname: hostname(),
            port: 6632,
            mesh: None,
            migration: None,
            read_pool: None,
        }
    }
}
