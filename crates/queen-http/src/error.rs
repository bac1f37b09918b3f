//! The one place where errors become HTTP statuses.
//!
//! Every variant of [`HttpError`] and of `EngineError` is matched without a `_`
//! arm, so a new variant does not compile until someone decides its status.
//! Bodies are `{"error": "..."}`, the shape every Queen client reads
//! (wire-api.md §0.3). Internal errors log the whole chain and answer an opaque message.

use std::borrow::Cow;

use hyper::StatusCode;
use queen_engine::EngineError;

use crate::response::{self, Response};

/// Everything a request can fail with at the HTTP layer.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// No route matches the method and path.
    #[error("route not found: {method} {path}")]
    RouteNotFound { method: String, path: String },

    /// The path is a route's, but not for this method; `allow` lists the
    /// methods it takes (the `Allow` header).
    #[error("method {method} not allowed on {path}")]
    MethodNotAllowed {
        method: String,
        path: String,
        allow: String,
    },

    /// The request body was larger than the limit.
    #[error("request body exceeds {limit} bytes")]
    BodyTooLarge { limit: usize },

    /// The request body could not be read from the connection.
    #[error("could not read request body")]
    BodyRead,

    /// The request body did not arrive in time.
    #[error("request body not received within {seconds} s")]
    BodyTimeout { seconds: f64 },

    /// The broker is at a limit that frees itself (connections, body bytes
    /// in flight): retry later.
    #[error("server busy: {what}")]
    Busy { what: &'static str },

    /// The request body is empty where one is required.
    #[error("Empty request body")]
    EmptyBody,

    /// The request body is not valid JSON.
    #[error("Invalid JSON: {0}")]
    InvalidJson(String),

    /// A field is missing or has the wrong type or value.
    #[error("{0}")]
    Validation(String),

    /// What the request names does not exist.
    #[error("{0}")]
    NotFound(String),

    /// The request conflicts with the current state of what it names.
    #[error("{0}")]
    Conflict(String),

    /// The request asks for something it may not have.
    #[error("{0}")]
    Forbidden(String),

    /// The request carries no valid token where one is required.
    #[error("{0}")]
    Unauthorized(String),

    /// A token names a JWKS key the broker has not cached and cannot fetch
    /// now (wire-api.md §0.5: 500; the fetch failure is logged in `jwks.rs`).
    #[error("JWKS fetch failed")]
    JwksUnavailable,

    /// A streaming query is registered with another `config_hash` and the
    /// request did not ask for `reset`: 409 with the contract's body
    /// (`success`, `query_id`, `name`, `error`), which the streams clients
    /// turn into their hash-mismatch error.
    #[error("{error}")]
    QueryMismatch {
        query_id: String,
        name: String,
        error: String,
    },

    /// A streams cycle was refused and wrote nothing: the contract answers
    /// 200 with `success: false` (`query_id`, `partition_id`, `error`).
    #[error("{reason}")]
    CycleRefused {
        query_id: String,
        partition_id: String,
        reason: String,
    },

    /// A transaction was refused and applied nothing: 400 with the
    /// contract's body (`transactionId`, `success: false`, `error`, empty
    /// `results`).
    #[error("{message}")]
    TransactionFailed {
        transaction_id: String,
        message: String,
    },

    /// `/health` found the database unreachable: 503 with the health body
    /// (`status: "unhealthy"`), which orchestrators read.
    #[error("database disconnected")]
    Unhealthy(serde_json::Value),

    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Seconds a client should wait before retrying a transient failure.
pub(crate) const RETRY_AFTER_SECONDS: &str = "1";

impl HttpError {
    /// The response for this error.
    pub(crate) fn into_response(self) -> Response {
        match &self {
            HttpError::Engine(engine) => {
                let (status, message) = engine_reply(engine);
                if status.is_server_error() {
                    tracing::error!(
                        error = %queen_engine::error_chain(engine),
                        "request failed in the engine"
                    );
                }
                let mut res = response::error(status, &message);
                if status == StatusCode::SERVICE_UNAVAILABLE
                    || status == StatusCode::TOO_MANY_REQUESTS
                {
                    res.headers_mut().insert(
                        hyper::header::RETRY_AFTER,
                        hyper::header::HeaderValue::from_static(RETRY_AFTER_SECONDS),
                    );
                }
                res
            }
            HttpError::Busy { .. } => {
                let mut res = response::error(self.status(), &self.to_string());
                res.headers_mut().insert(
                    hyper::header::RETRY_AFTER,
                    hyper::header::HeaderValue::from_static(RETRY_AFTER_SECONDS),
                );
                res
            }
            HttpError::QueryMismatch {
                query_id,
                name,
                error,
            } => response::json(
                self.status(),
                &serde_json::json!({"success": false, "query_id": query_id, "name": name,
                                    "error": error}),
            ),
            HttpError::CycleRefused {
                query_id,
                partition_id,
                reason,
            } => response::json(
                self.status(),
                &serde_json::json!({"success": false, "query_id": query_id,
                                    "partition_id": partition_id, "error": reason}),
            ),
            HttpError::TransactionFailed {
                transaction_id,
                message,
            } => response::json(
                self.status(),
                &serde_json::json!({"transactionId": transaction_id, "success": false,
                                    "error": message, "results": []}),
            ),
            HttpError::Unhealthy(body) => response::json(self.status(), body),
            HttpError::MethodNotAllowed { allow, .. } => {
                let mut res = response::error(self.status(), &self.to_string());
                if let Ok(allow) = hyper::header::HeaderValue::from_str(allow) {
                    res.headers_mut().insert(hyper::header::ALLOW, allow);
                }
                res
            }
            HttpError::RouteNotFound { .. }
            | HttpError::BodyTooLarge { .. }
            | HttpError::BodyTimeout { .. }
            | HttpError::BodyRead
            | HttpError::EmptyBody
            | HttpError::InvalidJson(_)
            | HttpError::Validation(_)
            | HttpError::NotFound(_)
            | HttpError::Conflict(_)
            | HttpError::Forbidden(_)
            | HttpError::Unauthorized(_)
            | HttpError::JwksUnavailable => response::error(self.status(), &self.to_string()),
        }
    }

    /// The status code of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            HttpError::RouteNotFound { .. } | HttpError::NotFound(_) => StatusCode::NOT_FOUND,
            HttpError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            HttpError::Conflict(_) | HttpError::QueryMismatch { .. } => StatusCode::CONFLICT,
            HttpError::CycleRefused { .. } => StatusCode::OK,
            HttpError::Forbidden(_) => StatusCode::FORBIDDEN,
            HttpError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            HttpError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            HttpError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            HttpError::Busy { .. } | HttpError::Unhealthy(_) => StatusCode::SERVICE_UNAVAILABLE,
            HttpError::TransactionFailed { .. } => StatusCode::BAD_REQUEST,
            HttpError::JwksUnavailable => StatusCode::INTERNAL_SERVER_ERROR,
            HttpError::BodyRead
            | HttpError::EmptyBody
            | HttpError::InvalidJson(_)
            | HttpError::Validation(_) => StatusCode::BAD_REQUEST,
            HttpError::Engine(engine) => engine_reply(engine).0,
        }
    }
}

