//! The `million` case of the `scale` scenario: one queue with a
//! million partitions (`--million-partitions`), measured against the same
//! steps on a queue of `--hot-partitions` (10,000) partitions, each on a
//! fresh database and broker.
//!
//! 1. **Creation**: pushes of 1,000 items, one per distinct partition
//!    (`p000000`, `p000001`, ...), from 4 connections: seconds and
//!    partitions/s.
//! 2. **First contact**: a consumer group `g` pops once with
//!    `subscriptionMode=new`, so it starts caught up, and its time is
//!    reported; so are the first pops (autoAck, batch 10) of a group
//!    subscribed to everything and of one subscribed from 30 s before
//!    creation ended.
//! 3. **Cost per partition**: rows and `pg_total_relation_size` of
//!    `log_partitions`, `log_segments`, `log_txns` and `log_consumers`,
//!    divided by the partition count.
//! 4. **Traffic** on a moving hot set of 10,000 partitions (starting at a
//!    random offset, moving by 1,000 partitions every second) for
//!    `--duration` seconds: 16 producers push 10 items per request to one
//!    random partition of the hot set; 8 consumers pop for `g` (`batch=10`,
//!    long poll of 1 s) and ack every batch. Push and consume msg/s (acks
//!    done within the window), p50/p99 of pops that delivered; then the
//!    consumers drain the backlog (each stops at its first empty long poll).
//! 5. **Empty pops** on the caught-up group, once the admin views' fold
//!    has nothing dirty left (its catching up is no pop's cost; the seconds
//!    it took after the creation are a figure): after `SETTLE`, 200 sequential
//!    pops with `wait=false`, then (after `SETTLE` again, so every count is
//!    flushed) 20 with `wait=true&timeout=200`, then `SETTLE` once more to
//!    measure the idle background rate, which is subtracted: statements
//!    (`xact_commit`), rows read (`tup_returned + tup_fetched`) and buffer
//!    accesses per pop, and the tables that read the rows.
//! 6. **Views**: the seconds of `GET` `/metrics/prometheus`, the status
//!    page's `/api/v1/status` and the dashboard overview's
//!    `/api/v1/resources/overview`, `/api/v1/resources/queues` and
//!    `/api/v1/consumer-groups`, each once after the broker's cluster-series
//!    cache ran out (`cold`) and once right after (`warm`); one scrape
//!    before them all, as a Prometheus server's earlier ones would have.
//! 7. **Bounded pushes**: the queue gets a `maxSize` far above its depth,
//!    then `BOUNDED_PUSHES` sequential one-item pushes to random partitions:
//!    their latency (each counts the queue's depth under its row lock).
//! 8. **Broker state**: `queen_hotlist_rings`, `_entries`, `_bytes` from
//!    `/metrics/prometheus` (null when absent), bytes per entry, the dedup
//!    cache and ack registry bytes, and RSS.
//!
//! The broker runs with its retention, eviction and statistics loops off
//! (`RETENTION_INTERVAL`, `EVICTION_INTERVAL`, `QUEEN_STATS_INTERVAL_MS` =
//! 0): each pass reads every partition, and one falling into a window or
//! into the idle baseline would swamp the pops' own figures (the `queues`
//! case measures those passes). Ratios are million / small.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use super::common::{self as scale, Rng, ScaleOpts};
use crate::client::{self, Conn};
use crate::env::{self, CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::measure::cpu::{self, Usage};
use crate::measure::memory;
use crate::measure::memory::Metrics;
use crate::measure::stats::DbStat;
use crate::measure::stats::{self, SETTLE};
use crate::measure::{self, micros, to_f64, to_f64_i, Latency};
use crate::output::table;
use crate::output::table::compare;

const QUEUE: &str = "scale-million";
const GROUP: &str = "g";
/// Items (partitions) per creating request, and creating connections.
const CREATE_CHUNK: usize = 1000;
const CREATORS: usize = 4;
const PRODUCERS: usize = 16;
const CONSUMERS: usize = 8;
/// Items per traffic push.
const PUSH_BATCH: usize = 10;
/// Partitions the hot window moves by every second.
const HOT_STEP: usize = 1000;
const EMPTY_POPS: usize = 200;
/// Sequential pushes to the queue once bounded (step 7).
const BOUNDED_PUSHES: usize = 20;
const LONG_POPS: usize = 20;
/// Longest the consumers get to drain the backlog after the pushes.
const MAX_DRAIN: Duration = Duration::from_secs(180);
const TABLES: [&str; 4] = [
    "queen.log_partitions",
    "queen.log_segments",
    "queen.log_txns",
    "queen.log_consumers",
];
const GAUGES: [&str; 5] = [
    "queen_hotlist_rings",
    "queen_hotlist_entries",
    "queen_hotlist_bytes",
    "queen_dedup_cache_bytes",
    "queen_ack_registry_bytes",
];

/// One queue size's figures.
#[derive(Debug, Serialize)]
struct Size {
    partitions: usize,
    create_seconds: f64,
    partitions_per_second: f64,
    /// Seconds from the end of the creation until the admin views' fold
    /// had nothing dirty left (None: not within `FOLD_WAIT`).
    fold_caught_up_seconds: Option<f64>,
    /// The group's first pop (`subscriptionMode=new`).
    first_contact_seconds: f64,
    /// The first pop (autoAck, batch 10) of a group subscribed to everything.
    first_contact_all_seconds: f64,
    /// The first pop (autoAck, batch 10) of a group subscribed from 30 s
    /// before the queue's creation ended.
    first_contact_from_seconds: f64,
    /// Messages it delivered (0: the group started caught up).
    first_contact_messages: usize,
    tables: Vec<TableCost>,
    traffic: Traffic,
    /// None when the consumers could not drain the backlog.
    empty_pops: Option<EmptyPops>,
    /// Seconds of each view, cold and warm.
    views: Vec<View>,
    /// One-item pushes once the queue has a `maxSize`.
    bounded_push_ms: Latency,
    metrics: serde_json::Value,
    hotlist_bytes_per_entry: Option<f64>,
    broker_rss_bytes: u64,
}

/// The seconds of one view's `GET`.
#[derive(Debug, Serialize)]
struct View {
    path: &'static str,
    status: u16,
    cold_seconds: f64,
    warm_seconds: f64,
}

/// The views timed (step 6).
const VIEWS: [&str; 5] = [
    "/metrics/prometheus",
    "/api/v1/status",
    "/api/v1/resources/overview",
    "/api/v1/resources/queues",
    "/api/v1/consumer-groups",
];

/// Longer than the broker's cluster-series cache (5 s).
const VIEW_COLD: Duration = Duration::from_secs(6);

/// Time each of [`VIEWS`], cold and warm. One scrape first, as a
/// Prometheus server's earlier scrapes would have: a cold scrape then finds
/// its cached copy due, not missing.
async fn views(conn: &mut Conn) -> Result<Vec<View>> {
    conn.get(VIEWS[0]).await?;
    let mut views = Vec::new();
    for path in VIEWS {
        tokio::time::sleep(VIEW_COLD).await;
        let started = Instant::now();
        let reply = conn.get(path).await?;
        let cold_seconds = started.elapsed().as_secs_f64();
        let started = Instant::now();
        conn.get(path).await?;
        let warm_seconds = started.elapsed().as_secs_f64();
        eprintln!(
            "queen-load:   GET {path}: {} in {cold_seconds:.3} s cold, {warm_seconds:.3} s warm",
            reply.status.as_u16()
        );
        views.push(View {
            path,
            status: reply.status.as_u16(),
            cold_seconds,
            warm_seconds,
        });
    }
    Ok(views)
}

/// Bound the queue far above its depth, then time [`BOUNDED_PUSHES`]
/// sequential one-item pushes to random partitions (step 7).
async fn bounded_pushes(conn: &mut Conn, n: usize) -> Result<Latency> {
    conn.configure(QUEUE, json!({"maxSize": 1_000_000_000}))
        .await?;
    let mut rng = Rng::new();
    let mut took = Vec::with_capacity(BOUNDED_PUSHES);
    for i in 0..BOUNDED_PUSHES {
        let name = partition_name(rng.below(n));
        let items = [scale::item(QUEUE, Some(&name), i as u64)];
        let started = Instant::now();
        scale::push(conn, &items).await?;
        took.push(micros(started.elapsed()));
    }
    let latency = Latency::from_micros(took);
    eprintln!(
        "queen-load:   bounded pushes: p50 {:.1} ms, p99 {:.1} ms",
        latency.p50, latency.p99
    );
    Ok(latency)
}

#[derive(Debug, Serialize)]
struct TableCost {
    table: &'static str,
    rows: i64,
    bytes: i64,
    rows_per_partition: f64,
    bytes_per_partition: f64,
}

#[derive(Debug, Default, Serialize)]
struct Traffic {
    seconds: f64,
    pushed: u64,
    push_messages_per_second: f64,
    /// Messages acked within the window.
    consumed: u64,
    consume_messages_per_second: f64,
    pops_delivered: u64,
    pops_empty: u64,
    /// Pops (started in the window) that delivered.
    pop_latency_ms: Latency,
    /// From the end of the pushes to the last consumer's empty long poll.
    drain_seconds: f64,
    drained: bool,
    /// CPU cores during the window.
    cpu_cores: Usage,
}

#[derive(Debug, Serialize)]
struct EmptyPops {
    /// The tables that read the most rows over the whole measurement.
    top_tables_read: serde_json::Value,
    /// Idle background, subtracted from the figures below.
    idle_commits_per_second: f64,
    idle_rows_read_per_second: f64,
    no_wait: PopCost,
    long_poll_200ms: PopCost,
}

#[derive(Debug, Serialize)]
struct PopCost {
    pops: usize,
    /// Pops that delivered something after all (should be 0).
    delivered: usize,
    /// Each pop's latency (a pop that reseeds the hot-list waits for it).
    latency_ms: Latency,
    /// From before the pops to the read after them (the pops and `SETTLE`).
    seconds: f64,
    /// Net of the idle background, in all.
    commits: f64,
    rows_read: f64,
    commits_per_pop: f64,
    rows_read_per_pop: f64,
    tup_returned_per_pop: f64,
    tup_fetched_per_pop: f64,
    blocks_per_pop: f64,
}

pub(crate) async fn run(
    env: &Env,
    common: &CommonArgs,
    opts: &ScaleOpts,
) -> Result<serde_json::Value> {
    let duration = opts.duration(10.0);
    let hot = opts.hot_partitions;
    let mut common = common.clone();
    for key in [
        "RETENTION_INTERVAL",
        "EVICTION_INTERVAL",
        "QUEEN_STATS_INTERVAL_MS",
    ] {
        common.broker_env.push((key.to_owned(), "0".to_owned()));
    }
    let small = size(env, &common, hot, hot, duration).await?;
    let big = size(env, &common, opts.million_partitions, hot, duration).await?;

    let p99 = |s: &Size| s.traffic.pop_latency_ms.p99;
    let ratios = json!({
        "push_messages_per_second": measure::per(Some(big.traffic.push_messages_per_second),
                                               Some(small.traffic.push_messages_per_second)),
        "consume_messages_per_second": measure::per(Some(big.traffic.consume_messages_per_second),
                                                  Some(small.traffic.consume_messages_per_second)),
        "pop_p99": measure::per(Some(p99(&big)), Some(p99(&small))),
    });
    eprintln!("{}", table(&big, &small));
    for s in [&small, &big] {
        if let Some(e) = &s.empty_pops {
            eprintln!(
                "queen-load:   {} partitions, empty pops' rows read by table: {}",
                s.partitions, e.top_tables_read
            );
        }
    }
    Ok(json!({"case": "million", "million": big, "small": small, "ratios": ratios}))
}

/// Every step on a fresh database whose queue has `n` partitions.
async fn size(
    env: &Env,
    common: &CommonArgs,
    n: usize,
    hot: usize,
    duration: Duration,
) -> Result<Size> {
    eprintln!("queen-load:   {n} partitions");
    let dbname = env.create_database("scale").await?;
    let mut brokers = env.start_brokers(common, &dbname, 1).await?;
    let addr = brokers[0].addr();
    let pid = brokers[0].pid();
    let postmaster = env.postmaster_pid()?;

    let create_seconds = create(addr, n).await?;
    eprintln!("queen-load:   created {n} partitions in {create_seconds:.1} s");
    let fold_caught_up_seconds = fold_caught_up(env, &dbname).await?;
    match fold_caught_up_seconds {
        Some(seconds) => eprintln!("queen-load:   the figures' fold caught up in {seconds:.1} s"),
        None => eprintln!("queen-load:   the figures' fold did not catch up in {FOLD_WAIT:?}"),
    }
    let mut conn = Conn::connect(addr).await?;
    let started = Instant::now();
    let popped = conn
        .pop(&format!(
            "/api/v1/pop/queue/{QUEUE}?consumerGroup={GROUP}&subscriptionMode=new&batch=10&wait=false"
        ))
        .await?;
    let first_contact_seconds = started.elapsed().as_secs_f64();
    let first = popped.messages::<scale::Data>()?;
    conn.ack_all(&client::completed(&first), Some(GROUP))
        .await?;
    let first_contact_messages = first.len();
    let first_contact_all_seconds = first_pop(
        &mut conn,
        &format!(
            "/api/v1/pop/queue/{QUEUE}?consumerGroup={GROUP}-all&batch=10&wait=false&autoAck=true"
        ),
    )
    .await?;
    let from = db_time_ago(env, &dbname, 30).await?;
    let first_contact_from_seconds = first_pop(
        &mut conn,
        &format!(
            "/api/v1/pop/queue/{QUEUE}?consumerGroup={GROUP}-from&subscriptionFrom={from}&batch=10&wait=false&autoAck=true"
        ),
    )
    .await?;
    let tables = table_costs(env, &dbname, n).await?;
    brokers[0].check_alive()?;

    eprintln!("queen-load:   traffic for {duration:?}");
    let traffic = traffic(addr, n, hot, duration, &[pid], postmaster).await?;
    brokers[0].check_alive()?;
    // The fold's catching up with the traffic is not the pops' cost (nor a
    // steady idle rate to subtract).
    fold_caught_up(env, &dbname).await?;
    let empty_pops = if traffic.drained && caught_up(&mut conn).await? {
        Some(empty_pops(env, &dbname, &mut conn).await?)
    } else {
        eprintln!("queen-load:   the group did not catch up: no empty-pop figures");
        None
    };
    let views = views(&mut conn).await?;
    let bounded_push_ms = bounded_pushes(&mut conn, n).await?;
    let metrics = Metrics::scrape(addr).await?;
    let broker_rss_bytes = memory::rss_bytes(pid)?;
    brokers[0].check_alive()?;
    drop(conn);
    env::stop_all(brokers).await?;
    env.drop_database(&dbname, common.keep).await?;
    Ok(Size {
        partitions: n,
        create_seconds,
        partitions_per_second: n as f64 / create_seconds,
        fold_caught_up_seconds,
        first_contact_seconds,
        first_contact_messages,
        first_contact_all_seconds,
        first_contact_from_seconds,
        tables,
        traffic,
        empty_pops,
        views,
        bounded_push_ms,
        hotlist_bytes_per_entry: measure::per(
            metrics.get("queen_hotlist_bytes"),
            metrics.get("queen_hotlist_entries"),
        ),
        metrics: metrics.json(&GAUGES),
        broker_rss_bytes,
    })
}

fn partition_name(p: usize) -> String {
    format!("p{p:06}")
}

/// Create the queue's `n` partitions; returns the seconds it took.
async fn create(addr: std::net::SocketAddr, n: usize) -> Result<f64> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CREATORS {
        let mut conn = Conn::connect(addr).await?;
        let next = Arc::clone(&next);
        tasks.push(tokio::spawn(async move {
            loop {
                let chunk = next.fetch_add(1, Ordering::Relaxed);
                let first = chunk * CREATE_CHUNK;
                if first >= n {
                    return Ok::<(), Error>(());
                }
                let items: Vec<String> = (first..n.min(first + CREATE_CHUNK))
                    .map(|p| scale::item(QUEUE, Some(&partition_name(p)), p as u64))
                    .collect();
                scale::push(&mut conn, &items)
                    .await
                    .map_err(|error| error.wrap("create the partitions"))?;
                if (chunk + 1).is_multiple_of(100) {
                    eprintln!(
                        "queen-load:     {} partitions, {:.0} s",
                        first + items.len(),
                        started.elapsed().as_secs_f64()
                    );
                }
            }
        }));
    }
    for task in tasks {
        task.await.context("a creating task panicked")??;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Rows and bytes of each log table, in all and per partition.
/// Seconds one pop of `path` takes.
async fn first_pop(conn: &mut Conn, path: &str) -> Result<f64> {
    let started = Instant::now();
    conn.pop(path).await?;
    Ok(started.elapsed().as_secs_f64())
}

/// The database's clock `seconds` ago, as an ISO-8601 UTC timestamp.
/// How long [`fold_caught_up`] waits at most.
const FOLD_WAIT: Duration = Duration::from_secs(300);

/// Seconds until the admin views' fold has nothing dirty left: the first of
/// two reads of an empty `figures_dirty` a second apart (the broker's own
/// marks go in at its next fold, once a second). None after [`FOLD_WAIT`].
async fn fold_caught_up(env: &Env, dbname: &str) -> Result<Option<f64>> {
    let sql = queen_sql::connect::connect_one(&env.connect_config(dbname))
        .await
        .with_context(|| format!("connect to {dbname}"))?;
    let started = Instant::now();
    let mut clean_since: Option<f64> = None;
    while started.elapsed() < FOLD_WAIT {
        let dirty: i64 = sql
            .query_one("SELECT count(*) FROM queen.figures_dirty", &[])
            .await
            .context("count the figures' dirty rows")?
            .get(0);
        let now = started.elapsed().as_secs_f64();
        match (dirty, clean_since) {
            (0, Some(since)) => return Ok(Some(since)),
            (0, None) => clean_since = Some(now),
            _ => clean_since = None,
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(None)
}

async fn db_time_ago(env: &Env, dbname: &str, seconds: i32) -> Result<String> {
    let sql = queen_sql::connect::connect_one(&env.connect_config(dbname))
        .await
        .with_context(|| format!("connect to {dbname}"))?;
    let row = sql
        .query_one(
            "SELECT to_char((now() - make_interval(secs => $1)) AT TIME ZONE 'UTC', \
                    'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
            &[&f64::from(seconds)],
        )
        .await
        .context("read the database's clock")?;
    Ok(row.get(0))
}

async fn table_costs(env: &Env, dbname: &str, n: usize) -> Result<Vec<TableCost>> {
    let sql = queen_sql::connect::connect_one(&env.connect_config(dbname))
        .await
        .with_context(|| format!("connect to {dbname}"))?;
    let mut costs = Vec::new();
    for table in TABLES {
        let row = sql
            .query_one(
                &format!("SELECT count(*), pg_total_relation_size('{table}') FROM {table}"),
                &[],
            )
            .await
            .with_context(|| format!("size {table}"))?;
        let (rows, bytes): (i64, i64) = (row.get(0), row.get(1));
        costs.push(TableCost {
            table,
            rows,
            bytes,
            rows_per_partition: to_f64_i(rows) / n as f64,
            bytes_per_partition: to_f64_i(bytes) / n as f64,
        });
    }
    Ok(costs)
}

/// What one traffic task counted.
#[derive(Default)]
struct TaskStats {
    pushed: u64,
    consumed: u64,
    pops_delivered: u64,
    pops_empty: u64,
    pop_us: Vec<u32>,
    /// A consumer stopped at its first empty long poll after the window.
    drained: bool,
}

/// The traffic phase on the moving hot set, then the drain.
async fn traffic(
    addr: std::net::SocketAddr,
    n: usize,
    hot: usize,
    duration: Duration,
    pids: &[u32],
    postmaster: u32,
) -> Result<Traffic> {
    let offset = Rng::new().below(n);
    let hot = hot.min(n);
    let mut producers = Vec::new();
    for _ in 0..PRODUCERS {
        producers.push(Conn::connect(addr).await?);
    }
    let mut consumers = Vec::new();
    for _ in 0..CONSUMERS {
        consumers.push(Conn::connect(addr).await?);
    }
    let cpu_before = cpu::sample(pids, postmaster);
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for mut conn in producers {
        tasks.push(tokio::spawn(async move {
            let mut stats = TaskStats::default();
            let mut rng = Rng::new();
            while Instant::now() < deadline {
                let moved = usize::try_from(started.elapsed().as_secs()).unwrap_or(0) * HOT_STEP;
                let name = partition_name((offset + moved + rng.below(hot)) % n);
                let items: Vec<String> = (0..PUSH_BATCH)
                    .map(|i| scale::item(QUEUE, Some(&name), stats.pushed + i as u64))
                    .collect();
                scale::push(&mut conn, &items).await?;
                stats.pushed += PUSH_BATCH as u64;
            }
            Ok::<TaskStats, Error>(stats)
        }));
    }
    let path =
        format!("/api/v1/pop/queue/{QUEUE}?consumerGroup={GROUP}&batch=10&wait=true&timeout=1000");
    for mut conn in consumers {
        let path = path.clone();
        tasks.push(tokio::spawn(async move {
            let mut stats = TaskStats::default();
            loop {
                let sent = Instant::now();
                let popped = conn.pop(&path).await?;
                let took = micros(sent.elapsed());
                let messages = popped.messages::<scale::Data>()?;
                if messages.is_empty() {
                    stats.pops_empty += 1;
                    if sent >= deadline {
                        stats.drained = true;
                        break;
                    }
                    continue;
                }
                stats.pops_delivered += 1;
                if sent < deadline {
                    stats.pop_us.push(took);
                }
                conn.ack_all(&client::completed(&messages), Some(GROUP))
                    .await?;
                let done = Instant::now();
                if done <= deadline {
                    stats.consumed += messages.len() as u64;
                }
                if done > deadline + MAX_DRAIN {
                    break;
                }
            }
            Ok(stats)
        }));
    }
    let mut total = TaskStats {
        drained: true,
        ..TaskStats::default()
    };
    let mut push_seconds: f64 = 0.0;
    let mut cpu_cores = None;
    for (k, task) in tasks.into_iter().enumerate() {
        let stats = task.await.context("a traffic task panicked")??;
        if k < PRODUCERS {
            push_seconds = push_seconds.max(started.elapsed().as_secs_f64());
        } else {
            total.drained &= stats.drained;
        }
        if k == PRODUCERS - 1 {
            cpu_cores = Some(cpu::usage(&cpu_before, &cpu::sample(pids, postmaster)));
        }
        total.pushed += stats.pushed;
        total.consumed += stats.consumed;
        total.pops_delivered += stats.pops_delivered;
        total.pops_empty += stats.pops_empty;
        total.pop_us.extend(stats.pop_us);
    }
    let window = duration.as_secs_f64();
    let result = Traffic {
        seconds: push_seconds,
        pushed: total.pushed,
        push_messages_per_second: to_f64(total.pushed) / push_seconds,
        consumed: total.consumed,
        consume_messages_per_second: to_f64(total.consumed) / window,
        pops_delivered: total.pops_delivered,
        pops_empty: total.pops_empty,
        pop_latency_ms: Latency::from_micros(total.pop_us),
        drain_seconds: started.elapsed().as_secs_f64() - window,
        drained: total.drained,
        cpu_cores: cpu_cores.unwrap_or_default(),
    };
    eprintln!(
        "queen-load:   pushed {:.0} msg/s, consumed {:.0} msg/s, pop p99 {:.1} ms, drained in {:.1} s",
        result.push_messages_per_second,
        result.consume_messages_per_second,
        result.pop_latency_ms.p99,
        result.drain_seconds
    );
    Ok(result)
}

/// A `wait=false` pop for the group answers 204 (anything it delivers is
/// acked; false if it still delivers after 100 tries).
async fn caught_up(conn: &mut Conn) -> Result<bool> {
    let path = format!("/api/v1/pop/queue/{QUEUE}?consumerGroup={GROUP}&batch=100&wait=false");
    for _ in 0..100 {
        let popped = conn.pop(&path).await?;
        let messages = popped.messages::<scale::Data>()?;
        if messages.is_empty() {
            return Ok(true);
        }
        conn.ack_all(&client::completed(&messages), Some(GROUP))
            .await?;
    }
    Ok(false)
}

/// Statements and rows read per empty pop, the idle background subtracted.
async fn empty_pops(env: &Env, dbname: &str, conn: &mut Conn) -> Result<EmptyPops> {
    let read = || DbStat::read(&env.admin, dbname);
    let reads_before = stats::table_reads(&env.connect_config(dbname)).await?;
    tokio::time::sleep(SETTLE).await;
    let (r0, t0) = (read().await?, Instant::now());
    let no_wait = pops(conn, "wait=false", EMPTY_POPS).await?;
    tokio::time::sleep(SETTLE).await;
    let (r1, t1) = (read().await?, Instant::now());
    let long_poll = pops(conn, "wait=true&timeout=200", LONG_POPS).await?;
    tokio::time::sleep(SETTLE).await;
    let (r2, t2) = (read().await?, Instant::now());
    tokio::time::sleep(SETTLE).await;
    let (r3, t3) = (read().await?, Instant::now());
    let top_tables_read = stats::top_reads(
        &reads_before,
        &stats::table_reads(&env.connect_config(dbname)).await?,
    );
    let idle = r3.since(r2);
    let idle_seconds = t3.duration_since(t2).as_secs_f64();
    let commits_rate = to_f64_i(idle.commits) / idle_seconds;
    let rows_rate = to_f64_i(idle.rows_read()) / idle_seconds;
    let blocks_rate = to_f64_i(idle.blocks) / idle_seconds;
    let cost = |(delivered, latencies): (usize, Vec<u32>), delta: DbStat, seconds: f64| {
        let pops = latencies.len();
        let net = |rate: f64, value: i64| to_f64_i(value) - rate * seconds;
        let share = |rate: f64, value: i64| net(rate, value) / pops as f64;
        let (returned, fetched) = (to_f64_i(idle.tup_returned), to_f64_i(idle.tup_fetched));
        PopCost {
            pops,
            delivered,
            latency_ms: Latency::from_micros(latencies),
            seconds,
            commits: net(commits_rate, delta.commits),
            rows_read: net(rows_rate, delta.rows_read()),
            commits_per_pop: share(commits_rate, delta.commits),
            rows_read_per_pop: share(rows_rate, delta.rows_read()),
            tup_returned_per_pop: share(returned / idle_seconds, delta.tup_returned),
            tup_fetched_per_pop: share(fetched / idle_seconds, delta.tup_fetched),
            blocks_per_pop: share(blocks_rate, delta.blocks),
        }
    };
    Ok(EmptyPops {
        top_tables_read,
        idle_commits_per_second: commits_rate,
        idle_rows_read_per_second: rows_rate,
        no_wait: cost(no_wait, r1.since(r0), t1.duration_since(t0).as_secs_f64()),
        long_poll_200ms: cost(long_poll, r2.since(r1), t2.duration_since(t1).as_secs_f64()),
    })
}

/// `count` sequential pops for the group with `wait`; returns how many
/// delivered (and acks what they did) and each one's latency.
async fn pops(conn: &mut Conn, wait: &str, count: usize) -> Result<(usize, Vec<u32>)> {
    let path = format!("/api/v1/pop/queue/{QUEUE}?consumerGroup={GROUP}&batch=10&{wait}");
    let mut delivered = 0;
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let sent = Instant::now();
        let popped = conn.pop(&path).await?;
        latencies.push(micros(sent.elapsed()));
        let messages = popped.messages::<scale::Data>()?;
        if !messages.is_empty() {
            delivered += 1;
            conn.ack_all(&client::completed(&messages), Some(GROUP))
                .await?;
        }
    }
    Ok((delivered, latencies))
}

/// A figure of the table: its name, how to get it, its decimals.
type Figure = (&'static str, fn(&Size) -> Option<f64>, usize);

/// The million-vs-small table.
fn table(big: &Size, small: &Size) -> String {
    fn pop(s: &Size, f: fn(&EmptyPops) -> f64) -> Option<f64> {
        s.empty_pops.as_ref().map(f)
    }
    let figures: [Figure; 34] = [
        ("partitions", |s| Some(s.partitions as f64), 0),
        ("create seconds", |s| Some(s.create_seconds), 1),
        ("partitions/s", |s| Some(s.partitions_per_second), 0),
        ("fold caught up seconds", |s| s.fold_caught_up_seconds, 1),
        (
            "first contact seconds",
            |s| Some(s.first_contact_seconds),
            3,
        ),
        (
            "first contact seconds ('all')",
            |s| Some(s.first_contact_all_seconds),
            3,
        ),
        (
            "first contact seconds (from 30 s ago)",
            |s| Some(s.first_contact_from_seconds),
            3,
        ),
        (
            "push msg/s",
            |s| Some(s.traffic.push_messages_per_second),
            0,
        ),
        (
            "consume msg/s",
            |s| Some(s.traffic.consume_messages_per_second),
            0,
        ),
        ("pop p50 ms", |s| Some(s.traffic.pop_latency_ms.p50), 2),
        ("pop p99 ms", |s| Some(s.traffic.pop_latency_ms.p99), 2),
        ("drain seconds", |s| Some(s.traffic.drain_seconds), 1),
        ("bounded push p50 ms", |s| Some(s.bounded_push_ms.p50), 2),
        ("bounded push p99 ms", |s| Some(s.bounded_push_ms.p99), 2),
        (
            "traffic broker cores",
            |s| Some(s.traffic.cpu_cores.broker),
            2,
        ),
        (
            "traffic PostgreSQL cores",
            |s| Some(s.traffic.cpu_cores.postgres),
            2,
        ),
        (
            "traffic other cores (disturbance)",
            |s| Some(s.traffic.cpu_cores.other),
            2,
        ),
        (
            "empty pop commits (wait=false)",
            |s| pop(s, |e| e.no_wait.commits_per_pop),
            3,
        ),
        (
            "empty pop rows read (wait=false)",
            |s| pop(s, |e| e.no_wait.rows_read_per_pop),
            1,
        ),
        (
            "empty pop blocks (wait=false)",
            |s| pop(s, |e| e.no_wait.blocks_per_pop),
            1,
        ),
        (
            "empty pop commits (wait 200 ms)",
            |s| pop(s, |e| e.long_poll_200ms.commits_per_pop),
            3,
        ),
        (
            "empty pop rows read (wait 200 ms)",
            |s| pop(s, |e| e.long_poll_200ms.rows_read_per_pop),
            1,
        ),
        (
            "empty pop blocks (wait 200 ms)",
            |s| pop(s, |e| e.long_poll_200ms.blocks_per_pop),
            1,
        ),
        (
            "idle commits/s",
            |s| pop(s, |e| e.idle_commits_per_second),
            2,
        ),
        (
            "empty pop max ms (wait=false)",
            |s| pop(s, |e| e.no_wait.latency_ms.max),
            1,
        ),
        (
            "queen_hotlist_rings",
            |s| s.metrics["queen_hotlist_rings"].as_f64(),
            0,
        ),
        (
            "queen_hotlist_entries",
            |s| s.metrics["queen_hotlist_entries"].as_f64(),
            0,
        ),
        (
            "queen_hotlist_bytes",
            |s| s.metrics["queen_hotlist_bytes"].as_f64(),
            0,
        ),
        ("hotlist bytes/entry", |s| s.hotlist_bytes_per_entry, 1),
        (
            "queen_dedup_cache_bytes",
            |s| s.metrics["queen_dedup_cache_bytes"].as_f64(),
            0,
        ),
        (
            "broker RSS MiB",
            |s| Some(to_f64(s.broker_rss_bytes) / 1_048_576.0),
            1,
        ),
        (
            "log_partitions+segments+txns+consumers rows/partition",
            |s| Some(s.tables.iter().map(|t| t.rows_per_partition).sum()),
            2,
        ),
        (
            "  bytes/partition",
            |s| Some(s.tables.iter().map(|t| t.bytes_per_partition).sum()),
            0,
        ),
        (
            "  of which log_consumers",
            |s| s.tables.last().map(|t| t.bytes_per_partition),
            0,
        ),
    ];
    let mut t = table::figures(&["million", "small", "ratio"]);
    for (name, figure, decimals) in figures {
        compare(&mut t, name, figure(big), figure(small), decimals);
    }
    for (i, table) in TABLES.iter().enumerate() {
        let cost = |s: &Size| {
            s.tables
                .get(i)
                .map(|c| (c.rows_per_partition, c.bytes_per_partition))
        };
        let (b, s) = (cost(big), cost(small));
        let short = table.trim_start_matches("queen.");
        compare(
            &mut t,
            &format!("{short} rows/partition"),
            b.map(|c| c.0),
            s.map(|c| c.0),
            2,
        );
        compare(
            &mut t,
            &format!("{short} bytes/partition"),
            b.map(|c| c.1),
            s.map(|c| c.1),
            0,
        );
    }
    t.finish()
}
