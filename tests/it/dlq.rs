//! Issue 15, item 4: replaying dead letters. `POST
//! /api/v1/messages/:partitionId/:transactionId/retry` and `POST
//! /api/v1/dlq/requeue` move dead letters back into the log, each exactly
//! once and in one transaction with its push; the replayed message is a new
//! message at the head of its partition, delivered again to the groups it
//! failed in and to no other, and its ack moves that group's cursor past it.

use queen_engine::EngineConfig;
use queen_tests::TestBroker;
use serde_json::{json, Value};

use crate::support::{ack_all, configure, data, expect_status, messages, pop, push, select_i64};

/// Pop everything of `queue` for `group` (batch 10), acking each message
/// `completed`, except payloads in `dead` which are acked `dlq`. Returns the
/// payloads in the order they were acked.
async fn consume(broker: &TestBroker, queue: &str, group: &str, dead: &[Value]) -> Vec<Value> {
    let mut seen = Vec::new();
    while let Some(popped) = pop(
        broker,
        &format!("/api/v1/pop/queue/{queue}?consumerGroup={group}&batch=10"),
    )
    .await
    {
        for message in messages(&popped) {
            let status = if dead.contains(&message["data"]) {
                "dlq"
            } else {
                "completed"
            };
            let one = json!({"messages": [message.clone()]});
            let acked = ack_all(broker, &one, status, Some(group)).await;
            assert_eq!(acked[0]["success"], true, "{acked:?}");
            // A dead letter moves the cursor past it and keeps the lease:
            // the rest of the batch is still this consumer's to ack.
            seen.push(message["data"].clone());
        }
    }
    seen
}

/// The DLQ listing of `queue`.
async fn letters(broker: &TestBroker, queue: &str) -> Value {
    broker
        .client
        .get(&format!("/api/v1/dlq?queue={queue}"))
        .await
        .json()
}

