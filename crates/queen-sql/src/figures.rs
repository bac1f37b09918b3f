//! The kept message figures of the admin views (`schema/010_figures.sql`,
//! `procedures/figures.sql`): the fold step.

use tokio_postgres::GenericClient;

use crate::SqlError;

const FOLD: &str = "SELECT queen.figures_fold_v1($1)";

/// What one fold step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    /// Another session was folding: nothing was done.
    Skipped,
    /// This many partitions were folded (0: nothing was dirty).
    Folded(u32),
}

/// Fold at most `limit` dirty rows (and, while the build pass runs, the next
/// `limit` partitions) into the kept figures, in one transaction.
pub async fn fold(client: &impl GenericClient, limit: i32) -> Result<Fold, SqlError> {
    let row = client.query_one(FOLD, &[&limit]).await?;
    let folded: i32 = row.try_get(0)?;
    Ok(match u32::try_from(folded) {
        Ok(folded) => Fold::Folded(folded),
        Err(_) => Fold::Skipped,
    })
}
