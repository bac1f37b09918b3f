//! On a Citus cluster (`cargo xtask citus test`): the hot operations run
//! single-shard statements only. With `citus.multi_task_query_log_level =
//! 'error'` on the database, Citus refuses every statement it would split
//! over several shards, so an operation below fails if any statement of its
//! procedures would visit more than one shard. On plain PostgreSQL there are
//! no shards to check: the test says so and returns, and `cargo xtask ci`
//! skips it (`on_citus::`).

use queen_engine::EngineConfig;
use queen_testkit::TestDb;
use queen_tests::TestBroker;
use serde_json::json;

use crate::support::{ack_all, ack_one, data, expect_status, messages, pop, push, push_items};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_pop_ack_and_lease_extension_route_to_one_shard() {
    if std::env::var_os(queen_testkit::CITUS_VAR).is_none() {
        eprintln!(
            "on_citus: not on Citus ({} unset), nothing to check",
            queen_testkit::CITUS_VAR
        );
        return;
    }
    let db = TestDb::new().await;
    db.client()
        .await
        .batch_execute(&format!(
            "ALTER DATABASE {} SET citus.multi_task_query_log_level = 'error'",
            db.name()
        ))
        .await
        .unwrap();
    // The control: on a new session a statement over every shard is refused,
    // so what follows would fail on one.
    let refused = db
        .client()
        .await
        .query_one("SELECT count(*) FROM queen.log_partitions", &[])
        .await
        .expect_err("a multi-shard statement ran under the setting");
    let refused = queen_sql::error_chain(&refused);
    assert!(refused.contains("multi-task"), "{refused}");
    let broker = TestBroker::serve(db, EngineConfig::default()).await;

    // A push to one partition, then one request over two partitions (one
    // distributed transaction, each statement on its partition's shard).
    push(&broker, "routed", "a", &[json!(0), json!(1)]).await;
    push_items(
        &broker,
        vec![
            json!({"queue": "routed", "partition": "a", "payload": 2}),
            json!({"queue": "routed", "partition": "b", "payload": 10}),
        ],
    )
    .await;

    // A leased pop of a named partition, its lease extended, its batch acked.
    let popped = pop(&broker, "/api/v1/pop/queue/routed/partition/a?batch=2")
        .await
        .expect("partition a has messages");
    assert_eq!(data(&popped), [json!(0), json!(1)]);
    let lease = popped["leaseId"].as_str().unwrap().to_owned();
    let reply = broker
        .client
        .post_json(
            &format!("/api/v1/lease/{lease}/extend"),
            &json!({"seconds": 30}),
        )
        .await;
    expect_status(&reply, 200);
    assert_eq!(reply.json()["success"], json!(true), "{:?}", reply.json());
    let acked = ack_all(&broker, &popped, "completed", None).await;
    assert!(
        acked.iter().all(|a| a["success"] == json!(true)),
        "{acked:?}"
    );

    // A failed ack (the retry hold), then the redelivered message acked alone
    // by its transaction id.
    let popped = pop(&broker, "/api/v1/pop/queue/routed/partition/a?batch=1")
        .await
        .expect("partition a has one more");
    assert_eq!(data(&popped), [json!(2)]);
    let failed = ack_all(&broker, &popped, "failed", None).await;
    assert_eq!(failed[0]["success"], json!(true), "{failed:?}");
    let again = pop(&broker, "/api/v1/pop/queue/routed/partition/a?batch=1")
        .await
        .expect("the failed message comes back");
    assert_eq!(data(&again), [json!(2)]);
    let acked = ack_one(&broker, &messages(&again)[0], "completed", None).await;
    assert_eq!(acked["success"], json!(true), "{acked:?}");

    // A consumer group's first pop of a named partition (its cursor created)
    // with auto-ack.
    let grouped = pop(
        &broker,
        "/api/v1/pop/queue/routed/partition/b?consumerGroup=g&autoAck=true",
    )
    .await
    .expect("partition b has a message for g");
    assert_eq!(data(&grouped), [json!(10)]);
    broker.stop().await;
}
