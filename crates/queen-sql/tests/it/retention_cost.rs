//! A retention step costs what its work costs, not what the queue count
//! costs (with 10,000 queues and nothing to delete, every step
//! probed every queue's sidecar work-list, 10,000 index probes).

use queen_testkit::TestDb;

const QUEUES: i64 = 2_000;

#[tokio::test]
async fn a_step_with_nothing_due_reads_no_queue_s_sidecar_list() {
    let db = TestDb::new().await;
    let client = db.client().await;
    // Queues without retention, each with a partition holding fresh rows.
    client
        .batch_execute(&format!(
            "INSERT INTO queen.queues (id, tenant_id, name, namespace, task) \
             SELECT gen_random_uuid(), 'default', 'q' || g, '', '' FROM generate_series(1, {QUEUES}) g; \
             INSERT INTO queen.log_partitions (id, queue_id, name, oldest_live_at, oldest_txn_at) \
             SELECT gen_random_uuid(), q.id, 'p', now(), now() FROM queen.queues q; \
             ANALYZE queen.queues; ANALYZE queen.log_partitions;"
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
