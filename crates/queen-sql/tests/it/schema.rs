//! The schema applier and the catalog it leaves behind.

use std::time::Duration;

use queen_sql::{apply_schema, SqlError};
use queen_testkit::TestDb;
use tokio_postgres::error::SqlState;
use uuid::Uuid;

use crate::rows_as_text;

/// The applier's advisory lock key ("QUEENSCH"). It is a contract between broker
/// versions sharing one database, so a change must be deliberate.
const SCHEMA_LOCK_KEY: i64 = 0x5155_4545_4E53_4348;

const TABLES_SQL: &str = "\
SELECT c.relname::text FROM pg_class c
 WHERE c.relnamespace = 'queen'::regnamespace AND c.relkind = 'r'
 ORDER BY c.relname";

const COLUMNS_SQL: &str = "\
SELECT a.attname::text, format_type(a.atttypid, a.atttypmod),
       CASE WHEN a.attnotnull THEN 'not null' ELSE 'null' END,
       coalesce(pg_get_expr(d.adbin, d.adrelid), '')
  FROM pg_attribute a
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum";

const RELOPTIONS_SQL: &str = "\
SELECT o FROM pg_class c, unnest(c.reloptions) AS o
 WHERE c.oid = $1::text::regclass ORDER BY o";

const TOAST_RELOPTIONS_SQL: &str = "\
SELECT o FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid, unnest(t.reloptions) AS o
 WHERE c.oid = $1::text::regclass ORDER BY o";

/// Every index of a table: name, validity, definition.
const INDEXES_SQL: &str = "\
SELECT c.relname::text, CASE WHEN i.indisvalid THEN 'valid' ELSE 'INVALID' END,
       pg_get_indexdef(i.indexrelid)
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = $1::text::regclass
 ORDER BY c.relname";

/// Foreign keys of a table: referenced table, on-delete action, definition.
const FOREIGN_KEYS_SQL: &str = "\
SELECT k.confrelid::regclass::text, k.confdeltype::text, pg_get_constraintdef(k.oid)
  FROM pg_constraint k
 WHERE k.conrelid = $1::text::regclass AND k.contype = 'f'
 ORDER BY k.conname";

const ADVISORY_LOCKS_OF_SQL: &str =
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1";

async fn apply(client: &tokio_postgres::Client) {
    apply_schema(client)
        .await
        .unwrap_or_else(|e| panic!("apply_schema: {}", queen_sql::error_chain(&e)));
}

async fn texts(client: &tokio_postgres::Client, sql: &str, table: &str) -> Vec<String> {
    rows_as_text(client, sql, &[&table]).await
}

