//! Three broker processes on one PostgreSQL (the mesh issue, item 5), with
//! the UDP mesh on loopback ports: cross-broker wake latency, consumers
//! spread over all three receiving every message exactly once and in order
//! per partition, acks on a broker that did not serve the pop, a broker
//! SIGKILLed mid-lease losing nothing, and the official Python client with
//! several URLs.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use queen_testkit::http::Client;
use queen_testkit::TestDb;
use serde_json::{json, Value};

use crate::harness::Broker;
use crate::sdk::{python, run_limited, workspace_root};

const SECRET: &str = "three-brokers-secret";

/// A UDP port free now on loopback.
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|socket| socket.local_addr())
        .map(|addr| addr.port())
        .expect("bind a UDP port")
}

/// Three brokers on `url`, each naming the other two as peers.
async fn three(scratch: &std::path::Path, url: &str) -> Vec<Broker> {
    let ports: Vec<u16> = (0..3).map(|_| free_udp_port()).collect();
    let mut brokers = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let peers: Vec<String> = ports
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, peer)| format!("127.0.0.1:{peer}"))
            .collect();
        let (port, peers) = (port.to_string(), peers.join(","));
        brokers.push(
            Broker::start(
                scratch,
                &[
                    ("QUEEN_DATABASE_URL", url),
                    ("QUEEN_PEERS", &peers),
                    ("QUEEN_SYNC_PORT", &port),
                    ("QUEEN_SYNC_SECRET", SECRET),
                    // A long reseed: a message found late would show.
                    ("QUEEN_HOTLIST_RESEED_MS", "30000"),
                ],
            )
            .await,
        );
    }
    brokers
}

async fn post(client: &Client, path: &str, body: &Value) -> Value {
    let reply = client.post_json(path, body).await;
    assert!(
        reply.status.is_success(),
        "{path}: {} {}",
        reply.status,
        String::from_utf8_lossy(&reply.body)
    );
    serde_json::from_slice(&reply.body).unwrap_or(Value::Null)
}

