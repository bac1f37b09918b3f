//! Statistics: what this broker did, counted in memory.
//!
//! Two readers: `/metrics` reads the process-wide totals (no database), and
//! the statistics writer (`stats_writer.rs`) takes the per-queue counts of
//! the minute that just ended and writes them as one row per queue.
//!
//! Counting costs a few relaxed atomic adds per request plus one short lock
//! of the per-queue map. That map is keyed by client-chosen queue names:
//! it holds at most [`MAX_QUEUES_PER_MINUTE`] names and is emptied every
//! minute by the writer; counts for further queues in the same minute go to
//! the totals only, and the minute row says how many were dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime};

use parking_lot::Mutex;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

/// A statement slower than this is logged as a warning.
pub(crate) const SLOW_STATEMENT: std::time::Duration = std::time::Duration::from_secs(1);

/// Warn when `what` (a statement, or a round trip of them) took longer than
/// [`SLOW_STATEMENT`].
pub(crate) fn warn_if_slow(what: &'static str, elapsed: std::time::Duration) {
    if elapsed > SLOW_STATEMENT {
        tracing::warn!(
            statement = what,
            elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            "slow statement"
        );
    }
}

/// Distinct queues one minute's counts can hold.
pub const MAX_QUEUES_PER_MINUTE: usize = 10_000;

/// Process-wide totals since start.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    pub(crate) push_requests: AtomicU64,
    pub(crate) push_messages: AtomicU64,
    pub(crate) push_buffered: AtomicU64,
    pub(crate) pop_requests: AtomicU64,
    pub(crate) pop_messages: AtomicU64,
    pub(crate) pop_empty: AtomicU64,
    pub(crate) ack_requests: AtomicU64,
    pub(crate) ack_completed: AtomicU64,
    pub(crate) ack_failed: AtomicU64,
    pub(crate) ack_dlq: AtomicU64,
    pub(crate) ack_refused: AtomicU64,
    pub(crate) transactions: AtomicU64,
    pub(crate) db_errors: AtomicU64,
}

/// A copy of the request and message counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TotalsSnapshot {
    /// Push requests answered (any outcome).
    pub push_requests: u64,
    /// Messages those pushes stored (duplicates excluded) or spooled.
    pub push_messages: u64,
    /// Of them, spooled to disk (maintenance or an outage).
    pub push_buffered: u64,
    /// Pop requests answered.
    pub pop_requests: u64,
    /// Messages delivered.
    pub pop_messages: u64,
    /// Pops answered with nothing.
    pub pop_empty: u64,
    /// Ack calls (single and batch, and the transactions' acks).
    pub ack_requests: u64,
    /// Acks applied as completed.
    pub ack_completed: u64,
    /// Acks applied as failed (retry spent or dead-lettered).
    pub ack_failed: u64,
    /// Messages dead-lettered by acks.
    pub ack_dlq: u64,
    /// Acks refused (bad lease, unknown message, ...).
    pub ack_refused: u64,
    /// Transactions committed.
    pub transactions: u64,
    /// Requests that failed on a database error.
    pub db_errors: u64,
}

/// One queue's counts for one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueMinute {
    /// Push requests naming the queue.
    pub push_requests: u64,
    /// Messages stored.
    pub pushed: u64,
    /// Pop requests.
    pub pop_requests: u64,
    /// Messages delivered.
    pub popped: u64,
    /// Pops that delivered nothing.
    pub pop_empty: u64,
    /// Ack calls that applied to the queue.
    pub ack_requests: u64,
    /// Items those calls applied (any status).
    pub ack_messages: u64,
    /// Acks applied as completed.
    pub acked: u64,
    /// Acks applied as failed.
    pub ack_failed: u64,
    /// Messages dead-lettered.
    pub dlq: u64,
    /// Transactions that touched the queue.
    pub transactions: u64,
    /// Messages retention removed past `retentionSeconds` (this broker's
    /// sweeps).
    pub retention_msgs: u64,
    /// Messages retention removed consumed and past
    /// `completedRetentionSeconds`.
    pub completed_retention_msgs: u64,
    /// Messages eviction removed (`maxWaitTimeSeconds`).
    pub eviction_msgs: u64,
    /// Empty idle partitions removed.
    pub partitions_deleted: u64,
}

/// The most pops a queue had parked at once during the minute is not kept;
/// the writer samples the parked count when it writes.
#[derive(Debug, Default)]
struct Minute {
    queues: HashMap<String, QueueMinute>,
    /// Counts for queues past [`MAX_QUEUES_PER_MINUTE`] this minute.
    dropped: u64,
}

