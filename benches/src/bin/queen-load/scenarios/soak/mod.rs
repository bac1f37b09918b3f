//! The soak: minutes of pushes and consumes with the retention loop sweeping
//! every few seconds, to show that storage plateaus instead of growing with
//! everything ever pushed. One workload (`traffic.rs`), two entries:
//!
//! - `soak` (this file): the storage over time. One broker (started with
//!   `RETENTION_INTERVAL` = `--sweep-ms`) on a fresh database; one queue
//!   with `retentionEnabled` and `completedRetentionSeconds` =
//!   `--completed-seconds`, and a dedup window of the same length (the
//!   sidecar is purged after the larger of the window, the completed
//!   retention and 900 s, so `log_txns` levels off only after 15 minutes:
//!   its figures are reported, the plateau verdict is on the segments).
//!   `--producers` producers push `--batch`-message requests, their items
//!   spread over `--partitions` partitions, paced to `--rate` messages per
//!   second in total (no transaction ids: every message is acked
//!   `completed`); `--consumers` consumers pop in queue mode (`batch=100`,
//!   long poll) and ack each batch, so consumption keeps up and what is
//!   consumed becomes deletable `--completed-seconds` later. At the start
//!   and every `--sample` seconds the sizes of `log_segments` (heap and
//!   TOAST) and `log_txns`, the live segment count and the pushed and
//!   consumed totals are recorded. Verdict: the largest heap+TOAST size of
//!   the last third of the samples is at most 1.25 times the largest of the
//!   middle third (`plateau`); a size that kept growing with the pushed
//!   volume fails it. A failed request fails the run, at its end.
//! - `scale --cases soak` (`scale.rs`): mixed traffic with failures and dead
//!   letters at half the calibrated maximum, deliveries per message against
//!   the floor ordering imposes, the broker's memory over time, an SVG plot
//!   and the samples as CSV.

pub(crate) mod scale;
mod traffic;

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use super::case;
use crate::client::payload::Bodies;
use crate::env::{CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::output::report::{Report, Row};
use crate::output::table::{fixed, Table};
use traffic::{lock, Counts, Plan, Sample, Soak};

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

    pub(crate) fn settings(&self, _: &Bodies) -> serde_json::Value {
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

/// What the report keeps of a sample: storage, and the totals so far.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct StorageSample {
    pub(crate) seconds: f64,
    pub(crate) pushed: u64,
    pub(crate) consumed: u64,
    pub(crate) live_segments: i64,
    pub(crate) segments_heap_bytes: i64,
    pub(crate) segments_toast_bytes: i64,
    pub(crate) txns_bytes: i64,
}

impl StorageSample {
    fn of(sample: &Sample) -> StorageSample {
        StorageSample {
            seconds: sample.seconds,
            pushed: sample.counts.pushed,
            consumed: sample.counts.consumed(),
            live_segments: sample.live_segments,
            segments_heap_bytes: sample.segments_heap_bytes,
            segments_toast_bytes: sample.segments_toast_bytes,
            txns_bytes: sample.txns_bytes,
        }
    }

    fn segments_bytes(&self) -> i64 {
        self.segments_heap_bytes + self.segments_toast_bytes
    }
}

/// The soak's figures.
#[derive(Debug, Serialize)]
pub(crate) struct SoakResult {
    pub(crate) samples: Vec<StorageSample>,
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

case::scenario!(SoakOpts, "soak", |ctx, opts, report| run(
    ctx.env, ctx.common, opts, report
));

async fn run(env: &Env, common: &CommonArgs, opts: &SoakOpts, report: &mut Report) -> Result<()> {
    let plan = Plan {
        database: "soak",
        queue: "soak",
        group: None,
        options: json!({
            "retentionEnabled": true,
            "completedRetentionSeconds": opts.completed_seconds,
            "dedupWindowSeconds": opts.completed_seconds,
        }),
        retention_interval_ms: opts.sweep_ms,
        producers: opts.producers,
        consumers: opts.consumers,
        batch: opts.batch,
        pop_batch: 100,
        payload_bytes: opts.payload_bytes,
        partitions: opts.partitions,
        spread: true,
        failed_percent: 0,
        dlq_percent: 0,
    };
    let mut soak = Soak::start(env, common, plan).await?;
    let per_producer = f64::from(opts.rate) / opts.producers as f64;
    let interval = Duration::try_from_secs_f64(opts.batch as f64 / per_producer)
        .context("soak: the producers' pacing interval")?;
    let producers = soak.producers(Some(interval)).await?;
    let started = Instant::now();
    let base = Counts::default();
    let mut previous = (started, base, soak.mark().2);
    let mut samples = Vec::new();
    let end = started + Duration::from_secs_f64(opts.duration());
    loop {
        let (sample, _) = soak.sample(started, &base, &mut previous).await?;
        let sample = StorageSample::of(&sample);
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
        soak.check_alive()?;
    }
    producers.stop().await?;
    let first_error = lock(&soak.shared.error_texts).first().cloned();
    let totals = soak.finish().await?;
    if let Some(first) = first_error {
        return Err(Error::msg(format!(
            "{} soak requests failed; the first: {first}",
            totals.errors
        )));
    }

    let third = samples.len() / 3;
    let max_of = |part: &[StorageSample]| {
        part.iter()
            .map(StorageSample::segments_bytes)
            .max()
            .unwrap_or(0)
    };
    let middle_max_bytes = max_of(samples.get(third..2 * third).unwrap_or_default());
    let last_max_bytes = max_of(samples.get(2 * third..).unwrap_or_default());
    report.push(SoakResult {
        pushed: totals.pushed,
        pushed_payload_bytes: totals.pushed * opts.payload_bytes as u64,
        consumed: totals.consumed(),
        plateau: middle_max_bytes > 0 && (last_max_bytes as f64) <= 1.25 * middle_max_bytes as f64,
        middle_max_bytes,
        last_max_bytes,
        samples,
    });
    Ok(())
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
