//! The `push` scenario: `POST /api/v1/push` throughput over a matrix of batch
//! size x partitions x concurrent producers.
//!
//! Every case runs on its own database and its own broker process, so no case
//! inherits another's dead tuples, autovacuum debt or caches, and so the
//! database's commit counter can be read exactly (see `stats.rs`):
//!
//! 1. create database `push_<n>`, start `queen-server` on it (`--brokers N`:
//!    N of them, producer `k` talking to broker `k % N`), open one keep-alive
//!    connection per producer;
//! 2. create the queue and every partition: requests of one item per partition
//!    (up to 1,000 items each), so even 10,000 partitions all exist, each with
//!    one segment, before anything is measured;
//! 3. warm-up: producers push for `--warmup` seconds, then drain: no request
//!    in flight;
//! 4. settle ([`stats::SETTLE`]) so every warm-up commit is counted, then read
//!    the counters and the CPU clocks;
//! 5. the window: producers push for `--duration` seconds, then drain; the
//!    window's length runs until the last response;
//! 6. read the exact counters (xids, WAL) and CPU clocks; stop the brokers
//!    (their sessions flush their statistics as they exit) and read
//!    `xact_commit`;
//! 7. count the window's segments (created after the quiet point of step 4)
//!    and check their messages equal the items acknowledged as `queued`, and
//!    that every message and partition is there; drop the database (kept with
//!    `--keep`, for inspection).
//!
//! The matrix is `matrix.rs`'s (shared with the ceiling), each shape with one
//! broker, plus two shapes with two brokers on the same database; `--brokers`
//! replaces that with shapes x the given broker counts.
//!
//! Producer `k`'s `j`-th request carries `batch` items for partition
//! `(k + j * producers) % partitions`, so every partition gets traffic. Every
//! response must be 201 with every item `queued`; any failure fails the run.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::StatusCode;
use serde::{Deserialize, Serialize};

use crate::cpu::{self, Usage};
use crate::env::{self, CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::http::{Conn, Reply};
use crate::matrix::{Axes, Shape};
use crate::payload::{self, Bodies, TxnIds};
use crate::report::{Latency, Report};
use crate::stats;

/// Shapes pushed through several brokers by default: (shape, brokers).
const MULTI_BROKER: &[(Shape, usize)] = &[
    (Shape::new(100, 100, 16), 2),
    (Shape::new(1000, 100, 16), 2),
];

/// The same, with `--quick`.
const QUICK_MULTI_BROKER: &[(Shape, usize)] = &[(Shape::new(1000, 100, 16), 2)];

/// Items per partition-creating request.
const CREATE_CHUNK: usize = 1000;

/// Measured seconds per case: default, and with `--quick`.
pub(crate) const DURATION: f64 = 5.0;
pub(crate) const QUICK_DURATION: f64 = 2.0;

/// Arguments of `queen-load push`.
#[derive(Debug, clap::Args)]
pub(crate) struct PushArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    #[command(flatten)]
    pub(crate) opts: PushOpts,
}

/// The push scenario's settings.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct PushOpts {
    /// Seconds each case is measured [default: 5, or 2 with --quick].
    #[arg(long, value_name = "SECS")]
    pub(crate) duration: Option<f64>,
    /// Seconds of load before each window, not counted.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub(crate) warmup: f64,
    /// A reduced matrix with 2-second windows, for smoke tests.
    #[arg(long)]
    pub(crate) quick: bool,
    #[command(flatten)]
    pub(crate) axes: Axes,
    /// Brokers on the same database, producers spread over them,
    /// comma-separated [default: 1 for every shape, plus 2 for b100 and b1000
    /// x p100 x c16].
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    pub(crate) brokers: Vec<usize>,
    /// Who makes the transaction ids: `client` (a fresh UUIDv7 per item, as
    /// the SDKs send; the broker probes for duplicates) or `broker` (none
    /// sent; the broker generates them and skips the probe).
    #[arg(long, value_enum, default_value_t = TxnSource::Client)]
    pub(crate) transaction_ids: TxnSource,
    /// Seconds to wait after the warm-up drains, so PostgreSQL has flushed the
    /// warm-up's commit counts before the window starts (0 makes the commit
    /// figures approximate).
    #[arg(long, value_name = "SECS", default_value_t = stats::SETTLE.as_secs_f64())]
    pub(crate) settle: f64,
}

