//! Helpers shared by the integration tests: push, configure, pop and ack over
//! HTTP, and small readers of what a pop answered.

use std::time::{Duration, Instant};

use queen_engine::EngineConfig;
use queen_testkit::http::Reply;
use queen_tests::TestBroker;
use serde_json::{json, Value};

/// Run each named behaviour test (an `async fn(EngineConfig)` of the calling
/// module) twice: through the hot-list and through the SQL candidate scan.
macro_rules! both_paths {
    ($($name:ident),* $(,)?) => {
        mod hotlist {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::hotlist_config(true)).await;
                }
            )*
        }
        mod sql_scan {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::hotlist_config(false)).await;
                }
            )*
        }
    };
}
pub(crate) use both_paths;

/// The default engine settings with the hot-list switched on or off.
pub(crate) fn hotlist_config(hotlist: bool) -> EngineConfig {
    EngineConfig {
        hotlist,
        ..EngineConfig::default()
    }
}

/// Insist that `reply` has `status`, showing its body otherwise.
#[track_caller]
pub(crate) fn expect_status(reply: &Reply, status: u16) {
    assert_eq!(
        reply.status,
        status,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
}

/// Push `items` in one request, insist on a 201 and return the per-item results.
pub(crate) async fn push_items(broker: &TestBroker, items: Vec<Value>) -> Vec<Value> {
    let reply = broker
        .client
        .post_json("/api/v1/push", &json!({"items": items}))
        .await;
    expect_status(&reply, 201);
    reply.json().as_array().unwrap().clone()
}

/// Push `payloads` to one partition in one request; returns the per-item results.
pub(crate) async fn push(
    broker: &TestBroker,
    queue: &str,
    partition: &str,
    payloads: &[Value],
) -> Vec<Value> {
    let items = payloads
        .iter()
        .map(|p| json!({"queue": queue, "partition": partition, "payload": p}))
        .collect();
    push_items(broker, items).await
}

/// Configure `queue` with `options` and insist on a 200.
pub(crate) async fn configure(broker: &TestBroker, queue: &str, options: Value) {
    let reply = broker
        .client
        .post_json(
            "/api/v1/configure",
            &json!({"queue": queue, "options": options}),
        )
        .await;
    expect_status(&reply, 200);
}

/// GET a pop path: the answer for a 200, `None` for an empty 204.
pub(crate) async fn pop(broker: &TestBroker, path: &str) -> Option<Value> {
    let reply = broker.client.get(path).await;
    match reply.status.as_u16() {
        200 => Some(reply.json()),
        204 => {
            assert!(reply.body.is_empty());
            None
        }
        other => panic!("{path}: {other} {:?}", String::from_utf8_lossy(&reply.body)),
    }
}

/// The payloads a pop of `path` delivered, or `None` for a 204.
pub(crate) async fn pop_data(broker: &TestBroker, path: &str) -> Option<Vec<Value>> {
    pop(broker, path).await.map(|popped| data(&popped))
}

/// The messages of a pop answer.
pub(crate) fn messages(popped: &Value) -> Vec<Value> {
    popped["messages"].as_array().unwrap().clone()
}

/// The payloads of a pop answer, in delivery order.
pub(crate) fn data(popped: &Value) -> Vec<Value> {
    messages(popped).iter().map(|m| m["data"].clone()).collect()
}

/// Ack every message of `popped` with `status` in one batch (for `group`, when
/// given); insists on a 200 and returns the per-message results.
pub(crate) async fn ack_all(
    broker: &TestBroker,
    popped: &Value,
    status: &str,
    group: Option<&str>,
) -> Vec<Value> {
    let acks: Vec<Value> = messages(popped)
        .iter()
        .map(|m| {
            json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                   "leaseId": m["leaseId"], "status": status})
        })
        .collect();
    let mut body = json!({"acknowledgments": acks});
    if let Some(group) = group {
        body["consumerGroup"] = json!(group);
    }
    let reply = broker.client.post_json("/api/v1/ack/batch", &body).await;
    expect_status(&reply, 200);
    reply.json().as_array().unwrap().clone()
}

