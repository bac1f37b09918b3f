//! Push fusion: one accumulating segment per partition, at most one flush in
//! flight per partition, several partitions per round trip.
//!
//! Each partition with pending work is a *lane*. A submission joins its lane's
//! pending list. If the lane has no flush in flight it becomes ready at once;
//! otherwise it waits, accumulating, until the current flush returns and the
//! flusher re-queues it. So a segment holds exactly what arrived during the
//! previous flush's round trip: one message at low load, more as load grows.
//! Nothing chooses a segment size (storage-model.md, "Segment size is
//! emergent").
//!
//! A fixed set of flusher tasks takes ready lanes from one queue, up to
//! [`MAX_LANES_PER_FLUSH`] at a time, and writes them with one call of
//! `queen.log_push_v2`: one transaction, one round trip. A submission's reply
//! is sent after that transaction commits.
//!
//! Locking: `lanes` is a `parking_lot::Mutex` held only to move submissions in
//! and out, never across an `.await`. The ready queue is an unbounded channel
//! whose receiver the flushers share behind a `tokio::sync::Mutex` (held while
//! waiting for the next lane, which is what makes an idle flusher the one that
//! takes new work).

use std::borrow::Cow;
use std::collections::hash_map::Entry as MapEntry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use queen_frame::SegmentBuilder;
use queen_sql::push::{Coverage, SegmentWrite, SlotOutcome};
use tokio::sync::{mpsc, oneshot, watch};
use uuid::Uuid;

use super::dedup::DedupCache;
use super::segment::{duplicate_winners, encode_entries, MAX_SEGMENT_PAYLOAD_BYTES};
use super::{Entry, EntryResult};
use crate::crypto::AtRest;
use crate::naming::{derive_namespace_task, queue_key};
use crate::pop::Ready;
use crate::EngineError;

/// The most partitions one round trip carries. Bounds the statement's size and
/// the time one transaction holds partition locks.
const MAX_LANES_PER_FLUSH: usize = 64;

/// A flush starts while another is in flight only once what is ready holds
/// this many messages (or a full flush of lanes), or once it waited
/// [`COALESCE_WAIT`]: below it a call's fixed cost in PostgreSQL (about half
/// a millisecond of CPU, the same for one slot or 64) outweighs what running
/// it alongside the other buys, so the ready lanes wait for the flush in
/// flight and go in one call. Measured with single-message pushes over
/// 100 partitions: four flushers always starting at once made flushes of 5
/// slots and spent 150 us of PostgreSQL CPU per message.
const CONCURRENT_FLUSH_MESSAGES: usize = 256;

/// The longest small work waits for the flush in flight: a flush stuck on a
/// lock (another broker, a queue being deleted) holds up the other pushes
/// this long at most, then they go alongside it. A flush usually takes 1 to
/// 3 ms on local disks.
const COALESCE_WAIT: Duration = Duration::from_millis(10);

/// Rounds of one flush: a slot refused for a stale encryption flag or for
/// duplicates is rebuilt and written again, at most this many times in total.
const MAX_FLUSH_ROUNDS: usize = 4;

/// Attempts of one round when PostgreSQL reports a deadlock or serialization
/// failure (possible only between brokers whose flushes share partitions).
const MAX_CONFLICT_ATTEMPTS: usize = 3;

type Reply = oneshot::Sender<Result<Vec<EntryResult>, EngineError>>;

/// Counters of the push path, for tests, benchmarks and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PushStats {
    /// Calls of `log_push_v2` (round trips, one transaction each).
    pub flushes: u64,
    /// Segments committed.
    pub segments: u64,
    /// Messages committed.
    pub messages: u64,
    /// Slots with client transaction ids sent to PostgreSQL without dedup
    /// coverage: unless the queue's dedup window is 0, each made
    /// `log_push_v2` read every sidecar row of the partition inside the window.
    pub full_probes: u64,
    /// Winner segments inflated to answer duplicates with the winner's
    /// message id: one per stored segment a flush's duplicates point into.
    pub winner_segments: u64,
    /// Bytes the dedup cache holds (see `QUEEN_DEDUP_CACHE_MB`).
    pub dedup_cache_bytes: u64,
    /// Transaction-id hashes the dedup cache holds.
    pub dedup_cache_hashes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct LaneKey {
    tenant: Arc<str>,
    queue: Arc<str>,
    partition: Arc<str>,
    /// `naming::queue_key(tenant, queue)`: the key of the queue's caches.
    scoped: Arc<str>,
}

