//! The machine, the PostgreSQL server and the checkout a run measured.

use std::path::Path;
use std::process::Command;
use std::time::UNIX_EPOCH;

use serde::Serialize;

use super::stats;
use crate::error::Result;

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

/// Describe the machine, the PostgreSQL server and the checkout.
pub(crate) async fn machine(admin: &tokio_postgres::Client, broker: &Path) -> Result<Machine> {
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
        postgres_version: stats::server_version(admin).await?,
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
