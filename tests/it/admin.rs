//! The admin views (wire-api.md §5, dashboard-routes.md) against a known
//! history: the numbers each view shows, the fields the dashboard reads, and
//! 400s for malformed filters.

use queen_engine::EngineConfig;
use queen_tests::TestBroker;
use serde_json::{json, Value};

use crate::support::{ack_all, configure, expect_status, messages, pop, push};

/// The history every test here starts from:
/// - `orders` (namespace `shop`, task `billing`, retryLimit 0, priority 3):
///   p1 holds 5
///   messages, 3 acked and 1 leased now; p2 holds 2, the first dead-lettered;
///   its Default partition is empty;
/// - `other`: one message, never consumed.
async fn history() -> TestBroker {
    let broker = TestBroker::start_with(EngineConfig {
        stats_interval: None,
        hostname: "admin-host".to_owned(),
        port: 7002,
        ..EngineConfig::default()
    })
    .await;
    let reply = broker
        .client
        .post_json(
            "/api/v1/configure",
            &json!({"queue": "orders", "namespace": "shop", "task": "billing",
                    "options": {"retryLimit": 0, "leaseTime": 120, "priority": 3}}),
        )
        .await;
    expect_status(&reply, 200);
    push(
        &broker,
        "orders",
        "p1",
        &[json!(1), json!(2), json!(3), json!(4), json!(5)],
    )
    .await;
    push(&broker, "orders", "p2", &[json!(6), json!(7)]).await;
    push(&broker, "other", "p", &[json!(8)]).await;
    let first = pop(&broker, "/api/v1/pop/queue/orders/partition/p1?batch=3")
        .await
        .unwrap();
    ack_all(&broker, &first, "completed", None).await;
    pop(&broker, "/api/v1/pop/queue/orders/partition/p1?batch=1")
        .await
        .unwrap();
    let failing = pop(&broker, "/api/v1/pop/queue/orders/partition/p2?batch=1")
        .await
        .unwrap();
    let failed = messages(&failing)[0].clone();
    let reply = broker
        .client
        .post_json(
            "/api/v1/ack",
            &json!({"transactionId": failed["transactionId"], "partitionId": failed["partitionId"],
                    "leaseId": failed["leaseId"], "status": "failed", "error": "boom"}),
        )
        .await;
    expect_status(&reply, 200);
    broker
}

async fn get(broker: &TestBroker, path: &str) -> Value {
    let reply = broker.client.get(path).await;
    expect_status(&reply, 200);
    reply.json()
}