async fn backend_pid(client: &tokio_postgres::Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

async fn advisory_locks_held(observer: &tokio_postgres::Client, pid: i32) -> i64 {
    observer
        .query_one(ADVISORY_LOCKS_OF_SQL, &[&pid])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn apply_twice_on_an_empty_database_builds_the_whole_schema() {
    let db = TestDb::empty().await;
    let client = db.client().await;
    // The test cluster's user is called `queen`, so the default search_path
    // ("$user", public) would find the queen schema. Take it away: the files must
    // qualify every name, and catalog output below renders qualified names.
    client
        .batch_execute("SET search_path = pg_catalog")
        .await
        .unwrap();
    apply(&client).await;
    let id = queen_sql::system::database_id(&client).await.unwrap();
    apply(&client).await;
    // Without the citus extension 020_citus.sql does nothing, and says so.
    assert_eq!(
        queen_sql::citus_placement(&client).await.unwrap(),
        queen_sql::CitusPlacement::Absent
    );
    let citus_setting: Option<String> = client
        .query_one("SELECT current_setting('queen.citus', true)", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        citus_setting.as_deref().is_none_or(str::is_empty),
        "{citus_setting:?}"
    );
    // The database's id is drawn once: a re-apply keeps it.
    assert_eq!(queen_sql::system::database_id(&client).await.unwrap(), id);

    assert_eq!(
        rows_as_text(&client, TABLES_SQL, &[]).await[..],
        [
            "consumer_groups_metadata",
            "database_identity",
            "figures_brokers",
            "figures_build",
            "figures_cursor",
            "figures_cursor_build",
            "figures_dirty",
            "figures_group",
            "figures_partition",
            "figures_queue",
            "figures_verify",
            "log_consumers",
            "log_dlq",
            "log_partitions",
            "log_segments",
            "log_txns",
            "message_traces",
            "partition_offset_floors",
            "queues",
            "stats_broker_minute",
            "stats_queue_minute",
            "system_state",
        ]
    );
    check_columns(&client).await;
    check_storage(&client).await;
    check_indexes(&client).await;
    check_foreign_keys(&client).await;
}

async fn check_columns(client: &tokio_postgres::Client) {
    assert_eq!(
        texts(client, COLUMNS_SQL, "queen.queues").await[..],
        [
            "id|uuid|not null|",
            "tenant_id|text|not null|'default'::text",
            "name|text|not null|",
            "namespace|text|not null|''::text",
            "task|text|not null|''::text",
            "lease_time|integer|not null|60",
            "retry_limit|integer|not null|3",
            "retry_delay|integer|not null|1000",
            "max_queue_size|integer|not null|0",
            "ttl|integer|not null|3600",
            "priority|integer|not null|0",
            "delayed_processing|integer|not null|0",
            "window_buffer|integer|not null|0",
            "retention_enabled|boolean|not null|false",
            "retention_seconds|integer|not null|0",
            "completed_retention_seconds|integer|not null|0",
            "max_wait_time_seconds|integer|not null|0",
            "dead_letter_queue|boolean|not null|false",
            "dlq_after_max_retries|boolean|not null|false",
            "dlq_enabled|boolean|not null|true",
            "encryption_enabled|boolean|not null|false",
            "min_pop_wait_time|integer|not null|0",
            "dedup_window_seconds|integer|not null|300",
            "created_at|timestamp with time zone|not null|now()",
            "updated_at|timestamp with time zone|not null|now()",
            "retry_delay_applied|boolean|not null|false",
        ]
    );
    assert_eq!(
        texts(client, COLUMNS_SQL, "queen.consumer_groups_metadata").await[..],
        [
            "consumer_group|text|not null|",
            "queue_id|uuid|not null|",
            "subscription_mode|text|not null|'all'::text",
            "subscription_timestamp|timestamp with time zone|null|",
            "seeded_at|timestamp with time zone|null|",
            "scan_watermark|timestamp with time zone|not null|'-infinity'::timestamp with time zone",
            "watermark_checked_at|timestamp with time zone|null|",
            "created_at|timestamp with time zone|not null|now()",
            "updated_at|timestamp with time zone|not null|now()",
        ]
    );
    assert_eq!(
        texts(client, COLUMNS_SQL, "queen.log_partitions").await[..],
        [
            "id|uuid|not null|",
            "queue_id|uuid|not null|",
            "name|text|not null|",
            "last_offset|bigint|not null|'-1'::integer",
            "log_start|bigint|not null|0",
            "txns_start|bigint|not null|0",
            "last_write_at|timestamp with time zone|not null|now()",
            "oldest_live_at|timestamp with time zone|null|",
            "oldest_txn_at|timestamp with time zone|null|",
            "created_at|timestamp with time zone|not null|now()",
        ]
    );
    assert_eq!(
        texts(client, COLUMNS_SQL, "queen.log_segments").await[..],
        [
            "partition_id|uuid|not null|",
            "base_offset|bigint|not null|",
            "end_offset|bigint|not null|",
            "msg_count|integer|not null|",
            "created_at|timestamp with time zone|not null|",
            "blob|bytea|not null|",
        ]
    );
    assert_eq!(
        texts(client, COLUMNS_SQL, "queen.log_txns").await[..],
        [
            "partition_id|uuid|not null|",
            "base_offset|bigint|not null|",
            "end_offset|bigint|not null|",
            "created_at|timestamp with time zone|not null|",
            "hashes|bytea|not null|",
        ]
    );
    assert_eq!(
        texts(client, COLUMNS_SQL, "queen.log_consumers").await[..],
        [
            "partition_id|uuid|not null|",
            "consumer_group|text|not null|",
            "committed|bigint|not null|'-1'::integer",
            "worker_id|uuid|null|",
            "lease_expires_at|timestamp with time zone|null|",
            "lease_acquired_at|timestamp with time zone|null|",
            "batch_end|bigint|null|",
            "attempt_count|integer|not null|0",
            "attempt_offset|bigint|null|",
            "batch_retry_count|integer|not null|0",
            "total_consumed|bigint|not null|0",
            "last_consumed_at|timestamp with time zone|null|",
            "created_at|timestamp with time zone|not null|now()",
        ]
    );
    assert_eq!(
        texts(client, COLUMNS_SQL, "queen.log_dlq").await[..],
        [
            "partition_id|uuid|not null|",
            "consumer_group|text|not null|",
            "message_offset|bigint|not null|",
            "message_id|uuid|not null|",
            "transaction_id|text|not null|",
            "trace_id|uuid|null|",
            "producer_sub|text|null|",
            "payload|bytea|not null|",
            "encrypted|boolean|not null|false",
            "message_created_at|timestamp with time zone|not null|",
            "error|text|null|",
            "retry_count|integer|not null|0",
            "failed_at|timestamp with time zone|not null|now()",
        ]
    );
}

async fn check_storage(client: &tokio_postgres::Client) {
    assert_eq!(
        texts(client, RELOPTIONS_SQL, "queen.log_partitions").await[..],
        [
            "autovacuum_vacuum_scale_factor=0",
            "autovacuum_vacuum_threshold=500",
            "fillfactor=70",
            "vacuum_truncate=off",
        ]
    );
    assert_eq!(
        texts(client, RELOPTIONS_SQL, "queen.figures_dirty").await[..],
        [
            "autovacuum_vacuum_scale_factor=0",
            "autovacuum_vacuum_threshold=500",
            "vacuum_truncate=off",
        ]
    );
    assert_eq!(
        texts(client, RELOPTIONS_SQL, "queen.log_consumers").await[..],
        [
            "autovacuum_vacuum_scale_factor=0",
            "autovacuum_vacuum_threshold=500",
            "fillfactor=50",
            "vacuum_truncate=off",
        ]
    );
    let segments_autovacuum = [
        "autovacuum_vacuum_cost_delay=0",
        "autovacuum_vacuum_cost_limit=4000",
        "autovacuum_vacuum_insert_scale_factor=0.3",
        "autovacuum_vacuum_scale_factor=0.1",
    ];
    assert_eq!(
        texts(client, RELOPTIONS_SQL, "queen.log_segments").await[..],
        segments_autovacuum
    );
    assert_eq!(
        texts(client, TOAST_RELOPTIONS_SQL, "queen.log_segments").await[..],
        segments_autovacuum
    );
    // Tables without tuning carry no storage parameters at all.
    for table in [
        "queen.queues",
        "queen.consumer_groups_metadata",
        "queen.log_txns",
        "queen.log_dlq",
    ] {
        assert_eq!(
            texts(client, RELOPTIONS_SQL, table).await,
            Vec::<String>::new(),
            "{table}"
        );
    }

    let blob_storage: String = client
        .query_one(
            "SELECT attstorage::text FROM pg_attribute \
             WHERE attrelid = 'queen.log_segments'::regclass AND attname = 'blob'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(blob_storage, "e");
}

async fn check_indexes(client: &tokio_postgres::Client) {
    assert_eq!(
        texts(client, INDEXES_SQL, "queen.log_segments").await[..],
        ["log_segments_pkey|valid|CREATE UNIQUE INDEX log_segments_pkey ON queen.log_segments USING btree (partition_id, base_offset)"],
        "log_segments carries its primary key and nothing else"
    );
    assert_eq!(
        texts(client, INDEXES_SQL, "queen.log_partitions").await[..],
        [
            "idx_log_partitions_empty|valid|CREATE INDEX idx_log_partitions_empty ON queen.log_partitions USING btree (last_write_at) WHERE (oldest_live_at IS NULL)",
            "idx_log_partitions_oldest_txn|valid|CREATE INDEX idx_log_partitions_oldest_txn ON queen.log_partitions USING btree (oldest_txn_at) WHERE (oldest_txn_at IS NOT NULL)",
            "idx_log_partitions_queue_empty|valid|CREATE INDEX idx_log_partitions_queue_empty ON queen.log_partitions USING btree (queue_id, last_write_at) WHERE (oldest_live_at IS NULL)",
            "idx_log_partitions_queue_oldest_live|valid|CREATE INDEX idx_log_partitions_queue_oldest_live ON queen.log_partitions USING btree (queue_id, oldest_live_at) WHERE (oldest_live_at IS NOT NULL)",
            "idx_log_partitions_queue_oldest_txn|valid|CREATE INDEX idx_log_partitions_queue_oldest_txn ON queen.log_partitions USING btree (queue_id, oldest_txn_at) WHERE (oldest_txn_at IS NOT NULL)",
            "idx_log_partitions_queue_write|valid|CREATE INDEX idx_log_partitions_queue_write ON queen.log_partitions USING btree (queue_id, last_write_at)",
            "log_partitions_pkey|valid|CREATE UNIQUE INDEX log_partitions_pkey ON queen.log_partitions USING btree (id)",
            "log_partitions_queue_id_name_key|valid|CREATE UNIQUE INDEX log_partitions_queue_id_name_key ON queen.log_partitions USING btree (queue_id, name)",
        ]
    );
    assert_eq!(
        texts(client, INDEXES_SQL, "queen.queues").await[..],
        [
            "idx_queues_eviction|valid|CREATE INDEX idx_queues_eviction ON queen.queues USING btree (id) WHERE (max_wait_time_seconds > 0)",
            "idx_queues_marked|valid|CREATE INDEX idx_queues_marked ON queen.queues USING btree (tenant_id, name) WHERE ((max_queue_size > 0) OR encryption_enabled)",
            "idx_queues_retention|valid|CREATE INDEX idx_queues_retention ON queen.queues USING btree (id) WHERE (retention_enabled AND ((retention_seconds > 0) OR (completed_retention_seconds > 0)))",
            "queues_pkey|valid|CREATE UNIQUE INDEX queues_pkey ON queen.queues USING btree (id)",
            "queues_tenant_name_uk|valid|CREATE UNIQUE INDEX queues_tenant_name_uk ON queen.queues USING btree (tenant_id, name)",
        ]
    );
    assert_eq!(
        texts(client, INDEXES_SQL, "queen.log_dlq").await[..],
        [
            "idx_log_dlq_partition_failed_at|valid|CREATE INDEX idx_log_dlq_partition_failed_at ON queen.log_dlq USING btree (partition_id, failed_at DESC)",
            "log_dlq_pkey|valid|CREATE UNIQUE INDEX log_dlq_pkey ON queen.log_dlq USING btree (partition_id, consumer_group, message_offset)",
        ]
    );
    assert_eq!(
        texts(client, INDEXES_SQL, "queen.log_txns").await[..],
        ["log_txns_pkey|valid|CREATE UNIQUE INDEX log_txns_pkey ON queen.log_txns USING btree (partition_id, base_offset)"]
    );
    assert_eq!(
        texts(client, INDEXES_SQL, "queen.log_consumers").await[..],
        [
            "idx_log_consumers_worker|valid|CREATE INDEX idx_log_consumers_worker ON queen.log_consumers USING btree (worker_id) WHERE (worker_id IS NOT NULL)",
            "log_consumers_pkey|valid|CREATE UNIQUE INDEX log_consumers_pkey ON queen.log_consumers USING btree (partition_id, consumer_group)",
        ]
    );
}

async fn check_foreign_keys(client: &tokio_postgres::Client) {
    // confdeltype 'c' is ON DELETE CASCADE.
    assert_eq!(
        texts(client, FOREIGN_KEYS_SQL, "queen.log_partitions").await[..],
        ["queen.queues|c|FOREIGN KEY (queue_id) REFERENCES queen.queues(id) ON DELETE CASCADE"]
    );
    assert_eq!(
        texts(client, FOREIGN_KEYS_SQL, "queen.log_consumers").await[..],
        ["queen.log_partitions|c|FOREIGN KEY (partition_id) REFERENCES queen.log_partitions(id) ON DELETE CASCADE"]
    );
    assert_eq!(
        texts(client, FOREIGN_KEYS_SQL, "queen.consumer_groups_metadata").await[..],
        ["queen.queues|c|FOREIGN KEY (queue_id) REFERENCES queen.queues(id) ON DELETE CASCADE"]
    );
    // Deliberately none: a push must not pay a trigger per segment, the purge
    // path must not pay trigger cost, and a dead letter outlives its segment.
    for table in [
        "queen.log_segments",
        "queen.log_txns",
        "queen.log_dlq",
        "queen.queues",
    ] {
        assert_eq!(
            texts(client, FOREIGN_KEYS_SQL, table).await,
            Vec::<String>::new(),
            "{table}"
        );
    }
}

#[tokio::test]
async fn an_apply_over_an_older_schema_drops_the_segments_foreign_key() {
    let db = TestDb::empty().await;
    let client = db.client().await;
    apply(&client).await;
    // The schema before the key was dropped, as a broker of that version
    // left it.
    client
        .batch_execute(
            "ALTER TABLE queen.log_segments ADD CONSTRAINT log_segments_partition_id_fkey \
             FOREIGN KEY (partition_id) REFERENCES queen.log_partitions (id) ON DELETE CASCADE",
        )
        .await
        .unwrap();
    assert_eq!(
        texts(&client, FOREIGN_KEYS_SQL, "queen.log_segments")
            .await
            .len(),
        1
    );
    apply(&client).await;
    assert_eq!(
        texts(&client, FOREIGN_KEYS_SQL, "queen.log_segments").await,
        Vec::<String>::new()
    );
    check_foreign_keys(&client).await;
}

#[tokio::test]
async fn an_implicitly_created_queue_gets_the_documented_defaults() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let queue_id = Uuid::now_v7();
    client
        .execute(
            "INSERT INTO queen.queues (id, name) VALUES ($1, 'orders')",
            &[&queue_id],
        )
        .await
        .unwrap();
    let row = client
        .query_one(
            "SELECT tenant_id, namespace, task, lease_time, retry_limit, retry_delay,
                    max_queue_size, ttl, priority, delayed_processing, window_buffer,
                    retention_enabled, retention_seconds, completed_retention_seconds,
                    max_wait_time_seconds, dead_letter_queue, dlq_after_max_retries,
                    dlq_enabled, encryption_enabled, min_pop_wait_time, dedup_window_seconds,
                    created_at > now() - interval '1 minute' AND updated_at = created_at
               FROM queen.queues WHERE id = $1",
            &[&queue_id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>("tenant_id"), "default");
    assert_eq!(row.get::<_, String>("namespace"), "");
    assert_eq!(row.get::<_, String>("task"), "");
    let ints: Vec<i32> = [
        "lease_time",
        "retry_limit",
        "retry_delay",
        "max_queue_size",
        "ttl",
        "priority",
        "delayed_processing",
        "window_buffer",
        "retention_seconds",
        "completed_retention_seconds",
        "max_wait_time_seconds",
        "min_pop_wait_time",
        "dedup_window_seconds",
    ]
    .iter()
    .map(|column| row.get(*column))
    .collect();
    assert_eq!(ints, [60, 3, 1000, 0, 3600, 0, 0, 0, 0, 0, 0, 0, 300]);
    let bools: Vec<bool> = [
        "retention_enabled",
        "dead_letter_queue",
        "dlq_after_max_retries",
        "dlq_enabled",
        "encryption_enabled",
    ]
    .iter()
    .map(|column| row.get(*column))
    .collect();
    assert_eq!(bools, [false, false, false, true, false]);
    assert!(
        row.get::<_, bool>(21),
        "created_at and updated_at default to now()"
    );

    // (tenant_id, name) is unique; the same name under another tenant is not a clash.
    let clash = client
        .execute(
            "INSERT INTO queen.queues (id, name) VALUES ($1, 'orders')",
            &[&Uuid::now_v7()],
        )
        .await
        .unwrap_err();
    assert_eq!(clash.code(), Some(&SqlState::UNIQUE_VIOLATION));
    client
        .execute(
            "INSERT INTO queen.queues (id, tenant_id, name) VALUES ($1, 'acme', 'orders')",
            &[&Uuid::now_v7()],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn check_constraints_reject_inconsistent_segment_and_sidecar_rows() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let queue_id = Uuid::now_v7();
    let partition_id = Uuid::now_v7();
    client
        .execute(
            "INSERT INTO queen.queues (id, name) VALUES ($1, 'q')",
            &[&queue_id],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO queen.log_partitions (id, queue_id, name) VALUES ($1, $2, 'Default')",
            &[&partition_id, &queue_id],
        )
        .await
        .unwrap();
    let segment = "INSERT INTO queen.log_segments \
                   (partition_id, base_offset, end_offset, msg_count, created_at, blob) \
                   VALUES ($1, $2, $3, $4, now(), '\\x00')";
    for (base, end, count) in [(0_i64, 2_i64, 2_i32), (3, 2, 0), (-1, 0, 2)] {
        let err = client
            .execute(segment, &[&partition_id, &base, &end, &count])
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            Some(&SqlState::CHECK_VIOLATION),
            "[{base}, {end}] x {count}"
        );
    }
    client
        .execute(segment, &[&partition_id, &0_i64, &2_i64, &3_i32])
        .await
        .unwrap();

    let txns =
        "INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes) \
                VALUES ($1, 0, 2, now(), $2)";
    let err = client
        .execute(txns, &[&partition_id, &vec![0_u8; 47]])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::CHECK_VIOLATION));
    client
        .execute(txns, &[&partition_id, &vec![0_u8; 48]])
        .await
        .unwrap();

    // With no foreign key, a partition delete cascades to neither its segments
    // nor its sidecar: whoever deletes a partition must delete those rows first.
    client
        .execute("DELETE FROM queen.queues WHERE id = $1", &[&queue_id])
        .await
        .unwrap();
    let counts: (i64, i64) = {
        let row = client
            .query_one(
                "SELECT (SELECT count(*) FROM queen.log_segments), (SELECT count(*) FROM queen.log_txns)",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(counts, (1, 1));
}

#[tokio::test]
async fn two_concurrent_applies_on_one_empty_database_both_succeed() {
    let db = TestDb::empty().await;
    let first = db.client().await;
    let second = db.client().await;
    let (a, b) = tokio::join!(apply_schema(&first), apply_schema(&second));
    a.unwrap();
    b.unwrap();
    assert_eq!(
        texts(&first, INDEXES_SQL, "queen.log_partitions")
            .await
            .iter()
            .filter(|index| index.contains("|valid|"))
            .count(),
        8
    );
    let observer = db.client().await;
    for client in [&first, &second] {
        let pid = backend_pid(client).await;
        assert_eq!(advisory_locks_held(&observer, pid).await, 0);
    }
}

#[tokio::test]
async fn apply_waits_while_another_session_holds_the_schema_lock() {
    let db = TestDb::empty().await;
    let holder = db.client().await;
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&SCHEMA_LOCK_KEY])
        .await
        .unwrap();

    let applier = db.client().await;
    let apply = tokio::spawn(async move { apply_schema(&applier).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!apply.is_finished(), "apply_schema ran without the lock");
    let schema_exists: bool = holder
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'queen')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!schema_exists);

    holder
        .execute("SELECT pg_advisory_unlock($1)", &[&SCHEMA_LOCK_KEY])
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), apply)
        .await
        .expect("apply_schema finishes once the lock is free")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_failed_apply_rolls_back_and_releases_the_lock() {
    let db = TestDb::empty().await;
    let client = db.client().await;
    // A function of the same name with another return type makes 001's
    // CREATE OR REPLACE FUNCTION fail after 000 has already run.
    client
        .batch_execute(
            "CREATE SCHEMA queen;
             CREATE FUNCTION queen.log_unnest_hashes(p bytea) RETURNS integer
                 LANGUAGE sql AS 'SELECT 1';",
        )
        .await
        .unwrap();

    let err = apply_schema(&client).await.unwrap_err();
    match &err {
        SqlError::Db(db_error) => {
            assert_eq!(
                db_error.code(),
                Some(&SqlState::INVALID_FUNCTION_DEFINITION)
            );
        }
        other => panic!("expected a database error, got {other:?}"),
    }

    // The session is usable (not left in an aborted transaction), holds no
    // advisory lock, and nothing of the transaction survived.
    let queues_exists: bool = client
        .query_one("SELECT to_regclass('queen.queues') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        !queues_exists,
        "000_queen.sql was rolled back with the failed file"
    );
    let observer = db.client().await;
    let pid = backend_pid(&client).await;
    assert_eq!(advisory_locks_held(&observer, pid).await, 0);
}

