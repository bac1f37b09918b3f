//! The `soak` case of the `scale` scenario (issue 20, item 5): `minutes` of
//! mixed traffic at half the measured maximum, with retention on, to show
//! that the broker's memory stays flat and storage levels off.
//!
//! Setup: one broker started with `RETENTION_INTERVAL=5000` on a fresh
//! database; queue `scale_soak` configured with `retentionEnabled`,
//! `completedRetentionSeconds` 60, `retryLimit` 2 and `dlqEnabled` (every
//! other option at its default); partitions `p0`..`p99`.
//!
//! Traffic: 8 producers, each push request 10 messages of one partition
//! (round-robin over the 100), each payload `{"data": <256 hex digits>}`; 8
//! consumers in consumer group `g`, each popping with a lease (`batch=10`,
//! long poll of 1 s) and acking the batch in one `POST /api/v1/ack/batch`.
//! Every message's fate is chosen at push time and carried in its
//! transaction id: 95% are acked `completed`; 4% are poison, acked `failed`
//! at every delivery (each failure gives the batch back, and at the third
//! delivery, `retryLimit` 2 being spent, the broker files it in the DLQ);
//! 1% are acked `dlq` (dead-lettered at once). The items of a batch after a
//! `failed` one with retries left are not applied and come back after it,
//! as ordered partitions require: the `refused` count.
//!
//! Deliveries per message is popped / consumed. Its floor for this mix is
//! what ordering forces: every message delivered once, plus, for each batch
//! whose ack stopped at a `failed` item with retries left, that item and
//! every one after it in the batch (`forced`): (consumed + forced) /
//! consumed. The two meet when nothing else comes back (no refused
//! dead letter, no lease expiry, no ack not found). With full batches of
//! `BATCH` the floor is about 1 + failed% x ((BATCH + 1) / 2 + (retryLimit -
//! 1) x BATCH), printed beside it.
//!
//! Phases: a 15 s calibration with unpaced producers measures the maximum
//! of this mix, min(push rate, consume rate) over its last 12 s; the backlog
//! is drained; then the soak runs for `minutes` with the producers paced to
//! half that maximum in total. Every sampling period (30 s, or
//! `minutes` x 60 / 20 when that is shorter) it records the broker's VmRSS
//! (and RssAnon) from `/proc/<pid>/status`; `pg_total_relation_size` of
//! `queen.log_segments`, `log_txns`, `log_consumers`, `log_dlq` and
//! `log_partitions`; the live segment and DLQ row counts and the group's lag
//! (messages behind its cursors); p99 over the interval of the push request
//! latency, of the pop request latency (pops that returned messages; a long
//! poll that waited for a push counts its wait), and of the ack request
//! latency; the cumulative pushed, consumed (completed + dead-lettered),
//! failed, dead-lettered, refused and error counts; the CPU cores used (the
//! broker, PostgreSQL, this tool, other work: a mean above `--max-other-cpu`
//! marks the run `disturbed`); and the broker's own account of its bounded
//! maps from `GET /metrics` (dedup cache and ack registry bytes, wake gates,
//! hot-list entries), to tell a cache filling from a leak.
//!
//! Verdicts:
//! - memory: the least-squares slope of RSS over the samples after the first
//!   20% of the soak (warm-up), in KiB per minute and in % of the mean RSS
//!   per hour. `flat` when the slope projects less than 1% of the mean RSS
//!   of growth per 10 minutes (6%/hour; a negative slope is flat);
//!   `GROWING` otherwise; `inconclusive` with fewer than 5 samples after
//!   warm-up. The broker's dedup cache fills for 1.25 dedup windows (375 s
//!   with the default 300 s window) before it levels off: the 30-minute
//!   default's 6-minute warm-up about covers it, and a short smoke run reads
//!   `GROWING` from that alone. So the slope of RSS net of what the broker
//!   accounts to its dedup cache and ack registry is reported too (not part
//!   of the verdict).
//! - storage: per table, the slope after warm-up and the largest size of the
//!   last third of the samples against the middle third: `plateau` when at
//!   most 1.25 times it. The verdict that matters is `log_segments`'s (what
//!   completed retention deletes); `log_dlq` grows with its rows by design
//!   (dead letters are kept), and `log_txns` levels off only after 15
//!   minutes (the sidecar is kept at least 900 s).
//!
//! Outputs: one sample line per interval and a summary table on stderr; an
//! SVG plot at `svg` (panels: RSS, table sizes on a log scale, p99
//! latencies, throughput) and the samples as CSV next to it (same name,
//! `.csv`); one JSON object with `"case": "soak"` in `report.scale`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::Serialize;
use serde_json::json;

use super::common::ScaleCase;
use crate::client::{self, Ack, Conn, Popped};
use crate::env::{self, CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::measure::cpu::{self, Usage};
use crate::measure::latency::p99;
use crate::measure::memory::{broker_memory, rss, BrokerMemory};
use crate::measure::{micros, Latency};
use crate::output::report::Report;
use crate::output::table::{fixed, Table};

const QUEUE: &str = "scale_soak";
const GROUP: &str = "g";
const PRODUCERS: usize = 8;
const CONSUMERS: usize = 8;
/// Messages per push request, and the pop batch.
const BATCH: usize = 10;
const PAYLOAD_BYTES: usize = 256;
const PARTITIONS: usize = 100;
/// The broker's `RETENTION_INTERVAL`, milliseconds.
const RETENTION_INTERVAL_MS: u64 = 5000;
const COMPLETED_RETENTION_SECONDS: u32 = 60;
const RETRY_LIMIT: u32 = 2;
/// Percent of the messages acked `failed` at every delivery, and `dlq`.
const FAILED_PERCENT: u16 = 4;
const DLQ_PERCENT: u16 = 1;
/// The calibration: its length, and the start of it left out of the rates.
const CALIBRATION: Duration = Duration::from_secs(15);
const CALIBRATION_WARMUP: Duration = Duration::from_secs(3);
/// The soak runs at this fraction of the calibrated maximum.
const LOAD_FRACTION: f64 = 0.5;
/// How long the backlog of the calibration may take to drain.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);
/// The longest sampling period, and the fewest samples a run gets.
const MAX_PERIOD_SECONDS: f64 = 30.0;
const MIN_SAMPLES: f64 = 20.0;
/// The first part of the soak, left out of the slopes.
const WARMUP_FRACTION: f64 = 0.2;
/// Flat: projected RSS growth per 10 minutes under this fraction of the mean.
const FLAT_PER_10_MINUTES: f64 = 0.01;
/// Plateau: the last third's largest size at most this times the middle's.
const PLATEAU_RATIO: f64 = 1.25;
/// Error messages kept for the report (all are counted).
const KEPT_ERRORS: usize = 20;

/// The sampling period for a soak of `minutes`: 30 s, or shorter so that the
/// run has at least 20 samples.
fn sample_period(minutes: f64) -> Duration {
    Duration::from_secs_f64((minutes * 60.0 / MIN_SAMPLES).clamp(1.0, MAX_PERIOD_SECONDS))
}

/// Counters and latencies the tasks share with the sampler.
#[derive(Default)]
struct Shared {
    /// Messages accepted by push (`queued`).
    pushed: AtomicU64,
    push_requests: AtomicU64,
    /// Pops that returned messages, and the messages (redeliveries included).
    pop_requests: AtomicU64,
    popped: AtomicU64,
    ack_requests: AtomicU64,
    /// `completed` acks applied.
    completed: AtomicU64,
    /// `failed` acks applied (a retry spent, or a dead letter filed).
    failed: AtomicU64,
    /// Acks that filed a dead letter, and of them the `dlq` ones.
    dead_lettered: AtomicU64,
    dlq_direct: AtomicU64,
    /// Ack items answered `success: false` (after a `failed` in the batch).
    refused: AtomicU64,
    /// Deliveries ordering forces again: per batch whose ack stopped at a
    /// `failed` item with retries left, that item and every one after it.
    forced: AtomicU64,
    errors: AtomicU64,
    latencies: Mutex<Latencies>,
    error_texts: Mutex<Vec<String>>,
}

/// Request latencies in microseconds since the sampler last took them.
#[derive(Default)]
struct Latencies {
    push: Vec<u32>,
    pop: Vec<u32>,
    ack: Vec<u32>,
}

#[derive(Clone, Copy)]
enum Kind {
    Push,
    Pop,
    Ack,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn record(&self, kind: Kind, elapsed: Duration) {
        let mut latencies = lock(&self.latencies);
        let list = match kind {
            Kind::Push => &mut latencies.push,
            Kind::Pop => &mut latencies.pop,
            Kind::Ack => &mut latencies.ack,
        };
        list.push(micros(elapsed));
    }

    fn take_latencies(&self) -> Latencies {
        std::mem::take(&mut *lock(&self.latencies))
    }

    fn error(&self, text: String) {
        let n = self.errors.fetch_add(1, Ordering::Relaxed);
        if n < 10 {
            eprintln!("queen-load:   soak error: {text}");
        }
        let mut kept = lock(&self.error_texts);
        if kept.len() < KEPT_ERRORS {
            kept.push(text);
        }
    }

    fn counts(&self) -> Counts {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Counts {
            pushed: get(&self.pushed),
            push_requests: get(&self.push_requests),
            pop_requests: get(&self.pop_requests),
            popped: get(&self.popped),
            ack_requests: get(&self.ack_requests),
            completed: get(&self.completed),
            failed: get(&self.failed),
            dead_lettered: get(&self.dead_lettered),
            dlq_direct: get(&self.dlq_direct),
            refused: get(&self.refused),
            forced: get(&self.forced),
            errors: get(&self.errors),
        }
    }
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, Serialize)]
struct Counts {
    pushed: u64,
    push_requests: u64,
    pop_requests: u64,
    popped: u64,
    ack_requests: u64,
    completed: u64,
    failed: u64,
    dead_lettered: u64,
    dlq_direct: u64,
    refused: u64,
    forced: u64,
    errors: u64,
}

