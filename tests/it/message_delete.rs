//! `DELETE /api/v1/messages/:partitionId/:transactionId` where finding the
//! message, or the groups to mark it consumed for, is not simple: a replayed
//! dead letter (the message stored twice), a message older than the
//! transaction-id sidecar, more offsets than a delete decodes, and consumer
//! groups that have no cursor on the message's partition yet. The common
//! cases are in `lifecycle.rs`.

use queen_tests::TestBroker;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::{ack_all, data, expect_status, messages, pop, pop_data, push, push_items};

/// The partition id of `partition` of `queue`.
async fn partition_id(broker: &TestBroker, queue: &str, partition: &str) -> Uuid {
    broker
        .sql()
        .await
        .query_one(
            "SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id \
              WHERE q.name = $1 AND p.name = $2",
            &[&queue, &partition],
        )
        .await
        .unwrap()
        .get(0)
}

/// Purge partition `pid`'s transaction-id sidecar as retention does once its
/// rows are older than its window: the rows go and `txns_start` moves past
/// them.
async fn purge_sidecar(broker: &TestBroker, pid: Uuid) {
    broker
        .sql()
        .await
        .execute(
            "WITH gone AS (DELETE FROM queen.log_txns WHERE partition_id = $1) \
             UPDATE queen.log_partitions SET txns_start = last_offset + 1, oldest_txn_at = NULL \
              WHERE id = $1",
            &[&pid],
        )
        .await
        .unwrap();
}

