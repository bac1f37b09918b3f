//! The message views: a page of messages with each one's status, one
//! message with its decrypted payload, and moving a live message to the
//! dead-letter queue. Built in Rust because they decode frames.
//!
//! A page reads segments, never a partition: `admin_message_segments_v2`
//! picks, newest first, the segments of the window that cover `offset +
//! limit` messages, at most [`MAX_PAGE_SEGMENTS`]; when that cap cuts the
//! page short the answer says so (`MessagePage::truncated`) and a narrower
//! window (queue, partition, time) reads the rest.
//!
//! A message's status, from the cursor model: `dead_letter` when a group
//! filed it in the DLQ; otherwise, against the queue-mode cursor (or, when
//! the partition has none, its least advanced group): `completed` at or
//! below the cursor, `processing` inside its live lease, `pending` after.

use std::collections::HashMap;
use std::time::SystemTime;

use bytes::Bytes;
use queen_sql::admin::{Located, MessageState, PageSegment};
use uuid::Uuid;

use crate::lifecycle::message_delete::MessageDeletion;
use crate::lifecycle::Db;
use crate::{EngineError, QUEUE_MODE_GROUP};

/// The most segments one page reads.
pub const MAX_PAGE_SEGMENTS: i32 = 256;

/// Sidecar rows searched for a message's transaction id (as traces do).
pub(crate) const LOCATE_ROWS: i32 = 10_000;

/// One message's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageStatus {
    /// Not consumed yet.
    Pending,
    /// Leased now.
    Processing,
    /// Consumed.
    Completed,
    /// Filed in the dead-letter queue.
    DeadLetter,
}

impl MessageStatus {
    /// The wire word.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageStatus::Pending => "pending",
            MessageStatus::Processing => "processing",
            MessageStatus::Completed => "completed",
            MessageStatus::DeadLetter => "dead_letter",
        }
    }
}

/// One consumer group's view of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    /// The group.
    pub group: String,
    /// It consumed the message.
    pub consumed: bool,
    /// It holds the message under a live lease now.
    pub leased: bool,
    /// Its cursor.
    pub committed: i64,
}

/// A listed message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedMessage {
    /// Message id.
    pub id: Uuid,
    /// Transaction id.
    pub transaction_id: String,
    /// Partition id.
    pub partition_id: Uuid,
    /// Queue.
    pub queue: String,
    /// Partition.
    pub partition: String,
    /// The queue's namespace.
    pub namespace: String,
    /// The queue's task.
    pub task: String,
    /// The queue's priority.
    pub queue_priority: i32,
    /// Offset in the partition.
    pub offset: i64,
    /// Trace id.
    pub trace_id: Option<Uuid>,
    /// Producer `sub`.
    pub producer_sub: Option<String>,
    /// Commit time of its segment.
    pub created_at: SystemTime,
    /// Its status (see the module).
    pub status: MessageStatus,
    /// Its status for the queue-mode group, if that group has a cursor.
    pub queue_status: Option<MessageStatus>,
    /// Named groups that consumed it, and named groups with a cursor.
    pub bus: (usize, usize),
    /// The lease's expiry when processing.
    pub lease_expires_at: Option<SystemTime>,
}

/// A page of the listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessagePage {
    /// The messages, newest first.
    pub messages: Vec<ListedMessage>,
    /// Some partition has a queue-mode cursor.
    pub has_queue_mode: bool,
    /// Named groups seen on the page's partitions.
    pub bus_groups: usize,
    /// The segment cap cut the page short: narrow the window for the rest.
    pub truncated: bool,
}

/// One message in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageDetail {
    /// What the listing shows of it.
    pub message: ListedMessage,
    /// The payload, decrypted; `None` when it is sealed and this broker has
    /// no key.
    pub payload: Option<Bytes>,
    /// It was stored sealed.
    pub encrypted: bool,
    /// Every group with a cursor on its partition.
    pub groups: Vec<GroupView>,
    /// The error it was dead-lettered with, and the retries it spent.
    pub dead_letter: Option<(Option<String>, i64)>,
    /// The queue's configuration (the admin views' shape).
    pub queue_config: serde_json::Value,
}

