//! The `ceiling` scenario: what PostgreSQL alone absorbs for the push's work,
//! with no broker in between, so every push figure can be read as a fraction
//! of what this machine's PostgreSQL can do.
//!
//! The work is the broker's flush, segment by segment: one transaction per
//! flush, holding the allocator UPDATE of the partition row (with the same
//! `last_write_at` and `oldest_*` rules as `queen.log_push_v1`, so the update
//! stays HOT the same way), the `queen.log_segments` row and the
//! `queen.log_txns` sidecar row. It is a best case on purpose:
//!
//! - one statement per flush (a CTE: UPDATE ... RETURNING, then both INSERTs),
//!   prepared once per connection: one round trip, no planning;
//! - no queue or partition lookup, no duplicate probe (the broker runs one
//!   because the push scenario sends client transaction ids), no HTTP;
//! - the segments are built before the window: blobs are zstd-compressed
//!   frames from `queen-frame`'s `SegmentBuilder` with the push's 1 KB JSON
//!   payloads, fresh UUIDv7 message and transaction ids, and the BLAKE3
//!   sidecar; each writer cycles through a pool of them (PostgreSQL never
//!   looks inside a blob). The build cost per message, which the broker does
//!   pay, is reported beside the figures (`build us/msg`).
//!
//! On a machine where the broker and PostgreSQL share two cores, building
//! the segments (zstd above all) is CPU the broker cannot avoid and
//! PostgreSQL alone never spends. The `+build` variant of a case (`--build
//! both` or `inline`; `all` runs it for the batch-1000 shapes) has each writer
//! build every segment right before inserting it, as a flusher does: fresh
//! ids, frames over pre-rendered payloads, hashes, zstd at the broker's
//! default level. It is the ceiling of a broker that did nothing else.
//!
//! The shapes are the push matrix's (`matrix.rs`): messages per segment x
//! partitions x concurrent writers, writer `k`'s `j`-th flush going to
//! partition `(k + j * writers) % partitions`, as producer `k`'s `j`-th push
//! request does. Each case:
//!
//! 1. create database `ceiling_<n>`, apply the Queen schema
//!    (`queen_sql::apply_schema`), create the queue row and every partition
//!    row, and give each partition one 1-message segment (the state the push
//!    scenario's partition creation leaves);
//! 2. build the segment pool (`+build`: nothing; writers build as they go);
//! 3. warm-up: writers flush for `--warmup` seconds on their own connections,
//!    which are then closed (a session flushes its statistics as it exits);
//! 4. open the window's connections, prepare, and have each call
//!    `pg_stat_force_next_flush()`, whose answer comes back only after the
//!    session has flushed its counts: quiet point A, read with no settle;
//! 5. the window: writers flush for `--duration` seconds; close the
//!    connections, wait until they are gone: quiet point B;
//! 6. check the window's segments hold exactly the messages flushed, and that
//!    every partition is there; drop the database.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use queen_frame::{build_sidecar, txn_hash, Frame, SegmentBuilder};
use serde::Serialize;
use uuid::Uuid;

use crate::cpu::{self, Usage};
use crate::env::{CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::matrix::{Axes, Shape};
use crate::payload::{self, Bodies};
use crate::push::{seconds, to_f64, to_f64_i, DURATION, QUICK_DURATION};
use crate::report::{Latency, Report};
use crate::stats;

/// The flush: allocate, insert the segment, insert the sidecar, one statement.
/// `$1` partition id, `$2` messages, `$3` blob, `$4` sidecar.
const FLUSH: &str = "\
WITH a AS (
    UPDATE queen.log_partitions p
       SET last_offset    = p.last_offset + $2::int4,
           last_write_at  = CASE WHEN p.last_write_at < now() - interval '1 second'
                                 THEN now() ELSE p.last_write_at END,
           oldest_live_at = COALESCE(p.oldest_live_at, now()),
           oldest_txn_at  = COALESCE(p.oldest_txn_at, now())
     WHERE p.id = $1::uuid
 RETURNING p.last_offset
), s AS (
    INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, msg_count, created_at, blob)
    SELECT $1::uuid, a.last_offset - $2::int4 + 1, a.last_offset, $2::int4, now(), $3::bytea
      FROM a
)
INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes)
SELECT $1::uuid, a.last_offset - $2::int4 + 1, a.last_offset, now(), $4::bytea FROM a";

