//! `POST /api/v1/transaction` (wire-api.md §2.6): push and ack operations
//! applied in order in one PostgreSQL transaction.
//!
//! Body `{"operations": [op, ...], "requiredLeases": [...]}` (`requiredLeases`
//! is accepted and ignored, like the reference). Ops:
//! `{"type": "push", "items": [{queue, partition?, payload?, transactionId?, traceId?}]}`
//! (payload defaults to `{}`) and
//! `{"type": "ack", transactionId, partitionId, status?, consumerGroup?, leaseId?, error?}`.
//! The shape is validated before any I/O (400 naming the operation). If an
//! operation fails (a duplicate transaction id, a missing message, a wrong
//! lease, an unknown status) everything is rolled back and the answer is 400
//! `{"transactionId", "success": false, "error": "...", "results": []}`.
//! Success is 200 `{"transactionId", "success": true, "results": [...]}` with
//! one result per pushed item and per ack.

use std::collections::BTreeMap;

use bytes::Bytes;
use hyper::StatusCode;
use queen_engine::{AckItem, AckStatus, Engine, EngineError, TxnOp, TxnResult, QUEUE_MODE_GROUP};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::context::Request;
use crate::error::HttpError;
use crate::response::{self, Response};

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow, default)]
    operations: Option<&'a RawValue>,
}

pub(crate) async fn post(
    engine: &Engine,
    req: Request,
    who: &Caller,
) -> Result<Response, HttpError> {
    let bytes = crate::body::of(req).await?;
    let mut ops = parse(&bytes)?;
    for op in &mut ops {
        if let TxnOp::Push(items) = op {
            who.stamp(items);
        }
    }
    let id = uuid::Uuid::now_v7().to_string();
    match engine.transaction(&who.tenant, ops).await {
        Ok(results) => Ok(response::json(
            StatusCode::OK,
            &json!({"transactionId": id, "success": true, "results": render(&results)}),
        )),
        Err(EngineError::TransactionFailed { message, .. }) => Err(HttpError::TransactionFailed {
            transaction_id: id,
            message,
        }),
        Err(other) => Err(other.into()),
    }
}

pub(crate) fn parse(bytes: &Bytes) -> Result<Vec<TxnOp>, HttpError> {
    let body: Body<'_> = crate::body::json(bytes)?;
    let required = || HttpError::Validation("operations array required".to_owned());
    let raw_ops: Vec<&RawValue> = body
        .operations
        .ok_or_else(required)
        .and_then(|raw| serde_json::from_str(raw.get()).map_err(|_| required()))?;
    if raw_ops.is_empty() {
        return Err(HttpError::Validation(
            "operations array cannot be empty".to_owned(),
        ));
    }
    raw_ops
        .iter()
        .enumerate()
        .map(|(index, raw)| parse_op(bytes, index, raw))
        .collect()
}

fn parse_op(body: &Bytes, index: usize, raw: &RawValue) -> Result<TxnOp, HttpError> {
    let invalid = |rule: &str| HttpError::Validation(format!("operations[{index}]{rule}"));
    // The operation's fields, unparsed: a push's payloads are read once, by
    // parse_item, not first into a Value.
    let fields: BTreeMap<String, &RawValue> =
        serde_json::from_str(raw.get()).map_err(|_| invalid(" must be an object"))?;
    let kind = fields
        .get("type")
        .and_then(|kind| serde_json::from_str::<String>(kind.get()).ok());
    match kind.as_deref() {
        Some("push") => {
            #[derive(Deserialize)]
            struct PushOp<'a> {
                #[serde(borrow, default)]
                items: Option<Vec<&'a RawValue>>,
            }
            let push: PushOp<'_> =
                serde_json::from_str(raw.get()).map_err(|_| invalid(".items must be an array"))?;
            let items = push
                .items
                .filter(|items| !items.is_empty())
                .ok_or_else(|| invalid(".items must be a non-empty array"))?;
            let list = format!("operations[{index}].items");
            let items = items
                .iter()
                .enumerate()
                .map(|(i, raw)| crate::handlers::push::parse_item(body, &list, i, raw, b"{}"))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(TxnOp::Push(items))
        }
        Some("ack") => {
            let op: Value =
                serde_json::from_str(raw.get()).map_err(|_| invalid(" must be an object"))?;
            let text = |field: &str| {
                op.get(field)
                    .and_then(Value::as_str)
                    .filter(|v| !v.is_empty())
            };
            let transaction_id =
                text("transactionId").ok_or_else(|| invalid(".transactionId is required"))?;
            let partition_id = text("partitionId")
                .ok_or_else(|| invalid(".partitionId is required"))?
                .parse::<uuid::Uuid>()
                .map_err(|_| invalid(".partitionId must be a UUID"))?;
            let lease_id = text("leaseId")
                .map(str::parse::<uuid::Uuid>)
                .transpose()
                .map_err(|_| invalid(".leaseId must be a UUID"))?;
            Ok(TxnOp::Ack {
                group: text("consumerGroup").unwrap_or(QUEUE_MODE_GROUP).to_owned(),
                item: AckItem {
                    transaction_id: transaction_id.to_owned(),
                    partition_id,
                    status: AckStatus::parse(text("status")),
                    error: text("error").map(str::to_owned),
                    lease_id,
                },
            })
        }
        Some(other) => Err(invalid(&format!(".type {other:?} is not push or ack"))),
        None => Err(invalid(".type is required")),
    }
}

fn render(results: &[TxnResult]) -> Vec<Value> {
    let mut out = Vec::new();
    for result in results {
        match result {
            TxnResult::Push(outcomes) => {
                for outcome in outcomes {
                    out.push(json!({
                        "type": "push",
                        "success": true,
                        "transactionId": outcome.transaction_id,
                        "messageId": outcome.message_id.map(|id| id.to_string()),
                        "partitionId": outcome.partition_id.to_string(),
                        "queueName": &*outcome.queue,
                    }));
                }
            }
            TxnResult::Ack(outcome) => out.push(json!({
                "type": "ack",
                "success": outcome.success,
                "error": outcome.error,
                "dlq": outcome.dlq,
            })),
        }
    }
    for (index, value) in out.iter_mut().enumerate() {
        value["index"] = index.into();
    }
    out
}
