//! The admin views' kept figures (`sql/schema/010_figures.sql`): the
//! per-queue counts they read (`figures_queue_counts_v1`) equal the scan of
//! every partition (`admin_partition_stats_v2`, summed per queue), and the
//! consumer groups' (`figures_group_counts_v1`, `figures_lagging_v1`) the
//! scan of every cursor (`consumer_group_cursors_v1`), after every step of a
//! mixed workload, folded or not, during and after the build pass of a
//! database populated before the figures existed.

use std::time::Duration;

use queen_engine::EngineConfig;
use queen_tests::TestBroker;
use serde_json::{json, Value};

use crate::support::{ack_all, configure, expect_status, messages, pop, push};

/// The counts of the kept figures and of the scan, as JSON text, read in one
/// statement (one snapshot).
const COMPARE: &str = "
WITH kept AS (
    SELECT a.o_queue_id AS queue, a.o_partitions AS partitions, a.o_total AS total,
           a.o_pending AS pending, a.o_processing AS processing, a.o_completed AS completed,
           a.o_failed AS failed, a.o_dead AS dead, a.o_leases AS leases,
           a.o_leased_partitions AS leased, a.o_lease_batch AS batch, a.o_lease_acked AS acked
      FROM queen.figures_queue_counts_v1('default', NULL, NULL, NULL) a
), scan AS (
    SELECT a.o_queue_id AS queue, count(*)::bigint AS partitions, sum(a.o_total)::bigint AS total,
           sum(a.o_pending)::bigint AS pending, sum(a.o_processing)::bigint AS processing,
           sum(a.o_completed)::bigint AS completed, sum(a.o_failed)::bigint AS failed,
           sum(a.o_dead_letter)::bigint AS dead, sum(a.o_leases)::bigint AS leases,
           count(*) FILTER (WHERE a.o_leases > 0)::bigint AS leased,
           sum(a.o_lease_batch)::bigint AS batch, sum(a.o_lease_acked)::bigint AS acked
      FROM queen.admin_partition_stats_v2('default', NULL, NULL, NULL) a
     GROUP BY a.o_queue_id
)
SELECT COALESCE((SELECT jsonb_agg(to_jsonb(k) ORDER BY k.queue) FROM kept k), '[]')::text,
       COALESCE((SELECT jsonb_agg(to_jsonb(s) ORDER BY s.queue) FROM scan s), '[]')::text";

/// The consumer groups' kept figures and their scan (every cursor,
/// `consumer_group_cursors_v1`), in one statement: per (queue, group) the
/// cursors, leases, lagging cursors and lag, then each lagging cursor with
/// its lag and when its oldest unconsumed message was written.
const COMPARE_GROUPS: &str = "
WITH kept AS (
    SELECT g.o_queue AS queue, g.o_group AS grp, g.o_cursors AS cursors, g.o_leases AS leases,
           g.o_lagging AS lagging, g.o_lag AS lag
      FROM queen.figures_group_counts_v1('default') g
), scan AS (
    SELECT c.o_queue AS queue, c.o_group AS grp, count(*)::bigint AS cursors,
           count(*) FILTER (WHERE c.o_lease_active)::bigint AS leases,
           count(*) FILTER (WHERE c.o_offset_lag > 0)::bigint AS lagging,
           COALESCE(sum(c.o_offset_lag), 0)::bigint AS lag
      FROM queen.consumer_group_cursors_v1('default', NULL, NULL) c
     GROUP BY 1, 2
), kept_lagging AS (
    SELECT l.o_partition_id AS pid, l.o_group AS grp, l.o_lag AS lag, l.o_oldest_at AS oldest
      FROM queen.figures_lagging_v1('default') l
), scan_lagging AS (
    SELECT c.o_partition_id AS pid, c.o_group AS grp, c.o_offset_lag AS lag,
           c.o_oldest_unconsumed_at AS oldest
      FROM queen.consumer_group_cursors_v1('default', NULL, NULL) c
     WHERE c.o_offset_lag > 0
)
SELECT COALESCE((SELECT jsonb_agg(to_jsonb(k) ORDER BY k.queue, k.grp) FROM kept k), '[]')::text,
       COALESCE((SELECT jsonb_agg(to_jsonb(s) ORDER BY s.queue, s.grp) FROM scan s), '[]')::text,
       COALESCE((SELECT jsonb_agg(to_jsonb(k) ORDER BY k.pid, k.grp) FROM kept_lagging k), '[]')::text,
       COALESCE((SELECT jsonb_agg(to_jsonb(s) ORDER BY s.pid, s.grp) FROM scan_lagging s), '[]')::text";

