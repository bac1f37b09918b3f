//! `POST /api/v1/transaction` and `POST /api/v1/traces`.

use queen_tests::TestBroker;
use serde_json::{json, Value};

use crate::support::{expect_status, push_items, select_i64};

/// Push one message with transaction id `txn` to the default partition of `queue`.
async fn push(broker: &TestBroker, queue: &str, payload: Value, txn: &str) {
    push_items(
        broker,
        vec![json!({"queue": queue, "payload": payload, "transactionId": txn})],
    )
    .await;
}

/// Pop one message of `queue` (leased); `None` unless the answer is a 200.
async fn pop_one(broker: &TestBroker, queue: &str) -> Option<Value> {
    let reply = broker
        .client
        .get(&format!("/api/v1/pop/queue/{queue}?batch=1"))
        .await;
    (reply.status == 200).then(|| reply.json()["messages"][0].clone())
}

#[tokio::test]
async fn a_transaction_pushes_and_acks_atomically() {
    let broker = TestBroker::start().await;
    push(&broker, "source", json!({"step": 1}), "s-1").await;
    let message = pop_one(&broker, "source").await.unwrap();
    let reply = broker
        .client
        .post_json(
            "/api/v1/transaction",
            &json!({"operations": [
                {"type": "push", "items": [{"queue": "target", "payload": {"step": 2}}, {"queue": "target"}]},
                {"type": "ack", "transactionId": message["transactionId"], "partitionId": message["partitionId"],
                 "status": "completed"},
            ], "requiredLeases": [message["leaseId"]]}),
        )
        .await;
    expect_status(&reply, 200);
    let body = reply.json();
    assert_eq!(body["success"], true);
    assert!(body["transactionId"]
        .as_str()
        .unwrap()
        .parse::<uuid::Uuid>()
        .is_ok());
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(
        (results[0]["type"].clone(), results[0]["success"].clone()),
        (json!("push"), json!(true))
    );
    assert_eq!(results[0]["queueName"], "target");
    assert!(results[0]["messageId"].as_str().is_some());
    assert_eq!(
        (results[2]["type"].clone(), results[2]["index"].clone()),
        (json!("ack"), json!(2))
    );
    // The source is done; the target holds both, a missing payload being {}.
    assert!(pop_one(&broker, "source").await.is_none());
    let first = pop_one(&broker, "target").await.unwrap();
    assert_eq!(first["data"], json!({"step": 2}));
    let reply = broker.client.get("/api/v1/pop/queue/target?batch=5").await;
    assert_eq!(
        reply.status, 204,
        "the second pushed item is under the first's lease"
    );
    broker.stop().await;
}

#[tokio::test]
async fn any_failure_rolls_back_every_operation() {
    let broker = TestBroker::start().await;
    push(&broker, "src", json!(1), "kept").await;
    let message = pop_one(&broker, "src").await.unwrap();
    let cases = [
        // The ack of a message that does not exist.
        json!({"operations": [
            {"type": "push", "items": [{"queue": "dest", "payload": 1}]},
            {"type": "ack", "transactionId": message["transactionId"], "partitionId": message["partitionId"]},
            {"type": "ack", "transactionId": "ghost", "partitionId": message["partitionId"]},
        ]}),
        // A push of a transaction id already stored.
        json!({"operations": [
            {"type": "ack", "transactionId": message["transactionId"], "partitionId": message["partitionId"]},
            {"type": "push", "items": [{"queue": "src", "payload": 2, "transactionId": "kept"}]},
        ]}),
        // A transaction id repeated within one push, on one partition.
        json!({"operations": [
            {"type": "push", "items": [
                {"queue": "dest", "payload": 1, "transactionId": "once"},
                {"queue": "dest", "payload": 2, "transactionId": "twice"},
                {"queue": "dest", "payload": 3, "transactionId": "twice"},
            ]},
        ]}),
        // An unknown ack status.
        json!({"operations": [
            {"type": "push", "items": [{"queue": "dest", "payload": 1}]},
            {"type": "ack", "transactionId": message["transactionId"], "partitionId": message["partitionId"],
             "status": "maybe"},
        ]}),
    ];
    for body in cases {
        let reply = broker.client.post_json("/api/v1/transaction", &body).await;
        assert_eq!(reply.status, 400, "{body}");
        let answer = reply.json();
        assert_eq!(answer["success"], false);
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains("operation failed"), "{answer}");
        if body.to_string().contains("twice") {
            assert!(error.ends_with("duplicate transactionId twice"), "{answer}");
        }
    }
    let sql = broker.sql().await;
    assert_eq!(
        select_i64(&sql, "SELECT count(*) FROM queen.queues WHERE name = 'dest'").await
            + select_i64(&sql, "SELECT count(*) FROM queen.log_segments s JOIN queen.log_partitions p ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'dest'").await,
        0,
        "a rolled-back push left something behind"
    );
    let committed: i64 = select_i64(
        &sql,
        "SELECT c.committed FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id \
         JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'src'",
    )
    .await;
    assert_eq!(committed, -1, "a rolled-back ack moved the cursor");
    broker.stop().await;
}