/// What moving a message to the DLQ did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MovedToDlq {
    /// Filed, and the group's cursor moved past it.
    Moved,
    /// No such message (or it is older than the sidecar rows kept).
    NotFound,
    /// The group has no cursor on the partition yet.
    NoCursor,
    /// The message is not the group's next one (`next` is): only the head
    /// of a group can be dead-lettered without skipping the messages before
    /// it.
    NotNext {
        /// The group's next offset.
        next: i64,
        /// The message's offset.
        offset: i64,
    },
    /// Another consumer holds it under a live lease.
    Leased,
}

/// One group's cursor on a partition.
#[derive(Debug, Clone)]
struct Cursor {
    group: String,
    committed: i64,
    batch_end: Option<i64>,
    /// A live lease holds `(committed, batch_end]`.
    active: bool,
    lease_expires_at: Option<SystemTime>,
}

impl Cursor {
    /// Status of `offset` against this cursor.
    fn status_of(&self, offset: i64) -> MessageStatus {
        if offset <= self.committed {
            MessageStatus::Completed
        } else if self.active && self.batch_end.is_some_and(|end| offset <= end) {
            MessageStatus::Processing
        } else {
            MessageStatus::Pending
        }
    }
}

/// What a message's partition state says of it.
#[derive(Debug, Clone, Copy)]
struct Seen {
    status: MessageStatus,
    queue_status: Option<MessageStatus>,
    /// (named groups that consumed it, named groups with a cursor)
    bus: (usize, usize),
    lease_expires_at: Option<SystemTime>,
}

/// Cursors and dead letters of a set of partitions.
#[derive(Debug, Default)]
struct States {
    cursors: HashMap<Uuid, Vec<Cursor>>,
    dead: HashMap<(Uuid, i64), (Option<String>, i64)>,
}

impl States {
    fn from_rows(rows: Vec<MessageState>) -> States {
        let mut states = States::default();
        for row in rows {
            match row {
                MessageState::Cursor {
                    partition_id,
                    group,
                    committed,
                    batch_end,
                    active,
                    lease_expires_at,
                } => states
                    .cursors
                    .entry(partition_id)
                    .or_default()
                    .push(Cursor {
                        group,
                        committed,
                        batch_end,
                        active,
                        lease_expires_at,
                    }),
                MessageState::Dead {
                    partition_id,
                    offset,
                    error,
                    retry_count,
                    ..
                } => {
                    states
                        .dead
                        .insert((partition_id, offset), (error, retry_count));
                }
            }
        }
        states
    }

    /// What the state of `partition_id` says of `offset`.
    fn of(&self, partition_id: Uuid, offset: i64) -> Seen {
        let cursors = self
            .cursors
            .get(&partition_id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let queue_mode = cursors
            .iter()
            .find(|cursor| cursor.group == QUEUE_MODE_GROUP);
        let reference = queue_mode.or_else(|| cursors.iter().min_by_key(|cursor| cursor.committed));
        let mut status = reference.map_or(MessageStatus::Pending, |c| c.status_of(offset));
        let lease_expires_at = reference
            .filter(|_| status == MessageStatus::Processing)
            .and_then(|c| c.lease_expires_at);
        if self.dead.contains_key(&(partition_id, offset)) {
            status = MessageStatus::DeadLetter;
        }
        let named: Vec<&Cursor> = cursors
            .iter()
            .filter(|cursor| cursor.group != QUEUE_MODE_GROUP)
            .collect();
        let consumed = named.iter().filter(|c| offset <= c.committed).count();
        Seen {
            status,
            queue_status: queue_mode.map(|c| c.status_of(offset)),
            bus: (consumed, named.len()),
            lease_expires_at,
        }
    }
}

/// The filters of the message listing.
#[derive(Debug, Clone, Copy)]
pub struct MessageFilter<'a> {
    /// Only this queue.
    pub queue: Option<&'a str>,
    /// Only partitions of this name.
    pub partition: Option<&'a str>,
    /// Only queues of this namespace.
    pub namespace: Option<&'a str>,
    /// Only queues of this task.
    pub task: Option<&'a str>,
    /// Committed at or after.
    pub from: std::time::SystemTime,
    /// Committed at or before.
    pub to: std::time::SystemTime,
}

impl<'a> MessageFilter<'a> {
    fn sql(&self) -> queen_sql::admin::MessageFilter<'a> {
        queen_sql::admin::MessageFilter {
            queue: self.queue,
            partition: self.partition,
            namespace: self.namespace,
            task: self.task,
            from: self.from,
            to: self.to,
        }
    }
}