struct Submission {
    entries: Vec<Entry>,
    reply: Reply,
}

#[derive(Default)]
struct Lane {
    pending: Vec<Submission>,
}

#[derive(Default)]
struct Counters {
    flushes: AtomicU64,
    segments: AtomicU64,
    messages: AtomicU64,
    full_probes: AtomicU64,
    winner_segments: AtomicU64,
}

/// Settings of push fusion.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FusionConfig {
    /// zstd level of new segments.
    pub(crate) zstd_level: i32,
    /// Flusher tasks.
    pub(crate) n_flushers: usize,
    /// The dedup cache's budget in bytes.
    pub(crate) dedup_cache_bytes: usize,
}

struct Shared {
    pool: deadpool_postgres::Pool,
    /// Told after a commit, so pops of the queue see the partition.
    ready: Ready,
    /// Lanes with pending work or a flush in flight. A lane present here is
    /// "in flight or ready"; a lane absent here is idle.
    lanes: Mutex<HashMap<LaneKey, Lane>>,
    /// Set (under the `lanes` lock) when shutdown begins: later submissions
    /// are refused at once, earlier ones are all in `lanes` and get written.
    closed: AtomicBool,
    ready_tx: mpsc::UnboundedSender<LaneKey>,
    ready_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<LaneKey>>,
    /// The key and each queue's last known `encryptionEnabled`.
    at_rest: Arc<AtRest>,
    zstd_level: i32,
    counters: Counters,
    /// Flush sizes and commit latencies, for `/metrics`.
    stats: Arc<crate::stats::Stats>,
    /// Sidecar hashes this broker already holds, so the duplicate probe reads
    /// only what it does not (see `dedup.rs`).
    dedup: DedupCache,
    /// Flushes between taking their lanes and answering them.
    in_flight: std::sync::atomic::AtomicUsize,
    /// Told whenever a flush ends (see [`CONCURRENT_FLUSH_MESSAGES`]).
    flush_done: tokio::sync::Notify,
}

/// Push fusion: lanes, the ready queue and the flusher tasks.
pub(crate) struct Fusion {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    flushers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Fusion {
    /// Start `n_flushers` flusher tasks on the current runtime.
    pub(crate) fn start(
        pool: deadpool_postgres::Pool,
        config: FusionConfig,
        at_rest: Arc<AtRest>,
        ready: Ready,
        stats: Arc<crate::stats::Stats>,
    ) -> Fusion {
        let FusionConfig {
            zstd_level,
            n_flushers,
            dedup_cache_bytes,
        } = config;
        let (ready_tx, ready_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            pool,
            ready,
            lanes: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            ready_tx,
            ready_rx: tokio::sync::Mutex::new(ready_rx),
            at_rest,
            zstd_level,
            stats,
            counters: Counters::default(),
            dedup: DedupCache::new(dedup_cache_bytes),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            flush_done: tokio::sync::Notify::new(),
        });
        let (stop, stop_rx) = watch::channel(false);
        let flushers = (0..n_flushers.max(1))
            .map(|_| tokio::spawn(run_flusher(Arc::clone(&shared), stop_rx.clone())))
            .collect();
        Fusion {
            shared,
            stop,
            flushers: Mutex::new(flushers),
        }
    }

