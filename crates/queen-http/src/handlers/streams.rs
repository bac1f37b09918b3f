//! The streaming SDKs' routes (wire-api.md §6), snake_case like the
//! contract:
//!
//! - `POST /streams/v1/queries` `{"name", "source_queue", "config_hash"`
//!   (non-empty strings; else 400 `<field> is required`)`, "sink_queue"?,
//!   "reset"?}` answers `{"success": true, "query_id", "name",
//!   "config_hash", "fresh", "reset"}` (`fresh`: the query was created now).
//!   Another stored hash without `reset` answers **409** `{"success": false,
//!   "query_id", "name", "error": "config_hash mismatch: ..."}` (the SDKs map
//!   409 with that body to their hash-mismatch error); `reset: true` wipes the
//!   query's state and stores the new hash.
//! - `POST /streams/v1/state/get` `{"query_id", "partition_id"` (UUIDs)`,
//!   "keys"?, "key_prefix"?, "ripe_at_or_before"?}` answers `{"success":
//!   true, "rows": [{"key", "value", "updated_at"}]}`, by key: the rows that
//!   are among `keys` (when not empty), start with `key_prefix` (when not
//!   empty) and, with `ripe_at_or_before` (a number, epoch ms), whose value
//!   holds a numeric `windowEnd` at or before it: the SDK runners' idle flush
//!   asks for the windows whose end plus grace period has passed.
//!
//! - `POST /streams/v1/cycle` `{"query_id", "partition_id"` (UUIDs)`,
//!   "consumer_group"?` (`__QUEUE_MODE__`)`, "state_ops"?: [{"type":
//!   "upsert", "key", "value"?` (`{}`)`} | {"type": "delete", "key"}],
//!   "push_items"?: [push items as `POST /api/v1/push` takes them: "queue",
//!   "partition"?, "payload"?, "transactionId"?, "traceId"?], "ack"?:
//!   {"transactionId", "leaseId"?, "status"?` (`completed`, `success`,
//!   `failed` or `dlq`)`, "error"?, "count"?` (a non-negative integer)`},
//!   "release_lease"?` (true)`}`: one transaction (`Streams::cycle`). A
//!   sink item's `messageId` is ignored: the broker stamps every id.
//!   Answers `{"success": true, "query_id", "partition_id", "queueName",
//!   "state_ops_applied", "push_results": [push results], "ack_result":
//!   {"success", "count", "lease_released", "dlq"} | null}` (`count` is the
//!   request's, 1 when it has none, and 0 for a dead-lettering ack, as the
//!   reference answers it); a cycle refused and rolled back (no such query,
//!   an ack that did not apply) answers 200 `{"success": false, "query_id",
//!   "partition_id", "error"}`, as the SDKs read it. Keys are at most 1024
//!   bytes, values at most 1 MiB of JSON. A malformed field is 400 naming it,
//!   before anything is written.

use bytes::Bytes;
use hyper::StatusCode;
use queen_engine::naming::name_problem;
use queen_engine::{
    AckItem, AckStatus, Engine, PushStatus, QueryRegistration, Registered, StateFilter, StateOp,
    StreamCycle, MAX_STATE_KEY_BYTES, QUEUE_MODE_GROUP,
};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::context::Request;
use crate::error::HttpError;
use crate::response::{self, Response};
use crate::wire::{format_millis, optional_string};

/// A required non-empty string field.
fn required<'a>(body: &'a Value, field: &str) -> Result<&'a str, HttpError> {
    match body.get(field) {
        Some(Value::String(text)) if !text.is_empty() => Ok(text),
        _ => Err(HttpError::Validation(format!("{field} is required"))),
    }
}

/// A required UUID field.
fn uuid_field(body: &Value, field: &str) -> Result<uuid::Uuid, HttpError> {
    required(body, field)?
        .parse()
        .map_err(|_| HttpError::Validation(format!("{field} must be a UUID")))
}

pub(crate) async fn register(
    engine: &Engine,
    req: Request,
    tenant: &str,
) -> Result<Response, HttpError> {
    let body = crate::body::object(req).await?;
    let name = required(&body, "name")?;
    let source_queue = required(&body, "source_queue")?;
    let config_hash = required(&body, "config_hash")?;
    let sink_queue = optional_string(&body, "sink_queue")?.filter(|sink| !sink.is_empty());
    let reset = match body.get("reset") {
        None | Some(Value::Null) => false,
        Some(value) => crate::wire::boolean("reset", value)?,
    };
    let registered = engine
        .streams()
        .register(
            tenant,
            &QueryRegistration {
                name,
                source_queue,
                sink_queue,
                config_hash,
                reset,
            },
        )
        .await?;
    let (query_id, fresh, did_reset) = match registered {
        Registered::Created(id) => (id, true, false),
        Registered::Same(id) => (id, false, false),
        Registered::Reset(id) => (id, false, true),
        Registered::Mismatch { query_id, stored } => {
            return Err(HttpError::QueryMismatch {
                query_id: query_id.to_string(),
                name: name.to_owned(),
                error: format!(
                    "config_hash mismatch: the query is registered with {stored}, \
                     this request has {config_hash}; pass reset: true to wipe its state"
                ),
            })
        }
    };
    Ok(response::json(
        StatusCode::OK,
        &json!({
            "success": true,
            "query_id": query_id.to_string(),
            "name": name,
            "config_hash": config_hash,
            "fresh": fresh,
            "reset": did_reset,
        }),
    ))
}