/// Every cursor of partition `pid`: (group, committed), by group.
async fn cursors(broker: &TestBroker, pid: Uuid) -> Vec<(String, i64)> {
    broker
        .sql()
        .await
        .query(
            "SELECT consumer_group, committed FROM queen.log_consumers \
              WHERE partition_id = $1 ORDER BY 1",
            &[&pid],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// DELETE the message, insisting on `status`; returns the body.
async fn delete(broker: &TestBroker, pid: Uuid, txn: &str, status: u16) -> Value {
    let reply = broker
        .client
        .delete(&format!("/api/v1/messages/{pid}/{txn}"))
        .await;
    expect_status(&reply, status);
    reply.json()
}

/// The 409's error text, insisting it contains each of `parts`.
#[track_caller]
fn refused_with(body: &Value, parts: &[&str]) -> String {
    let error = body["error"].as_str().unwrap_or_default().to_owned();
    for part in parts {
        assert!(error.contains(part), "{part:?} missing from {error:?}");
    }
    error
}

/// Pop `group`'s next batch of `queue` (10) and ack it completed; `None` when
/// there is nothing.
async fn take(broker: &TestBroker, queue: &str, group: &str) -> Option<Vec<Value>> {
    let popped = pop(
        broker,
        &format!("/api/v1/pop/queue/{queue}?consumerGroup={group}&batch=10&wait=false"),
    )
    .await?;
    ack_all(broker, &popped, "completed", Some(group)).await;
    Some(data(&popped))
}

/// A replayed dead letter is the message again at a new offset, for the group
/// that dead-lettered it: the delete acts on that copy (the original, which
/// every group has passed, is not the one still delivered), and a group the
/// copy is not for is not in the way even with unread messages before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_replayed_dead_letter_deletes_the_copy_still_delivered() {
    let broker = TestBroker::start().await;
    let pushed = push(&broker, "again", "p", &[json!(1), json!(2), json!(3)]).await;
    let txn = pushed[1]["transaction_id"].as_str().unwrap().to_owned();
    let pid = partition_id(&broker, "again", "p").await;
    // g dead-letters 2; h completes everything.
    let popped = pop(
        &broker,
        "/api/v1/pop/queue/again?consumerGroup=g&batch=10&wait=false",
    )
    .await
    .unwrap();
    for message in messages(&popped) {
        let status = if message["data"] == json!(2) {
            "dlq"
        } else {
            "completed"
        };
        ack_all(&broker, &json!({"messages": [message]}), status, Some("g")).await;
    }
    assert_eq!(take(&broker, "again", "h").await.unwrap().len(), 3);
    // 4 is stored next; g reads it, h does not yet.
    push(&broker, "again", "p", &[json!(4)]).await;
    assert_eq!(take(&broker, "again", "g").await, Some(vec![json!(4)]));
    let retried = broker
        .client
        .post_json(&format!("/api/v1/messages/{pid}/{txn}/retry"), &json!({}))
        .await;
    expect_status(&retried, 200);

    // The copy is at offset 4, g's next; h has 4 (offset 3) unread before
    // it, but the copy is not for h.
    let deleted = delete(&broker, pid, &txn, 200).await;
    assert_eq!(
        deleted,
        json!({"success": true, "partitionId": pid, "transactionId": txn,
               "message": "Message deleted", "offset": 4, "offsets": [1, 4],
               "consumerGroups": ["g"], "deadLetters": 0})
    );
    assert_eq!(
        take(&broker, "again", "g").await,
        None,
        "g never gets it again"
    );
    assert_eq!(take(&broker, "again", "h").await, Some(vec![json!(4)]));
    assert_eq!(
        cursors(&broker, pid).await,
        [("g".to_owned(), 4), ("h".to_owned(), 4)]
    );
    broker.stop().await;
}

/// A message older than the transaction-id sidecar (retention purges it after
/// max(dedup window, completedRetentionSeconds, 900 s)) is found through its
/// dead letter's offset or by decoding the segments groups have not consumed:
/// never a 404 while it is stored, never a 200 that leaves it delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_older_than_the_sidecar_is_still_found_and_deleted() {
    let broker = TestBroker::start().await;
    let pushed = push(&broker, "old", "p", &[json!("x0"), json!("x1")]).await;
    let txn = |i: usize| pushed[i]["transaction_id"].as_str().unwrap().to_owned();
    let pid = partition_id(&broker, "old", "p").await;
    let batch_of_one = |group: &str| format!("/api/v1/pop/queue/old?consumerGroup={group}&batch=1");
    // a dead-letters x0; b holds a cursor and has consumed nothing.
    let popped = pop(&broker, &batch_of_one("a")).await.unwrap();
    ack_all(&broker, &popped, "dlq", Some("a")).await;
    let popped = pop(&broker, &batch_of_one("b")).await.unwrap();
    ack_all(&broker, &popped, "retry", Some("b")).await;
    purge_sidecar(&broker, pid).await;

    // Through the dead letter's offset: b still reads x0, so its cursor moves
    // too, not only the dead letter goes.
    assert_eq!(
        delete(&broker, pid, &txn(0), 200).await,
        json!({"success": true, "partitionId": pid, "transactionId": txn(0),
               "message": "Message deleted", "offset": 0, "offsets": [0],
               "consumerGroups": ["b"], "deadLetters": 1})
    );
    assert_eq!(take(&broker, "old", "b").await, Some(vec![json!("x1")]));

    // No dead letter: x1, a's next message, is found by decoding the
    // segments from the least advanced cursor.
    push(&broker, "old", "p", &[json!("x2")]).await;
    purge_sidecar(&broker, pid).await;
    let deleted = delete(&broker, pid, &txn(1), 200).await;
    assert_eq!(
        (&deleted["offsets"], &deleted["consumerGroups"]),
        (&json!([1]), &json!(["a"]))
    );
    assert_eq!(take(&broker, "old", "a").await, Some(vec![json!("x2")]));
    assert_eq!(take(&broker, "old", "b").await, Some(vec![json!("x2")]));

    // Consumed by every group and older than the sidecar: found below the
    // cursors, nothing to move.
    let again = delete(&broker, pid, &txn(1), 200).await;
    assert_eq!(
        (
            &again["offsets"],
            &again["consumerGroups"],
            &again["deadLetters"]
        ),
        (&json!([1]), &json!([]), &json!(0))
    );
    // Everything stored was searched: an unknown id is not found.
    assert_eq!(
        delete(&broker, pid, "never-pushed", 404).await,
        json!({"error": "Message not found"})
    );
    broker.stop().await;
}

