//! The `pop` scenario: consume throughput, and an exactly-once check of every
//! message consumed.
//!
//! Cases are consumers x mode. `autoack` pops with `autoAck=true` (the cursor
//! moves at delivery); `ack` pops with a lease and then acknowledges every
//! message of the response with one `POST /api/v1/ack/batch`
//! (`status: completed`, the message's `transactionId`, `partitionId` and
//! `leaseId`, group `__QUEUE_MODE__`). Each consumer loops
//! `GET /api/v1/pop/queue/<q>?batch=100&wait=true&timeout=1000` on its own
//! keep-alive connection, one request at a time. Every case runs on its own
//! database and broker:
//!
//! 1. `ack` mode only: ask for `POST /api/v1/ack/batch` with no
//!    acknowledgments; a 404 means the route is not there, and the case is
//!    reported as skipped (not failed);
//! 2. pre-fill: `--prefill` messages (1 KB JSON payloads) pushed by 16
//!    producers in requests of `--prefill-batch` items, request `r` going to
//!    partition `r % partitions`; each item's transaction id is derived from
//!    its payload id (`payload::sequential_txn_id`), so a delivered message
//!    maps back to the message pushed;
//! 3. warm-up: consumers run for `--warmup` seconds. From the warm-up's rate,
//!    the backlog is topped up (consumers idle) to twice what the window is
//!    expected to consume, so the window does not run dry;
//! 4. the window: consumers run for `--duration` seconds, then drain in-flight
//!    requests; written transactions (xids), WAL and CPU are read around it.
//!    Its length runs to the last delivery (a long-poll that comes back empty
//!    after the deadline does not stretch it). If the backlog runs out anyway,
//!    the case says so (`drained`);
//! 5. drain (not measured): consumers run until every pushed message was
//!    consumed, or until a whole round of long-polls comes back empty;
//! 6. exactly-once: every pushed transaction id must have been consumed
//!    exactly once over warm-up, window and drain. Duplicates and misses are
//!    counted and reported (with `autoAck` a duplicate is a bug; with acks,
//!    one can only come from a lease expiring, 60 s here, or a failed ack).
//!
//! Consumed means delivered (`autoack`) or delivered and acknowledged with
//! `success: true` (`ack`). Pop latency is the round trip of a pop that
//! delivered messages (an empty long-poll's is its timeout; those are
//! counted apart); the ack's round trip is reported separately.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::case::{self, Case as _, Failures, Merge, Window};
use crate::client::payload::{self, Bodies, TxnIds};
use crate::client::{self, Conn, Message};
use crate::env::{self, CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::measure::cpu::{self, Usage};
use crate::measure::{self, micros, ratio, stats, to_f64, to_f64_i, Latency, Timeline};
use crate::output::report::{Report, Row, Skipped};
use crate::output::table::{fixed, Table};

/// The queue-mode consumer group.
const QUEUE_MODE: &str = "__QUEUE_MODE__";

/// Producers of the pre-fill.
const FILL_PRODUCERS: usize = 16;

/// The backlog before the window is topped up to this many times what the
/// warm-up's rate would consume in the window.
const BACKLOG_FACTOR: f64 = 3.0;

/// The most messages a top-up adds.
const MAX_TOP_UP: u64 = 3_000_000;

/// The drain gives up after this long.
const MAX_DRAIN: Duration = Duration::from_secs(120);

/// How a consumer acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Mode {
    /// `autoAck=true`: consumed at delivery.
    Autoack,
    /// Leased pop, then `POST /api/v1/ack/batch` of every message.
    Ack,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Autoack => "autoack",
            Mode::Ack => "ack",
        }
    }
}

