//! Issue 15, item 5: queue options the reference stores and ignores, made
//! real. `retryDelay` holds a failed batch back from its group for that many
//! milliseconds (when the configure request names it; left out, the
//! reference's 1000 is echoed and not applied, as the reference never
//! applied it); `maxSize` refuses a push that would take the queue's depth
//! past it, naming the queue, and writes nothing of that request.

use std::time::{Duration, Instant};

use queen_engine::EngineConfig;
use queen_tests::TestBroker;
use serde_json::json;

use crate::support::{ack_all, both_paths, configure, data, pop, push, stored};

both_paths!(a_failed_batch_comes_back_after_the_retry_delay);

async fn a_failed_batch_comes_back_after_the_retry_delay(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    configure(
        &broker,
        "slow-retry",
        json!({"retryDelay": 1500, "retryLimit": 3}),
    )
    .await;
    push(&broker, "slow-retry", "p", &[json!(1), json!(2)]).await;
    let popped = pop(&broker, "/api/v1/pop/queue/slow-retry?batch=10")
        .await
        .expect("the batch");
    // The hold starts when the ack commits, after this instant.
    let failed_at = Instant::now();
    let acked = ack_all(&broker, &popped, "failed", None).await;
    assert_eq!(acked[0]["success"], true, "{acked:?}");
    // The hold's nil lease is no client's to extend.
    let extend = broker
        .client
        .post_json(
            "/api/v1/lease/00000000-0000-0000-0000-000000000000/extend",
            &json!({"seconds": 60}),
        )
        .await
        .json();
    assert_eq!(extend["error"], "Lease not found", "{extend}");
    // Not visible during the delay, to a quick pop or a parked one...
    assert!(pop(&broker, "/api/v1/pop/queue/slow-retry?wait=false")
        .await
        .is_none());
    let parked = pop(
        &broker,
        "/api/v1/pop/queue/slow-retry?batch=10&wait=true&timeout=8000",
    )
    .await
    .expect("the batch again, once the delay is over");
    let waited = failed_at.elapsed();
    // ...and the parked one gets it once the delay ends.
    assert_eq!(data(&parked), [json!(1), json!(2)]);
    assert!(
        waited >= Duration::from_millis(1450),
        "redelivered after {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(7),
        "redelivered after {waited:?}"
    );

    // Without retryDelay in the request the reference's 1000 is echoed and
    // the batch comes back at once, as clients expect from the reference.
    let reply = broker
        .client
        .post_json(
            "/api/v1/configure",
            &json!({"queue": "quick-retry", "options": {"retryLimit": 3}}),
        )
        .await;
    assert_eq!(reply.json()["options"]["retryDelay"], 1000);
    push(&broker, "quick-retry", "p", &[json!("x")]).await;
    let popped = pop(&broker, "/api/v1/pop/queue/quick-retry")
        .await
        .expect("the message");
    ack_all(&broker, &popped, "failed", None).await;
    let again = pop(&broker, "/api/v1/pop/queue/quick-retry?wait=false").await;
    assert_eq!(again.map(|p| data(&p)), Some(vec![json!("x")]));
    broker.stop().await;
}

