//! The `soak` scenario (issue 15): pushes and consumes for minutes with the
//! retention loop sweeping every few seconds, sampling the on-disk size of
//! `queen.log_segments` (heap and TOAST) and `queen.log_txns`, to show that
//! storage plateaus instead of growing with everything ever pushed.
//!
//! One broker (started with `RETENTION_INTERVAL` = `--sweep-ms`) on a fresh
//! database; one queue with `retentionEnabled` and
//! `completedRetentionSeconds` = `--completed-seconds`, and a dedup window of
//! the same length (the sidecar is purged after the larger of the window,
//! the completed retention and 900 s, so `log_txns` levels off only after 15
//! minutes: its figures are reported, the plateau verdict is on the
//! segments). `--producers` producers push `--batch`-message requests,
//! spread over `--partitions` partitions, paced to `--rate` messages per
//! second in total; `--consumers` consumers pop (`batch=100`, long poll) and
//! ack each batch, so consumption keeps up and what is consumed becomes
//! deletable `--completed-seconds` later. Every `--sample` seconds the sizes,
//! the live segment count and the pushed and consumed totals are recorded.
//!
//! Verdict: the largest heap+TOAST size of the last third of the samples is
//! at most 1.25 times the largest of the middle third (`plateau`); a size
//! that kept growing with the pushed volume fails it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use serde_json::json;

use super::case::{Run, Running, Scenario};
use crate::client::payload::Bodies;
use crate::client::{self, Conn};
use crate::env;
use crate::env::{CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::output::report::{Report, Row};
use crate::output::table::{fixed, Table};

/// The soak scenario's settings.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SoakOpts {
    /// Seconds of load [default: 300, or 30 with --quick].
    #[arg(long, value_name = "SECS")]
    pub(crate) duration: Option<f64>,
    /// A 30-second run, for smoke tests.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Milliseconds between retention passes (the broker's RETENTION_INTERVAL).
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub(crate) sweep_ms: u64,
    /// The queue's completedRetentionSeconds (and dedup window).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub(crate) completed_seconds: u32,
    /// Messages per second pushed, in total.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub(crate) rate: u32,
    /// Messages per push request.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub(crate) batch: usize,
    /// Partitions the pushes are spread over.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub(crate) partitions: usize,
    /// Payload bytes per message (a JSON string of that many hex digits, a
    /// different one per message, so segments compress about as real data
    /// does and the larger ones go to TOAST).
    #[arg(long, value_name = "BYTES", default_value_t = 512)]
    pub(crate) payload_bytes: usize,
    /// Concurrent producers.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub(crate) producers: usize,
    /// Concurrent consumers.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub(crate) consumers: usize,
    /// Seconds between samples.
    #[arg(long, value_name = "SECS", default_value_t = 15.0)]
    pub(crate) sample: f64,
}

impl SoakOpts {
    fn duration(&self) -> f64 {
        self.duration
            .unwrap_or(if self.quick { 30.0 } else { 300.0 })
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let positive = [
            ("duration", self.duration()),
            ("sample", self.sample),
            ("rate", f64::from(self.rate)),
            ("batch", self.batch as f64),
            ("partitions", self.partitions as f64),
            ("producers", self.producers as f64),
            ("consumers", self.consumers as f64),
        ];
        for (name, value) in positive {
            if !(value.is_finite() && value > 0.0) {
                return Err(Error::msg(format!("--{name} must be more than 0")));
            }
        }
        Ok(())
    }

    pub(crate) fn settings(&self) -> serde_json::Value {
        json!({
            "duration_seconds": self.duration(),
            "sweep_ms": self.sweep_ms,
            "completed_retention_seconds": self.completed_seconds,
            "rate": self.rate,
            "batch": self.batch,
            "partitions": self.partitions,
            "payload_bytes": self.payload_bytes,
            "producers": self.producers,
            "consumers": self.consumers,
            "sample_seconds": self.sample,
        })
    }
}

/// One sample of the run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Sample {
    pub(crate) seconds: f64,
    pub(crate) pushed: u64,
    pub(crate) consumed: u64,
    pub(crate) live_segments: i64,
    pub(crate) segments_heap_bytes: i64,
    pub(crate) segments_toast_bytes: i64,
    pub(crate) txns_bytes: i64,
}

