//! `POST /api/v1/configure`: create a queue or fully replace its configuration
//! (wire-api.md §2.1).
//!
//! Body `{"queue", "namespace"?, "task"?, "options"?}`:
//!
//! - `queue`: a non-empty string, else 400 `queue is required`. The engine
//!   refuses a name over 255 bytes or holding NUL (400 with its message).
//! - `namespace`, `task`: a string is stored as given (`""` included). Absent,
//!   `null` or any other type derives them from the queue name: the namespace
//!   is the text before the first `.`, the task the second dot-separated
//!   segment, both `""` when the name has no dot (`billing.invoices.v2` gives
//!   `billing` and `invoices`; `plain` gives `""` and `""`).
//! - `options`: an object (absent or `null` is `{}`), else 400
//!   `options must be an object`. Unknown keys are ignored. Every known option
//!   is replaced: one left out (or `null`) gets its default from
//!   [`QueueSettings::CONFIGURE_DEFAULTS`], whatever it was before.
//!   Integer options take a JSON integer, a float without fraction, or a string
//!   holding an integer (`"30"`); booleans take `true`/`false` or the strings
//!   `"true"`/`"false"`. Anything else is a 400 naming the option
//!   (`options.leaseTime must be an integer`, `... must not be negative`,
//!   `... must be at most 2147483647`, `options.encryptionEnabled must be a boolean`).
//!   `leaseTime` 0 means the default lease: the engine stores 60, the lease
//!   actually granted.
//!
//! Everything is checked before any database I/O, so a 400 writes nothing.
//!
//! Reply 200 `{"configured": true, "queueId", "partitionId" (of the `Default`
//! partition), "queue", "namespace", "task", "storage": "segments", "options"}`.
//! `options` holds every known option: the exact JSON value the client sent
//! for the ones it sent (`"30"` stays a string, `null` stays `null`, `0` for
//! `leaseTime` stays `0`), the default for the others. Clients compare the echo
//! with what they sent, value and type.

use hyper::StatusCode;
use queen_engine::{ConfigureQueue, Configured, Engine, QueueSettings};
use serde_json::{Map, Value};

use crate::context::Request;
use crate::error::HttpError;
use crate::response::{self, Response};

pub(crate) async fn post(
    engine: &Engine,
    req: Request,
    tenant: &str,
) -> Result<Response, HttpError> {
    let body = crate::body::value(req).await?;
    let mut command = Command::parse(&body)?;
    tenant.clone_into(&mut command.request.tenant);
    let queue = command.request.queue.clone();
    let configured = engine.queues().configure(command.request).await?;
    Ok(response::json(
        StatusCode::OK,
        &encode(&queue, &configured, &command.echo),
    ))
}

/// A parsed request: what to ask the engine, and the options to echo.
pub(crate) struct Command {
    request: ConfigureQueue,
    echo: Map<String, Value>,
}

impl Command {
    pub(crate) fn parse(body: &Value) -> Result<Command, HttpError> {
        let queue = match body.get("queue") {
            Some(Value::String(queue)) if !queue.is_empty() => queue.clone(),
            _ => return Err(invalid("queue is required".to_owned())),
        };
        let no_options = Map::new();
        let options = match body.get("options") {
            None | Some(Value::Null) => &no_options,
            Some(Value::Object(options)) => options,
            Some(_) => return Err(invalid("options must be an object".to_owned())),
        };
        let mut settings = QueueSettings::CONFIGURE_DEFAULTS;
        let mut defaults = QueueSettings::CONFIGURE_DEFAULTS;
        let mut echo = Map::new();
        for &(key, field) in OPTIONS {
            let sent = options.get(key);
            let shown = match (field, sent) {
                (Field::Int(slot), None) => Value::from(*slot(&mut defaults)),
                (Field::Bool(slot), None) => Value::from(*slot(&mut defaults)),
                (_, Some(Value::Null)) => Value::Null,
                (Field::Int(slot), Some(value)) => {
                    *slot(&mut settings) = crate::wire::integer(&format!("options.{key}"), value)?;
                    value.clone()
                }
                (Field::Bool(slot), Some(value)) => {
                    *slot(&mut settings) = crate::wire::boolean(&format!("options.{key}"), value)?;
                    value.clone()
                }
            };
            echo.insert(key.to_owned(), shown);
        }
        // retryDelay is applied only when the request names it: left out, it
        // is the reference's 1000, stored and echoed but never applied there.
        settings.retry_delay_applied = options.get("retryDelay").is_some_and(|v| !v.is_null());
        Ok(Command {
            request: ConfigureQueue {
                // The caller's, set by `post`.
                tenant: queen_engine::naming::DEFAULT_TENANT.to_owned(),
                queue,
                namespace: text(body, "namespace"),
                task: text(body, "task"),
                settings,
            },
            echo,
        })
    }
}