/// The pop scenario's settings.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct PopOpts {
    #[command(flatten)]
    pub(crate) window: Window<PopOpts>,
    /// Concurrent consumers, comma-separated [default: 4,32].
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    pub(crate) consumers: Vec<usize>,
    /// Modes to run, comma-separated [default: autoack,ack].
    #[arg(long, value_name = "MODE,..", value_delimiter = ',')]
    pub(crate) modes: Vec<Mode>,
    /// Partitions of the queue.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub(crate) partitions: usize,
    /// Messages per pop (`batch=`).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub(crate) batch: usize,
    /// Messages pushed before the warm-up [default: 100000, 50000 with --quick];
    /// topped up before the window when the warm-up shows it is not enough.
    #[arg(long, value_name = "N")]
    pub(crate) prefill: Option<u64>,
    /// Items per pre-fill push request (one partition per request): the
    /// segment size the consumers read.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub(crate) prefill_batch: usize,
    /// Brokers on the database, consumers spread over them, comma-separated
    /// [default: 1].
    #[arg(long, value_name = "N,..", value_delimiter = ',')]
    pub(crate) brokers: Vec<usize>,
}

/// How the pop words `--warmup` and `--quick`.
impl case::WindowHelp for PopOpts {
    const WARMUP: &'static str = "Seconds of consuming before each window, not counted";
    const QUICK: &'static str = "32 consumers only, 2-second windows, a smaller pre-fill";
}

impl PopOpts {
    /// The settings `all` runs with.
    pub(crate) fn for_all(quick: bool, duration: Option<f64>) -> PopOpts {
        PopOpts {
            window: Window::for_all(quick, duration),
            consumers: Vec::new(),
            modes: Vec::new(),
            partitions: 100,
            batch: 100,
            prefill: None,
            prefill_batch: 100,
            brokers: Vec::new(),
        }
    }

    fn cases(&self) -> Vec<Case> {
        let consumers = if !self.consumers.is_empty() {
            self.consumers.clone()
        } else if self.window.quick {
            vec![32]
        } else {
            vec![4, 32]
        };
        let modes = if self.modes.is_empty() {
            vec![Mode::Autoack, Mode::Ack]
        } else {
            self.modes.clone()
        };
        let brokers = if self.brokers.is_empty() {
            vec![1]
        } else {
            self.brokers.clone()
        };
        let mut cases = Vec::new();
        for &mode in &modes {
            for &consumers in &consumers {
                for &brokers in &brokers {
                    cases.push(Case {
                        mode,
                        consumers,
                        brokers,
                    });
                }
            }
        }
        cases
    }

    fn prefill(&self) -> u64 {
        self.prefill
            .unwrap_or(if self.window.quick { 50_000 } else { 100_000 })
    }

    pub(crate) fn validate(&self) -> Result<()> {
        self.window.validate(&[])?;
        if self.partitions == 0
            || self.batch == 0
            || self.prefill_batch == 0
            || self.prefill() == 0
            || self.cases().iter().any(|case| case.consumers == 0)
        {
            return Err(Error::msg(
                "partitions, batch, prefill, prefill batch and consumers must be >= 1",
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
                "partitions": self.partitions,
                "pop": format!("GET {}[&autoAck=true]", payload::pop_path("<q>", self.batch, false)),
                "ack": "POST /api/v1/ack/batch, every message of the pop, status completed, \
                        consumerGroup __QUEUE_MODE__",
                "prefill_messages": self.prefill(),
                "prefill_batch": self.prefill_batch,
                "prefill_producers": FILL_PRODUCERS,
                "backlog_factor": BACKLOG_FACTOR,
            }),
        )
    }
}

/// One case.
#[derive(Debug, Clone, Copy)]
struct Case {
    mode: Mode,
    consumers: usize,
    brokers: usize,
}

impl case::Case for Case {
    fn name(self) -> String {
        if self.brokers == 1 {
            format!("{} c{}", self.mode.name(), self.consumers)
        } else {
            format!("{} c{} n{}", self.mode.name(), self.consumers, self.brokers)
        }
    }
}

/// A case ran, or could not (the ack route is missing).
enum Outcome {
    Done(Box<PopResult>),
    Skipped(String),
}

case::scenario!(PopOpts, "pop", |ctx, opts, report| run(
    ctx.env, ctx.common, opts, ctx.bodies, report
));

