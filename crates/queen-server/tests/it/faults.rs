//! Faults with real processes: the broker
//! SIGKILLed mid-batch and restarted, PostgreSQL stopped and started under
//! load, and the shutdown order on SIGTERM, including a second signal; and
//! the same load through a maintenance window, with the broker
//! SIGKILLed while its spool holds pushes, and through a PostgreSQL outage
//! the spool absorbs.
//!
//! Producers push 50-item batches with their own transaction ids, one
//! partition each, and retry a failed batch with the same ids until it is
//! acknowledged; one consumer pops and acks throughout. Afterwards every
//! acknowledged message is stored exactly once, every one was delivered at
//! least once, and each partition's first deliveries come in push order.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use parking_lot::Mutex;
use queen_pg::cluster::{Cluster, ClusterOptions};
use queen_testkit::http::Client;
use serde_json::{json, Value};

use crate::harness::Broker;

const QUEUE: &str = "faults";
const BATCH: usize = 50;

/// A temp dir the `postgres` user can traverse (tests may run as root).
pub(crate) fn scratch() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("queen-faults-")
        .tempdir_in("/tmp")
        .expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod temp dir");
    dir
}

/// A PostgreSQL of the test's own (it is stopped and started), with database
/// `queen`; returns the cluster and the broker's `QUEEN_DATABASE_URL`.
pub(crate) async fn own_cluster(dir: &std::path::Path) -> (Cluster, String) {
    let data_dir = dir.join("pg");
    let cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = Cluster::init_or_reuse(ClusterOptions::throwaway(&data_dir))
            .expect("init the test's cluster");
        cluster.start().expect("start the test's cluster");
        cluster
    })
    .await
    .unwrap();
    let admin = queen_sql::connect::connect_one(&cluster.connect_config("postgres"))
        .await
        .unwrap();
    queen_sql::connect::create_database_if_missing(&admin, "queen")
        .await
        .unwrap();
    let url = queen_testkit::libpq_url(&cluster.connect_config("queen"));
    (cluster, url)
}

/// Stop PostgreSQL (fast: sessions cut, transactions rolled back), wait
/// `down`, start it again.
pub(crate) async fn restart_postgres(mut cluster: Cluster, down: Duration) -> Cluster {
    tokio::task::spawn_blocking(move || {
        cluster.stop().expect("stop PostgreSQL");
        std::thread::sleep(down);
        cluster.start().expect("start PostgreSQL again");
        cluster
    })
    .await
    .unwrap()
}

/// What the producers had acknowledged: (producer, sequence number).
type Acked = Arc<Mutex<HashSet<(u64, u64)>>>;

