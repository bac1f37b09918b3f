//! What the broker reports about itself: [`Observer`] reads every
//! component's figures (each under its own short lock, no database) into
//! the process series, adds the cached cluster series for a scrape
//! (`metrics.rs`), and writes the per-minute statistics rows
//! (`stats_writer.rs`).
//!
//! It holds a handle on each component it reads and changes none of them.

use std::sync::Arc;

use crate::ack::Acks;
use crate::cluster_state::ClusterState;
use crate::mesh::MeshOut;
use crate::metrics::{ClusterCache, ProcessMetrics, Scrape};
use crate::pop::Serving;
use crate::push::{Fusion, Pushes};
use crate::retention::Retention;
use crate::spool::SpoolStats;
use crate::stats::Stats;
use crate::stats_writer::WriterState;
use crate::{EngineError, LimiterStats, PushStats, RetentionStats};

/// The sizes of the engine's maps keyed by names clients choose, and how each
/// is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    /// Wake gates: one per queue name popped; idle ones are swept when the
    /// map doubles (at least 1,024), so about the parked pops' gates plus as
    /// many idle ones.
    pub wake_gates: usize,
    /// The pop path's queue cache: entries past their TTL (1 s for a
    /// missing queue, 5 s for one that exists) are swept when the map
    /// doubles; at most 65,536.
    pub queue_cache_entries: usize,
    /// Leased batches the ack registry remembers: at most 100,000.
    pub ack_registry_batches: usize,
    /// Their bytes: at most 64 MiB.
    pub ack_registry_bytes: usize,
    /// The push dedup cache, names included: at most `QUEEN_DEDUP_CACHE_MB`.
    pub dedup_cache_bytes: usize,
    /// Partitions the admin views' figures marks hold until the next fold
    /// or publish: at most 65,536 (`figures::MAX_MARKS`).
    pub figures_marks: usize,
}

/// The components an [`Observer`] reads.
pub(crate) struct Observed {
    pub(crate) pool: deadpool_postgres::Pool,
    pub(crate) identity: (String, u16),
    pub(crate) stats: Arc<Stats>,
    pub(crate) serving: Arc<Serving>,
    pub(crate) acks: Arc<Acks>,
    pub(crate) fusion: Arc<Fusion>,
    pub(crate) pushes: Arc<Pushes>,
    pub(crate) retention: Arc<Retention>,
    pub(crate) cluster_state: Arc<ClusterState>,
    pub(crate) mesh: Option<MeshOut>,
    pub(crate) figures: crate::figures::Gauge,
}

/// The broker's figures, for metrics, statistics rows and tests.
pub struct Observer {
    parts: Observed,
    cluster: Arc<ClusterCache>,
    writer: WriterState,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("push", &self.push_stats())
            .finish_non_exhaustive()
    }
}

impl Observer {
    pub(crate) fn new(parts: Observed) -> Arc<Observer> {
        Arc::new(Observer {
            parts,
            cluster: Arc::default(),
            writer: WriterState::default(),
        })
    }

    /// The process series now: every component's figures, no database.
    pub fn process_metrics(&self) -> ProcessMetrics {
        let parts = &self.parts;
        let status = parts.pool.status();
        let hotlist = parts.serving.hotlist_size();
        ProcessMetrics {
            uptime: parts.stats.uptime(),
            totals: parts.stats.totals(),
            pool: (status.size, status.available, status.waiting),
            pool_max: status.max_size,
            limiter: parts.serving.limiter_stats(),
            pops_in_progress: parts.serving.in_progress(),
            parked: parts.serving.parked(),
            hotlist: (hotlist.0, hotlist.1),
            hotlist_bytes: hotlist.2,
            pop_wakeups: parts.serving.wakeups(),
            pop_rechecks: parts.serving.rechecks(),
            hotlist_reseeds: parts.serving.reseeds(),
            memory: self.memory_stats(),
            spool: self.spool_stats(),
            retention: parts.retention.stats(),
            maintenance: (
                parts.cluster_state.maintenance(),
                parts.cluster_state.pop_maintenance(),
            ),
            cpu: crate::metrics::cpu_times(),
            rss_bytes: crate::metrics::rss_bytes(),
            mesh: self.mesh_stats(),
            figures: {
                let (folded, _, dropped) = parts.figures.counts();
                (folded, dropped)
            },
        }
    }

