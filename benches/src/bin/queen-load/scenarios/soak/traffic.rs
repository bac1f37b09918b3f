//! The soak's workload, one for both entries (`soak`, and the `soak` case
//! of `scale`): a broker with retention sweeping every few seconds, one
//! queue, paced (or, for a calibration, unpaced) producers and long-polling
//! consumers that ack every batch, each message's fate chosen at push time
//! and carried in its transaction id (`c` completed, `f` failed at every
//! delivery, `d` dead-lettered at once: [`Plan`] says how many of each);
//! and the sample of a moment: the storage of every log table, the live
//! segment and dead-letter counts, the lag, the broker's RSS and its own
//! account of its memory, the CPU and the request latencies since the last
//! sample.
//!
//! A producer or consumer that fails a request records the error and goes
//! on (on a fresh connection when the request did not get through); an
//! acknowledgement stopped by a `failed` item with retries left comes back
//! with everything after it, as ordered partitions require (`forced`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use serde_json::json;

use crate::client::{self, Ack, Conn, Popped};
use crate::env::{self, Broker, CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::measure::cpu::{self, Usage};
use crate::measure::latency::p99;
use crate::measure::memory::{broker_memory, rss, BrokerMemory};
use crate::measure::micros;

/// Error messages kept for the report (all are counted).
const KEPT_ERRORS: usize = 20;

/// What a soak runs: the queue and its options, the traffic's shape and
/// the mix of fates.
pub(crate) struct Plan {
    /// Prefix of the database's name.
    pub(crate) database: &'static str,
    pub(crate) queue: &'static str,
    /// The consumers' group; `None`: queue mode.
    pub(crate) group: Option<&'static str>,
    /// The queue's options, as `POST /api/v1/configure` takes them.
    pub(crate) options: serde_json::Value,
    /// The broker's `RETENTION_INTERVAL`, milliseconds.
    pub(crate) retention_interval_ms: u64,
    pub(crate) producers: usize,
    pub(crate) consumers: usize,
    /// Messages per push request.
    pub(crate) batch: usize,
    /// `batch=` of each pop.
    pub(crate) pop_batch: usize,
    /// Hex digits of each payload's `data`.
    pub(crate) payload_bytes: usize,
    pub(crate) partitions: usize,
    /// The items of a request go to consecutive partitions (else a request
    /// goes to one partition, round-robin).
    pub(crate) spread: bool,
    /// Percent of the messages acked `failed` at every delivery, and `dlq`;
    /// with both 0 no transaction id is sent (the broker makes them).
    pub(crate) failed_percent: u16,
    pub(crate) dlq_percent: u16,
}

impl Plan {
    /// The group whose cursors the lag is read for.
    fn lag_group(&self) -> &'static str {
        self.group.unwrap_or("__QUEUE_MODE__")
    }
}

#[derive(Default)]
pub(crate) struct Shared {
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
    pub(crate) error_texts: Mutex<Vec<String>>,
}

/// Request latencies in microseconds since the sampler last took them.
#[derive(Default)]
pub(crate) struct Latencies {
    pub(crate) push: Vec<u32>,
    pub(crate) pop: Vec<u32>,
    pub(crate) ack: Vec<u32>,
}

#[derive(Clone, Copy)]
enum Kind {
    Push,
    Pop,
    Ack,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
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

