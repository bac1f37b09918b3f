//! Push routing: where a push goes (push fusion, the one-transaction path
//! for bounded queues, or the spool), and what the spool's drainer stores
//! through. It counts what it stored or spooled in the statistics.
//!
//! With a spool, a push is spooled instead (answered [`Pushed::Buffered`]
//! once on disk) while maintenance mode is on, while the database is
//! unreachable (the push failed with a transient database error or did not
//! commit within the spool's bound), and while earlier spooled pushes wait to
//! be drained (so order holds). The broker fixes a transaction id for every
//! item that has none before the first attempt, so an item whose attempt
//! committed after all is found duplicate when the spool drains.

use std::sync::{Arc, Weak};
use std::time::SystemTime;

use uuid::Uuid;

use crate::bounded::Bounded;
use crate::crypto::AtRest;
use crate::figures::Marks;
use crate::maintenance::Maintenance;
use crate::naming::queue_key;
use crate::push::Fusion;
use crate::spool::{Buffered, Reason, Route, Spool, SpoolConfig};
use crate::stats::Stats;
use crate::txn::Transactions;
use crate::{EngineError, PushItem, PushOutcome, PushStatus};

/// What a push did: every item stored (or found duplicate), or every item
/// spooled to be stored later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// Committed; one outcome per item, in input order.
    Stored(Vec<PushOutcome>),
    /// On disk in the spool (maintenance mode, or the database was
    /// unreachable); stored in this order, under these transaction ids,
    /// when the spool drains.
    Buffered(Vec<Buffered>),
}

impl Pushed {
    /// The outcomes of a stored push; `None` when it was spooled.
    pub fn stored(self) -> Option<Vec<PushOutcome>> {
        match self {
            Pushed::Stored(outcomes) => Some(outcomes),
            Pushed::Buffered(_) => None,
        }
    }
}

/// What the router holds of the other components.
pub(crate) struct Parts {
    pub(crate) pool: deadpool_postgres::Pool,
    pub(crate) fusion: Arc<Fusion>,
    pub(crate) txns: Arc<Transactions>,
    pub(crate) bounded: Arc<Bounded>,
    pub(crate) maintenance: Arc<Maintenance>,
    pub(crate) at_rest: Arc<AtRest>,
    pub(crate) stats: Arc<Stats>,
    /// This broker's unwritten figures marks: a bounded queue's refused
    /// push writes them and tries once more (see [`Pushes::store`]).
    pub(crate) marks: Arc<Marks>,
}

/// The push router.
pub(crate) struct Pushes {
    parts: Parts,
    spool: Option<Arc<Spool>>,
}

impl Pushes {
    /// The router, with the spool `config` names opened (a spool that cannot
    /// be opened is logged, and the broker runs without one).
    pub(crate) fn new(parts: Parts, config: Option<&SpoolConfig>) -> Arc<Pushes> {
        Arc::new_cyclic(|weak: &Weak<Pushes>| {
            let spool = config.and_then(|config| {
                Spool::open(config, drain_store(weak.clone()), parts.pool.clone())
                    .map_err(|error| {
                        tracing::error!(%error, dir = %config.dir.display(), "cannot open the push spool; running without one");
                    })
                    .ok()
            });
            Pushes { parts, spool }
        })
    }

    /// The spool, when there is one.
    pub(crate) fn spool(&self) -> Option<&Arc<Spool>> {
        self.spool.as_ref()
    }

    /// Push `items`; answers one outcome per item, in input order, once
    /// every item is committed (or found duplicate), or once all are
    /// spooled. Counted in the statistics.
    pub(crate) async fn push(&self, items: Vec<PushItem>) -> Result<Pushed, EngineError> {
        // Per item, the index of its queue's key in `per_queue`.
        let mut per_queue: Vec<(String, u64)> = Vec::new();
        let mut item_queue = Vec::with_capacity(items.len());
        for item in &items {
            let key = queue_key(&item.tenant, &item.queue);
            let index = match per_queue.iter().position(|(queue, _)| *queue == *key) {
                Some(index) => index,
                None => {
                    per_queue.push((key.into_owned(), 0));
                    per_queue.len() - 1
                }
            };
            item_queue.push(index);
        }
        let queues: Vec<&str> = per_queue.iter().map(|(queue, _)| queue.as_str()).collect();
        let pushed = self.route(items, &queues, &item_queue).await;
        drop(queues);
        let stats = &self.parts.stats;
        match &pushed {
            Ok(Pushed::Stored(outcomes)) => {
                for (outcome, &index) in outcomes.iter().zip(&item_queue) {
                    if outcome.status == PushStatus::Queued {
                        per_queue[index].1 += 1;
                    }
                }
                stats.pushed(per_queue.iter().map(|(queue, n)| (&**queue, *n)), false);
            }
            Ok(Pushed::Buffered(_)) => {
                for &index in &item_queue {
                    per_queue[index].1 += 1;
                }
                stats.pushed(per_queue.iter().map(|(queue, n)| (&**queue, *n)), true);
            }
            Err(error) => stats.failed(error),
        }
        pushed
    }