/// The queue row.
const CREATE_QUEUE: &str = "INSERT INTO queen.queues (id, name, namespace, task) \
                            VALUES ($1, $2, 'bench', 'ceiling')";

/// Every partition row.
const CREATE_PARTITIONS: &str = "INSERT INTO queen.log_partitions (id, queue_id, name) \
                                 SELECT unnest($1::uuid[]), $2::uuid, unnest($3::text[])";

/// One 1-message segment in every partition of the queue, in one transaction.
const FIRST_SEGMENTS: &str = "\
WITH p AS (
    UPDATE queen.log_partitions
       SET last_offset = 0, last_write_at = now(),
           oldest_live_at = now(), oldest_txn_at = now()
     WHERE queue_id = $1::uuid
 RETURNING id
), s AS (
    INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, msg_count, created_at, blob)
    SELECT id, 0, 0, 1, now(), $2::bytea FROM p
)
INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes)
SELECT id, 0, 0, now(), $3::bytea FROM p";

/// Arguments of `queen-load ceiling`.
#[derive(Debug, clap::Args)]
pub(crate) struct CeilingArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    #[command(flatten)]
    pub(crate) opts: CeilingOpts,
}

/// The ceiling scenario's settings.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CeilingOpts {
    /// Seconds each case is measured [default: 5, or 2 with --quick].
    #[arg(long, value_name = "SECS")]
    pub(crate) duration: Option<f64>,
    /// Seconds of load before each window, not counted.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub(crate) warmup: f64,
    /// The push scenario's `--quick` shapes with 2-second windows.
    #[arg(long)]
    pub(crate) quick: bool,
    #[command(flatten)]
    pub(crate) axes: Axes,
    /// Distinct segments built per case; writers cycle through them.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub(crate) pool: usize,
    /// Where segments are built: `pool` (before the window: PostgreSQL
    /// alone), `inline` (by each writer before each flush, the `+build`
    /// cases), or `both`.
    #[arg(long, value_enum, default_value_t = BuildArg::Pool)]
    pub(crate) build: BuildArg,
    /// Part of `all`: adds the `+build` cases of the batch-1000 shapes.
    #[arg(skip)]
    pub(crate) all: bool,
}

/// `--build`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BuildArg {
    Pool,
    Inline,
    Both,
}

/// Where a case's segments are built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Build {
    /// Before the window; writers cycle through them.
    Pool,
    /// By each writer right before each flush.
    Inline,
}

/// One case: a shape and where its segments are built.
#[derive(Debug, Clone, Copy)]
struct Case {
    shape: Shape,
    build: Build,
}

impl Case {
    fn name(self) -> String {
        match self.build {
            Build::Pool => self.shape.name(),
            Build::Inline => format!("{} +build", self.shape.name()),
        }
    }
}

impl CeilingOpts {
    /// The settings `all` runs with.
    pub(crate) fn for_all(quick: bool, duration: Option<f64>) -> CeilingOpts {
        CeilingOpts {
            duration,
            warmup: 1.0,
            quick,
            axes: Axes::default(),
            pool: 8,
            build: BuildArg::Pool,
            all: true,
        }
    }

