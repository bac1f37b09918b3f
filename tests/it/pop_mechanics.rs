//! The mechanics under the pop path: no waiting on other transactions, gaps
//! and the cursor seal, what a parked pop holds, cancellation, wake-up
//! latency, the cost of polling a caught-up queue of 10,000 partitions, and
//! pop maintenance against a parked pop.

use std::time::{Duration, Instant};

use queen_engine::EngineConfig;
use queen_tests::TestBroker;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{
    configure, expect_status, hotlist_config, pop, pop_data, push, push_items, select_i64,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_never_waits_for_a_lock_another_transaction_holds() {
    let broker = TestBroker::start().await;
    push(&broker, "locks", "held", &[json!("h")]).await;
    push(&broker, "locks", "free", &[json!("f")]).await;
    // The group's cursors exist (as they do once it has taken from each).
    let sql = broker.sql().await;
    sql.batch_execute(
        "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed) \
         SELECT id, 'g', -1 FROM queen.log_partitions",
    )
    .await
    .unwrap();
    // Another transaction holds the 'held' cursor row.
    let holder = broker.sql().await;
    holder.batch_execute("BEGIN").await.unwrap();
    let held = crate::support::partition_ids(&holder, "locks", Some("held")).await;
    crate::support::lock_each(
        &holder,
        "queen.log_consumers",
        "partition_id",
        &held,
        "AND consumer_group = 'g'",
    )
    .await;
    let started = Instant::now();
    let got = tokio::time::timeout(
        Duration::from_secs(5),
        pop_data(
            &broker,
            "/api/v1/pop/queue/locks?batch=10&partitions=2&consumerGroup=g&autoAck=true",
        ),
    )
    .await
    .expect("the pop waited on a locked cursor row");
    assert_eq!(
        got,
        Some(vec![json!("f")]),
        "the locked partition was not skipped"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    holder.batch_execute("ROLLBACK").await.unwrap();

    // A cursor row being created by another transaction (which holds the
    // creation try-lock, as every creator does): skipped, not waited for.
    push(&broker, "locks", "creating", &[json!("c")]).await;
    // (The lock in a statement of its own, as the broker takes it: beside a
    // read of log_partitions, Citus would take it on a worker.)
    let creator = broker.sql().await;
    let creating = crate::support::partition_ids(&creator, "locks", Some("creating")).await;
    creator.batch_execute("BEGIN").await.unwrap();
    creator
        .execute(
            "SELECT pg_advisory_xact_lock(queen.log_cursor_lock_key($1, 'g'))",
            &[&creating[0]],
        )
        .await
        .unwrap();
    creator
        .execute(
            "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed) \
             VALUES ($1, 'g', -1)",
            &[&creating[0]],
        )
        .await
        .unwrap();
    let got = tokio::time::timeout(
        Duration::from_secs(5),
        pop_data(
            &broker,
            "/api/v1/pop/queue/locks/partition/creating?consumerGroup=g&autoAck=true",
        ),
    )
    .await
    .expect("the pop waited on an uncommitted cursor insert");
    assert_eq!(got, None);
    creator.batch_execute("COMMIT").await.unwrap();
    let got = pop_data(
        &broker,
        "/api/v1/pop/queue/locks/partition/creating?consumerGroup=g&autoAck=true",
    )
    .await;
    assert_eq!(got, Some(vec![json!("c")]));
    broker.stop().await;
}

#[tokio::test]
async fn the_scan_steps_over_retention_gaps() {
    let broker = TestBroker::start().await;
    for i in 0..4 {
        push(&broker, "gaps", "p", &[json!(i * 2), json!(i * 2 + 1)]).await;
    }
    // Retention removed the segment [2, 3] in the middle and the head [0, 1].
    let sql = broker.sql().await;
    sql.batch_execute("DELETE FROM queen.log_segments WHERE base_offset IN (0, 2)")
        .await
        .unwrap();
    let got = pop_data(&broker, "/api/v1/pop/queue/gaps?batch=100&autoAck=true").await;
    assert_eq!(got, Some(vec![json!(4), json!(5), json!(6), json!(7)]));
    broker.stop().await;
}

#[tokio::test]
async fn an_emptied_partition_seals_the_cursor_and_stops_being_pending() {
    let broker = TestBroker::start().await;
    push(&broker, "sealed", "p", &[json!(1), json!(2), json!(3)]).await;
    let sql = broker.sql().await;
    // Retention removed every segment while the group never consumed.
    sql.batch_execute("DELETE FROM queen.log_segments")
        .await
        .unwrap();
    assert_eq!(
        pop_data(&broker, "/api/v1/pop/queue/sealed?autoAck=true").await,
        None
    );
    let committed: i64 = select_i64(&sql, "SELECT committed FROM queen.log_consumers").await;
    assert_eq!(committed, 2, "the cursor was not sealed at last_offset");
    let pending: bool = sql
        .query_one(
            "SELECT queen.log_has_pending_v1(q.id, '__QUEUE_MODE__') FROM queen.queues q",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!pending, "a phantom-pending partition");
    // New pushes land above the seal and are delivered.
    push(&broker, "sealed", "p", &[json!(4)]).await;
    assert_eq!(
        pop_data(&broker, "/api/v1/pop/queue/sealed?autoAck=true").await,
        Some(vec![json!(4)])
    );
    broker.stop().await;
}

#[tokio::test]
async fn the_seal_never_skips_segments_hidden_by_delayed_processing() {
    let broker = TestBroker::start().await;
    configure(&broker, "hidden", json!({"delayedProcessing": 60})).await;
    push(&broker, "hidden", "p", &[json!(1)]).await;
    assert_eq!(
        pop_data(&broker, "/api/v1/pop/queue/hidden?autoAck=true").await,
        None
    );
    let committed: i64 = select_i64(
        &broker.sql().await,
        "SELECT c.committed FROM queen.log_consumers c JOIN queen.log_partitions p \
         ON p.id = c.partition_id WHERE p.name = 'p'",
    )
    .await;
    assert_eq!(committed, -1);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_pops_hold_no_permit_connection_or_lock_and_empty_polls_take_no_permit() {
    let broker = TestBroker::start().await;
    push(&broker, "idle", "p", &[json!(1)]).await;
    assert!(pop_data(&broker, "/api/v1/pop/queue/idle?autoAck=true")
        .await
        .is_some());
    assert!(pop_data(&broker, "/api/v1/pop/queue/idle?autoAck=true")
        .await
        .is_none());
    let granted_before = broker.engine.observe().limiter_stats().granted;
    let mut parked = Vec::new();
    for _ in 0..50 {
        let client = broker.client.clone();
        parked.push(tokio::spawn(async move {
            client
                .get("/api/v1/pop/queue/idle?autoAck=true&wait=true&timeout=3000")
                .await
                .status
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(broker.engine.observe().pops_in_progress(), 50);
    assert_eq!(
        broker.engine.observe().limiter_stats().in_flight,
        0,
        "a parked pop holds a permit"
    );
    assert_eq!(
        broker.engine.observe().connections_in_use(),
        0,
        "a parked pop holds a connection"
    );
    let locks: i64 = select_i64(
        &broker.sql().await,
        // This test's database only: other tests run beside it on the cluster.
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
         JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'queen' \
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .await;
    assert_eq!(locks, 0, "a parked pop holds a lock");
    // Each parked pop re-polled several times by now; none of those empty
    // re-polls took a permit (the in-memory check comes first).
    assert_eq!(
        broker.engine.observe().limiter_stats().granted,
        granted_before
    );
    for pop in parked {
        assert_eq!(pop.await.unwrap(), 204);
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_disconnect_cancels_its_parked_pop() {
    let broker = TestBroker::start().await;
    push(&broker, "gone", "p", &[json!(1)]).await;
    assert!(pop_data(&broker, "/api/v1/pop/queue/gone?autoAck=true")
        .await
        .is_some());
    let addr = broker
        .client
        .base()
        .trim_start_matches("http://")
        .to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(
            b"GET /api/v1/pop/queue/gone?wait=true&timeout=20000 HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(broker.engine.observe().pops_in_progress(), 1);
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(3);
    while broker.engine.observe().pops_in_progress() > 0 {
        assert!(
            Instant::now() < deadline,
            "the parked pop outlived its client"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The half-read connection did not leave a stray lease behind either.
    let mut check = tokio::net::TcpStream::connect(&addr).await.unwrap();
    check
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    check.read_to_string(&mut text).await.unwrap();
    assert!(text.starts_with("HTTP/1.1 200"));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_wakes_a_parked_pop_within_50_ms() {
    let broker = TestBroker::start().await;
    configure(&broker, "latency", json!({})).await;
    assert!(pop_data(&broker, "/api/v1/pop/queue/latency?autoAck=true")
        .await
        .is_none());
    let mut samples = Vec::new();
    for i in 0..40 {
        let client = broker.client.clone();
        let parked = tokio::spawn(async move {
            let reply = client
                .get("/api/v1/pop/queue/latency?autoAck=true&wait=true&timeout=10000")
                .await;
            (reply.status, Instant::now())
        });
        // Let it park past the fast re-polls, so only a wake explains a quick answer.
        tokio::time::sleep(Duration::from_millis(350)).await;
        let reply = broker
            .client
            .post_json(
                "/api/v1/push",
                &json!({"items": [{"queue": "latency", "payload": i}]}),
            )
            .await;
        let pushed = Instant::now();
        assert_eq!(reply.status, 201);
        let (status, answered) = parked.await.unwrap();
        assert_eq!(status, 200);
        samples.push(answered.saturating_duration_since(pushed));
    }
    samples.sort();
    let p50 = samples[samples.len() / 2];
    let p99 = samples[samples.len() * 99 / 100];
    eprintln!(
        "push-to-parked-pop wake latency: p50 {p50:?}, p99 {p99:?}, max {:?}",
        samples.last().unwrap()
    );
    assert!(p50 < Duration::from_millis(50), "p50 {p50:?}");
    // Generous for a loaded 2-core machine; the backoff floor alone would be 100 ms+.
    assert!(p99 < Duration::from_millis(250), "p99 {p99:?}");
    broker.stop().await;
}

/// Rows of log_partitions and log_consumers one call of `statement` reads,
/// measured with this session's own transaction statistics.
async fn rows_read_by(sql: &tokio_postgres::Client, statement: &str) -> i64 {
    sql.batch_execute("BEGIN").await.unwrap();
    sql.batch_execute(statement).await.unwrap();
    let rows: i64 = select_i64(
        sql,
        "SELECT COALESCE(sum(seq_tup_read + COALESCE(idx_tup_fetch, 0)), 0)::bigint \
           FROM pg_stat_xact_user_tables \
          WHERE schemaname = 'queen' AND relname IN ('log_partitions', 'log_consumers')",
    )
    .await;
    sql.batch_execute("COMMIT").await.unwrap();
    rows
}

async fn caught_up_polls_do_not_scan_every_partition(hotlist: bool) {
    const PARTITIONS: usize = 10_000;
    let broker = TestBroker::start_with(hotlist_config(hotlist)).await;
    for chunk in 0..PARTITIONS / 1000 {
        let items: Vec<Value> = (0..1000)
            .map(|i| json!({"queue": "wide", "partition": format!("p{}", chunk * 1000 + i), "payload": i}))
            .collect();
        push_items(&broker, items).await;
    }
    let sql = broker.sql().await;
    // The data is old news: written well before the watermark's slack; the
    // statistics are fresh, as autovacuum keeps them.
    sql.batch_execute(
        "UPDATE queen.log_partitions SET last_write_at = now() - interval '10 minutes'; \
         ANALYZE queen.log_partitions; ANALYZE queen.log_consumers;",
    )
    .await
    .unwrap();
    let mut consumed = 0;
    while let Some(got) = pop_data(
        &broker,
        "/api/v1/pop/queue/wide?batch=1000&partitions=1000&autoAck=true",
    )
    .await
    {
        consumed += got.len();
    }
    assert_eq!(consumed, PARTITIONS);
    // Caught up. A few more polls (the first empty probe moves the watermark).
    for _ in 0..3 {
        assert!(pop_data(&broker, "/api/v1/pop/queue/wide?autoAck=true")
            .await
            .is_none());
    }
    const POLLS: u64 = 20;
    let before = broker.engine.observe().pop_checkouts();
    for _ in 0..POLLS {
        assert!(pop_data(&broker, "/api/v1/pop/queue/wide?autoAck=true")
            .await
            .is_none());
    }
    let round_trips = broker.engine.observe().pop_checkouts() - before;
    let probe = "SELECT queen.log_has_pending_v1(id, '__QUEUE_MODE__') FROM queen.queues WHERE name = 'wide'";
    // Steady state: whichever call first proves the queue empty moves the
    // watermark (it reads the partition set once); every later probe is cheap.
    let _ = rows_read_by(&sql, probe).await;
    let probe_rows = rows_read_by(&sql, probe).await;
    // The same probe without the watermark: the full scan it avoids.
    sql.batch_execute("UPDATE queen.consumer_groups_metadata SET scan_watermark = '-infinity', watermark_checked_at = now()")
        .await
        .unwrap();
    let unbounded_rows = rows_read_by(&sql, probe).await;
    eprintln!(
        "10,000 caught-up partitions, {POLLS} polls (hotlist={hotlist}): {round_trips} SQL round trips; \
         the SQL path's probe reads {probe_rows} partition/cursor rows with the watermark, \
         {unbounded_rows} without"
    );
    assert!(
        unbounded_rows >= 10_000,
        "the measurement cannot see a full scan"
    );
    if hotlist {
        // At most a reseed and a config refresh, whatever the poll count.
        assert!(
            round_trips <= 2,
            "the hot-list asked SQL {round_trips} times for an empty ring"
        );
    } else {
        assert!(
            round_trips <= POLLS + 2,
            "{round_trips} round trips for {POLLS} polls"
        );
        assert!(
            probe_rows < 100,
            "the probe read {probe_rows} rows: a full scan"
        );
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_caught_up_partitions_cost_no_scan_on_the_hotlist_path() {
    caught_up_polls_do_not_scan_every_partition(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_caught_up_partitions_cost_no_scan_on_the_sql_path() {
    caught_up_polls_do_not_scan_every_partition(false).await;
}

#[tokio::test]
async fn encrypted_payloads_come_back_decrypted() {
    let key: queen_engine::EncryptionKey =
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
            .parse()
            .unwrap();
    let broker = TestBroker::start_with(EngineConfig {
        encryption_key: Some(key),
        ..EngineConfig::default()
    })
    .await;
    configure(&broker, "sealed-q", json!({"encryptionEnabled": true})).await;
    push(&broker, "sealed-q", "p", &[json!({"secret": "s3cr3t"})]).await;
    let got = pop_data(&broker, "/api/v1/pop/queue/sealed-q?autoAck=true").await;
    assert_eq!(got, Some(vec![json!({"secret": "s3cr3t"})]));
    broker.stop().await;
}

/// D5: on both candidate paths (it was silently off with `QUEEN_HOTLIST=0`).
async fn min_pop_wait_time_holds_an_underfull_claim_in_the_broker(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    configure(&broker, "gather", json!({"minPopWaitTime": 400})).await;
    push(&broker, "gather", "p", &[json!(1)]).await;
    // Prime: first contact and the cached config (which flips the gate atomic).
    let _ = pop_data(&broker, "/api/v1/pop/queue/gather?batch=1&autoAck=true").await;
    push(&broker, "gather", "p", &[json!(2)]).await;
    let client = broker.client.clone();
    let started = Instant::now();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        client
            .post_json(
                "/api/v1/push",
                &json!({"items": [{"queue": "gather", "partition": "p", "payload": 3}]}),
            )
            .await
    });
    let got = pop_data(
        &broker,
        "/api/v1/pop/queue/gather?batch=10&autoAck=true&wait=true&timeout=5000",
    )
    .await;
    assert_eq!(late.await.unwrap().status, 201);
    assert!(started.elapsed() >= Duration::from_millis(350), "not held");
    assert_eq!(
        got,
        Some(vec![json!(2), json!(3)]),
        "the held claim did not gather the later push"
    );
    broker.stop().await;
}

/// D5: the hold ends at the first of batch full, window elapsed, deadline: a
/// batch that is already full is not held at all, and one that fills during
/// the window is answered when it fills. (A pop without `wait` has its
/// deadline now, so it is never held.)
async fn min_pop_wait_time_ends_when_the_batch_is_full(config: EngineConfig) {
    let broker = TestBroker::start_with(config).await;
    configure(&broker, "full", json!({"minPopWaitTime": 3000})).await;
    let ten: Vec<Value> = (0..10).map(|i| json!(i)).collect();
    push(&broker, "full", "p", &ten).await;
    // Prime: first contact and the cached config.
    let _ = pop_data(&broker, "/api/v1/pop/queue/full?batch=1&autoAck=true").await;
    let started = Instant::now();
    let got = pop_data(
        &broker,
        "/api/v1/pop/queue/full?batch=5&autoAck=true&wait=true&timeout=5000",
    )
    .await;
    assert_eq!(got.map(|m| m.len()), Some(5));
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "a full batch was held {:?}",
        started.elapsed()
    );
    // 4 left; a batch of 6 fills when two more arrive 300 ms later.
    let client = broker.client.clone();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        client
            .post_json(
                "/api/v1/push",
                &json!({"items": [{"queue": "full", "partition": "p", "payload": 10},
                                  {"queue": "full", "partition": "p", "payload": 11}]}),
            )
            .await
    });
    let started = Instant::now();
    let got = pop_data(
        &broker,
        "/api/v1/pop/queue/full?batch=6&autoAck=true&wait=true&timeout=5000",
    )
    .await;
    assert_eq!(late.await.unwrap().status, 201);
    assert_eq!(got.map(|m| m.len()), Some(6));
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "the hold outlasted the batch filling: {:?}",
        started.elapsed()
    );
}

crate::support::both_paths!(
    min_pop_wait_time_holds_an_underfull_claim_in_the_broker,
    min_pop_wait_time_ends_when_the_batch_is_full,
);

/// C: switching pop maintenance on answers a pop already parked with 204 at
/// once, and a push that arrives afterwards is not delivered to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop_maintenance_answers_a_parked_pop_empty_at_once() {
    let broker = std::sync::Arc::new(TestBroker::start().await);
    push(&broker, "maint", "p", &[json!("before")]).await;
    assert!(pop(&broker, "/api/v1/pop/queue/maint?autoAck=true")
        .await
        .is_some());
    let parked = {
        let broker = std::sync::Arc::clone(&broker);
        tokio::spawn(async move {
            let reply = broker
                .client
                .get("/api/v1/pop/queue/maint?wait=true&timeout=10000&autoAck=true")
                .await;
            (reply.status.as_u16(), std::time::Instant::now())
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let switched = std::time::Instant::now();
    let reply = broker
        .client
        .post_json("/api/v1/system/maintenance/pop", &json!({"enabled": true}))
        .await;
    expect_status(&reply, 200);
    push(&broker, "maint", "p", &[json!("during")]).await;
    let (status, answered) = parked.await.unwrap();
    assert_eq!(status, 204, "a parked pop delivered during maintenance");
    assert!(
        answered - switched < std::time::Duration::from_millis(500),
        "the parked pop answered {:?} after maintenance began",
        answered - switched
    );
    // Off again: the message pushed during maintenance is still there.
    let reply = broker
        .client
        .post_json("/api/v1/system/maintenance/pop", &json!({"enabled": false}))
        .await;
    expect_status(&reply, 200);
    let popped = pop_data(&broker, "/api/v1/pop/queue/maint?autoAck=true").await;
    assert_eq!(popped, Some(vec![json!("during")]));
}

/// D1: ring names with no matching partition (the queue was deleted and
/// re-created through another broker) must leave the ring, not go back to its
/// front forever ahead of the real partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_names_without_a_partition_leave_the_ring() {
    let a = TestBroker::start().await;
    let b = TestBroker::serve(a.db.clone(), EngineConfig::default()).await;
    // 40 partitions with one message each; A's consumer takes one, so its
    // ring holds the other 39 names.
    let items = (0..40)
        .map(|i| json!({"queue": "reborn", "partition": format!("old{i:02}"), "payload": i}))
        .collect();
    push_items(&a, items).await;
    let first = pop(&a, "/api/v1/pop/queue/reborn?batch=1&autoAck=true").await;
    assert!(first.is_some());
    // Through B: delete the queue, re-create it with one real partition.
    let deleted = b.client.delete("/api/v1/resources/queues/reborn").await;
    assert!(deleted.status.is_success(), "{:?}", deleted.status);
    push(&b, "reborn", "real", &[json!("live")]).await;
    // A's first pop finds its cached queue id gone and looks again; then the
    // real partition must be reached, though 39 dead names stand before it.
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut got = None;
    while got.is_none() && Instant::now() < deadline {
        got = pop_data(&a, "/api/v1/pop/queue/reborn?batch=1&autoAck=true").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(got, Some(vec![json!("live")]), "the real partition starved");
}

/// D1 again, with the queue kept: partitions removed under a ring (what
/// partition cleanup does) are dropped from it at their first visit, so a
/// partition pushed behind 39 dead names is reached within a few pops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_removed_under_a_ring_are_dropped_from_it() {
    let broker = TestBroker::start().await;
    let items = (0..40)
        .map(|i| json!({"queue": "thinned", "partition": format!("old{i:02}"), "payload": i}))
        .collect();
    push_items(&broker, items).await;
    assert!(
        pop(&broker, "/api/v1/pop/queue/thinned?batch=1&autoAck=true")
            .await
            .is_some()
    );
    broker
        .sql()
        .await
        .execute(
            "DELETE FROM queen.log_partitions WHERE name LIKE 'old%'",
            &[],
        )
        .await
        .unwrap();
    push(&broker, "thinned", "real", &[json!("live")]).await;
    let mut got = None;
    for _ in 0..5 {
        got = pop_data(&broker, "/api/v1/pop/queue/thinned?batch=1&autoAck=true").await;
        if got.is_some() {
            break;
        }
    }
    assert_eq!(
        got,
        Some(vec![json!("live")]),
        "dead ring names starved the real partition"
    );
}

/// D4: a parked consumer of a caught-up queue takes no pooled connection on
/// its re-polls, not even when the cached queue configuration expires: the
/// in-memory ring check comes before the queue lookup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caught_up_re_polls_take_no_connection_when_the_queue_cache_expires() {
    let broker = TestBroker::start_with(EngineConfig {
        hotlist_reseed: Duration::from_secs(600),
        ..EngineConfig::default()
    })
    .await;
    push(&broker, "quiet", "p", &[json!(1)]).await;
    assert!(pop_data(&broker, "/api/v1/pop/queue/quiet?autoAck=true")
        .await
        .is_some());
    assert!(pop_data(&broker, "/api/v1/pop/queue/quiet?autoAck=true")
        .await
        .is_none());
    let before = broker.engine.observe().pop_checkouts();
    // Longer than the 5 s the queue's configuration is cached.
    let reply = broker
        .client
        .get("/api/v1/pop/queue/quiet?autoAck=true&wait=true&timeout=6500")
        .await;
    assert_eq!(reply.status, 204);
    assert_eq!(
        broker.engine.observe().pop_checkouts() - before,
        0,
        "an empty re-poll of a caught-up queue took a pooled connection"
    );
}

/// D3: a discovery consumer parked on a caught-up namespace takes no pooled
/// connection on its re-polls (the queue list is cached while no push wakes
/// the discovery gate, and the ring check comes before any lookup).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_discovery_re_polls_take_no_connection() {
    let broker = TestBroker::start_with(EngineConfig {
        hotlist_reseed: Duration::from_secs(600),
        ..EngineConfig::default()
    })
    .await;
    configure(&broker, "disc.quiet", json!({"leaseTime": 30})).await;
    push(&broker, "disc.quiet", "p", &[json!(1)]).await;
    let path = "/api/v1/pop?namespace=disc&autoAck=true";
    assert!(pop_data(&broker, path).await.is_some());
    assert!(pop_data(&broker, path).await.is_none());
    let before = broker.engine.observe().pop_checkouts();
    let reply = broker
        .client
        .get("/api/v1/pop?namespace=disc&autoAck=true&wait=true&timeout=3000")
        .await;
    assert_eq!(reply.status, 204);
    assert_eq!(
        broker.engine.observe().pop_checkouts() - before,
        0,
        "a parked discovery pop's empty re-polls took pooled connections"
    );
}

/// D3: a lease expiring opens the discovery gate too, so a discovery consumer
/// parked behind it gets the message at the wheel's tick, not at its next
/// backoff re-poll (up to a second later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_expiry_wakes_a_parked_discovery_pop() {
    let broker = TestBroker::start().await;
    configure(&broker, "wheel.leased", json!({"leaseTime": 2})).await;
    push(&broker, "wheel.leased", "p", &[json!("again")]).await;
    // Leased and never acked: it comes back when the lease ends.
    let leased = pop(&broker, "/api/v1/pop?namespace=wheel").await;
    assert!(leased.is_some());
    let expires = Instant::now() + Duration::from_secs(2);
    let reply = broker
        .client
        .get("/api/v1/pop?namespace=wheel&wait=true&timeout=8000&autoAck=true")
        .await;
    let late = Instant::now().saturating_duration_since(expires);
    expect_status(&reply, 200);
    assert!(
        late < Duration::from_millis(400),
        "the redelivery reached the parked discovery pop {late:?} after the lease ended"
    );
}

/// D6: a batch that ends where a delayedProcessing tail is still hidden says
/// when that tail becomes visible, so an autoAck consumer gets it then,
/// instead of the partition leaving the hot-list until the next reseed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_delayed_tail_is_revisited_when_it_becomes_visible() {
    let broker = TestBroker::start().await;
    configure(&broker, "tail", json!({"delayedProcessing": 1})).await;
    push(&broker, "tail", "p", &[json!("old")]).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    push(&broker, "tail", "p", &[json!("young")]).await;
    let pushed = Instant::now();
    let got = pop_data(&broker, "/api/v1/pop/queue/tail?batch=10&autoAck=true").await;
    assert_eq!(
        got,
        Some(vec![json!("old")]),
        "the hidden message was delivered early"
    );
    let got = pop_data(
        &broker,
        "/api/v1/pop/queue/tail?batch=10&autoAck=true&wait=true&timeout=8000",
    )
    .await;
    assert_eq!(got, Some(vec![json!("young")]));
    assert!(
        pushed.elapsed() < Duration::from_millis(1600),
        "the tail came {:?} after its push (visible after 1 s)",
        pushed.elapsed()
    );
}

/// D2: a partition hidden by delayedProcessing is revisited without skipping
/// the windowBuffer debounce: a push through another broker in between (which
/// this broker's ring never hears of) keeps the partition from being quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_processing_revisit_keeps_the_window_debounce() {
    let a = TestBroker::start().await;
    let b = TestBroker::serve(a.db.clone(), EngineConfig::default()).await;
    configure(
        &a,
        "both",
        json!({"windowBuffer": 1, "delayedProcessing": 3}),
    )
    .await;
    push(&a, "both", "p", &[json!("first")]).await;
    let start = Instant::now();
    // Quiet for 1 s, but still hidden by the 3 s delay: a's ring schedules a
    // revisit for when it shows.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let path = "/api/v1/pop/queue/both?batch=10&autoAck=true";
    assert_eq!(pop_data(&a, path).await, None);
    // 2.6 s in, b takes a push a's ring never hears of.
    tokio::time::sleep_until((start + Duration::from_millis(2600)).into()).await;
    push(&b, "both", "p", &[json!("second")]).await;
    // 3.2 s in, the first message is visible, but the partition received a
    // segment 0.6 s ago: windowBuffer says deliver nothing at all.
    tokio::time::sleep_until((start + Duration::from_millis(3200)).into()).await;
    assert_eq!(
        pop_data(&a, path).await,
        None,
        "a partition that is not quiet was delivered"
    );
}

/// D9: on the SQL path (`QUEEN_HOTLIST=0`) a pop woken by a push first tries
/// the partition the push named: one round trip that claims it, where the
/// probe and the candidate scan take two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_sql_path_pop_tries_the_pushed_partition_first() {
    let broker = TestBroker::start_with(EngineConfig {
        hotlist: false,
        // No timer re-poll during the test: only the wake runs an attempt.
        pop_wait: queen_engine::PopWait {
            initial: Duration::from_secs(60),
            max: Duration::from_secs(60),
            ..queen_engine::PopWait::default()
        },
        ..EngineConfig::default()
    })
    .await;
    let items = (0..100)
        .map(|i| json!({"queue": "hinted", "partition": format!("p{i}"), "payload": i}))
        .collect();
    push_items(&broker, items).await;
    let mut drained = 0;
    while let Some(data) = pop_data(
        &broker,
        "/api/v1/pop/queue/hinted?autoAck=true&batch=100&maxPartitions=100",
    )
    .await
    {
        drained += data.len();
    }
    assert_eq!(drained, 100);

    let client = broker.client.clone();
    let parked = tokio::spawn(async move {
        client
            .get("/api/v1/pop/queue/hinted?autoAck=true&batch=10&wait=true&timeout=20000")
            .await
    });
    while broker.engine.observe().pops_in_progress() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let its first attempt find nothing and park.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = broker.engine.observe().pop_checkouts();
    push(&broker, "hinted", "p42", &[json!("late")]).await;
    let reply = parked.await.unwrap();
    expect_status(&reply, 200);
    let popped = reply.json();
    assert_eq!(popped["messages"][0]["partition"], "p42");
    assert_eq!(popped["messages"][0]["data"], "late");
    assert_eq!(
        broker.engine.observe().pop_checkouts() - before,
        1,
        "the woken pop did not go straight to the hinted partition"
    );
    broker.stop().await;
}

/// D8: a pop never waits on the elected seeder. While one chunk of the bulk
/// seed is open (its transaction held here), a pop of the same group creates
/// no cursor behind it and waits for nothing: the partitions the chunk holds
/// answer "busy" for a moment. Once it commits, the pop delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_never_waits_for_the_bulk_seed() {
    let broker = TestBroker::start().await;
    push(&broker, "seeding", "a", &[json!("a")]).await;
    let seeder = broker.sql().await;
    let elected: bool = seeder
        .query_one(
            "SELECT queen.log_group_first_contact_v1(q.id, 'g', 'all', NULL) \
             FROM queen.queues q WHERE q.name = 'seeding'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(elected);
    seeder.batch_execute("BEGIN").await.unwrap();
    let after: Option<String> = seeder
        .query_one(
            "SELECT queen.log_seed_cursors_v1(q.id, 'g', 'all', NULL, NULL, 256) \
             FROM queen.queues q WHERE q.name = 'seeding'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // One partition, fewer than a chunk: the last chunk.
    assert_eq!(after, None);
    for path in [
        "/api/v1/pop/queue/seeding?consumerGroup=g&autoAck=true",
        "/api/v1/pop/queue/seeding/partition/a?consumerGroup=g&autoAck=true",
    ] {
        let reply = tokio::time::timeout(Duration::from_secs(5), broker.client.get(path))
            .await
            .unwrap_or_else(|_| panic!("{path} waited on the seeder's open transaction"));
        assert_eq!(reply.status, 204, "{path}");
    }
    seeder.batch_execute("COMMIT").await.unwrap();
    let data = pop_data(
        &broker,
        "/api/v1/pop/queue/seeding?consumerGroup=g&autoAck=true&wait=true&timeout=5000",
    )
    .await;
    assert_eq!(data, Some(vec![json!("a")]));
    broker.stop().await;
}

/// D8: the bulk seed (the SQL candidate path's first contact; the hot-list
/// path seeds each cursor when it first touches its partition, see
/// wide_queues.rs) runs chunk by chunk and still seeds every partition of a
/// queue larger than one chunk, each where the subscription says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chunked_bulk_seed_covers_every_partition() {
    let broker = TestBroker::start_with(hotlist_config(false)).await;
    // More than one chunk (1,024 partitions).
    let items = (0..1100)
        .map(|i| json!({"queue": "wide", "partition": format!("p{i:04}"), "payload": i}))
        .collect();
    push_items(&broker, items).await;
    assert!(pop_data(
        &broker,
        "/api/v1/pop/queue/wide?consumerGroup=fresh&subscriptionMode=new&autoAck=true"
    )
    .await
    .is_none());
    let sql = broker.sql().await;
    let seeded = select_i64(
        &sql,
        "SELECT count(*) FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id \
         WHERE c.consumer_group = 'fresh' AND c.committed = p.last_offset",
    )
    .await;
    assert_eq!(
        seeded, 1100,
        "every cursor seeded at the end by the first contact"
    );
    broker.stop().await;
}

/// E: a leased batch locks its partition for the group until the ack, so the
/// ring holds the name back instead of sending every other consumer to SQL
/// to be told "leased"; the ack brings it back at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_partition_sends_no_other_pop_to_sql_until_its_ack() {
    let broker = TestBroker::start().await;
    push(&broker, "held", "p", &[json!(1), json!(2)]).await;
    let first = pop(&broker, "/api/v1/pop/queue/held?batch=1")
        .await
        .expect("the first message");
    let before = broker.engine.observe().pop_checkouts();
    for _ in 0..5 {
        assert!(pop(&broker, "/api/v1/pop/queue/held?batch=1")
            .await
            .is_none());
    }
    assert_eq!(
        broker.engine.observe().pop_checkouts() - before,
        0,
        "pops of a leased partition went to SQL"
    );
    crate::support::ack_all(&broker, &first, "completed", None).await;
    let second = pop(&broker, "/api/v1/pop/queue/held?batch=1")
        .await
        .expect("the ack hands the partition back");
    assert_eq!(crate::support::data(&second), [json!(2)]);
    broker.stop().await;
}

/// The pool warm-up runs the push, first contact, pop and ack statements on
/// several sessions and leaves nothing behind: every row it wrote was in a
/// transaction that rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_warm_up_warms_distinct_sessions_and_leaves_nothing_behind() {
    let broker = TestBroker::start().await;
    assert_eq!(broker.engine.warm_up(4).await, 4);
    let sql = broker.sql().await;
    for table in [
        "queen.queues",
        "queen.log_partitions",
        "queen.log_segments",
        "queen.log_txns",
        "queen.log_consumers",
        "queen.consumer_groups_metadata",
    ] {
        assert_eq!(
            select_i64(&sql, &format!("SELECT count(*) FROM {table}")).await,
            0,
            "the warm-up left rows in {table}"
        );
    }
    assert!(
        select_i64(
            &sql,
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name = 'queen'",
        )
        .await
            >= 4,
        "the warm-up did not open four sessions"
    );
    // The broker works as before on the warmed sessions.
    push(&broker, "after-warm-up", "p", &[json!(1)]).await;
    assert_eq!(
        pop_data(&broker, "/api/v1/pop/queue/after-warm-up?autoAck=true").await,
        Some(vec![json!(1)])
    );
    broker.stop().await;
}

/// D8: extending a lease this broker's registry does not know (it was
/// popped through another broker, or before a restart) finds the lease's
/// rows through an index, not by reading every cursor of every queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_extend_without_the_registry_reads_only_the_leased_rows() {
    let broker = TestBroker::start().await;
    let items = (0..2000)
        .map(|i| json!({"queue": "many", "partition": format!("p{i}"), "payload": i}))
        .collect();
    push_items(&broker, items).await;
    // A cursor on every partition (as once the group has taken from each).
    broker
        .sql()
        .await
        .batch_execute(
            "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed) \
             SELECT id, '__QUEUE_MODE__', -1 FROM queen.log_partitions",
        )
        .await
        .unwrap();
    let popped = pop(&broker, "/api/v1/pop/queue/many?batch=1")
        .await
        .expect("a leased message");
    let lease = popped["messages"][0]["leaseId"]
        .as_str()
        .unwrap()
        .to_owned();
    let cursors = select_i64(
        &broker.sql().await,
        "SELECT count(*) FROM queen.log_consumers",
    )
    .await;
    assert_eq!(cursors, 2000);
    // A session of its own: PostgreSQL 15 keeps a session's unflushed table
    // counts in its xact view, so the count above would show up here.
    let sql = broker.sql().await;
    let read = rows_read_by(
        &sql,
        &format!("SELECT * FROM queen.log_lease_extend_v1('{lease}', 30, NULL)"),
    )
    .await;
    assert!(read <= 4, "the fallback lease extend read {read} rows");
    broker.stop().await;
}

/// Issue 14, item 3: pops of random queue names (which clients choose) used
/// to leave a wake gate each, forever, and a cached "no such queue" each
/// until the 65,536 cap (20,000 pops of random names: 8 MB to 52 MB RSS,
/// never returned). The gates now hold about what is live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pops_of_random_queue_names_leave_bounded_state() {
    let broker = TestBroker::start().await;
    let filler = "n".repeat(200);
    for i in 0..3_000 {
        let reply = broker
            .client
            .get(&format!("/api/v1/pop/queue/{filler}{i}"))
            .await;
        assert_eq!(reply.status, 204);
    }
    // Every pop ended, so every gate is idle: swept whenever the map doubles.
    // (The queue cache's sweep depends on time; queue_cache.rs tests it with
    // a paused clock.)
    let memory = broker.engine.observe().memory_stats();
    assert!(memory.wake_gates <= 2_048, "{memory:?}");
}

/// A pop whose future is dropped while its statement runs (the client went
/// away) gives the partitions it took from the hot-list ring back: the next
/// pop finds the one it did not claim at once, not at the next reseed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_cancelled_mid_statement_gives_its_partitions_back_to_the_ring() {
    let broker = TestBroker::start_with(EngineConfig {
        hotlist_reseed: Duration::from_secs(600),
        ..EngineConfig::default()
    })
    .await;
    let request = |batch: usize| queen_engine::PopRequest {
        tenant: queen_engine::naming::default_tenant(),
        target: queen_engine::PopTarget::Queue {
            queue: "cancelled".to_owned(),
        },
        group: queen_engine::QUEUE_MODE_GROUP.to_owned(),
        batch,
        max_partitions: 1,
        wait: false,
        timeout: Duration::ZERO,
        auto_ack: false,
        subscription_mode: queen_engine::SubscriptionMode::All,
        subscription_from: None,
    };
    // First contact makes the ring; the pushes then mark both partitions.
    push(&broker, "cancelled", "seed", &[json!("seed")]).await;
    let seed = broker.engine.pop(request(1)).await.unwrap();
    assert_eq!(seed.messages.len(), 1);
    push(&broker, "cancelled", "a", &[json!("a")]).await;
    push(&broker, "cancelled", "b", &[json!("b")]).await;

    // The next pop's statement stalls on the segments table; its caller
    // gives up, dropping the future, before the statement ends.
    let holder = broker.sql().await;
    holder
        .batch_execute("BEGIN; LOCK TABLE queen.log_segments IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let dropped =
        tokio::time::timeout(Duration::from_millis(500), broker.engine.pop(request(1))).await;
    assert!(dropped.is_err(), "the pop was meant to stall: {dropped:?}");
    holder.batch_execute("COMMIT").await.unwrap();
    // The abandoned statement claims one partition when it ends.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let next = broker.engine.pop(request(1)).await.unwrap();
    assert_eq!(
        next.messages.len(),
        1,
        "the partition the cancelled pop did not claim is out of the ring"
    );
    broker.stop().await;
}
