//! `GET /api/v1/dlq` (wire-api.md §2.9): dead letters, newest first, and
//! `DELETE /api/v1/messages/:partitionId/:transactionId`, which deletes a
//! message (`Messages::delete`): every copy of it a consumer group would
//! still read is marked consumed for every group known to read the queue,
//! and every group's dead letter of it goes. Answers 200 `{"success": true,
//! "partitionId", "transactionId", "message", "offset"` (its newest copy
//! still stored, `null` when only dead letters were left)`, "offsets"` (every
//! copy still stored)`, "consumerGroups"` (the groups whose cursors moved or
//! were created past it)`, "deadLetters"}`; 409 naming why and changing
//! nothing when that would move a group's cursor over another message, a
//! consumer holds it, no group reads the queue, or it cannot be located
//! (docs/admin-api.md); 404 `Message not found` when there is neither the
//! message nor a dead letter of it.
//!
//! Query: `queue`, `consumerGroup`, `partition`, `from` and `to` (ISO-8601,
//! on the filing time, inclusive; 400 naming the field when unparsable),
//! `limit` (100, at most 1000), `offset` (0). Answer `{"messages": [...], "total", "pagination": {limit, offset}}`
//! (`total` counts every match; the Python SDK's README reads it)
//! with each message's original payload as `data` (decrypted when sealed and
//! the broker holds the key; `null` when it cannot be opened).
//!
//! Replays (`DeadLetters::replay`: each dead letter moves back into
//! the log exactly once, in one transaction with its push, as a new message
//! at the head of its partition):
//! - `POST /api/v1/messages/:partitionId/:transactionId/retry` (optional
//!   body `{"consumerGroup"}` to replay only that group's row): answers
//!   `{"success": true, "partitionId", "transactionId", "requeued": 1,
//!   "deadLetters": N}`, or 404 `Dead letter not found` when there is none
//!   (or another replay holds it).
//! - `POST /api/v1/dlq/requeue`, body `{"queue"` (required), `"partition"`,
//!   `"consumerGroup"`, `"from"`, `"to"` (on the filing time, inclusive),
//!   `"limit"` (100, at most 1000 dead letters)`}`: oldest filing first;
//!   answers `{"success": true, "queue", "requeued": messages,
//!   "deadLetters": rows}` (a message dead-lettered by two groups is two
//!   rows and one message).

use hyper::StatusCode;
use queen_engine::{
    DeleteBlock, DlqFilter, DlqTake, Engine, MessageDeletion, MAX_COPIES, MAX_REPLAY,
    MAX_SCAN_BYTES, MAX_SCAN_SEGMENTS,
};
use serde_json::Value;

use crate::context::Request;
use crate::error::HttpError;
use crate::query::Query;
use crate::response::{self, Response};
use crate::wire::format_micros;

pub(crate) async fn list(
    engine: &Engine,
    req: &Request,
    tenant: &str,
) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    let limit = query.int("limit", 100).clamp(1, 1000);
    let offset = query.int("offset", 0).max(0);
    let filter = DlqFilter {
        queue: query.non_empty("queue"),
        group: query.non_empty("consumerGroup"),
        partition: query.non_empty("partition"),
        from: query.instant("from")?,
        to: query.instant("to")?,
    };
    let (letters, total) = engine
        .dead_letters()
        .list(tenant, &filter, limit, offset)
        .await?;
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
    tenant: &str,
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
    let deletion = engine
        .messages()
        .delete(tenant, partition, transaction_id)
        .await?;
    let refusal = match deletion {
        MessageDeletion::Deleted {
            offsets,
            groups,
            dead_letters,
        } => {
            return Ok(response::json(
                StatusCode::OK,
                &serde_json::json!({
                    "success": true,
                    "partitionId": partition_id,
                    "transactionId": transaction_id,
                    "message": "Message deleted",
                    "offset": offsets.last(),
                    "offsets": offsets,
                    "consumerGroups": groups,
                    "deadLetters": dead_letters,
                }),
            ))
        }
        MessageDeletion::NotFound => {
            return Err(HttpError::NotFound("Message not found".to_owned()))
        }
        MessageDeletion::NoGroup { offsets } => format!(
            "cannot delete the message{}: no consumer group reads its queue yet, and a \
             message is deleted by marking it consumed on the groups' cursors (it stays in its \
             segment); delete it once a group reads the queue",
            at_offsets(&offsets)
        ),
        MessageDeletion::NotLocated { from, to } => format!(
            "cannot locate the message: offsets {from} to {to} are older than what the \
             transaction-id index covers (its rows are purged after the dedup window, \
             completedRetentionSeconds or 900 s) and more than one delete decodes ({} segments, \
             {} MiB), so whether they hold it is not known; nothing changed",
            MAX_SCAN_SEGMENTS,
            MAX_SCAN_BYTES >> 20
        ),
        MessageDeletion::TooManyCopies => format!(
            "cannot delete the message: its transaction id is stored more than {MAX_COPIES} \
             times in the partition; nothing changed"
        ),
        MessageDeletion::Refused { offsets, blocks } => {
            let reasons: Vec<String> = blocks
                .iter()
                .map(|block| match block {
                    DeleteBlock::Leased { group } => {
                        format!("consumer group {group} holds it in a live lease")
                    }
                    DeleteBlock::Behind { group, next } => format!(
                        "consumer group {group} has not consumed offsets {next} to {} before it, \
                         and marking it consumed would skip them",
                        offsets
                            .iter()
                            .find(|&&offset| offset > *next)
                            .map_or(*next, |offset| offset - 1)
                    ),
                    DeleteBlock::Unsearched { group, next, to } => format!(
                        "consumer group {group} has offsets {next} to {to} to read, which are \
                         older than what the transaction-id index covers and more than one \
                         delete decodes, so another copy of it may be among them"
                    ),
                    DeleteBlock::Busy { group } => format!(
                        "consumer group {group} is creating its cursor on the partition right \
                         now; try again"
                    ),
                    DeleteBlock::StartUnknown { group } => format!(
                        "consumer group {group} pops single partitions, has not read this one \
                         and has no subscription record, so where it would start reading it is \
                         not known"
                    ),
                })
                .collect();
            format!(
                "cannot delete the message{}: {}; a message can be deleted only while it is \
                 the next message of every consumer group that has not consumed it, and no \
                 consumer holds it; nothing changed",
                at_offsets(&offsets),
                reasons.join("; ")
            )
        }
    };
    Err(HttpError::Conflict(refusal))
}

