//! Maintenance mode (wire-api.md §4) and the spool's status.
//!
//! - `GET /api/v1/system/maintenance`: `{maintenanceMode, popMaintenanceMode,
//!   bufferedMessages, bufferHealthy, bufferStats: {pendingCount,
//!   failedCount, dbHealthy, failedFiles: {count, totalBytes, totalMB,
//!   failoverCount}}}`. `bufferedMessages` is the spool's pending
//!   records (clients poll it until 0 after turning maintenance off);
//!   `failoverCount` counts pushes spooled because the database was
//!   unreachable. The reference's `qos0Count` is left out: there is no
//!   QoS-0 buffer (docs/admin-api.md).
//! - `POST /api/v1/system/maintenance` `{"enabled": bool}` (anything else is
//!   400 `enabled (boolean) is required`): persisted in PostgreSQL for every
//!   broker on the database; answers `{maintenanceMode, bufferedMessages,
//!   bufferHealthy, message}`.
//! - `GET|POST /api/v1/system/maintenance/pop`: pop maintenance mode, the
//!   same way; `{popMaintenanceMode, message}`. While on, every pop answers
//!   204 at once.
//! - `GET /api/v1/status/buffers`: `{pending, failed, dbHealthy, worker,
//!   spooling, failedFiles, note}`.
//!
//! Without a spool (an embedded engine configured without one) the counts
//! are 0, `bufferHealthy` is false, and pushes during maintenance answer 503.

use hyper::StatusCode;
use queen_engine::{Engine, SpoolStats};
use serde_json::{json, Value};

use crate::context::Request;
use crate::error::HttpError;
use crate::response::{self, Response};

/// The `enabled` flag of a maintenance POST body.
async fn enabled(req: Request) -> Result<bool, HttpError> {
    let body = crate::body::object(req).await?;
    match body.get("enabled") {
        Some(Value::Bool(enabled)) => Ok(*enabled),
        _ => Err(HttpError::Validation(
            "enabled (boolean) is required".to_owned(),
        )),
    }
}

/// The spool's figures and whether it can take pushes (without a spool:
/// zeros, the database counted healthy, the spool not).
fn stats(engine: &Engine) -> (SpoolStats, bool) {
    match engine.observe().spool_stats() {
        Some(stats) => (stats, stats.healthy),
        None => (
            SpoolStats {
                db_healthy: true,
                ..SpoolStats::default()
            },
            false,
        ),
    }
}

pub(crate) fn get(engine: &Engine) -> Response {
    let (spool, healthy) = stats(engine);
    let total_mb = spool.failed_bytes as f64 / (1024.0 * 1024.0);
    response::json(
        StatusCode::OK,
        &json!({
            "maintenanceMode": engine.cluster_state().maintenance(),
            "popMaintenanceMode": engine.cluster_state().pop_maintenance(),
            "bufferedMessages": spool.pending,
            "bufferHealthy": healthy,
            "bufferStats": {
                "pendingCount": spool.pending,
                "failedCount": spool.failed,
                "dbHealthy": spool.db_healthy,
                "failedFiles": {
                    "count": spool.failed_files,
                    "totalBytes": spool.failed_bytes,
                    "totalMB": (total_mb * 100.0).round() / 100.0,
                    "failoverCount": spool.failover,
                },
            },
        }),
    )
}

pub(crate) async fn post(engine: &Engine, req: Request) -> Result<Response, HttpError> {
    let enabled = enabled(req).await?;
    engine.cluster_state().set_maintenance(enabled).await?;
    let (spool, healthy) = stats(engine);
    let message = if enabled {
        "Maintenance mode enabled: pushes are buffered to disk"
    } else {
        "Maintenance mode disabled: buffered pushes are being written to the database"
    };
    Ok(response::json(
        StatusCode::OK,
        &json!({
            "maintenanceMode": enabled,
            "bufferedMessages": spool.pending,
            "bufferHealthy": healthy,
            "message": message,
        }),
    ))
}

fn pop_answer(enabled: bool) -> Response {
    let message = if enabled {
        "Pop maintenance mode enabled: pops answer empty"
    } else {
        "Pop maintenance mode disabled"
    };
    response::json(
        StatusCode::OK,
        &json!({ "popMaintenanceMode": enabled, "message": message }),
    )
}

pub(crate) fn get_pop(engine: &Engine) -> Response {
    pop_answer(engine.cluster_state().pop_maintenance())
}

pub(crate) async fn post_pop(engine: &Engine, req: Request) -> Result<Response, HttpError> {
    let enabled = enabled(req).await?;
    engine.cluster_state().set_pop_maintenance(enabled).await?;
    Ok(pop_answer(enabled))
}

pub(crate) fn buffers(engine: &Engine) -> Response {
    let (spool, has_spool) = match engine.observe().spool_stats() {
        Some(stats) => (stats, true),
        None => (stats(engine).0, false),
    };
    let note = match (has_spool, spool.spooling) {
        (false, _) => "this broker has no spool",
        (true, true) => "pushes are being spooled",
        (true, false) => "pushes go to the database",
    };
    response::json(
        StatusCode::OK,
        &json!({
            "pending": spool.pending,
            "failed": spool.failed,
            "dbHealthy": spool.db_healthy,
            "worker": engine.config().server_name,
            "spooling": spool.spooling,
            "failedFiles": spool.failed_files,
            "note": note,
        }),
    )
}
