//! The `latency` scenario: single-message end-to-end latency, push send to pop
//! receive, at a fixed low rate.
//!
//! One producer pushes one message per request on a fixed schedule (message
//! `i` is due at `i / rate` seconds): open loop, so a slow push delays no
//! later message. It sends each due message on an idle connection of a small
//! keep-alive pool, so requests overlap only when a push takes longer than
//! the interval. `--consumers` consumers (4) long-poll
//! `GET /api/v1/pop/queue/<q>?batch=1&wait=true&timeout=1000`, each on its own
//! connection, in one of three modes (`--modes`, every one by default):
//!
//! - `auto`: with `autoAck=true`;
//! - `leased`: without it, then `POST /api/v1/ack/batch` for what came, as the
//!   SDKs' consume loops do (by default at batch 1 and 10);
//! - `early`: `autoAck=true`, but the consumers start before the queue exists
//!   and the window's first push creates it (no warm-up): consumers commonly
//!   start before producers, and a wake-up lost there stalls the first
//!   deliveries.
//!
//! `--batches` sets `batch=` for every mode (default 1, and 1 and 10 for
//! `leased`). Messages go to the partitions round-robin. Each case also
//! reports `first ms`, the latency of the window's first message (in `early`,
//! the first delivery to a consumer parked before its queue existed).
//!
//! The consumers must keep up for the figure to mean latency: with `batch=1`
//! they consume at most one message per pop round trip, so when pops per
//! second fall short of the rate a backlog builds and the latency is queueing.
//! The table shows pops per second and what was never delivered.
//!
//! A message's payload `id` is its sequence number; the producer records the
//! moment it hands the request to the connection, and the consumer that
//! receives it computes receive time minus that (one process, one monotonic
//! clock). Each case, on its own database and broker:
//!
//! 1. create the queue and every partition (one message each), start the
//!    consumers (`early`: start the consumers, let them park 500 ms, create
//!    nothing);
//! 2. warm-up: the schedule runs for `--warmup` seconds, not counted;
//! 3. the window: `--duration` seconds of schedule; then up to `--grace`
//!    seconds for the last deliveries; the consumers stop;
//! 4. report, for the window's messages: sent, delivered, missing (never
//!    delivered), duplicates (delivered more than once), latency
//!    p50/p90/p99/max, the push round trip, and how late the producer ran
//!    against its schedule (a late producer would hide latency).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::case::{self, Case as _, Window};
use crate::client::payload::{self, Bodies, TxnIds};
use crate::client::{self, Conn};
use crate::env::{self, CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::measure::cpu::{self, Usage};
use crate::measure::{micros, to_f64, Latency};
use crate::output::report::{Report, Row};
use crate::output::table::{fixed, Table};

/// Connections the producer may have in flight at once.
const PRODUCER_CONNS: usize = 16;

/// The latency scenario's settings.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LatencyOpts {
    #[command(flatten)]
    pub(crate) window: Window<LatencyOpts>,
    /// Messages per second, comma-separated [default: 500,50].
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    pub(crate) rates: Vec<u32>,
    /// Partition counts, comma-separated [default: 1,100].
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    pub(crate) partitions: Vec<usize>,
    /// Long-polling consumers.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub(crate) consumers: usize,
    /// Seconds to wait after the window for its last deliveries.
    #[arg(long, value_name = "SECS", default_value_t = 2.0)]
    pub(crate) grace: f64,
    /// Consumer modes, comma-separated: auto, leased, early [default: all].
    #[arg(long, value_name = "MODE,..", value_delimiter = ',', value_enum)]
    pub(crate) modes: Vec<Mode>,
    /// `batch=` of each pop, comma-separated [default: 1; leased: 1,10].
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    pub(crate) batches: Vec<usize>,
    /// Brokers on the database, comma-separated [default: 1]: the producer
    /// pushes through the first, the consumers pop through the last, so
    /// with two or more every wake-up crosses brokers (the mesh's hints).
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    pub(crate) brokers: Vec<usize>,
}

/// How the consumers of a latency case consume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// `autoAck=true`.
    Auto,
    /// Pop without autoAck, then ack/batch.
    Leased,
    /// `autoAck=true`, consumers started before the queue exists.
    Early,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Leased => "leased",
            Mode::Early => "early",
        }
    }
}

