//! Browsing dead letters.

use bytes::Bytes;
use queen_sql::dlq::{DeadLetterRow, DlqFilter};

use crate::lifecycle::Lifecycle;
use crate::EngineError;

/// A dead letter with its payload opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The stored row.
    pub row: DeadLetterRow,
    /// The payload, decrypted when it was sealed and the broker has the key;
    /// `None` when it cannot be opened.
    pub data: Option<Bytes>,
}

impl Lifecycle {
    /// Remove every consumer group's dead letter of one message; answers
    /// how many went.
    pub(crate) async fn delete_dead_letters(
        &self,
        tenant: &str,
        partition_id: uuid::Uuid,
        transaction_id: &str,
    ) -> Result<u64, EngineError> {
        let client = self.client().await?;
        Ok(queen_sql::dlq::delete(&**client, tenant, partition_id, transaction_id).await?)
    }

    /// Dead letters matching `filter`, newest first, and how many match in all.
    pub(crate) async fn dead_letters(
        &self,
        tenant: &str,
        filter: &DlqFilter<'_>,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<DeadLetter>, i64), EngineError> {
        let client = self.client().await?;
        let rows = queen_sql::dlq::list(&**client, tenant, filter, limit, offset).await?;
        let total = queen_sql::dlq::count(&**client, tenant, filter).await?;
        let letters = rows
            .into_iter()
            .map(|row| {
                let data = self.open_payload(row.encrypted, &row.payload);
                DeadLetter { row, data }
            })
            .collect();
        Ok((letters, total))
    }
}
