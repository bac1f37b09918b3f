//! The `/health` database check, on a connection of its own.
//!
//! A check through the pool waits for a free connection (up to the pool's
//! 10 s wait), so a busy broker would read as "database disconnected" and an
//! orchestrator would kill it. The probe keeps one dedicated session, made by
//! the pool's own manager (same settings) but never part of the pool, opened
//! on first use and again after it broke; the whole check (lock, connect,
//! round trip) is bounded by [`CHECK_BOUND`].

use std::time::{Duration, Instant};

use deadpool::managed::Manager as _;
use queen_sql::SqlError;

use crate::EngineError;

/// The longest one check may take; past it the database counts as
/// unreachable.
pub(crate) const CHECK_BOUND: Duration = Duration::from_secs(2);

/// What `/health` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// True when a round trip to PostgreSQL succeeded just now.
    pub database_connected: bool,
    /// Seconds since the engine was built.
    pub uptime_seconds: u64,
}

/// The dedicated health session.
pub(crate) struct HealthProbe {
    pool: deadpool_postgres::Pool,
    client: tokio::sync::Mutex<Option<deadpool_postgres::ClientWrapper>>,
    started_at: Instant,
}

impl HealthProbe {
    pub(crate) fn new(pool: deadpool_postgres::Pool) -> HealthProbe {
        HealthProbe {
            pool,
            client: tokio::sync::Mutex::new(None),
            started_at: Instant::now(),
        }
    }

    /// The database check and the uptime.
    pub(crate) async fn report(&self) -> Health {
        Health {
            database_connected: self.check().await,
            uptime_seconds: self.started_at.elapsed().as_secs(),
        }
    }

    /// One round trip on the dedicated session, within [`CHECK_BOUND`].
    pub(crate) async fn check(&self) -> bool {
        tokio::time::timeout(CHECK_BOUND, self.round_trip())
            .await
            .is_ok_and(|answered| answered.is_ok())
    }

    async fn round_trip(&self) -> Result<(), EngineError> {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_some_and(|client| client.is_closed()) {
            *slot = None;
        }
        let client = match slot.take() {
            Some(client) => client,
            None => self.pool.manager().create().await.map_err(SqlError::Db)?,
        };
        queen_sql::connect::ping(&*client).await?;
        *slot = Some(client);
        Ok(())
    }
}
