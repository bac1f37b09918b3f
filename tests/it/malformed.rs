//! Property: any malformed body, on any route that takes one, gets a 4xx
//! JSON error and writes nothing (issue 14, item 15). Bodies are arbitrary
//! bytes, arbitrary JSON built from the contract's own field names, and
//! valid bodies with one field replaced by an arbitrary value. A body that
//! happens to be valid may succeed (2xx); nothing may ever answer 5xx.

use proptest::prelude::*;
use queen_tests::TestBroker;
use serde_json::{json, Map, Value};

/// Every route that reads a body.
const ROUTES: &[&str] = &[
    "/api/v1/push",
    "/api/v1/ack",
    "/api/v1/ack/batch",
    "/api/v1/transaction",
    "/api/v1/configure",
    "/api/v1/traces",
    "/api/v1/lease/018f6f6e-0000-7000-8000-000000000000/extend",
    "/api/v1/consumer-groups/g/subscription",
    "/api/v1/consumer-groups/g/queues/q/seek",
    "/api/v1/system/maintenance/pop",
];

/// The contract's field names, so arbitrary objects reach the parsers'
/// interesting branches.
const FIELDS: &[&str] = &[
    "items",
    "queue",
    "partition",
    "payload",
    "transactionId",
    "traceId",
    "acknowledgments",
    "partitionId",
    "leaseId",
    "status",
    "error",
    "consumerGroup",
    "operations",
    "type",
    "message",
    "options",
    "leaseTime",
    "retryLimit",
    "namespace",
    "task",
    "seconds",
    "timestamp",
    "toEnd",
    "enabled",
    "eventType",
    "data",
    "traceNames",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{0,8}",
        "\\PC{0,12}",
        "[\\x00-\\x1f]{1,3}",
        Just("x".repeat(300)),
        Just("018f6f6e-0000-7000-8000-000000000000".to_owned()),
        Just("2026-01-01T00:00:00Z".to_owned()),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(Value::from),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::vec(
                (
                    prop_oneof![prop::sample::select(FIELDS).prop_map(str::to_owned), text()],
                    inner
                ),
                0..5
            )
            .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A valid body of a route, with one field (at any depth) replaced.
fn mutated() -> impl Strategy<Value = Value> {
    let valid = prop::sample::select(vec![
        json!({"items": [{"queue": "q", "partition": "p", "payload": {"a": 1}, "transactionId": "t"}]}),
        json!({"transactionId": "t", "partitionId": "018f6f6e-0000-7000-8000-000000000000",
               "leaseId": "018f6f6e-0000-7000-8000-000000000000", "status": "completed"}),
        json!({"acknowledgments": [{"transactionId": "t",
               "partitionId": "018f6f6e-0000-7000-8000-000000000000", "status": "failed"}],
               "consumerGroup": "g"}),
        json!({"operations": [{"type": "push", "items": [{"queue": "q", "payload": 1}]},
               {"type": "ack", "transactionId": "t",
                "partitionId": "018f6f6e-0000-7000-8000-000000000000"}]}),
        json!({"queue": "q", "options": {"leaseTime": 5, "retryLimit": 2}}),
        json!({"transactionId": "t", "partitionId": "018f6f6e-0000-7000-8000-000000000000",
               "consumerGroup": "g", "eventType": "info", "data": {}, "traceNames": ["n"]}),
        json!({"seconds": 30}),
        json!({"timestamp": "2026-01-01T00:00:00Z"}),
        json!({"toEnd": true}),
        json!({"enabled": false}),
    ]);
    (valid, prop::sample::select(FIELDS), value()).prop_map(|(mut body, field, replacement)| {
        replace(&mut body, field, replacement);
        body
    })
}

/// Replace every `field` in `body`, at any depth, with `replacement`; add it
/// at the top when absent.
fn replace(body: &mut Value, field: &str, replacement: Value) {
    fn walk(value: &mut Value, field: &str, replacement: &Value) -> bool {
        match value {
            Value::Object(map) => {
                // Children first: the replacement itself is not walked.
                let mut hit = false;
                for child in map.values_mut() {
                    hit |= walk(child, field, replacement);
                }
                if let Some(slot) = map.get_mut(field) {
                    *slot = replacement.clone();
                    hit = true;
                }
                hit
            }
            Value::Array(items) => {
                // Every item, not only up to the first hit.
                let mut hit = false;
                for item in items {
                    hit |= walk(item, field, replacement);
                }
                hit
            }
            _ => false,
        }
    }
    if !walk(body, field, &replacement) {
        if let Value::Object(map) = body {
            map.insert(field.to_owned(), replacement);
        }
    }
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        mutated().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        mutated().prop_map(|v| {
            // Truncated JSON.
            let bytes = serde_json::to_vec(&v).unwrap();
            bytes[..bytes.len() / 2].to_vec()
        }),
    ]
}

/// Rows of every table a request could write.
const COUNTS: &str = "SELECT array[
    (SELECT count(*) FROM queen.queues),
    (SELECT count(*) FROM queen.log_partitions),
    (SELECT count(*) FROM queen.log_segments),
    (SELECT count(*) FROM queen.log_txns),
    (SELECT count(*) FROM queen.log_consumers),
    (SELECT count(*) FROM queen.log_dlq),
    (SELECT count(*) FROM queen.message_traces),
    (SELECT count(*) FROM queen.consumer_groups_metadata)]";

#[test]
fn a_malformed_body_gets_a_4xx_json_error_and_writes_nothing() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let broker = runtime.block_on(TestBroker::start());
    let sql = runtime.block_on(broker.sql());
    let config = ProptestConfig {
        cases: 600,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(route in prop::sample::select(ROUTES), body in body())| {
        runtime.block_on(async {
            let before: Vec<i64> = sql.query_one(COUNTS, &[]).await.unwrap().get(0);
            let reply = broker
                .client
                .send(hyper::Method::POST, route, bytes::Bytes::from(body.clone()))
                .await;
            let status = reply.status.as_u16();
            let shown = String::from_utf8_lossy(&body).to_string();
            assert!(status < 500, "{route} {shown:?}: {status} {:?}", reply.body);
            if !(200..300).contains(&status) {
                assert!((400..500).contains(&status), "{route} {shown:?}: {status}");
                let error: Value = serde_json::from_slice(&reply.body)
                    .unwrap_or_else(|_| panic!("{route} {shown:?}: not JSON: {:?}", reply.body));
                assert!(error["error"].is_string(), "{route} {shown:?}: {error}");
                let after: Vec<i64> = sql.query_one(COUNTS, &[]).await.unwrap().get(0);
                assert_eq!(before, after, "{route} {shown:?} wrote while answering {status}");
            }
        });
    });
    runtime.block_on(broker.stop());
}
