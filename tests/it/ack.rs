//! The ack path over real HTTP and PostgreSQL (issue: ack path).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use queen_engine::EngineConfig;
use queen_tests::TestBroker;
use serde_json::{json, Value};

use crate::support::{
    ack_all, ack_one, configure, data, expect_status, messages, pop, push_items, select_i64,
};

/// Push `payloads` to one partition, each with its own unique transaction id.
async fn push(broker: &TestBroker, queue: &str, partition: &str, payloads: &[Value]) {
    let items: Vec<Value> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| {
            json!({"queue": queue, "partition": partition, "payload": p,
                   "transactionId": format!("{queue}-{partition}-{i}-{}", uuid::Uuid::now_v7())})
        })
        .collect();
    push_items(broker, items).await;
}

/// (committed, worker_id, batch_retry_count, attempt_count) of the queue-mode
/// cursor of `partition`.
async fn cursor(broker: &TestBroker, partition: &str) -> (i64, Option<uuid::Uuid>, i32, i32) {
    let row = broker
        .sql()
        .await
        .query_one(
            "SELECT c.committed, c.worker_id, c.batch_retry_count, c.attempt_count \
             FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id \
             WHERE p.name = $1 AND c.consumer_group = '__QUEUE_MODE__'",
            &[&partition],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

#[tokio::test]
async fn a_full_batch_ack_is_one_positional_advance_and_frees_the_partition() {
    let broker = TestBroker::start().await;
    push(
        &broker,
        "acks",
        "p",
        &[json!(1), json!(2), json!(3), json!(4)],
    )
    .await;
    let first = pop(&broker, "/api/v1/pop/queue/acks?batch=2")
        .await
        .unwrap();
    assert_eq!(data(&first), [json!(1), json!(2)]);
    let before = broker.engine.observe().ack_stats();
    let results = ack_all(&broker, &first, "completed", None).await;
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result["index"], i);
        assert_eq!(result["success"], true);
        assert_eq!(result["leaseReleased"], true);
        assert_eq!(result["dlq"], false);
        assert_eq!(result["queueName"], "acks");
        assert_eq!(result["partitionName"], "p");
    }
    let after = broker.engine.observe().ack_stats();
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 0),
        "not positional"
    );
    assert_eq!(cursor(&broker, "p").await.0, 1);
    // Released: the next batch at once, no lease expiry needed.
    let second = pop(&broker, "/api/v1/pop/queue/acks?batch=10")
        .await
        .unwrap();
    assert_eq!(data(&second), [json!(3), json!(4)]);
    // Repeating an ack is harmless.
    let again = ack_all(&broker, &first, "completed", None).await;
    assert!(again.iter().all(|r| r["success"] == true));
    assert_eq!(cursor(&broker, "p").await.0, 1);
    broker.stop().await;
}

#[tokio::test]
async fn partial_acks_and_acks_at_another_broker_resolve_through_the_sidecar() {
    let broker = TestBroker::start().await;
    let other = TestBroker::serve(broker.db.clone(), EngineConfig::default()).await;
    push(&broker, "partial", "p", &[json!(1), json!(2), json!(3)]).await;
    let popped = pop(&broker, "/api/v1/pop/queue/partial?batch=3")
        .await
        .unwrap();
    let msgs = messages(&popped);
    // One message, acked at the broker that did not serve the pop.
    let result = ack_one(&other, &msgs[0], "completed", None).await;
    assert_eq!(result["success"], true);
    assert_eq!(result["leaseReleased"], false);
    let (committed, worker, _, _) = cursor(&broker, "p").await;
    assert_eq!(committed, 0);
    assert!(worker.is_some(), "a partial ack released the lease");
    // Still leased: nobody else gets the rest yet.
    assert!(pop(&broker, "/api/v1/pop/queue/partial?batch=3")
        .await
        .is_none());
    // Acking the last one completes everything before it and releases.
    let result = ack_one(&broker, &msgs[2], "completed", None).await;
    assert_eq!(result["leaseReleased"], true);
    assert_eq!(cursor(&broker, "p").await.0, 2);
    other.stop().await;
    broker.stop().await;
}