    /// The cases: every shape with pooled segments, and with inline building
    /// as `--build` says; `all` adds inline building for the batch-1000
    /// shapes.
    fn cases(&self, all: bool) -> Vec<Case> {
        let shapes = self.axes.shapes(self.quick);
        let mut cases = Vec::new();
        if self.build != BuildArg::Inline {
            cases.extend(shapes.iter().map(|&shape| Case {
                shape,
                build: Build::Pool,
            }));
        }
        let inline = |shape: &Shape| match self.build {
            BuildArg::Inline | BuildArg::Both => true,
            BuildArg::Pool => all && shape.batch == 1000,
        };
        cases.extend(shapes.iter().filter(|s| inline(s)).map(|&shape| Case {
            shape,
            build: Build::Inline,
        }));
        cases
    }

    fn duration(&self) -> f64 {
        self.duration
            .unwrap_or(if self.quick { QUICK_DURATION } else { DURATION })
    }

    pub(crate) fn validate(&self) -> Result<()> {
        seconds("duration", self.duration())?;
        seconds("warmup", self.warmup)?;
        if self.duration() == 0.0 {
            return Err(Error::msg("--duration must be more than 0"));
        }
        if self.pool == 0 {
            return Err(Error::msg("--pool must be >= 1"));
        }
        if self
            .axes
            .shapes(self.quick)
            .iter()
            .any(|s| s.batch == 0 || s.partitions == 0 || s.concurrency == 0)
        {
            return Err(Error::msg(
                "batch sizes, partitions and writers must be >= 1",
            ));
        }
        Ok(())
    }

    /// The settings, for the report.
    pub(crate) fn settings(&self, bodies: &Bodies) -> serde_json::Value {
        serde_json::json!({
            "duration_seconds": self.duration(),
            "warmup_seconds": self.warmup,
            "quick": self.quick,
            "cases": self.cases(self.all).iter().map(|c| c.name()).collect::<Vec<_>>(),
            "segment_pool": self.pool,
            "payload_bytes": payload::payload_len(bodies),
            "zstd_level": queen_frame::DEFAULT_ZSTD_LEVEL,
            "flush": "one prepared statement per flush (allocator UPDATE, segment INSERT, \
                      sidecar INSERT), autocommit",
        })
    }
}

/// Run every case, adding each result to `report`; stop at the first failure.
pub(crate) async fn run(
    env: &Env,
    common: &CommonArgs,
    opts: &CeilingOpts,
    bodies: &Arc<Bodies>,
    report: &mut Report,
) -> Result<()> {
    let cases = opts.cases(opts.all);
    for (index, &case) in cases.iter().enumerate() {
        eprintln!(
            "queen-load: ceiling case {}/{} {}",
            index + 1,
            cases.len(),
            case.name()
        );
        let result = cpu::least_disturbed(common.max_other_cpu, common.retries, || {
            run_case(env, common, opts, bodies, case)
        })
        .await
        .map_err(|error| error.wrap(format!("ceiling case {}", case.name())))?;
        eprintln!(
            "queen-load:   {:.0} msg/s, {:.0} flushes/s, p50 {:.2} ms, p99 {:.2} ms, \
             {:.4} commits/msg, build {:.1} us/msg, cpu {}, per second {:?}",
            result.messages_per_second,
            result.flushes_per_second,
            result.latency_ms.p50,
            result.latency_ms.p99,
            result.commits_per_message,
            result.build_micros_per_message,
            cpu::columns(&result.cpu_cores),
            result.messages_per_second_timeline
        );
        report.ceiling.push(result);
    }
    Ok(())
}

/// A built segment, ready to insert.
struct Built {
    blob: Vec<u8>,
    sidecar: Vec<u8>,
}

/// Payloads rendered up front, so building a segment costs what a flusher
/// pays (ids, hashes, frames, zstd), not JSON rendering.
fn render_payloads(bodies: &Bodies) -> Vec<Vec<u8>> {
    let ts = payload::unix_millis();
    (0..PAYLOADS)
        .map(|id| payload::Payload { bodies, id, ts }.to_string().into_bytes())
        .collect()
}

