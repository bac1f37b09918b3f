//! The route table: every endpoint of the broker in one table, each with its
//! metadata (the access level the contract gives it, whether it is
//! tenant-scoped), and one dispatch `match` over the endpoints.
//!
//! A route cannot be added without its metadata (the fields of [`Route`] are
//! all required) nor without its handler (the dispatch `match` has no `_`
//! arm). Path segments are percent-decoded before matching; a pattern
//! segment starting with `:` is a parameter. The first route in table order
//! whose method and pattern match wins, so static segments are listed before
//! parameters (`/consumer-groups/lagging` before `/consumer-groups/:group`).
//! With auth on, `access` is enforced before the name rule and the handler
//! (`auth.rs`). Every handler acts for the caller's tenant; `tenant_scoped`
//! says which routes read or write tenant data, and the tenant isolation
//! test (`tests/it/tenants.rs`) calls every one of them as another tenant.

use hyper::{Method, StatusCode};
use queen_engine::AdminView;

use crate::auth::Caller;
use crate::context::{App, Request};
use crate::error::HttpError;
use crate::handlers;
use crate::metrics::{STATIC, UNMATCHED};
use crate::query;
use crate::response::{self, Response};

/// Who may call a route (wire-api.md §1: PUB, RO, RW, ADM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    /// No token needed.
    Public,
    /// `read-only` and above.
    ReadOnly,
    /// `read-write` and above.
    ReadWrite,
    /// `admin` only.
    Admin,
}

/// Every endpoint a route can lead to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Health,
    Configure,
    Push,
    Ack,
    AckBatch,
    LeaseExtend,
    Transaction,
    Traces,
    Dlq,
    DeleteMessage,
    RetryMessage,
    RequeueDlq,
    PopDiscovery,
    PopQueue,
    PopPartition,
    DeleteQueue,
    ListGroups,
    LaggingGroups,
    GetGroup,
    DeleteGroup,
    DeleteGroupOnQueue,
    GroupSubscription,
    SeekQueue,
    SeekPartition,
    StreamQueries,
    StreamState,
    StreamCycle,
    GetMaintenance,
    SetMaintenance,
    Buffers,
    GetPopMaintenance,
    SetPopMaintenance,
    SharedState,
    MigrationTest,
    MigrationStart,
    MigrationStatus,
    MigrationValidate,
    MigrationReset,
    Metrics,
    MetricsPrometheus,
    Overview,
    ListQueues,
    GetQueue,
    Namespaces,
    Tasks,
    Status,
    StatusQueues,
    StatusQueue,
    StatusAnalytics,
    Analytics(handlers::admin::Analytics),
    TraceNames,
    TracesByName,
    MessageTraces,
    RefreshStats,
    ListMessages,
    GetMessage,
    MessageToDlq,
    QueueMessages,
}

/// One row of the route table.
#[derive(Debug)]
pub(crate) struct Route {
    pub(crate) method: Method,
    /// The path; a segment `:name` is a parameter.
    pub(crate) pattern: &'static str,
    pub(crate) endpoint: Endpoint,
    /// Who may call it (enforced with `JWT_ENABLED`, `auth.rs`).
    pub(crate) access: Access,
    /// Whether what it reads or writes belongs to one tenant (the tenant
    /// isolation test calls each such route as another tenant).
    pub(crate) tenant_scoped: bool,
}

impl Route {
    /// The pattern's segments.
    pub(crate) fn segments(&self) -> impl Iterator<Item = &'static str> {
        self.pattern
            .split('/')
            .filter(|segment| !segment.is_empty())
    }

    /// The pattern's parameters (`:queue`, ...), in order.
    fn parameters(&self) -> impl Iterator<Item = &'static str> {
        self.segments().filter(|segment| segment.starts_with(':'))
    }

    /// Check every name among `params` (this route's parameters, in order)
    /// against the one name rule, before any handler runs.
    pub(crate) fn check_names(&self, params: &[&str]) -> Result<(), HttpError> {
        for (parameter, value) in self.parameters().zip(params) {
            if let Some(field) = name_field(parameter) {
                crate::wire::name(field, value)?;
            }
        }
        Ok(())
    }
}

impl Route {
    /// Check every parameter (names and the ids handlers parse) against the
    /// one text rule, so a NUL never reaches PostgreSQL and is refused in
    /// the same words wherever it comes (path, query or body).
    pub(crate) fn check_text(&self, params: &[&str]) -> Result<(), HttpError> {
        for (parameter, value) in self.parameters().zip(params) {
            let field = name_field(parameter).unwrap_or_else(|| id_field(parameter));
            crate::wire::text(field, value)?;
        }
        Ok(())
    }

    /// Whether `HEAD` may run this route: a `GET` without side effects
    /// (a pop leases or completes messages, so it is not one).
    fn head_safe(&self) -> bool {
        self.method == Method::GET
            && !matches!(
                self.endpoint,
                Endpoint::PopDiscovery | Endpoint::PopQueue | Endpoint::PopPartition
            )
    }

