//! The `push` scenario: `POST /api/v1/push` throughput over a matrix of batch
//! size x partitions x concurrent producers.
//!
//! Every case runs on its own database and its own broker process, so no case
//! inherits another's dead tuples, autovacuum debt or caches, and so the
//! database's commit counter can be read exactly (see `stats.rs`):
//!
//! 1. create database `bench_<i>`, start `queen-server` on it, open one
//!    keep-alive connection per producer;
//! 2. warm-up: producers push for `--warmup` seconds (this also creates the
//!    queue and its partitions), then drain: no request in flight;
//! 3. settle ([`stats::SETTLE`]) so every warm-up commit is counted, then read
//!    the counters and the CPU clocks;
//! 4. the window: producers push for `--duration` seconds, then drain; the
//!    window's length runs until the last response;
//! 5. read the exact counters (xids, WAL) and CPU clocks; stop the broker (its
//!    sessions flush their statistics as they exit) and read `xact_commit`;
//! 6. count the window's segments (created after the quiet point of step 3)
//!    and check their messages equal the items acknowledged as `queued`;
//!    drop the database (kept with `--keep`, for inspection).
//!
//! Producer `k`'s `j`-th request carries `batch` items for partition
//! `(k + j * producers) % partitions`, so every partition gets traffic. Every
//! response must be 201 with every item `queued`; any failure fails the run.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::StatusCode;
use serde::Deserialize;

use crate::cpu;
use crate::env::{Broker, CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::http::{Conn, Reply};
use crate::payload::{self, Bodies};
use crate::report::{self, CaseResult, Latency, Report};
use crate::stats;

/// The full matrix.
const BATCHES: &[usize] = &[1, 100, 1000];
const PARTITIONS: &[usize] = &[1, 100];
const PRODUCERS: &[usize] = &[1, 16];

/// The `--quick` matrix: (batch, partitions, producers).
const QUICK: &[(usize, usize, usize)] = &[(1, 1, 1), (100, 100, 16), (1000, 1, 1)];

/// Measured seconds per case: default, and with `--quick`.
const DURATION: f64 = 5.0;
const QUICK_DURATION: f64 = 2.0;

/// Arguments of `queen-load push`.
#[derive(Debug, clap::Args)]
pub(crate) struct PushArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Seconds each case is measured [default: 5, or 2 with --quick].
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Seconds of load before each window, not counted.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    warmup: f64,
    /// A reduced matrix (3 cases) with 2-second windows, for smoke tests.
    #[arg(long)]
    quick: bool,
    /// Batch sizes (items per request) to run, comma-separated [default: 1,100,1000].
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    batches: Vec<usize>,
    /// Partition counts to run [default: 1,100].
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    partitions: Vec<usize>,
    /// Concurrent producer counts to run [default: 1,16].
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    producers: Vec<usize>,
    /// Seconds to wait after the warm-up drains, so PostgreSQL has flushed the
    /// warm-up's commit counts before the window starts (0 makes the commit
    /// figures approximate).
    #[arg(long, value_name = "SECS", default_value_t = stats::SETTLE.as_secs_f64())]
    settle: f64,
}

/// One case of the matrix.
#[derive(Debug, Clone, Copy)]
struct Case {
    batch: usize,
    partitions: usize,
    producers: usize,
}

impl Case {
    fn name(self) -> String {
        format!("b{} p{} c{}", self.batch, self.partitions, self.producers)
    }
}

impl PushArgs {
    fn matrix(&self) -> Vec<Case> {
        let explicit =
            !(self.batches.is_empty() && self.partitions.is_empty() && self.producers.is_empty());
        if self.quick && !explicit {
            return QUICK
                .iter()
                .map(|&(batch, partitions, producers)| Case {
                    batch,
                    partitions,
                    producers,
                })
                .collect();
        }
        let or = |given: &Vec<usize>, default: &[usize]| {
            if given.is_empty() {
                default.to_vec()
            } else {
                given.clone()
            }
        };
        let mut cases = Vec::new();
        for batch in or(&self.batches, BATCHES) {
            for partitions in or(&self.partitions, PARTITIONS) {
                for producers in or(&self.producers, PRODUCERS) {
                    cases.push(Case {
                        batch,
                        partitions,
                        producers,
                    });
                }
            }
        }
        cases
    }