/// The cluster series of `/metrics` from the kept figures and from the scan
/// (a group's seconds of lag left out: each side reads its own clock, and
/// the lagging cursors' times are compared above).
const COMPARE_METRICS: &str = "
SELECT (SELECT jsonb_agg(to_jsonb(m) - CASE WHEN m.o_kind = 'group' THEN 'o_b' ELSE '' END
                         ORDER BY m.o_kind, m.o_queue, m.o_group)
          FROM queen.metrics_cluster_v3() m)::text,
       (SELECT jsonb_agg(to_jsonb(m) - CASE WHEN m.o_kind = 'group' THEN 'o_b' ELSE '' END
                         ORDER BY m.o_kind, m.o_queue, m.o_group)
          FROM queen.metrics_cluster_v2() m)::text";

/// Insist the kept figures count what the scan counts; `step` names the
/// moment for the failure message.
async fn same_counts(broker: &TestBroker, step: &str) {
    // What every admin view does first: this broker's push marks go in.
    broker.engine.figures_publish().await.unwrap();
    let sql = broker.sql().await;
    let row = sql.query_one(COMPARE, &[]).await.unwrap();
    let (kept, scan): (String, String) = (row.get(0), row.get(1));
    assert_eq!(
        kept, scan,
        "after {step}: kept figures (left) differ from the scan"
    );
    let row = sql.query_one(COMPARE_GROUPS, &[]).await.unwrap();
    let (kept, scan): (String, String) = (row.get(0), row.get(1));
    assert_eq!(
        kept, scan,
        "after {step}: kept group figures (left) differ from the scan"
    );
    let (kept, scan): (String, String) = (row.get(2), row.get(3));
    assert_eq!(
        kept, scan,
        "after {step}: kept lagging cursors (left) differ from the scan"
    );
    let row = sql.query_one(COMPARE_METRICS, &[]).await.unwrap();
    let (kept, scan): (String, String) = (row.get(0), row.get(1));
    assert_eq!(
        kept, scan,
        "after {step}: the cluster series from the kept figures (left) differ from the scan"
    );
}

/// No fold loop: the test folds when it chooses.
fn unfolded() -> EngineConfig {
    EngineConfig {
        figures_interval: None,
        stats_interval: None,
        retention_interval: None,
        eviction_interval: None,
        ..EngineConfig::default()
    }
}

/// A small deterministic generator (the workload is the same every run).
struct Steps(u64);

impl Steps {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        usize::try_from((self.0 >> 33) % u64::try_from(n).unwrap()).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kept_figures_count_what_the_scan_counts_through_a_mixed_workload() {
    let broker = TestBroker::start_with(unfolded()).await;
    for queue in ["fa", "fb"] {
        configure(&broker, queue, json!({"retryLimit": 1, "leaseTime": 300})).await;
    }
    same_counts(&broker, "configure").await;
    let mut steps = Steps(7);
    let mut held: Vec<(Value, Option<&str>)> = Vec::new();
    let groups = [None, Some("g1"), Some("g2")];
    for i in 0..120 {
        let queue = ["fa", "fb"][steps.next(2)];
        let partition = format!("p{}", steps.next(5));
        let what = steps.next(10);
        let label = match what {
            0..=3 => {
                let n = 1 + steps.next(4);
                let payloads: Vec<Value> = (0..n).map(|k| json!({"i": i, "k": k})).collect();
                push(&broker, queue, &partition, &payloads).await;
                "push"
            }
            4..=5 => {
                let group = groups[steps.next(3)];
                let mut path = format!(
                    "/api/v1/pop/queue/{queue}/partition/{partition}?batch={}&wait=false",
                    1 + steps.next(3)
                );
                if let Some(group) = group {
                    path.push_str(&format!("&consumerGroup={group}&subscriptionMode=all"));
                }
                let auto_ack = steps.next(3) == 0;
                if auto_ack {
                    path.push_str("&autoAck=true");
                }
                match pop(&broker, &path).await {
                    Some(popped) if !auto_ack => held.push((popped, group)),
                    _ => {}
                }
                if auto_ack {
                    "auto-ack pop"
                } else {
                    "pop"
                }
            }
            6..=8 if !held.is_empty() => {
                let (popped, group) = held.remove(steps.next(held.len()));
                let status = ["completed", "completed", "failed"][steps.next(3)];
                ack_all(&broker, &popped, status, group).await;
                "ack"
            }
            9 if i % 3 == 0 => {
                let reply = broker.client.delete("/api/v1/consumer-groups/g2").await;
                expect_status(&reply, 200);
                held.retain(|(_, group)| *group != Some("g2"));
                "group delete"
            }
            _ => "nothing",
        };
        same_counts(&broker, &format!("step {i} ({label})")).await;
        if steps.next(4) == 0 {
            broker.engine.figures_pass().await.unwrap();
            same_counts(&broker, &format!("step {i} ({label}) and a fold")).await;
        }
    }
    // A dead letter leaves by a delete of its message; a queue goes whole.
    let dead = broker
        .sql()
        .await
        .query_opt(
            "SELECT d.partition_id::text, d.transaction_id FROM queen.log_dlq d LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    if let Some(dead) = dead {
        let (partition, transaction): (String, String) = (dead.get(0), dead.get(1));
        let reply = broker
            .client
            .delete(&format!("/api/v1/messages/{partition}/{transaction}"))
            .await;
        assert!(reply.status.is_success(), "{:?}", reply.status);
        same_counts(&broker, "a dead letter's delete").await;
    }
    let reply = broker.client.delete("/api/v1/resources/queues/fb").await;
    expect_status(&reply, 200);
    same_counts(&broker, "a queue's delete").await;
    broker.engine.figures_pass().await.unwrap();
    same_counts(&broker, "the last fold").await;

