//! Queen's broker logic, independent of HTTP.
//!
//! The engine owns the connection pool and every in-memory mechanism of the
//! design pages (push fusion, the hot-list, wake gates, the limiter, the ack
//! registry, retention). `queen-http` is one front end for it; another Rust
//! service can embed it directly.
//!
//! **Invariant:** nothing here knows about hyper, HTTP status codes or wire JSON.

mod error;

use std::sync::Arc;
use std::time::Instant;

pub use error::EngineError;
pub use queen_sql::{error_chain, SqlError};

/// Engine-wide settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Identifies this broker in health output and logs.
    pub server_name: String,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            server_name: "queen".to_owned(),
        }
    }
}

/// The broker. Cheap to share: hand out `Arc<Engine>`.
#[derive(Debug)]
pub struct Engine {
    pool: deadpool_postgres::Pool,
    config: EngineConfig,
    started_at: Instant,
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
    /// (see `queen_sql::apply_schema`).
    pub fn new(pool: deadpool_postgres::Pool, config: EngineConfig) -> Arc<Engine> {
        Arc::new(Engine {
            pool,
            config,
            started_at: Instant::now(),
        })
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

    /// Close the pool: idle connections are dropped and no new ones are handed out.
    /// The last step of the shutdown order.
    pub fn close(&self) {
        self.pool.close();
    }
}
