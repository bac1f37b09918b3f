//! Results: the machine a run measured, one section per scenario (each
//! scenario module defines its record and its table), the derived sections
//! (push as a ratio to the ceiling, issue 6's targets), as human tables and one
//! JSON document.

use std::fmt::{Display, Write as _};
use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::ceiling::CeilingResult;
use crate::env::Env;
use crate::error::{Context, Result};
use crate::latency::LatencyResult;
use crate::measure::stats;
use crate::pop::PopResult;
use crate::push::PushResult;

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
    /// When the broker binary was built (its modification time, Unix
    /// seconds): `git_commit` is the checkout at run time, which matches the
    /// binary only when it was built from it (as `cargo xtask bench` does).
    pub(crate) broker_binary_modified_unix: u64,
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

/// A whole run: the figures of every scenario that ran, in one document.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) tool: &'static str,
    /// `push`, `pop`, `latency`, `ceiling`, `soak`, `streams`, `observe` or `all`.
    pub(crate) scenario: &'static str,
    pub(crate) started_at_unix: u64,
    pub(crate) machine: Machine,
    /// Each scenario's settings, by scenario name, and `postgresql`: the
    /// `--pg-setting`s and the values the server ran with.
    pub(crate) settings: serde_json::Map<String, serde_json::Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) push: Vec<PushResult>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) ceiling: Vec<CeilingResult>,
    /// Every push case next to the ceiling case of the same shape.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) push_vs_ceiling: Vec<Ratio>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) pop: Vec<PopResult>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) latency: Vec<LatencyResult>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) soak: Vec<crate::soak::SoakResult>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) streams: Vec<crate::streams::StreamsResult>,
    /// The `scale` scenario's cases (issue 20), one JSON object each, with a
    /// `case` field naming it; their tables are printed as they finish.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) scale: Vec<serde_json::Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) observe: Vec<crate::observe::ObserveResult>,
    /// Issue 6's targets, for those whose figures this run measured.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) targets: Vec<Target>,
    /// Cases not run, and why (e.g. the ack route is not there yet).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) skipped: Vec<Skipped>,
    /// Cases whose window still had more than `max_other_cpu` cores of other
    /// work on the machine after every attempt: read their figures with care.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) disturbed: Vec<String>,
    /// The limit of other work (cores) above which a case is disturbed.
    pub(crate) max_other_cpu: f64,
    /// Scenarios that failed, with the error; their finished cases are kept.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) failures: Vec<String>,
}

/// A push case as a fraction of what PostgreSQL alone absorbs.
#[derive(Debug, Serialize)]
pub(crate) struct Ratio {
    pub(crate) push_case: String,
    pub(crate) ceiling_case: String,
    pub(crate) brokers: usize,
    pub(crate) push_messages_per_second: f64,
    pub(crate) ceiling_messages_per_second: f64,
    /// push / ceiling messages per second.
    pub(crate) ratio: f64,
    /// The `+build` ceiling of the same shape (writers build each segment
    /// before its flush), when it ran.
    pub(crate) ceiling_with_build_messages_per_second: Option<f64>,
    /// push / `+build` ceiling.
    pub(crate) ratio_with_build: Option<f64>,
    pub(crate) push_commits_per_message: f64,
    pub(crate) ceiling_commits_per_message: f64,
    pub(crate) push_cpu_machine: f64,
    pub(crate) ceiling_cpu_machine: f64,
}

/// One of issue 6's targets.
#[derive(Debug, Serialize)]
pub(crate) struct Target {
    pub(crate) target: String,
    /// How it was computed, from which cases.
    pub(crate) measured_as: String,
    pub(crate) value: f64,
    pub(crate) goal: String,
    pub(crate) met: bool,
}

/// A case that did not run.
#[derive(Debug, Serialize)]
pub(crate) struct Skipped {
    pub(crate) scenario: &'static str,
    pub(crate) case: String,
    pub(crate) reason: String,
}

impl Report {
    pub(crate) fn new(
        scenario: &'static str,
        started_at: SystemTime,
        machine: Machine,
        max_other_cpu: f64,
    ) -> Report {
        Report {
            tool: "queen-load",
            scenario,
            started_at_unix: started_at
                .duration_since(UNIX_EPOCH)
                .map(|elapsed| elapsed.as_secs())
                .unwrap_or_default(),
            machine,
            settings: serde_json::Map::new(),
            push: Vec::new(),
            ceiling: Vec::new(),
            push_vs_ceiling: Vec::new(),
            pop: Vec::new(),
            latency: Vec::new(),
            soak: Vec::new(),
            scale: Vec::new(),
            streams: Vec::new(),
            observe: Vec::new(),
            targets: Vec::new(),
            skipped: Vec::new(),
            disturbed: Vec::new(),
            max_other_cpu,
            failures: Vec::new(),
        }
    }

