//! The route table: every endpoint of the broker in one `match`.
//!
//! Static segments are matched before parameters, so `/consumer-groups/lagging`
//! will win over `/consumer-groups/:group` when those routes land.

use hyper::{Method, StatusCode};
use queen_engine::Engine;

use crate::error::HttpError;
use crate::handlers;
use crate::response::{self, Response};
use crate::server::Request;

/// Dispatch one request to its handler.
pub(crate) async fn route(engine: &Engine, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // Handlers that read the body take the request by value.
    let res = match (&method, segments.as_slice()) {
        (&Method::GET, ["health"]) => Ok(handlers::health::get(engine).await),
        (&Method::POST, ["api", "v1", "configure"]) => handlers::configure::post(engine, req).await,
        (&Method::POST, ["api", "v1", "push"]) => handlers::push::post(engine, req).await,
        (&Method::OPTIONS, _) => Ok(response::empty(StatusCode::NO_CONTENT)),
        _ => Err(HttpError::RouteNotFound {
            method: method.to_string(),
            path: path.clone(),
        }),
    };
    res.unwrap_or_else(HttpError::into_response)
}
