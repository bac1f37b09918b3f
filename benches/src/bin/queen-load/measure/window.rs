//! A measured window: the cluster's position and the CPU clocks read around
//! it, and what the database wrote in it.

use std::future::Future;
use std::time::{Duration, Instant};

use super::cpu::{self, Usage};
use super::stats::{self, ClusterPoint, DbCounters, Segments};
use super::{ratio, to_f64_i};
use crate::error::Result;

/// What the cluster and the CPU clocks did during a measured window.
pub(crate) struct Measurement {
    /// When the window started.
    pub(crate) started: Instant,
    /// From the start to the moment the window's phase returned.
    pub(crate) seconds: f64,
    /// The cluster before and after the window.
    pub(crate) before: ClusterPoint,
    pub(crate) after: ClusterPoint,
    /// CPU cores used during the window, per process group.
    pub(crate) cpu_cores: Usage,
}

/// What the database did for a window that wrote messages: its transactions
/// and the segments written, in all and per message.
#[derive(Debug, serde::Serialize)]
pub(crate) struct DbWrites {
    /// `pg_stat_database.xact_commit` of the case's database over the window
    /// (every committed transaction, read-only ones included).
    pub(crate) commits: i64,
    pub(crate) commits_per_message: f64,
    pub(crate) rollbacks: i64,
    /// Transaction ids assigned cluster-wide over the window: transactions that wrote.
    pub(crate) write_xids: i64,
    pub(crate) write_xids_per_message: f64,
    /// `queen.log_segments` rows written in the window.
    pub(crate) segments: i64,
}

impl Measurement {
    /// Transaction ids assigned cluster-wide: transactions that wrote.
    pub(crate) fn write_xids(&self) -> i64 {
        self.after.next_xid - self.before.next_xid
    }

    /// WAL bytes written cluster-wide.
    pub(crate) fn wal_bytes(&self) -> i64 {
        self.after.wal_lsn - self.before.wal_lsn
    }

    /// Checkpoints started cluster-wide.
    pub(crate) fn checkpoints(&self) -> i64 {
        self.after.checkpoints - self.before.checkpoints
    }

    /// The database's writes for the window's `messages`, from its counters
    /// `before` and `after` the window and the window's `segments`.
    pub(crate) fn db_writes(
        &self,
        before: DbCounters,
        after: DbCounters,
        segments: &Segments,
        messages: f64,
    ) -> DbWrites {
        let commits = after.xact_commit - before.xact_commit;
        let write_xids = self.write_xids();
        DbWrites {
            commits,
            commits_per_message: ratio(to_f64_i(commits), messages),
            rollbacks: after.xact_rollback - before.xact_rollback,
            write_xids,
            write_xids_per_message: ratio(to_f64_i(write_xids), messages),
            segments: segments.rows,
        }
    }
}

/// Measure a window of `seconds`: read the cluster's position, then the CPU
/// clocks of the `broker_pids` and of PostgreSQL (under `postmaster`); run
/// `window` with its deadline; then read the CPU clocks, then the position
/// again. Returns what `window` returned and the measurement.
pub(crate) async fn measure<T, Fut>(
    admin: &tokio_postgres::Client,
    broker_pids: &[u32],
    postmaster: u32,
    seconds: f64,
    window: impl FnOnce(Instant) -> Fut,
) -> Result<(T, Measurement)>
where
    Fut: Future<Output = Result<T>>,
{
    let before = stats::cluster_point(admin).await?;
    let cpu_before = cpu::sample(broker_pids, postmaster);
    let started = Instant::now();
    let output = window(started + Duration::from_secs_f64(seconds)).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu_after = cpu::sample(broker_pids, postmaster);
    let after = stats::cluster_point(admin).await?;
    Ok((
        output,
        Measurement {
            started,
            seconds,
            before,
            after,
            cpu_cores: cpu::usage(&cpu_before, &cpu_after),
        },
    ))
}
