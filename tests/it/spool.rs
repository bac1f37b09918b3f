//! The spool's drain past the dedup window, and a spooled push that meets a
//! full queue at drain.
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

use crate::support::{
    ack_all, configure, data, expect_status, pop, push_items, stored, until_drained,
};

/// A broker with a spool in `dir` that follows the flags every 100 ms.
fn spooled(dir: &Path, max_bytes: u64) -> EngineConfig {
    EngineConfig {
        spool: Some(SpoolConfig {
            dir: dir.to_owned(),
            max_bytes,
            push_timeout: Duration::from_secs(5),
            adopt: None,
            database: None,
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
    let pids = crate::support::partition_ids(&tx, queue, None).await;
    crate::support::lock_each(&tx, "queen.log_partitions", "id", &pids, "").await;
    for pid in pids {
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

/// Item 4, the timed-out push: a push whose attempt does not commit within
/// `QUEEN_SPOOL_PUSH_TIMEOUT_MS` (its partition is locked) is spooled and
/// answered `buffered`, and the attempt commits after all. The drain runs
/// well past the queue's 1 s dedup window and stores it no second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_push_that_committed_later_is_not_stored_again_by_the_drain() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = spooled(dir.path(), 1 << 30);
    if let Some(spool) = config.spool.as_mut() {
        spool.push_timeout = Duration::from_millis(300);
    }
    let broker = TestBroker::start_with(config).await;
    configure(&broker, "slow", json!({ "dedupWindowSeconds": 1 })).await;
    push_items(&broker, items("slow", 0, 1)).await;

    // Hold the partition's row lock: the next push's flush waits for it.
    let mut sql = broker.sql().await;
    let lock = sql.transaction().await.unwrap();
    let slow = crate::support::partition_ids(&lock, "slow", None).await;
    crate::support::lock_each(&lock, "queen.log_partitions", "id", &slow, "").await;
    // Maintenance goes on while the attempt waits, so the drain waits too.
    let (results, ()) = tokio::join!(push_items(&broker, items("slow", 1, 2)), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        set_maintenance(&broker, true).await;
    });
    assert_eq!(results[0]["status"], "buffered", "{results:?}");
    lock.commit().await.unwrap();
    until(
        Duration::from_secs(10),
        "the timed-out attempt to commit",
        || async { stored(&broker, "slow").await == 2 },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    set_maintenance(&broker, false).await;
    until_drained(&broker, Duration::from_secs(12)).await;
    assert_eq!(stored(&broker, "slow").await, 2);
    assert_eq!(drain_queue(&broker, "slow").await, numbers(0, 2));
    broker.stop().await;
}

/// Item 4, a replayed log: what an operator does with a `failed-*.log`
/// (rename it to a `spool-<n>.log` above the others and restart) with
/// records that are already stored, past the 1 s window: nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_spool_file_stores_nothing_twice_past_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let saved = tempfile::tempdir().unwrap();
    let db = TestDb::new().await;
    let first = TestBroker::serve(db.clone(), spooled(dir.path(), 1 << 30)).await;
    configure(&first, "again", json!({ "dedupWindowSeconds": 1 })).await;
    set_maintenance(&first, true).await;
    push_items(&first, items("again", 0, 5)).await;
    let logs = spool_files(dir.path(), "spool-");
    assert_eq!(logs.len(), 1, "{logs:?}");
    std::fs::copy(dir.path().join(&logs[0]), saved.path().join("copy.log")).unwrap();
    set_maintenance(&first, false).await;
    until_drained(&first, Duration::from_secs(12)).await;
    assert_eq!(stored(&first, "again").await, 5);
    first.engine.shutdown().await;
    first.stop().await;

    tokio::time::sleep(Duration::from_millis(1500)).await;
    std::fs::copy(
        saved.path().join("copy.log"),
        dir.path().join("spool-00000000000000000100.log"),
    )
    .unwrap();
    let restarted = TestBroker::serve(db.clone(), spooled(dir.path(), 1 << 30)).await;
    until_drained(&restarted, Duration::from_secs(12)).await;
    assert_eq!(stored(&restarted, "again").await, 5);
    assert_eq!(drain_queue(&restarted, "again").await, numbers(0, 5));
    restarted.stop().await;
}

/// Poll `check` every 50 ms until it holds; panics with `what` after `limit`.
async fn until<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn spool_files(dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.starts_with(prefix))
        .collect()
}

/// Item 5. A queue with `maxSize` 3 is full; four more pushes to it are
/// spooled (with two to another queue). At drain the other queue's are
/// stored and the four are held: still in the spool (not `failed-*.log`),
/// counted in `bufferedMessages` and in `/metrics` with the oldest one's age,
/// retried with backoff; a direct push to the queue waits its turn (429);
/// the held records count against `QUEEN_SPOOL_MAX_MB` and survive a
/// restart. As consumers make room they are stored, in order, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spooled_push_that_meets_a_full_queue_stays_spooled_until_room_appears() {
    let dir = tempfile::tempdir().unwrap();
    // Each record here is 62 to 64 bytes: the four held ones take 256.
    let db = TestDb::new().await;
    let broker = TestBroker::serve(db.clone(), spooled(dir.path(), 700)).await;
    configure(&broker, "bounded", json!({ "maxSize": 3 })).await;
    push_items(&broker, items("bounded", 0, 3)).await;
    set_maintenance(&broker, true).await;
    for results in [
        push_items(&broker, items("bounded", 3, 7)).await,
        push_items(&broker, items("other", 0, 2)).await,
    ] {
        assert!(results.iter().all(|r| r["status"] == "buffered"));
    }
    set_maintenance(&broker, false).await;
    until(
        Duration::from_secs(10),
        "the other queue to drain",
        || async { stored(&broker, "other").await == 2 },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    assert_eq!(stored(&broker, "bounded").await, 3);
    let state = broker.client.get("/api/v1/system/maintenance").await.json();
    assert_eq!(state["bufferedMessages"], 4, "{state}");
    assert_eq!(state["bufferStats"]["failedCount"], 0, "{state}");
    assert!(spool_files(dir.path(), "failed-").is_empty());
    assert_eq!(spool_files(dir.path(), "held"), ["held.log"]);
    let metrics = broker.client.get("/metrics").await.json();
    let spool = &metrics["spool"];
    assert_eq!(spool["pending"], 4, "{metrics}");
    assert_eq!(spool["held"], 4, "{metrics}");
    assert_eq!(spool["heldQueues"], 1, "{metrics}");
    assert!(
        spool["oldestAgeSeconds"].as_f64().unwrap() >= 1.5,
        "{metrics}"
    );
    // Retried with backoff (250 ms, then 500, 1000, ...): a few times in
    // these 1.5 s, not at every 250 ms tick.
    let retries = spool["heldRetries"].as_u64().unwrap();
    assert!((1..=4).contains(&retries), "retries: {retries}");
    let scrape = broker.client.get("/metrics/prometheus").await;
    let text = String::from_utf8(scrape.body.to_vec()).unwrap();
    assert!(text.contains("queen_spool_held_messages 4\n"), "{text}");
    assert!(text.contains("queen_spool_pending_messages 4\n"), "{text}");
    assert!(text.contains("\nqueen_spool_oldest_age_seconds "), "{text}");

    // A direct push to the queue waits behind what is held; other queues'
    // pushes are stored at once.
    let refused = broker
        .client
        .post_json("/api/v1/push", &json!({ "items": items("bounded", 7, 8) }))
        .await;
    assert_eq!(refused.status, 429, "{:?}", refused.body);
    assert_eq!(refused.headers["retry-after"], "1");
    assert!(
        refused.json()["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("queue bounded is full")),
        "{:?}",
        refused.body
    );
    let direct = push_items(&broker, items("other", 2, 3)).await;
    assert_eq!(direct[0]["status"], "queued", "{direct:?}");

    // The held records count against the spool's bound: 512 bytes more do
    // not fit in 700 next to them (they would alone).
    set_maintenance(&broker, true).await;
    let full = broker
        .client
        .post_json("/api/v1/push", &json!({ "items": items("other", 10, 18) }))
        .await;
    assert_eq!(full.status, 503, "{:?}", full.body);
    assert_eq!(
        full.json()["error"],
        "the push spool is full (QUEEN_SPOOL_MAX_MB); retry later"
    );
    set_maintenance(&broker, false).await;

    // Held records survive a restart (`held.log`), and so does the wait.
    broker.engine.shutdown().await;
    broker.stop().await;
    let broker = TestBroker::serve(db.clone(), spooled(dir.path(), 700)).await;
    let metrics = broker.client.get("/metrics").await.json();
    assert_eq!(metrics["spool"]["held"], 4, "{metrics}");
    let refused = broker
        .client
        .post_json("/api/v1/push", &json!({ "items": items("bounded", 7, 8) }))
        .await;
    assert_eq!(refused.status, 429, "{:?}", refused.body);
    assert_eq!(stored(&broker, "bounded").await, 3);

    // Room for three: three of the held four are stored, in order.
    assert_eq!(drain_queue(&broker, "bounded").await, numbers(0, 3));
    until(
        Duration::from_secs(15),
        "three held records stored",
        || async { stored(&broker, "bounded").await == 6 },
    )
    .await;
    assert_eq!(drain_queue(&broker, "bounded").await, numbers(3, 6));
    let state = until_drained(&broker, Duration::from_secs(15)).await;
    assert_eq!(state["bufferStats"]["failedCount"], 0, "{state}");
    assert_eq!(drain_queue(&broker, "bounded").await, numbers(6, 7));
    assert_eq!(stored(&broker, "bounded").await, 7);
    assert!(spool_files(dir.path(), "failed-").is_empty());
    assert!(spool_files(dir.path(), "held").is_empty());
    let metrics = broker.client.get("/metrics").await.json();
    assert_eq!(metrics["spool"]["held"], 0, "{metrics}");
    assert_eq!(metrics["spool"]["oldestAgeSeconds"], 0.0, "{metrics}");
    broker.stop().await;
}

/// Item 4's cost: the drain's duplicate check reads only what was stored
/// before the drain began, not what the drain itself stored in its earlier
/// chunks. Twenty chunks into one partition drain in well under a second
/// here; checking each chunk against everything drained before it took
/// 262 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_drain_does_not_probe_its_own_output() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(spooled(dir.path(), 1 << 30)).await;
    push_items(&broker, items("long", 0, 1)).await;
    set_maintenance(&broker, true).await;
    for chunk in 0..20 {
        push_items(&broker, items("long", chunk * 1000, chunk * 1000 + 1000)).await;
    }
    set_maintenance(&broker, false).await;
    until_drained(&broker, Duration::from_secs(30)).await;
    // t-0 was stored before it was spooled again.
    assert_eq!(stored(&broker, "long").await, 20_000);
    broker.stop().await;
}

/// Item 4's cost, the other side: a chunk checked against a partition that
/// stored 100,000 messages since the chunk's records were accepted. The
/// incoming and the stored hashes meet in one hash join (as a nested loop
/// the same check took 160 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_into_a_busy_partition_checks_each_chunk_in_one_hash_join() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(spooled(dir.path(), 1 << 30)).await;
    for chunk in 0..100 {
        push_items(&broker, items("busy", chunk * 1000, chunk * 1000 + 1000)).await;
    }
    set_maintenance(&broker, true).await;
    // 1000 new ones, and ten already stored.
    push_items(&broker, items("busy", 99_990, 101_000)).await;
    set_maintenance(&broker, false).await;
    until_drained(&broker, Duration::from_secs(30)).await;
    assert_eq!(stored(&broker, "busy").await, 101_000);
    broker.stop().await;
}