impl Counts {
    /// Messages whose processing ended: completed or dead-lettered.
    fn consumed(&self) -> u64 {
        self.completed + self.dead_lettered
    }

    /// Deliveries per consumed message.
    fn deliveries_per_message(&self) -> f64 {
        self.popped as f64 / self.consumed().max(1) as f64
    }

    /// The floor ordering imposes on it: each message once, plus what a
    /// `failed` item with retries left sends back.
    fn ordering_floor(&self) -> f64 {
        (self.consumed() + self.forced) as f64 / self.consumed().max(1) as f64
    }
}

/// Deliveries per message ordering imposes with full batches: a poison
/// message's first failure sends back itself and, on average, half of its
/// batch behind it; each later failure a whole batch.
fn full_batch_floor() -> f64 {
    let batch = BATCH as f64;
    1.0 + f64::from(FAILED_PERCENT) / 100.0
        * ((batch + 1.0) / 2.0 + f64::from(RETRY_LIMIT - 1) * batch)
}

/// Sets the flag when dropped: the tasks stop whichever way `run` ends.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One sample of the soak.
#[derive(Debug, Clone, Serialize)]
struct Sample {
    /// Seconds since the soak (after calibration) started.
    seconds: f64,
    rss_kib: u64,
    rss_anon_kib: u64,
    segments_bytes: i64,
    txns_bytes: i64,
    consumers_bytes: i64,
    dlq_bytes: i64,
    partitions_bytes: i64,
    live_segments: i64,
    dlq_rows: i64,
    /// Messages behind group `g`'s cursors.
    lag: i64,
    /// p99 over the interval, milliseconds.
    push_p99_ms: f64,
    pop_p99_ms: f64,
    ack_p99_ms: f64,
    /// Messages per second over the interval.
    push_per_second: f64,
    consumed_per_second: f64,
    /// Cumulative over the soak (the calibration left out).
    counts: Counts,
    cpu_cores: Usage,
    /// What the broker's `GET /metrics` says of its memory.
    broker: BrokerMemory,
}

/// The table sizes of a sample, by table name, for the trends.
const TABLES: [&str; 5] = [
    "log_segments",
    "log_txns",
    "log_consumers",
    "log_dlq",
    "log_partitions",
];

impl Sample {
    fn table_bytes(&self) -> [i64; 5] {
        [
            self.segments_bytes,
            self.txns_bytes,
            self.consumers_bytes,
            self.dlq_bytes,
            self.partitions_bytes,
        ]
    }
}

const SIZES: &str = "SELECT pg_total_relation_size('queen.log_segments'), \
       pg_total_relation_size('queen.log_txns'), \
       pg_total_relation_size('queen.log_consumers'), \
       pg_total_relation_size('queen.log_dlq'), \
       pg_total_relation_size('queen.log_partitions'), \
       (SELECT count(*) FROM queen.log_segments), \
       (SELECT count(*) FROM queen.log_dlq)";

const LAG: &str = "SELECT coalesce(sum(p.last_offset - coalesce(c.committed, -1)), 0)::bigint \
       FROM queen.log_partitions p \
       LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = $1";

/// Column `index` of `row`, a `bigint`.
fn column(row: &tokio_postgres::Row, index: usize) -> Result<i64> {
    row.try_get(index)
        .with_context(|| format!("column {index} of a sample query"))
}

/// Messages behind group `g`'s cursors.
async fn read_lag(sql: &tokio_postgres::Client) -> Result<i64> {
    let row = sql
        .query_one(LAG, &[&GROUP])
        .await
        .context("read the lag")?;
    column(&row, 0)
}

