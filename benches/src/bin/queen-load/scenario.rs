//! What every scenario shares: its subcommand's arguments (the settings
//! common to all, then its own), the measured window's options, the loop over
//! its cases, and the pieces of a case's measurement: worker tasks run in
//! phases, the per-second timeline, and the counters read around the window.

use std::future::Future;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use crate::client::payload::{self, Bodies};
use crate::env::CommonArgs;
use crate::error::{Context, Error, Result};
use crate::measure::cpu::{self, Usage};
use crate::measure::stats::{self, ClusterPoint, DbCounters, Segments};
use crate::report::ratio;

/// Measured seconds per case: default, and with `--quick`.
const DURATION: f64 = 5.0;
const QUICK_DURATION: f64 = 2.0;

/// Arguments of a scenario's subcommand: the settings every scenario shares,
/// then the scenario's own.
#[derive(Debug, clap::Args)]
pub(crate) struct ScenarioArgs<O: clap::Args> {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    #[command(flatten)]
    pub(crate) opts: O,
}

/// The help of `--warmup` and `--quick`, which each scenario words for what
/// it does in them.
pub(crate) trait WindowHelp {
    /// `--warmup`.
    const WARMUP: &'static str;
    /// `--quick`.
    const QUICK: &'static str;
}

/// The options of the measured window, first among every scenario's own;
/// `H` (the scenario's options) words the help of `--warmup` and `--quick`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Window<H: WindowHelp> {
    /// Seconds each case is measured [default: 5, or 2 with --quick].
    #[arg(long, value_name = "SECS")]
    pub(crate) duration: Option<f64>,
    #[arg(long, value_name = "SECS", default_value_t = 1.0, help = H::WARMUP)]
    pub(crate) warmup: f64,
    #[arg(long, help = H::QUICK)]
    pub(crate) quick: bool,
    #[arg(skip)]
    help: PhantomData<H>,
}

impl<H: WindowHelp> Window<H> {
    /// The window `all` runs with.
    pub(crate) fn for_all(quick: bool, duration: Option<f64>) -> Window<H> {
        Window {
            duration,
            warmup: 1.0,
            quick,
            help: PhantomData,
        }
    }

    /// Measured seconds per case.
    pub(crate) fn duration(&self) -> f64 {
        self.duration
            .unwrap_or(if self.quick { QUICK_DURATION } else { DURATION })
    }

    /// `--duration`, `--warmup` and the scenario's other `seconds` (name and
    /// value) must be numbers of seconds >= 0, and the duration more than 0.
    pub(crate) fn validate(&self, seconds: &[(&str, f64)]) -> Result<()> {
        let window = [("duration", self.duration()), ("warmup", self.warmup)];
        for &(name, value) in window.iter().chain(seconds) {
            if !(value.is_finite() && value >= 0.0) {
                return Err(Error::msg(format!(
                    "--{name} must be a number of seconds >= 0"
                )));
            }
        }
        if self.duration() == 0.0 {
            return Err(Error::msg("--duration must be more than 0"));
        }
        Ok(())
    }

    /// A scenario's settings, for the report: the window's, the names of the
    /// `cases` and the payload size, added to the scenario's `own` (an object).
    pub(crate) fn settings(
        &self,
        cases: impl IntoIterator<Item = String>,
        bodies: &Bodies,
        mut own: serde_json::Value,
    ) -> serde_json::Value {
        let shared = serde_json::json!({
            "duration_seconds": self.duration(),
            "warmup_seconds": self.warmup,
            "quick": self.quick,
            "cases": cases.into_iter().collect::<Vec<_>>(),
            "payload_bytes": payload::payload_len(bodies),
        });
        if let (Some(own), serde_json::Value::Object(shared)) = (own.as_object_mut(), shared) {
            own.extend(shared);
        }
        own
    }
}

/// One case of a scenario.
pub(crate) trait Case: Copy {
    /// Its name in the tables and the report.
    fn name(self) -> String;
}

/// Run `cases` in order, each with `run` until its window was not disturbed
/// (see [`cpu::least_disturbed`]), and hand every result to `done`; stop at
/// the first failing case.
pub(crate) async fn run_cases<C, R, Fut>(
    scenario: &str,
    common: &CommonArgs,
    cases: &[C],
    mut run: impl FnMut(C) -> Fut,
    mut done: impl FnMut(C, R),
) -> Result<()>
where
    C: Case,
    R: cpu::Measured,
    Fut: Future<Output = Result<R>>,
{
    for (index, &case) in cases.iter().enumerate() {
        eprintln!(
            "queen-load: {scenario} case {}/{} {}",
            index + 1,
            cases.len(),
            case.name()
        );
        let result = cpu::least_disturbed(common.max_other_cpu, common.retries, || run(case))
            .await
            .map_err(|error| error.wrap(format!("{scenario} case {}", case.name())))?;
        done(case, result);
    }
    Ok(())
}