/// Distinct payloads rendered for building segments.
const PAYLOADS: u64 = 4096;

/// Build one segment of `batch` messages with payloads from `first_id` on.
fn build_segment(
    builder: &mut SegmentBuilder,
    payloads: &[Vec<u8>],
    first_id: u64,
    batch: usize,
) -> Result<Built> {
    let mut hashes = Vec::with_capacity(batch);
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    for id in (first_id..).take(batch) {
        let transaction_id = Uuid::now_v7().hyphenated().encode_lower(&mut text);
        let index = usize::try_from(id % PAYLOADS).unwrap_or(0);
        builder
            .push(&Frame {
                message_id: *Uuid::now_v7().as_bytes(),
                trace_id: None,
                transaction_id,
                producer_sub: None,
                encrypted: false,
                payload: &payloads[index],
            })
            .context("build a frame")?;
        hashes.push(txn_hash(transaction_id));
    }
    let encoded = builder.finish().context("compress a segment")?;
    Ok(Built {
        blob: encoded.blob,
        sidecar: build_sidecar(&hashes),
    })
}

/// Build `count` segments of `batch` messages each. Returns them and the
/// build time per message in microseconds.
fn build_pool(payloads: &[Vec<u8>], batch: usize, count: usize) -> Result<(Vec<Built>, f64)> {
    let started = Instant::now();
    let mut builder = SegmentBuilder::new();
    let mut pool = Vec::with_capacity(count);
    let mut id: u64 = 0;
    for _ in 0..count {
        pool.push(build_segment(&mut builder, payloads, id, batch)?);
        id += u64::try_from(batch).context("batch")?;
    }
    let micros = started.elapsed().as_secs_f64() * 1e6 / to_f64(id.max(1));
    Ok((pool, micros))
}

