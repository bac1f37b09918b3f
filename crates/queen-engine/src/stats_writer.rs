//! The statistics writer: every `stats_interval` (a minute by default) one
//! statement (`queen.stats_write_v2`) writes this broker's row and one row
//! per queue it served in the minute; and the event-loop lag sampler, whose
//! figures the broker row carries.
//!
//! Both are tasks holding a `Weak<Observer>`, so they end with the engine.
//! A failed write puts the per-queue counts back (bounded like any minute),
//! so the next write carries them.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use crate::metrics::ProcessMetrics;
use crate::observe::Observer;
use crate::stats::{DeliveryLag, LagWindow, QueueMinute};
use crate::RetentionStats;

/// How often the event loop's lag is sampled.
const LAG_PERIOD: Duration = Duration::from_millis(100);

/// What the writer remembers between writes: the counters it reports as
/// differences.
#[derive(Debug, Default)]
pub(crate) struct WriterState {
    last: Mutex<Option<Reported>>,
}

/// The queues that get a row: those with traffic in the minute, and those
/// with parked consumers and no traffic.
fn queue_names<'a>(
    process: &'a ProcessMetrics,
    queues: &'a std::collections::HashMap<String, QueueMinute>,
) -> Vec<&'a str> {
    let mut names: Vec<&str> = queues.keys().map(String::as_str).collect();
    for (queue, _) in &process.parked {
        if !crate::naming::split_queue_key(queue).1.is_empty() && !queues.contains_key(queue) {
            names.push(queue);
        }
    }
    names
}

impl WriterState {
    /// A write of `minute` committed: the next one reports from its figures.
    fn written(&self, minute: &Minute<'_>) {
        *self.last.lock() = Some(Reported {
            retention: minute.process.retention,
            cpu: minute.process.cpu,
            totals: minute.process.totals,
        });
    }
}

/// The cumulative figures the last committed write reported up to.
#[derive(Debug, Clone, Copy, Default)]
struct Reported {
    retention: RetentionStats,
    cpu: (Duration, Duration),
    totals: crate::TotalsSnapshot,
}

/// The minute `at` falls in.
fn bucket(at: SystemTime) -> SystemTime {
    let secs = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    UNIX_EPOCH + Duration::from_secs(secs - secs % 60)
}

/// What one write reports.
struct Minute<'a> {
    pub(crate) process: &'a ProcessMetrics,
    pub(crate) queues: &'a std::collections::HashMap<String, QueueMinute>,
    /// The queues that get a row ([`queue_names`]).
    pub(crate) names: &'a [&'a str],
    pub(crate) dropped: u64,
    pub(crate) lag: LagWindow,
    pub(crate) delivery: DeliveryLag,
    pub(crate) cluster: &'a crate::metrics::ClusterMetrics,
    pub(crate) port: u16,
    pub(crate) hostname: &'a str,
}

