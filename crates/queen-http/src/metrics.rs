//! The HTTP layer's own series: requests by route, method and status, and
//! their latency by route and method. Labels come from the route table (its
//! patterns, not the paths clients send), so the families are bounded by
//! the table's size times the statuses the broker answers.

use hyper::Method;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The route label of a request no route matched.
pub(crate) const UNMATCHED: &str = "unmatched";
/// The route label of the dashboard's files and the built-in status page.
pub(crate) const STATIC: &str = "static";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: &'static str,
    method: &'static str,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: &'static str,
    method: &'static str,
}

type HistogramFamily = Family<RouteLabels, Histogram, fn() -> Histogram>;

/// Requests and their latency.
#[derive(Debug, Clone)]
pub(crate) struct HttpMetrics {
    requests: Family<RequestLabels, Counter>,
    duration: HistogramFamily,
    total: Counter,
}

fn latency_histogram() -> Histogram {
    // 100 µs to ~52 s: a pop may long-poll for its whole timeout.
    Histogram::new(exponential_buckets(0.000_1, 2.0, 20))
}

/// The method as a label (anything the table does not serve is `other`).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::PUT => "PUT",
        Method::OPTIONS => "OPTIONS",
        Method::HEAD => "HEAD",
        _ => "other",
    }
}

impl Default for HttpMetrics {
    fn default() -> HttpMetrics {
        HttpMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
            total: Counter::default(),
        }
    }
}

impl HttpMetrics {
    /// Count one answered request.
    pub(crate) fn observe(
        &self,
        route: &'static str,
        method: &Method,
        status: u16,
        elapsed: std::time::Duration,
    ) {
        let method = method_label(method);
        self.total.inc();
        self.requests
            .get_or_create(&RequestLabels {
                route,
                method,
                status,
            })
            .inc();
        self.duration
            .get_or_create(&RouteLabels { route, method })
            .observe(elapsed.as_secs_f64());
    }

    /// Requests answered so far, all routes.
    pub(crate) fn total(&self) -> u64 {
        self.total.get()
    }

    /// Register both families in `registry`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "http_requests",
            "HTTP requests answered, by route pattern, method and status",
            self.requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "Seconds from routing a request to its response, by route pattern and method",
            self.duration.clone(),
        );
    }
}
