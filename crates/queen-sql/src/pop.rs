//! Typed calls of `sql/procedures/pop.sql`.
//!
//! Every pop shape returns the same rows: segment rows with slicing bounds, and
//! one verdict per visited partition (see the file's header for the verdicts).

use std::time::SystemTime;

use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Row};
use uuid::Uuid;

use crate::prepared::{self, Conn};
use crate::SqlError;

const FIRST_CONTACT: &str = "SELECT queen.log_group_first_contact_v1($1, $2, $3, $4)";
const REGISTER_SUBSCRIPTION: &str = "SELECT queen.log_register_subscription_v1($1, $2, $3, $4)";
const HOT_RESEED: &str =
    "SELECT o_names, o_next, o_now FROM queen.log_hot_reseed_v1($1, $2, $3, $4, $5, $6)";
const HOT_RESEED_MANY: &str = "SELECT o_ring, o_names, o_next, o_now \
       FROM queen.log_hot_reseed_many_v1($1, $2, $3, $4, $5, $6)";
const SEED_CURSORS: &str = "SELECT queen.log_seed_cursors_v1($1, $2, $3, $4, $5, $6)";
const SUBSCRIBE_EARLY: &str = "SELECT * FROM queen.log_subscribe_early_v1($1, $2, $3, $4, $5, $6)";
const POP_LIST: &str =
    "SELECT * FROM queen.log_pop_list_v1($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";
const POP_SPECIFIC: &str =
    "SELECT * FROM queen.log_pop_specific_v1($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
const POP_WILDCARD: &str =
    "SELECT * FROM queen.log_pop_wildcard_v1($1, $2, $3, $4, $5, $6, $7, $8, $9)";
const HAS_PENDING: &str = "SELECT queen.log_has_pending_v1($1, $2)";
const REWIND_AUTO_ACK: &str = "SELECT queen.log_rewind_auto_ack_v1($1, $2, $3, $4)";
const PENDING_COUNT: &str = "SELECT queen.log_pending_count_v1($1, $2, $3, $4)";
const QUEUE_BY_NAME: &str =
    "SELECT id, min_pop_wait_time FROM queen.queues WHERE tenant_id = $1 AND name = $2";
const QUEUES_BY_NAMESPACE_TASK: &str = "SELECT name FROM queen.queues \
     WHERE tenant_id = $1 AND ($2::text IS NULL OR namespace = $2) AND ($3::text IS NULL OR task = $3) \
     ORDER BY name";

/// How a pop claims and where a new cursor starts.
#[derive(Debug, Clone)]
pub struct PopParams<'a> {
    /// The consumer group (`__QUEUE_MODE__` for queue mode).
    pub group: &'a str,
    /// The worker id; on a leased pop, the lease id the client gets.
    pub worker: Uuid,
    /// Most messages to take, across all partitions.
    pub budget: i32,
    /// Most partitions to take messages from.
    pub max_partitions: i32,
    /// Lease length; `None` uses the queue's lease_time (0 → 60).
    pub lease_seconds: Option<i32>,
    /// At-most-once: commit the cursor at delivery, no lease.
    pub auto_ack: bool,
    /// `all` or `new` (for a cursor created by this pop).
    pub sub_mode: &'a str,
    /// Subscription timestamp carried by the pop.
    pub sub_from: Option<SystemTime>,
}

/// One row of a pop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PopRow {
    /// Frames `[start_idx, start_idx + take)` of a segment are delivered.
    Segment {
        /// The partition's id.
        partition_id: Uuid,
        /// The partition's name.
        partition: String,
        /// Offset of the segment's frame 0.
        base_offset: i64,
        /// First frame delivered.
        start_idx: usize,
        /// Frames delivered.
        take: usize,
        /// Frames in the segment.
        msg_count: usize,
        /// The segment's `created_at`.
        created_at: SystemTime,
        /// The zstd blob.
        blob: Vec<u8>,
    },
    /// What the pop found in one partition.
    Verdict {
        /// The partition's id.
        partition_id: Uuid,
        /// The partition's name.
        partition: String,
        /// The verdict.
        verdict: Verdict,
        /// When to look again (lease expiry, end of a visibility hold).
        revisit_at: Option<SystemTime>,
    },
}

