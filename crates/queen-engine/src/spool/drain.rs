//! The drainer task: while push maintenance is off and the database
//! answers, it closes the active log and pushes the closed logs oldest
//! first, chunk by chunk, recording each log's drained offset after every
//! chunk; records of a full queue go to `held.log` (`held.rs`), records no
//! retry can store to a `failed-*.log` file.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::file::{self, Record};
use super::held::{retry_held, HeldQueue};
use super::{Pass, Spool, Store};
use crate::naming::queue_key;
use crate::push::PushItem;
use crate::EngineError;

/// Records drained per store.
pub(super) const CHUNK_RECORDS: usize = 1000;
/// Payload bytes drained per store, at most (one record more).
pub(super) const CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// The drainer's idle tick: how soon it notices the database is back.
const TICK: Duration = Duration::from_millis(250);
/// How long a database check may take.
const PING_BOUND: Duration = Duration::from_secs(2);

/// The drainer task.
pub(super) async fn run_drainer(
    spool: Arc<Spool>,
    store: Store,
    pool: deadpool_postgres::Pool,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = spool.wake.notified() => {}
            _ = tokio::time::sleep(TICK) => {}
            _ = stop.changed() => return,
        }
        let (maintenance, outage, pending, held_due) = {
            let state = spool.state.lock();
            let now = std::time::Instant::now();
            (
                state.maintenance || !state.flags_known,
                state.outage,
                state.pending,
                state.held_queues.values().any(|held| held.due(now)),
            )
        };
        if maintenance {
            continue;
        }
        if outage {
            if !reachable(&pool).await {
                continue;
            }
            tracing::info!("the database answers again; draining the spool");
            spool.state.lock().outage = false;
        }
        if pending > 0 {
            if let Err(error) = drain(&spool, &store).await {
                failed_drain(&spool, &error);
                continue;
            }
        }
        if held_due {
            if let Err(error) = retry_held(&spool, &store).await {
                failed_drain(&spool, &error);
            }
        }
    }
}

fn failed_drain(spool: &Spool, error: &EngineError) {
    if error.is_unreachable() {
        spool.state.lock().outage = true;
    } else {
        tracing::error!(error = %crate::error_chain(error), "the spool drain failed");
    }
}

/// True for a store refused because a bounded queue is full.
pub(super) fn is_full(error: &EngineError) -> bool {
    match error {
        EngineError::QueueFull { .. } => true,
        EngineError::Shared(inner) => is_full(inner),
        _ => false,
    }
}

async fn reachable(pool: &deadpool_postgres::Pool) -> bool {
    tokio::time::timeout(PING_BOUND, async {
        let client = pool.get().await.ok()?;
        queen_sql::connect::ping(&**client).await.ok()
    })
    .await
    .ok()
    .flatten()
    .is_some()
}

/// Drain every closed log, oldest first; stops early when maintenance is
/// turned on again.
async fn drain(spool: &Spool, store: &Store) -> Result<(), EngineError> {
    let Some(boundary) = spool.rotate().await else {
        return Ok(());
    };
    let dir = spool.dir.clone();
    let seqs = blocking(move || file::logs(&dir)).await?;
    let pass = Pass::default();
    for seq in seqs.into_iter().filter(|&seq| seq < boundary) {
        if spool.maintenance() {
            return Ok(());
        }
        drain_log(spool, store, seq, &pass).await?;
    }
    Ok(())
}

