//! The pop path's cache of queue configuration (id, `min_pop_wait_time`), and
//! discovery pops' cache of which queues a (namespace, task) matches.
//!
//! A pop needs the queue's id before it can ask SQL anything, and asking
//! PostgreSQL on every pop would cost a pooled connection per re-poll. So:
//!
//! - a queue that exists is trusted for [`QUEUE_INFO_TTL`] (configure on this
//!   broker forgets it at once; another broker's configure is seen within the
//!   TTL);
//! - a queue that does not exist is trusted only while its wake gate has not
//!   opened since the lookup: the push that creates a queue opens its gate
//!   after commit, so the consumer it wakes looks the queue up again instead of
//!   believing a stale "missing" for up to a second. Without any
//!   wake (a push through another broker) "missing" lasts
//!   [`MISSING_QUEUE_TTL`];
//! - one lookup per queue at a time (single flight): the pops that wake
//!   together on a gate wait for one answer instead of each taking a
//!   connection.
//!
//! Memory: keyed by queue names clients choose, so bounded twice: entries
//! past their TTL are swept whenever the map has doubled since the last
//! sweep (at least [`SWEEP_FLOOR`] entries), so misses for queues that do
//! not exist last about a second, not until the cap; and at most
//! [`MAX_ENTRIES`] are held: when full of fresh entries, a lookup is simply
//! not cached.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

// tokio's clock: the real one, which tests can pause and advance.
use tokio::time::Instant;

use parking_lot::Mutex;
use queen_sql::pop::QueueInfo;

use crate::EngineError;

/// How long a queue's configuration is trusted from cache.
pub(super) const QUEUE_INFO_TTL: Duration = Duration::from_secs(5);

/// How long "no such queue" is trusted when no push wakes its gate.
pub(super) const MISSING_QUEUE_TTL: Duration = Duration::from_secs(1);

/// Most queues cached at once.
pub(super) const MAX_ENTRIES: usize = 65_536;

/// Expired entries are swept once the map holds at least this many.
pub(super) const SWEEP_FLOOR: usize = 1024;

/// One lookup's answer.
#[derive(Debug, Clone)]
struct Cached {
    at: Instant,
    info: Option<QueueInfo>,
    /// The queue's wake-gate generation read before the lookup.
    generation: u64,
}

impl Cached {
    fn fresh(&self, now: Instant, generation: u64) -> bool {
        match self.info {
            Some(_) => now.duration_since(self.at) < QUEUE_INFO_TTL,
            None => {
                self.generation == generation && now.duration_since(self.at) < MISSING_QUEUE_TTL
            }
        }
    }
}

/// One queue's slot: its answer, and the single-flight lock of its lookup.
#[derive(Debug, Default)]
struct Slot {
    cached: Mutex<Option<Cached>>,
    flight: tokio::sync::Mutex<()>,
}

impl Slot {
    fn fresh(&self, now: Instant, generation: u64) -> Option<Option<QueueInfo>> {
        let cached = self.cached.lock();
        cached
            .as_ref()
            .filter(|cached| cached.fresh(now, generation))
            .map(|cached| cached.info.clone())
    }

    fn expired(&self, now: Instant) -> bool {
        self.cached.lock().as_ref().is_none_or(|cached| {
            let ttl = match cached.info {
                Some(_) => QUEUE_INFO_TTL,
                None => MISSING_QUEUE_TTL,
            };
            now.duration_since(cached.at) >= ttl
        })
    }
}

/// The cache; see the module docs.
#[derive(Debug, Default)]
pub(super) struct QueueCache {
    slots: Mutex<Slots>,
}

#[derive(Debug, Default)]
struct Slots {
    by_queue: HashMap<String, Arc<Slot>>,
    /// The size at which expired entries are next swept.
    sweep_at: usize,
}

impl QueueCache {
    /// The configuration of `queue`, from cache or from `fetch` (one fetch per
    /// queue at a time). `generation` is the queue's wake-gate generation now.
    pub(super) async fn get<F, Fut>(
        &self,
        queue: &str,
        generation: u64,
        fetch: F,
    ) -> Result<Option<QueueInfo>, EngineError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<QueueInfo>, EngineError>>,
    {
        let Some(slot) = self.slot(queue, Instant::now()) else {
            return fetch().await;
        };
        if let Some(info) = slot.fresh(Instant::now(), generation) {
            return Ok(info);
        }
        let _flight = slot.flight.lock().await;
        // Whoever held the flight may have answered for us.
        if let Some(info) = slot.fresh(Instant::now(), generation) {
            return Ok(info);
        }
        let at = Instant::now();
        let info = fetch().await?;
        *slot.cached.lock() = Some(Cached {
            at,
            info: info.clone(),
            generation,
        });
        Ok(info)
    }