pub(crate) async fn state_get(
    engine: &Engine,
    req: Request,
    tenant: &str,
) -> Result<Response, HttpError> {
    let body = crate::body::object(req).await?;
    let query = uuid_field(&body, "query_id")?;
    let partition = uuid_field(&body, "partition_id")?;
    let keys: Vec<String> = match body.get("keys") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(keys)) => keys
            .iter()
            .map(|key| match key {
                Value::String(key) if key.len() <= MAX_STATE_KEY_BYTES => Ok(key.clone()),
                _ => Err(HttpError::Validation(format!(
                    "keys must be strings of at most {MAX_STATE_KEY_BYTES} bytes"
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(HttpError::Validation(
                "keys must be an array of strings".to_owned(),
            ))
        }
    };
    let prefix = optional_string(&body, "key_prefix")?.filter(|prefix| !prefix.is_empty());
    let ripe_at = match body.get("ripe_at_or_before") {
        None | Some(Value::Null) => None,
        Some(Value::Number(at)) => at.as_f64(),
        Some(_) => {
            return Err(HttpError::Validation(
                "ripe_at_or_before must be a number (epoch milliseconds)".to_owned(),
            ))
        }
    };
    let filter = StateFilter {
        keys: &keys,
        prefix,
        ripe_at,
    };
    let rows = engine
        .streams()
        .state(tenant, query, partition, &filter)
        .await?;
    let rows: Vec<Value> = rows
        .into_iter()
        .map(|row| {
            json!({
                "key": row.key,
                "value": row.value,
                "updated_at": format_millis(row.updated_at),
            })
        })
        .collect();
    Ok(response::json(
        StatusCode::OK,
        &json!({ "success": true, "rows": rows }),
    ))
}

/// Largest state value, serialised.
const MAX_STATE_VALUE_BYTES: usize = 1 << 20;

/// An optional array field.
fn array<'a>(body: &'a Value, field: &str) -> Result<&'a [Value], HttpError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(HttpError::Validation(format!("{field} must be an array"))),
    }
}

fn state_op(index: usize, op: &Value) -> Result<StateOp, HttpError> {
    let invalid = |rule: &str| HttpError::Validation(format!("state_ops[{index}].{rule}"));
    let key = match op.get("key") {
        Some(Value::String(key)) if !key.is_empty() && key.len() <= MAX_STATE_KEY_BYTES => {
            key.clone()
        }
        _ => {
            return Err(invalid(&format!(
                "key must be a non-empty string of at most {MAX_STATE_KEY_BYTES} bytes"
            )))
        }
    };
    match op.get("type").and_then(Value::as_str) {
        Some("upsert") => {
            // A missing value is stored as `{}`, as the reference stores it.
            let value = op
                .get("value")
                .cloned()
                .unwrap_or_else(|| Value::Object(serde_json::Map::new()));
            if serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len()) > MAX_STATE_VALUE_BYTES {
                return Err(invalid("value must be at most 1 MiB of JSON"));
            }
            Ok(StateOp::Upsert { key, value })
        }
        Some("delete") => Ok(StateOp::Delete { key }),
        _ => Err(invalid("type must be upsert or delete")),
    }
}

/// The ack statuses a cycle takes (wire-api.md §6); `retry`, which a plain
/// ack takes, is not one of them.
fn cycle_status(ack: &Value) -> Result<AckStatus, HttpError> {
    let status = optional_string(ack, "status").map_err(|_| bad_status())?;
    match status {
        None | Some("completed" | "success" | "failed" | "dlq") => Ok(AckStatus::parse(status)),
        Some(_) => Err(bad_status()),
    }
}

fn bad_status() -> HttpError {
    HttpError::Validation("ack.status must be completed, success, failed or dlq".to_owned())
}

/// The cycle's ack and the `count` it declares.
fn ack_item(ack: &Value, partition_id: uuid::Uuid) -> Result<Option<(AckItem, u64)>, HttpError> {
    if ack.is_null() {
        return Ok(None);
    }
    if !ack.is_object() {
        return Err(HttpError::Validation("ack must be an object".to_owned()));
    }
    let transaction_id = match ack.get("transactionId") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        _ => {
            return Err(HttpError::Validation(
                "ack.transactionId is required".to_owned(),
            ))
        }
    };
    // The nil id is no client's lease (a retryDelay hold, ack.sql).
    let lease_id = match ack.get("leaseId") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.is_empty() => None,
        Some(Value::String(text)) => Some(
            text.parse::<uuid::Uuid>()
                .ok()
                .filter(|id| !id.is_nil())
                .ok_or_else(|| HttpError::Validation("ack.leaseId must be a UUID".to_owned()))?,
        ),
        Some(_) => {
            return Err(HttpError::Validation(
                "ack.leaseId must be a UUID".to_owned(),
            ))
        }
    };
    let error = match ack.get("error") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(_) => {
            return Err(HttpError::Validation(
                "ack.error must be a string".to_owned(),
            ))
        }
    };
    let count = match ack.get("count") {
        None | Some(Value::Null) => 1,
        Some(count) => count.as_u64().ok_or_else(|| {
            HttpError::Validation("ack.count must be a non-negative integer".to_owned())
        })?,
    };
    Ok(Some((
        AckItem {
            transaction_id,
            partition_id,
            status: cycle_status(ack)?,
            error,
            lease_id,
        },
        count,
    )))
}

