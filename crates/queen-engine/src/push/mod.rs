//! The push path (decisions.md §3).
//!
//! `route.rs` decides where a push goes (fusion, the one-transaction path,
//! the spool). [`Engine::push`] takes validated items, assigns message ids (UUIDv7, strictly
//! increasing in item order) and transaction ids (the client's, or a UUIDv7),
//! groups the items by partition preserving their order, and hands each
//! partition's items to push fusion (`fusion.rs`). It answers only after the
//! commits that carry its items.

mod dedup;
mod fusion;
mod replay;
mod route;
mod segment;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use uuid::Uuid;

pub use dedup::DEFAULT_DEDUP_CACHE_BYTES;
pub use fusion::PushStats;
pub(crate) use fusion::{Fusion, FusionConfig};
pub(crate) use replay::{already_stored, CLOCK_SLACK};
pub use route::Pushed;
pub(crate) use route::{Parts as RouteParts, Pushes};
pub(crate) use segment::{duplicate_winners, encode_entries, MAX_SEGMENT_PAYLOAD_BYTES};

use crate::EngineError;

/// One message to push, already validated by the caller.
#[derive(Debug, Clone)]
pub struct PushItem {
    /// The tenant owning the queue ([`DEFAULT_TENANT`](crate::naming::DEFAULT_TENANT)
    /// without auth).
    pub tenant: Arc<str>,
    /// Queue name; the queue is created with defaults if it does not exist.
    pub queue: String,
    /// Partition name; created if it does not exist.
    pub partition: String,
    /// The client's idempotency key; generated when `None`.
    pub transaction_id: Option<String>,
    /// The client's trace id.
    pub trace_id: Option<Uuid>,
    /// The authenticated producer (`sub` of the token), when auth is on.
    pub producer_sub: Option<String>,
    /// The payload bytes exactly as the client sent them (raw JSON).
    pub payload: Bytes,
}

/// What happened to one pushed item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushStatus {
    /// Committed as a new message.
    Queued,
    /// The transaction id was already stored (or repeated earlier in the same
    /// request); nothing new was stored.
    Duplicate,
}

/// The answer for one pushed item, in the order the items were given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushOutcome {
    /// Queued or duplicate.
    pub status: PushStatus,
    /// The item's transaction id (the client's or the generated one).
    pub transaction_id: String,
    /// The new message's id; for a duplicate, the original message's id
    /// (`None` only when retention already removed the original).
    pub message_id: Option<Uuid>,
    /// The partition's id.
    pub partition_id: Uuid,
    /// The item's trace id.
    pub trace_id: Option<Uuid>,
    /// The queue name (shared by the request's outcomes for that queue).
    pub queue: Arc<str>,
}

/// A message on its way through fusion.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) message_id: Uuid,
    pub(crate) transaction_id: String,
    /// True when the client chose the transaction id (it may repeat).
    pub(crate) client_id: bool,
    pub(crate) hash: [u8; queen_frame::HASH_LEN],
    pub(crate) trace_id: Option<Uuid>,
    pub(crate) producer_sub: Option<String>,
    /// The consumer groups it is for, `\n`-separated (a replayed dead
    /// letter); `None`: every group.
    pub(crate) audience: Option<String>,
    pub(crate) payload: Bytes,
}

impl Entry {
    /// The entry for `item`: a fresh message id (UUIDv7, so ids increase in
    /// item order), the client's transaction id or a generated one, its hash.
    /// `generated` says the broker fixed the item's transaction id itself (a
    /// fresh UUIDv7, which cannot repeat: no duplicate probe). Returns the
    /// tenant, queue and partition alongside.
    pub(crate) fn from_item(item: PushItem, generated: bool) -> (Arc<str>, String, String, Entry) {
        let client_id = item.transaction_id.is_some() && !generated;
        let transaction_id = item
            .transaction_id
            .unwrap_or_else(|| Uuid::now_v7().to_string());
        let entry = Entry {
            message_id: Uuid::now_v7(),
            hash: queen_frame::txn_hash(&transaction_id),
            transaction_id,
            client_id,
            trace_id: item.trace_id,
            producer_sub: item.producer_sub,
            audience: None,
            payload: item.payload,
        };
        (item.tenant, item.queue, item.partition, entry)
    }
}

/// What fusion answers for one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryResult {
    Queued {
        partition_id: Uuid,
    },
    Duplicate {
        partition_id: Uuid,
        winner: Option<Uuid>,
    },
}

/// One partition's entries, in item order: tenant, queue, partition, entries.
pub(crate) type Group = (Arc<str>, String, String, Vec<Entry>);

/// Group `items` by (tenant, queue, partition), groups in order of first appearance,
/// names owned once per group. Also answers, per item, its group and its
/// position among the group's entries. `generated[i]` says item `i`'s
/// transaction id was fixed by the broker (missing entries: it was not).
pub(crate) fn group_by_partition(
    items: Vec<PushItem>,
    generated: &[bool],
) -> (Vec<Group>, Vec<(usize, usize)>) {
    let mut groups: Vec<Group> = Vec::new();
    let mut group_of: HashMap<(Arc<str>, String, String), usize> = HashMap::new();
    let mut places = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let generated = generated.get(index).copied().unwrap_or(false);
        let (tenant, queue, partition, entry) = Entry::from_item(item, generated);
        let key = (tenant, queue, partition);
        let group = match group_of.get(&key) {
            Some(&idx) => idx,
            None => {
                groups.push((Arc::clone(&key.0), key.1.clone(), key.2.clone(), Vec::new()));
                group_of.insert(key, groups.len() - 1);
                groups.len() - 1
            }
        };
        if let Some((_, _, _, entries)) = groups.get_mut(group) {
            places.push((group, entries.len()));
            entries.push(entry);
        }
    }
    (groups, places)
}