/// Run every case, adding each result to `report`; stop at the first failure.
async fn run(
    env: &Env,
    common: &CommonArgs,
    opts: &PopOpts,
    bodies: &Arc<Bodies>,
    report: &mut Report,
) -> Result<()> {
    case::run_cases(
        "pop",
        common,
        &opts.cases(),
        |case| run_case(env, common, opts, bodies, case),
        |case, outcome| match outcome {
            Outcome::Done(result) => {
                eprintln!(
                    "queen-load:   {:.0} msg/s, {:.0} pops/s, {:.1} msg/pop, pop p50 {:.2} ms, \
                     p99 {:.2} ms, {} duplicates, {} missing{}, cpu {}, per second {:?}",
                    result.messages_per_second,
                    result.pops_per_second,
                    result.messages_per_pop,
                    result.pop_latency_ms.p50,
                    result.pop_latency_ms.p99,
                    result.exactly_once.duplicates,
                    result.exactly_once.missing,
                    if result.drained {
                        ", backlog ran dry"
                    } else {
                        ""
                    },
                    cpu::columns(&result.cpu_cores),
                    result.messages_per_second_timeline
                );
                report.push(*result);
            }
            Outcome::Skipped(reason) => {
                eprintln!("queen-load:   skipped: {reason}");
                report.skip(Skipped {
                    scenario: "pop",
                    case: case.name(),
                    reason,
                });
            }
        },
    )
    .await
}

/// What every producer and consumer task of a case shares.
struct Shared {
    queue: String,
    partitions: Vec<String>,
    mode: Mode,
    pop_path: String,
    bodies: Arc<Bodies>,
    /// Messages pushed so far: payload ids are `0..pushed`.
    pushed: AtomicU64,
    /// Push requests of the pre-fill and top-ups so far (picks the partition).
    fill_requests: AtomicUsize,
    /// Messages consumed so far, over every phase.
    consumed: AtomicU64,
    /// Set when `consumed` reached `pushed`.
    drained: AtomicBool,
}