/// The message listing and detail, and moving a live message to the
/// dead-letter queue.
pub struct Messages {
    db: Db,
    /// The admin views' figures: a message delete marks its partition.
    figures: std::sync::Arc<crate::figures::Marks>,
}

impl Messages {
    pub(crate) fn new(db: Db, figures: std::sync::Arc<crate::figures::Marks>) -> Messages {
        Messages { db, figures }
    }

    /// One page of the message listing, newest first.
    pub async fn list(
        &self,
        tenant: &str,
        filter: &MessageFilter<'_>,
        status: Option<MessageStatus>,
        limit: usize,
        offset: usize,
    ) -> Result<MessagePage, EngineError> {
        let client = self.db.client().await?;
        let need = i32::try_from(limit.saturating_add(offset)).unwrap_or(i32::MAX);
        let (segments, truncated) = queen_sql::admin::message_segments(
            &**client,
            tenant,
            &filter.sql(),
            need,
            MAX_PAGE_SEGMENTS,
        )
        .await?;
        let ids: Vec<Uuid> = segments.iter().map(|s| s.partition_id).collect();
        let min: Vec<i64> = segments.iter().map(|s| s.base_offset).collect();
        let max: Vec<i64> = segments.iter().map(|s| s.end_offset).collect();
        let states =
            States::from_rows(queen_sql::admin::message_state(&**client, &ids, &min, &max).await?);
        drop(client);
        let mut messages = Vec::new();
        for segment in &segments {
            let decoded = decode(segment)?;
            for (frame_offset, frame) in decoded.into_iter().rev() {
                let seen = states.of(segment.partition_id, frame_offset);
                if status.is_some_and(|wanted| wanted != seen.status) {
                    continue;
                }
                messages.push(ListedMessage {
                    status: seen.status,
                    queue_status: seen.queue_status,
                    bus: seen.bus,
                    lease_expires_at: seen.lease_expires_at,
                    ..frame
                });
            }
        }
        let has_queue_mode = states
            .cursors
            .values()
            .flatten()
            .any(|cursor| cursor.group == QUEUE_MODE_GROUP);
        let mut named: Vec<&str> = states
            .cursors
            .values()
            .flatten()
            .filter(|cursor| cursor.group != QUEUE_MODE_GROUP)
            .map(|cursor| cursor.group.as_str())
            .collect();
        named.sort_unstable();
        named.dedup();
        Ok(MessagePage {
            messages: messages.into_iter().skip(offset).take(limit).collect(),
            has_queue_mode,
            bus_groups: named.len(),
            truncated,
        })
    }

    /// Find a message by partition and transaction id.
    async fn locate(
        &self,
        tenant: &str,
        client: &deadpool_postgres::Object,
        partition_id: Uuid,
        transaction_id: &str,
    ) -> Result<Option<Located>, EngineError> {
        let hash = queen_frame::txn_hash(transaction_id);
        Ok(
            queen_sql::admin::locate_message(&***client, tenant, partition_id, &hash, LOCATE_ROWS)
                .await?,
        )
    }

