//! What a handler is given: the request type and the shared state of the
//! server ([`App`]). Its own module, so handlers depend on it and not on the
//! accept loop (`server.rs`), which depends on them through the route table.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use queen_engine::Engine;

/// The request type handlers receive.
pub(crate) type Request = hyper::Request<Incoming>;

/// Wire-visible defaults (wire-api.md §0.7, life-of-a-pop.md "request defaults").
#[derive(Debug, Clone)]
pub struct WireDefaults {
    /// Pop `batch` when absent (`DEFAULT_BATCH_SIZE`).
    pub pop_batch: usize,
    /// Pop `timeout` when absent (`DEFAULT_TIMEOUT`).
    pub pop_timeout: Duration,
    /// Subscription mode of named groups when absent (`DEFAULT_SUBSCRIPTION_MODE`).
    pub subscription_mode: String,
}

impl Default for WireDefaults {
    fn default() -> WireDefaults {
        WireDefaults {
            pop_batch: 200,
            pop_timeout: Duration::from_millis(30_000),
            subscription_mode: String::new(),
        }
    }
}

/// What every handler can reach.
#[derive(Debug)]
pub(crate) struct App {
    pub(crate) engine: Arc<Engine>,
    pub(crate) defaults: WireDefaults,
    /// Requests by route and status, for `/metrics`.
    pub(crate) http_metrics: crate::metrics::HttpMetrics,
    /// The dashboard build, if any.
    pub(crate) webapp: Option<crate::Webapp>,
    /// JWT verification, when auth is on.
    pub(crate) auth: Option<Arc<crate::Auth>>,
    /// `ServeOptions::aggregate_queue_metrics`.
    pub(crate) aggregate_queue_metrics: bool,
}