/// What a pop found in one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Messages were taken and more are pending.
    Delivered,
    /// Messages were taken; nothing visible is left behind them (a leased
    /// batch's `revisit_at` is its lease expiry; an auto-acked one's, when a
    /// tail hidden by delayedProcessing becomes visible, if there is one).
    Drained,
    /// Nothing pending for the group.
    Empty,
    /// Another worker holds a live lease.
    Leased,
    /// The cursor row is being created or claimed right now.
    Busy,
    /// Pending, but windowBuffer holds it until the partition is quiet.
    Deferred,
    /// Pending, but delayedProcessing hides it until `revisit_at`.
    Delayed,
    /// No partition of that name exists in the queue (its id is nil).
    Missing,
}

/// The columns of a queue the pop path needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    /// The queue's id.
    pub id: Uuid,
    /// min_pop_wait_time in milliseconds (0 = off).
    pub min_pop_wait_time: i32,
}

/// Look a queue up by name.
pub async fn queue_info(
    client: &impl GenericClient,
    tenant: &str,
    name: &str,
) -> Result<Option<QueueInfo>, SqlError> {
    let row = client
        .query_typed_opt(QUEUE_BY_NAME, &[(&tenant, Type::TEXT), (&name, Type::TEXT)])
        .await?;
    row.map(|row| {
        Ok(QueueInfo {
            id: row.try_get(0)?,
            min_pop_wait_time: row.try_get(1)?,
        })
    })
    .transpose()
}

/// Provision queue `name` (with `new_id` if it is created now) and record
/// `group`'s subscription to it (`log_subscribe_early_v1`).
pub async fn subscribe_early(
    client: &impl GenericClient,
    tenant: &str,
    name: &str,
    new_id: Uuid,
    group: &str,
    sub_mode: &str,
    sub_from: Option<SystemTime>,
) -> Result<QueueInfo, SqlError> {
    let row = client
        .query_typed_one(
            SUBSCRIBE_EARLY,
            &[
                (&tenant, Type::TEXT),
                (&name, Type::TEXT),
                (&new_id, Type::UUID),
                (&group, Type::TEXT),
                (&sub_mode, Type::TEXT),
                (&sub_from, Type::TIMESTAMPTZ),
            ],
        )
        .await?;
    Ok(QueueInfo {
        id: row.try_get(0)?,
        min_pop_wait_time: row.try_get(1)?,
    })
}

/// Names of the queues matching a namespace and/or task (discovery pop).
pub async fn queues_by_namespace_task(
    client: &impl GenericClient,
    tenant: &str,
    namespace: Option<&str>,
    task: Option<&str>,
) -> Result<Vec<String>, SqlError> {
    let rows = client
        .query_typed(
            QUEUES_BY_NAMESPACE_TASK,
            &[
                (&tenant, Type::TEXT),
                (&namespace, Type::TEXT),
                (&task, Type::TEXT),
            ],
        )
        .await?;
    rows.iter()
        .map(|row| row.try_get(0).map_err(SqlError::from))
        .collect()
}

/// One reseed of the hot-list ring of (queue, group): what
/// `log_hot_reseed_v1` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reseed {
    /// Partitions believed pending for the group, at most the call's limit.
    pub names: Vec<String>,
    /// Where the keyset walk continues; `None` when this page reached the
    /// queue's last partition (the next one starts over).
    pub next: Option<String>,
    /// PostgreSQL's clock when the reseed looked: the next reseed's `since`.
    pub now: SystemTime,
}

