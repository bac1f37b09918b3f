//! `queen-load`: Queen's end-to-end load generator.
//!
//! It measures the real thing: the release `queen-server` binary, run as a child
//! process against a throwaway but *durable* PostgreSQL cluster (`fsync` and
//! `synchronous_commit` on), driven over HTTP/1.1 keep-alive connections, one
//! connection per producer or consumer task.
//!
//! Each scenario is a subcommand; `all` runs every one on one cluster and
//! adds what only a whole run can say (push as a fraction of the ceiling,
//! issue 6's targets):
//!
//! - `push` (`push.rs`): push throughput over batch x partitions x producers,
//!   and the same pushes through several brokers;
//! - `ceiling` (`ceiling.rs`): the push's segments written straight into
//!   PostgreSQL, no broker: what the database alone absorbs;
//! - `pop` (`pop.rs`): consume throughput with `autoAck` and with batch acks,
//!   and an exactly-once check of every message;
//! - `latency` (`latency.rs`): single-message push-to-pop latency at a fixed
//!   low rate;
//! - `soak` (`soak.rs`, not part of `all`): minutes of pushes and consumes
//!   with retention sweeping every few seconds, sampling the storage sizes;
//! - `streams` (`streams.rs`, not part of `all`): stream cycles per second
//!   with 1, 10 and 100 state ops per cycle;
//! - `observe` (`observe.rs`, not part of `all`): push throughput with and
//!   without statistics rows and a scrape every second;
//! - `scale` (`scale.rs`, `scale_soak.rs`, not part of `all`): issue 20's
//!   cases at the scale the design claims.
//!
//! Shared pieces: `env.rs` (cluster and broker lifecycle), `http.rs` (one
//! keep-alive connection), `payload.rs` (request bodies), `matrix.rs` (the
//! push and ceiling shapes), `stats.rs` (PostgreSQL counters), `cpu.rs` (CPU
//! time per process group), `report.rs` (tables and JSON), `scenario.rs`
//! (each scenario's arguments, window, case loop and measurement).
//!
//! Usually run as `cargo xtask bench [scenario]`, which builds both binaries
//! in release mode first.

mod ceiling;
mod client;

mod env;
mod error;

mod latency;
mod matrix;
mod measure;
mod observe;

mod pop;
mod push;
mod report;
mod scale;
mod scale_million;
mod scale_parked;
mod scale_queues;
mod scale_soak;
mod scale_spread;
mod scenario;
mod soak;

mod streams;

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use crate::client::payload::Bodies;
use crate::env::{CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::report::Report;
use crate::scenario::ScenarioArgs;

/// Queen's end-to-end load generator.
#[derive(Debug, Parser)]
#[command(name = "queen-load", about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Push throughput: batch size x partitions x producers (x brokers), one
    /// fresh database and broker(s) per case.
    Push(ScenarioArgs<push::PushOpts>),
    /// PostgreSQL alone: the push's segments inserted with one statement per
    /// flush, no broker, same shapes as `push`.
    Ceiling(ScenarioArgs<ceiling::CeilingOpts>),
    /// Consume throughput (autoAck, and pop + batch ack) with an exactly-once
    /// check.
    Pop(ScenarioArgs<pop::PopOpts>),
    /// Single-message push-to-pop latency at a fixed low rate.
    Latency(ScenarioArgs<latency::LatencyOpts>),
    /// Minutes of pushes and consumes with retention sweeping every few
    /// seconds: log_segments' heap and TOAST sizes over time (not in `all`).
    Soak(ScenarioArgs<soak::SoakOpts>),
    /// Stream cycles per second with 1, 10 and 100 state ops per cycle (not
    /// in `all`).
    Streams(ScenarioArgs<streams::StreamsOpts>),
    /// Push throughput with and without statistics rows every second and a
    /// scrape every second (not in `all`).
    Observe(ScenarioArgs<observe::ObserveOpts>),
    /// Every scenario on one cluster: ceiling, push, pop, latency; then push
    /// as a ratio to the ceiling and issue 6's targets.
    All(AllArgs),
    /// Push, consume and cross-broker latency with 1, 2 and 3 brokers on one
    /// database (not in `all`).
    Mesh(AllArgs),
    /// Issue 20's scale cases: a million partitions, ten thousand queues, ten
    /// thousand parked consumers, single-message pushes over many
    /// partitions, and the long soak (not in `all`).
    Scale(ScenarioArgs<scale::ScaleOpts>),
}