#[tokio::test]
async fn unknown_messages_and_wrong_leases_are_refused_and_nothing_is_lost() {
    let broker = TestBroker::start().await;
    push(&broker, "refuse", "p", &[json!(1)]).await;
    let popped = pop(&broker, "/api/v1/pop/queue/refuse?batch=1")
        .await
        .unwrap();
    let message = &messages(&popped)[0];
    let unknown = json!({"transactionId": "never-pushed", "partitionId": message["partitionId"],
                         "leaseId": message["leaseId"]});
    let result = ack_one(&broker, &unknown, "completed", None).await;
    assert_eq!(result["success"], false);
    assert_eq!(result["error"], "Message not found");
    let mut wrong = message.clone();
    wrong["leaseId"] = json!(uuid::Uuid::now_v7().to_string());
    let result = ack_one(&broker, &wrong, "completed", None).await;
    assert_eq!(result["success"], false);
    assert_eq!(result["error"], "Invalid or expired lease");
    let mut garbage = message.clone();
    garbage["leaseId"] = json!("not-a-uuid");
    assert_eq!(
        ack_one(&broker, &garbage, "completed", None).await["error"],
        "Invalid or expired lease"
    );
    // Nothing moved.
    assert_eq!(cursor(&broker, "p").await.0, -1);
    // An unknown status answers unsuccessful with a null error and does nothing.
    let result = ack_one(&broker, message, "weird", None).await;
    assert_eq!(result["success"], false);
    assert!(result["error"].is_null());
    assert_eq!(cursor(&broker, "p").await.0, -1);
    broker.stop().await;
}

#[tokio::test]
async fn malformed_acks_are_400_and_an_empty_batch_is_an_empty_array() {
    let broker = TestBroker::start().await;
    let cases = [
        (
            "/api/v1/ack",
            json!({"partitionId": "x"}),
            "transactionId is required",
        ),
        (
            "/api/v1/ack",
            json!({"transactionId": "t"}),
            "partitionId is required to ensure message uniqueness",
        ),
        (
            "/api/v1/ack",
            json!({"transactionId": "t", "partitionId": "nope"}),
            "partitionId must be a UUID",
        ),
        (
            "/api/v1/ack/batch",
            json!({}),
            "acknowledgments array is required",
        ),
        (
            "/api/v1/ack/batch",
            json!({"acknowledgments": [{"partitionId": "x"}]}),
            "Each acknowledgment must have a valid transactionId string (acknowledgments[0])",
        ),
        (
            "/api/v1/ack/batch",
            json!({"acknowledgments": [{"transactionId": "t", "partitionId": uuid::Uuid::now_v7().to_string()}, {"transactionId": "t"}]}),
            "Each acknowledgment must have a valid partitionId string (acknowledgments[1])",
        ),
    ];
    for (path, body, message) in cases {
        let reply = broker.client.post_json(path, &body).await;
        assert_eq!(reply.status, 400, "{body}");
        assert_eq!(reply.json()["error"], message, "{body}");
    }
    let reply = broker
        .client
        .post_json("/api/v1/ack/batch", &json!({"acknowledgments": []}))
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json(), json!([]));
    broker.stop().await;
}

