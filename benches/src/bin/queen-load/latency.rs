//! The `latency` scenario: single-message end-to-end latency, push send to pop
//! receive, at a fixed low rate.
//!
//! One producer pushes one message per request on a fixed schedule (message
//! `i` is due at `i / rate` seconds): open loop, so a slow push delays no
//! later message. It sends each due message on an idle connection of a small
//! keep-alive pool, so requests overlap only when a push takes longer than
//! the interval. `--consumers` consumers (4) long-poll
//! `GET /api/v1/pop/queue/<q>?batch=1&wait=true&timeout=1000&autoAck=true`
//! (`--batch` changes the 1), each on its own connection. Messages go to the
//! partitions round-robin.
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
//!    consumers;
//! 2. warm-up: the schedule runs for `--warmup` seconds, not counted;
//! 3. the window: `--duration` seconds of schedule; then up to `--grace`
//!    seconds for the last deliveries; the consumers stop;
//! 4. report, for the window's messages: sent, delivered, missing (never
//!    delivered), duplicates (delivered more than once), latency
//!    p50/p90/p99/max, the push round trip, and how late the producer ran
//!    against its schedule (a late producer would hide latency).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::StatusCode;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::cpu::{self, Usage};
use crate::env::{self, CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::http::Conn;
use crate::payload::{self, Bodies, TxnIds};
use crate::push::{check_reply, seconds, to_f64, DURATION, QUICK_DURATION};
use crate::report::{Latency, Report};

/// The consumers' long-poll timeout, milliseconds.
const POP_TIMEOUT_MS: u64 = 1000;

/// Connections the producer may have in flight at once.
const PRODUCER_CONNS: usize = 16;

/// Arguments of `queen-load latency`.
#[derive(Debug, clap::Args)]
pub(crate) struct LatencyArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    #[command(flatten)]
    pub(crate) opts: LatencyOpts,
}

/// The latency scenario's settings.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LatencyOpts {
    /// Seconds each case is measured [default: 5, or 2 with --quick].
    #[arg(long, value_name = "SECS")]
    pub(crate) duration: Option<f64>,
    /// Seconds of schedule before each window, not counted.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub(crate) warmup: f64,
    /// 500 msg/s over 100 partitions only, 2-second window.
    #[arg(long)]
    pub(crate) quick: bool,
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
    /// `batch=` of each pop.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) batch: usize,
}

impl LatencyOpts {
    /// The settings `all` runs with.
    pub(crate) fn for_all(quick: bool, duration: Option<f64>) -> LatencyOpts {
        LatencyOpts {
            duration,
            warmup: 1.0,
            quick,
            rates: Vec::new(),
            partitions: Vec::new(),
            consumers: 4,
            grace: 2.0,
            batch: 1,
        }
    }

    fn cases(&self) -> Vec<Case> {
        let explicit = !(self.rates.is_empty() && self.partitions.is_empty());
        if self.quick && !explicit {
            return vec![Case {
                rate: 500,
                partitions: 100,
            }];
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
                cases.push(Case { rate, partitions });
            }
        }
        cases
    }

    fn duration(&self) -> f64 {
        self.duration
            .unwrap_or(if self.quick { QUICK_DURATION } else { DURATION })
    }

    pub(crate) fn validate(&self) -> Result<()> {
        seconds("duration", self.duration())?;
        seconds("warmup", self.warmup)?;
        seconds("grace", self.grace)?;
        if self.duration() == 0.0 {
            return Err(Error::msg("--duration must be more than 0"));
        }
        if self.consumers == 0
            || self.batch == 0
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
        serde_json::json!({
            "duration_seconds": self.duration(),
            "warmup_seconds": self.warmup,
            "grace_seconds": self.grace,
            "quick": self.quick,
            "cases": self.cases().iter().map(|case| case.name()).collect::<Vec<_>>(),
            "consumers": self.consumers,
            "pop": format!("GET /api/v1/pop/queue/<q>?batch={}&wait=true&timeout={POP_TIMEOUT_MS}\
                            &autoAck=true", self.batch),
            "producer": format!("open loop, one message per push request, up to \
                                 {PRODUCER_CONNS} requests in flight"),
            "payload_bytes": payload::payload_len(bodies),
        })
    }
}