/// More offsets older than the sidecar than one delete decodes: what could not
/// be searched is said, never guessed; and a transaction id stored more than
/// `MAX_COPIES` times is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_reads_a_bounded_number_of_segments() {
    let broker = TestBroker::start().await;
    push_items(
        &broker,
        vec![json!({"queue": "wide", "partition": "p", "payload": 0, "transactionId": "target"})],
    )
    .await;
    push_items(
        &broker,
        vec![json!({"queue": "wide", "partition": "p", "payload": 1, "transactionId": "filler"})],
    )
    .await;
    let pid = partition_id(&broker, "wide", "p").await;
    // g holds a cursor before everything.
    let popped = pop(&broker, "/api/v1/pop/queue/wide?consumerGroup=g&batch=1")
        .await
        .unwrap();
    ack_all(&broker, &popped, "retry", Some("g")).await;
    // Offsets 2 and on: the filler's segment stored again (the frame holds no
    // offset), far more segments than a delete decodes.
    let last = i64::try_from(queen_engine::MAX_SCAN_SEGMENTS).unwrap() + 100;
    broker
        .sql()
        .await
        .execute(
            "WITH copies AS (INSERT INTO queen.log_segments \
                   (partition_id, base_offset, end_offset, msg_count, created_at, blob) \
                 SELECT s.partition_id, n, n, 1, s.created_at, s.blob \
                   FROM queen.log_segments s, generate_series(2, $2::bigint) n \
                  WHERE s.partition_id = $1 AND s.base_offset = 1) \
             UPDATE queen.log_partitions SET last_offset = $2 WHERE id = $1",
            &[&pid, &last],
        )
        .await
        .unwrap();
    purge_sidecar(&broker, pid).await;
    let scanned = i64::try_from(queen_engine::MAX_SCAN_SEGMENTS).unwrap();

    // Found at g's next offset, but g goes on to read offsets that were not
    // searched, where another copy could be.
    let refused = delete(&broker, pid, "target", 409).await;
    refused_with(
        &refused,
        &[
            "at offset 0",
            &format!("consumer group g has offsets 1 to {last} to read"),
        ],
    );
    // Not found in what was searched, and the rest is unknown.
    let unknown = delete(&broker, pid, "nope", 409).await;
    refused_with(
        &unknown,
        &[&format!(
            "cannot locate the message: offsets {scanned} to {last} are older than"
        )],
    );
    let many = delete(&broker, pid, "filler", 409).await;
    refused_with(
        &many,
        &[&format!(
            "stored more than {} times",
            queen_engine::MAX_COPIES
        )],
    );
    assert_eq!(
        cursors(&broker, pid).await,
        [("g".to_owned(), -1)],
        "nothing changed"
    );
    assert_eq!(
        pop_data(
            &broker,
            "/api/v1/pop/queue/wide?consumerGroup=g&batch=1&autoAck=true"
        )
        .await,
        Some(vec![json!(0)])
    );
    broker.stop().await;
}

