//! Results: one record per case, the machine they ran on, a human table and a
//! JSON document.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::cpu::Usage;
use crate::env::Env;
use crate::error::{Context, Result};
use crate::stats;

/// The machine and build a run measured.
#[derive(Debug, Serialize)]
pub(crate) struct Machine {
    pub(crate) nproc: usize,
    pub(crate) cpu_model: String,
    pub(crate) memory_mib: u64,
    pub(crate) kernel: String,
    pub(crate) postgres_version: String,
    pub(crate) git_commit: String,
    /// True when the working tree had uncommitted changes to tracked files.
    pub(crate) git_dirty: bool,
    pub(crate) broker_binary: String,
}

/// Request latency percentiles, in milliseconds.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Latency {
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
    pub(crate) mean: f64,
}

impl Latency {
    /// Percentiles (nearest rank) of request latencies in microseconds.
    pub(crate) fn from_micros(mut micros: Vec<u32>) -> Latency {
        if micros.is_empty() {
            return Latency::default();
        }
        micros.sort_unstable();
        let n = micros.len();
        // Nearest rank: the smallest value with at least `permille`/1000 of
        // the samples at or below it.
        let rank = |permille: usize| {
            let position = (permille * n).div_ceil(1000);
            f64::from(micros[position.clamp(1, n) - 1]) / 1000.0
        };
        let sum: u64 = micros.iter().map(|&m| u64::from(m)).sum();
        Latency {
            p50: rank(500),
            p90: rank(900),
            p99: rank(990),
            max: f64::from(micros[n - 1]) / 1000.0,
            mean: sum as f64 / n as f64 / 1000.0,
        }
    }
}

/// The figures of one case.
#[derive(Debug, Serialize)]
pub(crate) struct CaseResult {
    pub(crate) name: String,
    pub(crate) batch: usize,
    pub(crate) partitions: usize,
    pub(crate) producers: usize,
    /// Measured seconds: from the window's start to its last response.
    pub(crate) seconds: f64,
    pub(crate) requests: u64,
    /// Messages committed (every item answered `queued`) in the window.
    pub(crate) messages: u64,
    pub(crate) warmup_messages: u64,
    pub(crate) messages_per_second: f64,
    pub(crate) requests_per_second: f64,
    pub(crate) latency_ms: Latency,
    /// `pg_stat_database.xact_commit` of the case's database over the window
    /// (every committed transaction, read-only ones included).
    pub(crate) commits: i64,
    pub(crate) commits_per_message: f64,
    pub(crate) rollbacks: i64,
    /// Transaction ids assigned cluster-wide over the window: transactions that wrote.
    pub(crate) write_xids: i64,
    pub(crate) write_xids_per_message: f64,
    /// `queen.log_segments` rows written in the window.
    pub(crate) segments: i64,
    pub(crate) messages_per_segment: f64,
    /// Stored (zstd) blob bytes per message.
    pub(crate) stored_bytes_per_message: f64,
    /// WAL bytes per message, cluster-wide.
    pub(crate) wal_bytes_per_message: f64,
    /// CPU cores used during the window, per process group.
    pub(crate) cpu_cores: Usage,
    /// Messages committed in each second of the window (by response time),
    /// to show whether throughput holds or decays within a case.
    pub(crate) messages_per_second_timeline: Vec<u64>,
}

/// A whole run.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) tool: &'static str,
    pub(crate) scenario: &'static str,
    pub(crate) started_at_unix: u64,
    pub(crate) machine: Machine,
    pub(crate) settings: serde_json::Value,
    pub(crate) cases: Vec<CaseResult>,
}

impl Report {
    pub(crate) fn new(
        scenario: &'static str,
        started_at: SystemTime,
        machine: Machine,
        settings: serde_json::Value,
    ) -> Report {
        Report {
            tool: "queen-load",
            scenario,
            started_at_unix: started_at
                .duration_since(UNIX_EPOCH)
                .map(|elapsed| elapsed.as_secs())
                .unwrap_or_default(),
            machine,
            settings,
            cases: Vec::new(),
        }
    }

    /// The JSON document, pretty-printed.
    pub(crate) fn json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).context("serialise the report")
    }

    /// The human table.
    pub(crate) fn table(&self) -> String {
        let m = &self.machine;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "queen-load {}: {} ({} cpus, {} MiB), PostgreSQL {}, commit {}{}",
            self.scenario,
            m.cpu_model,
            m.nproc,
            m.memory_mib,
            m.postgres_version,
            short(&m.git_commit),
            if m.git_dirty { " (dirty)" } else { "" }
        );
        let _ = writeln!(
            out,
            "{:<16} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7} {:>7} {:>8} {:>7} {:>7} {:>21}",
            "case",
            "msg/s",
            "req/s",
            "p50 ms",
            "p99 ms",
            "commits",
            "commit/msg",
            "xid/msg",
            "segs",
            "msg/seg",
            "B/msg",
            "WAL/msg",
            "cpu brk/pg/load/other"
        );
        for case in &self.cases {
            let _ = writeln!(
                out,
                "{:<16} {:>9.0} {:>8.0} {:>8.2} {:>8.2} {:>8} {:>10.4} {:>7.4} {:>7} {:>8.1} {:>7.0} {:>7.0} {:>21}",
                case.name,
                case.messages_per_second,
                case.requests_per_second,
                case.latency_ms.p50,
                case.latency_ms.p99,
                case.commits,
                case.commits_per_message,
                case.write_xids_per_message,
                case.segments,
                case.messages_per_segment,
                case.stored_bytes_per_message,
                case.wal_bytes_per_message,
                format!(
                    "{:.2}/{:.2}/{:.2}/{:.2}",
                    case.cpu_cores.broker,
                    case.cpu_cores.postgres,
                    case.cpu_cores.loadgen,
                    case.cpu_cores.other
                ),
            );
        }
        out
    }
}

/// One line for the progress log.
pub(crate) fn summary_line(case: &CaseResult) -> String {
    format!(
        "{:.0} msg/s, {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, {:.4} commits/msg, {:.1} msg/segment, \
         per second {:?}",
        case.messages_per_second,
        case.requests_per_second,
        case.latency_ms.p50,
        case.latency_ms.p99,
        case.commits_per_message,
        case.messages_per_segment,
        case.messages_per_second_timeline
    )
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// Describe the machine, the PostgreSQL server and the checkout.
pub(crate) async fn machine(env: &Env, broker: &Path) -> Result<Machine> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map_or_else(|| "unknown".to_owned(), |(_, name)| name.trim().to_owned());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_kib: u64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|text| text.trim().to_owned())
        .unwrap_or_default();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| Path::new("."));
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let git_commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    let git_dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|text| !text.is_empty());
    Ok(Machine {
        nproc: std::thread::available_parallelism().map_or(0, std::num::NonZeroUsize::get),
        cpu_model,
        memory_mib: memory_kib / 1024,
        kernel,
        postgres_version: stats::server_version(&env.admin).await?,
        git_commit,
        git_dirty,
        broker_binary: broker.display().to_string(),
    })
}