async fn push_status(broker: &TestBroker, items: serde_json::Value) -> (u16, serde_json::Value) {
    let reply = broker
        .client
        .post_json("/api/v1/push", &json!({ "items": items }))
        .await;
    (reply.status.as_u16(), reply.json())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_size_refuses_a_push_past_it_whole_and_counts_what_is_consumed() {
    let broker = TestBroker::start().await;
    configure(&broker, "bounded", json!({"maxSize": 5})).await;
    let item =
        |partition: &str, n: i32| json!({"queue": "bounded", "partition": partition, "payload": n});
    let (status, _) = push_status(&broker, json!([item("a", 1), item("a", 2), item("b", 3)])).await;
    assert_eq!(status, 201);
    // Past the limit: refused, named, with Retry-After, and nothing of the
    // request is written, in any of its partitions.
    let reply = broker
        .client
        .post_json(
            "/api/v1/push",
            &json!({"items": [item("c", 4), item("a", 5), item("b", 6)]}),
        )
        .await;
    assert_eq!(reply.status, 429);
    assert_eq!(
        reply.json()["error"],
        "queue bounded is full: this push would take its depth past its maxSize"
    );
    assert_eq!(
        reply.headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    assert_eq!(stored(&broker, "bounded").await, 3);
    let partitions = crate::support::select_i64(
        &broker.sql().await,
        "SELECT count(*) FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id \
          WHERE q.name = 'bounded' AND p.name = 'c'",
    )
    .await;
    assert_eq!(partitions, 0, "the refused request created a partition");
    // Up to the limit is fine; a duplicate takes no room.
    let (status, results) = push_status(
        &broker,
        json!([item("c", 4), {"queue": "bounded", "partition": "c", "transactionId": "t", "payload": 5}]),
    )
    .await;
    assert_eq!(status, 201, "{results}");
    let (status, results) = push_status(
        &broker,
        json!([{"queue": "bounded", "partition": "c", "transactionId": "t", "payload": 5}]),
    )
    .await;
    assert_eq!(
        (status, results[0]["status"].clone()),
        (201, json!("duplicate"))
    );
    assert_eq!(push_status(&broker, json!([item("a", 6)])).await.0, 429);
    // Consumed messages leave the depth.
    let popped = pop(&broker, "/api/v1/pop/queue/bounded/partition/a?batch=10")
        .await
        .expect("partition a");
    ack_all(&broker, &popped, "completed", None).await;
    let (status, results) = push_status(&broker, json!([item("a", 7), item("b", 8)])).await;
    assert_eq!(status, 201, "{results}");
    assert_eq!(stored(&broker, "bounded").await, 7);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pushes_never_take_a_bounded_queue_past_max_size() {
    let broker = TestBroker::start().await;
    configure(&broker, "race-bounded", json!({"maxSize": 10})).await;
    let pushes = (0..24).map(|i| {
        let client = broker.client.clone();
        async move {
            client
                .post_json(
                    "/api/v1/push",
                    &json!({"items": [{"queue": "race-bounded", "partition": format!("p{}", i % 3), "payload": i}]}),
                )
                .await
                .status
                .as_u16()
        }
    });
    let statuses = futures_join_all(pushes).await;
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        10,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        14,
        "{statuses:?}"
    );
    assert_eq!(stored(&broker, "race-bounded").await, 10);
    broker.stop().await;
}

/// The depth a bounded queue's push is refused on counts a consumption once
/// its broker has marked it (the kept figures, `figures_queue_depth_v1`):
/// another broker's acks count after its next fold (this test folds by
/// hand), this broker's own at once (a refused push writes them and tries
/// once more). The depth is never under-counted: the queue never grows
/// past its `maxSize`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_size_counts_a_consumption_once_its_broker_marked_it() {
    let unfolded = || EngineConfig {
        figures_interval: None,
        ..EngineConfig::default()
    };
    let broker = TestBroker::start_with(unfolded()).await;
    let other = TestBroker::serve(broker.db.clone(), unfolded()).await;
    configure(&broker, "shared-bound", json!({"maxSize": 2})).await;
    let item = |n: i32| json!({"queue": "shared-bound", "partition": "p", "payload": n});
    assert_eq!(push_status(&broker, json!([item(1), item(2)])).await.0, 201);
    assert_eq!(push_status(&broker, json!([item(3)])).await.0, 429);

    // The other broker consumes both; the fold takes the cursor it created.
    let popped = pop(&other, "/api/v1/pop/queue/shared-bound?batch=10")
        .await
        .expect("the two messages");
    assert_eq!(data(&popped).len(), 2);
    broker.engine.figures_pass().await.unwrap();
    ack_all(&other, &popped, "completed", None).await;
    assert_eq!(push_status(&broker, json!([item(3)])).await.0, 429);
    other.engine.figures_publish().await.unwrap();
    assert_eq!(push_status(&broker, json!([item(3)])).await.0, 201);

    // This broker's own ack: the refused push writes the mark and retries.
    let popped = pop(&broker, "/api/v1/pop/queue/shared-bound?batch=10")
        .await
        .expect("message 3");
    broker.engine.figures_pass().await.unwrap();
    ack_all(&broker, &popped, "completed", None).await;
    let (status, results) = push_status(&broker, json!([item(4), item(5)])).await;
    assert_eq!(status, 201, "{results}");
    assert_eq!(push_status(&broker, json!([item(6)])).await.0, 429);
    assert_eq!(stored(&broker, "shared-bound").await, 5);
    other.stop().await;
    broker.stop().await;
}

/// A transaction that acks a message of a full bounded queue and pushes
/// one to it: its own ack makes the room (it is marked inside the
/// transaction, before the push counts the depth), as the scan of every
/// partition used to see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_acking_and_pushing_to_a_full_bounded_queue_counts_its_own_ack() {
    let broker = TestBroker::start_with(EngineConfig {
        figures_interval: None,
        ..EngineConfig::default()
    })
    .await;
    configure(&broker, "txn-bound", json!({"maxSize": 2})).await;
    let item = |n: i32| json!({"queue": "txn-bound", "partition": "p", "payload": n});
    assert_eq!(push_status(&broker, json!([item(1), item(2)])).await.0, 201);
    let popped = pop(&broker, "/api/v1/pop/queue/txn-bound?batch=1")
        .await
        .expect("message 1");
    let message = popped["messages"][0].clone();
    // The fold takes the cursor the pop created: only the ack is unmarked.
    broker.engine.figures_pass().await.unwrap();
    let reply = broker
        .client
        .post_json(
            "/api/v1/transaction",
            &json!({"operations": [
                {"type": "ack", "transactionId": message["transactionId"],
                 "partitionId": message["partitionId"], "status": "completed"},
                {"type": "push", "items": [item(3)]},
            ], "requiredLeases": [message["leaseId"]]}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.json());
    assert_eq!(reply.json()["success"], true);
    assert_eq!(stored(&broker, "txn-bound").await, 3);
    // Full again: a transaction that acks nothing is refused whole.
    let reply = broker
        .client
        .post_json(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "push", "items": [item(4)]}]}),
        )
        .await;
    assert_ne!(reply.status, 200, "{}", reply.json());
    assert_eq!(stored(&broker, "txn-bound").await, 3);
    broker.stop().await;
}

/// Run `futures` concurrently on the runtime; their outputs in order.
async fn futures_join_all<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}
