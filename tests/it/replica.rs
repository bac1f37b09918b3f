//! A read replica (`EngineConfig::read_pool`, `QUEEN_DATABASE_READ_URL`):
//! the admin and consumer-group views read it; pushes, pops, acks and
//! `postgres-stats` use the primary. The "replica" here is a second
//! database seeded with other queues and made read-only like a standby,
//! so every answer shows which database served it.

use queen_engine::EngineConfig;
use queen_testkit::TestDb;
use queen_tests::TestBroker;
use serde_json::{json, Value};

use crate::support::{ack_all, configure, expect_status, pop, push};

async fn get(broker: &TestBroker, path: &str) -> Value {
    let reply = broker.client.get(path).await;
    expect_status(&reply, 200);
    reply.json()
}

/// The queue names `/resources/queues` lists.
async fn queue_names(broker: &TestBroker) -> Vec<Value> {
    get(broker, "/api/v1/resources/queues").await["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|queue| queue["name"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_views_read_the_replica_and_everything_else_the_primary() {
    // The "replica": its own queue and group, then read-only.
    let replica = TestDb::new().await;
    let seeder = TestBroker::serve(replica.clone(), EngineConfig::default()).await;
    push(&seeder, "on-replica", "p", &[json!({"from": "replica"})]).await;
    pop(
        &seeder,
        "/api/v1/pop/queue/on-replica?consumerGroup=replica-group",
    )
    .await
    .unwrap();
    seeder.stop().await;
    replica
        .client()
        .await
        .batch_execute(&format!(
            "ALTER DATABASE {} SET default_transaction_read_only = on",
            replica.name()
        ))
        .await
        .unwrap();

    let primary = TestDb::new().await;
    let broker = TestBroker::serve(
        primary.clone(),
        EngineConfig {
            read_pool: Some(replica.pool(4)),
            ..EngineConfig::default()
        },
    )
    .await;
    // Writes and pops go to the primary.
    configure(&broker, "on-primary", json!({})).await;
    push(&broker, "on-primary", "p", &[json!({"from": "primary"})]).await;
    let popped = pop(
        &broker,
        "/api/v1/pop/queue/on-primary?consumerGroup=primary-group",
    )
    .await
    .unwrap();
    assert_eq!(popped["messages"][0]["data"], json!({"from": "primary"}));
    ack_all(&broker, &popped, "completed", Some("primary-group")).await;

    // The views answer from the replica.
    assert_eq!(queue_names(&broker).await, [json!("on-replica")]);
    let overview = get(&broker, "/api/v1/resources/overview").await;
    assert_eq!(overview["queues"], 1, "{overview}");
    let groups = get(&broker, "/api/v1/consumer-groups").await;
    let names: Vec<&Value> = groups
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["name"])
        .collect();
    assert_eq!(names, [&json!("replica-group")], "{groups}");
    let missing = broker
        .client
        .get("/api/v1/resources/queues/on-primary")
        .await;
    assert_eq!(missing.status, 404, "the replica has no such queue");
    // postgres-stats describes the primary's server and database.
    let stats = get(&broker, "/api/v1/analytics/postgres-stats").await;
    assert_eq!(stats["database"]["name"], primary.name());

    // Without a replica, the same database answers the views.
    let plain = TestBroker::serve(primary.clone(), EngineConfig::default()).await;
    assert_eq!(queue_names(&plain).await, [json!("on-primary")]);
    plain.stop().await;
    broker.stop().await;
}
