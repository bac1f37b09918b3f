//! The `ceiling` scenario: what PostgreSQL alone absorbs for the push's work,
//! with no broker in between, so every push figure can be read as a fraction
//! of what this machine's PostgreSQL can do.
//!
//! The work is the broker's flush, segment by segment: one transaction per
//! flush, holding the allocator UPDATE of the partition row (with the same
//! `last_write_at` and `oldest_*` rules as `queen.log_push_v2`, so the update
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

use std::sync::Arc;
use std::time::{Duration, Instant};

use queen_frame::{build_sidecar, txn_hash, Frame, SegmentBuilder};
use serde::Serialize;
use uuid::Uuid;

use super::case::{self, Case as _, Merge, Window};
use super::matrix::{Axes, Shape};
use crate::client::payload::{self, Bodies};
use crate::env::{CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::measure::cpu::{self, Usage};
use crate::measure::{self, micros, ratio, stats, to_f64, to_f64_i, DbWrites, Latency, Timeline};
use crate::output::report::{Report, Row};
use crate::output::table::{fixed, Table};

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

/// The ceiling scenario's settings.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CeilingOpts {
    #[command(flatten)]
    pub(crate) window: Window<CeilingOpts>,
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

/// How the ceiling words `--warmup` and `--quick`.
impl case::WindowHelp for CeilingOpts {
    const WARMUP: &'static str = "Seconds of load before each window, not counted";
    const QUICK: &'static str = "The push scenario's `--quick` shapes with 2-second windows";
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

impl case::Case for Case {
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
            window: Window::for_all(quick, duration),
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
        let shapes = self.axes.shapes(self.window.quick);
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

    pub(crate) fn validate(&self) -> Result<()> {
        self.window.validate(&[])?;
        if self.pool == 0 {
            return Err(Error::msg("--pool must be >= 1"));
        }
        if self
            .axes
            .shapes(self.window.quick)
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
        self.window.settings(
            self.cases(self.all).into_iter().map(Case::name),
            bodies,
            serde_json::json!({
                "segment_pool": self.pool,
                "zstd_level": queen_frame::DEFAULT_ZSTD_LEVEL,
                "flush": "one prepared statement per flush (allocator UPDATE, segment INSERT, \
                          sidecar INSERT), autocommit",
            }),
        )
    }
}

case::scenario!(
    CeilingOpts,
    "ceiling",
    needs_broker: false,
    |ctx, opts, report| run(ctx.env, ctx.common, opts, ctx.bodies, report)
);

/// Run every case, adding each result to `report`; stop at the first failure.
async fn run(
    env: &Env,
    common: &CommonArgs,
    opts: &CeilingOpts,
    bodies: &Arc<Bodies>,
    report: &mut Report,
) -> Result<()> {
    case::run_cases(
        "ceiling",
        common,
        &opts.cases(opts.all),
        |case| run_case(env, common, opts, bodies, case),
        |_, result| {
            eprintln!(
                "queen-load:   {:.0} msg/s, {:.0} flushes/s, p50 {:.2} ms, p99 {:.2} ms, \
                 {:.4} commits/msg, build {:.1} us/msg, cpu {}, per second {:?}",
                result.messages_per_second,
                result.flushes_per_second,
                result.latency_ms.p50,
                result.latency_ms.p99,
                result.writes.commits_per_message,
                result.build_micros_per_message,
                cpu::columns(&result.cpu_cores),
                result.messages_per_second_timeline
            );
            report.push(result);
        },
    )
    .await
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
                audience: None,
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
    let warmup_deadline = Instant::now() + Duration::from_secs_f64(opts.window.warmup);
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

    // The window; the CPU clocks are read before the sessions exit: an
    // exited backend's CPU time leaves /proc.
    let ((writers, window), measured) = measure::measure(
        &env.admin,
        &[],
        postmaster,
        opts.window.duration(),
        |deadline| phase(writers, &shared, deadline),
    )
    .await?;
    let seconds = measured.seconds;

    // Quiet point B: the sessions are gone.
    drop(writers);
    stats::wait_sessions_gone(&env.admin, &dbname, Duration::from_secs(30)).await?;
    let commits_after = stats::db_counters(&env.admin, &dbname).await?;

    let batch = u64::try_from(shape.batch).context("batch")?;
    let window_messages = window.flushes * batch;
    let segments = stats::check_segments(
        &config,
        measured.before.now,
        stats::Expected {
            window_messages,
            total_messages: u64::try_from(shape.partitions).context("partitions")?
                + (warm.flushes + window.flushes) * batch,
            partitions: shape.partitions,
            counted: "flushed",
            besides: "the warm-up and the first segments",
        },
    )
    .await?;
    env.drop_database(&dbname, common.keep).await?;

    let messages = to_f64(window_messages);
    let per_message = |value: i64| ratio(to_f64_i(value), messages);
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
        writes: measured.db_writes(commits_before, commits_after, &segments, messages),
        stored_bytes_per_message: per_message(segments.blob_bytes),
        wal_bytes_per_message: per_message(measured.wal_bytes()),
        build_micros_per_message: build_micros,
        cpu_cores: measured.cpu_cores,
        attempts: 1,
        messages_per_second_timeline: window.timeline.into_vec(),
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
    let names = payload::partition_names(shape.partitions);
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
    timeline: Timeline,
    /// A writer's failure, which ended its loop; the first writer's first.
    failure: Option<Error>,
}

impl Merge for PhaseStats {
    fn merge(&mut self, other: PhaseStats) {
        self.flushes += other.flushes;
        self.latencies_us.extend(other.latencies_us);
        self.timeline.merge(other.timeline);
        if self.failure.is_none() {
            self.failure = other.failure;
        }
    }
}

/// Run every writer until `deadline` and hand the writers back (their
/// sessions stay open until the caller drops them).
async fn phase(
    writers: Vec<Writer>,
    shared: &Arc<Shared>,
    deadline: Instant,
) -> Result<(Vec<Writer>, PhaseStats)> {
    let (writers, mut stats) = case::phase(writers, "writer task", |writer, started| {
        write(writer, Arc::clone(shared), started, deadline)
    })
    .await?;
    match stats.failure.take() {
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
) -> (Writer, PhaseStats) {
    let stats = write_until(&writer, &shared, started, deadline)
        .await
        .unwrap_or_else(|error| PhaseStats {
            failure: Some(error),
            ..PhaseStats::default()
        });
    (writer, stats)
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
        stats
            .latencies_us
            .push(micros(done.duration_since(sent_at)));
        stats.flushes += 1;
        stats.timeline.add(started, done, batch);
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
    /// Commits and written transactions over the window.
    #[serde(flatten)]
    pub(crate) writes: DbWrites,
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

cpu::measured!(CeilingResult);

impl Row for CeilingResult {
    const KEY: &'static str = "ceiling";

    fn title() -> Option<String> {
        Some(format!(
            "ceiling: PostgreSQL alone, one statement per flush, no broker ({})",
            cpu::NOTE
        ))
    }

    fn table(cases: &[CeilingResult]) -> String {
        table(cases)
    }

    fn disturbance(&self) -> Option<(&str, f64, u32)> {
        Some((&self.name, self.cpu_cores.other, self.attempts))
    }
}

/// The ceiling table.
fn table(cases: &[CeilingResult]) -> String {
    let mut table = Table::new(&[
        ("case", 22),
        ("msg/s", 9),
        ("flush/s", 9),
        ("p50 ms", 8),
        ("p99 ms", 8),
        ("commits", 8),
        ("commit/msg", 10),
        ("xid/msg", 7),
        ("B/msg", 7),
        ("WAL/msg", 7),
        ("build us/msg", 12),
        ("cpu brk/pg/load/other", 21),
    ]);
    for case in cases {
        table.row([
            case.name.clone(),
            fixed(case.messages_per_second, 0),
            fixed(case.flushes_per_second, 0),
            fixed(case.latency_ms.p50, 2),
            fixed(case.latency_ms.p99, 2),
            case.writes.commits.to_string(),
            fixed(case.writes.commits_per_message, 4),
            fixed(case.writes.write_xids_per_message, 4),
            fixed(case.stored_bytes_per_message, 0),
            fixed(case.wal_bytes_per_message, 0),
            fixed(case.build_micros_per_message, 2),
            cpu::columns(&case.cpu_cores),
        ]);
    }
    table.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::DbWrites;

    #[test]
    fn a_result_has_the_report_fields_in_order() {
        let shape = Shape::new(1000, 100, 16);
        let case = Case {
            shape,
            build: Build::Inline,
        };
        assert_eq!(case.name(), "b1000 p100 c16 +build");
        let result = CeilingResult {
            name: case.name(),
            shape,
            build: "inline",
            batch: 1000,
            partitions: 100,
            writers: 16,
            seconds: 1.0,
            flushes: 0,
            messages: 0,
            warmup_messages: 0,
            messages_per_second: 0.0,
            flushes_per_second: 0.0,
            latency_ms: Latency::default(),
            writes: DbWrites {
                commits: 0,
                commits_per_message: 0.0,
                rollbacks: 0,
                write_xids: 0,
                write_xids_per_message: 0.0,
                segments: 0,
            },
            stored_bytes_per_message: 0.0,
            wal_bytes_per_message: 0.0,
            build_micros_per_message: 0.0,
            cpu_cores: Usage::default(),
            attempts: 1,
            messages_per_second_timeline: Vec::new(),
        };
        case::assert_fields(
            &result,
            &[
                "name",
                "build",
                "batch",
                "partitions",
                "writers",
                "seconds",
                "flushes",
                "messages",
                "warmup_messages",
                "messages_per_second",
                "flushes_per_second",
                "latency_ms",
                "commits",
                "commits_per_message",
                "rollbacks",
                "write_xids",
                "write_xids_per_message",
                "segments",
                "stored_bytes_per_message",
                "wal_bytes_per_message",
                "build_micros_per_message",
                "cpu_cores",
                "attempts",
                "messages_per_second_timeline",
            ],
        );
    }
}