/// How the latency scenario words `--warmup` and `--quick`.
impl case::WindowHelp for LatencyOpts {
    const WARMUP: &'static str = "Seconds of schedule before each window, not counted";
    const QUICK: &'static str = "500 msg/s over 100 partitions only, 2-second window";
}

impl LatencyOpts {
    /// The settings `all` runs with.
    pub(crate) fn for_all(quick: bool, duration: Option<f64>) -> LatencyOpts {
        LatencyOpts {
            window: Window::for_all(quick, duration),
            rates: Vec::new(),
            partitions: Vec::new(),
            consumers: 4,
            grace: 2.0,
            modes: Vec::new(),
            batches: Vec::new(),
            brokers: Vec::new(),
        }
    }

    fn cases(&self) -> Vec<Case> {
        let explicit = !(self.rates.is_empty() && self.partitions.is_empty());
        let modes = if self.modes.is_empty() {
            vec![Mode::Auto, Mode::Leased, Mode::Early]
        } else {
            self.modes.clone()
        };
        let broker_counts = if self.brokers.is_empty() {
            vec![1]
        } else {
            self.brokers.clone()
        };
        let consumer_cases = |rate: u32, partitions: usize| {
            let mut cases = Vec::new();
            for &mode in &modes {
                let batches = match (self.batches.is_empty(), mode) {
                    (false, _) => self.batches.clone(),
                    (true, Mode::Leased) => vec![1, 10],
                    (true, _) => vec![1],
                };
                for batch in batches {
                    for &brokers in &broker_counts {
                        cases.push(Case {
                            rate,
                            partitions,
                            mode,
                            batch,
                            brokers,
                        });
                    }
                }
            }
            cases
        };
        if self.window.quick && !explicit {
            return consumer_cases(500, 100);
        }
        let rates = if self.rates.is_empty() {
            vec![500, 50]
        } else {
            self.rates.clone()
        };
        let partitions = if self.partitions.is_empty() {
            vec![1, 100]
        } else {
            self.partitions.clone()
        };
        let mut cases = Vec::new();
        for &rate in &rates {
            for &partitions in &partitions {
                cases.extend(consumer_cases(rate, partitions));
            }
        }
        cases
    }

    pub(crate) fn validate(&self) -> Result<()> {
        self.window.validate(&[("grace", self.grace)])?;
        if self.consumers == 0
            || self.batches.contains(&0)
            || self
                .cases()
                .iter()
                .any(|case| case.rate == 0 || case.partitions == 0)
        {
            return Err(Error::msg(
                "rates, partitions, consumers and batch must be >= 1",
            ));
        }
        Ok(())
    }

    /// The settings, for the report.
    pub(crate) fn settings(&self, bodies: &Bodies) -> serde_json::Value {
        self.window.settings(
            self.cases().into_iter().map(Case::name),
            bodies,
            serde_json::json!({
                "grace_seconds": self.grace,
                "consumers": self.consumers,
                "pop": format!("GET {} (leased: without autoAck, then POST /api/v1/ack/batch)",
                               payload::pop_path("<q>", 1, true)),
                "producer": format!("open loop, one message per push request, up to \
                                     {PRODUCER_CONNS} requests in flight"),
            }),
        )
    }
}

/// One case.
#[derive(Debug, Clone, Copy)]
struct Case {
    rate: u32,
    partitions: usize,
    mode: Mode,
    batch: usize,
    brokers: usize,
}

impl case::Case for Case {
    fn name(self) -> String {
        let name = format!(
            "r{} p{} {} b{}",
            self.rate,
            self.partitions,
            self.mode.name(),
            self.batch
        );
        if self.brokers == 1 {
            name
        } else {
            format!("{name} n{}", self.brokers)
        }
    }
}

case::scenario!(LatencyOpts, "latency", |ctx, opts, report| run(
    ctx.env, ctx.common, opts, ctx.bodies, report
));

