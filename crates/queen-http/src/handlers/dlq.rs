//! `GET /api/v1/dlq` (wire-api.md §2.9): dead letters, newest first, and
//! `DELETE /api/v1/messages/:partitionId/:transactionId`, which removes every
//! consumer group's dead letter of that message and answers
//! `{"success", "partitionId", "transactionId", "message"}` (`success: false`,
//! `Message not found`, when there was none).
//!
//! Query: `queue`, `consumerGroup`, `partition`, `from` and `to` (ISO-8601,
//! on the filing time, inclusive; 400 naming the field when unparsable),
//! `limit` (100, at most 1000), `offset` (0). Answer `{"messages": [...], "total", "pagination": {limit, offset}}`
//! (`total` counts every match; the Python SDK's README reads it)
//! with each message's original payload as `data` (decrypted when sealed and
//! the broker holds the key; `null` when it cannot be opened).

use hyper::StatusCode;
use queen_engine::{DlqFilter, Engine};

use crate::error::HttpError;
use crate::query::Query;
use crate::response::{self, Response};
use crate::server::Request;
use crate::wire::format_micros;

pub(crate) async fn list(engine: &Engine, req: &Request) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    let limit = query.int("limit", 100).clamp(1, 1000);
    let offset = query.int("offset", 0).max(0);
    let instant = |field: &'static str| {
        query
            .non_empty(field)
            .map(|text| {
                crate::wire::parse_timestamp(text).ok_or_else(|| {
                    HttpError::Validation(format!("{field} must be an ISO-8601 timestamp"))
                })
            })
            .transpose()
    };
    let filter = DlqFilter {
        queue: query.non_empty("queue"),
        group: query.non_empty("consumerGroup"),
        partition: query.non_empty("partition"),
        from: instant("from")?,
        to: instant("to")?,
    };
    let (letters, total) = engine.dead_letters(&filter, limit, offset).await?;
    let messages: Vec<serde_json::Value> = letters
        .iter()
        .map(|letter| {
            let row = &letter.row;
            let data = letter
                .data
                .as_ref()
                .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(bytes).ok())
                .unwrap_or(serde_json::Value::Null);
            serde_json::json!({
                "id": row.message_id.to_string(),
                "transactionId": row.transaction_id,
                "partitionId": row.partition_id.to_string(),
                "queue": row.queue,
                "partition": row.partition,
                "consumerGroup": row.consumer_group,
                "errorMessage": row.error,
                "retryCount": row.retry_count,
                "data": data,
                "producerSub": row.producer_sub,
                "createdAt": format_micros(row.created_at),
                "failedAt": format_micros(row.failed_at),
            })
        })
        .collect();
    Ok(response::json(
        StatusCode::OK,
        &serde_json::json!({
            "messages": messages,
            "total": total,
            "pagination": {"limit": limit, "offset": offset},
        }),
    ))
}

pub(crate) async fn delete_message(
    engine: &Engine,
    partition_id: &str,
    transaction_id: &str,
) -> Result<Response, HttpError> {
    let partition: uuid::Uuid = partition_id
        .parse()
        .map_err(|_| HttpError::Validation("partitionId must be a UUID".to_owned()))?;
    if transaction_id.is_empty() {
        return Err(HttpError::Validation(
            "transactionId is required".to_owned(),
        ));
    }
    let deleted = engine
        .delete_dead_letters(partition, transaction_id)
        .await?;
    Ok(response::json(
        StatusCode::OK,
        &serde_json::json!({
            "success": deleted > 0,
            "partitionId": partition_id,
            "transactionId": transaction_id,
            "message": if deleted > 0 { "Message deleted" } else { "Message not found" },
        }),
    ))
}
