//! Typed calls of `procedures/streams.sql`: the streaming SDKs' queries and
//! their state (`queen_streams`, `schema/008_streams.sql`).

use std::time::SystemTime;

use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;
use uuid::Uuid;

use crate::SqlError;

const REGISTER: &str = "SELECT * FROM queen_streams.register_query_v1($1, $2, $3, $4, $5, $6, $7)";
const STATE_GET: &str = "SELECT * FROM queen_streams.state_get_v2($1, $2, $3, $4, $5, $6)";

/// A query to register.
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

/// Register `query` (`register_query_v1`).
pub async fn register_query(
    client: &impl GenericClient,
    tenant: &str,
    query: &QueryRegistration<'_>,
) -> Result<Registered, SqlError> {
    let new_id = Uuid::now_v7();
    let row = client
        .query_typed_one(
            REGISTER,
            &[
                (&tenant, Type::TEXT),
                (&query.name, Type::TEXT),
                (&query.source_queue, Type::TEXT),
                (&query.sink_queue, Type::TEXT),
                (&query.config_hash, Type::TEXT),
                (&query.reset, Type::BOOL),
                (&new_id, Type::UUID),
            ],
        )
        .await?;
    let query_id: Uuid = row.try_get("o_query_id")?;
    let status: &str = row.try_get("o_status")?;
    Ok(match status {
        "created" => Registered::Created(query_id),
        "same" => Registered::Same(query_id),
        "reset" => Registered::Reset(query_id),
        "mismatch" => Registered::Mismatch {
            query_id,
            stored: row.try_get("o_hash")?,
        },
        _ => {
            return Err(SqlError::Protocol {
                what: "register_query_v1 returned an unknown status",
            })
        }
    })
}

/// One state row.
#[derive(Debug, Clone, PartialEq)]
pub struct StateRow {
    /// Its key.
    pub key: String,
    /// Its value.
    pub value: serde_json::Value,
    /// When it was last written.
    pub updated_at: SystemTime,
}

/// The state rows of (`query`, `partition`) that are among `keys` (when it
/// is not empty), start with `prefix` (when given) and, with `ripe_at`, hold
/// a numeric `windowEnd` at or before it (`state_get_v2`); by key.
pub async fn state_get(
    client: &impl GenericClient,
    tenant: &str,
    query: Uuid,
    partition: Uuid,
    keys: &[String],
    prefix: Option<&str>,
    ripe_at: Option<f64>,
) -> Result<Vec<StateRow>, SqlError> {
    let rows = client
        .query_typed(
            STATE_GET,
            &[
                (&tenant, Type::TEXT),
                (&query, Type::UUID),
                (&partition, Type::UUID),
                (&keys, Type::TEXT_ARRAY),
                (&prefix, Type::TEXT),
                (&ripe_at, Type::FLOAT8),
            ],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(StateRow {
                key: row.try_get(0)?,
                value: row.try_get(1)?,
                updated_at: row.try_get(2)?,
            })
        })
        .collect()
}

const STATE_APPLY: &str = "SELECT * FROM queen_streams.state_apply_v1($1, $2, $3, $4, $5)";
const CYCLE_QUERY: &str = "SELECT queen_streams.cycle_query_v1($1, $2)";
const RELEASE_LEASE: &str = "SELECT queen_streams.release_lease_v1($1, $2, $3)";

/// The source queue of `query`, its row locked for the cycle's transaction;
/// `None` when the tenant has no such query.
pub async fn cycle_query(
    client: &impl GenericClient,
    tenant: &str,
    query: Uuid,
) -> Result<Option<String>, SqlError> {
    let row = client
        .query_typed_one(CYCLE_QUERY, &[(&tenant, Type::TEXT), (&query, Type::UUID)])
        .await?;
    Ok(row.try_get(0)?)
}

/// Upsert `keys[i] := values[i]` and delete `deleted` for (`query`,
/// `partition`): two statements in one call. Answers (upserted, deleted).
pub async fn state_apply(
    client: &impl GenericClient,
    query: Uuid,
    partition: Uuid,
    keys: &[&str],
    values: &[&serde_json::Value],
    deleted: &[&str],
) -> Result<(i64, i64), SqlError> {
    let row = client
        .query_typed_one(
            STATE_APPLY,
            &[
                (&query, Type::UUID),
                (&partition, Type::UUID),
                (&keys, Type::TEXT_ARRAY),
                (&values, Type::JSONB_ARRAY),
                (&deleted, Type::TEXT_ARRAY),
            ],
        )
        .await?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

/// Release `lease` on (`partition`, `group`) if it still holds the cursor.
pub async fn release_lease(
    client: &impl GenericClient,
    partition: Uuid,
    group: &str,
    lease: Uuid,
) -> Result<bool, SqlError> {
    let row = client
        .query_typed_one(
            RELEASE_LEASE,
            &[
                (&partition, Type::UUID),
                (&group, Type::TEXT),
                (&lease, Type::UUID),
            ],
        )
        .await?;
    Ok(row.try_get(0)?)
}