    // Folded through: nothing is left dirty and the kept rows alone are the
    // counts (the views then read one row per queue).
    let sql = broker.sql().await;
    let dirty: i64 = sql
        .query_one("SELECT count(*) FROM queen.figures_dirty", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(dirty, 0);
    let kept: i64 = sql
        .query_one(
            "SELECT count(*) FROM queen.figures_partition f \
               JOIN queen.queues q ON q.id = f.queue_id WHERE q.name = 'fb'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 0, "a deleted queue's partitions leave the kept rows");
    assert!(broker.engine.figures_folded() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_moves_the_kept_totals() {
    let broker = TestBroker::start_with(unfolded()).await;
    configure(
        &broker,
        "short",
        json!({"retentionEnabled": true, "retentionSeconds": 1}),
    )
    .await;
    for p in 0..3 {
        push(&broker, "short", &format!("p{p}"), &[json!(1), json!(2)]).await;
    }
    broker.engine.figures_pass().await.unwrap();
    same_counts(&broker, "the pushes, folded").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let removed = broker.engine.retention_pass().await.unwrap();
    assert_eq!(removed.messages, 6);
    same_counts(&broker, "retention").await;
    broker.engine.figures_pass().await.unwrap();
    same_counts(&broker, "retention, folded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_populated_before_the_figures_is_counted_by_the_build_pass() {
    let broker = TestBroker::start_with(unfolded()).await;
    for p in 0..7 {
        push(&broker, "old", &format!("p{p}"), &[json!(p), json!(p + 1)]).await;
    }
    let popped = pop(&broker, "/api/v1/pop/queue/old/partition/p3?batch=1")
        .await
        .unwrap();
    assert_eq!(messages(&popped).len(), 1);
    // What an upgraded database looks like: nothing kept, the build to do.
    let sql = broker.sql().await;
    sql.batch_execute(
        "TRUNCATE queen.figures_partition, queen.figures_queue, queen.figures_dirty,
                  queen.figures_cursor, queen.figures_group;
         UPDATE queen.figures_build SET done = false, after_id = NULL;
         UPDATE queen.figures_cursor_build SET done = false, after_id = NULL;",
    )
    .await
    .unwrap();
    same_counts(&broker, "the upgrade (the views scan)").await;
    let mut folds = 0;
    loop {
        let folded: i32 = sql
            .query_one(
                "SELECT queen.figures_fold_v2(0, 2, '{}', '{}', '{}', '{}')",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        folds += 1;
        same_counts(&broker, &format!("build step {folds}")).await;
        push(&broker, "old", "p0", &[json!("during")]).await;
        same_counts(&broker, &format!("a push after build step {folds}")).await;
        let done: bool = sql
            .query_one(
                "SELECT (SELECT done FROM queen.figures_build) \
                    AND (SELECT done FROM queen.figures_cursor_build)",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if done {
            break;
        }
        assert!(folded > 0 && folds < 10, "the build pass does not end");
    }
    // Two partitions a step: seven partitions take four steps.
    assert_eq!(folds, 4);
    broker.engine.figures_pass().await.unwrap();
    let (kept, total): (i64, i64) = {
        let row = sql
            .query_one(
                "SELECT (SELECT total FROM queen.figures_queue), \
                        (SELECT sum(last_offset - log_start + 1)::bigint FROM queen.log_partitions)",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(kept, total, "the kept row alone counts every message");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_fold_runs_at_a_time() {
    let broker = TestBroker::start_with(unfolded()).await;
    push(&broker, "q", "p", &[json!(1)]).await;
    let mut holder = broker.sql().await;
    let txn = holder.transaction().await.unwrap();
    let first: i32 = txn
        .query_one(
            "SELECT queen.figures_fold_v2(10, 0, '{}', '{}', '{}', '{}')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(first, 1);
    let second: i32 = broker
        .sql()
        .await
        .query_one(
            "SELECT queen.figures_fold_v2(10, 0, ARRAY['default'], ARRAY['q'], ARRAY['p'], '{}')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        second, -1,
        "a second fold waits for no lock and does nothing"
    );
    txn.commit().await.unwrap();
    // The skipped fold left what it was handed for the next one.
    let dirty: i64 = broker
        .sql()
        .await
        .query_one("SELECT count(*) FROM queen.figures_dirty", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(dirty, 1);
    same_counts(&broker, "the fold").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verify_cycle_corrects_a_figure_a_lost_mark_left_behind() {
    let broker = TestBroker::start_with(unfolded()).await;
    for p in 0..5 {
        push(&broker, "v", &format!("p{p}"), &[json!(p)]).await;
    }
    broker.engine.figures_pass().await.unwrap();
    same_counts(&broker, "the pushes, folded").await;
    // What a broker that died with marks in memory leaves: messages the
    // kept rows do not count, and nothing dirty to say so.
    broker
        .sql()
        .await
        .batch_execute(
            "UPDATE queen.figures_partition SET total = total - 1
              WHERE partition_id = (SELECT partition_id FROM queen.figures_partition LIMIT 1);
             UPDATE queen.figures_queue SET total = total - 1;",
        )
        .await
        .unwrap();
    let sql = broker.sql().await;
    let differ = || async {
        let row = sql.query_one(COMPARE, &[]).await.unwrap();
        row.get::<_, String>(0) != row.get::<_, String>(1)
    };
    assert!(differ().await);
    // No broker is known to have died, and this one dropped nothing: a pass
    // verifies nothing (an idle database reads nothing for it).
    broker.engine.figures_pass().await.unwrap();
    assert!(differ().await, "a pass with no loss known verified");
    // A broker whose row outlived its time died holding marks: the next
    // pass removes it and starts a cycle, which marks 256 partitions a
    // pass (all five) for the fold.
    sql.execute(
        "INSERT INTO queen.figures_brokers (broker_id, expires_at) \
         VALUES (gen_random_uuid(), now() - interval '1 second')",
        &[],
    )
    .await
    .unwrap();
    broker.engine.figures_pass().await.unwrap();
    same_counts(&broker, "a verifying pass").await;
    let (brokers, pending): (i64, bool) = {
        let row = sql
            .query_one(
                "SELECT (SELECT count(*) FROM queen.figures_brokers), \
                        (SELECT pending FROM queen.figures_verify)",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(brokers, 1, "the dead broker's row went; this one's stays");
    assert!(!pending, "the cycle ended at the fifth partition");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_shutdown_writes_its_marks_and_leaves_the_folding_brokers() {
    async fn brokers(sql: &tokio_postgres::Client) -> i64 {
        sql.query_one("SELECT count(*) FROM queen.figures_brokers", &[])
            .await
            .unwrap()
            .get(0)
    }
    let broker = TestBroker::start_with(unfolded()).await;
    push(&broker, "bye", "p", &[json!(1)]).await;
    broker.engine.figures_pass().await.unwrap();
    let sql = broker.sql().await;
    assert_eq!(brokers(&sql).await, 1, "a pass lists the broker");
    // A push whose mark only this broker holds, then a clean exit.
    push(&broker, "bye", "p", &[json!(2)]).await;
    broker.engine.shutdown().await;
    let dirty: i64 = sql
        .query_one("SELECT count(*) FROM queen.figures_dirty", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(dirty, 1, "the held mark was written");
    assert_eq!(brokers(&sql).await, 0, "a clean exit is no death");
    // What the next broker's views count: both messages.
    let next = TestBroker::serve(broker.db.clone(), unfolded()).await;
    same_counts(&next, "the next broker").await;
    let reply = next.client.get("/api/v1/resources/queues").await;
    assert_eq!(reply.json()["queues"][0]["messages"]["total"], json!(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_view_counts_this_broker_s_pushes_at_once() {
    let broker = TestBroker::start_with(unfolded()).await;
    push(&broker, "seen", "p", &[json!(1), json!(2)]).await;
    broker.engine.figures_pass().await.unwrap();
    push(&broker, "seen", "p", &[json!(3)]).await;
    let reply = broker.client.get("/api/v1/resources/queues").await;
    expect_status(&reply, 200);
    let queues = reply.json();
    assert_eq!(
        queues["queues"][0]["messages"]["total"],
        json!(3),
        "{queues}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_ack_pop_on_a_known_cursor_is_counted() {
    let broker = TestBroker::start_with(unfolded()).await;
    push(
        &broker,
        "auto",
        "p",
        &[json!(1), json!(2), json!(3), json!(4)],
    )
    .await;
    let path = "/api/v1/pop/queue/auto/partition/p?batch=1&autoAck=true&wait=false";
    assert!(pop(&broker, path).await.is_some());
    broker.engine.figures_pass().await.unwrap();
    same_counts(&broker, "the first auto-ack pop, folded").await;
    let path = "/api/v1/pop/queue/auto/partition/p?batch=2&autoAck=true&wait=false";
    assert_eq!(messages(&pop(&broker, path).await.unwrap()).len(), 2);
    same_counts(&broker, "an auto-ack pop of two").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fold_step_takes_a_bounded_share_of_a_row_naming_many_partitions() {
    let broker = TestBroker::start_with(unfolded()).await;
    for p in 0..10 {
        push(&broker, "wide", &format!("p{p}"), &[json!(p)]).await;
    }
    let path = "/api/v1/pop/queue/wide?batch=3&wait=false&consumerGroup=g&subscriptionMode=all";
    let popped = pop(&broker, path).await.unwrap();
    ack_all(&broker, &popped, "completed", Some("g")).await;
    broker.engine.figures_pass().await.unwrap();
    // A push to each: one dirty row naming the ten partitions (a publish
    // writes one row per queue, as a statement creating them would).
    for p in 0..10 {
        push(&broker, "wide", &format!("p{p}"), &[json!(p)]).await;
    }
    broker.engine.figures_publish().await.unwrap();
    let sql = broker.sql().await;
    let named: Vec<i32> = sql
        .query(
            "SELECT cardinality(partition_ids) FROM queen.figures_dirty",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(named, [10]);
    let mut folded = Vec::new();
    loop {
        let n: i32 = sql
            .query_one(
                "SELECT queen.figures_fold_v2(4, 0, '{}', '{}', '{}', '{}')",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        same_counts(&broker, &format!("fold step {}", folded.len())).await;
        if n == 0 {
            break;
        }
        folded.push(n);
    }
    assert_eq!(folded, [4, 4, 2], "each step folds at most 4 partitions");
    let kept: i64 = sql
        .query_one("SELECT count(*) FROM queen.figures_partition", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_groups_list_counts_this_broker_s_pushes_at_once() {
    let broker = TestBroker::start_with(unfolded()).await;
    push(&broker, "lagged", "p", &[json!(1), json!(2)]).await;
    let path = "/api/v1/pop/queue/lagged?batch=2&wait=false&consumerGroup=g&subscriptionMode=all";
    let popped = pop(&broker, path).await.unwrap();
    ack_all(&broker, &popped, "completed", Some("g")).await;
    broker.engine.figures_pass().await.unwrap();
    let lag = |list: &Value| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "g")
            .map(|g| (g["totalLag"].clone(), g["partitionsWithLag"].clone()))
    };
    let list = broker.client.get("/api/v1/consumer-groups").await.json();
    assert_eq!(lag(&list), Some((json!(0), json!(0))), "{list}");
    // Kept as folded: no lag. A push, not yet folded, is counted at once.
    push(&broker, "lagged", "p", &[json!(3)]).await;
    let list = broker.client.get("/api/v1/consumer-groups").await.json();
    assert_eq!(lag(&list), Some((json!(1), json!(1))), "{list}");
    same_counts(&broker, "a push after the fold").await;
}
