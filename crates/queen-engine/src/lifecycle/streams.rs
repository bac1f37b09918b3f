//! The streaming SDKs' queries and state (wire-api.md §6): registering a
//! query against its source queue, and reading its state. The cycle, which
//! writes state, sink pushes and the source ack in one transaction, is the
//! transactions component's (`txn/stream.rs`).

use std::sync::Arc;
use std::time::SystemTime;

use uuid::Uuid;

use crate::lifecycle::Db;
use crate::txn::Transactions;
use crate::EngineError;

/// Longest state key, in bytes.
pub const MAX_STATE_KEY_BYTES: usize = 1024;

/// Longest configuration hash, in bytes.
pub const MAX_CONFIG_HASH_BYTES: usize = 1024;

/// A streaming query to register.
#[derive(Debug, Clone, Copy)]
pub struct QueryRegistration<'a> {
    /// Its name (unique per tenant).
    pub name: &'a str,
    /// The queue it reads.
    pub source_queue: &'a str,
    /// The queue it writes, if any.
    pub sink_queue: Option<&'a str>,
    /// The hash of its operator configuration.
    pub config_hash: &'a str,
    /// Wipe its state and take this hash when the stored one differs.
    pub reset: bool,
}

/// What registering did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registered {
    /// A new query.
    Created(Uuid),
    /// It existed with this hash.
    Same(Uuid),
    /// It existed; its state was wiped and the new hash stored.
    Reset(Uuid),
    /// It exists with another hash (`stored`), and no reset was asked.
    Mismatch {
        /// The query's id.
        query_id: Uuid,
        /// Its stored hash.
        stored: String,
    },
}

impl From<queen_sql::streams::Registered> for Registered {
    fn from(registered: queen_sql::streams::Registered) -> Registered {
        use queen_sql::streams::Registered as Sql;
        match registered {
            Sql::Created(id) => Registered::Created(id),
            Sql::Same(id) => Registered::Same(id),
            Sql::Reset(id) => Registered::Reset(id),
            Sql::Mismatch { query_id, stored } => Registered::Mismatch { query_id, stored },
        }
    }
}

/// Which state rows a read returns: every condition given must hold.
#[derive(Debug, Clone, Copy, Default)]
pub struct StateFilter<'a> {
    /// Only these keys (empty: any key).
    pub keys: &'a [String],
    /// Only keys starting with this.
    pub prefix: Option<&'a str>,
    /// Only rows whose value holds a numeric `windowEnd` at or before this
    /// (epoch milliseconds): the windows an idle flush may close.
    pub ripe_at: Option<f64>,
}

/// One state row of a streaming query.
#[derive(Debug, Clone, PartialEq)]
pub struct StateRow {
    /// Its key.
    pub key: String,
    /// Its value.
    pub value: serde_json::Value,
    /// When it was last written.
    pub updated_at: SystemTime,
}

impl From<queen_sql::streams::StateRow> for StateRow {
    fn from(row: queen_sql::streams::StateRow) -> StateRow {
        StateRow {
            key: row.key,
            value: row.value,
            updated_at: row.updated_at,
        }
    }
}

/// Streaming queries: registering them, reading their state, committing
/// their cycles.
pub struct Streams {
    db: Db,
    txns: Arc<Transactions>,
}

impl Streams {
    pub(crate) fn new(db: Db, txns: Arc<Transactions>) -> Streams {
        Streams { db, txns }
    }

    /// Commit a streaming query's cycle: state writes, sink pushes and the
    /// source ack in one transaction; [`EngineError::CycleRefused`] when it
    /// was refused and nothing of it applied.
    pub async fn cycle(
        &self,
        tenant: &str,
        cycle: crate::StreamCycle,
    ) -> Result<crate::CycleDone, EngineError> {
        self.txns.stream_cycle(tenant, cycle).await
    }

    /// Register `query`, or find it again (see [`Registered`]).
    pub async fn register(
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
        let client = self.db.client().await?;
        let query = queen_sql::streams::QueryRegistration {
            name: query.name,
            source_queue: query.source_queue,
            sink_queue: query.sink_queue,
            config_hash: query.config_hash,
            reset: query.reset,
        };
        Ok(
            queen_sql::streams::register_query(&**client, tenant, &query)
                .await?
                .into(),
        )
    }

    /// The state rows of (`query`, `partition`) that match `filter`, by key.
    pub async fn state(
        &self,
        tenant: &str,
        query: Uuid,
        partition: Uuid,
        filter: &StateFilter<'_>,
    ) -> Result<Vec<StateRow>, EngineError> {
        let client = self.db.client().await?;
        let rows = queen_sql::streams::state_get(
            &**client,
            tenant,
            query,
            partition,
            filter.keys,
            filter.prefix,
            filter.ripe_at,
        )
        .await?;
        Ok(rows.into_iter().map(StateRow::from).collect())
    }
}
