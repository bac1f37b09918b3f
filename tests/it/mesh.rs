//! Several brokers on one database (the mesh issue), in process: a push on
//! one broker wakes a consumer parked on another at once, through
//! `LISTEN`/`NOTIFY` or UDP hints; invalidations reach peers; a lost hint
//! costs at most one hot-list reseed. The three-process tests are in
//! `crates/queen-server/tests/it/mesh.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use queen_engine::{EngineConfig, MeshConfig, MeshTransport};
use queen_testkit::TestDb;
use queen_tests::TestBroker;
use serde_json::json;

use crate::support::{configure, push};

/// Brokers on one database; `reseed` their hot-list reseed period.
fn notify_config(db: &TestDb, reseed: Duration, drop_inbound: bool) -> EngineConfig {
    EngineConfig {
        hotlist_reseed: reseed,
        mesh: Some(MeshConfig {
            transport: MeshTransport::Notify(Box::new(db.config())),
            drop_inbound,
        }),
        ..EngineConfig::default()
    }
}

/// Two brokers with UDP meshes naming each other on loopback.
fn udp_configs(secret: &[u8], reseed: Duration) -> (EngineConfig, EngineConfig) {
    let bind = || std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (a, b) = (bind(), bind());
    let (a_port, b_port) = (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    );
    let config = |socket: std::net::UdpSocket, peer: u16| EngineConfig {
        hotlist_reseed: reseed,
        mesh: Some(MeshConfig {
            transport: MeshTransport::Udp {
                socket: Arc::new(socket),
                peers: vec![format!("127.0.0.1:{peer}")],
                secret: secret.to_vec(),
            },
            drop_inbound: false,
        }),
        ..EngineConfig::default()
    };
    (config(a, b_port), config(b, a_port))
}

/// `GET /api/v1/system/shared-state` of `broker`.
async fn shared_state(broker: &TestBroker) -> serde_json::Value {
    let reply = broker.client.get("/api/v1/system/shared-state").await;
    assert_eq!(reply.status, 200);
    reply.json()
}

