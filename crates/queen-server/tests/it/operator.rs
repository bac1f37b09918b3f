//! The binary's wiring of the operator's database features: a migration
//! copies from the database `QUEEN_DATABASE_URL` names, and
//! `QUEEN_DATABASE_READ_URL` serves the admin views. The features
//! themselves are tested in process (`tests/it/migration.rs`,
//! `tests/it/replica.rs`).

use std::time::Duration;

use queen_testkit::TestDb;
use serde_json::json;

use crate::harness::Broker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_migrates_its_own_database_and_reads_views_from_the_replica() {
    let scratch = tempfile::tempdir().unwrap();
    let (primary, replica, copy) = (
        TestDb::new().await,
        TestDb::new().await,
        TestDb::empty().await,
    );
    replica
        .client()
        .await
        .batch_execute(
            "INSERT INTO queen.queues (id, name) VALUES (gen_random_uuid(), 'on-replica')",
        )
        .await
        .unwrap();
    let broker = Broker::start(
        scratch.path(),
        &[
            ("QUEEN_DATABASE_URL", &primary.url()),
            ("QUEEN_DATABASE_READ_URL", &replica.url()),
        ],
    )
    .await;
    let client = &broker.client;
    let pushed = client
        .post_json(
            "/api/v1/push",
            &json!({"items": [{"queue": "on-primary", "payload": {"n": 1}}]}),
        )
        .await;
    assert_eq!(pushed.status, 201);
    let queues = client.get("/api/v1/resources/queues").await.json();
    assert_eq!(queues["queues"][0]["name"], "on-replica", "{queues}");
    assert_eq!(queues["queues"].as_array().unwrap().len(), 1, "{queues}");

    let socket = match copy.config().get_hosts().first() {
        Some(tokio_postgres::config::Host::Unix(dir)) => dir.display().to_string(),
        other => panic!("{other:?}"),
    };
    let target = json!({"host": socket, "port": 5432, "database": copy.name(), "user": "postgres"});
    let started = client.post_json("/api/v1/migration/start", &target).await;
    assert_eq!(started.status, 202);
    let done = client.migration_ended(Duration::from_secs(60)).await;
    assert_eq!(done["status"], "complete", "{done}");
    let validation = client
        .post_json("/api/v1/migration/validate", &target)
        .await
        .json();
    assert_eq!(validation["allMatch"], true, "{validation}");
    let copied: i64 = copy
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM queen.queues WHERE name = 'on-primary'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(copied, 1, "the primary was copied, not the replica");

    let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");
}
