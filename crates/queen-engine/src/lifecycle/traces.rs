//! Message traces: events a consumer records against a message it processes.

use uuid::Uuid;

use crate::lifecycle::Db;
use crate::EngineError;

/// A trace to record.
#[derive(Debug, Clone)]
pub struct TraceEvent {
    /// The message's partition.
    pub partition_id: Uuid,
    /// The message's transaction id.
    pub transaction_id: String,
    /// Consumer group.
    pub group: String,
    /// Event type.
    pub event_type: String,
    /// Trace names.
    pub names: Vec<String>,
    /// The event data (a JSON object).
    pub data: serde_json::Value,
}

/// Trace events recorded against messages.
pub struct Traces {
    db: Db,
}

impl Traces {
    pub(crate) fn new(db: Db) -> Traces {
        Traces { db }
    }

    /// Record `event`; `None` when its message is not found.
    pub async fn record(
        &self,
        tenant: &str,
        event: &TraceEvent,
    ) -> Result<Option<Uuid>, EngineError> {
        let client = self.db.client().await?;
        let hash = queen_frame::txn_hash(&event.transaction_id);
        Ok(queen_sql::traces::record(
            &**client,
            &queen_sql::traces::Trace {
                tenant,
                partition_id: event.partition_id,
                transaction_id: &event.transaction_id,
                hash: &hash,
                group: &event.group,
                event_type: &event.event_type,
                names: &event.names,
                data: &event.data,
            },
        )
        .await?)
    }
}