/// One case on its own database and broker.
async fn run_case(
    env: &Env,
    common: &CommonArgs,
    opts: &PopOpts,
    bodies: &Arc<Bodies>,
    case: Case,
) -> Result<Outcome> {
    let dbname = env.create_database("pop").await?;
    let mut brokers = env.start_brokers(common, &dbname, case.brokers).await?;
    let addr = brokers[0].addr();
    // Consumer i pops (and acks) through broker i mod n.
    let consumer_addrs: Vec<SocketAddr> = (0..case.consumers)
        .map(|i| brokers[i % brokers.len()].addr())
        .collect();
    let postmaster = env.postmaster_pid()?;
    let pids = env::pids(&brokers);

    if case.mode == Mode::Ack {
        if let Some(reason) = ack_route_missing(addr).await? {
            env::stop_all(brokers).await?;
            env.drop_database(&dbname, common.keep).await?;
            return Ok(Outcome::Skipped(reason));
        }
    }

    let queue = format!("bench.pop.{}-c{}", case.mode.name(), case.consumers);
    let shared = Arc::new(Shared {
        pop_path: payload::pop_path(&queue, opts.batch, case.mode == Mode::Autoack),
        queue,
        partitions: payload::partition_names(opts.partitions),
        mode: case.mode,
        bodies: Arc::clone(bodies),
        pushed: AtomicU64::new(0),
        fill_requests: AtomicUsize::new(0),
        consumed: AtomicU64::new(0),
        drained: AtomicBool::new(false),
    });

    // Pre-fill.
    let fill_started = Instant::now();
    fill(addr, &shared, opts.prefill(), opts.prefill_batch).await?;
    let fill_seconds = fill_started.elapsed().as_secs_f64();
    let prefill_messages = shared.pushed.load(Ordering::Relaxed);
    let (prefill_segments, _, _) = stats::segments(
        &env.connect_config(&dbname),
        std::time::SystemTime::UNIX_EPOCH,
    )
    .await?;

    let consumers = connect_spread(&consumer_addrs).await?;

    // Warm-up, then top up the backlog for the window.
    let warm_started = Instant::now();
    let (consumers, warm) = phase(
        consumers,
        &shared,
        Until::Deadline(warm_started + Duration::from_secs_f64(opts.window.warmup)),
    )
    .await?;
    warm.check("warm-up")?;
    let warm_rate = to_f64(warm.messages) / warm.active_seconds(warm_started).max(0.001);
    let backlog = shared
        .pushed
        .load(Ordering::Relaxed)
        .saturating_sub(shared.consumed.load(Ordering::Relaxed));
    let wanted = float_count(
        warm_rate * opts.window.duration() * BACKLOG_FACTOR,
        MAX_TOP_UP * 2,
    );
    let top_up = wanted.saturating_sub(backlog).min(MAX_TOP_UP);
    if top_up > 0 {
        fill(addr, &shared, top_up, opts.prefill_batch).await?;
        shared.drained.store(false, Ordering::Relaxed);
    }
    env::check_alive(&mut brokers)?;
    // Fresh connections: the broker closes a keep-alive connection that sent
    // nothing for 30 s (hyper's header read timeout), and a top-up can last
    // that long.
    drop(consumers);
    let consumers = connect_spread(&consumer_addrs).await?;

    // The window.
    let ((consumers, window), measured) = measure::measure(
        &env.admin,
        &pids,
        postmaster,
        opts.window.duration(),
        |deadline| phase(consumers, &shared, Until::Deadline(deadline)),
    )
    .await?;
    let drained = shared.drained.load(Ordering::Relaxed);
    let seconds = match window.active_seconds(measured.started) {
        active if active > 0.0 => active,
        _ => measured.seconds,
    };
    window.check("window")?;
    env::check_alive(&mut brokers)?;

    // Drain, then the exactly-once check over every phase.
    let drain_started = Instant::now();
    let (consumers, drain) = phase(consumers, &shared, Until::Drained).await?;
    let drain_seconds = drain_started.elapsed().as_secs_f64();
    drain.check("drain")?;
    drop(consumers);
    let pushed = shared.pushed.load(Ordering::Relaxed);
    let exactly_once = ExactlyOnce::check(pushed, [&warm, &window, &drain]);

    env::stop_all(brokers).await?;
    env.drop_database(&dbname, common.keep).await?;

    let messages = to_f64(window.messages);
    let per_message = |value: i64| ratio(to_f64_i(value), messages);
    Ok(Outcome::Done(Box::new(PopResult {
        name: case.name(),
        mode: case.mode.name(),
        consumers: case.consumers,
        partitions: opts.partitions,
        batch: opts.batch,
        seconds,
        pops: window.pops,
        empty_pops: window.empty_pops,
        messages: window.messages,
        messages_per_second: messages / seconds,
        pops_per_second: to_f64(window.pops) / seconds,
        messages_per_pop: ratio(messages, to_f64(window.pops)),
        pop_latency_ms: Latency::from_micros(window.pop_us),
        acks: window.acks,
        ack_failures: window.ack_failures,
        ack_latency_ms: Latency::from_micros(window.ack_us),
        write_xids: measured.write_xids(),
        write_xids_per_message: per_message(measured.write_xids()),
        wal_bytes_per_message: per_message(measured.wal_bytes()),
        cpu_cores: measured.cpu_cores,
        attempts: 1,
        drained,
        warmup_messages: warm.messages,
        warmup_messages_per_second: warm_rate,
        prefill_messages,
        prefill_seconds: fill_seconds,
        prefill_messages_per_second: to_f64(prefill_messages) / fill_seconds.max(0.001),
        prefill_messages_per_segment: ratio(
            to_f64_i(prefill_segments.messages),
            to_f64_i(prefill_segments.rows),
        ),
        top_up_messages: top_up,
        drain_messages: drain.messages,
        drain_seconds,
        exactly_once,
        messages_per_second_timeline: window.timeline.into_vec(),
    })))
}

