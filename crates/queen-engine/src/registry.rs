//! The ack registry (decisions.md §4): what each leased pop served, so the
//! ack of a whole batch becomes one positional cursor advance instead of a
//! hash lookup.
//!
//! Keyed by (lease id, partition id): a multi-partition pop shares one lease
//! id across its partitions. An entry lives until its batch is acked, or
//! until its lease has expired (plus a margin), and the registry holds at
//! most [`MAX_ENTRIES`]; past that the oldest-expiring entries go first.
//! A miss is never wrong, only slower: the ack falls back to the hash path,
//! which is also what serves acks at a broker that did not serve the pop, or
//! after a restart.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use uuid::Uuid;

/// Most batches remembered.
pub(crate) const MAX_ENTRIES: usize = 100_000;

/// How long past its lease expiry an entry is kept (a late full ack of a
/// batch nobody re-claimed is still accepted by SQL).
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// One served batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Served {
    /// Consumer group.
    pub(crate) group: String,
    /// Queue name (for ack-promote).
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

/// The registry.
#[derive(Debug, Default)]
pub(crate) struct AckRegistry {
    entries: Mutex<HashMap<(Uuid, Uuid), Served>>,
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
        let mut entries = self.entries.lock();
        if entries.len() >= MAX_ENTRIES {
            let now = Instant::now();
            entries.retain(|_, entry| entry.forget_at > now);
            if entries.len() >= MAX_ENTRIES {
                // Still full: drop the tenth that expires soonest.
                let mut by_expiry: Vec<((Uuid, Uuid), Instant)> =
                    entries.iter().map(|(key, e)| (*key, e.forget_at)).collect();
                by_expiry.sort_by_key(|(_, at)| *at);
                for (key, _) in by_expiry.into_iter().take(MAX_ENTRIES / 10) {
                    entries.remove(&key);
                }
            }
        }
        entries.insert((lease, partition_id), served);
    }

    /// The batch `lease` was served in `partition_id`, if still remembered.
    pub(crate) fn get(&self, lease: Uuid, partition_id: Uuid, now: Instant) -> Option<Served> {
        let entries = self.entries.lock();
        entries
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
        self.entries.lock().remove(&(lease, partition_id));
    }

    /// Partitions a lease holds, as far as this broker knows.
    pub(crate) fn partitions_of(&self, lease: Uuid) -> Vec<Uuid> {
        self.entries
            .lock()
            .keys()
            .filter(|(entry_lease, _)| *entry_lease == lease)
            .map(|(_, partition)| *partition)
            .collect()
    }

    /// Forget every batch of `queue` (it was deleted).
    pub(crate) fn forget_queue(&self, queue: &str) {
        self.entries
            .lock()
            .retain(|_, served| served.queue != queue);
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
