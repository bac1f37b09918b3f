//! Issue 15, items 6 and 7: maintenance mode and the push spool, in process
//! (the outage half, with PostgreSQL really stopped and the broker
//! SIGKILLed, is `crates/queen-server/tests/it/faults.rs`).
//!
//! While push maintenance is on, pushes are answered `buffered` from a local
//! fsync'd spool and consumers see nothing new; turned off, the spool drains
//! to PostgreSQL in order and idempotently. The flags are persisted, so
//! every broker on the database follows them.

use std::path::Path;
use std::time::{Duration, Instant};

use queen_engine::{EngineConfig, SpoolConfig};
use queen_testkit::TestDb;
use queen_tests::TestBroker;
use serde_json::{json, Value};

use crate::support::{
    ack_all, data, expect_status, pop, push, push_items, select_i64, serve_unreachable, stored,
    until_drained,
};

/// Settings of a broker with a spool in `dir` that follows the flags every
/// 100 ms.
fn spooled(dir: &Path, max_bytes: u64) -> EngineConfig {
    EngineConfig {
        spool: Some(SpoolConfig {
            dir: dir.to_owned(),
            max_bytes,
            push_timeout: Duration::from_secs(5),
            adopt: None,
            database: None,
        }),
        maintenance_refresh: Duration::from_millis(100),
        ..EngineConfig::default()
    }
}

async fn set_maintenance(broker: &TestBroker, path: &str, enabled: bool) -> Value {
    let reply = broker
        .client
        .post_json(path, &json!({ "enabled": enabled }))
        .await;
    expect_status(&reply, 200);
    reply.json()
}

/// Pop and ack everything of `queue` (queue mode); payloads in order.
async fn drain_queue(broker: &TestBroker, queue: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    while let Some(popped) = pop(
        broker,
        &format!("/api/v1/pop/queue/{queue}?batch=100&wait=false"),
    )
    .await
    {
        seen.extend(data(&popped));
        ack_all(broker, &popped, "completed", None).await;
    }
    seen
}

