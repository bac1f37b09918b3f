//! Tenants (the security issue, item 3) and producer identity (item 4).
//!
//! Tenant A writes a history on queue `shared`: messages, a leased batch, a
//! dead letter, a trace, a streaming query with state, statistics rows.
//! Then every tenant-scoped route of the route table is called by tenant B
//! with A's names and ids (the walk is generated from the table: a new
//! route without a request here fails the test). B's answers must hold
//! nothing of A's, and A's rows must be exactly as they were.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::Method;
use jsonwebtoken::{encode, EncodingKey, Header};
use queen_http::{Auth, AuthConfig};
use queen_tests::TestBroker;
use serde_json::{json, Value};

const SECRET: &str = "a-tenant-test-secret";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn token(tenant: Option<&str>, sub: &str) -> String {
    let mut claims = json!({"sub": sub, "role": "admin", "exp": now() + 600});
    if let Some(tenant) = tenant {
        claims["tenant"] = json!(tenant);
    }
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

async fn broker() -> TestBroker {
    broker_with(queen_engine::EngineConfig::default()).await
}

/// One tenant's client.
struct As<'b> {
    broker: &'b TestBroker,
    bearer: String,
}

impl As<'_> {
    fn new<'b>(broker: &'b TestBroker, token: &str) -> As<'b> {
        As {
            broker,
            bearer: format!("Bearer {token}"),
        }
    }

    /// (status, raw body) of one request.
    async fn raw(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
        let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        let mut headers = vec![("authorization", self.bearer.as_str())];
        if !body.is_empty() {
            headers.push(("content-type", "application/json"));
        }
        let reply = self
            .broker
            .client
            .send_with(method.parse::<Method>().unwrap(), path, body, &headers)
            .await;
        (
            reply.status.as_u16(),
            String::from_utf8_lossy(&reply.body).into_owned(),
        )
    }

    async fn json(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let (status, raw) = self.raw(method, path, body).await;
        (status, serde_json::from_str(&raw).unwrap_or(Value::Null))
    }

    async fn ok(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let (status, value) = self.json(method, path, body).await;
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {value}"
        );
        value
    }
}

/// Everything of tenant `tenant` in the database, as one JSON document:
/// queues, partitions, segments, cursors and leases, subscriptions, dead
/// letters, traces, streaming queries and their state.
async fn snapshot(broker: &TestBroker, tenant: &str) -> Value {
    let sql = broker.sql().await;
    let row = sql
        .query_one(
            "WITH q AS (SELECT * FROM queen.queues WHERE tenant_id = $1),
                  p AS (SELECT p.* FROM queen.log_partitions p JOIN q ON q.id = p.queue_id)
             SELECT jsonb_build_object(
               'queues', (SELECT jsonb_agg(to_jsonb(q) ORDER BY q.name) FROM q),
               'partitions', (SELECT jsonb_agg(to_jsonb(p) ORDER BY p.id) FROM p),
               'segments', (SELECT jsonb_agg(jsonb_build_array(s.partition_id, s.base_offset,
                                                               md5(s.blob))
                                             ORDER BY s.partition_id, s.base_offset)
                              FROM queen.log_segments s JOIN p ON p.id = s.partition_id),
               'cursors', (SELECT jsonb_agg(to_jsonb(c) ORDER BY c.partition_id, c.consumer_group)
                             FROM queen.log_consumers c JOIN p ON p.id = c.partition_id),
               'subscriptions', (SELECT jsonb_agg(to_jsonb(m) ORDER BY m.consumer_group)
                                   FROM queen.consumer_groups_metadata m
                                   JOIN q ON q.id = m.queue_id),
               'dlq', (SELECT jsonb_agg(jsonb_build_array(d.partition_id, d.consumer_group,
                                                          d.transaction_id, d.error)
                                        ORDER BY d.partition_id, d.consumer_group)
                         FROM queen.log_dlq d JOIN p ON p.id = d.partition_id),
               'traces', (SELECT jsonb_agg(to_jsonb(t) ORDER BY t.id)
                            FROM queen.message_traces t JOIN p ON p.id = t.partition_id),
               'queries', (SELECT jsonb_agg(to_jsonb(x) ORDER BY x.name)
                             FROM queen_streams.queries x WHERE x.tenant_id = $1),
               'state', (SELECT jsonb_agg(to_jsonb(s) ORDER BY s.key)
                           FROM queen_streams.state s
                           JOIN queen_streams.queries x ON x.id = s.query_id
                          WHERE x.tenant_id = $1))",
            &[&tenant],
        )
        .await
        .unwrap();
    row.get(0)
}

/// What tenant A wrote, and the strings B's answers must never hold (A's
/// payloads, message ids, dead-letter error, trace, state and producer; not
/// the ids B sends itself, which some answers echo).
struct History {
    partition_id: String,
    lease: String,
    leased_txn: String,
    dead_txn: String,
    query_id: String,
    secrets: Vec<String>,
}

