//! The `soak` case of the `scale` scenario: `minutes` of
//! mixed traffic at half the measured maximum, with retention on, to show
//! that the broker's memory stays flat and storage levels off.
//!
//! Setup: one broker started with `RETENTION_INTERVAL=5000` on a fresh
//! database; queue `scale_soak` configured with `retentionEnabled`,
//! `completedRetentionSeconds` 60, `retryLimit` 2 and `dlqEnabled` (every
//! other option at its default); partitions `p0`..`p99`.
//!
//! Traffic: 8 producers, each push request 10 messages of one partition
//! (round-robin over the 100), each payload `{"data": <256 hex digits>}`; 8
//! consumers in consumer group `g`, each popping with a lease (`batch=10`,
//! long poll of 1 s) and acking the batch in one `POST /api/v1/ack/batch`.
//! Every message's fate is chosen at push time and carried in its
//! transaction id: 95% are acked `completed`; 4% are poison, acked `failed`
//! at every delivery (each failure gives the batch back, and at the third
//! delivery, `retryLimit` 2 being spent, the broker files it in the DLQ);
//! 1% are acked `dlq` (dead-lettered at once). The items of a batch after a
//! `failed` one with retries left are not applied and come back after it,
//! as ordered partitions require: the `refused` count.
//!
//! Deliveries per message is popped / consumed. Its floor for this mix is
//! what ordering forces: every message delivered once, plus, for each batch
//! whose ack stopped at a `failed` item with retries left, that item and
//! every one after it in the batch (`forced`): (consumed + forced) /
//! consumed. The two meet when nothing else comes back (no refused
//! dead letter, no lease expiry, no ack not found). With full batches of
//! `BATCH` the floor is about 1 + failed% x ((BATCH + 1) / 2 + (retryLimit -
//! 1) x BATCH), printed beside it.
//!
//! Phases: a 15 s calibration with unpaced producers measures the maximum
//! of this mix, min(push rate, consume rate) over its last 12 s; the backlog
//! is drained; then the soak runs for `minutes` with the producers paced to
//! half that maximum in total. Every sampling period (30 s, or
//! `minutes` x 60 / 20 when that is shorter) it records the broker's VmRSS
//! (and RssAnon) from `/proc/<pid>/status`; `pg_total_relation_size` of
//! `queen.log_segments`, `log_txns`, `log_consumers`, `log_dlq` and
//! `log_partitions`; the live segment and DLQ row counts and the group's lag
//! (messages behind its cursors); p99 over the interval of the push request
//! latency, of the pop request latency (pops that returned messages; a long
//! poll that waited for a push counts its wait), and of the ack request
//! latency; the cumulative pushed, consumed (completed + dead-lettered),
//! failed, dead-lettered, refused and error counts; the CPU cores used (the
//! broker, PostgreSQL, this tool, other work: a mean above `--max-other-cpu`
//! marks the run `disturbed`); and the broker's own account of its bounded
//! maps from `GET /metrics` (dedup cache and ack registry bytes, wake gates,
//! hot-list entries), to tell a cache filling from a leak.
//!
//! Verdicts:
//! - memory: the least-squares slope of RSS over the samples after the first
//!   20% of the soak (warm-up), in KiB per minute and in % of the mean RSS
//!   per hour. `flat` when the slope projects less than 1% of the mean RSS
//!   of growth per 10 minutes (6%/hour; a negative slope is flat);
//!   `GROWING` otherwise; `inconclusive` with fewer than 5 samples after
//!   warm-up. The broker's dedup cache fills for 1.25 dedup windows (375 s
//!   with the default 300 s window) before it levels off: the 30-minute
//!   default's 6-minute warm-up about covers it, and a short smoke run reads
//!   `GROWING` from that alone. So the slope of RSS net of what the broker
//!   accounts to its dedup cache and ack registry is reported too (not part
//!   of the verdict).
//! - storage: per table, the slope after warm-up and the largest size of the
//!   last third of the samples against the middle third: `plateau` when at
//!   most 1.25 times it. The verdict that matters is `log_segments`'s (what
//!   completed retention deletes); `log_dlq` grows with its rows by design
//!   (dead letters are kept), and `log_txns` levels off only after 15
//!   minutes (the sidecar is kept at least 900 s).
//!
//! Outputs: one sample line per interval and a summary table on stderr; an
//! SVG plot at `svg` (panels: RSS, table sizes on a log scale, p99
//! latencies, throughput) and the samples as CSV next to it (same name,
//! `.csv`); one JSON object with `"case": "soak"` in `report.scale`.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use serde_json::json;