    /// Add one request's entries for one partition; the receiver answers after commit.
    pub(crate) fn submit(
        &self,
        tenant: &Arc<str>,
        queue: &str,
        partition: &str,
        entries: Vec<Entry>,
    ) -> oneshot::Receiver<Result<Vec<EntryResult>, EngineError>> {
        let (reply, rx) = oneshot::channel();
        let queue: Arc<str> = Arc::from(queue);
        let scoped = match queue_key(tenant, &queue) {
            Cow::Borrowed(_) => Arc::clone(&queue),
            Cow::Owned(key) => Arc::from(key),
        };
        let key = LaneKey {
            tenant: Arc::clone(tenant),
            queue,
            partition: Arc::from(partition),
            scoped,
        };
        let submission = Submission { entries, reply };
        let mut lanes = self.shared.lanes.lock();
        if self.shared.closed.load(Ordering::Relaxed) {
            drop(lanes);
            let _ = submission.reply.send(Err(EngineError::ShuttingDown));
            return rx;
        }
        // A lane that was absent (idle) becomes ready; one present is already
        // ready or in flight and takes the submission along.
        let became_ready = match lanes.entry(key) {
            MapEntry::Occupied(mut lane) => {
                lane.get_mut().pending.push(submission);
                None
            }
            MapEntry::Vacant(slot) => {
                let key = slot.key().clone();
                slot.insert(Lane::default()).pending.push(submission);
                Some(key)
            }
        };
        // Sent under the lock: shutdown takes it before telling the flushers
        // to drain, so every lane a submission made ready is queued by then.
        if became_ready.is_some_and(|key| self.shared.ready_tx.send(key).is_err()) {
            tracing::error!("push fusion is stopped; a submission was dropped");
        }
        drop(lanes);
        rx
    }

    /// Forget the dedup coverage of `queue` (it was reconfigured or deleted).
    pub(crate) fn forget_queue(&self, queue: &str) {
        self.shared.dedup.forget_queue(queue);
    }

    pub(crate) fn stats(&self) -> PushStats {
        let counters = &self.shared.counters;
        let dedup = self.shared.dedup.stats();
        PushStats {
            flushes: counters.flushes.load(Ordering::Relaxed),
            segments: counters.segments.load(Ordering::Relaxed),
            messages: counters.messages.load(Ordering::Relaxed),
            full_probes: counters.full_probes.load(Ordering::Relaxed),
            winner_segments: counters.winner_segments.load(Ordering::Relaxed),
            dedup_cache_bytes: dedup.bytes as u64,
            dedup_cache_hashes: dedup.hashes as u64,
        }
    }

    /// Stop the flushers after they have written everything already submitted.
    pub(crate) async fn shutdown(&self) {
        {
            let _lanes = self.shared.lanes.lock();
            self.shared.closed.store(true, Ordering::Relaxed);
        }
        let _ = self.stop.send(true);
        let handles: Vec<_> = std::mem::take(&mut *self.flushers.lock());
        for handle in handles {
            let _ = handle.await;
        }
    }
}

async fn run_flusher(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut builder = SegmentBuilder::with_level(shared.zstd_level);
    loop {
        let keys = {
            let mut rx = shared.ready_rx.lock().await;
            let first = if *stop.borrow() {
                // Stopping: finish what is queued, then leave.
                match rx.try_recv() {
                    Ok(key) => key,
                    Err(_) => return,
                }
            } else {
                tokio::select! {
                    key = rx.recv() => match key {
                        Some(key) => key,
                        None => return,
                    },
                    // Stop asked (next round drains), or the sender is gone
                    // (fusion dropped without shutdown): leave.
                    changed = stop.changed() => match changed {
                        Ok(()) => continue,
                        Err(_) => return,
                    },
                }
            };
            let mut keys = vec![first];
            drain_ready(&mut rx, &mut keys);
            // Small work waits for the flush in flight (holding the receiver,
            // so no other flusher starts one either), then goes in one call.
            let give_up = tokio::time::Instant::now() + COALESCE_WAIT;
            loop {
                let done = shared.flush_done.notified();
                tokio::pin!(done);
                done.as_mut().enable();
                if shared.in_flight.load(Ordering::Acquire) == 0
                    || *stop.borrow()
                    || keys.len() >= MAX_LANES_PER_FLUSH
                    || ready_messages(&shared, &keys) >= CONCURRENT_FLUSH_MESSAGES
                {
                    break;
                }
                tokio::select! {
                    key = rx.recv() => match key {
                        Some(key) => {
                            keys.push(key);
                            drain_ready(&mut rx, &mut keys);
                        }
                        None => break,
                    },
                    () = &mut done => {}
                    () = tokio::time::sleep_until(give_up) => break,
                    // Stop asked (checked above), or fusion dropped: flush now.
                    changed = stop.changed() => {
                        if changed.is_err() {
                            break;
                        }
                    }
                }
            }
            shared.in_flight.fetch_add(1, Ordering::AcqRel);
            keys
        };
        let mut work = take_pending(&shared, keys);
        work.sort_by(|a, b| a.key.cmp_names(&b.key));
        flush(&shared, &mut builder, &mut work).await;
        redispatch(&shared, &work);
        shared.in_flight.fetch_sub(1, Ordering::AcqRel);
        shared.flush_done.notify_waiters();
    }
}

