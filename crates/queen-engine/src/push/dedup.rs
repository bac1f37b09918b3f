//! The broker's dedup cache: for partitions this broker pushes to, the
//! transaction-id hashes of a contiguous run of recent sidecar rows
//! `[cover_from, known_to]`.
//!
//! Why: the duplicate probe in `log_push_v2` reads every hash a partition
//! stored inside the dedup window, so without help its cost per flush grows
//! with rate × window (measured: a single partition's push rate fell from
//! 13,000 to 4,000 msg/s within 5 s). With coverage, a flush checks the slot
//! against the cache here and SQL probes only the rows outside the coverage:
//! older rows still in the window (after a restart, or after the cache
//! outgrew its budget) and newer rows another broker wrote, which SQL sends
//! back so the coverage stays contiguous.
//!
//! Correctness never depends on the cache: a slot that hits the cache, a
//! partition without coverage, or coverage built on another partition id
//! (a re-created partition) all fall back to the full SQL probe, which is
//! also what finds the winner's message id for a duplicate. The one promise
//! the cache keeps is that every row in `[cover_from, known_to]` has its
//! hashes here.
//!
//! Shape, chosen for memory: a partition's coverage is a queue of
//! *generations*, each holding the hashes learned during a quarter of the
//! window (and at most 57,344 of them), as 8-byte prefixes in an
//! identity-hashed set (9 bytes a bucket, 10.3 a hash in a full generation,
//! against about 44 for whole hashes plus a per-segment list). A generation
//! is dropped whole once its newest hash is older than the window, so a
//! partition holds at most 1.25 windows, and cover_from moves to the next
//! generation's first offset. A prefix match may be a 2^-64 coincidence; it
//! only sends the slot to the full probe, which decides exactly.
//!
//! Memory is bounded by a byte budget (`QUEEN_DEDUP_CACHE_MB`). Past it, the
//! oldest generation of the whole cache goes first, whatever its partition:
//! every partition's coverage shrinks from its old end, and SQL probes the
//! uncovered part of the window. (The first version evicted whole partitions,
//! least recently used; with producers cycling over more partitions than fit,
//! every flush then ran the full probe, and a sustained push fell from 175k to
//! 35k msg/s.) The probe's cost then grows with the uncovered part, so the
//! broker warns, at most once a minute, how much of the window it still holds.
//! The budget counts each partition's entry too (its names and bookkeeping,
//! [`ENTRY_OVERHEAD`]), and an entry whose generations all expired is
//! dropped, so partitions written once with client ids do not linger.
//!
//! Every generation is also queued, in the order generations open, in one
//! list for the whole cache ([`Opened`], counted in the budget): eviction
//! takes the oldest from its front instead of looking at every partition
//! (at a million partitions that look was a million entries per evicted
//! generation), and each `record` sweeps from the front the generations past
//! their window (a generation's newest row is at most a quarter window after
//! it opened, so 1.25 windows after opening it has expired). So a partition
//! that holds no transaction id from inside its window costs nothing after
//! at most 1.25 windows, whether or not it is pushed to again; the list's
//! entries of generations already gone are dropped when they reach the
//! front.
//!
//! Only rows with a client transaction id are learned: a row whose ids the
//! broker generated (fresh UUIDv7s, which need no duplicate check) ends the
//! partition's coverage instead, so the cache's size follows the client-id
//! traffic inside the window, not the push rate. A partition that mixes both
//! kinds takes the full probe after each generated row.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nohash_hasher::IntSet;
use parking_lot::Mutex;
use queen_sql::push::{Coverage, KnownRow};
use uuid::Uuid;

/// The default budget, 256 MiB. Measured at about 12 bytes a hash (set slack
/// included; broker RSS grew 165 MB over 12.5 million messages): a 300 s
/// window of about 60,000 client-id messages a second, or about 130 s of
/// 170,000.
pub const DEFAULT_DEDUP_CACHE_BYTES: usize = 256 << 20;

/// Generations per window.
const GENERATIONS: u32 = 4;

/// Most hashes in one generation: 7/8 of 65,536, so a full generation's set
/// fills 65,536 buckets (576 KiB) without growing to twice that. It is also
/// the grain of eviction over budget: a partition loses at most this many
/// hashes of coverage at a time.
const GENERATION_HASHES: usize = 65_536 / 8 * 7;