#[tokio::test]
async fn a_failed_ack_in_a_transaction_goes_straight_to_the_dlq() {
    let broker = TestBroker::start().await;
    push(&broker, "tx-fail", json!("bad"), "b-1").await;
    push(&broker, "tx-fail", json!("next"), "b-2").await;
    let message = pop_one(&broker, "tx-fail").await.unwrap();
    let reply = broker
        .client
        .post_json(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "ack", "transactionId": message["transactionId"],
                                     "partitionId": message["partitionId"], "status": "failed",
                                     "error": "handler exploded"}]}),
        )
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["results"][0]["dlq"], true);
    let dlq = broker.client.get("/api/v1/dlq?queue=tx-fail").await.json();
    assert_eq!(dlq["messages"][0]["data"], "bad");
    assert_eq!(dlq["messages"][0]["errorMessage"], "handler exploded");
    assert_eq!(pop_one(&broker, "tx-fail").await.unwrap()["data"], "next");
    broker.stop().await;
}

#[tokio::test]
async fn malformed_transactions_are_400_and_write_nothing() {
    let broker = TestBroker::start().await;
    let cases = [
        (json!({}), "operations array required"),
        (
            json!({"operations": []}),
            "operations array cannot be empty",
        ),
        (
            json!({"operations": [{"type": "delete"}]}),
            "operations[0].type \"delete\" is not push or ack",
        ),
        (
            json!({"operations": [{"items": []}]}),
            "operations[0].type is required",
        ),
        (
            json!({"operations": [{"type": "push", "items": [{"queue": "q"}, {"payload": 1}]}]}),
            "operations[0].items[1].queue is required",
        ),
        (
            json!({"operations": [{"type": "push", "items": [{"queue": "q"}]}, {"type": "ack", "transactionId": "t"}]}),
            "operations[1].partitionId is required",
        ),
    ];
    for (body, message) in cases {
        let reply = broker.client.post_json("/api/v1/transaction", &body).await;
        assert_eq!(reply.status, 400, "{body}");
        assert_eq!(reply.json()["error"], message, "{body}");
    }
    assert_eq!(
        select_i64(&broker.sql().await, "SELECT count(*) FROM queen.queues").await,
        0
    );
    broker.stop().await;
}

#[tokio::test]
async fn traces_are_recorded_against_existing_messages_only() {
    let broker = TestBroker::start().await;
    push(&broker, "traced", json!(1), "t-1").await;
    let message = pop_one(&broker, "traced").await.unwrap();
    let reply = broker
        .client
        .post_json(
            "/api/v1/traces",
            &json!({"transactionId": "t-1", "partitionId": message["partitionId"],
                    "traceNames": ["order-42", "tenant-a"], "eventType": "step", "data": {"msg": "validated"}}),
        )
        .await;
    assert_eq!(reply.status, 200);
    let body = reply.json();
    assert_eq!(body["success"], true);
    assert!(body["traceId"]
        .as_str()
        .unwrap()
        .parse::<uuid::Uuid>()
        .is_ok());
    let row = broker
        .sql()
        .await
        .query_one(
            "SELECT event_type, trace_names, data->>'msg', consumer_group FROM queen.message_traces",
            &[],
        )
        .await
        .unwrap();
    let stored: (String, Vec<String>, String, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        stored,
        (
            "step".into(),
            vec!["order-42".into(), "tenant-a".into()],
            "validated".into(),
            "__QUEUE_MODE__".into()
        )
    );
    let unknown = broker
        .client
        .post_json(
            "/api/v1/traces",
            &json!({"transactionId": "nope", "partitionId": message["partitionId"], "data": {}}),
        )
        .await;
    assert_eq!(
        unknown.json(),
        json!({"success": false, "error": "Message not found"})
    );
    let bad = broker
        .client
        .post_json(
            "/api/v1/traces",
            &json!({"transactionId": "t-1", "partitionId": message["partitionId"]}),
        )
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"], "data must be an object");
    broker.stop().await;
}

/// Issue 14, item 2: the repeated-transaction-id check of a transactional
/// push compared every item with every earlier one (100,000 items: five
/// billion comparisons, after BEGIN, holding a connection). It is one pass
/// now, before the transaction starts; the bound is generous.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_transactional_push_is_checked_for_repeated_ids_in_one_pass() {
    use queen_engine::{EngineError, PushItem, TxnOp};
    let broker = TestBroker::start().await;
    let item = |i: usize| PushItem {
        tenant: queen_engine::naming::default_tenant(),
        queue: "bulk".to_owned(),
        partition: "p".to_owned(),
        transaction_id: Some(format!("t{i}")),
        trace_id: None,
        producer_sub: None,
        payload: bytes::Bytes::from_static(b"1"),
    };
    let n = 100_000;
    let started = std::time::Instant::now();
    let results = broker
        .engine
        .transaction("default", vec![TxnOp::Push((0..n).map(item).collect())])
        .await
        .unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(results.len(), 1);
    let sql = broker.sql().await;
    let stored = "SELECT coalesce(sum(msg_count), 0)::bigint FROM queen.log_segments";
    assert_eq!(select_i64(&sql, stored).await, i64::try_from(n).unwrap());

    // The first repetition in item order names the failure, and nothing is
    // written.
    let mut items: Vec<PushItem> = (n..n + 1000).map(item).collect();
    items.push(item(n + 500));
    items.push(item(n + 10));
    let refused = broker
        .engine
        .transaction("default", vec![TxnOp::Push(items)])
        .await
        .unwrap_err();
    match refused {
        EngineError::TransactionFailed { index, message } => {
            assert_eq!(index, 0);
            assert!(message.contains(&format!("t{}", n + 500)), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(select_i64(&sql, stored).await, i64::try_from(n).unwrap());
}
