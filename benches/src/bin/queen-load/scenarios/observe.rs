//! The `observe` scenario: what observability costs push
//! throughput. Two kinds of case, alternated round by round so drift on the
//! machine hits both alike:
//!
//! - `quiet`: statistics rows off (`QUEEN_STATS_INTERVAL_MS=0`), nobody
//!   scraping;
//! - `observed`: statistics rows every second (`QUEEN_STATS_INTERVAL_MS=1000`,
//!   sixty times the default) and a scraper reading `/metrics/prometheus`
//!   every second.
//!
//! Per case, on its own database and broker: `--producers` producers push
//! batches of `--batch` messages to their own partition back to back for
//! `--duration` seconds. Reported: messages per second of each case, the
//! mean of each kind and the observed kind's cost as a fraction of the
//! quiet one's throughput.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use serde_json::json;

use super::case;
use crate::client::payload::Bodies;
use crate::client::Conn;
use crate::env;
use crate::env::{CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::measure::cpu;
use crate::output::report::{Report, Row};
use crate::output::table::{fixed, Table};

/// The observe scenario's settings.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ObserveOpts {
    /// Seconds each case is measured [default: 10, or 3 with --quick].
    #[arg(long, value_name = "SECS")]
    pub(crate) duration: Option<f64>,
    /// 3-second cases, 2 rounds.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Rounds of (quiet, observed) [default: 3, or 2 with --quick].
    #[arg(long, value_name = "N")]
    pub(crate) rounds: Option<usize>,
    /// Concurrent producers, each on its own partition.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub(crate) producers: usize,
    /// Messages per push request.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub(crate) batch: usize,
}

impl ObserveOpts {
    fn duration(&self) -> f64 {
        self.duration.unwrap_or(if self.quick { 3.0 } else { 10.0 })
    }

    fn rounds(&self) -> usize {
        self.rounds.unwrap_or(if self.quick { 2 } else { 3 })
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if !(self.duration().is_finite() && self.duration() > 0.0)
            || self.producers == 0
            || self.batch == 0
            || self.rounds() == 0
        {
            return Err(Error::msg(
                "--duration, --rounds, --producers and --batch must be more than 0",
            ));
        }
        Ok(())
    }

    pub(crate) fn settings(&self, _: &Bodies) -> serde_json::Value {
        json!({"duration_seconds": self.duration(), "rounds": self.rounds(),
               "producers": self.producers, "batch": self.batch})
    }
}

/// One case's figures.
#[derive(Debug, Serialize)]
pub(crate) struct ObserveResult {
    pub(crate) kind: &'static str,
    pub(crate) round: usize,
    pub(crate) seconds: f64,
    pub(crate) messages: u64,
    pub(crate) messages_per_second: f64,
    pub(crate) scrapes: u64,
    pub(crate) scrape_ms_max: f64,
    /// Broker CPU time per message stored, µs.
    pub(crate) broker_us_per_message: f64,
    /// PostgreSQL CPU time per message stored, µs.
    pub(crate) postgres_us_per_message: f64,
}

case::scenario!(ObserveOpts, "observe", |ctx, opts, report| run(
    ctx.env, ctx.common, opts, report
));

async fn run(
    env: &Env,
    common: &CommonArgs,
    opts: &ObserveOpts,
    report: &mut Report,
) -> Result<()> {
    for round in 0..opts.rounds() {
        // ABBA: every other round runs the observed case first, so a drift
        // of the machine across a round weighs on both kinds alike.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for observed in order {
            let result = run_case(env, common, opts, round, observed).await?;
            eprintln!(
                "queen-load: observe round {round}: {} {:.0} msg/s, broker {:.2} us/msg, \
                 postgres {:.2} us/msg ({} scrapes, slowest {:.1} ms)",
                result.kind,
                result.messages_per_second,
                result.broker_us_per_message,
                result.postgres_us_per_message,
                result.scrapes,
                result.scrape_ms_max
            );
            report.push(result);
        }
    }
    let rate = |r: &ObserveResult| r.messages_per_second;
    let (quiet, observed) = (
        mean(report.rows(), "quiet", rate),
        mean(report.rows(), "observed", rate),
    );
    eprintln!(
        "queen-load: observe: quiet {quiet:.0} msg/s, observed {observed:.0} msg/s, cost {:.1}%, \
         median of the rounds' costs {:.1}%",
        (1.0 - observed / quiet) * 100.0,
        median_cost(report.rows())
    );
    Ok(())
}

