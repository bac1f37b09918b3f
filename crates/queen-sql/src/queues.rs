//! Typed calls of `procedures/configure.sql`: queue configuration.
//!
//! A queue is one `queen.queues` row, named by `(tenant_id, name)`, carrying its
//! whole configuration. [`QueueSettings`] is every option column of that row,
//! typed. Two sets of defaults exist and both are spelled out here:
//! [`QueueSettings::CONFIGURE_DEFAULTS`], what `POST /api/v1/configure` stores
//! for an option the request leaves out, and [`QueueSettings::COLUMN_DEFAULTS`],
//! what a queue created implicitly (by a push) gets from the table. They differ
//! only in `lease_time` (300 against 60; see the storage page's truth rule).

use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;
use uuid::Uuid;

use crate::SqlError;

/// Every option column of a `queen.queues` row.
///
/// Integer options are seconds unless the field says otherwise. The options
/// the wire contract marks "stored and echoed only" are stored all the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSettings {
    /// `lease_time`: seconds a popped batch stays leased.
    pub lease_time: i32,
    /// `retry_limit`: failed-ack retries per batch before the head goes to the DLQ.
    pub retry_limit: i32,
    /// `retry_delay`: milliseconds a failed batch stays invisible to its
    /// group, when `retry_delay_applied`; otherwise stored and echoed only.
    pub retry_delay: i32,
    /// `max_queue_size` (the wire's `maxSize`): a push that would take the
    /// queue's depth past it is refused (`log_push_v2`); 0 is no limit.
    pub max_queue_size: i32,
    /// `ttl`: stored and echoed only.
    pub ttl: i32,
    /// `priority`: stored and echoed only; pop does not order by it.
    pub priority: i32,
    /// `delayed_processing`: a message is invisible until `created_at` plus this.
    pub delayed_processing: i32,
    /// `window_buffer`: a partition is ineligible until its newest message is this old.
    pub window_buffer: i32,
    /// `retention_enabled`: gates both retention sweeps.
    pub retention_enabled: bool,
    /// `retention_seconds`: (if enabled) delete messages older than this.
    pub retention_seconds: i32,
    /// `completed_retention_seconds`: (if enabled) delete messages consumed by
    /// every group and older than this.
    pub completed_retention_seconds: i32,
    /// `max_wait_time_seconds`: the eviction sweep deletes unconsumed messages
    /// older than this (independent of `retention_enabled`).
    pub max_wait_time_seconds: i32,
    /// `dead_letter_queue`: a stored and echoed wire flag.
    pub dead_letter_queue: bool,
    /// `dlq_after_max_retries`: a stored and echoed wire flag.
    pub dlq_after_max_retries: bool,
    /// `dlq_enabled`: dead-lettering on; when false a poison frame is dropped
    /// instead of filed.
    pub dlq_enabled: bool,
    /// `encryption_enabled`: payloads are encrypted at rest when the broker has a key.
    pub encryption_enabled: bool,
    /// `min_pop_wait_time`: milliseconds.
    pub min_pop_wait_time: i32,
    /// `dedup_window_seconds`: how far back the push duplicate probe looks.
    pub dedup_window_seconds: i32,
    /// `retry_delay_applied`: the configure request named `retryDelay`, so
    /// it is applied (left out, the reference's 1000 is stored, echoed and
    /// not applied, as the reference never applied it).
    pub retry_delay_applied: bool,
}

impl QueueSettings {
    /// What `POST /api/v1/configure` stores for an option the request leaves
    /// out (the wire contract's "SP default", §2.1), plus the engine-side
    /// options at their column defaults.
    pub const CONFIGURE_DEFAULTS: QueueSettings = QueueSettings {
        lease_time: 300,
        ..QueueSettings::COLUMN_DEFAULTS
    };

    /// The column defaults of `queen.queues` in `sql/schema/000_queen.sql`: what
    /// a queue created without `/configure` gets. A test compares them with the
    /// catalog.
    pub const COLUMN_DEFAULTS: QueueSettings = QueueSettings {
        lease_time: 60,
        retry_limit: 3,
        retry_delay: 1000,
        max_queue_size: 0,
        ttl: 3600,
        priority: 0,
        delayed_processing: 0,
        window_buffer: 0,
        retention_enabled: false,
        retention_seconds: 0,
        completed_retention_seconds: 0,
        max_wait_time_seconds: 0,
        dead_letter_queue: false,
        dlq_after_max_retries: false,
        dlq_enabled: true,
        encryption_enabled: false,
        min_pop_wait_time: 0,
        dedup_window_seconds: 300,
        retry_delay_applied: false,
    };
}

