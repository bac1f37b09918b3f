//! Queen's broker logic, independent of HTTP.
//!
//! The engine owns the connection pool and every in-memory mechanism of the
//! design pages (push fusion, the hot-list, wake gates, the limiter, the ack
//! registry, retention). `queen-http` is one front end for it; another Rust
//! service can embed it directly.
//!
//! **Invariant:** nothing here knows about hyper, HTTP status codes or wire JSON.

mod configure;
pub mod crypto;
mod error;
pub mod naming;
mod push;

use std::sync::Arc;
use std::time::Instant;

pub use configure::{ConfigureQueue, Configured, QueueSettings, MAX_NAME_BYTES};
pub use crypto::EncryptionKey;
pub use error::EngineError;
pub use push::{PushItem, PushOutcome, PushStats, PushStatus};
pub use queen_sql::{error_chain, SqlError};

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
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            server_name: "queen".to_owned(),
            encryption_key: None,
            zstd_level: queen_frame::DEFAULT_ZSTD_LEVEL,
            push_flushers: 4,
        }
    }
}

/// The broker. Cheap to share: hand out `Arc<Engine>`.
pub struct Engine {
    pool: deadpool_postgres::Pool,
    config: EngineConfig,
    started_at: Instant,
    fusion: push::Fusion,
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
        let fusion = push::Fusion::start(
            pool.clone(),
            config.encryption_key.clone(),
            config.zstd_level,
            config.push_flushers,
        );
        Arc::new(Engine {
            pool,
            config,
            started_at: Instant::now(),
            fusion,
        })
    }

    /// Forget cached configuration of this queue (push caches its encryption
    /// flag). Called after the queue is configured.
    pub(crate) fn queue_configured(&self, _tenant: &str, name: &str) {
        self.fusion.forget_queue(name);
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

    /// Stop background work after it has finished what was already submitted
    /// (push fusion writes every pending segment), then close the pool.
    /// The last step of the shutdown order.
    pub async fn shutdown(&self) {
        self.fusion.shutdown().await;
        self.pool.close();
    }
}
