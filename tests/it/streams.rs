//! Issue 16, in part: the streaming SDKs' query registration and state reads
//! (`POST /streams/v1/queries`, `POST /streams/v1/state/get`), the
//! `queen_streams` schema, and the per-message fields a stream's consumer
//! reads from a pop.

use queen_tests::TestBroker;
use serde_json::{json, Value};

use crate::support::{pop, push, select_i64};

async fn register(broker: &TestBroker, body: Value) -> (u16, Value) {
    let reply = broker.client.post_json("/streams/v1/queries", &body).await;
    (reply.status.as_u16(), reply.json())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_is_registered_once_and_a_changed_hash_needs_a_reset() {
    let broker = TestBroker::start().await;
    let body = json!({"name": "counts", "source_queue": "events", "config_hash": "h1",
                      "sink_queue": "totals"});
    let (status, created) = register(&broker, body.clone()).await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["success"], true);
    assert_eq!(created["fresh"], true);
    assert_eq!(created["reset"], false);
    assert_eq!(created["name"], "counts");
    assert_eq!(created["config_hash"], "h1");
    let id = created["query_id"].as_str().unwrap().to_owned();

    let (status, again) = register(&broker, body.clone()).await;
    assert_eq!((status, again["fresh"].clone()), (200, json!(false)));
    assert_eq!(again["query_id"], id.as_str());

    // State the query holds, written as a cycle would.
    let sql = broker.sql().await;
    sql.execute(
        "INSERT INTO queen_streams.state (query_id, partition_id, key, value) \
         VALUES ($1::text::uuid, gen_random_uuid(), 'k', '{\"n\": 1}')",
        &[&id],
    )
    .await
    .unwrap();

    let mut changed = body.clone();
    changed["config_hash"] = json!("h2");
    let (status, refused) = register(&broker, changed.clone()).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["success"], false);
    assert_eq!(refused["query_id"], id.as_str());
    assert!(refused["error"]
        .as_str()
        .unwrap()
        .starts_with("config_hash mismatch"));
    let rows = "SELECT count(*) FROM queen_streams.state";
    assert_eq!(
        select_i64(&sql, rows).await,
        1,
        "a refused change kept the state"
    );

    changed["reset"] = json!(true);
    let (status, reset) = register(&broker, changed).await;
    assert_eq!(status, 200, "{reset}");
    assert_eq!(
        (reset["reset"].clone(), reset["query_id"].clone()),
        (json!(true), json!(id))
    );
    assert_eq!(select_i64(&sql, rows).await, 0, "reset wipes the state");
    let (status, _) = register(
        &broker,
        json!({"name": "counts", "source_queue": "events",
                                               "config_hash": "h2"}),
    )
    .await;
    assert_eq!(status, 200, "the new hash is the stored one");

    for (body, error) in [
        (
            json!({"source_queue": "q", "config_hash": "h"}),
            "name is required",
        ),
        (
            json!({"name": "n", "config_hash": "h"}),
            "source_queue is required",
        ),
        (
            json!({"name": "n", "source_queue": "q", "config_hash": ""}),
            "config_hash is required",
        ),
        (
            json!({"name": "n", "source_queue": "q", "config_hash": "h", "reset": "yes"}),
            "reset must be a boolean",
        ),
    ] {
        let (status, reply) = register(&broker, body.clone()).await;
        assert_eq!(
            (status, reply["error"].clone()),
            (400, json!(error)),
            "{body}"
        );
    }
    assert_eq!(
        select_i64(&sql, "SELECT count(*) FROM queen_streams.queries").await,
        1,
        "a refused registration wrote nothing"
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_is_read_by_keys_by_prefix_or_whole_and_leaves_with_its_query() {
    let broker = TestBroker::start().await;
    let (_, created) = register(
        &broker,
        json!({"name": "w", "source_queue": "src",
                                                "config_hash": "h"}),
    )
    .await;
    let id = created["query_id"].as_str().unwrap().to_owned();
    let partition = uuid::Uuid::now_v7().to_string();
    let other = uuid::Uuid::now_v7().to_string();
    let sql = broker.sql().await;
    for (p, key, value) in [
        (&partition, "win:1", json!({"sum": 3})),
        (&partition, "win:2", json!([1, 2])),
        (&partition, "meta", json!("x")),
        (&other, "win:1", json!(0)),
    ] {
        sql.execute(
            "INSERT INTO queen_streams.state (query_id, partition_id, key, value) \
             VALUES ($1::text::uuid, $2::text::uuid, $3, $4)",
            &[&id, p, &key, &value],
        )
        .await
        .unwrap();
    }
    let get = |body: Value| {
        let client = broker.client.clone();
        async move { client.post_json("/streams/v1/state/get", &body).await }
    };
    let keys_of = |reply: &Value| -> Vec<String> {
        reply["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["key"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = get(json!({"query_id": id, "partition_id": partition}))
        .await
        .json();
    assert_eq!(all["success"], true);
    assert_eq!(keys_of(&all), ["meta", "win:1", "win:2"]);
    assert_eq!(all["rows"][1]["value"], json!({"sum": 3}));
    assert!(all["rows"][1]["updated_at"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    let by_keys = get(json!({"query_id": id, "partition_id": partition,
                              "keys": ["win:2", "nope"]}))
    .await
    .json();
    assert_eq!(keys_of(&by_keys), ["win:2"]);
    let by_prefix = get(json!({"query_id": id, "partition_id": partition, "key_prefix": "win:"}))
        .await
        .json();
    assert_eq!(keys_of(&by_prefix), ["win:1", "win:2"]);
    let bad = get(json!({"query_id": "nope", "partition_id": partition})).await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"], "query_id must be a UUID");

    // Deleting the source queue removes its queries, and their state.
    push(&broker, "src", "p", &[json!(1)]).await;
    let deleted = broker.client.delete("/api/v1/resources/queues/src").await;
    assert_eq!(deleted.status, 200);
    assert_eq!(
        select_i64(&sql, "SELECT count(*) FROM queen_streams.queries").await,
        0
    );
    assert_eq!(
        select_i64(&sql, "SELECT count(*) FROM queen_streams.state").await,
        0
    );
    // A query row deleted by hand (as the SDK harnesses do) takes its state.
    let (_, created) = register(
        &broker,
        json!({"name": "w2", "source_queue": "src2",
                                                "config_hash": "h"}),
    )
    .await;
    let id = created["query_id"].as_str().unwrap().to_owned();
    sql.execute(
        "INSERT INTO queen_streams.state (query_id, partition_id, key, value) \
         VALUES ($1::text::uuid, gen_random_uuid(), 'k', '1')",
        &[&id],
    )
    .await
    .unwrap();
    sql.execute(
        "DELETE FROM queen_streams.queries WHERE id = $1::text::uuid",
        &[&id],
    )
    .await
    .unwrap();
    assert_eq!(
        select_i64(&sql, "SELECT count(*) FROM queen_streams.state").await,
        0
    );
    broker.stop().await;
}

/// A stream's consumer pops with group `streams.<queryId>` and reads these
/// per-message fields (wire-api.md §6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_consumer_reads_the_fields_it_needs_from_each_message() {
    let broker = TestBroker::start().await;
    push(&broker, "feed", "p1", &[json!(1), json!(2)]).await;
    let popped = pop(
        &broker,
        "/api/v1/pop/queue/feed?consumerGroup=streams.q1&batch=10&wait=true&timeout=1000",
    )
    .await
    .expect("the messages");
    for message in popped["messages"].as_array().unwrap() {
        for field in ["partitionId", "leaseId", "createdAt", "transactionId", "id"] {
            assert!(
                message[field].as_str().is_some_and(|v| !v.is_empty()),
                "{field}: {message}"
            );
        }
        assert_eq!(message["partition"], "p1", "{message}");
        assert_eq!(message["consumerGroup"], "streams.q1", "{message}");
    }
    broker.stop().await;
}