/// Push log `seq` from its drained offset, chunk by chunk, then remove it.
async fn drain_log(spool: &Spool, store: &Store, seq: u64, pass: &Pass) -> Result<(), EngineError> {
    let dir = spool.dir.clone();
    let (bytes, from) = blocking(move || {
        let bytes = std::fs::read(file::log_path(&dir, seq))?;
        let from = file::drained(&dir, seq)?;
        Ok((bytes, from))
    })
    .await?;
    let from = usize::try_from(from).unwrap_or(usize::MAX).min(bytes.len());
    let (records, torn) = file::records(bytes.get(from..).unwrap_or_default());
    if torn {
        tracing::warn!(
            seq,
            "a spool log ends in a torn record (an append that was never answered); it is skipped"
        );
    }
    if let Some(first) = records.first().and_then(|(record, _)| record.accepted_at()) {
        // Every earlier log is drained: this is the oldest waiting record.
        spool.state.lock().log_front = Some(first);
    }
    let mut start = 0usize;
    let mut done = 0usize;
    while done < records.len() {
        if spool.maintenance() {
            return Ok(());
        }
        let mut end = done;
        let mut payload = 0usize;
        while end < records.len() && end - done < CHUNK_RECORDS && payload < CHUNK_BYTES {
            payload += records[end].0.payload.len();
            end += 1;
        }
        let stop_at = records[end - 1].1;
        // Each record with where it starts, relative to `from`.
        let starts = std::iter::once(start).chain(records[done..end - 1].iter().map(|(_, at)| *at));
        let chunk: Vec<(&Record, usize, usize)> = records[done..end]
            .iter()
            .zip(starts)
            .map(|((record, at), begin)| (record, begin, *at))
            .collect();
        // One store per queue (a queue's records in order; queues are
        // independent), so one queue that cannot take its records does not
        // hold up or fail the others.
        let mut queues: Vec<(&str, &str)> = Vec::new();
        for (record, ..) in &chunk {
            let queue = (record.tenant.as_str(), record.queue.as_str());
            if !queues.contains(&queue) {
                queues.push(queue);
            }
        }
        let mut failed_raw: Vec<u8> = Vec::new();
        let mut failed = 0u64;
        let mut held_raw: Vec<u8> = Vec::new();
        let mut held = 0u64;
        let mut held_oldest: Option<SystemTime> = None;
        let mut newly_held: Vec<String> = Vec::new();
        for (tenant, queue) in queues {
            let mine: Vec<&(&Record, usize, usize)> = chunk
                .iter()
                .filter(|(r, ..)| r.queue == queue && r.tenant == tenant)
                .collect();
            let key = queue_key(tenant, queue).into_owned();
            let already_held =
                newly_held.contains(&key) || spool.state.lock().held_queues.contains_key(&key);
            let outcome = if already_held {
                None
            } else {
                let items: Vec<PushItem> = mine.iter().map(|(record, ..)| record.item()).collect();
                let since = mine
                    .iter()
                    .map(|(record, ..)| spool.probe_since(record))
                    .collect();
                Some(store(items, since, Arc::clone(pass)).await)
            };
            let hold = match outcome {
                // Behind records held for being full.
                None => true,
                Some(Ok(_)) => false,
                // The database went away (or the broker is stopping): the
                // chunk stays undrained and is stored again later (what of
                // it was stored is then found duplicate).
                Some(Err(error)) if error.is_unreachable() || is_stopping(&error) => {
                    return Err(error)
                }
                Some(Err(error)) if is_full(&error) => {
                    tracing::warn!(
                        queue,
                        tenant,
                        records = mine.len(),
                        "spooled pushes meet a full queue (maxSize); they stay in the spool and are retried"
                    );
                    newly_held.push(key);
                    true
                }
                Some(Err(error)) => {
                    tracing::error!(
                        error = %crate::error_chain(&error),
                        queue,
                        records = mine.len(),
                        "spooled pushes cannot be stored; they are kept in a failed-*.log file"
                    );
                    for (_, begin, at) in &mine {
                        failed_raw.extend_from_slice(
                            bytes.get(from + begin..from + at).unwrap_or_default(),
                        );
                    }
                    failed += mine.len() as u64;
                    false
                }
            };
            if hold {
                // Held, in order, and retried with backoff (`retry_held`).
                for (record, begin, at) in &mine {
                    held_raw
                        .extend_from_slice(bytes.get(from + begin..from + at).unwrap_or_default());
                    if let Some(accepted) = record.accepted_at() {
                        held_oldest = Some(held_oldest.map_or(accepted, |o| o.min(accepted)));
                    }
                }
                held += mine.len() as u64;
            }
        }
        let dir = spool.dir.clone();
        let offset = (from + stop_at) as u64;
        let failed_len = failed_raw.len() as u64;
        let held_len = held_raw.len() as u64;
        let new_file = blocking(move || {
            let created = !failed_raw.is_empty() && file::append_failed(&dir, seq, &failed_raw)?;
            if !held_raw.is_empty() {
                file::append_held(&dir, &held_raw)?;
            }
            file::set_drained(&dir, seq, offset)?;
            Ok(created)
        })
        .await?;
        {
            let n = (end - done) as u64;
            let mut state = spool.state.lock();
            state.failed_files += u64::from(new_file);
            state.failed_bytes += failed_len;
            state.pending = state.pending.saturating_sub(n);
            state.pending_bytes = state.pending_bytes.saturating_sub((stop_at - start) as u64);
            state.held += held;
            state.held_bytes += held_len;
            if let Some(at) = held_oldest {
                state.held_oldest = Some(state.held_oldest.map_or(at, |o| o.min(at)));
            }
            for key in newly_held {
                state.held_queues.entry(key).or_insert_with(HeldQueue::now);
            }
            state.failed += failed;
            state.drained += n - failed - held;
            state.log_front = if state.pending == 0 {
                None
            } else {
                records
                    .get(end)
                    .and_then(|(record, _)| record.accepted_at())
                    .or(state.log_front)
            };
        }
        start = stop_at;
        done = end;
    }
    let dir = spool.dir.clone();
    blocking(move || file::remove_log(&dir, seq)).await
}

/// Errors of a broker that is stopping: the drain resumes after the restart.
pub(super) fn is_stopping(error: &EngineError) -> bool {
    match error {
        EngineError::ShuttingDown | EngineError::PushUnresolved => true,
        EngineError::Shared(inner) => is_stopping(inner),
        _ => false,
    }
}

/// Run file I/O off the async workers.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, EngineError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| EngineError::Internal("a spool file task panicked"))?
        .map_err(EngineError::SpoolWrite)
}
