//! The fault matrix: three broker processes on one PostgreSQL, producers
//! with transaction ids that retry, consumers whose acks land on another
//! broker than their pop, poison messages, a forced sidecar purge with
//! batches still leased, one broker SIGKILLed and PostgreSQL restarted,
//! all in one run. Counted at the end: nothing acknowledged is lost, nothing
//! is stored twice, and every message is delivered once plus the retries
//! the run counted (a delivery whose ack did not apply); none is delivered
//! again after its ack applied.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use parking_lot::Mutex;
use queen_testkit::http::Client;
use serde_json::{json, Value};

use crate::faults::{own_cluster, restart_postgres, scratch};
use crate::harness::Broker;

const QUEUE: &str = "matrix";
const PRODUCERS: u64 = 4;
const BATCHES: u64 = 40;
const BATCH: u64 = 20;
const BROKERS: usize = 3;
/// Retries a `failed` message gets before it is dead-lettered.
const RETRY_LIMIT: u64 = 1;

/// What a message's consumer does with it: by its sequence number, about
/// 3% fail at every delivery and 2% are dead-lettered at once.
fn fate(seq: u64) -> &'static str {
    match seq % 100 {
        17 | 51 | 88 => "failed",
        33 | 70 => "dlq",
        _ => "completed",
    }
}

/// One message: (producer, sequence number).
type Id = (u64, u64);

#[derive(Default)]
struct Ledger {
    /// Pushes a broker acknowledged.
    acked: HashSet<Id>,
    /// Deliveries per message.
    deliveries: HashMap<Id, u64>,
    /// Deliveries whose ack did not apply (the request failed, or the item
    /// answered `success: false`): each one is a counted retry.
    retries: HashMap<Id, u64>,
    /// Messages whose ack applied as done: completed, or dead-lettered.
    finished: HashSet<Id>,
    /// Deliveries of a message after its ack applied: must stay empty.
    after_finished: Vec<Id>,
}

/// The run's shared state.
struct Run {
    clients: Vec<Client>,
    ledger: Mutex<Ledger>,
    /// Producers' and consumers' requests in flight.
    in_flight: AtomicUsize,
    /// Set: producers and consumers wait between requests (the purge).
    hold: AtomicBool,
    /// Set: consumers stop.
    done: AtomicBool,
    pushed: AtomicUsize,
}

