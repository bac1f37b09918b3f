//! Metrics: the process series (read from the components, no database) and
//! the cluster series (one database call, cached: `cluster.rs`), as a snapshot
//! ([`ProcessMetrics`], [`ClusterMetrics`]) and as a `prometheus-client`
//! [`Collector`] of `queen_*` families.
//!
//! Every label value is written escaped ([`Escaped`]): queue, tenant and
//! group names are client text.
//!
//! The collector encodes what it is handed: the observer takes the snapshot
//! (`Observer::scrape`), so a scrape reads each component once, under its own
//! short lock, and never waits on PostgreSQL for the process series.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use queen_sql::stats::ClusterRow;

use crate::stats::TotalsSnapshot;
use crate::{LimiterStats, MemoryStats, RetentionStats, SpoolStats};

mod cluster;

pub(crate) use cluster::ClusterCache;
pub use cluster::{ClusterMetrics, CLUSTER_READ_LIMIT, CLUSTER_TIMEOUT, CLUSTER_TTL, CLUSTER_WAIT};

/// What the process reports about itself.
#[derive(Debug, Clone)]
pub struct ProcessMetrics {
    /// Since the engine started.
    pub uptime: Duration,
    /// Request and message counters.
    pub totals: TotalsSnapshot,
    /// Connections the pool holds, idle ones, and requests waiting for one.
    pub pool: (usize, usize, usize),
    /// The pool's bound.
    pub pool_max: usize,
    /// The serving limiter.
    pub limiter: LimiterStats,
    /// Pops in progress (waiting or serving).
    pub pops_in_progress: usize,
    /// Pops parked on a queue's wake gate now, per queue key (`""`: the
    /// default tenant's discovery pops).
    pub parked: Vec<(String, usize)>,
    /// Hot-list rings and the partition names they hold.
    pub hotlist: (usize, usize),
    /// The bytes the hot-list rings take (an estimate from their sizes).
    pub hotlist_bytes: usize,
    /// Parked pops a wake gate woke, since start.
    pub pop_wakeups: u64,
    /// Parked pops' timed re-checks (their timer, not a gate, ended the
    /// wait), since start.
    pub pop_rechecks: u64,
    /// Hot-list reseed statements, and the rings they reseeded, since start.
    pub hotlist_reseeds: (u64, u64),
    /// The client-keyed maps.
    pub memory: MemoryStats,
    /// The push spool, if any.
    pub spool: Option<SpoolStats>,
    /// What retention removed since start.
    pub retention: RetentionStats,
    /// (push, pop) maintenance mode.
    pub maintenance: (bool, bool),
    /// CPU time, user and system.
    pub cpu: (Duration, Duration),
    /// Resident set size, bytes (0 where `/proc` is missing).
    pub rss_bytes: u64,
    /// The mesh's counters (`None`: no mesh).
    pub mesh: Option<crate::MeshStats>,
    /// The admin views' figures: partitions folded, and marks dropped
    /// because [`crate::MemoryStats::figures_marks`] stayed full, since
    /// start.
    pub figures: (u64, u64),
}

impl ProcessMetrics {
    /// Pops parked now, all queues.
    pub fn parked_total(&self) -> usize {
        self.parked.iter().map(|(_, n)| n).sum()
    }
}

/// CPU time (user, system) of this process.
pub(crate) fn cpu_times() -> (Duration, Duration) {
    use nix::sys::resource::{getrusage, UsageWho};
    let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else {
        return (Duration::ZERO, Duration::ZERO);
    };
    let duration = |tv: nix::sys::time::TimeVal| {
        Duration::from_secs(u64::try_from(tv.tv_sec()).unwrap_or(0))
            + Duration::from_micros(u64::try_from(tv.tv_usec()).unwrap_or(0))
    };
    (duration(usage.user_time()), duration(usage.system_time()))
}

/// Resident set size in bytes, from `/proc/self/statm` (0 without it).
pub(crate) fn rss_bytes() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .unwrap_or(0);
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|size| u64::try_from(size).ok())
        .unwrap_or(4096);
    pages * page
}

/// One scrape's worth of the engine's series, ready to encode.
#[derive(Debug)]
pub struct Scrape {
    /// The process series.
    pub process: ProcessMetrics,
    /// The cluster series (possibly a stale copy, see `cluster_fresh`).
    pub cluster: Arc<ClusterMetrics>,
    /// Whether the cluster series are up to date: the last read succeeded
    /// and the copy is not overdue by more than `CLUSTER_TIMEOUT`.
    pub cluster_fresh: bool,
    /// Flush size and commit latency histograms.
    pub(crate) histograms: Arc<crate::stats::Stats>,
}

