//! A retention step costs what its work costs, not what the queue count
//! costs (with 10,000 queues and nothing to delete, every step
//! probed every queue's sidecar work-list, 10,000 index probes).

use queen_testkit::TestDb;

const QUEUES: i64 = 2_000;

/// The statement inserting [`QUEUES`] queues `q1..`, every setting at its
/// default.
fn insert_queues() -> String {
    format!(
        "INSERT INTO queen.queues (id, tenant_id, name, namespace, task) \
         SELECT gen_random_uuid(), 'default', 'q' || g, '', '' FROM generate_series(1, {QUEUES}) g;"
    )
}

#[tokio::test]
async fn a_step_with_nothing_due_reads_no_queue_s_sidecar_list() {
    let db = TestDb::new().await;
    let client = db.client().await;
    // Queues without retention, each with a partition holding fresh rows.
    client
        .batch_execute(&format!(
            "{} \
             INSERT INTO queen.log_partitions (id, queue_id, name, oldest_live_at, oldest_txn_at) \
             SELECT gen_random_uuid(), q.id, 'p', now(), now() FROM queen.queues q; \
             ANALYZE queen.queues; ANALYZE queen.log_partitions;",
            insert_queues()
        ))
        .await
        .unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    let step = queen_sql::retention::step(&client, 32, 256).await.unwrap();
    let row = client
        .query_one(
            "SELECT COALESCE(sum(idx_scan), 0)::bigint, COALESCE(sum(seq_tup_read), 0)::bigint \
               FROM pg_stat_xact_user_tables \
              WHERE schemaname = 'queen' AND relname = 'log_partitions'",
            &[],
        )
        .await
        .unwrap();
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(step.partitions, 0);
    assert_eq!(step.txn_rows, 0);
    let (scans, seq_read): (i64, i64) = (row.get(0), row.get(1));
    assert!(
        scans < 10 && seq_read < QUEUES,
        "{scans} index scans and {seq_read} rows read of log_partitions for {QUEUES} queues"
    );
}

/// Rows of `queues` and `log_partitions` read so far by this session's
/// transaction.
async fn rows_read(client: &tokio_postgres::Client) -> i64 {
    crate::xact_rows_read(client, &["queues", "log_partitions"]).await
}

/// With nothing due, no background step reads the queues or
/// partitions of every queue: the retention and eviction steps visit only
/// the queues configured for them, partition cleanup reads one global list.
#[tokio::test]
async fn no_background_step_reads_every_queue_when_nothing_is_due() {
    let db = TestDb::new().await;
    let client = db.client().await;
    // Queues with neither retention nor eviction, each with an empty
    // partition written just now (not idle yet) and one holding fresh rows;
    // one queue with retention and one with eviction, nothing due in either.
    client
        .batch_execute(&format!(
            "{} \
             UPDATE queen.queues SET retention_enabled = true, retention_seconds = 3600 WHERE name = 'q1'; \
             UPDATE queen.queues SET max_wait_time_seconds = 3600 WHERE name = 'q2'; \
             INSERT INTO queen.log_partitions (id, queue_id, name, oldest_live_at, oldest_txn_at) \
             SELECT gen_random_uuid(), q.id, 'live', now(), now() FROM queen.queues q; \
             INSERT INTO queen.log_partitions (id, queue_id, name) \
             SELECT gen_random_uuid(), q.id, 'empty' FROM queen.queues q; \
             ANALYZE queen.queues; ANALYZE queen.log_partitions;",
            insert_queues()
        ))
        .await
        .unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    let before = rows_read(&client).await;
    let step = queen_sql::retention::step(&client, 32, 256).await.unwrap();
    let retention = rows_read(&client).await - before;
    let before = rows_read(&client).await;
    let evicted = queen_sql::retention::evict_step(&client, 32, 256)
        .await
        .unwrap();
    let eviction = rows_read(&client).await - before;
    let before = rows_read(&client).await;
    let cleanup = queen_sql::retention::cleanup_step(&client, 60, 32)
        .await
        .unwrap();
    let cleaning = rows_read(&client).await - before;
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(
        (step.partitions, evicted.segments, cleanup.removed),
        (0, 0, 0)
    );
    for (name, rows) in [
        ("retention", retention),
        ("eviction", eviction),
        ("cleanup", cleaning),
    ] {
        assert!(
            rows < 20,
            "the {name} step read {rows} rows of queues and log_partitions for {QUEUES} queues"
        );
    }
}

/// Every broker reads the queues with `maxSize` or `encryptionEnabled`
/// every second: it reads those, not the whole queue table.
#[tokio::test]
async fn the_marked_queue_refresh_reads_only_the_marked_queues() {
    let db = TestDb::new().await;
    let client = db.client().await;
    client
        .batch_execute(&format!(
            "{} \
             UPDATE queen.queues SET max_queue_size = 10 WHERE name = 'q7'; \
             UPDATE queen.queues SET encryption_enabled = true WHERE name = 'q9'; \
             ANALYZE queen.queues;",
            insert_queues()
        ))
        .await
        .unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    let before = rows_read(&client).await;
    let marked = queen_sql::queues::marked_queues(&client, 1000)
        .await
        .unwrap();
    let read = rows_read(&client).await - before;
    client.batch_execute("ROLLBACK").await.unwrap();
    let names: Vec<(&str, bool, bool)> = marked
        .iter()
        .map(|q| (q.name.as_str(), q.bounded, q.encrypted))
        .collect();
    assert_eq!(names, [("q7", true, false), ("q9", false, true)]);
    assert!(
        read < 20,
        "the refresh read {read} rows of queues for {QUEUES} queues"
    );
}