pub(crate) async fn run(
    env: &Env,
    common: &CommonArgs,
    minutes: f64,
    svg: &Path,
    report: &mut Report,
) -> Result<()> {
    let started_at = SystemTime::now();
    let period = sample_period(minutes);
    let soak_length =
        Duration::try_from_secs_f64(minutes * 60.0).context("scale soak: --soak-minutes")?;
    let dbname = env.create_database("scale_soak").await?;
    let mut broker_common = common.clone();
    broker_common.broker_env.push((
        "RETENTION_INTERVAL".to_owned(),
        RETENTION_INTERVAL_MS.to_string(),
    ));
    let mut brokers = env.start_brokers(&broker_common, &dbname, 1).await?;
    let broker = brokers
        .first()
        .ok_or_else(|| Error::msg("scale soak: no broker started"))?;
    let (addr, broker_pid) = (broker.addr(), broker.pid());
    let postmaster_pid = env.postmaster_pid()?;
    let sql = queen_sql::connect::connect_one(&env.connect_config(&dbname))
        .await
        .context("connect to the scale soak database")?;
    configure(addr).await?;

    let shared = Arc::new(Shared::default());
    let consumers_stop = Arc::new(AtomicBool::new(false));
    let _consumers_guard = StopOnDrop(Arc::clone(&consumers_stop));
    let mut consumers = Vec::new();
    for _ in 0..CONSUMERS {
        let conn = Conn::connect(addr).await?;
        let (shared, stop) = (Arc::clone(&shared), Arc::clone(&consumers_stop));
        consumers.push(tokio::spawn(consumer(addr, conn, shared, stop)));
    }

    // Calibration: producers unpaced.
    eprintln!(
        "queen-load:   calibration: {} s, {PRODUCERS} unpaced producers, {CONSUMERS} consumers",
        CALIBRATION.as_secs()
    );
    let producers_stop = Arc::new(AtomicBool::new(false));
    let guard = StopOnDrop(Arc::clone(&producers_stop));
    let producers = start_producers(addr, &shared, &producers_stop, None).await?;
    tokio::time::sleep(CALIBRATION_WARMUP).await;
    let (before, before_at) = (shared.counts(), Instant::now());
    tokio::time::sleep(CALIBRATION - CALIBRATION_WARMUP).await;
    let (after, window) = (shared.counts(), before_at.elapsed().as_secs_f64());
    drop(guard);
    join(producers).await?;
    env::check_alive(&mut brokers)?;
    let calibration_latencies = shared.take_latencies();
    let push_max = (after.pushed - before.pushed) as f64 / window;
    let consume_max = (after.consumed() - before.consumed()) as f64 / window;
    let max_rate = push_max.min(consume_max);
    let target = max_rate * LOAD_FRACTION;
    eprintln!(
        "queen-load:   calibration: push {push_max:.0}/s, consume {consume_max:.0}/s, \
         maximum {max_rate:.0}/s; soak target {target:.0}/s"
    );
    if target < 1.0 {
        return Err(Error::msg(format!(
            "scale soak: the calibration measured no usable rate (push {push_max:.1}/s, \
             consume {consume_max:.1}/s); errors: {:?}",
            lock(&shared.error_texts)
        )));
    }
    let calibration = json!({
        "seconds": CALIBRATION.as_secs_f64(),
        "measured_seconds": window,
        "push_per_second": push_max,
        "consume_per_second": consume_max,
        "max_per_second": max_rate,
        "push_latency_ms": Latency::from_micros(calibration_latencies.push),
        "pop_latency_ms": Latency::from_micros(calibration_latencies.pop),
        "ack_latency_ms": Latency::from_micros(calibration_latencies.ack),
    });

    // Drain the calibration's backlog.
    let drain_started = Instant::now();
    let mut lag = read_lag(&sql).await?;
    let lag_after_calibration = lag;
    while lag > 0 && drain_started.elapsed() < DRAIN_LIMIT {
        tokio::time::sleep(Duration::from_millis(500)).await;
        lag = read_lag(&sql).await?;
    }
    let drain_seconds = drain_started.elapsed().as_secs_f64();
    eprintln!(
        "queen-load:   drained a lag of {lag_after_calibration} in {drain_seconds:.1} s \
         ({lag} left); soak: {minutes} min, a sample every {:.0} s",
        period.as_secs_f64()
    );

    // The soak.
    let _ = shared.take_latencies();
    let base = shared.counts();
    let producers_stop = Arc::new(AtomicBool::new(false));
    let guard = StopOnDrop(Arc::clone(&producers_stop));
    let per_producer = target / PRODUCERS as f64;
    let interval = Duration::try_from_secs_f64(BATCH as f64 / per_producer)
        .context("scale soak: the producers' pacing interval")?;
    let producers = start_producers(addr, &shared, &producers_stop, Some(interval)).await?;
    let soak_started = Instant::now();
    let mut samples = Vec::new();
    let mut totals = Latencies::default();
    let mut previous = (
        soak_started,
        base,
        cpu::sample(&[broker_pid], postmaster_pid),
    );
    let mut metrics_conn = Conn::connect(addr).await?;
    for k in 1u32.. {
        let due = (soak_started + period * k).min(soak_started + soak_length);
        tokio::time::sleep_until(due.into()).await;
        env::check_alive(&mut brokers)?;
        let now = Instant::now();
        let counts = shared.counts();
        let cpu = cpu::sample(&[broker_pid], postmaster_pid);
        let interval_latencies = shared.take_latencies();
        let row = sql.query_one(SIZES, &[]).await.context("sample sizes")?;
        let lag = read_lag(&sql).await?;
        let (rss_kib, rss_anon_kib) = rss(broker_pid)?;
        let broker = broker_memory(addr, &mut metrics_conn).await;
        let seconds = now.duration_since(previous.0).as_secs_f64();
        let rate = |a: u64, b: u64| b.saturating_sub(a) as f64 / seconds.max(1e-9);
        let sample = Sample {
            seconds: now.duration_since(soak_started).as_secs_f64(),
            rss_kib,
            rss_anon_kib,
            segments_bytes: column(&row, 0)?,
            txns_bytes: column(&row, 1)?,
            consumers_bytes: column(&row, 2)?,
            dlq_bytes: column(&row, 3)?,
            partitions_bytes: column(&row, 4)?,
            live_segments: column(&row, 5)?,
            dlq_rows: column(&row, 6)?,
            lag,
            push_p99_ms: p99(&interval_latencies.push),
            pop_p99_ms: p99(&interval_latencies.pop),
            ack_p99_ms: p99(&interval_latencies.ack),
            push_per_second: rate(previous.1.pushed, counts.pushed),
            consumed_per_second: rate(previous.1.consumed(), counts.consumed()),
            counts: since(&base, &counts),
            cpu_cores: cpu::usage(&previous.2, &cpu),
            broker,
        };
        totals.push.extend(interval_latencies.push);
        totals.pop.extend(interval_latencies.pop);
        totals.ack.extend(interval_latencies.ack);
        eprintln!("{}", sample_line(&sample));
        samples.push(sample);
        previous = (now, counts, cpu);
        if now >= soak_started + soak_length {
            break;
        }
    }
    let soak_seconds = soak_started.elapsed().as_secs_f64();
    drop(guard);
    join(producers).await?;
    consumers_stop.store(true, Ordering::Relaxed);
    join(consumers).await?;
    let end = since(&base, &shared.counts());
    env::stop_all(brokers).await?;
    env.drop_database(&dbname, common.keep).await?;

    let analysis = Analysis::of(&samples, soak_seconds);
    let settings = Settings {
        started_at,
        minutes,
        period,
        target,
        max_rate,
    };
    let csv_path = svg.with_extension("csv");
    let (svg_text, csv_text) = (plot(&samples, &analysis, &settings), csv(&samples));
    let cpu = mean_usage(&samples);
    let disturbed = cpu.other > common.max_other_cpu;
    eprint!(
        "{}",
        summary(&samples, &analysis, &settings, &end, soak_seconds)
    );
    eprintln!(
        "cpu cores, mean over the samples: broker {:.2}, postgres {:.2}, load generator {:.2}, \
         other work {:.2}{}",
        cpu.broker,
        cpu.postgres,
        cpu.loadgen,
        cpu.other,
        if disturbed {
            format!(
                " (DISTURBED: above {:.2}; read the latencies and the calibration with care)",
                common.max_other_cpu
            )
        } else {
            String::new()
        }
    );

    let error_texts = lock(&shared.error_texts).clone();
    report.push(ScaleCase(json!({
        "case": "soak",
        "settings": {
            "minutes": minutes,
            "sample_seconds": period.as_secs_f64(),
            "producers": PRODUCERS,
            "consumers": CONSUMERS,
            "batch": BATCH,
            "payload_bytes": PAYLOAD_BYTES,
            "partitions": PARTITIONS,
            "retention_interval_ms": RETENTION_INTERVAL_MS,
            "completed_retention_seconds": COMPLETED_RETENTION_SECONDS,
            "retry_limit": RETRY_LIMIT,
            "dlq_enabled": true,
            "failed_percent": FAILED_PERCENT,
            "dlq_percent": DLQ_PERCENT,
            "load_fraction": LOAD_FRACTION,
            "warmup_fraction": WARMUP_FRACTION,
        },
        "calibration": calibration,
        "drain": {
            "lag_after_calibration": lag_after_calibration,
            "seconds": drain_seconds,
            "lag_left": lag,
        },
        "target_per_second": target,
        "soak_seconds": soak_seconds,
        "achieved": {
            "push_per_second": end.pushed as f64 / soak_seconds,
            "consumed_per_second": end.consumed() as f64 / soak_seconds,
        },
        "totals": end,
        "deliveries_per_message": end.deliveries_per_message(),
        "ordering_floor": end.ordering_floor(),
        "full_batch_floor": full_batch_floor(),
        "latency_ms": {
            "push": Latency::from_micros(totals.push),
            "pop": Latency::from_micros(totals.pop),
            "ack": Latency::from_micros(totals.ack),
        },
        "cpu_cores_mean": cpu,
        "disturbed": disturbed,
        "rss": analysis.rss,
        "tables": analysis.tables,
        "storage_verdict": analysis.storage_verdict(),
        "svg": svg.display().to_string(),
        "csv": csv_path.display().to_string(),
        "error_samples": error_texts,
        "samples": samples,
    })));
    // After the figures are in the report: an unwritable path loses only the files.
    write_file(svg, &svg_text)?;
    write_file(&csv_path, &csv_text)?;
    eprintln!(
        "queen-load:   soak plot {}, samples {}",
        svg.display(),
        csv_path.display()
    );
    Ok(())
}

