//! The message views (wire-api.md §5, dashboard-routes.md "Messages"):
//!
//! - `GET /api/v1/messages?queue&partition&ns|namespace&task&status&from&to&limit=200&offset=0`
//!   (`from` defaults to an hour ago): `{messages: [{id, transactionId,
//!   partitionId, queuePath, queue, partition, namespace, task,
//!   queuePriority, status,
//!   queueStatus, busStatus: {consumedBy, totalGroups}, traceId,
//!   producerSub, createdAt, leaseExpiresAt}], mode: {hasQueueMode,
//!   busGroupsCount, type}, truncated, note?}` newest first. A page reads
//!   at most `MAX_PAGE_SEGMENTS` segments; when that cuts it short,
//!   `truncated` is true and `note` says to narrow the window.
//! - `GET /api/v1/messages/:partitionId/:transactionId`: the message with its
//!   decrypted `payload`, `consumerGroups: [{name, consumed, leased}]`,
//!   `queueConfig`, `errorMessage` and `retryCount` (of its dead letter),
//!   or 404 `Message not found`.
//! - `POST /api/v1/messages/:partitionId/:transactionId/dlq` `{consumerGroup?,
//!   error?}`: file the message in the group's DLQ (`__QUEUE_MODE__` by
//!   default) and move the cursor past it. Only the group's next message can
//!   be moved (409 otherwise: moving a later one would skip those before
//!   it), and not while a consumer holds it (409).
//! - `GET /api/v1/status/queues/:queue/messages?limit=50&offset=0`: a bare
//!   array of `{id, transactionId, partitionId, queuePath, queue, partition,
//!   status, createdAt}`, the queue's newest messages of the last hour.

use std::time::{Duration, SystemTime};

use hyper::StatusCode;
use queen_engine::{
    Engine, ListedMessage, MessageFilter, MessageStatus, MovedToDlq, QUEUE_MODE_GROUP,
};
use serde_json::{json, Value};

use crate::context::Request;
use crate::error::HttpError;
use crate::query::Query;
use crate::response::{self, Response};

/// The listing's default window.
const DEFAULT_WINDOW: Duration = Duration::from_secs(3600);

fn parse_id(partition_id: &str) -> Result<uuid::Uuid, HttpError> {
    uuid::Uuid::parse_str(partition_id)
        .map_err(|_| HttpError::Validation("partitionId must be a UUID".to_owned()))
}

/// A payload as JSON (what was pushed is JSON; anything else as a string).
fn payload_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

fn status_word(status: Option<MessageStatus>) -> Value {
    status.map_or(Value::Null, |status| json!(status.as_str()))
}

fn listed(message: &ListedMessage) -> Value {
    json!({
        "id": message.id.to_string(),
        "transactionId": message.transaction_id,
        "partitionId": message.partition_id.to_string(),
        "queuePath": format!("{}/{}", message.queue, message.partition),
        "queue": message.queue,
        "partition": message.partition,
        "namespace": message.namespace,
        "task": message.task,
        "queuePriority": message.queue_priority,
        "offset": message.offset,
        "status": message.status.as_str(),
        "queueStatus": status_word(message.queue_status),
        "busStatus": {"consumedBy": message.bus.0, "totalGroups": message.bus.1},
        "traceId": message.trace_id.map(|id| id.to_string()),
        "producerSub": message.producer_sub,
        "createdAt": crate::wire::format_micros(message.created_at),
        "leaseExpiresAt": message.lease_expires_at.map(crate::wire::format_micros),
    })
}

fn mode(has_queue_mode: bool, bus_groups: usize) -> Value {
    let kind = match (has_queue_mode, bus_groups > 0) {
        (true, true) => "hybrid",
        (true, false) => "queue",
        (false, true) => "bus",
        (false, false) => "none",
    };
    json!({"hasQueueMode": has_queue_mode, "busGroupsCount": bus_groups, "type": kind})
}

/// The listing's filters from `query` (`ns` or `namespace`).
fn filter(query: &Query) -> Result<MessageFilter<'_>, HttpError> {
    let (from, to) = query.window(DEFAULT_WINDOW)?;
    Ok(MessageFilter {
        queue: query.name("queue")?,
        partition: query.name("partition")?,
        namespace: match query.name("ns")? {
            Some(ns) => Some(ns),
            None => query.name("namespace")?,
        },
        task: query.name("task")?,
        from,
        to,
    })
}

fn status_filter(query: &Query) -> Result<Option<Option<MessageStatus>>, HttpError> {
    Ok(match query.non_empty("status") {
        None => Some(None),
        Some("pending") => Some(Some(MessageStatus::Pending)),
        Some("processing") => Some(Some(MessageStatus::Processing)),
        Some("completed") => Some(Some(MessageStatus::Completed)),
        Some("dead_letter") => Some(Some(MessageStatus::DeadLetter)),
        // Never produced here: a failed message is retried or dead-lettered.
        Some("failed") => None,
        Some(_) => {
            return Err(HttpError::Validation(
                "status must be pending, processing, completed, dead_letter or failed".to_owned(),
            ))
        }
    })
}

fn page(query: &Query, default_limit: i64) -> (usize, usize) {
    let limit = query.int("limit", default_limit).clamp(1, 1000);
    let offset = query.int("offset", 0).clamp(0, 1_000_000);
    (
        usize::try_from(limit).unwrap_or(1000),
        usize::try_from(offset).unwrap_or(0),
    )
}