    /// Remember `info` for `queue` (it was just provisioned here).
    pub(super) fn put(&self, queue: &str, info: QueueInfo) {
        if let Some(slot) = self.slot(queue, Instant::now()) {
            *slot.cached.lock() = Some(Cached {
                at: Instant::now(),
                info: Some(info),
                generation: 0,
            });
        }
    }

    /// Forget `queue` (configured or deleted here).
    pub(super) fn forget(&self, queue: &str) {
        self.slots.lock().by_queue.remove(queue);
    }

    /// Entries held now.
    pub(super) fn len(&self) -> usize {
        self.slots.lock().by_queue.len()
    }

    /// The slot of `queue`, made if there is room; `None` when the cache is
    /// full of entries still fresh.
    fn slot(&self, queue: &str, now: Instant) -> Option<Arc<Slot>> {
        let mut slots = self.slots.lock();
        if let Some(slot) = slots.by_queue.get(queue) {
            return Some(Arc::clone(slot));
        }
        if slots.by_queue.len() >= slots.sweep_at.clamp(SWEEP_FLOOR, MAX_ENTRIES) {
            slots.by_queue.retain(|_, slot| !slot.expired(now));
            slots.sweep_at = (slots.by_queue.len() * 2).max(SWEEP_FLOOR);
            if slots.by_queue.len() >= MAX_ENTRIES {
                return None;
            }
        }
        let slot = Arc::new(Slot::default());
        slots.by_queue.insert(queue.to_owned(), Arc::clone(&slot));
        Some(slot)
    }
}

/// Most (tenant, namespace, task) lists cached at once (client-chosen keys): when
/// full, the stale ones go; if none is stale, the lookup is not cached.
pub(super) const MAX_DISCOVERY_ENTRIES: usize = 4096;

/// Discovery pops' cache of which queues match a (namespace, task).
///
/// A list is trusted while the discovery gate has not opened since it was
/// read, and for at most [`QUEUE_INFO_TTL`]: every push, ack-promote and
/// wheel promotion opens that gate, so a queue created or woken since is
/// looked for again, and the empty re-polls of a parked discovery pop in a
/// quiet namespace take no connection.
#[derive(Debug, Default)]
pub(super) struct DiscoveryCache {
    lists: Mutex<HashMap<DiscoveryKey, DiscoveryList>>,
}

/// (tenant, namespace, task) of a discovery pop.
type DiscoveryKey = (String, Option<String>, Option<String>);

/// When a list was read, the discovery gate's generation then, the queues.
type DiscoveryList = (Instant, u64, Arc<[String]>);