/// `--transaction-ids`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TxnSource {
    Client,
    Broker,
}

impl TxnSource {
    fn txn_ids(self) -> TxnIds {
        match self {
            TxnSource::Client => TxnIds::Fresh,
            TxnSource::Broker => TxnIds::Broker,
        }
    }
}

/// One case of the matrix.
#[derive(Debug, Clone, Copy)]
struct Case {
    shape: Shape,
    brokers: usize,
}

impl Case {
    fn name(self) -> String {
        if self.brokers == 1 {
            self.shape.name()
        } else {
            format!("{} n{}", self.shape.name(), self.brokers)
        }
    }
}

impl PushOpts {
    /// The settings `all` runs with.
    pub(crate) fn for_all(quick: bool, duration: Option<f64>) -> PushOpts {
        PushOpts {
            duration,
            warmup: 1.0,
            quick,
            axes: Axes::default(),
            brokers: Vec::new(),
            transaction_ids: TxnSource::Client,
            settle: stats::SETTLE.as_secs_f64(),
        }
    }

    fn matrix(&self) -> Vec<Case> {
        let shapes = self.axes.shapes(self.quick);
        if !self.brokers.is_empty() {
            return shapes
                .iter()
                .flat_map(|&shape| {
                    self.brokers
                        .iter()
                        .map(move |&brokers| Case { shape, brokers })
                })
                .collect();
        }
        let mut cases: Vec<Case> = shapes
            .iter()
            .map(|&shape| Case { shape, brokers: 1 })
            .collect();
        if !self.axes.explicit() {
            let extra = if self.quick {
                QUICK_MULTI_BROKER
            } else {
                MULTI_BROKER
            };
            cases.extend(
                extra
                    .iter()
                    .map(|&(shape, brokers)| Case { shape, brokers }),
            );
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
        seconds("settle", self.settle)?;
        if self.duration() == 0.0 {
            return Err(Error::msg("--duration must be more than 0"));
        }
        let matrix = self.matrix();
        if matrix.iter().any(|case| {
            case.shape.batch == 0
                || case.shape.partitions == 0
                || case.shape.concurrency == 0
                || case.brokers == 0
        }) {
            return Err(Error::msg(
                "batch sizes, partitions, producers and brokers must be >= 1",
            ));
        }
        Ok(())
    }

    /// The settings, for the report.
    pub(crate) fn settings(&self, bodies: &Bodies) -> serde_json::Value {
        serde_json::json!({
            "duration_seconds": self.duration(),
            "warmup_seconds": self.warmup,
            "settle_seconds": self.settle,
            "quick": self.quick,
            "cases": self.matrix().iter().map(|case| case.name()).collect::<Vec<_>>(),
            "payload_bytes": payload::payload_len(bodies),
            "transaction_ids": match self.transaction_ids {
                TxnSource::Client => "a fresh UUIDv7 per item, sent by the client (so the \
                                      broker runs its duplicate probe, as for SDK traffic)",
                TxnSource::Broker => "none sent: generated by the broker, which skips its \
                                      duplicate probe",
            },
        })
    }
}

/// `--name` must be a number of seconds >= 0.
pub(crate) fn seconds(name: &str, value: f64) -> Result<()> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(Error::msg(format!(
            "--{name} must be a number of seconds >= 0"
        )))
    }
}

