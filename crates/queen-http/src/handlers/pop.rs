//! `GET /api/v1/pop/queue/:queue[/partition/:partition]` and the discovery
//! pop `GET /api/v1/pop?namespace=&task=` (wire-api.md §2.3).
//!
//! Query: `batch` (default `DEFAULT_BATCH_SIZE`, 200; below 1 means 1),
//! `wait` (false), `timeout` (ms, `DEFAULT_TIMEOUT`, 30000), `consumerGroup`
//! (`__QUEUE_MODE__`), `autoAck` (false), `subscriptionMode`
//! (`DEFAULT_SUBSCRIPTION_MODE`; `new`, `new-only` → new, anything else → all),
//! `subscriptionFrom` (ISO-8601 timestamp, or `now` = new), `partitions`
//! (wildcard only, 1). A bare discovery pop (neither namespace nor task) is 400.
//!
//! A pop with messages answers 200 with the contract's envelope; an empty pop
//! answers 204 with no body at all (not even a `Content-Length`).
//! The JSON is written by hand so every payload is copied into the response
//! exactly as stored, never parsed and re-serialised.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hyper::StatusCode;
use queen_engine::{PopRequest, PopTarget, Popped, SubscriptionMode, QUEUE_MODE_GROUP};

use crate::context::{App, Request};
use crate::error::HttpError;
use crate::json::{push_opt_str, push_str, push_uuid};
use crate::query::Query;
use crate::response::{self, Response};

/// The longest long-poll accepted; longer timeouts are clamped.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// The most messages one pop may ask for.
const MAX_BATCH: i64 = 10_000;

/// The most partitions one wildcard pop may claim.
const MAX_PARTITIONS: i64 = 1_000;

pub(crate) async fn queue(
    app: &App,
    req: &Request,
    tenant: &Arc<str>,
    queue: &str,
) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    let target = PopTarget::Queue {
        queue: queue.to_owned(),
    };
    let request = parse(app, &query, tenant, target, true)?;
    answer(app, request).await
}

pub(crate) async fn partition(
    app: &App,
    req: &Request,
    tenant: &Arc<str>,
    queue: &str,
    partition: &str,
) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    let target = PopTarget::Partition {
        queue: queue.to_owned(),
        partition: partition.to_owned(),
    };
    let request = parse(app, &query, tenant, target, false)?;
    answer(app, request).await
}

pub(crate) async fn discovery(
    app: &App,
    req: &Request,
    tenant: &Arc<str>,
) -> Result<Response, HttpError> {
    let query = Query::parse(req.uri().query());
    let namespace = query.non_empty("namespace").map(str::to_owned);
    let task = query.non_empty("task").map(str::to_owned);
    if namespace.is_none() && task.is_none() {
        return Err(HttpError::Validation(
            "a pop without a queue needs namespace or task".to_owned(),
        ));
    }
    let target = PopTarget::Discovery { namespace, task };
    let request = parse(app, &query, tenant, target, true)?;
    answer(app, request).await
}

async fn answer(app: &App, request: PopRequest) -> Result<Response, HttpError> {
    let group = request.group.clone();
    let popped = app.engine.pop(request).await?;
    if popped.messages.is_empty() {
        return Ok(response::empty(StatusCode::NO_CONTENT));
    }
    Ok(response::raw_json(StatusCode::OK, render(&popped, &group)))
}

fn parse(
    app: &App,
    query: &Query,
    tenant: &Arc<str>,
    target: PopTarget,
    wildcard: bool,
) -> Result<PopRequest, HttpError> {
    let defaults = &app.defaults;
    let default_batch = i64::try_from(defaults.pop_batch).unwrap_or(MAX_BATCH);
    let batch = query.int("batch", default_batch).clamp(1, MAX_BATCH);
    let partitions = if wildcard {
        query.int("partitions", 1).clamp(1, MAX_PARTITIONS)
    } else {
        1
    };
    let default_timeout = i64::try_from(defaults.pop_timeout.as_millis()).unwrap_or(i64::MAX);
    let timeout_ms = query.int("timeout", default_timeout).max(0);
    let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0)).min(MAX_TIMEOUT);
    let group = query
        .non_empty("consumerGroup")
        .unwrap_or(QUEUE_MODE_GROUP)
        .to_owned();
    crate::wire::name("consumerGroup", &group)?;
    let mode_text = query
        .str("subscriptionMode")
        .unwrap_or(&defaults.subscription_mode);
    let mut subscription_mode = match mode_text {
        "new" | "new-only" => SubscriptionMode::New,
        _ => SubscriptionMode::All,
    };
    let subscription_from = match query.non_empty("subscriptionFrom") {
        None => None,
        Some("now") => {
            subscription_mode = SubscriptionMode::New;
            None
        }
        Some(text) => Some(crate::wire::parse_timestamp(text).ok_or_else(|| {
            HttpError::Validation(
                "subscriptionFrom must be an ISO-8601 timestamp or \"now\"".to_owned(),
            )
        })?),
    };
    Ok(PopRequest {
        tenant: Arc::clone(tenant),
        target,
        group,
        batch: usize::try_from(batch).unwrap_or(1),
        max_partitions: usize::try_from(partitions).unwrap_or(1),
        wait: query.bool("wait", false),
        timeout,
        auto_ack: query.bool("autoAck", false),
        subscription_mode,
        subscription_from,
    })
}