/// (committed offset of `group`, last offset) of the queue's only partition.
async fn cursor(broker: &TestBroker, queue: &str, group: &str) -> (i64, i64) {
    let sql = broker.sql().await;
    let committed = select_i64(
        &sql,
        &format!(
            "SELECT c.committed FROM queen.log_consumers c \
               JOIN queen.log_partitions p ON p.id = c.partition_id \
               JOIN queen.queues q ON q.id = p.queue_id \
              WHERE q.name = '{queue}' AND c.consumer_group = '{group}'"
        ),
    )
    .await;
    let last = select_i64(
        &sql,
        &format!(
            "SELECT p.last_offset FROM queen.log_partitions p \
               JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '{queue}'"
        ),
    )
    .await;
    (committed, last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_dead_letter_is_delivered_again_and_its_ack_moves_the_cursor() {
    let broker = TestBroker::start().await;
    let pushed = push(&broker, "replay", "p", &[json!(1), json!(2), json!(3)]).await;
    let txn = pushed[1]["transaction_id"].as_str().unwrap().to_owned();
    let pid = pushed[1]["partition_id"].as_str().unwrap().to_owned();
    assert_eq!(
        consume(&broker, "replay", "g", &[json!(2)]).await,
        [json!(1), json!(2), json!(3)]
    );
    // Another group consumed everything before the replay.
    assert_eq!(consume(&broker, "replay", "h", &[]).await.len(), 3);
    assert_eq!(letters(&broker, "replay").await["total"], 1);

    let path = format!("/api/v1/messages/{pid}/{txn}/retry");
    let retried = broker.client.post_json(&path, &json!({})).await;
    expect_status(&retried, 200);
    assert_eq!(
        retried.json(),
        json!({"success": true, "partitionId": pid, "transactionId": txn,
               "requeued": 1, "deadLetters": 1})
    );
    assert_eq!(letters(&broker, "replay").await["total"], 0);

    // The group it failed in receives it again, same transaction id, at a
    // new offset at the head; acking it moves the cursor past it.
    let popped = pop(&broker, "/api/v1/pop/queue/replay?consumerGroup=g&batch=10")
        .await
        .expect("the replayed message");
    assert_eq!(data(&popped), [json!(2)]);
    let message = &messages(&popped)[0];
    assert_eq!(message["transactionId"], txn.as_str());
    assert_ne!(message["id"], pushed[1]["message_id"]);
    // Acked through a second broker, whose ack registry does not know the
    // lease: the transaction id resolves through the sidecar, where it is
    // stored twice, and must resolve to the replayed offset.
    let other = TestBroker::serve(broker.db.clone(), EngineConfig::default()).await;
    let acked = ack_all(&other, &popped, "completed", Some("g")).await;
    assert_eq!(acked[0]["success"], true, "{acked:?}");
    assert_eq!(other.engine.observe().ack_stats().1, 1, "acked by hash");
    other.stop().await;
    assert_eq!(cursor(&broker, "replay", "g").await, (3, 3));
    assert!(pop(
        &broker,
        "/api/v1/pop/queue/replay?consumerGroup=g&wait=false"
    )
    .await
    .is_none());
    // The replay is for the group it failed in only: h, which completed the
    // message, does not see it again, and its cursor moves over it.
    assert_eq!(
        consume(&broker, "replay", "h", &[]).await,
        Vec::<Value>::new()
    );
    assert_eq!(cursor(&broker, "replay", "h").await, (3, 3));

    // Nothing left to replay: 404, and nothing is written.
    let again = broker.client.post_json(&path, &json!({})).await;
    assert_eq!(again.status, 404);
    assert_eq!(again.json()["error"], "Dead letter not found");
    assert_eq!(cursor(&broker, "replay", "g").await.1, 3);
    let bad = broker
        .client
        .post_json("/api/v1/messages/nope/t/retry", &json!({}))
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"], "partitionId must be a UUID");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_retries_replay_a_dead_letter_exactly_once() {
    let broker = TestBroker::start().await;
    for round in 0..5 {
        let queue = format!("race-{round}");
        let pushed = push(&broker, &queue, "p", &[json!("poison")]).await;
        consume(&broker, &queue, "g", &[json!("poison")]).await;
        let path = format!(
            "/api/v1/messages/{}/{}/retry",
            pushed[0]["partition_id"].as_str().unwrap(),
            pushed[0]["transaction_id"].as_str().unwrap()
        );
        let empty = json!({});
        let (a, b) = tokio::join!(
            broker.client.post_json(&path, &empty),
            broker.client.post_json(&path, &empty)
        );
        let mut statuses = [a.status.as_u16(), b.status.as_u16()];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 404], "{a:?} {b:?}");
        // One new message, not two.
        assert_eq!(cursor(&broker, &queue, "g").await, (0, 1));
        assert_eq!(consume(&broker, &queue, "g", &[]).await, [json!("poison")]);
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_moves_a_range_oldest_first_and_counts_messages_once() {
    let broker = TestBroker::start().await;
    let payloads: Vec<Value> = (0..5).map(|i| json!(i)).collect();
    push(&broker, "bulk", "p", &payloads).await;
    push(&broker, "bulk", "other", &[json!("stays")]).await;
    consume(&broker, "bulk", "g", &payloads).await;
    // Message 0 also fails in group h: two rows, one message.
    consume(&broker, "bulk", "h", &[json!(0)]).await;
    consume(&broker, "bulk", "g2", &[json!("stays")]).await;
    assert_eq!(letters(&broker, "bulk").await["total"], 7);

    let first = broker
        .client
        .post_json(
            "/api/v1/dlq/requeue",
            &json!({"queue": "bulk", "partition": "p", "consumerGroup": "g", "limit": 2}),
        )
        .await;
    expect_status(&first, 200);
    assert_eq!(
        first.json(),
        json!({"success": true, "queue": "bulk", "requeued": 2, "deadLetters": 2})
    );
    let rest = broker
        .client
        .post_json(
            "/api/v1/dlq/requeue",
            &json!({"queue": "bulk", "partition": "p"}),
        )
        .await
        .json();
    // g's three remaining rows and h's row of message 0, which g's first
    // requeue already replayed: four rows, four messages.
    assert_eq!(rest["deadLetters"], 4);
    assert_eq!(rest["requeued"], 4);
    let left = letters(&broker, "bulk").await;
    assert_eq!(left["total"], 1);
    assert_eq!(left["messages"][0]["partition"], "other");
    // g reads the five again, each requeue in original offset order; the
    // second one's copy of 0 carries h's row only, so h alone reads it.
    assert_eq!(
        consume(&broker, "bulk", "g", &[]).await,
        [json!(0), json!(1), json!(2), json!(3), json!(4)]
    );
    assert_eq!(consume(&broker, "bulk", "h", &[]).await, [json!(0)]);

    for (body, error) in [
        (json!({}), "queue is required"),
        (
            json!({"queue": "bulk", "limit": 0}),
            "limit must be between 1 and 1000",
        ),
        (
            json!({"queue": "bulk", "from": "then"}),
            "from must be an ISO-8601 timestamp",
        ),
        (
            json!({"queue": "bulk", "consumerGroup": 3}),
            "consumerGroup must be a string",
        ),
    ] {
        let reply = broker.client.post_json("/api/v1/dlq/requeue", &body).await;
        assert_eq!(reply.status, 400, "{body}");
        assert_eq!(reply.json()["error"], error, "{body}");
    }
    assert_eq!(letters(&broker, "bulk").await["total"], 1);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_dead_letter_is_replayed_sealed_and_delivered_in_clear() {
    let key: queen_engine::EncryptionKey =
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
            .parse()
            .unwrap();
    let broker = TestBroker::start_with(EngineConfig {
        encryption_key: Some(key),
        ..EngineConfig::default()
    })
    .await;
    configure(&broker, "sealed", json!({"encryptionEnabled": true})).await;
    push(&broker, "sealed", "p", &[json!({"secret": "s3cr3t"})]).await;
    consume(&broker, "sealed", "g", &[json!({"secret": "s3cr3t"})]).await;
    let requeued = broker
        .client
        .post_json("/api/v1/dlq/requeue", &json!({"queue": "sealed"}))
        .await
        .json();
    assert_eq!(requeued["requeued"], 1);
    assert_eq!(
        consume(&broker, "sealed", "g", &[]).await,
        [json!({"secret": "s3cr3t"})]
    );
    // Stored sealed: the plaintext appears in no segment (it does in a
    // plain queue's).
    push(&broker, "plain", "p", &[json!({"secret": "s3cr3t"})]).await;
    let sql = broker.sql().await;
    let plain = select_i64(
        &sql,
        "SELECT count(*) FROM queen.log_segments s JOIN queen.log_partitions p \
           ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id \
          WHERE q.name = 'plain' AND position('s3cr3t'::bytea in s.blob) > 0",
    )
    .await;
    assert_eq!(plain, 1);
    let leaked = select_i64(
        &sql,
        "SELECT count(*) FROM queen.log_segments s JOIN queen.log_partitions p \
           ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id \
          WHERE q.name = 'sealed' AND position('s3cr3t'::bytea in s.blob) > 0",
    )
    .await;
    assert_eq!(leaked, 0);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_reaches_only_the_groups_that_dead_lettered_it_and_is_stored_once() {
    let broker = TestBroker::start().await;
    push(&broker, "aud", "p", &[json!(1), json!(2), json!(3)]).await;
    // g and k dead-letter 2; h completes everything first.
    assert_eq!(consume(&broker, "aud", "h", &[]).await.len(), 3);
    consume(&broker, "aud", "g", &[json!(2)]).await;
    consume(&broker, "aud", "k", &[json!(2)]).await;
    assert_eq!(letters(&broker, "aud").await["total"], 2);
    let replayed = broker
        .client
        .post_json("/api/v1/dlq/requeue", &json!({"queue": "aud"}))
        .await;
    expect_status(&replayed, 200);
    assert_eq!(replayed.json()["deadLetters"], 2);
    assert_eq!(replayed.json()["requeued"], 1);
    // Stored once: one new offset for both groups.
    assert_eq!(cursor(&broker, "aud", "h").await.1, 3);
    // h, which had completed it, gets nothing; g and k get it once each,
    // leased, and their acks (through a broker that did not serve them)
    // move their cursors past it.
    assert!(
        pop(&broker, "/api/v1/pop/queue/aud?consumerGroup=h&wait=false")
            .await
            .is_none()
    );
    let other = TestBroker::serve(broker.db.clone(), EngineConfig::default()).await;
    for group in ["g", "k"] {
        let popped = pop(
            &broker,
            &format!("/api/v1/pop/queue/aud?consumerGroup={group}&batch=10"),
        )
        .await
        .expect("the replayed message");
        assert_eq!(data(&popped), [json!(2)], "{group}");
        let acked = ack_all(&other, &popped, "completed", Some(group)).await;
        assert_eq!(acked[0]["success"], true, "{acked:?}");
        assert_eq!(cursor(&broker, "aud", group).await, (3, 3), "{group}");
    }
    other.stop().await;
    for group in ["g", "h", "k"] {
        assert!(pop(
            &broker,
            &format!("/api/v1/pop/queue/aud?consumerGroup={group}&wait=false")
        )
        .await
        .is_none());
    }
    // h's cursor was moved over the copy it does not see.
    assert_eq!(cursor(&broker, "aud", "h").await, (3, 3));
    broker.stop().await;
}