    fn duration(&self) -> f64 {
        self.duration
            .unwrap_or(if self.quick { QUICK_DURATION } else { DURATION })
    }

    fn validate(&self) -> Result<()> {
        let seconds = |name: &str, value: f64| {
            if value.is_finite() && value >= 0.0 {
                Ok(())
            } else {
                Err(Error::msg(format!(
                    "--{name} must be a number of seconds >= 0"
                )))
            }
        };
        seconds("duration", self.duration())?;
        seconds("warmup", self.warmup)?;
        seconds("settle", self.settle)?;
        if self.duration() == 0.0 {
            return Err(Error::msg("--duration must be more than 0"));
        }
        let matrix = self.matrix();
        if matrix
            .iter()
            .any(|case| case.batch == 0 || case.partitions == 0 || case.producers == 0)
        {
            return Err(Error::msg(
                "batch sizes, partitions and producers must be >= 1",
            ));
        }
        if !self.common.broker.is_file() {
            return Err(Error::msg(format!(
                "--broker {}: no such file",
                self.common.broker.display()
            )));
        }
        Ok(())
    }
}

/// Run the scenario: every case, then the table and the JSON report.
pub(crate) async fn run(args: PushArgs) -> Result<()> {
    args.validate()?;
    let started_at = std::time::SystemTime::now();
    let mut env = Env::start(&args.common.work_dir).await?;
    let machine = report::machine(&env, &args.common.broker).await?;
    let bodies = Arc::new(Bodies::generate());
    let mut report = Report::new(
        "push",
        started_at,
        machine,
        serde_json::json!({
            "duration_seconds": args.duration(),
            "warmup_seconds": args.warmup,
            "settle_seconds": args.settle,
            "quick": args.quick,
            "payload_bytes": payload::payload_len(&bodies),
            "broker_env": args.common.broker_env.iter()
                .map(|(key, value)| format!("{key}={value}"))
                .collect::<Vec<_>>(),
            "postgres": "durable cluster (fsync, synchronous_commit and full_page_writes on), \
                         Unix socket, defaults otherwise",
        }),
    );
    let matrix = args.matrix();
    let mut failure = None;
    for (index, &case) in matrix.iter().enumerate() {
        eprintln!(
            "queen-load: case {}/{} {}",
            index + 1,
            matrix.len(),
            case.name()
        );
        match run_case(&env, &args, &bodies, index, case).await {
            Ok(result) => {
                eprintln!("queen-load:   {}", report::summary_line(&result));
                report.cases.push(result);
            }
            Err(error) => {
                failure = Some(error.wrap(format!("case {}", case.name())));
                break;
            }
        }
    }
    if failure.is_some() || args.common.keep {
        env.keep_dir();
    }
    drop(env);
    if !report.cases.is_empty() {
        println!("{}", report.table());
        let json = report.json()?;
        if let Some(path) = &args.common.json {
            std::fs::write(path, format!("{json}\n"))
                .with_context(|| format!("write {}", path.display()))?;
            eprintln!("queen-load: JSON report written to {}", path.display());
        }
        println!("{json}");
    }
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// One case on its own database and broker.
async fn run_case(
    env: &Env,
    args: &PushArgs,
    bodies: &Arc<Bodies>,
    index: usize,
    case: Case,
) -> Result<CaseResult> {
    let dbname = format!("bench_{index}");
    queen_sql::connect::create_database_if_missing(&env.admin, &dbname)
        .await
        .with_context(|| format!("create database {dbname}"))?;
    let log = env.dir().join(format!("broker-{index}.log"));
    let mut broker = Broker::start(
        &args.common.broker,
        &env.database_url(&dbname),
        log,
        &args.common.broker_env,
    )
    .await?;
    let postmaster = env.postmaster_pid()?;

    let shared = Arc::new(Shared {
        queue: format!(
            "bench.push.b{}-p{}-c{}",
            case.batch, case.partitions, case.producers
        ),
        partitions: (0..case.partitions).map(|p| format!("p{p}")).collect(),
        case,
        bodies: Arc::clone(bodies),
        next_id: AtomicU64::new(0),
    });
    let mut producers = Vec::with_capacity(case.producers);
    for k in 0..case.producers {
        producers.push(Producer {
            k,
            conn: Conn::connect(broker.addr()).await?,
            sent: 0,
        });
    }

    // Warm-up, drained.
    let warmup_deadline = Instant::now() + Duration::from_secs_f64(args.warmup);
    let (producers, warm) = phase(producers, &shared, warmup_deadline).await?;
    warm.check("warm-up")?;
    broker.check_alive()?;

    // Quiet point A: every warm-up commit counted.
    tokio::time::sleep(Duration::from_secs_f64(args.settle)).await;
    let commits_before = stats::db_counters(&env.admin, &dbname).await?;
    let point_before = stats::cluster_point(&env.admin).await?;
    let cpu_before = cpu::sample(broker.pid(), postmaster);

    // The window, drained.
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.duration());
    let (producers, window) = phase(producers, &shared, deadline).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu_after = cpu::sample(broker.pid(), postmaster);
    let point_after = stats::cluster_point(&env.admin).await?;
    window.check("window")?;
    broker.check_alive()?;

    // Quiet point B: the broker's sessions flush their counts as they exit.
    drop(producers);
    broker.stop().await?;
    stats::wait_sessions_gone(&env.admin, &dbname, Duration::from_secs(30)).await?;
    let commits_after = stats::db_counters(&env.admin, &dbname).await?;

    let (segments, all_segments, partitions) =
        stats::segments(&env.connect_config(&dbname), point_before.now).await?;
    let window_messages = i64::try_from(window.messages).context("message count")?;
    let total_messages = i64::try_from(warm.messages + window.messages).context("message count")?;
    if segments.messages != window_messages || all_segments.messages != total_messages {
        return Err(Error::msg(format!(
            "the database holds {} messages from the window ({} in all), but {} were \
             acknowledged as queued ({} with the warm-up)",
            segments.messages, all_segments.messages, window_messages, total_messages
        )));
    }
    if partitions != i64::try_from(case.partitions).context("partition count")? {
        return Err(Error::msg(format!(
            "the database holds {partitions} partitions, expected {}",
            case.partitions
        )));
    }
    if !args.common.keep {
        env.admin
            .batch_execute(&format!("DROP DATABASE {dbname} WITH (FORCE)"))
            .await
            .with_context(|| format!("drop database {dbname}"))?;
    }

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
    Ok(CaseResult {
        name: case.name(),
        batch: case.batch,
        partitions: case.partitions,
        producers: case.producers,
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
        cpu_cores: cpu::usage(&cpu_before, &cpu_after),
        messages_per_second_timeline: window.timeline,
    })
}

/// What every producer task of a case shares.
struct Shared {
    queue: String,
    partitions: Vec<String>,
    case: Case,
    bodies: Arc<Bodies>,
    /// The next payload `id`.
    next_id: AtomicU64,
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
    let case = shared.case;
    let mut stats = PhaseStats::default();
    let batch = u64::try_from(case.batch).unwrap_or(u64::MAX);
    let capacity = case.batch * 1200 + 64;
    while Instant::now() < deadline {
        let partition = (producer.k + producer.sent * case.producers) % case.partitions;
        let first_id = shared.next_id.fetch_add(batch, Ordering::Relaxed);
        let mut body = Vec::with_capacity(capacity);
        payload::push_request(
            &mut body,
            &shared.bodies,
            &shared.queue,
            &shared.partitions[partition],
            first_id,
            case.batch,
        );
        let sent_at = Instant::now();
        let outcome = producer
            .conn
            .post_json("/api/v1/push", Bytes::from(body))
            .await
            .and_then(|reply| check_reply(&reply, case.batch));
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
fn check_reply(reply: &Reply, batch: usize) -> Result<()> {
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

fn to_f64(value: u64) -> f64 {
    value as f64
}

fn to_f64_i(value: i64) -> f64 {
    value as f64
}