async fn write_history(a: &As<'_>) -> History {
    a.ok(
        "POST",
        "/api/v1/configure",
        Some(
            &json!({"queue": "shared", "namespace": "ans", "task": "atask",
                     "options": {"leaseTime": 300, "retryLimit": 0}}),
        ),
    )
    .await;
    let items: Vec<Value> = (1..=4)
        .map(|i| {
            json!({"queue": "shared", "transactionId": format!("a-txn-{i}"),
                   "producerSub": "mallory",
                   "payload": {"secret": format!("A-SECRET-PAYLOAD-{i}")}})
        })
        .collect();
    let pushed = a
        .ok("POST", "/api/v1/push", Some(&json!({"items": items})))
        .await;
    let mut secrets: Vec<String> = pushed
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["message_id"].as_str().unwrap().to_owned())
        .collect();
    secrets.extend(["A-SECRET".to_owned(), "alice".to_owned()]);
    let partition_id = pushed[0]["partition_id"].as_str().unwrap().to_owned();

    // Queue mode dead-letters a-txn-1.
    let popped = a.ok("GET", "/api/v1/pop/queue/shared?batch=1", None).await;
    let message = &popped["messages"][0];
    assert_eq!(message["producerSub"], "alice", "{popped}");
    let dead_txn = message["transactionId"].as_str().unwrap().to_owned();
    a.ok(
        "POST",
        "/api/v1/ack",
        Some(
            &json!({"transactionId": dead_txn, "partitionId": partition_id,
                     "leaseId": message["leaseId"], "status": "dlq",
                     "error": "A-SECRET-ERROR"}),
        ),
    )
    .await;
    // Group g holds a lease on a-txn-1 (300 s).
    let popped = a
        .ok(
            "GET",
            "/api/v1/pop/queue/shared?batch=1&consumerGroup=g",
            None,
        )
        .await;
    let message = &popped["messages"][0];
    let lease = message["leaseId"].as_str().unwrap().to_owned();
    let leased_txn = message["transactionId"].as_str().unwrap().to_owned();
    a.ok(
        "POST",
        "/api/v1/traces",
        Some(
            &json!({"partitionId": partition_id, "transactionId": "a-txn-2",
                     "consumerGroup": "g", "traceNames": ["a-trace"],
                     "data": {"note": "A-SECRET-TRACE"}}),
        ),
    )
    .await;
    let query = a
        .ok(
            "POST",
            "/streams/v1/queries",
            Some(&json!({"name": "a-query", "source_queue": "shared",
                         "config_hash": "h1"})),
        )
        .await;
    let query_id = query["query_id"].as_str().unwrap().to_owned();
    a.ok(
        "POST",
        "/streams/v1/cycle",
        Some(&json!({"query_id": query_id, "partition_id": partition_id,
                     "consumer_group": "g",
                     "state_ops": [{"type": "upsert", "key": "k",
                                    "value": "A-SECRET-STATE"}]})),
    )
    .await;
    a.ok("POST", "/api/v1/stats/refresh", None).await;
    History {
        partition_id,
        lease,
        leased_txn,
        dead_txn,
        query_id,
        secrets,
    }
}

