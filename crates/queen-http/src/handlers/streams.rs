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
//!   "keys"?, "key_prefix"?}` answers `{"success": true, "rows": [{"key",
//!   "value", "updated_at"}]}`: the rows of `keys`, else those starting with
//!   `key_prefix`, else all, by key.
//!
//! - `POST /streams/v1/cycle` `{"query_id", "partition_id"` (UUIDs)`,
//!   "consumer_group"?` (`__QUEUE_MODE__`)`, "state_ops"?: [{"type":
//!   "upsert", "key", "value"} | {"type": "delete", "key"}], "push_items"?:
//!   [{"queue", "partition"?, "payload", "transactionId"?}], "ack"?:
//!   {"transactionId", "leaseId"?, "status"?, "error"?, "count"?},
//!   "release_lease"?` (true)`}`: one transaction (`Streams::cycle`).
//!   Answers `{"success": true, "query_id", "partition_id", "queueName",
//!   "state_ops_applied", "push_results": [push results], "ack_result":
//!   {"success", "count", "lease_released", "dlq"} | null}`; a cycle refused
//!   and rolled back (no such query, an ack that did not apply) answers 200
//!   `{"success": false, "query_id", "partition_id", "error"}`, as the SDKs
//!   read it. Keys are at most 1024 bytes, values at most 1 MiB of JSON.

use bytes::Bytes;
use hyper::StatusCode;
use queen_engine::naming::{name_problem, DEFAULT_PARTITION};
use queen_engine::{
    AckItem, AckStatus, Engine, PushItem, PushStatus, QueryRegistration, Registered, StateOp,
    StreamCycle, MAX_STATE_KEY_BYTES, QUEUE_MODE_GROUP,
};
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
    let prefix = optional_string(&body, "key_prefix")?;
    let rows = engine
        .streams()
        .state(tenant, query, partition, &keys, prefix)
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
            let value = op.get("value").cloned().unwrap_or(Value::Null);
            if serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len()) > MAX_STATE_VALUE_BYTES {
                return Err(invalid("value must be at most 1 MiB of JSON"));
            }
            Ok(StateOp::Upsert { key, value })
        }
        Some("delete") => Ok(StateOp::Delete { key }),
        _ => Err(invalid("type must be upsert or delete")),
    }
}

fn push_item(index: usize, item: &Value) -> Result<PushItem, HttpError> {
    let invalid = |field: &str, rule: &str| {
        HttpError::Validation(format!("push_items[{index}].{field} {rule}"))
    };
    let queue = match item.get("queue") {
        Some(Value::String(queue)) => queue.clone(),
        _ => return Err(invalid("queue", "is required")),
    };
    if let Some(rule) = name_problem(&queue) {
        return Err(invalid("queue", rule));
    }
    let partition = match item.get("partition") {
        None | Some(Value::Null) => DEFAULT_PARTITION.to_owned(),
        Some(Value::String(partition)) => partition.clone(),
        Some(_) => return Err(invalid("partition", "must be a string")),
    };
    if let Some(rule) = name_problem(&partition) {
        return Err(invalid("partition", rule));
    }
    let transaction_id = match item.get("transactionId") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) if !id.is_empty() && id.len() <= 1024 => Some(id.clone()),
        Some(_) => {
            return Err(invalid(
                "transactionId",
                "must be a non-empty string of at most 1024 bytes",
            ))
        }
    };
    let payload = item.get("payload").cloned().unwrap_or(Value::Null);
    let payload = serde_json::to_vec(&payload).map_err(|_| invalid("payload", "must be JSON"))?;
    Ok(PushItem {
        tenant: queen_engine::naming::default_tenant(),
        queue,
        partition,
        transaction_id,
        trace_id: None,
        producer_sub: None,
        payload: Bytes::from(payload),
    })
}

fn ack_item(ack: &Value, partition_id: uuid::Uuid) -> Result<Option<AckItem>, HttpError> {
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
    let lease_id = match optional_string(ack, "leaseId")? {
        None | Some("") => None,
        Some(text) => Some(
            text.parse::<uuid::Uuid>()
                .ok()
                .filter(|id| !id.is_nil())
                .ok_or_else(|| HttpError::Validation("ack.leaseId must be a UUID".to_owned()))?,
        ),
    };
    Ok(Some(AckItem {
        transaction_id,
        partition_id,
        status: AckStatus::parse(optional_string(ack, "status")?),
        error: optional_string(ack, "error")?.map(str::to_owned),
        lease_id,
    }))
}

pub(crate) async fn cycle(
    engine: &Engine,
    req: Request,
    who: &Caller,
) -> Result<Response, HttpError> {
    let body = crate::body::object(req).await?;
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
    let mut push_items = array(&body, "push_items")?
        .iter()
        .enumerate()
        .map(|(index, item)| push_item(index, item))
        .collect::<Result<Vec<_>, _>>()?;
    who.stamp(&mut push_items);
    let ack_body = body.get("ack").unwrap_or(&Value::Null);
    let ack = ack_item(ack_body, partition_id)?;
    let count = ack_body.get("count").cloned().unwrap_or(Value::Null);
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
            "count": count,
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