/// One case on its own database.
async fn run_case(
    env: &Env,
    common: &CommonArgs,
    opts: &CeilingOpts,
    bodies: &Bodies,
    case: Case,
) -> Result<CeilingResult> {
    let shape = case.shape;
    let dbname = env.create_database("ceiling").await?;
    let config = env.connect_config(&dbname);
    let postmaster = env.postmaster_pid()?;
    let payloads = render_payloads(bodies);
    let partitions = setup(&config, &payloads, shape).await?;
    // The pool's build time is measured either way; `+build` cases insert
    // segments built in the window and use the pool for nothing else.
    let (pool, build_micros) = build_pool(&payloads, shape.batch, opts.pool)?;
    let shared = Arc::new(Shared {
        shape,
        build: case.build,
        partitions,
        pool,
        payloads,
    });

    // Warm-up on its own sessions, which then exit and flush their counts.
    let writers = connect_writers(&config, shape.concurrency).await?;
    let warmup_deadline = Instant::now() + Duration::from_secs_f64(opts.warmup);
    let (writers, warm) = phase(writers, &shared, warmup_deadline).await?;
    drop(writers);
    stats::wait_sessions_gone(&env.admin, &dbname, Duration::from_secs(30)).await?;

    // Quiet point A: the window's sessions are open, prepared and flushed.
    let writers = connect_writers(&config, shape.concurrency).await?;
    for writer in &writers {
        writer
            .client
            .batch_execute("SELECT pg_stat_force_next_flush()")
            .await
            .context("flush the session's statistics")?;
    }
    let commits_before = stats::db_counters(&env.admin, &dbname).await?;
    let point_before = stats::cluster_point(&env.admin).await?;
    let cpu_before = cpu::sample(&[], postmaster);

    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(opts.duration());
    let (writers, window) = phase(writers, &shared, deadline).await?;
    let seconds = started.elapsed().as_secs_f64();
    // Before the sessions exit: an exited backend's CPU time leaves /proc.
    let cpu_after = cpu::sample(&[], postmaster);
    let point_after = stats::cluster_point(&env.admin).await?;

    // Quiet point B: the sessions are gone.
    drop(writers);
    stats::wait_sessions_gone(&env.admin, &dbname, Duration::from_secs(30)).await?;
    let commits_after = stats::db_counters(&env.admin, &dbname).await?;

    let (segments, all_segments, partition_rows) =
        stats::segments(&config, point_before.now).await?;
    let batch = u64::try_from(shape.batch).context("batch")?;
    let window_messages = window.flushes * batch;
    let total = u64::try_from(shape.partitions).context("partitions")?
        + (warm.flushes + window.flushes) * batch;
    if segments.messages != i64::try_from(window_messages).context("message count")?
        || all_segments.messages != i64::try_from(total).context("message count")?
    {
        return Err(Error::msg(format!(
            "the database holds {} messages from the window ({} in all), but {} were \
             flushed ({} with the warm-up and the first segments)",
            segments.messages, all_segments.messages, window_messages, total
        )));
    }
    if partition_rows != i64::try_from(shape.partitions).context("partitions")? {
        return Err(Error::msg(format!(
            "the database holds {partition_rows} partitions, expected {}",
            shape.partitions
        )));
    }
    env.drop_database(&dbname, common.keep).await?;

    let messages = to_f64(window_messages);
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
    Ok(CeilingResult {
        name: case.name(),
        shape,
        build: match case.build {
            Build::Pool => "pool",
            Build::Inline => "inline",
        },
        batch: shape.batch,
        partitions: shape.partitions,
        writers: shape.concurrency,
        seconds,
        flushes: window.flushes,
        messages: window_messages,
        warmup_messages: warm.flushes * batch,
        messages_per_second: messages / seconds,
        flushes_per_second: to_f64(window.flushes) / seconds,
        latency_ms: Latency::from_micros(window.latencies_us),
        commits,
        commits_per_message: per_message(to_f64_i(commits)),
        rollbacks: commits_after.xact_rollback - commits_before.xact_rollback,
        write_xids,
        write_xids_per_message: per_message(to_f64_i(write_xids)),
        segments: segments.rows,
        stored_bytes_per_message: per_message(to_f64_i(segments.blob_bytes)),
        wal_bytes_per_message: per_message(to_f64_i(wal_bytes)),
        build_micros_per_message: build_micros,
        cpu_cores: cpu::usage(&cpu_before, &cpu_after),
        attempts: 1,
        messages_per_second_timeline: window.timeline,
    })
}

/// Schema, queue, partitions and their first segments. Returns the partition ids.
async fn setup(
    config: &tokio_postgres::Config,
    payloads: &[Vec<u8>],
    shape: Shape,
) -> Result<Vec<Uuid>> {
    let client = queen_sql::connect::connect_one(config)
        .await
        .context("connect to the ceiling database")?;
    queen_sql::apply_schema(&client)
        .await
        .context("apply the Queen schema")?;
    let queue_id = Uuid::now_v7();
    let queue = format!("bench.ceiling.{}", shape.name().replace(' ', "-"));
    client
        .execute(CREATE_QUEUE, &[&queue_id, &queue])
        .await
        .context("create the queue")?;
    let ids: Vec<Uuid> = (0..shape.partitions).map(|_| Uuid::now_v7()).collect();
    let names: Vec<String> = (0..shape.partitions).map(|p| format!("p{p}")).collect();
    client
        .execute(CREATE_PARTITIONS, &[&ids, &queue_id, &names])
        .await
        .context("create the partitions")?;
    let (first, _) = build_pool(payloads, 1, 1)?;
    client
        .execute(
            FIRST_SEGMENTS,
            &[
                &queue_id,
                &first[0].blob.as_slice(),
                &first[0].sidecar.as_slice(),
            ],
        )
        .await
        .context("write the first segments")?;
    Ok(ids)
}

/// What every writer of a case shares.
struct Shared {
    shape: Shape,
    build: Build,
    partitions: Vec<Uuid>,
    pool: Vec<Built>,
    payloads: Vec<Vec<u8>>,
}

