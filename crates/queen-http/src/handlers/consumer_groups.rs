//! The consumer-group routes (wire-api.md §2.11 and the consumer-group rows of
//! §5), computed from the cursor model.
//!
//! - `DELETE /api/v1/consumer-groups/:group[/queues/:queue]?deleteMetadata=`
//!   (default true; `false` or `0` keeps the subscription records): the
//!   group's cursors and leases, and its subscription records, are removed.
//!   Answers `{success, consumerGroup, [queueName,] deletedPartitions,
//!   metadataDeleted}`; a group that never existed answers `deletedPartitions: 0`.
//! - `POST /api/v1/consumer-groups/:group/queues/:queue/seek` and
//!   `.../partitions/:partition/seek`, body `{"timestamp": ISO}` or
//!   `{"toEnd": true}` (`toEnd` wins when both are given; neither is 400
//!   `Must specify either 'toEnd': true or 'timestamp'`). Cursors move to just
//!   before the first message stored at or after the timestamp, or to the end;
//!   every partition sought gets a cursor; leases are released. The queue seek
//!   answers `{success, consumerGroup, queueName, seekToEnd, targetTimestamp,
//!   partitionsUpdated}`; the partition seek `{success, consumerGroup,
//!   queueName, partitionName, updated, cursorMovedTo}` where `cursorMovedTo`
//!   is the new committed offset (every offset up to it counts as consumed; -1
//!   is the beginning). The queue seek of an unknown queue answers
//!   `{success: false, error: "Queue not found"}`; the partition seek of an
//!   unknown partition (or queue) `{success: false, error: "Partition not
//!   found"}`; both with status 200 like the other body-level signals
//!   (clients read `success`).
//! - `POST /api/v1/consumer-groups/:group/subscription`, body
//!   `{"subscriptionTimestamp": ISO}` (missing is 400): every subscription
//!   record of the group gets the timestamp, which decides where cursors the
//!   group creates from now on start; existing cursors do not move. Answers
//!   `{success, consumerGroup, newTimestamp, rowsUpdated}`.
//! - `GET /api/v1/consumer-groups`: one entry per (group, queue) with a
//!   subscription record or a cursor, `__QUEUE_MODE__` included: `{name,
//!   topics: [queue], queueName, members, partitionsWithLag, totalLag,
//!   maxTimeLag, state, subscriptionMode, subscriptionTimestamp,
//!   subscriptionCreatedAt, activeLeases}`. `members` counts the group's
//!   partition cursors on the queue (so it is never below
//!   `partitionsWithLag`), `activeLeases` the live leases among them (a
//!   consumer holds one per partition it is processing); `totalLag` is the sum
//!   of the cursors' offset lags (the reference answered `null`; the cursor
//!   model makes the number cheap); `maxTimeLag` the largest time lag in
//!   seconds. `state` is `"Lagging"` when some cursor's oldest unconsumed
//!   message is more than 60 seconds old, otherwise `"Stable"` (the cursor
//!   model has no consumer heartbeat, so `"Dead"` is never reported). The
//!   subscription fields are `null` for a pair without a record (a group that
//!   only popped single partitions).
//! - `GET /api/v1/consumer-groups/:group`: `{"<queue>": {"partitions":
//!   [{partition, workerId, lastConsumedAt, totalConsumed, offsetLag,
//!   timeLagSeconds, leaseActive}]}}`, `{}` for an unknown group.
//! - `GET /api/v1/consumer-groups/lagging?minLagSeconds=N` (default 3600): an
//!   array of snake_case `{consumer_group, queue_name, partition_name,
//!   partition_id, worker_id, offset_lag, time_lag_seconds, lag_hours,
//!   oldest_unconsumed_at, last_consumed_at}`, most lagging first.
//!
//! Lag: offset lag is `last_offset - committed`; time lag is now minus the
//! commit time of the oldest unconsumed message (the segment holding
//! `committed + 1`). Timestamps are ISO-8601 UTC with milliseconds and `Z`.

use hyper::StatusCode;
use queen_engine::{CursorLag, Engine, GroupSummary, SeekTarget};
use serde_json::{json, Value};

use crate::context::Request;
use crate::error::HttpError;
use crate::query::Query;
use crate::response::{self, Response};

/// A group is `"Lagging"` when some cursor's oldest unconsumed message is
/// older than this many seconds.
const LAGGING_AFTER_SECONDS: i64 = 60;

/// `minLagSeconds` of the lagging view when the request leaves it out.
const DEFAULT_MIN_LAG_SECONDS: i64 = 3600;

pub(crate) async fn delete(
    engine: &Engine,
    req: &Request,
    tenant: &str,
    group: &str,
    queue: Option<&str>,
) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    let delete_metadata = !matches!(query.str("deleteMetadata"), Some("false" | "0"));
    let deleted = engine
        .groups()
        .delete(tenant, group, queue, delete_metadata)
        .await?;
    let mut answer = json!({
        "success": true,
        "consumerGroup": group,
        "deletedPartitions": deleted.partitions,
        "metadataDeleted": delete_metadata,
    });
    if let Some(queue) = queue {
        answer["queueName"] = json!(queue);
    }
    Ok(response::json(StatusCode::OK, &answer))
}

