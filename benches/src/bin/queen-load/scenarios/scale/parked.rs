//! The `parked` case of the `scale` scenario: `--parked` (10,000)
//! long-poll consumers parked on 100 queues, on a fresh database and broker.
//!
//! The load generator raises its `RLIMIT_NOFILE` soft limit to the hard
//! limit first (the broker, started after, inherits it) and starts the
//! broker with `QUEEN_MAX_CONNECTIONS` above the consumer count.
//!
//! 1. The 100 queues are created (one push each) and drained (an `autoAck`
//!    pop each).
//! 2. Consumer `k` gets its own keep-alive connection, opened in waves of
//!    500, and loops on `GET /api/v1/pop/queue/pq<k % 100>?batch=1&wait=true
//!    &timeout=30000` in queue mode, acking what it gets and re-issuing a pop
//!    that answers 204. The broker's `queen_pops_parked` is polled until
//!    every consumer is parked; its RSS and gauges are read then.
//! 3. **Idle window** of `--idle` seconds, nothing pushed, placed to end
//!    before the first pops time out (a settle of up to `SETTLE` before it):
//!    broker CPU as a fraction of one core (target < 2%), and the database's
//!    commits (statements) per second (target < 5), compared to the hot-list reseed period
//!    (`QUEEN_HOTLIST_RESEED_MS`, 5,000 ms by default). Pops that timed out
//!    in the window are counted.
//! 4. **Pushes**: 100 msg/s for `--duration` (20) seconds from 4
//!    connections, message `n` to queue `n % 100`, carrying its send time
//!    (`sent_us`, Unix microseconds); each consumer records receive time
//!    minus send time. Push-to-pop latency p50/p99/max (target p99 < 10 ms),
//!    messages received exactly once, and wake-ups per push: the delta of
//!    `queen_pop_wakeups_total` (null when absent) over the pushes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use super::common::{self as scale, ScaleOpts};
use crate::client::{self, Conn};
use crate::env::{self, CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::measure::cpu;
use crate::measure::memory;
use crate::measure::memory::Metrics;
use crate::measure::stats::DbStat;
use crate::measure::stats::{self, SETTLE};
use crate::measure::{self, micros, to_f64, to_f64_i, Latency};
use crate::output::table::{self, fixed};

const QUEUES: usize = 100;
/// Connections opened at once.
const WAVE: usize = 500;
/// The consumers' long-poll timeout.
const TIMEOUT: Duration = Duration::from_secs(30);
const PRODUCERS: usize = 4;
/// Messages per second pushed, in total.
const RATE: f64 = 100.0;
/// File descriptors beyond one per consumer (the broker, PostgreSQL, logs).
const SPARE_FDS: u64 = 1000;
/// The broker's default `QUEEN_HOTLIST_RESEED_MS`.
const DEFAULT_RESEED_MS: u64 = 5000;
const GAUGES: [&str; 5] = [
    "queen_pops_parked",
    "queen_pops_in_progress",
    "queen_wake_gates",
    "queen_hotlist_rings",
    "queen_pop_wakeups_total",
];

/// What the consumers saw.
#[derive(Default)]
struct Seen {
    /// Pops that answered 204 (timed out).
    timeouts: AtomicU64,
    /// Messages received, by number.
    received: Mutex<HashMap<u64, u32>>,
    /// Push-to-pop latencies, microseconds.
    latencies: Mutex<Vec<u32>>,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

pub(crate) async fn run(
    env: &Env,
    common: &CommonArgs,
    opts: &ScaleOpts,
) -> Result<serde_json::Value> {
    let consumers = opts.parked;
    let nofile = raise_nofile(u64::try_from(consumers).context("--parked")? + SPARE_FDS)?;
    let mut broker_common = common.clone();
    broker_common.broker_env.push((
        "QUEEN_MAX_CONNECTIONS".to_owned(),
        (consumers + 1000).to_string(),
    ));
    let reseed_ms = common
        .broker_env
        .iter()
        .find(|(key, _)| key == "QUEEN_HOTLIST_RESEED_MS")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(DEFAULT_RESEED_MS);
    let dbname = env.create_database("scale").await?;
    let mut brokers = env.start_brokers(&broker_common, &dbname, 1).await?;
    let addr = brokers[0].addr();
    let pid = brokers[0].pid();
    let postmaster = env.postmaster_pid()?;

    // The queues, created and drained.
    let mut admin = Conn::connect(addr).await?;
    let items: Vec<String> = (0..QUEUES)
        .map(|q| scale::item(&queue_name(q), None, 0))
        .collect();
    scale::push(&mut admin, &items).await?;
    for q in 0..QUEUES {
        let path = format!(
            "/api/v1/pop/queue/{}?batch=1&wait=false&autoAck=true",
            queue_name(q)
        );
        admin.pop(&path).await?;
    }

    // The consumers, in waves.
    let seen = Arc::new(Seen::default());
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(consumers);
    for wave in (0..consumers).step_by(WAVE) {
        let mut connecting = tokio::task::JoinSet::new();
        for k in wave..consumers.min(wave + WAVE) {
            connecting.spawn(async move { Conn::connect(addr).await.map(|conn| (k, conn)) });
        }
        while let Some(joined) = connecting.join_next().await {
            let (k, conn) = joined.context("a connecting task panicked")??;
            tasks.push(tokio::spawn(consume(k, conn, Arc::clone(&seen))));
        }
    }
    let connect_seconds = started.elapsed().as_secs_f64();
    let waited = wait_parked(addr, consumers).await?;
    let parked_seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "queen-load:   {consumers} consumers connected in {connect_seconds:.1} s, parked after \
         {parked_seconds:.1} s"
    );
    let rss_parked = memory::rss_bytes(pid)?;
    brokers[0].check_alive()?;

    // The idle window, ending before the first pops time out.
    let idle = Duration::from_secs_f64(opts.idle);
    let latest_end = started + TIMEOUT - Duration::from_secs(1);
    let settle = latest_end
        .saturating_duration_since(Instant::now() + idle)
        .clamp(Duration::from_secs(2), SETTLE);
    tokio::time::sleep(settle).await;
    let reads_before = stats::table_reads(&env.connect_config(&dbname)).await?;
    let before = DbStat::read(&env.admin, &dbname).await?;
    let timeouts_before = seen.timeouts.load(Ordering::Relaxed);
    let cpu_before = cpu::sample(&[pid], postmaster);
    tokio::time::sleep(idle).await;
    let cpu_after = cpu::sample(&[pid], postmaster);
    let timeouts_idle = seen.timeouts.load(Ordering::Relaxed) - timeouts_before;
    let counters = DbStat::read(&env.admin, &dbname).await?.since(before);
    let reads = stats::top_reads(
        &reads_before,
        &stats::table_reads(&env.connect_config(&dbname)).await?,
    );
    let idle_cpu = cpu::usage(&cpu_before, &cpu_after);
    let idle_seconds = idle.as_secs_f64();
    let commits_per_second = to_f64_i(counters.commits) / idle_seconds;
    eprintln!(
        "queen-load:   idle: broker {:.1}% of a core, {commits_per_second:.2} commits/s, \
         {timeouts_idle} pops timed out; rows read by table: {reads}",
        idle_cpu.broker * 100.0
    );

    // The pushes.
    let wakeups_before = Metrics::scrape(addr).await?.get("queen_pop_wakeups_total");
    let duration = opts.duration(20.0);
    let (pushed, push_us) = push(addr, duration).await?;
    let push_latency = Latency::from_micros(push_us);
    let drain_until = Instant::now() + Duration::from_secs(5);
    while received(&seen)? < pushed && Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = Metrics::scrape(addr).await?;
    let wakeups = metrics
        .get("queen_pop_wakeups_total")
        .zip(wakeups_before)
        .map(|(after, before)| after - before);
    let rss_after = memory::rss_bytes(pid)?;
    brokers[0].check_alive()?;
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        let _ = task.await;
    }
    drop(admin);
    env::stop_all(brokers).await?;
    env.drop_database(&dbname, common.keep).await?;

    let failed = seen.failed.load(Ordering::Relaxed);
    if failed > 0 {
        let first = lock(&seen.first_error)?.clone().unwrap_or_default();
        return Err(Error::msg(format!(
            "{failed} consumers failed; the first: {first}"
        )));
    }
    let counts = lock(&seen.received)?;
    let distinct = (0..pushed).filter(|n| counts.contains_key(n)).count() as u64;
    let duplicates: u64 = counts
        .values()
        .map(|&c| u64::from(c.saturating_sub(1)))
        .sum();
    let strangers = counts.keys().filter(|&&n| n >= pushed).count();
    let latency = Latency::from_micros(lock(&seen.latencies)?.clone());
    let exactly_once = distinct == pushed && duplicates == 0 && strangers == 0;
    let wakeups_per_push = measure::per(wakeups, Some(to_f64(pushed)));
    let pushes = duration.as_secs_f64();
    let result = json!({
        "case": "parked",
        "consumers": consumers,
        "queues": QUEUES,
        "nofile_limit": nofile,
        "connect_seconds": connect_seconds,
        "parked_seconds": parked_seconds,
        "parked_by_gauge": waited.get("queen_pops_parked"),
        "metrics_parked": waited.json(&GAUGES),
        "broker_rss_bytes_parked": rss_parked,
        "broker_rss_bytes_per_parked": to_f64(rss_parked) / consumers as f64,
        "idle": {
            "seconds": idle_seconds,
            "settle_seconds": settle.as_secs_f64(),
            "counters": counters,
            "top_tables_read": reads,
            "commits_per_second": commits_per_second,
            "blocks_per_second": to_f64_i(counters.blocks) / idle_seconds,
            "hotlist_reseed_ms": reseed_ms,
            "commits_per_reseed_period": commits_per_second * reseed_ms as f64 / 1000.0,
            "pops_timed_out": timeouts_idle,
            "cpu_cores": idle_cpu,
            "broker_core_fraction": idle_cpu.broker,
            "broker_below_2_percent": idle_cpu.broker < 0.02,
            "commits_below_5_per_second": commits_per_second < 5.0,
        },
        "pushes": {
            "seconds": pushes,
            "pushed": pushed,
            "messages_per_second": to_f64(pushed) / pushes,
            "latency_ms": latency,
            "push_request_latency_ms": push_latency,
            "p99_below_10_ms": latency.p99 < 10.0,
            "received_distinct": distinct,
            "duplicates": duplicates,
            "strangers": strangers,
            "exactly_once": exactly_once,
            "wakeups": wakeups,
            "wakeups_per_push": wakeups_per_push,
            "metrics": metrics.json(&GAUGES),
            "broker_rss_bytes": rss_after,
        },
    });
    let mut t = table::figures(&["value"]);
    let mut row = |name: &str, value: Option<f64>, decimals| {
        t.row([name.to_owned(), table::cell(value, decimals)]);
    };
    row("parked consumers", Some(consumers as f64), 0);
    row("queen_pops_parked", waited.get("queen_pops_parked"), 0);
    row("connect seconds", Some(connect_seconds), 1);
    row(
        "broker RSS MiB (parked)",
        Some(to_f64(rss_parked) / 1_048_576.0),
        1,
    );
    row(
        "  bytes per parked",
        Some(to_f64(rss_parked) / consumers as f64),
        0,
    );
    row("idle broker % of a core", Some(idle_cpu.broker * 100.0), 2);
    row(
        "idle PostgreSQL % of a core",
        Some(idle_cpu.postgres * 100.0),
        2,
    );
    row(
        "idle other % (disturbance)",
        Some(idle_cpu.other * 100.0),
        1,
    );
    row("idle commits/s", Some(commits_per_second), 2);
    row(
        "idle blocks/s",
        Some(to_f64_i(counters.blocks) / idle_seconds),
        1,
    );
    row(
        &format!("idle commits per reseed ({reseed_ms} ms)"),
        Some(commits_per_second * reseed_ms as f64 / 1000.0),
        1,
    );
    row("idle pops timed out", Some(to_f64(timeouts_idle)), 0);
    row("pushed", Some(to_f64(pushed)), 0);
    row("received exactly once", Some(to_f64(distinct)), 0);
    row("duplicates", Some(to_f64(duplicates)), 0);
    row("push-to-pop p50 ms", Some(latency.p50), 2);
    row("push-to-pop p99 ms", Some(latency.p99), 2);
    row("push-to-pop max ms", Some(latency.max), 2);
    row("push request p50 ms", Some(push_latency.p50), 2);
    row("push request p99 ms", Some(push_latency.p99), 2);
    row("wake-ups per push", wakeups_per_push, 2);
    row(
        "broker RSS MiB (after pushes)",
        Some(to_f64(rss_after) / 1_048_576.0),
        1,
    );
    eprintln!("{}", t.finish());
    eprintln!(
        "queen-load:   targets: idle broker < 2% of a core: {}; idle commits < 5/s: {}; push-to-pop p99 < 10 ms: {} ({} ms)",
        if idle_cpu.broker < 0.02 { "met" } else { "MISSED" },
        if commits_per_second < 5.0 { "met" } else { "MISSED" },
        if latency.p99 < 10.0 { "met" } else { "MISSED" },
        fixed(latency.p99, 2)
    );
    Ok(result)
}