    /// True when no case finished.
    pub(crate) fn is_empty(&self) -> bool {
        self.push.is_empty()
            && self.ceiling.is_empty()
            && self.pop.is_empty()
            && self.latency.is_empty()
            && self.soak.is_empty()
            && self.scale.is_empty()
            && self.streams.is_empty()
            && self.observe.is_empty()
            && self.skipped.is_empty()
    }

    /// Fill in the derived sections: push against the ceiling, and the targets.
    pub(crate) fn derive(&mut self) {
        self.push_vs_ceiling = self
            .push
            .iter()
            .filter_map(|push| {
                let ceiling = self
                    .ceiling
                    .iter()
                    .find(|c| c.shape == push.shape && c.build == "pool")?;
                let with_build = self
                    .ceiling
                    .iter()
                    .find(|c| c.shape == push.shape && c.build == "inline")
                    .map(|c| c.messages_per_second);
                Some(Ratio {
                    push_case: push.name.clone(),
                    ceiling_case: ceiling.name.clone(),
                    brokers: push.brokers,
                    push_messages_per_second: push.messages_per_second,
                    ceiling_messages_per_second: ceiling.messages_per_second,
                    ratio: ratio(push.messages_per_second, ceiling.messages_per_second),
                    ceiling_with_build_messages_per_second: with_build,
                    ratio_with_build: with_build
                        .map(|build| ratio(push.messages_per_second, build)),
                    push_commits_per_message: push.writes.commits_per_message,
                    ceiling_commits_per_message: ceiling.writes.commits_per_message,
                    push_cpu_machine: push.cpu_cores.machine,
                    ceiling_cpu_machine: ceiling.cpu_cores.machine,
                })
            })
            .collect();
        self.targets = targets(self);
        let limit = self.max_other_cpu;
        let mut disturbed = Vec::new();
        let mut note = |scenario: &str, name: &str, other: f64, attempts: u32| {
            if other > limit {
                disturbed.push(format!(
                    "{scenario} {name}: {other:.2} cores of other work (after {attempts} attempts)"
                ));
            }
        };
        for c in &self.push {
            note("push", &c.name, c.cpu_cores.other, c.attempts);
        }
        for c in &self.ceiling {
            note("ceiling", &c.name, c.cpu_cores.other, c.attempts);
        }
        for c in &self.pop {
            note("pop", &c.name, c.cpu_cores.other, c.attempts);
        }
        for c in &self.latency {
            note("latency", &c.name, c.cpu_cores.other, c.attempts);
        }
        self.disturbed = disturbed;
    }

    /// The JSON document, pretty-printed.
    pub(crate) fn json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).context("serialise the report")
    }

    /// The human tables, one per section that has rows.
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
        let pg_settings: Vec<&str> = self
            .settings
            .get("postgresql")
            .and_then(|pg| pg.get("pg_settings"))
            .and_then(serde_json::Value::as_array)
            .map(|list| list.iter().filter_map(serde_json::Value::as_str).collect())
            .unwrap_or_default();
        if !pg_settings.is_empty() {
            let _ = writeln!(out, "PostgreSQL settings: {}", pg_settings.join(" "));
        }
        let cpu_note = "cpu = cores used in the window: broker/postgres/load generator/other";
        section(
            &mut out,
            &self.push,
            format_args!("push ({cpu_note})"),
            crate::push::table,
        );
        section(
            &mut out,
            &self.ceiling,
            format_args!(
                "ceiling: PostgreSQL alone, one statement per flush, no broker ({cpu_note})"
            ),
            crate::ceiling::table,
        );
        section(
            &mut out,
            &self.push_vs_ceiling,
            "push / ceiling (same batch, partitions, concurrency; +build: the ceiling whose \
             writers build every segment before its flush)",
            ratio_table,
        );
        section(
            &mut out,
            &self.pop,
            format_args!("pop ({cpu_note})"),
            crate::pop::table,
        );
        section(
            &mut out,
            &self.latency,
            format_args!("latency: push send to pop receive, one message at a time ({cpu_note})"),
            crate::latency::table,
        );
        section(
            &mut out,
            &self.soak,
            "soak: storage over time while retention sweeps",
            crate::soak::table,
        );
        section(
            &mut out,
            &self.streams,
            "streams: POST /streams/v1/cycle, state upserts and one sink push per cycle",
            crate::streams::table,
        );
        section(
            &mut out,
            &self.observe,
            "observe: push throughput, quiet vs statistics rows and a scrape every second",
            crate::observe::table,
        );
        list(&mut out, "issue 6 targets", &self.targets, |t| {
            format!(
                "[{}] {}: {} (goal {}) from {}",
                if t.met { "met" } else { "MISSED" },
                t.target,
                format_value(t.value, &t.goal),
                t.goal,
                t.measured_as
            )
        });
        list(&mut out, "skipped", &self.skipped, |s| {
            format!("{} {}: {}", s.scenario, s.case, s.reason)
        });
        list(
            &mut out,
            format_args!(
                "disturbed (other work above {:.2} cores in the window)",
                self.max_other_cpu
            ),
            &self.disturbed,
            String::clone,
        );
        list(&mut out, "FAILED", &self.failures, String::clone);
        out
    }
}