/// Which per-queue series (queue, tenant and group labels) a scrape shows.
/// The broker-wide series are always shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueSeries {
    /// Every queue's (no auth, or an admin token).
    All,
    /// The queues of this tenant only (a token of the tenant).
    Tenant(Arc<str>),
    /// Each family summed over every queue, without labels (a scrape
    /// without a token, with `QUEEN_METRICS_AGGREGATE_QUEUES`).
    Aggregate,
    /// None (a scrape without a token, by default).
    Hidden,
}

/// A `prometheus-client` collector that encodes one [`Scrape`], showing the
/// per-queue series `queues` allows.
///
/// Registered in a registry made for one scrape (`Observer::scrape` returns
/// the data; the HTTP layer builds the registry around it).
#[derive(Debug)]
pub struct EngineCollector {
    /// The scrape.
    pub scrape: Arc<Scrape>,
    /// Whose queue series it shows.
    pub queues: QueueSeries,
}

fn gauge<N: prometheus_client::encoding::EncodeGaugeValue + std::fmt::Debug>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// Integer gauges, each (name, help, value).
fn gauges(
    encoder: &mut DescriptorEncoder<'_>,
    list: &[(&str, &str, i64)],
) -> Result<(), std::fmt::Error> {
    for &(name, help, value) in list {
        gauge(encoder, name, help, value)?;
    }
    Ok(())
}

/// Integer counters, each (name, help, value).
fn counters(
    encoder: &mut DescriptorEncoder<'_>,
    list: &[(&str, &str, u64)],
) -> Result<(), std::fmt::Error> {
    for &(name, help, value) in list {
        counter(encoder, name, help, value)?;
    }
    Ok(())
}

fn counter<N: prometheus_client::encoding::EncodeCounterValue + std::fmt::Debug>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error> {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// A label value, written escaped as the exposition format requires
/// (`\` as `\\`, `"` as `\"`, a line feed as `\n`): `prometheus-client`
/// writes a `&str` value as it is, so a queue named `a",tenant="b` would
/// otherwise end the value early, forge a label and break the scrape for
/// every scraper. Every label value of the engine's families goes through
/// this.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'l>(pub &'l str);

impl EncodeLabelValue for Escaped<'_> {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        use std::fmt::Write as _;
        let mut rest = self.0;
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

/// One series' labels: (name, escaped value) pairs.
type Labels<'l> = Vec<(&'static str, Escaped<'l>)>;

/// The labels of a queue's series: its tenant and name, from its
/// `naming::queue_key` (two tenants' queues of one name are two series).
fn queue_labels(key: &str) -> Labels<'_> {
    let (tenant, queue) = crate::naming::split_queue_key(key);
    vec![("tenant", Escaped(tenant)), ("queue", Escaped(queue))]
}

/// [`queue_labels`] and the consumer group.
fn group_labels<'l>(key: &'l str, group: &'l str) -> Labels<'l> {
    let mut labels = queue_labels(key);
    labels.push(("group", Escaped(group)));
    labels
}