/// The mean of `field` over the cases of `kind`.
fn mean(results: &[ObserveResult], kind: &str, field: fn(&ObserveResult) -> f64) -> f64 {
    let values: Vec<f64> = results
        .iter()
        .filter(|r| r.kind == kind)
        .map(field)
        .collect();
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// The median over rounds of each round's throughput cost (1 - observed /
/// quiet), in percent: pairs within a round share the machine's state.
fn median_cost(results: &[ObserveResult]) -> f64 {
    let rounds = results.iter().map(|r| r.round).max().map_or(0, |n| n + 1);
    let mut costs: Vec<f64> = (0..rounds)
        .filter_map(|round| {
            let rate = |kind: &str| {
                results
                    .iter()
                    .find(|r| r.round == round && r.kind == kind)
                    .map(|r| r.messages_per_second)
            };
            Some((1.0 - rate("observed")? / rate("quiet")?) * 100.0)
        })
        .collect();
    costs.sort_by(f64::total_cmp);
    match costs.len() {
        0 => 0.0,
        n if n % 2 == 1 => costs[n / 2],
        n => (costs[n / 2 - 1] + costs[n / 2]) / 2.0,
    }
}

async fn run_case(
    env: &Env,
    common: &CommonArgs,
    opts: &ObserveOpts,
    round: usize,
    observed: bool,
) -> Result<ObserveResult> {
    let dbname = env
        .create_database(if observed { "observed" } else { "quiet" })
        .await?;
    let mut broker_common = common.clone();
    broker_common.broker_env.push((
        "QUEEN_STATS_INTERVAL_MS".to_owned(),
        if observed { "1000" } else { "0" }.to_owned(),
    ));
    let brokers = env.start_brokers(&broker_common, &dbname, 1).await?;
    let addr = brokers[0].addr();

    let stop = Arc::new(AtomicBool::new(false));
    let messages = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for producer in 0..opts.producers {
        let (stop, messages) = (Arc::clone(&stop), Arc::clone(&messages));
        let mut conn = Conn::connect(addr).await?;
        let items: Vec<_> = (0..opts.batch)
            .map(|i| {
                json!({"queue": "observe", "partition": format!("p{producer}"),
                            "payload": {"i": i, "pad": "x".repeat(200)}})
            })
            .collect();
        let body = Bytes::from(json!({"items": items}).to_string());
        let (items, batch) = (opts.batch, opts.batch as u64);
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                conn.push(body.clone(), items).await?;
                messages.fetch_add(batch, Ordering::Relaxed);
            }
            Ok::<(), Error>(())
        }));
    }
    let scraper = if observed {
        let stop = Arc::clone(&stop);
        let mut conn = Conn::connect(addr).await?;
        Some(tokio::spawn(async move {
            let (mut scrapes, mut slowest) = (0u64, Duration::ZERO);
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let started = Instant::now();
                let reply = conn.get("/metrics/prometheus").await?;
                if reply.status != 200 {
                    return Err(Error::msg(format!("scrape: {}", reply.snippet())));
                }
                slowest = slowest.max(started.elapsed());
                scrapes += 1;
            }
            Ok::<(u64, Duration), Error>((scrapes, slowest))
        }))
    } else {
        None
    };
    // Let connections and the first flushes settle before measuring.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pids = env::pids(&brokers);
    let postmaster = env.postmaster_pid()?;
    let before = messages.load(Ordering::Relaxed);
    let cpu_before = cpu::sample(&pids, postmaster);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(opts.duration())).await;
    let measured = messages.load(Ordering::Relaxed) - before;
    let cpu = cpu::usage(&cpu_before, &cpu::sample(&pids, postmaster));
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.context("a producer panicked")??;
    }
    let (scrapes, slowest) = match scraper {
        Some(task) => task.await.context("the scraper panicked")??,
        None => (0, Duration::ZERO),
    };
    env::stop_all(brokers).await?;
    env.drop_database(&dbname, common.keep).await?;
    Ok(ObserveResult {
        kind: if observed { "observed" } else { "quiet" },
        round,
        seconds,
        messages: measured,
        messages_per_second: measured as f64 / seconds,
        scrapes,
        scrape_ms_max: slowest.as_secs_f64() * 1000.0,
        broker_us_per_message: cpu.broker * seconds * 1e6 / (measured.max(1) as f64),
        postgres_us_per_message: cpu.postgres * seconds * 1e6 / (measured.max(1) as f64),
    })
}

impl Row for ObserveResult {
    const KEY: &'static str = "observe";

    fn title() -> Option<String> {
        Some(
            "observe: push throughput, quiet vs statistics rows and a scrape every second"
                .to_owned(),
        )
    }

    fn table(results: &[ObserveResult]) -> String {
        table(results)
    }
}

/// The observe table, with the two kinds' means and the cost.
fn table(results: &[ObserveResult]) -> String {
    let mut table = Table::new(&[
        ("round", 6),
        ("case", 9),
        ("msg/s", 10),
        ("broker us/msg", 14),
        ("pg us/msg", 10),
        ("scrapes", 8),
        ("max scrape ms", 14),
    ]);
    for r in results {
        table.row([
            r.round.to_string(),
            r.kind.to_owned(),
            fixed(r.messages_per_second, 0),
            fixed(r.broker_us_per_message, 2),
            fixed(r.postgres_us_per_message, 2),
            r.scrapes.to_string(),
            fixed(r.scrape_ms_max, 1),
        ]);
    }
    let mean = |kind: &str, field: fn(&ObserveResult) -> f64| mean(results, kind, field);
    let rate = |r: &ObserveResult| r.messages_per_second;
    let cpu = |r: &ObserveResult| r.broker_us_per_message + r.postgres_us_per_message;
    let mut out = table.finish();
    out.push_str(&format!(
        "mean: quiet {:.0} msg/s, observed {:.0} msg/s: throughput cost {:.1}% (median over \
         rounds {:.1}%; target < 2%); CPU per message (broker + PostgreSQL) {:.2} vs {:.2} us: \
         {:+.1}%\n",
        mean("quiet", rate),
        mean("observed", rate),
        (1.0 - mean("observed", rate) / mean("quiet", rate)) * 100.0,
        median_cost(results),
        mean("quiet", cpu),
        mean("observed", cpu),
        (mean("observed", cpu) / mean("quiet", cpu) - 1.0) * 100.0
    ));
    out
}