/// A section of the tables: a blank line, `title`, then `table(rows)`;
/// nothing when there are no rows.
fn section<T>(out: &mut String, rows: &[T], title: impl Display, table: fn(&[T]) -> String) {
    if !rows.is_empty() {
        let _ = writeln!(out, "\n{title}");
        out.push_str(&table(rows));
    }
}

/// A section listing `items`, one indented `line` each; nothing when there
/// are none.
fn list<T>(out: &mut String, title: impl Display, items: &[T], line: impl Fn(&T) -> String) {
    if !items.is_empty() {
        let _ = writeln!(out, "\n{title}");
        for item in items {
            let _ = writeln!(out, "  {}", line(item));
        }
    }
}

/// The push / ceiling table.
fn ratio_table(ratios: &[Ratio]) -> String {
    let mut table = Table::new(&[
        ("push case", 20),
        ("push/s", 10),
        ("ceiling/s", 10),
        ("ratio", 7),
        ("+build/s", 10),
        ("ratio", 7),
        ("push c/msg", 11),
        ("ceil c/msg", 11),
        ("push cpu", 9),
        ("ceil cpu", 9),
    ]);
    for r in ratios {
        let (build, build_ratio) =
            match (r.ceiling_with_build_messages_per_second, r.ratio_with_build) {
                (Some(build), Some(value)) => (fixed(build, 0), percent(value)),
                _ => ("-".to_owned(), "-".to_owned()),
            };
        table.row([
            r.push_case.clone(),
            fixed(r.push_messages_per_second, 0),
            fixed(r.ceiling_messages_per_second, 0),
            percent(r.ratio),
            build,
            build_ratio,
            fixed(r.push_commits_per_message, 4),
            fixed(r.ceiling_commits_per_message, 4),
            fixed(r.push_cpu_machine, 2),
            fixed(r.ceiling_cpu_machine, 2),
        ]);
    }
    table.finish()
}

/// A text table: a row of column titles, then one row per case; the first
/// column left-aligned, the others right-aligned, one space apart.
pub(crate) struct Table {
    widths: Vec<usize>,
    out: String,
}

impl Table {
    /// A table of `columns`: each a title and a width (a wider cell takes
    /// more room and shifts the rest of its row).
    pub(crate) fn new(columns: &[(&str, usize)]) -> Table {
        let mut table = Table {
            widths: columns.iter().map(|&(_, width)| width).collect(),
            out: String::new(),
        };
        table.row(columns.iter().map(|&(title, _)| title));
        table
    }

    /// Add a row: one cell per column.
    pub(crate) fn row<C: Display>(&mut self, cells: impl IntoIterator<Item = C>) {
        for (index, (cell, &width)) in cells.into_iter().zip(&self.widths).enumerate() {
            let _ = if index == 0 {
                write!(self.out, "{cell:<width$}")
            } else {
                write!(self.out, " {cell:>width$}")
            };
        }
        self.out.push('\n');
    }

    /// The table's text.
    pub(crate) fn finish(self) -> String {
        self.out
    }
}

/// `value` with `decimals` digits after the point, for a table cell.
pub(crate) fn fixed(value: f64, decimals: usize) -> String {
    format!("{value:.decimals$}")
}

/// A fraction as a whole percentage: `0.634` is `63%`.
fn percent(fraction: f64) -> String {
    format!("{:.0}%", fraction * 100.0)
}

/// `a / b`, 0 when `b` is 0.
pub(crate) fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

fn format_value(value: f64, goal: &str) -> String {
    if goal.ends_with("ms") {
        format!("{value:.2} ms")
    } else {
        percent(value)
    }
}