/// The 200 envelope. Payload bytes are copied in verbatim.
pub(crate) fn render(popped: &Popped, group: &str) -> Vec<u8> {
    let payload_bytes: usize = popped.messages.iter().map(|m| m.payload.len()).sum();
    let mut out = Vec::with_capacity(256 + payload_bytes + popped.messages.len() * 384);
    let mut lease_buf = uuid::Uuid::encode_buffer();
    let lease: &str = match popped.lease_id {
        Some(id) => id.hyphenated().encode_lower(&mut lease_buf),
        None => "",
    };
    let first = popped.messages.first();
    out.extend_from_slice(b"{\"success\":true,\"queue\":");
    push_str(&mut out, popped.queue.as_deref().unwrap_or(""));
    out.extend_from_slice(b",\"partition\":");
    push_str(&mut out, first.map_or("", |m| &*m.partition));
    out.extend_from_slice(b",\"partitionId\":");
    push_str(
        &mut out,
        &first
            .map(|m| m.partition_id.to_string())
            .unwrap_or_default(),
    );
    out.extend_from_slice(b",\"leaseId\":");
    push_str(&mut out, lease);
    out.extend_from_slice(b",\"consumerGroup\":");
    push_str(&mut out, group);
    out.extend_from_slice(b",\"partitionsClaimed\":");
    out.extend_from_slice(popped.partitions_claimed.to_string().as_bytes());
    out.extend_from_slice(b",\"messages\":[");
    let mut created: Option<(SystemTime, String)> = None;
    for (idx, message) in popped.messages.iter().enumerate() {
        if idx > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"id\":");
        push_uuid(&mut out, Some(message.id));
        out.extend_from_slice(b",\"transactionId\":");
        push_str(&mut out, &message.transaction_id);
        out.extend_from_slice(b",\"traceId\":");
        push_uuid(&mut out, message.trace_id);
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(&message.payload);
        out.extend_from_slice(b",\"producerSub\":");
        push_opt_str(&mut out, message.producer_sub.as_deref());
        out.extend_from_slice(b",\"createdAt\":");
        // Every message of a segment shares its timestamp: format it once.
        if created
            .as_ref()
            .is_none_or(|(at, _)| *at != message.created_at)
        {
            created = Some((
                message.created_at,
                crate::wire::format_micros(message.created_at),
            ));
        }
        push_str(
            &mut out,
            created.as_ref().map_or("", |(_, text)| text.as_str()),
        );
        out.extend_from_slice(b",\"partitionId\":");
        push_uuid(&mut out, Some(message.partition_id));
        out.extend_from_slice(b",\"partition\":");
        push_str(&mut out, &message.partition);
        out.extend_from_slice(b",\"leaseId\":");
        push_str(&mut out, lease);
        out.extend_from_slice(b",\"consumerGroup\":");
        push_str(&mut out, group);
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use queen_engine::PoppedMessage;

    use super::*;

    #[test]
    fn the_envelope_is_valid_json_with_payloads_verbatim() {
        let created = SystemTime::UNIX_EPOCH + Duration::from_micros(1_767_225_600_123_456);
        let message = |payload: &'static [u8], trace: bool| PoppedMessage {
            id: uuid::Uuid::from_u128(1),
            transaction_id: "t\"1".to_owned(),
            trace_id: trace.then(|| uuid::Uuid::from_u128(2)),
            producer_sub: None,
            payload: Bytes::from_static(payload),
            created_at: created,
            partition_id: uuid::Uuid::from_u128(3),
            partition: Arc::from("p0"),
            offset: 0,
        };
        let popped = Popped {
            queue: Some("q".to_owned()),
            messages: vec![message(br#"{ "a" : 1.50 }"#, true), message(b"null", false)],
            lease_id: Some(uuid::Uuid::from_u128(4)),
            partitions_claimed: 1,
        };
        let bytes = render(&popped, "__QUEUE_MODE__");
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.contains(r#""data":{ "a" : 1.50 }"#), "{text}");
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(value["partitionsClaimed"], 1);
        assert_eq!(value["leaseId"], "00000000-0000-0000-0000-000000000004");
        let first = &value["messages"][0];
        assert_eq!(first["transactionId"], "t\"1");
        assert_eq!(first["createdAt"], "2026-01-01T00:00:00.123456Z");
        assert_eq!(first["traceId"], "00000000-0000-0000-0000-000000000002");
        assert_eq!(first["partitionId"], "00000000-0000-0000-0000-000000000003");
        assert_eq!(first["consumerGroup"], "__QUEUE_MODE__");
        assert!(value["messages"][1]["data"].is_null());
        assert!(value["messages"][1]["traceId"].is_null());
    }
}
