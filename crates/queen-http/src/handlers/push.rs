//! `POST /api/v1/push` (wire-api.md §2.2).
//!
//! Body `{"items": [{queue, partition?, payload?, transactionId?, traceId?}, ...]}`.
//! Every item is validated before anything is written; the first bad item fails
//! the whole request with 400 naming the item and the field. Payloads are kept
//! as the exact bytes the client sent (a zero-copy slice of the request body),
//! never re-serialised. The answer is 201 with one result per item, in input
//! order, with the contract's snake_case fields (plus `queueName`).
//!
//! A push the broker spooled (maintenance mode, or the database was
//! unreachable: `Engine::push`) answers 201 with `status: "buffered"` items:
//! `{index, transaction_id, status, queue, partition, transactionId,
//! queueName}` (the contract's `queue`, `partition`, `transactionId`, plus
//! the fields every push result carries). A spool write that failed answers
//! 500 `File buffer write failed`; a full spool 503 with `Retry-After`.

use std::io::Write as _;

use bytes::Bytes;
use hyper::StatusCode;
use queen_engine::naming::{name_problem, DEFAULT_PARTITION};
use queen_engine::{Buffered, Engine, PushItem, PushOutcome, PushStatus, Pushed};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::auth::Caller;
use crate::context::Request;
use crate::error::HttpError;
use crate::json::{push_str, push_uuid};
use crate::response::{self, Response};

/// Longest transaction id accepted, in bytes.
const MAX_TRANSACTION_ID_BYTES: usize = 1024;

pub(crate) async fn post(
    engine: &Engine,
    req: Request,
    who: &Caller,
) -> Result<Response, HttpError> {
    let bytes = crate::body::of(req).await?;
    let mut items = parse(&bytes)?;
    who.stamp(&mut items);
    if items.is_empty() {
        return Ok(response::json(StatusCode::CREATED, &serde_json::json!([])));
    }
    let body = match engine.push(items).await? {
        Pushed::Stored(outcomes) => render(&outcomes),
        Pushed::Buffered(buffered) => render_buffered(&buffered),
    };
    Ok(response::raw_json(StatusCode::CREATED, body))
}

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow, default)]
    items: Option<&'a RawValue>,
}

/// The fields of one item, each kept raw so its type can be checked and named.
#[derive(Deserialize, Clone, Copy)]
struct RawItem<'a> {
    #[serde(borrow, default)]
    queue: Option<&'a RawValue>,
    #[serde(borrow, default)]
    partition: Option<&'a RawValue>,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "transactionId")]
    transaction_id: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "traceId")]
    trace_id: Option<&'a RawValue>,
}

/// Parse and validate the whole body into engine items.
pub(crate) fn parse(bytes: &Bytes) -> Result<Vec<PushItem>, HttpError> {
    // Fast path: one pass over the body straight into raw fields (every
    // payload is scanned once). Anything it cannot take (items not an array,
    // an item not an object) goes the careful way below, which names the
    // problem.
    #[derive(Deserialize)]
    struct FastBody<'a> {
        #[serde(borrow)]
        items: Vec<RawItem<'a>>,
    }
    if let Ok(body) = serde_json::from_slice::<FastBody<'_>>(bytes) {
        return body
            .items
            .into_iter()
            .enumerate()
            .map(|(index, item)| item_from_raw(bytes, "items", index, item, b"null"))
            .collect();
    }
    let body: Body<'_> = crate::body::json(bytes)?;
    let items_required = || HttpError::Validation("items array is required".to_owned());
    let raw_items: Vec<&RawValue> = body
        .items
        .ok_or_else(items_required)
        .and_then(|raw| serde_json::from_str(raw.get()).map_err(|_| items_required()))?;
    raw_items
        .iter()
        .enumerate()
        .map(|(index, raw)| parse_item(bytes, "items", index, raw, b"null"))
        .collect()
}