/// The broker row and the queue rows of one write.
fn rows(state: &WriterState, minute: &Minute<'_>) -> (Value, Value) {
    let Minute {
        process,
        queues,
        names,
        dropped,
        lag,
        delivery,
        cluster,
        port,
        hostname,
    } = *minute;
    let Reported {
        retention: retention0,
        cpu: cpu0,
        totals: totals0,
    } = state.last.lock().unwrap_or_default();
    let t = &process.totals;
    let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    let broker = json!({
        "hostname": hostname,
        "port": port,
        "pid": std::process::id(),
        "cpu_user_us": us(process.cpu.0.saturating_sub(cpu0.0)),
        "cpu_system_us": us(process.cpu.1.saturating_sub(cpu0.1)),
        "rss_bytes": process.rss_bytes,
        "pool_size": process.pool.0,
        "pool_idle": process.pool.1,
        "pool_waiting": process.pool.2,
        "limiter_limit": process.limiter.limit,
        "limiter_in_flight": process.limiter.in_flight,
        "event_loop_lag_avg_us": lag.sum_us.checked_div(lag.samples).unwrap_or(0),
        "event_loop_lag_max_us": lag.max_us,
        "parked": process.parked_total(),
        "push_requests": t.push_requests.saturating_sub(totals0.push_requests),
        "pushed": t.push_messages.saturating_sub(totals0.push_messages),
        "pop_requests": t.pop_requests.saturating_sub(totals0.pop_requests),
        "popped": t.pop_messages.saturating_sub(totals0.pop_messages),
        "pop_empty": t.pop_empty.saturating_sub(totals0.pop_empty),
        "acked": t.ack_completed.saturating_sub(totals0.ack_completed),
        "ack_failed": t.ack_failed.saturating_sub(totals0.ack_failed),
        "dlq": t.ack_dlq.saturating_sub(totals0.ack_dlq),
        "db_errors": t.db_errors.saturating_sub(totals0.db_errors),
        "retention_msgs": process.retention.messages.saturating_sub(retention0.messages),
        "eviction_msgs": process.retention.evicted_messages.saturating_sub(retention0.evicted_messages),
        "partitions_deleted": process.retention.partitions_removed.saturating_sub(retention0.partitions_removed),
        "dropped_counts": dropped,
        "pop_lag_count": delivery.messages,
        "pop_lag_sum_ms": delivery.sum_ms,
        "pop_lag_max_ms": delivery.max_ms,
    });
    let parked: std::collections::HashMap<&str, usize> = process
        .parked
        .iter()
        .map(|(queue, n)| (queue.as_str(), *n))
        .collect();
    let rows: Vec<Value> = names
        .iter()
        .copied()
        .map(|queue| {
            let counts = queues.get(queue).copied().unwrap_or_default();
            let (lag_messages, lag_seconds) = cluster.queue_lag(queue).unwrap_or((0, 0));
            let mut row = Map::new();
            let (tenant, name) = crate::naming::split_queue_key(queue);
            row.insert("tenant_id".into(), json!(tenant));
            row.insert("queue_name".into(), json!(name));
            for (key, value) in [
                ("push_requests", counts.push_requests),
                ("pushed", counts.pushed),
                ("pop_requests", counts.pop_requests),
                ("popped", counts.popped),
                ("pop_empty", counts.pop_empty),
                ("ack_requests", counts.ack_requests),
                ("ack_messages", counts.ack_messages),
                ("acked", counts.acked),
                ("ack_failed", counts.ack_failed),
                ("dlq", counts.dlq),
                ("transactions", counts.transactions),
                ("retention_msgs", counts.retention_msgs),
                ("completed_retention_msgs", counts.completed_retention_msgs),
                ("eviction_msgs", counts.eviction_msgs),
                ("partitions_deleted", counts.partitions_deleted),
            ] {
                row.insert(key.into(), json!(value));
            }
            row.insert(
                "parked".into(),
                json!(parked.get(queue).copied().unwrap_or(0)),
            );
            row.insert("lag_messages".into(), json!(lag_messages));
            row.insert("lag_seconds".into(), json!(lag_seconds));
            Value::Object(row)
        })
        .collect();
    (broker, Value::Array(rows))
}

impl WriterState {
    /// Write this broker's statistics rows for the current minute: one
    /// statement (`queen_sql::stats::write_minute`). Returns the queue rows
    /// written; on failure the minute's counts go back into `stats` and wait
    /// for the next write.
    pub(crate) async fn write(
        &self,
        pool: &deadpool_postgres::Pool,
        stats: &crate::stats::Stats,
        process: &ProcessMetrics,
        cluster: impl std::future::Future<Output = Arc<crate::metrics::ClusterMetrics>>,
        (hostname, port): (&str, u16),
    ) -> Result<usize, crate::EngineError> {
        let (queues, dropped, lag) = stats.take_minute();
        let delivery = stats.take_delivery();
        // The cluster series (every queue's lag) is read only for a minute
        // with queue rows: an idle broker reads nothing of every queue.
        let names = queue_names(process, &queues);
        let cluster = if names.is_empty() {
            Arc::default()
        } else {
            cluster.await
        };
        let minute = Minute {
            process,
            queues: &queues,
            names: &names,
            dropped,
            lag,
            delivery,
            cluster: &cluster,
            port,
            hostname,
        };
        let (broker, rows) = rows(self, &minute);
        let broker_id = format!("{hostname}:{port}");
        let written = async {
            let client = pool.get().await.map_err(queen_sql::SqlError::from)?;
            queen_sql::stats::write_minute(
                &**client,
                crate::naming::DEFAULT_TENANT,
                bucket(SystemTime::now()),
                &broker_id,
                &broker,
                &rows,
            )
            .await
        }
        .await;
        match written {
            Ok(count) => {
                self.written(&minute);
                Ok(usize::try_from(count).unwrap_or(0))
            }
            Err(error) => {
                stats.restore_minute(queues);
                stats.restore_delivery(delivery);
                Err(error.into())
            }
        }
    }
}

/// Write the statistics every `interval` until the engine is gone.
pub(crate) async fn run(observer: Weak<Observer>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(100)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let Some(observer) = observer.upgrade() else {
            return;
        };
        if observer.is_shutting_down() {
            return;
        }
        if let Err(error) = observer.write_stats().await {
            tracing::debug!(error = %crate::error_chain(&error), "statistics write failed; the counts wait for the next one");
        }
    }
}

/// Sample how late a timer fires, as the event-loop lag, until the engine
/// is gone.
pub(crate) async fn sample_lag(observer: Weak<Observer>) {
    loop {
        let asked = Instant::now();
        tokio::time::sleep(LAG_PERIOD).await;
        let late = asked.elapsed().saturating_sub(LAG_PERIOD);
        let Some(observer) = observer.upgrade() else {
            return;
        };
        observer.record_event_loop_lag(late);
    }
}
