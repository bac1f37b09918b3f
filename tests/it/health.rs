//! `/health` and the behaviour every route shares (CORS, JSON errors).

use queen_engine::{Engine, EngineConfig};
use queen_tests::TestBroker;

#[tokio::test]
async fn health_is_200_with_the_contract_fields() {
    let broker = TestBroker::start().await;
    let reply = broker.client.get("/health").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers["content-type"], "application/json");
    assert_eq!(reply.headers["access-control-allow-origin"], "*");
    let body = reply.json();
    assert_eq!(body["status"], "healthy");
    assert_eq!(body["database"], "connected");
    assert_eq!(body["worker_id"], 0);
    assert!(body["version"].is_string());
    broker.stop().await;
}

#[tokio::test]
async fn health_is_503_when_the_database_cannot_be_reached() {
    let (client, unreachable) = crate::support::serve_unreachable(EngineConfig::default()).await;
    let reply = client.get("/health").await;
    assert_eq!(reply.status, 503);
    let body = reply.json();
    assert_eq!(body["status"], "unhealthy");
    assert_eq!(body["database"], "disconnected");
    unreachable.stop().await;
}

#[tokio::test]
async fn unknown_routes_get_a_json_404_and_preflight_gets_204() {
    let broker = TestBroker::start().await;
    let reply = broker.client.get("/api/v1/nope").await;
    assert_eq!(reply.status, 404);
    assert!(reply.json()["error"]
        .as_str()
        .unwrap()
        .contains("/api/v1/nope"));
    let preflight = broker
        .client
        .send(hyper::Method::OPTIONS, "/api/v1/push", bytes::Bytes::new())
        .await;
    assert_eq!(preflight.status, 204);
    assert!(preflight.body.is_empty());
    assert_eq!(
        preflight.headers["access-control-allow-methods"],
        "GET, POST, PUT, DELETE, OPTIONS"
    );
    broker.stop().await;
}

/// Issue 14, item 9: the check used to wait for a pooled connection (up to
/// 10 s), so a busy pool read as "database disconnected". It has a
/// connection of its own now.
#[tokio::test]
async fn health_answers_connected_while_every_pooled_connection_is_busy() {
    let db = queen_testkit::TestDb::new().await;
    let pool = db.pool(2);
    let engine = Engine::new(pool.clone(), EngineConfig::default());
    let held = (pool.get().await.unwrap(), pool.get().await.unwrap());
    assert_eq!(engine.observe().connections_in_use(), 2);
    let started = std::time::Instant::now();
    let health = engine.health().await;
    assert!(health.database_connected);
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    drop(held);
}