pub(crate) async fn seek(
    engine: &Engine,
    req: Request,
    tenant: &str,
    group: &str,
    queue: &str,
    partition: Option<&str>,
) -> Result<Response, HttpError> {
    let body = crate::body::object(req).await?;
    let to_end = body.get("toEnd").and_then(Value::as_bool) == Some(true);
    let target = if to_end {
        SeekTarget::End
    } else {
        match body.get("timestamp") {
            None | Some(Value::Null) => {
                return Err(HttpError::Validation(
                    "Must specify either 'toEnd': true or 'timestamp'".to_owned(),
                ))
            }
            Some(value) => SeekTarget::Timestamp(crate::wire::timestamp(value, "timestamp")?),
        }
    };
    let seeked = engine
        .groups()
        .seek(tenant, group, queue, partition, target)
        .await?;
    let target_timestamp = match target {
        SeekTarget::End => Value::Null,
        SeekTarget::Timestamp(at) => json!(crate::wire::format_millis(at)),
    };
    let answer = match (partition, seeked) {
        (None, None) => json!({
            "success": false,
            "consumerGroup": group,
            "queueName": queue,
            "error": "Queue not found",
        }),
        (None, Some(seeked)) => json!({
            "success": true,
            "consumerGroup": group,
            "queueName": queue,
            "seekToEnd": to_end,
            "targetTimestamp": target_timestamp,
            "partitionsUpdated": seeked.partitions.len(),
        }),
        (Some(partition), seeked) => match seeked.and_then(|s| s.partitions.into_iter().next()) {
            None => json!({"success": false, "error": "Partition not found"}),
            Some((_, committed)) => json!({
                "success": true,
                "consumerGroup": group,
                "queueName": queue,
                "partitionName": partition,
                "updated": true,
                "cursorMovedTo": committed,
            }),
        },
    };
    Ok(response::json(StatusCode::OK, &answer))
}

pub(crate) async fn subscription(
    engine: &Engine,
    req: Request,
    tenant: &str,
    group: &str,
) -> Result<Response, HttpError> {
    let body = crate::body::object(req).await?;
    let at = match body.get("subscriptionTimestamp") {
        None | Some(Value::Null) => {
            return Err(HttpError::Validation(
                "subscriptionTimestamp is required".to_owned(),
            ))
        }
        Some(value) => crate::wire::timestamp(value, "subscriptionTimestamp")?,
    };
    let rows = engine
        .groups()
        .set_subscription_timestamp(tenant, group, at)
        .await?;
    Ok(response::json(
        StatusCode::OK,
        &json!({
            "success": true,
            "consumerGroup": group,
            "newTimestamp": crate::wire::format_millis(at),
            "rowsUpdated": rows,
        }),
    ))
}

pub(crate) async fn list(engine: &Engine, tenant: &str) -> Result<Response, HttpError> {
    let groups = engine.groups().summaries(tenant).await?;
    let answer: Vec<Value> = groups.iter().map(summary).collect();
    Ok(response::json(StatusCode::OK, &Value::Array(answer)))
}

pub(crate) async fn get(engine: &Engine, tenant: &str, group: &str) -> Result<Response, HttpError> {
    let queues = engine.groups().cursors(tenant, group).await?;
    let mut answer = serde_json::Map::new();
    for (queue, cursors) in queues {
        let partitions: Vec<Value> = cursors
            .iter()
            .map(|c| {
                json!({
                    "partition": c.partition,
                    "workerId": c.worker_id.map(|id| id.to_string()),
                    "lastConsumedAt": c.last_consumed_at.map(crate::wire::format_millis),
                    "totalConsumed": c.total_consumed,
                    "offsetLag": c.offset_lag,
                    "timeLagSeconds": c.time_lag_seconds,
                    "leaseActive": c.lease_active,
                })
            })
            .collect();
        answer.insert(queue, json!({"partitions": partitions}));
    }
    Ok(response::json(StatusCode::OK, &Value::Object(answer)))
}

pub(crate) async fn lagging(
    engine: &Engine,
    req: &Request,
    tenant: &str,
) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    let min_lag = query.int("minLagSeconds", DEFAULT_MIN_LAG_SECONDS).max(0);
    let cursors = engine.groups().lagging(tenant, min_lag).await?;
    let answer: Vec<Value> = cursors.iter().map(lagging_row).collect();
    Ok(response::json(StatusCode::OK, &Value::Array(answer)))
}

fn summary(group: &GroupSummary) -> Value {
    let subscription = group.subscription.as_ref();
    let state = if group.max_time_lag_seconds > LAGGING_AFTER_SECONDS {
        "Lagging"
    } else {
        "Stable"
    };
    json!({
        "name": group.group,
        "topics": [group.queue],
        "queueName": group.queue,
        "members": group.partitions,
        "activeLeases": group.leases,
        "partitionsWithLag": group.partitions_with_lag,
        "totalLag": group.total_lag,
        "maxTimeLag": group.max_time_lag_seconds,
        "state": state,
        "subscriptionMode": subscription.map(|s| s.mode.as_str()),
        "subscriptionTimestamp": subscription.and_then(|s| s.timestamp).map(crate::wire::format_millis),
        "subscriptionCreatedAt": subscription.map(|s| crate::wire::format_millis(s.created_at)),
    })
}

fn lagging_row(cursor: &CursorLag) -> Value {
    // Two decimals, as a number.
    #[allow(clippy::cast_precision_loss)] // seconds of lag fit an f64 exactly
    let lag_hours = (cursor.time_lag_seconds as f64 / 36.0).round() / 100.0;
    json!({
        "consumer_group": cursor.group,
        "queue_name": cursor.queue,
        "partition_name": cursor.partition,
        "partition_id": cursor.partition_id.to_string(),
        "worker_id": cursor.worker_id.map(|id| id.to_string()),
        "offset_lag": cursor.offset_lag,
        "time_lag_seconds": cursor.time_lag_seconds,
        "lag_hours": lag_hours,
        "oldest_unconsumed_at": cursor.oldest_unconsumed_at.map(crate::wire::format_millis),
        "last_consumed_at": cursor.last_consumed_at.map(crate::wire::format_millis),
    })
}
