//! Message traces.

use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;
use uuid::Uuid;

use crate::SqlError;

const FIND: &str =
    "SELECT queen.log_find_txn_v1($1, $2, $3) WHERE queen.partition_in_tenant_v1($1, $4)";
const INSERT: &str = "INSERT INTO queen.message_traces \
     (id, partition_id, transaction_id, consumer_group, event_type, trace_names, data) \
     VALUES ($1, $2, $3, $4, $5, $6, $7)";

/// How many of a partition's newest sidecar rows a trace's message is looked up in.
const FIND_ROWS: i32 = 10_000;

/// One trace event.
#[derive(Debug, Clone)]
pub struct Trace<'a> {
    /// The tenant the caller acts for: another tenant's partition is not found.
    pub tenant: &'a str,
    /// The message's partition.
    pub partition_id: Uuid,
    /// The message's transaction id.
    pub transaction_id: &'a str,
    /// Transaction-id hash (16 bytes).
    pub hash: &'a [u8],
    /// Consumer group.
    pub group: &'a str,
    /// Event type (`info`, `error`, ...).
    pub event_type: &'a str,
    /// Trace names.
    pub names: &'a [String],
    /// The event's data (a JSON object).
    pub data: &'a serde_json::Value,
}

/// Store a trace of a message that exists; `None` when the message is not found.
pub async fn record(
    client: &impl GenericClient,
    trace: &Trace<'_>,
) -> Result<Option<Uuid>, SqlError> {
    let found = client
        .query_typed_opt(
            FIND,
            &[
                (&trace.partition_id, Type::UUID),
                (&trace.hash, Type::BYTEA),
                (&FIND_ROWS, Type::INT4),
                (&trace.tenant, Type::TEXT),
            ],
        )
        .await?;
    let offset: Option<i64> = match found {
        Some(row) => row.try_get(0)?,
        None => None,
    };
    if offset.is_none() {
        return Ok(None);
    }
    let id = Uuid::now_v7();
    client
        .query_typed(
            INSERT,
            &[
                (&id, Type::UUID),
                (&trace.partition_id, Type::UUID),
                (&trace.transaction_id, Type::TEXT),
                (&trace.group, Type::TEXT),
                (&trace.event_type, Type::TEXT),
                (&trace.names, Type::TEXT_ARRAY),
                (trace.data, Type::JSONB),
            ],
        )
        .await?;
    Ok(Some(id))
}