/// Consumer groups known to read the queue (a subscription record, or a
/// cursor on another partition) but without a cursor on the message's
/// partition: their cursor is created past the message when it is where they
/// would start (the partition's first message), else the delete is refused
/// naming them; a group subscribed `new` after it needs nothing, and one
/// whose start is not known refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_without_a_cursor_on_the_partition_are_covered_too() {
    let broker = TestBroker::start().await;
    push(&broker, "known", "a", &[json!("a0")]).await;
    // Queue mode and g read the queue while it has only partition a.
    assert!(pop_data(&broker, "/api/v1/pop/queue/known?autoAck=true")
        .await
        .is_some());
    assert!(pop_data(
        &broker,
        "/api/v1/pop/queue/known?consumerGroup=g&autoAck=true"
    )
    .await
    .is_some());
    let pushed = push(&broker, "known", "b", &[json!("b0"), json!("b1")]).await;
    let txn = |i: usize| pushed[i]["transaction_id"].as_str().unwrap().to_owned();
    let b = partition_id(&broker, "known", "b").await;
    // n subscribes `new` after those messages; its cursors go, its record
    // stays.
    assert!(pop(
        &broker,
        "/api/v1/pop/queue/known?consumerGroup=n&subscriptionMode=new&wait=false"
    )
    .await
    .is_none());
    let reply = broker
        .client
        .delete("/api/v1/consumer-groups/n/queues/known?deleteMetadata=false")
        .await;
    expect_status(&reply, 200);
    assert_eq!(cursors(&broker, b).await, []);

    // b1 is not b's first message: queue mode and g would read b0 first.
    let refused = delete(&broker, b, &txn(1), 409).await;
    let error = refused_with(
        &refused,
        &[
            "consumer group __QUEUE_MODE__ has not consumed offsets 0 to 0 before it",
            "consumer group g has not consumed offsets 0 to 0 before it",
        ],
    );
    assert!(!error.contains("group n"), "{error}");
    assert_eq!(cursors(&broker, b).await, []);

    // A pop creating g's cursor holds the cursor-creation lock: busy.
    let holder = broker.sql().await;
    holder
        .execute(
            "SELECT pg_advisory_lock(queen.log_cursor_lock_key($1, 'g'))",
            &[&b],
        )
        .await
        .unwrap();
    let busy = delete(&broker, b, &txn(0), 409).await;
    refused_with(
        &busy,
        &["consumer group g is creating its cursor on the partition right now"],
    );
    assert_eq!(cursors(&broker, b).await, []);
    holder
        .execute(
            "SELECT pg_advisory_unlock(queen.log_cursor_lock_key($1, 'g'))",
            &[&b],
        )
        .await
        .unwrap();

    // b0 is: their cursors are created past it; n's start is past it already.
    assert_eq!(
        delete(&broker, b, &txn(0), 200).await,
        json!({"success": true, "partitionId": b, "transactionId": txn(0),
               "message": "Message deleted", "offset": 0, "offsets": [0],
               "consumerGroups": ["__QUEUE_MODE__", "g"], "deadLetters": 0})
    );
    assert_eq!(
        cursors(&broker, b).await,
        [("__QUEUE_MODE__".to_owned(), 0), ("g".to_owned(), 0)]
    );
    assert_eq!(
        pop_data(&broker, "/api/v1/pop/queue/known?autoAck=true").await,
        Some(vec![json!("b1")])
    );
    assert_eq!(
        pop_data(
            &broker,
            "/api/v1/pop/queue/known?consumerGroup=g&autoAck=true"
        )
        .await,
        Some(vec![json!("b1")])
    );
    assert_eq!(
        pop_data(
            &broker,
            "/api/v1/pop/queue/known?consumerGroup=n&autoAck=true&wait=false"
        )
        .await,
        None
    );

    // d pops partition a alone: no record says where it would start on c.
    assert!(pop_data(
        &broker,
        "/api/v1/pop/queue/known/partition/a?consumerGroup=d&autoAck=true"
    )
    .await
    .is_some());
    let pushed = push(&broker, "known", "c", &[json!("c0")]).await;
    let c = partition_id(&broker, "known", "c").await;
    let refused = delete(
        &broker,
        c,
        pushed[0]["transaction_id"].as_str().unwrap(),
        409,
    )
    .await;
    refused_with(
        &refused,
        &["consumer group d pops single partitions, has not read this one"],
    );
    assert_eq!(cursors(&broker, c).await, [], "nothing created");
    broker.stop().await;
}