#[tokio::test]
async fn failures_spend_the_retry_budget_then_dead_letter_the_head() {
    let broker = TestBroker::start().await;
    configure(&broker, "retries", json!({"retryLimit": 1})).await;
    push(
        &broker,
        "retries",
        "p",
        &[json!("poison"), json!("good-1"), json!("good-2")],
    )
    .await;
    // First failure: one retry spent, lease released, same message again.
    let first = pop(&broker, "/api/v1/pop/queue/retries?batch=1")
        .await
        .unwrap();
    assert_eq!(data(&first), [json!("poison")]);
    let result = ack_one(&broker, &messages(&first)[0], "failed", Some("boom")).await;
    assert_eq!(
        (result["success"].clone(), result["dlq"].clone()),
        (json!(true), json!(false))
    );
    assert_eq!(result["leaseReleased"], true);
    assert_eq!(cursor(&broker, "p").await.2, 1, "retry not counted");
    // Second failure: the budget (1) is spent, the head goes to the DLQ.
    let second = pop(&broker, "/api/v1/pop/queue/retries?batch=1")
        .await
        .unwrap();
    assert_eq!(data(&second), [json!("poison")]);
    let result = ack_one(&broker, &messages(&second)[0], "failed", Some("boom again")).await;
    assert_eq!(result["dlq"], true);
    let (committed, worker, retries, _) = cursor(&broker, "p").await;
    assert_eq!(
        (committed, worker, retries),
        (0, None, 0),
        "cursor not moved past exactly the poison"
    );
    // The poison does not pin the partition: the good ones follow in order.
    let next = pop(&broker, "/api/v1/pop/queue/retries?batch=10")
        .await
        .unwrap();
    assert_eq!(data(&next), [json!("good-1"), json!("good-2")]);
    // The dead letter is a snapshot with the error text.
    let dlq = broker.client.get("/api/v1/dlq?queue=retries").await;
    assert_eq!(dlq.status, 200);
    let dlq = dlq.json();
    let letters = dlq["messages"].as_array().unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(dlq["total"], 1);
    assert_eq!(letters[0]["data"], "poison");
    assert!(letters[0]["errorMessage"]
        .as_str()
        .unwrap()
        .contains("boom again"));
    assert_eq!(letters[0]["retryCount"], 1);
    assert_eq!(
        letters[0]["transactionId"],
        messages(&second)[0]["transactionId"]
    );
    assert_eq!(letters[0]["consumerGroup"], "__QUEUE_MODE__");
    broker.stop().await;
}

#[tokio::test]
async fn with_dead_lettering_off_the_poison_is_dropped_and_the_cursor_still_moves() {
    let broker = TestBroker::start().await;
    configure(
        &broker,
        "nodlq",
        json!({"retryLimit": 0, "dlqEnabled": false}),
    )
    .await;
    push(&broker, "nodlq", "p", &[json!("poison"), json!("good")]).await;
    let popped = pop(&broker, "/api/v1/pop/queue/nodlq?batch=1")
        .await
        .unwrap();
    let result = ack_one(&broker, &messages(&popped)[0], "failed", None).await;
    assert_eq!(result["success"], true);
    assert_eq!(cursor(&broker, "p").await.0, 0);
    let rows: i64 = select_i64(&broker.sql().await, "SELECT count(*) FROM queen.log_dlq").await;
    assert_eq!(rows, 0);
    assert_eq!(
        data(&pop(&broker, "/api/v1/pop/queue/nodlq").await.unwrap()),
        [json!("good")]
    );
    broker.stop().await;
}

#[tokio::test]
async fn retry_gives_the_batch_back_without_spending_budget_and_dlq_files_at_once() {
    let broker = TestBroker::start().await;
    push(&broker, "statuses", "p", &[json!("a"), json!("b")]).await;
    let popped = pop(&broker, "/api/v1/pop/queue/statuses?batch=1")
        .await
        .unwrap();
    let result = ack_one(&broker, &messages(&popped)[0], "retry", None).await;
    assert_eq!(result["leaseReleased"], true);
    assert_eq!(cursor(&broker, "p").await.2, 0, "retry spent budget");
    let popped = pop(&broker, "/api/v1/pop/queue/statuses?batch=1")
        .await
        .unwrap();
    assert_eq!(data(&popped), [json!("a")]);
    let result = ack_one(&broker, &messages(&popped)[0], "dlq", Some("bad shape")).await;
    assert_eq!(result["dlq"], true);
    assert_eq!(cursor(&broker, "p").await.0, 0);
    assert_eq!(
        data(&pop(&broker, "/api/v1/pop/queue/statuses").await.unwrap()),
        [json!("b")]
    );
    broker.stop().await;
}

