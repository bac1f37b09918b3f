//! The accept loop: one task per connection, HTTP/1.1 with keep-alive, and a
//! graceful stop that lets in-flight requests finish.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use queen_engine::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::body::BodyLimits;
use crate::context::{App, Request, WireDefaults};
use crate::routes;

/// Serving options.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How long in-flight requests get to finish after shutdown begins.
    pub drain_timeout: Duration,
    /// Defaults of requests that leave parameters out.
    pub defaults: WireDefaults,
    /// Connections served at once (`QUEEN_MAX_CONNECTIONS`); one more is
    /// answered 503 with `Retry-After` and closed.
    pub max_connections: usize,
    /// Request body bytes buffered at once across all connections
    /// (`QUEEN_MAX_BODY_MB_IN_FLIGHT`); a body that does not fit now is
    /// answered 503 with `Retry-After`.
    pub max_body_bytes_in_flight: usize,
    /// How long a whole request body may take to arrive
    /// (`QUEEN_BODY_TIMEOUT_MS`); past it, 408.
    pub body_timeout: Duration,
    /// A Queen dashboard build to serve (`QUEEN_WEBAPP_DIR`); without one,
    /// `GET /` is the built-in status page.
    pub webapp: Option<crate::Webapp>,
    /// JWT verification (`JWT_ENABLED`); `None`: every route is open.
    pub auth: Option<Arc<crate::Auth>>,
    /// With auth, what a metrics scrape without a token gets of the
    /// per-queue series (`QUEEN_METRICS_AGGREGATE_QUEUES`): `false`, none;
    /// `true`, each family summed over every queue, without labels.
    pub aggregate_queue_metrics: bool,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            drain_timeout: Duration::from_secs(30),
            defaults: WireDefaults::default(),
            max_connections: 10_000,
            max_body_bytes_in_flight: 1 << 30,
            body_timeout: Duration::from_secs(30),
            webapp: None,
            auth: None,
            aggregate_queue_metrics: false,
        }
    }
}

/// Serve `listener` until `shutdown` resolves, then stop accepting, ask every
/// connection to finish its current request, and wait for them (bounded by
/// `drain_timeout`). Returns when no connection is left or the timeout passed.
pub async fn serve(
    listener: TcpListener,
    engine: Arc<Engine>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let connections = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let refusals = Arc::new(Semaphore::new(MAX_REFUSING));
    let limits = Arc::new(BodyLimits::new(
        options.max_body_bytes_in_flight,
        options.body_timeout,
    ));
    let app = Arc::new(App {
        engine: Arc::clone(&engine),
        defaults: options.defaults.clone(),
        http_metrics: crate::metrics::HttpMetrics::default(),
        webapp: options.webapp.clone(),
        auth: options.auth.clone(),
        aggregate_queue_metrics: options.aggregate_queue_metrics,
    });
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
                    // Answered busy, by at most MAX_REFUSING tasks at once;
                    // past that the connection is just closed.
                    if let Ok(refusing) = Arc::clone(&refusals).try_acquire_owned() {
                        tokio::spawn(async move {
                            refuse(stream).await;
                            drop(refusing);
                        });
                    }
                    continue;
                };
                let app = Arc::clone(&app);
                let limits = Arc::clone(&limits);
                let service = service_fn(move |mut req: Request| {
                    let app = Arc::clone(&app);
                    req.extensions_mut().insert(Arc::clone(&limits));
                    async move { Ok::<_, Infallible>(routes::route_request(&app, req).await) }
                });
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(error) = conn.await {
                        tracing::debug!(%error, %peer, "connection ended with an error");
                    }
                    drop(permit);
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    // Parked long-polls answer empty now instead of holding the drain.
    engine.begin_shutdown();
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(options.drain_timeout) => {
            tracing::warn!("drain timeout passed with connections still open");
        }
    }
}

/// The answer to a connection past `max_connections`: a 503 with
/// `Retry-After`, then close. The request is read (briefly) and discarded
/// after the answer, so closing does not reset the connection before the
/// client has read it.
async fn refuse(mut stream: tokio::net::TcpStream) {
    let body = r#"{"error":"server busy: too many connections"}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: {}\r\naccess-control-allow-origin: *\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n{body}",
        crate::error::RETRY_AFTER_SECONDS,
        body.len()
    );
    let _ = tokio::time::timeout(REFUSE_LINGER, async {
        if stream.write_all(answer.as_bytes()).await.is_ok() {
            let _ = stream.shutdown().await;
            let mut sink = [0u8; 4096];
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        }
    })
    .await;
}

/// How long a refused connection is given to take its answer.
const REFUSE_LINGER: Duration = Duration::from_secs(1);

/// Refused connections being answered at once (each holds a descriptor for
/// up to [`REFUSE_LINGER`]).
const MAX_REFUSING: usize = 256;
