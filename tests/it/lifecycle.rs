//! The everyday lifecycle routes over real HTTP and PostgreSQL (issue 7):
//! deleting a queue, deleting a consumer group, seeking, re-timing a
//! subscription, and the consumer-group views.
//!
//! Behaviour tests that depend on candidate selection run twice, through the
//! hot-list and through the SQL candidate scan (whose empty-scan watermark a
//! seek or a subscription change must reset).

use std::time::{Duration, Instant};

use queen_engine::EngineConfig;
use queen_tests::TestBroker;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::{ack_all, both_paths, cut, data, messages, pop, push, select_i64};

both_paths!(
    a_queue_pushed_again_under_the_same_name_starts_empty,
    a_deleted_group_resubscribing_with_all_receives_everything_again,
    a_seek_to_a_timestamp_replays_exactly_the_messages_from_then_on,
    a_seek_to_the_end_skips_everything_pending_and_creates_missing_cursors,
    a_seek_releases_leases_so_the_old_holder_cannot_move_the_cursor,
    a_partition_seek_moves_only_that_partition,
    a_new_subscription_timestamp_starts_untouched_partitions_there,
);

/// Push each payload in its own request (one segment each, so segment
/// timestamps separate them).
async fn push_each(broker: &TestBroker, queue: &str, partition: &str, payloads: &[Value]) {
    for payload in payloads {
        push(broker, queue, partition, std::slice::from_ref(payload)).await;
    }
}

/// Pop `path` until it answers 204, acking each batch (completed) when it is
/// leased; returns every payload in delivery order.
async fn drain(broker: &TestBroker, path: &str, group: &str) -> Vec<Value> {
    let mut got = Vec::new();
    for _ in 0..100 {
        let Some(popped) = pop(broker, path).await else {
            return got;
        };
        got.extend(data(&popped));
        if popped["messages"][0]["leaseId"] != "" {
            for result in ack_all(broker, &popped, "completed", Some(group)).await {
                assert_eq!(result["success"], true, "{result}");
            }
        }
    }
    panic!("{path} never drained");
}

/// Every row referring to `pids` (or the queue `qid`), per table.
async fn rows_of(broker: &TestBroker, qid: Uuid, pids: &[Uuid]) -> Vec<(String, i64)> {
    let sql = broker.sql().await;
    let mut counts = Vec::new();
    for (table, column) in [
        ("log_partitions", "id"),
        ("log_segments", "partition_id"),
        ("log_txns", "partition_id"),
        ("log_consumers", "partition_id"),
        ("log_dlq", "partition_id"),
        ("message_traces", "partition_id"),
    ] {
        let n: i64 = sql
            .query_one(
                &format!("SELECT count(*) FROM queen.{table} WHERE {column} = ANY($1)"),
                &[&pids],
            )
            .await
            .unwrap()
            .get(0);
        counts.push((table.to_owned(), n));
    }
    for table in ["queues", "consumer_groups_metadata"] {
        let column = if table == "queues" { "id" } else { "queue_id" };
        let n: i64 = sql
            .query_one(
                &format!("SELECT count(*) FROM queen.{table} WHERE {column} = $1"),
                &[&qid],
            )
            .await
            .unwrap()
            .get(0);
        counts.push((table.to_owned(), n));
    }
    counts
}

/// The id of `queue` and the ids of its partitions.
async fn queue_ids(broker: &TestBroker, queue: &str) -> (Uuid, Vec<Uuid>) {
    let sql = broker.sql().await;
    let qid: Uuid = sql
        .query_one("SELECT id FROM queen.queues WHERE name = $1", &[&queue])
        .await
        .unwrap()
        .get(0);
    let pids: Vec<Uuid> = sql
        .query(
            "SELECT id FROM queen.log_partitions WHERE queue_id = $1",
            &[&qid],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    (qid, pids)
}

// ---------------------------------------------------------------------------
// DELETE /api/v1/resources/queues/:queue

#[tokio::test]
async fn deleting_a_queue_removes_every_row_it_owns_and_nothing_else() {
    let broker = TestBroker::start().await;
    push(&broker, "doomed", "a", &[json!(1), json!(2)]).await;
    push(&broker, "doomed", "b", &[json!(3)]).await;
    push(&broker, "kept", "a", &[json!("stays")]).await;
    // A cursor, a lease, subscription metadata, a dead letter and a trace.
    let popped = pop(
        &broker,
        "/api/v1/pop/queue/doomed/partition/a?batch=1&consumerGroup=g",
    )
    .await
    .unwrap();
    let first = messages(&popped)[0].clone();
    let dlq = ack_all(&broker, &popped, "dlq", Some("g")).await;
    assert_eq!(dlq[0]["success"], true, "{dlq:?}");
    assert!(
        pop(&broker, "/api/v1/pop/queue/doomed?batch=10&consumerGroup=h")
            .await
            .is_some()
    );
    let trace = broker
        .client
        .post_json(
            "/api/v1/traces",
            &json!({"transactionId": first["transactionId"], "partitionId": first["partitionId"],
                    "consumerGroup": "g", "data": {"step": 1}}),
        )
        .await;
    assert_eq!(trace.json()["success"], true);

    let (qid, pids) = queue_ids(&broker, "doomed").await;
    assert_eq!(pids.len(), 2);
    for (table, n) in rows_of(&broker, qid, &pids).await {
        assert!(n > 0, "the test must cover {table}");
    }
    let (kept_qid, kept_pids) = queue_ids(&broker, "kept").await;
    let kept_before = rows_of(&broker, kept_qid, &kept_pids).await;

    let reply = broker
        .client
        .delete("/api/v1/resources/queues/doomed")
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json(),
        json!({"deleted": true, "queue": "doomed", "existed": true})
    );
    for (table, n) in rows_of(&broker, qid, &pids).await {
        assert_eq!(n, 0, "{table} still holds rows of the deleted queue");
    }
    assert_eq!(
        rows_of(&broker, kept_qid, &kept_pids).await,
        kept_before,
        "another queue was touched"
    );
    let dlq = broker.client.get("/api/v1/dlq?queue=doomed").await.json();
    assert_eq!(dlq["messages"], json!([]));
    broker.stop().await;
}