/// One ack call's outcomes on one queue: (completed, failed, dead-lettered,
/// items applied).
pub(crate) type AckCounts = (u64, u64, u64, u64);

/// The broker's statistics.
#[derive(Debug)]
pub(crate) struct Stats {
    started: Instant,
    pub(crate) totals: Totals,
    minute: Mutex<Minute>,
    /// Messages per fusion flush.
    pub(crate) flush_messages: Histogram,
    /// Seconds from a flush's start to its commit.
    pub(crate) flush_seconds: Histogram,
    /// Event-loop lag samples (µs) since the last minute row.
    lag: Mutex<LagWindow>,
    /// How long the messages delivered since the last minute row had
    /// waited since their commit: atomics, as every delivering pop adds
    /// to them.
    delivery: DeliveryCounters,
}

/// The running [`DeliveryLag`] of the minute (see [`delivery_wait_ms`]).
#[derive(Debug, Default)]
struct DeliveryCounters {
    messages: AtomicU64,
    sum_ms: AtomicU64,
    max_ms: AtomicU64,
}

/// The longest wait one delivery counts, ms (a year): a commit timestamp
/// decades off (a clock set wrong when it was stamped) cannot swamp the sums.
pub(crate) const MAX_DELIVERY_WAIT_MS: u64 = 365 * 24 * 3_600_000;

/// How long a message committed at `committed` waited until `now`, in ms,
/// within `0..=MAX_DELIVERY_WAIT_MS`. Two clocks meet here: `committed` is
/// the database's (the segment's `created_at`, stamped by PostgreSQL at the
/// commit) and `now` is this broker's. Their skew shifts every wait by the
/// same amount, so a broker whose clock runs behind the database's would
/// see negative waits: those count as 0, never as a huge unsigned value.
pub(crate) fn delivery_wait_ms(now: SystemTime, committed: SystemTime) -> u64 {
    now.duration_since(committed).map_or(0, |waited| {
        u64::try_from(waited.as_millis())
            .unwrap_or(u64::MAX)
            .min(MAX_DELIVERY_WAIT_MS)
    })
}

/// The wait of the messages delivered in one minute, from their commit to
/// their delivery.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryLag {
    /// Messages delivered.
    pub messages: u64,
    /// The sum of their waits, ms.
    pub sum_ms: u64,
    /// The longest, ms.
    pub max_ms: u64,
}

/// Event-loop lag samples of one minute.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LagWindow {
    /// Samples taken.
    pub samples: u64,
    /// Their sum, µs.
    pub sum_us: u64,
    /// The largest, µs.
    pub max_us: u64,
}

impl Default for Stats {
    fn default() -> Stats {
        Stats {
            started: Instant::now(),
            totals: Totals::default(),
            minute: Mutex::default(),
            flush_messages: Histogram::new(exponential_buckets(1.0, 4.0, 9)),
            flush_seconds: Histogram::new(exponential_buckets(0.000_25, 2.0, 14)),
            lag: Mutex::default(),
            delivery: DeliveryCounters::default(),
        }
    }
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Stats {
    /// Seconds since the engine started.
    pub(crate) fn uptime(&self) -> std::time::Duration {
        self.started.elapsed()
    }

    /// Add to `queue`'s counts of this minute.
    fn queue(&self, queue: &str, apply: impl FnOnce(&mut QueueMinute)) {
        let mut minute = self.minute.lock();
        if let Some(counts) = minute.queues.get_mut(queue) {
            apply(counts);
        } else if minute.queues.len() < MAX_QUEUES_PER_MINUTE {
            apply(minute.queues.entry(queue.to_owned()).or_default());
        } else {
            minute.dropped += 1;
        }
    }

    /// A push request stored `per_queue` messages (one entry per queue).
    pub(crate) fn pushed<'q>(
        &self,
        per_queue: impl IntoIterator<Item = (&'q str, u64)>,
        buffered: bool,
    ) {
        add(&self.totals.push_requests, 1);
        for (queue, messages) in per_queue {
            add(&self.totals.push_messages, messages);
            if buffered {
                add(&self.totals.push_buffered, messages);
            }
            self.queue(queue, |counts| {
                counts.push_requests += 1;
                counts.pushed += messages;
            });
        }
    }

    /// A pop of `queue` (`None`: a discovery pop that found nothing)
    /// delivered `messages`.
    pub(crate) fn popped(&self, queue: Option<&str>, messages: u64) {
        add(&self.totals.pop_requests, 1);
        add(&self.totals.pop_messages, messages);
        if messages == 0 {
            add(&self.totals.pop_empty, 1);
        }
        if let Some(queue) = queue {
            self.queue(queue, |counts| {
                counts.pop_requests += 1;
                counts.popped += messages;
                if messages == 0 {
                    counts.pop_empty += 1;
                }
            });
        }
    }

    /// One ack call's outcomes, per queue.
    pub(crate) fn acked<'q>(
        &self,
        per_queue: impl IntoIterator<Item = (&'q str, AckCounts)>,
        refused: u64,
    ) {
        add(&self.totals.ack_requests, 1);
        add(&self.totals.ack_refused, refused);
        for (queue, (completed, failed, dlq, applied)) in per_queue {
            add(&self.totals.ack_completed, completed);
            add(&self.totals.ack_failed, failed);
            add(&self.totals.ack_dlq, dlq);
            self.queue(queue, |counts| {
                counts.ack_requests += 1;
                counts.ack_messages += applied;
                counts.acked += completed;
                counts.ack_failed += failed;
                counts.dlq += dlq;
            });
        }
    }

    /// A transaction committed, touching `queues`.
    pub(crate) fn transaction<'q>(&self, queues: impl IntoIterator<Item = &'q str>) {
        add(&self.totals.transactions, 1);
        for queue in queues {
            self.queue(queue, |counts| counts.transactions += 1);
        }
    }