impl cpu::Measured for Outcome {
    fn other_cpu(&self) -> f64 {
        match self {
            Outcome::Done(result) => result.cpu_cores.other,
            Outcome::Skipped(_) => 0.0,
        }
    }

    fn set_attempts(&mut self, attempts: u32) {
        if let Outcome::Done(result) = self {
            result.attempts = attempts;
        }
    }
}

/// One connection to each of `addrs`.
async fn connect_spread(addrs: &[SocketAddr]) -> Result<Vec<Conn>> {
    let mut conns = Vec::with_capacity(addrs.len());
    for &addr in addrs {
        conns.push(Conn::connect(addr).await?);
    }
    Ok(conns)
}

/// `Some(reason)` when `POST /api/v1/ack/batch` answers 404.
async fn ack_route_missing(addr: SocketAddr) -> Result<Option<String>> {
    Conn::connect(addr)
        .await?
        .ack_route_missing(QUEUE_MODE)
        .await
}

/// Push `count` more messages: [`FILL_PRODUCERS`] connections, requests of
/// `batch` items for one partition each, sequential transaction ids.
async fn fill(addr: SocketAddr, shared: &Arc<Shared>, count: u64, batch: usize) -> Result<()> {
    let first = shared.pushed.load(Ordering::Relaxed);
    let end = first + count;
    let next = Arc::new(AtomicU64::new(first));
    let mut tasks = Vec::with_capacity(FILL_PRODUCERS);
    for _ in 0..FILL_PRODUCERS {
        let mut conn = Conn::connect(addr).await?;
        let shared = Arc::clone(shared);
        let next = Arc::clone(&next);
        let batch_u64 = u64::try_from(batch).context("batch")?;
        tasks.push(tokio::spawn(async move {
            loop {
                let first_id = next.fetch_add(batch_u64, Ordering::Relaxed);
                if first_id >= end {
                    return Ok::<(), Error>(());
                }
                let n = usize::try_from((end - first_id).min(batch_u64)).context("batch")?;
                let request = shared.fill_requests.fetch_add(1, Ordering::Relaxed);
                let partition = &shared.partitions[request % shared.partitions.len()];
                let mut body = Vec::with_capacity(n * 1200 + 64);
                payload::push_request(
                    &mut body,
                    &shared.bodies,
                    &shared.queue,
                    partition,
                    first_id,
                    n,
                    TxnIds::Sequential,
                );
                conn.push(Bytes::from(body), n)
                    .await
                    .map_err(|error| error.wrap("pre-fill push"))?;
            }
        }));
    }
    for task in tasks {
        task.await.context("pre-fill task")??;
    }
    shared.pushed.store(end, Ordering::Relaxed);
    Ok(())
}

/// When a consumer phase ends.
#[derive(Debug, Clone, Copy)]
enum Until {
    /// At the deadline, or when everything pushed was consumed.
    Deadline(Instant),
    /// When everything pushed was consumed, or a long-poll came back empty
    /// twice in a row (nothing left to deliver), or after [`MAX_DRAIN`].
    Drained,
}

/// What the consumers of one phase did.
#[derive(Debug, Default)]
struct PhaseStats {
    pops: u64,
    empty_pops: u64,
    messages: u64,
    acks: u64,
    ack_failures: u64,
    pop_us: Vec<u32>,
    ack_us: Vec<u32>,
    /// Payload ids consumed, in no particular order.
    ids: Vec<u64>,
    /// Deliveries whose transaction id does not match their payload id.
    mismatched: u64,
    failures: Failures,
    /// The last moment a consumer consumed something.
    last_consumed: Option<Instant>,
    timeline: Timeline,
}

