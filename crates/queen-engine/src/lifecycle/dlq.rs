//! Browsing dead letters.

use bytes::Bytes;
use std::sync::Arc;
use std::time::SystemTime;

use queen_sql::dlq::DeadLetterRow;
use uuid::Uuid;

use crate::lifecycle::Db;
use crate::txn::Transactions;
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

/// Filters of a dead-letter listing; `None` matches everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct DlqFilter<'a> {
    /// Queue name.
    pub queue: Option<&'a str>,
    /// Consumer group.
    pub group: Option<&'a str>,
    /// Partition name.
    pub partition: Option<&'a str>,
    /// Filed at or after.
    pub from: Option<SystemTime>,
    /// Filed at or before.
    pub to: Option<SystemTime>,
}

impl<'a> DlqFilter<'a> {
    pub(crate) fn sql(&self) -> queen_sql::dlq::DlqFilter<'a> {
        queen_sql::dlq::DlqFilter {
            queue: self.queue,
            group: self.group,
            partition: self.partition,
            from: self.from,
            to: self.to,
        }
    }
}

/// Which dead letters a replay takes: one message's rows (`partition_id`
/// and `transaction_id`), or a range by `filter`; both narrow together.
#[derive(Debug, Clone, Copy, Default)]
pub struct DlqTake<'a> {
    /// Queue, consumer group, partition name and filing-time filters.
    pub filter: DlqFilter<'a>,
    /// One partition, by id.
    pub partition_id: Option<Uuid>,
    /// One transaction id.
    pub transaction_id: Option<&'a str>,
    /// At most this many rows.
    pub limit: i32,
}

impl<'a> DlqTake<'a> {
    pub(crate) fn sql(&self) -> queen_sql::dlq::DlqTake<'a> {
        queen_sql::dlq::DlqTake {
            filter: self.filter.sql(),
            partition_id: self.partition_id,
            transaction_id: self.transaction_id,
            limit: self.limit,
        }
    }
}

/// Dead letters: browsing, deleting and replaying them.
pub struct DeadLetters {
    db: Db,
    txns: Arc<Transactions>,
}

impl DeadLetters {
    pub(crate) fn new(db: Db, txns: Arc<Transactions>) -> DeadLetters {
        DeadLetters { db, txns }
    }

    /// Move the dead letters `take` selects (at most [`MAX_REPLAY`](crate::MAX_REPLAY))
    /// back into the log, each row exactly once, in one transaction with
    /// their push: each message gets a new offset at the head of its
    /// partition and is delivered again to the group it failed in.
    pub async fn replay(
        &self,
        tenant: &str,
        take: &DlqTake<'_>,
    ) -> Result<crate::Replayed, EngineError> {
        self.txns.replay(tenant, take).await
    }

    /// Dead letters matching `filter`, newest first, and how many match in all.
    pub async fn list(
        &self,
        tenant: &str,
        filter: &DlqFilter<'_>,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<DeadLetter>, i64), EngineError> {
        let client = self.db.client().await?;
        let rows = queen_sql::dlq::list(&**client, tenant, &filter.sql(), limit, offset).await?;
        let total = queen_sql::dlq::count(&**client, tenant, &filter.sql()).await?;
        let letters = rows
            .into_iter()
            .map(|row| {
                let data = self.db.open_payload(row.encrypted, &row.payload);
                DeadLetter { row, data }
            })
            .collect();
        Ok((letters, total))
    }
}