    /// Route `items`; `queues` are their distinct queue keys, `item_queue`
    /// each item's index in `queues`.
    async fn route(
        &self,
        mut items: Vec<PushItem>,
        queues: &[&str],
        item_queue: &[usize],
    ) -> Result<Pushed, EngineError> {
        let atomic = self.parts.bounded.any(queues.iter().copied());
        let Some(spool) = &self.spool else {
            if self.parts.maintenance.push() {
                return Err(EngineError::NoSpool);
            }
            return self.store(items, &[], atomic).await.map(Pushed::Stored);
        };
        let route = spool.route(queues.iter().copied());
        if let Route::Held(key) = route {
            // The spool holds records of a queue that was full when they
            // were drained: they go first, so this push waits (429).
            let held = queues.iter().position(|queue| *queue == key.as_str());
            let queue = item_queue
                .iter()
                .position(|index| Some(*index) == held)
                .and_then(|item| items.get(item))
                .map_or(key, |item| item.queue.clone());
            return Err(EngineError::QueueFull { queue });
        }
        let generated: Vec<bool> = items
            .iter_mut()
            .map(|item| {
                let generated = item.transaction_id.is_none();
                if generated {
                    item.transaction_id = Some(Uuid::now_v7().to_string());
                }
                generated
            })
            .collect();
        if route == Route::Spool {
            return self
                .spool_append(spool, &items, queues, Reason::Spooling)
                .await;
        }
        let attempt = tokio::time::timeout(
            spool.push_timeout(),
            self.store(items.clone(), &generated, atomic),
        )
        .await;
        match attempt {
            Ok(Ok(outcomes)) => Ok(Pushed::Stored(outcomes)),
            Ok(Err(error)) if !error.is_unreachable() => Err(error),
            Ok(Err(error)) => {
                tracing::debug!(error = %crate::error_chain(&error), "push failed; spooling it");
                self.spool_append(spool, &items, queues, Reason::Outage)
                    .await
            }
            Err(_elapsed) => {
                self.spool_append(spool, &items, queues, Reason::Outage)
                    .await
            }
        }
    }

    /// Spool `items`, unless one is for a queue known to be encrypted while
    /// this broker has no key: the spool would hold it in plaintext on this
    /// broker's disk, so it is refused as the store refuses it.
    async fn spool_append(
        &self,
        spool: &Spool,
        items: &[PushItem],
        queues: &[&str],
        reason: Reason,
    ) -> Result<Pushed, EngineError> {
        if let Some(key) = self.parts.at_rest.first_needing_key(queues.iter().copied()) {
            let queue = crate::naming::split_queue_key(key).1.to_owned();
            return Err(EngineError::EncryptionKeyMissing { queue });
        }
        spool.append(items, reason).await.map(Pushed::Buffered)
    }

    /// Store `items` through fusion, or in one transaction when `atomic` (a
    /// request naming a queue with `maxSize`: refused, it writes nothing).
    async fn store(
        &self,
        items: Vec<PushItem>,
        generated: &[bool],
        atomic: bool,
    ) -> Result<Vec<PushOutcome>, EngineError> {
        if atomic {
            // The depth a bounded queue's push is refused on counts a
            // consumption only once its broker marked it: when this broker
            // holds such marks, write them and try once more (a refused
            // push wrote nothing). Another broker's count within its fold
            // interval, which the 429's Retry-After covers.
            let retry = self.parts.marks.consumed_any().then(|| items.clone());
            match (self.parts.txns.push_atomic(items, generated).await, retry) {
                (Err(EngineError::QueueFull { .. }), Some(items))
                    if crate::figures::publish(&self.parts.pool, &self.parts.marks)
                        .await
                        .is_ok() =>
                {
                    self.parts.txns.push_atomic(items, generated).await
                }
                (result, _) => result,
            }
        } else {
            self.parts.fusion.push(items, generated).await
        }
    }

    /// Store spooled `items` (their transaction ids fixed): first the
    /// drain's duplicate check (`replay.rs`), which finds the items their
    /// partition already stored since `since[i]` (when item `i` was
    /// accepted, less the push timeout and clock slack) and before the drain
    /// pass began (`pass`, set by its first call), whatever the dedup
    /// window; those are answered duplicate, the rest go through the push
    /// path (one transaction when a queue is bounded).
    async fn drain(
        &self,
        items: Vec<PushItem>,
        since: Vec<SystemTime>,
        pass: crate::spool::Pass,
    ) -> Result<Vec<PushOutcome>, EngineError> {
        let until = *pass.lock();
        let (stored, until) =
            crate::push::already_stored(&self.parts.pool, &items, &since, until).await?;
        if let Some(until) = until {
            pass.lock().get_or_insert(until);
        }
        let mut outcomes: Vec<Option<PushOutcome>> = Vec::with_capacity(items.len());
        let mut rest = Vec::new();
        let mut places = Vec::new();
        for (index, (item, found)) in items.into_iter().zip(stored).enumerate() {
            match found {
                Some(found) => outcomes.push(Some(PushOutcome {
                    status: PushStatus::Duplicate,
                    transaction_id: item.transaction_id.unwrap_or_default(),
                    message_id: found.message_id,
                    partition_id: found.partition_id,
                    trace_id: item.trace_id,
                    queue: Arc::from(item.queue.as_str()),
                })),
                None => {
                    outcomes.push(None);
                    places.push(index);
                    rest.push(item);
                }
            }
        }
        if !rest.is_empty() {
            let atomic = self
                .parts
                .bounded
                .any_named(rest.iter().map(|item| (&*item.tenant, &*item.queue)));
            let stored = self.store(rest, &[], atomic).await?;
            for (index, outcome) in places.into_iter().zip(stored) {
                if let Some(slot) = outcomes.get_mut(index) {
                    *slot = Some(outcome);
                }
            }
        }
        outcomes
            .into_iter()
            .map(|outcome| outcome.ok_or(EngineError::Internal("a drained item got no answer")))
            .collect()
    }
}

/// How the spool's drainer stores what it drains: the push path without the
/// spool, behind the drain's duplicate check ([`Pushes::drain`]).
fn drain_store(pushes: Weak<Pushes>) -> crate::spool::Store {
    Arc::new(move |items, since, pass| {
        let pushes = pushes.clone();
        Box::pin(async move {
            let pushes = pushes.upgrade().ok_or(EngineError::ShuttingDown)?;
            pushes.drain(items, since, pass).await
        })
    })
}
