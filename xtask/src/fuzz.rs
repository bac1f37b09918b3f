//! `cargo xtask fuzz [--seconds N] [target...]`: run each cargo-fuzz target
//! of `fuzz/` (libFuzzer, nightly) for a bounded time, every target when
//! none is named.
//!
//! The committed corpus `fuzz/corpus/<target>` is read as seeds and never
//! written: what libFuzzer finds goes to `target/fuzz/corpus/<target>`, and
//! a crash to `target/fuzz/artifacts/<target>/`. A crash fails the command;
//! fix it, then commit the crashing input to `fuzz/corpus/<target>` so the
//! stable test suite (`tests/it/fuzz_corpus.rs`) keeps it fixed.
//! Needs `cargo install cargo-fuzz` and a nightly toolchain.

use std::process::Command;
use std::time::Instant;

use crate::{run, workspace_root};

/// Every target in `fuzz/Cargo.toml`.
pub(crate) const TARGETS: &[&str] = &[
    "frame",
    "push_body",
    "ack_body",
    "ack_batch_body",
    "transaction_body",
    "configure_body",
    "path_and_query",
];

/// Seconds per target when `--seconds` is not given.
const DEFAULT_SECONDS: u64 = 60;

pub(crate) fn run_all(args: &[String]) -> Result<(), String> {
    let mut seconds = DEFAULT_SECONDS;
    let mut chosen: Vec<&str> = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => {
                seconds = args
                    .next()
                    .and_then(|value| value.parse().ok())
                    .ok_or("--seconds needs a whole number of seconds")?;
            }
            name => {
                let target = TARGETS
                    .iter()
                    .find(|target| **target == name)
                    .ok_or_else(|| format!("unknown fuzz target `{name}`; targets: {TARGETS:?}"))?;
                chosen.push(target);
            }
        }
    }
    if chosen.is_empty() {
        chosen = TARGETS.to_vec();
    }
    let root = workspace_root();
    for target in chosen {
        let work = root.join("target/fuzz/corpus").join(target);
        let artifacts = root.join("target/fuzz/artifacts").join(target);
        std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
        std::fs::create_dir_all(&artifacts).map_err(|e| format!("{}: {e}", artifacts.display()))?;
        let started = Instant::now();
        run(Command::new("cargo")
            .current_dir(root.join("fuzz"))
            .args(["+nightly", "fuzz", "run", target])
            .arg(&work)
            .arg(root.join("fuzz/corpus").join(target))
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-artifact_prefix={}/", artifacts.display())))?;
        eprintln!(
            "xtask fuzz: {target}: no crash in {:.0?}",
            started.elapsed()
        );
    }
    Ok(())
}