#[tokio::test]
async fn a_consumer_that_never_acks_loses_nothing_and_spends_no_budget() {
    let broker = TestBroker::start().await;
    configure(&broker, "crash", json!({"leaseTime": 1, "retryLimit": 1})).await;
    push(&broker, "crash", "p", &[json!(1), json!(2)]).await;
    let first = pop(&broker, "/api/v1/pop/queue/crash?batch=10")
        .await
        .unwrap();
    assert_eq!(cursor(&broker, "p").await.3, 1);
    // The consumer dies. Twice.
    for attempt in 2..=3 {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let again = pop(
            &broker,
            "/api/v1/pop/queue/crash?batch=10&wait=true&timeout=3000",
        )
        .await
        .unwrap();
        assert_eq!(data(&again), data(&first));
        let (committed, _, retries, attempts) = cursor(&broker, "p").await;
        assert_eq!((committed, retries, attempts), (-1, 0, attempt));
    }
    // Lease expiry never spent the budget: a real failure still gets its retry.
    let last = pop(
        &broker,
        "/api/v1/pop/queue/crash?batch=10&wait=true&timeout=3000",
    )
    .await
    .unwrap();
    let result = ack_one(&broker, &messages(&last)[0], "failed", None).await;
    assert_eq!(
        result["dlq"], false,
        "the budget was spent by lease expiries"
    );
    broker.stop().await;
}

#[tokio::test]
async fn lease_extend_pushes_the_expiry_of_every_partition_of_the_lease() {
    let broker = TestBroker::start().await;
    configure(&broker, "extend", json!({"leaseTime": 2})).await;
    for p in ["a", "b"] {
        push(&broker, "extend", p, &[json!(p)]).await;
    }
    let popped = pop(&broker, "/api/v1/pop/queue/extend?batch=10&partitions=2")
        .await
        .unwrap();
    assert_eq!(popped["partitionsClaimed"], 2);
    let lease = popped["leaseId"].as_str().unwrap().to_owned();
    // The Python client sends no body at all.
    let reply = broker
        .client
        .send(
            hyper::Method::POST,
            &format!("/api/v1/lease/{lease}/extend"),
            bytes::Bytes::new(),
        )
        .await;
    assert_eq!(reply.status, 200);
    let body = reply.json();
    assert_eq!(body["success"], true);
    assert_eq!(body["leaseId"], lease);
    assert!(body["newExpiresAt"].as_str().unwrap().ends_with('Z'));
    let reply = broker
        .client
        .post_json(
            &format!("/api/v1/lease/{lease}/extend"),
            &json!({"seconds": 30}),
        )
        .await;
    assert_eq!(reply.json()["success"], true);
    let sql = broker.sql().await;
    let min_left: f64 = sql
        .query_one(
            "SELECT extract(epoch FROM min(lease_expires_at) - now())::float8 FROM queen.log_consumers WHERE worker_id = $1",
            &[&lease.parse::<uuid::Uuid>().unwrap()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        min_left > 20.0,
        "a partition of the lease was not extended: {min_left}"
    );
    // Still leased after the original 2 s.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        pop(&broker, "/api/v1/pop/queue/extend?batch=10&partitions=2")
            .await
            .is_none()
    );
    let unknown = broker
        .client
        .post_json(
            &format!("/api/v1/lease/{}/extend", uuid::Uuid::now_v7()),
            &json!({}),
        )
        .await;
    assert_eq!(unknown.json()["success"], false);
    assert_eq!(unknown.json()["error"], "Lease not found");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hundred_thousand_messages_with_concurrent_consumers_and_acks_arrive_exactly_once() {
    const TOTAL: usize = 100_000;
    const PARTITIONS: usize = 20;
    const CONSUMERS: usize = 16;
    let broker = TestBroker::start().await;
    let ids: Vec<String> = (0..TOTAL).map(|i| format!("m-{i}")).collect();
    for chunk in ids.chunks(2000) {
        let items: Vec<Value> = chunk
            .iter()
            .enumerate()
            .map(|(i, id)| {
                json!({"queue": "bulk", "partition": format!("p{}", i % PARTITIONS),
                       "transactionId": id, "payload": {"id": id}})
            })
            .collect();
        push_items(&broker, items).await;
    }
    let seen = Arc::new(parking_lot::Mutex::new(HashMap::<String, usize>::new()));
    let mut consumers = Vec::new();
    for _ in 0..CONSUMERS {
        let client = broker.client.clone();
        let seen = Arc::clone(&seen);
        consumers.push(tokio::spawn(async move {
            let mut empty = 0;
            while empty < 3 {
                let reply = client
                    .get("/api/v1/pop/queue/bulk?batch=200&wait=true&timeout=500")
                    .await;
                if reply.status == 204 {
                    empty += 1;
                    continue;
                }
                empty = 0;
                let body = reply.json();
                let messages = body["messages"].as_array().unwrap();
                {
                    let mut seen = seen.lock();
                    for m in messages {
                        *seen
                            .entry(m["transactionId"].as_str().unwrap().to_owned())
                            .or_default() += 1;
                    }
                }
                let acks: Vec<Value> = messages
                    .iter()
                    .map(|m| {
                        json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                                    "leaseId": m["leaseId"], "status": "completed"})
                    })
                    .collect();
                let reply = client
                    .post_json("/api/v1/ack/batch", &json!({"acknowledgments": acks}))
                    .await;
                assert_eq!(reply.status, 200);
                assert!(reply
                    .json()
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|r| r["success"] == true));
            }
        }));
    }
    for consumer in consumers {
        consumer.await.unwrap();
    }
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), TOTAL, "lost {} messages", TOTAL - seen.len());
    let repeated = seen.values().filter(|n| **n > 1).count();
    assert_eq!(repeated, 0, "{repeated} messages delivered more than once");
    let (positional, by_hash) = broker.engine.observe().ack_stats();
    eprintln!("100k messages: {positional} positional acks, {by_hash} by hash");
    assert!(positional > by_hash, "the ack registry was bypassed");
    broker.stop().await;
}

