//! The mesh's batch format, its MAC and its replay guard. No I/O.
//!
//! A batch is
//! `b"QH" | version 1 | sender u64 | seq u64 | sent_ms u64 | count u16 | hints`
//! (little-endian), each hint `kind u8` then its names, each a `u8` length
//! and its bytes (every name is at most 255 bytes by the one name rule).
//! Over UDP a batch is followed by a 16-byte tag: BLAKE3 keyed with a key
//! derived from `QUEEN_SYNC_SECRET`. Over PostgreSQL `NOTIFY` the batch goes
//! untagged (the database is trusted), hex-encoded.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Hint;
use crate::reader::Reader;

const MAGIC: &[u8; 2] = b"QH";
const VERSION: u8 = 1;
const HEADER: usize = 2 + 1 + 8 + 8 + 8 + 2;
/// Bytes of the MAC at the end of a UDP datagram.
pub(crate) const TAG_LEN: usize = 16;

const KIND_PUSHED: u8 = 1;
const KIND_QUEUE_CHANGED: u8 = 2;
const KIND_QUEUE_DELETED: u8 = 3;
const KIND_GROUP_CHANGED: u8 = 4;
const KIND_MAINTENANCE: u8 = 5;

/// A decoded batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Batch {
    /// The sending broker (random per process).
    pub(crate) sender: u64,
    /// The sender's sequence number of this batch.
    pub(crate) seq: u64,
    /// When it was sent, ms since the epoch.
    pub(crate) sent_ms: u64,
    pub(crate) hints: Vec<Hint>,
}

/// Milliseconds since the epoch now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn put_name(out: &mut Vec<u8>, name: &str) -> bool {
    let Ok(len) = u8::try_from(name.len()) else {
        return false;
    };
    out.push(len);
    out.extend_from_slice(name.as_bytes());
    true
}

/// Append `hint`'s encoding to `out`; false (and `out` unchanged) for a
/// name over 255 bytes, which the name rule never lets through.
fn put_hint(out: &mut Vec<u8>, hint: &Hint) -> bool {
    let start = out.len();
    let ok = match hint {
        Hint::Pushed {
            tenant,
            queue,
            partition,
        } => {
            out.push(KIND_PUSHED);
            put_name(out, tenant) && put_name(out, queue) && put_name(out, partition)
        }
        Hint::QueueChanged { tenant, queue } => {
            out.push(KIND_QUEUE_CHANGED);
            put_name(out, tenant) && put_name(out, queue)
        }
        Hint::QueueDeleted { tenant, queue } => {
            out.push(KIND_QUEUE_DELETED);
            put_name(out, tenant) && put_name(out, queue)
        }
        Hint::GroupChanged {
            tenant,
            group,
            queue,
        } => {
            out.push(KIND_GROUP_CHANGED);
            put_name(out, tenant)
                && put_name(out, group)
                && put_name(out, queue.as_deref().unwrap_or(""))
        }
        Hint::Maintenance => {
            out.push(KIND_MAINTENANCE);
            true
        }
    };
    if !ok {
        out.truncate(start);
    }
    ok
}

/// `hints` as batches of at most `max_bytes` each (a hint is at most 769
/// bytes, so any `max_bytes` above that holds at least one), numbered from
/// `*seq` on.
pub(crate) fn encode(sender: u64, seq: &mut u64, hints: &[Hint], max_bytes: usize) -> Vec<Vec<u8>> {
    let mut batches = Vec::new();
    let mut current: Option<(Vec<u8>, u16)> = None;
    let header = |seq: u64| {
        let mut out = Vec::with_capacity(max_bytes);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&sender.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&now_ms().to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out
    };
    let mut encoded = Vec::new();
    for hint in hints {
        encoded.clear();
        if !put_hint(&mut encoded, hint) {
            continue;
        }
        let full = current.as_ref().is_some_and(|(out, count)| {
            out.len() + encoded.len() > max_bytes || *count == u16::MAX
        });
        if full {
            batches.extend(current.take().map(finish));
        }
        let (out, count) = current.get_or_insert_with(|| {
            *seq += 1;
            (header(*seq), 0)
        });
        out.extend_from_slice(&encoded);
        *count += 1;
    }
    batches.extend(current.take().map(finish));
    batches
}

fn finish((mut out, count): (Vec<u8>, u16)) -> Vec<u8> {
    out[HEADER - 2..HEADER].copy_from_slice(&count.to_le_bytes());
    out
}

/// A name: `u8` length and bytes, UTF-8 under the one name rule (empty
/// allowed: the absent queue of a group hint).
fn name(reader: &mut Reader<'_>) -> Option<String> {
    let name = std::str::from_utf8(reader.u8_field()?).ok()?;
    (name.is_empty() || crate::naming::name_problem(name).is_none()).then(|| name.to_owned())
}