/// Arguments of `queen-load all`: each scenario runs with its defaults.
#[derive(Debug, clap::Args)]
struct AllArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Every scenario's reduced set of cases, with 2-second windows.
    #[arg(long)]
    quick: bool,
    /// Seconds each case is measured [default: 5, or 2 with --quick].
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
}

/// One scenario of a run, with its settings.
enum Part {
    Ceiling(ceiling::CeilingOpts),
    Push(push::PushOpts),
    Pop(pop::PopOpts),
    Latency(latency::LatencyOpts),
    Soak(soak::SoakOpts),
    Streams(streams::StreamsOpts),
    Observe(observe::ObserveOpts),
    Scale(scale::ScaleOpts),
}

impl Part {
    fn name(&self) -> &'static str {
        match self {
            Part::Ceiling(_) => "ceiling",
            Part::Push(_) => "push",
            Part::Pop(_) => "pop",
            Part::Latency(_) => "latency",
            Part::Soak(_) => "soak",
            Part::Streams(_) => "streams",
            Part::Observe(_) => "observe",
            Part::Scale(_) => "scale",
        }
    }

    fn validate(&self) -> Result<()> {
        match self {
            Part::Ceiling(opts) => opts.validate(),
            Part::Push(opts) => opts.validate(),
            Part::Pop(opts) => opts.validate(),
            Part::Latency(opts) => opts.validate(),
            Part::Soak(opts) => opts.validate(),
            Part::Streams(opts) => opts.validate(),
            Part::Observe(opts) => opts.validate(),
            Part::Scale(opts) => opts.validate(),
        }
    }

    fn settings(&self, bodies: &Bodies) -> serde_json::Value {
        match self {
            Part::Ceiling(opts) => opts.settings(bodies),
            Part::Push(opts) => opts.settings(bodies),
            Part::Pop(opts) => opts.settings(bodies),
            Part::Latency(opts) => opts.settings(bodies),
            Part::Soak(opts) => opts.settings(),
            Part::Streams(opts) => opts.settings(),
            Part::Observe(opts) => opts.settings(),
            Part::Scale(opts) => opts.settings(),
        }
    }

    async fn run(
        &self,
        env: &Env,
        common: &CommonArgs,
        bodies: &Arc<Bodies>,
        report: &mut Report,
    ) -> Result<()> {
        match self {
            Part::Ceiling(opts) => ceiling::run(env, common, opts, bodies, report).await,
            Part::Push(opts) => push::run(env, common, opts, bodies, report).await,
            Part::Pop(opts) => pop::run(env, common, opts, bodies, report).await,
            Part::Latency(opts) => latency::run(env, common, opts, bodies, report).await,
            Part::Soak(opts) => soak::run(env, common, opts, report).await,
            Part::Streams(opts) => streams::run(env, common, opts, report).await,
            Part::Observe(opts) => observe::run(env, common, opts, report).await,
            Part::Scale(opts) => scale::run(env, common, opts, report).await,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("queen-load: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (scenario, common, parts) = match cli.command {
        Command::Push(args) => ("push", args.common, vec![Part::Push(args.opts)]),
        Command::Ceiling(args) => ("ceiling", args.common, vec![Part::Ceiling(args.opts)]),
        Command::Pop(args) => ("pop", args.common, vec![Part::Pop(args.opts)]),
        Command::Latency(args) => ("latency", args.common, vec![Part::Latency(args.opts)]),
        Command::Soak(args) => ("soak", args.common, vec![Part::Soak(args.opts)]),
        Command::Streams(args) => ("streams", args.common, vec![Part::Streams(args.opts)]),
        Command::Observe(args) => ("observe", args.common, vec![Part::Observe(args.opts)]),
        Command::Scale(args) => ("scale", args.common, vec![Part::Scale(args.opts)]),
        Command::Mesh(args) => {
            let brokers = vec![1, 2, 3];
            let mut push = push::PushOpts::for_all(args.quick, args.duration);
            push.brokers.clone_from(&brokers);
            // Single messages and batches of 100 over 100 partitions, 16
            // producers spread over the brokers.
            push.axes = matrix::Axes {
                batches: vec![1, 100],
                partitions: vec![100],
                producers: vec![16],
            };
            let mut pop = pop::PopOpts::for_all(args.quick, args.duration);
            pop.brokers.clone_from(&brokers);
            pop.consumers = vec![32];
            pop.modes = vec![pop::Mode::Ack];
            let mut latency = latency::LatencyOpts::for_all(args.quick, args.duration);
            latency.brokers = brokers;
            latency.rates = vec![100];
            latency.partitions = vec![1];
            latency.modes = vec![latency::Mode::Auto];
            (
                "mesh",
                args.common,
                vec![Part::Push(push), Part::Pop(pop), Part::Latency(latency)],
            )
        }
        Command::All(args) => (
            "all",
            args.common,
            vec![
                Part::Ceiling(ceiling::CeilingOpts::for_all(args.quick, args.duration)),
                Part::Push(push::PushOpts::for_all(args.quick, args.duration)),
                Part::Pop(pop::PopOpts::for_all(args.quick, args.duration)),
                Part::Latency(latency::LatencyOpts::for_all(args.quick, args.duration)),
            ],
        ),
    };
    match runtime.block_on(execute(scenario, &common, &parts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("queen-load: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Run `parts` in order on one cluster, then print the tables and the JSON
/// report. A failing scenario does not stop the next one; the run fails at
/// the end if any did.
async fn execute(scenario: &'static str, common: &CommonArgs, parts: &[Part]) -> Result<()> {
    for part in parts {
        part.validate()?;
    }
    if !(common.max_other_cpu.is_finite() && common.max_other_cpu >= 0.0) {
        return Err(Error::msg("--max-other-cpu must be a number of cores >= 0"));
    }
    if parts.iter().any(|part| !matches!(part, Part::Ceiling(_))) && !common.broker.is_file() {
        return Err(Error::msg(format!(
            "--broker {}: no such file",
            common.broker.display()
        )));
    }
    let started_at = std::time::SystemTime::now();
    let mut env = Env::start(&common.work_dir, &common.pg_settings).await?;
    let machine = report::machine(&env, &common.broker).await?;
    let bodies = Arc::new(Bodies::generate());
    let mut report = Report::new(scenario, started_at, machine, common.max_other_cpu);
    report
        .settings
        .insert("mesh".to_owned(), serde_json::json!(common.mesh));
    report.settings.insert(
        "postgresql".to_owned(),
        measure::stats::server_settings(&env.admin, &common.pg_settings).await?,
    );
    let mut failed = Vec::new();
    for part in parts {
        report
            .settings
            .insert(part.name().to_owned(), part.settings(&bodies));
        if let Err(error) = part.run(&env, common, &bodies, &mut report).await {
            eprintln!("queen-load: {} failed: {error}", part.name());
            report.failures.push(format!("{}: {error}", part.name()));
            failed.push(part.name());
        }
    }
    report.derive();
    if !failed.is_empty() || common.keep {
        env.keep_dir();
    }
    drop(env);
    if !report.is_empty() {
        println!("{}", report.table());
        let json = report.json()?;
        if let Some(path) = &common.json {
            std::fs::write(path, format!("{json}\n"))
                .with_context(|| format!("write {}", path.display()))?;
            eprintln!("queen-load: JSON report written to {}", path.display());
        }
        println!("{json}");
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::msg(format!("failed: {}", failed.join(", "))))
    }
}