fn encode(queue: &str, configured: &Configured, echo: &Map<String, Value>) -> Value {
    serde_json::json!({
        "configured": true,
        "queueId": configured.queue_id.to_string(),
        "partitionId": configured.partition_id.to_string(),
        "queue": queue,
        "namespace": configured.namespace,
        "task": configured.task,
        "storage": "segments",
        "options": echo,
    })
}

/// Where a wire option lands in [`QueueSettings`].
#[derive(Clone, Copy)]
enum Field {
    Int(fn(&mut QueueSettings) -> &mut i32),
    Bool(fn(&mut QueueSettings) -> &mut bool),
}

/// Every option of the wire contract (§2.1) plus the engine-side ones
/// (`dlqEnabled`, `minPopWaitTime`, `dedupWindowSeconds`), by wire name.
const OPTIONS: &[(&str, Field)] = &[
    ("leaseTime", Field::Int(|s| &mut s.lease_time)),
    ("retryLimit", Field::Int(|s| &mut s.retry_limit)),
    ("retryDelay", Field::Int(|s| &mut s.retry_delay)),
    ("maxSize", Field::Int(|s| &mut s.max_queue_size)),
    ("ttl", Field::Int(|s| &mut s.ttl)),
    ("priority", Field::Int(|s| &mut s.priority)),
    (
        "delayedProcessing",
        Field::Int(|s| &mut s.delayed_processing),
    ),
    ("windowBuffer", Field::Int(|s| &mut s.window_buffer)),
    (
        "retentionEnabled",
        Field::Bool(|s| &mut s.retention_enabled),
    ),
    ("retentionSeconds", Field::Int(|s| &mut s.retention_seconds)),
    (
        "completedRetentionSeconds",
        Field::Int(|s| &mut s.completed_retention_seconds),
    ),
    (
        "maxWaitTimeSeconds",
        Field::Int(|s| &mut s.max_wait_time_seconds),
    ),
    ("deadLetterQueue", Field::Bool(|s| &mut s.dead_letter_queue)),
    (
        "dlqAfterMaxRetries",
        Field::Bool(|s| &mut s.dlq_after_max_retries),
    ),
    ("dlqEnabled", Field::Bool(|s| &mut s.dlq_enabled)),
    (
        "encryptionEnabled",
        Field::Bool(|s| &mut s.encryption_enabled),
    ),
    ("minPopWaitTime", Field::Int(|s| &mut s.min_pop_wait_time)),
    (
        "dedupWindowSeconds",
        Field::Int(|s| &mut s.dedup_window_seconds),
    ),
];

/// A string field, or `None` for anything else (the engine then derives it).
fn text(body: &Value, key: &str) -> Option<String> {
    body.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn invalid(message: String) -> HttpError {
    HttpError::Validation(message)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn omitted_and_null_options_take_defaults_and_the_echo_has_every_option() {
        let command = Command::parse(&json!({
            "queue": "q",
            "options": {"retryLimit": "7", "ttl": null, "unknown": 1}
        }))
        .unwrap();
        let settings = command.request.settings;
        assert_eq!(settings.retry_limit, 7);
        assert_eq!(settings.ttl, 3600);
        assert_eq!(settings.lease_time, 300);
        assert_eq!(command.echo.len(), OPTIONS.len());
        assert_eq!(command.echo["retryLimit"], json!("7"));
        assert_eq!(command.echo["ttl"], Value::Null);
        assert_eq!(command.echo["leaseTime"], json!(300));
        assert_eq!(command.echo["dlqEnabled"], json!(true));
        assert!(!command.echo.contains_key("unknown"));
    }

    #[test]
    fn every_option_lands_in_a_field_of_its_own() {
        // Send each option alone, moved off its default. Every result must
        // differ from the defaults and from every other result: two options
        // writing one field would give equal settings.
        let mut results: Vec<(&str, QueueSettings)> = Vec::new();
        for &(key, field) in OPTIONS {
            let value = match field {
                Field::Int(_) => json!(12_345),
                Field::Bool(slot) => {
                    let mut defaults = QueueSettings::CONFIGURE_DEFAULTS;
                    json!(!*slot(&mut defaults))
                }
            };
            let command = Command::parse(&json!({"queue": "q", "options": {key: value}})).unwrap();
            let settings = command.request.settings;
            assert_ne!(settings, QueueSettings::CONFIGURE_DEFAULTS, "{key}");
            for (other, earlier) in &results {
                assert_ne!(settings, *earlier, "{key} and {other} write one field");
            }
            results.push((key, settings));
        }
        assert_eq!(results.len(), 18);
    }
}
