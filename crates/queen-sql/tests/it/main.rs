//! Integration tests of `queen-sql` against a throwaway PostgreSQL
//! (`queen-testkit`): one binary, suites as modules.

mod bounded_depth;
mod errors;
mod figures_watch;
mod pop_commit;
mod push_flush;
mod push_probe;
mod queues;
mod registry;
mod retention_cost;
mod schema;
mod segments;
mod unnest_hashes;

/// Run a query whose rows are all text columns and return them as tuples
/// joined with `|`, which keeps the expected values in the tests readable.
pub(crate) async fn rows_as_text(
    client: &tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Vec<String> {
    client
        .query(sql, params)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|row| {
            (0..row.len())
                .map(|idx| row.get::<_, String>(idx))
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect()
}

/// Rows of the `queen` tables `tables` this session's transaction has read
/// so far (PostgreSQL 15's xact view also holds the session's unflushed
/// counts, so callers take differences).
pub(crate) async fn xact_rows_read(client: &tokio_postgres::Client, tables: &[&str]) -> i64 {
    client
        .query_one(
            "SELECT COALESCE(sum(seq_tup_read + COALESCE(idx_tup_fetch, 0)), 0)::bigint \
               FROM pg_stat_xact_user_tables \
              WHERE schemaname = 'queen' AND relname = ANY ($1)",
            &[&tables],
        )
        .await
        .unwrap()
        .get(0)
}

/// A one-frame segment of `partition` of `queue`, created on first write,
/// with client hashes `hashes`.
pub(crate) fn one_frame<'a>(
    queue: &'a str,
    partition: &'a str,
    hashes: &'a [u8],
) -> queen_sql::push::SegmentWrite<'a> {
    queen_sql::push::SegmentWrite {
        queue,
        partition,
        namespace: "",
        task: "",
        new_queue_id: uuid::Uuid::now_v7(),
        new_partition_id: uuid::Uuid::now_v7(),
        encrypted: false,
        probe: false,
        coverage: None,
        n_frames: 1,
        blob: b"blob",
        hashes,
    }
}