/// `seconds` of a lease extend is read like every integer in a body (the one
/// coercion in `wire.rs`): an integer string counts, anything else answers
/// 400 naming the field, and a refused extend changes nothing.
#[tokio::test]
async fn lease_extend_reads_seconds_like_every_integer_in_a_body() {
    let broker = TestBroker::start().await;
    push(&broker, "secs", "p", &[json!(1)]).await;
    let popped = pop(&broker, "/api/v1/pop/queue/secs").await.unwrap();
    let path = format!(
        "/api/v1/lease/{}/extend",
        popped["leaseId"].as_str().unwrap()
    );
    let reply = broker
        .client
        .post_json(&path, &json!({"seconds": "90"}))
        .await;
    expect_status(&reply, 200);
    assert_eq!(reply.json()["success"], true);
    for (seconds, error) in [
        (json!(1.5), "seconds must be an integer"),
        (json!("soon"), "seconds must be an integer"),
        (json!(-1), "seconds must not be negative"),
        (json!(0), "seconds must be a positive integer"),
        (json!(1_u64 << 40), "seconds must be at most 2147483647"),
    ] {
        let reply = broker
            .client
            .post_json(&path, &json!({"seconds": seconds}))
            .await;
        expect_status(&reply, 400);
        assert_eq!(reply.json()["error"], error, "{seconds}");
    }
    broker.stop().await;
}

/// Ack `popped`'s messages in one `/ack/batch` call, message `i` with
/// `statuses[i]` (an error text with each non-completed one).
async fn ack_each(broker: &TestBroker, popped: &Value, statuses: &[&str]) -> Vec<Value> {
    let acks: Vec<Value> = messages(popped)
        .iter()
        .zip(statuses)
        .map(|(m, status)| {
            json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                   "leaseId": m["leaseId"], "status": status,
                   "error": format!("{status} {}", m["data"])})
        })
        .collect();
    let reply = broker
        .client
        .post_json("/api/v1/ack/batch", &json!({"acknowledgments": acks}))
        .await;
    expect_status(&reply, 200);
    reply.json().as_array().unwrap().clone()
}