use super::traffic::{lock, since, Counts, Latencies, Plan, Sample, Soak, TABLES};
use crate::env::{CommonArgs, Env};
use crate::error::{Context, Error, Result};
use crate::measure::cpu::Usage;
use crate::measure::fit::least_squares;
use crate::measure::Latency;
use crate::output::svg::{
    escape, panel, utc_date, Panel, Scale, Series, COLORS, LEFT, PANEL_GAP, PANEL_HEIGHT, TOP,
    WIDTH,
};
use crate::output::table::{fixed, Table};

const QUEUE: &str = "scale_soak";
const GROUP: &str = "g";
const PRODUCERS: usize = 8;
const CONSUMERS: usize = 8;
/// Messages per push request, and the pop batch.
const BATCH: usize = 10;
const PAYLOAD_BYTES: usize = 256;
const PARTITIONS: usize = 100;
/// The broker's `RETENTION_INTERVAL`, milliseconds.
const RETENTION_INTERVAL_MS: u64 = 5000;
const COMPLETED_RETENTION_SECONDS: u32 = 60;
const RETRY_LIMIT: u32 = 2;
/// Percent of the messages acked `failed` at every delivery, and `dlq`.
const FAILED_PERCENT: u16 = 4;
const DLQ_PERCENT: u16 = 1;
/// The calibration: its length, and the start of it left out of the rates.
const CALIBRATION: Duration = Duration::from_secs(15);
const CALIBRATION_WARMUP: Duration = Duration::from_secs(3);
/// The soak runs at this fraction of the calibrated maximum.
const LOAD_FRACTION: f64 = 0.5;
/// How long the backlog of the calibration may take to drain.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);
/// The longest sampling period, and the fewest samples a run gets.
const MAX_PERIOD_SECONDS: f64 = 30.0;
const MIN_SAMPLES: f64 = 20.0;
/// The first part of the soak, left out of the slopes.
const WARMUP_FRACTION: f64 = 0.2;
/// Flat: projected RSS growth per 10 minutes under this fraction of the mean.
const FLAT_PER_10_MINUTES: f64 = 0.01;
/// Plateau: the last third's largest size at most this times the middle's.
const PLATEAU_RATIO: f64 = 1.25;

/// The sampling period for a soak of `minutes`: 30 s, or shorter so that the
/// run has at least 20 samples.
fn sample_period(minutes: f64) -> Duration {
    Duration::from_secs_f64((minutes * 60.0 / MIN_SAMPLES).clamp(1.0, MAX_PERIOD_SECONDS))
}

/// Counters and latencies the tasks share with the sampler.
fn full_batch_floor() -> f64 {
    let batch = BATCH as f64;
    1.0 + f64::from(FAILED_PERCENT) / 100.0
        * ((batch + 1.0) / 2.0 + f64::from(RETRY_LIMIT - 1) * batch)
}

