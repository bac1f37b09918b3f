//! `POST /api/v1/lease/:leaseId/extend` (wire-api.md §2.7).
//!
//! Body `{"seconds": n}` (default 60); an empty body counts as `{}` (the
//! Python client sends none). Every partition held under the lease gets
//! `lease_expires_at = max(current, now + seconds)`. The answer is an object
//! `{leaseId, success, error, expiresAt, newExpiresAt}` (status 200 either way:
//! clients read `success`).

use hyper::StatusCode;
use queen_engine::Engine;
use serde_json::{json, Value};

use crate::context::Request;
use crate::error::HttpError;
use crate::response::{self, Response};

/// Lease extension when the body names none.
const DEFAULT_SECONDS: i64 = 60;

/// The longest extension one call may ask for.
const MAX_SECONDS: i64 = 24 * 3600;

pub(crate) async fn extend(
    engine: &Engine,
    req: Request,
    tenant: &str,
    lease: &str,
) -> Result<Response, HttpError> {
    let bytes = crate::body::of(req).await?;
    let body: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        crate::body::json(&bytes)?
    };
    let seconds = match body.get("seconds") {
        None | Some(Value::Null) => DEFAULT_SECONDS,
        Some(value) => match crate::wire::integer("seconds", value)? {
            0 => {
                return Err(HttpError::Validation(
                    "seconds must be a positive integer".to_owned(),
                ))
            }
            seconds => i64::from(seconds),
        },
    }
    .min(MAX_SECONDS);
    // The nil id is no client's lease: it holds a cursor during a queue's
    // retryDelay (ack.sql).
    let Some(lease_id) = lease.parse::<uuid::Uuid>().ok().filter(|id| !id.is_nil()) else {
        return Ok(reply(lease, Err("Lease not found")));
    };
    let seconds = i32::try_from(seconds).unwrap_or(i32::MAX);
    let result = engine.extend_lease(tenant, lease_id, seconds).await?;
    Ok(reply(
        lease,
        result
            .map(crate::wire::format_micros)
            .map_err(queen_engine::LeaseError::message),
    ))
}

fn reply(lease: &str, result: Result<String, &'static str>) -> Response {
    let body = match result {
        Ok(at) => json!({
            "leaseId": lease, "success": true, "error": null,
            "expiresAt": at, "newExpiresAt": at,
        }),
        Err(message) => json!({
            "leaseId": lease, "success": false, "error": message,
            "expiresAt": null, "newExpiresAt": null,
        }),
    };
    response::json(StatusCode::OK, &body)
}
