//! Pushes to bounded queues (`maxSize`): the whole request in one
//! PostgreSQL transaction, so a request the limit refuses writes nothing.
//!
//! Fusion writes each partition's share of a request in whatever flush it
//! lands in, so a refused share could leave the request's other partitions
//! stored. A request that names a queue with `maxSize` (as far as this broker
//! knows: `bounded.rs`) comes here instead: one transaction, one segment per
//! partition (split at 8 MiB of payload), `log_push_v2` with the duplicate
//! probe as fusion uses it. Duplicates answer `duplicate` like a fused push
//! (the slot is written again without them, in the same transaction), a
//! transaction id repeated within the request is a duplicate of its first
//! occurrence, and a `full` slot rolls everything back
//! (`EngineError::QueueFull`). Announced after the commit.

use std::collections::HashMap;
use std::sync::Arc;

use queen_frame::SegmentBuilder;
use queen_sql::push::{SegmentWrite, SlotOutcome};
use uuid::Uuid;

use super::Transactions;
use crate::naming::{derive_namespace_task, queue_key};
use crate::push::{
    duplicate_winners, encode_entries, prepare, EntryResult, Group, PushItem, PushOutcome,
    MAX_SEGMENT_PAYLOAD_BYTES,
};
use crate::EngineError;

/// Rounds a run may take: the encryption flag may be stale once, and the
/// duplicates found are left out on the next round.
const MAX_ROUNDS: usize = 4;

impl Transactions {
    /// Push `items` in one transaction (see the module docs); `generated`
    /// as for fusion.
    pub(crate) async fn push_atomic(
        &self,
        items: Vec<PushItem>,
        generated: &[bool],
    ) -> Result<Vec<PushOutcome>, EngineError> {
        let (groups, answering) = prepare(items, generated)?;
        let mut client = self.pool.get().await.map_err(queen_sql::SqlError::from)?;
        let tx = client
            .transaction()
            .await
            .map_err(queen_sql::SqlError::from)?;
        let results = self.write_resolving(&tx, &groups).await?;
        tx.commit().await.map_err(queen_sql::SqlError::from)?;
        for (tenant, queue, partition, _) in &groups {
            self.ready.pushed(tenant, queue, partition);
        }
        answering.outcomes(&results)
    }

    /// Write every group inside the transaction `client` is in, in
    /// (tenant, queue, partition) order, resolving each entry queued or duplicate.
    pub(super) async fn write_resolving(
        &self,
        client: &impl queen_sql::Conn,
        groups: &[Group],
    ) -> Result<Vec<Vec<EntryResult>>, EngineError> {
        // The lock order of fusion: (tenant, queue, partition).
        let mut order: Vec<usize> = (0..groups.len()).collect();
        let names = |g: &Group| (Arc::clone(&g.0), g.1.clone(), g.2.clone());
        order.sort_by_key(|&i| names(&groups[i]));
        let mut results: Vec<Vec<Option<EntryResult>>> = groups
            .iter()
            .map(|(_, _, _, entries)| vec![None; entries.len()])
            .collect();
        let mut builder = SegmentBuilder::with_level(self.zstd_level);
        for slot in order {
            let (_, _, _, entries) = &groups[slot];
            // A transaction id repeated in the request: the first occurrence
            // is written, the others follow it.
            let mut first: HashMap<&[u8; queen_frame::HASH_LEN], usize> = HashMap::new();
            let mut followers: Vec<(usize, usize)> = Vec::new();
            let mut leaders: Vec<usize> = Vec::with_capacity(entries.len());
            for (index, entry) in entries.iter().enumerate() {
                match first.get(&entry.hash) {
                    Some(&leader) => followers.push((index, leader)),
                    None => {
                        first.insert(&entry.hash, index);
                        leaders.push(index);
                    }
                }
            }
            // Segments of at most MAX_SEGMENT_PAYLOAD_BYTES of payload.
            let mut runs: Vec<Vec<usize>> = Vec::new();
            let mut bytes = 0usize;
            for index in leaders {
                let size = entries[index].payload.len();
                match runs.last_mut() {
                    Some(run) if bytes + size <= MAX_SEGMENT_PAYLOAD_BYTES => run.push(index),
                    _ => {
                        runs.push(vec![index]);
                        bytes = 0;
                    }
                }
                bytes += size;
            }
            for run in runs {
                self.write_run(
                    client,
                    &groups[slot],
                    &run,
                    &mut results[slot],
                    &mut builder,
                )
                .await?;
            }
            for (index, leader) in followers {
                let leader_result = results[slot][leader];
                results[slot][index] = match leader_result {
                    Some(EntryResult::Queued { partition_id }) => Some(EntryResult::Duplicate {
                        partition_id,
                        winner: Some(entries[leader].message_id),
                    }),
                    other => other,
                };
            }
        }
        results
            .into_iter()
            .map(|slot| {
                slot.into_iter()
                    .collect::<Option<Vec<_>>>()
                    .ok_or(EngineError::PushUnresolved)
            })
            .collect()
    }

    /// Write the entries `run` of one partition's group as one segment, leaving out
    /// the duplicates the probe finds.
    async fn write_run(
        &self,
        client: &impl queen_sql::Conn,
        (tenant, queue, partition, entries): &Group,
        run: &[usize],
        results: &mut [Option<EntryResult>],
        builder: &mut SegmentBuilder,
    ) -> Result<(), EngineError> {
        let (namespace, task) = derive_namespace_task(queue);
        let key = queue_key(tenant, queue);
        for _round in 0..MAX_ROUNDS {
            let todo: Vec<usize> = run
                .iter()
                .copied()
                .filter(|&index| results[index].is_none())
                .collect();
            if todo.is_empty() {
                return Ok(());
            }
            let encrypted = self.at_rest.flag(&key);
            let payload: usize = todo.iter().map(|&i| entries[i].payload.len()).sum();
            let encoded = crate::offload::cpu(payload, || {
                encode_entries(
                    todo.iter().map(|&i| &entries[i]),
                    encrypted,
                    self.at_rest.key(),
                    queue,
                    builder,
                )
            })
            .await?;
            let write = SegmentWrite {
                queue,
                partition,
                namespace,
                task,
                new_queue_id: Uuid::now_v7(),
                new_partition_id: Uuid::now_v7(),
                encrypted,
                probe: encoded.probe,
                coverage: None,
                n_frames: encoded.n_frames,
                blob: &encoded.blob,
                hashes: &encoded.hashes,
            };
            let outcome = queen_sql::push::push_segments(client, tenant, &[write])
                .await?
                .into_iter()
                .next()
                .ok_or(EngineError::Internal("log_push_v2 answered no slot"))?;
            match outcome {
                SlotOutcome::Queued { partition_id, .. } => {
                    for index in todo {
                        results[index] = Some(EntryResult::Queued { partition_id });
                    }
                    return Ok(());
                }
                SlotOutcome::EncryptionMismatch {
                    encryption_enabled, ..
                } => self.at_rest.set_flag(Arc::from(&*key), encryption_enabled),
                SlotOutcome::Duplicates {
                    partition_id,
                    duplicates,
                    ..
                } => {
                    for (item, winner) in duplicate_winners(duplicates).1 {
                        if let Some(&index) = todo.get(item) {
                            results[index] = Some(EntryResult::Duplicate {
                                partition_id,
                                winner,
                            });
                        }
                    }
                }
                SlotOutcome::Full { .. } => {
                    return Err(EngineError::QueueFull {
                        queue: queue.clone(),
                    })
                }
            }
        }
        Err(EngineError::PushUnresolved)
    }
}