/// Ack one message with `status` (and `error`, when given); returns its result.
pub(crate) async fn ack_one(
    broker: &TestBroker,
    message: &Value,
    status: &str,
    error: Option<&str>,
) -> Value {
    let mut body = json!({"transactionId": message["transactionId"], "partitionId": message["partitionId"],
                          "leaseId": message["leaseId"], "status": status});
    if let Some(error) = error {
        body["error"] = json!(error);
    }
    let reply = broker.client.post_json("/api/v1/ack", &body).await;
    expect_status(&reply, 200);
    let results = reply.json();
    assert_eq!(results.as_array().unwrap().len(), 1);
    results[0].clone()
}

/// The database's clock, as an ISO-8601 UTC string with microseconds.
pub(crate) async fn db_now(broker: &TestBroker) -> String {
    broker
        .sql()
        .await
        .query_one(
            "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// A database timestamp strictly between everything pushed so far and
/// everything pushed after it.
pub(crate) async fn cut(broker: &TestBroker) -> String {
    tokio::time::sleep(Duration::from_millis(50)).await;
    let at = db_now(broker).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    at
}

/// The single `bigint` that `query` (without parameters) selects on `sql`.
pub(crate) async fn select_i64(sql: &tokio_postgres::Client, query: &str) -> i64 {
    sql.query_one(query, &[]).await.unwrap().get(0)
}

/// The ids of `queue`'s partitions (only the one named `name`, when given).
pub(crate) async fn partition_ids(
    sql: &impl tokio_postgres::GenericClient,
    queue: &str,
    name: Option<&str>,
) -> Vec<uuid::Uuid> {
    sql.query(
        "SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id \
          WHERE q.name = $1 AND ($2::text IS NULL OR p.name = $2) ORDER BY p.name",
        &[&queue, &name],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| row.get(0))
    .collect()
}

/// Lock `table`'s rows whose `column` is one of `ids` (and that meet
/// `and`, SQL or empty) FOR UPDATE, in the transaction `sql` has open: a
/// statement for each id, as Citus runs no FOR UPDATE that reads several
/// shards (`cargo xtask citus test`).
pub(crate) async fn lock_each(
    sql: &impl tokio_postgres::GenericClient,
    table: &str,
    column: &str,
    ids: &[uuid::Uuid],
    and: &str,
) {
    assert!(!ids.is_empty(), "nothing to lock in {table}");
    let statement = format!("SELECT 1 FROM {table} WHERE {column} = $1 {and} FOR UPDATE");
    for id in ids {
        sql.execute(&statement, &[id]).await.unwrap();
    }
}

/// Messages stored in `queue`'s segments.
pub(crate) async fn stored(broker: &TestBroker, queue: &str) -> i64 {
    select_i64(
        &broker.sql().await,
        &format!(
            "SELECT coalesce(sum(s.msg_count), 0)::bigint FROM queen.log_segments s \
               JOIN queen.log_partitions p ON p.id = s.partition_id \
               JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '{queue}'"
        ),
    )
    .await
}

/// A broker whose pool reaches no server (a socket directory where nothing
/// listens), served over HTTP.
pub(crate) struct Unreachable {
    shutdown: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<()>,
}

impl Unreachable {
    /// Stop the server and wait for it.
    pub(crate) async fn stop(self) {
        let _ = self.shutdown.send(());
        self.server.await.unwrap();
    }
}

/// Serve an engine with `config` whose database cannot be reached; a client
/// for it.
pub(crate) async fn serve_unreachable(
    config: EngineConfig,
) -> (queen_testkit::http::Client, Unreachable) {
    let mut db = tokio_postgres::Config::new();
    db.host_path("/nonexistent-queen-socket-dir")
        .user("nobody")
        .dbname("nothing");
    let pool = queen_sql::connect::pool(db, 2).unwrap();
    let engine = queen_engine::Engine::new(pool, config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (shutdown, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(queen_http::serve(
        listener,
        engine,
        queen_http::ServeOptions::default(),
        async move {
            let _ = rx.await;
        },
    ));
    let client = queen_testkit::http::Client::new(format!("http://{addr}"));
    (client, Unreachable { shutdown, server })
}

/// Poll `GET /api/v1/system/maintenance` until `bufferedMessages` is 0, as
/// the reference client's test does; panics after `limit`.
pub(crate) async fn until_drained(broker: &TestBroker, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let state = broker.client.get("/api/v1/system/maintenance").await.json();
        if state["bufferedMessages"] == 0 {
            return state;
        }
        assert!(
            Instant::now() < deadline,
            "the spool did not drain: {state}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
