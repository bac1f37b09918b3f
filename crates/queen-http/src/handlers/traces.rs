//! `POST /api/v1/traces` (wire-api.md §2.10): record an event against a message.
//!
//! Body `{transactionId, partitionId, consumerGroup? (__QUEUE_MODE__),
//! eventType? (info), traceNames: string | string[] | null, data: object}`.
//! Missing `transactionId`, `partitionId` or `data` is 400. Answers
//! `{"success": true, "traceId"}`, or `{"success": false, "error": "Message not
//! found"}` (200: clients read `success`).

use hyper::StatusCode;
use queen_engine::{Engine, TraceEvent, QUEUE_MODE_GROUP};
use serde_json::{json, Value};

use crate::context::Request;
use crate::error::HttpError;
use crate::response::{self, Response};

pub(crate) async fn post(
    engine: &Engine,
    req: Request,
    tenant: &str,
) -> Result<Response, HttpError> {
    let body = crate::body::value(req).await?;
    let text = |field: &str| {
        body.get(field)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
    };
    let transaction_id = text("transactionId")
        .ok_or_else(|| HttpError::Validation("transactionId is required".to_owned()))?;
    let partition_id = text("partitionId")
        .ok_or_else(|| HttpError::Validation("partitionId is required".to_owned()))?
        .parse::<uuid::Uuid>()
        .map_err(|_| HttpError::Validation("partitionId must be a UUID".to_owned()))?;
    let data = body
        .get("data")
        .filter(|data| data.is_object())
        .cloned()
        .ok_or_else(|| HttpError::Validation("data must be an object".to_owned()))?;
    let names = match body.get("traceNames") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(name)) => vec![name.clone()],
        Some(Value::Array(names)) => names
            .iter()
            .map(|name| name.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                HttpError::Validation(
                    "traceNames must be a string or an array of strings".to_owned(),
                )
            })?,
        Some(_) => {
            return Err(HttpError::Validation(
                "traceNames must be a string or an array of strings".to_owned(),
            ))
        }
    };
    let event = TraceEvent {
        partition_id,
        transaction_id: transaction_id.to_owned(),
        group: text("consumerGroup").unwrap_or(QUEUE_MODE_GROUP).to_owned(),
        event_type: text("eventType").unwrap_or("info").to_owned(),
        names,
        data,
    };
    let answer = match engine.traces().record(tenant, &event).await? {
        Some(id) => json!({"success": true, "traceId": id.to_string()}),
        None => json!({"success": false, "error": "Message not found"}),
    };
    Ok(response::json(StatusCode::OK, &answer))
}