    /// One message with its payload opened, or `None`.
    pub async fn get(
        &self,
        tenant: &str,
        partition_id: Uuid,
        transaction_id: &str,
    ) -> Result<Option<MessageDetail>, EngineError> {
        let client = self.db.client().await?;
        let Some(located) = self
            .locate(tenant, &client, partition_id, transaction_id)
            .await?
        else {
            return Ok(None);
        };
        let Some((row, segment, start)) = segment_at(&client, partition_id, located.offset).await?
        else {
            return Ok(None);
        };
        let states = States::from_rows(
            queen_sql::admin::message_state(
                &**client,
                &[partition_id],
                &[located.offset],
                &[located.offset],
            )
            .await?,
        );
        let queue_config = queen_sql::admin::queue_config(&**client, located.queue_id).await?;
        drop(client);
        let frames = segment.slice(start, 1)?;
        let Some(frame) = frames.first() else {
            return Ok(None);
        };
        let payload = self.db.open_payload(frame.encrypted, frame.payload);
        let seen = states.of(partition_id, located.offset);
        let groups = states
            .cursors
            .get(&partition_id)
            .map(|cursors| {
                cursors
                    .iter()
                    .map(|cursor| GroupView {
                        group: cursor.group.clone(),
                        consumed: located.offset <= cursor.committed,
                        leased: cursor.status_of(located.offset) == MessageStatus::Processing,
                        committed: cursor.committed,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let message = ListedMessage {
            id: Uuid::from_bytes(frame.message_id),
            transaction_id: frame.transaction_id.to_owned(),
            partition_id,
            queue: located.queue,
            partition: located.partition,
            namespace: located.namespace,
            task: located.task,
            queue_priority: queue_config
                .get("priority")
                .and_then(serde_json::Value::as_i64)
                .and_then(|p| i32::try_from(p).ok())
                .unwrap_or(0),
            offset: located.offset,
            trace_id: frame.trace_id.map(Uuid::from_bytes),
            producer_sub: frame.producer_sub.map(str::to_owned),
            created_at: row.created_at,
            status: seen.status,
            queue_status: seen.queue_status,
            bus: seen.bus,
            lease_expires_at: seen.lease_expires_at,
        };
        Ok(Some(MessageDetail {
            dead_letter: states.dead.get(&(partition_id, located.offset)).cloned(),
            encrypted: frame.encrypted,
            payload,
            groups,
            queue_config,
            message,
        }))
    }

    /// Delete the message (`partition_id`, `transaction_id`): every copy a
    /// consumer group would still read is marked consumed for every group
    /// known to read the queue, where that moves no cursor over another
    /// message, and its dead letters go (`message_delete.rs` has how).
    pub async fn delete(
        &self,
        tenant: &str,
        partition_id: Uuid,
        transaction_id: &str,
    ) -> Result<MessageDeletion, EngineError> {
        let deleted = crate::lifecycle::message_delete::delete(
            &self.db,
            tenant,
            partition_id,
            transaction_id,
        )
        .await;
        // A delete that moved cursors counts their messages consumed: the
        // admin views' figures count the partition again.
        self.figures.consumed(partition_id);
        deleted
    }

    /// The payload of (`partition_id`, `transaction_id`), opened; `None`
    /// when the message is not found (retention removed it) or its payload
    /// cannot be opened (sealed with a key this broker lacks).
    pub async fn payload(
        &self,
        tenant: &str,
        partition_id: Uuid,
        transaction_id: &str,
    ) -> Result<Option<Bytes>, EngineError> {
        let client = self.db.client().await?;
        let Some(located) = self
            .locate(tenant, &client, partition_id, transaction_id)
            .await?
        else {
            return Ok(None);
        };
        let Some((_, segment, start)) = segment_at(&client, partition_id, located.offset).await?
        else {
            return Ok(None);
        };
        drop(client);
        let frames = segment.slice(start, 1)?;
        Ok(frames
            .first()
            .and_then(|frame| self.db.open_payload(frame.encrypted, frame.payload)))
    }

    /// Set `message_payload` on every row of a traces-by-name view (`{"traces":
    /// [...]}`): the traced message's payload as JSON, `null` when it is gone.
    /// Each message is read once, however many of its traces the page holds.
    pub(crate) async fn add_trace_payloads(
        &self,
        tenant: &str,
        body: &mut serde_json::Value,
    ) -> Result<(), EngineError> {
        let Some(rows) = body
            .get_mut("traces")
            .and_then(serde_json::Value::as_array_mut)
        else {
            return Ok(());
        };
        let mut read: HashMap<(Uuid, String), serde_json::Value> = HashMap::new();
        for row in rows.iter_mut() {
            let partition = row
                .get("partition_id")
                .and_then(serde_json::Value::as_str)
                .and_then(|id| id.parse::<Uuid>().ok());
            let transaction = row
                .get("transaction_id")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned);
            let payload = match (partition, transaction) {
                (Some(partition), Some(transaction)) => {
                    let key = (partition, transaction);
                    if let Some(known) = read.get(&key) {
                        known.clone()
                    } else {
                        let payload = self
                            .payload(tenant, key.0, &key.1)
                            .await?
                            .map_or(serde_json::Value::Null, |bytes| payload_json(&bytes));
                        read.insert(key, payload.clone());
                        payload
                    }
                }
                _ => serde_json::Value::Null,
            };
            if let Some(row) = row.as_object_mut() {
                row.insert("message_payload".to_owned(), payload);
            }
        }
        Ok(())
    }

    /// Move a live message to `group`'s dead-letter queue: allowed for the
    /// group's next message only, not leased by anyone else.
    pub async fn move_to_dlq(
        &self,
        tenant: &str,
        partition_id: Uuid,
        transaction_id: &str,
        group: &str,
        error: &str,
    ) -> Result<MovedToDlq, EngineError> {
        let client = self.db.client().await?;
        let Some(located) = self
            .locate(tenant, &client, partition_id, transaction_id)
            .await?
        else {
            return Ok(MovedToDlq::NotFound);
        };
        let states = States::from_rows(
            queen_sql::admin::message_state(&**client, &[partition_id], &[0], &[0]).await?,
        );
        let Some(cursor) = states
            .cursors
            .get(&partition_id)
            .and_then(|cursors| cursors.iter().find(|cursor| cursor.group == group))
        else {
            return Ok(MovedToDlq::NoCursor);
        };
        if cursor.committed + 1 != located.offset {
            return Ok(MovedToDlq::NotNext {
                next: cursor.committed + 1,
                offset: located.offset,
            });
        }
        let Some((row, segment, start)) = segment_at(&client, partition_id, located.offset).await?
        else {
            return Ok(MovedToDlq::NotFound);
        };
        let frames = segment.slice(start, 1)?;
        let Some(frame) = frames.first() else {
            return Ok(MovedToDlq::NotFound);
        };
        // A lease id nobody holds: the filing is refused if any consumer
        // holds a live lease on the cursor now. Text columns refuse NUL, which
        // a stored id may hold (pushes refuse it now, not always before).
        let transaction_id = crate::ack::text_column(frame.transaction_id);
        let producer_sub = frame.producer_sub.map(crate::ack::text_column);
        let error = crate::ack::text_column(error);
        let filed = queen_sql::ack::dlq_head(
            &**client,
            &queen_sql::ack::DeadLetter {
                partition_id,
                group,
                lease: Some(Uuid::new_v4()),
                offset: located.offset,
                message_id: Uuid::from_bytes(frame.message_id),
                transaction_id: &transaction_id,
                trace_id: frame.trace_id.map(Uuid::from_bytes),
                producer_sub: producer_sub.as_deref(),
                payload: frame.payload,
                encrypted: frame.encrypted,
                created_at: row.created_at,
                error: &error,
                retry_count: 0,
            },
        )
        .await?;
        Ok(if filed.applied {
            MovedToDlq::Moved
        } else {
            MovedToDlq::Leased
        })
    }
}

/// A payload as JSON: what was pushed is JSON; anything else as a string.
fn payload_json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// The segment of `partition_id` holding `offset`, inflated, with the index
/// of that offset's frame in it; `None` when no segment holds it (retention
/// removed it).
async fn segment_at(
    client: &deadpool_postgres::Object,
    partition_id: Uuid,
    offset: i64,
) -> Result<Option<(queen_sql::segments::SegmentRow, queen_frame::Segment, usize)>, EngineError> {
    let row = match queen_sql::segments::fetch_segment(&***client, partition_id, offset).await {
        Ok(row) => row,
        Err(queen_sql::SqlError::SegmentNotFound { .. }) => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    let segment = queen_frame::decompress(&row.blob)?;
    let start = usize::try_from(offset - row.base_offset).unwrap_or(0);
    Ok(Some((row, segment, start)))
}

/// The frames of `segment` with their offsets, as listed messages (status
/// to be filled).
fn decode(segment: &PageSegment) -> Result<Vec<(i64, ListedMessage)>, EngineError> {
    let decoded = queen_frame::decompress(&segment.blob)?;
    let mut out = Vec::new();
    for (index, frame) in decoded.frames().enumerate() {
        let frame = frame?;
        let offset = segment.base_offset + i64::try_from(index).unwrap_or(i64::MAX);
        out.push((
            offset,
            ListedMessage {
                id: Uuid::from_bytes(frame.message_id),
                transaction_id: frame.transaction_id.to_owned(),
                partition_id: segment.partition_id,
                queue: segment.queue.clone(),
                partition: segment.partition.clone(),
                namespace: segment.namespace.clone(),
                task: segment.task.clone(),
                queue_priority: segment.priority,
                offset,
                trace_id: frame.trace_id.map(Uuid::from_bytes),
                producer_sub: frame.producer_sub.map(str::to_owned),
                created_at: segment.created_at,
                status: MessageStatus::Pending,
                queue_status: None,
                bus: (0, 0),
                lease_expires_at: None,
            },
        ));
    }
    Ok(out)
}