/// One push item at `{list}[{index}]`; a missing payload becomes
/// `default_payload` (`null` for a push, `{}` inside a transaction).
pub(crate) fn parse_item(
    body: &Bytes,
    list: &str,
    index: usize,
    raw: &RawValue,
    default_payload: &'static [u8],
) -> Result<PushItem, HttpError> {
    let item: RawItem<'_> = serde_json::from_str(raw.get())
        .map_err(|_| HttpError::Validation(format!("{list}[{index}] must be an object")))?;
    item_from_raw(body, list, index, item, default_payload)
}

/// Validate one item's raw fields.
fn item_from_raw(
    body: &Bytes,
    list: &str,
    index: usize,
    item: RawItem<'_>,
    default_payload: &'static [u8],
) -> Result<PushItem, HttpError> {
    let invalid =
        |field: &str, rule: &str| HttpError::Validation(format!("{list}[{index}].{field} {rule}"));

    let queue = string_field(item.queue)
        .map_err(|()| invalid("queue", "must be a string"))?
        .ok_or_else(|| invalid("queue", "is required"))?;
    if let Some(rule) = name_problem(&queue) {
        return Err(invalid("queue", rule));
    }

    let partition = string_field(item.partition)
        .map_err(|()| invalid("partition", "must be a string"))?
        .unwrap_or_else(|| DEFAULT_PARTITION.to_owned());
    if let Some(rule) = name_problem(&partition) {
        return Err(invalid("partition", rule));
    }

    let transaction_id = string_field(item.transaction_id)
        .map_err(|()| invalid("transactionId", "must be a string"))?;
    if let Some(id) = &transaction_id {
        if id.is_empty() {
            return Err(invalid("transactionId", "must not be empty"));
        }
        if id.len() > MAX_TRANSACTION_ID_BYTES {
            return Err(invalid("transactionId", "must be at most 1024 bytes"));
        }
    }

    let trace_id = string_field(item.trace_id)
        .map_err(|()| invalid("traceId", "must be a string"))?
        .map(|text| text.parse::<uuid::Uuid>())
        .transpose()
        .map_err(|_| invalid("traceId", "must be a UUID"))?;

    // The payload is the exact bytes the client sent: a slice of the body.
    let payload = match item.payload {
        Some(raw) => body.slice_ref(raw.get().as_bytes()),
        None => Bytes::from_static(default_payload),
    };

    Ok(PushItem {
        tenant: queen_engine::naming::default_tenant(),
        queue,
        partition,
        transaction_id,
        trace_id,
        producer_sub: None,
        payload,
    })
}

/// A field that must be a string when present; JSON `null` counts as absent.
fn string_field(raw: Option<&RawValue>) -> Result<Option<String>, ()> {
    match raw {
        None => Ok(None),
        Some(raw) if raw.get() == "null" => Ok(None),
        Some(raw) => serde_json::from_str::<String>(raw.get())
            .map(Some)
            .map_err(|_| ()),
    }
}

/// The 201 body: one object per item, written by hand (no intermediate
/// `Value` per item).
fn render(outcomes: &[PushOutcome]) -> Vec<u8> {
    let mut out = Vec::with_capacity(outcomes.len() * 256 + 2);
    out.push(b'[');
    for (index, outcome) in outcomes.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        let status: &[u8] = match outcome.status {
            PushStatus::Queued => b"queued",
            PushStatus::Duplicate => b"duplicate",
        };
        // Writing into a Vec cannot fail.
        let _ = write!(out, "{{\"index\":{index}");
        out.extend_from_slice(b",\"transaction_id\":");
        push_str(&mut out, &outcome.transaction_id);
        out.extend_from_slice(b",\"status\":\"");
        out.extend_from_slice(status);
        out.extend_from_slice(b"\",\"message_id\":");
        push_uuid(&mut out, outcome.message_id);
        out.extend_from_slice(b",\"partition_id\":");
        push_uuid(&mut out, Some(outcome.partition_id));
        out.extend_from_slice(b",\"trace_id\":");
        push_uuid(&mut out, outcome.trace_id);
        out.extend_from_slice(b",\"queueName\":");
        push_str(&mut out, &outcome.queue);
        out.push(b'}');
    }
    out.push(b']');
    out
}

