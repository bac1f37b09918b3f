//! `cargo xtask bench [scenario] [options]`: build `queen-server` and the
//! `queen-load` load generator in release mode, then run
//! `queen-load <scenario> --broker <release queen-server> [options]`.
//!
//! Scenarios: `all` (the default: every one below but `soak` on one cluster,
//! plus push as a ratio to the ceiling and the push targets), `push`, `pop`,
//! `latency`, `ceiling`, `soak`, `streams`, `observe`, `mesh`, `scale` (see `benches/src/bin/queen-load/`). Options are passed to
//! `queen-load` unchanged; the usual ones are `--duration SECS`, `--quick` and
//! `--json PATH` and `--pg-setting NAME=VALUE` (repeatable: a PostgreSQL
//! server setting for the bench cluster; `docs/postgresql.md` compares them);
//! `cargo xtask bench push --help` lists all.

use std::path::PathBuf;
use std::process::Command;

const SCENARIOS: &[&str] = &[
    "all", "push", "pop", "latency", "ceiling", "soak", "streams", "observe", "mesh", "scale",
];

pub(crate) const USAGE: &str =
    "usage: cargo xtask bench [scenario] [--duration SECS] [--quick] [--json PATH] [...]

scenarios:
  all      (default) every scenario below on one cluster, then push / ceiling
           ratios and the push targets; about 12 minutes, 5 with --quick
           (longer when other work on the machine disturbs a case: it re-runs)
  push     push throughput: batch 1/100/1000 x partitions 1/100 x producers 1/16,
           10,000 partitions, and two brokers on one database
  ceiling  the same segments inserted straight into PostgreSQL, no broker
  pop      consume throughput, autoAck and pop + batch ack, 4/32 consumers,
           with an exactly-once check
  latency  single-message push-to-pop latency at 500 and 50 msg/s (auto, leased, early modes)
  soak     (not in all) 5 minutes of pushes and consumes with retention every 5 s:
           log_segments heap and TOAST sizes over time, and whether they plateau
  streams  (not in all) stream cycles per second with 1, 10 and 100 state ops per cycle
  observe  (not in all) push throughput with and without statistics rows and a scrape every second
  mesh     (not in all) push, consume and cross-broker latency with 1, 2 and 3 brokers on one
           database; `--mesh udp` for the UDP mesh instead of LISTEN/NOTIFY
  scale    (not in all) the scale cases: a million partitions, 10,000 queues, 10,000
           parked consumers, single-message pushes over many partitions
           (`--cases million,queues,parked,spread,soak`; soak only when named)

Builds queen-server and queen-load (release), then runs queen-load against a
throwaway durable PostgreSQL. Options go to queen-load unchanged; see
`cargo xtask bench <scenario> --help`. `--pg-setting NAME=VALUE` (repeatable)
starts that PostgreSQL with a server setting, e.g.
`cargo xtask bench push --pg-setting synchronous_commit=off`
(docs/postgresql.md has the measured ones).
";

/// Build, then run the load generator with `args` (`args[0]` is the scenario,
/// `all` when missing or when the arguments start with an option).
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let (scenario, options) = split_scenario(args);
    if matches!(scenario, "-h" | "help") {
        print!("{USAGE}");
        return Ok(());
    }
    if !SCENARIOS.contains(&scenario) {
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
        .args(options);
    crate::run(&mut cmd)
}

/// The scenario and the options after it: `all` when the first argument is
/// missing or an option (`--help` is handed to `queen-load all`, whose help
/// lists its options; `-h` and `help` print this tool's usage).
fn split_scenario(args: &[String]) -> (&str, &[String]) {
    match args.first() {
        Some(first) if first == "-h" || !first.starts_with('-') => (first.as_str(), &args[1..]),
        _ => ("all", args),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenario_defaults_to_all() {
        let args = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let none = args(&[]);
        assert_eq!(split_scenario(&none), ("all", &none[..]));
        let quick = args(&["--quick"]);
        assert_eq!(split_scenario(&quick), ("all", &quick[..]));
        let pop = args(&["pop", "--quick"]);
        assert_eq!(split_scenario(&pop), ("pop", &pop[1..]));
        let help = args(&["-h"]);
        assert_eq!(split_scenario(&help).0, "-h");
        assert!(SCENARIOS.contains(&"ceiling"));
    }
}