/// Run every case, adding each result to `report` as it finishes; stop at
/// the first failing case.
pub(crate) async fn run(
    env: &Env,
    common: &CommonArgs,
    opts: &PushOpts,
    bodies: &Arc<Bodies>,
    report: &mut Report,
) -> Result<()> {
    let matrix = opts.matrix();
    for (index, &case) in matrix.iter().enumerate() {
        eprintln!(
            "queen-load: push case {}/{} {}",
            index + 1,
            matrix.len(),
            case.name()
        );
        let result = cpu::least_disturbed(common.max_other_cpu, common.retries, || {
            run_case(env, common, opts, bodies, case)
        })
        .await
        .map_err(|error| error.wrap(format!("push case {}", case.name())))?;
        eprintln!("queen-load:   {}", summary_line(&result));
        report.push.push(result);
    }
    Ok(())
}

/// One case on its own database and brokers.
async fn run_case(
    env: &Env,
    common: &CommonArgs,
    opts: &PushOpts,
    bodies: &Arc<Bodies>,
    case: Case,
) -> Result<PushResult> {
    let shape = case.shape;
    let dbname = env.create_database("push").await?;
    let mut brokers = env.start_brokers(common, &dbname, case.brokers).await?;
    let postmaster = env.postmaster_pid()?;
    let pids = env::pids(&brokers);

    let shared = Arc::new(Shared {
        queue: format!(
            "bench.push.b{}-p{}-c{}-n{}",
            shape.batch, shape.partitions, shape.concurrency, case.brokers
        ),
        partitions: (0..shape.partitions).map(|p| format!("p{p}")).collect(),
        shape,
        bodies: Arc::clone(bodies),
        next_id: AtomicU64::new(0),
        txn: opts.transaction_ids.txn_ids(),
    });
    let mut producers = Vec::with_capacity(shape.concurrency);
    for k in 0..shape.concurrency {
        producers.push(Producer {
            k,
            conn: Conn::connect(brokers[k % brokers.len()].addr()).await?,
            sent: 0,
        });
    }

    // The queue and every partition.
    let created = create_partitions(&mut producers[0].conn, &shared).await?;

    // Warm-up, drained.
    let warmup_deadline = Instant::now() + Duration::from_secs_f64(opts.warmup);
    let (producers, warm) = phase(producers, &shared, warmup_deadline).await?;
    warm.check("warm-up")?;
    env::check_alive(&mut brokers)?;

    // Quiet point A: every warm-up commit counted.
    tokio::time::sleep(Duration::from_secs_f64(opts.settle)).await;
    let commits_before = stats::db_counters(&env.admin, &dbname).await?;
    let point_before = stats::cluster_point(&env.admin).await?;
    let cpu_before = cpu::sample(&pids, postmaster);

    // The window, drained.
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(opts.duration());
    let (producers, window) = phase(producers, &shared, deadline).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu_after = cpu::sample(&pids, postmaster);
    let point_after = stats::cluster_point(&env.admin).await?;
    window.check("window")?;
    env::check_alive(&mut brokers)?;

    // Quiet point B: the brokers' sessions flush their counts as they exit.
    drop(producers);
    env::stop_all(brokers).await?;
    stats::wait_sessions_gone(&env.admin, &dbname, Duration::from_secs(30)).await?;
    let commits_after = stats::db_counters(&env.admin, &dbname).await?;

    let (segments, all_segments, partitions) =
        stats::segments(&env.connect_config(&dbname), point_before.now).await?;
    let window_messages = i64::try_from(window.messages).context("message count")?;
    let total_messages =
        i64::try_from(created + warm.messages + window.messages).context("message count")?;
    if segments.messages != window_messages || all_segments.messages != total_messages {
        return Err(Error::msg(format!(
            "the database holds {} messages from the window ({} in all), but {} were \
             acknowledged as queued ({} with the warm-up and partition creation)",
            segments.messages, all_segments.messages, window_messages, total_messages
        )));
    }
    if partitions != i64::try_from(shape.partitions).context("partition count")? {
        return Err(Error::msg(format!(
            "the database holds {partitions} partitions, expected {}",
            shape.partitions
        )));
    }
    env.drop_database(&dbname, common.keep).await?;

    let messages = to_f64(window.messages);
    let per_message = |value: f64| {
        if messages > 0.0 {
            value / messages
        } else {
            0.0
        }
    };
    let commits = commits_after.xact_commit - commits_before.xact_commit;
    let write_xids = point_after.next_xid - point_before.next_xid;
    let wal_bytes = point_after.wal_lsn - point_before.wal_lsn;
    Ok(PushResult {
        name: case.name(),
        shape,
        batch: shape.batch,
        partitions: shape.partitions,
        producers: shape.concurrency,
        brokers: case.brokers,
        seconds,
        requests: window.requests,
        messages: window.messages,
        warmup_messages: warm.messages,
        messages_per_second: messages / seconds,
        requests_per_second: to_f64(window.requests) / seconds,
        latency_ms: Latency::from_micros(window.latencies_us),
        commits,
        commits_per_message: per_message(to_f64_i(commits)),
        rollbacks: commits_after.xact_rollback - commits_before.xact_rollback,
        write_xids,
        write_xids_per_message: per_message(to_f64_i(write_xids)),
        segments: segments.rows,
        messages_per_segment: if segments.rows > 0 {
            to_f64_i(segments.messages) / to_f64_i(segments.rows)
        } else {
            0.0
        },
        stored_bytes_per_message: per_message(to_f64_i(segments.blob_bytes)),
        wal_bytes_per_message: per_message(to_f64_i(wal_bytes)),
        checkpoints: point_after.checkpoints - point_before.checkpoints,
        cpu_cores: cpu::usage(&cpu_before, &cpu_after),
        attempts: 1,
        messages_per_second_timeline: window.timeline,
    })
}

