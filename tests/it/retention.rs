//! Retention (issue 15, item 1): whole-segment prefixes go when older than
//! `retentionSeconds`, or consumed by every group and older than
//! `completedRetentionSeconds`, with `log_start` and `oldest_live_at` moving
//! in the same transaction; pops continue past the gap; the sidecar is
//! purged on its own clock; one broker sweeps at a time; a step's reads
//! scale with deletable work, not with the partition count.

use std::time::Duration;

use queen_engine::EngineConfig;
use queen_tests::TestBroker;
use serde_json::json;

use crate::support::{configure, data, pop, push, push_items, select_i64};

/// A broker whose retention runs only when the test asks.
async fn broker() -> TestBroker {
    TestBroker::start_with(EngineConfig {
        retention_interval: None,
        ..EngineConfig::default()
    })
    .await
}

/// Push `n` messages to `queue`/`p`, one request (so one segment) each.
async fn push_each(broker: &TestBroker, queue: &str, from: i64, n: i64) {
    for i in from..from + n {
        push(broker, queue, "p", &[json!(i)]).await;
    }
}

/// (segments, log_start, oldest_live_at is the first live segment's
/// created_at) of `queue`'s partition `p`.
async fn partition_state(broker: &TestBroker, queue: &str) -> (i64, i64, bool) {
    let sql = broker.sql().await;
    let row = sql
        .query_one(
            "SELECT (SELECT count(*) FROM queen.log_segments s WHERE s.partition_id = p.id),
                    p.log_start,
                    p.oldest_live_at IS NOT DISTINCT FROM
                      (SELECT s.created_at FROM queen.log_segments s
                        WHERE s.partition_id = p.id ORDER BY s.base_offset LIMIT 1)
               FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
              WHERE q.name = $1 AND p.name = 'p'",
            &[&queue],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_retention_deletes_an_old_prefix_and_pops_continue_past_the_gap() {
    let broker = broker().await;
    configure(
        &broker,
        "ret",
        json!({"retentionEnabled": true, "retentionSeconds": 1}),
    )
    .await;
    configure(
        &broker,
        "kept",
        json!({"retentionEnabled": false, "retentionSeconds": 1}),
    )
    .await;
    push_each(&broker, "ret", 0, 3).await;
    push_each(&broker, "kept", 0, 3).await;
    // A group whose cursor will sit inside the deleted prefix.
    let first = pop(
        &broker,
        "/api/v1/pop/queue/ret?consumerGroup=g&autoAck=true&batch=1",
    )
    .await
    .unwrap();
    assert_eq!(data(&first), [json!(0)]);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    push_each(&broker, "ret", 3, 1).await;

    let removed = broker.engine.retention_pass().await.unwrap();
    assert_eq!((removed.segments, removed.messages), (3, 3), "{removed:?}");
    assert_eq!(partition_state(&broker, "ret").await, (1, 3, true));
    assert_eq!(partition_state(&broker, "kept").await, (3, 0, true));
    // Nothing left to do: a second pass removes nothing.
    assert_eq!(broker.engine.retention_pass().await.unwrap().segments, 0);

    // The group continues at the next live offset; a new reader starts there.
    let next = pop(
        &broker,
        "/api/v1/pop/queue/ret?consumerGroup=g&autoAck=true",
    )
    .await
    .unwrap();
    assert_eq!(data(&next), [json!(3)]);
    let fresh = pop(&broker, "/api/v1/pop/queue/ret?autoAck=true")
        .await
        .unwrap();
    assert_eq!(data(&fresh), [json!(3)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_retention_deletes_only_what_every_group_consumed() {
    let broker = broker().await;
    configure(
        &broker,
        "done",
        json!({"retentionEnabled": true, "completedRetentionSeconds": 1}),
    )
    .await;
    push_each(&broker, "done", 0, 4).await;
    // Queue mode consumed three, group "slow" one.
    let queue_mode = pop(&broker, "/api/v1/pop/queue/done?autoAck=true&batch=3")
        .await
        .unwrap();
    assert_eq!(data(&queue_mode).len(), 3);
    let slow = pop(
        &broker,
        "/api/v1/pop/queue/done?consumerGroup=slow&autoAck=true&batch=1",
    )
    .await
    .unwrap();
    assert_eq!(data(&slow), [json!(0)]);
    tokio::time::sleep(Duration::from_millis(1_200)).await;

    let removed = broker.engine.retention_pass().await.unwrap();
    assert_eq!(removed.segments, 1, "only offset 0 is consumed by both");
    assert_eq!(partition_state(&broker, "done").await, (3, 1, true));
    // "slow" catches up to offset 2: two more go.
    let more = pop(
        &broker,
        "/api/v1/pop/queue/done?consumerGroup=slow&autoAck=true&batch=2",
    )
    .await
    .unwrap();
    assert_eq!(data(&more), [json!(1), json!(2)]);
    assert_eq!(broker.engine.retention_pass().await.unwrap().segments, 2);
    assert_eq!(partition_state(&broker, "done").await, (1, 3, true));
}

/// A group registered on the queue with no cursor on a partition yet (a
/// cursor appears when the group first touches it) counts where its cursor
/// would start: a 'new' group has passed what came before it subscribed, an
/// 'all' group nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_without_a_cursor_counts_where_its_cursor_would_start() {
    let broker = broker().await;
    configure(
        &broker,
        "done",
        json!({"retentionEnabled": true, "completedRetentionSeconds": 1}),
    )
    .await;
    push_each(&broker, "done", 0, 3).await;
    // Subscribed after the three: nothing for it, and no cursor made.
    assert!(pop(
        &broker,
        "/api/v1/pop/queue/done?consumerGroup=late&subscriptionMode=new&autoAck=true"
    )
    .await
    .is_none());
    let cursors = select_i64(
        &broker.sql().await,
        "SELECT count(*) FROM queen.log_consumers WHERE consumer_group = 'late'",
    )
    .await;
    assert_eq!(cursors, 0);
    let all = pop(&broker, "/api/v1/pop/queue/done?autoAck=true&batch=3")
        .await
        .unwrap();
    assert_eq!(data(&all).len(), 3);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    // Queue mode consumed all three and "late" never wanted them.
    assert_eq!(broker.engine.retention_pass().await.unwrap().segments, 3);
    assert_eq!(partition_state(&broker, "done").await, (0, 3, true));

    // An 'all' group registered with no cursor here has consumed nothing.
    push_each(&broker, "done", 3, 1).await;
    broker
        .sql()
        .await
        .batch_execute(
            "INSERT INTO queen.consumer_groups_metadata (consumer_group, queue_id, subscription_mode) \
             SELECT 'everything', id, 'all' FROM queen.queues WHERE name = 'done'",
        )
        .await
        .unwrap();
    let all = pop(&broker, "/api/v1/pop/queue/done?autoAck=true")
        .await
        .unwrap();
    assert_eq!(data(&all), [json!(3)]);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(broker.engine.retention_pass().await.unwrap().segments, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sidecar_is_purged_on_its_own_clock_whatever_the_retention() {
    let broker = broker().await;
    // Retention is off for this queue: segments stay, the sidecar does not.
    for i in 0..3 {
        push_items(
            &broker,
            vec![
                json!({"queue": "side", "partition": "p", "transactionId": format!("t{i}"),
                        "payload": i}),
            ],
        )
        .await;
    }
    let sql = broker.sql().await;
    // Two rows an hour old (past max(dedup window, 900 s)).
    // (Backdated in UTC: an immutable expression, which Citus takes in an
    // UPDATE; `created_at - interval` it refuses.)
    sql.batch_execute(
        "UPDATE queen.log_txns SET created_at = timezone('UTC', timezone('UTC', created_at) - interval '1 hour')
          WHERE base_offset < 2;
         UPDATE queen.log_partitions SET oldest_txn_at = timezone('UTC', timezone('UTC', oldest_txn_at) - interval '1 hour');",
    )
    .await
    .unwrap();
    let removed = broker.engine.retention_pass().await.unwrap();
    assert_eq!((removed.txn_rows, removed.segments), (2, 0));
    let row = sql
        .query_one(
            "SELECT p.txns_start, p.oldest_txn_at = t.created_at,
                    (SELECT count(*) FROM queen.log_txns x WHERE x.partition_id = p.id),
                    (SELECT count(*) FROM queen.log_segments s WHERE s.partition_id = p.id)
               FROM queen.log_partitions p
               JOIN queen.log_txns t ON t.partition_id = p.id AND t.base_offset = 2",
            &[],
        )
        .await
        .unwrap();
    let state: (i64, bool, i64, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(state, (2, true, 1, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_one_session_sweeps_at_a_time() {
    let broker = broker().await;
    configure(
        &broker,
        "locked",
        json!({"retentionEnabled": true, "retentionSeconds": 1}),
    )
    .await;
    push_each(&broker, "locked", 0, 2).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let holder = broker.sql().await;
    holder
        .execute("SELECT pg_advisory_lock(5860666654061643092)", &[])
        .await
        .unwrap();
    let held_off = broker.engine.retention_pass().await.unwrap();
    assert_eq!(held_off.segments, 0);
    holder
        .execute("SELECT pg_advisory_unlock(5860666654061643092)", &[])
        .await
        .unwrap();
    assert_eq!(broker.engine.retention_pass().await.unwrap().segments, 2);
}

/// Rows one step read from the log tables, in one transaction of a fresh
/// session: (sequential tuples read, index tuples fetched), summed over
/// log_partitions, log_segments and log_txns.
async fn reads_of_one_step(broker: &TestBroker) -> (i64, i64) {
    let sql = broker.sql().await;
    sql.batch_execute("BEGIN").await.unwrap();
    sql.query_one("SELECT * FROM queen.log_retention_step_v1(256, 1024)", &[])
        .await
        .unwrap();
    let row = sql
        .query_one(
            "SELECT coalesce(sum(seq_tup_read), 0)::bigint,
                    coalesce(sum(idx_tup_fetch), 0)::bigint
               FROM pg_stat_xact_user_tables
              WHERE schemaname = 'queen'
                AND relname IN ('log_partitions', 'log_segments', 'log_txns')",
            &[],
        )
        .await
        .unwrap();
    sql.batch_execute("COMMIT").await.unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_reads_what_it_deletes_not_the_partition_count() {
    let broker = broker().await;
    configure(
        &broker,
        "wide",
        json!({"retentionEnabled": true, "retentionSeconds": 3600}),
    )
    .await;
    let items: Vec<_> = (0..10_000)
        .map(|i| json!({"queue": "wide", "partition": format!("p{i}"), "payload": i}))
        .collect();
    push_items(&broker, items).await;
    let sql = broker.sql().await;
    assert_eq!(
        select_i64(&sql, "SELECT count(*) FROM queen.log_segments").await,
        10_000
    );
    // Nothing deletable among 10,000 partitions: the work-list scans find
    // nothing and read (next to) nothing.
    let (seq, idx) = reads_of_one_step(&broker).await;
    assert_eq!(seq, 0, "a sequential scan of the log tables");
    assert!(idx < 20, "{idx} index tuples for no work");
    // Ten partitions made an hour old: the step deletes them, reading in
    // proportion to them.
    sql.batch_execute(
        "WITH ten AS (SELECT id FROM queen.log_partitions WHERE name <> 'Default' ORDER BY name LIMIT 10)
         UPDATE queen.log_segments s SET created_at = timezone('UTC', timezone('UTC', created_at) - interval '2 hours')
           FROM ten WHERE s.partition_id = ten.id;
         WITH ten AS (SELECT id FROM queen.log_partitions WHERE name <> 'Default' ORDER BY name LIMIT 10)
         UPDATE queen.log_partitions p SET oldest_live_at = timezone('UTC', timezone('UTC', oldest_live_at) - interval '2 hours')
           FROM ten WHERE p.id = ten.id;",
    )
    .await
    .unwrap();
    let (seq, idx) = reads_of_one_step(&broker).await;
    assert_eq!(seq, 0);
    assert!(idx < 10 * 10, "{idx} index tuples for 10 partitions");
    assert_eq!(
        select_i64(&sql, "SELECT count(*) FROM queen.log_segments").await,
        9_990
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_runs_every_retention_interval_by_itself() {
    let broker = TestBroker::start_with(EngineConfig {
        retention_interval: Some(Duration::from_millis(200)),
        ..EngineConfig::default()
    })
    .await;
    configure(
        &broker,
        "auto",
        json!({"retentionEnabled": true, "retentionSeconds": 1}),
    )
    .await;
    push_each(&broker, "auto", 0, 3).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while broker.engine.observe().retention_stats().segments < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the loop never swept"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(partition_state(&broker, "auto").await.0, 0);
    assert!(pop(&broker, "/api/v1/pop/queue/auto?autoAck=true")
        .await
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_removes_what_no_group_consumed_in_time_whatever_the_retention() {
    let broker = broker().await;
    configure(&broker, "evict", json!({"maxWaitTimeSeconds": 1})).await;
    configure(&broker, "patient", json!({})).await;
    push_each(&broker, "evict", 0, 2).await;
    push_each(&broker, "patient", 0, 2).await;
    let first = pop(
        &broker,
        "/api/v1/pop/queue/evict?consumerGroup=g&autoAck=true&batch=1",
    )
    .await
    .unwrap();
    assert_eq!(data(&first), [json!(0)]);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    push_each(&broker, "evict", 2, 1).await;
    // Retention is off for both queues: it removes nothing.
    assert_eq!(broker.engine.retention_pass().await.unwrap().segments, 0);
    let evicted = broker.engine.eviction_pass().await.unwrap();
    assert_eq!(
        (evicted.evicted_segments, evicted.evicted_messages),
        (2, 2),
        "{evicted:?}"
    );
    assert_eq!(partition_state(&broker, "evict").await, (1, 2, true));
    assert_eq!(partition_state(&broker, "patient").await, (2, 0, true));
    // The group whose cursor sat inside the evicted prefix continues at the
    // next live offset.
    let next = pop(
        &broker,
        "/api/v1/pop/queue/evict?consumerGroup=g&autoAck=true",
    )
    .await
    .unwrap();
    assert_eq!(data(&next), [json!(2)]);
    assert_eq!(
        broker.engine.observe().retention_stats().evicted_messages,
        2
    );
}

/// A broker that removes empty partitions idle for a second, on demand.
async fn cleaning_broker() -> TestBroker {
    TestBroker::start_with(EngineConfig {
        retention_interval: None,
        eviction_interval: None,
        partition_idle: Some(Duration::from_secs(1)),
        ..EngineConfig::default()
    })
    .await
}

/// Names of `queue`'s partitions, sorted.
async fn partitions_of(broker: &TestBroker, queue: &str) -> Vec<String> {
    let sql = broker.sql().await;
    sql.query(
        "SELECT p.name FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
          WHERE q.name = $1 ORDER BY p.name",
        &[&queue],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| row.get(0))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_idle_partitions_without_dead_letters_are_removed() {
    let broker = cleaning_broker().await;
    configure(
        &broker,
        "clean",
        json!({"retentionEnabled": true, "retentionSeconds": 1}),
    )
    .await;
    for partition in ["gone", "dead"] {
        push(&broker, "clean", partition, &[json!(partition)]).await;
    }
    // "dead" keeps a dead letter.
    let popped = pop(&broker, "/api/v1/pop/queue/clean/partition/dead")
        .await
        .unwrap();
    crate::support::ack_all(&broker, &popped, "dlq", None).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    push(&broker, "clean", "busy", &[json!("busy")]).await;

    let removed = broker.engine.retention_pass().await.unwrap();
    // "gone" (emptied by retention) and the configured "Default" (never
    // written) go; "dead" holds a dead letter, "busy" a message.
    assert_eq!(removed.partitions_removed, 2, "{removed:?}");
    assert_eq!(partitions_of(&broker, "clean").await, ["busy", "dead"]);
    let sql = broker.sql().await;
    assert_eq!(
        select_i64(
            &sql,
            "SELECT count(*) FROM queen.log_txns t
              WHERE NOT EXISTS (SELECT 1 FROM queen.log_partitions p WHERE p.id = t.partition_id)"
        )
        .await,
        0,
        "sidecar rows outlived their partition"
    );
    // The name can be pushed to again.
    push(&broker, "clean", "gone", &[json!("again")]).await;
    let again = pop(
        &broker,
        "/api/v1/pop/queue/clean/partition/gone?autoAck=true",
    )
    .await
    .unwrap();
    assert_eq!(data(&again), [json!("again")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_and_a_push_to_the_same_partition_never_lose_the_push() {
    // Cleanup runs only by hand here, in transactions the test holds open.
    let broker = broker().await;
    configure(
        &broker,
        "race",
        json!({"retentionEnabled": true, "retentionSeconds": 1}),
    )
    .await;
    push(&broker, "race", "p", &[json!(0)]).await;
    push(&broker, "race", "held", &[json!(0)]).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(broker.engine.retention_pass().await.unwrap().segments, 2);

    // A push holding the partition's row lock keeps it: cleanup skips it.
    let pusher = broker.sql().await;
    pusher.batch_execute("BEGIN").await.unwrap();
    pusher
        .execute(
            "SELECT 1 FROM queen.log_partitions WHERE name = 'held' FOR UPDATE",
            &[],
        )
        .await
        .unwrap();
    let cleaner = broker.sql().await;
    cleaner.batch_execute("BEGIN").await.unwrap();
    let removed: i32 = cleaner
        .query_one("SELECT queen.log_partition_cleanup_step_v1(1, 100)", &[])
        .await
        .unwrap()
        .get(0);
    // "p" and "Default" go; "held" is locked.
    assert_eq!(removed, 2);
    pusher.batch_execute("COMMIT").await.unwrap();

    // A push to "p" while the cleanup that deleted it has not committed
    // waits for it, then creates the partition again: nothing is lost.
    let old_id: uuid::Uuid = broker
        .sql()
        .await
        .query_one("SELECT id FROM queen.log_partitions WHERE name = 'p'", &[])
        .await
        .unwrap()
        .get(0);
    let client = broker.client.clone();
    let racing = tokio::spawn(async move {
        client
            .post_json(
                "/api/v1/push",
                &json!({"items": [{"queue": "race", "partition": "p", "payload": "late"}]}),
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !racing.is_finished(),
        "the push did not wait for the cleanup"
    );
    cleaner.batch_execute("COMMIT").await.unwrap();
    let reply = racing.await.unwrap();
    assert_eq!(reply.status, 201);
    let popped = pop(&broker, "/api/v1/pop/queue/race/partition/p?autoAck=true")
        .await
        .unwrap();
    assert_eq!(data(&popped), [json!("late")]);
    let new_id = popped["messages"][0]["partitionId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Created again under its derived id, which is the old one; its offsets
    // go on above the old ones (tests/it/partition_ids.rs).
    assert_eq!(new_id, old_id.to_string());
    assert_eq!(
        select_i64(
            &broker.sql().await,
            "SELECT log_start FROM queen.log_partitions WHERE name = 'p'"
        )
        .await,
        1
    );
    assert_eq!(partitions_of(&broker, "race").await, ["held", "p"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pass_goes_on_past_a_full_step_of_partitions() {
    // A step takes 32 partitions; 40 are due, and one pass removes them all
    // (a step that filled its list says there may be more).
    let broker = broker().await;
    configure(
        &broker,
        "many",
        json!({"retentionEnabled": true, "retentionSeconds": 1}),
    )
    .await;
    let items: Vec<_> = (0..40)
        .map(|i| json!({"queue": "many", "partition": format!("p{i}"), "payload": i}))
        .collect();
    push_items(&broker, items).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(broker.engine.retention_pass().await.unwrap().segments, 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_skips_a_partition_whose_cursor_is_held() {
    // Filing a dead letter locks the cursor row, then inserts the letter:
    // cleanup must not delete the partition under it.
    let broker = broker().await;
    configure(
        &broker,
        "filing",
        json!({"retentionEnabled": true, "retentionSeconds": 1}),
    )
    .await;
    push(&broker, "filing", "p", &[json!(0)]).await;
    pop(&broker, "/api/v1/pop/queue/filing?autoAck=true")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(broker.engine.retention_pass().await.unwrap().segments, 1);
    let filer = broker.sql().await;
    filer.batch_execute("BEGIN").await.unwrap();
    filer
        .execute(
            "SELECT 1 FROM queen.log_consumers c JOIN queen.log_partitions p
                 ON p.id = c.partition_id
              WHERE p.name = 'p' FOR UPDATE OF c",
            &[],
        )
        .await
        .unwrap();
    let cleaner = broker.sql().await;
    let removed: i32 = tokio::time::timeout(
        Duration::from_secs(5),
        cleaner.query_one("SELECT queen.log_partition_cleanup_step_v1(1, 100)", &[]),
    )
    .await
    .expect("cleanup waited on a held cursor")
    .unwrap()
    .get(0);
    // Only the never-written Default went.
    assert_eq!(removed, 1);
    assert_eq!(partitions_of(&broker, "filing").await, ["p"]);
    filer.batch_execute("COMMIT").await.unwrap();
    let removed: i32 = cleaner
        .query_one("SELECT queen.log_partition_cleanup_step_v1(1, 100)", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(removed, 1);
}