/// Take ready lanes from the queue without waiting, up to a full flush.
fn drain_ready(rx: &mut mpsc::UnboundedReceiver<LaneKey>, keys: &mut Vec<LaneKey>) {
    while keys.len() < MAX_LANES_PER_FLUSH {
        match rx.try_recv() {
            Ok(key) => keys.push(key),
            Err(_) => break,
        }
    }
}

/// Messages pending in the lanes of `keys`.
fn ready_messages(shared: &Shared, keys: &[LaneKey]) -> usize {
    let lanes = shared.lanes.lock();
    keys.iter()
        .filter_map(|key| lanes.get(key))
        .flat_map(|lane| lane.pending.iter())
        .map(|submission| submission.entries.len())
        .sum()
}

impl LaneKey {
    /// The order of partitions within a flush: by tenant (each tenant's
    /// slots are one statement), then the lock order, by queue, then
    /// partition name.
    fn cmp_names(&self, other: &LaneKey) -> std::cmp::Ordering {
        (&*self.tenant, &*self.queue, &*self.partition).cmp(&(
            &*other.tenant,
            &*other.queue,
            &*other.partition,
        ))
    }
}

/// One lane's share of a flush.
struct LaneWork {
    key: LaneKey,
    submissions: Vec<Submission>,
    /// Per entry (flattened across submissions): its result once known.
    results: Vec<Option<EntryResult>>,
    /// Per entry: the earlier entry of this flush with the same transaction id
    /// (two requests racing on one id, fused into one segment). A follower is
    /// never written; it answers as a duplicate of its leader.
    leaders: Vec<Option<usize>>,
}

impl LaneWork {
    fn new(key: LaneKey, submissions: Vec<Submission>) -> LaneWork {
        let mut first_seen: HashMap<[u8; queen_frame::HASH_LEN], usize> = HashMap::new();
        let leaders: Vec<Option<usize>> = submissions
            .iter()
            .flat_map(|s| s.entries.iter())
            .enumerate()
            .map(|(idx, entry)| match first_seen.get(&entry.hash) {
                Some(&leader) => Some(leader),
                None => {
                    first_seen.insert(entry.hash, idx);
                    None
                }
            })
            .collect();
        LaneWork {
            key,
            submissions,
            results: vec![None; leaders.len()],
            leaders,
        }
    }

    fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.submissions.iter().flat_map(|s| s.entries.iter())
    }

    /// True for an entry that still has to be written.
    fn needs_write(&self, idx: usize) -> bool {
        self.results.get(idx).is_some_and(Option::is_none)
            && self.leaders.get(idx).is_some_and(Option::is_none)
    }

    /// Payload bytes of the entries still to be written.
    fn payload_bytes(&self) -> usize {
        self.entries()
            .enumerate()
            .filter(|&(idx, _)| self.needs_write(idx))
            .map(|(_, entry)| entry.payload.len())
            .sum()
    }

    fn unresolved(&self) -> usize {
        (0..self.results.len())
            .filter(|&idx| self.needs_write(idx))
            .count()
    }

    /// Answer every follower from its leader's result.
    fn resolve_followers(&mut self) {
        let message_ids: Vec<Uuid> = self.entries().map(|e| e.message_id).collect();
        for idx in 0..self.results.len() {
            let Some(leader) = self.leaders[idx] else {
                continue;
            };
            self.results[idx] = match self.results.get(leader).copied().flatten() {
                Some(EntryResult::Queued { partition_id }) => Some(EntryResult::Duplicate {
                    partition_id,
                    winner: message_ids.get(leader).copied(),
                }),
                duplicate @ Some(EntryResult::Duplicate { .. }) => duplicate,
                None => None,
            };
        }
    }
}

/// Move each ready lane's pending submissions (up to the size bound) out of the map.
fn take_pending(shared: &Shared, keys: Vec<LaneKey>) -> Vec<LaneWork> {
    let mut lanes = shared.lanes.lock();
    keys.into_iter()
        .map(|key| {
            let mut submissions = Vec::new();
            if let Some(lane) = lanes.get_mut(&key) {
                let mut bytes = 0usize;
                let mut take = 0usize;
                for submission in &lane.pending {
                    let size = submission
                        .entries
                        .iter()
                        .map(|e| e.payload.len())
                        .sum::<usize>();
                    if take > 0 && bytes + size > MAX_SEGMENT_PAYLOAD_BYTES {
                        break;
                    }
                    bytes += size;
                    take += 1;
                }
                submissions = lane.pending.drain(..take).collect();
            }
            LaneWork::new(key, submissions)
        })
        .collect()
}

/// After a flush: lanes that accumulated more work go back on the ready queue
/// (still "in flight" for everyone else); drained lanes become idle.
fn redispatch(shared: &Shared, work: &[LaneWork]) {
    let mut lanes = shared.lanes.lock();
    for lane_work in work {
        let has_more = lanes
            .get(&lane_work.key)
            .is_some_and(|lane| !lane.pending.is_empty());
        if has_more {
            if shared.ready_tx.send(lane_work.key.clone()).is_err() {
                tracing::error!("push fusion is stopped; pending submissions were dropped");
            }
        } else {
            lanes.remove(&lane_work.key);
        }
    }
}

/// Write every lane of `work`, resolving each entry; then answer every submission.
async fn flush(shared: &Shared, builder: &mut SegmentBuilder, work: &mut [LaneWork]) {
    let mut failed: Vec<Option<EngineError>> = (0..work.len()).map(|_| None).collect();
    for _round in 0..MAX_FLUSH_ROUNDS {
        let todo: Vec<usize> = (0..work.len())
            .filter(|&i| failed[i].is_none() && work[i].unresolved() > 0)
            .collect();
        if todo.is_empty() {
            break;
        }
        let mut built = Vec::with_capacity(todo.len());
        let mut slots = Vec::with_capacity(todo.len());
        // Encoding and compressing the flush: off the worker thread when it
        // is large (`offload.rs`).
        let payload: usize = todo.iter().map(|&i| work[i].payload_bytes()).sum();
        crate::offload::cpu(payload, || {
            for &i in &todo {
                match build_segment(shared, builder, &work[i]) {
                    Ok(segment) => {
                        built.push(segment);
                        slots.push(i);
                    }
                    Err(error) => failed[i] = Some(error),
                }
            }
        })
        .await;
        if slots.is_empty() {
            continue;
        }
        // One statement per tenant among the slots (they are sorted by
        // tenant): almost always one.
        let mut start = 0;
        while start < slots.len() {
            let tenant = Arc::clone(&work[slots[start]].key.tenant);
            let end = slots[start..]
                .iter()
                .position(|&i| work[i].key.tenant != tenant)
                .map_or(slots.len(), |n| start + n);
            let (run, run_built) = (&slots[start..end], &built[start..end]);
            start = end;
            let writes: Vec<SegmentWrite<'_>> = run
                .iter()
                .zip(run_built)
                .map(|(&i, segment)| segment.write(&work[i].key))
                .collect();
            let outcomes = match write(shared, &tenant, &writes).await {
                Ok(outcomes) => outcomes,
                Err(error) => {
                    let error = Arc::new(EngineError::Sql(error));
                    for &i in run {
                        failed[i] = Some(EngineError::Shared(Arc::clone(&error)));
                    }
                    continue;
                }
            };
            for ((&i, segment), outcome) in run.iter().zip(run_built).zip(outcomes) {
                if let Err(error) = apply_outcome(shared, &mut work[i], segment, outcome) {
                    failed[i] = Some(error);
                }
            }
        }
    }
    for (lane_work, failure) in work.iter_mut().zip(failed) {
        lane_work.resolve_followers();
        answer(lane_work, failure);
    }
}