/// The 201 body of a spooled push.
fn render_buffered(buffered: &[Buffered]) -> Vec<u8> {
    let mut out = Vec::with_capacity(buffered.len() * 160 + 2);
    out.push(b'[');
    for (index, item) in buffered.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        let _ = write!(out, "{{\"index\":{index}");
        out.extend_from_slice(b",\"transaction_id\":");
        push_str(&mut out, &item.transaction_id);
        out.extend_from_slice(b",\"status\":\"buffered\",\"queue\":");
        push_str(&mut out, &item.queue);
        out.extend_from_slice(b",\"partition\":");
        push_str(&mut out, &item.partition);
        out.extend_from_slice(b",\"transactionId\":");
        push_str(&mut out, &item.transaction_id);
        out.extend_from_slice(b",\"queueName\":");
        push_str(&mut out, &item.queue);
        out.push(b'}');
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_err(body: &str, expected: &str) {
        let bytes = Bytes::from(body.to_owned());
        match parse(&bytes) {
            Err(HttpError::Validation(message)) => assert_eq!(message, expected, "{body}"),
            Err(other) => panic!("{body}: unexpected error {other}"),
            Ok(_) => panic!("{body}: accepted"),
        }
    }

    #[test]
    fn each_invalid_item_is_named_with_its_field() {
        check_err("{}", "items array is required");
        check_err(r#"{"items": 3}"#, "items array is required");
        check_err(r#"{"items": [5]}"#, "items[0] must be an object");
        check_err(r#"{"items": [{}]}"#, "items[0].queue is required");
        check_err(
            r#"{"items": [{"queue": 1}]}"#,
            "items[0].queue must be a string",
        );
        check_err(
            r#"{"items": [{"queue": ""}]}"#,
            "items[0].queue must not be empty",
        );
        check_err(
            r#"{"items": [{"queue": "q"}, {"queue": "q", "partition": 7}]}"#,
            "items[1].partition must be a string",
        );
        check_err(
            r#"{"items": [{"queue": "q", "transactionId": 7}]}"#,
            "items[0].transactionId must be a string",
        );
        check_err(
            r#"{"items": [{"queue": "q", "transactionId": ""}]}"#,
            "items[0].transactionId must not be empty",
        );
        check_err(
            r#"{"items": [{"queue": "q", "traceId": "not-a-uuid"}]}"#,
            "items[0].traceId must be a UUID",
        );
        check_err(
            r#"{"items": [{"queue": "q", "traceId": 12}]}"#,
            "items[0].traceId must be a string",
        );
        let long = "x".repeat(256);
        check_err(
            &format!(r#"{{"items": [{{"queue": "{long}"}}]}}"#),
            "items[0].queue must be at most 255 bytes",
        );
    }

    #[test]
    fn payload_bytes_are_a_slice_of_the_body_exactly_as_sent() {
        let body = Bytes::from_static(
            br#"{"items":[{"queue":"q","payload": { "b" : [1, 2.50, "\u00e9"] } },{"queue":"q"}]}"#,
        );
        let items = parse(&body).unwrap();
        assert_eq!(&items[0].payload[..], br#"{ "b" : [1, 2.50, "\u00e9"] }"#);
        assert_eq!(&items[1].payload[..], b"null");
        assert_eq!(items[0].partition, "Default");
        let start = items[0].payload.as_ptr() as usize;
        let body_start = body.as_ptr() as usize;
        assert!(
            start >= body_start && start < body_start + body.len(),
            "the payload was copied instead of sliced"
        );
    }
}
