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

/// The targets `fuzz/Cargo.toml` declares: the `name` of each `[[bin]]`.
fn targets(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if let Some(value) = line.strip_prefix("name = ").filter(|_| in_bin) {
            names.push(value.trim_matches('"').to_owned());
        }
    }
    names
}

/// Seconds per target when `--seconds` is not given.
const DEFAULT_SECONDS: u64 = 60;

pub(crate) fn run_all(args: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let manifest = root.join("fuzz/Cargo.toml");
    let manifest =
        std::fs::read_to_string(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let all = targets(&manifest);
    let mut seconds = DEFAULT_SECONDS;
    let mut chosen: Vec<String> = Vec::new();
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
                if !all.iter().any(|target| target == name) {
                    return Err(format!("unknown fuzz target `{name}`; targets: {all:?}"));
                }
                chosen.push(name.to_owned());
            }
        }
    }
    if chosen.is_empty() {
        chosen = all;
    }
    for target in &chosen {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_targets_are_the_bins_of_the_fuzz_manifest() {
        let manifest = std::fs::read_to_string(workspace_root().join("fuzz/Cargo.toml")).unwrap();
        let names = targets(&manifest);
        assert_eq!(names.len(), manifest.matches("[[bin]]").count());
        assert!(names.iter().any(|name| name == "frame"), "{names:?}");
        assert!(!names.iter().any(|name| name == "queen-fuzz"), "{names:?}");
    }
}
