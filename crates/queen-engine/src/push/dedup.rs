//! The broker's dedup cache: for partitions this broker pushes to, every
//! transaction-id hash of a contiguous run of recent sidecar rows
//! `[cover_from, known_to]`.
//!
//! Why: the duplicate probe in `log_push_v1` reads every hash a partition
//! stored inside the dedup window, so without help its cost per flush grows
//! with rate × window (measured: a single partition's push rate fell from
//! 13,000 to 4,000 msg/s within 5 s). With coverage, a flush checks the slot
//! against the cache here and SQL probes only the rows outside the coverage:
//! older rows still in the window (only after a restart, and never more than
//! one window's worth) and newer rows another broker wrote, which SQL sends
//! back so the coverage stays contiguous.
//!
//! Correctness never depends on the cache: a slot that hits the cache, a
//! partition without coverage, or coverage built on another partition id
//! (a re-created partition) all fall back to the full SQL probe, which is
//! also what finds the winner's message id for a duplicate.
//!
//! Memory is bounded by [`MAX_CACHED_HASHES`] hashes in all (16 bytes each
//! plus set overhead); past it, the least recently used partitions are
//! dropped.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use queen_sql::push::{Coverage, KnownRow};
use uuid::Uuid;

/// Most hashes cached across all partitions (about 64 MiB with overhead).
pub(crate) const MAX_CACHED_HASHES: usize = 2_000_000;

type Hash = [u8; queen_frame::HASH_LEN];

#[derive(Debug)]
struct Segment {
    base: i64,
    end: i64,
    /// When this broker learned it (an upper bound of its created_at).
    seen: SystemTime,
    hashes: Vec<Hash>,
}

#[derive(Debug)]
struct Partition {
    partition_id: Uuid,
    window: Duration,
    segments: VecDeque<Segment>,
    set: HashSet<Hash>,
    known_to: i64,
    used: Instant,
}

impl Partition {
    fn cover_from(&self) -> i64 {
        self.segments
            .front()
            .map_or(self.known_to + 1, |segment| segment.base)
    }

    /// Drop segments older than the window: SQL does not probe them either.
    fn expire(&mut self, now: SystemTime) -> usize {
        let mut dropped = 0;
        while let Some(front) = self.segments.front() {
            let age = now.duration_since(front.seen).unwrap_or(Duration::ZERO);
            if age <= self.window {
                break;
            }
            if let Some(segment) = self.segments.pop_front() {
                for hash in &segment.hashes {
                    self.set.remove(hash);
                }
                dropped += segment.hashes.len();
            }
        }
        dropped
    }

    fn append(&mut self, segment: Segment) {
        self.set.extend(segment.hashes.iter().copied());
        self.known_to = segment.end;
        self.segments.push_back(segment);
    }
}

/// The cache, keyed by (queue, partition name).
#[derive(Debug, Default)]
pub(crate) struct DedupCache {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    partitions: HashMap<(Arc<str>, Arc<str>), Partition>,
    total: usize,
}

impl DedupCache {
    /// The coverage to send with a slot of `hashes`, or `None` when the slot
    /// must take the full probe (no coverage, or a hash the cache holds: the
    /// probe then finds the winner).
    pub(crate) fn coverage(
        &self,
        key: &(Arc<str>, Arc<str>),
        hashes: &[u8],
        now: SystemTime,
    ) -> Option<Coverage> {
        let mut inner = self.inner.lock();
        let Inner { partitions, total } = &mut *inner;
        let partition = partitions.get_mut(key)?;
        *total = total.saturating_sub(partition.expire(now));
        partition.used = Instant::now();
        let hit = hashes
            .chunks_exact(queen_frame::HASH_LEN)
            .any(|chunk| <[u8; 16]>::try_from(chunk).is_ok_and(|h| partition.set.contains(&h)));
        if hit {
            return None;
        }
        Some(Coverage {
            partition_id: partition.partition_id,
            cover_from: partition.cover_from(),
            known_to: partition.known_to,
        })
    }

