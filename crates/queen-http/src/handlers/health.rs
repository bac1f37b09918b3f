//! `GET /health`: 200 while PostgreSQL answers, 503 (`HttpError::Unhealthy`)
//! while it does not.

use hyper::StatusCode;
use queen_engine::Engine;

use crate::error::HttpError;
use crate::response::{self, Response};

/// The version reported on the wire.
const VERSION: &str = env!("CARGO_PKG_VERSION");

pub(crate) async fn get(engine: &Engine) -> Result<Response, HttpError> {
    let health = engine.health().await;
    let (word, database) = if health.database_connected {
        ("healthy", "connected")
    } else {
        ("unhealthy", "disconnected")
    };
    let body = serde_json::json!({
        "status": word,
        "database": database,
        "server": engine.config().server_name,
        "worker_id": 0,
        "version": VERSION,
        "storage": "segments",
        "uptimeSeconds": health.uptime_seconds,
    });
    if health.database_connected {
        Ok(response::json(StatusCode::OK, &body))
    } else {
        Err(HttpError::Unhealthy(body))
    }
}
