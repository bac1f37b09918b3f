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
//! `POST /streams/v1/cycle` is not served yet (404).

use hyper::StatusCode;
use queen_engine::{Engine, QueryRegistration, Registered, MAX_STATE_KEY_BYTES};
use serde_json::{json, Value};

use crate::error::HttpError;
use crate::response::{self, Response};
use crate::server::Request;
use crate::wire::format_millis;

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

pub(crate) async fn register(engine: &Engine, req: Request) -> Result<Response, HttpError> {
    let body = crate::body::object(req).await?;
    let name = required(&body, "name")?;
    let source_queue = required(&body, "source_queue")?;
    let config_hash = required(&body, "config_hash")?;
    let sink_queue = match body.get("sink_queue") {
        None | Some(Value::Null) => None,
        Some(Value::String(sink)) if sink.is_empty() => None,
        Some(Value::String(sink)) => Some(sink.as_str()),
        Some(_) => {
            return Err(HttpError::Validation(
                "sink_queue must be a string".to_owned(),
            ))
        }
    };
    let reset = match body.get("reset") {
        None | Some(Value::Null) => false,
        Some(value) => crate::wire::boolean("reset", value)?,
    };
    let registered = engine
        .register_query(&QueryRegistration {
            name,
            source_queue,
            sink_queue,
            config_hash,
            reset,
        })
        .await?;
    let (query_id, fresh, did_reset) = match registered {
        Registered::Created(id) => (id, true, false),
        Registered::Same(id) => (id, false, false),
        Registered::Reset(id) => (id, false, true),
        Registered::Mismatch { query_id, stored } => {
            return Ok(response::json(
                StatusCode::CONFLICT,
                &json!({
                    "success": false,
                    "query_id": query_id.to_string(),
                    "name": name,
                    "error": format!(
                        "config_hash mismatch: the query is registered with {stored}, \
                         this request has {config_hash}; pass reset: true to wipe its state"
                    ),
                }),
            ))
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

pub(crate) async fn state_get(engine: &Engine, req: Request) -> Result<Response, HttpError> {
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
    let prefix = match body.get("key_prefix") {
        None | Some(Value::Null) => None,
        Some(Value::String(prefix)) => Some(prefix.as_str()),
        Some(_) => {
            return Err(HttpError::Validation(
                "key_prefix must be a string".to_owned(),
            ))
        }
    };
    let rows = engine.stream_state(query, partition, &keys, prefix).await?;
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
