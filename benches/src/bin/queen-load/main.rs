//! `queen-load`: Queen's end-to-end load generator.
//!
//! It measures the real thing: the release `queen-server` binary, run as a child
//! process against a throwaway but *durable* PostgreSQL cluster (`fsync` and
//! `synchronous_commit` on), driven over HTTP/1.1 keep-alive connections, one
//! connection per producer or consumer task.
//!
//! Each scenario is a subcommand; `all` runs ceiling, push, pop and latency
//! on one cluster and adds what only a whole run can say (push as a fraction
//! of the ceiling, and the targets the figures are held to). Usually run as
//! `cargo xtask bench [scenario]`, which builds both binaries in release mode
//! first.
//!
//! The layers, each importing only those below it:
//!
//! - `error.rs`: the one error type;
//! - `client/`: one keep-alive connection and the broker's calls on it, typed
//!   (push, pop, ack, configure), and the request bodies;
//! - `env.rs`: the cluster and the broker processes (it asks a broker's
//!   `/health` through the client);
//! - `measure/`: latencies, the per-second timeline, PostgreSQL's counters,
//!   CPU per process group, the broker's memory, the machine; it reads the
//!   broker through the client;
//! - `output/`: tables, SVG plots, and the report, whose sections are rows
//!   that render and serialise themselves; it imports no scenario;
//! - `scenarios/`: one file (or directory) per workload, each a [`Scenario`]
//!   whose result rows are report sections (`case.rs`: what they share);
//! - `derived.rs`: push against the ceiling and the targets, read from the
//!   report's sections; nothing imports it;
//! - this file: the command line, and the run of its scenarios on one
//!   cluster.

mod client;
mod derived;
mod env;
mod error;
mod measure;
mod output;
mod scenarios;

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use crate::client::payload::Bodies;
use crate::env::{CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::output::report::Report;
use crate::scenarios::case::{Run, Scenario, ScenarioArgs};
use crate::scenarios::ceiling::CeilingOpts;
use crate::scenarios::latency::LatencyOpts;
use crate::scenarios::observe::ObserveOpts;
use crate::scenarios::pop::PopOpts;
use crate::scenarios::push::PushOpts;
use crate::scenarios::scale::ScaleOpts;
use crate::scenarios::soak::SoakOpts;
use crate::scenarios::streams::StreamsOpts;

/// The report's sections, in the order it shows them (tables and JSON).
const SECTIONS: &[&str] = &[
    "push",
    "ceiling",
    "push_vs_ceiling",
    "pop",
    "latency",
    "soak",
    "streams",
    "scale",
    "observe",
    "targets",
];

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
    Push(ScenarioArgs<PushOpts>),
    /// PostgreSQL alone: the push's segments inserted with one statement per
    /// flush, no broker, same shapes as `push`.
    Ceiling(ScenarioArgs<CeilingOpts>),
    /// Consume throughput (autoAck, and pop + batch ack) with an exactly-once
    /// check.
    Pop(ScenarioArgs<PopOpts>),
    /// Single-message push-to-pop latency at a fixed low rate.
    Latency(ScenarioArgs<LatencyOpts>),
    /// Minutes of pushes and consumes with retention sweeping every few
    /// seconds: log_segments' heap and TOAST sizes over time (not in `all`).
    Soak(ScenarioArgs<SoakOpts>),
    /// Stream cycles per second with 1, 10 and 100 state ops per cycle (not
    /// in `all`).
    Streams(ScenarioArgs<StreamsOpts>),
    /// Push throughput with and without statistics rows every second and a
    /// scrape every second (not in `all`).
    Observe(ScenarioArgs<ObserveOpts>),
    /// Every scenario on one cluster: ceiling, push, pop, latency; then push
    /// as a ratio to the ceiling and the targets (push / ceiling, consume /
    /// push, push-to-pop latency, 10,000 / 100 partitions).
    All(AllArgs),
    /// Push, consume and cross-broker latency with 1, 2 and 3 brokers on one
    /// database (not in `all`).
    Mesh(AllArgs),
    /// The design at the scale it claims: a million partitions, ten thousand
    /// queues, ten thousand parked consumers, single-message pushes over many
    /// partitions, and the long soak (not in `all`).
    Scale(ScenarioArgs<ScaleOpts>),
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
    let (scenario, common, parts): (_, _, Vec<Box<dyn Scenario>>) = match cli.command {
        Command::Push(args) => ("push", args.common, vec![Box::new(args.opts)]),
        Command::Ceiling(args) => ("ceiling", args.common, vec![Box::new(args.opts)]),
        Command::Pop(args) => ("pop", args.common, vec![Box::new(args.opts)]),
        Command::Latency(args) => ("latency", args.common, vec![Box::new(args.opts)]),
        Command::Soak(args) => ("soak", args.common, vec![Box::new(args.opts)]),
        Command::Streams(args) => ("streams", args.common, vec![Box::new(args.opts)]),
        Command::Observe(args) => ("observe", args.common, vec![Box::new(args.opts)]),
        Command::Scale(args) => ("scale", args.common, vec![Box::new(args.opts)]),
        Command::Mesh(args) => (
            "mesh",
            args.common,
            scenarios::mesh(args.quick, args.duration),
        ),
        Command::All(args) => (
            "all",
            args.common,
            scenarios::all(args.quick, args.duration),
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
async fn execute(
    scenario: &'static str,
    common: &CommonArgs,
    parts: &[Box<dyn Scenario>],
) -> Result<()> {
    for part in parts {
        part.validate()?;
    }
    if !(common.max_other_cpu.is_finite() && common.max_other_cpu >= 0.0) {
        return Err(Error::msg("--max-other-cpu must be a number of cores >= 0"));
    }
    if parts.iter().any(|part| part.needs_broker()) && !common.broker.is_file() {
        return Err(Error::msg(format!(
            "--broker {}: no such file",
            common.broker.display()
        )));
    }
    let started_at = std::time::SystemTime::now();
    let mut env = Env::start(&common.work_dir, &common.pg_settings).await?;
    let machine = measure::machine::machine(&env.admin, &common.broker).await?;
    let bodies = Arc::new(Bodies::generate());
    let mut report = Report::new(
        scenario,
        started_at,
        machine,
        common.max_other_cpu,
        SECTIONS,
    );
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
        let run = Run {
            env: &env,
            common,
            bodies: &bodies,
        };
        if let Err(error) = part.run(run, &mut report).await {
            eprintln!("queen-load: {} failed: {error}", part.name());
            report.failures.push(format!("{}: {error}", part.name()));
            failed.push(part.name());
        }
    }
    derived::derive(&mut report);
    report.note_disturbed();
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
