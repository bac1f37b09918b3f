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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use queen_sql::system;

use crate::EngineError;

/// The persisted flags and this broker's copy of them.
pub(crate) struct Maintenance {
    pool: deadpool_postgres::Pool,
    push: AtomicBool,
    /// Bumped by every change made through this broker, after it committed:
    /// a refresh that read the rows across one does not apply what it read
    /// (it may predate the change).
    changes: AtomicU64,
    /// Held while a change or a refresh is applied (never across an await),
    /// so a refresh's check of `changes` and its apply are one step.
    applying: parking_lot::Mutex<()>,
}

impl Maintenance {
    pub(crate) fn new(pool: deadpool_postgres::Pool) -> Maintenance {
        Maintenance {
            pool,
            push: AtomicBool::new(false),
            changes: AtomicU64::new(0),
            applying: parking_lot::Mutex::new(()),
        }
    }

    /// Read both flags from the database: (push, pop); the push flag is
    /// kept here, the pop flag is the pop path's.
    /// `apply` gets them, unless a change through this broker happened
    /// meanwhile (what was read may predate it; the next refresh reads
    /// again).
    pub(crate) async fn refresh(&self, apply: impl FnOnce(bool, bool)) -> Result<(), EngineError> {
        let before = self.changes.load(Ordering::Acquire);
        let client = self.pool.get().await.map_err(queen_sql::SqlError::from)?;
        let (push, pop) = system::maintenance_flags(&**client).await?;
        let _applying = self.applying.lock();
        if self.changes.load(Ordering::Acquire) == before {
            self.push.store(push, Ordering::Relaxed);
            apply(push, pop);
        }
        Ok(())
    }

    /// Persist push maintenance mode, then keep it and `apply` it.
    pub(crate) async fn set_push(
        &self,
        enabled: bool,
        apply: impl FnOnce(bool),
    ) -> Result<(), EngineError> {
        self.persist(system::MAINTENANCE, enabled).await?;
        let _applying = self.applying.lock();
        self.changes.fetch_add(1, Ordering::AcqRel);
        self.push.store(enabled, Ordering::Relaxed);
        apply(enabled);
        Ok(())
    }

    /// Persist pop maintenance mode, then `apply` it.
    pub(crate) async fn set_pop(
        &self,
        enabled: bool,
        apply: impl FnOnce(bool),
    ) -> Result<(), EngineError> {
        self.persist(system::POP_MAINTENANCE, enabled).await?;
        let _applying = self.applying.lock();
        self.changes.fetch_add(1, Ordering::AcqRel);
        apply(enabled);
        Ok(())
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