fn required(reader: &mut Reader<'_>) -> Option<String> {
    name(reader).filter(|name| !name.is_empty())
}

/// The batch in `bytes`, or `None` when it is malformed.
pub(crate) fn decode(bytes: &[u8]) -> Option<Batch> {
    let mut reader = Reader::new(bytes);
    if reader.take(2)? != MAGIC || reader.byte()? != VERSION {
        return None;
    }
    let sender = reader.u64_le()?;
    let seq = reader.u64_le()?;
    let sent_ms = reader.u64_le()?;
    let count = reader.u16_le()?;
    let mut hints = Vec::with_capacity(usize::from(count).min(1024));
    for _ in 0..count {
        let hint = match reader.byte()? {
            KIND_PUSHED => Hint::Pushed {
                tenant: required(&mut reader)?,
                queue: required(&mut reader)?,
                partition: required(&mut reader)?,
            },
            KIND_QUEUE_CHANGED => Hint::QueueChanged {
                tenant: required(&mut reader)?,
                queue: required(&mut reader)?,
            },
            KIND_QUEUE_DELETED => Hint::QueueDeleted {
                tenant: required(&mut reader)?,
                queue: required(&mut reader)?,
            },
            KIND_GROUP_CHANGED => Hint::GroupChanged {
                tenant: required(&mut reader)?,
                group: required(&mut reader)?,
                queue: name(&mut reader).filter(|queue| !queue.is_empty()),
            },
            KIND_MAINTENANCE => Hint::Maintenance,
            _ => return None,
        };
        hints.push(hint);
    }
    reader.is_empty().then_some(Batch {
        sender,
        seq,
        sent_ms,
        hints,
    })
}

/// The MAC key of `secret`.
pub(crate) fn mac_key(secret: &[u8]) -> [u8; 32] {
    blake3::derive_key("queen mesh hints v1", secret)
}

/// `batch` followed by its tag.
pub(crate) fn seal(key: &[u8; 32], mut batch: Vec<u8>) -> Vec<u8> {
    let tag = blake3::keyed_hash(key, &batch);
    batch.extend_from_slice(&tag.as_bytes()[..TAG_LEN]);
    batch
}

/// The batch of a datagram whose tag is right, else `None`.
pub(crate) fn open<'d>(key: &[u8; 32], datagram: &'d [u8]) -> Option<&'d [u8]> {
    let split = datagram.len().checked_sub(TAG_LEN)?;
    let (batch, tag) = datagram.split_at(split);
    let expected = blake3::keyed_hash(key, batch);
    // blake3::Hash compares in constant time; compare the tag prefix the same way.
    let mut full = [0u8; 32];
    full[..TAG_LEN].copy_from_slice(tag);
    full[TAG_LEN..].copy_from_slice(&expected.as_bytes()[TAG_LEN..]);
    (blake3::Hash::from(full) == expected).then_some(batch)
}

/// How far a batch's send time may be from the receiver's clock.
pub(crate) const MAX_SKEW: Duration = Duration::from_secs(30);

/// Senders the replay guard remembers at most (an authenticated sender is a
/// broker holding the secret; past this the least recently heard is
/// forgotten, and its old batches are then refused by their send time).
pub(crate) const MAX_SENDERS: usize = 1024;

/// Refuses a batch seen before: per sender the highest sequence number and
/// a 64-wide window below it, plus the send time within [`MAX_SKEW`].
#[derive(Debug, Default)]
pub(crate) struct ReplayGuard {
    senders: HashMap<u64, (u64, u64, u64)>,
}

