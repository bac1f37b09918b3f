//! `GET|POST /api/v1/system/maintenance/pop`: pop maintenance mode. While it
//! is on, every pop answers 204 at once and does no work.
//!
//! The flag lives in this broker's memory; with several brokers, set it on
//! each (persisting it cluster-wide is the admin issue's job).

use hyper::StatusCode;
use queen_engine::Engine;
use serde::Deserialize;

use crate::error::HttpError;
use crate::response::{self, Response};
use crate::server::Request;

#[derive(Deserialize)]
struct Body {
    enabled: Option<serde_json::Value>,
}

pub(crate) fn get_pop(engine: &Engine) -> Response {
    response::json(
        StatusCode::OK,
        &serde_json::json!({ "popMaintenanceMode": engine.pop_maintenance() }),
    )
}

pub(crate) async fn post_pop(engine: &Engine, req: Request) -> Result<Response, HttpError> {
    let (parts, body) = req.into_parts();
    let bytes = crate::body::read(&parts, body).await?;
    let body: Body = crate::body::json(&bytes)?;
    let Some(serde_json::Value::Bool(enabled)) = body.enabled else {
        return Err(HttpError::Validation(
            "enabled must be a boolean".to_owned(),
        ));
    };
    engine.set_pop_maintenance(enabled);
    Ok(response::json(
        StatusCode::OK,
        &serde_json::json!({ "success": true, "popMaintenanceMode": enabled }),
    ))
}