impl Merge for PhaseStats {
    fn merge(&mut self, other: PhaseStats) {
        self.pops += other.pops;
        self.empty_pops += other.empty_pops;
        self.messages += other.messages;
        self.acks += other.acks;
        self.ack_failures += other.ack_failures;
        self.pop_us.extend(other.pop_us);
        self.ack_us.extend(other.ack_us);
        self.ids.extend(other.ids);
        self.mismatched += other.mismatched;
        self.failures.merge(other.failures);
        self.last_consumed = self.last_consumed.max(other.last_consumed);
        self.timeline.merge(other.timeline);
    }
}

impl PhaseStats {
    fn check(&self, phase: &str) -> Result<()> {
        self.failures.check(
            "requests",
            phase,
            format_args!("{} pops succeeded", self.pops),
        )
    }

    /// Seconds from `started` to the last consumption (0 if none).
    fn active_seconds(&self, started: Instant) -> f64 {
        self.last_consumed
            .map_or(0.0, |at| at.duration_since(started).as_secs_f64())
    }
}

/// Run every consumer until `until`, wait for the last response, and hand the
/// connections back for the next phase.
async fn phase(
    consumers: Vec<Conn>,
    shared: &Arc<Shared>,
    until: Until,
) -> Result<(Vec<Conn>, PhaseStats)> {
    case::phase(consumers, "consumer task", |conn, started| {
        consume(conn, Arc::clone(shared), started, until)
    })
    .await
}

/// One consumer's loop: a pop (and its ack) at a time. Stops at the first
/// failure (the connection's state is unknown after one).
async fn consume(
    mut conn: Conn,
    shared: Arc<Shared>,
    started: Instant,
    until: Until,
) -> (Conn, PhaseStats) {
    let mut stats = PhaseStats::default();
    let mut empty_in_a_row = 0;
    loop {
        let done = shared.consumed.load(Ordering::Relaxed) >= shared.pushed.load(Ordering::Relaxed);
        let stop = match until {
            Until::Deadline(deadline) => done || Instant::now() >= deadline,
            Until::Drained => done || empty_in_a_row >= 2 || started.elapsed() > MAX_DRAIN,
        };
        if stop {
            break;
        }
        match pop_once(&mut conn, &shared, &mut stats).await {
            Ok(0) => empty_in_a_row += 1,
            Ok(n) => {
                empty_in_a_row = 0;
                let now = Instant::now();
                stats.last_consumed = Some(now);
                stats.timeline.add(started, now, n);
                let consumed = shared.consumed.fetch_add(n, Ordering::Relaxed) + n;
                if consumed >= shared.pushed.load(Ordering::Relaxed) {
                    shared.drained.store(true, Ordering::Relaxed);
                }
            }
            Err(error) => {
                stats.failures.record(&error);
                break;
            }
        }
    }
    (conn, stats)
}

/// The payload's `id`; the rest of it is skipped.
#[derive(Deserialize)]
struct PayloadId {
    id: u64,
}

/// One pop, and in `ack` mode its ack. Returns the messages consumed.
async fn pop_once(conn: &mut Conn, shared: &Shared, stats: &mut PhaseStats) -> Result<u64> {
    let sent_at = Instant::now();
    let popped = conn.pop(&shared.pop_path).await?;
    let pop_us = micros(sent_at.elapsed());
    stats.pops += 1;
    let messages = popped.messages::<PayloadId>()?;
    if messages.is_empty() {
        stats.empty_pops += 1;
        return Ok(0);
    }
    stats.pop_us.push(pop_us);
    let n = u64::try_from(messages.len()).context("message count")?;
    for message in &messages {
        if payload::parse_sequential_txn_id(&message.transaction_id) != Some(message.data.id) {
            stats.mismatched += 1;
        }
    }
    match shared.mode {
        Mode::Autoack => {
            stats.ids.extend(messages.iter().map(|m| m.data.id));
            stats.messages += n;
            Ok(n)
        }
        Mode::Ack => {
            let acked = ack(conn, &messages, stats).await?;
            stats.messages += acked;
            Ok(acked)
        }
    }
}