    /// After a flush: learn the rows another broker wrote (`known`) and, when
    /// the slot was queued, its own segment `[base, base + n)`. Anything that
    /// would leave a hole in the coverage restarts it at the own segment.
    #[allow(clippy::too_many_arguments)] // one call site, each argument a fact of the flush
    pub(crate) fn record(
        &self,
        key: &(Arc<str>, Arc<str>),
        partition_id: Uuid,
        window_seconds: i32,
        known: &[KnownRow],
        own: Option<(i64, &[u8])>,
        now: SystemTime,
    ) {
        let Ok(window) = u64::try_from(window_seconds) else {
            return;
        };
        let mut inner = self.inner.lock();
        let Inner { partitions, total } = &mut *inner;
        if window == 0 {
            if let Some(old) = partitions.remove(key) {
                *total = total.saturating_sub(old.set.len());
            }
            return;
        }
        let fresh = |base: i64| Partition {
            partition_id,
            window: Duration::from_secs(window),
            segments: VecDeque::new(),
            set: HashSet::new(),
            known_to: base - 1,
            used: Instant::now(),
        };
        let mut partition = match partitions.remove(key) {
            Some(existing) if existing.partition_id == partition_id => existing,
            Some(stale) => {
                *total = total.saturating_sub(stale.set.len());
                match own {
                    Some((base, _)) => fresh(base),
                    None => return,
                }
            }
            None => match own {
                Some((base, _)) => fresh(base),
                None => return,
            },
        };
        let before = partition.set.len();
        partition.window = Duration::from_secs(window);
        let mut contiguous = true;
        for row in known {
            if row.end_offset <= partition.known_to {
                continue;
            }
            if row.base_offset != partition.known_to + 1 {
                contiguous = false;
                break;
            }
            partition.append(segment(row.base_offset, row.end_offset, &row.hashes, now));
        }
        if let Some((base, hashes)) = own {
            let n = i64::try_from(hashes.len() / queen_frame::HASH_LEN).unwrap_or(0);
            if !contiguous || base != partition.known_to + 1 {
                partition = fresh(base);
            }
            partition.append(segment(base, base + n - 1, hashes, now));
        } else if !contiguous {
            *total = total.saturating_sub(before);
            return;
        }
        *total = total.saturating_sub(before) + partition.set.len();
        partitions.insert(key.clone(), partition);
        // Over budget: drop the least recently used partitions.
        while *total > MAX_CACHED_HASHES {
            let Some(oldest) = partitions
                .iter()
                .min_by_key(|(_, p)| p.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(dropped) = partitions.remove(&oldest) {
                *total = total.saturating_sub(dropped.set.len());
            }
        }
    }

    /// Forget every partition of `queue` (reconfigured or deleted).
    pub(crate) fn forget_queue(&self, queue: &str) {
        let mut inner = self.inner.lock();
        let Inner { partitions, total } = &mut *inner;
        partitions.retain(|(q, _), partition| {
            if &**q == queue {
                *total = total.saturating_sub(partition.set.len());
                false
            } else {
                true
            }
        });
    }
}

fn segment(base: i64, end: i64, hashes: &[u8], now: SystemTime) -> Segment {
    Segment {
        base,
        end,
        seen: now,
        hashes: hashes
            .chunks_exact(queen_frame::HASH_LEN)
            .filter_map(|chunk| <[u8; 16]>::try_from(chunk).ok())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> (Arc<str>, Arc<str>) {
        (Arc::from("q"), Arc::from("p"))
    }

    fn hashes(ids: &[u8]) -> Vec<u8> {
        ids.iter().flat_map(|id| [*id; 16]).collect()
    }

    #[test]
    fn coverage_grows_contiguously_and_a_cached_hash_forces_the_full_probe() {
        let cache = DedupCache::default();
        let pid = Uuid::now_v7();
        let now = SystemTime::now();
        assert_eq!(cache.coverage(&key(), &hashes(&[1]), now), None);
        cache.record(&key(), pid, 300, &[], Some((0, &hashes(&[1, 2]))), now);
        let cover = cache.coverage(&key(), &hashes(&[9]), now).unwrap();
        assert_eq!(
            (cover.cover_from, cover.known_to, cover.partition_id),
            (0, 1, pid)
        );
        // Another broker wrote [2, 3]; then ours at 4.
        let other = KnownRow {
            base_offset: 2,
            end_offset: 3,
            hashes: hashes(&[3, 4]),
        };
        cache.record(&key(), pid, 300, &[other], Some((4, &hashes(&[5]))), now);
        let cover = cache.coverage(&key(), &hashes(&[9]), now).unwrap();
        assert_eq!((cover.cover_from, cover.known_to), (0, 4));
        // A hash the cache holds (the other broker's) means: full probe.
        assert_eq!(cache.coverage(&key(), &hashes(&[9, 4]), now), None);
    }

    #[test]
    fn a_hole_or_another_partition_id_restarts_the_coverage() {
        let cache = DedupCache::default();
        let pid = Uuid::now_v7();
        let now = SystemTime::now();
        cache.record(&key(), pid, 300, &[], Some((0, &hashes(&[1]))), now);
        // Offsets 1..=4 unseen (no known rows sent back): restart at 5.
        cache.record(&key(), pid, 300, &[], Some((5, &hashes(&[2]))), now);
        let cover = cache.coverage(&key(), &hashes(&[9]), now).unwrap();
        assert_eq!((cover.cover_from, cover.known_to), (5, 5));
        // The partition was re-created under a new id.
        let new_pid = Uuid::now_v7();
        cache.record(&key(), new_pid, 300, &[], Some((0, &hashes(&[3]))), now);
        let cover = cache.coverage(&key(), &hashes(&[9]), now).unwrap();
        assert_eq!(
            (cover.partition_id, cover.cover_from, cover.known_to),
            (new_pid, 0, 0)
        );
    }

    #[test]
    fn rows_older_than_the_window_leave_the_coverage() {
        let cache = DedupCache::default();
        let pid = Uuid::now_v7();
        let then = SystemTime::now();
        cache.record(&key(), pid, 1, &[], Some((0, &hashes(&[1]))), then);
        cache.record(
            &key(),
            pid,
            1,
            &[],
            Some((1, &hashes(&[2]))),
            then + Duration::from_secs(2),
        );
        let cover = cache
            .coverage(&key(), &hashes(&[1]), then + Duration::from_secs(2))
            .expect("hash 1 expired with its segment");
        assert_eq!((cover.cover_from, cover.known_to), (1, 1));
    }
}