fn queue_name(q: usize) -> String {
    format!("pq{q:03}")
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit; fail if that is below
/// `needed`. Returns the limit now in force.
fn raise_nofile(needed: u64) -> Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).context("getrlimit(RLIMIT_NOFILE)")?;
    if hard < needed {
        return Err(Error::msg(format!(
            "the hard RLIMIT_NOFILE is {hard}, below the {needed} file descriptors this case \
             needs: raise it (ulimit -Hn, or LimitNOFILE for a service) or lower --parked"
        )));
    }
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).context("setrlimit(RLIMIT_NOFILE)")?;
    }
    Ok(hard)
}

fn lock<T>(mutex: &Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>> {
    mutex
        .lock()
        .map_err(|_| Error::msg("a consumer panicked holding the results"))
}

fn received(seen: &Seen) -> Result<u64> {
    Ok(lock(&seen.received)?.len() as u64)
}

/// Poll `queen_pops_parked` until `consumers` are parked (at most 60 s;
/// 3 s when the broker does not export it); returns the last scrape.
async fn wait_parked(addr: std::net::SocketAddr, consumers: usize) -> Result<Metrics> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = Metrics::scrape(addr).await?;
        match metrics.get("queen_pops_parked") {
            None => {
                tokio::time::sleep(Duration::from_secs(3)).await;
                return Metrics::scrape(addr).await;
            }
            Some(parked) if parked >= consumers as f64 || Instant::now() > deadline => {
                return Ok(metrics)
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// Consumer `k`'s loop; its first failure is recorded and ends it.
async fn consume(k: usize, mut conn: Conn, seen: Arc<Seen>) {
    let path = format!(
        "/api/v1/pop/queue/{}?batch=1&wait=true&timeout={}",
        queue_name(k % QUEUES),
        TIMEOUT.as_millis()
    );
    let result: Result<()> = async {
        loop {
            let popped = conn.pop(&path).await?;
            let now = scale::unix_micros();
            let messages = popped.messages::<scale::Data>()?;
            if messages.is_empty() {
                seen.timeouts.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            {
                let mut latencies = lock(&seen.latencies)?;
                let mut received = lock(&seen.received)?;
                for m in &messages {
                    let waited = now.saturating_sub(m.data.sent_us);
                    latencies.push(u32::try_from(waited).unwrap_or(u32::MAX));
                    *received.entry(m.data.n).or_default() += 1;
                }
            }
            conn.ack_all(&client::completed(&messages), None).await?;
        }
    }
    .await;
    if let Err(error) = result {
        seen.failed.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut first) = seen.first_error.lock() {
            first.get_or_insert_with(|| error.to_string());
        }
    }
}

/// Push [`RATE`] messages per second for `duration`, message `n` to queue
/// `n % 100`; returns how many were pushed (numbered `0..`) and the push
/// requests' latencies (microseconds).
async fn push(addr: std::net::SocketAddr, duration: Duration) -> Result<(u64, Vec<u32>)> {
    let deadline = Instant::now() + duration;
    let interval = Duration::from_secs_f64(PRODUCERS as f64 / RATE);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..PRODUCERS {
        let mut conn = Conn::connect(addr).await?;
        let next = Arc::clone(&next);
        tasks.push(tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut latencies = Vec::new();
            loop {
                ticker.tick().await;
                if Instant::now() >= deadline {
                    return Ok::<_, Error>(latencies);
                }
                let n = next.fetch_add(1, Ordering::Relaxed);
                let queue = queue_name(usize::try_from(n).unwrap_or(0) % QUEUES);
                let sent = Instant::now();
                scale::push(&mut conn, &[scale::item(&queue, None, n)]).await?;
                latencies.push(micros(sent.elapsed()));
            }
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.context("a producer panicked")??);
    }
    Ok((next.load(Ordering::Relaxed), latencies))
}