/// One writer: its session and its prepared flush.
struct Writer {
    k: usize,
    client: tokio_postgres::Client,
    flush: tokio_postgres::Statement,
}

async fn connect_writers(config: &tokio_postgres::Config, n: usize) -> Result<Vec<Writer>> {
    let mut writers = Vec::with_capacity(n);
    for k in 0..n {
        let client = queen_sql::connect::connect_one(config)
            .await
            .context("connect a writer")?;
        let flush = client.prepare(FLUSH).await.context("prepare the flush")?;
        writers.push(Writer { k, client, flush });
    }
    Ok(writers)
}

/// What the writers of one phase did.
#[derive(Debug, Default)]
struct PhaseStats {
    flushes: u64,
    latencies_us: Vec<u32>,
    /// Messages flushed in each second since the phase started.
    timeline: Vec<u64>,
}

/// Run every writer until `deadline` and hand the writers back (their
/// sessions stay open until the caller drops them).
async fn phase(
    writers: Vec<Writer>,
    shared: &Arc<Shared>,
    deadline: Instant,
) -> Result<(Vec<Writer>, PhaseStats)> {
    let started = Instant::now();
    let tasks: Vec<_> = writers
        .into_iter()
        .map(|writer| tokio::spawn(write(writer, Arc::clone(shared), started, deadline)))
        .collect();
    let mut stats = PhaseStats::default();
    let mut writers = Vec::with_capacity(tasks.len());
    let mut failure = None;
    for task in tasks {
        let (writer, outcome) = task.await.context("writer task")?;
        writers.push(writer);
        match outcome {
            Ok(writer_stats) => {
                stats.flushes += writer_stats.flushes;
                stats.latencies_us.extend(writer_stats.latencies_us);
                if stats.timeline.len() < writer_stats.timeline.len() {
                    stats.timeline.resize(writer_stats.timeline.len(), 0);
                }
                for (total, count) in stats.timeline.iter_mut().zip(writer_stats.timeline) {
                    *total += count;
                }
            }
            Err(error) => {
                failure.get_or_insert(error);
            }
        }
    }
    match failure {
        Some(error) => Err(error),
        None => Ok((writers, stats)),
    }
}

/// One writer's loop: a flush at a time until the deadline, or the first
/// failure.
async fn write(
    writer: Writer,
    shared: Arc<Shared>,
    started: Instant,
    deadline: Instant,
) -> (Writer, Result<PhaseStats>) {
    let outcome = write_until(&writer, &shared, started, deadline).await;
    (writer, outcome)
}

async fn write_until(
    writer: &Writer,
    shared: &Shared,
    started: Instant,
    deadline: Instant,
) -> Result<PhaseStats> {
    let shape = shared.shape;
    let count = i32::try_from(shape.batch).context("batch")?;
    let batch = u64::try_from(shape.batch).context("batch")?;
    let mut stats = PhaseStats::default();
    let mut builder = SegmentBuilder::new();
    let mut j = 0usize;
    while Instant::now() < deadline {
        let partition = &shared.partitions[(writer.k + j * shape.concurrency) % shape.partitions];
        let built;
        let segment = match shared.build {
            Build::Pool => &shared.pool[(writer.k + j) % shared.pool.len()],
            Build::Inline => {
                let first_id = u64::try_from(j * shape.batch).context("id")?;
                built = build_segment(&mut builder, &shared.payloads, first_id, shape.batch)?;
                &built
            }
        };
        let sent_at = Instant::now();
        let rows = writer
            .client
            .execute(
                &writer.flush,
                &[
                    partition,
                    &count,
                    &segment.blob.as_slice(),
                    &segment.sidecar.as_slice(),
                ],
            )
            .await
            .context("flush")?;
        if rows != 1 {
            return Err(Error::msg(format!(
                "a flush wrote {rows} sidecar rows, not 1"
            )));
        }
        j += 1;
        let done = Instant::now();
        let micros = done.duration_since(sent_at).as_micros();
        stats
            .latencies_us
            .push(u32::try_from(micros).unwrap_or(u32::MAX));
        stats.flushes += 1;
        let second = usize::try_from(done.duration_since(started).as_secs()).unwrap_or(usize::MAX);
        if stats.timeline.len() <= second {
            stats.timeline.resize(second.saturating_add(1), 0);
        }
        if let Some(total) = stats.timeline.get_mut(second) {
            *total += batch;
        }
    }
    Ok(stats)
}

