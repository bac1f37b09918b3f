//! `POST /api/v1/ack` and `POST /api/v1/ack/batch` (wire-api.md §2.4, §2.5).
//!
//! Both answer an array of `{index, transactionId, success, error, queueName,
//! partitionName, leaseReleased, dlq}`, one per acknowledgement, in input
//! order; an empty batch answers `[]` at once. Statuses: `completed`/`success`
//! (default), `failed`, `dlq`, `retry`; any other status answers
//! `success: false, error: null` and changes nothing. A non-empty `leaseId`
//! must be the live lease, else the item answers `Invalid or expired lease`.

use hyper::StatusCode;
use queen_engine::{AckItem, AckOutcome, AckStatus, Engine, QUEUE_MODE_GROUP};
use serde_json::{json, Value};

use crate::error::HttpError;
use crate::response::{self, Response};
use crate::server::Request;

pub(crate) async fn single(engine: &Engine, req: Request) -> Result<Response, HttpError> {
    let (parts, body) = req.into_parts();
    let bytes = crate::body::read(&parts.headers, body, crate::body::MAX_BODY_BYTES).await?;
    let body: Value = crate::body::json(&bytes)?;
    let transaction_id = body
        .get("transactionId")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| HttpError::Validation("transactionId is required".to_owned()))?;
    let partition_id = body
        .get("partitionId")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| {
            HttpError::Validation("partitionId is required to ensure message uniqueness".to_owned())
        })?;
    let group = group_of(&body);
    let item = item(&body, transaction_id, partition_id, "partitionId")?;
    answer(engine, &group, vec![(transaction_id.to_owned(), item)]).await
}

pub(crate) async fn batch(engine: &Engine, req: Request) -> Result<Response, HttpError> {
    let (parts, body) = req.into_parts();
    let bytes = crate::body::read(&parts.headers, body, crate::body::MAX_BODY_BYTES).await?;
    let body: Value = crate::body::json(&bytes)?;
    let acks = body
        .get("acknowledgments")
        .and_then(Value::as_array)
        .ok_or_else(|| HttpError::Validation("acknowledgments array is required".to_owned()))?;
    if acks.is_empty() {
        return Ok(response::json(StatusCode::OK, &json!([])));
    }
    // A top-level consumerGroup overrides any per-item one.
    let top_group = body.get("consumerGroup").and_then(Value::as_str);
    let mut items = Vec::with_capacity(acks.len());
    let mut groups = Vec::with_capacity(acks.len());
    for (idx, ack) in acks.iter().enumerate() {
        let transaction_id = ack
            .get("transactionId")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| {
                HttpError::Validation(format!(
                    "Each acknowledgment must have a valid transactionId string (acknowledgments[{idx}])"
                ))
            })?;
        let partition_id = ack
            .get("partitionId")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| {
                HttpError::Validation(format!(
                    "Each acknowledgment must have a valid partitionId string (acknowledgments[{idx}])"
                ))
            })?;
        let field = format!("acknowledgments[{idx}].partitionId");
        items.push((
            transaction_id.to_owned(),
            item(ack, transaction_id, partition_id, &field)?,
        ));
        groups.push(top_group.map_or_else(|| group_of(ack), str::to_owned));
    }
    // Acks of different groups in one batch are applied group by group.
    let mut outcomes: Vec<Option<Value>> = vec![None; items.len()];
    let mut distinct: Vec<&String> = groups.iter().collect();
    distinct.sort();
    distinct.dedup();
    for group in distinct {
        let (indices, members): (Vec<usize>, Vec<(String, Option<AckItem>)>) = items
            .iter()
            .enumerate()
            .filter(|(idx, _)| &groups[*idx] == group)
            .map(|(idx, item)| (idx, item.clone()))
            .unzip();
        let rendered = apply(engine, group, members).await?;
        for (idx, value) in indices.into_iter().zip(rendered) {
            outcomes[idx] = Some(value);
        }
    }
    let results: Vec<Value> = outcomes
        .into_iter()
        .enumerate()
        .map(|(idx, value)| {
            let mut value = value.unwrap_or(Value::Null);
            value["index"] = idx.into();
            value
        })
        .collect();
    Ok(response::json(StatusCode::OK, &Value::Array(results)))
}

fn group_of(body: &Value) -> String {
    body.get("consumerGroup")
        .and_then(Value::as_str)
        .filter(|group| !group.is_empty())
        .unwrap_or(QUEUE_MODE_GROUP)
        .to_owned()
}

/// The engine item, or `None` when the lease id cannot be a live lease (not a
/// UUID): that item answers "Invalid or expired lease" without a query.
fn item(
    body: &Value,
    transaction_id: &str,
    partition_id: &str,
    field: &str,
) -> Result<Option<AckItem>, HttpError> {
    let partition_id: uuid::Uuid = partition_id
        .parse()
        .map_err(|_| HttpError::Validation(format!("{field} must be a UUID")))?;
    let lease_id = match body.get("leaseId").and_then(Value::as_str) {
        None | Some("") => None,
        Some(text) => match text.parse::<uuid::Uuid>() {
            Ok(lease) => Some(lease),
            Err(_) => return Ok(None),
        },
    };
    let status = body.get("status").and_then(Value::as_str);
    Ok(Some(AckItem {
        transaction_id: transaction_id.to_owned(),
        partition_id,
        status: AckStatus::parse(status),
        error: body.get("error").and_then(Value::as_str).map(str::to_owned),
        lease_id,
    }))
}

async fn answer(
    engine: &Engine,
    group: &str,
    items: Vec<(String, Option<AckItem>)>,
) -> Result<Response, HttpError> {
    let rendered = apply(engine, group, items).await?;
    let results: Vec<Value> = rendered
        .into_iter()
        .enumerate()
        .map(|(idx, mut value)| {
            value["index"] = idx.into();
            value
        })
        .collect();
    Ok(response::json(StatusCode::OK, &Value::Array(results)))
}

/// Apply one group's items and render each result (without `index`).
async fn apply(
    engine: &Engine,
    group: &str,
    items: Vec<(String, Option<AckItem>)>,
) -> Result<Vec<Value>, HttpError> {
    let valid: Vec<AckItem> = items.iter().filter_map(|(_, item)| item.clone()).collect();
    let mut outcomes = engine.ack(group, valid).await?.into_iter();
    Ok(items
        .into_iter()
        .map(|(transaction_id, item)| {
            let outcome = match item {
                Some(_) => outcomes.next().unwrap_or_default(),
                None => AckOutcome {
                    error: Some("Invalid or expired lease".to_owned()),
                    ..AckOutcome::default()
                },
            };
            render(&transaction_id, &outcome)
        })
        .collect())
}

fn render(transaction_id: &str, outcome: &AckOutcome) -> Value {
    json!({
        "transactionId": transaction_id,
        "success": outcome.success,
        "error": outcome.error,
        "queueName": outcome.queue,
        "partitionName": outcome.partition,
        "leaseReleased": outcome.lease_released,
        "dlq": outcome.dlq,
    })
}