/// Create the queue and every partition with one message each, in requests of
/// up to [`CREATE_CHUNK`] items (one per partition). Returns the messages pushed.
async fn create_partitions(conn: &mut Conn, shared: &Shared) -> Result<u64> {
    let mut created = 0;
    for chunk in shared.partitions.chunks(CREATE_CHUNK) {
        let n = u64::try_from(chunk.len()).context("chunk size")?;
        let first_id = shared.next_id.fetch_add(n, Ordering::Relaxed);
        let mut body = Vec::with_capacity(chunk.len() * 1200 + 64);
        payload::push_request_spread(
            &mut body,
            &shared.bodies,
            &shared.queue,
            chunk,
            first_id,
            shared.txn,
        );
        let reply = conn.post_json("/api/v1/push", Bytes::from(body)).await?;
        check_reply(&reply, chunk.len()).map_err(|error| error.wrap("create the partitions"))?;
        created += n;
    }
    Ok(created)
}

/// The figures of one push case.
#[derive(Debug, Serialize)]
pub(crate) struct PushResult {
    pub(crate) name: String,
    #[serde(skip)]
    pub(crate) shape: Shape,
    pub(crate) batch: usize,
    pub(crate) partitions: usize,
    pub(crate) producers: usize,
    /// Brokers on the database; producer `k` talks to broker `k % brokers`.
    pub(crate) brokers: usize,
    /// Measured seconds: from the window's start to its last response.
    pub(crate) seconds: f64,
    pub(crate) requests: u64,
    /// Messages committed (every item answered `queued`) in the window.
    pub(crate) messages: u64,
    pub(crate) warmup_messages: u64,
    pub(crate) messages_per_second: f64,
    pub(crate) requests_per_second: f64,
    pub(crate) latency_ms: Latency,
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
    pub(crate) messages_per_segment: f64,
    /// Stored (zstd) blob bytes per message.
    pub(crate) stored_bytes_per_message: f64,
    /// WAL bytes per message, cluster-wide.
    pub(crate) wal_bytes_per_message: f64,
    /// Checkpoints started during the window, cluster-wide.
    pub(crate) checkpoints: i64,
    /// CPU cores used during the window, per process group.
    pub(crate) cpu_cores: Usage,
    /// Runs of the case (more than 1: earlier ones were disturbed by other
    /// work on the machine; this is the least disturbed).
    pub(crate) attempts: u32,
    /// Messages committed in each second of the window (by response time),
    /// to show whether throughput holds or decays within a case.
    pub(crate) messages_per_second_timeline: Vec<u64>,
}