/// Sets the flag when dropped: the tasks stop whichever way `run` ends.
/// The soak case: calibration, then `minutes` at half the maximum; its
/// figures, and whether the plot and the samples were written to `svg` and
/// next to it.
pub(crate) async fn run(
    env: &Env,
    common: &CommonArgs,
    minutes: f64,
    svg: &Path,
) -> Result<(serde_json::Value, Result<()>)> {
    let started_at = SystemTime::now();
    let period = sample_period(minutes);
    let soak_length =
        Duration::try_from_secs_f64(minutes * 60.0).context("scale soak: --soak-minutes")?;
    let plan = Plan {
        database: "scale_soak",
        queue: QUEUE,
        group: Some(GROUP),
        options: json!({
            "retentionEnabled": true,
            "completedRetentionSeconds": COMPLETED_RETENTION_SECONDS,
            "retryLimit": RETRY_LIMIT,
            "dlqEnabled": true,
        }),
        retention_interval_ms: RETENTION_INTERVAL_MS,
        producers: PRODUCERS,
        consumers: CONSUMERS,
        batch: BATCH,
        pop_batch: BATCH,
        payload_bytes: PAYLOAD_BYTES,
        partitions: PARTITIONS,
        spread: false,
        failed_percent: FAILED_PERCENT,
        dlq_percent: DLQ_PERCENT,
    };
    let mut soak = Soak::start(env, common, plan).await?;
    let shared = Arc::clone(&soak.shared);

    // Calibration: producers unpaced.
    eprintln!(
        "queen-load:   calibration: {} s, {PRODUCERS} unpaced producers, {CONSUMERS} consumers",
        CALIBRATION.as_secs()
    );
    let producers = soak.producers(None).await?;
    tokio::time::sleep(CALIBRATION_WARMUP).await;
    let (before, before_at) = (shared.counts(), Instant::now());
    tokio::time::sleep(CALIBRATION - CALIBRATION_WARMUP).await;
    let (after, window) = (shared.counts(), before_at.elapsed().as_secs_f64());
    producers.stop().await?;
    soak.check_alive()?;
    let calibration_latencies = shared.take_latencies();
    let push_max = (after.pushed - before.pushed) as f64 / window;
    let consume_max = (after.consumed() - before.consumed()) as f64 / window;
    let max_rate = push_max.min(consume_max);
    let target = max_rate * LOAD_FRACTION;
    eprintln!(
        "queen-load:   calibration: push {push_max:.0}/s, consume {consume_max:.0}/s, \
         maximum {max_rate:.0}/s; soak target {target:.0}/s"
    );
    if target < 1.0 {
        return Err(Error::msg(format!(
            "scale soak: the calibration measured no usable rate (push {push_max:.1}/s, \
             consume {consume_max:.1}/s); errors: {:?}",
            lock(&shared.error_texts)
        )));
    }
    let calibration = json!({
        "seconds": CALIBRATION.as_secs_f64(),
        "measured_seconds": window,
        "push_per_second": push_max,
        "consume_per_second": consume_max,
        "max_per_second": max_rate,
        "push_latency_ms": Latency::from_micros(calibration_latencies.push),
        "pop_latency_ms": Latency::from_micros(calibration_latencies.pop),
        "ack_latency_ms": Latency::from_micros(calibration_latencies.ack),
    });

    // Drain the calibration's backlog.
    let drain_started = Instant::now();
    let mut lag = soak.lag().await?;
    let lag_after_calibration = lag;
    while lag > 0 && drain_started.elapsed() < DRAIN_LIMIT {
        tokio::time::sleep(Duration::from_millis(500)).await;
        lag = soak.lag().await?;
    }
    let drain_seconds = drain_started.elapsed().as_secs_f64();
    eprintln!(
        "queen-load:   drained a lag of {lag_after_calibration} in {drain_seconds:.1} s \
         ({lag} left); soak: {minutes} min, a sample every {:.0} s",
        period.as_secs_f64()
    );

    // The soak.
    let _ = shared.take_latencies();
    let base = shared.counts();
    let per_producer = target / PRODUCERS as f64;
    let interval = Duration::try_from_secs_f64(BATCH as f64 / per_producer)
        .context("scale soak: the producers' pacing interval")?;
    let producers = soak.producers(Some(interval)).await?;
    let soak_started = Instant::now();
    let mut samples = Vec::new();
    let mut totals = Latencies::default();
    let mut previous = (soak_started, base, soak.mark().2);
    for k in 1u32.. {
        let due = (soak_started + period * k).min(soak_started + soak_length);
        tokio::time::sleep_until(due.into()).await;
        soak.check_alive()?;
        let (sample, latencies) = soak.sample(soak_started, &base, &mut previous).await?;
        totals.push.extend(latencies.push);
        totals.pop.extend(latencies.pop);
        totals.ack.extend(latencies.ack);
        eprintln!("{}", sample_line(&sample));
        samples.push(sample);
        if previous.0 >= soak_started + soak_length {
            break;
        }
    }
    let soak_seconds = soak_started.elapsed().as_secs_f64();
    producers.stop().await?;
    let end = since(&base, &soak.finish().await?);

    let analysis = Analysis::of(&samples, soak_seconds);
    let settings = Settings {
        started_at,
        minutes,
        period,
        target,
        max_rate,
    };
    let csv_path = svg.with_extension("csv");
    let (svg_text, csv_text) = (plot(&samples, &analysis, &settings), csv(&samples));
    let cpu = mean_usage(&samples);
    let disturbed = cpu.other > common.max_other_cpu;
    eprint!(
        "{}",
        summary(&samples, &analysis, &settings, &end, soak_seconds)
    );
    eprintln!(
        "cpu cores, mean over the samples: broker {:.2}, postgres {:.2}, load generator {:.2}, \
         other work {:.2}{}",
        cpu.broker,
        cpu.postgres,
        cpu.loadgen,
        cpu.other,
        if disturbed {
            format!(
                " (DISTURBED: above {:.2}; read the latencies and the calibration with care)",
                common.max_other_cpu
            )
        } else {
            String::new()
        }
    );

    let error_texts = lock(&shared.error_texts).clone();
    let result = json!({
        "case": "soak",
        "settings": {
            "minutes": minutes,
            "sample_seconds": period.as_secs_f64(),
            "producers": PRODUCERS,
            "consumers": CONSUMERS,
            "batch": BATCH,
            "payload_bytes": PAYLOAD_BYTES,
            "partitions": PARTITIONS,
            "retention_interval_ms": RETENTION_INTERVAL_MS,
            "completed_retention_seconds": COMPLETED_RETENTION_SECONDS,
            "retry_limit": RETRY_LIMIT,
            "dlq_enabled": true,
            "failed_percent": FAILED_PERCENT,
            "dlq_percent": DLQ_PERCENT,
            "load_fraction": LOAD_FRACTION,
            "warmup_fraction": WARMUP_FRACTION,
        },
        "calibration": calibration,
        "drain": {
            "lag_after_calibration": lag_after_calibration,
            "seconds": drain_seconds,
            "lag_left": lag,
        },
        "target_per_second": target,
        "soak_seconds": soak_seconds,
        "achieved": {
            "push_per_second": end.pushed as f64 / soak_seconds,
            "consumed_per_second": end.consumed() as f64 / soak_seconds,
        },
        "totals": end,
        "deliveries_per_message": end.deliveries_per_message(),
        "ordering_floor": end.ordering_floor(),
        "full_batch_floor": full_batch_floor(),
        "latency_ms": {
            "push": Latency::from_micros(totals.push),
            "pop": Latency::from_micros(totals.pop),
            "ack": Latency::from_micros(totals.ack),
        },
        "cpu_cores_mean": cpu,
        "disturbed": disturbed,
        "rss": analysis.rss,
        "tables": analysis.tables,
        "storage_verdict": analysis.storage_verdict(),
        "svg": svg.display().to_string(),
        "csv": csv_path.display().to_string(),
        "error_samples": error_texts,
        "samples": samples,
    });
    // Apart from the figures, for the report to keep them: an unwritable
    // path loses only the files.
    let files = write_file(svg, &svg_text).and_then(|()| write_file(&csv_path, &csv_text));
    if files.is_ok() {
        eprintln!(
            "queen-load:   soak plot {}, samples {}",
            svg.display(),
            csv_path.display()
        );
    }
    Ok((result, files))
}