impl DiscoveryCache {
    /// `tenant`'s queues matching (`namespace`, `task`), from cache or from `fetch`.
    pub(super) async fn get<F, Fut>(
        &self,
        tenant: &str,
        namespace: Option<&str>,
        task: Option<&str>,
        generation: u64,
        fetch: F,
    ) -> Result<Arc<[String]>, EngineError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<String>, EngineError>>,
    {
        let key = (
            tenant.to_owned(),
            namespace.map(str::to_owned),
            task.map(str::to_owned),
        );
        let now = Instant::now();
        if let Some((at, seen, list)) = self.lists.lock().get(&key) {
            if *seen == generation && now.duration_since(*at) < QUEUE_INFO_TTL {
                return Ok(Arc::clone(list));
            }
        }
        let list: Arc<[String]> = fetch().await?.into();
        let mut lists = self.lists.lock();
        if lists.len() >= MAX_DISCOVERY_ENTRIES && !lists.contains_key(&key) {
            lists.retain(|_, (at, _, _)| now.duration_since(*at) < QUEUE_INFO_TTL);
        }
        if lists.len() < MAX_DISCOVERY_ENTRIES || lists.contains_key(&key) {
            lists.insert(key, (now, generation, Arc::clone(&list)));
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn info() -> QueueInfo {
        QueueInfo {
            id: uuid::Uuid::nil(),
            min_pop_wait_time: 0,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn missing_lasts_only_until_the_gate_opens() {
        let cache = QueueCache::default();
        let fetches = AtomicUsize::new(0);
        let fetch = |answer: Option<QueueInfo>| {
            fetches.fetch_add(1, Ordering::Relaxed);
            async move { Ok(answer) }
        };
        assert_eq!(cache.get("q", 7, || fetch(None)).await.unwrap(), None);
        assert_eq!(
            cache.get("q", 7, || fetch(Some(info()))).await.unwrap(),
            None
        );
        assert_eq!(fetches.load(Ordering::Relaxed), 1, "missing was not cached");
        // A push opened the gate: the answer is looked up again at once.
        assert_eq!(
            cache.get("q", 8, || fetch(Some(info()))).await.unwrap(),
            Some(info())
        );
        assert_eq!(fetches.load(Ordering::Relaxed), 2);
        // A queue that exists is kept whatever the gate does, for the TTL.
        assert!(cache.get("q", 9, || fetch(None)).await.unwrap().is_some());
        tokio::time::advance(QUEUE_INFO_TTL).await;
        assert_eq!(cache.get("q", 9, || fetch(None)).await.unwrap(), None);
        // Without a wake, missing expires on its own.
        tokio::time::advance(MISSING_QUEUE_TTL).await;
        assert!(cache
            .get("q", 9, || fetch(Some(info())))
            .await
            .unwrap()
            .is_some());
        assert_eq!(fetches.load(Ordering::Relaxed), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_lookups_of_one_queue_fetch_once() {
        let cache = Arc::new(QueueCache::default());
        let fetches = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let (cache, fetches) = (Arc::clone(&cache), Arc::clone(&fetches));
            tasks.push(tokio::spawn(async move {
                cache
                    .get("q", 1, || async {
                        fetches.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        Ok(Some(info()))
                    })
                    .await
                    .unwrap()
            }));
        }
        for task in tasks {
            assert_eq!(task.await.unwrap(), Some(info()));
        }
        assert_eq!(fetches.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_discovery_list_lasts_until_the_gate_opens_and_the_lists_are_capped() {
        let cache = DiscoveryCache::default();
        let fetches = AtomicUsize::new(0);
        let fetch = || {
            fetches.fetch_add(1, Ordering::Relaxed);
            async { Ok(vec!["q".to_owned()]) }
        };
        cache
            .get("default", Some("ns"), None, 1, fetch)
            .await
            .unwrap();
        cache
            .get("default", Some("ns"), None, 1, fetch)
            .await
            .unwrap();
        assert_eq!(
            fetches.load(Ordering::Relaxed),
            1,
            "the list was not cached"
        );
        cache
            .get("default", Some("ns"), None, 2, fetch)
            .await
            .unwrap();
        assert_eq!(
            fetches.load(Ordering::Relaxed),
            2,
            "a wake did not refresh it"
        );
        for i in 0..MAX_DISCOVERY_ENTRIES + 10 {
            let name = format!("ns{i}");
            cache
                .get("default", Some(&name), None, 2, || async { Ok(Vec::new()) })
                .await
                .unwrap();
        }
        assert_eq!(cache.lists.lock().len(), MAX_DISCOVERY_ENTRIES);
    }

    #[tokio::test(start_paused = true)]
    async fn misses_for_queues_that_do_not_exist_do_not_pile_up() {
        // 20,000 pops of random names, one a millisecond.
        // A miss is trusted for a second, so about 1,000 are fresh at any
        // time; the expired ones used to stay until the 65,536 cap.
        let cache = QueueCache::default();
        for i in 0..20_000 {
            cache
                .get(&format!("random-{i}"), 0, || async { Ok(None) })
                .await
                .unwrap();
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert!(cache.len() <= 2 * SWEEP_FLOOR + 1_000, "{}", cache.len());
    }

    #[tokio::test(start_paused = true)]
    async fn the_cache_is_capped_and_stale_entries_make_room() {
        let cache = QueueCache::default();
        for i in 0..MAX_ENTRIES {
            let name = format!("q{i}");
            cache.get(&name, 0, || async { Ok(None) }).await.unwrap();
        }
        assert_eq!(cache.len(), MAX_ENTRIES);
        // Full of fresh entries: answered, not cached.
        cache.get("extra", 0, || async { Ok(None) }).await.unwrap();
        assert_eq!(cache.len(), MAX_ENTRIES);
        tokio::time::advance(QUEUE_INFO_TTL).await;
        cache.get("extra", 0, || async { Ok(None) }).await.unwrap();
        assert_eq!(cache.len(), 1, "stale entries were not dropped");
    }
}