/// A family of gauges, one per label set.
fn gauge_family<'l, N>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (Labels<'l>, N)>,
) -> Result<(), std::fmt::Error>
where
    N: prometheus_client::encoding::EncodeGaugeValue + std::fmt::Debug,
{
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in series {
        let metric = ConstGauge::new(value);
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

fn histogram(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    histogram: &Histogram,
) -> Result<(), std::fmt::Error> {
    histogram.encode(encoder.encode_descriptor(name, help, None, histogram.metric_type())?)
}

fn as_i64(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn as_i64_u(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl Collector for EngineCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let scrape = &*self.scrape;
        let p = &scrape.process;
        let t = &p.totals;
        let e = &mut encoder;
        gauge(
            e,
            "uptime_seconds",
            "Seconds since the broker started",
            p.uptime.as_secs_f64(),
        )?;
        counters(
            e,
            &[
                ("push_requests", "Push requests answered", t.push_requests),
                (
                    "push_messages",
                    "Messages stored or spooled by pushes",
                    t.push_messages,
                ),
                (
                    "push_buffered_messages",
                    "Messages spooled to disk",
                    t.push_buffered,
                ),
                ("pop_requests", "Pop requests answered", t.pop_requests),
                ("pop_messages", "Messages delivered by pops", t.pop_messages),
                ("pop_empty", "Pops answered with nothing", t.pop_empty),
                ("ack_requests", "Ack calls", t.ack_requests),
                ("transactions", "Transactions committed", t.transactions),
                (
                    "db_errors",
                    "Requests failed on a database error",
                    t.db_errors,
                ),
                ("pop_wakeups", "Parked pops a wake gate woke", p.pop_wakeups),
                (
                    "pop_rechecks",
                    "Parked pops that looked again on their timer",
                    p.pop_rechecks,
                ),
                (
                    "hotlist_reseed_statements",
                    "Hot-list reseed statements sent",
                    p.hotlist_reseeds.0,
                ),
                (
                    "hotlist_reseeds",
                    "Hot-list rings reseeded",
                    p.hotlist_reseeds.1,
                ),
                (
                    "figures_folded_partitions",
                    "Partitions whose admin-view figures this broker folded",
                    p.figures.0,
                ),
                (
                    "figures_marks_dropped",
                    "Figures marks dropped because the marks stayed full",
                    p.figures.1,
                ),
            ],
        )?;
        {
            let mut family =
                e.encode_descriptor("ack_messages", "Acks by outcome", None, MetricType::Counter)?;
            for (outcome, value) in [
                ("completed", t.ack_completed),
                ("failed", t.ack_failed),
                ("dlq", t.ack_dlq),
                ("refused", t.ack_refused),
            ] {
                ConstCounter::new(value).encode(family.encode_family(&[("outcome", outcome)])?)?;
            }
        }
        histogram(
            e,
            "fusion_flush_messages",
            "Messages per push flush",
            &scrape.histograms.flush_messages,
        )?;
        histogram(
            e,
            "fusion_commit_seconds",
            "Seconds a push flush's statement took, commit included",
            &scrape.histograms.flush_seconds,
        )?;
        let m = &p.memory;
        gauges(
            e,
            &[
                ("db_pool_size", "Connections the pool holds", p.pool.0),
                ("db_pool_idle", "Idle connections in the pool", p.pool.1),
                (
                    "db_pool_waiting",
                    "Requests waiting for a connection",
                    p.pool.2,
                ),
                ("db_pool_max", "The pool's bound", p.pool_max),
                (
                    "limiter_limit",
                    "Pop permits the Vegas limiter allows now",
                    p.limiter.limit,
                ),
                (
                    "limiter_in_flight",
                    "Pop permits held now",
                    p.limiter.in_flight,
                ),
                (
                    "pops_in_progress",
                    "Pops waiting or serving now",
                    p.pops_in_progress,
                ),
                (
                    "pops_parked",
                    "Pops parked on a wake gate now",
                    p.parked_total(),
                ),
                (
                    "hotlist_rings",
                    "Hot-list rings (queue, group)",
                    p.hotlist.0,
                ),
                (
                    "hotlist_entries",
                    "Partition names the hot-list rings hold",
                    p.hotlist.1,
                ),
                (
                    "hotlist_bytes",
                    "Bytes the hot-list rings take (estimated from their sizes)",
                    p.hotlist_bytes,
                ),
                ("wake_gates", "Wake gates held", m.wake_gates),
                (
                    "queue_cache_entries",
                    "Queue names the pop path's queue cache holds",
                    m.queue_cache_entries,
                ),
                (
                    "ack_registry_batches",
                    "Leased batches the ack registry holds",
                    m.ack_registry_batches,
                ),
                (
                    "ack_registry_bytes",
                    "Bytes the ack registry holds",
                    m.ack_registry_bytes,
                ),
                (
                    "dedup_cache_bytes",
                    "Bytes the push dedup cache holds",
                    m.dedup_cache_bytes,
                ),
                (
                    "figures_marks",
                    "Partitions the figures marks hold until the next fold",
                    m.figures_marks,
                ),
            ]
            .map(|(name, help, value)| (name, help, as_i64(value))),
        )?;
        gauge_family(
            e,
            "limiter_rtt_seconds",
            "Pop round trip: the window's minimum and the recent average",
            [("min", p.limiter.rtt_min), ("recent", p.limiter.rtt_recent)]
                .into_iter()
                .filter_map(|(kind, rtt)| {
                    Some((vec![("kind", Escaped(kind))], rtt?.as_secs_f64()))
                }),
        )?;
        let spool = p.spool.unwrap_or_default();
        gauges(
            e,
            &[
                ("spool_pending_messages", "Spooled pushes waiting to be drained", spool.pending),
                ("spool_pending_bytes", "Their bytes", spool.pending_bytes),
                (
                    "spool_failed_messages",
                    "Spooled pushes the drainer could not store",
                    spool.failed,
                ),
                (
                    "spool_held_messages",
                    "Spooled pushes held because their queue was full at drain (retried with backoff; included in spool_pending_messages)",
                    spool.held,
                ),
                ("spool_held_queues", "Queues with held spooled pushes", spool.held_queues),
                ("process_resident_memory_bytes", "Resident set size", p.rss_bytes),
            ]
            .map(|(name, help, value)| (name, help, as_i64_u(value))),
        )?;
        gauges(
            e,
            &[
                (
                    "maintenance_mode",
                    "1 while push maintenance mode is on",
                    i64::from(p.maintenance.0),
                ),
                (
                    "pop_maintenance_mode",
                    "1 while pop maintenance mode is on",
                    i64::from(p.maintenance.1),
                ),
            ],
        )?;
        counters(
            e,
            &[
                (
                    "spool_held_retries",
                    "Retries of held spooled pushes since start",
                    spool.held_retries,
                ),
                (
                    "partitions_removed",
                    "Empty idle partitions removed since start",
                    p.retention.partitions_removed,
                ),
            ],
        )?;
        gauge(
            e,
            "spool_oldest_age_seconds",
            "Age of the oldest spooled push waiting to be stored (0: none)",
            spool.oldest_age.map_or(0.0, |age| age.as_secs_f64()),
        )?;
        {
            let r = &p.retention;
            let mut family = e.encode_descriptor(
                "retention_removed_messages",
                "Messages removed by retention and eviction since start",
                None,
                MetricType::Counter,
            )?;
            for (kind, value) in [("retention", r.messages), ("eviction", r.evicted_messages)] {
                ConstCounter::new(value).encode(family.encode_family(&[("kind", kind)])?)?;
            }
        }
        for (name, help, seconds) in [
            ("process_cpu_user_seconds", "User CPU time", p.cpu.0),
            ("process_cpu_system_seconds", "System CPU time", p.cpu.1),
        ] {
            counter(e, name, help, seconds.as_secs_f64())?;
        }

        if let Some(mesh) = &p.mesh {
            let mut family = e.encode_descriptor(
                "mesh_hints",
                "Mesh hints since start, by direction and outcome",
                None,
                MetricType::Counter,
            )?;
            for (direction, outcome, value) in [
                ("sent", "sent", mesh.sent_hints),
                ("sent", "dropped_full", mesh.dropped_full),
                ("received", "applied", mesh.received_hints),
            ] {
                ConstCounter::new(value).encode(
                    family.encode_family(&[("direction", direction), ("outcome", outcome)])?,
                )?;
            }
            let mut family = e.encode_descriptor(
                "mesh_batches",
                "Mesh batches (datagrams or notifications) since start, by outcome",
                None,
                MetricType::Counter,
            )?;
            for (outcome, value) in [
                ("sent", mesh.sent_batches),
                ("send_error", mesh.send_errors),
                ("received", mesh.received_batches),
                ("dropped_unsigned", mesh.dropped_unsigned),
                ("dropped_malformed", mesh.dropped_malformed),
                ("dropped_replayed", mesh.dropped_replayed),
            ] {
                ConstCounter::new(value).encode(family.encode_family(&[("outcome", outcome)])?)?;
            }
        }

        // The cluster series.
        gauge(
            e,
            "cluster_up",
            "1 when the cluster series below are up to date (the last read succeeded and the copy is not overdue)",
            i64::from(scrape.cluster_fresh),
        )?;
        let age = scrape
            .cluster
            .read_at
            .and_then(|at| at.elapsed().ok())
            .map_or(-1.0, |age| age.as_secs_f64());
        gauge(
            e,
            "cluster_age_seconds",
            "Age of the cluster series (-1: never read)",
            age,
        )?;
        match &self.queues {
            QueueSeries::Hidden => Ok(()),
            QueueSeries::Aggregate => encode_aggregate(e, &scrape.cluster),
            QueueSeries::All => encode_queues(e, &scrape.cluster, |_| true),
            QueueSeries::Tenant(tenant) => encode_queues(e, &scrape.cluster, |key| {
                crate::naming::split_queue_key(key).0 == &**tenant
            }),
        }
    }
}

/// The queue of a cluster row (its `naming::queue_key`).
fn row_queue(row: &ClusterRow) -> &str {
    match row {
        ClusterRow::Queue { queue, .. } | ClusterRow::Group { queue, .. } => queue,
    }
}

/// The per-queue families, one series per queue (and group) whose key
/// `shown` accepts, labelled with tenant, queue (and group).
fn encode_queues(
    e: &mut DescriptorEncoder<'_>,
    cluster: &ClusterMetrics,
    shown: impl Fn(&str) -> bool,
) -> Result<(), std::fmt::Error> {
    let rows: Vec<&ClusterRow> = cluster
        .rows
        .iter()
        .filter(|row| shown(row_queue(row)))
        .collect();
    let queues = || {
        rows.iter().filter_map(|row| match row {
            ClusterRow::Queue {
                queue,
                partitions,
                messages,
                dead_letters,
            } => Some((queue.as_str(), *partitions, *messages, *dead_letters)),
            ClusterRow::Group { .. } => None,
        })
    };
    let groups = || {
        rows.iter().filter_map(|row| match row {
            ClusterRow::Group {
                queue,
                group,
                lag_messages,
                lag_seconds,
                partitions_with_lag,
            } => Some((
                queue.as_str(),
                group.as_str(),
                *lag_messages,
                *lag_seconds,
                *partitions_with_lag,
            )),
            ClusterRow::Queue { .. } => None,
        })
    };
    gauge_family(
        e,
        "queue_partitions",
        "Partitions per queue",
        queues().map(|(q, n, _, _)| (queue_labels(q), n)),
    )?;
    gauge_family(
        e,
        "queue_messages",
        "Live messages per queue",
        queues().map(|(q, _, n, _)| (queue_labels(q), n)),
    )?;
    gauge_family(
        e,
        "queue_depth",
        QUEUE_DEPTH_HELP,
        queues().map(|(q, _, live, _)| (queue_labels(q), queue_depth(cluster, q, live))),
    )?;
    gauge_family(
        e,
        "dlq_messages",
        "Dead letters per queue",
        queues().map(|(q, _, _, n)| (queue_labels(q), n)),
    )?;
    gauge_family(
        e,
        "consumer_lag_messages",
        "Messages behind, per queue and group",
        groups().map(|(q, g, n, _, _)| (group_labels(q, g), n)),
    )?;
    gauge_family(
        e,
        "consumer_lag_seconds",
        "Age of the oldest unconsumed message, per queue and group",
        groups().map(|(q, g, _, n, _)| (group_labels(q, g), n)),
    )?;
    gauge_family(
        e,
        "consumer_partitions_with_lag",
        "Partitions with lag, per queue and group",
        groups().map(|(q, g, _, _, n)| (group_labels(q, g), n)),
    )
}

const QUEUE_DEPTH_HELP: &str =
    "Messages the queue's least advanced group has not consumed (live messages when it has none)";

/// A queue's depth: its most lagging group's lag, or its live messages.
fn queue_depth(cluster: &ClusterMetrics, queue: &str, live: i64) -> i64 {
    cluster.queue_lag(queue).map_or(live, |(lag, _)| lag)
}

/// The per-queue families summed over every queue (the largest age for
/// `consumer_lag_seconds`), one unlabelled series each: what a scraper
/// without a token sees with `QUEEN_METRICS_AGGREGATE_QUEUES`.
fn encode_aggregate(
    e: &mut DescriptorEncoder<'_>,
    cluster: &ClusterMetrics,
) -> Result<(), std::fmt::Error> {
    let (mut partitions, mut messages, mut depth, mut dead) = (0i64, 0i64, 0i64, 0i64);
    let (mut lag, mut lag_seconds, mut lagging) = (0i64, 0i64, 0i64);
    for row in &cluster.rows {
        match row {
            ClusterRow::Queue {
                queue,
                partitions: p,
                messages: m,
                dead_letters: d,
            } => {
                partitions += *p;
                messages += *m;
                depth += queue_depth(cluster, queue, *m);
                dead += *d;
            }
            ClusterRow::Group {
                lag_messages,
                lag_seconds: seconds,
                partitions_with_lag,
                ..
            } => {
                lag += *lag_messages;
                lag_seconds = lag_seconds.max(*seconds);
                lagging += *partitions_with_lag;
            }
        }
    }
    gauge(e, "queue_partitions", "Partitions, all queues", partitions)?;
    gauge(e, "queue_messages", "Live messages, all queues", messages)?;
    gauge(e, "queue_depth", "Unconsumed messages, all queues", depth)?;
    gauge(e, "dlq_messages", "Dead letters, all queues", dead)?;
    gauge(
        e,
        "consumer_lag_messages",
        "Messages behind, all queues and groups",
        lag,
    )?;
    gauge(
        e,
        "consumer_lag_seconds",
        "Age of the oldest unconsumed message, all queues and groups",
        lag_seconds,
    )?;
    gauge(
        e,
        "consumer_partitions_with_lag",
        "Partitions with lag, all queues and groups",
        lagging,
    )
}