    /// Whether this route's pattern matches `segments`, whatever the method.
    fn matches(&self, segments: &[&str]) -> bool {
        let mut pattern = self.segments();
        segments.iter().all(|segment| match pattern.next() {
            Some(name) => name.starts_with(':') || name == *segment,
            None => false,
        }) && pattern.next().is_none()
    }
}

/// The wire field an id parameter holds, for an error.
fn id_field(parameter: &str) -> &str {
    match parameter {
        ":lease" => "leaseId",
        ":partition_id" => "partitionId",
        ":transaction_id" => "transactionId",
        other => other.trim_start_matches(':'),
    }
}

/// The methods some route takes at `segments` (`HEAD` with a safe `GET`),
/// in a fixed order, for `Allow`; empty when no route has this path.
fn allowed(segments: &[&str]) -> String {
    const ORDER: [Method; 6] = [
        Method::GET,
        Method::HEAD,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
    ];
    let routes: Vec<&Route> = ROUTES
        .iter()
        .filter(|route| route.matches(segments))
        .collect();
    ORDER
        .iter()
        .filter(|method| {
            routes.iter().any(|route| {
                route.method == **method || (**method == Method::HEAD && route.head_safe())
            })
        })
        .map(Method::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `HEAD` answer: the `GET` answer's status and headers (its length
/// included), without the body.
fn headless(res: Response) -> Response {
    use hyper::body::Body as _;
    let (mut parts, body) = res.into_parts();
    let bodiless = parts.status == StatusCode::NO_CONTENT || parts.status.is_informational();
    if let Some(length) = body.size_hint().exact().filter(|_| !bodiless) {
        parts.headers.insert(
            hyper::header::CONTENT_LENGTH,
            hyper::header::HeaderValue::from(length),
        );
    }
    Response::from_parts(parts, http_body_util::Full::new(bytes::Bytes::new()))
}

/// Path parameters that are not names: ids their handlers parse.
#[cfg(test)]
const NOT_NAMES: &[&str] = &[":lease", ":partition_id", ":transaction_id"];

/// The wire field a path parameter names, `None` for one that is not a name
/// (an id its handler parses: a lease id, a partition id, a transaction
/// id). A new parameter kind
/// must be added here: the router tests refuse a parameter this does not know.
fn name_field(parameter: &str) -> Option<&'static str> {
    match parameter {
        ":queue" => Some("queue"),
        ":partition" => Some("partition"),
        ":group" => Some("consumerGroup"),
        ":trace_name" => Some("traceName"),
        _ => None,
    }
}

const fn route(
    method: Method,
    pattern: &'static str,
    endpoint: Endpoint,
    access: Access,
    tenant_scoped: bool,
) -> Route {
    Route {
        method,
        pattern,
        endpoint,
        access,
        tenant_scoped,
    }
}

use crate::handlers::admin::Analytics as A;
use Access::{Admin, Public, ReadOnly, ReadWrite};
use Endpoint as E;

/// The route table, in match order.
#[rustfmt::skip]
pub(crate) static ROUTES: &[Route] = &[
    route(Method::GET, "/health", E::Health, Public, false),
    route(Method::POST, "/api/v1/configure", E::Configure, ReadWrite, true),
    route(Method::POST, "/api/v1/push", E::Push, ReadWrite, true),
    route(Method::POST, "/api/v1/ack", E::Ack, ReadWrite, true),
    route(Method::POST, "/api/v1/ack/batch", E::AckBatch, ReadWrite, true),
    route(Method::POST, "/api/v1/lease/:lease/extend", E::LeaseExtend, ReadWrite, true),
    route(Method::POST, "/api/v1/transaction", E::Transaction, ReadWrite, true),
    route(Method::POST, "/api/v1/traces", E::Traces, ReadWrite, true),
    route(Method::GET, "/api/v1/dlq", E::Dlq, ReadOnly, true),
    route(Method::GET, "/api/v1/messages", E::ListMessages, ReadOnly, true),
    route(Method::GET, "/api/v1/messages/:partition_id/:transaction_id", E::GetMessage, ReadOnly, true),
    route(Method::DELETE, "/api/v1/messages/:partition_id/:transaction_id", E::DeleteMessage, ReadWrite, true),
    route(Method::POST, "/api/v1/messages/:partition_id/:transaction_id/dlq", E::MessageToDlq, ReadWrite, true),
    route(Method::POST, "/api/v1/messages/:partition_id/:transaction_id/retry", E::RetryMessage, ReadWrite, true),
    route(Method::POST, "/api/v1/dlq/requeue", E::RequeueDlq, ReadWrite, true),
    route(Method::GET, "/api/v1/pop", E::PopDiscovery, ReadWrite, true),
    route(Method::GET, "/api/v1/pop/queue/:queue", E::PopQueue, ReadWrite, true),
    route(Method::GET, "/api/v1/pop/queue/:queue/partition/:partition", E::PopPartition, ReadWrite, true),
    route(Method::DELETE, "/api/v1/resources/queues/:queue", E::DeleteQueue, Admin, true),
    route(Method::GET, "/api/v1/consumer-groups", E::ListGroups, ReadOnly, true),
    route(Method::GET, "/api/v1/consumer-groups/lagging", E::LaggingGroups, ReadOnly, true),
    route(Method::GET, "/api/v1/consumer-groups/:group", E::GetGroup, ReadOnly, true),
    route(Method::DELETE, "/api/v1/consumer-groups/:group", E::DeleteGroup, Admin, true),
    route(Method::DELETE, "/api/v1/consumer-groups/:group/queues/:queue", E::DeleteGroupOnQueue, Admin, true),
    route(Method::POST, "/api/v1/consumer-groups/:group/subscription", E::GroupSubscription, ReadWrite, true),
    route(Method::POST, "/api/v1/consumer-groups/:group/queues/:queue/seek", E::SeekQueue, ReadWrite, true),
    route(Method::POST, "/api/v1/consumer-groups/:group/queues/:queue/partitions/:partition/seek", E::SeekPartition, ReadWrite, true),
    route(Method::POST, "/streams/v1/queries", E::StreamQueries, ReadWrite, true),
    route(Method::POST, "/streams/v1/state/get", E::StreamState, ReadWrite, true),
    route(Method::POST, "/streams/v1/cycle", E::StreamCycle, ReadWrite, true),
    route(Method::GET, "/api/v1/system/maintenance", E::GetMaintenance, Admin, false),
    route(Method::POST, "/api/v1/system/maintenance", E::SetMaintenance, Admin, false),
    route(Method::GET, "/api/v1/status/buffers", E::Buffers, ReadOnly, false),
    route(Method::GET, "/api/v1/system/maintenance/pop", E::GetPopMaintenance, Admin, false),
    route(Method::POST, "/api/v1/system/maintenance/pop", E::SetPopMaintenance, Admin, false),
    route(Method::GET, "/api/v1/system/shared-state", E::SharedState, Admin, false),
    route(Method::POST, "/api/v1/migration/test-connection", E::MigrationTest, Admin, false),
    route(Method::POST, "/api/v1/migration/start", E::MigrationStart, Admin, false),
    route(Method::GET, "/api/v1/migration/status", E::MigrationStatus, Admin, false),
    route(Method::POST, "/api/v1/migration/validate", E::MigrationValidate, Admin, false),
    route(Method::POST, "/api/v1/migration/reset", E::MigrationReset, Admin, false),
    route(Method::GET, "/api/v1/resources/overview", E::Overview, ReadOnly, true),
    route(Method::GET, "/api/v1/resources/queues", E::ListQueues, ReadOnly, true),
    route(Method::GET, "/api/v1/resources/queues/:queue", E::GetQueue, ReadOnly, true),
    route(Method::GET, "/api/v1/resources/namespaces", E::Namespaces, ReadOnly, true),
    route(Method::GET, "/api/v1/resources/tasks", E::Tasks, ReadOnly, true),
    route(Method::GET, "/api/v1/status", E::Status, ReadOnly, true),
    route(Method::GET, "/api/v1/status/queues", E::StatusQueues, ReadOnly, true),
    route(Method::GET, "/api/v1/status/analytics", E::StatusAnalytics, ReadOnly, true),
    route(Method::GET, "/api/v1/status/queues/:queue", E::StatusQueue, ReadOnly, true),
    route(Method::GET, "/api/v1/status/queues/:queue/messages", E::QueueMessages, ReadOnly, true),
    route(Method::GET, "/api/v1/analytics/system-metrics", E::Analytics(A::SystemMetrics), ReadOnly, false),
    route(Method::GET, "/api/v1/analytics/worker-metrics", E::Analytics(A::WorkerMetrics), ReadOnly, false),
    route(Method::GET, "/api/v1/analytics/queue-lag", E::Analytics(A::QueueLag), ReadOnly, true),
    route(Method::GET, "/api/v1/analytics/queue-ops", E::Analytics(A::QueueOps), ReadOnly, true),
    route(Method::GET, "/api/v1/analytics/queue-parked-replicas", E::Analytics(A::QueueParked), ReadOnly, true),
    route(Method::GET, "/api/v1/analytics/retention", E::Analytics(A::Retention), ReadOnly, true),
    route(Method::GET, "/api/v1/analytics/postgres-stats", E::Analytics(A::PostgresStats), ReadOnly, false),
    route(Method::GET, "/api/v1/traces/names", E::TraceNames, ReadOnly, true),
    route(Method::GET, "/api/v1/traces/by-name/:trace_name", E::TracesByName, ReadOnly, true),
    route(Method::GET, "/api/v1/traces/:partition_id/:transaction_id", E::MessageTraces, ReadOnly, true),
    route(Method::POST, "/api/v1/stats/refresh", E::RefreshStats, Admin, false),
    route(Method::GET, "/metrics", E::Metrics, Public, false),
    route(Method::GET, "/metrics/prometheus", E::MetricsPrometheus, Public, false),
];

/// The table as (method, pattern, access, tenant-scoped).
pub(crate) fn table() -> Vec<(&'static str, &'static str, Access, bool)> {
    ROUTES
        .iter()
        .map(|route| {
            (
                route.method.as_str(),
                route.pattern,
                route.access,
                route.tenant_scoped,
            )
        })
        .collect()
}

/// The route `method` and `segments` reach, with its parameters in pattern
/// order.
pub(crate) fn find<'s>(
    method: &Method,
    segments: &[&'s str],
) -> Option<(&'static Route, Vec<&'s str>)> {
    ROUTES.iter().find_map(|route| {
        if route.method != *method {
            return None;
        }
        let mut pattern = route.segments();
        let mut params = Vec::new();
        for segment in segments {
            match pattern.next() {
                Some(name) if name.starts_with(':') => params.push(*segment),
                Some(word) if word == *segment => {}
                _ => return None,
            }
        }
        pattern.next().is_none().then_some((route, params))
    })
}

/// Dispatch one request to its handler.
pub(crate) async fn route_request(app: &App, req: Request) -> Response {
    let started = std::time::Instant::now();
    let method = req.method().clone();
    let (label, res) = route_labelled(app, req).await;
    let elapsed = started.elapsed();
    let status = res.status().as_u16();
    app.http_metrics.observe(label, &method, status, elapsed);
    tracing::debug!(
        method = %method,
        route = label,
        status,
        elapsed_ms = elapsed.as_secs_f64() * 1000.0,
        "request"
    );
    res
}

/// Route one request; answers the route pattern it matched (the metrics
/// label) with the response.
///
/// `HEAD` runs the `GET` route of its path when that route is safe (not a
/// pop) and answers without the body; a path some route takes with another
/// method is 405 with `Allow`. The path and the query must decode to UTF-8,
/// and every parameter and query value obeys the text rule (no NUL), before
/// any handler runs.
async fn route_labelled(app: &App, req: Request) -> (&'static str, Response) {
    let method = req.method().clone();
    if method == Method::HEAD {
        let (label, res) = route_method(app, req, &Method::GET, true).await;
        return (label, headless(res));
    }
    route_method(app, req, &method, false).await
}

/// [`route_labelled`] for `method` (`GET` for a `HEAD`, then `head` is set).
async fn route_method(
    app: &App,
    req: Request,
    method: &Method,
    head: bool,
) -> (&'static str, Response) {
    let path = req.uri().path().to_owned();
    let decoded = match query::segments(&path) {
        Ok(decoded) => decoded,
        Err(error) => return (UNMATCHED, error.into_response()),
    };
    let segments: Vec<&str> = decoded.iter().map(AsRef::as_ref).collect();
    if *req.method() == Method::OPTIONS {
        return (UNMATCHED, response::empty(StatusCode::NO_CONTENT));
    }
    let found = find(method, &segments).filter(|(route, _)| !head || route.head_safe());
    let caller = match (&app.auth, &found) {
        (Some(auth), Some((route, _))) => {
            // Skip paths are matched against the path the router read.
            let normalised = query::normalised(&segments);
            match auth
                .authorize(req.headers(), &normalised, route.access)
                .await
            {
                Ok(caller) => caller,
                Err(error) => return (route.pattern, error.into_response()),
            }
        }
        _ => Caller::anonymous(),
    };
    let Some((route, params)) = found else {
        let allow = allowed(&segments);
        if !allow.is_empty() {
            let error = HttpError::MethodNotAllowed {
                method: req.method().to_string(),
                path,
                allow,
            };
            return (UNMATCHED, error.into_response());
        }
        if *method == Method::GET {
            if let Some(res) =
                crate::static_files::serve(app.webapp.as_ref(), &path, &segments).await
            {
                return (STATIC, res);
            }
        }
        let error = HttpError::RouteNotFound {
            method: req.method().to_string(),
            path,
        };
        return (UNMATCHED, error.into_response());
    };
    // Every parameter and query value obeys the text rule, and every queue,
    // partition and group name in the path the one name rule, before any
    // handler runs.
    let checked = route
        .check_text(&params)
        .and_then(|()| query::check(req.uri().query()))
        .and_then(|()| route.check_names(&params));
    if let Err(error) = checked {
        return (route.pattern, error.into_response());
    }
    let res = dispatch(
        app,
        req,
        route.endpoint,
        &Params::new(route, &params),
        &caller,
    )
    .await
    .unwrap_or_else(HttpError::into_response);
    (route.pattern, res)
}

/// The handler of `endpoint`. Handlers that read the body take the request
/// by value.
/// What `JWT_SKIP_PATHS` defaults to: the path of every public route, and
/// `/` (the status page or the dashboard, which is not a route).
pub fn public_paths() -> Vec<String> {
    ROUTES
        .iter()
        .filter(|route| route.access == Access::Public)
        .map(|route| route.pattern.to_owned())
        .chain(std::iter::once("/".to_owned()))
        .collect()
}

/// Whether `segment` is the first segment of some route's pattern (what the
/// dashboard's static files may never shadow).
pub(crate) fn is_route_root(segment: &str) -> bool {
    ROUTES
        .iter()
        .any(|route| route.segments().next() == Some(segment))
}

/// A matched route's parameters, by the name its pattern gives them
/// (`:queue` is `"queue"`), so a pattern's order is its own business.
pub(crate) struct Params<'a> {
    route: &'a Route,
    values: &'a [&'a str],
}

