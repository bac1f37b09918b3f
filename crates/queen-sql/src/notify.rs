//! `LISTEN`/`NOTIFY` for the mesh of brokers on one database: the channel,
//! the sending statement and the subscribing one. The listening connection
//! itself (driven by its owner, which reads the notifications) is the
//! caller's.

use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use crate::SqlError;

/// The mesh's channel.
pub const MESH_CHANNEL: &str = "queen_mesh";

const NOTIFY: &str = "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p";

/// Send every payload as one notification on `MESH_CHANNEL`, in one round
/// trip (outside a transaction they are delivered at once).
pub async fn notify(client: &impl GenericClient, payloads: &[String]) -> Result<(), SqlError> {
    client
        .query_typed(
            NOTIFY,
            &[(&MESH_CHANNEL, Type::TEXT), (&payloads, Type::TEXT_ARRAY)],
        )
        .await?;
    Ok(())
}

/// Subscribe this session to `MESH_CHANNEL`.
pub async fn listen(client: &impl GenericClient) -> Result<(), SqlError> {
    client
        .batch_execute(&format!("LISTEN {MESH_CHANNEL}"))
        .await?;
    Ok(())
}
