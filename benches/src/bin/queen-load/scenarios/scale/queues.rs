//! The `queues` case of the `scale` scenario: `--queues` (10,000)
//! queues with one consumer group each, against `--small-queues` (100), each
//! on a fresh database and a broker started with `RETENTION_INTERVAL=1000`
//! and `QUEEN_STATS_INTERVAL_MS=100` (the statistics writer's floor), so the
//! background passes run as often as they can.
//!
//! 1. **Creation**: pushes of one item per queue, 1,000 items (queues) per
//!    request, from 4 connections; then one pop per queue for group `g`
//!    (`autoAck`, so the message is consumed and the group exists).
//! 2. **Light traffic** for `--duration` seconds: 4 producers push
//!    single-item requests to random queues, 200 msg/s in total; 4
//!    consumers pop round-robin over the queues (`wait=false`, `batch=10`)
//!    for `g` and ack what they get.
//! 3. **Per-queue state**: `queen_hotlist_rings`, `_entries`, `_bytes`,
//!    `queen_wake_gates`, `queen_queue_cache_entries`,
//!    `queen_dedup_cache_bytes`, `queen_ack_registry_bytes` (null when
//!    absent) and the broker's RSS, in all and per queue.
//! 4. **Idle background**: the database is vacuumed (so autovacuum has
//!    nothing to do), then after `SETTLE` with no traffic, over `--idle`
//!    seconds: the database's commits and rows read (`tup_returned +
//!    tup_fetched`) per second, and PostgreSQL's and the broker's CPU.
//!
//! Ratios are big / small. The claim under test: the background passes cost
//! what their work costs, not what the queue count costs; an idle ratio near
//! the queue-count ratio (100) is a defect.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use super::common::{self as scale, Rng, ScaleOpts};
use crate::client::{self, Conn};
use crate::env::{self, CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::measure::cpu::{self, Usage};
use crate::measure::memory;
use crate::measure::memory::Metrics;
use crate::measure::stats::DbStat;
use crate::measure::stats::{self, SETTLE};
use crate::measure::{self, to_f64, to_f64_i};
use crate::output::table;
use crate::output::table::compare;

const GROUP: &str = "g";
/// Items (queues) per creating request; connections creating and subscribing.
const CREATE_CHUNK: usize = 1000;
const CREATORS: usize = 4;
const PRODUCERS: usize = 4;
const CONSUMERS: usize = 4;
/// Messages per second pushed, in total.
const RATE: f64 = 200.0;
const GAUGES: [&str; 7] = [
    "queen_hotlist_rings",
    "queen_hotlist_entries",
    "queen_hotlist_bytes",
    "queen_wake_gates",
    "queen_queue_cache_entries",
    "queen_dedup_cache_bytes",
    "queen_ack_registry_bytes",
];

#[derive(Debug, Serialize)]
struct Size {
    queues: usize,
    create_seconds: f64,
    subscribe_seconds: f64,
    traffic: Traffic,
    /// The gauges after the traffic, and each per queue.
    metrics: serde_json::Value,
    metrics_per_queue: serde_json::Value,
    broker_rss_bytes: u64,
    broker_rss_bytes_per_queue: f64,
    idle: Idle,
}

#[derive(Debug, Default, Serialize)]
struct Traffic {
    seconds: f64,
    pushed: u64,
    consumed: u64,
    pops: u64,
    pops_empty: u64,
}

#[derive(Debug, Serialize)]
struct Idle {
    seconds: f64,
    counters: DbStat,
    /// The tables that read the most rows in the window.
    top_tables_read: serde_json::Value,
    commits_per_second: f64,
    rows_read_per_second: f64,
    blocks_per_second: f64,
    cpu_cores: Usage,
}

pub(crate) async fn run(
    env: &Env,
    common: &CommonArgs,
    opts: &ScaleOpts,
) -> Result<serde_json::Value> {
    let mut broker_common = common.clone();
    for (key, value) in [
        ("RETENTION_INTERVAL", "1000"),
        ("QUEEN_STATS_INTERVAL_MS", "100"),
    ] {
        broker_common
            .broker_env
            .push((key.to_owned(), value.to_owned()));
    }
    let duration = opts.duration(10.0);
    let idle = Duration::from_secs_f64(opts.idle);
    let small = size(env, &broker_common, opts.small_queues, duration, idle).await?;
    let big = size(env, &broker_common, opts.queues, duration, idle).await?;
    let ratios = json!({
        "queues": big.queues as f64 / small.queues as f64,
        "idle_rows_read_per_second": measure::per(Some(big.idle.rows_read_per_second),
                                                Some(small.idle.rows_read_per_second)),
        "idle_blocks_per_second": measure::per(Some(big.idle.blocks_per_second),
                                             Some(small.idle.blocks_per_second)),
        "idle_commits_per_second": measure::per(Some(big.idle.commits_per_second),
                                              Some(small.idle.commits_per_second)),
        "idle_postgres_cpu": measure::per(Some(big.idle.cpu_cores.postgres),
                                        Some(small.idle.cpu_cores.postgres)),
        "idle_broker_cpu": measure::per(Some(big.idle.cpu_cores.broker),
                                      Some(small.idle.cpu_cores.broker)),
    });
    eprintln!("{}", table(&big, &small));
    for s in [&small, &big] {
        eprintln!(
            "queen-load:   {} queues, idle rows read by table: {}",
            s.queues, s.idle.top_tables_read
        );
    }
    Ok(json!({"case": "queues", "big": big, "small": small, "ratios": ratios}))
}

fn queue_name(q: usize) -> String {
    format!("sq{q:05}")
}

async fn size(
    env: &Env,
    common: &CommonArgs,
    queues: usize,
    duration: Duration,
    idle: Duration,
) -> Result<Size> {
    eprintln!("queen-load:   {queues} queues");
    let dbname = env.create_database("scale").await?;
    let mut brokers = env.start_brokers(common, &dbname, 1).await?;
    let addr = brokers[0].addr();
    let pid = brokers[0].pid();
    let postmaster = env.postmaster_pid()?;

    let started = Instant::now();
    let chunks = queues.div_ceil(CREATE_CHUNK);
    each(addr, chunks, |mut conn, next| async move {
        while let Some(chunk) = next() {
            let first = chunk * CREATE_CHUNK;
            let items: Vec<String> = (first..queues.min(first + CREATE_CHUNK))
                .map(|q| scale::item(&queue_name(q), None, q as u64))
                .collect();
            scale::push(&mut conn, &items).await?;
        }
        Ok(())
    })
    .await
    .map_err(|error| error.wrap("create the queues"))?;
    let create_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    each(addr, queues, |mut conn, next| async move {
        while let Some(q) = next() {
            let path = format!(
                "/api/v1/pop/queue/{}?consumerGroup={GROUP}&batch=1&wait=false&autoAck=true",
                queue_name(q)
            );
            if conn.pop(&path).await?.messages::<scale::Data>()?.len() != 1 {
                return Err(Error::msg(format!(
                    "the first pop of {} did not deliver its message",
                    queue_name(q)
                )));
            }
        }
        Ok(())
    })
    .await
    .map_err(|error| error.wrap("subscribe the group"))?;
    let subscribe_seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "queen-load:   created {queues} queues in {create_seconds:.1} s, subscribed in \
         {subscribe_seconds:.1} s; traffic for {duration:?}"
    );
    let traffic = traffic(addr, queues, duration).await?;
    brokers[0].check_alive()?;

    let metrics = Metrics::scrape(addr).await?;
    let broker_rss_bytes = memory::rss_bytes(pid)?;
    let per_queue: serde_json::Map<_, _> = GAUGES
        .iter()
        .map(|&name| {
            let value = measure::per(metrics.get(name), Some(queues as f64));
            (name.to_owned(), json!(value))
        })
        .collect();

    // The idle window.
    scale::vacuum(env, &dbname).await?;
    tokio::time::sleep(SETTLE).await;
    let reads_before = stats::table_reads(&env.connect_config(&dbname)).await?;
    let before = DbStat::read(&env.admin, &dbname).await?;
    let cpu_before = cpu::sample(&[pid], postmaster);
    tokio::time::sleep(idle).await;
    let cpu_after = cpu::sample(&[pid], postmaster);
    let counters = DbStat::read(&env.admin, &dbname).await?.since(before);
    let reads = stats::top_reads(
        &reads_before,
        &stats::table_reads(&env.connect_config(&dbname)).await?,
    );
    let seconds = idle.as_secs_f64();
    let idle = Idle {
        seconds,
        counters,
        top_tables_read: reads,
        commits_per_second: to_f64_i(counters.commits) / seconds,
        rows_read_per_second: to_f64_i(counters.rows_read()) / seconds,
        blocks_per_second: to_f64_i(counters.blocks) / seconds,
        cpu_cores: cpu::usage(&cpu_before, &cpu_after),
    };
    eprintln!(
        "queen-load:   idle: {:.1} commits/s, {:.0} rows read/s, {:.0} blocks/s, PostgreSQL \
         {:.3} cores, broker {:.3} cores",
        idle.commits_per_second,
        idle.rows_read_per_second,
        idle.blocks_per_second,
        idle.cpu_cores.postgres,
        idle.cpu_cores.broker
    );
    brokers[0].check_alive()?;
    env::stop_all(brokers).await?;
    env.drop_database(&dbname, common.keep).await?;
    Ok(Size {
        queues,
        create_seconds,
        subscribe_seconds,
        traffic,
        metrics: metrics.json(&GAUGES),
        metrics_per_queue: per_queue.into(),
        broker_rss_bytes,
        broker_rss_bytes_per_queue: to_f64(broker_rss_bytes) / queues as f64,
        idle,
    })
}

