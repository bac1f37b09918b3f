//! The cluster series of `/metrics` (every queue's partitions and live
//! messages, every group's lag: one database call) and their cache.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use queen_sql::stats::ClusterRow;

/// How long the cluster series are served from cache, at least (see
/// `ClusterCache`).
pub const CLUSTER_TTL: Duration = Duration::from_secs(5);
/// How long the first caller waits for the cluster series' first read; and
/// how overdue a copy may be before it no longer counts as up to date.
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a caller waits for a read it found due, when there is a copy to
/// answer with: a scrape answers within this (plus its own work) however
/// long the read takes.
pub const CLUSTER_WAIT: Duration = Duration::from_millis(40);
/// The longest one read of the series may take before it counts as failed.
pub const CLUSTER_READ_LIMIT: Duration = Duration::from_secs(60);

/// The cluster series: what PostgreSQL says about every queue and group.
#[derive(Debug, Clone, Default)]
pub struct ClusterMetrics {
    /// When they were read.
    pub read_at: Option<SystemTime>,
    /// The rows of `queen.metrics_cluster_v3`, each queue named by its
    /// `naming::queue_key`.
    pub rows: Vec<ClusterRow>,
}

impl ClusterMetrics {
    /// (messages behind, seconds behind) of the most lagging group of
    /// `queue`, if it has any group.
    pub fn queue_lag(&self, queue: &str) -> Option<(i64, i64)> {
        self.rows
            .iter()
            .filter_map(|row| match row {
                ClusterRow::Group {
                    queue: name,
                    lag_messages,
                    lag_seconds,
                    ..
                } if name == queue => Some((*lag_messages, *lag_seconds)),
                _ => None,
            })
            .reduce(|a, b| (a.0.max(b.0), a.1.max(b.1)))
    }
}

/// The cached cluster series. One read at a time, in its own task: a caller
/// that finds the copy older than its refresh interval starts one and waits
/// for it at most [`CLUSTER_WAIT`] ([`CLUSTER_TIMEOUT`] when there is no
/// copy yet), then answers with whatever the cache holds; a read that takes
/// longer still lands in the cache for the next caller. The interval is
/// [`CLUSTER_TTL`], or ten times the last read's duration when that is
/// longer, so a series that is costly to read (a million partitions) is read
/// at most a tenth of the time, and a scrape never waits for it.
#[derive(Debug, Default)]
pub(crate) struct ClusterCache {
    state: Mutex<CacheState>,
    /// Wakes the callers waiting on a read.
    done: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct CacheState {
    /// The last good read and when it ended.
    latest: Option<(Instant, Arc<ClusterMetrics>)>,
    /// How long `latest` is served before a read starts (zero: the default,
    /// [`CLUSTER_TTL`]).
    interval: Duration,
    /// A read is running.
    reading: bool,
    /// The last read failed or timed out.
    failed: bool,
}

impl CacheState {
    fn interval(&self) -> Duration {
        self.interval.max(CLUSTER_TTL)
    }
}

/// The refresh interval after a read that took `took`.
fn interval_after(took: Duration) -> Duration {
    took.saturating_mul(10).max(CLUSTER_TTL)
}

impl ClusterCache {
    /// The cluster series and whether they are up to date: the last read
    /// succeeded and the copy is at most its interval plus
    /// [`CLUSTER_TIMEOUT`] old (an empty series, `false`, before the first
    /// read). See the type's docs for when this waits.
    pub(crate) async fn get(
        self: &Arc<Self>,
        pool: &deadpool_postgres::Pool,
    ) -> (Arc<ClusterMetrics>, bool) {
        // Registered before the state is looked at, so a read ending in
        // between still wakes this caller.
        let done = self.done.notified();
        let (start, wait) = {
            let mut state = self.state.lock();
            let interval = state.interval();
            match &state.latest {
                Some((at, metrics)) if at.elapsed() < interval => {
                    return (Arc::clone(metrics), !state.failed);
                }
                latest => {
                    let wait = if latest.is_some() {
                        CLUSTER_WAIT
                    } else {
                        CLUSTER_TIMEOUT
                    };
                    let start = !state.reading;
                    state.reading = true;
                    (start, wait)
                }
            }
        };
        if start {
            tokio::spawn(Arc::clone(self).read(pool.clone()));
        }
        let _ = tokio::time::timeout(wait, done).await;
        self.served()
    }

    fn served(&self) -> (Arc<ClusterMetrics>, bool) {
        let state = self.state.lock();
        match &state.latest {
            Some((at, metrics)) => (
                Arc::clone(metrics),
                !state.failed && at.elapsed() < state.interval() + CLUSTER_TIMEOUT,
            ),
            None => (Arc::default(), false),
        }
    }

    /// One read of the series (at most [`CLUSTER_READ_LIMIT`]) into the cache.
    async fn read(self: Arc<Self>, pool: deadpool_postgres::Pool) {
        let started = Instant::now();
        let read = tokio::time::timeout(CLUSTER_READ_LIMIT, async {
            let client = pool.get().await.map_err(queen_sql::SqlError::from)?;
            queen_sql::stats::cluster_metrics(&**client).await
        })
        .await;
        let took = started.elapsed();
        let rows = match read {
            Ok(Ok(rows)) => Some(rows),
            Ok(Err(error)) => {
                tracing::debug!(error = %queen_sql::error_chain(&error), "cluster metrics unavailable");
                None
            }
            Err(_elapsed) => {
                tracing::debug!(?took, "cluster metrics read timed out");
                None
            }
        };
        // In memory a queue is known by its key (tenant and name).
        let metrics = rows.map(|rows| {
            let rows = rows
                .into_iter()
                .map(|(tenant, mut row)| {
                    let (ClusterRow::Queue { queue, .. } | ClusterRow::Group { queue, .. }) =
                        &mut row;
                    *queue = crate::naming::queue_key(&tenant, queue).into_owned();
                    row
                })
                .collect();
            Arc::new(ClusterMetrics {
                read_at: Some(SystemTime::now()),
                rows,
            })
        });
        {
            let mut state = self.state.lock();
            state.reading = false;
            state.failed = metrics.is_none();
            if let Some(metrics) = metrics {
                state.latest = Some((Instant::now(), metrics));
                state.interval = interval_after(took);
            }
        }
        self.done.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_costly_cluster_read_is_repeated_at_most_a_tenth_of_the_time() {
        assert_eq!(interval_after(Duration::from_millis(80)), CLUSTER_TTL);
        assert_eq!(
            interval_after(Duration::from_secs(3)),
            Duration::from_secs(30)
        );
        let state = CacheState::default();
        assert_eq!(state.interval(), CLUSTER_TTL);
    }
}