/// The request tenant B makes of route (`method`, `pattern`), aimed at A's
/// names and ids. Panics for a tenant-scoped route it does not know: a new
/// route must say here how it is attacked.
fn attack(method: &str, pattern: &str, h: &History) -> (String, Option<Value>) {
    let ack = json!({"transactionId": h.leased_txn, "partitionId": h.partition_id,
                     "leaseId": h.lease, "consumerGroup": "g", "status": "completed"});
    let path = pattern
        .replace(":queue", "shared")
        .replace(":partition_id", &h.partition_id)
        .replace(":partition", "Default")
        .replace(":group", "g")
        .replace(":lease", &h.lease)
        .replace(":trace_name", "a-trace")
        .replace(
            ":transaction_id",
            if pattern.contains("/retry") || method == "DELETE" {
                &h.dead_txn
            } else {
                &h.leased_txn
            },
        );
    if method == "GET" {
        let query = format!(
            "?queue=shared&consumerGroup=g&partition=Default&namespace=ans&task=atask\
             &partitionId={}&wait=false&batch=10",
            h.partition_id
        );
        return (format!("{path}{query}"), None);
    }
    let body = match (method, pattern) {
        ("POST", "/api/v1/configure") => json!({"queue": "shared", "options": {"leaseTime": 5}}),
        ("POST", "/api/v1/push") => {
            json!({"items": [{"queue": "shared", "transactionId": "a-txn-3",
                              "payload": {"b": 1}}]})
        }
        ("POST", "/api/v1/ack") => ack,
        ("POST", "/api/v1/ack/batch") => json!({"acknowledgments": [ack], "consumerGroup": "g"}),
        ("POST", "/api/v1/lease/:lease/extend") => json!({"seconds": 3000}),
        ("POST", "/api/v1/transaction") => {
            let mut op = ack;
            op["type"] = json!("ack");
            json!({"operations": [op]})
        }
        ("POST", "/api/v1/traces") => {
            json!({"partitionId": h.partition_id, "transactionId": "a-txn-2",
                   "data": {"by": "B"}, "traceNames": ["b-trace"]})
        }
        ("DELETE", "/api/v1/messages/:partition_id/:transaction_id") => Value::Null,
        ("POST", "/api/v1/messages/:partition_id/:transaction_id/dlq") => {
            json!({"consumerGroup": "__QUEUE_MODE__", "error": "moved by B"})
        }
        ("POST", "/api/v1/messages/:partition_id/:transaction_id/retry") => {
            json!({"consumerGroup": "__QUEUE_MODE__"})
        }
        ("POST", "/api/v1/dlq/requeue") => json!({"queue": "shared"}),
        ("DELETE", "/api/v1/resources/queues/:queue") => Value::Null,
        ("DELETE", "/api/v1/consumer-groups/:group")
        | ("DELETE", "/api/v1/consumer-groups/:group/queues/:queue") => Value::Null,
        ("POST", "/api/v1/consumer-groups/:group/subscription") => {
            json!({"timestamp": "2020-01-01T00:00:00Z"})
        }
        ("POST", "/api/v1/consumer-groups/:group/queues/:queue/seek")
        | ("POST", "/api/v1/consumer-groups/:group/queues/:queue/partitions/:partition/seek") => {
            json!({"toEnd": true})
        }
        ("POST", "/streams/v1/queries") => {
            json!({"name": "a-query", "source_queue": "shared", "config_hash": "h2",
                   "reset": true})
        }
        ("POST", "/streams/v1/state/get") => {
            json!({"query_id": h.query_id, "partition_id": h.partition_id})
        }
        ("POST", "/streams/v1/cycle") => {
            json!({"query_id": h.query_id, "partition_id": h.partition_id,
                   "consumer_group": "g",
                   "state_ops": [{"type": "upsert", "key": "k", "value": "B"}],
                   "ack": {"transactionId": h.leased_txn, "leaseId": h.lease}})
        }
        _ => panic!("no request for tenant-scoped {method} {pattern}: add one"),
    };
    (path, (!body.is_null()).then_some(body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tenant_scoped_route_called_by_another_tenant_sees_and_changes_nothing() {
    let broker = broker().await;
    let a = As::new(&broker, &token(Some("tenant-a"), "alice"));
    let b = As::new(&broker, &token(Some("tenant-b"), "bob"));
    let history = write_history(&a).await;
    let before = snapshot(&broker, "tenant-a").await;
    assert_eq!(before["dlq"].as_array().map(Vec::len), Some(1), "{before}");
    assert_eq!(before["traces"].as_array().map(Vec::len), Some(1));
    assert_eq!(before["state"].as_array().map(Vec::len), Some(1));

    let mut called = 0;
    for (method, pattern, _, scoped) in queen_http::route_table() {
        if !scoped {
            continue;
        }
        let (path, body) = attack(method, pattern, &history);
        let (status, raw) = b.raw(method, &path, body.as_ref()).await;
        assert!(status < 500, "{method} {path}: {status} {raw}");
        for secret in &history.secrets {
            assert!(
                !raw.contains(secret.as_str()),
                "{method} {path} answered tenant B with A's {secret:?}: {raw}"
            );
        }
        called += 1;
    }
    assert!(called >= 40, "only {called} tenant-scoped routes");

    // Nothing of A's moved: not its cursors or lease, dead letter, trace,
    // query and state, queue configuration, segments.
    assert_eq!(snapshot(&broker, "tenant-a").await, before);
    // A still sees its own.
    let dlq = a.ok("GET", "/api/v1/dlq?queue=shared", None).await;
    assert!(dlq.to_string().contains("A-SECRET-ERROR"), "{dlq}");
    let (status, _) = a
        .json(
            "POST",
            "/api/v1/ack",
            Some(&json!({"transactionId": history.leased_txn,
                         "partitionId": history.partition_id,
                         "leaseId": history.lease, "consumerGroup": "g"})),
        )
        .await;
    assert_eq!(status, 200);
    // And B's queue of the same name is B's own (B deleted its first one
    // in the walk; A's is still there).
    b.ok(
        "POST",
        "/api/v1/configure",
        Some(&json!({"queue": "shared", "options": {"leaseTime": 7}})),
    )
    .await;
    let queue = b.ok("GET", "/api/v1/resources/queues/shared", None).await;
    assert_eq!(queue["config"]["leaseTime"], 7, "{queue}");
    let queue = a.ok("GET", "/api/v1/resources/queues/shared", None).await;
    assert_eq!(queue["config"]["leaseTime"], 300, "{queue}");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_hold_one_queue_name_apart_and_the_token_without_a_claim_is_default() {
    let broker = broker().await;
    let a = As::new(&broker, &token(Some("tenant-a"), "alice"));
    let b = As::new(&broker, &token(Some("tenant-b"), "bob"));
    let default = As::new(&broker, &token(None, "carol"));
    for (who, n) in [(&a, 3), (&b, 2), (&default, 1)] {
        let items: Vec<Value> = (0..n)
            .map(|i| json!({"queue": "q", "payload": i}))
            .collect();
        who.ok("POST", "/api/v1/push", Some(&json!({"items": items})))
            .await;
    }
    for (who, n) in [(&a, 3), (&b, 2), (&default, 1)] {
        let popped = who
            .ok("GET", "/api/v1/pop/queue/q?batch=10&autoAck=true", None)
            .await;
        assert_eq!(popped["messages"].as_array().unwrap().len(), n, "{popped}");
    }
    let sql = broker.sql().await;
    let rows = sql
        .query(
            "SELECT tenant_id FROM queen.queues WHERE name = 'q' ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let tenants: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    assert_eq!(tenants, ["default", "tenant-a", "tenant-b"]);
    // A tenant claim that is not a usable name is refused.
    for bad in [json!(""), json!(7), json!("a\u{1f}b")] {
        let claims = json!({"sub": "x", "role": "admin", "exp": now() + 600, "tenant": bad});
        let bad = encode(
            &Header::default(),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap();
        let (status, body) = As::new(&broker, &bad)
            .json("GET", "/api/v1/resources/queues", None)
            .await;
        assert_eq!(
            (status, body),
            (401, json!({"error": "Invalid token tenant"}))
        );
    }
    broker.stop().await;
}

/// A push of tenant B to its queue `q` must not wake tenant A's pop parked
/// on A's `q`: the hot-list rings and wake gates are keyed by tenant. A
/// woken pop would look at A's partitions again (a connection checkout);
/// a parked one on a caught-up ring costs none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_push_does_not_wake_a_pop_parked_on_the_same_queue_name() {
    let broker = broker().await;
    let a = As::new(&broker, &token(Some("tenant-a"), "alice"));
    let b = As::new(&broker, &token(Some("tenant-b"), "bob"));
    for who in [&a, &b] {
        who.ok(
            "POST",
            "/api/v1/push",
            Some(&json!({"items": [{"queue": "q", "payload": 0}]})),
        )
        .await;
        who.ok("GET", "/api/v1/pop/queue/q?autoAck=true", None)
            .await;
    }
    let parked = {
        let a_bearer = a.bearer.clone();
        let client = broker.client.clone();
        tokio::spawn(async move {
            let reply = client
                .send_with(
                    Method::GET,
                    "/api/v1/pop/queue/q?wait=true&timeout=3000&autoAck=true",
                    Bytes::new(),
                    &[("authorization", a_bearer.as_str())],
                )
                .await;
            reply.status.as_u16()
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let checkouts = broker.engine.observe().pop_checkouts();
    for i in 0..5 {
        b.ok(
            "POST",
            "/api/v1/push",
            Some(&json!({"items": [{"queue": "q", "payload": i}]})),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        broker.engine.observe().pop_checkouts(),
        checkouts,
        "B's pushes woke A's parked pop"
    );
    assert_eq!(parked.await.unwrap(), 204);
    broker.stop().await;
}

/// Item 4: the token's `sub` is the producer of what a push, a transaction
/// or a stream cycle writes; a `producerSub` in the body is never read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tokens_sub_is_the_producer_and_a_body_producer_sub_is_ignored() {
    let broker = broker().await;
    let a = As::new(&broker, &token(Some("tenant-a"), "alice"));
    a.ok(
        "POST",
        "/api/v1/push",
        Some(&json!({"items": [{"queue": "p", "transactionId": "t-push",
                                "producerSub": "mallory", "payload": 1}]})),
    )
    .await;
    a.ok(
        "POST",
        "/api/v1/transaction",
        Some(&json!({"operations": [{"type": "push", "items": [
            {"queue": "p", "transactionId": "t-txn", "producerSub": "mallory", "payload": 2}]}]})),
    )
    .await;
    let query = a
        .ok(
            "POST",
            "/streams/v1/queries",
            Some(&json!({"name": "s", "source_queue": "p", "config_hash": "h"})),
        )
        .await;
    let popped = a.ok("GET", "/api/v1/pop/queue/p?batch=10", None).await;
    let partition_id = popped["messages"][0]["partitionId"].clone();
    a.ok(
        "POST",
        "/streams/v1/cycle",
        Some(
            &json!({"query_id": query["query_id"], "partition_id": partition_id,
                     "push_items": [{"queue": "p", "transactionId": "t-cycle",
                                     "producerSub": "mallory", "payload": 3}]}),
        ),
    )
    .await;
    let messages = popped["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{popped}");
    for message in messages {
        assert_eq!(message["producerSub"], "alice", "{message}");
    }
    for txn in ["t-push", "t-txn", "t-cycle"] {
        let detail = a
            .ok(
                "GET",
                &format!("/api/v1/messages/{}/{txn}", partition_id.as_str().unwrap()),
                None,
            )
            .await;
        assert_eq!(detail["producerSub"], "alice", "{txn}: {detail}");
    }
    broker.stop().await;

    // Without auth there is no producer, whatever the body says.
    let open = TestBroker::start().await;
    open.client
        .post_json(
            "/api/v1/push",
            &json!({"items": [{"queue": "p", "producerSub": "mallory", "payload": 1}]}),
        )
        .await;
    let popped = open.client.get("/api/v1/pop/queue/p").await.json();
    assert_eq!(
        popped["messages"][0]["producerSub"],
        Value::Null,
        "{popped}"
    );
    open.stop().await;
}

async fn broker_with(config: queen_engine::EngineConfig) -> TestBroker {
    TestBroker::serve_with(
        queen_testkit::TestDb::new().await,
        config,
        queen_http::ServeOptions {
            auth: Some(Arc::new(
                Auth::new(AuthConfig {
                    secret: Some(SECRET.to_owned()),
                    ..AuthConfig::default()
                })
                .unwrap(),
            )),
            ..queen_http::ServeOptions::default()
        },
    )
    .await
}

/// A push spooled during maintenance drains into its own tenant's queue,
/// with its producer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spooled_pushes_drain_into_their_own_tenants_queue() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker_with(queen_engine::EngineConfig {
        spool: Some(queen_engine::SpoolConfig {
            dir: dir.path().to_owned(),
            max_bytes: 1 << 30,
            push_timeout: Duration::from_secs(5),
            adopt: None,
            database: None,
        }),
        maintenance_refresh: Duration::from_millis(100),
        ..queen_engine::EngineConfig::default()
    })
    .await;
    let a = As::new(&broker, &token(Some("tenant-a"), "alice"));
    let b = As::new(&broker, &token(Some("tenant-b"), "bob"));
    a.ok(
        "POST",
        "/api/v1/system/maintenance",
        Some(&json!({"enabled": true})),
    )
    .await;
    for (who, payload) in [(&a, "for A"), (&b, "for B")] {
        let pushed = who
            .ok(
                "POST",
                "/api/v1/push",
                Some(&json!({"items": [{"queue": "q", "payload": payload}]})),
            )
            .await;
        assert_eq!(pushed[0]["status"], "buffered", "{pushed}");
    }
    a.ok(
        "POST",
        "/api/v1/system/maintenance",
        Some(&json!({"enabled": false})),
    )
    .await;
    for (who, payload, sub) in [(&a, "for A", "alice"), (&b, "for B", "bob")] {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let popped = loop {
            let popped = who
                .ok("GET", "/api/v1/pop/queue/q?batch=10&autoAck=true", None)
                .await;
            if !popped.is_null() {
                break popped;
            }
            assert!(std::time::Instant::now() < deadline, "nothing drained");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let messages = popped["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 1, "{popped}");
        assert_eq!(messages[0]["data"], payload, "{popped}");
        assert_eq!(messages[0]["producerSub"], sub, "{popped}");
    }
    broker.stop().await;
}

/// Statistics rows and the queue series of `/metrics` are per tenant: two
/// tenants' queues of one name are two rows and two series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statistics_rows_and_metrics_series_keep_tenants_apart() {
    let broker = broker().await;
    let a = As::new(&broker, &token(Some("tenant-a"), "alice"));
    let b = As::new(&broker, &token(Some("tenant-b"), "bob"));
    for (who, n) in [(&a, 3), (&b, 2)] {
        let items: Vec<Value> = (0..n)
            .map(|i| json!({"queue": "q", "payload": i}))
            .collect();
        who.ok("POST", "/api/v1/push", Some(&json!({"items": items})))
            .await;
    }
    broker.engine.observe().write_stats().await.unwrap();
    let sql = broker.sql().await;
    let rows = sql
        .query(
            "SELECT tenant_id, pushed, partitions FROM queen.stats_queue_minute
              WHERE queue_name = 'q' ORDER BY tenant_id",
            &[],
        )
        .await
        .unwrap();
    let rows: Vec<(String, i64, i32)> = rows
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    assert_eq!(
        rows,
        [("tenant-a".to_owned(), 3, 1), ("tenant-b".to_owned(), 2, 1)]
    );
    // An admin token sees every tenant's queue series.
    let (_, text) = a.raw("GET", "/metrics/prometheus", None).await;
    for series in [
        "queen_queue_messages{tenant=\"tenant-a\",queue=\"q\"} 3",
        "queen_queue_messages{tenant=\"tenant-b\",queue=\"q\"} 2",
    ] {
        assert!(text.contains(series), "{series} missing from:\n{text}");
    }
    broker.stop().await;
}

/// A broker with auth whose `JWT_SKIP_PATHS` is `skip`.
async fn broker_skipping(skip: &[&str]) -> TestBroker {
    TestBroker::serve_with(
        queen_testkit::TestDb::new().await,
        queen_engine::EngineConfig::default(),
        queen_http::ServeOptions {
            auth: Some(Arc::new(
                Auth::new(AuthConfig {
                    secret: Some(SECRET.to_owned()),
                    skip_paths: skip.iter().map(|path| (*path).to_owned()).collect(),
                    ..AuthConfig::default()
                })
                .unwrap(),
            )),
            ..queen_http::ServeOptions::default()
        },
    )
    .await
}

/// A `JWT_SKIP_PATHS` prefix entry `/X/` let `/X/` (the
/// route `/X` once the router drops the empty segment) through without a
/// token: the skip check saw the raw path. It now sees the path the router
/// reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skip_path_prefix_matches_the_path_the_router_reads() {
    let broker = broker_skipping(&["/health", "/api/v1/status/", "/api/v1/resources/queues"]).await;
    let anonymous = |path: &'static str| {
        let client = broker.client.clone();
        async move { client.get(path).await.status.as_u16() }
    };
    // The prefix covers what lies under it, however the path is spelled.
    assert_eq!(anonymous("/api/v1/status/queues").await, 200);
    assert_eq!(anonymous("//api/v1/status//queues/").await, 200);
    // Not the route the prefix names itself, in any spelling.
    for path in [
        "/api/v1/status",
        "/api/v1/status/",
        "/api/v1/status//",
        "//api/v1/status/",
    ] {
        assert_eq!(anonymous(path).await, 401, "{path}");
    }
    // An exact entry is the route it names, however it is spelled.
    assert_eq!(anonymous("/api/v1/resources/queues/").await, 200);
    assert_eq!(anonymous("/api/v1/resources/queues/q").await, 401);
    assert_eq!(anonymous("/api/v1/consumer-groups").await, 401);
    broker.stop().await;
}

/// A token whose `sub` holds a NUL was accepted, and the
/// messages it pushed carried it into the DLQ's text column, where filing
/// them failed with 500. Such a token is refused at authentication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_whose_sub_holds_a_nul_is_refused() {
    let broker = broker().await;
    let bad = As::new(&broker, &token(Some("tenant-a"), "ali\u{0}ce"));
    let (status, body) = bad
        .json(
            "POST",
            "/api/v1/push",
            Some(&json!({"items": [{"queue": "q", "payload": 1}]})),
        )
        .await;
    assert_eq!(
        (status, body),
        (401, json!({"error": "Invalid token subject"}))
    );
    let sql = broker.sql().await;
    let stored: i64 = sql
        .query_one("SELECT count(*) FROM queen.log_segments", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 0);
    broker.stop().await;
}

/// One sample of a Prometheus text exposition.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
}

/// A strict reader of the Prometheus text format (0.0.4, and the OpenMetrics
/// text it is a superset of here): every line is a comment or a sample, a
/// label value is a quoted string whose only escapes are `\\`, `\"` and
/// `\n`, label names are not repeated, and a value follows.
fn parse_exposition(text: &str) -> Result<Vec<Sample>, String> {
    fn name_char(c: char, first: bool) -> bool {
        c.is_ascii_alphabetic() || c == '_' || c == ':' || (!first && c.is_ascii_digit())
    }
    let mut samples = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let fail = |why: &str| Err(format!("line {}: {why}: {line:?}", number + 1));
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut chars = line.char_indices().peekable();
        let mut name = String::new();
        while let Some(&(_, c)) = chars.peek() {
            if !name_char(c, name.is_empty()) {
                break;
            }
            name.push(c);
            chars.next();
        }
        if name.is_empty() {
            return fail("no metric name");
        }
        let mut labels: Vec<(String, String)> = Vec::new();
        if chars.peek().map(|&(_, c)| c) == Some('{') {
            chars.next();
            loop {
                if chars.peek().map(|&(_, c)| c) == Some('}') && labels.is_empty() {
                    chars.next();
                    break;
                }
                let mut label = String::new();
                while let Some(&(_, c)) = chars.peek() {
                    if !name_char(c, label.is_empty()) || c == ':' {
                        break;
                    }
                    label.push(c);
                    chars.next();
                }
                if label.is_empty() {
                    return fail("no label name");
                }
                if chars.next().map(|(_, c)| c) != Some('=')
                    || chars.next().map(|(_, c)| c) != Some('"')
                {
                    return fail("label without =\"");
                }
                let mut value = String::new();
                loop {
                    match chars.next().map(|(_, c)| c) {
                        None => return fail("unterminated label value"),
                        Some('"') => break,
                        Some('\\') => match chars.next().map(|(_, c)| c) {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            _ => return fail("invalid escape in a label value"),
                        },
                        Some(c) => value.push(c),
                    }
                }
                if labels.iter().any(|(seen, _)| *seen == label) {
                    return fail("repeated label name");
                }
                labels.push((label, value));
                match chars.next().map(|(_, c)| c) {
                    Some(',') => {}
                    Some('}') => break,
                    _ => return fail("labels not closed"),
                }
            }
        }
        if chars.next().map(|(_, c)| c) != Some(' ') {
            return fail("no space before the value");
        }
        let rest: String = chars.map(|(_, c)| c).collect();
        let mut parts = rest.split(' ');
        let value = parts.next().unwrap_or_default();
        let numeric = matches!(value, "+Inf" | "-Inf" | "NaN") || value.parse::<f64>().is_ok();
        if !numeric {
            return fail("value is not a number");
        }
        if let Some(timestamp) = parts.next() {
            if timestamp.parse::<f64>().is_err() {
                return fail("timestamp is not a number");
            }
        }
        if parts.next().is_some() {
            return fail("trailing text");
        }
        samples.push(Sample { name, labels });
    }
    Ok(samples)
}

#[test]
fn the_strict_exposition_reader_refuses_what_scrapers_refuse() {
    assert!(parse_exposition("a{b=\"c\\\"d\"} 1\n# EOF\n").is_ok());
    assert!(parse_exposition("a 1.5\n").is_ok());
    for bad in [
        "a{b=\"c\",tenant=\"x\"\"} 1",
        "a{b=\"c\"\",tenant=\"other\"} 1",
        "a{b=\"x\",b=\"y\"} 1",
        "a{b=\"\\q\"} 1",
        "a{b=\"c\"} one",
        "a{b=\"c} 1",
    ] {
        assert!(parse_exposition(bad).is_err(), "{bad}");
    }
}

/// Label values were written unescaped, so one push to a
/// queue named `orders",tenant="other` made the scrape unparsable (and
/// forged another tenant's label). They are escaped per the exposition
/// format: the scrape parses, and the series carries the real name and the
/// pusher's tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_name_cannot_break_or_forge_the_prometheus_scrape() {
    let broker = broker().await;
    let a = As::new(&broker, &token(Some("tenant-a"), "alice"));
    let hostile = "orders\",tenant=\"other";
    let also = "back\\slash\\\"";
    for queue in [hostile, also] {
        a.ok(
            "POST",
            "/api/v1/push",
            Some(&json!({"items": [{"queue": queue, "payload": 1}]})),
        )
        .await;
    }
    a.ok(
        "GET",
        &format!(
            "/api/v1/pop/queue/{}?consumerGroup=g%22x&autoAck=true&wait=false",
            "orders%22%2Ctenant%3D%22other"
        ),
        None,
    )
    .await;
    let (status, text) = a.raw("GET", "/metrics/prometheus", None).await;
    assert_eq!(status, 200);
    let samples = parse_exposition(&text).unwrap_or_else(|error| panic!("{error}\n{text}"));
    let label = |sample: &Sample, key: &str| {
        sample
            .labels
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.clone())
    };
    for queue in [hostile, also] {
        let series = samples
            .iter()
            .find(|s| {
                s.name == "queen_queue_messages" && label(s, "queue").as_deref() == Some(queue)
            })
            .unwrap_or_else(|| panic!("no series for {queue:?}:\n{text}"));
        assert_eq!(label(series, "tenant").as_deref(), Some("tenant-a"));
    }
    assert!(
        samples
            .iter()
            .all(|s| label(s, "tenant").as_deref() != Some("other")),
        "a forged tenant label:\n{text}"
    );
    broker.stop().await;
}