    /// What one retention step removed of `queue`.
    pub(crate) fn retained(&self, queue: &str, by_time: u64, completed: u64) {
        self.queue(queue, |counts| {
            counts.retention_msgs += by_time;
            counts.completed_retention_msgs += completed;
        });
    }

    /// What one eviction step removed of `queue`.
    pub(crate) fn evicted(&self, queue: &str, messages: u64) {
        self.queue(queue, |counts| counts.eviction_msgs += messages);
    }

    /// Partitions of `queue` one cleanup step removed.
    pub(crate) fn partitions_removed(&self, queue: &str, partitions: u64) {
        self.queue(queue, |counts| counts.partitions_deleted += partitions);
    }

    /// A pop of `tenant` answered; `target` is the queue it named (`None`:
    /// a discovery pop, counted under the queue it served, if any).
    pub(crate) fn pop_call(
        &self,
        tenant: &str,
        target: Option<&str>,
        answer: &Result<crate::Popped, crate::EngineError>,
    ) {
        match answer {
            Ok(popped) => {
                self.popped(
                    popped
                        .queue
                        .as_deref()
                        .or(target)
                        .map(|queue| crate::naming::queue_key(tenant, queue))
                        .as_deref(),
                    popped.messages.len() as u64,
                );
                self.delivered(popped.messages.iter().map(|m| m.created_at));
            }
            Err(error) => self.failed(error),
        }
    }

    /// The queue keys a transaction of `tenant` pushes to, each once.
    pub(crate) fn transaction_queues(tenant: &str, ops: &[crate::TxnOp]) -> Vec<String> {
        let mut queues: Vec<String> = Vec::new();
        for op in ops {
            if let crate::TxnOp::Push(items) = op {
                for item in items {
                    let key = crate::naming::queue_key(tenant, &item.queue);
                    if !queues.iter().any(|queue| *queue == *key) {
                        queues.push(key.into_owned());
                    }
                }
            }
        }
        queues
    }

    /// A transaction pushing to `queues` answered.
    pub(crate) fn transaction_call<T>(
        &self,
        queues: &[String],
        answer: &Result<T, crate::EngineError>,
    ) {
        match answer {
            Ok(_) => self.transaction(queues.iter().map(String::as_str)),
            Err(error) => self.failed(error),
        }
    }

    /// A request failed on the database.
    pub(crate) fn db_error(&self) {
        add(&self.totals.db_errors, 1);
    }

    /// A request failed with `error`: counted when it failed on the database.
    pub(crate) fn failed(&self, error: &crate::EngineError) {
        if error.is_unreachable() || matches!(error, crate::EngineError::Sql(_)) {
            self.db_error();
        }
    }

