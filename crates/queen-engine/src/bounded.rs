//! Which queues have `maxSize`, so `Engine::push` sends a request naming
//! one through the one-transaction push (`txn/atomic.rs`), where a refused
//! request writes nothing.
//!
//! The limit itself is enforced by `log_push_v2` under the queue row's lock,
//! whichever way a push comes, so a stale answer here never lets a queue
//! grow past its `maxSize`; it only decides atomicity. The set is read from
//! the database at every cluster-state refresh (the engine's
//! `maintenance_refresh` tick) and updated at once by a configure through
//! this broker, so a queue bounded through another broker is known here
//! within one refresh period. Until then a request spanning several of its
//! partitions could keep the partitions that fit.
//!
//! Queues are known by their `naming::queue_key` (tenant and name).
//!
//! Memory: the keys of the queues with `maxSize`, at most [`MAX_BOUNDED`];
//! past that every push takes the one-transaction path (correct, slower).

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::naming::queue_key;
use crate::EngineError;

/// The most bounded queue names held.
pub(crate) const MAX_BOUNDED: usize = 100_000;

#[derive(Default)]
struct Known {
    names: HashSet<Arc<str>>,
    /// More bounded queues than [`MAX_BOUNDED`]: treat every queue as bounded.
    overflow: bool,
}

/// The set of bounded queues.
pub(crate) struct Bounded {
    pool: deadpool_postgres::Pool,
    known: RwLock<Arc<Known>>,
    /// Bumped by every [`Bounded::set`]: a refresh that read the table across
    /// one does not replace the set with what it read (it may predate it).
    changes: std::sync::atomic::AtomicU64,
}

impl Bounded {
    pub(crate) fn new(pool: deadpool_postgres::Pool) -> Bounded {
        Bounded {
            pool,
            known: RwLock::new(Arc::default()),
            changes: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// True when a push to any of `queues` must take the one-transaction path.
    pub(crate) fn any<'a>(&self, mut queues: impl Iterator<Item = &'a str>) -> bool {
        let known = Arc::clone(&self.known.read());
        if known.overflow {
            return true;
        }
        if known.names.is_empty() {
            return false;
        }
        queues.any(|queue| known.names.contains(queue))
    }

    /// [`Bounded::any`] of queues named (tenant, queue): no key is built
    /// while this broker knows no bounded queue.
    pub(crate) fn any_named<'a>(
        &self,
        queues: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> bool {
        let known = Arc::clone(&self.known.read());
        if known.overflow {
            return true;
        }
        if known.names.is_empty() {
            return false;
        }
        queues
            .into_iter()
            .any(|(tenant, queue)| known.names.contains(&*queue_key(tenant, queue)))
    }

    /// `queue` was configured through this broker with (or without) `maxSize`.
    pub(crate) fn set(&self, queue: &str, bounded: bool) {
        let mut known = self.known.write();
        self.changes
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        if known.names.contains(queue) == bounded {
            return;
        }
        let mut next = Known {
            names: known.names.clone(),
            overflow: known.overflow,
        };
        if bounded {
            if next.names.len() >= MAX_BOUNDED {
                next.overflow = true;
            } else {
                next.names.insert(Arc::from(queue));
            }
        } else {
            next.names.remove(queue);
        }
        *known = Arc::new(next);
    }

    /// Read the set from the database; returns the keys of the queues with
    /// `encryptionEnabled` read alongside (the same statement), at most
    /// [`MAX_BOUNDED`] of those too.
    pub(crate) async fn refresh(&self) -> Result<Vec<Arc<str>>, EngineError> {
        let before = self.changes.load(std::sync::atomic::Ordering::Acquire);
        let client = self.pool.get().await.map_err(queen_sql::SqlError::from)?;
        // Both kinds fit: each is capped at MAX_BOUNDED below.
        let limit = i64::try_from(2 * MAX_BOUNDED).unwrap_or(i64::MAX) + 1;
        let marked = queen_sql::queues::marked_queues(&**client, limit).await?;
        let bounded: Vec<&queen_sql::queues::MarkedQueue> =
            marked.iter().filter(|q| q.bounded).collect();
        let overflow = bounded.len() > MAX_BOUNDED || marked.len() > 2 * MAX_BOUNDED;
        let next = Known {
            names: bounded
                .iter()
                .take(MAX_BOUNDED)
                .map(|q| Arc::from(queue_key(&q.tenant, &q.name)))
                .collect(),
            overflow,
        };
        let encrypted = marked
            .iter()
            .filter(|q| q.encrypted)
            .take(MAX_BOUNDED)
            .map(|q| Arc::from(queue_key(&q.tenant, &q.name)))
            .collect();
        let mut known = self.known.write();
        if self.changes.load(std::sync::atomic::Ordering::Acquire) == before {
            *known = Arc::new(next);
        }
        Ok(encrypted)
    }
}
