//! Database migration (the dashboard's Migration page; admin): copy Queen's
//! schemas and data to another PostgreSQL (`queen_engine::Migration`).
//!
//! - `POST /api/v1/migration/test-connection` `{host, port, database, user,
//!   password, ssl}`: 200 `{success, message, version, empty,
//!   hasQueenSchema, userTables, error}`; a target that cannot be reached
//!   is `success: false` with the reason, not an error status.
//! - `POST /api/v1/migration/start` (the same fields and `excludeTableData`,
//!   names from `queen_engine::MIGRATION_SKIPPABLE`): 202 `{status:
//!   "started", message}`; 409 while a copy runs here, or another
//!   broker's copy to the same target holds the target's migration lock.
//! - `GET /api/v1/migration/status`: `{status, currentStep, elapsedSeconds,
//!   error, dumpOutput, restoreOutput}`, `status` one of `idle`, `dumping`,
//!   `restoring`, `complete`, `error`.
//! - `POST /api/v1/migration/validate` (the target's fields): `{success,
//!   allMatch, tables: [{table, sourceCount, targetCount, match}], error}`;
//!   a count is null where the table is missing.
//! - `POST /api/v1/migration/reset`: back to idle, `{status: "idle",
//!   message}`; 409 while a copy runs.
//!
//! A missing `host`, `database` or `user`, a port that is not one, a
//! field of the wrong type or an unknown `excludeTableData` entry is a 400
//! naming it, before anything runs.

use hyper::StatusCode;
use queen_engine::{Engine, MigrationTarget};
use serde_json::{json, Value};

use crate::context::Request;
use crate::error::HttpError;
use crate::response::{self, Response};

/// The port when the request gives none.
const DEFAULT_PORT: u16 = 5432;

/// A required, non-empty string field.
fn required(body: &Value, field: &str) -> Result<String, HttpError> {
    match crate::wire::optional_string(body, field)? {
        Some(text) if !text.trim().is_empty() => Ok(text.to_owned()),
        _ => Err(HttpError::Validation(format!("{field} is required"))),
    }
}

/// The target a body names.
fn target(body: &Value) -> Result<MigrationTarget, HttpError> {
    let host = required(body, "host")?;
    let database = required(body, "database")?;
    let user = required(body, "user")?;
    let bad_port = || HttpError::Validation("port must be a number from 1 to 65535".to_owned());
    let port = match body.get("port") {
        None | Some(Value::Null) => DEFAULT_PORT,
        Some(Value::String(text)) if text.trim().is_empty() => DEFAULT_PORT,
        Some(Value::String(text)) => text.trim().parse::<u16>().map_err(|_| bad_port())?,
        Some(Value::Number(number)) => number
            .as_u64()
            .and_then(|port| u16::try_from(port).ok())
            .ok_or_else(bad_port)?,
        Some(_) => return Err(bad_port()),
    };
    if port == 0 {
        return Err(bad_port());
    }
    let password = crate::wire::optional_string(body, "password")?
        .unwrap_or_default()
        .to_owned();
    let ssl = match body.get("ssl") {
        None | Some(Value::Null) => false,
        Some(value) => crate::wire::boolean("ssl", value)?,
    };
    Ok(MigrationTarget {
        host,
        port,
        database,
        user,
        password,
        ssl,
    })
}

/// `excludeTableData`: absent, or an array of names.
fn excluded(body: &Value) -> Result<Vec<String>, HttpError> {
    let refuse =
        || HttpError::Validation("excludeTableData must be an array of table names".to_owned());
    match body.get("excludeTableData") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(names)) => names
            .iter()
            .map(|name| name.as_str().map(str::to_owned).ok_or_else(refuse))
            .collect(),
        Some(_) => Err(refuse()),
    }
}

pub(crate) async fn test_connection(engine: &Engine, req: Request) -> Result<Response, HttpError> {
    let body = crate::body::value(req).await?;
    if !body.is_object() {
        return Err(HttpError::Validation(
            "request body must be a JSON object".to_owned(),
        ));
    }
    let target = target(&body)?;
    let test = engine.migration().test_connection(&target).await;
    Ok(response::json(
        StatusCode::OK,
        &json!({
            "success": test.ok,
            "message": test.message,
            "version": test.version,
            "empty": test.ok && test.user_tables == 0,
            "hasQueenSchema": test.has_queen_schema,
            "userTables": test.user_tables,
            "error": test.error,
        }),
    ))
}

pub(crate) async fn start(engine: &Engine, req: Request) -> Result<Response, HttpError> {
    let body = crate::body::value(req).await?;
    if !body.is_object() {
        return Err(HttpError::Validation(
            "request body must be a JSON object".to_owned(),
        ));
    }
    let target = target(&body)?;
    let excluded = excluded(&body)?;
    engine.migration().start(target, &excluded).await?;
    Ok(response::json(
        StatusCode::ACCEPTED,
        &json!({
            "status": "started",
            "message": "Migration started. Poll /api/v1/migration/status for progress.",
        }),
    ))
}

pub(crate) fn status(engine: &Engine) -> Response {
    let status = engine.migration().status();
    let elapsed = (status.elapsed.as_secs_f64() * 10.0).round() / 10.0;
    response::json(
        StatusCode::OK,
        &json!({
            "status": status.phase.as_str(),
            "currentStep": status.step,
            "elapsedSeconds": elapsed,
            "error": status.error,
            "dumpOutput": status.dump_output,
            "restoreOutput": status.restore_output,
        }),
    )
}

pub(crate) async fn validate(engine: &Engine, req: Request) -> Result<Response, HttpError> {
    let body = crate::body::value(req).await?;
    if !body.is_object() {
        return Err(HttpError::Validation(
            "request body must be a JSON object".to_owned(),
        ));
    }
    let target = target(&body)?;
    let validation = engine.migration().validate(&target).await?;
    let tables: Vec<Value> = validation
        .tables
        .iter()
        .map(|count| {
            json!({
                "table": count.table,
                "sourceCount": count.source,
                "targetCount": count.target,
                "match": count.matches(),
            })
        })
        .collect();
    Ok(response::json(
        StatusCode::OK,
        &json!({
            "success": validation.error.is_none(),
            "allMatch": validation.all_match(),
            "tables": tables,
            "error": validation.error,
        }),
    ))
}

pub(crate) fn reset(engine: &Engine) -> Result<Response, HttpError> {
    engine.migration().reset()?;
    Ok(response::json(
        StatusCode::OK,
        &json!({"status": "idle", "message": "Migration state reset"}),
    ))
}