impl<'a> Params<'a> {
    fn new(route: &'a Route, values: &'a [&'a str]) -> Params<'a> {
        Params { route, values }
    }

    /// The value of parameter `name`. A name the pattern lacks is a bug in
    /// `dispatch`, not in the request: debug builds (every test) stop on it;
    /// release builds answer as for an empty value (a 400 naming the field).
    fn get(&self, name: &str) -> &'a str {
        let index = self
            .route
            .parameters()
            .position(|parameter| parameter.strip_prefix(':') == Some(name));
        debug_assert!(
            index.is_some(),
            "{} has no parameter :{name}",
            self.route.pattern
        );
        index
            .and_then(|index| self.values.get(index).copied())
            .unwrap_or_default()
    }
}

async fn dispatch(
    app: &App,
    req: Request,
    endpoint: Endpoint,
    params: &Params<'_>,
    who: &Caller,
) -> Result<Response, HttpError> {
    let engine = &*app.engine;
    let t = &*who.tenant;
    let param = |name: &str| params.get(name);
    match endpoint {
        E::Health => handlers::health::get(engine).await,
        E::Configure => handlers::configure::post(engine, req, t).await,
        E::Push => handlers::push::post(engine, req, who).await,
        E::Ack => handlers::ack::single(engine, req, t).await,
        E::AckBatch => handlers::ack::batch(engine, req, t).await,
        E::LeaseExtend => handlers::lease::extend(engine, req, t, param("lease")).await,
        E::Transaction => handlers::transaction::post(engine, req, who).await,
        E::Traces => handlers::traces::post(engine, req, t).await,
        E::Dlq => handlers::dlq::list(engine, &req, t).await,
        E::DeleteMessage => {
            handlers::dlq::delete_message(engine, t, param("partition_id"), param("transaction_id"))
                .await
        }
        E::RetryMessage => {
            handlers::dlq::retry_message(
                engine,
                req,
                t,
                param("partition_id"),
                param("transaction_id"),
            )
            .await
        }
        E::RequeueDlq => handlers::dlq::requeue(engine, req, t).await,
        E::PopDiscovery => handlers::pop::discovery(app, &req, &who.tenant).await,
        E::PopQueue => handlers::pop::queue(app, &req, &who.tenant, param("queue")).await,
        E::PopPartition => {
            handlers::pop::partition(app, &req, &who.tenant, param("queue"), param("partition"))
                .await
        }
        E::DeleteQueue => handlers::queues::delete(engine, t, param("queue")).await,
        E::ListGroups => handlers::consumer_groups::list(engine, t).await,
        E::LaggingGroups => handlers::consumer_groups::lagging(engine, &req, t).await,
        E::GetGroup => handlers::consumer_groups::get(engine, t, param("group")).await,
        E::DeleteGroup => {
            handlers::consumer_groups::delete(engine, &req, t, param("group"), None).await
        }
        E::DeleteGroupOnQueue => {
            handlers::consumer_groups::delete(engine, &req, t, param("group"), Some(param("queue")))
                .await
        }
        E::GroupSubscription => {
            handlers::consumer_groups::subscription(engine, req, t, param("group")).await
        }
        E::SeekQueue => {
            handlers::consumer_groups::seek(engine, req, t, param("group"), param("queue"), None)
                .await
        }
        E::SeekPartition => {
            let (group, queue, partition) =
                (param("group"), param("queue"), Some(param("partition")));
            handlers::consumer_groups::seek(engine, req, t, group, queue, partition).await
        }
        E::StreamQueries => handlers::streams::register(engine, req, t).await,
        E::StreamState => handlers::streams::state_get(engine, req, t).await,
        E::StreamCycle => handlers::streams::cycle(engine, req, who).await,
        E::GetMaintenance => Ok(handlers::maintenance::get(engine)),
        E::SetMaintenance => handlers::maintenance::post(engine, req).await,
        E::Buffers => Ok(handlers::maintenance::buffers(engine)),
        E::GetPopMaintenance => Ok(handlers::maintenance::get_pop(engine)),
        E::SetPopMaintenance => handlers::maintenance::post_pop(engine, req).await,
        E::SharedState => Ok(handlers::shared_state::get(engine)),
        E::MigrationTest => handlers::migration::test_connection(engine, req).await,
        E::MigrationStart => handlers::migration::start(engine, req).await,
        E::MigrationStatus => Ok(handlers::migration::status(engine)),
        E::MigrationValidate => handlers::migration::validate(engine, req).await,
        E::MigrationReset => handlers::migration::reset(engine),
        E::Metrics => Ok(handlers::metrics::json(app).await),
        E::MetricsPrometheus => handlers::metrics::prometheus(app, &req).await,
        E::Overview => handlers::admin::resources(engine, t, AdminView::Overview).await,
        E::ListQueues => handlers::admin::resources(engine, t, AdminView::Queues).await,
        E::GetQueue => {
            handlers::admin::resources(engine, t, AdminView::Queue(param("queue"))).await
        }
        E::Namespaces => handlers::admin::resources(engine, t, AdminView::Namespaces).await,
        E::Tasks => handlers::admin::resources(engine, t, AdminView::Tasks).await,
        E::Status => handlers::admin::status(engine, &req, t).await,
        E::StatusQueues => handlers::admin::status_queues(engine, &req, t).await,
        E::StatusQueue => handlers::admin::queue_detail(engine, t, param("queue")).await,
        E::StatusAnalytics => handlers::admin::analytics(engine, &req, t).await,
        E::Analytics(which) => handlers::admin::analytics_view(engine, &req, t, which).await,
        E::TraceNames => handlers::admin::trace_names(engine, &req, t).await,
        E::TracesByName => {
            handlers::admin::traces_by_name(engine, &req, t, param("trace_name")).await
        }
        E::MessageTraces => {
            handlers::admin::message_traces(
                engine,
                t,
                param("partition_id"),
                param("transaction_id"),
            )
            .await
        }
        E::RefreshStats => handlers::admin::refresh_stats(engine).await,
        E::ListMessages => handlers::messages::list(engine, &req, t).await,
        E::GetMessage => {
            handlers::messages::detail(engine, t, param("partition_id"), param("transaction_id"))
                .await
        }
        E::MessageToDlq => {
            handlers::messages::move_to_dlq(
                engine,
                req,
                t,
                param("partition_id"),
                param("transaction_id"),
            )
            .await
        }
        E::QueueMessages => {
            handlers::messages::queue_messages(engine, &req, t, param("queue")).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_read_by_name_whatever_their_order() {
        let segments = [
            "api",
            "v1",
            "consumer-groups",
            "G",
            "queues",
            "Q",
            "partitions",
            "P",
            "seek",
        ];
        let (found, values) = find(&Method::POST, &segments).unwrap();
        let params = Params::new(found, &values);
        assert_eq!(
            (
                params.get("group"),
                params.get("queue"),
                params.get("partition")
            ),
            ("G", "Q", "P")
        );
        // The same names in another order of the pattern read the same.
        let reordered = Route {
            pattern: "/x/:queue/y/:group",
            ..route(Method::GET, "/", E::Health, Access::Public, false)
        };
        let params = Params::new(&reordered, &["Q", "G"]);
        assert_eq!((params.get("group"), params.get("queue")), ("G", "Q"));
    }

    /// (method, path, endpoint, parameters): what the table must answer.
    const CASES: &[(Method, &str, Endpoint, &[&str])] = &[
        (Method::GET, "/health", E::Health, &[]),
        (Method::POST, "/api/v1/push", E::Push, &[]),
        (Method::POST, "/api/v1/ack", E::Ack, &[]),
        (Method::POST, "/api/v1/ack/batch", E::AckBatch, &[]),
        (
            Method::POST,
            "/api/v1/lease/L/extend",
            E::LeaseExtend,
            &["L"],
        ),
        (Method::GET, "/api/v1/pop", E::PopDiscovery, &[]),
        (Method::GET, "/api/v1/pop/queue/q", E::PopQueue, &["q"]),
        (
            Method::GET,
            "/api/v1/pop/queue/q/partition/p",
            E::PopPartition,
            &["q", "p"],
        ),
        (
            Method::GET,
            "/api/v1/pop/queue/a%2Fb",
            E::PopQueue,
            &["a/b"],
        ),
        (
            Method::DELETE,
            "/api/v1/resources/queues/q",
            E::DeleteQueue,
            &["q"],
        ),
        (Method::GET, "/api/v1/consumer-groups", E::ListGroups, &[]),
        (
            Method::GET,
            "/api/v1/consumer-groups/lagging",
            E::LaggingGroups,
            &[],
        ),
        (
            Method::GET,
            "/api/v1/consumer-groups/g",
            E::GetGroup,
            &["g"],
        ),
        (
            Method::DELETE,
            "/api/v1/consumer-groups/g",
            E::DeleteGroup,
            &["g"],
        ),
        (
            Method::DELETE,
            "/api/v1/consumer-groups/g/queues/q",
            E::DeleteGroupOnQueue,
            &["g", "q"],
        ),
        (
            Method::POST,
            "/api/v1/consumer-groups/g/queues/q/partitions/p/seek",
            E::SeekPartition,
            &["g", "q", "p"],
        ),
        (
            Method::POST,
            "/api/v1/system/maintenance/pop",
            E::SetPopMaintenance,
            &[],
        ),
    ];

    #[test]
    fn each_path_reaches_its_endpoint_with_its_parameters() {
        for (method, path, endpoint, params) in CASES {
            let decoded = query::segments(path).unwrap();
            let segments: Vec<&str> = decoded.iter().map(AsRef::as_ref).collect();
            let (route, got) = find(method, &segments).unwrap_or_else(|| panic!("{method} {path}"));
            assert_eq!(route.endpoint, *endpoint, "{method} {path}");
            assert_eq!(got, *params, "{method} {path}");
        }
        for (method, path) in [
            (Method::GET, "/api/v1/push"),
            (Method::POST, "/api/v1/pop/queue/q"),
            (Method::GET, "/api/v1/pop/queue"),
            (Method::GET, "/api/v1/unknown"),
            (Method::GET, "/"),
        ] {
            let decoded = query::segments(path).unwrap();
            let segments: Vec<&str> = decoded.iter().map(AsRef::as_ref).collect();
            assert!(find(&method, &segments).is_none(), "{method} {path}");
        }
    }

    #[test]
    fn allow_lists_the_methods_of_a_path_and_head_only_for_safe_gets() {
        assert_eq!(allowed(&["health"]), "GET, HEAD");
        assert_eq!(allowed(&["api", "v1", "push"]), "POST");
        assert_eq!(allowed(&["api", "v1", "pop", "queue", "q"]), "GET");
        assert_eq!(
            allowed(&["api", "v1", "resources", "queues", "q"]),
            "GET, HEAD, DELETE"
        );
        assert_eq!(allowed(&["api", "v1", "nothing"]), "");
        assert_eq!(allowed(&[]), "");
        let pops = ROUTES
            .iter()
            .filter(|route| route.method == Method::GET && !route.head_safe());
        assert_eq!(pops.count(), 3, "only the three pops refuse HEAD");
    }

    #[test]
    fn every_route_is_reachable_and_unambiguous() {
        for (index, route) in ROUTES.iter().enumerate() {
            // A path built from the pattern itself reaches this very route.
            let segments: Vec<&str> = route
                .segments()
                .map(|segment| {
                    if segment.starts_with(':') {
                        "x"
                    } else {
                        segment
                    }
                })
                .collect();
            let (found, _) = find(&route.method, &segments).unwrap();
            assert!(
                std::ptr::eq(found, &ROUTES[index]),
                "{} {} is shadowed by {}",
                route.method,
                route.pattern,
                found.pattern
            );
            // Every parameter but the lease id is a name, and the path name
            // check knows it as one.
            for parameter in route.parameters() {
                assert!(
                    NOT_NAMES.contains(&parameter) || name_field(parameter).is_some(),
                    "{}: {parameter} escapes the name rule",
                    route.pattern
                );
            }
        }
    }

    /// Generated from the table: on every route, each name
    /// parameter holding a NUL (`%00` on the wire, which used to reach
    /// PostgreSQL and answer 500), a control character or 256 bytes is
    /// refused with the error naming its field, before any handler runs.
    #[test]
    fn every_route_refuses_a_bad_name_in_each_of_its_name_parameters() {
        let long = "x".repeat(256);
        let bad = [
            ("bad\0name", "must not contain control characters"),
            ("tab\tname", "must not contain control characters"),
            (long.as_str(), "must be at most 255 bytes"),
        ];
        let mut checked = 0;
        for route in ROUTES {
            let parameters: Vec<&str> = route.parameters().collect();
            for (position, parameter) in parameters.iter().enumerate() {
                let Some(field) = name_field(parameter) else {
                    continue;
                };
                for (value, rule) in bad {
                    let mut params = vec!["ok"; parameters.len()];
                    params[position] = value;
                    let error = route
                        .check_names(&params)
                        .expect_err(route.pattern)
                        .to_string();
                    assert_eq!(error, format!("{field} {rule}"), "{}", route.pattern);
                    checked += 1;
                }
            }
        }
        assert!(checked >= 30, "{checked}");
        // On the wire, %00 decodes to the NUL the rule refuses.
        let decoded = query::segments("/api/v1/pop/queue/bad%00name").unwrap();
        let segments: Vec<&str> = decoded.iter().map(AsRef::as_ref).collect();
        assert!(check_path(&Method::GET, &segments).is_err());
    }

    /// The names of `path` as the route it reaches checks them.
    fn check_path(method: &Method, path: &[&str]) -> Result<(), HttpError> {
        let (route, params) = find(method, path).unwrap();
        route.check_names(&params)
    }

    #[test]
    fn every_name_in_a_path_is_checked_and_static_words_are_not() {
        let ok = [
            "api",
            "v1",
            "consumer-groups",
            "g",
            "queues",
            "q",
            "partitions",
            "p",
            "seek",
        ];
        assert!(check_path(&Method::POST, &ok).is_ok());
        assert!(check_path(&Method::GET, &["api", "v1", "consumer-groups", "lagging"]).is_ok());
        for (method, path, field) in [
            (
                Method::GET,
                &["api", "v1", "pop", "queue", "a\u{1}"][..],
                "queue",
            ),
            (
                Method::GET,
                &["api", "v1", "pop", "queue", "q", "partition", "\n"][..],
                "partition",
            ),
            (
                Method::DELETE,
                &["api", "v1", "resources", "queues", "a\u{0}"][..],
                "queue",
            ),
            (
                Method::GET,
                &["api", "v1", "consumer-groups", "g\u{7f}"][..],
                "consumerGroup",
            ),
        ] {
            let Err(HttpError::Validation(message)) = check_path(&method, path) else {
                panic!("{path:?} passed");
            };
            assert_eq!(
                message,
                format!("{field} must not contain control characters")
            );
        }
    }

    #[test]
    fn access_levels_follow_the_contract() {
        let access = |method: Method, path: &str| {
            let decoded = query::segments(path).unwrap();
            let segments: Vec<&str> = decoded.iter().map(AsRef::as_ref).collect();
            find(&method, &segments).unwrap().0.access
        };
        // wire-api.md §1, one route of each level and every admin one.
        assert_eq!(access(Method::GET, "/health"), Public);
        assert_eq!(access(Method::GET, "/api/v1/dlq"), ReadOnly);
        assert_eq!(access(Method::GET, "/api/v1/consumer-groups/g"), ReadOnly);
        assert_eq!(access(Method::POST, "/api/v1/push"), ReadWrite);
        assert_eq!(access(Method::GET, "/api/v1/pop/queue/q"), ReadWrite);
        assert_eq!(access(Method::GET, "/api/v1/status/buffers"), ReadOnly);
        assert_eq!(
            access(Method::POST, "/api/v1/dlq/requeue"),
            ReadWrite,
            "a replay writes, like the message delete"
        );
        let admin: Vec<String> = ROUTES
            .iter()
            .filter(|route| route.access == Admin)
            .map(|route| format!("{} {}", route.method, route.pattern))
            .collect();
        assert_eq!(
            admin,
            [
                "DELETE /api/v1/resources/queues/:queue",
                "DELETE /api/v1/consumer-groups/:group",
                "DELETE /api/v1/consumer-groups/:group/queues/:queue",
                "GET /api/v1/system/maintenance",
                "POST /api/v1/system/maintenance",
                "GET /api/v1/system/maintenance/pop",
                "POST /api/v1/system/maintenance/pop",
                "GET /api/v1/system/shared-state",
                "POST /api/v1/migration/test-connection",
                "POST /api/v1/migration/start",
                "GET /api/v1/migration/status",
                "POST /api/v1/migration/validate",
                "POST /api/v1/migration/reset",
                "POST /api/v1/stats/refresh",
            ]
        );
        assert_eq!(access(Method::GET, "/metrics"), Public);
        assert_eq!(access(Method::GET, "/metrics/prometheus"), Public);
        // Only health, the cluster-wide maintenance switches, the broker's
        // spool and mesh, the migration of the whole database, the brokers'
        // own statistics (system and worker series, PostgreSQL's figures,
        // writing this broker's rows now) and the metrics (public by the
        // contract, for the scraper; with auth their per-queue series are
        // shown only to a token of the queue's tenant, `handlers/metrics.rs`)
        // are not tenant data.
        let untenanted: Vec<Endpoint> = ROUTES
            .iter()
            .filter(|route| !route.tenant_scoped)
            .map(|route| route.endpoint)
            .collect();
        assert_eq!(
            untenanted,
            [
                E::Health,
                E::GetMaintenance,
                E::SetMaintenance,
                E::Buffers,
                E::GetPopMaintenance,
                E::SetPopMaintenance,
                E::SharedState,
                E::MigrationTest,
                E::MigrationStart,
                E::MigrationStatus,
                E::MigrationValidate,
                E::MigrationReset,
                E::Analytics(A::SystemMetrics),
                E::Analytics(A::WorkerMetrics),
                E::Analytics(A::PostgresStats),
                E::RefreshStats,
                E::Metrics,
                E::MetricsPrometheus,
            ]
        );
    }
}
