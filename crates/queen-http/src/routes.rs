//! The route table: every endpoint of the broker in one `match`.
//!
//! Path segments are percent-decoded before matching. Static segments come
//! before parameters in the match, so `/consumer-groups/lagging` wins over
//! `/consumer-groups/:group`.

use hyper::{Method, StatusCode};

use crate::error::HttpError;
use crate::handlers;
use crate::query;
use crate::response::{self, Response};
use crate::server::{App, Request};

/// Dispatch one request to its handler.
pub(crate) async fn route(app: &App, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let decoded = query::segments(&path);
    let segments: Vec<&str> = decoded.iter().map(AsRef::as_ref).collect();
    let engine = &*app.engine;
    // Every queue, partition and group name in the path obeys the one name
    // rule before any handler runs.
    if let Err(error) = crate::wire::path_names(&segments) {
        return error.into_response();
    }
    // Handlers that read the body take the request by value.
    let res = match (&method, segments.as_slice()) {
        (&Method::GET, ["health"]) => Ok(handlers::health::get(engine).await),
        (&Method::POST, ["api", "v1", "configure"]) => handlers::configure::post(engine, req).await,
        (&Method::POST, ["api", "v1", "push"]) => handlers::push::post(engine, req).await,
        (&Method::POST, ["api", "v1", "ack"]) => handlers::ack::single(engine, req).await,
        (&Method::POST, ["api", "v1", "ack", "batch"]) => handlers::ack::batch(engine, req).await,
        (&Method::POST, ["api", "v1", "lease", lease, "extend"]) => {
            handlers::lease::extend(engine, req, lease).await
        }
        (&Method::POST, ["api", "v1", "transaction"]) => {
            handlers::transaction::post(engine, req).await
        }
        (&Method::POST, ["api", "v1", "traces"]) => handlers::traces::post(engine, req).await,
        (&Method::GET, ["api", "v1", "dlq"]) => handlers::dlq::list(engine, &req).await,
        (&Method::GET, ["api", "v1", "pop"]) => handlers::pop::discovery(app, &req).await,
        (&Method::GET, ["api", "v1", "pop", "queue", queue]) => {
            handlers::pop::queue(app, &req, queue).await
        }
        (&Method::GET, ["api", "v1", "pop", "queue", queue, "partition", partition]) => {
            handlers::pop::partition(app, &req, queue, partition).await
        }
        (&Method::DELETE, ["api", "v1", "resources", "queues", queue]) => {
            handlers::queues::delete(engine, queue).await
        }
        (&Method::GET, ["api", "v1", "consumer-groups"]) => {
            handlers::consumer_groups::list(engine).await
        }
        (&Method::GET, ["api", "v1", "consumer-groups", "lagging"]) => {
            handlers::consumer_groups::lagging(engine, &req).await
        }
        (&Method::GET, ["api", "v1", "consumer-groups", group]) => {
            handlers::consumer_groups::get(engine, group).await
        }
        (&Method::DELETE, ["api", "v1", "consumer-groups", group]) => {
            handlers::consumer_groups::delete(engine, &req, group, None).await
        }
        (&Method::DELETE, ["api", "v1", "consumer-groups", group, "queues", queue]) => {
            handlers::consumer_groups::delete(engine, &req, group, Some(queue)).await
        }
        (&Method::POST, ["api", "v1", "consumer-groups", group, "subscription"]) => {
            handlers::consumer_groups::subscription(engine, req, group).await
        }
        (&Method::POST, ["api", "v1", "consumer-groups", group, "queues", queue, "seek"]) => {
            handlers::consumer_groups::seek(engine, req, group, queue, None).await
        }
        (
            &Method::POST,
            ["api", "v1", "consumer-groups", group, "queues", queue, "partitions", partition, "seek"],
        ) => handlers::consumer_groups::seek(engine, req, group, queue, Some(partition)).await,
        (&Method::GET, ["api", "v1", "system", "maintenance", "pop"]) => {
            Ok(handlers::maintenance::get_pop(engine))
        }
        (&Method::POST, ["api", "v1", "system", "maintenance", "pop"]) => {
            handlers::maintenance::post_pop(engine, req).await
        }
        (&Method::OPTIONS, _) => Ok(response::empty(StatusCode::NO_CONTENT)),
        _ => Err(HttpError::RouteNotFound {
            method: method.to_string(),
            path: path.clone(),
        }),
    };
    res.unwrap_or_else(HttpError::into_response)
}