fn counts(messages: &Value) -> [i64; 6] {
    [
        "total",
        "pending",
        "processing",
        "completed",
        "failed",
        "deadLetter",
    ]
    .map(|key| {
        messages[key]
            .as_i64()
            .unwrap_or_else(|| panic!("{key} in {messages}"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resource_views_count_from_the_cursor_model() {
    let broker = history().await;

    let queues = get(&broker, "/api/v1/resources/queues").await;
    let list = queues["queues"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    let orders = &list[0];
    assert_eq!(orders["name"], "orders");
    assert_eq!(orders["namespace"], "shop");
    assert_eq!(orders["task"], "billing");
    assert_eq!(orders["partitions"], 3);
    assert_eq!(counts(&orders["messages"]), [7, 2, 1, 4, 1, 1]);
    assert_eq!(counts(&list[1]["messages"]), [1, 1, 0, 0, 0, 0]);

    let queue = get(&broker, "/api/v1/resources/queues/orders").await;
    assert_eq!(queue["name"], "orders");
    assert_eq!(queue["config"]["leaseTime"], 120);
    assert_eq!(queue["config"]["retryLimit"], 0);
    let partitions = queue["partitions"].as_array().unwrap();
    let p1 = partitions.iter().find(|p| p["name"] == "p1").unwrap();
    assert_eq!(counts(&p1["stats"]), [5, 1, 1, 3, 0, 0]);
    let p2 = partitions.iter().find(|p| p["name"] == "p2").unwrap();
    assert_eq!(counts(&p2["messages"]), [2, 1, 0, 1, 1, 1]);
    assert_eq!(counts(&queue["totals"]), [7, 2, 1, 4, 1, 1]);

    let missing = broker.client.get("/api/v1/resources/queues/nope").await;
    expect_status(&missing, 404);
    assert_eq!(missing.json(), json!({"error": "Queue not found"}));

    let namespaces = get(&broker, "/api/v1/resources/namespaces").await;
    assert_eq!(namespaces["namespaces"].as_array().unwrap().len(), 1);
    assert_eq!(namespaces["namespaces"][0]["namespace"], "shop");
    assert_eq!(namespaces["namespaces"][0]["queues"], 1);
    assert_eq!(namespaces["namespaces"][0]["partitions"], 3);
    assert_eq!(namespaces["namespaces"][0]["messages"]["total"], 7);
    let tasks = get(&broker, "/api/v1/resources/tasks").await;
    assert_eq!(tasks["tasks"][0]["task"], "billing");
    assert_eq!(tasks["tasks"][0]["messages"]["pending"], 2);

    let overview = get(&broker, "/api/v1/resources/overview").await;
    assert_eq!(overview["queues"], 2);
    assert_eq!(overview["partitions"], 4);
    assert_eq!(overview["namespaces"], 1);
    assert_eq!(overview["tasks"], 1);
    assert_eq!(counts(&overview["messages"]), [8, 3, 1, 4, 1, 1]);
    assert!(overview["lag"]["time"]["max"].is_number());
    assert!(overview["throughput"]["ingestedPerSecond"].is_number());
    assert_eq!(overview["statsAge"], -1, "no statistics row yet");

    let detail = get(&broker, "/api/v1/status/queues/orders").await;
    assert_eq!(detail["queue"]["name"], "orders");
    assert_eq!(detail["queue"]["namespace"], "shop");
    for key in [
        "leaseTime",
        "retryLimit",
        "retryDelay",
        "ttl",
        "maxQueueSize",
        "deadLetterQueue",
    ] {
        assert!(!detail["queue"]["config"][key].is_null(), "config.{key}");
    }
    assert_eq!(counts(&detail["totals"]["messages"]), [7, 2, 1, 4, 1, 1]);
    let p1 = detail["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "p1")
        .unwrap()
        .clone();
    assert_eq!(p1["cursor"]["totalConsumed"], 3);
    expect_status(&broker.client.get("/api/v1/status/queues/nope").await, 404);

    let status_queues = get(&broker, "/api/v1/status/queues?namespace=shop&limit=500").await;
    assert_eq!(status_queues["queues"].as_array().unwrap().len(), 1);
    assert_eq!(status_queues["queues"][0]["messages"]["completed"], 4);
    assert_eq!(
        status_queues["pagination"],
        json!({"limit": 500, "offset": 0})
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_and_analytics_views_read_the_statistics_rows() {
    let broker = history().await;
    let refreshed = broker
        .client
        .post_json("/api/v1/stats/refresh", &json!({}))
        .await;
    expect_status(&refreshed, 200);
    assert_eq!(refreshed.json()["success"], true);

    let status = get(&broker, "/api/v1/status").await;
    assert_eq!(status["timeRange"]["bucketMinutes"], 1);
    let newest = &status["throughput"][0];
    assert_eq!(newest["ingested"], 8);
    assert_eq!(newest["processed"], 3);
    assert_eq!(newest["dlqCount"], 1);
    assert_eq!(newest["ackFailed"], 1);
    for key in [
        "timestamp",
        "ingestedPerSecond",
        "popPerSecond",
        "processedPerSecond",
        "avgLagMs",
        "maxLagMs",
        "dbErrors",
        "avgEventLoopLagMs",
        "maxEventLoopLagMs",
        "queenCpuUserPct",
        "queenCpuSysPct",
        "dbPoolActive",
        "dbPoolIdle",
        "dbPoolSize",
    ] {
        assert!(!newest[key].is_null(), "throughput[0].{key} in {newest}");
    }
    assert_eq!(counts(&status["messages"]), [8, 3, 1, 4, 1, 1]);
    assert!(
        status["messages"]["batchEfficiency"]["push"]
            .as_f64()
            .unwrap()
            > 1.0
    );
    assert_eq!(status["leases"]["active"], 1);
    assert_eq!(status["leases"]["partitionsWithLeases"], 1);
    assert_eq!(status["leases"]["totalBatchSize"], 1);
    assert_eq!(status["leases"]["totalAcked"], 0);
    assert_eq!(status["deadLetterQueue"]["totalMessages"], 1);
    assert_eq!(status["deadLetterQueue"]["affectedPartitions"], 1);
    assert_eq!(
        status["deadLetterQueue"]["topErrors"],
        json!([{"error": "boom", "count": 1}])
    );
    assert_eq!(status["workers"].as_array().unwrap().len(), 1);
    assert!(status["statsAge"].as_i64().unwrap() >= 0);
    let filtered = get(&broker, "/api/v1/status?queue=other").await;
    assert_eq!(filtered["throughput"][0]["ingested"], 1);
    assert_eq!(filtered["messages"]["total"], 1);

    let ops = get(&broker, "/api/v1/analytics/queue-ops").await;
    assert_eq!(ops["bucketMinutes"], 1);
    let orders: Vec<&Value> = ops["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["queueName"] == "orders")
        .collect();
    assert_eq!(orders.len(), 1);
    assert_eq!(orders[0]["pushMessages"], 7);
    assert_eq!(orders[0]["popMessages"], 5);
    assert_eq!(orders[0]["popEmpty"], 0);
    assert_eq!(orders[0]["ackFailed"], 1);
    assert_eq!(orders[0]["partitionCount"], 3);
    assert!(ops["queues"].as_array().unwrap().contains(&json!("orders")));

    let workers = get(&broker, "/api/v1/analytics/worker-metrics").await;
    assert_eq!(workers["pointCount"], 1);
    let point = &workers["timeSeries"][0];
    assert!(
        (point["pushPerSecond"].as_f64().unwrap() - 8.0 / 60.0).abs() < 0.01,
        "{point}"
    );
    assert_eq!(point["dlqCount"], 1);
    assert_eq!(workers["workers"][0]["hostname"], "admin-host");

    let system = get(&broker, "/api/v1/analytics/system-metrics").await;
    assert_eq!(system["replicaCount"], 1);
    assert_eq!(system["replicas"][0]["hostname"], "admin-host");
    assert_eq!(system["replicas"][0]["port"], 7002);
    let metrics = &system["replicas"][0]["timeSeries"][0]["metrics"];
    for path in [
        ["cpu", "user_us"],
        ["cpu", "system_us"],
        ["memory", "rss_bytes"],
        ["database", "pool_size"],
    ] {
        assert!(
            metrics[path[0]][path[1]]["avg"].is_number(),
            "{path:?} in {metrics}"
        );
    }
    assert!(metrics["memory"]["rss_bytes"]["last"].as_f64().unwrap() > 0.0);
    assert!(metrics["threadpool"]["db"]["queue_size"]["max"].is_number());
    assert!(
        metrics["threadpool"].get("system").is_none(),
        "no system thread pool: left out, not 0"
    );

    let lag = get(&broker, "/api/v1/analytics/queue-lag").await;
    assert!(lag
        .as_array()
        .unwrap()
        .iter()
        .any(|row| row["queueName"] == "orders" && row["avgLagMs"].is_number()));
    let parked = get(&broker, "/api/v1/analytics/queue-parked-replicas").await;
    assert!(parked["series"].is_array());
    let retention = get(&broker, "/api/v1/analytics/retention").await;
    assert_eq!(retention["totals"]["retentionMsgs"], 0);
    assert_eq!(retention["series"].as_array().unwrap().len(), 1);
    let postgres = get(&broker, "/api/v1/analytics/postgres-stats").await;
    assert_eq!(postgres["database"]["name"], broker.db.name());
    assert!(postgres["tableSizes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["table"] == "queen.log_segments"));
    assert!(postgres["cacheSummary"]["tables"].is_object());
    assert!(
        postgres.get("bufferUsage").is_none(),
        "without pg_buffercache there is no bufferUsage"
    );
    // With the extension (where the server has it), what each relation holds.
    let sql = broker.sql().await;
    let available = sql
        .query_opt(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'pg_buffercache'",
            &[],
        )
        .await
        .unwrap()
        .is_some();
    if available {
        sql.execute("CREATE EXTENSION pg_buffercache", &[])
            .await
            .unwrap();
        let postgres = get(&broker, "/api/v1/analytics/postgres-stats").await;
        let usage = postgres["bufferUsage"].as_array().unwrap();
        assert!(
            usage.iter().any(|row| row["object"] == "queen.log_segments"
                && row["bufferedBytes"].as_i64().unwrap() > 0
                && row["percentOfCache"].is_number()),
            "{usage:?}"
        );
    }

    let analytics = get(&broker, "/api/v1/status/analytics?interval=minute").await;
    assert_eq!(analytics["interval"], "minute");
    assert_eq!(analytics["dataPoints"][0]["pushed"], 8);

    // Malformed filters are 400s naming the problem.
    for (path, problem) in [
        (
            "/api/v1/status?from=yesterday",
            "from must be an ISO-8601 timestamp",
        ),
        (
            "/api/v1/analytics/queue-ops?to=12",
            "to must be an ISO-8601 timestamp",
        ),
        (
            "/api/v1/status/analytics?interval=week",
            "interval must be minute, hour or day",
        ),
        (
            "/api/v1/status?from=2030-01-01T00:00:00Z&to=2029-01-01T00:00:00Z",
            "from must not be after to",
        ),
    ] {
        let reply = broker.client.get(path).await;
        expect_status(&reply, 400);
        assert_eq!(reply.json()["error"], problem, "{path}");
    }
    broker.stop().await;
}

/// `failed` (dead letters and heads waiting for a retry), the live leases'
/// batch and acked counts, the ack batch efficiency and the delivery lag of
/// worker-metrics, each from a history that fixes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_leases_ack_batching_and_delivery_lag_are_computed() {
    let broker = TestBroker::start_with(EngineConfig {
        stats_interval: None,
        ..EngineConfig::default()
    })
    .await;
    configure(&broker, "r", json!({"retryLimit": 2, "leaseTime": 60})).await;
    push(&broker, "r", "p", &[json!(1), json!(2), json!(3)]).await;
    // A minute that delivered nothing has no delivery lag: null, not 0.
    broker.engine.observe().write_stats().await.unwrap();
    let idle = get(&broker, "/api/v1/analytics/worker-metrics").await;
    let point = &idle["timeSeries"][0];
    assert!(point.get("avgLagMs").is_some_and(Value::is_null), "{point}");
    assert!(point.get("maxLagMs").is_some_and(Value::is_null), "{point}");
    let ack = |m: &Value, status: &str| {
        let client = broker.client.clone();
        let body = json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                          "leaseId": m["leaseId"], "status": status, "error": "boom"});
        async move {
            let reply = client.post_json("/api/v1/ack", &body).await;
            expect_status(&reply, 200);
            assert_eq!(reply.json()[0]["success"], true, "{body}");
        }
    };
    let partition = |broker: &TestBroker| {
        let client = broker.client.clone();
        async move {
            let queue = client.get("/api/v1/resources/queues/r").await.json();
            queue["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == "p")
                .unwrap()["messages"]
                .clone()
        }
    };
    let leases = |broker: &TestBroker| {
        let client = broker.client.clone();
        async move { client.get("/api/v1/status?queue=r").await.json()["leases"].clone() }
    };
    let path = "/api/v1/pop/queue/r?batch=3";

    // A batch of 3, the first acked: the lease stays, 1 of 3 acked.
    let batch = messages(&pop(&broker, path).await.unwrap());
    assert_eq!(batch.len(), 3);
    ack(&batch[0], "completed").await;
    let live = leases(&broker).await;
    assert_eq!(
        (
            live["active"].clone(),
            live["totalBatchSize"].clone(),
            live["totalAcked"].clone()
        ),
        (json!(1), json!(3), json!(1)),
        "{live}"
    );
    assert_eq!(counts(&partition(&broker).await), [3, 0, 2, 1, 0, 0]);

    // The second fails with retries left: it waits for its retry.
    ack(&batch[1], "failed").await;
    assert_eq!(counts(&partition(&broker).await), [3, 2, 0, 1, 1, 0]);
    assert_eq!(leases(&broker).await["active"], 0);
    let again = messages(&pop(&broker, path).await.unwrap());
    ack(&again[0], "failed").await;
    assert_eq!(counts(&partition(&broker).await), [3, 2, 0, 1, 1, 0]);
    // Past the retry limit: a dead letter, still counted failed.
    let last = messages(&pop(&broker, path).await.unwrap());
    ack(&last[0], "failed").await;
    assert_eq!(counts(&partition(&broker).await)[4..], [1, 1]);
    let status = get(&broker, "/api/v1/status?queue=r").await;
    assert_eq!(status["messages"]["failed"], 1);
    assert_eq!(status["messages"]["deadLetter"], 1);
    // The dead letter moved the cursor past it and kept the lease for the
    // rest of the batch.
    ack(&last[1], "completed").await;
    assert_eq!(counts(&partition(&broker).await), [3, 0, 0, 3, 1, 1]);
    let overview = get(&broker, "/api/v1/resources/overview").await;
    assert_eq!(overview["messages"]["failed"], 1);

    // Ack batching: one call of 4 items on `b`.
    push(&broker, "b", "p", &[json!(1), json!(2), json!(3), json!(4)]).await;
    let four = pop(&broker, "/api/v1/pop/queue/b?batch=4").await.unwrap();
    ack_all(&broker, &four, "completed", None).await;

    // Delivery lag: a message that waited 1.5 s before its pop.
    push(&broker, "slow", "p", &[json!("late")]).await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert!(pop(&broker, "/api/v1/pop/queue/slow?autoAck=true")
        .await
        .is_some());

    broker.engine.observe().write_stats().await.unwrap();
    let b = get(&broker, "/api/v1/status?queue=b").await;
    assert_eq!(b["messages"]["batchEfficiency"]["ack"], 4.0);
    let single = get(&broker, "/api/v1/status?queue=r").await;
    assert_eq!(single["messages"]["batchEfficiency"]["ack"], 1.0);
    let workers = get(&broker, "/api/v1/analytics/worker-metrics").await;
    let point = &workers["timeSeries"][0];
    let (avg, max) = (
        point["avgLagMs"].as_f64().unwrap(),
        point["maxLagMs"].as_f64().unwrap(),
    );
    assert!((1500.0..60_000.0).contains(&max), "{point}");
    assert!(avg > 0.0 && avg <= max, "{point}");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_views_find_traces_by_message_and_by_name() {
    let broker = history().await;
    let popped = pop(&broker, "/api/v1/pop/queue/other").await.unwrap();
    let message = messages(&popped)[0].clone();
    for (event, names) in [
        ("info", json!(["checkout", "user-7"])),
        ("step", json!("checkout")),
    ] {
        let reply = broker
            .client
            .post_json(
                "/api/v1/traces",
                &json!({"transactionId": message["transactionId"], "partitionId": message["partitionId"],
                        "eventType": event, "traceNames": names, "data": {"text": event}}),
            )
            .await;
        expect_status(&reply, 200);
    }
    let path = format!(
        "/api/v1/traces/{}/{}",
        message["partitionId"].as_str().unwrap(),
        message["transactionId"].as_str().unwrap()
    );
    let traces = get(&broker, &path).await;
    let list = traces["traces"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["event_type"], "info");
    assert_eq!(list[0]["data"]["text"], "info");
    assert_eq!(list[0]["trace_names"], json!(["checkout", "user-7"]));
    assert!(list[0]["created_at"].as_str().unwrap().ends_with('Z'));

    let by_name = get(&broker, "/api/v1/traces/by-name/checkout?limit=1").await;
    assert_eq!(by_name["total"], 2);
    assert_eq!(by_name["traces"].as_array().unwrap().len(), 1);
    assert_eq!(by_name["traces"][0]["queue_name"], "other");
    assert_eq!(by_name["traces"][0]["partition_name"], "p");
    assert_eq!(by_name["traces"][0]["event_type"], "step", "newest first");
    // The traced message's payload, decoded from its segment (pushed 8).
    assert_eq!(by_name["traces"][0]["message_payload"], 8);
    assert!(
        by_name["traces"][0].get("worker_id").is_none(),
        "a trace records no worker: left out, not null"
    );
    let both = get(&broker, "/api/v1/traces/by-name/checkout").await;
    assert!(both["traces"]
        .as_array()
        .unwrap()
        .iter()
        .all(|trace| trace["message_payload"] == 8));
    assert!(list[0].get("worker_id").is_none());
    let none = get(&broker, "/api/v1/traces/by-name/nobody").await;
    assert_eq!(none["total"], 0);

    let names = get(&broker, "/api/v1/traces/names").await;
    assert_eq!(names["total"], 2);
    let checkout = names["trace_names"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["trace_name"] == "checkout")
        .unwrap()
        .clone();
    assert_eq!(checkout["trace_count"], 2);
    assert_eq!(checkout["message_count"], 1);

    let bad = broker.client.get("/api/v1/traces/not-a-uuid/t").await;
    expect_status(&bad, 400);
    assert_eq!(bad.json()["error"], "partitionId must be a UUID");
    broker.stop().await;
}

/// The message listing's entries of `path`.
async fn listing(broker: &TestBroker, path: &str) -> Vec<Value> {
    get(broker, path).await["messages"]
        .as_array()
        .unwrap()
        .clone()
}

fn statuses(list: &[Value]) -> Vec<(String, i64, String)> {
    let mut out: Vec<(String, i64, String)> = list
        .iter()
        .map(|m| {
            (
                m["partition"].as_str().unwrap().to_owned(),
                m["offset"].as_i64().unwrap(),
                m["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_message_views_show_status_and_payload_and_move_a_head_to_the_dlq() {
    let broker = history().await;
    let page = get(&broker, "/api/v1/messages?queue=orders").await;
    let list = page["messages"].as_array().unwrap();
    assert_eq!(list.len(), 7);
    assert_eq!(
        page["mode"],
        json!({"hasQueueMode": true, "busGroupsCount": 0, "type": "queue"})
    );
    assert_eq!(page["truncated"], false);
    let p = |s: &str| s.to_owned();
    assert_eq!(
        statuses(list),
        vec![
            (p("p1"), 0, p("completed")),
            (p("p1"), 1, p("completed")),
            (p("p1"), 2, p("completed")),
            (p("p1"), 3, p("processing")),
            (p("p1"), 4, p("pending")),
            (p("p2"), 0, p("dead_letter")),
            (p("p2"), 1, p("pending")),
        ]
    );
    let first = &list[0];
    for key in [
        "id",
        "transactionId",
        "partitionId",
        "queue",
        "partition",
        "createdAt",
    ] {
        assert!(first[key].is_string(), "{key} in {first}");
    }
    assert_eq!(
        first["busStatus"],
        json!({"consumedBy": 0, "totalGroups": 0})
    );
    assert!(
        list.iter().all(|m| m["queuePriority"] == 3),
        "the queue's priority on every entry"
    );
    let everything = listing(&broker, "/api/v1/messages").await;
    let other = everything.iter().find(|m| m["queue"] == "other").unwrap();
    assert_eq!(other["queuePriority"], 0);
    let created: Vec<&str> = list
        .iter()
        .map(|m| m["createdAt"].as_str().unwrap())
        .collect();
    let mut sorted = created.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(created, sorted, "newest first");

    assert_eq!(
        listing(&broker, "/api/v1/messages?queue=orders&status=pending")
            .await
            .len(),
        2
    );
    assert_eq!(
        listing(&broker, "/api/v1/messages?queue=orders&status=dead_letter")
            .await
            .len(),
        1
    );
    assert_eq!(
        listing(&broker, "/api/v1/messages?queue=orders&partition=p2")
            .await
            .len(),
        2
    );
    assert_eq!(listing(&broker, "/api/v1/messages?ns=shop").await.len(), 7);
    assert_eq!(listing(&broker, "/api/v1/messages").await.len(), 8);
    let paged = listing(&broker, "/api/v1/messages?queue=orders&limit=2&offset=1").await;
    assert_eq!(paged.len(), 2);
    assert_eq!(paged[0]["id"], list[1]["id"]);
    assert!(listing(
        &broker,
        "/api/v1/messages?from=2999-01-01T00:00:00Z&to=2999-01-02T00:00:00Z"
    )
    .await
    .is_empty());
    let bad = broker.client.get("/api/v1/messages?status=lost").await;
    expect_status(&bad, 400);

    let array = get(&broker, "/api/v1/status/queues/orders/messages?limit=3").await;
    assert_eq!(array.as_array().unwrap().len(), 3);
    assert_eq!(
        array[0]["queuePath"].as_str().unwrap().split('/').next(),
        Some("orders")
    );

    // Detail: the leased message of p1, with its payload and groups.
    let leased = list.iter().find(|m| m["status"] == "processing").unwrap();
    let path = format!(
        "/api/v1/messages/{}/{}",
        leased["partitionId"].as_str().unwrap(),
        leased["transactionId"].as_str().unwrap()
    );
    let detail = get(&broker, &path).await;
    assert_eq!(detail["payload"], 4);
    assert_eq!(detail["queuePriority"], 3);
    assert_eq!(detail["status"], "processing");
    assert_eq!(detail["isEncrypted"], false);
    assert_eq!(detail["queueConfig"]["leaseTime"], 120);
    assert_eq!(detail["retryCount"], 0);
    assert!(detail["leaseExpiresAt"].is_string());
    assert_eq!(detail["consumerGroups"][0]["name"], "__QUEUE_MODE__");
    assert_eq!(detail["consumerGroups"][0]["consumed"], false);
    assert_eq!(detail["consumerGroups"][0]["leased"], true);
    let dead = list.iter().find(|m| m["status"] == "dead_letter").unwrap();
    let dead_path = format!(
        "/api/v1/messages/{}/{}",
        dead["partitionId"].as_str().unwrap(),
        dead["transactionId"].as_str().unwrap()
    );
    let dead_detail = get(&broker, &dead_path).await;
    assert_eq!(dead_detail["errorMessage"], "boom");
    assert_eq!(dead_detail["payload"], 6);
    let missing = broker
        .client
        .get(&format!(
            "/api/v1/messages/{}/nope",
            leased["partitionId"].as_str().unwrap()
        ))
        .await;
    expect_status(&missing, 404);
    assert_eq!(missing.json(), json!({"error": "Message not found"}));

    // Moving to the DLQ: only a group's next message, and not while leased.
    let pending_p1 = list
        .iter()
        .find(|m| m["partition"] == "p1" && m["status"] == "pending")
        .unwrap();
    let to_dlq = |m: &Value| {
        format!(
            "/api/v1/messages/{}/{}/dlq",
            m["partitionId"].as_str().unwrap(),
            m["transactionId"].as_str().unwrap()
        )
    };
    let refused = broker
        .client
        .post_json(&to_dlq(pending_p1), &json!({}))
        .await;
    expect_status(&refused, 409);
    assert!(refused.json()["error"]
        .as_str()
        .unwrap()
        .contains("its next is offset 3"));
    let leased_refused = broker.client.post_json(&to_dlq(leased), &json!({})).await;
    expect_status(&leased_refused, 409);
    assert_eq!(
        leased_refused.json()["error"],
        "the message is leased by a consumer now"
    );
    let unknown_group = broker
        .client
        .post_json(&to_dlq(pending_p1), &json!({"consumerGroup": "g9"}))
        .await;
    expect_status(&unknown_group, 409);
    let pending_p2 = list
        .iter()
        .find(|m| m["partition"] == "p2" && m["status"] == "pending")
        .unwrap();
    let moved = broker
        .client
        .post_json(&to_dlq(pending_p2), &json!({"error": "bad data"}))
        .await;
    expect_status(&moved, 200);
    assert_eq!(moved.json()["success"], true);
    assert_eq!(
        listing(
            &broker,
            "/api/v1/messages?queue=orders&partition=p2&status=dead_letter"
        )
        .await
        .len(),
        2
    );
    assert!(
        pop(&broker, "/api/v1/pop/queue/orders/partition/p2")
            .await
            .is_none(),
        "the cursor moved past it"
    );
    let dlq = get(&broker, "/api/v1/dlq?queue=orders").await;
    assert_eq!(dlq["total"], 2);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_of_an_encrypted_queue_is_shown_decrypted() {
    let key: queen_engine::EncryptionKey =
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
            .parse()
            .unwrap();
    let broker = TestBroker::start_with(EngineConfig {
        encryption_key: Some(key),
        ..EngineConfig::default()
    })
    .await;
    let reply = broker
        .client
        .post_json(
            "/api/v1/configure",
            &json!({"queue": "secret", "options": {"encryptionEnabled": true}}),
        )
        .await;
    expect_status(&reply, 200);
    push(&broker, "secret", "p", &[json!({"card": "4111"})]).await;
    let list = listing(&broker, "/api/v1/messages?queue=secret").await;
    assert_eq!(list.len(), 1);
    let path = format!(
        "/api/v1/messages/{}/{}",
        list[0]["partitionId"].as_str().unwrap(),
        list[0]["transactionId"].as_str().unwrap()
    );
    let detail = get(&broker, &path).await;
    assert_eq!(detail["payload"], json!({"card": "4111"}));
    assert_eq!(detail["isEncrypted"], true);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_reads_a_bounded_number_of_segments_and_says_when_it_stopped() {
    let broker = TestBroker::start().await;
    let segments = queen_engine::MAX_PAGE_SEGMENTS as usize + 10;
    for i in 0..segments {
        // One request per message, one after the other: one segment each.
        push(&broker, "wide", "p", &[json!(i)]).await;
    }
    let page = get(&broker, "/api/v1/messages?queue=wide&limit=1000").await;
    assert_eq!(
        page["messages"].as_array().unwrap().len(),
        queen_engine::MAX_PAGE_SEGMENTS as usize
    );
    assert_eq!(page["truncated"], true);
    assert!(page["note"].as_str().unwrap().contains("narrow it"));
    assert_eq!(
        page["messages"][0]["offset"],
        segments as i64 - 1,
        "newest first"
    );
    let small = get(&broker, "/api/v1/messages?queue=wide&limit=10").await;
    assert_eq!(small["messages"].as_array().unwrap().len(), 10);
    assert_eq!(small["truncated"], false);
    broker.stop().await;
}

/// Every page-load call of the Queen dashboard (dashboard-routes.md) with
/// the fields its view reads, as JSON pointers (`/0` into arrays the view
/// reads a first row of).
const DASHBOARD: &[(&str, &[&str])] = &[
    ("/health", &["/status"]),
    (
        "/api/v1/resources/queues",
        &[
            "/queues/0/name",
            "/queues/0/partitions",
            "/queues/0/namespace",
            "/queues/0/task",
            "/queues/0/messages/total",
            "/queues/0/messages/pending",
            "/queues/0/messages/processing",
        ],
    ),
    (
        "/api/v1/consumer-groups",
        &[
            "/0/name",
            "/0/queueName",
            "/0/members",
            "/0/maxTimeLag",
            "/0/partitionsWithLag",
            "/0/state",
            "/0/topics",
        ],
    ),
    (
        "/api/v1/system/maintenance",
        &[
            "/maintenanceMode",
            "/popMaintenanceMode",
            "/bufferedMessages",
            "/bufferStats/failedCount",
            "/bufferStats/failedFiles/totalMB",
        ],
    ),
    (
        "/api/v1/resources/overview",
        &[
            "/messages/total",
            "/messages/pending",
            "/messages/completed",
            "/queues",
            "/lag/time/avg",
            "/lag/time/max",
            "/throughput/ingestedPerSecond",
            "/throughput/processedPerSecond",
        ],
    ),
    (
        "/api/v1/status",
        &[
            "/bucketMinutes",
            "/throughput/0/timestamp",
            "/throughput/0/ingested",
            "/throughput/0/processed",
            "/throughput/0/ingestedPerSecond",
            "/throughput/0/popPerSecond",
            "/throughput/0/processedPerSecond",
            "/throughput/0/avgLagMs",
            "/throughput/0/maxLagMs",
            "/throughput/0/dbErrors",
            "/throughput/0/ackFailed",
            "/throughput/0/dlqCount",
            "/throughput/0/avgEventLoopLagMs",
            "/throughput/0/maxEventLoopLagMs",
            "/throughput/0/queenCpuUserPct",
            "/throughput/0/queenCpuSysPct",
            "/throughput/0/dbPoolActive",
            "/throughput/0/dbPoolIdle",
            "/throughput/0/dbPoolSize",
            "/workers/0/avgEventLoopLagMs",
            "/workers/0/maxEventLoopLagMs",
            "/workers/0/freeSlots",
            "/workers/0/dbConnections",
            "/workers/0/jobQueueSize",
            "/messages/batchEfficiency/push",
            "/messages/batchEfficiency/pop",
            "/messages/batchEfficiency/ack",
            "/messages/failed",
            "/messages/deadLetter",
            "/leases/active",
            "/leases/partitionsWithLeases",
            "/leases/totalBatchSize",
            "/leases/totalAcked",
            "/deadLetterQueue/totalMessages",
            "/deadLetterQueue/affectedPartitions",
            "/deadLetterQueue/topErrors/0/error",
            "/deadLetterQueue/topErrors/0/count",
        ],
    ),
    (
        "/api/v1/analytics/retention",
        &[
            "/bucketMinutes",
            "/series/0/bucket",
            "/series/0/retentionMsgs",
            "/series/0/completedRetentionMsgs",
            "/series/0/evictionMsgs",
            "/totals/retentionMsgs",
            "/totals/completedRetentionMsgs",
            "/totals/evictionMsgs",
            "/totals/eventCount",
        ],
    ),
    (
        "/api/v1/analytics/queue-ops",
        &[
            "/bucketMinutes",
            "/queues/0",
            "/series/0/bucket",
            "/series/0/queueName",
            "/series/0/pushPerSecond",
            "/series/0/popPerSecond",
            "/series/0/ackPerSecond",
            "/series/0/emptyPerSecond",
            "/series/0/popMessages",
            "/series/0/popEmpty",
            "/series/0/pushMessages",
            "/series/0/transactions",
            "/series/0/parkedCount",
            "/series/0/partitionCount",
            "/series/0/partitionsCreated",
            "/series/0/partitionsDeleted",
            "/series/0/avgLagMs",
            "/series/0/maxLagMs",
            "/series/0/ackFailed",
        ],
    ),
    (
        "/api/v1/analytics/system-metrics",
        &[
            "/replicaCount",
            "/bucketMinutes",
            "/pointCount",
            "/replicas/0/hostname",
            "/replicas/0/port",
            "/replicas/0/timeSeries/0/timestamp",
            "/replicas/0/timeSeries/0/metrics/cpu/user_us/avg",
            "/replicas/0/timeSeries/0/metrics/cpu/system_us/max",
            "/replicas/0/timeSeries/0/metrics/memory/rss_bytes/min",
            "/replicas/0/timeSeries/0/metrics/database/pool_active/last",
            "/replicas/0/timeSeries/0/metrics/database/pool_idle/avg",
            "/replicas/0/timeSeries/0/metrics/database/pool_size/avg",
            "/replicas/0/timeSeries/0/metrics/threadpool/db/queue_size/avg",
        ],
    ),
    (
        "/api/v1/analytics/worker-metrics",
        &[
            "/bucketMinutes",
            "/pointCount",
            "/timeSeries/0/timestamp",
            "/timeSeries/0/pushPerSecond",
            "/timeSeries/0/popPerSecond",
            "/timeSeries/0/ackPerSecond",
            "/timeSeries/0/avgLagMs",
            "/timeSeries/0/maxLagMs",
            "/timeSeries/0/avgEventLoopLagMs",
            "/timeSeries/0/maxEventLoopLagMs",
            "/timeSeries/0/avgFreeSlots",
            "/timeSeries/0/dbConnections",
            "/timeSeries/0/avgJobQueueSize",
            "/timeSeries/0/maxJobQueueSize",
            "/timeSeries/0/dbErrors",
            "/timeSeries/0/ackFailed",
            "/timeSeries/0/dlqCount",
            "/workers/0/hostname",
            "/workers/0/workerId",
            "/workers/0/avgEventLoopLagMs",
            "/workers/0/maxEventLoopLagMs",
            "/workers/0/freeSlots",
            "/workers/0/dbConnections",
            "/workers/0/jobQueueSize",
            "/workers/0/lastSeen",
        ],
    ),
    (
        "/api/v1/analytics/queue-lag",
        &["/0/queueName", "/0/bucketTime", "/0/avgLagMs"],
    ),
    (
        "/api/v1/analytics/queue-parked-replicas",
        &["/bucketMinutes", "/series"],
    ),
    (
        "/api/v1/resources/queues/orders",
        &[
            "/name",
            "/namespace",
            "/task",
            "/priority",
            "/createdAt",
            "/config",
            "/partitions/0/stats",
        ],
    ),
    (
        "/api/v1/status/queues/orders",
        &[
            "/queue/name",
            "/queue/namespace",
            "/queue/task",
            "/queue/priority",
            "/queue/createdAt",
            "/queue/config/leaseTime",
            "/queue/config/retryLimit",
            "/queue/config/retryDelay",
            "/queue/config/ttl",
            "/queue/config/maxQueueSize",
            "/queue/config/deadLetterQueue",
            "/partitions/0/messages/pending",
            "/partitions/0/cursor/totalConsumed",
            "/totals/messages/total",
            "/totals/messages/pending",
            "/totals/messages/processing",
            "/totals/messages/completed",
            "/totals/messages/failed",
            "/totals/messages/deadLetter",
        ],
    ),
    (
        "/api/v1/analytics/queue-ops?queue=orders",
        &["/series/0/pushMessages", "/series/0/maxLagMs"],
    ),
    ("/api/v1/consumer-groups/lagging?minLagSeconds=0", &[]),
    (
        "/api/v1/migration/status",
        &[
            "/status",
            "/currentStep",
            "/elapsedSeconds",
            "/error",
            "/dumpOutput",
            "/restoreOutput",
        ],
    ),
    (
        "/api/v1/messages?limit=100&offset=0",
        &[
            "/messages/0/id",
            "/messages/0/queue",
            "/messages/0/partition",
            "/messages/0/partitionId",
            "/messages/0/transactionId",
            "/messages/0/status",
            "/messages/0/busStatus/consumedBy",
            "/messages/0/busStatus/totalGroups",
            "/messages/0/createdAt",
            "/mode/type",
            "/mode/busGroupsCount",
        ],
    ),
    (
        "/api/v1/traces/by-name/none?limit=50&offset=0",
        &["/traces", "/total"],
    ),
    (
        "/api/v1/status/queues?limit=500",
        &[
            "/queues/0/name",
            "/queues/0/namespace",
            "/queues/0/task",
            "/queues/0/messages/total",
            "/queues/0/messages/pending",
            "/queues/0/messages/processing",
            "/queues/0/messages/completed",
        ],
    ),
    ("/api/v1/resources/namespaces", &["/namespaces/0/namespace"]),
    ("/api/v1/resources/tasks", &["/tasks/0/task"]),
    (
        "/api/v1/dlq",
        &[
            "/messages/0/id",
            "/messages/0/transactionId",
            "/messages/0/partitionId",
            "/messages/0/queue",
            "/messages/0/partition",
            "/messages/0/consumerGroup",
            "/messages/0/errorMessage",
            "/messages/0/retryCount",
            "/messages/0/data",
            "/messages/0/createdAt",
            "/messages/0/failedAt",
        ],
    ),
    (
        "/api/v1/analytics/postgres-stats",
        &[
            "/database",
            "/databaseCache/cacheHitRatio",
            "/cacheSummary/tables/hitRatio",
            "/cacheSummary/indexes/hitRatio",
            "/bufferConfig/sharedBuffersSize",
            "/tableCache/0/table",
            "/tableCache/0/cacheHitRatio",
            "/tableCache/0/cacheHits",
            "/tableCache/0/diskReads",
            "/indexCache/0/index",
            "/tableSizes/0/table",
            "/tableSizes/0/totalSize",
            "/tableSizes/0/tableSize",
            "/tableSizes/0/indexSize",
            "/deadTuples/0/table",
            "/deadTuples/0/deadTuples",
            "/deadTuples/0/deadPercentage",
            "/deadTuples/0/lastAutovacuum",
            "/hotUpdates/0/table",
            "/hotUpdates/0/totalUpdates",
            "/hotUpdates/0/hotUpdatePercentage",
            "/activeQueries",
            "/autovacuumStatus/0/table",
            "/autovacuumStatus/0/autovacuumCount",
            "/autovacuumStatus/0/deadTuples",
        ],
    ),
];

/// Fields the dashboard reads that this broker leaves out, because there is
/// nothing to say (docs/admin-api.md): the dashboard reads each with `?.`
/// and shows nothing rather than a made-up 0.
const LEFT_OUT: &[(&str, &str)] = &[
    (
        "/api/v1/analytics/system-metrics",
        "/replicas/0/timeSeries/0/metrics/threadpool/system",
    ),
    ("/api/v1/analytics/postgres-stats", "/bufferUsage"),
    (
        "/api/v1/system/maintenance",
        "/bufferStats/failedFiles/qos0Count",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_page_load_call_answers_with_the_fields_its_view_reads() {
    let broker = history().await;
    broker.engine.observe().write_stats().await.unwrap();
    for (path, pointers) in DASHBOARD {
        let reply = broker.client.get(path).await;
        assert_eq!(
            reply.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&reply.body)
        );
        let body = reply.json();
        for pointer in *pointers {
            // Present: null only where the data says nothing (a time never set).
            assert!(
                body.pointer(pointer).is_some(),
                "{path} lacks {pointer}: {body}"
            );
        }
    }
    for (path, pointer) in LEFT_OUT {
        let body = get(&broker, path).await;
        assert!(
            body.pointer(pointer).is_none(),
            "{path} has {pointer}: {body}"
        );
    }
}