/// How often the over-budget warning may repeat.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Bytes a set of `capacity` holds: hashbrown keeps an 8-byte slot and a
/// control byte per bucket, and up to 7/8 of the buckets full.
fn set_bytes(set: &IntSet<u64>) -> usize {
    set.capacity() / 7 * 8 * 9 + std::mem::size_of::<Generation>()
}

/// The first 8 bytes of each 16-byte hash in `hashes`.
fn prefixes(hashes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    hashes
        .chunks_exact(queen_frame::HASH_LEN)
        .filter_map(|chunk| chunk.get(..8))
        .filter_map(|head| <[u8; 8]>::try_from(head).ok())
        .map(u64::from_le_bytes)
}

#[derive(Debug)]
struct Generation {
    /// The first offset it covers; it covers up to the next generation's
    /// first offset (or the partition's `known_to`).
    first_base: i64,
    opened: SystemTime,
    /// When its newest row was learned: an upper bound of that row's created_at.
    newest: SystemTime,
    set: IntSet<u64>,
    bytes: usize,
}

#[derive(Debug)]
struct Partition {
    partition_id: Uuid,
    window: Duration,
    generations: VecDeque<Generation>,
    known_to: i64,
    bytes: usize,
}

impl Partition {
    fn new(partition_id: Uuid, window: Duration, base: i64) -> Partition {
        Partition {
            partition_id,
            window,
            generations: VecDeque::new(),
            known_to: base - 1,
            bytes: 0,
        }
    }

    fn cover_from(&self) -> i64 {
        self.generations
            .front()
            .map_or(self.known_to + 1, |generation| generation.first_base)
    }

    fn holds(&self, prefix: u64) -> bool {
        self.generations
            .iter()
            .any(|generation| generation.set.contains(&prefix))
    }

    /// Drop generations whose newest row is older than the window: SQL does
    /// not probe those rows either. Returns the bytes freed.
    fn expire(&mut self, now: SystemTime) -> usize {
        let mut freed = 0;
        while let Some(front) = self.generations.front() {
            let age = now.duration_since(front.newest).unwrap_or(Duration::ZERO);
            if age <= self.window {
                break;
            }
            if let Some(old) = self.generations.pop_front() {
                freed += old.bytes;
            }
        }
        self.bytes -= freed;
        freed
    }

    /// Learn the row `[base, end]` (contiguous with `known_to`). Returns the
    /// first offset of the generation it opened, if it opened one.
    fn append(&mut self, base: i64, end: i64, hashes: &[u8], now: SystemTime) -> Option<i64> {
        let span = self.window / GENERATIONS;
        let incoming = hashes.len() / queen_frame::HASH_LEN;
        let open_new = self.generations.back().is_none_or(|newest| {
            now.duration_since(newest.opened).unwrap_or(Duration::ZERO) >= span
                || (!newest.set.is_empty() && newest.set.len() + incoming > GENERATION_HASHES)
        });
        if open_new {
            self.generations.push_back(Generation {
                first_base: base,
                opened: now,
                newest: now,
                set: IntSet::default(),
                bytes: 0,
            });
        }
        self.known_to = end;
        let generation = self.generations.back_mut()?;
        generation.newest = now;
        generation.set.extend(prefixes(hashes));
        let before = generation.bytes;
        generation.bytes = set_bytes(&generation.set);
        self.bytes += generation.bytes - before;
        open_new.then_some(base)
    }

    /// True when its oldest generation is the one `opened` names.
    fn front_is(&self, opened: &Opened) -> bool {
        self.partition_id == opened.partition_id
            && self
                .generations
                .front()
                .is_some_and(|front| front.first_base == opened.first_base)
    }
}

type Key = (Arc<str>, Arc<str>);

/// Bookkeeping per partition entry besides its names and generations: the
/// map slot, the `Partition`, the key's `Arc` headers.
const ENTRY_OVERHEAD: usize = 160;

/// What a partition's entry costs the budget besides its generations.
fn entry_bytes(key: &Key) -> usize {
    ENTRY_OVERHEAD + key.0.len() + key.1.len()
}

/// A generation as it opened, in the cache-wide list in opening order.
#[derive(Debug)]
struct Opened {
    opened: SystemTime,
    /// Its partition's window then.
    window: Duration,
    key: Key,
    partition_id: Uuid,
    first_base: i64,
}

