//! The ack registry (decisions.md §4): what each leased pop served, so the
//! ack of a whole batch becomes one positional cursor advance instead of a
//! hash lookup.
//!
//! Keyed by (lease id, partition id): a multi-partition pop shares one lease
//! id across its partitions. An entry lives until its batch is acked, or
//! until its lease has expired (plus a margin), and the registry holds at
//! most [`MAX_ENTRIES`] batches and [`MAX_BYTES`] bytes (a batch's hashes,
//! names and bookkeeping; a batch of 10,000 messages is about 160 KiB); past
//! either, expired entries go, then the soonest-expiring.
//! A miss is never wrong, only slower: the ack falls back to the hash path,
//! which is also what serves acks at a broker that did not serve the pop, or
//! after a restart.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use uuid::Uuid;

/// Most batches remembered.
pub(crate) const MAX_ENTRIES: usize = 100_000;

/// Most bytes the remembered batches may take.
pub(crate) const MAX_BYTES: usize = 64 << 20;

/// Bookkeeping per entry besides its hashes and names: the key, the map slot,
/// the `Served` itself.
const ENTRY_OVERHEAD: usize = 128;

/// How long past its lease expiry an entry is kept (a late full ack of a
/// batch nobody re-claimed is still accepted by SQL).
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// One served batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Served {
    /// Consumer group.
    pub(crate) group: String,
    /// The queue's `naming::queue_key` (for ack-promote and forgetting).
    pub(crate) queue: String,
    /// Partition name (for ack-promote).
    pub(crate) partition: String,
    /// Offset of the last message served.
    pub(crate) batch_end: i64,
    /// Transaction-id hashes of the messages served, in offset order.
    pub(crate) hashes: Vec<[u8; 16]>,
    /// When to forget it.
    pub(crate) forget_at: Instant,
}

impl Served {
    /// What this entry costs the registry's byte bound.
    fn bytes(&self) -> usize {
        ENTRY_OVERHEAD
            + self.group.len()
            + self.queue.len()
            + self.partition.len()
            + self.hashes.len() * 16
    }
}

/// The registry.
#[derive(Debug, Default)]
pub(crate) struct AckRegistry {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<(Uuid, Uuid), Served>,
    /// Sum of the entries' [`Served::bytes`].
    bytes: usize,
}

impl Inner {
    fn remove(&mut self, key: &(Uuid, Uuid)) -> Option<Served> {
        let removed = self.entries.remove(key)?;
        self.bytes -= removed.bytes();
        Some(removed)
    }

    fn retain(&mut self, mut keep: impl FnMut(&Served) -> bool) {
        let Inner { entries, bytes } = self;
        entries.retain(|_, served| {
            let kept = keep(served);
            if !kept {
                *bytes -= served.bytes();
            }
            kept
        });
    }

    fn fits(&self, extra: usize) -> bool {
        self.entries.len() < MAX_ENTRIES && self.bytes + extra <= MAX_BYTES
    }

    /// Make room for an entry of `extra` bytes: expired entries first, then
    /// the soonest-expiring, a tenth of the entries at a time.
    fn make_room(&mut self, extra: usize) {
        if self.fits(extra) {
            return;
        }
        let now = Instant::now();
        self.retain(|served| served.forget_at > now);
        while !self.fits(extra) && !self.entries.is_empty() {
            let mut by_expiry: Vec<((Uuid, Uuid), Instant)> = self
                .entries
                .iter()
                .map(|(key, e)| (*key, e.forget_at))
                .collect();
            by_expiry.sort_by_key(|(_, at)| *at);
            let tenth = (by_expiry.len() / 10).max(1);
            for (key, _) in by_expiry.into_iter().take(tenth) {
                self.remove(&key);
            }
        }
    }
}

impl AckRegistry {
    /// Remember a leased batch.
    pub(crate) fn register(
        &self,
        lease: Uuid,
        partition_id: Uuid,
        mut served: Served,
        lease_ends: Instant,
    ) {
        served.forget_at = lease_ends + EXPIRY_MARGIN;
        let size = served.bytes();
        if size > MAX_BYTES {
            // One batch larger than the whole bound: its ack takes the hash path.
            return;
        }
        let mut inner = self.inner.lock();
        inner.remove(&(lease, partition_id));
        inner.make_room(size);
        inner.bytes += size;
        inner.entries.insert((lease, partition_id), served);
    }

    /// The batch `lease` was served in `partition_id`, if still remembered.
    pub(crate) fn get(&self, lease: Uuid, partition_id: Uuid, now: Instant) -> Option<Served> {
        let inner = self.inner.lock();
        inner
            .entries
            .get(&(lease, partition_id))
            .filter(|entry| entry.forget_at > now)
            .cloned()
    }

