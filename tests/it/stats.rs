//! Statistics over time: the per-minute rows each broker writes with one
//! statement, and their purge by the retention loop.

use queen_engine::EngineConfig;
use queen_tests::TestBroker;
use serde_json::json;

use crate::support::{ack_all, configure, pop, push};

/// A broker whose statistics are written only when the test says so.
fn manual() -> EngineConfig {
    EngineConfig {
        stats_interval: None,
        figures_interval: None,
        retention_interval: None,
        eviction_interval: None,
        hostname: "stats-host".to_owned(),
        port: 7001,
        ..EngineConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_records_the_minute_of_each_queue_and_of_the_broker() {
    let broker = TestBroker::start_with(manual()).await;
    configure(
        &broker,
        "orders",
        json!({"retryLimit": 0, "dlqAfterMaxRetries": true}),
    )
    .await;
    push(
        &broker,
        "orders",
        "p1",
        &[json!(1), json!(2), json!(3), json!(4)],
    )
    .await;
    push(&broker, "orders", "p2", &[json!(5)]).await;
    push(&broker, "other", "p", &[json!(6)]).await;
    let popped = pop(&broker, "/api/v1/pop/queue/orders/partition/p1?batch=3")
        .await
        .unwrap();
    ack_all(&broker, &popped, "completed", None).await;
    let popped = pop(&broker, "/api/v1/pop/queue/orders/partition/p1?batch=1")
        .await
        .unwrap();
    ack_all(&broker, &popped, "failed", None).await;
    assert!(pop(&broker, "/api/v1/pop/queue/empty-one").await.is_none());
    // Group g leases one message of each partition and acks nothing: its
    // cursors (one per partition it touched) have all 5 messages behind them.
    for partition in ["p1", "p2"] {
        pop(
            &broker,
            &format!("/api/v1/pop/queue/orders/partition/{partition}?consumerGroup=g&batch=1"),
        )
        .await
        .unwrap();
    }

    let db = broker.db.client().await;
    let rows: i64 = db
        .query_one("SELECT count(*) FROM queen.stats_queue_minute", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "nothing is written per request");

    let written = broker.engine.observe().write_stats().await.unwrap();
    assert_eq!(written, 3, "orders, other and empty-one");
    let row = db
        .query_one(
            "SELECT broker, push_requests, pushed, pop_requests, popped, pop_empty, acked, \
                    ack_failed, dlq, partitions, partitions_created, lag_messages \
               FROM queen.stats_queue_minute WHERE queue_name = 'orders'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "stats-host:7001");
    let counts: Vec<i64> = (1..9).map(|i| row.get::<_, i64>(i)).collect();
    assert_eq!(counts, vec![2, 5, 4, 6, 0, 3, 1, 1]);
    // p1, p2 and the Default partition configure creates.
    assert_eq!(row.get::<_, i32>(9), 3, "partitions");
    assert_eq!(row.get::<_, i32>(10), 3, "partitions created this minute");
    assert_eq!(row.get::<_, i64>(11), 5, "the most lagging group's count");
    let empty: i64 = db
        .query_one(
            "SELECT pop_empty FROM queen.stats_queue_minute WHERE queue_name = 'empty-one'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(empty, 1);
    let broker_row = db
        .query_one(
            "SELECT hostname, port, pushed, popped, acked, dlq, pool_size, rss_bytes, cpu_user_us \
               FROM queen.stats_broker_minute",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(broker_row.get::<_, String>(0), "stats-host");
    assert_eq!(broker_row.get::<_, i32>(1), 7001);
    let totals: Vec<i64> = (2..6).map(|i| broker_row.get::<_, i64>(i)).collect();
    assert_eq!(totals, vec![6, 6, 3, 1]);
    assert!(broker_row.get::<_, i32>(6) >= 1);
    assert!(broker_row.get::<_, i64>(7) > 0);

    // A second write in the same minute adds only what happened since.
    push(&broker, "orders", "p1", &[json!(7)]).await;
    broker.engine.observe().write_stats().await.unwrap();
    let pushed: i64 = db
        .query_one(
            "SELECT sum(pushed)::bigint FROM queen.stats_queue_minute WHERE queue_name = 'orders'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let broker_pushed: i64 = db
        .query_one(
            "SELECT sum(pushed)::bigint FROM queen.stats_broker_minute",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // The write may have crossed a minute boundary: sums hold either way.
    assert_eq!((pushed, broker_pushed), (6, 7));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_keeps_the_counts_for_the_next_one() {
    let broker = TestBroker::start_with(manual()).await;
    push(&broker, "kept", "p", &[json!(1), json!(2)]).await;
    let db = broker.db.client().await;
    // Make the write fail: the table is locked away from the writer.
    db.batch_execute("ALTER TABLE queen.stats_queue_minute RENAME TO stats_queue_minute_away")
        .await
        .unwrap();
    assert!(broker.engine.observe().write_stats().await.is_err());
    db.batch_execute("ALTER TABLE queen.stats_queue_minute_away RENAME TO stats_queue_minute")
        .await
        .unwrap();
    push(&broker, "kept", "p", &[json!(3)]).await;
    broker.engine.observe().write_stats().await.unwrap();
    let pushed: i64 = db
        .query_one(
            "SELECT sum(pushed)::bigint FROM queen.stats_queue_minute WHERE queue_name = 'kept'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(pushed, 3);
    let broker_pushed: i64 = db
        .query_one(
            "SELECT sum(pushed)::bigint FROM queen.stats_broker_minute",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(broker_pushed, 3);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_runs_by_itself_and_retention_purges_old_rows() {
    let broker = TestBroker::start_with(EngineConfig {
        stats_interval: Some(std::time::Duration::from_millis(200)),
        stats_retention: std::time::Duration::from_secs(3600),
        ..manual()
    })
    .await;
    push(&broker, "auto", "p", &[json!(1)]).await;
    let db = broker.db.client().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let rows: i64 = db
            .query_one(
                "SELECT count(*) FROM queen.stats_queue_minute WHERE queue_name = 'auto'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if rows > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the writer never wrote"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    db.batch_execute(
        "INSERT INTO queen.stats_queue_minute (bucket, broker, queue_name) \
             VALUES (now() - interval '2 hours', 'old', 'auto'); \
         INSERT INTO queen.stats_broker_minute (bucket, broker, hostname) \
             VALUES (now() - interval '2 hours', 'old', 'old')",
    )
    .await
    .unwrap();
    let removed = broker.engine.retention_pass().await.unwrap();
    assert_eq!(removed.stats_rows, 2);
    let old: i64 = db
        .query_one(
            "SELECT (SELECT count(*) FROM queen.stats_queue_minute WHERE broker = 'old') + \
                    (SELECT count(*) FROM queen.stats_broker_minute WHERE broker = 'old')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(old, 0);
    let kept: i64 = db
        .query_one("SELECT count(*) FROM queen.stats_queue_minute", &[])
        .await
        .unwrap()
        .get(0);
    assert!(kept >= 1, "fresh rows stay");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_consumers_are_sampled_per_queue_when_the_minute_is_written() {
    let broker = TestBroker::start_with(manual()).await;
    push(&broker, "parkq", "p", &[json!(1)]).await;
    // Drain it, then park two long-polls on the empty queue.
    let popped = pop(&broker, "/api/v1/pop/queue/parkq?autoAck=true")
        .await
        .unwrap();
    assert_eq!(popped["messages"].as_array().unwrap().len(), 1);
    let mut parked = Vec::new();
    for _ in 0..2 {
        let client = broker.client.clone();
        parked.push(tokio::spawn(async move {
            client
                .get("/api/v1/pop/queue/parkq?wait=true&timeout=3000&autoAck=true")
                .await
                .status
        }));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while broker.engine.observe().process_metrics().parked_total() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the pops never parked"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    broker.engine.observe().write_stats().await.unwrap();
    let db = broker.db.client().await;
    let row = db
        .query_one(
            "SELECT parked FROM queen.stats_queue_minute WHERE queue_name = 'parkq'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 2);
    let reply = broker
        .client
        .get("/api/v1/analytics/queue-parked-replicas?queue=parkq")
        .await;
    let series = reply.json()["series"].clone();
    assert_eq!(series[0]["parkedCount"], 2, "{series}");
    assert_eq!(series[0]["hostname"], "stats-host");
    for pop in parked {
        assert_eq!(pop.await.unwrap(), 204);
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_eviction_and_cleanup_are_counted_per_queue() {
    let broker = TestBroker::start_with(EngineConfig {
        partition_idle: Some(std::time::Duration::from_secs(3600)),
        ..manual()
    })
    .await;
    // by_time: 2 messages past retentionSeconds; done: 1 consumed message
    // past completedRetentionSeconds (and 1 unconsumed that stays); evict: 2
    // messages past maxWaitTimeSeconds; empty: an idle empty partition.
    configure(
        &broker,
        "by-time",
        json!({"retentionEnabled": true, "retentionSeconds": 60}),
    )
    .await;
    configure(
        &broker,
        "done",
        json!({"retentionEnabled": true, "completedRetentionSeconds": 60}),
    )
    .await;
    configure(&broker, "evict", json!({"maxWaitTimeSeconds": 60})).await;
    push(&broker, "by-time", "p", &[json!(1)]).await;
    push(&broker, "by-time", "p", &[json!(2)]).await;
    push(&broker, "done", "p", &[json!(1)]).await;
    push(&broker, "done", "p", &[json!(2)]).await;
    let popped = pop(&broker, "/api/v1/pop/queue/done?batch=1&autoAck=true")
        .await
        .unwrap();
    assert_eq!(popped["messages"].as_array().unwrap().len(), 1);
    push(&broker, "evict", "p", &[json!(1), json!(2)]).await;
    let db = broker.db.client().await;
    // (Backdated in UTC: an immutable expression, which Citus takes in an
    // UPDATE; `created_at - interval` it refuses.)
    db.batch_execute(
        "UPDATE queen.log_segments SET created_at = timezone('UTC', timezone('UTC', created_at) - interval '2 hours');
         UPDATE queen.log_partitions SET oldest_live_at = timezone('UTC', timezone('UTC', oldest_live_at) - interval '2 hours'),
                                         last_write_at = timezone('UTC', timezone('UTC', last_write_at) - interval '2 hours');",
    )
    .await
    .unwrap();
    let retained = broker.engine.retention_pass().await.unwrap();
    assert_eq!(retained.messages, 3, "{retained:?}");
    let evicted = broker.engine.eviction_pass().await.unwrap();
    assert_eq!(evicted.evicted_messages, 2, "{evicted:?}");
    broker.engine.observe().write_stats().await.unwrap();
    let rows = db
        .query(
            "SELECT queue_name, retention_msgs, completed_retention_msgs, eviction_msgs, \
                    partitions_deleted \
               FROM queen.stats_queue_minute ORDER BY queue_name",
            &[],
        )
        .await
        .unwrap();
    let counts: std::collections::HashMap<String, [i64; 4]> = rows
        .iter()
        .map(|row| {
            (
                row.get::<_, String>(0),
                [row.get(1), row.get(2), row.get(3), row.get(4)],
            )
        })
        .collect();
    assert_eq!(counts["by-time"][..3], [2, 0, 0]);
    assert_eq!(counts["done"][..3], [0, 1, 0]);
    assert_eq!(counts["evict"][..3], [0, 0, 2]);
    // The Default partitions configure created are empty and idle: removed.
    let deleted: i64 = counts.values().map(|c| c[3]).sum();
    assert_eq!(deleted, i64::try_from(retained.partitions_removed).unwrap());
    assert!(deleted >= 3, "{counts:?}");

    let view = broker
        .client
        .get("/api/v1/analytics/retention")
        .await
        .json();
    assert_eq!(view["totals"]["retentionMsgs"], 2);
    assert_eq!(view["totals"]["completedRetentionMsgs"], 1);
    assert_eq!(view["totals"]["evictionMsgs"], 2);
    assert_eq!(view["totals"]["partitionsDeleted"], deleted);
    let by_queue = broker
        .client
        .get("/api/v1/analytics/retention?queue=done")
        .await
        .json();
    assert_eq!(by_queue["totals"]["completedRetentionMsgs"], 1);
    assert_eq!(by_queue["totals"]["retentionMsgs"], 0);
    let ops = broker
        .client
        .get("/api/v1/analytics/queue-ops?queue=evict")
        .await
        .json();
    assert!(
        ops["series"][0]["partitionsDeleted"].as_i64().unwrap() >= 1,
        "{ops}"
    );
    broker.stop().await;
}

/// A minute with no queue rows (no traffic, nothing parked) writes the
/// broker's row without reading the cluster series (every queue's and
/// group's lag, a read of every partition). Seen through a lock: with
/// `log_dlq` (which the series reads and the write does not) locked by
/// another session, a series read would wait on it (and still be waiting
/// after the write gives up on it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_minute_does_not_read_every_queue_s_lag() {
    let broker = TestBroker::start_with(manual()).await;
    push(&broker, "idle", "p", &[json!(1)]).await;
    // The traffic's minute: its row, and the series read it needs.
    assert_eq!(broker.engine.observe().write_stats().await.unwrap(), 1);
    let db = broker.db.client().await;
    let locker = broker.db.client().await;
    locker
        .batch_execute("BEGIN; LOCK TABLE queen.log_dlq IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    // Past the series cache's lifetime, so a read would go to the database.
    tokio::time::sleep(queen_engine::metrics::CLUSTER_TTL).await;
    assert_eq!(broker.engine.observe().write_stats().await.unwrap(), 0);
    let waiting: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_locks \
              WHERE NOT granted AND relation = 'queen.log_dlq'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    locker.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(waiting, 0, "the idle minute read the cluster series");
    let broker_rows: i64 = db
        .query_one("SELECT count(*) FROM queen.stats_broker_minute", &[])
        .await
        .unwrap()
        .get(0);
    assert!(broker_rows >= 1);
    broker.stop().await;
}

/// The live messages of `queue` in a scrape's cluster series.
fn scraped_messages(scrape: &queen_engine::metrics::Scrape, queue: &str) -> Option<i64> {
    scrape.cluster.rows.iter().find_map(|row| match row {
        queen_sql::stats::ClusterRow::Queue {
            queue: name,
            messages,
            ..
        } if name == queue => Some(*messages),
        _ => None,
    })
}

/// A scrape does not wait for a cluster-series read that takes long (at a
/// million partitions one takes seconds): with the read held up by a lock,
/// a scrape past the cache's lifetime answers at once with the last copy,
/// and the read, once it can go on, lands in the cache for the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_answers_from_the_last_copy_while_a_slow_read_runs() {
    use queen_engine::metrics::{CLUSTER_TIMEOUT, CLUSTER_TTL};
    let broker = TestBroker::start_with(manual()).await;
    push(&broker, "slow", "p", &[json!(1)]).await;
    let observe = broker.engine.observe();
    let first = observe.scrape().await;
    assert!(first.cluster_fresh);
    assert_eq!(scraped_messages(&first, "slow"), Some(1));
    let locker = broker.db.client().await;
    locker
        .batch_execute("BEGIN; LOCK TABLE queen.log_dlq IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    push(&broker, "slow", "p", &[json!(2)]).await;
    tokio::time::sleep(CLUSTER_TTL).await;
    let started = std::time::Instant::now();
    let scrape = observe.scrape().await;
    let took = started.elapsed();
    assert!(
        took < CLUSTER_TIMEOUT,
        "a scrape waited {took:?} for a held-up read"
    );
    assert_eq!(scraped_messages(&scrape, "slow"), Some(1), "the last copy");
    assert!(scrape.cluster_fresh, "not overdue yet");
    locker.batch_execute("ROLLBACK").await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let scrape = observe.scrape().await;
        if scraped_messages(&scrape, "slow") == Some(2) {
            assert!(scrape.cluster_fresh);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the held-up read never landed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    broker.stop().await;
}