/// One case.
#[derive(Debug, Clone, Copy)]
struct Case {
    rate: u32,
    partitions: usize,
}

impl Case {
    fn name(self) -> String {
        format!("r{} p{}", self.rate, self.partitions)
    }
}

/// Run every case, adding each result to `report`; stop at the first failure.
pub(crate) async fn run(
    env: &Env,
    common: &CommonArgs,
    opts: &LatencyOpts,
    bodies: &Arc<Bodies>,
    report: &mut Report,
) -> Result<()> {
    let cases = opts.cases();
    for (index, &case) in cases.iter().enumerate() {
        eprintln!(
            "queen-load: latency case {}/{} {}",
            index + 1,
            cases.len(),
            case.name()
        );
        let result = cpu::least_disturbed(common.max_other_cpu, common.retries, || {
            run_case(env, common, opts, bodies, case)
        })
        .await
        .map_err(|error| error.wrap(format!("latency case {}", case.name())))?;
        eprintln!(
            "queen-load:   {} sent, {} delivered, {} missing, {} duplicates, p50 {:.2} ms, \
             p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms, cpu {}",
            result.sent,
            result.delivered,
            result.missing,
            result.duplicates,
            result.latency_ms.p50,
            result.latency_ms.p90,
            result.latency_ms.p99,
            result.latency_ms.max,
            cpu::columns(&result.cpu_cores)
        );
        report.latency.push(result);
    }
    Ok(())
}

/// What the producer and the consumers share.
struct Shared {
    /// Pops so far, all consumers.
    pops: AtomicU64,
    queue: String,
    partitions: Vec<String>,
    bodies: Arc<Bodies>,
    pop_path: String,
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
    let mut brokers = env.start_brokers(common, &dbname, 1).await?;
    let addr = brokers[0].addr();
    let postmaster = env.postmaster_pid()?;
    let pids = env::pids(&brokers);

    let rate = f64::from(case.rate);
    let setup = u64::try_from(case.partitions).context("partitions")?;
    let scheduled = |secs: f64| {
        // Whole messages due in `secs` at `rate`: small, non-negative.
        let due = (secs * rate).floor();
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // finite, >= 0, small
        let due = due.max(0.0) as u64;
        due
    };
    let warm_count = scheduled(opts.warmup);
    let window_count = scheduled(opts.duration());
    let capacity = usize::try_from(setup + warm_count + window_count).context("message count")?;
    let queue = format!("bench.latency.r{}-p{}", case.rate, case.partitions);
    let shared = Arc::new(Shared {
        pop_path: format!(
            "/api/v1/pop/queue/{queue}?batch={}&wait=true&timeout={POP_TIMEOUT_MS}&autoAck=true",
            opts.batch
        ),
        queue,
        partitions: (0..case.partitions).map(|p| format!("p{p}")).collect(),
        bodies: Arc::clone(bodies),
        epoch: Instant::now(),
        sent_ns: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
        deliveries: (0..capacity).map(|_| AtomicU32::new(0)).collect(),
        latency_us: (0..capacity).map(|_| AtomicU32::new(0)).collect(),
        stop: AtomicBool::new(false),
        pops: AtomicU64::new(0),
    });