    /// True when `hashes` (any order) are exactly the batch's messages.
    pub(crate) fn covers_whole_batch(served: &Served, hashes: &[[u8; 16]]) -> bool {
        if hashes.len() != served.hashes.len() {
            return false;
        }
        let acked: HashSet<&[u8; 16]> = hashes.iter().collect();
        acked.len() == served.hashes.len() && served.hashes.iter().all(|h| acked.contains(h))
    }

    /// Forget a batch (acked, or its lease released).
    pub(crate) fn forget(&self, lease: Uuid, partition_id: Uuid) {
        self.inner.lock().remove(&(lease, partition_id));
    }

    /// Partitions a lease holds, as far as this broker knows.
    pub(crate) fn partitions_of(&self, lease: Uuid) -> Vec<Uuid> {
        self.inner
            .lock()
            .entries
            .keys()
            .filter(|(entry_lease, _)| *entry_lease == lease)
            .map(|(_, partition)| *partition)
            .collect()
    }

    /// Forget every batch of `queue` (it was deleted).
    pub(crate) fn forget_queue(&self, queue: &str) {
        self.inner.lock().retain(|served| served.queue != queue);
    }

    /// (batches, bytes) remembered now.
    pub(crate) fn size(&self) -> (usize, usize) {
        let inner = self.inner.lock();
        (inner.entries.len(), inner.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(hashes: Vec<[u8; 16]>) -> Served {
        Served {
            group: "g".into(),
            queue: "q".into(),
            partition: "p".into(),
            batch_end: 9,
            hashes,
            forget_at: Instant::now(),
        }
    }

    #[test]
    fn a_whole_batch_is_recognised_in_any_order_and_nothing_less() {
        let batch = served(vec![[1; 16], [2; 16], [3; 16]]);
        assert!(AckRegistry::covers_whole_batch(
            &batch,
            &[[3; 16], [1; 16], [2; 16]]
        ));
        assert!(!AckRegistry::covers_whole_batch(
            &batch,
            &[[1; 16], [2; 16]]
        ));
        assert!(!AckRegistry::covers_whole_batch(
            &batch,
            &[[1; 16], [2; 16], [2; 16]]
        ));
        assert!(!AckRegistry::covers_whole_batch(
            &batch,
            &[[1; 16], [2; 16], [4; 16]]
        ));
    }

    #[test]
    fn the_registry_is_bounded_by_bytes_as_well_as_by_entries() {
        // 1,000 batches of 10,000 messages are 160 MB of
        // hashes; the count bound alone (100,000) would keep them all.
        let registry = AckRegistry::default();
        let later = Instant::now() + Duration::from_secs(60);
        for i in 0..1_000u32 {
            let mut hash = [0u8; 16];
            hash[..4].copy_from_slice(&i.to_le_bytes());
            registry.register(
                Uuid::new_v4(),
                Uuid::new_v4(),
                served(vec![hash; 10_000]),
                later + Duration::from_millis(u64::from(i)),
            );
        }
        let (entries, bytes) = registry.size();
        assert!(bytes <= MAX_BYTES, "{bytes}");
        assert!(entries < 1_000 && entries > 300, "{entries}");
        // The soonest-expiring went; the newest batch is still there.
        let newest = Uuid::new_v4();
        let pid = Uuid::new_v4();
        registry.register(newest, pid, served(vec![[9; 16]]), later);
        assert!(registry.get(newest, pid, Instant::now()).is_some());
        // The count follows every removal.
        registry.forget(newest, pid);
        registry.forget_queue("q");
        assert_eq!(registry.size(), (0, 0));
    }

    #[test]
    fn entries_expire_after_their_lease_and_are_per_partition() {
        let registry = AckRegistry::default();
        let lease = Uuid::now_v7();
        let (p1, p2) = (Uuid::now_v7(), Uuid::now_v7());
        let now = Instant::now();
        registry.register(
            lease,
            p1,
            served(vec![[1; 16]]),
            now + Duration::from_secs(60),
        );
        registry.register(
            lease,
            p2,
            served(vec![[2; 16]]),
            now + Duration::from_secs(60),
        );
        assert!(registry.get(lease, p1, now).is_some());
        let mut parts = registry.partitions_of(lease);
        parts.sort();
        let mut expected = vec![p1, p2];
        expected.sort();
        assert_eq!(parts, expected);
        assert!(registry
            .get(lease, p1, now + Duration::from_secs(91))
            .is_none());
        registry.forget(lease, p2);
        assert!(registry.get(lease, p2, now).is_none());
    }
}
