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

/// (method, path, body) of one hostile request.
type Probe = (hyper::Method, String, Option<Value>);

/// A NUL character in any string that reaches a text
/// column (query filters, ids in a path, trace bodies, stream state, an
/// ack's error, a pushed transaction id) used to reach PostgreSQL, which
/// refuses 0x00 in text, and answer 500. Each is now 400 naming the field,
/// and writes nothing: the leased message is still leased, no trace, no
/// state, no dead letter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_any_text_field_answers_400_and_writes_nothing() {
    use hyper::Method;
    let broker = TestBroker::start().await;
    let client = &broker.client;
    let configured = client
        .post_json(
            "/api/v1/configure",
            &json!({"queue": "nul", "options": {"retryLimit": 0, "leaseTime": 300}}),
        )
        .await;
    assert_eq!(configured.status, 200);
    let pushed = client
        .post_json(
            "/api/v1/push",
            &json!({"items": [{"queue": "nul", "transactionId": "t1", "payload": 1}]}),
        )
        .await
        .json();
    let pid = pushed[0]["partition_id"].as_str().unwrap().to_owned();
    let popped = client.get("/api/v1/pop/queue/nul?batch=1").await.json();
    let lease = popped["messages"][0]["leaseId"]
        .as_str()
        .unwrap()
        .to_owned();
    let query = client
        .post_json(
            "/streams/v1/queries",
            &json!({"name": "nulq", "source_queue": "nul", "config_hash": "h"}),
        )
        .await
        .json();
    let query_id = query["query_id"].as_str().unwrap().to_owned();
    let sql = broker.sql().await;
    let before: Vec<i64> = sql.query_one(COUNTS, &[]).await.unwrap().get(0);
    let state_rows = "SELECT count(*) FROM queen_streams.state";
    let leased = "SELECT count(*) FROM queen.log_consumers WHERE lease_expires_at > now()";
    let leases_before: i64 = sql.query_one(leased, &[]).await.unwrap().get(0);
    assert_eq!(leases_before, 1);

    let nul = "a\u{0}b";
    let get = |path: String| -> Probe { (Method::GET, path, None) };
    let post = |path: &str, body: Value| -> Probe { (Method::POST, path.to_owned(), Some(body)) };
    let trace = |field: &str, value: Value| {
        let mut body = json!({"partitionId": pid, "transactionId": "t1",
                              "eventType": "info", "traceNames": ["n"], "data": {"k": "v"}});
        body[field] = value;
        post("/api/v1/traces", body)
    };
    let ack = json!({"transactionId": "t1", "partitionId": pid, "leaseId": lease,
                     "status": "dlq", "error": nul});
    let probes: Vec<Probe> = vec![
        get("/api/v1/dlq?queue=a%00b".to_owned()),
        get("/api/v1/dlq?partition=a%00b".to_owned()),
        get("/api/v1/dlq?consumerGroup=a%00b".to_owned()),
        get("/api/v1/pop?namespace=a%00b&wait=false".to_owned()),
        get("/api/v1/pop?task=a%00b&wait=false".to_owned()),
        get("/api/v1/analytics/system-metrics?hostname=a%00b".to_owned()),
        get(format!("/api/v1/traces/{pid}/a%00b")),
        get(format!("/api/v1/messages/{pid}/a%00b")),
        (
            Method::DELETE,
            format!("/api/v1/messages/{pid}/a%00b"),
            None,
        ),
        post(
            &format!("/api/v1/messages/{pid}/a%00b/retry"),
            json!({"consumerGroup": "__QUEUE_MODE__"}),
        ),
        post(
            &format!("/api/v1/messages/{pid}/a%00b/dlq"),
            json!({"consumerGroup": "__QUEUE_MODE__"}),
        ),
        post(
            &format!("/api/v1/messages/{pid}/t1/dlq"),
            json!({"consumerGroup": "__QUEUE_MODE__", "error": nul}),
        ),
        trace("traceNames", json!(["ok", nul])),
        trace("traceNames", json!(nul)),
        trace("eventType", json!(nul)),
        trace("data", json!({nul: 1})),
        trace("data", json!({"k": nul})),
        trace("data", json!({"deep": [{"payload": nul}]})),
        post(
            "/streams/v1/cycle",
            json!({"query_id": query_id, "partition_id": pid,
                   "state_ops": [{"type": "upsert", "key": nul, "value": 1}]}),
        ),
        post(
            "/streams/v1/cycle",
            json!({"query_id": query_id, "partition_id": pid,
                   "state_ops": [{"type": "upsert", "key": "k", "value": {"v": nul}}]}),
        ),
        post(
            "/streams/v1/state/get",
            json!({"query_id": query_id, "partition_id": pid, "key_prefix": nul}),
        ),
        post("/api/v1/ack", ack.clone()),
        post("/api/v1/ack/batch", json!({"acknowledgments": [ack]})),
        post(
            "/api/v1/push",
            json!({"items": [{"queue": "nul", "transactionId": nul, "payload": 2}]}),
        ),
        post(
            "/api/v1/transaction",
            json!({"operations": [{"type": "push", "items": [
                {"queue": "nul", "transactionId": nul, "payload": 3}]}]}),
        ),
    ];
    for (method, path, body) in probes {
        let bytes = body.as_ref().map_or_else(bytes::Bytes::new, |body| {
            bytes::Bytes::from(serde_json::to_vec(body).unwrap())
        });
        let reply = client.send(method.clone(), &path, bytes).await;
        let shown = body.map(|body| body.to_string()).unwrap_or_default();
        assert_eq!(
            reply.status.as_u16(),
            400,
            "{method} {path} {shown}: {:?}",
            String::from_utf8_lossy(&reply.body)
        );
        let error = reply.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            error.contains("NUL") || error.contains("control characters"),
            "{method} {path} {shown}: {error}"
        );
    }
    let after: Vec<i64> = sql.query_one(COUNTS, &[]).await.unwrap().get(0);
    assert_eq!(before, after, "a refused request wrote");
    let state: i64 = sql.query_one(state_rows, &[]).await.unwrap().get(0);
    assert_eq!(state, 0);
    let leases_after: i64 = sql.query_one(leased, &[]).await.unwrap().get(0);
    assert_eq!(leases_after, 1, "a refused ack released the lease");
    // A NUL inside a pushed payload is payload (stored as bytes), not text.
    let reply = client
        .post_json(
            "/api/v1/push",
            &json!({"items": [{"queue": "nul", "payload": {"text": nul}}]}),
        )
        .await;
    assert_eq!(reply.status.as_u16(), 201, "{:?}", reply.body);
    broker.stop().await;
}

