//! `cargo xtask bench <scenario> [options]`: build `queen-server` and the
//! `queen-load` load generator in release mode, then run
//! `queen-load <scenario> --broker <release queen-server> [options]`.
//!
//! Scenarios: `push` (see `benches/src/bin/queen-load/push.rs`). Options are
//! passed to `queen-load` unchanged; the usual ones are `--duration SECS`,
//! `--quick` and `--json PATH` (`cargo xtask bench push -- --help` lists all).

use std::path::PathBuf;
use std::process::Command;

const SCENARIOS: &[&str] = &["push"];

pub(crate) const USAGE: &str =
    "usage: cargo xtask bench <scenario> [--duration SECS] [--quick] [--json PATH] [...]

scenarios:
  push    push throughput: batch 1/100/1000 x partitions 1/100 x producers 1/16

Builds queen-server and queen-load (release), then runs queen-load against a
throwaway durable PostgreSQL. Options go to queen-load unchanged; see
`cargo xtask bench push --help`.
";

/// Build, then run the load generator with `args` (`args[0]` is the scenario).
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let Some(scenario) = args.first() else {
        return Err(format!("bench needs a scenario\n\n{USAGE}"));
    };
    if matches!(scenario.as_str(), "-h" | "--help" | "help") {
        print!("{USAGE}");
        return Ok(());
    }
    if !SCENARIOS.contains(&scenario.as_str()) {
        return Err(format!("unknown bench scenario `{scenario}`\n\n{USAGE}"));
    }
    crate::cargo(&[
        "build",
        "--release",
        "-p",
        "queen-server",
        "-p",
        "queen-benches",
        "--bin",
        "queen-server",
        "--bin",
        "queen-load",
    ])?;
    let release = target_dir().join("release");
    let mut cmd = Command::new(release.join("queen-load"));
    cmd.arg(scenario)
        .arg("--broker")
        .arg(release.join("queen-server"))
        .args(&args[1..]);
    crate::run(&mut cmd)
}

/// Cargo's target directory: `CARGO_TARGET_DIR`, or `target/` in the workspace.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                crate::workspace_root().join(dir)
            }
        }
        None => crate::workspace_root().join("target"),
    }
}
