//! Where the hot statements are prepared.
//!
//! The push flush, the pops and the acks run on every request. Sent with
//! `query_typed`, each is one round trip, but PostgreSQL parses, analyses and
//! plans it every time (measured at batch-1 push: about 4% of the machine's
//! samples, 6% of PostgreSQL's CPU per message). On a pooled connection
//! ([`deadpool_postgres::Object`], or a transaction opened on one) a
//! [`Conn`] prepares each statement once and keeps it in deadpool's
//! per-connection statement cache; the call stays one round trip (bind and
//! execute). A bare client (tests, tools) sends it unprepared.
//!
//! Named prepared statements need a session: behind PgBouncer in transaction
//! mode, version 1.21 or later with `max_prepared_statements` set
//! (docs/postgresql.md).

use std::future::Future;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row, Statement};

use crate::SqlError;

/// A connection the typed calls of the hot paths run on: pass the pooled
/// object (or a transaction opened on it) to have the statement prepared; a
/// bare `tokio_postgres::Client` sends it unprepared.
pub trait Conn: Sync {
    /// The client statements go through.
    type Client: GenericClient + Sync;

    /// The client statements go through.
    fn client(&self) -> &Self::Client;

    /// `sql` prepared with `types` on this connection, once; `None` to send it
    /// unprepared.
    fn prepare(
        &self,
        sql: &str,
        types: &[Type],
    ) -> impl Future<Output = Result<Option<Statement>, tokio_postgres::Error>> + Send;
}

/// deadpool's pooled connection and its transactions prepare through the
/// connection's statement cache.
macro_rules! cached {
    ($(impl$(<$lt:lifetime>)? for $conn:ty => $client:ty;)*) => {$(
        impl$(<$lt>)? Conn for $conn {
            type Client = $client;

            fn client(&self) -> &$client {
                self
            }

            async fn prepare(
                &self,
                sql: &str,
                types: &[Type],
            ) -> Result<Option<Statement>, tokio_postgres::Error> {
                self.prepare_typed_cached(sql, types).await.map(Some)
            }
        }
    )*};
}

cached! {
    impl for deadpool_postgres::Object => tokio_postgres::Client;
    impl<'a> for deadpool_postgres::Transaction<'a> => tokio_postgres::Transaction<'a>;
}

impl Conn for tokio_postgres::Client {
    type Client = tokio_postgres::Client;

    fn client(&self) -> &tokio_postgres::Client {
        self
    }

    async fn prepare(
        &self,
        _sql: &str,
        _types: &[Type],
    ) -> Result<Option<Statement>, tokio_postgres::Error> {
        Ok(None)
    }
}

/// Run `sql` with `params` (of `types`, in order) on `conn`: prepared when the
/// connection keeps statements, else parse, bind and execute in one round trip.
pub(crate) async fn query(
    conn: &impl Conn,
    sql: &str,
    types: &[Type],
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, SqlError> {
    let client = conn.client();
    match conn.prepare(sql, types).await? {
        Some(statement) => Ok(client.query(&statement, params).await?),
        None => {
            let typed: Vec<(&(dyn ToSql + Sync), Type)> =
                params.iter().copied().zip(types.iter().cloned()).collect();
            Ok(client.query_typed(sql, &typed).await?)
        }
    }
}

/// [`query`], expecting exactly one row.
pub(crate) async fn query_one(
    conn: &impl Conn,
    sql: &str,
    types: &[Type],
    params: &[&(dyn ToSql + Sync)],
) -> Result<Row, SqlError> {
    let mut rows = query(conn, sql, types, params).await?;
    match (rows.pop(), rows.is_empty()) {
        (Some(row), true) => Ok(row),
        _ => Err(SqlError::Protocol {
            what: "a statement expected to answer one row answered another count",
        }),
    }
}
