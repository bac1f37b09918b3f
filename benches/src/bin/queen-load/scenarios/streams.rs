//! The `streams` scenario: `POST /streams/v1/cycle` throughput
//! with 1, 10 and 100 state ops per cycle.
//!
//! Per case, on its own database and broker: one registered query; each of
//! `--clients` clients commits cycles back to back for `--duration` seconds,
//! each cycle upserting `ops` keys of its own partition (a client's keys
//! cycle over 1,000, so rows are updated in place as a window operator's
//! are) and pushing one sink message; no source ack (the pop path has its
//! own scenarios). Reported: cycles and state ops per second, and the cycle
//! round trip's p50 and p99.

use std::sync::atomic::{AtomicBool, Ordering};
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
use crate::measure::Latency;
use crate::output::report::{Report, Row};
use crate::output::table::{fixed, Table};

/// The streams scenario's settings.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StreamsOpts {
    /// Seconds each case is measured [default: 10, or 3 with --quick].
    #[arg(long, value_name = "SECS")]
    pub(crate) duration: Option<f64>,
    /// 3-second cases.
    #[arg(long)]
    pub(crate) quick: bool,
    /// State ops per cycle, comma-separated [default: 1,10,100].
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    pub(crate) ops: Vec<usize>,
    /// Concurrent clients, each on its own partition.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub(crate) clients: usize,
}

impl StreamsOpts {
    fn duration(&self) -> f64 {
        self.duration.unwrap_or(if self.quick { 3.0 } else { 10.0 })
    }

    fn ops(&self) -> Vec<usize> {
        if self.ops.is_empty() {
            vec![1, 10, 100]
        } else {
            self.ops.clone()
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if !(self.duration().is_finite() && self.duration() > 0.0) || self.clients == 0 {
            return Err(Error::msg("--duration and --clients must be more than 0"));
        }
        if self.ops().iter().any(|&n| n == 0 || n > 10_000) {
            return Err(Error::msg("--ops must be between 1 and 10000"));
        }
        Ok(())
    }

    pub(crate) fn settings(&self, _: &Bodies) -> serde_json::Value {
        json!({"duration_seconds": self.duration(), "ops": self.ops(), "clients": self.clients})
    }
}

/// One case's figures.
#[derive(Debug, Serialize)]
pub(crate) struct StreamsResult {
    pub(crate) ops_per_cycle: usize,
    pub(crate) clients: usize,
    pub(crate) seconds: f64,
    pub(crate) cycles: u64,
    pub(crate) cycles_per_second: f64,
    pub(crate) state_ops_per_second: f64,
    pub(crate) cycle_latency_ms: Latency,
}

case::scenario!(StreamsOpts, "streams", |ctx, opts, report| run(
    ctx.env, ctx.common, opts, report
));

async fn run(
    env: &Env,
    common: &CommonArgs,
    opts: &StreamsOpts,
    report: &mut Report,
) -> Result<()> {
    for ops in opts.ops() {
        eprintln!(
            "queen-load: streams: {ops} state ops per cycle, {} clients",
            opts.clients
        );
        let result = run_case(env, common, opts, ops).await?;
        eprintln!(
            "queen-load:   {:.0} cycles/s, {:.0} state ops/s, p50 {:.2} ms, p99 {:.2} ms",
            result.cycles_per_second,
            result.state_ops_per_second,
            result.cycle_latency_ms.p50,
            result.cycle_latency_ms.p99
        );
        report.push(result);
    }
    Ok(())
}

async fn run_case(
    env: &Env,
    common: &CommonArgs,
    opts: &StreamsOpts,
    ops: usize,
) -> Result<StreamsResult> {
    let dbname = env.create_database("streams").await?;
    let brokers = env.start_brokers(common, &dbname, 1).await?;
    let addr = brokers[0].addr();
    let mut admin = Conn::connect(addr).await?;
    let reply = admin
        .post_json(
            "/streams/v1/queries",
            Bytes::from(
                json!({"name": "bench", "source_queue": "bench-src", "sink_queue": "bench-sink",
                       "config_hash": "h"})
                .to_string(),
            ),
        )
        .await?;
    let registered: serde_json::Value =
        serde_json::from_slice(&reply.body).context("register answer")?;
    let query_id = registered["query_id"]
        .as_str()
        .ok_or_else(|| Error::msg(format!("register: {}", reply.snippet())))?
        .to_owned();

    let stop = Arc::new(AtomicBool::new(false));
    let duration = Duration::from_secs_f64(opts.duration());
    let mut tasks = Vec::new();
    for client in 0..opts.clients {
        let (stop, query_id) = (Arc::clone(&stop), query_id.clone());
        let mut conn = Conn::connect(addr).await?;
        let partition = uuid::Uuid::new_v4().to_string();
        tasks.push(tokio::spawn(async move {
            let mut latencies: Vec<u32> = Vec::new();
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let state_ops: Vec<_> = (0..ops)
                    .map(|i| {
                        json!({"type": "upsert", "key": format!("k{}", (n * ops + i) % 1000),
                               "value": {"n": n, "i": i, "client": client}})
                    })
                    .collect();
                n += 1;
                let body = json!({
                    "query_id": query_id, "partition_id": partition,
                    "state_ops": state_ops,
                    "push_items": [{"queue": "bench-sink", "partition": format!("c{client}"),
                                    "payload": {"n": n}}],
                });
                let started = Instant::now();
                let reply = conn
                    .post_json("/streams/v1/cycle", Bytes::from(body.to_string()))
                    .await?;
                latencies.push(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX));
                let answer: serde_json::Value =
                    serde_json::from_slice(&reply.body).context("cycle answer")?;
                if answer["success"] != true {
                    return Err(Error::msg(format!("cycle: {}", reply.snippet())));
                }
            }
            Ok::<Vec<u32>, Error>(latencies)
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.context("a streams client panicked")??);
    }
    let seconds = started.elapsed().as_secs_f64();
    env::stop_all(brokers).await?;
    env.drop_database(&dbname, common.keep).await?;
    let cycles = latencies.len() as u64;
    Ok(StreamsResult {
        ops_per_cycle: ops,
        clients: opts.clients,
        seconds,
        cycles,
        cycles_per_second: cycles as f64 / seconds,
        state_ops_per_second: (cycles as f64 * ops as f64) / seconds,
        cycle_latency_ms: Latency::from_micros(latencies),
    })
}

impl Row for StreamsResult {
    const KEY: &'static str = "streams";

    fn title() -> Option<String> {
        Some(
            "streams: POST /streams/v1/cycle, state upserts and one sink push per cycle".to_owned(),
        )
    }

    fn table(results: &[StreamsResult]) -> String {
        table(results)
    }
}

/// The streams table.
fn table(results: &[StreamsResult]) -> String {
    let mut table = Table::new(&[
        ("ops/cycle", 10),
        ("clients", 8),
        ("cycles/s", 10),
        ("state ops/s", 12),
        ("p50 ms", 8),
        ("p99 ms", 8),
    ]);
    for r in results {
        table.row([
            r.ops_per_cycle.to_string(),
            r.clients.to_string(),
            fixed(r.cycles_per_second, 0),
            fixed(r.state_ops_per_second, 0),
            fixed(r.cycle_latency_ms.p50, 2),
            fixed(r.cycle_latency_ms.p99, 2),
        ]);
    }
    table.finish()
}
