//! The `push` scenario: `POST /api/v1/push` throughput over a matrix of batch
//! size x partitions x concurrent producers.
//!
//! Every case runs on its own database and its own broker process, so no case
//! inherits another's dead tuples, autovacuum debt or caches, and so the
//! database's commit counter can be read exactly (see `measure/stats.rs`):
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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;

use super::case::{self, Case as _, Failures, Merge, Window};
use super::matrix::{Axes, Shape};
use crate::client::payload::{self, Bodies, TxnIds};
use crate::client::Conn;
use crate::env::{self, CommonArgs, Env};
use crate::error::{Error, Result};
use crate::measure::cpu::{self, Usage};
use crate::measure::{self, micros, ratio, stats, to_f64, to_f64_i, DbWrites, Latency, Timeline};
use crate::output::report::{Report, Row};
use crate::output::table::{fixed, Table};

/// Shapes pushed through several brokers by default: (shape, brokers).
const MULTI_BROKER: &[(Shape, usize)] = &[
    (Shape::new(100, 100, 16), 2),
    (Shape::new(1000, 100, 16), 2),
];

/// The same, with `--quick`.
const QUICK_MULTI_BROKER: &[(Shape, usize)] = &[(Shape::new(1000, 100, 16), 2)];

/// The push scenario's settings.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct PushOpts {
    #[command(flatten)]
    pub(crate) window: Window<PushOpts>,
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

/// How the push words `--warmup` and `--quick`.
impl case::WindowHelp for PushOpts {
    const WARMUP: &'static str = "Seconds of load before each window, not counted";
    const QUICK: &'static str = "A reduced matrix with 2-second windows, for smoke tests";
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

impl case::Case for Case {
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
            window: Window::for_all(quick, duration),
            axes: Axes::default(),
            brokers: Vec::new(),
            transaction_ids: TxnSource::Client,
            settle: stats::SETTLE.as_secs_f64(),
        }
    }

    fn matrix(&self) -> Vec<Case> {
        let shapes = self.axes.shapes(self.window.quick);
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
            let extra = if self.window.quick {
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

    pub(crate) fn validate(&self) -> Result<()> {
        self.window.validate(&[("settle", self.settle)])?;
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
        let cases = self.matrix().into_iter().map(Case::name);
        self.window.settings(
            cases,
            bodies,
            serde_json::json!({
                "settle_seconds": self.settle,
                "transaction_ids": match self.transaction_ids {
                    TxnSource::Client => "a fresh UUIDv7 per item, sent by the client (so the \
                                          broker runs its duplicate probe, as for SDK traffic)",
                    TxnSource::Broker => "none sent: generated by the broker, which skips its \
                                          duplicate probe",
                },
            }),
        )
    }
}

case::scenario!(PushOpts, "push", |ctx, opts, report| run(
    ctx.env, ctx.common, opts, ctx.bodies, report
));

/// Run every case, adding each result to `report` as it finishes; stop at
/// the first failing case.
async fn run(
    env: &Env,
    common: &CommonArgs,
    opts: &PushOpts,
    bodies: &Arc<Bodies>,
    report: &mut Report,
) -> Result<()> {
    case::run_cases(
        "push",
        common,
        &opts.matrix(),
        |case| run_case(env, common, opts, bodies, case),
        |_, result| {
            eprintln!("queen-load:   {}", summary_line(&result));
            report.push(result);
        },
    )
    .await
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
        partitions: payload::partition_names(shape.partitions),
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
    let created = producers[0]
        .conn
        .create_partitions(
            &shared.bodies,
            &shared.queue,
            &shared.partitions,
            shared.txn,
            |_| {},
        )
        .await?;
    shared.next_id.store(created, Ordering::Relaxed);

    // Warm-up, drained.
    let warmup_deadline = Instant::now() + Duration::from_secs_f64(opts.window.warmup);
    let (producers, warm) = phase(producers, &shared, warmup_deadline).await?;
    warm.check("warm-up")?;
    env::check_alive(&mut brokers)?;

    // Quiet point A: every warm-up commit counted.
    tokio::time::sleep(Duration::from_secs_f64(opts.settle)).await;
    let commits_before = stats::db_counters(&env.admin, &dbname).await?;

    // The window, drained.
    let ((producers, window), measured) = measure::measure(
        &env.admin,
        &pids,
        postmaster,
        opts.window.duration(),
        |deadline| phase(producers, &shared, deadline),
    )
    .await?;
    let seconds = measured.seconds;
    window.check("window")?;
    env::check_alive(&mut brokers)?;

    // Quiet point B: the brokers' sessions flush their counts as they exit.
    drop(producers);
    env::stop_all(brokers).await?;
    stats::wait_sessions_gone(&env.admin, &dbname, Duration::from_secs(30)).await?;
    let commits_after = stats::db_counters(&env.admin, &dbname).await?;

    let segments = stats::check_segments(
        &env.connect_config(&dbname),
        measured.before.now,
        stats::Expected {
            window_messages: window.messages,
            total_messages: created + warm.messages + window.messages,
            partitions: shape.partitions,
            counted: "acknowledged as queued",
            besides: "the warm-up and partition creation",
        },
    )
    .await?;
    env.drop_database(&dbname, common.keep).await?;

    let messages = to_f64(window.messages);
    let per_message = |value: i64| ratio(to_f64_i(value), messages);
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
        writes: measured.db_writes(commits_before, commits_after, &segments, messages),
        messages_per_segment: ratio(to_f64_i(segments.messages), to_f64_i(segments.rows)),
        stored_bytes_per_message: per_message(segments.blob_bytes),
        wal_bytes_per_message: per_message(measured.wal_bytes()),
        checkpoints: measured.checkpoints(),
        cpu_cores: measured.cpu_cores,
        attempts: 1,
        messages_per_second_timeline: window.timeline.into_vec(),
    })
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
    /// Commits and written transactions over the window.
    #[serde(flatten)]
    pub(crate) writes: DbWrites,
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