impl Opened {
    /// When the generation has surely expired: its newest row is at most a
    /// quarter window after it opened.
    fn expired_by(&self) -> SystemTime {
        self.opened + self.window + self.window / GENERATIONS
    }
}

/// What one entry of the list of opened generations costs the budget (the
/// key's `Arc`s are shared with the partition's entry).
const OPENED_BYTES: usize = std::mem::size_of::<Opened>();

/// The cache, keyed by (queue, partition name).
#[derive(Debug)]
pub(crate) struct DedupCache {
    budget: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    partitions: HashMap<Key, Partition>,
    /// Every generation in the order it opened (entries of generations
    /// already gone included, until they reach the front).
    order: VecDeque<Opened>,
    bytes: usize,
    warned: Option<Instant>,
}

/// What the cache holds, for tests and the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct DedupStats {
    pub(crate) partitions: usize,
    pub(crate) generations: usize,
    pub(crate) hashes: usize,
    pub(crate) bytes: usize,
}

impl DedupCache {
    /// A cache of at most `budget` bytes; 0 keeps nothing (every flush with
    /// client transaction ids takes the full SQL probe).
    pub(crate) fn new(budget: usize) -> DedupCache {
        DedupCache {
            budget,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The coverage to send with a slot of `hashes`, or `None` when the slot
    /// must take the full probe (no coverage, or a hash the cache holds: the
    /// probe then finds the winner).
    pub(crate) fn coverage(&self, key: &Key, hashes: &[u8], now: SystemTime) -> Option<Coverage> {
        let mut inner = self.inner.lock();
        let Inner {
            partitions, bytes, ..
        } = &mut *inner;
        let partition = partitions.get_mut(key)?;
        *bytes -= partition.expire(now);
        if partition.generations.is_empty() {
            // Nothing of it is inside the window any more: drop the entry.
            inner.remove(key);
            return None;
        }
        if prefixes(hashes).any(|prefix| partition.holds(prefix)) {
            return None;
        }
        Some(Coverage {
            partition_id: partition.partition_id,
            cover_from: partition.cover_from(),
            known_to: partition.known_to,
        })
    }

    /// After a queued flush: learn the rows another broker wrote (`known`),
    /// then the slot's own segment `own = (base, hashes)`. Anything that would
    /// leave a hole in the coverage restarts it at the own segment.
    #[allow(clippy::too_many_arguments)] // one call site, each argument a fact of the flush
    pub(crate) fn record(
        &self,
        key: &Key,
        partition_id: Uuid,
        window_seconds: i32,
        known: &[KnownRow],
        own: (i64, &[u8]),
        now: SystemTime,
    ) {
        let window = match u64::try_from(window_seconds) {
            Ok(seconds) if seconds > 0 && self.budget > 0 => Duration::from_secs(seconds),
            _ => {
                self.forget(key);
                return;
            }
        };
        let (base, hashes) = own;
        let mut inner = self.inner.lock();
        let mut partition = match inner.remove(key) {
            Some(existing) if existing.partition_id == partition_id => existing,
            _ => Partition::new(partition_id, window, base),
        };
        partition.window = window;
        let mut opened = Vec::new();
        for row in known {
            if row.end_offset <= partition.known_to {
                continue;
            }
            if row.base_offset != partition.known_to + 1 {
                break;
            }
            opened.extend(partition.append(row.base_offset, row.end_offset, &row.hashes, now));
        }
        if base != partition.known_to + 1 {
            partition = Partition::new(partition_id, window, base);
        }
        let n = i64::try_from(hashes.len() / queen_frame::HASH_LEN).unwrap_or(0);
        opened.extend(partition.append(base, base + n - 1, hashes, now));
        partition.expire(now);
        inner.insert(key, partition);
        for first_base in opened {
            inner.opened(Opened {
                opened: now,
                window,
                key: key.clone(),
                partition_id,
                first_base,
            });
        }
        inner.sweep(now);
        inner.enforce(self.budget, now);
    }

    /// Forget one partition: its window went to 0, or it took a row of
    /// broker-generated ids only, whose hashes the cache does not hold.
    pub(crate) fn forget(&self, key: &Key) {
        let mut inner = self.inner.lock();
        if !inner.partitions.is_empty() {
            inner.remove(key);
        }
    }

    /// Forget every partition of `queue` (reconfigured or deleted).
    pub(crate) fn forget_queue(&self, queue: &str) {
        let mut inner = self.inner.lock();
        let Inner {
            partitions, bytes, ..
        } = &mut *inner;
        partitions.retain(|key, partition| {
            if &*key.0 == queue {
                *bytes -= partition.bytes + entry_bytes(key);
                false
            } else {
                true
            }
        });
        let before = inner.order.len();
        inner.order.retain(|opened| &*opened.key.0 != queue);
        inner.bytes -= (before - inner.order.len()) * OPENED_BYTES;
    }

    /// What the cache holds now.
    pub(crate) fn stats(&self) -> DedupStats {
        let inner = self.inner.lock();
        let mut stats = DedupStats {
            partitions: inner.partitions.len(),
            bytes: inner.bytes,
            ..DedupStats::default()
        };
        for partition in inner.partitions.values() {
            stats.generations += partition.generations.len();
            stats.hashes += partition
                .generations
                .iter()
                .map(|generation| generation.set.len())
                .sum::<usize>();
        }
        stats
    }

    #[cfg(test)]
    fn cover(&self, key: &Key) -> Option<(i64, i64)> {
        let inner = self.inner.lock();
        let partition = inner.partitions.get(key)?;
        Some((partition.cover_from(), partition.known_to))
    }
}

impl Inner {
    /// Hold `partition` under `key`, counting it and its entry.
    fn insert(&mut self, key: &Key, partition: Partition) {
        self.bytes += partition.bytes + entry_bytes(key);
        if let Some(old) = self.partitions.insert(key.clone(), partition) {
            self.bytes -= old.bytes + entry_bytes(key);
        }
    }

    /// Take `key`'s partition out, uncounting it and its entry.
    fn remove(&mut self, key: &Key) -> Option<Partition> {
        let partition = self.partitions.remove(key)?;
        self.bytes -= partition.bytes + entry_bytes(key);
        Some(partition)
    }

    /// Queue a generation that just opened.
    fn opened(&mut self, opened: Opened) {
        self.bytes += OPENED_BYTES;
        self.order.push_back(opened);
    }

    /// Take the list's oldest entry out.
    fn pop_opened(&mut self) -> Option<Opened> {
        let opened = self.order.pop_front()?;
        self.bytes -= OPENED_BYTES;
        Some(opened)
    }

    /// Drop the generations surely past their window, oldest first: each
    /// call does the work of the generations that expired since the last.
    fn sweep(&mut self, now: SystemTime) {
        while self
            .order
            .front()
            .is_some_and(|front| front.expired_by() <= now)
        {
            let Some(front) = self.pop_opened() else {
                break;
            };
            let Some(partition) = self.partitions.get_mut(&front.key) else {
                continue;
            };
            if !partition.front_is(&front) {
                continue; // gone already
            }
            let freed = partition.expire(now);
            self.bytes -= freed;
            if partition.generations.is_empty() {
                self.remove(&front.key);
            } else if partition.front_is(&front) {
                // Its window grew since: look again when the new one ends.
                let window = partition.window;
                self.opened(Opened { window, ..front });
            }
        }
    }

    /// Over budget: drop the oldest generation of the whole cache until under
    /// it (the list's front, entries of generations already gone skipped).
    /// Warns when what goes was still inside its window.
    fn enforce(&mut self, budget: usize, now: SystemTime) {
        let mut held: Option<(Duration, Duration)> = None;
        while self.bytes > budget {
            let Some(front) = self.pop_opened() else {
                break;
            };
            let Some(partition) = self.partitions.get_mut(&front.key) else {
                continue;
            };
            if !partition.front_is(&front) {
                continue;
            }
            let Some(dropped) = partition.generations.pop_front() else {
                continue;
            };
            partition.bytes -= dropped.bytes;
            self.bytes -= dropped.bytes;
            let age = now.duration_since(dropped.newest).unwrap_or(Duration::ZERO);
            if age < partition.window {
                // How far back the partition's coverage still reaches.
                let reach = partition
                    .generations
                    .front()
                    .map_or(Duration::ZERO, |front| {
                        now.duration_since(front.opened).unwrap_or(Duration::ZERO)
                    });
                held = Some((reach, partition.window));
            }
            if partition.generations.is_empty() {
                self.remove(&front.key);
            }
        }
        let Some((age, window)) = held else {
            return;
        };
        if self.warned.is_some_and(|at| at.elapsed() < WARN_EVERY) {
            return;
        }
        self.warned = Some(Instant::now());
        tracing::warn!(
            budget_mib = budget >> 20,
            held_seconds = age.as_secs(),
            window_seconds = window.as_secs(),
            "the dedup cache is full: it holds about {}s of a {}s dedup window, and \
             PostgreSQL probes the rest on every push with client transaction ids, \
             which slows pushes; raise QUEEN_DEDUP_CACHE_MB or lower the queue's \
             dedupWindowSeconds",
            age.as_secs(),
            window.as_secs(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        (Arc::from("q"), Arc::from("p"))
    }

    fn hashes(ids: &[u8]) -> Vec<u8> {
        ids.iter().flat_map(|id| [*id; 16]).collect()
    }

    /// `n` distinct hashes starting at `from`.
    fn many(from: u64, n: u64) -> Vec<u8> {
        (from..from + n)
            .flat_map(|i| {
                let mut hash = [0u8; 16];
                hash[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
                hash
            })
            .collect()
    }

    #[test]
    fn coverage_grows_contiguously_and_a_cached_hash_forces_the_full_probe() {
        let cache = DedupCache::new(DEFAULT_DEDUP_CACHE_BYTES);
        let pid = Uuid::now_v7();
        let now = SystemTime::now();
        assert_eq!(cache.coverage(&key(), &hashes(&[1]), now), None);
        cache.record(&key(), pid, 300, &[], (0, &hashes(&[1, 2])), now);
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
        cache.record(&key(), pid, 300, &[other], (4, &hashes(&[5])), now);
        let cover = cache.coverage(&key(), &hashes(&[9]), now).unwrap();
        assert_eq!((cover.cover_from, cover.known_to), (0, 4));
        // A hash the cache holds (the other broker's) means: full probe.
        assert_eq!(cache.coverage(&key(), &hashes(&[9, 4]), now), None);
    }

    #[test]
    fn entries_count_in_the_budget_and_expired_ones_leave() {
        // The budget once counted only the hash sets: 10,000
        // partitions with 200-byte names counted 10,000 small sets while
        // the names alone were 2 MB.
        let cache = DedupCache::new(DEFAULT_DEDUP_CACHE_BYTES);
        let t0 = SystemTime::now();
        let name = "p".repeat(200);
        for i in 0..10_000 {
            let key: Key = (Arc::from("q"), Arc::from(format!("{name}{i}")));
            cache.record(&key, Uuid::now_v7(), 1, &[], (0, &hashes(&[1])), t0);
        }
        let stats = cache.stats();
        assert_eq!(stats.partitions, 10_000);
        assert!(stats.bytes >= 10_000 * (200 + ENTRY_OVERHEAD), "{stats:?}");
        // A small budget holds few such entries, names included.
        let small = DedupCache::new(64 << 10);
        for i in 0..10_000 {
            let key: Key = (Arc::from("q"), Arc::from(format!("{name}{i}")));
            small.record(&key, Uuid::now_v7(), 300, &[], (0, &hashes(&[1])), t0);
        }
        assert!(small.stats().bytes <= 64 << 10, "{:?}", small.stats());
        assert!(small.stats().partitions < 200, "{:?}", small.stats());
        // Once every generation expired, the entry itself goes (it used to
        // stay, empty, until its queue was deleted).
        let later = t0 + Duration::from_secs(10);
        let key: Key = (Arc::from("q"), Arc::from(format!("{name}0")));
        assert_eq!(cache.coverage(&key, &hashes(&[2]), later), None);
        assert_eq!(cache.stats().partitions, 9_999);
        cache.forget_queue("q");
        assert_eq!(cache.stats().bytes, 0);
    }

    #[test]
    fn a_partition_without_an_id_inside_its_window_costs_nothing_after_one_and_a_quarter_windows() {
        let cache = DedupCache::new(DEFAULT_DEDUP_CACHE_BYTES);
        let t0 = SystemTime::now();
        let at = |millis: u64| t0 + Duration::from_millis(millis);
        for i in 0..10_000 {
            let key: Key = (Arc::from("q"), Arc::from(format!("p{i}")));
            cache.record(&key, Uuid::now_v7(), 4, &[], (0, &hashes(&[1])), at(0));
        }
        assert_eq!(cache.stats().partitions, 10_000);
        // Never pushed to again, never looked up: still inside the window.
        cache.record(
            &key(),
            Uuid::now_v7(),
            4,
            &[],
            (0, &hashes(&[2])),
            at(4_000),
        );
        assert_eq!(cache.stats().partitions, 10_001);
        // 1.25 windows after they opened, any push sweeps them out.
        cache.record(
            &key(),
            Uuid::now_v7(),
            4,
            &[],
            (1, &hashes(&[3])),
            at(5_000),
        );
        let stats = cache.stats();
        assert_eq!(stats.partitions, 1, "{stats:?}");
        assert!(
            stats.bytes < 2_048,
            "one partition and its list entries: {stats:?}"
        );
        cache.forget_queue("q");
        assert_eq!(cache.stats().bytes, 0);
    }

    #[test]
    fn the_sweep_keeps_a_generation_whose_window_grew() {
        let cache = DedupCache::new(DEFAULT_DEDUP_CACHE_BYTES);
        let pid = Uuid::now_v7();
        let t0 = SystemTime::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        cache.record(&key(), pid, 4, &[], (0, &hashes(&[1])), at(0));
        // The queue's window went to 300 s: the row of 0 s is inside it.
        cache.record(&key(), pid, 300, &[], (1, &hashes(&[2])), at(1));
        let other: Key = (Arc::from("q"), Arc::from("other"));
        cache.record(&other, Uuid::now_v7(), 4, &[], (0, &hashes(&[3])), at(6));
        assert_eq!(cache.coverage(&key(), &hashes(&[1]), at(6)), None);
        assert_eq!(
            cache.cover(&key()),
            Some((0, 1)),
            "the swept generation was still inside the grown window"
        );
    }

    #[test]
    fn a_hole_or_another_partition_id_restarts_the_coverage() {
        let cache = DedupCache::new(DEFAULT_DEDUP_CACHE_BYTES);
        let pid = Uuid::now_v7();
        let now = SystemTime::now();
        cache.record(&key(), pid, 300, &[], (0, &hashes(&[1])), now);
        // Offsets 1..=4 unseen (no known rows sent back): restart at 5.
        cache.record(&key(), pid, 300, &[], (5, &hashes(&[2])), now);
        let cover = cache.coverage(&key(), &hashes(&[9]), now).unwrap();
        assert_eq!((cover.cover_from, cover.known_to), (5, 5));
        // The partition was re-created under a new id.
        let new_pid = Uuid::now_v7();
        cache.record(&key(), new_pid, 300, &[], (0, &hashes(&[3])), now);
        let cover = cache.coverage(&key(), &hashes(&[9]), now).unwrap();
        assert_eq!(
            (cover.partition_id, cover.cover_from, cover.known_to),
            (new_pid, 0, 0)
        );
        // The bytes of the replaced coverages were given back.
        assert_eq!(cache.stats().generations, 1);
        assert_eq!(cache.stats().hashes, 1);
    }

    #[test]
    fn generations_leave_whole_once_their_newest_row_is_older_than_the_window() {
        let cache = DedupCache::new(DEFAULT_DEDUP_CACHE_BYTES);
        let pid = Uuid::now_v7();
        let t0 = SystemTime::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        // Window 8 s: a generation spans 2 s. Rows at 0 and 1 s share one.
        cache.record(&key(), pid, 8, &[], (0, &hashes(&[1])), at(0));
        cache.record(&key(), pid, 8, &[], (1, &hashes(&[2])), at(1));
        cache.record(&key(), pid, 8, &[], (2, &hashes(&[3])), at(2));
        assert_eq!(cache.stats().generations, 2);
        // At 9 s the row of 0 s is out of the window, but its generation's
        // newest row (1 s) is not: nothing leaves, hash 1 still forces the
        // full probe.
        assert_eq!(cache.coverage(&key(), &hashes(&[1]), at(9)), None);
        // At 10 s the first generation is gone: coverage starts at offset 2.
        let cover = cache.coverage(&key(), &hashes(&[1]), at(10)).unwrap();
        assert_eq!((cover.cover_from, cover.known_to), (2, 2));
        assert_eq!(cache.stats().generations, 1);
    }

    #[test]
    fn over_budget_the_oldest_generation_goes_first_whatever_its_partition() {
        // Room for about two generations of 3,000 hashes.
        let one = {
            let mut set = IntSet::default();
            set.extend(prefixes(&many(0, 3_000)));
            set_bytes(&set)
        };
        let cache = DedupCache::new(one * 5 / 2);
        let (a, b) = (
            (Arc::from("q"), Arc::from("a")),
            (Arc::from("q"), Arc::from("b")),
        );
        let (pa, pb) = (Uuid::now_v7(), Uuid::now_v7());
        let t0 = SystemTime::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        // Window 300 s, generations of 75 s: a@0 and a@100 are two
        // generations of a, then b@200 is one of b.
        cache.record(&a, pa, 300, &[], (0, &many(0, 3_000)), at(0));
        cache.record(&a, pa, 300, &[], (3_000, &many(10_000, 3_000)), at(100));
        assert_eq!(cache.stats().generations, 2);
        cache.record(&b, pb, 300, &[], (0, &many(20_000, 3_000)), at(200));
        // The oldest generation (a's first) went, not the least recently used
        // partition as a whole, and not b: a is still covered from 3,000.
        let stats = cache.stats();
        assert!(stats.bytes <= one * 5 / 2, "{stats:?}");
        assert_eq!((stats.partitions, stats.generations), (2, 2));
        assert_eq!(cache.cover(&a), Some((3_000, 5_999)));
        assert_eq!(cache.cover(&b), Some((0, 2_999)));
        // What a still holds is still checked.
        assert_eq!(cache.coverage(&a, &many(10_000, 1), at(200)), None);
        assert!(cache.coverage(&a, &many(0, 1), at(200)).is_some());
    }

    #[test]
    fn a_generation_closes_when_full_so_a_busy_partition_is_evicted_in_parts() {
        let pid = Uuid::now_v7();
        let now = SystemTime::now();
        // 60 segments of 1,000 hashes, all at once.
        let filled = |budget: usize| {
            let cache = DedupCache::new(budget);
            for i in 0..60_u64 {
                let base = i64::try_from(i * 1_000).unwrap();
                let hashes = many(i * 1_000, 1_000);
                cache.record(&key(), pid, 300, &[], (base, &hashes), now);
            }
            cache
        };
        let stats = filled(DEFAULT_DEDUP_CACHE_BYTES).stats();
        // 57 segments fill the first generation; the rest open a second.
        assert_eq!((stats.generations, stats.hashes), (2, 60_000), "{stats:?}");
        // A full generation fills its buckets: about 10.5 bytes a hash.
        assert!(stats.bytes < 60_000 * 11, "{stats:?}");
        // Over budget, only the full generation goes.
        let over = filled(stats.bytes - 1);
        assert_eq!(over.cover(&key()), Some((57_000, 59_999)));
    }

    #[test]
    fn a_zero_budget_or_window_keeps_nothing() {
        let pid = Uuid::now_v7();
        let now = SystemTime::now();
        let off = DedupCache::new(0);
        off.record(&key(), pid, 300, &[], (0, &hashes(&[1])), now);
        assert_eq!(off.stats(), DedupStats::default());
        let cache = DedupCache::new(DEFAULT_DEDUP_CACHE_BYTES);
        cache.record(&key(), pid, 300, &[], (0, &hashes(&[1])), now);
        assert_eq!(cache.stats().partitions, 1);
        cache.record(&key(), pid, 0, &[], (1, &hashes(&[2])), now);
        // Only the list's entry of the forgotten generation is left, counted,
        // until it reaches the front.
        assert_eq!(
            cache.stats(),
            DedupStats {
                bytes: OPENED_BYTES,
                ..DedupStats::default()
            }
        );
    }

    #[test]
    fn forgetting_a_queue_gives_its_bytes_back() {
        let cache = DedupCache::new(DEFAULT_DEDUP_CACHE_BYTES);
        let now = SystemTime::now();
        let other: Key = (Arc::from("other"), Arc::from("p"));
        cache.record(&key(), Uuid::now_v7(), 300, &[], (0, &many(0, 500)), now);
        cache.record(&other, Uuid::now_v7(), 300, &[], (0, &many(500, 500)), now);
        let both = cache.stats().bytes;
        cache.forget_queue("q");
        let stats = cache.stats();
        assert_eq!((stats.partitions, stats.hashes), (1, 500));
        assert!(stats.bytes > 0 && stats.bytes < both);
        cache.forget_queue("other");
        assert_eq!(cache.stats(), DedupStats::default());
    }
}