#[tokio::test]
async fn deleting_a_missing_queue_succeeds() {
    let broker = TestBroker::start().await;
    let reply = broker.client.delete("/api/v1/resources/queues/never").await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json(),
        json!({"deleted": true, "queue": "never", "existed": false})
    );
    broker.stop().await;
}

async fn a_queue_pushed_again_under_the_same_name_starts_empty(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    push(&broker, "again", "p", &[json!("old-1"), json!("old-2")]).await;
    push(&broker, "again", "q", &[json!("old-3")]).await;
    // Warm every cache: a leased batch (ack registry), rings, first contact.
    let leased = pop(&broker, "/api/v1/pop/queue/again?batch=1")
        .await
        .unwrap();
    assert_eq!(data(&leased).len(), 1);
    assert!(
        pop(&broker, "/api/v1/pop/queue/again?batch=1&consumerGroup=g")
            .await
            .is_some()
    );
    let (old_qid, _) = queue_ids(&broker, "again").await;

    let reply = broker.client.delete("/api/v1/resources/queues/again").await;
    assert_eq!(reply.json()["existed"], true);
    // An ack with the lease of the deleted queue changes nothing and fails
    // nothing.
    let late = ack_all(&broker, &leased, "completed", Some("__QUEUE_MODE__")).await;
    assert_eq!(late[0]["success"], false, "{late:?}");

    push(&broker, "again", "p", &[json!("new-1"), json!("new-2")]).await;
    let (new_qid, _) = queue_ids(&broker, "again").await;
    assert_ne!(old_qid, new_qid);
    assert_eq!(
        drain(
            &broker,
            "/api/v1/pop/queue/again?batch=10",
            "__QUEUE_MODE__"
        )
        .await,
        [json!("new-1"), json!("new-2")]
    );
    assert_eq!(
        drain(
            &broker,
            "/api/v1/pop/queue/again?batch=10&consumerGroup=g",
            "g"
        )
        .await,
        [json!("new-1"), json!("new-2")]
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_long_poll_on_a_deleted_queue_answers_204_promptly() {
    let broker = TestBroker::start().await;
    push(&broker, "parked", "p", &[json!(1)]).await;
    assert!(pop(&broker, "/api/v1/pop/queue/parked?autoAck=true")
        .await
        .is_some());
    let mut waiters = Vec::new();
    for group in ["__QUEUE_MODE__", "g"] {
        let client = broker.client.clone();
        waiters.push(tokio::spawn(async move {
            client
                .get(&format!(
                    "/api/v1/pop/queue/parked?wait=true&timeout=30000&consumerGroup={group}&subscriptionMode=new"
                ))
                .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()), "not parked");
    let deleted_at = Instant::now();
    let reply = broker
        .client
        .delete("/api/v1/resources/queues/parked")
        .await;
    assert_eq!(reply.json()["existed"], true);
    for waiter in waiters {
        let reply = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("a parked pop kept waiting after its queue was deleted")
            .unwrap();
        assert_eq!(reply.status, 204);
        assert!(reply.body.is_empty());
    }
    assert!(deleted_at.elapsed() < Duration::from_secs(2));
    broker.stop().await;
}

// ---------------------------------------------------------------------------
// DELETE /api/v1/consumer-groups/:group[/queues/:queue]

async fn a_deleted_group_resubscribing_with_all_receives_everything_again(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    push(&broker, "regroup", "a", &[json!("a-old")]).await;
    push(&broker, "regroup", "b", &[json!("b-old")]).await;
    // Subscribed with `new`: the backlog is skipped, and the stored
    // subscription record says so.
    assert!(pop(
        &broker,
        "/api/v1/pop/queue/regroup?consumerGroup=g&subscriptionMode=new&autoAck=true"
    )
    .await
    .is_none());
    push(&broker, "regroup", "a", &[json!("a-new")]).await;
    push(&broker, "regroup", "b", &[json!("b-new")]).await;
    let path = "/api/v1/pop/queue/regroup?batch=10&consumerGroup=g";
    let mut got = drain(&broker, path, "g").await;
    got.sort_by_key(ToString::to_string);
    assert_eq!(got, [json!("a-new"), json!("b-new")]);

    let reply = broker.client.delete("/api/v1/consumer-groups/g").await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json(),
        json!({"success": true, "consumerGroup": "g", "deletedPartitions": 2,
               "metadataDeleted": true})
    );
    let sql = broker.sql().await;
    let left: i64 = select_i64(
        &sql,
        "SELECT (SELECT count(*) FROM queen.log_consumers WHERE consumer_group = 'g') \
              + (SELECT count(*) FROM queen.consumer_groups_metadata WHERE consumer_group = 'g')",
    )
    .await;
    assert_eq!(left, 0);

    let mut again = drain(&broker, &format!("{path}&subscriptionMode=all"), "g").await;
    again.sort_by_key(ToString::to_string);
    assert_eq!(
        again,
        [
            json!("a-new"),
            json!("a-old"),
            json!("b-new"),
            json!("b-old")
        ]
    );
    broker.stop().await;
}

#[tokio::test]
async fn deleting_a_group_that_never_existed_succeeds() {
    let broker = TestBroker::start().await;
    let reply = broker.client.delete("/api/v1/consumer-groups/ghost").await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json(),
        json!({"success": true, "consumerGroup": "ghost", "deletedPartitions": 0,
               "metadataDeleted": true})
    );
    let reply = broker
        .client
        .delete("/api/v1/consumer-groups/ghost/queues/nowhere?deleteMetadata=false")
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json(),
        json!({"success": true, "consumerGroup": "ghost", "queueName": "nowhere",
               "deletedPartitions": 0, "metadataDeleted": false})
    );
    broker.stop().await;
}

#[tokio::test]
async fn queue_mode_cursors_are_deleted_per_queue() {
    let broker = TestBroker::start().await;
    push(&broker, "qm1", "p", &[json!(1), json!(2)]).await;
    push(&broker, "qm2", "p", &[json!(3)]).await;
    for queue in ["qm1", "qm2"] {
        drain(
            &broker,
            &format!("/api/v1/pop/queue/{queue}?batch=10&autoAck=true"),
            "__QUEUE_MODE__",
        )
        .await;
    }
    let reply = broker
        .client
        .delete("/api/v1/consumer-groups/__QUEUE_MODE__/queues/qm1")
        .await;
    assert_eq!(
        reply.json(),
        json!({"success": true, "consumerGroup": "__QUEUE_MODE__", "queueName": "qm1",
               "deletedPartitions": 1, "metadataDeleted": true})
    );
    assert_eq!(
        drain(
            &broker,
            "/api/v1/pop/queue/qm1?batch=10&autoAck=true",
            "__QUEUE_MODE__"
        )
        .await,
        [json!(1), json!(2)]
    );
    assert!(pop(&broker, "/api/v1/pop/queue/qm2?batch=10&autoAck=true")
        .await
        .is_none());
    broker.stop().await;
}

#[tokio::test]
async fn keeping_the_metadata_keeps_the_subscription_for_the_next_seed() {
    let broker = TestBroker::start().await;
    push(&broker, "keepmeta", "p", &[json!("old")]).await;
    assert!(pop(
        &broker,
        "/api/v1/pop/queue/keepmeta?consumerGroup=g&subscriptionMode=new&autoAck=true"
    )
    .await
    .is_none());
    push(&broker, "keepmeta", "p", &[json!("new")]).await;
    let path = "/api/v1/pop/queue/keepmeta?batch=10&autoAck=true&consumerGroup=g";
    assert_eq!(drain(&broker, path, "g").await, [json!("new")]);

    let reply = broker
        .client
        .delete("/api/v1/consumer-groups/g/queues/keepmeta?deleteMetadata=false")
        .await;
    assert_eq!(reply.json()["deletedPartitions"], 1);
    assert_eq!(reply.json()["metadataDeleted"], false);
    let row = broker
        .sql()
        .await
        .query_one(
            "SELECT subscription_mode, seeded_at IS NULL FROM queen.consumer_groups_metadata \
             WHERE consumer_group = 'g'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "new");
    assert!(row.get::<_, bool>(1), "the seed marker was not reset");
    // The stored subscription still decides where the new cursor starts:
    // the backlog before it stays skipped, even when asking for `all`.
    assert_eq!(
        drain(&broker, &format!("{path}&subscriptionMode=all"), "g").await,
        [json!("new")]
    );
    broker.stop().await;
}

// ---------------------------------------------------------------------------
// POST /api/v1/consumer-groups/:group/queues/:queue[/partitions/:p]/seek

async fn a_seek_to_a_timestamp_replays_exactly_the_messages_from_then_on(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    let first: Vec<Value> = (0..3).map(|i| json!(format!("m{i}"))).collect();
    let second: Vec<Value> = (3..6).map(|i| json!(format!("m{i}"))).collect();
    push_each(&broker, "replay", "p", &first).await;
    let middle = cut(&broker).await;
    push_each(&broker, "replay", "p", &second).await;

    let path = "/api/v1/pop/queue/replay?batch=2&consumerGroup=g";
    let all: Vec<Value> = first.iter().chain(&second).cloned().collect();
    assert_eq!(drain(&broker, path, "g").await, all);

    // A caught-up group's empty-scan watermark has moved past a partition
    // not written for a while: the SQL candidate scan no longer looks at it,
    // so the seek must reset the watermark.
    broker
        .sql()
        .await
        .batch_execute(
            "UPDATE queen.log_partitions SET last_write_at = now() - interval '1 hour'; \
             UPDATE queen.consumer_groups_metadata SET scan_watermark = now(), \
                    watermark_checked_at = now() WHERE consumer_group = 'g';",
        )
        .await
        .unwrap();
    assert!(pop(&broker, path).await.is_none());
    let reply = broker
        .client
        .post_json(
            "/api/v1/consumer-groups/g/queues/replay/seek",
            &json!({"timestamp": middle}),
        )
        .await;
    assert_eq!(reply.status, 200);
    let answer = reply.json();
    assert_eq!(answer["success"], true);
    assert_eq!(answer["consumerGroup"], "g");
    assert_eq!(answer["queueName"], "replay");
    assert_eq!(answer["seekToEnd"], false);
    assert_eq!(answer["partitionsUpdated"], 1);
    // Echoed in UTC with milliseconds.
    assert_eq!(answer["targetTimestamp"], format!("{}Z", &middle[..23]));

    assert_eq!(drain(&broker, path, "g").await, second, "replay");
    assert!(pop(&broker, path).await.is_none());
    broker.stop().await;
}

async fn a_seek_to_the_end_skips_everything_pending_and_creates_missing_cursors(
    config: EngineConfig,
) {
    let broker = TestBroker::start_with(config).await;
    push(&broker, "toend", "a", &[json!(1), json!(2)]).await;
    push(&broker, "toend", "b", &[json!(3)]).await;
    // The group has never popped: the seek creates both cursors.
    let reply = broker
        .client
        .post_json(
            "/api/v1/consumer-groups/g/queues/toend/seek",
            &json!({"toEnd": true}),
        )
        .await;
    assert_eq!(
        reply.json(),
        json!({"success": true, "consumerGroup": "g", "queueName": "toend",
               "seekToEnd": true, "targetTimestamp": null, "partitionsUpdated": 2})
    );
    let path = "/api/v1/pop/queue/toend?batch=10&consumerGroup=g";
    assert!(
        pop(&broker, path).await.is_none(),
        "pending was not skipped"
    );
    // Queue mode holds a lease on a; seeking it to the end releases it.
    let leased = pop(&broker, "/api/v1/pop/queue/toend/partition/a?batch=10")
        .await
        .unwrap();
    assert_eq!(data(&leased), [json!(1), json!(2)]);
    let reply = broker
        .client
        .post_json(
            "/api/v1/consumer-groups/__QUEUE_MODE__/queues/toend/seek",
            &json!({"toEnd": true, "timestamp": "2000-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(reply.json()["seekToEnd"], true, "toEnd wins");
    let row = broker
        .sql()
        .await
        .query_one(
            "SELECT c.worker_id IS NULL, c.committed FROM queen.log_consumers c \
             JOIN queen.log_partitions p ON p.id = c.partition_id \
             WHERE p.name = 'a' AND c.consumer_group = '__QUEUE_MODE__'",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "lease not released");
    assert_eq!(row.get::<_, i64>(1), 1);
    assert!(pop(&broker, "/api/v1/pop/queue/toend?batch=10")
        .await
        .is_none());
    // New messages arrive as usual.
    push(&broker, "toend", "b", &[json!("after")]).await;
    assert_eq!(drain(&broker, path, "g").await, [json!("after")]);
    broker.stop().await;
}

async fn a_seek_releases_leases_so_the_old_holder_cannot_move_the_cursor(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    push(&broker, "relet", "p", &[json!(1), json!(2), json!(3)]).await;
    let path = "/api/v1/pop/queue/relet?batch=10&consumerGroup=g";
    let leased = pop(&broker, path).await.unwrap();
    assert_eq!(data(&leased).len(), 3);
    let reply = broker
        .client
        .post_json(
            "/api/v1/consumer-groups/g/queues/relet/seek",
            &json!({"timestamp": "2000-01-01T00:00:00.000Z"}),
        )
        .await;
    assert_eq!(reply.json()["partitionsUpdated"], 1);
    let counters = broker
        .sql()
        .await
        .query_one(
            "SELECT committed, worker_id IS NULL, attempt_count, batch_retry_count, \
                    attempt_offset IS NULL \
             FROM queen.log_consumers WHERE consumer_group = 'g'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(counters.get::<_, i64>(0), -1);
    assert!(counters.get::<_, bool>(1));
    assert_eq!(counters.get::<_, i32>(2), 0);
    assert_eq!(counters.get::<_, i32>(3), 0);
    assert!(counters.get::<_, bool>(4));
    // The old lease is gone: its ack is refused and moves nothing.
    for result in ack_all(&broker, &leased, "completed", Some("g")).await {
        assert_eq!(result["success"], false, "{result}");
    }
    assert_eq!(
        drain(&broker, path, "g").await,
        [json!(1), json!(2), json!(3)]
    );
    broker.stop().await;
}

async fn a_partition_seek_moves_only_that_partition(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    push_each(&broker, "onepart", "a", &[json!("a0")]).await;
    let middle = cut(&broker).await;
    push_each(&broker, "onepart", "a", &[json!("a1"), json!("a2")]).await;
    push_each(&broker, "onepart", "b", &[json!("b0"), json!("b1")]).await;
    let path = "/api/v1/pop/queue/onepart?batch=10&consumerGroup=g&autoAck=true";
    assert_eq!(drain(&broker, path, "g").await.len(), 5);

    let reply = broker
        .client
        .post_json(
            "/api/v1/consumer-groups/g/queues/onepart/partitions/a/seek",
            &json!({"timestamp": middle}),
        )
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json(),
        json!({"success": true, "consumerGroup": "g", "queueName": "onepart",
               "partitionName": "a", "updated": true, "cursorMovedTo": 0})
    );
    assert_eq!(
        drain(&broker, path, "g").await,
        [json!("a1"), json!("a2")],
        "only partition a replays"
    );

    let reply = broker
        .client
        .post_json(
            "/api/v1/consumer-groups/g/queues/onepart/partitions/nope/seek",
            &json!({"toEnd": true}),
        )
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json(),
        json!({"success": false, "error": "Partition not found"})
    );
    broker.stop().await;
}

#[tokio::test]
async fn seek_requests_are_validated() {
    let broker = TestBroker::start().await;
    push(&broker, "seekv", "p", &[json!(1)]).await;
    let path = "/api/v1/consumer-groups/g/queues/seekv/seek";
    for body in [
        json!({}),
        json!({"toEnd": false}),
        json!({"timestamp": null}),
    ] {
        let reply = broker.client.post_json(path, &body).await;
        assert_eq!(reply.status, 400, "{body}");
        assert_eq!(
            reply.json(),
            json!({"error": "Must specify either 'toEnd': true or 'timestamp'"})
        );
    }
    let empty = broker
        .client
        .send(hyper::Method::POST, path, bytes::Bytes::new())
        .await;
    assert_eq!(empty.status, 400);
    for bad in [json!("yesterday"), json!(12)] {
        let reply = broker
            .client
            .post_json(path, &json!({"timestamp": bad}))
            .await;
        assert_eq!(reply.status, 400);
        assert!(
            reply.json()["error"]
                .as_str()
                .unwrap()
                .contains("timestamp"),
            "{:?}",
            reply.json()
        );
    }
    let reply = broker
        .client
        .post_json(
            "/api/v1/consumer-groups/g/queues/missing/seek",
            &json!({"toEnd": true}),
        )
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["success"], false);
    assert_eq!(reply.json()["error"], "Queue not found");
    broker.stop().await;
}

// ---------------------------------------------------------------------------
// POST /api/v1/consumer-groups/:group/subscription

async fn a_new_subscription_timestamp_starts_untouched_partitions_there(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    push(&broker, "retime", "a", &[json!("a0")]).await;
    let path = "/api/v1/pop/queue/retime?batch=10&consumerGroup=g&autoAck=true";
    assert_eq!(drain(&broker, path, "g").await, [json!("a0")]);
    // b is created after the group's first contact: it has no cursor yet.
    push_each(&broker, "retime", "b", &[json!("b-before")]).await;
    push_each(&broker, "retime", "a", &[json!("a-before")]).await;
    let at = cut(&broker).await;
    push_each(&broker, "retime", "b", &[json!("b-after")]).await;
    push_each(&broker, "retime", "a", &[json!("a-after")]).await;

    let reply = broker
        .client
        .post_json(
            "/api/v1/consumer-groups/g/subscription",
            &json!({"subscriptionTimestamp": at}),
        )
        .await;
    assert_eq!(reply.status, 200);
    let answer = reply.json();
    assert_eq!(answer["success"], true);
    assert_eq!(answer["consumerGroup"], "g");
    assert_eq!(answer["rowsUpdated"], 1);
    assert!(answer["newTimestamp"].as_str().unwrap().ends_with('Z'));

    let mut got = drain(&broker, path, "g").await;
    got.sort_by_key(ToString::to_string);
    assert_eq!(
        got,
        [json!("a-after"), json!("a-before"), json!("b-after")],
        "a's cursor must not move; b must start at the timestamp"
    );
    broker.stop().await;
}

#[tokio::test]
async fn a_subscription_change_needs_a_timestamp() {
    let broker = TestBroker::start().await;
    let path = "/api/v1/consumer-groups/g/subscription";
    let reply = broker.client.post_json(path, &json!({})).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.json(),
        json!({"error": "subscriptionTimestamp is required"})
    );
    let reply = broker
        .client
        .post_json(path, &json!({"subscriptionTimestamp": "soon"}))
        .await;
    assert_eq!(reply.status, 400);
    // A group with no records updates nothing and succeeds.
    let reply = broker
        .client
        .post_json(
            path,
            &json!({"subscriptionTimestamp": "2026-01-02T03:04:05.678Z"}),
        )
        .await;
    assert_eq!(
        reply.json(),
        json!({"success": true, "consumerGroup": "g",
               "newTimestamp": "2026-01-02T03:04:05.678Z", "rowsUpdated": 0})
    );
    broker.stop().await;
}

// ---------------------------------------------------------------------------
// GET /api/v1/consumer-groups, /consumer-groups/:group, /consumer-groups/lagging

#[tokio::test]
async fn the_consumer_group_views_are_computed_from_the_cursors() {
    let broker = TestBroker::start().await;
    // 5 pushed (offsets 0..4), 2 acked: offset lag 3; a third is leased.
    push(
        &broker,
        "views",
        "p",
        &[json!(0), json!(1), json!(2), json!(3), json!(4)],
    )
    .await;
    let first = pop(&broker, "/api/v1/pop/queue/views?batch=2&consumerGroup=g")
        .await
        .unwrap();
    ack_all(&broker, &first, "completed", Some("g")).await;
    let leased = pop(&broker, "/api/v1/pop/queue/views?batch=1&consumerGroup=g")
        .await
        .unwrap();
    let lease = leased["messages"][0]["leaseId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Queue mode on another queue, fully consumed.
    push(&broker, "other", "q", &[json!("x"), json!("y")]).await;
    drain(
        &broker,
        "/api/v1/pop/queue/other?batch=10&autoAck=true",
        "__QUEUE_MODE__",
    )
    .await;

    let list = broker.client.get("/api/v1/consumer-groups").await;
    assert_eq!(list.status, 200);
    let list = list.json();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2, "{list:?}");
    let queue_mode = &list[0];
    assert_eq!(queue_mode["name"], "__QUEUE_MODE__");
    assert_eq!(queue_mode["topics"], json!(["other"]));
    assert_eq!(queue_mode["queueName"], "other");
    // members counts the group's cursors (one, caught up, not leased): never
    // below partitionsWithLag; activeLeases counts live leases.
    assert_eq!(queue_mode["members"], 1);
    assert_eq!(queue_mode["activeLeases"], 0);
    assert_eq!(queue_mode["partitionsWithLag"], 0);
    assert_eq!(queue_mode["totalLag"], 0);
    assert_eq!(queue_mode["maxTimeLag"], 0);
    assert_eq!(queue_mode["state"], "Stable");
    let g = &list[1];
    assert_eq!(g["name"], "g");
    assert_eq!(g["topics"], json!(["views"]));
    assert_eq!(g["members"], 1);
    assert_eq!(g["activeLeases"], 1);
    assert_eq!(g["partitionsWithLag"], 1);
    assert_eq!(g["totalLag"], 3);
    assert!(g["maxTimeLag"].as_i64().unwrap() < 60);
    assert_eq!(g["state"], "Stable");
    assert_eq!(g["subscriptionMode"], "all");
    assert_eq!(g["subscriptionTimestamp"], Value::Null);
    assert!(g["subscriptionCreatedAt"].as_str().unwrap().ends_with('Z'));

    let detail = broker.client.get("/api/v1/consumer-groups/g").await.json();
    let partitions = detail["views"]["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 1);
    let p = &partitions[0];
    assert_eq!(p["partition"], "p");
    assert_eq!(p["workerId"], lease);
    assert_eq!(p["totalConsumed"], 2);
    assert_eq!(p["offsetLag"], 3);
    assert_eq!(p["leaseActive"], true);
    assert!(p["timeLagSeconds"].as_i64().unwrap() < 60);
    assert!(p["lastConsumedAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        broker
            .client
            .get("/api/v1/consumer-groups/nobody")
            .await
            .json(),
        json!({})
    );

    // Nothing is an hour behind yet.
    let lagging = broker.client.get("/api/v1/consumer-groups/lagging").await;
    assert_eq!(lagging.status, 200);
    assert_eq!(lagging.json(), json!([]));

    // Make the oldest unconsumed message two hours old.
    broker
        .sql()
        .await
        .execute(
            // A segment's time never changes in a broker's life: the kept
            // lag figures are told, as a write would tell them.
            "WITH moved AS (
                 UPDATE queen.log_segments s SET created_at = now() - interval '2 hours'
                   FROM queen.log_partitions p WHERE p.id = s.partition_id AND p.name = 'p'
                 RETURNING p.queue_id, p.id)
             INSERT INTO queen.figures_dirty (queue_id, partition_ids)
             SELECT queue_id, array_agg(DISTINCT id) FROM moved GROUP BY queue_id",
            &[],
        )
        .await
        .unwrap();
    let list = broker.client.get("/api/v1/consumer-groups").await.json();
    let g = &list[1];
    assert_eq!(g["state"], "Lagging");
    let max = g["maxTimeLag"].as_i64().unwrap();
    assert!((7200..7260).contains(&max), "{max}");

    let lagging = broker
        .client
        .get("/api/v1/consumer-groups/lagging")
        .await
        .json();
    let rows = lagging.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row["consumer_group"], "g");
    assert_eq!(row["queue_name"], "views");
    assert_eq!(row["partition_name"], "p");
    assert_eq!(row["partition_id"], leased["messages"][0]["partitionId"]);
    assert_eq!(row["worker_id"], lease);
    assert_eq!(row["offset_lag"], 3);
    let seconds = row["time_lag_seconds"].as_i64().unwrap();
    assert!((7200..7260).contains(&seconds), "{seconds}");
    assert_eq!(row["lag_hours"], 2.0);
    assert!(row["oldest_unconsumed_at"].as_str().unwrap().ends_with('Z'));
    assert!(row["last_consumed_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        broker
            .client
            .get("/api/v1/consumer-groups/lagging?minLagSeconds=10000")
            .await
            .json(),
        json!([])
    );
    assert_eq!(
        broker
            .client
            .get("/api/v1/consumer-groups/lagging?minLagSeconds=60")
            .await
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    broker.stop().await;
}

/// Issue 15, item 4 (in part): the DLQ listing's time filters, and
/// `DELETE /api/v1/messages/:partitionId/:transactionId`, which removes every
/// consumer group's dead letter of that message and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_filter_by_time_and_are_deleted_by_address() {
    let broker = TestBroker::start().await;
    crate::support::push(&broker, "letters", "p", &[json!(1), json!(2)]).await;
    // Both messages dead-lettered by two groups, one at a time: four rows.
    for group in ["a", "b"] {
        for _ in 0..2 {
            let popped = crate::support::pop(
                &broker,
                &format!("/api/v1/pop/queue/letters?consumerGroup={group}&batch=1"),
            )
            .await
            .unwrap();
            let acked = crate::support::ack_all(&broker, &popped, "dlq", Some(group)).await;
            assert_eq!(acked[0]["dlq"], true, "{acked:?}");
        }
    }
    let listed = broker.client.get("/api/v1/dlq?queue=letters").await.json();
    assert_eq!(listed["total"], 4);
    let cut = crate::support::cut(&broker).await;
    let before = broker
        .client
        .get(&format!("/api/v1/dlq?queue=letters&to={cut}"))
        .await
        .json();
    assert_eq!(before["total"], 4);
    let after = broker
        .client
        .get(&format!("/api/v1/dlq?queue=letters&from={cut}"))
        .await
        .json();
    assert_eq!(after["total"], 0);
    let bad = broker.client.get("/api/v1/dlq?from=yesterday").await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"], "from must be an ISO-8601 timestamp");

    let first = &listed["messages"].as_array().unwrap()[0];
    let (pid, txn) = (
        first["partitionId"].as_str().unwrap(),
        first["transactionId"].as_str().unwrap(),
    );
    let path = format!("/api/v1/messages/{pid}/{txn}");
    let deleted = broker.client.delete(&path).await;
    assert_eq!(deleted.status, 200);
    // Both groups' cursors are past it already: no cursor moves.
    assert_eq!(
        deleted.json(),
        json!({"success": true, "partitionId": pid, "transactionId": txn,
               "message": "Message deleted", "offset": 1, "offsets": [1],
               "consumerGroups": [], "deadLetters": 2})
    );
    // Both groups' rows of that message went; the other message's stayed.
    let left = broker.client.get("/api/v1/dlq?queue=letters").await.json();
    assert_eq!(left["total"], 2);
    assert!(left["messages"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["transactionId"] != txn));
    // Again: consumed by every group, no dead letter left: nothing to do.
    let again = broker.client.delete(&path).await;
    assert_eq!(again.status, 200);
    assert_eq!(
        (
            again.json()["consumerGroups"].clone(),
            again.json()["deadLetters"].clone()
        ),
        (json!([]), json!(0))
    );
    let unknown = broker
        .client
        .delete(&format!("/api/v1/messages/{pid}/no-such-message"))
        .await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json(), json!({"error": "Message not found"}));
    let malformed = broker.client.delete("/api/v1/messages/not-a-uuid/t").await;
    assert_eq!(malformed.status, 400);
    assert_eq!(malformed.json()["error"], "partitionId must be a UUID");
}

/// `DELETE /api/v1/messages/:partitionId/:transactionId` of a live message:
/// it is marked consumed for every group reading the partition, only while
/// that moves no cursor over another message and nobody holds it; otherwise
/// 409 naming the group in the way, and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_message_is_deleted_for_every_group_or_refused_naming_why() {
    let broker = TestBroker::start().await;
    push(
        &broker,
        "live",
        "p",
        &[json!(0), json!(1), json!(2), json!(3)],
    )
    .await;
    let path = |group: &str, batch: usize| {
        format!("/api/v1/pop/queue/live?consumerGroup={group}&batch={batch}")
    };
    let queue_mode = "/api/v1/pop/queue/live?batch=1";
    let first = pop(&broker, queue_mode).await.unwrap();
    ack_all(&broker, &first, "completed", None).await;
    let first_g = pop(&broker, &path("g", 1)).await.unwrap();
    ack_all(&broker, &first_g, "completed", Some("g")).await;
    // `slow` holds a cursor but has consumed nothing (a retry gives it back).
    let first_slow = pop(&broker, &path("slow", 1)).await.unwrap();
    ack_all(&broker, &first_slow, "retry", Some("slow")).await;

    let m1 = messages(&first).clone();
    let pid = m1[0]["partitionId"].as_str().unwrap().to_owned();
    let listed = broker
        .client
        .get("/api/v1/messages?queue=live")
        .await
        .json();
    let txn_of = |offset: i64| {
        listed["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["offset"] == offset)
            .unwrap()["transactionId"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let target = format!("/api/v1/messages/{pid}/{}", txn_of(1));
    let sql = broker.sql().await;
    let cursors = || {
        let sql = &sql;
        async move {
            sql.query(
                "SELECT c.consumer_group, c.committed FROM queen.log_consumers c \
                   JOIN queen.log_partitions p ON p.id = c.partition_id \
                  WHERE p.name = 'p' ORDER BY 1",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get::<_, String>(0), row.get::<_, i64>(1)))
            .collect::<Vec<_>>()
        }
    };
    let at_start = vec![
        ("__QUEUE_MODE__".to_owned(), 0),
        ("g".to_owned(), 0),
        ("slow".to_owned(), -1),
    ];
    assert_eq!(cursors().await, at_start);

    // Refused: `slow` has offset 0 to read first.
    let refused = broker.client.delete(&target).await;
    assert_eq!(refused.status, 409);
    let error = refused.json()["error"].as_str().unwrap().to_owned();
    assert!(
        error.contains("offset 1")
            && error.contains("consumer group slow has not consumed offsets 0 to 0 before it"),
        "{error}"
    );
    assert_eq!(cursors().await, at_start, "nothing changed");

    // Refused: `g` holds it in a live lease.
    let next_slow = pop(&broker, &path("slow", 1)).await.unwrap();
    ack_all(&broker, &next_slow, "completed", Some("slow")).await;
    let leased = pop(&broker, &path("g", 1)).await.unwrap();
    let refused = broker.client.delete(&target).await;
    assert_eq!(refused.status, 409);
    assert!(
        refused.json()["error"]
            .as_str()
            .unwrap()
            .contains("consumer group g holds it in a live lease"),
        "{}",
        refused.json()
    );
    ack_all(&broker, &leased, "retry", Some("g")).await;

    // Deleted: every group's next message, nobody holds it.
    let deleted = broker.client.delete(&target).await;
    assert_eq!(deleted.status, 200);
    assert_eq!(
        deleted.json(),
        json!({"success": true, "partitionId": pid, "transactionId": txn_of(1),
               "message": "Message deleted", "offset": 1, "offsets": [1],
               "consumerGroups": ["__QUEUE_MODE__", "g", "slow"], "deadLetters": 0})
    );
    // Every group reads on from offset 2, in order; nothing is skipped.
    for (pop_path, group) in [
        ("/api/v1/pop/queue/live?batch=10".to_owned(), None),
        (path("g", 10), Some("g")),
        (path("slow", 10), Some("slow")),
    ] {
        let rest = pop(&broker, &pop_path).await.unwrap();
        assert_eq!(data(&rest), [json!(2), json!(3)], "{group:?}");
        ack_all(&broker, &rest, "completed", group).await;
        assert!(pop(&broker, &pop_path).await.is_none(), "{group:?}");
    }
    let detail = broker.client.get(&target).await.json();
    assert_eq!(detail["status"], "completed", "{detail}");
    // A group that starts reading the partition later starts where its
    // subscription says: from the beginning, so it reads the message.
    let late = pop(&broker, &path("late", 10)).await.unwrap();
    assert_eq!(data(&late), [json!(0), json!(1), json!(2), json!(3)]);

    // No group reads the queue yet: nothing to mark consumed on, refused.
    push(&broker, "fresh", "p", &[json!("x")]).await;
    let fresh = broker
        .client
        .get("/api/v1/messages?queue=fresh")
        .await
        .json();
    let fresh_path = format!(
        "/api/v1/messages/{}/{}",
        fresh["messages"][0]["partitionId"].as_str().unwrap(),
        fresh["messages"][0]["transactionId"].as_str().unwrap()
    );
    let refused = broker.client.delete(&fresh_path).await;
    assert_eq!(refused.status, 409);
    assert!(
        refused.json()["error"]
            .as_str()
            .unwrap()
            .contains("no consumer group reads its queue yet"),
        "{}",
        refused.json()
    );
    assert_eq!(
        crate::support::pop_data(&broker, "/api/v1/pop/queue/fresh?autoAck=true").await,
        Some(vec![json!("x")]),
        "still there"
    );
    // Malformed ids.
    let malformed = broker
        .client
        .delete(&format!("/api/v1/messages/{pid}x/{}", txn_of(2)))
        .await;
    assert_eq!(malformed.status, 400);
    assert_eq!(malformed.json()["error"], "partitionId must be a UUID");
    broker.stop().await;
}