/// The hot-list's reseed: partitions written since `since` (`None`: a
/// ring's first reseed) that are pending for `group`, plus the pending ones
/// among the next `page` partitions of the queue by name after `after`; at
/// most `limit` names. Its cost follows what was written and `page`, not
/// the queue's partition count.
pub async fn hot_reseed(
    client: &impl GenericClient,
    queue_id: Uuid,
    group: &str,
    since: Option<SystemTime>,
    after: Option<&str>,
    page: i32,
    limit: i32,
) -> Result<Reseed, SqlError> {
    let row = client
        .query_typed_one(
            HOT_RESEED,
            &[
                (&queue_id, Type::UUID),
                (&group, Type::TEXT),
                (&since, Type::TIMESTAMPTZ),
                (&after, Type::TEXT),
                (&page, Type::INT4),
                (&limit, Type::INT4),
            ],
        )
        .await?;
    Ok(Reseed {
        names: row.try_get(0)?,
        next: row.try_get(1)?,
        now: row.try_get(2)?,
    })
}

/// One ring's question in [`hot_reseed_many`]: the arguments of
/// [`hot_reseed`] but the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReseedAsk {
    /// The queue's id.
    pub queue_id: Uuid,
    /// The consumer group.
    pub group: String,
    /// The previous reseed's `now` (`None`: the ring's first).
    pub since: Option<SystemTime>,
    /// Where the keyset walk stands.
    pub after: Option<String>,
    /// Partitions the walk's page visits.
    pub page: i32,
}

/// [`hot_reseed`] of several rings in one statement
/// (`log_hot_reseed_many_v1`): answer `i` is ring `asks[i]`'s.
pub async fn hot_reseed_many(
    client: &impl GenericClient,
    asks: &[ReseedAsk],
    limit: i32,
) -> Result<Vec<Reseed>, SqlError> {
    let qids: Vec<Uuid> = asks.iter().map(|ask| ask.queue_id).collect();
    let groups: Vec<&str> = asks.iter().map(|ask| ask.group.as_str()).collect();
    let since: Vec<Option<SystemTime>> = asks.iter().map(|ask| ask.since).collect();
    let after: Vec<Option<&str>> = asks.iter().map(|ask| ask.after.as_deref()).collect();
    let pages: Vec<i32> = asks.iter().map(|ask| ask.page).collect();
    let rows = client
        .query_typed(
            HOT_RESEED_MANY,
            &[
                (&qids, Type::UUID_ARRAY),
                (&groups, Type::TEXT_ARRAY),
                (&since, Type::TIMESTAMPTZ_ARRAY),
                (&after, Type::TEXT_ARRAY),
                (&pages, Type::INT4_ARRAY),
                (&limit, Type::INT4),
            ],
        )
        .await?;
    let mut found: Vec<Option<Reseed>> = vec![None; asks.len()];
    for row in rows {
        let ring: i32 = row.try_get(0)?;
        let slot = usize::try_from(ring)
            .ok()
            .and_then(|ring| ring.checked_sub(1))
            .and_then(|index| found.get_mut(index))
            .ok_or(SqlError::Protocol {
                what: "log_hot_reseed_many_v1 answered for a ring it was not asked about",
            })?;
        *slot = Some(Reseed {
            names: row.try_get(1)?,
            next: row.try_get(2)?,
            now: row.try_get(3)?,
        });
    }
    found
        .into_iter()
        .map(|reseed| {
            reseed.ok_or(SqlError::Protocol {
                what: "log_hot_reseed_many_v1 left a ring unanswered",
            })
        })
        .collect()
}

/// Register the subscription of (queue, group), first writer wins, without
/// seeding a cursor: the hot-list path's first contact (cursors appear when
/// the group first touches a partition).
pub async fn register_subscription(
    client: &impl GenericClient,
    queue_id: Uuid,
    group: &str,
    sub_mode: &str,
    sub_from: Option<SystemTime>,
) -> Result<(), SqlError> {
    client
        .query_typed(
            REGISTER_SUBSCRIPTION,
            &[
                (&queue_id, Type::UUID),
                (&group, Type::TEXT),
                (&sub_mode, Type::TEXT),
                (&sub_from, Type::TIMESTAMPTZ),
            ],
        )
        .await?;
    Ok(())
}