fn items(queue: &str, from: usize, to: usize, with_ids: bool) -> Vec<Value> {
    (from..to)
        .map(|i| {
            let mut item = json!({"queue": queue, "partition": "p", "payload": {"n": i}});
            if with_ids {
                item["transactionId"] = json!(format!("t-{i}"));
            }
            item
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_buffers_pushes_and_drains_them_in_order_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(spooled(dir.path(), 1 << 30)).await;
    push_items(&broker, items("m", 0, 5, true)).await;

    let on = set_maintenance(&broker, "/api/v1/system/maintenance", true).await;
    assert_eq!(on["maintenanceMode"], true);
    // Client transaction ids and broker-generated ones, in three requests.
    let mut answered = Vec::new();
    for (from, to, ids) in [(5, 15, true), (15, 25, false), (25, 35, true)] {
        let results = push_items(&broker, items("m", from, to, ids)).await;
        for (offset, result) in results.iter().enumerate() {
            assert_eq!(result["status"], "buffered", "{result}");
            assert_eq!(result["queue"], "m");
            assert_eq!(result["partition"], "p");
            assert_eq!(result["index"], offset);
            assert!(result["transactionId"]
                .as_str()
                .is_some_and(|t| !t.is_empty()));
        }
        answered.extend(results);
    }
    let state = broker.client.get("/api/v1/system/maintenance").await.json();
    assert_eq!(state["maintenanceMode"], true);
    assert_eq!(state["bufferedMessages"], 30);
    assert_eq!(state["bufferHealthy"], true);
    assert_eq!(state["bufferStats"]["pendingCount"], 30);
    assert_eq!(state["bufferStats"]["dbHealthy"], true);
    // Consumers see nothing new, and nothing new is in the database.
    assert_eq!(stored(&broker, "m").await, 5);
    let before: Vec<Value> = (0..5).map(|n| json!({ "n": n })).collect();
    assert_eq!(drain_queue(&broker, "m").await, before);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(stored(&broker, "m").await, 5, "drained during maintenance");

    let off = set_maintenance(&broker, "/api/v1/system/maintenance", false).await;
    assert_eq!(off["maintenanceMode"], false);
    let state = until_drained(&broker, Duration::from_secs(12)).await;
    assert_eq!(state["bufferStats"]["failedCount"], 0);
    let after: Vec<Value> = (5..35).map(|n| json!({ "n": n })).collect();
    assert_eq!(drain_queue(&broker, "m").await, after);
    assert_eq!(stored(&broker, "m").await, 35);
    // Stored under the transaction ids the buffered answers named.
    let sql = broker.sql().await;
    let spooled_ids = select_i64(
        &sql,
        "SELECT count(*) FROM queen.log_txns t JOIN queen.log_partitions p \
           ON p.id = t.partition_id JOIN queen.queues q ON q.id = p.queue_id \
          WHERE q.name = 'm'",
    )
    .await;
    assert!(spooled_ids >= 2, "sidecar rows: {spooled_ids}");
    let again = push_items(
        &broker,
        answered
            .iter()
            .map(|r| json!({"queue": "m", "partition": "p", "transactionId": r["transactionId"], "payload": 0}))
            .collect(),
    )
    .await;
    assert!(
        again.iter().all(|r| r["status"] == "duplicate"),
        "{again:?}"
    );

    // Pushes go straight to the database again.
    let direct = push(&broker, "m", "p", &[json!("direct")]).await;
    assert_eq!(direct[0]["status"], "queued");
    for bad in [json!({}), json!({"enabled": "yes"}), json!({"enabled": 1})] {
        let reply = broker
            .client
            .post_json("/api/v1/system/maintenance", &bad)
            .await;
        assert_eq!(reply.status, 400, "{bad}");
        assert_eq!(reply.json()["error"], "enabled (boolean) is required");
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flags_are_persisted_and_every_broker_follows_them() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = TestBroker::start_with(spooled(a_dir.path(), 1 << 30)).await;
    let b = TestBroker::serve(a.db.clone(), spooled(b_dir.path(), 1 << 30)).await;
    push(&a, "shared", "p", &[json!("seen")]).await;

    set_maintenance(&a, "/api/v1/system/maintenance", true).await;
    set_maintenance(&a, "/api/v1/system/maintenance/pop", true).await;
    let sql = a.sql().await;
    let rows = select_i64(
        &sql,
        "SELECT count(*) FROM queen.system_state WHERE (value->>'enabled')::boolean",
    )
    .await;
    assert_eq!(rows, 2);
    // B follows within its refresh period.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let state = b.client.get("/api/v1/system/maintenance").await.json();
        if state["maintenanceMode"] == true && state["popMaintenanceMode"] == true {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "broker B did not follow: {state}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let on_b = push(&b, "shared", "p", &[json!("via b")]).await;
    assert_eq!(on_b[0]["status"], "buffered");
    let popped = b
        .client
        .get("/api/v1/pop/queue/shared?wait=true&timeout=2000")
        .await;
    assert_eq!(popped.status, 204, "pop maintenance answers at once");
    let pop_state = b.client.get("/api/v1/system/maintenance/pop").await.json();
    assert_eq!(pop_state["popMaintenanceMode"], true);

    set_maintenance(&a, "/api/v1/system/maintenance/pop", false).await;
    set_maintenance(&a, "/api/v1/system/maintenance", false).await;
    until_drained(&b, Duration::from_secs(12)).await;
    assert_eq!(
        drain_queue(&a, "shared").await,
        [json!("seen"), json!("via b")]
    );
    b.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_refuses_with_503_and_loses_nothing_it_answered() {
    let dir = tempfile::tempdir().unwrap();
    // Room for about one 20-item request.
    let broker = TestBroker::start_with(spooled(dir.path(), 1500)).await;
    set_maintenance(&broker, "/api/v1/system/maintenance", true).await;
    let first = push_items(&broker, items("full", 0, 20, true)).await;
    assert!(first.iter().all(|r| r["status"] == "buffered"));
    let refused = broker
        .client
        .post_json(
            "/api/v1/push",
            &json!({ "items": items("full", 20, 40, true) }),
        )
        .await;
    assert_eq!(refused.status, 503);
    assert_eq!(
        refused.json()["error"],
        "the push spool is full (QUEEN_SPOOL_MAX_MB); retry later"
    );
    assert_eq!(
        refused.headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    set_maintenance(&broker, "/api/v1/system/maintenance", false).await;
    until_drained(&broker, Duration::from_secs(12)).await;
    let expected: Vec<Value> = (0..20).map(|n| json!({ "n": n })).collect();
    assert_eq!(drain_queue(&broker, "full").await, expected);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_broker_replays_its_spool_without_duplicating_what_was_stored() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new().await;
    let first = TestBroker::serve(db.clone(), spooled(dir.path(), 1 << 30)).await;
    set_maintenance(&first, "/api/v1/system/maintenance", true).await;
    let results = push_items(&first, items("replay", 0, 10, true)).await;
    assert!(results.iter().all(|r| r["status"] == "buffered"));
    first.engine.shutdown().await;
    first.stop().await;

    // Half of them reach the database another way before the replay (as a
    // drain that pushed a chunk and crashed before recording it would).
    let other = TestBroker::serve(db.clone(), EngineConfig::default()).await;
    set_maintenance(&other, "/api/v1/system/maintenance", false).await;
    push_items(&other, items("replay", 0, 5, true)).await;
    other.stop().await;

    let restarted = TestBroker::serve(db.clone(), spooled(dir.path(), 1 << 30)).await;
    let state = until_drained(&restarted, Duration::from_secs(12)).await;
    assert_eq!(state["bufferStats"]["failedCount"], 0);
    assert_eq!(stored(&restarted, "replay").await, 10);
    let expected: Vec<Value> = (0..10).map(|n| json!({ "n": n })).collect();
    assert_eq!(drain_queue(&restarted, "replay").await, expected);
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|name| name != "LOCK" && name != "DATABASE")
        .collect();
    assert!(left.is_empty(), "drained logs are removed: {left:?}");
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_spool_maintenance_refuses_pushes_instead_of_storing_them() {
    let broker = TestBroker::start().await;
    set_maintenance(&broker, "/api/v1/system/maintenance", true).await;
    let refused = broker
        .client
        .post_json(
            "/api/v1/push",
            &json!({ "items": items("none", 0, 1, true) }),
        )
        .await;
    assert_eq!(refused.status, 503);
    assert_eq!(stored(&broker, "none").await, 0);
    let state = broker.client.get("/api/v1/system/maintenance").await.json();
    assert_eq!(state["bufferHealthy"], false);
    set_maintenance(&broker, "/api/v1/system/maintenance", false).await;
    broker.stop().await;
}

/// Item 7 in process: with PostgreSQL unreachable, a push is spooled and
/// answered `buffered`, a pop answers 204 after its wait, an ack 503 with
/// `Retry-After`, and the spool's status says what it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_database_unreachable_pushes_are_spooled_pops_are_empty_and_acks_503() {
    let dir = tempfile::tempdir().unwrap();
    let (client, unreachable) = serve_unreachable(spooled(dir.path(), 1 << 30)).await;

    let pushed = client
        .post_json(
            "/api/v1/push",
            &json!({ "items": items("down", 0, 3, false) }),
        )
        .await;
    assert_eq!(pushed.status, 201);
    let results = pushed.json();
    assert!(
        results
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "buffered"),
        "{results}"
    );
    let started = Instant::now();
    let popped = client
        .get("/api/v1/pop/queue/down?wait=true&timeout=300")
        .await;
    assert_eq!(popped.status, 204);
    assert!(started.elapsed() >= Duration::from_millis(250));
    let acked = client
        .post_json(
            "/api/v1/ack",
            &json!({"transactionId": "t", "partitionId": uuid::Uuid::now_v7().to_string(),
                    "leaseId": uuid::Uuid::now_v7().to_string(), "status": "completed"}),
        )
        .await;
    assert_eq!(acked.status, 503);
    assert_eq!(acked.headers["retry-after"], "1");
    let buffers = client.get("/api/v1/status/buffers").await.json();
    assert_eq!(buffers["pending"], 3, "{buffers}");
    assert_eq!(buffers["dbHealthy"], false, "{buffers}");
    assert_eq!(buffers["spooling"], true, "{buffers}");
    let state = client.get("/api/v1/system/maintenance").await.json();
    assert_eq!(state["maintenanceMode"], false);
    assert_eq!(state["bufferedMessages"], 3);
    assert_eq!(state["bufferStats"]["failedFiles"]["failoverCount"], 3);
    unreachable.stop().await;
}

/// A broker without `QUEEN_ENCRYPTION_KEY` never spools a push to a queue
/// configured encrypted (through a broker with the key) in plaintext, even
/// one it never pushed to: the cluster-state refresh told it the queue is
/// sealed, and the push answers 503 while other queues still spool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_broker_never_spools_an_encrypted_queue_in_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let keyless = TestBroker::start_with(spooled(dir.path(), 1 << 20)).await;
    let keyed = TestBroker::serve(
        keyless.db.clone(),
        EngineConfig {
            encryption_key: Some(
                "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
                    .parse()
                    .unwrap(),
            ),
            ..EngineConfig::default()
        },
    )
    .await;
    let reply = keyed
        .client
        .post_json(
            "/api/v1/configure",
            &json!({"queue": "sealed", "options": {"encryptionEnabled": true}}),
        )
        .await;
    expect_status(&reply, 200);
    set_maintenance(&keyless, "/api/v1/system/maintenance", true).await;
    // Past one refresh of the keyless broker.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let secret = "KEYLESS-SPOOL-PLAINTEXT";
    let reply = keyless
        .client
        .post_json(
            "/api/v1/push",
            &json!({"items": [{"queue": "sealed", "payload": {"secret": secret}}]}),
        )
        .await;
    expect_status(&reply, 503);
    assert!(reply.json()["error"]
        .as_str()
        .unwrap()
        .contains("QUEEN_ENCRYPTION_KEY"));
    // Another queue still spools.
    let reply = keyless
        .client
        .post_json(
            "/api/v1/push",
            &json!({"items": [{"queue": "plain", "payload": 1}]}),
        )
        .await;
    expect_status(&reply, 201);
    assert_eq!(reply.json()[0]["status"], "buffered");
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap_or_default();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the spool holds the plaintext"
        );
    }
    set_maintenance(&keyless, "/api/v1/system/maintenance", false).await;
    until_drained(&keyless, Duration::from_secs(20)).await;
    keyed.stop().await;
    keyless.stop().await;
}
