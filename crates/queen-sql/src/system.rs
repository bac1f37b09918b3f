//! Cluster-wide broker state (`schema/007_system_state.sql`): the
//! maintenance flags every broker on the database follows
//! (`queen.system_state`) and the database's id (`queen.database_identity`).

use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use crate::SqlError;

/// The row of push maintenance mode.
pub const MAINTENANCE: &str = "maintenance_mode";
/// The row of pop maintenance mode.
pub const POP_MAINTENANCE: &str = "pop_maintenance_mode";

const FLAGS: &str = "SELECT \
       coalesce((SELECT (value->>'enabled')::boolean FROM queen.system_state WHERE key = $1), false), \
       coalesce((SELECT (value->>'enabled')::boolean FROM queen.system_state WHERE key = $2), false)";

const SET: &str = "INSERT INTO queen.system_state (key, value, updated_at) \
       VALUES ($1, jsonb_build_object('enabled', $2::boolean), now()) \
       ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at";

/// (push maintenance, pop maintenance); a missing row is off.
pub async fn maintenance_flags(client: &impl GenericClient) -> Result<(bool, bool), SqlError> {
    let row = client
        .query_typed_one(
            FLAGS,
            &[(&MAINTENANCE, Type::TEXT), (&POP_MAINTENANCE, Type::TEXT)],
        )
        .await?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

/// Set the flag of row `key` ([`MAINTENANCE`] or [`POP_MAINTENANCE`]).
pub async fn set_flag(
    client: &impl GenericClient,
    key: &str,
    enabled: bool,
) -> Result<(), SqlError> {
    client
        .execute_typed(SET, &[(&key, Type::TEXT), (&enabled, Type::BOOL)])
        .await?;
    Ok(())
}

const DATABASE_ID: &str = "SELECT id FROM queen.database_identity LIMIT 1";

/// The id of this Queen database, drawn when the schema was first applied
/// and kept by a copy of it (the spool records which database it spools
/// for).
pub async fn database_id(client: &impl GenericClient) -> Result<uuid::Uuid, SqlError> {
    Ok(client.query_typed_one(DATABASE_ID, &[]).await?.try_get(0)?)
}