/// A slot's segment, built from the lane's unresolved entries.
struct BuiltSegment {
    /// Flattened entry index of each frame.
    frame_entries: Vec<usize>,
    blob: Vec<u8>,
    hashes: Vec<u8>,
    encrypted: bool,
    /// Some transaction id came from a client: probe for duplicates.
    probe: bool,
    /// The dedup cache's coverage of the partition, checked against this slot.
    coverage: Option<Coverage>,
    n_frames: i32,
    namespace_task: (String, String),
}

impl BuiltSegment {
    fn write<'a>(&'a self, key: &'a LaneKey) -> SegmentWrite<'a> {
        SegmentWrite {
            queue: &key.queue,
            partition: &key.partition,
            namespace: &self.namespace_task.0,
            task: &self.namespace_task.1,
            new_queue_id: Uuid::now_v7(),
            new_partition_id: Uuid::now_v7(),
            encrypted: self.encrypted,
            probe: self.probe,
            coverage: self.coverage,
            n_frames: self.n_frames,
            blob: &self.blob,
            hashes: &self.hashes,
        }
    }
}

fn build_segment(
    shared: &Shared,
    builder: &mut SegmentBuilder,
    lane: &LaneWork,
) -> Result<BuiltSegment, EngineError> {
    let encrypted = shared.at_rest.flag(&lane.key.scoped);
    let frame_entries: Vec<usize> = (0..lane.results.len())
        .filter(|&idx| lane.needs_write(idx))
        .collect();
    let entries: Vec<&Entry> = lane.entries().collect();
    let encoded = encode_entries(
        frame_entries
            .iter()
            .filter_map(|&idx| entries.get(idx).copied()),
        encrypted,
        shared.at_rest.key(),
        &lane.key.queue,
        builder,
    )?;
    let (namespace, task) = derive_namespace_task(&lane.key.queue);
    let coverage = shared.dedup.coverage(
        &(
            Arc::clone(&lane.key.scoped),
            Arc::clone(&lane.key.partition),
        ),
        &encoded.hashes,
        SystemTime::now(),
    );
    if encoded.probe && coverage.is_none() {
        shared.counters.full_probes.fetch_add(1, Ordering::Relaxed);
    }
    Ok(BuiltSegment {
        coverage,
        n_frames: encoded.n_frames,
        frame_entries,
        blob: encoded.blob,
        hashes: encoded.hashes,
        encrypted,
        probe: encoded.probe,
        namespace_task: (namespace.to_owned(), task.to_owned()),
    })
}