/// What `listener`'s shared state says of `talker`: its entry among the
/// brokers heard from.
async fn heard_of(listener: &TestBroker, talker: &TestBroker) -> serde_json::Value {
    let id = shared_state(talker).await["server_id"].clone();
    let state = shared_state(listener).await;
    state["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|peer| peer["server_id"] == id)
        .unwrap_or_else(|| panic!("{id} not heard of: {state}"))
        .clone()
}

/// The address a UDP mesh config's socket is bound to.
fn udp_addr(config: &EngineConfig) -> std::net::SocketAddr {
    match &config.mesh.as_ref().unwrap().transport {
        MeshTransport::Udp { socket, .. } => socket.local_addr().unwrap(),
        MeshTransport::Notify(_) => unreachable!(),
    }
}

/// A consumer parked on `consumer` (long-poll up to 10 s), then one push on
/// `producer`: how long until the consumer had it.
async fn wake_latency(producer: &TestBroker, consumer: &TestBroker, queue: &str) -> Duration {
    // The consumer's ring exists and is caught up before it parks.
    let reply = consumer
        .client
        .get(&format!("/api/v1/pop/queue/{queue}?autoAck=true"))
        .await;
    assert!(reply.status.is_success());
    let client = consumer.client.clone();
    let path = format!("/api/v1/pop/queue/{queue}?wait=true&timeout=10000&autoAck=true");
    let parked = tokio::spawn(async move {
        let reply = client.get(&path).await;
        (reply.json(), Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pushed_at = Instant::now();
    push(producer, queue, "Default", &[json!({"at": "now"})]).await;
    let (popped, at) = parked.await.unwrap();
    assert_eq!(
        popped["messages"].as_array().map(Vec::len),
        Some(1),
        "{popped}"
    );
    at - pushed_at
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_on_one_broker_wakes_a_consumer_parked_on_another_through_notify() {
    let db = TestDb::new().await;
    // A long reseed: without the hint the consumer would wait for it.
    let reseed = Duration::from_secs(30);
    let a = TestBroker::serve(db.clone(), notify_config(&db, reseed, false)).await;
    let b = TestBroker::serve(db.clone(), notify_config(&db, reseed, false)).await;
    configure(&a, "q", json!({})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..5 {
        let latency = wake_latency(&a, &b, "q").await;
        assert!(latency < Duration::from_secs(2), "woken after {latency:?}");
    }
    let stats = b.engine.observe().mesh_stats().unwrap();
    assert!(stats.received_hints >= 5, "{stats:?}");
    // What b knows of its mesh: NOTIFY, a's batches and when it last heard.
    let state = shared_state(&b).await;
    assert_eq!(
        (state["enabled"].clone(), state["transport"]["mode"].clone()),
        (json!(true), json!("notify"))
    );
    assert!(state["hints"]["received"].as_u64().unwrap() >= 5, "{state}");
    assert!(
        state["caches"]["hotlist_queues"].as_u64().unwrap() >= 1,
        "{state}"
    );
    let a_seen = heard_of(&b, &a).await;
    assert!(a_seen["hints"].as_u64().unwrap() >= 5, "{a_seen}");
    assert_eq!(a_seen["address"], serde_json::Value::Null);
    assert!(
        a_seen["seconds_since_heard"].as_f64().unwrap() < 30.0,
        "{a_seen}"
    );
    assert!(
        a_seen["last_heard"].as_str().unwrap().ends_with('Z'),
        "{a_seen}"
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_without_a_mesh_says_so() {
    let broker = TestBroker::start().await;
    let state = shared_state(&broker).await;
    assert_eq!(
        (state["enabled"].clone(), state["peers"].clone()),
        (json!(false), serde_json::Value::Null)
    );
    assert_eq!(state["maintenance_mode"], false);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_hints_wake_peers_and_unsigned_or_replayed_datagrams_are_dropped() {
    let db = TestDb::new().await;
    let (a_config, b_config) = udp_configs(b"mesh-secret", Duration::from_secs(30));
    let b_port = udp_addr(&b_config).port();
    let a_addr = udp_addr(&a_config).to_string();
    let a = TestBroker::serve(db.clone(), a_config).await;
    let b = TestBroker::serve(db.clone(), b_config).await;
    configure(&a, "u", json!({})).await;
    for _ in 0..3 {
        let latency = wake_latency(&a, &b, "u").await;
        assert!(latency < Duration::from_secs(2), "woken after {latency:?}");
    }
    let before = b.engine.observe().mesh_stats().unwrap();
    assert!(before.received_hints >= 3, "{before:?}");
    // Forged: garbage, and a well-formed batch tagged with another secret.
    let attacker = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = format!("127.0.0.1:{b_port}");
    attacker.send_to(b"not a batch at all", &target).unwrap();
    let forged = queen_engine::mesh_test_datagram(b"wrong-secret", 99, 1);
    attacker.send_to(&forged, &target).unwrap();
    // Replayed: a datagram signed with the right secret, sent twice.
    let genuine = queen_engine::mesh_test_datagram(b"mesh-secret", 77, 1);
    attacker.send_to(&genuine, &target).unwrap();
    attacker.send_to(&genuine, &target).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let after = loop {
        let after = b.engine.observe().mesh_stats().unwrap();
        if after.dropped_unsigned >= before.dropped_unsigned + 2
            && after.dropped_replayed > before.dropped_replayed
        {
            break after;
        }
        assert!(Instant::now() < deadline, "{after:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        after.received_batches,
        before.received_batches + 1,
        "{after:?}"
    );
    // b's shared state: UDP to its configured peer, a heard from its
    // socket, the forged and replayed datagrams counted.
    let state = shared_state(&b).await;
    assert_eq!(state["transport"]["mode"], "udp", "{state}");
    assert_eq!(
        state["transport"]["configured_peers"],
        json!([a_addr]),
        "{state}"
    );
    assert_eq!(
        state["transport"]["resolved_peers"],
        json!([a_addr]),
        "{state}"
    );
    assert!(
        state["hints"]["dropped_unsigned"].as_u64().unwrap() >= 2,
        "{state}"
    );
    assert!(
        state["hints"]["dropped_replayed"].as_u64().unwrap() >= 1,
        "{state}"
    );
    assert_eq!(heard_of(&b, &a).await["address"], json!(a_addr));
    a.stop().await;
    b.stop().await;
}

/// With every hint lost, a consumer parked on the other broker still gets
/// the message within one reseed period (plus the backoff re-poll).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_hint_costs_at_most_one_reseed() {
    let db = TestDb::new().await;
    let reseed = Duration::from_millis(1500);
    let a = TestBroker::serve(db.clone(), notify_config(&db, reseed, false)).await;
    let b = TestBroker::serve(db.clone(), notify_config(&db, reseed, true)).await;
    configure(&a, "lossy", json!({})).await;
    for _ in 0..3 {
        let latency = wake_latency(&a, &b, "lossy").await;
        assert!(
            latency < reseed + Duration::from_millis(1500),
            "woken after {latency:?}"
        );
    }
    a.stop().await;
    b.stop().await;
}

/// A queue deleted through one broker: a pop parked on it on another
/// broker answers at once (the peer's gate closes), where without the hint
/// it would wait out its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_deleted_through_one_broker_ends_pops_parked_on_another() {
    let db = TestDb::new().await;
    let reseed = Duration::from_secs(30);
    let a = TestBroker::serve(db.clone(), notify_config(&db, reseed, false)).await;
    let b = TestBroker::serve(db.clone(), notify_config(&db, reseed, false)).await;
    configure(&a, "doomed", json!({})).await;
    let reply = b.client.get("/api/v1/pop/queue/doomed?autoAck=true").await;
    assert!(reply.status.is_success());
    let client = b.client.clone();
    let parked = tokio::spawn(async move {
        let started = Instant::now();
        client
            .get("/api/v1/pop/queue/doomed?wait=true&timeout=10000")
            .await;
        started.elapsed()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reply = a.client.delete("/api/v1/resources/queues/doomed").await;
    assert_eq!(reply.status, 200);
    let waited = parked.await.unwrap();
    assert!(
        waited < Duration::from_secs(3),
        "the parked pop waited {waited:?}"
    );
    a.stop().await;
    b.stop().await;
}
