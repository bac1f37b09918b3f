//! Maintenance mode (wire-api.md §4): two cluster-wide flags persisted in
//! `queen.system_state`, so every broker on the database follows them.
//!
//! - push maintenance: pushes go to the spool (`spool/`) instead of the
//!   database; turning it off lets the spool drain;
//! - pop maintenance: every pop answers empty at once.
//!
//! The broker that changes a flag writes the row and applies it at once;
//! every broker reads the rows at boot and every `refresh` period
//! (`QUEEN_MAINTENANCE_REFRESH_MS`), so a peer follows within one period.
//! While the database is unreachable the last flags read stay in force.
//! This component persists and holds the flags; the facade applies them to
//! the spool and the pop path.

use std::sync::atomic::{AtomicBool, Ordering};

use queen_sql::system;

use crate::EngineError;

/// The persisted flags and this broker's copy of them.
pub(crate) struct Maintenance {
    pool: deadpool_postgres::Pool,
    push: AtomicBool,
}

impl Maintenance {
    pub(crate) fn new(pool: deadpool_postgres::Pool) -> Maintenance {
        Maintenance {
            pool,
            push: AtomicBool::new(false),
        }
    }

    /// Read both flags from the database: (push, pop); the push flag is
    /// kept here, the pop flag is the pop path's.
    pub(crate) async fn refresh(&self) -> Result<(bool, bool), EngineError> {
        let client = self.pool.get().await.map_err(queen_sql::SqlError::from)?;
        let (push, pop) = system::maintenance_flags(&**client).await?;
        self.push.store(push, Ordering::Relaxed);
        Ok((push, pop))
    }

    /// Persist push maintenance mode, then keep it.
    pub(crate) async fn set_push(&self, enabled: bool) -> Result<(), EngineError> {
        self.persist(system::MAINTENANCE, enabled).await?;
        self.push.store(enabled, Ordering::Relaxed);
        Ok(())
    }

    /// Persist pop maintenance mode.
    pub(crate) async fn set_pop(&self, enabled: bool) -> Result<(), EngineError> {
        self.persist(system::POP_MAINTENANCE, enabled).await
    }

    /// Push maintenance mode as last read or set.
    pub(crate) fn push(&self) -> bool {
        self.push.load(Ordering::Relaxed)
    }

    async fn persist(&self, key: &str, enabled: bool) -> Result<(), EngineError> {
        let client = self.pool.get().await.map_err(queen_sql::SqlError::from)?;
        system::set_flag(&**client, key, enabled).await?;
        Ok(())
    }
}