/// Register a (queue, group) and elect its one seeder. True when this call
/// won: the caller then seeds with [`seed_cursors`].
pub async fn first_contact(
    client: &impl GenericClient,
    queue_id: Uuid,
    group: &str,
    sub_mode: &str,
    sub_from: Option<SystemTime>,
) -> Result<bool, SqlError> {
    let row = client
        .query_typed_one(
            FIRST_CONTACT,
            &[
                (&queue_id, Type::UUID),
                (&group, Type::TEXT),
                (&sub_mode, Type::TEXT),
                (&sub_from, Type::TIMESTAMPTZ),
            ],
        )
        .await?;
    Ok(row.try_get(0)?)
}

/// Seed the cursors of up to `limit` partitions named after `after` (the
/// elected seeder's bulk seed, one chunk per call and transaction). Returns
/// the name to continue after, `None` when every partition was looked at.
pub async fn seed_cursors(
    client: &impl GenericClient,
    queue_id: Uuid,
    group: &str,
    sub_mode: &str,
    sub_from: Option<SystemTime>,
    after: Option<&str>,
    limit: i32,
) -> Result<Option<String>, SqlError> {
    let row = client
        .query_typed_one(
            SEED_CURSORS,
            &[
                (&queue_id, Type::UUID),
                (&group, Type::TEXT),
                (&sub_mode, Type::TEXT),
                (&sub_from, Type::TIMESTAMPTZ),
                (&after, Type::TEXT),
                (&limit, Type::INT4),
            ],
        )
        .await?;
    Ok(row.try_get(0)?)
}

/// Pop from candidate partitions by name, in order (the hot-list path).
pub async fn pop_list(
    conn: &impl Conn,
    queue_id: Uuid,
    names: &[&str],
    params: &PopParams<'_>,
    skip_window: bool,
) -> Result<Vec<PopRow>, SqlError> {
    let rows = prepared::query(
        conn,
        POP_LIST,
        &[
            Type::UUID,
            Type::TEXT,
            Type::TEXT_ARRAY,
            Type::UUID,
            Type::INT4,
            Type::INT4,
            Type::INT4,
            Type::BOOL,
            Type::TEXT,
            Type::TIMESTAMPTZ,
            Type::BOOL,
        ],
        &[
            &queue_id,
            &params.group,
            &names,
            &params.worker,
            &params.budget,
            &params.max_partitions,
            &params.lease_seconds,
            &params.auto_ack,
            &params.sub_mode,
            &params.sub_from,
            &skip_window,
        ],
    )
    .await?;
    rows.iter().map(decode).collect()
}

/// Pop one named partition (the single-partition route). Empty when the
/// queue or partition does not exist.
pub async fn pop_specific(
    conn: &impl Conn,
    tenant: &str,
    queue: &str,
    partition: &str,
    params: &PopParams<'_>,
) -> Result<Vec<PopRow>, SqlError> {
    let rows = prepared::query(
        conn,
        POP_SPECIFIC,
        &[
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::UUID,
            Type::INT4,
            Type::INT4,
            Type::BOOL,
            Type::TEXT,
            Type::TIMESTAMPTZ,
        ],
        &[
            &tenant,
            &queue,
            &partition,
            &params.group,
            &params.worker,
            &params.budget,
            &params.lease_seconds,
            &params.auto_ack,
            &params.sub_mode,
            &params.sub_from,
        ],
    )
    .await?;
    rows.iter().map(decode).collect()
}

/// Pop through the SQL candidate scan (QUEEN_HOTLIST=0).
pub async fn pop_wildcard(
    conn: &impl Conn,
    queue_id: Uuid,
    params: &PopParams<'_>,
) -> Result<Vec<PopRow>, SqlError> {
    let rows = prepared::query(
        conn,
        POP_WILDCARD,
        &[
            Type::UUID,
            Type::TEXT,
            Type::UUID,
            Type::INT4,
            Type::INT4,
            Type::INT4,
            Type::BOOL,
            Type::TEXT,
            Type::TIMESTAMPTZ,
        ],
        &[
            &queue_id,
            &params.group,
            &params.worker,
            &params.budget,
            &params.max_partitions,
            &params.lease_seconds,
            &params.auto_ack,
            &params.sub_mode,
            &params.sub_from,
        ],
    )
    .await?;
    rows.iter().map(decode).collect()
}