impl Sample {
    fn segments_bytes(&self) -> i64 {
        self.segments_heap_bytes + self.segments_toast_bytes
    }
}

/// The soak's figures.
#[derive(Debug, Serialize)]
pub(crate) struct SoakResult {
    pub(crate) samples: Vec<Sample>,
    /// Messages pushed over the run, and their payload bytes.
    pub(crate) pushed: u64,
    pub(crate) pushed_payload_bytes: u64,
    pub(crate) consumed: u64,
    /// Largest heap+TOAST of the middle and the last third of the samples.
    pub(crate) middle_max_bytes: i64,
    pub(crate) last_max_bytes: i64,
    /// `last_max_bytes / middle_max_bytes` at most 1.25.
    pub(crate) plateau: bool,
}

const SIZES: &str = "SELECT pg_relation_size('queen.log_segments'), \
       coalesce(pg_relation_size((SELECT reltoastrelid FROM pg_class \
                                   WHERE oid = 'queen.log_segments'::regclass)), 0), \
       pg_total_relation_size('queen.log_txns'), \
       (SELECT count(*) FROM queen.log_segments)";

impl Scenario for SoakOpts {
    fn name(&self) -> &'static str {
        "soak"
    }

    fn validate(&self) -> Result<()> {
        Self::validate(self)
    }

    fn settings(&self, _: &Bodies) -> serde_json::Value {
        Self::settings(self)
    }

    fn run<'a>(&'a self, ctx: Run<'a>, report: &'a mut Report) -> Running<'a> {
        Box::pin(run(ctx.env, ctx.common, self, report))
    }
}

async fn run(env: &Env, common: &CommonArgs, opts: &SoakOpts, report: &mut Report) -> Result<()> {
    let dbname = env.create_database("soak").await?;
    let mut broker_common = common.clone();
    broker_common
        .broker_env
        .push(("RETENTION_INTERVAL".to_owned(), opts.sweep_ms.to_string()));
    let mut brokers = env.start_brokers(&broker_common, &dbname, 1).await?;
    let addr = brokers[0].addr();
    let sql = queen_sql::connect::connect_one(&env.connect_config(&dbname))
        .await
        .context("connect to the soak database")?;

    Conn::connect(addr)
        .await?
        .configure(
            "soak",
            json!({
                "retentionEnabled": true,
                "completedRetentionSeconds": opts.completed_seconds,
                "dedupWindowSeconds": opts.completed_seconds,
            }),
        )
        .await?;

    let stop = Arc::new(AtomicBool::new(false));
    let pushed = Arc::new(AtomicU64::new(0));
    let consumed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    let per_producer = f64::from(opts.rate) / opts.producers as f64;
    let interval = Duration::from_secs_f64(opts.batch as f64 / per_producer);
    for producer in 0..opts.producers {
        let (stop, pushed) = (Arc::clone(&stop), Arc::clone(&pushed));
        let (batch, partitions, payload_bytes) = (opts.batch, opts.partitions, opts.payload_bytes);
        let mut conn = Conn::connect(addr).await?;
        tasks.push(tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                ticker.tick().await;
                let items: Vec<_> = (0..batch)
                    .map(|i| {
                        json!({"queue": "soak",
                               "partition": format!("p{}", (producer + n + i) % partitions),
                               "payload": {"data": hex_payload(payload_bytes)}})
                    })
                    .collect();
                n += batch;
                let body = Bytes::from(json!({ "items": items }).to_string());
                conn.push(body, batch).await?;
                pushed.fetch_add(batch as u64, Ordering::Relaxed);
            }
            Ok::<(), Error>(())
        }));
    }
    for _ in 0..opts.consumers {
        let (stop, consumed) = (Arc::clone(&stop), Arc::clone(&consumed));
        let mut conn = Conn::connect(addr).await?;
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let popped = conn
                    .pop("/api/v1/pop/queue/soak?batch=100&wait=true&timeout=1000")
                    .await?;
                let messages = popped.messages::<serde::de::IgnoredAny>()?;
                if messages.is_empty() {
                    continue;
                }
                let n = messages.len() as u64;
                conn.ack(&client::completed(&messages), None).await?;
                consumed.fetch_add(n, Ordering::Relaxed);
            }
            Ok::<(), Error>(())
        }));
    }

    let mut samples = Vec::new();
    let end = started + Duration::from_secs_f64(opts.duration());
    loop {
        let row = sql.query_one(SIZES, &[]).await.context("sample sizes")?;
        let sample = Sample {
            seconds: started.elapsed().as_secs_f64(),
            pushed: pushed.load(Ordering::Relaxed),
            consumed: consumed.load(Ordering::Relaxed),
            segments_heap_bytes: row.get(0),
            segments_toast_bytes: row.get(1),
            txns_bytes: row.get(2),
            live_segments: row.get(3),
        };
        eprintln!(
            "queen-load:   {:>5.0} s: pushed {}, consumed {}, {} live segments, \
             log_segments heap {} KiB + TOAST {} KiB, log_txns {} KiB",
            sample.seconds,
            sample.pushed,
            sample.consumed,
            sample.live_segments,
            sample.segments_heap_bytes / 1024,
            sample.segments_toast_bytes / 1024,
            sample.txns_bytes / 1024
        );
        samples.push(sample);
        if Instant::now() >= end {
            break;
        }
        let next = Instant::now() + Duration::from_secs_f64(opts.sample);
        tokio::time::sleep_until(next.min(end).into()).await;
        brokers[0].check_alive()?;
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.context("a soak task panicked")??;
    }
    env::stop_all(brokers).await?;
    env.drop_database(&dbname, common.keep).await?;

    let third = samples.len() / 3;
    let max_of = |part: &[Sample]| part.iter().map(Sample::segments_bytes).max().unwrap_or(0);
    let middle_max_bytes = max_of(samples.get(third..2 * third).unwrap_or_default());
    let last_max_bytes = max_of(samples.get(2 * third..).unwrap_or_default());
    let total_pushed = pushed.load(Ordering::Relaxed);
    report.push(SoakResult {
        pushed: total_pushed,
        pushed_payload_bytes: total_pushed * opts.payload_bytes as u64,
        consumed: consumed.load(Ordering::Relaxed),
        plateau: middle_max_bytes > 0 && (last_max_bytes as f64) <= 1.25 * middle_max_bytes as f64,
        middle_max_bytes,
        last_max_bytes,
        samples,
    });
    Ok(())
}

