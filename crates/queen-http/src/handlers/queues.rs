//! `DELETE /api/v1/resources/queues/:queue` (wire-api.md §2.8): delete a queue
//! with everything it owns (partitions, messages, sidecar, cursors,
//! subscriptions, dead letters, traces) in one transaction.
//!
//! Answers `{"deleted": true, "queue": q, "existed": bool}`, also for a queue
//! that never existed (clients delete in their cleanup). Pops parked on the
//! queue answer empty at once; a queue pushed again under the same name starts
//! empty.

use hyper::StatusCode;
use queen_engine::Engine;
use serde_json::json;

use crate::error::HttpError;
use crate::response::{self, Response};

pub(crate) async fn delete(
    engine: &Engine,
    tenant: &str,
    queue: &str,
) -> Result<Response, HttpError> {
    let existed = engine.queues().delete(tenant, queue).await?;
    Ok(response::json(
        StatusCode::OK,
        &json!({"deleted": true, "queue": queue, "existed": existed}),
    ))
}