/// Run every case, adding each result to `report`; stop at the first failure.
async fn run(
    env: &Env,
    common: &CommonArgs,
    opts: &LatencyOpts,
    bodies: &Arc<Bodies>,
    report: &mut Report,
) -> Result<()> {
    case::run_cases(
        "latency",
        common,
        &opts.cases(),
        |case| run_case(env, common, opts, bodies, case),
        |_, result| {
            eprintln!(
                "queen-load:   {} sent, {} delivered, {} missing, {} duplicates, first {:.2} ms, \
                 p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms, cpu {}",
                result.sent,
                result.delivered,
                result.missing,
                result.duplicates,
                result.first_ms,
                result.latency_ms.p50,
                result.latency_ms.p90,
                result.latency_ms.p99,
                result.latency_ms.max,
                cpu::columns(&result.cpu_cores)
            );
            report.push(result);
        },
    )
    .await
}

/// What the producer and the consumers share.
struct Shared {
    /// Pops so far, all consumers.
    pops: AtomicU64,
    queue: String,
    partitions: Vec<String>,
    bodies: Arc<Bodies>,
    pop_path: String,
    /// Consumers ack what they receive (leased mode).
    leased: bool,
    /// The clock every time below is relative to.
    epoch: Instant,
    /// Per message id: nanoseconds after `epoch` when it was sent, plus one
    /// (0: not sent yet).
    sent_ns: Vec<AtomicU64>,
    /// Per message id: deliveries.
    deliveries: Vec<AtomicU32>,
    /// Per message id: microseconds from send to first delivery.
    latency_us: Vec<AtomicU32>,
    stop: AtomicBool,
}