/// A token of `tenant` with `role`.
fn token_as(tenant: &str, sub: &str, role: &str) -> String {
    encode(
        &Header::default(),
        &json!({"sub": sub, "role": role, "tenant": tenant, "exp": now() + 600}),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

/// A broker with auth, and `QUEEN_METRICS_AGGREGATE_QUEUES` as `aggregate`.
async fn broker_aggregating(aggregate: bool) -> TestBroker {
    TestBroker::serve_with(
        queen_testkit::TestDb::new().await,
        queen_engine::EngineConfig::default(),
        queen_http::ServeOptions {
            auth: Some(Arc::new(
                Auth::new(AuthConfig {
                    secret: Some(SECRET.to_owned()),
                    ..AuthConfig::default()
                })
                .unwrap(),
            )),
            aggregate_queue_metrics: aggregate,
            ..queen_http::ServeOptions::default()
        },
    )
    .await
}

/// Tenant A pushes 3 messages to `a-orders` (group `a-group` reads one),
/// tenant B 2 to `b-orders`.
async fn two_tenants_queues(broker: &TestBroker) {
    let a = As::new(broker, &token_as("tenant-a", "alice", "read-write"));
    let b = As::new(broker, &token_as("tenant-b", "bob", "read-write"));
    for (who, queue, n) in [(&a, "a-orders", 3), (&b, "b-orders", 2)] {
        let items: Vec<Value> = (0..n)
            .map(|i| json!({"queue": queue, "payload": i}))
            .collect();
        who.ok("POST", "/api/v1/push", Some(&json!({"items": items})))
            .await;
    }
    a.ok(
        "GET",
        "/api/v1/pop/queue/a-orders?consumerGroup=a-group&batch=1&autoAck=true",
        None,
    )
    .await;
}

/// With auth on, `/metrics/prometheus` answered anyone
/// with every tenant's queue names and counts. The per-queue series now
/// need a token of their tenant (an admin token sees all); a scrape without
/// one gets the broker-wide series only. `/metrics` (JSON) names no queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_the_queue_series_are_shown_only_to_a_token_of_their_tenant() {
    let broker = broker_aggregating(false).await;
    two_tenants_queues(&broker).await;
    let scrape = |bearer: Option<String>| {
        let client = broker.client.clone();
        async move {
            let auth = bearer.map(|token| format!("Bearer {token}"));
            let headers: Vec<(&str, &str)> = auth
                .as_deref()
                .map(|auth| vec![("authorization", auth)])
                .unwrap_or_default();
            let reply = client
                .send_with(Method::GET, "/metrics/prometheus", Bytes::new(), &headers)
                .await;
            (
                reply.status.as_u16(),
                String::from_utf8_lossy(&reply.body).into_owned(),
            )
        }
    };
    let series = |text: &str, family: &str| -> Vec<String> {
        parse_exposition(text)
            .unwrap_or_else(|error| panic!("{error}\n{text}"))
            .into_iter()
            .filter(|sample| sample.name == family)
            .map(|sample| {
                sample
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect()
    };

    // Anonymous: the broker-wide series, no queue, tenant or group.
    let (status, text) = scrape(None).await;
    assert_eq!(status, 200);
    for family in [
        "queen_uptime_seconds",
        "queen_push_requests_total",
        "queen_cluster_up",
    ] {
        assert_eq!(series(&text, family).len(), 1, "{family} missing:\n{text}");
    }
    for leak in ["a-orders", "b-orders", "tenant-a", "tenant-b", "a-group"] {
        assert!(
            !text.contains(leak),
            "an anonymous scrape shows {leak}:\n{text}"
        );
    }
    assert!(series(&text, "queen_queue_messages").is_empty());
    let (status, json_text) = {
        let reply = broker.client.get("/metrics").await;
        (
            reply.status.as_u16(),
            String::from_utf8_lossy(&reply.body).into_owned(),
        )
    };
    assert_eq!(status, 200);
    for leak in ["a-orders", "b-orders", "tenant-a", "tenant-b"] {
        assert!(
            !json_text.contains(leak),
            "/metrics shows {leak}: {json_text}"
        );
    }

    // A token of tenant A (read-only): A's queues, not B's.
    let (status, text) = scrape(Some(token_as("tenant-a", "ra", "read-only"))).await;
    assert_eq!(status, 200);
    assert_eq!(
        series(&text, "queen_queue_messages"),
        ["tenant=tenant-a,queue=a-orders"]
    );
    assert_eq!(
        series(&text, "queen_consumer_lag_messages"),
        ["tenant=tenant-a,queue=a-orders,group=a-group"]
    );
    assert!(!text.contains("b-orders"), "{text}");
    // B's read-write token: B's only.
    let (_, text) = scrape(Some(token_as("tenant-b", "rb", "read-write"))).await;
    assert_eq!(
        series(&text, "queen_queue_messages"),
        ["tenant=tenant-b,queue=b-orders"]
    );
    assert!(
        !text.contains("a-orders") && !text.contains("a-group"),
        "{text}"
    );
    // An admin token: every tenant's.
    let (_, text) = scrape(Some(token_as("tenant-b", "op", "admin"))).await;
    let mut all = series(&text, "queen_queue_messages");
    all.sort();
    assert_eq!(
        all,
        [
            "tenant=tenant-a,queue=a-orders",
            "tenant=tenant-b,queue=b-orders"
        ]
    );
    // A token without a role is anonymous; a bad token is refused.
    let (status, text) = scrape(Some(token_as("tenant-a", "x", "nobody"))).await;
    assert_eq!(status, 200);
    assert!(!text.contains("a-orders"), "{text}");
    let (status, _) = scrape(Some("not-a-token".to_owned())).await;
    assert_eq!(status, 401);
    broker.stop().await;
}

/// With `QUEEN_METRICS_AGGREGATE_QUEUES`, a scrape
/// without a token gets each per-queue family summed over every queue,
/// without labels; a token still sees its own queues by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aggregate_setting_sums_the_queue_series_without_labels_for_anonymous_scrapes() {
    let broker = broker_aggregating(true).await;
    two_tenants_queues(&broker).await;
    let text =
        String::from_utf8(broker.client.get("/metrics/prometheus").await.body.to_vec()).unwrap();
    let samples = parse_exposition(&text).unwrap_or_else(|error| panic!("{error}\n{text}"));
    let value = |family: &str| -> String {
        let lines: Vec<&str> = text
            .lines()
            .filter(|line| line.split([' ', '{']).next() == Some(family))
            .collect();
        assert_eq!(lines.len(), 1, "{family}:\n{text}");
        lines[0].rsplit(' ').next().unwrap().to_owned()
    };
    assert_eq!(value("queen_queue_messages"), "5");
    assert_eq!(value("queen_queue_partitions"), "2");
    assert_eq!(value("queen_consumer_lag_messages"), "2");
    for sample in &samples {
        assert!(
            sample
                .labels
                .iter()
                .all(|(name, _)| !["queue", "tenant", "group"].contains(&name.as_str())),
            "{sample:?}"
        );
    }
    for leak in ["a-orders", "b-orders", "tenant-a", "a-group"] {
        assert!(!text.contains(leak), "{leak}:\n{text}");
    }
    let a = As::new(&broker, &token_as("tenant-a", "ra", "read-only"));
    let (_, text) = a.raw("GET", "/metrics/prometheus", None).await;
    assert!(
        text.contains("queen_queue_messages{tenant=\"tenant-a\",queue=\"a-orders\"} 3"),
        "{text}"
    );
    assert!(!text.contains("b-orders"), "{text}");
    broker.stop().await;
}
