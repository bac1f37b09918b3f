//! Partition ids derived from (queue, name) (issue 33, item 2's first step):
//! a new partition's id is `queen.partition_id_v1(queue id, name)`; one
//! created before keeps its drawn id; a partition removed by cleanup and
//! created again gets the same id back, with offsets above its earlier life's,
//! so nothing a broker remembers of that life (the dedup cache's coverage) can
//! stand for the new one.

use std::time::Duration;

use queen_engine::EngineConfig;
use queen_tests::TestBroker;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::{configure, data, expect_status, pop, push, push_items, select_i64};

/// Every partition of the database: (queue name, partition name, id, derived
/// id).
async fn ids(broker: &TestBroker) -> Vec<(String, String, Uuid, Uuid)> {
    broker
        .sql()
        .await
        .query(
            "SELECT q.name, p.name, p.id, queen.partition_id_v1(q.id, p.name)
               FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
              ORDER BY q.name, p.name",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_derivation_is_pinned() {
    // Fixed vectors, computed apart from PostgreSQL (Python's hashlib:
    // sha256(queue id bytes + name in UTF-8)[:16], version 8, variant 10).
    // Routing on Citus and any broker that computes an id itself depend on
    // this never changing under the name partition_id_v1.
    let broker = TestBroker::start().await;
    let sql = broker.sql().await;
    for (queue, name, id) in [
        (
            "00000000-0000-0000-0000-000000000000",
            "Default",
            "7937eec5-2bc0-8f76-b938-0db858e43705",
        ),
        (
            "0192f7a0-0000-7000-8000-000000000001",
            "ünï/x'y",
            "9b5535a3-9fc9-8466-a15d-2477c02528ff",
        ),
    ] {
        let queue: Uuid = queue.parse().unwrap();
        let derived: Uuid = sql
            .query_one("SELECT queen.partition_id_v1($1, $2)", &[&queue, &name])
            .await
            .unwrap()
            .get(0);
        assert_eq!(derived.to_string(), id, "{name}");
        assert_eq!(derived.get_version_num(), 8);
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_partitions_take_the_id_derived_from_queue_and_name() {
    let broker = TestBroker::start().await;
    configure(&broker, "configured", json!({})).await;
    // One slot a request (the loop path), and several in one request (the
    // set path for partitions that exist, the loop for new ones).
    push(&broker, "derived", "one", &[json!(1)]).await;
    let names = ["a/b", "ünï", "x'y", "Default", &"long".repeat(60)];
    let items = names
        .iter()
        .map(|name| json!({"queue": "derived", "partition": name, "payload": name}))
        .collect();
    let results = push_items(&broker, items).await;
    assert!(
        results.iter().all(|r| r["status"] == "queued"),
        "{results:?}"
    );
    let rows = ids(&broker).await;
    assert_eq!(rows.len(), 7, "{rows:?}");
    for (queue, name, id, derived) in &rows {
        assert_eq!(id, derived, "{queue}/{name}");
    }
    // The push answers name the same ids.
    let popped = pop(
        &broker,
        "/api/v1/pop/queue/derived/partition/one?autoAck=true",
    )
    .await
    .unwrap();
    let one = rows.iter().find(|r| r.1 == "one").unwrap().2;
    assert_eq!(popped["messages"][0]["partitionId"], one.to_string());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_with_a_drawn_id_keeps_it() {
    // A partition created before ids were derived: found by name, written
    // under its own id, never created a second time.
    let broker = TestBroker::start().await;
    configure(&broker, "old", json!({})).await;
    let drawn = Uuid::new_v4();
    let sql = broker.sql().await;
    sql.execute(
        "INSERT INTO queen.log_partitions (id, queue_id, name)
         SELECT $1, q.id, 'kept' FROM queen.queues q WHERE q.name = 'old'",
        &[&drawn],
    )
    .await
    .unwrap();
    push(&broker, "old", "kept", &[json!(1)]).await;
    let results = push_items(
        &broker,
        vec![
            json!({"queue": "old", "partition": "kept", "payload": 2}),
            json!({"queue": "old", "partition": "Default", "payload": 3}),
        ],
    )
    .await;
    assert!(
        results.iter().all(|r| r["status"] == "queued"),
        "{results:?}"
    );
    configure(&broker, "old", json!({"leaseTime": 30})).await;
    let kept: Vec<_> = ids(&broker)
        .await
        .into_iter()
        .filter(|r| r.1 == "kept")
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].2, drawn);
    let popped = pop(
        &broker,
        "/api/v1/pop/queue/old/partition/kept?batch=10&autoAck=true",
    )
    .await
    .unwrap();
    assert_eq!(data(&popped), [json!(1), json!(2)]);
    assert_eq!(popped["messages"][0]["partitionId"], drawn.to_string());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_pushes_create_one_partition() {
    // Two brokers, many requests, one new name: every push is queued and
    // one row exists, holding every message.
    let broker = TestBroker::start().await;
    let other = TestBroker::serve(broker.db.clone(), EngineConfig::default()).await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let client = if i % 2 == 0 {
            broker.client.clone()
        } else {
            other.client.clone()
        };
        tasks.push(tokio::spawn(async move {
            client
                .post_json(
                    "/api/v1/push",
                    &json!({"items": [{"queue": "race", "partition": "new", "payload": i}]}),
                )
                .await
        }));
    }
    for task in tasks {
        let reply = task.await.unwrap();
        assert_eq!(reply.status, 201);
        assert_eq!(reply.json()[0]["status"], "queued");
    }
    let sql = broker.sql().await;
    assert_eq!(
        select_i64(
            &sql,
            "SELECT count(*) FROM queen.log_partitions WHERE name = 'new'"
        )
        .await,
        1
    );
    assert_eq!(
        select_i64(
            &sql,
            "SELECT last_offset FROM queen.log_partitions WHERE name = 'new'"
        )
        .await,
        15
    );
    other.stop().await;
    broker.stop().await;
}

/// A broker whose retention and partition cleanup run only when the test
/// asks, cleanup taking partitions empty and idle for a second.
fn cleaning() -> EngineConfig {
    EngineConfig {
        retention_interval: None,
        eviction_interval: None,
        partition_idle: Some(Duration::from_secs(1)),
        ..EngineConfig::default()
    }
}

/// Push one item with a client transaction id to again/p; its status.
async fn push_txn(broker: &TestBroker, txn: &str) -> Value {
    let results = push_items(
        broker,
        vec![json!({"queue": "again", "partition": "p", "transactionId": txn, "payload": txn})],
    )
    .await;
    results[0]["status"].clone()
}

/// Empty partition p of "again" by time retention and remove it.
async fn remove_p(broker: &TestBroker) {
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let pass = broker.engine.retention_pass().await.unwrap();
    assert!(pass.partitions_removed >= 1, "{pass:?}");
    let sql = broker.sql().await;
    assert_eq!(
        select_i64(
            &sql,
            "SELECT count(*) FROM queen.log_partitions WHERE name = 'p'"
        )
        .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_partition_comes_back_under_its_id_above_its_old_offsets() {
    let broker = TestBroker::start_with(cleaning()).await;
    configure(
        &broker,
        "again",
        json!({"retentionEnabled": true, "retentionSeconds": 1}),
    )
    .await;
    for i in 0..3 {
        push(&broker, "again", "p", &[json!(i)]).await;
    }
    let first = ids(&broker).await.into_iter().find(|r| r.1 == "p").unwrap();
    // Group g reads one message of the first life, so it has a cursor.
    let popped = pop(
        &broker,
        "/api/v1/pop/queue/again/partition/p?consumerGroup=g&batch=1&autoAck=true",
    )
    .await
    .unwrap();
    assert_eq!(data(&popped), [json!(0)]);
    // A trace of the first life's message.
    let first_message = &popped["messages"][0];
    let reply = broker
        .client
        .post_json(
            "/api/v1/traces",
            &json!({"transactionId": first_message["transactionId"],
                    "partitionId": first_message["partitionId"],
                    "eventType": "info", "data": {"life": 1}}),
        )
        .await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    remove_p(&broker).await;

    // The earlier life's traces went with it: the same id in the new life
    // shows none of them.
    let traces_path = format!(
        "/api/v1/traces/{}/{}",
        first.2,
        first_message["transactionId"].as_str().unwrap()
    );
    let sql = broker.sql().await;
    assert_eq!(
        select_i64(&sql, "SELECT count(*) FROM queen.message_traces").await,
        0
    );

    push(&broker, "again", "p", &[json!("later")]).await;
    let second = ids(&broker).await.into_iter().find(|r| r.1 == "p").unwrap();
    assert_eq!(second.2, first.2, "the same derived id");
    let traces = broker.client.get(&traces_path).await;
    assert_eq!(traces.status, 200);
    assert_eq!(traces.json()["traces"], json!([]));
    let row = sql
        .query_one(
            "SELECT p.log_start, p.last_offset, f.next_offset
               FROM queen.log_partitions p
               JOIN queen.partition_offset_floors f ON f.queue_id = p.queue_id
              WHERE p.name = 'p'",
            &[],
        )
        .await
        .unwrap();
    let (log_start, last, floor): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((log_start, last, floor), (3, 3, 3), "offsets go on above 2");

    // Group g's cursor went with the first life; its new one starts at the
    // new log_start, and its lag counts the one message there is.
    let popped = pop(
        &broker,
        "/api/v1/pop/queue/again/partition/p?consumerGroup=g",
    )
    .await
    .unwrap();
    assert_eq!(data(&popped), [json!("later")]);
    assert_eq!(
        select_i64(
            &sql,
            "SELECT p.last_offset - c.committed FROM queen.log_consumers c
               JOIN queen.log_partitions p ON p.id = c.partition_id
              WHERE p.name = 'p' AND c.consumer_group = 'g'"
        )
        .await,
        1
    );
    assert!(pop(
        &broker,
        "/api/v1/pop/queue/again/partition/p?consumerGroup=g&wait=false"
    )
    .await
    .is_none());

    // A name the queue never had starts at the floor too: it is served,
    // consumed and counted from there.
    push(&broker, "again", "fresh", &[json!("new")]).await;
    assert_eq!(
        select_i64(
            &sql,
            "SELECT log_start FROM queen.log_partitions WHERE name = 'fresh'"
        )
        .await,
        3
    );
    let fresh = pop(
        &broker,
        "/api/v1/pop/queue/again/partition/fresh?consumerGroup=g&wait=false",
    )
    .await
    .unwrap();
    assert_eq!(data(&fresh), [json!("new")]);
    let acked = crate::support::ack_all(&broker, &fresh, "completed", Some("g")).await;
    assert_eq!(acked[0]["success"], true, "{acked:?}");
    assert_eq!(
        select_i64(
            &sql,
            "SELECT c.committed FROM queen.log_consumers c
               JOIN queen.log_partitions p ON p.id = c.partition_id
              WHERE p.name = 'fresh' AND c.consumer_group = 'g'"
        )
        .await,
        3
    );

    // Deleting the queue takes its floor with it.
    expect_status(
        &broker.client.delete("/api/v1/resources/queues/again").await,
        200,
    );
    assert_eq!(
        select_i64(&sql, "SELECT count(*) FROM queen.partition_offset_floors").await,
        0
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dedup_cache_of_the_old_life_misses_no_duplicate_in_the_new() {
    // Broker `a` learns the first life's transaction ids (its dedup cache
    // covers offsets 0-1 of the partition's id). The partition is removed and
    // created again by broker `b` under the same id; `b` stores "t3". When
    // `a` is sent "t3", its coverage of the old life must not hide b's row:
    // the new life's offsets lie above it, so the probe reads that row.
    let a = TestBroker::start_with(cleaning()).await;
    let b = TestBroker::serve(a.db.clone(), cleaning()).await;
    configure(
        &a,
        "again",
        json!({"retentionEnabled": true, "retentionSeconds": 1}),
    )
    .await;
    assert_eq!(push_txn(&a, "t1").await, "queued");
    assert_eq!(push_txn(&a, "t2").await, "queued");
    assert_eq!(push_txn(&a, "t2").await, "duplicate");
    remove_p(&a).await;

    assert_eq!(push_txn(&b, "t3").await, "queued");
    assert_eq!(push_txn(&a, "t3").await, "duplicate");
    let sql = a.sql().await;
    assert_eq!(
        select_i64(
            &sql,
            "SELECT count(*) FROM queen.log_txns t
               JOIN queen.log_partitions p ON p.id = t.partition_id
              WHERE p.name = 'p'"
        )
        .await,
        1
    );
    b.stop().await;
    a.stop().await;
}

/// A broker on a fresh database with `queen.citus = 'on'` (the switch a
/// distributed database carries, docs/citus.md).
async fn citus_mode_broker() -> TestBroker {
    let db = queen_testkit::TestDb::new().await;
    db.client()
        .await
        .batch_execute(&format!(
            "ALTER DATABASE \"{}\" SET queen.citus = 'on'",
            db.name()
        ))
        .await
        .unwrap();
    TestBroker::serve(db, EngineConfig::default()).await
}

/// In a transaction rolled back after: one call of `log_push_v2` with a
/// one-message slot for each of `partitions` of queue "routed" (which
/// exist), with `queen.citus` set to `citus`; how many times it called
/// `log_partition_open_v1` (which the set path does not, nor the loop on
/// PostgreSQL for a partition it finds by name) and `partition_id_v1`.
async fn opens_of_one_flush(broker: &TestBroker, partitions: &[&str], citus: &str) -> (i64, i64) {
    let sql = broker.sql().await;
    sql.batch_execute(&format!(
        "SET track_functions = 'pl'; SET queen.citus = '{citus}'; BEGIN"
    ))
    .await
    .unwrap();
    let n = partitions.len();
    let queues = vec!["routed"; n];
    let empty = vec![""; n];
    let ids: Vec<Uuid> = (0..n).map(|_| Uuid::now_v7()).collect();
    let flags = vec![false; n];
    let none_ids: Vec<Option<Uuid>> = vec![None; n];
    let none_offsets: Vec<Option<i64>> = vec![None; n];
    let counts = vec![1i32; n];
    let blobs = vec![vec![0u8]; n];
    let hashes = vec![vec![0u8; 16]; n];
    sql.query(
        "SELECT o_status FROM queen.log_push_v2('default', $1, $2, $3, $3, $4, $4, $5, $5,
                $6, $7, $7, $8, $9, $10)",
        &[
            &queues,
            &partitions,
            &empty,
            &ids,
            &flags,
            &none_ids,
            &none_offsets,
            &counts,
            &blobs,
            &hashes,
        ],
    )
    .await
    .unwrap();
    let mut calls = [0; 2];
    for (n, name) in calls
        .iter_mut()
        .zip(["log_partition_open_v1", "partition_id_v1"])
    {
        *n = select_i64(
            &sql,
            &format!(
                "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_xact_user_functions
                  WHERE funcname = '{name}'"
            ),
        )
        .await;
    }
    sql.batch_execute("ROLLBACK").await.unwrap();
    (calls[0], calls[1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_citus_switch_routes_every_slot_alone_with_the_same_answers() {
    // On Citus a flush takes the per-slot path (each statement names one
    // partition) and finds partitions by derived id only. Run here on
    // PostgreSQL: the same rows and answers as the set path, and every slot
    // of a flush to existing partitions goes through log_partition_open_v1.
    let broker = citus_mode_broker().await;
    let sql = broker.sql().await;
    assert_eq!(
        sql.query_one("SELECT current_setting('queen.citus', true)", &[])
            .await
            .unwrap()
            .get::<_, Option<String>>(0)
            .as_deref(),
        Some("on")
    );
    let item = |partition: &str, txn: &str| json!({"queue": "routed", "partition": partition, "transactionId": txn, "payload": txn});
    let first = push_items(
        &broker,
        vec![item("a", "t1"), item("b", "t2"), item("c", "t3")],
    )
    .await;
    assert!(first.iter().all(|r| r["status"] == "queued"), "{first:?}");
    let second = push_items(
        &broker,
        vec![item("a", "t1"), item("b", "t4"), item("c", "t5")],
    )
    .await;
    let statuses: Vec<_> = second.iter().map(|r| r["status"].clone()).collect();
    assert_eq!(statuses, ["duplicate", "queued", "queued"]);
    // A flush to existing partitions opens each slot alone, by derived id;
    // without the switch the set path takes them (and opens none), and a
    // one-slot flush (the loop) finds its partition by name without a call
    // or a derivation.
    assert_eq!(
        opens_of_one_flush(&broker, &["a", "b", "c"], "on").await,
        (3, 3)
    );
    assert_eq!(
        opens_of_one_flush(&broker, &["a", "b", "c"], "off").await,
        (0, 0)
    );
    assert_eq!(opens_of_one_flush(&broker, &["a"], "on").await, (1, 1));
    assert_eq!(opens_of_one_flush(&broker, &["a"], "off").await, (0, 0));
    for (_, name, id, derived) in ids(&broker).await {
        assert_eq!(id, derived, "{name}");
    }
    assert_eq!(
        select_i64(
            &sql,
            "SELECT sum(last_offset + 1)::bigint FROM queen.log_partitions WHERE name IN ('a', 'b', 'c')"
        )
        .await,
        5
    );
    // The bulk seed of a group's cursors (its first contact on the SQL
    // candidate path) seeds every partition; on Citus one statement each.
    let seeded: Option<String> = sql
        .query_one(
            "SELECT queen.log_seed_cursors_v1(q.id, 'seeded', 'all', NULL, NULL, 100)
               FROM queen.queues q WHERE q.name = 'routed'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(seeded, None, "one chunk seeds the queue");
    assert_eq!(
        select_i64(
            &sql,
            "SELECT count(*) FROM queen.log_consumers
              WHERE consumer_group = 'seeded' AND committed = -1"
        )
        .await,
        3
    );
    let popped = pop(
        &broker,
        "/api/v1/pop/queue/routed?consumerGroup=g&batch=10&wait=false",
    )
    .await
    .unwrap();
    crate::support::ack_all(&broker, &popped, "completed", Some("g")).await;
    let mut seen = data(&popped);
    while let Some(more) = pop(
        &broker,
        "/api/v1/pop/queue/routed?consumerGroup=g&batch=10&wait=false",
    )
    .await
    {
        crate::support::ack_all(&broker, &more, "completed", Some("g")).await;
        seen.extend(data(&more));
    }
    seen.sort_by_key(|v| v.as_str().unwrap_or_default().to_owned());
    assert_eq!(
        seen,
        [
            json!("t1"),
            json!("t2"),
            json!("t3"),
            json!("t4"),
            json!("t5")
        ]
    );
    // The views and deletes whose statements changed shape for Citus.
    for path in [
        "/api/v1/status",
        "/api/v1/resources/overview",
        "/api/v1/consumer-groups",
    ] {
        let reply = broker.client.get(path).await;
        assert_eq!(reply.status, 200, "{path}");
    }
    expect_status(
        &broker.client.delete("/api/v1/consumer-groups/g").await,
        200,
    );
    assert_eq!(
        select_i64(
            &sql,
            "SELECT count(*) FROM queen.log_consumers WHERE consumer_group = 'g'"
        )
        .await,
        0
    );
    let reply = broker
        .client
        .delete("/api/v1/resources/queues/routed")
        .await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(
        select_i64(&sql, "SELECT count(*) FROM queen.log_partitions").await,
        0
    );
    assert_eq!(
        select_i64(&sql, "SELECT count(*) FROM queen.log_segments").await,
        0
    );
    broker.stop().await;
}

/// One partition-cleanup step (empty partitions idle for a second, at most
/// `limit`) in `client`'s session: how many it removed.
async fn cleanup_step(client: &tokio_postgres::Client, limit: i32) -> i32 {
    client
        .query_one(
            "SELECT o_removed FROM queen.log_partition_cleanup_step_v3(1, $1)",
            &[&limit],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cleanup_step_runs_at_a_time() {
    // Two steps removing partitions of the same queues would each hold the
    // floor rows they raised and could wait on each other (a deadlock two
    // brokers' cleanups met): a step that finds another running removes
    // nothing and says so at once.
    // Retention by hand, cleanup only by the calls below.
    let broker = TestBroker::start_with(EngineConfig {
        partition_idle: None,
        ..cleaning()
    })
    .await;
    configure(
        &broker,
        "again",
        json!({"retentionEnabled": true, "retentionSeconds": 1}),
    )
    .await;
    for name in ["a", "b"] {
        push(&broker, "again", name, &[json!(name)]).await;
    }
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let pass = broker.engine.retention_pass().await.unwrap();
    assert!(pass.segments >= 2, "{pass:?}");
    // Retention emptied them; cleanup would now take a, b and Default.
    let first = broker.sql().await;
    first.batch_execute("BEGIN").await.unwrap();
    let removed = cleanup_step(&first, 1).await;
    assert_eq!(removed, 1);
    let second = broker.sql().await;
    // A step that waited for the first would fail here, not hang the test.
    second
        .batch_execute("SET statement_timeout = '5s'")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let removed = cleanup_step(&second, 10).await;
    assert_eq!(removed, 0, "a second step ran beside the first");
    assert!(started.elapsed() < Duration::from_secs(5));
    first.batch_execute("COMMIT").await.unwrap();
    let removed = cleanup_step(&second, 10).await;
    assert_eq!(removed, 2);
    broker.stop().await;
}