    /// One scrape: the process series, and the cluster series from the
    /// cache of one database call (`metrics::ClusterCache`: read again in
    /// the background once `metrics::CLUSTER_TTL`, or ten times the last
    /// read's duration, passed; a scrape waits for that read at most
    /// `metrics::CLUSTER_WAIT`, else answers with the last good copy).
    pub async fn scrape(&self) -> Scrape {
        let (cluster, cluster_fresh) = self.cluster.get(&self.parts.pool).await;
        Scrape {
            process: self.process_metrics(),
            cluster,
            cluster_fresh,
            histograms: Arc::clone(&self.parts.stats),
        }
    }

    /// Write this broker's statistics rows for the current minute now (the
    /// writer does every `stats_interval`): one statement. Returns the queue
    /// rows written; on failure the counts wait for the next write.
    pub async fn write_stats(&self) -> Result<usize, EngineError> {
        let process = self.process_metrics();
        let (hostname, port) = &self.parts.identity;
        let cluster = async { self.cluster.get(&self.parts.pool).await.0 };
        self.writer
            .write(
                &self.parts.pool,
                &self.parts.stats,
                &process,
                cluster,
                (hostname, *port),
            )
            .await
    }

    /// True once the pop path began shutting down (the statistics tasks
    /// stop then).
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.parts.serving.is_shutting_down()
    }

    /// One event-loop lag sample (the sampler task's).
    pub(crate) fn record_event_loop_lag(&self, late: std::time::Duration) {
        self.parts.stats.event_loop_lag(late);
    }

    /// What the maps keyed by client-chosen names hold now, with their
    /// bounds (see [`MemoryStats`]).
    pub fn memory_stats(&self) -> MemoryStats {
        let (wake_gates, queue_cache_entries) = self.parts.serving.memory();
        let (ack_registry_batches, ack_registry_bytes) = self.parts.acks.registry_size();
        MemoryStats {
            wake_gates,
            queue_cache_entries,
            ack_registry_batches,
            ack_registry_bytes,
            dedup_cache_bytes: usize::try_from(self.push_stats().dedup_cache_bytes)
                .unwrap_or(usize::MAX),
            figures_marks: self.parts.figures.counts().1,
        }
    }

    /// What the push spool holds; `None` without a spool.
    pub fn spool_stats(&self) -> Option<SpoolStats> {
        self.parts.pushes.spool().map(|spool| spool.stats())
    }

    /// Counters of the push path since the engine started.
    pub fn push_stats(&self) -> PushStats {
        self.parts.fusion.stats()
    }

    /// (positional, by-hash) ack calls since start: how often the registry
    /// turned a full-batch ack into one cursor advance.
    pub fn ack_stats(&self) -> (u64, u64) {
        self.parts.acks.stats()
    }

    /// What retention and eviction removed since the engine started.
    pub fn retention_stats(&self) -> RetentionStats {
        self.parts.retention.stats()
    }

    /// The serving limiter's current figures.
    pub fn limiter_stats(&self) -> LimiterStats {
        self.parts.serving.limiter_stats()
    }

    /// Connections the pop path has checked out since start: each is at
    /// least one SQL round trip. A caught-up queue polled through the
    /// hot-list costs none.
    pub fn pop_checkouts(&self) -> u64 {
        self.parts.serving.checkouts()
    }

    /// Pops in progress right now, waiting or serving.
    pub fn pops_in_progress(&self) -> usize {
        self.parts.serving.in_progress()
    }

    /// Pooled connections handed out right now.
    pub fn connections_in_use(&self) -> usize {
        let status = self.parts.pool.status();
        status.size.saturating_sub(status.available)
    }

    /// What the mesh has sent and received (`None`: no mesh).
    pub fn mesh_stats(&self) -> Option<crate::MeshStats> {
        self.parts.mesh.as_ref().map(MeshOut::stats)
    }

    /// What this broker knows of its peers (`None`: no mesh).
    pub fn mesh_state(&self) -> Option<crate::MeshState> {
        self.parts.mesh.as_ref().map(MeshOut::state)
    }

    /// The hot-list: (rings, partition names they hold).
    pub fn hotlist_size(&self) -> (usize, usize) {
        let (rings, names, _) = self.parts.serving.hotlist_size();
        (rings, names)
    }
}