/// A cycle body's fields: every one but `push_items` as a value, and the
/// sink items raw, so their payloads are stored as the client's bytes.
fn cycle_fields(bytes: &Bytes) -> Result<(Value, Vec<&RawValue>), HttpError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok((Value::Object(serde_json::Map::new()), Vec::new()));
    }
    let fields: std::collections::BTreeMap<String, &RawValue> = serde_json::from_slice(bytes)
        .map_err(|error| {
            if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() {
                HttpError::Validation("request body must be a JSON object".to_owned())
            } else {
                HttpError::InvalidJson(error.to_string())
            }
        })?;
    let mut body = serde_json::Map::new();
    let mut items = Vec::new();
    for (name, raw) in fields {
        if name == "push_items" {
            if raw.get() != "null" {
                items = serde_json::from_str(raw.get())
                    .map_err(|_| HttpError::Validation("push_items must be an array".to_owned()))?;
            }
        } else {
            let value = serde_json::from_str(raw.get())
                .map_err(|error| HttpError::InvalidJson(error.to_string()))?;
            body.insert(name, value);
        }
    }
    Ok((Value::Object(body), items))
}

pub(crate) async fn cycle(
    engine: &Engine,
    req: Request,
    who: &Caller,
) -> Result<Response, HttpError> {
    let bytes = crate::body::of(req).await?;
    let (body, raw_items) = cycle_fields(&bytes)?;
    let query_id = uuid_field(&body, "query_id")?;
    let partition_id = uuid_field(&body, "partition_id")?;
    let group = optional_string(&body, "consumer_group")?
        .filter(|group| !group.is_empty())
        .unwrap_or(QUEUE_MODE_GROUP)
        .to_owned();
    if let Some(rule) = name_problem(&group) {
        return Err(HttpError::Validation(format!("consumer_group {rule}")));
    }
    let state_ops = array(&body, "state_ops")?
        .iter()
        .enumerate()
        .map(|(index, op)| state_op(index, op))
        .collect::<Result<Vec<_>, _>>()?;
    let mut push_items = raw_items
        .iter()
        .enumerate()
        .map(|(index, raw)| {
            crate::handlers::push::parse_item(&bytes, "push_items", index, raw, b"null")
        })
        .collect::<Result<Vec<_>, _>>()?;
    who.stamp(&mut push_items);
    let ack_body = body.get("ack").unwrap_or(&Value::Null);
    let (ack, count) = match ack_item(ack_body, partition_id)? {
        Some((ack, count)) => (Some(ack), count),
        None => (None, 0),
    };
    let release_lease = match body.get("release_lease") {
        None | Some(Value::Null) => true,
        Some(value) => crate::wire::boolean("release_lease", value)?,
    };
    let done = engine
        .streams()
        .cycle(
            &who.tenant,
            StreamCycle {
                query_id,
                partition_id,
                group,
                state_ops,
                push_items,
                ack,
                release_lease,
            },
        )
        .await
        .map_err(|error| match error {
            queen_engine::EngineError::CycleRefused(reason) => HttpError::CycleRefused {
                query_id: query_id.to_string(),
                partition_id: partition_id.to_string(),
                reason,
            },
            other => HttpError::Engine(other),
        })?;
    let push_results: Vec<Value> = done
        .pushed
        .iter()
        .enumerate()
        .map(|(index, outcome)| {
            json!({
                "index": index,
                "transaction_id": outcome.transaction_id,
                "status": match outcome.status {
                    PushStatus::Queued => "queued",
                    PushStatus::Duplicate => "duplicate",
                },
                "message_id": outcome.message_id.map(|id| id.to_string()),
                "partition_id": outcome.partition_id.to_string(),
                "trace_id": outcome.trace_id.map(|id| id.to_string()),
                "queueName": &*outcome.queue,
            })
        })
        .collect();
    let ack_result = done.ack.map(|ack| {
        json!({
            "success": true,
            "count": if ack.dlq { 0 } else { count },
            "lease_released": ack.lease_released,
            "dlq": ack.dlq,
        })
    });
    Ok(response::json(
        StatusCode::OK,
        &json!({
            "success": true,
            "query_id": query_id.to_string(),
            "partition_id": partition_id.to_string(),
            "queueName": done.queue,
            "state_ops_applied": done.state_ops_applied,
            "push_results": push_results,
            "ack_result": ack_result,
        }),
    ))
}
