//! The `spread` case of the `scale` scenario: single-message
//! pushes from 50 keep-alive connections, closed loop (send, await the
//! reply, send), to 1 partition and to 100 partitions (each request to a
//! uniformly random one), each on a fresh database and broker.
//!
//! As in `push.rs`: the payloads are `payload.rs`'s ~1 KiB bodies with a
//! fresh UUIDv7 transaction id each; 2 s of warm-up (which creates the
//! partitions), `SETTLE` so its commits are counted, then `--duration`
//! (10) seconds measured with [`crate::measure::measure`] (WAL position, xids and
//! CPU clocks around the window); the broker is stopped before the final
//! `pg_stat_database` read, so its sessions have flushed their counts. The
//! window's segments (created after its start) must hold exactly the
//! messages acknowledged.
//!
//! Reported for each: msg/s, request latency p50/p99, and per message:
//! commits, rows inserted and updated, write transactions, WAL bytes,
//! PostgreSQL and broker CPU microseconds, and messages per segment; then
//! the ratio 100-partition / 1-partition of msg/s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use serde_json::json;

use super::common::{Rng, ScaleOpts};
use crate::client::payload::{self, Bodies, TxnIds};
use crate::client::Conn;
use crate::env::{self, CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::measure::cpu::Usage;
use crate::measure::stats::DbStat;
use crate::measure::stats::{self, SETTLE};
use crate::measure::{self, micros, ratio, to_f64, to_f64_i, Latency};
use crate::output::table;
use crate::output::table::compare;

const QUEUE: &str = "scale-spread";
const CONNECTIONS: usize = 50;
const WARMUP: Duration = Duration::from_secs(2);

#[derive(Debug, Serialize)]
struct Spread {
    partitions: usize,
    seconds: f64,
    messages: u64,
    messages_per_second: f64,
    latency_ms: Latency,
    counters: DbStat,
    commits_per_message: f64,
    rows_inserted_per_message: f64,
    rows_updated_per_message: f64,
    write_xids_per_message: f64,
    wal_bytes_per_message: f64,
    postgres_cpu_us_per_message: f64,
    broker_cpu_us_per_message: f64,
    segments: i64,
    messages_per_segment: f64,
    checkpoints: i64,
    cpu_cores: Usage,
}

pub(crate) async fn run(
    env: &Env,
    common: &CommonArgs,
    opts: &ScaleOpts,
) -> Result<serde_json::Value> {
    let bodies = Arc::new(Bodies::generate());
    let duration = opts.duration(10.0);
    let one = case(env, common, &bodies, 1, duration).await?;
    let hundred = case(env, common, &bodies, 100, duration).await?;
    let speedup = ratio(hundred.messages_per_second, one.messages_per_second);
    let mut t = table::figures(&["p100", "p1", "ratio"]);
    let mut row = |name: &str, f: fn(&Spread) -> f64, decimals| {
        compare(&mut t, name, Some(f(&hundred)), Some(f(&one)), decimals);
    };
    row("msg/s", |s| s.messages_per_second, 0);
    row("p50 ms", |s| s.latency_ms.p50, 2);
    row("p99 ms", |s| s.latency_ms.p99, 2);
    row("commits/msg", |s| s.commits_per_message, 3);
    row("rows inserted/msg", |s| s.rows_inserted_per_message, 3);
    row("rows updated/msg", |s| s.rows_updated_per_message, 3);
    row("write xids/msg", |s| s.write_xids_per_message, 3);
    row("WAL bytes/msg", |s| s.wal_bytes_per_message, 0);
    row(
        "PostgreSQL CPU us/msg",
        |s| s.postgres_cpu_us_per_message,
        1,
    );
    row("broker CPU us/msg", |s| s.broker_cpu_us_per_message, 1);
    row("msg/segment", |s| s.messages_per_segment, 2);
    row("other cores (disturbance)", |s| s.cpu_cores.other, 2);
    eprintln!("{}", t.finish());
    Ok(json!({
        "case": "spread",
        "connections": CONNECTIONS,
        "p1": one,
        "p100": hundred,
        "ratio_messages_per_second_p100_p1": speedup,
    }))
}

/// What the producers did in one phase.
#[derive(Default)]
struct Pushed {
    messages: u64,
    latencies_us: Vec<u32>,
}

async fn case(
    env: &Env,
    common: &CommonArgs,
    bodies: &Arc<Bodies>,
    partitions: usize,
    duration: Duration,
) -> Result<Spread> {
    eprintln!("queen-load:   {partitions} partitions");
    let dbname = env.create_database("scale").await?;
    let mut brokers = env.start_brokers(common, &dbname, 1).await?;
    let addr = brokers[0].addr();
    let pids = env::pids(&brokers);
    let postmaster = env.postmaster_pid()?;
    let conns = Conn::connect_many(addr, CONNECTIONS).await?;
    let next_id = Arc::new(AtomicU64::new(0));

    let (conns, warm) =
        produce(conns, bodies, &next_id, partitions, Instant::now() + WARMUP).await?;
    env::check_alive(&mut brokers)?;
    tokio::time::sleep(SETTLE).await;
    let before = DbStat::read(&env.admin, &dbname).await?;
    let ((conns, window), measured) = measure::measure(
        &env.admin,
        &pids,
        postmaster,
        duration.as_secs_f64(),
        |deadline| produce(conns, bodies, &next_id, partitions, deadline),
    )
    .await?;
    env::check_alive(&mut brokers)?;
    drop(conns);
    env::stop_all(brokers).await?;
    stats::wait_sessions_gone(&env.admin, &dbname, Duration::from_secs(30)).await?;
    let counters = DbStat::read(&env.admin, &dbname).await?.since(before);
    let (segments, all, created) =
        stats::segments(&env.connect_config(&dbname), measured.before.now).await?;
    env.drop_database(&dbname, common.keep).await?;
    let total = warm.messages + window.messages;
    if segments.messages != i64::try_from(window.messages).context("message count")?
        || all.messages != i64::try_from(total).context("message count")?
        || created != i64::try_from(partitions).context("partition count")?
    {
        return Err(Error::msg(format!(
            "the database holds {} messages from the window ({} in all, {created} partitions), \
             but {} were acknowledged ({total} with the warm-up, {partitions} partitions)",
            segments.messages, all.messages, window.messages
        )));
    }

    let messages = to_f64(window.messages);
    let per = |value: i64| ratio(to_f64_i(value), messages);
    let cpu_us = |cores: f64| ratio(cores * measured.seconds * 1e6, messages);
    let result = Spread {
        partitions,
        seconds: measured.seconds,
        messages: window.messages,
        messages_per_second: messages / measured.seconds,
        latency_ms: Latency::from_micros(window.latencies_us),
        counters,
        commits_per_message: per(counters.commits),
        rows_inserted_per_message: per(counters.tup_inserted),
        rows_updated_per_message: per(counters.tup_updated),
        write_xids_per_message: per(measured.write_xids()),
        wal_bytes_per_message: per(measured.wal_bytes()),
        postgres_cpu_us_per_message: cpu_us(measured.cpu_cores.postgres),
        broker_cpu_us_per_message: cpu_us(measured.cpu_cores.broker),
        segments: segments.rows,
        messages_per_segment: ratio(to_f64_i(segments.messages), to_f64_i(segments.rows)),
        checkpoints: measured.checkpoints(),
        cpu_cores: measured.cpu_cores,
    };
    eprintln!(
        "queen-load:   {:.0} msg/s, p99 {:.2} ms, {:.2} msg/segment",
        result.messages_per_second, result.latency_ms.p99, result.messages_per_segment
    );
    Ok(result)
}

/// Every connection pushes single messages, closed loop, each to a random
/// one of `partitions`, until `deadline`; the connections come back for the
/// next phase.
async fn produce(
    conns: Vec<Conn>,
    bodies: &Arc<Bodies>,
    next_id: &Arc<AtomicU64>,
    partitions: usize,
    deadline: Instant,
) -> Result<(Vec<Conn>, Pushed)> {
    let names = Arc::new(payload::partition_names(partitions));
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|mut conn| {
            let (bodies, next_id, names) =
                (Arc::clone(bodies), Arc::clone(next_id), Arc::clone(&names));
            tokio::spawn(async move {
                let mut pushed = Pushed::default();
                let mut rng = Rng::new();
                while Instant::now() < deadline {
                    let id = next_id.fetch_add(1, Ordering::Relaxed);
                    let mut body = Vec::with_capacity(1300);
                    let partition = &names[rng.below(partitions)];
                    payload::push_request(
                        &mut body,
                        &bodies,
                        QUEUE,
                        partition,
                        id,
                        1,
                        TxnIds::Fresh,
                    );
                    let sent = Instant::now();
                    conn.push(Bytes::from(body), 1).await?;
                    pushed.latencies_us.push(micros(sent.elapsed()));
                    pushed.messages += 1;
                }
                Ok::<_, Error>((conn, pushed))
            })
        })
        .collect();
    let mut conns = Vec::with_capacity(tasks.len());
    let mut total = Pushed::default();
    for task in tasks {
        let (conn, pushed) = task.await.context("a producer panicked")??;
        conns.push(conn);
        total.messages += pushed.messages;
        total.latencies_us.extend(pushed.latencies_us);
    }
    Ok((conns, total))
}
