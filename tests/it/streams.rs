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

/// The SDK runners' idle flush asks for the windows whose end plus grace
/// period has passed: `ripe_at_or_before` keeps only rows whose value holds
/// a numeric `windowEnd` at or before it, with the other filters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_get_returns_only_ripe_windows_and_refuses_a_malformed_ripe_time() {
    let broker = TestBroker::start().await;
    let (_, created) = register(
        &broker,
        json!({"name": "ripe", "source_queue": "src-r", "config_hash": "h"}),
    )
    .await;
    let id = created["query_id"].as_str().unwrap().to_owned();
    let partition = uuid::Uuid::now_v7().to_string();
    let sql = broker.sql().await;
    for (key, value) in [
        (
            "tumb:1\u{1f}a",
            json!({"acc": 1, "windowStart": 0, "windowEnd": 1000}),
        ),
        (
            "tumb:1\u{1f}b",
            json!({"acc": 2, "windowStart": 1000, "windowEnd": 2000}),
        ),
        (
            "tumb:1\u{1f}c",
            json!({"acc": 3, "windowStart": 1000, "windowEnd": 2000.5}),
        ),
        ("tumb:1\u{1f}d", json!({"acc": 4, "windowEnd": "1000"})),
        ("tumb:1\u{1f}e", json!({"acc": 5})),
        ("tumb:1\u{1f}f", json!([1000])),
        ("tumb:1\u{1f}g", json!(7)),
        ("tumb:1\u{1f}h", json!({"windowEnd": 1e300})),
        ("other\u{1f}a", json!({"windowEnd": 10})),
        ("__wm__", json!({"eventTimeMs": 5})),
    ] {
        sql.execute(
            "INSERT INTO queen_streams.state (query_id, partition_id, key, value) \
             VALUES ($1::text::uuid, $2::text::uuid, $3, $4)",
            &[&id, &partition, &key, &value],
        )
        .await
        .unwrap();
    }
    let keys = |body: Value| {
        let client = broker.client.clone();
        async move {
            let reply = client.post_json("/streams/v1/state/get", &body).await;
            assert_eq!(reply.status, 200, "{body}");
            let reply = reply.json();
            reply["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|row| row["key"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    // As the Python runner asks: the operator's prefix and the ripe time.
    assert_eq!(
        keys(
            json!({"query_id": id, "partition_id": partition, "keys": [],
                    "key_prefix": "tumb:1\u{1f}", "ripe_at_or_before": 2000})
        )
        .await,
        ["tumb:1\u{1f}a", "tumb:1\u{1f}b"]
    );
    assert_eq!(
        keys(json!({"query_id": id, "partition_id": partition,
                    "key_prefix": "tumb:1\u{1f}", "ripe_at_or_before": 2000.5}))
        .await,
        ["tumb:1\u{1f}a", "tumb:1\u{1f}b", "tumb:1\u{1f}c"]
    );
    assert!(
        keys(json!({"query_id": id, "partition_id": partition,
                    "key_prefix": "tumb:1\u{1f}", "ripe_at_or_before": 999}))
        .await
        .is_empty(),
        "no window ends at or before 999"
    );
    // Without a prefix every ripe row of the partition; with keys, those.
    assert_eq!(
        keys(json!({"query_id": id, "partition_id": partition, "ripe_at_or_before": 1000})).await,
        ["other\u{1f}a", "tumb:1\u{1f}a"]
    );
    assert_eq!(
        keys(json!({"query_id": id, "partition_id": partition,
                    "keys": ["tumb:1\u{1f}b", "tumb:1\u{1f}e"], "ripe_at_or_before": 5000}))
        .await,
        ["tumb:1\u{1f}b"]
    );
    // null is no filter.
    assert_eq!(
        keys(json!({"query_id": id, "partition_id": partition, "ripe_at_or_before": null}))
            .await
            .len(),
        10
    );
    for bad in [
        json!("2000"),
        json!(true),
        json!({"ms": 2000}),
        json!([2000]),
    ] {
        let reply = broker
            .client
            .post_json(
                "/streams/v1/state/get",
                &json!({"query_id": id, "partition_id": partition, "ripe_at_or_before": bad}),
            )
            .await;
        assert_eq!(reply.status, 400, "{bad}");
        assert_eq!(
            reply.json()["error"],
            "ripe_at_or_before must be a number (epoch milliseconds)"
        );
    }
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

/// Register `name` on `source` (sink `sink`), push `n` messages to
/// `source`/`p`, and pop them all for the stream's group; (query id, the pop).
async fn leased_batch(broker: &TestBroker, name: &str, source: &str, n: usize) -> (String, Value) {
    let (_, created) = register(
        broker,
        json!({"name": name, "source_queue": source,
                                               "sink_queue": "sink", "config_hash": "h"}),
    )
    .await;
    let id = created["query_id"].as_str().unwrap().to_owned();
    let payloads: Vec<Value> = (0..n).map(|i| json!({ "n": i })).collect();
    push(broker, source, "p", &payloads).await;
    let popped = pop(
        broker,
        &format!("/api/v1/pop/queue/{source}?consumerGroup=streams.{id}&batch=100"),
    )
    .await
    .expect("the source batch");
    (id, popped)
}

async fn cycle(broker: &TestBroker, body: Value) -> Value {
    let reply = broker.client.post_json("/streams/v1/cycle", &body).await;
    assert_eq!(
        reply.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
    reply.json()
}

/// The committed offset of the stream group on `source`/`p`.
async fn committed(broker: &TestBroker, source: &str, id: &str) -> i64 {
    select_i64(
        &broker.sql().await,
        &format!(
            "SELECT c.committed FROM queen.log_consumers c \
               JOIN queen.log_partitions p ON p.id = c.partition_id \
               JOIN queen.queues q ON q.id = p.queue_id \
              WHERE q.name = '{source}' AND c.consumer_group = 'streams.{id}'"
        ),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_commits_state_sink_and_ack_together() {
    let broker = TestBroker::start().await;
    let (id, popped) = leased_batch(&broker, "sum", "src", 3).await;
    let messages = popped["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    let partition_id = last["partitionId"].as_str().unwrap();
    let done = cycle(
        &broker,
        json!({
            "query_id": id, "partition_id": partition_id, "consumer_group": format!("streams.{id}"),
            "state_ops": [
                {"type": "upsert", "key": "k1", "value": {"sum": 3}},
                {"type": "upsert", "key": "k2", "value": 1},
                {"type": "delete", "key": "k2"},
                {"type": "upsert", "key": "k3", "value": [1, 2, 3]}
            ],
            "push_items": [{"queue": "sink", "payload": {"total": 3}},
                           {"queue": "sink", "partition": "b", "payload": {"total": 0}}],
            "ack": {"transactionId": last["transactionId"], "leaseId": last["leaseId"],
                    "status": "completed", "count": 3}
        }),
    )
    .await;
    assert_eq!(done["success"], true, "{done}");
    assert_eq!(done["queueName"], "src");
    assert_eq!(done["state_ops_applied"], 3);
    let results = done["push_results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r["status"] == "queued"));
    assert!(
        results[0]["message_id"].as_str() < results[1]["message_id"].as_str(),
        "broker-stamped ids increase: {results:?}"
    );
    assert_eq!(
        done["ack_result"],
        json!({"success": true, "count": 3, "lease_released": true, "dlq": false})
    );
    let state = broker
        .client
        .post_json(
            "/streams/v1/state/get",
            &json!({"query_id": id, "partition_id": partition_id}),
        )
        .await
        .json();
    let keys: Vec<&str> = state["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["k1", "k3"]);
    assert_eq!(committed(&broker, "src", &id).await, 2);
    let sink = pop(&broker, "/api/v1/pop/queue/sink?batch=10&wait=false").await;
    assert!(sink.is_some(), "the sink messages are consumable");

    // The rest of the contract's fields: a dead-lettering ack answers count
    // 0, an upsert without a value stores {}, a sink item keeps its
    // payload's bytes and its traceId, and a messageId is the broker's.
    let (id2, popped2) = leased_batch(&broker, "sum2", "src2", 2).await;
    let first = popped2["messages"][0].clone();
    let trace = uuid::Uuid::now_v7().to_string();
    let given_id = uuid::Uuid::now_v7().to_string();
    let body = format!(
        r#"{{"query_id": "{id2}", "partition_id": "{pid}", "consumer_group": "streams.{id2}",
            "state_ops": [{{"type": "upsert", "key": "bare"}}],
            "push_items": [{{"queue": "sink2", "payload": {{"b": 1, "a": 2.50}},
                             "traceId": "{trace}", "messageId": "{given_id}"}}],
            "ack": {{"transactionId": "{txn}", "leaseId": "{lease}", "status": "dlq",
                     "error": "bad input", "count": 1}}}}"#,
        pid = first["partitionId"].as_str().unwrap(),
        txn = first["transactionId"].as_str().unwrap(),
        lease = first["leaseId"].as_str().unwrap(),
    );
    let reply = broker
        .client
        .send(
            hyper::Method::POST,
            "/streams/v1/cycle",
            bytes::Bytes::from(body),
        )
        .await;
    assert_eq!(reply.status, 200);
    let done = reply.json();
    assert_eq!(done["success"], true, "{done}");
    assert_eq!(
        done["ack_result"],
        json!({"success": true, "count": 0, "lease_released": true, "dlq": true})
    );
    assert_ne!(done["push_results"][0]["message_id"], json!(given_id));
    assert_eq!(done["push_results"][0]["trace_id"], json!(trace));
    let state = broker
        .client
        .post_json(
            "/streams/v1/state/get",
            &json!({"query_id": id2, "partition_id": first["partitionId"], "keys": ["bare"]}),
        )
        .await
        .json();
    assert_eq!(state["rows"][0]["value"], json!({}));
    let raw = broker
        .client
        .get("/api/v1/pop/queue/sink2?batch=10&wait=false")
        .await;
    assert_eq!(raw.status, 200);
    let text = String::from_utf8_lossy(&raw.body).into_owned();
    assert!(
        text.contains(r#"{"b": 1, "a": 2.50}"#),
        "the payload as the client sent it: {text}"
    );
    assert!(text.contains(&trace), "{text}");
    let dead = select_i64(
        &broker.sql().await,
        "SELECT count(*) FROM queen.log_dlq WHERE error = 'bad input'",
    )
    .await;
    assert_eq!(dead, 1, "the dlq ack filed the message with its error");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_that_fails_half_way_leaves_state_sink_and_cursor_as_they_were() {
    let broker = TestBroker::start().await;
    let (id, popped) = leased_batch(&broker, "fail", "src-f", 2).await;
    let last = popped["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let partition_id = last["partitionId"].as_str().unwrap().to_owned();
    let sql = broker.sql().await;
    let sink_rows = "SELECT count(*) FROM queen.log_segments s JOIN queen.log_partitions p \
                       ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id \
                      WHERE q.name = 'sink'";
    // State and sink writes come first in the transaction; the ack, with a
    // lease that is not the batch's, fails last.
    let failed = cycle(
        &broker,
        json!({
            "query_id": id, "partition_id": partition_id, "consumer_group": format!("streams.{id}"),
            "state_ops": [{"type": "upsert", "key": "k", "value": 1}],
            "push_items": [{"queue": "sink", "payload": 1}],
            "ack": {"transactionId": last["transactionId"],
                    "leaseId": uuid::Uuid::now_v7().to_string(), "status": "completed"}
        }),
    )
    .await;
    assert_eq!(failed["success"], false, "{failed}");
    assert!(
        failed["error"].as_str().unwrap().starts_with("ack failed"),
        "{failed}"
    );
    assert_eq!(
        select_i64(&sql, "SELECT count(*) FROM queen_streams.state").await,
        0
    );
    assert_eq!(select_i64(&sql, sink_rows).await, 0);
    assert_eq!(committed(&broker, "src-f", &id).await, -1);
    // With the batch's own lease the same cycle commits.
    let mut good = json!({
        "query_id": id, "partition_id": partition_id, "consumer_group": format!("streams.{id}"),
        "state_ops": [{"type": "upsert", "key": "k", "value": 1}],
        "push_items": [{"queue": "sink", "payload": 1}],
        "ack": {"transactionId": last["transactionId"], "leaseId": last["leaseId"],
                "status": "completed"}
    });
    assert_eq!(cycle(&broker, good.clone()).await["success"], true);
    assert_eq!(committed(&broker, "src-f", &id).await, 1);
    // An unknown query: refused, nothing written.
    good["query_id"] = json!(uuid::Uuid::now_v7().to_string());
    let unknown = cycle(&broker, good).await;
    assert_eq!(
        (unknown["success"].clone(), unknown["error"].clone()),
        (json!(false), json!("query not found"))
    );
    assert_eq!(select_i64(&sql, sink_rows).await, 1);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_ack_keeps_or_gives_back_the_lease_and_bad_cycles_are_400() {
    let broker = TestBroker::start().await;
    let (id, popped) = leased_batch(&broker, "gate", "src-g", 3).await;
    let first = popped["messages"][0].clone();
    let partition_id = first["partitionId"].as_str().unwrap().to_owned();
    let group = format!("streams.{id}");
    let kept = cycle(
        &broker,
        json!({"query_id": id, "partition_id": partition_id, "consumer_group": group,
               "ack": {"transactionId": first["transactionId"], "leaseId": first["leaseId"],
                       "status": "completed", "count": 1},
               "release_lease": false}),
    )
    .await;
    assert_eq!(kept["ack_result"]["lease_released"], false, "{kept}");
    let path = format!("/api/v1/pop/queue/src-g?consumerGroup={group}&batch=10&wait=false");
    assert!(
        pop(&broker, &path).await.is_none(),
        "the lease is still held"
    );
    let second = popped["messages"][1].clone();
    let released = cycle(
        &broker,
        json!({"query_id": id, "partition_id": partition_id, "consumer_group": group,
               "ack": {"transactionId": second["transactionId"], "leaseId": second["leaseId"],
                       "status": "completed"}}),
    )
    .await;
    assert_eq!(released["ack_result"]["lease_released"], true, "{released}");
    let rest = pop(&broker, &path).await.expect("the rest of the batch");
    assert_eq!(crate::support::data(&rest), [json!({"n": 2})]);

    for (body, error) in [
        (
            json!({"partition_id": partition_id}),
            "query_id is required",
        ),
        (
            json!({"query_id": id, "partition_id": partition_id, "state_ops": [{"type": "put", "key": "k"}]}),
            "state_ops[0].type must be upsert or delete",
        ),
        (
            json!({"query_id": id, "partition_id": partition_id, "push_items": [{"payload": 1}]}),
            "push_items[0].queue is required",
        ),
        (
            json!({"query_id": id, "partition_id": partition_id, "ack": {"status": "completed"}}),
            "ack.transactionId is required",
        ),
    ] {
        let reply = broker.client.post_json("/streams/v1/cycle", &body).await;
        assert_eq!(reply.status, 400, "{body}");
        assert_eq!(reply.json()["error"], error, "{body}");
    }

    // Every other field of the contract is checked the same way, and a
    // refused body writes nothing: each of these carries a state op and a
    // sink item that would otherwise be written.
    let third = popped["messages"][2].clone();
    let ack = |extra: Value| {
        let mut ack = json!({"transactionId": third["transactionId"], "leaseId": third["leaseId"]});
        for (key, value) in extra.as_object().unwrap() {
            ack[key] = value.clone();
        }
        ack
    };
    let with = |field: &str, value: Value| {
        let mut body = json!({"query_id": id, "partition_id": partition_id, "consumer_group": group,
                              "state_ops": [{"type": "upsert", "key": "refused", "value": 1}],
                              "push_items": [{"queue": "sink", "payload": {"refused": true}}],
                              "ack": ack(json!({}))});
        body[field] = value;
        body
    };
    for (body, error) in [
        (
            with("ack", ack(json!({"status": "retry"}))),
            "ack.status must be completed, success, failed or dlq",
        ),
        (
            with("ack", ack(json!({"status": "done"}))),
            "ack.status must be completed, success, failed or dlq",
        ),
        (
            with("ack", ack(json!({"status": 1}))),
            "ack.status must be completed, success, failed or dlq",
        ),
        (
            with("ack", ack(json!({"count": -1}))),
            "ack.count must be a non-negative integer",
        ),
        (
            with("ack", ack(json!({"count": "3"}))),
            "ack.count must be a non-negative integer",
        ),
        (
            with("ack", ack(json!({"count": 1.5}))),
            "ack.count must be a non-negative integer",
        ),
        (
            with("ack", ack(json!({"error": 5}))),
            "ack.error must be a string",
        ),
        (
            with("ack", ack(json!({"leaseId": 5}))),
            "ack.leaseId must be a UUID",
        ),
        (
            with("ack", ack(json!({"leaseId": "nope"}))),
            "ack.leaseId must be a UUID",
        ),
        (with("ack", json!([1])), "ack must be an object"),
        (
            with("push_items", json!({"queue": "sink"})),
            "push_items must be an array",
        ),
        (
            with("push_items", json!([{"queue": "sink", "traceId": "nope"}])),
            "push_items[0].traceId must be a UUID",
        ),
        (
            with("push_items", json!([{"queue": "sink", "transactionId": 5}])),
            "push_items[0].transactionId must be a string",
        ),
        (
            with("push_items", json!([{"queue": "sink", "partition": 5}])),
            "push_items[0].partition must be a string",
        ),
        (
            with("push_items", json!([7])),
            "push_items[0] must be an object",
        ),
        (
            with("state_ops", json!([{"type": "upsert", "key": ""}])),
            "state_ops[0].key must be a non-empty string of at most 1024 bytes",
        ),
        (
            with("state_ops", json!({"type": "upsert"})),
            "state_ops must be an array",
        ),
        (
            with("release_lease", json!("sometimes")),
            "release_lease must be a boolean",
        ),
        (
            with("consumer_group", json!(5)),
            "consumer_group must be a string",
        ),
        (
            with("partition_id", json!("nope")),
            "partition_id must be a UUID",
        ),
        (json!([1, 2]), "request body must be a JSON object"),
    ] {
        let reply = broker.client.post_json("/streams/v1/cycle", &body).await;
        assert_eq!(reply.status, 400, "{body}");
        assert_eq!(reply.json()["error"], error, "{body}");
    }
    let sql = broker.sql().await;
    assert_eq!(
        select_i64(
            &sql,
            "SELECT count(*) FROM queen_streams.state WHERE key = 'refused'"
        )
        .await,
        0,
        "a refused cycle wrote no state"
    );
    assert_eq!(
        select_i64(
            &sql,
            "SELECT count(*) FROM queen.log_segments s JOIN queen.log_partitions p \
               ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id \
              WHERE q.name = 'sink'"
        )
        .await,
        0,
        "a refused cycle pushed nothing"
    );
    broker.stop().await;
}

/// Thousands of state ops and sink items in one cycle: written by one
/// statement per kind, and all there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_with_thousands_of_ops_and_items_commits_them_all() {
    let broker = TestBroker::start().await;
    let (id, popped) = leased_batch(&broker, "big", "src-b", 1).await;
    let message = popped["messages"][0].clone();
    let ops: Vec<Value> = (0..5000)
        .map(|i| json!({"type": "upsert", "key": format!("k{i}"), "value": {"i": i}}))
        .collect();
    let items: Vec<Value> = (0..2000)
        .map(|i| json!({"queue": "sink-b", "partition": format!("p{}", i % 7), "payload": i}))
        .collect();
    let done = cycle(
        &broker,
        json!({"query_id": id, "partition_id": message["partitionId"],
               "consumer_group": format!("streams.{id}"),
               "state_ops": ops, "push_items": items,
               "ack": {"transactionId": message["transactionId"], "leaseId": message["leaseId"]}}),
    )
    .await;
    assert_eq!(
        done["success"],
        true,
        "{}",
        &done.to_string()[..200.min(done.to_string().len())]
    );
    assert_eq!(done["state_ops_applied"], 5000);
    let sql = broker.sql().await;
    assert_eq!(
        select_i64(&sql, "SELECT count(*) FROM queen_streams.state").await,
        5000
    );
    assert_eq!(crate::support::stored(&broker, "sink-b").await, 2000);
    assert_eq!(
        select_i64(
            &sql,
            "SELECT count(*) FROM queen.log_segments s JOIN queen.log_partitions p \
               ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id \
              WHERE q.name = 'sink-b'"
        )
        .await,
        7,
        "one segment per sink partition"
    );
    broker.stop().await;
}

/// A cycle's sink push wakes a consumer parked on the sink queue at once,
/// like any push: parked long enough for its re-poll backoff to reach its
/// 1 s ceiling, it must answer well inside that interval after the commit
/// (without the wake it would answer at its next re-poll, up to 1 s later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_wakes_a_consumer_parked_on_the_sink() {
    let broker = TestBroker::start().await;
    let (_, created) = register(
        &broker,
        json!({"name": "wake", "source_queue": "src-w",
                                                "sink_queue": "sink-w", "config_hash": "h"}),
    )
    .await;
    let id = created["query_id"].as_str().unwrap().to_owned();
    push(&broker, "sink-w", "p", &[json!("first")]).await;
    let first = pop(&broker, "/api/v1/pop/queue/sink-w?autoAck=true").await;
    assert!(first.is_some());
    let client = broker.client.clone();
    let parked = tokio::spawn(async move {
        let reply = client
            .get("/api/v1/pop/queue/sink-w?autoAck=true&wait=true&timeout=20000")
            .await;
        (reply.status.as_u16(), std::time::Instant::now())
    });
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let done = cycle(
        &broker,
        json!({"query_id": id, "partition_id": uuid::Uuid::now_v7().to_string(),
               "push_items": [{"queue": "sink-w", "partition": "p", "payload": "woken"}]}),
    )
    .await;
    let committed = std::time::Instant::now();
    assert_eq!(done["success"], true, "{done}");
    let (status, answered) = parked.await.unwrap();
    assert_eq!(status, 200);
    let after = answered.saturating_duration_since(committed);
    assert!(
        after < std::time::Duration::from_millis(300),
        "the parked consumer answered {after:?} after the commit"
    );
    broker.stop().await;
}