cpu::measured!(PushResult);

impl Row for PushResult {
    const KEY: &'static str = "push";

    fn title() -> Option<String> {
        Some(format!("push ({})", cpu::NOTE))
    }

    fn table(cases: &[PushResult]) -> String {
        table(cases)
    }

    fn disturbance(&self) -> Option<(&str, f64, u32)> {
        Some((&self.name, self.cpu_cores.other, self.attempts))
    }
}

/// The push table.
fn table(cases: &[PushResult]) -> String {
    let mut table = Table::new(&[
        ("case", 20),
        ("msg/s", 9),
        ("req/s", 8),
        ("p50 ms", 8),
        ("p99 ms", 8),
        ("commits", 8),
        ("commit/msg", 10),
        ("xid/msg", 7),
        ("segs", 7),
        ("msg/seg", 8),
        ("B/msg", 7),
        ("WAL/msg", 7),
        ("ckpt", 4),
        ("cpu brk/pg/load/other", 21),
    ]);
    for case in cases {
        table.row([
            case.name.clone(),
            fixed(case.messages_per_second, 0),
            fixed(case.requests_per_second, 0),
            fixed(case.latency_ms.p50, 2),
            fixed(case.latency_ms.p99, 2),
            case.writes.commits.to_string(),
            fixed(case.writes.commits_per_message, 4),
            fixed(case.writes.write_xids_per_message, 4),
            case.writes.segments.to_string(),
            fixed(case.messages_per_segment, 1),
            fixed(case.stored_bytes_per_message, 0),
            fixed(case.wal_bytes_per_message, 0),
            case.checkpoints.to_string(),
            cpu::columns(&case.cpu_cores),
        ]);
    }
    table.finish()
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
        case.writes.commits_per_message,
        case.messages_per_segment,
        case.wal_bytes_per_message,
        case.checkpoints,
        cpu::columns(&case.cpu_cores),
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
    failures: Failures,
    timeline: Timeline,
}