/// Push-to-delivery latency across brokers: a consumer parked on broker
/// `to`, one push on broker `from`, `samples` times.
async fn cross_broker_latencies(brokers: &[Broker], samples: usize) -> Vec<Duration> {
    post(
        &brokers[0].client,
        "/api/v1/configure",
        &json!({"queue": "wake"}),
    )
    .await;
    let mut latencies = Vec::new();
    for i in 0..samples {
        let (from, to) = (&brokers[i % 3], &brokers[(i + 1) % 3]);
        to.client.get("/api/v1/pop/queue/wake?autoAck=true").await;
        let client = to.client.clone();
        let parked = tokio::spawn(async move {
            let reply = client
                .get("/api/v1/pop/queue/wake?wait=true&timeout=10000&autoAck=true")
                .await;
            (reply.status, Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        let pushed = Instant::now();
        post(
            &from.client,
            "/api/v1/push",
            &json!({"items": [{"queue": "wake", "payload": i}]}),
        )
        .await;
        let (status, at) = parked.await.unwrap();
        assert_eq!(status, 200, "sample {i} was not delivered");
        latencies.push(at - pushed);
    }
    latencies.sort();
    latencies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_brokers_wake_across_share_consumers_and_survive_a_sigkill() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let db = TestDb::empty().await;
    let url = db.url();
    let mut brokers = three(scratch.path(), &url).await;

    // 1. Cross-broker wake latency.
    let latencies = cross_broker_latencies(&brokers, 30).await;
    let (p50, p99) = (
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
    );
    println!("cross-broker wake over UDP: p50 {p50:?}, p99 {p99:?} (30 samples)");
    assert!(p99 < Duration::from_secs(1), "p99 {p99:?}: {latencies:?}");

    // 2. Consumers on all three, acks on another broker than the pop's:
    // every message exactly once, in order per partition.
    post(
        &brokers[0].client,
        "/api/v1/configure",
        &json!({"queue": "spread", "options": {"leaseTime": 30}}),
    )
    .await;
    let received: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
    let acked_elsewhere = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    const TOTAL: i64 = 240;
    let mut consumers = Vec::new();
    for c in 0..3 {
        let (pops, acks) = (
            brokers[c].client.clone(),
            brokers[(c + 1) % 3].client.clone(),
        );
        let (received, acked_elsewhere) = (Arc::clone(&received), Arc::clone(&acked_elsewhere));
        consumers.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while (received.lock().len() as i64) < TOTAL && Instant::now() < deadline {
                let reply = pops
                    .get("/api/v1/pop/queue/spread?batch=10&wait=true&timeout=1000")
                    .await;
                if reply.status != 200 {
                    continue;
                }
                let popped = reply.json();
                let mut acks_body = Vec::new();
                {
                    let mut received = received.lock();
                    for message in popped["messages"].as_array().unwrap() {
                        received.push((
                            message["partition"].as_str().unwrap().to_owned(),
                            message["data"]["seq"].as_i64().unwrap(),
                        ));
                        acks_body.push(json!({
                            "transactionId": message["transactionId"],
                            "partitionId": message["partitionId"],
                            "leaseId": message["leaseId"],
                            "status": "completed"}));
                    }
                }
                let answer = post(
                    &acks,
                    "/api/v1/ack/batch",
                    &json!({"acknowledgments": acks_body}),
                )
                .await;
                assert!(
                    answer
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|a| a["success"] == true),
                    "an ack on another broker failed: {answer}"
                );
                acked_elsewhere.fetch_add(acks_body.len(), std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    for seq in 0..TOTAL {
        let broker = &brokers[usize::try_from(seq).unwrap() % 3];
        post(
            &broker.client,
            "/api/v1/push",
            &json!({"items": [{"queue": "spread", "partition": format!("p{}", seq % 4),
                               "payload": {"seq": seq}}]}),
        )
        .await;
        if seq % 20 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    for consumer in consumers {
        consumer.await.unwrap();
    }
    let received = received.lock().clone();
    let mut seqs: Vec<i64> = received.iter().map(|(_, seq)| *seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..TOTAL).collect::<Vec<_>>(), "not exactly once");
    let mut last: HashMap<String, i64> = HashMap::new();
    for (partition, seq) in &received {
        let before = last.insert(partition.clone(), *seq);
        assert!(
            before.is_none_or(|before| before < *seq),
            "{partition}: {seq} after {before:?}"
        );
    }
    assert_eq!(
        acked_elsewhere.load(std::sync::atomic::Ordering::Relaxed),
        usize::try_from(TOTAL).unwrap()
    );

    // 3. A broker SIGKILLed holding a lease loses nothing: the lease
    // expires and another broker delivers the message.
    post(
        &brokers[0].client,
        "/api/v1/configure",
        &json!({"queue": "killed", "options": {"leaseTime": 2}}),
    )
    .await;
    post(
        &brokers[0].client,
        "/api/v1/push",
        &json!({"items": [{"queue": "killed", "payload": "survives"}]}),
    )
    .await;
    let popped = brokers[2]
        .client
        .get("/api/v1/pop/queue/killed")
        .await
        .json();
    assert_eq!(popped["messages"][0]["data"], "survives");
    brokers.pop().expect("the third broker").kill();
    let deadline = Instant::now() + Duration::from_secs(15);
    let again = loop {
        let reply = brokers[0]
            .client
            .get("/api/v1/pop/queue/killed?wait=true&timeout=2000")
            .await;
        if reply.status == 200 {
            break reply.json();
        }
        assert!(
            Instant::now() < deadline,
            "the leased message never came back"
        );
    };
    assert_eq!(again["messages"][0]["data"], "survives");

    for broker in brokers {
        let (status, log) = broker.terminate();
        assert!(status.success(), "{log}");
    }
}

/// The official Python client with the three brokers' URLs, round-robin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_with_several_urls_works_across_brokers() {
    let python = python().await;
    let scratch = tempfile::tempdir().expect("temp dir");
    let db = TestDb::empty().await;
    let url = db.url();
    let brokers = three(scratch.path(), &url).await;
    let urls: Vec<String> = brokers
        .iter()
        .map(|broker| broker.client.base().to_owned())
        .collect();
    let urls = urls.join(",");
    let script = workspace_root().join("tests/sdk/mesh_e2e.py");
    let run = tokio::task::spawn_blocking(move || {
        run_limited(
            Command::new(&python)
                .arg(&script)
                .env("QUEEN_URLS", &urls)
                .env("NO_PROXY", "127.0.0.1,localhost"),
            Duration::from_secs(300),
        )
    })
    .await
    .expect("script task")
    .unwrap_or_else(|error| panic!("{error}"));
    assert!(
        run.ok() && run.stdout.contains("mesh: all scenarios passed"),
        "{}",
        run.describe()
    );
    for broker in brokers {
        let (status, log) = broker.terminate();
        assert!(status.success(), "{log}");
    }
}
