//! Issue 28, items 4 and 5: the spool's drain past the dedup window, and a
//! spooled push that meets a full queue at drain.
//!
//! Item 4: a drained item whose transaction id is already stored in its
//! partition is not stored again however long after the queue's
//! `dedupWindowSeconds` the drain runs, whether the stored copy's sidecar
//! row is still held or was purged (the drain then reads the partition's
//! segments). Item 5: a spooled push that finds its queue full (`maxSize`)
//! when the spool drains stays in the spool (held, not `failed-*.log`), is
//! retried with backoff and stored once room appears; `/metrics` shows the
//! spooled items and the oldest one's age, and `QUEEN_SPOOL_MAX_MB` still
//! bounds the spool.

use std::path::Path;
use std::time::{Duration, Instant};

use queen_engine::{EngineConfig, SpoolConfig};
use queen_testkit::TestDb;
use queen_tests::TestBroker;
use serde_json::{json, Value};

use crate::support::{ack_all, configure, data, expect_status, pop, push_items, stored};

/// A broker with a spool in `dir` that follows the flags every 100 ms.
fn spooled(dir: &Path, max_bytes: u64) -> EngineConfig {
    EngineConfig {
        spool: Some(SpoolConfig {
            dir: dir.to_owned(),
            max_bytes,
            push_timeout: Duration::from_secs(5),
        }),
        maintenance_refresh: Duration::from_millis(100),
        ..EngineConfig::default()
    }
}

async fn set_maintenance(broker: &TestBroker, enabled: bool) {
    let reply = broker
        .client
        .post_json("/api/v1/system/maintenance", &json!({ "enabled": enabled }))
        .await;
    expect_status(&reply, 200);
}

/// Poll until `bufferedMessages` is 0; panics after `limit`.
async fn until_drained(broker: &TestBroker, limit: Duration) -> Value {
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

/// Pop and ack everything of `queue` (queue mode); payloads in order.
async fn drain_queue(broker: &TestBroker, queue: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    while let Some(popped) = pop(
        broker,
        &format!("/api/v1/pop/queue/{queue}?batch=100&wait=false"),
    )
    .await
    {
        seen.extend(data(&popped));
        ack_all(broker, &popped, "completed", None).await;
    }
    seen
}

fn items(queue: &str, from: usize, to: usize) -> Vec<Value> {
    (from..to)
        .map(|i| {
            json!({"queue": queue, "partition": "p", "transactionId": format!("t-{i}"),
                   "payload": {"n": i}})
        })
        .collect()
}

fn numbers(from: usize, to: usize) -> Vec<Value> {
    (from..to).map(|n| json!({ "n": n })).collect()
}

/// Drive the sidecar purge of every partition of `queue` (the retention
/// pass's own procedure, under the partition lock it expects), with a cutoff
/// past everything stored: the purge age (at least 900 s) without the wait.
async fn purge_sidecar(broker: &TestBroker, queue: &str) {
    let mut sql = broker.sql().await;
    let tx = sql.transaction().await.unwrap();
    let rows = tx
        .query(
            "SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id \
              WHERE q.name = $1 FOR UPDATE OF p",
            &[&queue],
        )
        .await
        .unwrap();
    for row in rows {
        let pid: uuid::Uuid = row.get(0);
        tx.execute(
            "SELECT * FROM queen.log_purge_txns_v1($1, now() + interval '1 minute', 1000)",
            &[&pid],
        )
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    let left = crate::support::select_i64(
        &sql,
        &format!(
            "SELECT count(*) FROM queen.log_txns t JOIN queen.log_partitions p \
               ON p.id = t.partition_id JOIN queen.queues q ON q.id = p.queue_id \
              WHERE q.name = '{queue}'"
        ),
    )
    .await;
    assert_eq!(left, 0, "the sidecar of {queue} was not purged");
}

/// Item 4. Ten pushes are spooled; some of them reach the database another
/// way (before they were spooled, as a timed-out attempt that committed; and
/// after, as a drain chunk pushed again after a crash), and the drain runs
/// only once the queue's 1 s dedup window has passed. For `late` the
/// sidecar rows of the stored copies are still there; for `purged` the
/// retention's sidecar purge removed them. Each queue ends with ten
/// messages, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_after_the_dedup_window_stores_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new().await;
    let first = TestBroker::serve(db.clone(), spooled(dir.path(), 1 << 30)).await;
    for queue in ["late", "purged"] {
        configure(&first, queue, json!({ "dedupWindowSeconds": 1 })).await;
        // Stored before they are spooled again below.
        push_items(&first, items(queue, 0, 3)).await;
    }
    set_maintenance(&first, true).await;
    for queue in ["late", "purged"] {
        let results = push_items(&first, items(queue, 0, 10)).await;
        assert!(results.iter().all(|r| r["status"] == "buffered"));
    }
    first.engine.shutdown().await;
    first.stop().await;

    // Two more of them are stored through another broker after they were
    // spooled.
    let other = TestBroker::serve(db.clone(), EngineConfig::default()).await;
    set_maintenance(&other, false).await;
    for queue in ["late", "purged"] {
        push_items(&other, items(queue, 3, 5)).await;
    }
    purge_sidecar(&other, "purged").await;
    other.stop().await;
    // Past the dedup window of every stored copy.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let restarted = TestBroker::serve(db.clone(), spooled(dir.path(), 1 << 30)).await;
    let state = until_drained(&restarted, Duration::from_secs(12)).await;
    assert_eq!(state["bufferStats"]["failedCount"], 0, "{state}");
    for queue in ["late", "purged"] {
        assert_eq!(stored(&restarted, queue).await, 10, "{queue}");
        assert_eq!(
            drain_queue(&restarted, queue).await,
            numbers(0, 10),
            "{queue}"
        );
    }
    restarted.stop().await;
}