/// One case on its own database and broker.
async fn run_case(
    env: &Env,
    common: &CommonArgs,
    opts: &LatencyOpts,
    bodies: &Arc<Bodies>,
    case: Case,
) -> Result<LatencyResult> {
    let dbname = env.create_database("latency").await?;
    let mut brokers = env.start_brokers(common, &dbname, case.brokers).await?;
    let addr = brokers[0].addr();
    let consumer_addr = brokers[brokers.len() - 1].addr();
    let postmaster = env.postmaster_pid()?;
    let pids = env::pids(&brokers);

    let rate = f64::from(case.rate);
    let early = case.mode == Mode::Early;
    let setup = if early {
        0
    } else {
        u64::try_from(case.partitions).context("partitions")?
    };
    let scheduled = |secs: f64| {
        // Whole messages due in `secs` at `rate`: small, non-negative.
        let due = (secs * rate).floor();
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // finite, >= 0, small
        let due = due.max(0.0) as u64;
        due
    };
    // An early case measures the queue's very first messages: no warm-up.
    let warm_count = if early {
        0
    } else {
        scheduled(opts.window.warmup)
    };
    let window_count = scheduled(opts.window.duration());
    let capacity = usize::try_from(setup + warm_count + window_count).context("message count")?;
    let queue = format!(
        "bench.latency.r{}-p{}-{}-b{}",
        case.rate,
        case.partitions,
        case.mode.name(),
        case.batch
    );
    let shared = Arc::new(Shared {
        pop_path: payload::pop_path(&queue, case.batch, case.mode != Mode::Leased),
        leased: case.mode == Mode::Leased,
        queue,
        partitions: payload::partition_names(case.partitions),
        bodies: Arc::clone(bodies),
        epoch: Instant::now(),
        sent_ns: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
        deliveries: (0..capacity).map(|_| AtomicU32::new(0)).collect(),
        latency_us: (0..capacity).map(|_| AtomicU32::new(0)).collect(),
        stop: AtomicBool::new(false),
        pops: AtomicU64::new(0),
    });

    // The queue and every partition: ids 0..setup (none for an early case,
    // whose consumers park on a queue that does not exist yet).
    let mut producers = Conn::connect_many(addr, PRODUCER_CONNS).await?;
    if !early {
        producers[0]
            .create_partitions(
                &shared.bodies,
                &shared.queue,
                &shared.partitions,
                TxnIds::Fresh,
                |ids| ids.for_each(|id| mark_sent(&shared, id)),
            )
            .await?;
    }

    let mut consumer_tasks = Vec::with_capacity(opts.consumers);
    for _ in 0..opts.consumers {
        let conn = Conn::connect(consumer_addr).await?;
        consumer_tasks.push(tokio::spawn(consume(conn, Arc::clone(&shared))));
    }
    if early {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Warm-up, then the window, on one schedule.
    let (pool_tx, pool_rx) = mpsc::channel(PRODUCER_CONNS);
    for conn in producers {
        pool_tx
            .send(conn)
            .await
            .map_err(|_| Error::msg("producer pool closed"))?;
    }
    let mut producer = Producer {
        pool_tx,
        pool_rx,
        tasks: Vec::new(),
        next_id: setup,
        max_lag: Duration::ZERO,
    };
    producer
        .run(&shared, rate, setup + warm_count, Instant::now())
        .await?;
    producer.finish().await?;
    let cpu_before = cpu::sample(&pids, postmaster);
    let pops_before = shared.pops.load(Ordering::Relaxed);
    let started = Instant::now();
    producer.max_lag = Duration::ZERO;
    let window_first = producer.next_id;
    producer
        .run(&shared, rate, window_first + window_count, started)
        .await?;
    let sent_seconds = started.elapsed().as_secs_f64();
    let window_pops = shared.pops.load(Ordering::Relaxed) - pops_before;
    let push_us = producer.finish().await?;
    let cpu_after = cpu::sample(&pids, postmaster);
    let window_end = window_first + window_count;

    // Grace for the last deliveries, then stop the consumers.
    let grace_deadline = Instant::now() + Duration::from_secs_f64(opts.grace);
    let window_ids = || (window_first..window_end).filter_map(|id| usize::try_from(id).ok());
    while Instant::now() < grace_deadline
        && window_ids().any(|i| shared.deliveries[i].load(Ordering::Relaxed) == 0)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shared.stop.store(true, Ordering::Relaxed);
    let mut pops = ConsumerStats::default();
    for task in consumer_tasks {
        let stats = task.await.context("consumer task")??;
        pops.pops += stats.pops;
        pops.empty += stats.empty;
        pops.unknown += stats.unknown;
    }
    env::check_alive(&mut brokers)?;
    env::stop_all(brokers).await?;
    env.drop_database(&dbname, common.keep).await?;

    let mut latencies = Vec::new();
    let mut delivered = 0;
    let mut duplicates = 0;
    for i in window_ids() {
        let count = shared.deliveries[i].load(Ordering::Relaxed);
        if count > 0 {
            delivered += 1;
            duplicates += u64::from(count - 1);
            latencies.push(shared.latency_us[i].load(Ordering::Relaxed));
        }
    }
    // Duplicates outside the window count too: a duplicate is a bug anywhere.
    let all_duplicates: u64 = shared
        .deliveries
        .iter()
        .map(|d| u64::from(d.load(Ordering::Relaxed).saturating_sub(1)))
        .sum();
    let first_ms = usize::try_from(window_first)
        .ok()
        .filter(|&i| {
            i < shared.deliveries.len() && shared.deliveries[i].load(Ordering::Relaxed) > 0
        })
        .map_or(f64::NAN, |i| {
            f64::from(shared.latency_us[i].load(Ordering::Relaxed)) / 1000.0
        });
    Ok(LatencyResult {
        name: case.name(),
        rate: case.rate,
        partitions: case.partitions,
        mode: case.mode,
        batch: case.batch,
        first_ms,
        consumers: opts.consumers,
        seconds: sent_seconds,
        sent: window_count,
        sent_per_second: to_f64(window_count) / sent_seconds.max(0.001),
        delivered,
        missing: window_count - delivered,
        duplicates: duplicates.max(all_duplicates),
        latency_ms: Latency::from_micros(latencies),
        push_latency_ms: Latency::from_micros(push_us),
        max_send_lag_ms: producer.max_lag.as_secs_f64() * 1000.0,
        pops: pops.pops,
        window_pops_per_second: to_f64(window_pops) / sent_seconds.max(0.001),
        empty_pops: pops.empty,
        unknown_deliveries: pops.unknown,
        cpu_cores: cpu::usage(&cpu_before, &cpu_after),
        attempts: 1,
    })
}

/// Record that message `id` is being sent now.
fn mark_sent(shared: &Shared, id: u64) {
    let nanos = u64::try_from(shared.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
    if let Some(slot) = usize::try_from(id).ok().and_then(|i| shared.sent_ns.get(i)) {
        slot.store(nanos + 1, Ordering::Release);
    }
}

/// The open-loop producer and its connection pool.
struct Producer {
    pool_tx: mpsc::Sender<Conn>,
    pool_rx: mpsc::Receiver<Conn>,
    tasks: Vec<tokio::task::JoinHandle<Result<u32>>>,
    next_id: u64,
    /// The most a send started after its scheduled time.
    max_lag: Duration,
}

impl Producer {
    /// Send messages `next_id..end`, message `next_id + i` due at
    /// `start + i / rate`.
    async fn run(
        &mut self,
        shared: &Arc<Shared>,
        rate: f64,
        end: u64,
        start: Instant,
    ) -> Result<()> {
        let first = self.next_id;
        while self.next_id < end {
            let due = start + Duration::from_secs_f64(to_f64(self.next_id - first) / rate);
            tokio::time::sleep_until(due.into()).await;
            let mut conn = self
                .pool_rx
                .recv()
                .await
                .ok_or_else(|| Error::msg("producer pool closed"))?;
            self.max_lag = self
                .max_lag
                .max(Instant::now().saturating_duration_since(due));
            let id = self.next_id;
            self.next_id += 1;
            let partition = usize::try_from(id).unwrap_or(0) % shared.partitions.len();
            let mut body = Vec::with_capacity(1300);
            payload::push_request(
                &mut body,
                &shared.bodies,
                &shared.queue,
                &shared.partitions[partition],
                id,
                1,
                TxnIds::Fresh,
            );
            let shared = Arc::clone(shared);
            let pool_tx = self.pool_tx.clone();
            self.tasks.push(tokio::spawn(async move {
                let sent_at = Instant::now();
                mark_sent(&shared, id);
                let reply = conn.push_request(Bytes::from(body)).await?;
                let round_trip = micros(sent_at.elapsed());
                client::check_push(&reply, 1)?;
                // The pool outlives every task; a closed pool only means the run is over.
                let _ = pool_tx.send(conn).await;
                Ok(round_trip)
            }));
        }
        Ok(())
    }

    /// Wait for every push; their round trips, in microseconds.
    async fn finish(&mut self) -> Result<Vec<u32>> {
        let mut micros = Vec::with_capacity(self.tasks.len());
        for task in self.tasks.drain(..) {
            micros.push(task.await.context("push task")??);
        }
        Ok(micros)
    }
}

/// What one consumer saw.
#[derive(Debug, Default)]
struct ConsumerStats {
    pops: u64,
    empty: u64,
    /// Deliveries of an id this case never sent.
    unknown: u64,
}

/// The payload's `id`; the rest of it is skipped.
#[derive(Deserialize)]
struct PayloadId {
    id: u64,
}

/// Long-poll until told to stop; record every delivery.
async fn consume(mut conn: Conn, shared: Arc<Shared>) -> Result<ConsumerStats> {
    let mut stats = ConsumerStats::default();
    while !shared.stop.load(Ordering::Relaxed) {
        let popped = conn.pop(&shared.pop_path).await?;
        let received = shared.epoch.elapsed();
        stats.pops += 1;
        shared.pops.fetch_add(1, Ordering::Relaxed);
        let messages = popped.messages::<PayloadId>()?;
        if messages.is_empty() {
            stats.empty += 1;
            continue;
        }
        for message in &messages {
            let Some(i) = usize::try_from(message.data.id)
                .ok()
                .filter(|&i| i < shared.sent_ns.len())
            else {
                stats.unknown += 1;
                continue;
            };
            let sent = shared.sent_ns[i].load(Ordering::Acquire);
            if sent == 0 {
                stats.unknown += 1;
                continue;
            }
            let nanos = u64::try_from(received.as_nanos()).unwrap_or(u64::MAX);
            let micros = nanos.saturating_sub(sent - 1) / 1000;
            if shared.deliveries[i].fetch_add(1, Ordering::Relaxed) == 0 {
                shared.latency_us[i]
                    .store(u32::try_from(micros).unwrap_or(u32::MAX), Ordering::Relaxed);
            }
        }
        if shared.leased {
            conn.ack_all(&client::completed(&messages), None).await?;
        }
    }
    Ok(stats)
}

/// The figures of one latency case.
#[derive(Debug, Serialize)]
pub(crate) struct LatencyResult {
    pub(crate) name: String,
    /// Scheduled messages per second.
    pub(crate) rate: u32,
    pub(crate) partitions: usize,
    pub(crate) mode: Mode,
    /// `batch=` of each pop.
    pub(crate) batch: usize,
    /// Latency of the window's first message (early: the queue's first).
    pub(crate) first_ms: f64,
    pub(crate) consumers: usize,
    /// Seconds the window's schedule took to send.
    pub(crate) seconds: f64,
    /// Messages sent in the window.
    pub(crate) sent: u64,
    pub(crate) sent_per_second: f64,
    /// Window messages delivered at least once.
    pub(crate) delivered: u64,
    /// Window messages never delivered (within the grace period).
    pub(crate) missing: u64,
    /// Deliveries beyond the first, over the whole case.
    pub(crate) duplicates: u64,
    /// Push send to first pop receive, window messages.
    pub(crate) latency_ms: Latency,
    /// The push request's round trip.
    pub(crate) push_latency_ms: Latency,
    /// The most a send started after its scheduled time.
    pub(crate) max_send_lag_ms: f64,
    /// Pops over the whole case, and those that came back empty.
    pub(crate) pops: u64,
    /// Pops per second during the window (all consumers).
    pub(crate) window_pops_per_second: f64,
    pub(crate) empty_pops: u64,
    pub(crate) unknown_deliveries: u64,
    pub(crate) cpu_cores: Usage,
    /// Runs of the case (more than 1: earlier ones were disturbed).
    pub(crate) attempts: u32,
}

cpu::measured!(LatencyResult);

impl Row for LatencyResult {
    const KEY: &'static str = "latency";

    fn title() -> Option<String> {
        Some(format!(
            "latency: push send to pop receive, one message at a time ({})",
            cpu::NOTE
        ))
    }

    fn table(cases: &[LatencyResult]) -> String {
        table(cases)
    }

    fn disturbance(&self) -> Option<(&str, f64, u32)> {
        Some((&self.name, self.cpu_cores.other, self.attempts))
    }
}

/// The latency table.
fn table(cases: &[LatencyResult]) -> String {
    let mut table = Table::new(&[
        ("case", 22),
        ("sent", 7),
        ("delivered", 9),
        ("missing", 8),
        ("dups", 8),
        ("pops/s", 8),
        ("first ms", 8),
        ("p50 ms", 8),
        ("p90 ms", 8),
        ("p99 ms", 8),
        ("max ms", 8),
        ("push p50", 9),
        ("push p99", 9),
        ("lag ms", 8),
        ("cpu brk/pg/load/other", 21),
    ]);
    for case in cases {
        table.row([
            case.name.clone(),
            case.sent.to_string(),
            case.delivered.to_string(),
            case.missing.to_string(),
            case.duplicates.to_string(),
            fixed(case.window_pops_per_second, 0),
            fixed(case.first_ms, 2),
            fixed(case.latency_ms.p50, 2),
            fixed(case.latency_ms.p90, 2),
            fixed(case.latency_ms.p99, 2),
            fixed(case.latency_ms.max, 2),
            fixed(case.push_latency_ms.p50, 2),
            fixed(case.push_latency_ms.p99, 2),
            fixed(case.max_send_lag_ms, 2),
            cpu::columns(&case.cpu_cores),
        ]);
    }
    table.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rate_and_partition_count_runs_auto_leased_at_1_and_10_and_early() {
        let names: Vec<String> = LatencyOpts::for_all(true, None)
            .cases()
            .into_iter()
            .map(case::Case::name)
            .collect();
        assert_eq!(
            names,
            [
                "r500 p100 auto b1",
                "r500 p100 leased b1",
                "r500 p100 leased b10",
                "r500 p100 early b1"
            ]
        );
        let mut opts = LatencyOpts::for_all(false, None);
        opts.modes = vec![Mode::Leased];
        opts.batches = vec![5];
        assert_eq!(
            opts.cases().len(),
            4,
            "2 rates x 2 partition counts x 1 x 1"
        );
        assert!(opts
            .cases()
            .iter()
            .all(|c| c.mode == Mode::Leased && c.batch == 5));
    }
}