#[tokio::test]
async fn apply_replaces_an_invalid_leftover_partial_index() {
    let db = TestDb::new().await;
    let client = db.client().await;
    // Leave an INVALID index under the partial index's name the way a failed
    // build does: a unique concurrent build that meets duplicate keys fails and
    // leaves its index behind, marked invalid.
    let queue_id = Uuid::now_v7();
    client
        .execute(
            "INSERT INTO queen.queues (id, name) VALUES ($1, 'q')",
            &[&queue_id],
        )
        .await
        .unwrap();
    for name in ["a", "b"] {
        client
            .execute(
                "INSERT INTO queen.log_partitions (id, queue_id, name, oldest_live_at) \
                 VALUES ($1, $2, $3, '2024-01-01T00:00:00Z')",
                &[&Uuid::now_v7(), &queue_id, &name],
            )
            .await
            .unwrap();
    }
    client
        .batch_execute("DROP INDEX queen.idx_log_partitions_queue_oldest_live")
        .await
        .unwrap();
    let err = client
        .batch_execute(
            "CREATE UNIQUE INDEX CONCURRENTLY idx_log_partitions_queue_oldest_live \
             ON queen.log_partitions (queue_id, oldest_live_at) WHERE oldest_live_at IS NOT NULL",
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::UNIQUE_VIOLATION));
    let oldest_live = |rows: Vec<String>| {
        rows.into_iter()
            .find(|index| index.starts_with("idx_log_partitions_queue_oldest_live|"))
    };
    assert_eq!(
        oldest_live(texts(&client, INDEXES_SQL, "queen.log_partitions").await).as_deref(),
        Some("idx_log_partitions_queue_oldest_live|INVALID|CREATE UNIQUE INDEX idx_log_partitions_queue_oldest_live ON queen.log_partitions USING btree (queue_id, oldest_live_at) WHERE (oldest_live_at IS NOT NULL)")
    );

    apply(&client).await;

    assert_eq!(
        oldest_live(texts(&client, INDEXES_SQL, "queen.log_partitions").await).as_deref(),
        Some("idx_log_partitions_queue_oldest_live|valid|CREATE INDEX idx_log_partitions_queue_oldest_live ON queen.log_partitions USING btree (queue_id, oldest_live_at) WHERE (oldest_live_at IS NOT NULL)")
    );
}