/// Run `work(conn, next)` on [`CREATORS`] connections, `next()` handing out
/// `0..count` once each; fail at the first failure.
async fn each<F, Fut>(addr: std::net::SocketAddr, count: usize, work: F) -> Result<()>
where
    F: Fn(Conn, Box<dyn Fn() -> Option<usize> + Send>) -> Fut,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let counter = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CREATORS {
        let counter = Arc::clone(&counter);
        let next = Box::new(move || {
            let k = counter.fetch_add(1, Ordering::Relaxed);
            (k < count).then_some(k)
        });
        tasks.push(tokio::spawn(work(Conn::connect(addr).await?, next)));
    }
    for task in tasks {
        task.await.context("a task panicked")??;
    }
    Ok(())
}

/// The light traffic: paced single-item pushes to random queues, consumers
/// popping round-robin over the queues and acking.
async fn traffic(addr: std::net::SocketAddr, queues: usize, duration: Duration) -> Result<Traffic> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    let interval = Duration::from_secs_f64(PRODUCERS as f64 / RATE);
    for _ in 0..PRODUCERS {
        let mut conn = Conn::connect(addr).await?;
        let stop = Arc::clone(&stop);
        tasks.push(tokio::spawn(async move {
            let mut traffic = Traffic::default();
            let mut rng = Rng::new();
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                ticker.tick().await;
                let item = scale::item(&queue_name(rng.below(queues)), None, traffic.pushed);
                scale::push(&mut conn, &[item]).await?;
                traffic.pushed += 1;
            }
            Ok::<Traffic, Error>(traffic)
        }));
    }
    for k in 0..CONSUMERS {
        let mut conn = Conn::connect(addr).await?;
        let stop = Arc::clone(&stop);
        tasks.push(tokio::spawn(async move {
            let mut traffic = Traffic::default();
            let mut q = k;
            while !stop.load(Ordering::Relaxed) {
                let path = format!(
                    "/api/v1/pop/queue/{}?consumerGroup={GROUP}&batch=10&wait=false",
                    queue_name(q % queues)
                );
                q += CONSUMERS;
                let popped = conn.pop(&path).await?;
                let messages = popped.messages::<scale::Data>()?;
                traffic.pops += 1;
                if messages.is_empty() {
                    traffic.pops_empty += 1;
                    continue;
                }
                conn.ack_all(&client::completed(&messages), Some(GROUP))
                    .await?;
                traffic.consumed += messages.len() as u64;
            }
            Ok(traffic)
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = Traffic::default();
    for task in tasks {
        let t = task.await.context("a traffic task panicked")??;
        total.pushed += t.pushed;
        total.consumed += t.consumed;
        total.pops += t.pops;
        total.pops_empty += t.pops_empty;
    }
    total.seconds = started.elapsed().as_secs_f64();
    Ok(total)
}

fn table(big: &Size, small: &Size) -> String {
    let mut t = table::figures(&["big", "small", "ratio"]);
    let both = |f: &dyn Fn(&Size) -> Option<f64>| (f(big), f(small));
    let mut row = |name: &str, (b, s): (Option<f64>, Option<f64>), decimals| {
        compare(&mut t, name, b, s, decimals);
    };
    row("queues", both(&|s| Some(s.queues as f64)), 0);
    row("create seconds", both(&|s| Some(s.create_seconds)), 1);
    row("subscribe seconds", both(&|s| Some(s.subscribe_seconds)), 1);
    row(
        "traffic pushed",
        both(&|s| Some(to_f64(s.traffic.pushed))),
        0,
    );
    row(
        "traffic consumed",
        both(&|s| Some(to_f64(s.traffic.consumed))),
        0,
    );
    row("traffic pops", both(&|s| Some(to_f64(s.traffic.pops))), 0);
    for name in GAUGES {
        row(name, both(&|s| s.metrics[name].as_f64()), 0);
        row(
            "  per queue",
            both(&|s| s.metrics_per_queue[name].as_f64()),
            2,
        );
    }
    row(
        "broker RSS MiB",
        both(&|s| Some(to_f64(s.broker_rss_bytes) / 1_048_576.0)),
        1,
    );
    row(
        "  bytes per queue",
        both(&|s| Some(s.broker_rss_bytes_per_queue)),
        0,
    );
    row(
        "idle commits/s",
        both(&|s| Some(s.idle.commits_per_second)),
        2,
    );
    row(
        "idle rows read/s",
        both(&|s| Some(s.idle.rows_read_per_second)),
        1,
    );
    row(
        "idle blocks/s",
        both(&|s| Some(s.idle.blocks_per_second)),
        1,
    );
    row(
        "idle PostgreSQL cores",
        both(&|s| Some(s.idle.cpu_cores.postgres)),
        4,
    );
    row(
        "idle broker cores",
        both(&|s| Some(s.idle.cpu_cores.broker)),
        4,
    );
    t.finish()
}