/// The figures of one ceiling case.
#[derive(Debug, Serialize)]
pub(crate) struct CeilingResult {
    pub(crate) name: String,
    #[serde(skip)]
    pub(crate) shape: Shape,
    /// `pool`: segments built before the window (PostgreSQL alone);
    /// `inline`: each writer builds each segment before its flush.
    pub(crate) build: &'static str,
    /// Messages per segment (per flush).
    pub(crate) batch: usize,
    pub(crate) partitions: usize,
    pub(crate) writers: usize,
    /// Measured seconds: from the window's start to its last flush.
    pub(crate) seconds: f64,
    /// Flushes (transactions) committed in the window.
    pub(crate) flushes: u64,
    pub(crate) messages: u64,
    pub(crate) warmup_messages: u64,
    pub(crate) messages_per_second: f64,
    pub(crate) flushes_per_second: f64,
    /// Flush round trip, statement to commit.
    pub(crate) latency_ms: Latency,
    /// `pg_stat_database.xact_commit` over the window.
    pub(crate) commits: i64,
    pub(crate) commits_per_message: f64,
    pub(crate) rollbacks: i64,
    /// Transaction ids assigned cluster-wide over the window.
    pub(crate) write_xids: i64,
    pub(crate) write_xids_per_message: f64,
    pub(crate) segments: i64,
    pub(crate) stored_bytes_per_message: f64,
    pub(crate) wal_bytes_per_message: f64,
    /// Building the segments (frames, zstd, sidecar hashes) in this process,
    /// before the window: what the broker spends per message on the same work.
    pub(crate) build_micros_per_message: f64,
    /// CPU cores used during the window (the broker column is 0: there is none).
    pub(crate) cpu_cores: Usage,
    /// Runs of the case (more than 1: earlier ones were disturbed).
    pub(crate) attempts: u32,
    pub(crate) messages_per_second_timeline: Vec<u64>,
}

impl cpu::Measured for CeilingResult {
    fn other_cpu(&self) -> f64 {
        self.cpu_cores.other
    }

    fn set_attempts(&mut self, attempts: u32) {
        self.attempts = attempts;
    }
}

/// The ceiling table.
pub(crate) fn table(cases: &[CeilingResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:>9} {:>9} {:>8} {:>8} {:>8} {:>10} {:>7} {:>7} {:>7} {:>12} {:>21}",
        "case",
        "msg/s",
        "flush/s",
        "p50 ms",
        "p99 ms",
        "commits",
        "commit/msg",
        "xid/msg",
        "B/msg",
        "WAL/msg",
        "build us/msg",
        "cpu brk/pg/load/other"
    );
    for case in cases {
        let _ = writeln!(
            out,
            "{:<22} {:>9.0} {:>9.0} {:>8.2} {:>8.2} {:>8} {:>10.4} {:>7.4} {:>7.0} {:>7.0} {:>12.2} {:>21}",
            case.name,
            case.messages_per_second,
            case.flushes_per_second,
            case.latency_ms.p50,
            case.latency_ms.p99,
            case.commits,
            case.commits_per_message,
            case.write_xids_per_message,
            case.stored_bytes_per_message,
            case.wal_bytes_per_message,
            case.build_micros_per_message,
            cpu::columns(&case.cpu_cores),
        );
    }
    out
}