/// The mean of the samples' CPU figures.
fn mean_usage(samples: &[Sample]) -> Usage {
    let n = samples.len().max(1) as f64;
    let mean = |f: fn(&Usage) -> f64| samples.iter().map(|s| f(&s.cpu_cores)).sum::<f64>() / n;
    Usage {
        broker: mean(|u| u.broker),
        postgres: mean(|u| u.postgres),
        loadgen: mean(|u| u.loadgen),
        machine: mean(|u| u.machine),
        other: mean(|u| u.other),
        machine_busy_fraction: mean(|u| u.machine_busy_fraction),
    }
}

fn mib(bytes: i64) -> f64 {
    bytes as f64 / 1_048_576.0
}

fn sample_line(s: &Sample) -> String {
    format!(
        "queen-load:   {:>6.0} s: RSS {:.1} MiB (dedup cache {:.1}, ack registry {:.1}); segments {:.1} MiB ({} live), txns {:.1} MiB, \
         consumers {} KiB, dlq {:.1} MiB ({} rows), partitions {} KiB; lag {}; \
         push {:.0}/s, consumed {:.0}/s; p99 push {:.1} pop {:.1} ack {:.1} ms; \
         pushed {}, consumed {}, failed {}, dlq {}, refused {}, errors {}",
        s.seconds,
        s.rss_kib as f64 / 1024.0,
        s.broker.dedup_cache_bytes as f64 / 1_048_576.0,
        s.broker.ack_registry_bytes as f64 / 1_048_576.0,
        mib(s.segments_bytes),
        s.live_segments,
        mib(s.txns_bytes),
        s.consumers_bytes / 1024,
        mib(s.dlq_bytes),
        s.dlq_rows,
        s.partitions_bytes / 1024,
        s.lag,
        s.push_per_second,
        s.consumed_per_second,
        s.push_p99_ms,
        s.pop_p99_ms,
        s.ack_p99_ms,
        s.counts.pushed,
        s.counts.consumed(),
        s.counts.failed,
        s.counts.dead_lettered,
        s.counts.refused,
        s.counts.errors,
    )
}