/// The ids a configured queue ends up with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Configured {
    /// The queue row's id (kept when the queue already existed).
    pub queue_id: Uuid,
    /// The id of the queue's partition `Default` (kept when it already existed).
    pub partition_id: Uuid,
}

/// Create queue `(tenant, name)` or fully replace its configuration with
/// `settings`, namespace and task, and make sure its partition `Default`
/// exists. One statement, one round trip.
///
/// Stores `settings` exactly as given: defaults and the `lease_time` rule are
/// the caller's. A fresh UUIDv7 is minted for the queue row in case it has to
/// be created; a new `Default` partition takes its derived id (the UUIDv7
/// minted for it is used only by the previous version's body, which a broker
/// of that version re-applies during an upgrade); an existing queue and an
/// existing `Default` partition keep theirs.
pub async fn configure_queue(
    client: &impl GenericClient,
    tenant: &str,
    name: &str,
    namespace: &str,
    task: &str,
    settings: &QueueSettings,
) -> Result<Configured, SqlError> {
    let new_queue_id = Uuid::now_v7();
    let new_partition_id = Uuid::now_v7();
    // `query_typed_one` sends the parameter types with the statement, so the
    // call is one round trip (no separate prepare).
    let row = client
        .query_typed_one(
            CONFIGURE_QUEUE_SQL,
            &[
                (&tenant, Type::TEXT),
                (&name, Type::TEXT),
                (&namespace, Type::TEXT),
                (&task, Type::TEXT),
                (&settings.lease_time, Type::INT4),
                (&settings.retry_limit, Type::INT4),
                (&settings.retry_delay, Type::INT4),
                (&settings.max_queue_size, Type::INT4),
                (&settings.ttl, Type::INT4),
                (&settings.priority, Type::INT4),
                (&settings.delayed_processing, Type::INT4),
                (&settings.window_buffer, Type::INT4),
                (&settings.retention_enabled, Type::BOOL),
                (&settings.retention_seconds, Type::INT4),
                (&settings.completed_retention_seconds, Type::INT4),
                (&settings.max_wait_time_seconds, Type::INT4),
                (&settings.dead_letter_queue, Type::BOOL),
                (&settings.dlq_after_max_retries, Type::BOOL),
                (&settings.dlq_enabled, Type::BOOL),
                (&settings.encryption_enabled, Type::BOOL),
                (&settings.min_pop_wait_time, Type::INT4),
                (&settings.dedup_window_seconds, Type::INT4),
                (&settings.retry_delay_applied, Type::BOOL),
                (&new_queue_id, Type::UUID),
                (&new_partition_id, Type::UUID),
            ],
        )
        .await?;
    Ok(Configured {
        queue_id: row.try_get("queue_id")?,
        partition_id: row.try_get("partition_id")?,
    })
}

/// The parameters are in the order of `queen.configure_queue_v2`'s signature.
const CONFIGURE_QUEUE_SQL: &str = "\
SELECT queue_id, partition_id
  FROM queen.configure_queue_v2($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                                $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24,
                                $25)";

const MARKED: &str = "SELECT tenant_id, name, max_queue_size > 0, encryption_enabled \
      FROM queen.queues WHERE max_queue_size > 0 OR encryption_enabled \
      ORDER BY tenant_id, name LIMIT $1";

/// A queue with `maxSize` or `encryptionEnabled` (what a broker must know of
/// every queue before it writes to one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkedQueue {
    /// Its tenant.
    pub tenant: String,
    /// Its name.
    pub name: String,
    /// It has `maxSize` (`max_queue_size > 0`).
    pub bounded: bool,
    /// It has `encryptionEnabled`.
    pub encrypted: bool,
}

/// Every tenant's queues with `maxSize` or `encryptionEnabled`, at most
/// `limit` of them, in one read of the queue table.
pub async fn marked_queues(
    client: &impl GenericClient,
    limit: i64,
) -> Result<Vec<MarkedQueue>, SqlError> {
    let rows = client.query_typed(MARKED, &[(&limit, Type::INT8)]).await?;
    rows.iter()
        .map(|row| {
            Ok(MarkedQueue {
                tenant: row.try_get(0)?,
                name: row.try_get(1)?,
                bounded: row.try_get(2)?,
                encrypted: row.try_get(3)?,
            })
        })
        .collect()
}