/// An invalid percent-escape (`%ff` is no UTF-8) used to
/// decode lossily to U+FFFD, so `/api/v1/pop/queue/%ff` reached a queue
/// named "\u{fffd}". A path or query that does not decode to UTF-8 is 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_percent_escape_answers_400() {
    let broker = TestBroker::start().await;
    let client = &broker.client;
    let pushed = client
        .post_json(
            "/api/v1/push",
            &json!({"items": [{"queue": "\u{fffd}", "payload": 1}]}),
        )
        .await;
    assert_eq!(pushed.status.as_u16(), 201);
    for path in [
        "/api/v1/pop/queue/%ff?wait=false",
        "/api/v1/pop/queue/%ff/partition/Default?wait=false",
        "/api/v1/resources/queues/%c3",
        "/api/v1/dlq?queue=%ff",
        "/api/v1/messages?queue=%ff",
        "/api/v1/pop?namespace=%e2%82&wait=false",
    ] {
        let reply = client.get(path).await;
        assert_eq!(
            reply.status.as_u16(),
            400,
            "{path}: {:?}",
            String::from_utf8_lossy(&reply.body)
        );
        let error = reply.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(error.contains("UTF-8"), "{path}: {error}");
    }
    // The queue named U+FFFD is still reachable by its real name.
    let popped = client
        .get("/api/v1/pop/queue/%EF%BF%BD?wait=false&autoAck=true")
        .await;
    assert_eq!(popped.status.as_u16(), 200);
    broker.stop().await;
}

