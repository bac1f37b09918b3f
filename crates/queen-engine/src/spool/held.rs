//! Held records: records whose queue was full (`maxSize`) when they were
//! drained wait in `held.log`, in order, and are retried with backoff; a
//! retry stores as long a prefix as the queue takes.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::drain::{blocking, is_full, is_stopping, CHUNK_BYTES, CHUNK_RECORDS};
use super::file;
use super::{Pass, Spool, Store};
use crate::naming::queue_key;
use crate::push::PushItem;
use crate::EngineError;

/// The first retry of a queue's held records, after they were held or after
/// a retry stored some of them.
pub(crate) const HELD_FIRST_RETRY: Duration = Duration::from_millis(250);
/// The longest wait between retries of a full queue's held records. A
/// retry of a queue that is still full costs one attempt of one record, and
/// a direct push to the queue answers 429 until its held records are
/// stored, so this is also how long room can go unused.
pub(crate) const HELD_MAX_RETRY: Duration = Duration::from_secs(5);

/// A queue with held records: when to retry them, and how many records the
/// next retry's first attempt takes (1 after it was found full, doubled
/// after each attempt that was stored, up to a chunk).
pub(super) struct HeldQueue {
    next_try: std::time::Instant,
    backoff: Duration,
    size: usize,
}

impl HeldQueue {
    pub(super) fn now() -> HeldQueue {
        HeldQueue {
            next_try: std::time::Instant::now() + HELD_FIRST_RETRY,
            backoff: HELD_FIRST_RETRY,
            size: 1,
        }
    }

    /// True when its retry is due at `now`.
    pub(super) fn due(&self, now: std::time::Instant) -> bool {
        self.next_try <= now
    }
}

/// How a retry of one queue's held records ended.
enum Retried {
    /// All stored (or, refused for another reason, moved to `failed-*.log`).
    Done,
    /// Some stored, the queue is full again.
    Progress,
    /// Nothing stored: still full.
    Stuck,
    /// The database went away or the broker is stopping.
    Stopped,
}

/// Retry the held records of every queue whose retry is due: per queue, in
/// order, as long a prefix as the queue takes (attempts start at the
/// queue's remembered size, double after each stored one, and halve when
/// refused as full, down to one record), then rewrite `held.log` without what was
/// stored. A crash before the rewrite stores those again: the drain's
/// duplicate check finds them.
pub(super) async fn retry_held(spool: &Spool, store: &Store) -> Result<(), EngineError> {
    let now = std::time::Instant::now();
    let due: Vec<(String, usize)> = spool
        .state
        .lock()
        .held_queues
        .iter()
        .filter(|(_, held)| held.next_try <= now)
        .map(|(key, held)| (key.clone(), held.size))
        .collect();
    if due.is_empty() {
        return Ok(());
    }
    let dir = spool.dir.clone();
    let bytes = blocking(move || file::read_held(&dir)).await?;
    let (records, _) = file::records(&bytes);
    let keys: Vec<String> = records
        .iter()
        .map(|(record, _)| queue_key(&record.tenant, &record.queue).into_owned())
        .collect();
    let starts: Vec<usize> = std::iter::once(0)
        .chain(records.iter().map(|(_, end)| *end))
        .collect();
    let range = |i: usize| bytes.get(starts[i]..records[i].1).unwrap_or_default();
    let pass = Pass::default();
    let mut keep = vec![true; records.len()];
    let mut failed_raw: Vec<u8> = Vec::new();
    let mut failed = 0u64;
    let mut stored = 0u64;
    let mut results: Vec<(String, Retried, usize)> = Vec::new();
    let mut stopped: Option<EngineError> = None;
    for (key, first) in due {
        let mine: Vec<usize> = (0..records.len()).filter(|&i| keys[i] == key).collect();
        let mut at = 0usize;
        let mut size = first.clamp(1, CHUNK_RECORDS);
        let mut stored_any = false;
        let result = loop {
            if at == mine.len() {
                break Retried::Done;
            }
            let mut take = 0usize;
            let mut payload = 0usize;
            while take < size && at + take < mine.len() && (take == 0 || payload < CHUNK_BYTES) {
                payload += records[mine[at + take]].0.payload.len();
                take += 1;
            }
            let part = &mine[at..at + take];
            let items: Vec<PushItem> = part.iter().map(|&i| records[i].0.item()).collect();
            let since = part
                .iter()
                .map(|&i| spool.probe_since(&records[i].0))
                .collect();
            match store(items, since, Arc::clone(&pass)).await {
                Ok(_) => {
                    for &i in part {
                        keep[i] = false;
                    }
                    stored += take as u64;
                    at += take;
                    stored_any = true;
                    size = (take * 2).min(CHUNK_RECORDS);
                }
                Err(error) if error.is_unreachable() || is_stopping(&error) => {
                    stopped = Some(error);
                    break Retried::Stopped;
                }
                Err(error) if is_full(&error) => {
                    if take == 1 {
                        break if stored_any {
                            Retried::Progress
                        } else {
                            Retried::Stuck
                        };
                    }
                    size = take / 2;
                }
                Err(error) => {
                    tracing::error!(
                        error = %crate::error_chain(&error),
                        queue = %records[mine[at]].0.queue,
                        records = mine.len() - at,
                        "held spooled pushes cannot be stored; they are kept in a failed-*.log file"
                    );
                    for &i in &mine[at..] {
                        keep[i] = false;
                        failed_raw.extend_from_slice(range(i));
                        failed += 1;
                    }
                    break Retried::Done;
                }
            }
        };
        let stop = matches!(result, Retried::Stopped);
        results.push((key, result, size));
        if stop {
            break;
        }
    }
    let mut kept: Vec<u8> = Vec::new();
    let mut kept_count = 0u64;
    let mut oldest: Option<SystemTime> = None;
    for (i, (record, _)) in records.iter().enumerate() {
        if keep[i] {
            kept.extend_from_slice(range(i));
            kept_count += 1;
            if let Some(at) = record.accepted_at() {
                oldest = Some(oldest.map_or(at, |o| o.min(at)));
            }
        }
    }
    let changed = kept_count < records.len() as u64;
    let (dir, kept_len, failed_len) = (
        spool.dir.clone(),
        kept.len() as u64,
        failed_raw.len() as u64,
    );
    let new_file = blocking(move || {
        let created = !failed_raw.is_empty() && file::append_failed(&dir, 0, &failed_raw)?;
        if changed {
            file::rewrite_held(&dir, &kept)?;
        }
        Ok(created)
    })
    .await?;
    {
        let mut state = spool.state.lock();
        let now = std::time::Instant::now();
        state.held = kept_count;
        state.held_bytes = kept_len;
        state.held_oldest = oldest;
        state.failed += failed;
        state.failed_files += u64::from(new_file);
        state.failed_bytes += failed_len;
        state.drained += stored;
        for (key, result, size) in results {
            state.held_retries += 1;
            match result {
                Retried::Done => {
                    state.held_queues.remove(&key);
                }
                Retried::Progress | Retried::Stuck | Retried::Stopped => {
                    if let Some(held) = state.held_queues.get_mut(&key) {
                        held.backoff = match result {
                            Retried::Stuck => (held.backoff * 2).min(HELD_MAX_RETRY),
                            _ => HELD_FIRST_RETRY,
                        };
                        held.next_try = now + held.backoff;
                        held.size = size;
                    }
                }
            }
        }
    }
    match stopped {
        Some(error) => Err(error),
        None => Ok(()),
    }
}
