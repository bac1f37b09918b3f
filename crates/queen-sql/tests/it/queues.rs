//! `queen_sql::queues::configure_queue` and `queen.configure_queue_v2`.

use queen_sql::queues::{configure_queue, Configured, QueueSettings};
use queen_testkit::TestDb;
use uuid::Uuid;

/// Every option column of a queue, read back typed.
const SETTINGS_SQL: &str = "\
SELECT lease_time, retry_limit, retry_delay, max_queue_size, ttl, priority,
       delayed_processing, window_buffer, retention_enabled, retention_seconds,
       completed_retention_seconds, max_wait_time_seconds, dead_letter_queue,
       dlq_after_max_retries, dlq_enabled, encryption_enabled, min_pop_wait_time,
       dedup_window_seconds, retry_delay_applied
  FROM queen.queues WHERE id = $1";

async fn stored_settings(client: &tokio_postgres::Client, queue_id: Uuid) -> QueueSettings {
    let row = client.query_one(SETTINGS_SQL, &[&queue_id]).await.unwrap();
    QueueSettings {
        lease_time: row.get("lease_time"),
        retry_limit: row.get("retry_limit"),
        retry_delay: row.get("retry_delay"),
        max_queue_size: row.get("max_queue_size"),
        ttl: row.get("ttl"),
        priority: row.get("priority"),
        delayed_processing: row.get("delayed_processing"),
        window_buffer: row.get("window_buffer"),
        retention_enabled: row.get("retention_enabled"),
        retention_seconds: row.get("retention_seconds"),
        completed_retention_seconds: row.get("completed_retention_seconds"),
        max_wait_time_seconds: row.get("max_wait_time_seconds"),
        dead_letter_queue: row.get("dead_letter_queue"),
        dlq_after_max_retries: row.get("dlq_after_max_retries"),
        dlq_enabled: row.get("dlq_enabled"),
        encryption_enabled: row.get("encryption_enabled"),
        min_pop_wait_time: row.get("min_pop_wait_time"),
        dedup_window_seconds: row.get("dedup_window_seconds"),
        retry_delay_applied: row.get("retry_delay_applied"),
    }
}

/// Every setting moved off the configure defaults, each to a distinct value.
fn distinct_settings() -> QueueSettings {
    QueueSettings {
        lease_time: 11,
        retry_limit: 12,
        retry_delay: 13,
        max_queue_size: 14,
        ttl: 15,
        priority: 16,
        delayed_processing: 17,
        window_buffer: 18,
        retention_enabled: true,
        retention_seconds: 19,
        completed_retention_seconds: 20,
        max_wait_time_seconds: 21,
        dead_letter_queue: true,
        dlq_after_max_retries: true,
        dlq_enabled: false,
        encryption_enabled: true,
        min_pop_wait_time: 22,
        dedup_window_seconds: 23,
        retry_delay_applied: true,
    }
}

