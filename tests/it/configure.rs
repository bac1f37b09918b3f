//! `POST /api/v1/configure` over HTTP, checked against what lands in PostgreSQL.

use bytes::Bytes;
use hyper::Method;
use queen_tests::TestBroker;
use serde_json::{json, Value};

use crate::support::select_i64;

/// A broker holding an at-rest key: configuring `encryptionEnabled` needs
/// one.
async fn keyed_broker() -> TestBroker {
    TestBroker::start_with(queen_engine::EngineConfig {
        encryption_key: Some(
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
                .parse()
                .unwrap(),
        ),
        ..queen_engine::EngineConfig::default()
    })
    .await
}

const PATH: &str = "/api/v1/configure";

/// Every option key the echo must carry.
const OPTION_KEYS: [&str; 18] = [
    "leaseTime",
    "retryLimit",
    "retryDelay",
    "maxSize",
    "ttl",
    "priority",
    "delayedProcessing",
    "windowBuffer",
    "retentionEnabled",
    "retentionSeconds",
    "completedRetentionSeconds",
    "maxWaitTimeSeconds",
    "deadLetterQueue",
    "dlqAfterMaxRetries",
    "dlqEnabled",
    "encryptionEnabled",
    "minPopWaitTime",
    "dedupWindowSeconds",
];