/// Push `batches` batches of [`BATCH`] messages to partition `p{producer}`,
/// retrying each (same transaction ids) until it is acknowledged, or until
/// `give_up` is set. A 201 must answer every item queued, duplicate or
/// buffered (spooled; `buffered` counts those). Returns the pushes that
/// failed and were retried.
async fn produce(
    client: Client,
    producer: u64,
    batches: u64,
    acked: Acked,
    progress: Arc<AtomicUsize>,
    give_up: Arc<AtomicBool>,
    buffered: Arc<AtomicUsize>,
) -> usize {
    let mut retried = 0;
    for batch in 0..batches {
        let items: Vec<Value> = (0..BATCH as u64)
            .map(|i| {
                let seq = batch * BATCH as u64 + i;
                json!({"queue": QUEUE, "partition": format!("p{producer}"),
                       "transactionId": format!("{producer}-{seq}"),
                       "payload": {"producer": producer, "seq": seq}})
            })
            .collect();
        let body = Bytes::from(serde_json::to_vec(&json!({ "items": items })).unwrap());
        loop {
            let reply = tokio::time::timeout(
                Duration::from_secs(40),
                client.try_send(Method::POST, "/api/v1/push", body.clone()),
            )
            .await
            .expect("a push hung: it must answer or fail");
            match reply {
                Ok(reply) if reply.status == 201 => {
                    let results = reply.json();
                    let results = results.as_array().unwrap();
                    assert_eq!(results.len(), BATCH);
                    for result in results {
                        let status = result["status"].as_str().unwrap_or_default();
                        assert!(
                            ["queued", "duplicate", "buffered"].contains(&status),
                            "{result}"
                        );
                        if status == "buffered" {
                            buffered.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    let mut acked = acked.lock();
                    for i in 0..BATCH as u64 {
                        acked.insert((producer, batch * BATCH as u64 + i));
                    }
                    progress.fetch_add(BATCH, Ordering::Relaxed);
                    break;
                }
                // 503 while PostgreSQL is down, a refused or reset connection
                // while the broker is down: retry the same batch.
                _ => {
                    if give_up.load(Ordering::Relaxed) {
                        return retried;
                    }
                    retried += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    retried
}

/// Deliveries in order: (producer, sequence number).
type Delivered = Arc<Mutex<Vec<(u64, u64)>>>;

/// Pop and ack until `done`, through every fault; errors are retried.
async fn consume(client: Client, delivered: Delivered, done: Arc<AtomicBool>) {
    let path = format!("/api/v1/pop/queue/{QUEUE}?batch=100&wait=true&timeout=500");
    while !done.load(Ordering::Relaxed) {
        let popped = tokio::time::timeout(
            Duration::from_secs(40),
            client.try_send(Method::GET, &path, Bytes::new()),
        )
        .await
        .expect("a pop hung");
        let Ok(reply) = popped else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if reply.status != 200 {
            assert!(
                reply.status == 204 || reply.status == 503,
                "pop answered {}",
                reply.status
            );
            continue;
        }
        let body = reply.json();
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let mut acks = Vec::new();
        {
            let mut delivered = delivered.lock();
            for message in &messages {
                let data = &message["data"];
                delivered.push((
                    data["producer"].as_u64().unwrap(),
                    data["seq"].as_u64().unwrap(),
                ));
                acks.push(json!({"transactionId": message["transactionId"],
                                 "partitionId": message["partitionId"],
                                 "leaseId": message["leaseId"], "status": "completed"}));
            }
        }
        // An ack lost to a fault only means a redelivery after the lease.
        let body = Bytes::from(serde_json::to_vec(&json!({ "acknowledgments": acks })).unwrap());
        let _ = client
            .try_send(Method::POST, "/api/v1/ack/batch", body)
            .await;
    }
}

/// Exactly the acknowledged messages are stored, each once (a push that
/// committed but never answered would show as one more).
async fn check_stored(url: &str, acked: &Acked) {
    let acked = acked.lock().len();
    let db = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(db.1);
    let stored: i64 =
        db.0.query_one(
            "SELECT coalesce(sum(msg_count), 0)::bigint FROM queen.log_segments",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, i64::try_from(acked).unwrap(), "stored exactly once");
}

/// Every acknowledged message delivered at least once, and each partition's
/// first deliveries in push order.
fn check_delivered(acked: &Acked, delivered: &Delivered) {
    let acked = acked.lock().clone();
    let delivered = delivered.lock().clone();
    let seen: HashSet<(u64, u64)> = delivered.iter().copied().collect();
    let missing: Vec<_> = acked.difference(&seen).take(10).collect();
    assert!(missing.is_empty(), "never delivered: {missing:?}...");
    let mut first_seen: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut once = HashSet::new();
    for (producer, seq) in delivered {
        if once.insert((producer, seq)) {
            first_seen.entry(producer).or_default().push(seq);
        }
    }
    for (producer, seqs) in first_seen {
        assert!(
            seqs.windows(2).all(|pair| pair[0] < pair[1]),
            "partition p{producer} was first delivered out of order"
        );
    }
}

/// Configure the queue with a short lease, so a batch a fault took is
/// redelivered soon.
async fn configure(client: &Client) {
    let reply = client
        .post_json(
            "/api/v1/configure",
            &json!({"queue": QUEUE, "options": {"leaseTime": 2}}),
        )
        .await;
    assert_eq!(reply.status, 200);
}

/// Wait until the producers acknowledged `count` messages.
async fn until(progress: &AtomicUsize, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while progress.load(Ordering::Relaxed) < count {
        assert!(Instant::now() < deadline, "the producers stalled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What goes down past half-way through [`survive_faults`].
enum Outage {
    /// The test's own PostgreSQL, stopped for two seconds (stopped for good
    /// at the end).
    Postgres(Cluster),
    /// A worker of the Citus cluster under test (its data directory),
    /// stopped for two seconds.
    CitusWorker(std::path::PathBuf),
}

/// With `queen_testkit::CITUS_VAR` set (`cargo xtask citus test`), on
/// Citus: the database a distributed one on that cluster, and the worker
/// whose data directory `QUEEN_TEST_CITUS_WORKER_DIR` names is what is
/// stopped and started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_pops_and_acks_survive_a_broker_sigkill_and_a_postgres_restart() {
    let scratch = scratch();
    if std::env::var_os(queen_testkit::CITUS_VAR).is_some() {
        let worker = std::env::var_os("QUEEN_TEST_CITUS_WORKER_DIR")
            .expect("QUEEN_TEST_CITUS_WORKER_DIR: a Citus worker's data directory");
        let db = queen_testkit::TestDb::new().await;
        survive_faults(&scratch, db.url(), Outage::CitusWorker(worker.into())).await;
        return;
    }
    let (cluster, url) = own_cluster(scratch.path()).await;
    survive_faults(&scratch, url, Outage::Postgres(cluster)).await;
}

/// Producers and a consumer through a broker SIGKILL (a quarter in) and
/// `outage` (past half): every acknowledged message stored once, delivered,
/// in order per partition.
async fn survive_faults(scratch: &tempfile::TempDir, url: String, outage: Outage) {
    const PRODUCERS: u64 = 4;
    const BATCHES: u64 = 60;
    let total = usize::try_from(PRODUCERS * BATCHES).unwrap() * BATCH;
    let vars = [("QUEEN_DATABASE_URL", url.as_str())];
    let broker = Broker::start(scratch.path(), &vars).await;
    let port = broker.port();
    let client = broker.client.clone();
    configure(&client).await;

    let acked: Acked = Arc::default();
    let delivered: Delivered = Arc::default();
    let progress = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let never = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|producer| {
            tokio::spawn(produce(
                client.clone(),
                producer,
                BATCHES,
                Arc::clone(&acked),
                Arc::clone(&progress),
                Arc::clone(&never),
                Arc::default(),
            ))
        })
        .collect();
    let consumer = tokio::spawn(consume(
        client.clone(),
        Arc::clone(&delivered),
        Arc::clone(&done),
    ));

    // A quarter in: SIGKILL the broker mid-batch, start it again on its port.
    until(&progress, total / 4).await;
    tokio::task::spawn_blocking(move || broker.kill())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let broker = Broker::start_at(port, None, scratch.path(), &vars).await;

    // Past half: stop PostgreSQL or the Citus worker (fast: sessions cut,
    // transactions rolled back) for two seconds, then start it again.
    until(&progress, total * 6 / 10).await;
    let cluster = match outage {
        Outage::Postgres(cluster) => Some(restart_postgres(cluster, Duration::from_secs(2)).await),
        Outage::CitusWorker(dir) => {
            tokio::task::spawn_blocking(move || restart_data_dir(&dir, Duration::from_secs(2)))
                .await
                .unwrap();
            None
        }
    };

    let mut retried = 0;
    for producer in producers {
        retried += producer.await.expect("a producer failed");
    }
    assert!(retried > 0, "no push met a fault: the test saw nothing");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen: HashSet<(u64, u64)> = delivered.lock().iter().copied().collect();
        if seen.len() >= total || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done.store(true, Ordering::Relaxed);
    consumer.await.expect("the consumer failed");
    assert_eq!(acked.lock().len(), total);
    check_stored(&url, &acked).await;
    check_delivered(&acked, &delivered);

    let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");
    if let Some(mut cluster) = cluster {
        tokio::task::spawn_blocking(move || cluster.stop())
            .await
            .unwrap()
            .unwrap();
    }
}

/// Stop the PostgreSQL instance of data directory `dir` (fast), wait
/// `down`, start it again: `pg_ctl`, as `postgres` when this is root.
fn restart_data_dir(dir: &std::path::Path, down: Duration) {
    let pg_ctl = queen_pg::cluster::locate_program(None, "pg_ctl").expect("pg_ctl");
    let run = |args: &[&str]| {
        let status = queen_pg::cluster::service_command(&pg_ctl)
            .args(args)
            .arg("-D")
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run pg_ctl");
        assert!(status.success(), "pg_ctl {args:?} -D {}", dir.display());
    };
    run(&["stop", "-w", "-m", "fast"]);
    std::thread::sleep(down);
    run(&["start", "-w", "-l", &dir.join("log").display().to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_in_flight_pushes_and_a_second_signal_exits_at_once() {
    let scratch = scratch();
    let (mut cluster, url) = own_cluster(scratch.path()).await;
    let vars = [
        ("QUEEN_DATABASE_URL", url.as_str()),
        ("QUEEN_SHUTDOWN_TIMEOUT_SECONDS", "60"),
        ("QUEEN_BODY_TIMEOUT_MS", "60000"),
    ];

    // Pushes in flight when SIGTERM arrives: each answers (a 201 whose
    // messages are stored, or an error), none hangs, nothing acknowledged
    // is lost.
    let broker = Broker::start(scratch.path(), &vars).await;
    let client = broker.client.clone();
    let acked: Acked = Arc::default();
    let progress = Arc::new(AtomicUsize::new(0));
    let give_up = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..4)
        .map(|producer| {
            tokio::spawn(produce(
                client.clone(),
                producer,
                1_000,
                Arc::clone(&acked),
                Arc::clone(&progress),
                Arc::clone(&give_up),
                Arc::default(),
            ))
        })
        .collect();
    until(&progress, 20 * BATCH).await;
    let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");
    let signalled = log.find("SIGTERM").expect("the signal is logged");
    let closed = log
        .find("closing the connection pool")
        .expect("the pool is closed");
    assert!(signalled < closed, "{log}");
    give_up.store(true, Ordering::Relaxed);
    for producer in producers {
        producer.await.expect("a producer failed");
    }
    check_stored(&url, &acked).await;

    // A second signal exits at once, while a request holds the drain.
    let mut broker = Broker::start(scratch.path(), &vars).await;
    let addr = format!("127.0.0.1:{}", broker.port());
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(
        &mut slow,
        b"POST /api/v1/push HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"items\":",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    broker.signal(nix::sys::signal::Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        broker.wait_exit(Duration::ZERO).is_none(),
        "the drain should still wait for the slow request"
    );
    let second = Instant::now();
    broker.signal(nix::sys::signal::Signal::SIGTERM);
    let status = tokio::task::spawn_blocking(move || broker.wait_exit(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("a second SIGTERM must exit at once");
    assert_eq!(status.code(), Some(130));
    assert!(second.elapsed() < Duration::from_secs(5));
    drop(slow);
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .unwrap()
        .unwrap();
}

/// The spool's state: `GET /api/v1/system/maintenance`, or `None` while
/// the broker does not answer.
async fn spool_state(client: &Client) -> Option<Value> {
    let reply = client
        .try_send(Method::GET, "/api/v1/system/maintenance", Bytes::new())
        .await
        .ok()?;
    (reply.status == 200).then(|| reply.json())
}

async fn set_maintenance(client: &Client, enabled: bool) {
    let reply = client
        .post_json("/api/v1/system/maintenance", &json!({ "enabled": enabled }))
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
}

/// Start `producers` producers (partitions `p{first}`...) of `batches`
/// batches each, counting into `progress` and `buffered`.
fn wave(
    client: &Client,
    producers: std::ops::Range<u64>,
    batches: u64,
    acked: &Acked,
    progress: &Arc<AtomicUsize>,
    buffered: &Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<usize>> {
    producers
        .map(|producer| {
            tokio::spawn(produce(
                client.clone(),
                producer,
                batches,
                Arc::clone(acked),
                Arc::clone(progress),
                Arc::new(AtomicBool::new(false)),
                Arc::clone(buffered),
            ))
        })
        .collect()
}

/// Wait until the spool is empty.
async fn until_drained(client: &Client) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while spool_state(client)
        .await
        .is_none_or(|s| s["bufferedMessages"] != 0)
    {
        assert!(Instant::now() < deadline, "the spool did not drain");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Pushes through a maintenance window with a SIGKILL while the
/// spool holds pushes, then through a PostgreSQL outage; afterwards every
/// acknowledged message (queued, duplicate or buffered) is stored exactly
/// once, delivered, and each partition's first deliveries come in push
/// order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_a_sigkill_with_a_full_spool_and_an_outage_lose_and_duplicate_nothing() {
    const BATCHES: u64 = 60;
    let per_wave = usize::try_from(4 * BATCHES).unwrap() * BATCH;
    let scratch = scratch();
    let (cluster, url) = own_cluster(scratch.path()).await;
    let vars = [
        ("QUEEN_DATABASE_URL", url.as_str()),
        ("QUEEN_SPOOL_PUSH_TIMEOUT_MS", "2000"),
    ];
    let broker = Broker::start(scratch.path(), &vars).await;
    let port = broker.port();
    let client = broker.client.clone();
    configure(&client).await;

    let acked: Acked = Arc::default();
    let delivered: Delivered = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let consumer = tokio::spawn(consume(
        client.clone(),
        Arc::clone(&delivered),
        Arc::clone(&done),
    ));

    // Wave one, a tenth in: maintenance on; once the spool holds pushes,
    // SIGKILL the broker and start it again on its port (and spool).
    let (progress, in_maintenance) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
    let first = wave(&client, 0..4, BATCHES, &acked, &progress, &in_maintenance);
    until(&progress, per_wave / 10).await;
    set_maintenance(&client, true).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while spool_state(&client)
        .await
        .map_or(0, |s| s["bufferedMessages"].as_u64().unwrap_or(0))
        < 4 * BATCH as u64
    {
        assert!(Instant::now() < deadline, "nothing was spooled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::task::spawn_blocking(move || broker.kill())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let broker = Broker::start_at(port, None, scratch.path(), &vars).await;
    // The restarted broker found its spool and still follows maintenance.
    let state = spool_state(&client)
        .await
        .expect("the restarted broker answers");
    assert_eq!(state["maintenanceMode"], true, "{state}");
    assert!(state["bufferedMessages"].as_u64().unwrap() > 0, "{state}");
    until(&progress, per_wave / 2).await;
    set_maintenance(&client, false).await;
    for producer in first {
        producer.await.expect("a producer failed");
    }
    until_drained(&client).await;
    assert!(in_maintenance.load(Ordering::Relaxed) > 0);

    // Wave two, a tenth in: stop PostgreSQL for three seconds; pushes meet
    // the outage and are spooled, and drained once it is back.
    let (progress, in_outage) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
    let second = wave(&client, 4..8, BATCHES, &acked, &progress, &in_outage);
    until(&progress, per_wave / 10).await;
    let mut cluster = restart_postgres(cluster, Duration::from_secs(3)).await;
    for producer in second {
        producer.await.expect("a producer failed");
    }
    let state = spool_state(&client).await.expect("the broker answers");
    let failover = state["bufferStats"]["failedFiles"]["failoverCount"]
        .as_u64()
        .unwrap();
    assert!(
        failover > 0,
        "no push was spooled during the outage: {state}"
    );
    assert!(in_outage.load(Ordering::Relaxed) > 0);
    until_drained(&client).await;

    let total = 2 * per_wave;
    let deadline = Instant::now() + Duration::from_secs(60);
    while delivered
        .lock()
        .iter()
        .copied()
        .collect::<HashSet<_>>()
        .len()
        < total
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done.store(true, Ordering::Relaxed);
    consumer.await.expect("the consumer failed");
    let state = spool_state(&client).await.expect("the broker answers");
    assert_eq!(state["bufferStats"]["failedCount"], 0, "{state}");
    assert_eq!(acked.lock().len(), total);
    check_stored(&url, &acked).await;
    check_delivered(&acked, &delivered);

    let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .unwrap()
        .unwrap();
}