/// One call of `log_push_v2` for `tenant`'s slots, retried on deadlock or
/// serialization failure.
async fn write(
    shared: &Shared,
    tenant: &str,
    writes: &[SegmentWrite<'_>],
) -> Result<Vec<SlotOutcome>, queen_sql::SqlError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let result = async {
            let client = shared.pool.get().await?;
            shared.counters.flushes.fetch_add(1, Ordering::Relaxed);
            let started = std::time::Instant::now();
            let outcomes = queen_sql::push::push_segments(&client, tenant, writes).await?;
            let messages: i64 = writes.iter().map(|write| i64::from(write.n_frames)).sum();
            shared
                .stats
                .flushed(usize::try_from(messages).unwrap_or(0), started.elapsed());
            Ok::<_, queen_sql::SqlError>(outcomes)
        }
        .await;
        match result {
            Err(error) if error.is_conflict() && attempt < MAX_CONFLICT_ATTEMPTS => {
                tracing::debug!(attempt, "push flush conflicted; retrying");
                tokio::time::sleep(Duration::from_millis(5 * attempt as u64)).await;
            }
            other => return other,
        }
    }
}

/// Record what the flush did to one lane; an error fails the lane's
/// submissions (a full bounded queue).
fn apply_outcome(
    shared: &Shared,
    lane: &mut LaneWork,
    segment: &BuiltSegment,
    outcome: SlotOutcome,
) -> Result<(), EngineError> {
    match outcome {
        SlotOutcome::Queued {
            partition_id,
            base_offset,
            window_seconds,
            known,
            ..
        } => {
            let key = (
                Arc::clone(&lane.key.scoped),
                Arc::clone(&lane.key.partition),
            );
            if segment.probe {
                shared.dedup.record(
                    &key,
                    partition_id,
                    window_seconds,
                    &known,
                    (base_offset, &segment.hashes),
                    SystemTime::now(),
                );
            } else {
                // Every id of the slot is a fresh broker UUIDv7: no duplicate
                // check needs its hashes, so the cache holds none of them (it
                // once did, and pushes without ids filled the whole budget).
                // The coverage must stay contiguous, so it ends here; a later
                // client id on this partition probes SQL from its own row.
                shared.dedup.forget(&key);
            }
            for &idx in &segment.frame_entries {
                lane.results[idx] = Some(EntryResult::Queued { partition_id });
            }
            shared
                .ready
                .pushed(&lane.key.tenant, &lane.key.queue, &lane.key.partition);
            let counters = &shared.counters;
            counters.segments.fetch_add(1, Ordering::Relaxed);
            counters
                .messages
                .fetch_add(segment.frame_entries.len() as u64, Ordering::Relaxed);
        }
        SlotOutcome::EncryptionMismatch {
            encryption_enabled, ..
        } => {
            // Reseal (or unseal) on the next round.
            shared
                .at_rest
                .set_flag(Arc::clone(&lane.key.scoped), encryption_enabled);
        }
        SlotOutcome::Full { .. } => {
            return Err(EngineError::QueueFull {
                queue: lane.key.queue.to_string(),
            });
        }
        SlotOutcome::Duplicates {
            partition_id,
            duplicates,
            ..
        } => {
            let (inflated, winners) = duplicate_winners(duplicates);
            shared
                .counters
                .winner_segments
                .fetch_add(inflated, Ordering::Relaxed);
            for (item, winner) in winners {
                let Some(&idx) = segment.frame_entries.get(item) else {
                    continue;
                };
                lane.results[idx] = Some(EntryResult::Duplicate {
                    partition_id,
                    winner,
                });
            }
            // The rest are written on the next round, without the duplicates.
        }
    }
    Ok(())
}

/// Send each submission its entries' results, or the lane's failure.
fn answer(lane: &mut LaneWork, failure: Option<EngineError>) {
    let mut results = lane.results.iter().copied();
    let shared_failure = failure.map(Arc::new);
    for submission in lane.submissions.drain(..) {
        let n = submission.entries.len();
        let mine: Option<Vec<EntryResult>> = results.by_ref().take(n).collect();
        let reply = match (&shared_failure, mine) {
            (None, Some(mine)) => Ok(mine),
            (Some(error), _) => Err(EngineError::Shared(Arc::clone(error))),
            (None, None) => Err(EngineError::PushUnresolved),
        };
        // The requester may have gone away (client disconnect): nothing to do.
        let _ = submission.reply.send(reply);
    }
}