impl cpu::Measured for PushResult {
    fn other_cpu(&self) -> f64 {
        self.cpu_cores.other
    }

    fn set_attempts(&mut self, attempts: u32) {
        self.attempts = attempts;
    }
}

/// The push table.
pub(crate) fn table(cases: &[PushResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7} {:>7} {:>8} {:>7} {:>7} {:>4} {:>21}",
        "case",
        "msg/s",
        "req/s",
        "p50 ms",
        "p99 ms",
        "commits",
        "commit/msg",
        "xid/msg",
        "segs",
        "msg/seg",
        "B/msg",
        "WAL/msg",
        "ckpt",
        "cpu brk/pg/load/other"
    );
    for case in cases {
        let _ = writeln!(
            out,
            "{:<20} {:>9.0} {:>8.0} {:>8.2} {:>8.2} {:>8} {:>10.4} {:>7.4} {:>7} {:>8.1} {:>7.0} {:>7.0} {:>4} {:>21}",
            case.name,
            case.messages_per_second,
            case.requests_per_second,
            case.latency_ms.p50,
            case.latency_ms.p99,
            case.commits,
            case.commits_per_message,
            case.write_xids_per_message,
            case.segments,
            case.messages_per_segment,
            case.stored_bytes_per_message,
            case.wal_bytes_per_message,
            case.checkpoints,
            crate::cpu::columns(&case.cpu_cores),
        );
    }
    out
}

/// One line for the progress log.
fn summary_line(case: &PushResult) -> String {
    format!(
        "{:.0} msg/s, {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, {:.4} commits/msg, {:.1} msg/segment, \
         {:.0} WAL B/msg, {} checkpoints, cpu {}, per second {:?}",
        case.messages_per_second,
        case.requests_per_second,
        case.latency_ms.p50,
        case.latency_ms.p99,
        case.commits_per_message,
        case.messages_per_segment,
        case.wal_bytes_per_message,
        case.checkpoints,
        crate::cpu::columns(&case.cpu_cores),
        case.messages_per_second_timeline
    )
}

/// What every producer task of a case shares.
struct Shared {
    queue: String,
    partitions: Vec<String>,
    shape: Shape,
    bodies: Arc<Bodies>,
    /// The next payload `id`.
    next_id: AtomicU64,
    txn: TxnIds,
}

/// One producer: its connection and how many requests it has sent so far.
struct Producer {
    k: usize,
    conn: Conn,
    sent: usize,
}

/// What the producers of one phase did.
#[derive(Debug, Default)]
struct PhaseStats {
    requests: u64,
    messages: u64,
    latencies_us: Vec<u32>,
    errors: u64,
    first_error: Option<String>,
    /// Messages completed in each second since the phase started.
    timeline: Vec<u64>,
}

impl PhaseStats {
    fn merge(&mut self, other: PhaseStats) {
        self.requests += other.requests;
        self.messages += other.messages;
        self.latencies_us.extend(other.latencies_us);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        if self.timeline.len() < other.timeline.len() {
            self.timeline.resize(other.timeline.len(), 0);
        }
        for (total, count) in self.timeline.iter_mut().zip(other.timeline) {
            *total += count;
        }
    }

    fn check(&self, phase: &str) -> Result<()> {
        if self.errors == 0 {
            return Ok(());
        }
        Err(Error::msg(format!(
            "{} failed push requests during the {phase} ({} succeeded); the first: {}",
            self.errors,
            self.requests,
            self.first_error.as_deref().unwrap_or("?")
        )))
    }
}

