//! CPU time per process group, from `/proc`: the brokers (one or several),
//! PostgreSQL (the postmaster and all its children), this load generator, and
//! the whole machine.
//! Shows where the cores went during a window on a machine all three share.

use std::time::Instant;

use super::to_f64;

/// Clock ticks per second of `/proc` times (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU ticks used so far.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    at: Instant,
    broker: u64,
    postgres: u64,
    loadgen: u64,
    machine_busy: u64,
    machine_total: u64,
}

/// Cores used between two samples (1.0 = one core busy all the time).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct Usage {
    pub(crate) broker: f64,
    pub(crate) postgres: f64,
    pub(crate) loadgen: f64,
    /// Busy cores of the whole machine (everything, not only the three above).
    pub(crate) machine: f64,
    /// Busy cores outside the three above: other work on the machine that
    /// competed with the bench (kernel interrupts count here too).
    pub(crate) other: f64,
    /// Fraction of the machine that was busy.
    pub(crate) machine_busy_fraction: f64,
}

/// Read the counters now. `broker_pids` may be empty (the ceiling runs no broker).
pub(crate) fn sample(broker_pids: &[u32], postmaster_pid: u32) -> Sample {
    let mut postgres = 0;
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.filter_map(Result::ok) {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(stat) = proc_stat(&pid.to_string()) {
                if pid == postmaster_pid || stat.ppid == postmaster_pid {
                    postgres += stat.ticks;
                }
            }
        }
    }
    let (machine_busy, machine_total) = machine_ticks();
    Sample {
        at: Instant::now(),
        broker: broker_pids
            .iter()
            .map(|pid| proc_stat(&pid.to_string()).map_or(0, |stat| stat.ticks))
            .sum(),
        postgres,
        loadgen: proc_stat("self").map_or(0, |stat| stat.ticks),
        machine_busy,
        machine_total,
    }
}

/// Cores used from `before` to `after`.
pub(crate) fn usage(before: &Sample, after: &Sample) -> Usage {
    let seconds = after.at.duration_since(before.at).as_secs_f64();
    let cores = |a: u64, b: u64| {
        if seconds > 0.0 {
            to_f64(b.saturating_sub(a)) / TICKS_PER_SECOND / seconds
        } else {
            0.0
        }
    };
    let total = after.machine_total.saturating_sub(before.machine_total);
    let busy = after.machine_busy.saturating_sub(before.machine_busy);
    let broker = cores(before.broker, after.broker);
    let postgres = cores(before.postgres, after.postgres);
    let loadgen = cores(before.loadgen, after.loadgen);
    let machine = cores(before.machine_busy, after.machine_busy);
    Usage {
        broker,
        postgres,
        loadgen,
        machine,
        other: (machine - broker - postgres - loadgen).max(0.0),
        machine_busy_fraction: if total > 0 {
            to_f64(busy) / to_f64(total)
        } else {
            0.0
        },
    }
}

/// A case's figures, with the CPU used during its window.
pub(crate) trait Measured {
    /// Cores of other work on the machine during the window.
    fn other_cpu(&self) -> f64;
    /// Record how many times the case was run.
    fn set_attempts(&mut self, attempts: u32);
}

/// Implement [`Measured`] for case results with a `cpu_cores: Usage` and an
/// `attempts: u32` field.
macro_rules! measured {
    ($($result:ty),+ $(,)?) => {$(
        impl $crate::measure::cpu::Measured for $result {
            fn other_cpu(&self) -> f64 {
                self.cpu_cores.other
            }

            fn set_attempts(&mut self, attempts: u32) {
                self.attempts = attempts;
            }
        }
    )+};
}
pub(crate) use measured;

/// Run a case until its window was not disturbed by other work on the
/// machine (at most `max_other` cores), at most `1 + retries` times; keep the
/// least disturbed result.
pub(crate) async fn least_disturbed<R, F, Fut>(
    max_other: f64,
    retries: u32,
    mut run: F,
) -> crate::error::Result<R>
where
    R: Measured,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::error::Result<R>>,
{
    let mut best: Option<R> = None;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let result = run().await?;
        let other = result.other_cpu();
        if best.as_ref().is_none_or(|b| other < b.other_cpu()) {
            best = Some(result);
        }
        if other <= max_other || attempts > retries {
            break;
        }
        eprintln!(
            "queen-load:   disturbed: other work used {other:.2} cores (limit {max_other:.2}); \
             running the case again ({attempts}/{})",
            retries + 1
        );
    }
    let mut best = best.ok_or_else(|| crate::error::Error::msg("no attempt ran"))?;
    best.set_attempts(attempts);
    Ok(best)
}

/// What the tables' cpu column says, for their titles.
pub(crate) const NOTE: &str =
    "cpu = cores used in the window: broker/postgres/load generator/other";

/// `broker/postgres/loadgen/other` cores, for the tables.
pub(crate) fn columns(usage: &Usage) -> String {
    format!(
        "{:.2}/{:.2}/{:.2}/{:.2}",
        usage.broker, usage.postgres, usage.loadgen, usage.other
    )
}

struct ProcStat {
    ppid: u32,
    /// utime + stime.
    ticks: u64,
}

/// `/proc/<pid>/stat`: parent pid and user + system ticks.
fn proc_stat(pid: &str) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) ... utime(11) stime(12).
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(ProcStat {
        ppid,
        ticks: utime + stime,
    })
}

/// Busy and total ticks of all CPUs, from the first line of `/proc/stat`.
fn machine_ticks() -> (u64, u64) {
    let Ok(text) = std::fs::read_to_string("/proc/stat") else {
        return (0, 0);
    };
    let Some(line) = text.lines().next() else {
        return (0, 0);
    };
    // cpu user nice system idle iowait irq softirq steal ...
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = values.iter().sum();
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}