/// Status and client-facing message for engine failures.
///
/// Transient trouble (database unreachable, shutting down) is 503 with
/// `Retry-After` (a full bounded queue is 429 with it): clients retry it, and every write is idempotent by
/// transaction id. Storage internals are never shown to the client; they are
/// logged with their whole chain. Operator-fixable faults (a missing
/// encryption key) say what to fix.
fn engine_reply(error: &EngineError) -> (StatusCode, Cow<'static, str>) {
    const UNAVAILABLE: (StatusCode, Cow<'static, str>) = (
        StatusCode::SERVICE_UNAVAILABLE,
        Cow::Borrowed("database unavailable"),
    );
    const INTERNAL: (StatusCode, Cow<'static, str>) = (
        StatusCode::INTERNAL_SERVER_ERROR,
        Cow::Borrowed("internal error"),
    );
    match error {
        EngineError::Shared(inner) => engine_reply(inner),
        EngineError::Sql(_) if error.is_transient() => UNAVAILABLE,
        EngineError::Sql(_) | EngineError::Frame(_) | EngineError::Internal(_) => INTERNAL,
        EngineError::ShuttingDown
        | EngineError::PushUnresolved
        | EngineError::SpoolFull
        | EngineError::NoSpool => (
            StatusCode::SERVICE_UNAVAILABLE,
            Cow::Owned(error.to_string()),
        ),
        EngineError::MigrationInProgress | EngineError::MigrationTargetBusy => {
            (StatusCode::CONFLICT, Cow::Owned(error.to_string()))
        }
        EngineError::MigrationUnavailable => (
            StatusCode::SERVICE_UNAVAILABLE,
            Cow::Owned(error.to_string()),
        ),
        EngineError::InvalidConfiguration { .. }
        | EngineError::MigrationRefused(_)
        | EngineError::BatchTooLarge
        | EngineError::TransactionFailed { .. } => {
            (StatusCode::BAD_REQUEST, Cow::Owned(error.to_string()))
        }
        // Backpressure: consumers make room, the client retries later.
        // A refused cycle is an answer, not a failure (the handler adds the
        // cycle's ids: HttpError::CycleRefused).
        EngineError::CycleRefused(reason) => (StatusCode::OK, Cow::Owned(reason.clone())),
        EngineError::QueueFull { .. } => {
            (StatusCode::TOO_MANY_REQUESTS, Cow::Owned(error.to_string()))
        }
        EngineError::SpoolWrite(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Cow::Owned(error.to_string()),
        ),
        // Another broker, one with the key, can serve it: clients retry
        // 503 (and a load balancer may send the retry elsewhere).
        EngineError::EncryptionKeyMissing { .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            Cow::Owned(error.to_string()),
        ),
        EngineError::EncryptionKeyRequired { .. } => {
            (StatusCode::BAD_REQUEST, Cow::Owned(error.to_string()))
        }
        EngineError::InvalidKey | EngineError::Seal | EngineError::Unseal => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Cow::Owned(error.to_string()),
        ),
    }
}