impl Merge for PhaseStats {
    fn merge(&mut self, other: PhaseStats) {
        self.requests += other.requests;
        self.messages += other.messages;
        self.latencies_us.extend(other.latencies_us);
        self.failures.merge(other.failures);
        self.timeline.merge(other.timeline);
    }
}

impl PhaseStats {
    fn check(&self, phase: &str) -> Result<()> {
        self.failures.check(
            "push requests",
            phase,
            format_args!("{} succeeded", self.requests),
        )
    }
}

/// Run every producer until `deadline`, wait for the last response, and hand
/// the producers back for the next phase.
async fn phase(
    producers: Vec<Producer>,
    shared: &Arc<Shared>,
    deadline: Instant,
) -> Result<(Vec<Producer>, PhaseStats)> {
    case::phase(producers, "producer task", |producer, started| {
        produce(producer, Arc::clone(shared), started, deadline)
    })
    .await
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
        let outcome = producer.conn.push(Bytes::from(body), shape.batch).await;
        producer.sent += 1;
        match outcome {
            Ok(()) => {
                let done = Instant::now();
                stats
                    .latencies_us
                    .push(micros(done.duration_since(sent_at)));
                stats.requests += 1;
                stats.messages += batch;
                stats.timeline.add(started, done, batch);
            }
            Err(error) => {
                stats.failures.record(&error);
                break;
            }
        }
    }
    (producer, stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::stats::{ClusterPoint, DbCounters, Segments};

    #[test]
    fn a_result_has_the_report_fields_in_order() {
        let point = ClusterPoint {
            next_xid: 10,
            wal_lsn: 0,
            checkpoints: 0,
            now: std::time::SystemTime::UNIX_EPOCH,
        };
        let measured = measure::window::Measurement {
            started: Instant::now(),
            seconds: 1.0,
            before: point,
            after: ClusterPoint {
                next_xid: 30,
                ..point
            },
            cpu_cores: Usage::default(),
        };
        let counters = |xact_commit| DbCounters {
            xact_commit,
            xact_rollback: 0,
        };
        let writes = measured.db_writes(counters(5), counters(25), &Segments::default(), 40.0);
        assert_eq!(writes.commits, 20);
        assert!((writes.commits_per_message - 0.5).abs() < 1e-9);
        assert_eq!(writes.write_xids, 20);
        let shape = Shape::new(1, 1, 1);
        let result = PushResult {
            name: Case { shape, brokers: 1 }.name(),
            shape,
            batch: 1,
            partitions: 1,
            producers: 1,
            brokers: 1,
            seconds: 1.0,
            requests: 0,
            messages: 0,
            warmup_messages: 0,
            messages_per_second: 0.0,
            requests_per_second: 0.0,
            latency_ms: Latency::default(),
            writes,
            messages_per_segment: 0.0,
            stored_bytes_per_message: 0.0,
            wal_bytes_per_message: 0.0,
            checkpoints: 0,
            cpu_cores: Usage::default(),
            attempts: 1,
            messages_per_second_timeline: Vec::new(),
        };
        case::assert_fields(
            &result,
            &[
                "name",
                "batch",
                "partitions",
                "producers",
                "brokers",
                "seconds",
                "requests",
                "messages",
                "warmup_messages",
                "messages_per_second",
                "requests_per_second",
                "latency_ms",
                "commits",
                "commits_per_message",
                "rollbacks",
                "write_xids",
                "write_xids_per_message",
                "segments",
                "messages_per_segment",
                "stored_bytes_per_message",
                "wal_bytes_per_message",
                "checkpoints",
                "cpu_cores",
                "attempts",
                "messages_per_second_timeline",
            ],
        );
    }
}