/// The dead letters of `queue`: (payload, error text), oldest offset first.
async fn dead_letters(broker: &TestBroker, queue: &str) -> Vec<(Value, String)> {
    let reply = broker
        .client
        .get(&format!("/api/v1/dlq?queue={queue}"))
        .await;
    expect_status(&reply, 200);
    let mut letters: Vec<(Value, String)> = reply.json()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["data"].clone(),
                l["errorMessage"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    letters.sort_by_key(|(data, _)| data.as_i64());
    letters
}

#[tokio::test]
async fn an_ack_batch_with_several_dead_letters_files_each_and_completes_the_rest() {
    let broker = TestBroker::start().await;
    push(
        &broker,
        "several",
        "p",
        &(0..6).map(|i| json!(i)).collect::<Vec<_>>(),
    )
    .await;
    let popped = pop(&broker, "/api/v1/pop/queue/several?batch=10")
        .await
        .unwrap();
    assert_eq!(data(&popped).len(), 6);
    let statuses = [
        "completed",
        "dlq",
        "completed",
        "dlq",
        "completed",
        "completed",
    ];
    let results = ack_each(&broker, &popped, &statuses).await;
    for (result, status) in results.iter().zip(statuses) {
        assert_eq!(result["success"], true, "{results:?}");
        assert_eq!(result["dlq"], status == "dlq", "{results:?}");
    }
    // Each dead letter filed with its own payload and error.
    assert_eq!(
        dead_letters(&broker, "several").await,
        [
            (json!(1), "dlq 1".to_owned()),
            (json!(3), "dlq 3".to_owned())
        ]
    );
    let (committed, worker, retries, _) = cursor(&broker, "p").await;
    assert_eq!((committed, worker, retries), (5, None, 0));
    // Nothing comes back, now or after the lease would have expired.
    assert!(pop(&broker, "/api/v1/pop/queue/several").await.is_none());
    broker.stop().await;
}

#[tokio::test]
async fn a_failed_item_stops_the_advance_there_and_only_what_follows_comes_back() {
    let broker = TestBroker::start().await;
    configure(&broker, "stops", json!({"retryLimit": 2})).await;
    push(
        &broker,
        "stops",
        "p",
        &(0..5).map(|i| json!(i)).collect::<Vec<_>>(),
    )
    .await;
    let popped = pop(&broker, "/api/v1/pop/queue/stops?batch=10")
        .await
        .unwrap();
    let results = ack_each(
        &broker,
        &popped,
        &["completed", "dlq", "failed", "completed", "completed"],
    )
    .await;
    let success: Vec<bool> = results.iter().map(|r| r["success"] == true).collect();
    assert_eq!(success, [true, true, true, false, false], "{results:?}");
    assert!(results[3]["error"]
        .as_str()
        .unwrap()
        .starts_with("Not applied"));
    // The cursor sits before the failed one, its budget charged once.
    let (committed, worker, retries, _) = cursor(&broker, "p").await;
    assert_eq!((committed, worker, retries), (1, None, 1));
    assert_eq!(dead_letters(&broker, "stops").await.len(), 1);
    // The failed one and what follows come back, in order.
    let again = pop(&broker, "/api/v1/pop/queue/stops?batch=10")
        .await
        .unwrap();
    assert_eq!(data(&again), [json!(2), json!(3), json!(4)]);
    // Failing it again spends the rest of the budget; past it, the failed
    // one is dead-lettered in place and the batch's later items complete.
    let results = ack_each(&broker, &again, &["failed", "completed", "completed"]).await;
    assert_eq!(results[1]["success"], false, "{results:?}");
    let third = pop(&broker, "/api/v1/pop/queue/stops?batch=10")
        .await
        .unwrap();
    assert_eq!(data(&third), [json!(2), json!(3), json!(4)]);
    let results = ack_each(&broker, &third, &["failed", "completed", "completed"]).await;
    let flags: Vec<(bool, bool)> = results
        .iter()
        .map(|r| (r["success"] == true, r["dlq"] == true))
        .collect();
    assert_eq!(
        flags,
        [(true, true), (true, false), (true, false)],
        "{results:?}"
    );
    let (committed, worker, retries, _) = cursor(&broker, "p").await;
    assert_eq!((committed, worker, retries), (4, None, 0));
    let letters = dead_letters(&broker, "stops").await;
    assert_eq!(
        letters.iter().map(|(d, _)| d.clone()).collect::<Vec<_>>(),
        [json!(1), json!(2)]
    );
    assert!(pop(&broker, "/api/v1/pop/queue/stops").await.is_none());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_on_another_broker_after_the_sidecar_purge_complete_each_message_once() {
    let broker = TestBroker::start_with(EngineConfig {
        retention_interval: None,
        ..EngineConfig::default()
    })
    .await;
    configure(&broker, "purged", json!({"leaseTime": 2})).await;
    // Five segments, so the span is several rows of sidecar and segments.
    for i in 0..5 {
        push(&broker, "purged", "p", &[json!(i)]).await;
    }
    let popped = pop(&broker, "/api/v1/pop/queue/purged?batch=10")
        .await
        .unwrap();
    assert_eq!(data(&popped).len(), 5);
    // The sidecar ages past its window and the real retention pass purges it.
    let sql = broker.sql().await;
    // (Backdated in UTC: an immutable expression, which Citus takes in an
    // UPDATE; `created_at - interval` it refuses.)
    sql.batch_execute(
        "UPDATE queen.log_txns SET created_at = timezone('UTC', timezone('UTC', created_at) - interval '1 hour');
         UPDATE queen.log_partitions SET oldest_txn_at = timezone('UTC', timezone('UTC', oldest_txn_at) - interval '1 hour');",
    )
    .await
    .unwrap();
    let removed = broker.engine.retention_pass().await.unwrap();
    assert_eq!(removed.txn_rows, 5);
    // Every ack lands on a broker that never saw the lease: one by one, the
    // fourth as a dead letter, then the last two again (a repeated ack).
    let other = TestBroker::serve(broker.db.clone(), EngineConfig::default()).await;
    let all = messages(&popped);
    for (i, message) in all.iter().enumerate() {
        let status = if i == 3 { "dlq" } else { "completed" };
        let result = ack_one(&other, message, status, None).await;
        assert_eq!(result["success"], true, "message {i}: {result:?}");
    }
    assert_eq!(
        other.engine.observe().ack_stats(),
        (0, 5),
        "every ack resolved by hash"
    );
    let (committed, worker, _, _) = cursor(&broker, "p").await;
    assert_eq!((committed, worker), (4, None));
    assert_eq!(
        dead_letters(&broker, "purged").await,
        [(json!(3), "Moved to DLQ".to_owned())]
    );
    // Past the lease, nothing is delivered again.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(pop(&other, "/api/v1/pop/queue/purged").await.is_none());
    assert!(pop(&broker, "/api/v1/pop/queue/purged").await.is_none());
    other.stop().await;
    broker.stop().await;
}

/// A message stored with a NUL in its transaction id and producer (pushes
/// refuse both now; an older broker, or an embedding program, may have
/// stored one): a `dlq` ack of it through `/ack/batch` files it, with U+FFFD
/// for the NUL, instead of failing on the text column and pinning the
/// partition.
#[tokio::test]
async fn a_stored_id_with_a_nul_is_dead_lettered_not_a_500() {
    let broker = TestBroker::start().await;
    let item = |txn: &str| queen_engine::PushItem {
        tenant: queen_engine::naming::default_tenant(),
        queue: "nul".to_owned(),
        partition: "p".to_owned(),
        transaction_id: Some(txn.to_owned()),
        trace_id: None,
        producer_sub: Some("svc\0x".to_owned()),
        payload: bytes::Bytes::from_static(b"1"),
    };
    broker
        .engine
        .push(vec![item("poison\0id"), item("after")])
        .await
        .unwrap();
    let popped = pop(&broker, "/api/v1/pop/queue/nul?batch=10")
        .await
        .unwrap();
    assert_eq!(messages(&popped)[0]["transactionId"], "poison\u{0}id");
    let results = ack_each(&broker, &popped, &["dlq", "completed"]).await;
    assert_eq!(results[0]["dlq"], true, "{results:?}");
    assert_eq!(results[1]["success"], true, "{results:?}");
    let letters = broker.client.get("/api/v1/dlq?queue=nul").await.json();
    assert_eq!(letters["messages"][0]["transactionId"], "poison\u{FFFD}id");
    assert_eq!(cursor(&broker, "p").await.0, 1);
    broker.stop().await;
}