    /// One ack call of `tenant` answered: per queue (completed, failed,
    /// dead-lettered), and the refused items.
    pub(crate) fn ack_call(
        &self,
        tenant: &str,
        statuses: &[crate::AckStatus],
        answer: &Result<Vec<crate::AckOutcome>, crate::EngineError>,
    ) {
        let outcomes = match answer {
            Ok(outcomes) => outcomes,
            Err(error) => return self.failed(error),
        };
        let mut per_queue: Vec<(std::borrow::Cow<'_, str>, AckCounts)> = Vec::new();
        let mut refused = 0;
        for (status, outcome) in statuses.iter().zip(outcomes) {
            let (Some(queue), true) = (outcome.queue.as_deref(), outcome.success) else {
                refused += 1;
                continue;
            };
            let key = crate::naming::queue_key(tenant, queue);
            let index = per_queue
                .iter()
                .position(|(name, _)| *name == key)
                .unwrap_or_else(|| {
                    per_queue.push((key, (0, 0, 0, 0)));
                    per_queue.len() - 1
                });
            let entry = &mut per_queue[index].1;
            entry.3 += 1;
            match status {
                crate::AckStatus::Completed => entry.0 += 1,
                crate::AckStatus::Failed => entry.1 += 1,
                _ => {}
            }
            if outcome.dlq {
                entry.2 += 1;
            }
        }
        self.acked(
            per_queue.iter().map(|(queue, counts)| (&**queue, *counts)),
            refused,
        );
    }

    /// A fusion flush of `messages` committed after `elapsed`.
    pub(crate) fn flushed(&self, messages: usize, elapsed: std::time::Duration) {
        #[expect(clippy::cast_precision_loss, reason = "a histogram sample")]
        self.flush_messages.observe(messages as f64);
        self.flush_seconds.observe(elapsed.as_secs_f64());
    }

    /// Messages committed at `created` were delivered now: three atomic
    /// operations per pop, no lock (the pop path's hot end).
    pub(crate) fn delivered(&self, created: impl Iterator<Item = SystemTime>) {
        let now = SystemTime::now();
        let (mut messages, mut sum_ms, mut max_ms) = (0u64, 0u64, 0u64);
        for at in created {
            let ms = delivery_wait_ms(now, at);
            messages += 1;
            sum_ms = sum_ms.saturating_add(ms);
            max_ms = max_ms.max(ms);
        }
        self.add_delivery(DeliveryLag {
            messages,
            sum_ms,
            max_ms,
        });
    }

    fn add_delivery(&self, lag: DeliveryLag) {
        if lag.messages == 0 {
            return;
        }
        let window = &self.delivery;
        window.messages.fetch_add(lag.messages, Ordering::Relaxed);
        window.sum_ms.fetch_add(lag.sum_ms, Ordering::Relaxed);
        window.max_ms.fetch_max(lag.max_ms, Ordering::Relaxed);
    }

    /// One event-loop lag sample.
    pub(crate) fn event_loop_lag(&self, lag: std::time::Duration) {
        let us = u64::try_from(lag.as_micros()).unwrap_or(u64::MAX);
        let mut window = self.lag.lock();
        window.samples += 1;
        window.sum_us = window.sum_us.saturating_add(us);
        window.max_us = window.max_us.max(us);
    }

    /// The totals now.
    pub(crate) fn totals(&self) -> TotalsSnapshot {
        let t = &self.totals;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        TotalsSnapshot {
            push_requests: get(&t.push_requests),
            push_messages: get(&t.push_messages),
            push_buffered: get(&t.push_buffered),
            pop_requests: get(&t.pop_requests),
            pop_messages: get(&t.pop_messages),
            pop_empty: get(&t.pop_empty),
            ack_requests: get(&t.ack_requests),
            ack_completed: get(&t.ack_completed),
            ack_failed: get(&t.ack_failed),
            ack_dlq: get(&t.ack_dlq),
            ack_refused: get(&t.ack_refused),
            transactions: get(&t.transactions),
            db_errors: get(&t.db_errors),
        }
    }

    /// Take the minute's per-queue counts, the count of dropped updates and
    /// the lag window, leaving them empty.
    pub(crate) fn take_minute(&self) -> (HashMap<String, QueueMinute>, u64, LagWindow) {
        let minute = std::mem::take(&mut *self.minute.lock());
        let lag = std::mem::take(&mut *self.lag.lock());
        (minute.queues, minute.dropped, lag)
    }

    /// Take the minute's delivery waits, leaving them empty. The three
    /// swaps are not one atomic step: a pop between them lands partly in
    /// this minute and partly in the next, which moves one pop's figures by
    /// a minute and loses nothing.
    pub(crate) fn take_delivery(&self) -> DeliveryLag {
        let window = &self.delivery;
        DeliveryLag {
            messages: window.messages.swap(0, Ordering::Relaxed),
            sum_ms: window.sum_ms.swap(0, Ordering::Relaxed),
            max_ms: window.max_ms.swap(0, Ordering::Relaxed),
        }
    }

    /// Put delivery waits back that a failed write could not store.
    pub(crate) fn restore_delivery(&self, old: DeliveryLag) {
        self.add_delivery(old);
    }

    /// Put counts back that a failed write could not store, merged with
    /// what arrived meanwhile (bounded like any minute).
    pub(crate) fn restore_minute(&self, queues: HashMap<String, QueueMinute>) {
        for (queue, old) in queues {
            self.queue(&queue, |counts| {
                counts.push_requests += old.push_requests;
                counts.pushed += old.pushed;
                counts.pop_requests += old.pop_requests;
                counts.popped += old.popped;
                counts.pop_empty += old.pop_empty;
                counts.ack_requests += old.ack_requests;
                counts.ack_messages += old.ack_messages;
                counts.acked += old.acked;
                counts.ack_failed += old.ack_failed;
                counts.dlq += old.dlq;
                counts.transactions += old.transactions;
                counts.retention_msgs += old.retention_msgs;
                counts.completed_retention_msgs += old.completed_retention_msgs;
                counts.eviction_msgs += old.eviction_msgs;
                counts.partitions_deleted += old.partitions_deleted;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minute_map_is_capped_and_emptied_by_take() {
        let stats = Stats::default();
        for index in 0..MAX_QUEUES_PER_MINUTE + 5 {
            stats.popped(Some(&format!("q{index}")), 1);
        }
        let (queues, dropped, _) = stats.take_minute();
        assert_eq!(queues.len(), MAX_QUEUES_PER_MINUTE);
        assert_eq!(dropped, 5);
        assert_eq!(
            stats.totals().pop_messages,
            (MAX_QUEUES_PER_MINUTE + 5) as u64
        );
        let (queues, dropped, _) = stats.take_minute();
        assert!(queues.is_empty());
        assert_eq!(dropped, 0);
    }

    #[test]
    fn a_delivery_wait_is_clamped_to_zero_and_a_year() {
        let now = SystemTime::now();
        let second = std::time::Duration::from_secs(1);
        assert_eq!(delivery_wait_ms(now, now - second), 1000);
        // The broker's clock behind the database's: no wait, not 2^64 - 1000.
        assert_eq!(delivery_wait_ms(now, now + second), 0);
        let decades = std::time::Duration::from_secs(40 * 365 * 86_400);
        assert_eq!(delivery_wait_ms(now, now - decades), MAX_DELIVERY_WAIT_MS);
    }

    #[test]
    fn delivery_waits_add_up_across_threads_and_are_taken_once() {
        let stats = std::sync::Arc::new(Stats::default());
        let committed = SystemTime::now() - std::time::Duration::from_secs(2);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let stats = std::sync::Arc::clone(&stats);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        stats.delivered([committed, committed].into_iter());
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        stats.delivered(std::iter::empty());
        let taken = stats.take_delivery();
        assert_eq!(taken.messages, 8000);
        assert!((2000..60_000).contains(&taken.max_ms), "{taken:?}");
        assert!(taken.sum_ms >= 8000 * 2000 && taken.sum_ms <= 8000 * taken.max_ms);
        assert_eq!(stats.take_delivery(), DeliveryLag::default());
        stats.restore_delivery(taken);
        stats.delivered([SystemTime::now() + std::time::Duration::from_secs(5)].into_iter());
        let again = stats.take_delivery();
        assert_eq!(
            (again.messages, again.sum_ms, again.max_ms),
            (8001, taken.sum_ms, taken.max_ms)
        );
    }

    #[test]
    fn counts_land_on_their_queue() {
        let stats = Stats::default();
        stats.pushed([("a", 3), ("b", 1)], false);
        stats.popped(Some("a"), 2);
        stats.popped(Some("a"), 0);
        stats.acked([("a", (2, 1, 1, 3))], 1);
        let (queues, _, _) = stats.take_minute();
        let a = queues["a"];
        assert_eq!(
            (
                a.pushed,
                a.popped,
                a.pop_empty,
                a.acked,
                a.ack_failed,
                a.dlq
            ),
            (3, 2, 1, 2, 1, 1)
        );
        assert_eq!(queues["b"].pushed, 1);
        let totals = stats.totals();
        assert_eq!((totals.push_requests, totals.ack_refused), (1, 1));
    }
}