/// `len` hex digits from fresh random UUIDs.
pub(crate) fn hex_payload(len: usize) -> String {
    let mut out = String::with_capacity(len + 32);
    while out.len() < len {
        out.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    out.truncate(len);
    out
}

impl Row for SoakResult {
    const KEY: &'static str = "soak";

    fn title() -> Option<String> {
        Some("soak: storage over time while retention sweeps".to_owned())
    }

    fn table(results: &[SoakResult]) -> String {
        table(results)
    }
}

/// The soak table: one row per sample, then the verdict.
fn table(results: &[SoakResult]) -> String {
    let mut out = String::new();
    for result in results {
        let mut table = Table::new(&[
            ("seconds", 8),
            ("pushed", 10),
            ("consumed", 10),
            ("segments", 9),
            ("heap KiB", 10),
            ("TOAST KiB", 10),
            ("txns KiB", 10),
        ]);
        for s in &result.samples {
            table.row([
                fixed(s.seconds, 0),
                s.pushed.to_string(),
                s.consumed.to_string(),
                s.live_segments.to_string(),
                (s.segments_heap_bytes / 1024).to_string(),
                (s.segments_toast_bytes / 1024).to_string(),
                (s.txns_bytes / 1024).to_string(),
            ]);
        }
        out.push_str(&table.finish());
        out.push_str(&format!(
            "pushed {} messages ({} MiB of payload); log_segments heap+TOAST: largest {} KiB in \
             the middle third, {} KiB in the last third: {}\n",
            result.pushed,
            result.pushed_payload_bytes >> 20,
            result.middle_max_bytes / 1024,
            result.last_max_bytes / 1024,
            if result.plateau {
                "plateau"
            } else {
                "STILL GROWING"
            }
        ));
    }
    out
}