/// `(name, id)` of every partition of the queue.
async fn partitions(client: &tokio_postgres::Client, queue_id: Uuid) -> Vec<(String, Uuid)> {
    client
        .query(
            "SELECT name, id FROM queen.log_partitions WHERE queue_id = $1 ORDER BY name",
            &[&queue_id],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

#[tokio::test]
async fn column_defaults_are_the_schema_defaults() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let queue_id = Uuid::now_v7();
    client
        .execute(
            "INSERT INTO queen.queues (id, name) VALUES ($1, 'implicit')",
            &[&queue_id],
        )
        .await
        .unwrap();
    assert_eq!(
        stored_settings(&client, queue_id).await,
        QueueSettings::COLUMN_DEFAULTS
    );
    // The truth rule: only the lease differs between the two sets of defaults.
    assert_eq!(
        QueueSettings {
            lease_time: 60,
            ..QueueSettings::CONFIGURE_DEFAULTS
        },
        QueueSettings::COLUMN_DEFAULTS
    );
}

#[tokio::test]
async fn configure_creates_the_queue_and_its_default_partition() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let settings = distinct_settings();
    let configured = configure_queue(&client, "default", "orders.eu", "orders", "eu", &settings)
        .await
        .unwrap();
    assert_eq!(
        stored_settings(&client, configured.queue_id).await,
        settings
    );
    let identity = client
        .query_one(
            "SELECT tenant_id, name, namespace, task FROM queen.queues WHERE id = $1",
            &[&configured.queue_id],
        )
        .await
        .unwrap();
    let identity: (String, String, String, String) = (
        identity.get(0),
        identity.get(1),
        identity.get(2),
        identity.get(3),
    );
    assert_eq!(
        identity,
        (
            "default".to_owned(),
            "orders.eu".to_owned(),
            "orders".to_owned(),
            "eu".to_owned()
        )
    );
    assert_eq!(
        partitions(&client, configured.queue_id).await,
        [("Default".to_owned(), configured.partition_id)]
    );
    // The queue id is broker-minted (UUIDv7); the partition's is derived
    // from the queue's id and its name (partition_id_v1, a UUIDv8).
    assert_eq!(configured.queue_id.get_version_num(), 7);
    let derived: uuid::Uuid = client
        .query_one(
            "SELECT queen.partition_id_v1($1, 'Default')",
            &[&configured.queue_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(configured.partition_id, derived);
    assert_eq!(configured.partition_id.get_version_num(), 8);
}

#[tokio::test]
async fn reconfigure_replaces_everything_but_the_ids() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let first = configure_queue(&client, "default", "q", "a", "b", &distinct_settings())
        .await
        .unwrap();
    let second = configure_queue(
        &client,
        "default",
        "q",
        "",
        "",
        &QueueSettings::CONFIGURE_DEFAULTS,
    )
    .await
    .unwrap();
    assert_eq!(second, first);
    assert_eq!(
        stored_settings(&client, first.queue_id).await,
        QueueSettings::CONFIGURE_DEFAULTS
    );
    let labels = client
        .query_one(
            "SELECT namespace, task FROM queen.queues WHERE id = $1",
            &[&first.queue_id],
        )
        .await
        .unwrap();
    assert_eq!(
        (labels.get::<_, String>(0), labels.get::<_, String>(1)),
        (String::new(), String::new())
    );
    assert_eq!(partitions(&client, first.queue_id).await.len(), 1);
}

#[tokio::test]
async fn configure_adopts_a_queue_created_without_it() {
    let db = TestDb::new().await;
    let client = db.client().await;
    // As a push would leave it: the row with column defaults, and its Default
    // partition; then a second queue with no partition at all.
    let queue_id = Uuid::now_v7();
    let partition_id = Uuid::now_v7();
    let bare_queue_id = Uuid::now_v7();
    client
        .execute(
            "INSERT INTO queen.queues (id, name) VALUES ($1, 'pushed'), ($2, 'bare')",
            &[&queue_id, &bare_queue_id],
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

    let settings = distinct_settings();
    let configured = configure_queue(&client, "default", "pushed", "", "", &settings)
        .await
        .unwrap();
    assert_eq!(
        configured,
        Configured {
            queue_id,
            partition_id
        }
    );
    assert_eq!(stored_settings(&client, queue_id).await, settings);

    let bare = configure_queue(&client, "default", "bare", "", "", &settings)
        .await
        .unwrap();
    assert_eq!(bare.queue_id, bare_queue_id);
    assert_eq!(
        partitions(&client, bare_queue_id).await,
        [("Default".to_owned(), bare.partition_id)]
    );
}

#[tokio::test]
async fn tenants_hold_separate_queues_of_one_name() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let settings = QueueSettings::CONFIGURE_DEFAULTS;
    let first = configure_queue(&client, "a", "q", "", "", &settings)
        .await
        .unwrap();
    let second = configure_queue(&client, "b", "q", "", "", &settings)
        .await
        .unwrap();
    assert_ne!(first.queue_id, second.queue_id);
    assert_ne!(first.partition_id, second.partition_id);
}

#[tokio::test]
async fn concurrent_configures_of_a_new_queue_agree_on_its_ids() {
    let db = TestDb::new().await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let client = db.client().await;
        tasks.spawn(async move {
            configure_queue(
                &client,
                "default",
                "raced",
                "",
                "",
                &QueueSettings::CONFIGURE_DEFAULTS,
            )
            .await
            .unwrap()
        });
    }
    let results = tasks.join_all().await;
    assert!(
        results.iter().all(|result| *result == results[0]),
        "{results:?}"
    );
    let client = db.client().await;
    let n_queues: i64 = client
        .query_one("SELECT count(*) FROM queen.queues", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n_queues, 1);
    assert_eq!(
        partitions(&client, results[0].queue_id).await,
        [("Default".to_owned(), results[0].partition_id)]
    );
}
