//! What every scenario shares: the [`Scenario`] trait, its subcommand's
//! arguments (the settings common to all, then its own), the measured
//! window's options, the loop over its cases, and the worker tasks of a
//! case, run in phases.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use crate::client::payload::{self, Bodies};
use crate::env::{CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::measure::cpu;
use crate::output::report::Report;

/// What a scenario runs with: the cluster, the settings every scenario
/// shares, and the request bodies.
#[derive(Clone, Copy)]
pub(crate) struct Run<'a> {
    pub(crate) env: &'a Env,
    pub(crate) common: &'a CommonArgs,
    pub(crate) bodies: &'a Arc<Bodies>,
}

/// A scenario's run, as `run` returns it.
pub(crate) type Running<'a> = Pin<Box<dyn Future<Output = Result<()>> + 'a>>;

/// A scenario, with its settings: it checks them, describes them for the
/// report, and runs, adding its rows (each [`crate::output::report::Row`]
/// renders itself) to the report.
pub(crate) trait Scenario {
    /// Its name in the settings and the progress log.
    fn name(&self) -> &'static str;

    /// Fail on settings that cannot run.
    fn validate(&self) -> Result<()>;

    /// The settings, for the report.
    fn settings(&self, bodies: &Bodies) -> serde_json::Value;

    /// False for a scenario that starts no broker.
    fn needs_broker(&self) -> bool {
        true
    }

    /// Run every case, adding each result to `report` as it finishes.
    fn run<'a>(&'a self, run: Run<'a>, report: &'a mut Report) -> Running<'a>;
}

/// Measured seconds per case: default, and with `--quick`.
const DURATION: f64 = 5.0;
const QUICK_DURATION: f64 = 2.0;

/// Implement [`Scenario`] for a scenario's options `$opts`: `$name`, its own
/// `validate` and `settings`, `needs_broker` when given, and `run` as
/// `$run`, an expression of the run context, the options and the report.
macro_rules! scenario {
    ($opts:ty, $name:literal, $(needs_broker: $broker:expr,)? |$ctx:ident, $this:ident, $report:ident| $run:expr) => {
        impl $crate::scenarios::case::Scenario for $opts {
            fn name(&self) -> &'static str {
                $name
            }

            fn validate(&self) -> $crate::error::Result<()> {
                Self::validate(self)
            }

            fn settings(&self, bodies: &$crate::client::payload::Bodies) -> serde_json::Value {
                Self::settings(self, bodies)
            }
            $(
            fn needs_broker(&self) -> bool {
                $broker
            }
            )?
            fn run<'a>(
                &'a self,
                $ctx: $crate::scenarios::case::Run<'a>,
                $report: &'a mut $crate::output::report::Report,
            ) -> $crate::scenarios::case::Running<'a> {
                let $this = self;
                Box::pin($run)
            }
        }
    };
}
pub(crate) use scenario;

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