/// Give back offsets `from ..= to` of `partition_id` that an auto-acked pop
/// of `group` claimed and could not deliver (`log_rewind_auto_ack_v1`):
/// false when the cursor moved on meanwhile and nothing changed.
pub async fn rewind_auto_ack(
    client: &impl GenericClient,
    partition_id: Uuid,
    group: &str,
    from: i64,
    to: i64,
) -> Result<bool, SqlError> {
    let row = client
        .query_typed_one(
            REWIND_AUTO_ACK,
            &[
                (&partition_id, Type::UUID),
                (&group, Type::TEXT),
                (&from, Type::INT8),
                (&to, Type::INT8),
            ],
        )
        .await?;
    Ok(row.try_get(0)?)
}

/// False means definitively nothing to deliver for the group (leases ignored).
pub async fn has_pending(
    client: &impl GenericClient,
    queue_id: Uuid,
    group: &str,
) -> Result<bool, SqlError> {
    let row = client
        .query_typed_one(
            HAS_PENDING,
            &[(&queue_id, Type::UUID), (&group, Type::TEXT)],
        )
        .await?;
    Ok(row.try_get(0)?)
}

/// How many messages a claim of up to `max_partitions` partitions could take
/// for `group` now, at most `cap` (`log_pending_count_v1`; minPopWaitTime).
pub async fn pending_count(
    client: &impl GenericClient,
    queue_id: Uuid,
    group: &str,
    max_partitions: i32,
    cap: i32,
) -> Result<i32, SqlError> {
    let row = client
        .query_typed_one(
            PENDING_COUNT,
            &[
                (&queue_id, Type::UUID),
                (&group, Type::TEXT),
                (&max_partitions, Type::INT4),
                (&cap, Type::INT4),
            ],
        )
        .await?;
    Ok(row.try_get(0)?)
}

fn decode(row: &Row) -> Result<PopRow, SqlError> {
    // NULL only on a `missing` verdict, which names a partition that is not there.
    let partition_id: Uuid = row
        .try_get::<_, Option<Uuid>>("o_partition_id")?
        .unwrap_or(Uuid::nil());
    let partition: String = row.try_get("o_partition_name")?;
    let kind: &str = row.try_get("o_kind")?;
    let count = |name: &str| -> Result<usize, SqlError> {
        let value: i32 = row.try_get(name)?;
        usize::try_from(value).map_err(|_| SqlError::Protocol {
            what: "pop returned a negative count",
        })
    };
    match kind {
        "segment" => Ok(PopRow::Segment {
            partition_id,
            partition,
            base_offset: row.try_get("o_base_offset")?,
            start_idx: count("o_start_idx")?,
            take: count("o_take")?,
            msg_count: count("o_msg_count")?,
            created_at: row.try_get("o_created_at")?,
            blob: row.try_get("o_blob")?,
        }),
        "verdict" => {
            let verdict = match row.try_get::<_, &str>("o_verdict")? {
                "delivered" => Verdict::Delivered,
                "drained" => Verdict::Drained,
                "empty" => Verdict::Empty,
                "leased" => Verdict::Leased,
                "busy" => Verdict::Busy,
                "deferred" => Verdict::Deferred,
                "delayed" => Verdict::Delayed,
                "missing" => Verdict::Missing,
                _ => {
                    return Err(SqlError::Protocol {
                        what: "pop returned an unknown verdict",
                    })
                }
            };
            Ok(PopRow::Verdict {
                partition_id,
                partition,
                verdict,
                revisit_at: row.try_get("o_revisit_at")?,
            })
        }
        _ => Err(SqlError::Protocol {
            what: "pop returned an unknown row kind",
        }),
    }
}
