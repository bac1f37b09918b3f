//! `GET /metrics/prometheus` and `GET /metrics` (wire-api.md §5).
//!
//! Both come from one scrape of the engine (`Observer::scrape`): the process
//! series straight from the components, the cluster series from one
//! database call cached for a few seconds. While PostgreSQL is down a scrape
//! still answers 200 with every process series, the last cluster series it
//! read, and `queen_cluster_up 0`.
//!
//! With auth on (`JWT_ENABLED`) both stay public, for the scraper, but the
//! per-queue series (queue, tenant and group labels: what names a tenant's
//! queues and counts them) are shown only to a token: every queue's to an
//! admin token, its own tenant's to any other. A scrape without a token
//! gets the broker-wide series only, or, with
//! `QUEEN_METRICS_AGGREGATE_QUEUES`, the per-queue families summed over
//! every queue without labels. A bad token is 401 as on any route. The
//! JSON `/metrics` holds broker-wide figures only. Without auth every
//! scrape shows every queue.
//!
//! The exposition is `prometheus-client`'s text encoding (OpenMetrics text,
//! which Prometheus's 0.0.4 parser reads too). It is labelled
//! `text/plain; version=0.0.4` as the contract says, or
//! `application/openmetrics-text; version=1.0.0` when the scraper's
//! `Accept` asks for OpenMetrics.

use std::sync::Arc;

use hyper::header::ACCEPT;
use hyper::StatusCode;
use prometheus_client::registry::Registry;
use queen_engine::metrics::{EngineCollector, QueueSeries};
use serde_json::json;

use crate::context::{App, Request};
use crate::error::HttpError;
use crate::response::{self, Response};
use crate::routes::Access;

const TEXT_0_0_4: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The per-queue series the scraper of `req` may see.
async fn queue_series(app: &App, req: &Request) -> Result<QueueSeries, HttpError> {
    let Some(auth) = &app.auth else {
        return Ok(QueueSeries::All);
    };
    Ok(match auth.identify(req.headers()).await? {
        Some((_, Some(Access::Admin))) => QueueSeries::All,
        Some((caller, Some(Access::ReadOnly | Access::ReadWrite))) => {
            QueueSeries::Tenant(caller.tenant)
        }
        // No token, or one without a role (public is not a role).
        None | Some((_, Some(Access::Public) | None)) => {
            if app.aggregate_queue_metrics {
                QueueSeries::Aggregate
            } else {
                QueueSeries::Hidden
            }
        }
    })
}

pub(crate) async fn prometheus(app: &App, req: &Request) -> Result<Response, HttpError> {
    let queues = queue_series(app, req).await?;
    let scrape = Arc::new(app.engine.observe().scrape().await);
    let mut registry = Registry::with_prefix("queen");
    registry.register_collector(Box::new(EngineCollector { scrape, queues }));
    app.http_metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).map_err(|_| {
        HttpError::Engine(queen_engine::EngineError::Internal(
            "metrics encoding failed",
        ))
    })?;
    let openmetrics = req
        .headers()
        .get(ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains("application/openmetrics-text"));
    Ok(response::bytes(
        StatusCode::OK,
        if openmetrics { OPENMETRICS } else { TEXT_0_0_4 },
        text,
        Some("no-cache"),
    ))
}

/// Per second over the broker's life.
fn rate(total: u64, uptime: f64) -> f64 {
    if uptime > 0.0 {
        #[expect(clippy::cast_precision_loss, reason = "a rate")]
        let total = total as f64;
        total / uptime
    } else {
        0.0
    }
}

/// Broker-wide figures only (no queue is named), so the same for every
/// caller.
pub(crate) async fn json(app: &App) -> Response {
    let scrape = app.engine.observe().scrape().await;
    let p = &scrape.process;
    let t = &p.totals;
    let uptime = p.uptime.as_secs_f64();
    let requests = app.http_metrics.total();
    let messages = t.push_messages + t.pop_messages;
    response::json(
        StatusCode::OK,
        &json!({
            "uptime": p.uptime.as_secs(),
            "requests": {"total": requests, "rate": rate(requests, uptime)},
            "messages": {
                "total": messages,
                "rate": rate(messages, uptime),
                "pushed": t.push_messages,
                "popped": t.pop_messages,
                "acked": t.ack_completed,
                "failed": t.ack_failed,
                "deadLettered": t.ack_dlq,
                "buffered": t.push_buffered,
            },
            "database": {
                "poolSize": p.pool.0,
                "idleConnections": p.pool.1,
                "waitingRequests": p.pool.2,
                "maxConnections": p.pool_max,
                "connected": scrape.cluster_fresh,
                "errors": t.db_errors,
            },
            "spool": p.spool.map(|spool| json!({
                "pending": spool.pending,
                "held": spool.held,
                "heldQueues": spool.held_queues,
                "heldRetries": spool.held_retries,
                "failed": spool.failed,
                "oldestAgeSeconds": spool.oldest_age.map_or(0.0, |age| age.as_secs_f64()),
                "spooling": spool.spooling,
            })),
            "memory": {
                "rss": p.rss_bytes,
                "ackRegistryBytes": p.memory.ack_registry_bytes,
                "dedupCacheBytes": p.memory.dedup_cache_bytes,
                "wakeGates": p.memory.wake_gates,
                "hotlistRings": p.hotlist.0,
                "hotlistEntries": p.hotlist.1,
            },
            "cpu": {
                "userSeconds": p.cpu.0.as_secs_f64(),
                "systemSeconds": p.cpu.1.as_secs_f64(),
            },
            "limiter": {
                "limit": p.limiter.limit,
                "inFlight": p.limiter.in_flight,
                "rttMinMs": p.limiter.rtt_min.map(|rtt| rtt.as_secs_f64() * 1000.0),
                "rttRecentMs": p.limiter.rtt_recent.map(|rtt| rtt.as_secs_f64() * 1000.0),
            },
            "pops": {"inProgress": p.pops_in_progress, "parked": p.parked_total()},
        }),
    )
}