/// Issue 6's and issue 12's targets, each from the cases this run has.
fn targets(report: &Report) -> Vec<Target> {
    let mut targets = Vec::new();
    // Push with batch 1000 across 100 partitions at >= 60% of the ceiling.
    for r in report
        .push_vs_ceiling
        .iter()
        .filter(|r| r.brokers == 1 && r.push_case.starts_with("b1000 p100 "))
    {
        targets.push(Target {
            target: "push batch 1000 x 100 partitions / ceiling".to_owned(),
            measured_as: format!("push {} / ceiling {}", r.push_case, r.ceiling_case),
            value: r.ratio,
            goal: ">= 60%".to_owned(),
            met: r.ratio >= 0.60,
        });
    }
    // Consume with acks at >= 50% of the push rate (batch 1000, 100
    // partitions, 16 producers: the push figure the first target is about).
    let push_reference = report
        .push
        .iter()
        .filter(|p| p.brokers == 1 && p.shape.batch == 1000 && p.shape.partitions == 100)
        .max_by(|a, b| a.messages_per_second.total_cmp(&b.messages_per_second));
    if let Some(push) = push_reference {
        for pop in report.pop.iter().filter(|p| p.mode == "ack") {
            let value = ratio(pop.messages_per_second, push.messages_per_second);
            targets.push(Target {
                target: "consume with acks / push".to_owned(),
                measured_as: format!("pop {} / push {}", pop.name, push.name),
                value,
                goal: ">= 50%".to_owned(),
                met: value >= 0.50,
            });
        }
    }
    // Single-message push-to-pop latency p99 under 20 ms at 500 msg/s.
    // (In the mode issue 6 measured it: autoAck, the queue made first.)
    for l in report
        .latency
        .iter()
        .filter(|l| l.rate == 500 && l.mode == crate::latency::Mode::Auto)
    {
        targets.push(Target {
            target: "push-to-pop latency p99 at 500 msg/s".to_owned(),
            measured_as: format!("latency {}", l.name),
            value: l.latency_ms.p99,
            goal: "< 20 ms".to_owned(),
            met: l.latency_ms.p99 < 20.0 && l.missing == 0,
        });
    }
    // Issue 12: push-to-pop p99 under 10 ms in every mode, and the first
    // delivery to a consumer parked before its queue existed under 10 ms.
    for l in &report.latency {
        targets.push(Target {
            target: "push-to-pop latency p99, every mode (issue 12)".to_owned(),
            measured_as: format!("latency {}", l.name),
            value: l.latency_ms.p99,
            goal: "< 10 ms".to_owned(),
            met: l.latency_ms.p99 < 10.0 && l.missing == 0,
        });
        if l.mode == crate::latency::Mode::Early {
            targets.push(Target {
                target: "first delivery to a consumer parked before its queue existed".to_owned(),
                measured_as: format!("latency {}", l.name),
                value: l.first_ms,
                goal: "< 10 ms".to_owned(),
                met: l.first_ms < 10.0,
            });
        }
    }
    // Throughput at 10,000 partitions within 20% of 100.
    for wide in report
        .push
        .iter()
        .filter(|p| p.shape.partitions == 10_000 && p.brokers == 1)
    {
        let narrow = report.push.iter().find(|p| {
            p.brokers == 1
                && p.shape.partitions == 100
                && p.shape.batch == wide.shape.batch
                && p.shape.concurrency == wide.shape.concurrency
        });
        if let Some(narrow) = narrow {
            let value = ratio(wide.messages_per_second, narrow.messages_per_second);
            targets.push(Target {
                target: "push at 10,000 partitions / at 100".to_owned(),
                measured_as: format!("push {} / push {}", wide.name, narrow.name),
                value,
                goal: ">= 80%".to_owned(),
                met: value >= 0.80,
            });
        }
    }
    targets
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
        broker_binary_modified_unix: std::fs::metadata(broker)
            .and_then(|meta| meta.modified())
            .ok()
            .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |elapsed| elapsed.as_secs()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_aligns_its_cells_as_the_column_widths_say() {
        let mut table = Table::new(&[("case", 6), ("msg/s", 9), ("ratio", 4), ("n", 3)]);
        table.row([
            "b1 p1".to_owned(),
            fixed(1234.567, 0),
            percent(0.634),
            "-".to_owned(),
        ]);
        table.row([
            "b1000 p100".to_owned(),
            fixed(0.5, 2),
            percent(12.5),
            1234.to_string(),
        ]);
        assert_eq!(
            table.finish(),
            "case       msg/s ratio   n\n\
             b1 p1       1235  63%   -\n\
             b1000 p100      0.50 1250% 1234\n"
        );
    }
}