    // The queue and every partition: ids 0..setup.
    let mut producers = Vec::with_capacity(PRODUCER_CONNS);
    for _ in 0..PRODUCER_CONNS {
        producers.push(Conn::connect(addr).await?);
    }
    for chunk_start in (0..case.partitions).step_by(1000) {
        let chunk = &shared.partitions[chunk_start..(chunk_start + 1000).min(case.partitions)];
        let first_id = u64::try_from(chunk_start).context("id")?;
        for id in first_id..first_id + u64::try_from(chunk.len()).context("id")? {
            mark_sent(&shared, id);
        }
        let mut body = Vec::with_capacity(chunk.len() * 1200 + 64);
        payload::push_request_spread(
            &mut body,
            &shared.bodies,
            &shared.queue,
            chunk,
            first_id,
            TxnIds::Fresh,
        );
        let reply = producers[0]
            .post_json("/api/v1/push", Bytes::from(body))
            .await?;
        check_reply(&reply, chunk.len()).map_err(|error| error.wrap("create the partitions"))?;
    }

    let mut consumer_tasks = Vec::with_capacity(opts.consumers);
    for _ in 0..opts.consumers {
        let conn = Conn::connect(addr).await?;
        consumer_tasks.push(tokio::spawn(consume(conn, Arc::clone(&shared))));
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
    Ok(LatencyResult {
        name: case.name(),
        rate: case.rate,
        partitions: case.partitions,
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
                let reply = conn.post_json("/api/v1/push", Bytes::from(body)).await?;
                let micros = u32::try_from(sent_at.elapsed().as_micros()).unwrap_or(u32::MAX);
                check_reply(&reply, 1)?;
                // The pool outlives every task; a closed pool only means the run is over.
                let _ = pool_tx.send(conn).await;
                Ok(micros)
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

/// The pop response; only the payload ids.
#[derive(Deserialize)]
struct PopBody {
    #[serde(default)]
    messages: Vec<PopMessage>,
}

#[derive(Deserialize)]
struct PopMessage {
    data: PayloadId,
}

#[derive(Deserialize)]
struct PayloadId {
    id: u64,
}

/// Long-poll until told to stop; record every delivery.
async fn consume(mut conn: Conn, shared: Arc<Shared>) -> Result<ConsumerStats> {
    let mut stats = ConsumerStats::default();
    while !shared.stop.load(Ordering::Relaxed) {
        let reply = conn.get(&shared.pop_path).await?;
        let received = shared.epoch.elapsed();
        stats.pops += 1;
        shared.pops.fetch_add(1, Ordering::Relaxed);
        if reply.status == StatusCode::NO_CONTENT {
            stats.empty += 1;
            continue;
        }
        if reply.status != StatusCode::OK {
            return Err(Error::msg(format!(
                "pop answered {}: {}",
                reply.status,
                String::from_utf8_lossy(&reply.body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            )));
        }
        let body: PopBody = serde_json::from_slice(&reply.body).context("pop response")?;
        if body.messages.is_empty() {
            stats.empty += 1;
        }
        for message in body.messages {
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

impl cpu::Measured for LatencyResult {
    fn other_cpu(&self) -> f64 {
        self.cpu_cores.other
    }

    fn set_attempts(&mut self, attempts: u32) {
        self.attempts = attempts;
    }
}

/// The latency table.
pub(crate) fn table(cases: &[LatencyResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:>7} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>21}",
        "case",
        "sent",
        "delivered",
        "missing",
        "dups",
        "pops/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "push p50",
        "push p99",
        "lag ms",
        "cpu brk/pg/load/other"
    );
    for case in cases {
        let _ = writeln!(
            out,
            "{:<12} {:>7} {:>9} {:>8} {:>8} {:>8.0} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>9.2} {:>8.2} {:>21}",
            case.name,
            case.sent,
            case.delivered,
            case.missing,
            case.duplicates,
            case.window_pops_per_second,
            case.latency_ms.p50,
            case.latency_ms.p90,
            case.latency_ms.p99,
            case.latency_ms.max,
            case.push_latency_ms.p50,
            case.push_latency_ms.p99,
            case.max_send_lag_ms,
            cpu::columns(&case.cpu_cores),
        );
    }
    out
}
