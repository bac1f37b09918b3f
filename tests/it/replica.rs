//! A read replica (`EngineConfig::read_pool`, `QUEEN_DATABASE_READ_URL`):
//! every admin and consumer-group view reads it; pushes, pops, acks and
//! `postgres-stats` use the primary. The "replica" here is a second
//! database seeded with other queues, groups, traces and statistics rows
//! (every name holding `standby`) and made read-only like a standby, while
//! the primary's hold `upstream`: so every answer shows which database
//! served it.

use queen_engine::EngineConfig;
use queen_testkit::TestDb;
use queen_tests::TestBroker;
use serde_json::{json, Value};

use crate::support::{ack_all, expect_status, messages, pop, push};

async fn get(broker: &TestBroker, path: &str) -> Value {
    let reply = broker.client.get(path).await;
    expect_status(&reply, 200);
    reply.json()
}

/// On `broker`'s database: queue `<tag>-q` (namespace `<tag>-ns`, task
/// `<tag>-task`) with `pushed` messages, group `<tag>-group` having consumed
/// one of them, a trace `<tag>-trace` of that message, and this minute's
/// statistics rows, written by `<tag>-host`. Answers the traced message's
/// (partition id, transaction id).
async fn seed(broker: &TestBroker, tag: &str, pushed: i64) -> (String, String) {
    let queue = format!("{tag}-q");
    let reply = broker
        .client
        .post_json(
            "/api/v1/configure",
            &json!({"queue": queue, "namespace": format!("{tag}-ns"),
                    "task": format!("{tag}-task"), "options": {}}),
        )
        .await;
    expect_status(&reply, 200);
    let payloads: Vec<Value> = (0..pushed).map(|n| json!({"from": tag, "n": n})).collect();
    push(broker, &queue, "p", &payloads).await;
    let path = format!("/api/v1/pop/queue/{queue}?consumerGroup={tag}-group&batch=1");
    let popped = pop(broker, &path).await.expect("a message to pop");
    assert_eq!(popped["messages"][0]["data"]["from"], tag);
    ack_all(broker, &popped, "completed", Some(&format!("{tag}-group"))).await;
    let message = messages(&popped)[0].clone();
    let reply = broker
        .client
        .post_json(
            "/api/v1/traces",
            &json!({"transactionId": message["transactionId"], "partitionId": message["partitionId"],
                    "traceNames": [format!("{tag}-trace")], "data": {"from": tag}}),
        )
        .await;
    expect_status(&reply, 200);
    broker.engine.observe().write_stats().await.unwrap();
    // The rows name the host that wrote them; both brokers run on this one.
    broker
        .sql()
        .await
        .batch_execute(&format!(
            "UPDATE queen.stats_broker_minute SET hostname = '{tag}-host', broker = '{tag}-host:1';
             UPDATE queen.stats_queue_minute SET broker = '{tag}-host:1'"
        ))
        .await
        .unwrap();
    (
        message["partitionId"].as_str().unwrap().to_owned(),
        message["transactionId"].as_str().unwrap().to_owned(),
    )
}

/// What a view's body must show.
type Check = fn(&Value) -> bool;

