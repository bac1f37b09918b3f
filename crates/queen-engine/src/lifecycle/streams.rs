//! The streaming SDKs' queries and state (wire-api.md §6): registering a
//! query against its source queue, and reading its state. The cycle, which
//! writes state, sink pushes and the source ack in one transaction, is the
//! transactions component's (`txn/stream.rs`).

use queen_sql::streams::{QueryRegistration, Registered, StateRow};
use uuid::Uuid;

use crate::lifecycle::Lifecycle;
use crate::EngineError;

/// Longest state key, in bytes.
pub const MAX_STATE_KEY_BYTES: usize = 1024;

/// Longest configuration hash, in bytes.
pub const MAX_CONFIG_HASH_BYTES: usize = 1024;

impl Lifecycle {
    /// Register `query`, or find it again (see [`Registered`]).
    pub(crate) async fn register_query(
        &self,
        tenant: &str,
        query: &QueryRegistration<'_>,
    ) -> Result<Registered, EngineError> {
        for (field, value) in [("name", query.name), ("source_queue", query.source_queue)]
            .into_iter()
            .chain(query.sink_queue.map(|sink| ("sink_queue", sink)))
        {
            if let Some(rule) = crate::naming::name_problem(value) {
                return Err(EngineError::InvalidConfiguration { field, rule });
            }
        }
        if query.config_hash.len() > MAX_CONFIG_HASH_BYTES || query.config_hash.contains('\0') {
            return Err(EngineError::InvalidConfiguration {
                field: "config_hash",
                rule: "must be at most 1024 bytes, without NUL characters",
            });
        }
        let client = self.client().await?;
        Ok(queen_sql::streams::register_query(&**client, tenant, query).await?)
    }

    /// The state rows of (`query`, `partition`): those of `keys`, else those
    /// starting with `prefix`, else all.
    pub(crate) async fn stream_state(
        &self,
        tenant: &str,
        query: Uuid,
        partition: Uuid,
        keys: &[String],
        prefix: Option<&str>,
    ) -> Result<Vec<StateRow>, EngineError> {
        let client = self.client().await?;
        Ok(
            queen_sql::streams::state_get(&**client, tenant, query, partition, keys, prefix)
                .await?,
        )
    }
}