#[tokio::test]
async fn reapply_takes_no_lock_on_queen_tables() {
    let db = TestDb::new().await;
    let holder = db.client().await;
    // Hold the strongest table lock there is on every Queen table: a re-apply
    // that needed any lock on one of them would block here (and on a live
    // broker, would stall pushes and pops).
    holder
        .batch_execute(
            "BEGIN;
             LOCK TABLE queen.queues, queen.consumer_groups_metadata, queen.log_partitions,
                        queen.log_segments, queen.log_txns, queen.log_consumers, queen.log_dlq,
                        queen.message_traces, queen.system_state, queen.database_identity,
                        queen.stats_queue_minute, queen.stats_broker_minute,
                        queen.figures_partition, queen.figures_queue, queen.figures_dirty,
                        queen.figures_build, queen.figures_cursor, queen.figures_group,
                        queen.figures_cursor_build, queen.figures_brokers, queen.figures_verify,
                        queen_streams.queries, queen_streams.state
                 IN ACCESS EXCLUSIVE MODE;",
        )
        .await
        .unwrap();
    let client = db.client().await;
    tokio::time::timeout(Duration::from_secs(20), apply_schema(&client))
        .await
        .expect("re-applying the schema waited for a table lock")
        .unwrap();
    holder.batch_execute("COMMIT").await.unwrap();
}