/// What the tasks of a phase counted, added up over the tasks.
pub(crate) trait Merge: Default {
    /// Add `other`'s counts to these.
    fn merge(&mut self, other: Self);
}

/// Run one task per worker (`task(worker, started)`, every one given the
/// moment the phase started), wait for all of them, and hand the workers
/// back, in order, for the next phase, with what they counted. `what` names
/// a task in the error when one panics.
pub(crate) async fn phase<W, S, Fut>(
    workers: Vec<W>,
    what: &str,
    mut task: impl FnMut(W, Instant) -> Fut,
) -> Result<(Vec<W>, S)>
where
    W: Send + 'static,
    S: Merge + Send + 'static,
    Fut: Future<Output = (W, S)> + Send + 'static,
{
    let started = Instant::now();
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|worker| tokio::spawn(task(worker, started)))
        .collect();
    let mut stats = S::default();
    let mut workers = Vec::with_capacity(tasks.len());
    for task in tasks {
        let (worker, worker_stats) = task.await.context(what)?;
        stats.merge(worker_stats);
        workers.push(worker);
    }
    Ok((workers, stats))
}

/// The requests of a phase's tasks that failed; a task stops at its first.
#[derive(Debug, Default)]
pub(crate) struct Failures {
    count: u64,
    first: Option<String>,
}

impl Failures {
    /// Count a failed request.
    pub(crate) fn record(&mut self, error: &Error) {
        self.count += 1;
        self.first.get_or_insert_with(|| error.to_string());
    }

    /// Add another task's failures; the earlier task's first one stays first.
    pub(crate) fn merge(&mut self, other: Failures) {
        self.count += other.count;
        if self.first.is_none() {
            self.first = other.first;
        }
    }

    /// Fail if any `what` (e.g. `push requests`) failed during the `phase`;
    /// `succeeded` says how many did not.
    pub(crate) fn check(
        &self,
        what: &str,
        phase: &str,
        succeeded: std::fmt::Arguments<'_>,
    ) -> Result<()> {
        if self.count == 0 {
            return Ok(());
        }
        Err(Error::msg(format!(
            "{} failed {what} during the {phase} ({succeeded}); the first: {}",
            self.count,
            self.first.as_deref().unwrap_or("?")
        )))
    }
}

/// Messages completed in each second since a phase started.
#[derive(Debug, Default)]
pub(crate) struct Timeline(Vec<u64>);

impl Timeline {
    /// Count `messages` completed at `at`, in the phase that began at `started`.
    pub(crate) fn add(&mut self, started: Instant, at: Instant, messages: u64) {
        let second = usize::try_from(at.duration_since(started).as_secs()).unwrap_or(usize::MAX);
        if self.0.len() <= second {
            self.0.resize(second.saturating_add(1), 0);
        }
        if let Some(count) = self.0.get_mut(second) {
            *count += messages;
        }
    }

    /// Add another task's counts, second by second.
    pub(crate) fn merge(&mut self, other: Timeline) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (total, count) in self.0.iter_mut().zip(other.0) {
            *total += count;
        }
    }

    /// The counts, second by second.
    pub(crate) fn into_vec(self) -> Vec<u64> {
        self.0
    }
}

/// A latency sample: whole microseconds, saturating.
pub(crate) fn micros(elapsed: Duration) -> u32 {
    u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX)
}

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

/// Counters to float for rates; exact below 2^53, far beyond any count here.
pub(crate) fn to_f64(value: u64) -> f64 {
    value as f64
}

/// [`to_f64`] for PostgreSQL's signed counters.
pub(crate) fn to_f64_i(value: i64) -> f64 {
    value as f64
}

/// Fail unless `value` serialises to an object with exactly the top-level
/// `fields`, in this order (the report's layout).
#[cfg(test)]
pub(crate) fn assert_fields(value: &impl serde::Serialize, fields: &[&str]) {
    let json = serde_json::to_string(value).unwrap();
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&json).unwrap();
    assert_eq!(object.len(), fields.len(), "{json}");
    let positions: Vec<usize> = fields
        .iter()
        .map(|field| json.find(&format!("\"{field}\":")).unwrap())
        .collect();
    assert!(positions.is_sorted(), "{json}");
}
