//! The administrative reads and writes, one type per concern, each exposed
//! by the engine (`Engine::queues()`, `groups()`, `dead_letters()`,
//! `messages()`, `streams()`, `traces()`):
//!
//! - [`Queues`] (`configure.rs`): configure and delete queues;
//! - [`Groups`] (`groups.rs`): delete, seek and re-time consumer groups, and
//!   the consumer-group views computed from the cursor model;
//! - [`DeadLetters`] (`dlq.rs`): browse, delete and replay dead letters;
//! - [`Messages`] (`messages.rs`): the message listing and detail, moving a
//!   live message to the dead-letter queue, deleting a message
//!   (`message_delete.rs`);
//! - [`Streams`] (`streams.rs`): streaming queries, their state and cycles;
//! - [`Traces`] (`traces.rs`): recording trace events.
//!
//! Each write is one procedure call, so one transaction; a deadlock or
//! serialisation failure (a seek or delete racing a multi-partition
//! transaction) is retried a few times ([`Db::retry_conflicts`]). After the
//! commit, the writes that change what other components cache tell them and
//! the peers through `mesh::Changes`.

pub(crate) mod configure;
pub(crate) mod dlq;
pub(crate) mod groups;
pub(crate) mod message_delete;
pub(crate) mod messages;
pub(crate) mod streams;
pub(crate) mod traces;

use std::future::Future;
use std::sync::Arc;

use queen_sql::SqlError;

use crate::crypto::AtRest;
use crate::EngineError;

pub use configure::Queues;
pub use dlq::DeadLetters;
pub use groups::Groups;
pub use messages::Messages;
pub use queen_sql::lifecycle::{CursorLag, Subscription};
pub use streams::Streams;
pub use traces::Traces;

/// How often a lifecycle write is tried when it conflicts (deadlock or
/// serialisation failure) with concurrent work.
const MAX_CONFLICT_ATTEMPTS: u32 = 3;

/// What every lifecycle type holds: the pool, the read pool (a replica's,
/// or the same pool) and the at-rest key.
#[derive(Clone)]
pub(crate) struct Db {
    pool: deadpool_postgres::Pool,
    read: deadpool_postgres::Pool,
    at_rest: Arc<AtRest>,
}

impl Db {
    pub(crate) fn new(
        pool: deadpool_postgres::Pool,
        read: deadpool_postgres::Pool,
        at_rest: Arc<AtRest>,
    ) -> Db {
        Db {
            pool,
            read,
            at_rest,
        }
    }

    /// Whether this broker holds an at-rest key (`QUEEN_ENCRYPTION_KEY`).
    pub(crate) fn has_key(&self) -> bool {
        self.at_rest.key().is_some()
    }

    /// A stored payload as the admin views show it: opened when `encrypted`
    /// (`None` when this broker has no key that opens it), else as stored.
    pub(crate) fn open_payload(&self, encrypted: bool, payload: &[u8]) -> Option<bytes::Bytes> {
        if encrypted {
            self.at_rest
                .key()
                .and_then(|key| key.open(payload).ok())
                .map(bytes::Bytes::from)
        } else {
            Some(bytes::Bytes::copy_from_slice(payload))
        }
    }

    /// A pooled connection.
    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, EngineError> {
        Ok(self.pool.get().await.map_err(SqlError::from)?)
    }

    /// A connection of the read pool, for views that tolerate a replica's
    /// lag (never for a write, nor a read that must see one).
    pub(crate) async fn read_client(&self) -> Result<deadpool_postgres::Object, EngineError> {
        Ok(self.read.get().await.map_err(SqlError::from)?)
    }

    /// Run `op` on a pooled connection, again (on a fresh connection) when it
    /// conflicted with concurrent work.
    pub(crate) async fn retry_conflicts<T, F, Fut>(&self, op: F) -> Result<T, EngineError>
    where
        F: Fn(deadpool_postgres::Object) -> Fut,
        Fut: Future<Output = Result<T, SqlError>>,
    {
        let mut attempt = 1;
        loop {
            let client = self.client().await?;
            match op(client).await {
                Err(error) if error.is_conflict() && attempt < MAX_CONFLICT_ATTEMPTS => {
                    tracing::debug!(attempt, "lifecycle write conflicted; retrying");
                    attempt += 1;
                }
                result => return Ok(result?),
            }
        }
    }
}