impl Run {
    async fn wait_unheld(&self) {
        while self.hold.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Send through broker `broker` (round robin on failure), counted in flight.
    async fn send(&self, broker: usize, method: Method, path: &str, body: Bytes) -> Option<Value> {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let reply = tokio::time::timeout(
            Duration::from_secs(40),
            self.clients[broker % BROKERS].try_send(method, path, body),
        )
        .await
        .expect("a request hung: it must answer or fail");
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        match reply {
            Ok(reply) if reply.status.is_success() && !reply.body.is_empty() => Some(reply.json()),
            Ok(reply) => {
                let status = reply.status.as_u16();
                assert!(
                    status == 204 || status == 503,
                    "{path} answered {status}: {:?}",
                    String::from_utf8_lossy(&reply.body)
                );
                None
            }
            Err(_) => None,
        }
    }
}

/// Push `BATCHES` batches to partition `p{producer}`, each through the next
/// broker, retrying a failed one with the same transaction ids (through the
/// next broker again) until a broker acknowledges it.
async fn produce(run: Arc<Run>, producer: u64) -> usize {
    let mut retried = 0;
    let mut broker = usize::try_from(producer).unwrap();
    for batch in 0..BATCHES {
        let items: Vec<Value> = (0..BATCH)
            .map(|i| {
                let seq = batch * BATCH + i;
                json!({"queue": QUEUE, "partition": format!("p{producer}"),
                       "transactionId": format!("m-{producer}-{seq}"),
                       "payload": {"producer": producer, "seq": seq}})
            })
            .collect();
        let body = Bytes::from(serde_json::to_vec(&json!({ "items": items })).unwrap());
        loop {
            run.wait_unheld().await;
            broker += 1;
            match run
                .send(broker, Method::POST, "/api/v1/push", body.clone())
                .await
            {
                Some(results) => {
                    let results = results.as_array().cloned().unwrap_or_default();
                    assert_eq!(results.len(), usize::try_from(BATCH).unwrap());
                    for result in &results {
                        let status = result["status"].as_str().unwrap_or_default();
                        assert!(["queued", "duplicate"].contains(&status), "{result}");
                    }
                    let mut ledger = run.ledger.lock();
                    for i in 0..BATCH {
                        ledger.acked.insert((producer, batch * BATCH + i));
                    }
                    run.pushed
                        .fetch_add(usize::try_from(BATCH).unwrap(), Ordering::Relaxed);
                    break;
                }
                None => {
                    retried += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    retried
}

/// Pop through broker `index`, ack through the next one, each message as its
/// fate says, until `done`.
async fn consume(run: Arc<Run>, index: usize) {
    let path = format!("/api/v1/pop/queue/{QUEUE}?batch=10&wait=true&timeout=300");
    while !run.done.load(Ordering::Acquire) {
        run.wait_unheld().await;
        let Some(popped) = run.send(index, Method::GET, &path, Bytes::new()).await else {
            continue;
        };
        let messages = popped["messages"].as_array().cloned().unwrap_or_default();
        let ids: Vec<Id> = messages
            .iter()
            .map(|m| {
                (
                    m["data"]["producer"].as_u64().unwrap(),
                    m["data"]["seq"].as_u64().unwrap(),
                )
            })
            .collect();
        {
            let mut ledger = run.ledger.lock();
            for id in &ids {
                *ledger.deliveries.entry(*id).or_default() += 1;
                if ledger.finished.contains(id) {
                    ledger.after_finished.push(*id);
                }
            }
        }
        let acks: Vec<Value> = messages
            .iter()
            .zip(&ids)
            .map(|(m, id)| {
                json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                       "leaseId": m["leaseId"], "status": fate(id.1), "error": "poison"})
            })
            .collect();
        // A batch in hand when the purge holds everything is acked after it,
        // through a broker that never saw its lease.
        run.wait_unheld().await;
        let body = Bytes::from(serde_json::to_vec(&json!({ "acknowledgments": acks })).unwrap());
        let results = run
            .send(index + 1, Method::POST, "/api/v1/ack/batch", body)
            .await;
        let results = results
            .and_then(|r| r.as_array().cloned())
            .unwrap_or_default();
        let mut ledger = run.ledger.lock();
        for (i, id) in ids.iter().enumerate() {
            let result = results.get(i);
            let applied = result.is_some_and(|r| r["success"] == true);
            let dead = result.is_some_and(|r| r["dlq"] == true);
            let done = applied && (fate(id.1) != "failed" || dead);
            if done {
                ledger.finished.insert(*id);
            } else {
                *ledger.retries.entry(*id).or_default() += 1;
            }
        }
    }
}

/// Wait until `check` holds, at most `limit`.
async fn until(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn sql(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_brokers_through_a_sigkill_a_restart_and_a_purge_lose_and_repeat_nothing() {
    let total = usize::try_from(PRODUCERS * BATCHES * BATCH).unwrap();
    let scratch = scratch();
    let (mut cluster, url) = own_cluster(scratch.path()).await;
    let vars = [
        ("QUEEN_DATABASE_URL", url.as_str()),
        ("RETENTION_INTERVAL", "300"),
        ("QUEEN_SPOOL_MAX_MB", "0"),
    ];
    let mut brokers = Vec::new();
    for _ in 0..BROKERS {
        brokers.push(Broker::start(scratch.path(), &vars).await);
    }
    let reply = brokers[0]
        .client
        .post_json(
            "/api/v1/configure",
            &json!({"queue": QUEUE, "options": {"leaseTime": 3, "retryLimit": RETRY_LIMIT}}),
        )
        .await;
    assert_eq!(reply.status, 200);
    let run = Arc::new(Run {
        clients: brokers.iter().map(|b| b.client.clone()).collect(),
        ledger: Mutex::default(),
        in_flight: AtomicUsize::new(0),
        hold: AtomicBool::new(false),
        done: AtomicBool::new(false),
        pushed: AtomicUsize::new(0),
    });
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| tokio::spawn(produce(Arc::clone(&run), p)))
        .collect();
    let consumers: Vec<_> = (0..BROKERS)
        .map(|i| tokio::spawn(consume(Arc::clone(&run), i)))
        .collect();
    let pushed = |share: usize| {
        let run = Arc::clone(&run);
        move || run.pushed.load(Ordering::Relaxed) >= total * share / 10
    };

    // A fifth in: SIGKILL broker 1 and start it again on its port.
    until(Duration::from_secs(120), "a fifth pushed", pushed(2)).await;
    let killed = brokers.remove(1);
    let port = killed.port();
    tokio::task::spawn_blocking(move || killed.kill())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    brokers.insert(1, Broker::start_at(port, None, scratch.path(), &vars).await);

    // Two fifths in: stop PostgreSQL for two seconds.
    until(Duration::from_secs(120), "two fifths pushed", pushed(4)).await;
    cluster = restart_postgres(cluster, Duration::from_secs(2)).await;

    // Three fifths in: hold every producer and consumer between requests
    // (consumers may hold a leased batch), age the whole sidecar past its
    // window and let the brokers' own retention purge it; then go on. No
    // push is in flight, so no retry straddles the purge.
    until(Duration::from_secs(120), "three fifths pushed", pushed(6)).await;
    run.hold.store(true, Ordering::Release);
    until(Duration::from_secs(60), "requests drained", || {
        run.in_flight.load(Ordering::Acquire) == 0
    })
    .await;
    let db = sql(&url).await;
    db.batch_execute(
        "UPDATE queen.log_txns SET created_at = created_at - interval '2 hours';
         UPDATE queen.log_partitions SET oldest_txn_at = oldest_txn_at - interval '2 hours';",
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: i64 = db
            .query_one("SELECT count(*) FROM queen.log_txns", &[])
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the purge did not run");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let behind: i64 = db
        .query_one(
            "SELECT coalesce(sum(p.last_offset - c.committed), 0)::bigint \
               FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(behind > 0, "nothing was left to consume past the purge");
    run.hold.store(false, Ordering::Release);

    let mut retried = 0;
    for producer in producers {
        retried += producer.await.expect("a producer failed");
    }
    assert!(retried > 0, "no push met a fault: the run saw nothing");
    // Every message ends, completed or dead-lettered: every cursor at its
    // partition's end (an ack whose answer a fault lost still counts).
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let open: i64 = db
            .query_one(
                "SELECT count(*) FROM queen.log_partitions p \
                   LEFT JOIN queen.log_consumers c ON c.partition_id = p.id \
                  WHERE c.committed IS DISTINCT FROM p.last_offset",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if open == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{open} partitions never consumed to the end"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    run.done.store(true, Ordering::Release);
    for consumer in consumers {
        consumer.await.expect("a consumer failed");
    }

    let ledger = std::mem::take(&mut *run.ledger.lock());
    assert_eq!(ledger.acked.len(), total, "every push acknowledged");
    // Nothing lost: every acknowledged message was delivered; nothing
    // stored twice: the log holds exactly as many messages.
    let lost: Vec<&Id> = ledger
        .acked
        .iter()
        .filter(|id| !ledger.deliveries.contains_key(id))
        .take(10)
        .collect();
    assert!(lost.is_empty(), "never delivered: {lost:?}");
    let stored: i64 = db
        .query_one(
            "SELECT coalesce(sum(msg_count), 0)::bigint FROM queen.log_segments",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, i64::try_from(total).unwrap(), "stored exactly once");
    // Nothing delivered again after its ack applied, and every other
    // delivery explained by a counted retry (one fewer when a fault lost an
    // ack's answer after it applied).
    assert!(
        ledger.after_finished.is_empty(),
        "delivered after their ack applied: {:?}",
        &ledger.after_finished[..ledger.after_finished.len().min(10)]
    );
    for id in &ledger.acked {
        let deliveries = ledger.deliveries[id];
        let retries = ledger.retries.get(id).copied().unwrap_or(0);
        assert!(
            deliveries <= 1 + retries,
            "{id:?}: {deliveries} deliveries, {retries} retries"
        );
    }
    // The poison: each failed one delivered past its retries, and every
    // poison message dead-lettered exactly once, none other.
    let poison: HashSet<Id> = ledger
        .acked
        .iter()
        .copied()
        .filter(|id| fate(id.1) != "completed")
        .collect();
    for id in poison.iter().filter(|id| fate(id.1) == "failed") {
        assert!(ledger.deliveries[id] > RETRY_LIMIT, "{id:?}");
    }
    let letters: Vec<String> = db
        .query("SELECT transaction_id FROM queen.log_dlq", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let filed: HashSet<Id> = letters
        .iter()
        .map(|txn| {
            let mut parts = txn.split('-').skip(1);
            let producer = parts.next().unwrap().parse().unwrap();
            let seq = parts.next().unwrap().parse().unwrap();
            (producer, seq)
        })
        .collect();
    assert_eq!(letters.len(), filed.len(), "a message dead-lettered twice");
    assert_eq!(filed, poison, "dead letters");
    eprintln!(
        "fault matrix: {total} messages, {} poison, {retried} push retries, {} redeliveries",
        poison.len(),
        ledger.retries.values().sum::<u64>()
    );

    for broker in brokers {
        let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
            .await
            .unwrap();
        assert!(status.success(), "{log}");
    }
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .unwrap()
        .unwrap();
}