/// Acknowledge every message with one batch ack. Returns how many succeeded
/// (only those count as consumed; the others come back after the lease).
async fn ack(
    conn: &mut Conn,
    messages: &[Message<'_, PayloadId>],
    stats: &mut PhaseStats,
) -> Result<u64> {
    let sent_at = Instant::now();
    let reply = conn
        .ack_request(&client::completed(messages), Some(QUEUE_MODE))
        .await?;
    stats.ack_us.push(micros(sent_at.elapsed()));
    stats.acks += 1;
    let results = client::ack_results(&reply, messages.len())?;
    let mut acked = 0;
    for (message, result) in messages.iter().zip(&results) {
        if result.success {
            stats.ids.push(message.data.id);
            acked += 1;
        } else {
            stats.ack_failures += 1;
        }
    }
    Ok(acked)
}

/// A float count rounded up, 0 for NaN or negative values, at most `cap`.
fn float_count(value: f64, cap: u64) -> u64 {
    if !(value.is_finite() && value > 0.0) {
        return 0;
    }
    let value = value.ceil().min(to_f64(cap));
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // finite, in [0, cap]
    let count = value as u64;
    count
}

/// Every pushed message consumed exactly once?
#[derive(Debug, Default, Serialize)]
pub(crate) struct ExactlyOnce {
    /// Messages pushed (pre-fill and top-ups).
    pub(crate) pushed: u64,
    /// Distinct messages consumed.
    pub(crate) consumed: u64,
    /// Consumptions beyond the first of a message.
    pub(crate) duplicates: u64,
    /// Messages pushed and never consumed.
    pub(crate) missing: u64,
    /// Deliveries of a payload id never pushed.
    pub(crate) unknown: u64,
    /// Deliveries whose transaction id does not belong to their payload.
    pub(crate) mismatched: u64,
    /// Everything consumed exactly once, nothing unknown or mismatched.
    pub(crate) ok: bool,
}

impl ExactlyOnce {
    fn check<'a>(pushed: u64, phases: impl IntoIterator<Item = &'a PhaseStats>) -> ExactlyOnce {
        let len = usize::try_from(pushed).unwrap_or(usize::MAX);
        let mut counts = vec![0u8; len];
        let mut result = ExactlyOnce {
            pushed,
            ..ExactlyOnce::default()
        };
        for phase in phases {
            result.mismatched += phase.mismatched;
            for &id in &phase.ids {
                match usize::try_from(id).ok().and_then(|i| counts.get_mut(i)) {
                    Some(count) => *count = count.saturating_add(1),
                    None => result.unknown += 1,
                }
            }
        }
        for &count in &counts {
            match count {
                0 => result.missing += 1,
                n => {
                    result.consumed += 1;
                    result.duplicates += u64::from(n - 1);
                }
            }
        }
        result.ok = result.duplicates == 0
            && result.missing == 0
            && result.unknown == 0
            && result.mismatched == 0;
        result
    }
}

/// The figures of one pop case.
#[derive(Debug, Serialize)]
pub(crate) struct PopResult {
    pub(crate) name: String,
    /// `autoack` or `ack`.
    pub(crate) mode: &'static str,
    pub(crate) consumers: usize,
    pub(crate) partitions: usize,
    /// `batch=` of each pop.
    pub(crate) batch: usize,
    /// Measured seconds: from the window's start to its last delivery.
    pub(crate) seconds: f64,
    pub(crate) pops: u64,
    /// Pops that came back with no message.
    pub(crate) empty_pops: u64,
    /// Messages consumed in the window.
    pub(crate) messages: u64,
    pub(crate) messages_per_second: f64,
    pub(crate) pops_per_second: f64,
    pub(crate) messages_per_pop: f64,
    /// The round trip of a pop that delivered messages.
    pub(crate) pop_latency_ms: Latency,
    /// Batch acks sent in the window (`ack` mode).
    pub(crate) acks: u64,
    /// Acknowledgments answered `success: false`.
    pub(crate) ack_failures: u64,
    /// One batch ack's round trip.
    pub(crate) ack_latency_ms: Latency,
    /// Transaction ids assigned cluster-wide over the window: transactions that wrote.
    pub(crate) write_xids: i64,
    pub(crate) write_xids_per_message: f64,
    pub(crate) wal_bytes_per_message: f64,
    pub(crate) cpu_cores: Usage,
    /// Runs of the case (more than 1: earlier ones were disturbed).
    pub(crate) attempts: u32,
    /// The backlog ran out during the window (raise `--prefill`).
    pub(crate) drained: bool,
    pub(crate) warmup_messages: u64,
    pub(crate) warmup_messages_per_second: f64,
    pub(crate) prefill_messages: u64,
    pub(crate) prefill_seconds: f64,
    pub(crate) prefill_messages_per_second: f64,
    /// Messages per segment of the pre-fill: what a pop decompresses.
    pub(crate) prefill_messages_per_segment: f64,
    /// Messages added after the warm-up so the window would not run dry.
    pub(crate) top_up_messages: u64,
    pub(crate) drain_messages: u64,
    pub(crate) drain_seconds: f64,
    pub(crate) exactly_once: ExactlyOnce,
    pub(crate) messages_per_second_timeline: Vec<u64>,
}

