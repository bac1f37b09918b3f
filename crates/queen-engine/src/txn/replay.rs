//! Replaying dead letters (`POST /api/v1/messages/:p/:t/retry`, `POST
//! /api/v1/dlq/requeue`): dead letters move back into the log, each in the
//! same transaction as its push.
//!
//! `log_dlq_take_v1` deletes the selected rows and returns them; the broker
//! pushes them back inside that transaction and commits, so a row leaves the
//! table exactly when its replay commits, and two replays racing over the
//! same rows never take one twice (the procedure skips locked rows).
//!
//! A replayed message is a new message at the head of its partition: a new
//! offset and a new message id, the original transaction id, trace id,
//! producer and payload, and an audience: the groups whose dead letters were
//! taken, the only ones it is delivered to (a group that had completed the
//! original steps over it, `pop/render.rs` `render`). Its transaction id
//! is stored already, so the push skips the duplicate probe (a replay is not
//! a duplicate), and an ack of it resolves to the new offset (`ack.sql`
//! prefers the occurrence after the cursor). A message that failed in several
//! groups is one dead letter per group but one replayed message, and so are
//! the rows of one transaction id at two offsets (a replayed copy that failed
//! again).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use queen_sql::dlq::TakenLetter;

use crate::lifecycle::dlq::DlqTake;
use uuid::Uuid;

use super::Transactions;
use crate::push::{Entry, Group, MAX_SEGMENT_PAYLOAD_BYTES};
use crate::EngineError;

/// One message to replay: its earliest dead letter, and the groups whose
/// rows of it were taken.
type Letter = (TakenLetter, BTreeSet<String>);

/// The most dead letters one replay takes.
pub const MAX_REPLAY: i32 = 1000;

/// What a replay moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Replayed {
    /// Dead-letter rows removed.
    pub letters: usize,
    /// Messages pushed back (a message dead-lettered by several groups is
    /// one).
    pub messages: usize,
}

impl Transactions {
    /// Move the dead letters `take` selects (at most [`MAX_REPLAY`]) back
    /// into the log, in one transaction.
    pub(crate) async fn replay(
        &self,
        tenant: &str,
        take: &DlqTake<'_>,
    ) -> Result<Replayed, EngineError> {
        let take = DlqTake {
            limit: take.limit.clamp(1, MAX_REPLAY),
            ..*take
        }
        .sql();
        let mut client = self.pool.get().await.map_err(queen_sql::SqlError::from)?;
        let tx = client
            .transaction()
            .await
            .map_err(queen_sql::SqlError::from)?;
        let letters = queen_sql::dlq::take(&*tx, tenant, &take).await?;
        if letters.is_empty() {
            return Ok(Replayed::default());
        }
        let n_letters = letters.len();
        let groups = self.replay_groups(tenant, letters)?;
        let messages = groups.iter().map(|(_, _, _, entries)| entries.len()).sum();
        self.write_groups(&tx, 0, &groups).await?;
        tx.commit().await.map_err(queen_sql::SqlError::from)?;
        for (tenant, queue, partition, _) in &groups {
            self.ready.pushed(tenant, queue, partition);
        }
        Ok(Replayed {
            letters: n_letters,
            messages,
        })
    }

    /// One entry per replayed message (a message filed by several groups
    /// once), per partition in offset order, cut into segments of at most
    /// [`MAX_SEGMENT_PAYLOAD_BYTES`] of payload.
    fn replay_groups(
        &self,
        tenant: &str,
        letters: Vec<TakenLetter>,
    ) -> Result<Vec<Group>, EngineError> {
        let tenant: Arc<str> = Arc::from(tenant);
        // One message per transaction id of a partition: the rows of one
        // message (one per group it failed in, or an old and a replayed
        // copy that failed again) are replayed once, at its earliest offset,
        // for the groups whose rows were taken and no other.
        let mut first: HashMap<(Uuid, String), Letter> = HashMap::new();
        for letter in letters {
            let key = (letter.partition_id, letter.transaction_id.clone());
            match first.get_mut(&key) {
                Some((kept, groups)) => {
                    groups.insert(letter.consumer_group.clone());
                    if letter.offset < kept.offset {
                        *kept = letter;
                    }
                }
                None => {
                    let groups = BTreeSet::from([letter.consumer_group.clone()]);
                    first.insert(key, (letter, groups));
                }
            }
        }
        let by_message: BTreeMap<(String, String, Uuid, i64), Letter> = first
            .into_values()
            .map(|(letter, groups)| {
                let key = (
                    letter.queue.clone(),
                    letter.partition.clone(),
                    letter.partition_id,
                    letter.offset,
                );
                (key, (letter, groups))
            })
            .collect();
        let mut groups: Vec<Group> = Vec::new();
        let mut bytes = 0usize;
        for ((queue, partition, ..), (letter, audience)) in by_message {
            let payload = if letter.encrypted {
                let key = self
                    .at_rest
                    .key()
                    .ok_or_else(|| EngineError::EncryptionKeyMissing {
                        queue: queue.clone(),
                    })?;
                Bytes::from(key.open(&letter.payload)?)
            } else {
                Bytes::from(letter.payload)
            };
            // One copy per audience that fits a frame's u16 field (groups
            // are names of at most 255 bytes: about 250 groups a copy).
            for audience in audiences(&audience) {
                let entry = Entry {
                    message_id: Uuid::now_v7(),
                    hash: queen_frame::txn_hash(&letter.transaction_id),
                    transaction_id: letter.transaction_id.clone(),
                    // Stored already: a replay is not a duplicate, no probe.
                    client_id: false,
                    trace_id: letter.trace_id,
                    producer_sub: letter.producer_sub.clone(),
                    audience: Some(audience),
                    payload: payload.clone(),
                };
                let size = entry.payload.len();
                match groups.last_mut() {
                    Some((_, q, p, entries))
                        if *q == queue
                            && *p == partition
                            && bytes + size <= MAX_SEGMENT_PAYLOAD_BYTES =>
                    {
                        bytes += size;
                        entries.push(entry);
                    }
                    _ => {
                        bytes = size;
                        groups.push((
                            Arc::clone(&tenant),
                            queue.clone(),
                            partition.clone(),
                            vec![entry],
                        ));
                    }
                }
            }
        }
        Ok(groups)
    }
}

/// `groups` as frame audiences: `\n`-joined, cut so that each fits the
/// frame's `u16` length.
fn audiences(groups: &BTreeSet<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current = String::new();
    for group in groups {
        let extra = group.len() + usize::from(!current.is_empty());
        if !current.is_empty() && current.len() + extra > usize::from(u16::MAX) {
            out.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(queen_frame::AUDIENCE_SEPARATOR);
        }
        current.push_str(group);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audiences_fit_the_frame_field() {
        let few: BTreeSet<String> = ["a".to_owned(), "b".to_owned()].into();
        assert_eq!(audiences(&few), ["a\nb"]);
        let many: BTreeSet<String> = (0..1000).map(|i| format!("{i:0>200}")).collect();
        let cut = audiences(&many);
        assert!(cut.len() > 1);
        assert!(cut.iter().all(|a| a.len() <= usize::from(u16::MAX)));
        let back: BTreeSet<String> = cut
            .iter()
            .flat_map(|a| a.split('\n').map(str::to_owned))
            .collect();
        assert_eq!(back, many);
    }
}