    pub(crate) fn take_latencies(&self) -> Latencies {
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

    pub(crate) fn counts(&self) -> Counts {
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
pub(crate) struct Counts {
    pub(crate) pushed: u64,
    pub(crate) push_requests: u64,
    pub(crate) pop_requests: u64,
    pub(crate) popped: u64,
    pub(crate) ack_requests: u64,
    pub(crate) completed: u64,
    pub(crate) failed: u64,
    pub(crate) dead_lettered: u64,
    pub(crate) dlq_direct: u64,
    pub(crate) refused: u64,
    pub(crate) forced: u64,
    pub(crate) errors: u64,
}

impl Counts {
    /// Messages whose processing ended: completed or dead-lettered.
    pub(crate) fn consumed(&self) -> u64 {
        self.completed + self.dead_lettered
    }

    /// Deliveries per consumed message.
    pub(crate) fn deliveries_per_message(&self) -> f64 {
        self.popped as f64 / self.consumed().max(1) as f64
    }

    /// The floor ordering imposes on it: each message once, plus what a
    /// `failed` item with retries left sends back.
    pub(crate) fn ordering_floor(&self) -> f64 {
        (self.consumed() + self.forced) as f64 / self.consumed().max(1) as f64
    }
}

/// Sets the flag when dropped: the tasks stop whichever way a run ends.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One sample of the soak.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Sample {
    /// Seconds since the soak (after any calibration) started.
    pub(crate) seconds: f64,
    pub(crate) rss_kib: u64,
    pub(crate) rss_anon_kib: u64,
    pub(crate) segments_bytes: i64,
    /// `log_segments`' heap and TOAST (`segments_bytes` adds its indexes).
    #[serde(skip)]
    pub(crate) segments_heap_bytes: i64,
    #[serde(skip)]
    pub(crate) segments_toast_bytes: i64,
    pub(crate) txns_bytes: i64,
    pub(crate) consumers_bytes: i64,
    pub(crate) dlq_bytes: i64,
    pub(crate) partitions_bytes: i64,
    pub(crate) live_segments: i64,
    pub(crate) dlq_rows: i64,
    /// Messages behind the group's cursors.
    pub(crate) lag: i64,
    /// p99 over the interval, milliseconds.
    pub(crate) push_p99_ms: f64,
    pub(crate) pop_p99_ms: f64,
    pub(crate) ack_p99_ms: f64,
    /// Messages per second over the interval.
    pub(crate) push_per_second: f64,
    pub(crate) consumed_per_second: f64,
    /// Cumulative over the soak (any calibration left out).
    pub(crate) counts: Counts,
    pub(crate) cpu_cores: Usage,
    /// What the broker's `GET /metrics` says of its memory.
    pub(crate) broker: BrokerMemory,
}

/// The table sizes of a sample, by table name, for the trends.
pub(crate) const TABLES: [&str; 5] = [
    "log_segments",
    "log_txns",
    "log_consumers",
    "log_dlq",
    "log_partitions",
];

impl Sample {
    pub(crate) fn table_bytes(&self) -> [i64; 5] {
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
       (SELECT count(*) FROM queen.log_dlq), \
       pg_relation_size('queen.log_segments'), \
       coalesce(pg_relation_size((SELECT reltoastrelid FROM pg_class \
                                   WHERE oid = 'queen.log_segments'::regclass)), 0)";

const LAG: &str = "SELECT coalesce(sum(p.last_offset - coalesce(c.committed, -1)), 0)::bigint \
       FROM queen.log_partitions p \
       LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = $1";

/// Column `index` of `row`, a `bigint`.
fn column(row: &tokio_postgres::Row, index: usize) -> Result<i64> {
    row.try_get(index)
        .with_context(|| format!("column {index} of a sample query"))
}

/// A soak under way: its broker, its database session, the counters its
/// tasks share, and its consumers (running from the start).
pub(crate) struct Soak<'a> {
    env: &'a Env,
    keep: bool,
    plan: Arc<Plan>,
    dbname: String,
    brokers: Vec<Broker>,
    addr: SocketAddr,
    broker_pid: u32,
    postmaster_pid: u32,
    sql: tokio_postgres::Client,
    pub(crate) shared: Arc<Shared>,
    consumers_stop: StopOnDrop,
    consumers: Vec<tokio::task::JoinHandle<Result<()>>>,
    metrics_conn: Conn,
}

/// Paced or unpaced producers, stopped by [`Producers::stop`] (or when
/// dropped).
pub(crate) struct Producers {
    stop: StopOnDrop,
    tasks: Vec<tokio::task::JoinHandle<Result<()>>>,
}

impl Producers {
    /// Stop the producers and wait for them.
    pub(crate) async fn stop(self) -> Result<()> {
        self.stop.0.store(true, Ordering::Relaxed);
        join(self.tasks).await
    }
}

/// Where the previous sample was taken: when, the counters, the CPU clocks.
pub(crate) type Mark = (Instant, Counts, cpu::Sample);

impl Soak<'_> {
    /// A fresh database and a broker sweeping every
    /// `plan.retention_interval_ms`, the queue configured, the consumers
    /// started.
    pub(crate) async fn start<'a>(
        env: &'a Env,
        common: &CommonArgs,
        plan: Plan,
    ) -> Result<Soak<'a>> {
        let dbname = env.create_database(plan.database).await?;
        let mut broker_common = common.clone();
        broker_common.broker_env.push((
            "RETENTION_INTERVAL".to_owned(),
            plan.retention_interval_ms.to_string(),
        ));
        let brokers = env.start_brokers(&broker_common, &dbname, 1).await?;
        let broker = brokers
            .first()
            .ok_or_else(|| Error::msg("soak: no broker started"))?;
        let (addr, broker_pid) = (broker.addr(), broker.pid());
        let sql = queen_sql::connect::connect_one(&env.connect_config(&dbname))
            .await
            .context("connect to the soak database")?;
        Conn::connect(addr)
            .await?
            .configure(plan.queue, plan.options.clone())
            .await?;
        let plan = Arc::new(plan);
        let shared = Arc::new(Shared::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut consumers = Vec::new();
        for _ in 0..plan.consumers {
            let conn = Conn::connect(addr).await?;
            consumers.push(tokio::spawn(consumer(
                Arc::clone(&plan),
                addr,
                conn,
                Arc::clone(&shared),
                Arc::clone(&stop),
            )));
        }
        Ok(Soak {
            env,
            keep: common.keep,
            postmaster_pid: env.postmaster_pid()?,
            metrics_conn: Conn::connect(addr).await?,
            plan,
            dbname,
            brokers,
            addr,
            broker_pid,
            sql,
            shared,
            consumers_stop: StopOnDrop(stop),
            consumers,
        })
    }

    /// Start the producers: unpaced with no `interval`, else each pushing
    /// once per `interval`, their starts spread over one interval.
    pub(crate) async fn producers(&self, interval: Option<Duration>) -> Result<Producers> {
        let stop = Arc::new(AtomicBool::new(false));
        let producers = self.plan.producers;
        let mut tasks = Vec::with_capacity(producers);
        let start = tokio::time::Instant::now();
        for index in 0..producers {
            let conn = Conn::connect(self.addr).await?;
            let ticker = interval.map(|interval| {
                let offset = interval.mul_f64(index as f64 / producers as f64);
                let mut ticker = tokio::time::interval_at(start + offset, interval);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                ticker
            });
            tasks.push(tokio::spawn(producer(
                Arc::clone(&self.plan),
                self.addr,
                conn,
                Arc::clone(&self.shared),
                Arc::clone(&stop),
                index,
                ticker,
            )));
        }
        Ok(Producers {
            stop: StopOnDrop(stop),
            tasks,
        })
    }

    /// Fail if the broker has exited.
    pub(crate) fn check_alive(&mut self) -> Result<()> {
        env::check_alive(&mut self.brokers)
    }

    /// Messages behind the group's cursors.
    pub(crate) async fn lag(&self) -> Result<i64> {
        let row = self
            .sql
            .query_one(LAG, &[&self.plan.lag_group()])
            .await
            .context("read the lag")?;
        column(&row, 0)
    }

    /// The counters and CPU clocks now, for the first sample's interval.
    pub(crate) fn mark(&self) -> Mark {
        (
            Instant::now(),
            self.shared.counts(),
            cpu::sample(&[self.broker_pid], self.postmaster_pid),
        )
    }

    /// A sample now, `seconds` since `started`: counts since `base`, rates
    /// and latencies since `previous`, which becomes now.
    pub(crate) async fn sample(
        &mut self,
        started: Instant,
        base: &Counts,
        previous: &mut Mark,
    ) -> Result<(Sample, Latencies)> {
        let now = Instant::now();
        let counts = self.shared.counts();
        let cpu = cpu::sample(&[self.broker_pid], self.postmaster_pid);
        let latencies = self.shared.take_latencies();
        let row = self
            .sql
            .query_one(SIZES, &[])
            .await
            .context("sample sizes")?;
        let lag = self.lag().await?;
        let (rss_kib, rss_anon_kib) = rss(self.broker_pid)?;
        let broker = broker_memory(self.addr, &mut self.metrics_conn).await;
        let seconds = now.duration_since(previous.0).as_secs_f64();
        let rate = |a: u64, b: u64| b.saturating_sub(a) as f64 / seconds.max(1e-9);
        let sample = Sample {
            seconds: now.duration_since(started).as_secs_f64(),
            rss_kib,
            rss_anon_kib,
            segments_bytes: column(&row, 0)?,
            segments_heap_bytes: column(&row, 7)?,
            segments_toast_bytes: column(&row, 8)?,
            txns_bytes: column(&row, 1)?,
            consumers_bytes: column(&row, 2)?,
            dlq_bytes: column(&row, 3)?,
            partitions_bytes: column(&row, 4)?,
            live_segments: column(&row, 5)?,
            dlq_rows: column(&row, 6)?,
            lag,
            push_p99_ms: p99(&latencies.push),
            pop_p99_ms: p99(&latencies.pop),
            ack_p99_ms: p99(&latencies.ack),
            push_per_second: rate(previous.1.pushed, counts.pushed),
            consumed_per_second: rate(previous.1.consumed(), counts.consumed()),
            counts: since(base, &counts),
            cpu_cores: cpu::usage(&previous.2, &cpu),
            broker,
        };
        *previous = (now, counts, cpu);
        Ok((sample, latencies))
    }

    /// Stop the consumers and the broker, drop the database: the counters
    /// at the end.
    pub(crate) async fn finish(self) -> Result<Counts> {
        self.consumers_stop.0.store(true, Ordering::Relaxed);
        join(self.consumers).await?;
        let end = self.shared.counts();
        env::stop_all(self.brokers).await?;
        self.env.drop_database(&self.dbname, self.keep).await?;
        Ok(end)
    }
}

async fn join(tasks: Vec<tokio::task::JoinHandle<Result<()>>>) -> Result<()> {
    for task in tasks {
        task.await.context("a soak task panicked")??;
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
fn fate(plan: &Plan) -> char {
    let random = uuid::Uuid::new_v4();
    let bytes = random.as_bytes();
    match u16::from_le_bytes([bytes[0], bytes[1]]) % 100 {
        n if n < plan.failed_percent => 'f',
        n if n < plan.failed_percent + plan.dlq_percent => 'd',
        _ => 'c',
    }
}

/// Producer `index`'s `n`-th push request.
fn push_body(plan: &Plan, index: usize, n: usize) -> Bytes {
    let fates = plan.failed_percent + plan.dlq_percent > 0;
    let items: Vec<_> = (0..plan.batch)
        .map(|i| {
            let partition = if plan.spread {
                (index + n * plan.batch + i) % plan.partitions
            } else {
                (index * 13 + n) % plan.partitions
            };
            let mut item = json!({"queue": plan.queue,
                                  "partition": format!("p{partition}"),
                                  "payload": {"data": hex_payload(plan.payload_bytes)}});
            if fates {
                item["transactionId"] =
                    json!(format!("{}{}", fate(plan), uuid::Uuid::new_v4().simple()));
            }
            item
        })
        .collect();
    Bytes::from(json!({ "items": items }).to_string())
}

/// `len` hex digits from fresh random UUIDs.
fn hex_payload(len: usize) -> String {
    let mut out = String::with_capacity(len + 32);
    while out.len() < len {
        out.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    out.truncate(len);
    out
}

/// Producer `index`'s loop: a push at each tick (or back to back), until told
/// to stop.
async fn producer(
    plan: Arc<Plan>,
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
        let body = push_body(&plan, index, n);
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
        if queued != plan.batch {
            shared.error(format!(
                "push: {queued} of {} items queued: {}",
                plan.batch,
                reply.snippet()
            ));
        }
    }
    Ok(())
}

/// A consumer's loop: pop, ack each message as its fate says, count what
/// the acks did, until told to stop.
async fn consumer(
    plan: Arc<Plan>,
    addr: SocketAddr,
    mut conn: Conn,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let group = plan
        .group
        .map_or(String::new(), |group| format!("consumerGroup={group}&"));
    let pop_path = format!(
        "/api/v1/pop/queue/{}?{group}batch={}&wait=true&timeout=1000",
        plan.queue, plan.pop_batch
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
                    "failed" => Some("soak: simulated failed"),
                    "dlq" => Some("soak: simulated dlq"),
                    _ => None,
                },
                ..m.ack(status)
            })
            .collect();
        let sent = Instant::now();
        let reply = match conn.ack_request(&acks, plan.group).await {
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
pub(crate) fn since(before: &Counts, after: &Counts) -> Counts {
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