impl Row for PopResult {
    const KEY: &'static str = "pop";

    fn title() -> Option<String> {
        Some(format!("pop ({})", cpu::NOTE))
    }

    fn table(cases: &[PopResult]) -> String {
        table(cases)
    }

    fn disturbance(&self) -> Option<(&str, f64, u32)> {
        Some((&self.name, self.cpu_cores.other, self.attempts))
    }
}

/// The pop table.
fn table(cases: &[PopResult]) -> String {
    let mut table = Table::new(&[
        ("case", 12),
        ("msg/s", 9),
        ("pops/s", 8),
        ("msg/pop", 8),
        ("pop p50", 8),
        ("pop p99", 8),
        ("ack p50", 8),
        ("ack p99", 8),
        ("xid/msg", 7),
        ("WAL/msg", 7),
        ("dup/miss", 9),
        ("cpu brk/pg/load/other", 21),
        ("note", 16),
    ]);
    for case in cases {
        let once = &case.exactly_once;
        let mut note = String::new();
        if case.drained {
            note.push_str("ran dry ");
        }
        if once.unknown > 0 || once.mismatched > 0 {
            let _ = write!(note, "bad:{}/{} ", once.unknown, once.mismatched);
        }
        if case.ack_failures > 0 {
            let _ = write!(note, "ackfail:{}", case.ack_failures);
        }
        if note.is_empty() {
            note.push_str(if once.ok { "exactly-once" } else { "-" });
        }
        table.row([
            case.name.clone(),
            fixed(case.messages_per_second, 0),
            fixed(case.pops_per_second, 0),
            fixed(case.messages_per_pop, 1),
            fixed(case.pop_latency_ms.p50, 2),
            fixed(case.pop_latency_ms.p99, 2),
            fixed(case.ack_latency_ms.p50, 2),
            fixed(case.ack_latency_ms.p99, 2),
            fixed(case.write_xids_per_message, 4),
            fixed(case.wal_bytes_per_message, 0),
            format!("{}/{}", once.duplicates, once.missing),
            cpu::columns(&case.cpu_cores),
            note.trim_end().to_owned(),
        ]);
    }
    table.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_once_counts_duplicates_misses_and_strangers() {
        let phase = |ids: &[u64]| PhaseStats {
            ids: ids.to_vec(),
            ..PhaseStats::default()
        };
        let a = phase(&[0, 1, 2]);
        let b = phase(&[2, 4, 9]);
        let once = ExactlyOnce::check(5, [&a, &b]);
        assert_eq!(once.consumed, 4);
        assert_eq!(once.duplicates, 1);
        assert_eq!(once.missing, 1);
        assert_eq!(once.unknown, 1);
        assert!(!once.ok);
        let all = phase(&[1, 0, 2]);
        assert!(ExactlyOnce::check(3, [&all]).ok);
    }
}