pub(crate) async fn list(
    engine: &Engine,
    req: &Request,
    tenant: &str,
) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    let filter = filter(&query)?;
    let (limit, offset) = page(&query, 200);
    let Some(status) = status_filter(&query)? else {
        return Ok(response::json(
            StatusCode::OK,
            &json!({"messages": [], "mode": mode(false, 0), "truncated": false}),
        ));
    };
    let listed_page = engine
        .messages()
        .list(tenant, &filter, status, limit, offset)
        .await?;
    let mut body = json!({
        "messages": listed_page.messages.iter().map(listed).collect::<Vec<_>>(),
        "mode": mode(listed_page.has_queue_mode, listed_page.bus_groups),
        "truncated": listed_page.truncated,
        "pagination": {"limit": limit, "offset": offset},
    });
    if listed_page.truncated {
        body["note"] = json!(format!(
            "the window holds more than {} segments: this page stops there; narrow it by queue, \
             partition or time for the rest",
            queen_engine::MAX_PAGE_SEGMENTS
        ));
    }
    Ok(response::json(StatusCode::OK, &body))
}

pub(crate) async fn queue_messages(
    engine: &Engine,
    req: &Request,
    tenant: &str,
    queue: &str,
) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    let (limit, offset) = page(&query, 50);
    let to = SystemTime::now();
    let filter = MessageFilter {
        queue: Some(queue),
        partition: None,
        namespace: None,
        task: None,
        from: to.checked_sub(DEFAULT_WINDOW).unwrap_or(to),
        to,
    };
    let listed_page = engine
        .messages()
        .list(tenant, &filter, None, limit, offset)
        .await?;
    let rows: Vec<Value> = listed_page
        .messages
        .iter()
        .map(|message| {
            json!({
                "id": message.id.to_string(),
                "transactionId": message.transaction_id,
                "partitionId": message.partition_id.to_string(),
                "queuePath": format!("{}/{}", message.queue, message.partition),
                "queue": message.queue,
                "partition": message.partition,
                "status": message.status.as_str(),
                "createdAt": crate::wire::format_micros(message.created_at),
            })
        })
        .collect();
    Ok(response::json(StatusCode::OK, &Value::Array(rows)))
}

pub(crate) async fn detail(
    engine: &Engine,
    tenant: &str,
    partition_id: &str,
    transaction_id: &str,
) -> Result<Response, HttpError> {
    let partition = parse_id(partition_id)?;
    let Some(detail) = engine
        .messages()
        .get(tenant, partition, transaction_id)
        .await?
    else {
        return Err(HttpError::NotFound("Message not found".to_owned()));
    };
    let mut body = listed(&detail.message);
    let has_queue_mode = detail.groups.iter().any(|g| g.group == QUEUE_MODE_GROUP);
    let named = detail
        .groups
        .iter()
        .filter(|g| g.group != QUEUE_MODE_GROUP)
        .count();
    body["payload"] = detail.payload.as_deref().map_or(Value::Null, payload_json);
    body["data"] = body["payload"].clone();
    body["isEncrypted"] = json!(detail.encrypted);
    body["errorMessage"] = json!(detail
        .dead_letter
        .as_ref()
        .and_then(|(error, _)| error.clone()));
    body["retryCount"] = json!(detail
        .dead_letter
        .as_ref()
        .map_or(0, |(_, retries)| *retries));
    body["queueConfig"] = detail.queue_config.clone();
    body["mode"] = mode(has_queue_mode, named);
    body["consumerGroups"] = detail
        .groups
        .iter()
        .map(|g| json!({"name": g.group, "consumed": g.consumed, "leased": g.leased, "committed": g.committed}))
        .collect();
    Ok(response::json(StatusCode::OK, &body))
}

pub(crate) async fn move_to_dlq(
    engine: &Engine,
    req: Request,
    tenant: &str,
    partition_id: &str,
    transaction_id: &str,
) -> Result<Response, HttpError> {
    let partition = parse_id(partition_id)?;
    let body = crate::body::object(req).await?;
    let group = crate::wire::optional_string(&body, "consumerGroup")?.unwrap_or(QUEUE_MODE_GROUP);
    crate::wire::name("consumerGroup", group)?;
    let error = crate::wire::optional_string(&body, "error")?
        .unwrap_or("moved to the dead-letter queue by an operator");
    match engine
        .messages()
        .move_to_dlq(tenant, partition, transaction_id, group, error)
        .await?
    {
        MovedToDlq::Moved => Ok(response::json(
            StatusCode::OK,
            &json!({"success": true, "partitionId": partition_id, "transactionId": transaction_id,
                    "consumerGroup": group, "message": "Message moved to the dead-letter queue"}),
        )),
        MovedToDlq::NotFound => Err(HttpError::NotFound("Message not found".to_owned())),
        MovedToDlq::NoCursor => Err(HttpError::Conflict(format!(
            "consumer group {group} has not consumed from this partition yet"
        ))),
        MovedToDlq::NotNext { next, offset } => Err(HttpError::Conflict(format!(
            "only the next message of consumer group {group} can be moved to the dead-letter \
             queue: its next is offset {next}, this message is offset {offset}"
        ))),
        MovedToDlq::Leased => Err(HttpError::Conflict(
            "the message is leased by a consumer now".to_owned(),
        )),
    }
}