/// The RSS figures after warm-up.
#[derive(Debug, Clone, Serialize)]
struct RssTrend {
    warmup_seconds: f64,
    samples_used: usize,
    mean_kib: f64,
    first_kib: u64,
    last_kib: u64,
    max_kib: u64,
    /// The fit over minutes: KiB per minute.
    slope_kib_per_minute: f64,
    slope_stderr_kib_per_minute: f64,
    intercept_kib: f64,
    percent_of_mean_per_hour: f64,
    percent_of_mean_per_10_minutes: f64,
    /// The slope of VmRSS less the dedup cache and ack registry bytes.
    net_of_caches_slope_kib_per_minute: f64,
    net_of_caches_percent_per_10_minutes: f64,
    /// The `flat` limit, % of the mean RSS per 10 minutes.
    flat_limit_percent_per_10_minutes: f64,
    /// `flat`, `GROWING` or `inconclusive`.
    verdict: &'static str,
}

/// One table's size after warm-up.
#[derive(Debug, Clone, Serialize)]
struct TableTrend {
    table: &'static str,
    first_bytes: i64,
    last_bytes: i64,
    slope_kib_per_minute: f64,
    middle_third_max_bytes: i64,
    last_third_max_bytes: i64,
    /// `last_third_max / middle_third_max`.
    ratio: f64,
    /// `plateau` (ratio at most 1.25), `growing`, or `inconclusive`.
    trend: &'static str,
}

struct Analysis {
    rss: RssTrend,
    tables: Vec<TableTrend>,
}

impl Analysis {
    fn of(samples: &[Sample], soak_seconds: f64) -> Analysis {
        let warmup_seconds = soak_seconds * WARMUP_FRACTION;
        let after: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.seconds >= warmup_seconds)
            .collect();
        let points: Vec<(f64, f64)> = after
            .iter()
            .map(|s| (s.seconds / 60.0, s.rss_kib as f64))
            .collect();
        let mean_kib = if points.is_empty() {
            0.0
        } else {
            points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64
        };
        let fit = least_squares(&points);
        let slope = fit.map_or(0.0, |f| f.slope);
        let net: Vec<(f64, f64)> = after
            .iter()
            .map(|s| {
                let caches = s.broker.dedup_cache_bytes + s.broker.ack_registry_bytes;
                (s.seconds / 60.0, s.rss_kib as f64 - caches as f64 / 1024.0)
            })
            .collect();
        let net_mean = net.iter().map(|p| p.1).sum::<f64>() / net.len().max(1) as f64;
        let net_slope = least_squares(&net).map_or(0.0, |f| f.slope);
        let percent = |minutes: f64| {
            if mean_kib > 0.0 {
                slope * minutes / mean_kib * 100.0
            } else {
                0.0
            }
        };
        let per_10 = percent(10.0);
        let verdict = if after.len() < 5 || fit.is_none() {
            "inconclusive"
        } else if per_10 < FLAT_PER_10_MINUTES * 100.0 {
            "flat"
        } else {
            "GROWING"
        };
        let rss = RssTrend {
            warmup_seconds,
            samples_used: after.len(),
            mean_kib,
            first_kib: after.first().map_or(0, |s| s.rss_kib),
            last_kib: after.last().map_or(0, |s| s.rss_kib),
            max_kib: after.iter().map(|s| s.rss_kib).max().unwrap_or(0),
            slope_kib_per_minute: slope,
            slope_stderr_kib_per_minute: fit.map_or(0.0, |f| f.slope_stderr),
            intercept_kib: fit.map_or(0.0, |f| f.intercept),
            percent_of_mean_per_hour: percent(60.0),
            percent_of_mean_per_10_minutes: per_10,
            net_of_caches_slope_kib_per_minute: net_slope,
            net_of_caches_percent_per_10_minutes: if net_mean > 0.0 {
                net_slope * 10.0 / net_mean * 100.0
            } else {
                0.0
            },
            flat_limit_percent_per_10_minutes: FLAT_PER_10_MINUTES * 100.0,
            verdict,
        };
        let third = samples.len() / 3;
        let tables = TABLES
            .iter()
            .enumerate()
            .map(|(i, &table)| {
                let bytes = |s: &Sample| s.table_bytes()[i];
                let points: Vec<(f64, f64)> = after
                    .iter()
                    .map(|s| (s.seconds / 60.0, bytes(s) as f64 / 1024.0))
                    .collect();
                let max_of = |part: &[Sample]| part.iter().map(bytes).max().unwrap_or(0);
                let middle = max_of(samples.get(third..2 * third).unwrap_or_default());
                let last = max_of(samples.get(2 * third..).unwrap_or_default());
                let ratio = if middle > 0 {
                    last as f64 / middle as f64
                } else {
                    0.0
                };
                TableTrend {
                    table,
                    first_bytes: after.first().map_or(0, |s| bytes(s)),
                    last_bytes: after.last().map_or(0, |s| bytes(s)),
                    slope_kib_per_minute: least_squares(&points).map_or(0.0, |f| f.slope),
                    middle_third_max_bytes: middle,
                    last_third_max_bytes: last,
                    ratio,
                    trend: if third == 0 || middle == 0 {
                        "inconclusive"
                    } else if ratio <= PLATEAU_RATIO {
                        "plateau"
                    } else {
                        "growing"
                    },
                }
            })
            .collect();
        Analysis { rss, tables }
    }

    /// The `log_segments` trend: what completed retention keeps in check.
    fn storage_verdict(&self) -> &'static str {
        self.tables
            .iter()
            .find(|t| t.table == "log_segments")
            .map_or("inconclusive", |t| t.trend)
    }
}