/// `entries` in order, cut into runs of at most `max` payload bytes (a run
/// holds at least one entry, so one larger entry is a run of its own).
fn split_by_payload(entries: Vec<Entry>, max: usize) -> Vec<Vec<Entry>> {
    let mut runs: Vec<Vec<Entry>> = Vec::new();
    let mut bytes = 0usize;
    for entry in entries {
        let size = entry.payload.len();
        match runs.last_mut() {
            Some(run) if bytes + size <= max => {
                bytes += size;
                run.push(entry);
            }
            _ => {
                bytes = size;
                runs.push(vec![entry]);
            }
        }
    }
    runs
}

/// What a push must remember to answer each item once its partitions'
/// entries are resolved: per item, its group and position, its
/// transaction id, trace id and message id; per group, its queue.
pub(crate) struct Answering {
    places: Vec<(usize, usize)>,
    answers: Vec<(String, Option<Uuid>, Uuid)>,
    queues: Vec<Arc<str>>,
}

/// Group `items` by partition (see [`group_by_partition`]) and keep what
/// answering them needs.
pub(crate) fn prepare(
    items: Vec<PushItem>,
    generated: &[bool],
) -> Result<(Vec<Group>, Answering), EngineError> {
    let (groups, places) = group_by_partition(items, generated);
    // Per item, before the entries move on: transaction id, trace id,
    // message id.
    let answers = places
        .iter()
        .map(|&(group, position)| {
            let entry = groups
                .get(group)
                .and_then(|(_, _, _, entries)| entries.get(position))
                .ok_or(EngineError::Internal("a pushed item lost its group"))?;
            Ok((
                entry.transaction_id.clone(),
                entry.trace_id,
                entry.message_id,
            ))
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    let queues = groups
        .iter()
        .map(|(_, queue, ..)| Arc::from(queue.as_str()))
        .collect();
    Ok((
        groups,
        Answering {
            places,
            answers,
            queues,
        },
    ))
}

impl Answering {
    /// One outcome per item, in input order, from each group's entry results.
    pub(crate) fn outcomes(
        self,
        results: &[Vec<EntryResult>],
    ) -> Result<Vec<PushOutcome>, EngineError> {
        let Answering {
            places,
            answers,
            queues,
        } = self;
        places
            .into_iter()
            .zip(answers)
            .map(
                |((group, position), (transaction_id, trace_id, message_id))| {
                    let result = results.get(group).and_then(|r| r.get(position));
                    let (status, message_id, partition_id) = match result {
                        Some(&EntryResult::Queued { partition_id }) => {
                            (PushStatus::Queued, Some(message_id), partition_id)
                        }
                        Some(&EntryResult::Duplicate {
                            partition_id,
                            winner,
                        }) => (PushStatus::Duplicate, winner, partition_id),
                        None => return Err(EngineError::Internal("a pushed item got no answer")),
                    };
                    let queue = queues
                        .get(group)
                        .cloned()
                        .ok_or(EngineError::Internal("a pushed item lost its queue"))?;
                    Ok(PushOutcome {
                        status,
                        transaction_id,
                        message_id,
                        partition_id,
                        trace_id,
                        queue,
                    })
                },
            )
            .collect()
    }
}

impl Fusion {
    /// Push `items`; answers one outcome per item, in input order, once every
    /// item is committed (or found to be a duplicate).
    ///
    /// A transaction id repeated within one partition, in this request or in
    /// another request fused into the same flush, is a duplicate of its first
    /// occurrence (fusion settles that, see `fusion.rs`).
    ///
    /// If PostgreSQL fails, the whole call fails, although partitions whose
    /// flush committed keep their messages: retrying with the same
    /// transaction ids is safe, the committed ones come back as duplicates.
    ///
    /// `generated[i]` says item `i`'s transaction id was fixed by the broker
    /// (see [`Entry::from_item`]).
    pub(crate) async fn push(
        &self,
        items: Vec<PushItem>,
        generated: &[bool],
    ) -> Result<Vec<PushOutcome>, EngineError> {
        let (groups, answering) = prepare(items, generated)?;

        // A partition's items go to fusion in submissions of at most
        // MAX_SEGMENT_PAYLOAD_BYTES of payload (one item is never split):
        // each becomes at most one segment of that size. Every partition's
        // first submission goes at once; a later one only after the one
        // before it committed, so a failure leaves a prefix stored, never a
        // later part without an earlier one (a retry then appends in order).
        let pending: Vec<_> = groups
            .into_iter()
            .map(|(tenant, queue, partition, entries)| {
                let count = entries.len();
                let mut runs = split_by_payload(entries, MAX_SEGMENT_PAYLOAD_BYTES).into_iter();
                let first = runs
                    .next()
                    .map(|run| self.submit(&tenant, &queue, &partition, run));
                (tenant, queue, partition, count, first, runs)
            })
            .collect();
        let mut results: Vec<Vec<EntryResult>> = Vec::with_capacity(pending.len());
        for (tenant, queue, partition, count, first, runs) in pending {
            let mut entry_results = Vec::with_capacity(count);
            if let Some(reply) = first {
                entry_results.extend(reply.await.map_err(|_| EngineError::ShuttingDown)??);
            }
            for run in runs {
                let reply = self.submit(&tenant, &queue, &partition, run);
                entry_results.extend(reply.await.map_err(|_| EngineError::ShuttingDown)??);
            }
            if entry_results.len() != count {
                return Err(EngineError::Internal(
                    "push fusion answered the wrong count",
                ));
            }
            results.push(entry_results);
        }
        answering.outcomes(&results)
    }
}