/// " at offset 4", " at offsets 4, 9" (a message stored more than once), or
/// nothing (only its dead letters were left).
fn at_offsets(offsets: &[i64]) -> String {
    match offsets {
        [] => String::new(),
        [one] => format!(" at offset {one}"),
        many => format!(
            " at offsets {}",
            many.iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

pub(crate) async fn retry_message(
    engine: &Engine,
    req: Request,
    tenant: &str,
    partition_id: &str,
    transaction_id: &str,
) -> Result<Response, HttpError> {
    let partition: uuid::Uuid = partition_id
        .parse()
        .map_err(|_| HttpError::Validation("partitionId must be a UUID".to_owned()))?;
    let body = crate::body::object(req).await?;
    let group = optional_name(&body, "consumerGroup")?;
    let replayed = engine
        .dead_letters()
        .replay(
            tenant,
            &DlqTake {
                filter: DlqFilter {
                    group,
                    ..DlqFilter::default()
                },
                partition_id: Some(partition),
                transaction_id: Some(transaction_id),
                limit: MAX_REPLAY,
            },
        )
        .await?;
    if replayed.letters == 0 {
        return Err(HttpError::NotFound("Dead letter not found".to_owned()));
    }
    Ok(response::json(
        StatusCode::OK,
        &serde_json::json!({
            "success": true,
            "partitionId": partition_id,
            "transactionId": transaction_id,
            "requeued": replayed.messages,
            "deadLetters": replayed.letters,
        }),
    ))
}

pub(crate) async fn requeue(
    engine: &Engine,
    req: Request,
    tenant: &str,
) -> Result<Response, HttpError> {
    let body = crate::body::object(req).await?;
    let Some(queue) = optional_name(&body, "queue")? else {
        return Err(HttpError::Validation("queue is required".to_owned()));
    };
    let instant = |field: &'static str| match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => crate::wire::timestamp(value, field).map(Some),
    };
    let limit = match body.get("limit") {
        None | Some(Value::Null) => 100,
        Some(value) => crate::wire::integer("limit", value)?,
    };
    if !(1..=MAX_REPLAY).contains(&limit) {
        return Err(HttpError::Validation(format!(
            "limit must be between 1 and {MAX_REPLAY}"
        )));
    }
    let filter = DlqFilter {
        queue: Some(queue),
        group: optional_name(&body, "consumerGroup")?,
        partition: optional_name(&body, "partition")?,
        from: instant("from")?,
        to: instant("to")?,
    };
    let replayed = engine
        .dead_letters()
        .replay(
            tenant,
            &DlqTake {
                filter,
                partition_id: None,
                transaction_id: None,
                limit,
            },
        )
        .await?;
    Ok(response::json(
        StatusCode::OK,
        &serde_json::json!({
            "success": true,
            "queue": queue,
            "requeued": replayed.messages,
            "deadLetters": replayed.letters,
        }),
    ))
}

/// An optional name field of a JSON body: a string obeying the name rule.
fn optional_name<'a>(body: &'a Value, field: &str) -> Result<Option<&'a str>, HttpError> {
    let name = crate::wire::optional_string(body, field)?;
    if let Some(name) = name {
        crate::wire::name(field, name)?;
    }
    Ok(name)
}