/// What the plot's title and the summary say about the run.
struct Settings {
    started_at: SystemTime,
    minutes: f64,
    period: Duration,
    target: f64,
    max_rate: f64,
}

impl Settings {
    /// The load, then the queue.
    fn lines(&self) -> [String; 2] {
        [
            format!(
                "{} min at {:.0} msg/s ({:.0}% of the calibrated {:.0}/s), {PRODUCERS} producers \
                 + {CONSUMERS} consumers, batch {BATCH}, {PAYLOAD_BYTES} B payloads, \
                 {PARTITIONS} partitions, a sample every {:.0} s",
                self.minutes,
                self.target,
                LOAD_FRACTION * 100.0,
                self.max_rate,
                self.period.as_secs_f64()
            ),
            format!(
                "completed retention {COMPLETED_RETENTION_SECONDS} s (sweep every {} s), \
                 retryLimit {RETRY_LIMIT}, DLQ on; acks: {}% completed, {FAILED_PERCENT}% failed \
                 at every delivery, {DLQ_PERCENT}% dlq",
                RETENTION_INTERVAL_MS / 1000,
                100 - FAILED_PERCENT - DLQ_PERCENT
            ),
        ]
    }

    fn line(&self) -> String {
        self.lines().join("; ")
    }
}

fn summary(
    samples: &[Sample],
    analysis: &Analysis,
    settings: &Settings,
    end: &Counts,
    soak_seconds: f64,
) -> String {
    let mut table = Table::new(&[
        ("min", 6),
        ("RSS MiB", 8),
        ("segs MiB", 8),
        ("txns MiB", 8),
        ("cons KiB", 8),
        ("dlq MiB", 8),
        ("part KiB", 8),
        ("lag", 6),
        ("push/s", 7),
        ("cons/s", 7),
        ("push p99", 8),
        ("pop p99", 8),
        ("ack p99", 8),
        ("errors", 6),
    ]);
    for s in samples {
        table.row([
            fixed(s.seconds / 60.0, 1),
            fixed(s.rss_kib as f64 / 1024.0, 1),
            fixed(mib(s.segments_bytes), 1),
            fixed(mib(s.txns_bytes), 1),
            (s.consumers_bytes / 1024).to_string(),
            fixed(mib(s.dlq_bytes), 1),
            (s.partitions_bytes / 1024).to_string(),
            s.lag.to_string(),
            fixed(s.push_per_second, 0),
            fixed(s.consumed_per_second, 0),
            fixed(s.push_p99_ms, 1),
            fixed(s.pop_p99_ms, 1),
            fixed(s.ack_p99_ms, 1),
            s.counts.errors.to_string(),
        ]);
    }
    let mut out = format!("\nscale soak: {}\n", settings.line());
    out.push_str(&table.finish());
    let rss = &analysis.rss;
    let _ = writeln!(
        out,
        "pushed {} ({:.0}/s), consumed {} ({:.0}/s): {} completed, {} dead-lettered ({} by \
         `dlq`, {} after retries); {} failed acks, {} refused ack items, {} errors",
        end.pushed,
        end.pushed as f64 / soak_seconds,
        end.consumed(),
        end.consumed() as f64 / soak_seconds,
        end.completed,
        end.dead_lettered,
        end.dlq_direct,
        end.dead_lettered - end.dlq_direct,
        end.failed,
        end.refused,
        end.errors
    );
    let _ = writeln!(
        out,
        "deliveries per message {:.3}; the floor ordering imposes on this mix {:.3} (each \
         message once, plus the {} deliveries after a `failed` item with retries left in \
         its batch; {:.3} with full batches of {BATCH})",
        end.deliveries_per_message(),
        end.ordering_floor(),
        end.forced,
        full_batch_floor()
    );
    let _ = writeln!(
        out,
        "broker RSS after {:.0} s of warm-up ({} samples): mean {:.1} MiB, slope {:+.1} \
         ± {:.1} KiB/min = {:+.2}% of the mean per hour ({:+.3}% per 10 min; flat below \
         {:.0}%): {}",
        rss.warmup_seconds,
        rss.samples_used,
        rss.mean_kib / 1024.0,
        rss.slope_kib_per_minute,
        rss.slope_stderr_kib_per_minute,
        rss.percent_of_mean_per_hour,
        rss.percent_of_mean_per_10_minutes,
        rss.flat_limit_percent_per_10_minutes,
        rss.verdict
    );
    let _ = writeln!(
        out,
        "  net of the dedup cache and ack registry: {:+.1} KiB/min ({:+.3}% per 10 min)",
        rss.net_of_caches_slope_kib_per_minute, rss.net_of_caches_percent_per_10_minutes
    );
    for t in &analysis.tables {
        let _ = writeln!(
            out,
            "  {:<15} {:>9.1} -> {:>9.1} MiB, slope {:+9.1} KiB/min, last/middle third max \
             {:>5.2}: {}",
            t.table,
            mib(t.first_bytes),
            mib(t.last_bytes),
            t.slope_kib_per_minute,
            t.ratio,
            t.trend
        );
    }
    let _ = writeln!(
        out,
        "storage (log_segments): {}; log_dlq keeps every dead letter, log_txns levels off \
         after 900 s",
        analysis.storage_verdict()
    );
    out
}

