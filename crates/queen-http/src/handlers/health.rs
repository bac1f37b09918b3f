//! `GET /health`: 200 while PostgreSQL answers, 503 while it does not.

use hyper::StatusCode;
use queen_engine::Engine;

use crate::response::{self, Response};

/// The version reported on the wire.
const VERSION: &str = env!("CARGO_PKG_VERSION");

pub(crate) async fn get(engine: &Engine) -> Response {
    let health = engine.health().await;
    let (status, word, database) = if health.database_connected {
        (StatusCode::OK, "healthy", "connected")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "unhealthy", "disconnected")
    };
    response::json(
        status,
        &serde_json::json!({
            "status": word,
            "database": database,
            "server": engine.config().server_name,
            "worker_id": 0,
            "version": VERSION,
            "storage": "segments",
            "uptimeSeconds": health.uptime_seconds,
        }),
    )
}