/// The `queen.queues` row of `name` (tenant `default`) as JSON, keyed by
/// column, or `None` when there is no such row.
async fn stored_queue(broker: &TestBroker, name: &str) -> Option<Value> {
    broker
        .sql()
        .await
        .query_opt(
            "SELECT to_jsonb(q) FROM queen.queues q WHERE q.tenant_id = 'default' AND q.name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .map(|row| row.get(0))
}

/// The ids of every partition of `queue_id`, with their names.
async fn partitions(broker: &TestBroker, queue_id: &str) -> Vec<(String, String)> {
    let queue_id: uuid::Uuid = queue_id.parse().unwrap();
    broker
        .sql()
        .await
        .query(
            "SELECT id::text, name FROM queen.log_partitions WHERE queue_id = $1 ORDER BY name",
            &[&queue_id],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// The number of rows in `table`.
async fn count_rows(broker: &TestBroker, table: &str) -> i64 {
    select_i64(
        &broker.sql().await,
        &format!("SELECT count(*) FROM {table}"),
    )
    .await
}

/// Configure and insist on a 200.
async fn configure(broker: &TestBroker, body: &Value) -> Value {
    let reply = broker.client.post_json(PATH, body).await;
    assert_eq!(reply.status, 200, "{body}: {:?}", reply.json());
    reply.json()
}

#[tokio::test]
async fn sdk_defaults_and_every_other_option_are_echoed_exactly_and_stored() {
    let broker = TestBroker::start().await;
    let options = json!({
        // The JS/Python SDK's default set.
        "leaseTime": 300, "retryLimit": 3, "priority": 0, "delayedProcessing": 0,
        "windowBuffer": 0, "maxSize": 0, "retentionSeconds": 0,
        "completedRetentionSeconds": 0, "encryptionEnabled": false,
        // Every other option, off its default.
        "retryDelay": 2500, "ttl": 7200, "retentionEnabled": true,
        "maxWaitTimeSeconds": 600, "deadLetterQueue": true, "dlqAfterMaxRetries": true,
        "dlqEnabled": false, "minPopWaitTime": 250, "dedupWindowSeconds": 120,
    });
    let reply = broker
        .client
        .post_json(PATH, &json!({"queue": "orders", "options": options}))
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers["content-type"], "application/json");
    let body = reply.json();
    assert_eq!(body["configured"], true);
    assert_eq!(body["queue"], "orders");
    assert_eq!(body["namespace"], "");
    assert_eq!(body["task"], "");
    assert_eq!(body["storage"], "segments");
    for key in OPTION_KEYS {
        assert_eq!(body["options"][key], options[key], "option {key}");
    }
    assert_eq!(
        body["options"].as_object().unwrap().len(),
        OPTION_KEYS.len()
    );

    let row = stored_queue(&broker, "orders").await.unwrap();
    assert_eq!(row["id"], body["queueId"]);
    let expected_columns = json!({
        "lease_time": 300, "retry_limit": 3, "retry_delay": 2500, "max_queue_size": 0,
        "ttl": 7200, "priority": 0, "delayed_processing": 0, "window_buffer": 0,
        "retention_enabled": true, "retention_seconds": 0,
        "completed_retention_seconds": 0, "max_wait_time_seconds": 600,
        "dead_letter_queue": true, "dlq_after_max_retries": true, "dlq_enabled": false,
        "encryption_enabled": false, "min_pop_wait_time": 250, "dedup_window_seconds": 120,
        "namespace": "", "task": "", "tenant_id": "default",
    });
    for (column, value) in expected_columns.as_object().unwrap() {
        assert_eq!(&row[column], value, "column {column}");
    }
    assert_eq!(
        partitions(&broker, body["queueId"].as_str().unwrap()).await,
        [(
            body["partitionId"].as_str().unwrap().to_owned(),
            "Default".to_owned()
        )]
    );
    broker.stop().await;
}

#[tokio::test]
async fn every_option_reaches_its_own_column() {
    let broker = keyed_broker().await;
    // Distinct values, so a swapped mapping cannot go unnoticed; booleans off
    // their defaults.
    let options = json!({
        "leaseTime": 11, "retryLimit": 12, "retryDelay": 13, "maxSize": 14, "ttl": 15,
        "priority": 16, "delayedProcessing": 17, "windowBuffer": 18,
        "retentionSeconds": 19, "completedRetentionSeconds": 20,
        "maxWaitTimeSeconds": 21, "minPopWaitTime": 22, "dedupWindowSeconds": 23,
        "retentionEnabled": true, "deadLetterQueue": true, "dlqAfterMaxRetries": true,
        "dlqEnabled": false, "encryptionEnabled": true,
    });
    configure(&broker, &json!({"queue": "mapped", "options": options})).await;
    let row = stored_queue(&broker, "mapped").await.unwrap();
    let expected_columns = json!({
        "lease_time": 11, "retry_limit": 12, "retry_delay": 13, "max_queue_size": 14,
        "ttl": 15, "priority": 16, "delayed_processing": 17, "window_buffer": 18,
        "retention_seconds": 19, "completed_retention_seconds": 20,
        "max_wait_time_seconds": 21, "min_pop_wait_time": 22, "dedup_window_seconds": 23,
        "retention_enabled": true, "dead_letter_queue": true, "dlq_after_max_retries": true,
        "dlq_enabled": false, "encryption_enabled": true,
    });
    for (column, value) in expected_columns.as_object().unwrap() {
        assert_eq!(&row[column], value, "column {column}");
    }
    broker.stop().await;
}

#[tokio::test]
async fn omitted_options_echo_and_store_the_configure_defaults() {
    let broker = TestBroker::start().await;
    let body = configure(&broker, &json!({"queue": "bare"})).await;
    let defaults = json!({
        "leaseTime": 300, "retryLimit": 3, "retryDelay": 1000, "maxSize": 0, "ttl": 3600,
        "priority": 0, "delayedProcessing": 0, "windowBuffer": 0, "retentionEnabled": false,
        "retentionSeconds": 0, "completedRetentionSeconds": 0, "maxWaitTimeSeconds": 0,
        "deadLetterQueue": false, "dlqAfterMaxRetries": false, "dlqEnabled": true,
        "encryptionEnabled": false, "minPopWaitTime": 0, "dedupWindowSeconds": 300,
    });
    assert_eq!(body["options"], defaults);
    let row = stored_queue(&broker, "bare").await.unwrap();
    assert_eq!(row["lease_time"], 300);
    assert_eq!(row["dlq_enabled"], true);
    assert_eq!(row["dedup_window_seconds"], 300);
    assert_eq!(row["retry_delay"], 1000);
    broker.stop().await;
}

#[tokio::test]
async fn string_typed_values_echo_as_sent_and_store_typed() {
    let broker = keyed_broker().await;
    let options = json!({
        "leaseTime": "30", "retryLimit": "5", "ttl": " 90 ", "priority": 2.0,
        "encryptionEnabled": "true", "dlqEnabled": "false", "retryDelay": null,
    });
    let body = configure(&broker, &json!({"queue": "typed", "options": options})).await;
    for key in [
        "leaseTime",
        "retryLimit",
        "ttl",
        "priority",
        "encryptionEnabled",
        "dlqEnabled",
        "retryDelay",
    ] {
        assert_eq!(body["options"][key], options[key], "option {key}");
    }
    let row = stored_queue(&broker, "typed").await.unwrap();
    assert_eq!(row["lease_time"], 30);
    assert_eq!(row["retry_limit"], 5);
    assert_eq!(row["ttl"], 90);
    assert_eq!(row["priority"], 2);
    assert_eq!(row["encryption_enabled"], true);
    assert_eq!(row["dlq_enabled"], false);
    // null means the default.
    assert_eq!(row["retry_delay"], 1000);
    broker.stop().await;
}

#[tokio::test]
async fn lease_time_zero_stores_the_granted_sixty_and_echoes_zero() {
    let broker = TestBroker::start().await;
    let body = configure(
        &broker,
        &json!({"queue": "zero", "options": {"leaseTime": 0}}),
    )
    .await;
    assert_eq!(body["options"]["leaseTime"], json!(0));
    assert_eq!(
        stored_queue(&broker, "zero").await.unwrap()["lease_time"],
        60
    );

    let body = configure(
        &broker,
        &json!({"queue": "zero-text", "options": {"leaseTime": "0"}}),
    )
    .await;
    assert_eq!(body["options"]["leaseTime"], json!("0"));
    assert_eq!(
        stored_queue(&broker, "zero-text").await.unwrap()["lease_time"],
        60
    );
    broker.stop().await;
}

#[tokio::test]
async fn reconfiguring_replaces_every_option_and_keeps_the_ids() {
    let broker = keyed_broker().await;
    let first = configure(
        &broker,
        &json!({
            "queue": "billing.invoices",
            "namespace": "custom",
            "options": {"retryLimit": 7, "encryptionEnabled": true, "dlqEnabled": false, "ttl": 5}
        }),
    )
    .await;
    let row = stored_queue(&broker, "billing.invoices").await.unwrap();
    assert_eq!(row["retry_limit"], 7);
    assert_eq!(row["encryption_enabled"], true);
    assert_eq!(row["namespace"], "custom");

    let second = configure(
        &broker,
        &json!({"queue": "billing.invoices", "options": {"priority": 4}}),
    )
    .await;
    assert_eq!(second["queueId"], first["queueId"]);
    assert_eq!(second["partitionId"], first["partitionId"]);
    assert_eq!(second["options"]["retryLimit"], 3);
    assert_eq!(second["options"]["encryptionEnabled"], false);
    let row = stored_queue(&broker, "billing.invoices").await.unwrap();
    assert_eq!(row["id"], first["queueId"]);
    assert_eq!(row["retry_limit"], 3);
    assert_eq!(row["encryption_enabled"], false);
    assert_eq!(row["dlq_enabled"], true);
    assert_eq!(row["ttl"], 3600);
    assert_eq!(row["priority"], 4);
    // Namespace is replaced too: not sent this time, so derived.
    assert_eq!(row["namespace"], "billing");
    assert_eq!(row["task"], "invoices");
    let updated_later: bool = broker
        .sql()
        .await
        .query_one(
            "SELECT updated_at > created_at FROM queen.queues WHERE name = 'billing.invoices'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(updated_later);

    assert_eq!(count_rows(&broker, "queen.queues").await, 1);
    assert_eq!(
        partitions(&broker, first["queueId"].as_str().unwrap()).await,
        [(
            first["partitionId"].as_str().unwrap().to_owned(),
            "Default".to_owned()
        )]
    );
    broker.stop().await;
}

#[tokio::test]
async fn namespace_and_task_are_stored_as_given_or_derived_from_the_name() {
    let broker = TestBroker::start().await;
    let cases = [
        // (body, namespace, task)
        (
            json!({"queue": "billing.invoices.v2"}),
            "billing",
            "invoices",
        ),
        (json!({"queue": "plain"}), "", ""),
        (
            json!({"queue": "dotted.", "namespace": null, "task": 7}),
            "dotted",
            "",
        ),
        (
            json!({"queue": "a.b", "namespace": "ns", "task": ""}),
            "ns",
            "",
        ),
        (
            json!({"queue": "nodots", "namespace": "", "task": "t"}),
            "",
            "t",
        ),
    ];
    for (request, namespace, task) in cases {
        let body = configure(&broker, &request).await;
        assert_eq!(body["namespace"], namespace, "{request}");
        assert_eq!(body["task"], task, "{request}");
        let row = stored_queue(&broker, request["queue"].as_str().unwrap())
            .await
            .unwrap();
        assert_eq!(row["namespace"], namespace, "{request}");
        assert_eq!(row["task"], task, "{request}");
    }
    broker.stop().await;
}

#[tokio::test]
async fn invalid_requests_answer_400_and_write_nothing() {
    let broker = TestBroker::start().await;
    let cases = [
        (json!({"options": {}}), "queue is required"),
        (json!({"queue": ""}), "queue is required"),
        (json!({"queue": 5}), "queue is required"),
        (json!({"queue": null}), "queue is required"),
        (json!(["q"]), "queue is required"),
        (
            json!({"queue": "q".repeat(256)}),
            "queue must be at most 255 bytes",
        ),
        (
            json!({"queue": "q", "namespace": "n".repeat(256)}),
            "namespace must be at most 255 bytes",
        ),
        (
            json!({"queue": "q\u{0}"}),
            "queue must not contain NUL characters",
        ),
        (
            json!({"queue": "q\u{1}"}),
            "queue must not contain control characters",
        ),
        (
            json!({"queue": "q", "options": [1]}),
            "options must be an object",
        ),
        (
            json!({"queue": "q", "options": "leaseTime=5"}),
            "options must be an object",
        ),
        (
            json!({"queue": "q", "options": {"leaseTime": "abc"}}),
            "options.leaseTime must be an integer",
        ),
        (
            json!({"queue": "q", "options": {"leaseTime": 1.5}}),
            "options.leaseTime must be an integer",
        ),
        (
            json!({"queue": "q", "options": {"leaseTime": -1}}),
            "options.leaseTime must not be negative",
        ),
        (
            json!({"queue": "q", "options": {"retryLimit": -1}}),
            "options.retryLimit must not be negative",
        ),
        (
            json!({"queue": "q", "options": {"leaseTime": true}}),
            "options.leaseTime must be an integer",
        ),
        (
            json!({"queue": "q", "options": {"leaseTime": 1_u64 << 40}}),
            "options.leaseTime must be at most 2147483647",
        ),
        (
            json!({"queue": "q", "options": {"ttl": [3600]}}),
            "options.ttl must be an integer",
        ),
        (
            json!({"queue": "q", "options": {"encryptionEnabled": "yes"}}),
            "options.encryptionEnabled must be a boolean",
        ),
        (
            json!({"queue": "q", "options": {"dlqEnabled": 1}}),
            "options.dlqEnabled must be a boolean",
        ),
        // A bad option after good ones still writes nothing.
        (
            json!({"queue": "q", "options": {"leaseTime": 30, "retryLimit": 2, "dedupWindowSeconds": "x"}}),
            "options.dedupWindowSeconds must be an integer",
        ),
    ];
    for (request, message) in cases {
        let reply = broker.client.post_json(PATH, &request).await;
        assert_eq!(reply.status, 400, "{request}");
        assert_eq!(reply.json(), json!({"error": message}), "{request}");
        assert_eq!(count_rows(&broker, "queen.queues").await, 0, "{request}");
        assert_eq!(
            count_rows(&broker, "queen.log_partitions").await,
            0,
            "{request}"
        );
    }
    broker.stop().await;
}

#[tokio::test]
async fn empty_and_malformed_bodies_answer_400() {
    let broker = TestBroker::start().await;
    let reply = broker.client.send(Method::POST, PATH, Bytes::new()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json(), json!({"error": "Empty request body"}));

    let reply = broker
        .client
        .send(Method::POST, PATH, Bytes::from_static(b"{\"queue\": "))
        .await;
    assert_eq!(reply.status, 400);
    let error = reply.json()["error"].as_str().unwrap().to_owned();
    assert!(error.starts_with("Invalid JSON"), "{error}");
    assert_eq!(count_rows(&broker, "queen.queues").await, 0);
    broker.stop().await;
}