/// Write `text` to `path`, making its parent directories.
fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
}

fn csv(samples: &[Sample]) -> String {
    let mut out = String::from(
        "seconds,rss_kib,rss_anon_kib,log_segments_bytes,log_txns_bytes,log_consumers_bytes,\
         log_dlq_bytes,log_partitions_bytes,live_segments,dlq_rows,lag,push_p99_ms,pop_p99_ms,\
         ack_p99_ms,push_per_second,consumed_per_second,pushed,consumed,completed,failed,\
         dead_lettered,dlq_direct,refused,errors,push_requests,pop_requests,ack_requests,\
         cpu_broker,cpu_postgres,cpu_loadgen,cpu_other,dedup_cache_bytes,ack_registry_bytes,\
         wake_gates,hotlist_entries\n",
    );
    for s in samples {
        let c = &s.counts;
        let _ = writeln!(
            out,
            "{:.1},{},{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.1},{:.1},{},{},{},{},{},{},\
             {},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{},{},{},{}",
            s.seconds,
            s.rss_kib,
            s.rss_anon_kib,
            s.segments_bytes,
            s.txns_bytes,
            s.consumers_bytes,
            s.dlq_bytes,
            s.partitions_bytes,
            s.live_segments,
            s.dlq_rows,
            s.lag,
            s.push_p99_ms,
            s.pop_p99_ms,
            s.ack_p99_ms,
            s.push_per_second,
            s.consumed_per_second,
            c.pushed,
            c.consumed(),
            c.completed,
            c.failed,
            c.dead_lettered,
            c.dlq_direct,
            c.refused,
            c.errors,
            c.push_requests,
            c.pop_requests,
            c.ack_requests,
            s.cpu_cores.broker,
            s.cpu_cores.postgres,
            s.cpu_cores.loadgen,
            s.cpu_cores.other,
            s.broker.dedup_cache_bytes,
            s.broker.ack_registry_bytes,
            s.broker.wake_gates,
            s.broker.hotlist_entries,
        );
    }
    out
}