/// The body names `name` and nothing of the primary's.
fn names(body: &Value, name: &str) -> bool {
    let text = body.to_string();
    text.contains(&format!("\"{name}\"")) && !text.contains("upstream")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_view_reads_the_replica_and_everything_else_the_primary() {
    let stats_off = EngineConfig {
        stats_interval: None,
        ..EngineConfig::default()
    };
    // The "replica": three messages, one consumed, a retention figure only
    // it has; then read-only.
    let replica = TestDb::new().await;
    let seeder = TestBroker::serve(replica.clone(), stats_off.clone()).await;
    let (partition, transaction) = seed(&seeder, "standby", 3).await;
    seeder.stop().await;
    let replica_sql = replica.client().await;
    replica_sql
        .batch_execute(&format!(
            "UPDATE queen.stats_queue_minute SET retention_msgs = 7;
             ALTER DATABASE {} SET default_transaction_read_only = on",
            replica.name()
        ))
        .await
        .unwrap();

    // The primary: one message of another queue, another group, trace and
    // host. Its writes go to the primary.
    let primary = TestDb::new().await;
    let broker = TestBroker::serve(
        primary.clone(),
        EngineConfig {
            read_pool: Some(replica.pool(4)),
            ..stats_off.clone()
        },
    )
    .await;
    seed(&broker, "upstream", 2).await;

    // Every view the read pool serves, with what only the replica can
    // answer: its names and none of the primary's, and a figure only its
    // rows give where a view names nothing.
    let trace = format!("/api/v1/traces/{partition}/{transaction}");
    let views: [(&str, Check); 21] = [
        ("/api/v1/resources/overview", |b| {
            b["messages"]["total"] == 3
        }),
        ("/api/v1/resources/queues", |b| names(b, "standby-q")),
        ("/api/v1/resources/queues/standby-q", |b| {
            names(b, "standby-q")
        }),
        ("/api/v1/resources/namespaces", |b| names(b, "standby-ns")),
        ("/api/v1/resources/tasks", |b| names(b, "standby-task")),
        ("/api/v1/status", |b| {
            names(b, "standby-q") && b["messages"]["total"] == 3
        }),
        ("/api/v1/status/queues", |b| names(b, "standby-q")),
        ("/api/v1/status/queues/standby-q", |b| names(b, "standby-q")),
        ("/api/v1/status/analytics", |b| b["totals"]["pushed"] == 3),
        ("/api/v1/analytics/system-metrics", |b| {
            names(b, "standby-host") && b["replicaCount"] == 1
        }),
        ("/api/v1/analytics/worker-metrics", |b| {
            names(b, "standby-host")
        }),
        ("/api/v1/analytics/queue-lag", |b| names(b, "standby-q")),
        ("/api/v1/analytics/queue-ops", |b| names(b, "standby-q")),
        ("/api/v1/analytics/queue-parked-replicas", |b| {
            names(b, "standby-host:1")
        }),
        ("/api/v1/analytics/retention", |b| {
            b["totals"]["retentionMsgs"] == 7
        }),
        ("the message's traces", |b| names(b, "standby-trace")),
        ("/api/v1/traces/by-name/standby-trace", |b| {
            names(b, "standby-q")
        }),
        ("/api/v1/traces/names", |b| names(b, "standby-trace")),
        ("/api/v1/consumer-groups", |b| names(b, "standby-group")),
        ("/api/v1/consumer-groups/lagging?minLagSeconds=0", |b| {
            names(b, "standby-group")
        }),
        ("/api/v1/consumer-groups/standby-group", |b| {
            names(b, "standby-q")
        }),
    ];
    let mut wrong = Vec::new();
    for (path, from_replica) in views {
        let path = if path.starts_with('/') {
            path
        } else {
            trace.as_str()
        };
        let body = get(&broker, path).await;
        if !from_replica(&body) {
            wrong.push(format!("{path}: {body}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "not answered from the replica:\n{}",
        wrong.join("\n")
    );

    // What the replica lacks is missing from the views.
    for missing in [
        "/api/v1/resources/queues/upstream-q",
        "/api/v1/status/queues/upstream-q",
    ] {
        let reply = broker.client.get(missing).await;
        assert_eq!(
            reply.status, 404,
            "{missing}: the replica has no such queue"
        );
    }
    // postgres-stats describes the primary's server and database.
    let stats = get(&broker, "/api/v1/analytics/postgres-stats").await;
    assert_eq!(stats["database"]["name"], primary.name());

    // Without a replica, the same database answers the views.
    let plain = TestBroker::serve(primary.clone(), stats_off).await;
    let queues = get(&plain, "/api/v1/resources/queues").await;
    assert_eq!(queues["queues"][0]["name"], "upstream-q", "{queues}");
    let names = get(&plain, "/api/v1/traces/names").await;
    assert_eq!(names["trace_names"][0]["trace_name"], "upstream-trace");
    plain.stop().await;
    broker.stop().await;
}