/// `HEAD /health` answered 404, and a known path with a
/// method it does not take answered 404 instead of 405 with `Allow`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_is_served_on_get_routes_and_a_wrong_method_is_405_with_allow() {
    use hyper::Method;
    let broker = TestBroker::start().await;
    let client = &broker.client;
    let head = client
        .send(Method::HEAD, "/health", bytes::Bytes::new())
        .await;
    assert_eq!(head.status.as_u16(), 200);
    assert!(head.body.is_empty());
    let get = client.get("/health").await;
    assert_eq!(
        head.headers.get("content-type"),
        get.headers.get("content-type")
    );
    for (method, path, allow) in [
        (Method::GET, "/api/v1/push", "POST"),
        (Method::DELETE, "/api/v1/push", "POST"),
        (Method::PUT, "/health", "GET, HEAD"),
        (Method::POST, "/api/v1/pop/queue/q", "GET"),
        (
            Method::PUT,
            "/api/v1/resources/queues/q/",
            "GET, HEAD, DELETE",
        ),
        (
            Method::PATCH,
            "/api/v1/system/maintenance",
            "GET, HEAD, POST",
        ),
    ] {
        let reply = client.send(method.clone(), path, bytes::Bytes::new()).await;
        assert_eq!(reply.status.as_u16(), 405, "{method} {path}");
        assert_eq!(
            reply.headers.get("allow").and_then(|v| v.to_str().ok()),
            Some(allow),
            "{method} {path}"
        );
        assert!(reply.json()["error"].is_string());
    }
    let reply = client.get("/api/v1/push").await;
    assert_eq!(reply.status.as_u16(), 405);
    assert_eq!(
        reply.headers.get("allow").and_then(|v| v.to_str().ok()),
        Some("POST")
    );
    // A pop is not safe: HEAD does not pop.
    let reply = client
        .send(Method::HEAD, "/api/v1/pop/queue/q", bytes::Bytes::new())
        .await;
    assert_eq!(reply.status.as_u16(), 405);
    assert_eq!(
        client.get("/api/v1/nothing-here").await.status.as_u16(),
        404
    );
    broker.stop().await;
}

/// Files whose names start with a dot (`/.env`, a
/// `.git` folder) in `QUEEN_WEBAPP_DIR` were served to anyone. They are not
/// served at all (404), nor is anything under a dot folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_files_of_the_dashboard_folder_are_never_served() {
    let site = tempfile::tempdir().unwrap();
    std::fs::write(site.path().join("index.html"), "<html>dash</html>").unwrap();
    std::fs::write(site.path().join(".env"), "SECRET=1").unwrap();
    std::fs::create_dir(site.path().join(".git")).unwrap();
    std::fs::write(site.path().join(".git/config"), "SECRET=2").unwrap();
    std::fs::create_dir(site.path().join("assets")).unwrap();
    std::fs::write(site.path().join("assets/.hidden.js"), "SECRET=3").unwrap();
    let broker = TestBroker::start_serving(queen_http::ServeOptions {
        webapp: Some(queen_http::Webapp::open(site.path()).unwrap()),
        ..queen_http::ServeOptions::default()
    })
    .await;
    for path in ["/.env", "/.git/config", "/assets/.hidden.js", "/%2eenv"] {
        let reply = broker.client.get(path).await;
        assert_eq!(reply.status.as_u16(), 404, "{path}");
        assert!(
            !String::from_utf8_lossy(&reply.body).contains("SECRET"),
            "{path} served a dot file"
        );
    }
    let head = broker
        .client
        .send(hyper::Method::HEAD, "/", bytes::Bytes::new())
        .await;
    assert_eq!(head.status.as_u16(), 200);
    assert!(head.body.is_empty());
    assert_eq!(&broker.client.get("/").await.body[..], b"<html>dash</html>");
    broker.stop().await;
}