fn plot(samples: &[Sample], analysis: &Analysis, settings: &Settings) -> String {
    let x_max = samples
        .last()
        .map_or(settings.minutes, |s| s.seconds / 60.0)
        .max(settings.minutes)
        .max(1e-3);
    let points = |f: &dyn Fn(&Sample) -> f64| -> Vec<(f64, f64)> {
        samples.iter().map(|s| (s.seconds / 60.0, f(s))).collect()
    };
    let rss = &analysis.rss;
    let warmup_minutes = rss.warmup_seconds / 60.0;
    let mut rss_series = vec![
        Series::new("VmRSS", COLORS[0], points(&|s| s.rss_kib as f64 / 1024.0)),
        Series::new(
            "RssAnon",
            COLORS[4],
            points(&|s| s.rss_anon_kib as f64 / 1024.0),
        ),
        Series::new(
            "dedup cache",
            COLORS[2],
            points(&|s| s.broker.dedup_cache_bytes as f64 / 1_048_576.0),
        ),
        Series::new(
            "ack registry",
            COLORS[3],
            points(&|s| s.broker.ack_registry_bytes as f64 / 1_048_576.0),
        ),
    ];
    if rss.verdict != "inconclusive" {
        let line = |x: f64| (rss.intercept_kib + rss.slope_kib_per_minute * x) / 1024.0;
        rss_series.push(Series {
            name: format!("fit {:+.1} KiB/min", rss.slope_kib_per_minute),
            color: COLORS[1],
            points: vec![(warmup_minutes, line(warmup_minutes)), (x_max, line(x_max))],
            dashed: true,
        });
    }
    let table_series: Vec<Series> = TABLES
        .iter()
        .enumerate()
        .map(|(i, table)| {
            Series::new(
                table,
                COLORS[i % COLORS.len()],
                points(&|s| mib(s.table_bytes()[i])),
            )
        })
        .collect();
    let latency_series = vec![
        Series::new("push", COLORS[0], points(&|s| s.push_p99_ms)),
        Series::new("pop (with messages)", COLORS[2], points(&|s| s.pop_p99_ms)),
        Series::new("ack", COLORS[1], points(&|s| s.ack_p99_ms)),
    ];
    let throughput_series = vec![
        Series::new("pushed", COLORS[0], points(&|s| s.push_per_second)),
        Series::new("consumed", COLORS[2], points(&|s| s.consumed_per_second)),
        Series {
            name: "target".to_owned(),
            color: COLORS[3],
            points: vec![(0.0, settings.target), (x_max, settings.target)],
            dashed: true,
        },
    ];
    let height = TOP + 4.0 * (PANEL_HEIGHT + PANEL_GAP);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="100%" height="100%" fill="white"/>
<text x="{LEFT}" y="26" font-size="17" font-weight="bold">Queen scale soak, {}</text>
<text x="{LEFT}" y="46" font-size="12">broker RSS after warm-up: {} ({:+.1} KiB/min, {:+.2}% of the mean per hour; flat below {:.0}% per 10 min); log_segments: {}</text>
<text x="{LEFT}" y="64" font-size="11">{}</text>
<text x="{LEFT}" y="79" font-size="11">{}</text>"#,
        utc_date(settings.started_at),
        rss.verdict,
        rss.slope_kib_per_minute,
        rss.percent_of_mean_per_hour,
        rss.flat_limit_percent_per_10_minutes,
        analysis.storage_verdict(),
        escape(&settings.lines()[0]),
        escape(&settings.lines()[1])
    );
    let panels = [
        Panel {
            title: "Broker memory",
            unit: "RSS (MiB)",
            series: &rss_series,
            scale: Scale::Linear,
            shade: Some(warmup_minutes),
        },
        Panel {
            title: "PostgreSQL table sizes (pg_total_relation_size, log scale)",
            unit: "size (MiB)",
            series: &table_series,
            scale: Scale::Log,
            shade: None,
        },
        Panel {
            title: "Request latency p99 per sampling interval",
            unit: "p99 (ms)",
            series: &latency_series,
            scale: Scale::Linear,
            shade: None,
        },
        Panel {
            title: "Throughput per sampling interval",
            unit: "messages per second",
            series: &throughput_series,
            scale: Scale::Linear,
            shade: None,
        },
    ];
    for (i, spec) in panels.iter().enumerate() {
        let top = TOP + i as f64 * (PANEL_HEIGHT + PANEL_GAP);
        panel(&mut out, top, x_max, spec);
    }
    out.push_str("</svg>\n");
    out
}

/// `YYYY-MM-DD HH:MM UTC`.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampling_period_is_30_s_or_a_twentieth_of_the_run() {
        assert_eq!(sample_period(30.0), Duration::from_secs(30));
        assert_eq!(sample_period(2.0), Duration::from_secs(6));
    }
}