/// Run every producer until `deadline`, wait for the last response, and hand
/// the producers back for the next phase.
async fn phase(
    producers: Vec<Producer>,
    shared: &Arc<Shared>,
    deadline: Instant,
) -> Result<(Vec<Producer>, PhaseStats)> {
    let started = Instant::now();
    let tasks: Vec<_> = producers
        .into_iter()
        .map(|producer| tokio::spawn(produce(producer, Arc::clone(shared), started, deadline)))
        .collect();
    let mut stats = PhaseStats::default();
    let mut producers = Vec::with_capacity(tasks.len());
    for task in tasks {
        let (producer, producer_stats) = task.await.context("producer task")?;
        stats.merge(producer_stats);
        producers.push(producer);
    }
    Ok((producers, stats))
}

/// One producer's loop: a request at a time until the deadline. Stops at the
/// first failure (the connection's state is unknown after one).
async fn produce(
    mut producer: Producer,
    shared: Arc<Shared>,
    started: Instant,
    deadline: Instant,
) -> (Producer, PhaseStats) {
    let shape = shared.shape;
    let mut stats = PhaseStats::default();
    let batch = u64::try_from(shape.batch).unwrap_or(u64::MAX);
    let capacity = shape.batch * 1200 + 64;
    while Instant::now() < deadline {
        let partition = (producer.k + producer.sent * shape.concurrency) % shape.partitions;
        let first_id = shared.next_id.fetch_add(batch, Ordering::Relaxed);
        let mut body = Vec::with_capacity(capacity);
        payload::push_request(
            &mut body,
            &shared.bodies,
            &shared.queue,
            &shared.partitions[partition],
            first_id,
            shape.batch,
            shared.txn,
        );
        let sent_at = Instant::now();
        let outcome = producer
            .conn
            .post_json("/api/v1/push", Bytes::from(body))
            .await
            .and_then(|reply| check_reply(&reply, shape.batch));
        producer.sent += 1;
        match outcome {
            Ok(()) => {
                let done = Instant::now();
                let micros = done.duration_since(sent_at).as_micros();
                stats
                    .latencies_us
                    .push(u32::try_from(micros).unwrap_or(u32::MAX));
                stats.requests += 1;
                stats.messages += batch;
                let second =
                    usize::try_from(done.duration_since(started).as_secs()).unwrap_or(usize::MAX);
                if stats.timeline.len() <= second {
                    stats.timeline.resize(second.saturating_add(1), 0);
                }
                if let Some(count) = stats.timeline.get_mut(second) {
                    *count += batch;
                }
            }
            Err(error) => {
                stats.errors += 1;
                stats.first_error = Some(error.to_string());
                break;
            }
        }
    }
    (producer, stats)
}

/// One entry of the push response; only the status is checked.
#[derive(Deserialize)]
struct ItemResult<'a> {
    #[serde(borrow)]
    status: Cow<'a, str>,
}

/// 201, one result per item, every one `queued`.
pub(crate) fn check_reply(reply: &Reply, batch: usize) -> Result<()> {
    let snippet = || {
        let text = String::from_utf8_lossy(&reply.body);
        text.chars().take(300).collect::<String>()
    };
    if reply.status != StatusCode::CREATED {
        return Err(Error::msg(format!(
            "push answered {}: {}",
            reply.status,
            snippet()
        )));
    }
    let items: Vec<ItemResult<'_>> = serde_json::from_slice(&reply.body)
        .with_context(|| format!("push response is not a result array: {}", snippet()))?;
    if items.len() != batch {
        return Err(Error::msg(format!(
            "push answered {} results for {batch} items",
            items.len()
        )));
    }
    if let Some((index, item)) = items
        .iter()
        .enumerate()
        .find(|(_, item)| item.status != "queued")
    {
        return Err(Error::msg(format!(
            "push item {index} is `{}`, not `queued`",
            item.status
        )));
    }
    Ok(())
}

pub(crate) fn to_f64(value: u64) -> f64 {
    value as f64
}

pub(crate) fn to_f64_i(value: i64) -> f64 {
    value as f64
}