/// Configure the queue and make its partitions (an empty push creates none,
/// so the first pushes do; configure makes `Default` only).
async fn configure(addr: SocketAddr) -> Result<()> {
    Conn::connect(addr)
        .await?
        .configure(
            QUEUE,
            json!({
                "retentionEnabled": true,
                "completedRetentionSeconds": COMPLETED_RETENTION_SECONDS,
                "retryLimit": RETRY_LIMIT,
                "dlqEnabled": true,
            }),
        )
        .await
}

async fn start_producers(
    addr: SocketAddr,
    shared: &Arc<Shared>,
    stop: &Arc<AtomicBool>,
    interval: Option<Duration>,
) -> Result<Vec<tokio::task::JoinHandle<Result<()>>>> {
    let mut tasks = Vec::with_capacity(PRODUCERS);
    let start = tokio::time::Instant::now();
    for index in 0..PRODUCERS {
        let conn = Conn::connect(addr).await?;
        // Paced producers start spread over one interval.
        let ticker = interval.map(|interval| {
            let offset = interval.mul_f64(index as f64 / PRODUCERS as f64);
            let mut ticker = tokio::time::interval_at(start + offset, interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker
        });
        let (shared, stop) = (Arc::clone(shared), Arc::clone(stop));
        tasks.push(tokio::spawn(producer(
            addr, conn, shared, stop, index, ticker,
        )));
    }
    Ok(tasks)
}

async fn join(tasks: Vec<tokio::task::JoinHandle<Result<()>>>) -> Result<()> {
    for task in tasks {
        task.await.context("a scale soak task panicked")??;
    }
    Ok(())
}

/// Replace a connection that failed, after a pause; keep the old one when
/// the broker cannot be reached (the next request fails and comes back here).
async fn reconnect(addr: SocketAddr, conn: &mut Conn) {
    tokio::time::sleep(Duration::from_millis(200)).await;
    if let Ok(fresh) = Conn::connect(addr).await {
        *conn = fresh;
    }
}

/// The fate of a message, as the first letter of its transaction id:
/// `c` completed, `f` failed at every delivery, `d` dead-lettered at once.
fn fate() -> char {
    let random = uuid::Uuid::new_v4();
    let bytes = random.as_bytes();
    match u16::from_le_bytes([bytes[0], bytes[1]]) % 100 {
        n if n < FAILED_PERCENT => 'f',
        n if n < FAILED_PERCENT + DLQ_PERCENT => 'd',
        _ => 'c',
    }
}

fn push_body(partition: usize) -> Bytes {
    let items: Vec<_> = (0..BATCH)
        .map(|_| {
            json!({"queue": QUEUE,
                   "partition": format!("p{partition}"),
                   "transactionId": format!("{}{}", fate(), uuid::Uuid::new_v4().simple()),
                   "payload": {"data": crate::scenarios::soak::hex_payload(PAYLOAD_BYTES)}})
        })
        .collect();
    Bytes::from(json!({ "items": items }).to_string())
}

async fn producer(
    addr: SocketAddr,
    mut conn: Conn,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    index: usize,
    mut ticker: Option<tokio::time::Interval>,
) -> Result<()> {
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        if let Some(ticker) = ticker.as_mut() {
            ticker.tick().await;
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        let body = push_body((index * 13 + n) % PARTITIONS);
        n += 1;
        let sent = Instant::now();
        let reply = match conn.push_request(body).await {
            Ok(reply) => reply,
            Err(error) => {
                shared.error(format!("push: {error}"));
                reconnect(addr, &mut conn).await;
                continue;
            }
        };
        let elapsed = sent.elapsed();
        if reply.status.as_u16() != 201 {
            shared.error(format!("push: {} {}", reply.status, reply.snippet()));
            continue;
        }
        shared.record(Kind::Push, elapsed);
        shared.push_requests.fetch_add(1, Ordering::Relaxed);
        let queued = client::queued(&reply);
        shared.pushed.fetch_add(queued as u64, Ordering::Relaxed);
        if queued != BATCH {
            shared.error(format!(
                "push: {queued} of {BATCH} items queued: {}",
                reply.snippet()
            ));
        }
    }
    Ok(())
}

async fn consumer(
    addr: SocketAddr,
    mut conn: Conn,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let pop_path = format!(
        "/api/v1/pop/queue/{QUEUE}?consumerGroup={GROUP}&batch={BATCH}&wait=true&timeout=1000"
    );
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let reply = match conn.get(&pop_path).await {
            Ok(reply) => reply,
            Err(error) => {
                shared.error(format!("pop: {error}"));
                reconnect(addr, &mut conn).await;
                continue;
            }
        };
        let elapsed = sent.elapsed();
        if reply.status.as_u16() == 204 {
            continue;
        }
        let popped = match Popped::from_reply(reply) {
            Ok(popped) => popped,
            Err(error) => {
                shared.error(format!("pop: {error}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let messages = match popped.messages::<serde::de::IgnoredAny>() {
            Ok(messages) => messages,
            Err(error) => {
                shared.error(format!("pop answer: {error}"));
                continue;
            }
        };
        if messages.is_empty() {
            continue;
        }
        shared.record(Kind::Pop, elapsed);
        shared.pop_requests.fetch_add(1, Ordering::Relaxed);
        shared
            .popped
            .fetch_add(messages.len() as u64, Ordering::Relaxed);

        let statuses: Vec<&str> = messages
            .iter()
            .map(|m| match m.transaction_id.chars().next() {
                Some('f') => "failed",
                Some('d') => "dlq",
                _ => "completed",
            })
            .collect();
        let acks: Vec<Ack<'_>> = messages
            .iter()
            .zip(&statuses)
            .map(|(m, &status)| Ack {
                error: match status {
                    "failed" => Some("scale soak: simulated failed"),
                    "dlq" => Some("scale soak: simulated dlq"),
                    _ => None,
                },
                ..m.ack(status)
            })
            .collect();
        let sent = Instant::now();
        let reply = match conn.ack_request(&acks, Some(GROUP)).await {
            Ok(reply) => reply,
            Err(error) => {
                shared.error(format!("ack: {error}"));
                reconnect(addr, &mut conn).await;
                continue;
            }
        };
        let elapsed = sent.elapsed();
        let results = match client::ack_results(&reply, acks.len()) {
            Ok(results) => results,
            Err(error) => {
                shared.error(format!("ack: {error}"));
                continue;
            }
        };
        shared.record(Kind::Ack, elapsed);
        shared.ack_requests.fetch_add(1, Ordering::Relaxed);
        // The first `failed` item applied without a dead letter stopped the
        // cursor: it and everything after it come back.
        if let Some(stop) = results
            .iter()
            .zip(&statuses)
            .position(|(result, &status)| status == "failed" && result.success && !result.dlq)
        {
            shared
                .forced
                .fetch_add((results.len() - stop) as u64, Ordering::Relaxed);
        }
        for (result, &status) in results.iter().zip(&statuses) {
            if !result.success {
                shared.refused.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            match status {
                "completed" => shared.completed.fetch_add(1, Ordering::Relaxed),
                "failed" => shared.failed.fetch_add(1, Ordering::Relaxed),
                _ => 0,
            };
            if result.dlq {
                shared.dead_lettered.fetch_add(1, Ordering::Relaxed);
                if status == "dlq" {
                    shared.dlq_direct.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    Ok(())
}

/// `after - before`, counter by counter.
fn since(before: &Counts, after: &Counts) -> Counts {
    Counts {
        pushed: after.pushed - before.pushed,
        push_requests: after.push_requests - before.push_requests,
        pop_requests: after.pop_requests - before.pop_requests,
        popped: after.popped - before.popped,
        ack_requests: after.ack_requests - before.ack_requests,
        completed: after.completed - before.completed,
        failed: after.failed - before.failed,
        dead_lettered: after.dead_lettered - before.dead_lettered,
        dlq_direct: after.dlq_direct - before.dlq_direct,
        refused: after.refused - before.refused,
        forced: after.forced - before.forced,
        errors: after.errors - before.errors,
    }
}

/// The mean of the samples' CPU figures.
fn mean_usage(samples: &[Sample]) -> Usage {
    let n = samples.len().max(1) as f64;
    let mean = |f: fn(&Usage) -> f64| samples.iter().map(|s| f(&s.cpu_cores)).sum::<f64>() / n;
    Usage {
        broker: mean(|u| u.broker),
        postgres: mean(|u| u.postgres),
        loadgen: mean(|u| u.loadgen),
        machine: mean(|u| u.machine),
        other: mean(|u| u.other),
        machine_busy_fraction: mean(|u| u.machine_busy_fraction),
    }
}

fn mib(bytes: i64) -> f64 {
    bytes as f64 / 1_048_576.0
}

fn sample_line(s: &Sample) -> String {
    format!(
        "queen-load:   {:>6.0} s: RSS {:.1} MiB (dedup cache {:.1}, ack registry {:.1}); segments {:.1} MiB ({} live), txns {:.1} MiB, \
         consumers {} KiB, dlq {:.1} MiB ({} rows), partitions {} KiB; lag {}; \
         push {:.0}/s, consumed {:.0}/s; p99 push {:.1} pop {:.1} ack {:.1} ms; \
         pushed {}, consumed {}, failed {}, dlq {}, refused {}, errors {}",
        s.seconds,
        s.rss_kib as f64 / 1024.0,
        s.broker.dedup_cache_bytes as f64 / 1_048_576.0,
        s.broker.ack_registry_bytes as f64 / 1_048_576.0,
        mib(s.segments_bytes),
        s.live_segments,
        mib(s.txns_bytes),
        s.consumers_bytes / 1024,
        mib(s.dlq_bytes),
        s.dlq_rows,
        s.partitions_bytes / 1024,
        s.lag,
        s.push_per_second,
        s.consumed_per_second,
        s.push_p99_ms,
        s.pop_p99_ms,
        s.ack_p99_ms,
        s.counts.pushed,
        s.counts.consumed(),
        s.counts.failed,
        s.counts.dead_lettered,
        s.counts.refused,
        s.counts.errors,
    )
}

/// A least-squares line `y = intercept + slope x`, and the slope's standard
/// error (0 with fewer than 3 points).
#[derive(Debug, Clone, Copy, Serialize)]
struct Fit {
    slope: f64,
    intercept: f64,
    slope_stderr: f64,
}

fn least_squares(points: &[(f64, f64)]) -> Option<Fit> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let slope = sxy / sxx;
    let intercept = mean_y - slope * mean_x;
    let slope_stderr = if points.len() > 2 {
        let residuals: f64 = points
            .iter()
            .map(|p| (p.1 - intercept - slope * p.0).powi(2))
            .sum();
        (residuals / (n - 2.0) / sxx).sqrt()
    } else {
        0.0
    };
    Some(Fit {
        slope,
        intercept,
        slope_stderr,
    })
}

/// The RSS figures after warm-up.
#[derive(Debug, Clone, Serialize)]
struct RssTrend {
    warmup_seconds: f64,
    samples_used: usize,
    mean_kib: f64,
    first_kib: u64,
    last_kib: u64,
    max_kib: u64,
    /// The fit over minutes: KiB per minute.
    slope_kib_per_minute: f64,
    slope_stderr_kib_per_minute: f64,
    intercept_kib: f64,
    percent_of_mean_per_hour: f64,
    percent_of_mean_per_10_minutes: f64,
    /// The slope of VmRSS less the dedup cache and ack registry bytes.
    net_of_caches_slope_kib_per_minute: f64,
    net_of_caches_percent_per_10_minutes: f64,
    /// The `flat` limit, % of the mean RSS per 10 minutes.
    flat_limit_percent_per_10_minutes: f64,
    /// `flat`, `GROWING` or `inconclusive`.
    verdict: &'static str,
}

/// One table's size after warm-up.
#[derive(Debug, Clone, Serialize)]
struct TableTrend {
    table: &'static str,
    first_bytes: i64,
    last_bytes: i64,
    slope_kib_per_minute: f64,
    middle_third_max_bytes: i64,
    last_third_max_bytes: i64,
    /// `last_third_max / middle_third_max`.
    ratio: f64,
    /// `plateau` (ratio at most 1.25), `growing`, or `inconclusive`.
    trend: &'static str,
}

struct Analysis {
    rss: RssTrend,
    tables: Vec<TableTrend>,
}

impl Analysis {
    fn of(samples: &[Sample], soak_seconds: f64) -> Analysis {
        let warmup_seconds = soak_seconds * WARMUP_FRACTION;
        let after: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.seconds >= warmup_seconds)
            .collect();
        let points: Vec<(f64, f64)> = after
            .iter()
            .map(|s| (s.seconds / 60.0, s.rss_kib as f64))
            .collect();
        let mean_kib = if points.is_empty() {
            0.0
        } else {
            points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64
        };
        let fit = least_squares(&points);
        let slope = fit.map_or(0.0, |f| f.slope);
        let net: Vec<(f64, f64)> = after
            .iter()
            .map(|s| {
                let caches = s.broker.dedup_cache_bytes + s.broker.ack_registry_bytes;
                (s.seconds / 60.0, s.rss_kib as f64 - caches as f64 / 1024.0)
            })
            .collect();
        let net_mean = net.iter().map(|p| p.1).sum::<f64>() / net.len().max(1) as f64;
        let net_slope = least_squares(&net).map_or(0.0, |f| f.slope);
        let percent = |minutes: f64| {
            if mean_kib > 0.0 {
                slope * minutes / mean_kib * 100.0
            } else {
                0.0
            }
        };
        let per_10 = percent(10.0);
        let verdict = if after.len() < 5 || fit.is_none() {
            "inconclusive"
        } else if per_10 < FLAT_PER_10_MINUTES * 100.0 {
            "flat"
        } else {
            "GROWING"
        };
        let rss = RssTrend {
            warmup_seconds,
            samples_used: after.len(),
            mean_kib,
            first_kib: after.first().map_or(0, |s| s.rss_kib),
            last_kib: after.last().map_or(0, |s| s.rss_kib),
            max_kib: after.iter().map(|s| s.rss_kib).max().unwrap_or(0),
            slope_kib_per_minute: slope,
            slope_stderr_kib_per_minute: fit.map_or(0.0, |f| f.slope_stderr),
            intercept_kib: fit.map_or(0.0, |f| f.intercept),
            percent_of_mean_per_hour: percent(60.0),
            percent_of_mean_per_10_minutes: per_10,
            net_of_caches_slope_kib_per_minute: net_slope,
            net_of_caches_percent_per_10_minutes: if net_mean > 0.0 {
                net_slope * 10.0 / net_mean * 100.0
            } else {
                0.0
            },
            flat_limit_percent_per_10_minutes: FLAT_PER_10_MINUTES * 100.0,
            verdict,
        };
        let third = samples.len() / 3;
        let tables = TABLES
            .iter()
            .enumerate()
            .map(|(i, &table)| {
                let bytes = |s: &Sample| s.table_bytes()[i];
                let points: Vec<(f64, f64)> = after
                    .iter()
                    .map(|s| (s.seconds / 60.0, bytes(s) as f64 / 1024.0))
                    .collect();
                let max_of = |part: &[Sample]| part.iter().map(bytes).max().unwrap_or(0);
                let middle = max_of(samples.get(third..2 * third).unwrap_or_default());
                let last = max_of(samples.get(2 * third..).unwrap_or_default());
                let ratio = if middle > 0 {
                    last as f64 / middle as f64
                } else {
                    0.0
                };
                TableTrend {
                    table,
                    first_bytes: after.first().map_or(0, |s| bytes(s)),
                    last_bytes: after.last().map_or(0, |s| bytes(s)),
                    slope_kib_per_minute: least_squares(&points).map_or(0.0, |f| f.slope),
                    middle_third_max_bytes: middle,
                    last_third_max_bytes: last,
                    ratio,
                    trend: if third == 0 || middle == 0 {
                        "inconclusive"
                    } else if ratio <= PLATEAU_RATIO {
                        "plateau"
                    } else {
                        "growing"
                    },
                }
            })
            .collect();
        Analysis { rss, tables }
    }

    /// The `log_segments` trend: what completed retention keeps in check.
    fn storage_verdict(&self) -> &'static str {
        self.tables
            .iter()
            .find(|t| t.table == "log_segments")
            .map_or("inconclusive", |t| t.trend)
    }
}

/// What the plot's title and the summary say about the run.
struct Settings {
    started_at: SystemTime,
    minutes: f64,
    period: Duration,
    target: f64,
    max_rate: f64,
}

impl Settings {
    /// The load, then the queue.
    fn lines(&self) -> [String; 2] {
        [
            format!(
                "{} min at {:.0} msg/s ({:.0}% of the calibrated {:.0}/s), {PRODUCERS} producers \
                 + {CONSUMERS} consumers, batch {BATCH}, {PAYLOAD_BYTES} B payloads, \
                 {PARTITIONS} partitions, a sample every {:.0} s",
                self.minutes,
                self.target,
                LOAD_FRACTION * 100.0,
                self.max_rate,
                self.period.as_secs_f64()
            ),
            format!(
                "completed retention {COMPLETED_RETENTION_SECONDS} s (sweep every {} s), \
                 retryLimit {RETRY_LIMIT}, DLQ on; acks: {}% completed, {FAILED_PERCENT}% failed \
                 at every delivery, {DLQ_PERCENT}% dlq",
                RETENTION_INTERVAL_MS / 1000,
                100 - FAILED_PERCENT - DLQ_PERCENT
            ),
        ]
    }

    fn line(&self) -> String {
        self.lines().join("; ")
    }
}

fn summary(
    samples: &[Sample],
    analysis: &Analysis,
    settings: &Settings,
    end: &Counts,
    soak_seconds: f64,
) -> String {
    let mut table = Table::new(&[
        ("min", 6),
        ("RSS MiB", 8),
        ("segs MiB", 8),
        ("txns MiB", 8),
        ("cons KiB", 8),
        ("dlq MiB", 8),
        ("part KiB", 8),
        ("lag", 6),
        ("push/s", 7),
        ("cons/s", 7),
        ("push p99", 8),
        ("pop p99", 8),
        ("ack p99", 8),
        ("errors", 6),
    ]);
    for s in samples {
        table.row([
            fixed(s.seconds / 60.0, 1),
            fixed(s.rss_kib as f64 / 1024.0, 1),
            fixed(mib(s.segments_bytes), 1),
            fixed(mib(s.txns_bytes), 1),
            (s.consumers_bytes / 1024).to_string(),
            fixed(mib(s.dlq_bytes), 1),
            (s.partitions_bytes / 1024).to_string(),
            s.lag.to_string(),
            fixed(s.push_per_second, 0),
            fixed(s.consumed_per_second, 0),
            fixed(s.push_p99_ms, 1),
            fixed(s.pop_p99_ms, 1),
            fixed(s.ack_p99_ms, 1),
            s.counts.errors.to_string(),
        ]);
    }
    let mut out = format!("\nscale soak: {}\n", settings.line());
    out.push_str(&table.finish());
    let rss = &analysis.rss;
    let _ = writeln!(
        out,
        "pushed {} ({:.0}/s), consumed {} ({:.0}/s): {} completed, {} dead-lettered ({} by \
         `dlq`, {} after retries); {} failed acks, {} refused ack items, {} errors",
        end.pushed,
        end.pushed as f64 / soak_seconds,
        end.consumed(),
        end.consumed() as f64 / soak_seconds,
        end.completed,
        end.dead_lettered,
        end.dlq_direct,
        end.dead_lettered - end.dlq_direct,
        end.failed,
        end.refused,
        end.errors
    );
    let _ = writeln!(
        out,
        "deliveries per message {:.3}; the floor ordering imposes on this mix {:.3} (each \
         message once, plus the {} deliveries after a `failed` item with retries left in \
         its batch; {:.3} with full batches of {BATCH})",
        end.deliveries_per_message(),
        end.ordering_floor(),
        end.forced,
        full_batch_floor()
    );
    let _ = writeln!(
        out,
        "broker RSS after {:.0} s of warm-up ({} samples): mean {:.1} MiB, slope {:+.1} \
         ± {:.1} KiB/min = {:+.2}% of the mean per hour ({:+.3}% per 10 min; flat below \
         {:.0}%): {}",
        rss.warmup_seconds,
        rss.samples_used,
        rss.mean_kib / 1024.0,
        rss.slope_kib_per_minute,
        rss.slope_stderr_kib_per_minute,
        rss.percent_of_mean_per_hour,
        rss.percent_of_mean_per_10_minutes,
        rss.flat_limit_percent_per_10_minutes,
        rss.verdict
    );
    let _ = writeln!(
        out,
        "  net of the dedup cache and ack registry: {:+.1} KiB/min ({:+.3}% per 10 min)",
        rss.net_of_caches_slope_kib_per_minute, rss.net_of_caches_percent_per_10_minutes
    );
    for t in &analysis.tables {
        let _ = writeln!(
            out,
            "  {:<15} {:>9.1} -> {:>9.1} MiB, slope {:+9.1} KiB/min, last/middle third max \
             {:>5.2}: {}",
            t.table,
            mib(t.first_bytes),
            mib(t.last_bytes),
            t.slope_kib_per_minute,
            t.ratio,
            t.trend
        );
    }
    let _ = writeln!(
        out,
        "storage (log_segments): {}; log_dlq keeps every dead letter, log_txns levels off \
         after 900 s",
        analysis.storage_verdict()
    );
    out
}

/// Write `text` to `path`, making its parent directories.
fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
}

fn csv(samples: &[Sample]) -> String {
    let mut out = String::from(
        "seconds,rss_kib,rss_anon_kib,log_segments_bytes,log_txns_bytes,log_consumers_bytes,\
         log_dlq_bytes,log_partitions_bytes,live_segments,dlq_rows,lag,push_p99_ms,pop_p99_ms,\
         ack_p99_ms,push_per_second,consumed_per_second,pushed,consumed,completed,failed,\
         dead_lettered,dlq_direct,refused,errors,push_requests,pop_requests,ack_requests,\
         cpu_broker,cpu_postgres,cpu_loadgen,cpu_other,dedup_cache_bytes,ack_registry_bytes,\
         wake_gates,hotlist_entries\n",
    );
    for s in samples {
        let c = &s.counts;
        let _ = writeln!(
            out,
            "{:.1},{},{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.1},{:.1},{},{},{},{},{},{},\
             {},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{},{},{},{}",
            s.seconds,
            s.rss_kib,
            s.rss_anon_kib,
            s.segments_bytes,
            s.txns_bytes,
            s.consumers_bytes,
            s.dlq_bytes,
            s.partitions_bytes,
            s.live_segments,
            s.dlq_rows,
            s.lag,
            s.push_p99_ms,
            s.pop_p99_ms,
            s.ack_p99_ms,
            s.push_per_second,
            s.consumed_per_second,
            c.pushed,
            c.consumed(),
            c.completed,
            c.failed,
            c.dead_lettered,
            c.dlq_direct,
            c.refused,
            c.errors,
            c.push_requests,
            c.pop_requests,
            c.ack_requests,
            s.cpu_cores.broker,
            s.cpu_cores.postgres,
            s.cpu_cores.loadgen,
            s.cpu_cores.other,
            s.broker.dedup_cache_bytes,
            s.broker.ack_registry_bytes,
            s.broker.wake_gates,
            s.broker.hotlist_entries,
        );
    }
    out
}

// The plot.

const WIDTH: f64 = 1000.0;
const LEFT: f64 = 85.0;
const PLOT_WIDTH: f64 = 690.0;
const PANEL_HEIGHT: f64 = 190.0;
const PANEL_GAP: f64 = 75.0;
const TOP: f64 = 125.0;
const COLORS: [&str; 5] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];

struct Series {
    name: String,
    color: &'static str,
    points: Vec<(f64, f64)>,
    dashed: bool,
}

impl Series {
    fn new(name: &str, color: &'static str, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.to_owned(),
            color,
            points,
            dashed: false,
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Scale {
    Linear,
    Log,
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mut power = 1.0;
    while power * 10.0 <= raw {
        power *= 10.0;
    }
    while power > raw {
        power /= 10.0;
    }
    let fraction = raw / power;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * power
}

/// A tick label: as many decimals as the step needs.
fn tick_label(value: f64, step: f64) -> String {
    let mut decimals = 0;
    let mut scaled = step;
    while scaled < 0.999 && decimals < 6 {
        scaled *= 10.0;
        decimals += 1;
    }
    format!("{value:.decimals$}")
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One panel of the plot.
struct Panel<'a> {
    title: &'a str,
    /// The y axis label.
    unit: &'a str,
    series: &'a [Series],
    scale: Scale,
    /// Grey the x range up to this (the warm-up).
    shade: Option<f64>,
}

/// A y value to its pixel row.
type Mapping = Box<dyn Fn(f64) -> f64>;

/// Draw one panel at `top`: frame, grid, ticks, axis labels, the series and
/// a legend.
fn panel(out: &mut String, top: f64, x_max: f64, spec: &Panel<'_>) {
    let Panel {
        title,
        unit,
        series,
        scale,
        shade,
    } = *spec;
    let bottom = top + PANEL_HEIGHT;
    let x_px = |x: f64| LEFT + x / x_max * PLOT_WIDTH;
    let values = || series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="{}" font-size="14" font-weight="bold">{}</text>"#,
        top - 10.0,
        escape(title)
    );
    if let Some(until) = shade.filter(|&u| u > 0.0) {
        let _ = writeln!(
            out,
            r##"<rect x="{LEFT}" y="{top}" width="{:.1}" height="{PANEL_HEIGHT}" fill="#eeeeee"/><text x="{:.1}" y="{:.1}" font-size="10" fill="#777">warm-up</text>"##,
            x_px(until.min(x_max)) - LEFT,
            LEFT + 4.0,
            top + 12.0
        );
    }
    // The y mapping and its ticks.
    let (y_px, ticks): (Mapping, Vec<(f64, String)>) = match scale {
        Scale::Linear => {
            let max = values().fold(0.0_f64, f64::max);
            let step = nice_step(if max > 0.0 { max * 1.05 / 5.0 } else { 0.2 });
            let y_max = (max * 1.05 / step).ceil().max(1.0) * step;
            let mut ticks = Vec::new();
            let mut value = 0.0;
            while value <= y_max * 1.0001 {
                ticks.push((value, tick_label(value, step)));
                value += step;
            }
            (
                Box::new(move |y: f64| bottom - y / y_max * PANEL_HEIGHT),
                ticks,
            )
        }
        Scale::Log => {
            let positive = || values().filter(|v| *v > 0.0);
            let min = positive().fold(f64::INFINITY, f64::min);
            let max = positive().fold(0.0_f64, f64::max);
            let (min, max) = if min.is_finite() && max > 0.0 {
                (min, max)
            } else {
                (0.01, 1.0)
            };
            let mut lo = 1.0;
            while lo > min {
                lo /= 10.0;
            }
            while lo * 10.0 <= min {
                lo *= 10.0;
            }
            let mut hi = lo * 10.0;
            while hi < max {
                hi *= 10.0;
            }
            let mut ticks = Vec::new();
            let mut value = lo;
            while value <= hi * 1.0001 {
                ticks.push((value, tick_label(value, value)));
                value *= 10.0;
            }
            let (log_lo, log_hi) = (lo.log10(), hi.log10());
            (
                Box::new(move |y: f64| {
                    bottom - (y.max(lo).log10() - log_lo) / (log_hi - log_lo) * PANEL_HEIGHT
                }),
                ticks,
            )
        }
    };
    for (value, label) in &ticks {
        let y = y_px(*value);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#dddddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{label}</text>"##,
            LEFT + PLOT_WIDTH,
            LEFT - 6.0,
            y + 4.0
        );
    }
    let x_step = nice_step(x_max / 8.0);
    let mut x = 0.0;
    while x <= x_max * 1.0001 {
        let px = x_px(x);
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{bottom}" stroke="#eeeeee"/><text x="{px:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
            bottom + 15.0,
            tick_label(x, x_step)
        );
        x += x_step;
    }
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{top}" width="{PLOT_WIDTH}" height="{PANEL_HEIGHT}" fill="none" stroke="#333"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">minutes since the soak started</text>"#,
        LEFT + PLOT_WIDTH / 2.0,
        bottom + 32.0
    );
    let mid = top + PANEL_HEIGHT / 2.0;
    let _ = writeln!(
        out,
        r#"<text x="22" y="{mid:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 22 {mid:.1})">{}</text>"#,
        escape(unit)
    );
    for (i, s) in series.iter().enumerate() {
        let points: Vec<String> = s
            .points
            .iter()
            .filter(|p| scale == Scale::Linear || p.1 > 0.0)
            .map(|&(x, y)| format!("{:.1},{:.1}", x_px(x), y_px(y)))
            .collect();
        let dash = if s.dashed {
            r#" stroke-dasharray="6,4""#
        } else {
            ""
        };
        if points.len() == 1 {
            let _ = writeln!(
                out,
                r#"<circle cx="{}" r="2.5" fill="{}"/>"#,
                points[0].replace(',', "\" cy=\""),
                s.color
            );
        } else if !points.is_empty() {
            let _ = writeln!(
                out,
                r#"<polyline fill="none" stroke="{}" stroke-width="1.8"{dash} points="{}"/>"#,
                s.color,
                points.join(" ")
            );
        }
        let legend_y = top + 14.0 + 18.0 * i as f64;
        let legend_x = LEFT + PLOT_WIDTH + 15.0;
        let _ = writeln!(
            out,
            r#"<line x1="{legend_x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="2"{dash}/><text x="{:.1}" y="{legend_y:.1}" font-size="11">{}</text>"#,
            legend_y - 4.0,
            legend_x + 22.0,
            legend_y - 4.0,
            s.color,
            legend_x + 28.0,
            escape(&s.name)
        );
    }
}

fn plot(samples: &[Sample], analysis: &Analysis, settings: &Settings) -> String {
    let x_max = samples
        .last()
        .map_or(settings.minutes, |s| s.seconds / 60.0)
        .max(settings.minutes)
        .max(1e-3);
    let points = |f: &dyn Fn(&Sample) -> f64| -> Vec<(f64, f64)> {
        samples.iter().map(|s| (s.seconds / 60.0, f(s))).collect()
    };
    let rss = &analysis.rss;
    let warmup_minutes = rss.warmup_seconds / 60.0;
    let mut rss_series = vec![
        Series::new("VmRSS", COLORS[0], points(&|s| s.rss_kib as f64 / 1024.0)),
        Series::new(
            "RssAnon",
            COLORS[4],
            points(&|s| s.rss_anon_kib as f64 / 1024.0),
        ),
        Series::new(
            "dedup cache",
            COLORS[2],
            points(&|s| s.broker.dedup_cache_bytes as f64 / 1_048_576.0),
        ),
        Series::new(
            "ack registry",
            COLORS[3],
            points(&|s| s.broker.ack_registry_bytes as f64 / 1_048_576.0),
        ),
    ];
    if rss.verdict != "inconclusive" {
        let line = |x: f64| (rss.intercept_kib + rss.slope_kib_per_minute * x) / 1024.0;
        rss_series.push(Series {
            name: format!("fit {:+.1} KiB/min", rss.slope_kib_per_minute),
            color: COLORS[1],
            points: vec![(warmup_minutes, line(warmup_minutes)), (x_max, line(x_max))],
            dashed: true,
        });
    }
    let table_series: Vec<Series> = TABLES
        .iter()
        .enumerate()
        .map(|(i, table)| {
            Series::new(
                table,
                COLORS[i % COLORS.len()],
                points(&|s| mib(s.table_bytes()[i])),
            )
        })
        .collect();
    let latency_series = vec![
        Series::new("push", COLORS[0], points(&|s| s.push_p99_ms)),
        Series::new("pop (with messages)", COLORS[2], points(&|s| s.pop_p99_ms)),
        Series::new("ack", COLORS[1], points(&|s| s.ack_p99_ms)),
    ];
    let throughput_series = vec![
        Series::new("pushed", COLORS[0], points(&|s| s.push_per_second)),
        Series::new("consumed", COLORS[2], points(&|s| s.consumed_per_second)),
        Series {
            name: "target".to_owned(),
            color: COLORS[3],
            points: vec![(0.0, settings.target), (x_max, settings.target)],
            dashed: true,
        },
    ];
    let height = TOP + 4.0 * (PANEL_HEIGHT + PANEL_GAP);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="100%" height="100%" fill="white"/>
<text x="{LEFT}" y="26" font-size="17" font-weight="bold">Queen scale soak, {}</text>
<text x="{LEFT}" y="46" font-size="12">broker RSS after warm-up: {} ({:+.1} KiB/min, {:+.2}% of the mean per hour; flat below {:.0}% per 10 min); log_segments: {}</text>
<text x="{LEFT}" y="64" font-size="11">{}</text>
<text x="{LEFT}" y="79" font-size="11">{}</text>"#,
        utc_date(settings.started_at),
        rss.verdict,
        rss.slope_kib_per_minute,
        rss.percent_of_mean_per_hour,
        rss.flat_limit_percent_per_10_minutes,
        analysis.storage_verdict(),
        escape(&settings.lines()[0]),
        escape(&settings.lines()[1])
    );
    let panels = [
        Panel {
            title: "Broker memory",
            unit: "RSS (MiB)",
            series: &rss_series,
            scale: Scale::Linear,
            shade: Some(warmup_minutes),
        },
        Panel {
            title: "PostgreSQL table sizes (pg_total_relation_size, log scale)",
            unit: "size (MiB)",
            series: &table_series,
            scale: Scale::Log,
            shade: None,
        },
        Panel {
            title: "Request latency p99 per sampling interval",
            unit: "p99 (ms)",
            series: &latency_series,
            scale: Scale::Linear,
            shade: None,
        },
        Panel {
            title: "Throughput per sampling interval",
            unit: "messages per second",
            series: &throughput_series,
            scale: Scale::Linear,
            shade: None,
        },
    ];
    for (i, spec) in panels.iter().enumerate() {
        let top = TOP + i as f64 * (PANEL_HEIGHT + PANEL_GAP);
        panel(&mut out, top, x_max, spec);
    }
    out.push_str("</svg>\n");
    out
}

/// `YYYY-MM-DD HH:MM UTC`.
fn utc_date(at: SystemTime) -> String {
    let secs = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let secs = i64::try_from(secs).unwrap_or(0);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil from days (H. Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampling_period_is_30_s_or_a_twentieth_of_the_run() {
        assert_eq!(sample_period(30.0), Duration::from_secs(30));
        assert_eq!(sample_period(2.0), Duration::from_secs(6));
    }

    #[test]
    fn least_squares_finds_the_line() {
        let fit = least_squares(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]).map(|f| f.slope);
        assert_eq!(fit, Some(2.0));
        assert!(least_squares(&[(1.0, 1.0)]).is_none());
    }

    #[test]
    fn nice_steps_are_1_2_5() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.5), 2.0);
        assert_eq!(nice_step(30.0), 50.0);
        assert_eq!(tick_label(0.25, 0.05), "0.25");
    }

    #[test]
    fn dates_are_civil_utc() {
        let at = UNIX_EPOCH + Duration::from_secs(1_709_210_096); // 2024-02-29 12:34:56
        assert_eq!(utc_date(at), "2024-02-29 12:34 UTC");
    }
}
