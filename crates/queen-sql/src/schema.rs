//! Applying the schema at boot. (Being written.)

use crate::SqlError;

/// Apply every schema and procedure file, idempotently, under an advisory lock.
pub async fn apply_schema(client: &tokio_postgres::Client) -> Result<(), SqlError> {
    let _ = client;
    Ok(())
}