impl ReplayGuard {
    /// Whether `batch` is fresh (and remember it); `now_ms` is the clock.
    pub(crate) fn accept(&mut self, batch: &Batch, now_ms: u64) -> bool {
        let skew = u64::try_from(MAX_SKEW.as_millis()).unwrap_or(u64::MAX);
        if batch.sent_ms.abs_diff(now_ms) > skew {
            return false;
        }
        if !self.senders.contains_key(&batch.sender) && self.senders.len() >= MAX_SENDERS {
            if let Some(oldest) = self
                .senders
                .iter()
                .min_by_key(|(_, (_, _, heard))| *heard)
                .map(|(sender, _)| *sender)
            {
                self.senders.remove(&oldest);
            }
        }
        let (highest, window, heard) = self.senders.entry(batch.sender).or_insert((0, 0, 0));
        *heard = now_ms;
        let seq = batch.seq;
        if seq > *highest {
            let shift = seq - *highest;
            *window = if shift >= 64 { 0 } else { *window << shift };
            *window |= 1;
            *highest = seq;
            return true;
        }
        let back = *highest - seq;
        if back >= 64 || *window & (1 << back) != 0 {
            return false;
        }
        *window |= 1 << back;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hints() -> Vec<Hint> {
        vec![
            Hint::Pushed {
                tenant: "default".into(),
                queue: "orders".into(),
                partition: "p-1".into(),
            },
            Hint::QueueChanged {
                tenant: "acme".into(),
                queue: "q".into(),
            },
            Hint::QueueDeleted {
                tenant: "acme".into(),
                queue: "q".into(),
            },
            Hint::GroupChanged {
                tenant: "acme".into(),
                group: "g".into(),
                queue: None,
            },
            Hint::GroupChanged {
                tenant: "acme".into(),
                group: "g".into(),
                queue: Some("q".into()),
            },
            Hint::Maintenance,
        ]
    }

    #[test]
    fn batches_round_trip_and_split_at_the_size_limit() {
        let mut seq = 0;
        let batches = encode(7, &mut seq, &hints(), 1200);
        assert_eq!(batches.len(), 1);
        let batch = decode(&batches[0]).unwrap();
        assert_eq!((batch.sender, batch.seq), (7, 1));
        assert_eq!(batch.hints, hints());
        // Many hints: several batches, each within the limit, numbered on.
        let many: Vec<Hint> = (0..200)
            .map(|i| Hint::Pushed {
                tenant: "default".into(),
                queue: "q".repeat(50),
                partition: format!("partition-{i}"),
            })
            .collect();
        let batches = encode(7, &mut seq, &many, 1200);
        assert!(batches.len() > 5);
        let mut decoded = Vec::new();
        for (i, bytes) in batches.iter().enumerate() {
            assert!(bytes.len() <= 1200);
            let batch = decode(bytes).unwrap();
            assert_eq!(batch.seq, 2 + i as u64);
            decoded.extend(batch.hints);
        }
        assert_eq!(decoded, many);
    }

    #[test]
    fn malformed_batches_and_names_breaking_the_rule_are_refused() {
        let mut seq = 0;
        let bytes = encode(1, &mut seq, &hints(), 1200).remove(0);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_none(), "cut at {cut}");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode(&extra).is_none());
        // A control character in a name.
        let mut bad = Vec::new();
        bad.extend_from_slice(&bytes[..HEADER - 2]);
        bad.extend_from_slice(&1u16.to_le_bytes());
        bad.extend_from_slice(&[KIND_QUEUE_CHANGED, 1, b'a', 2, b'q', 0x07]);
        assert!(decode(&bad).is_none());
    }

    #[test]
    fn a_tag_made_with_another_secret_or_a_changed_byte_is_refused() {
        let key = mac_key(b"secret");
        let mut seq = 0;
        let batch = encode(1, &mut seq, &hints(), 1200).remove(0);
        let sealed = seal(&key, batch.clone());
        assert_eq!(open(&key, &sealed), Some(batch.as_slice()));
        assert_eq!(open(&mac_key(b"other"), &sealed), None);
        for i in [0, 10, sealed.len() - 1] {
            let mut flipped = sealed.clone();
            flipped[i] ^= 1;
            assert_eq!(open(&key, &flipped), None, "byte {i}");
        }
        assert_eq!(open(&key, &sealed[..TAG_LEN - 1]), None);
    }

    #[test]
    fn the_replay_guard_refuses_repeats_old_sequences_and_stale_clocks() {
        let mut guard = ReplayGuard::default();
        let now = 1_000_000;
        let at = |sender, seq, sent_ms| Batch {
            sender,
            seq,
            sent_ms,
            hints: Vec::new(),
        };
        assert!(guard.accept(&at(1, 5, now), now));
        assert!(!guard.accept(&at(1, 5, now), now), "repeat");
        assert!(guard.accept(&at(1, 3, now), now), "late but unseen");
        assert!(!guard.accept(&at(1, 3, now), now));
        assert!(guard.accept(&at(1, 100, now), now));
        assert!(!guard.accept(&at(1, 30, now), now), "out of the window");
        assert!(guard.accept(&at(2, 1, now), now), "another sender");
        assert!(!guard.accept(&at(3, 1, now - 31_000), now), "stale clock");
        assert!(!guard.accept(&at(3, 1, now + 31_000), now), "future clock");
        for sender in 10..(10 + MAX_SENDERS as u64) {
            assert!(guard.accept(&at(sender, 1, now), now + 1));
        }
        assert_eq!(guard.senders.len(), MAX_SENDERS);
    }
}
