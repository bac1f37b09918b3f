//! Project automation, run as `cargo xtask <command>`.
//!
//! - `ci`: everything CI checks, in order: PostgreSQL present (installed with
//!   apt-get when missing and running as root), `cargo fmt --check`,
//!   `cargo clippy --all-targets --features queen-engine/bench -- -D warnings`, `cargo test --workspace`,
//!   then the engine's embedding example (`queen-engine/examples/embedded.rs`).
//!   This is the README's test command and what `.ci/run` runs.
//! - `tidy`: the hygiene checks of `tidy.rs` (they also run as a `#[test]`).
//! - `readme`: the README's commands run as written (`readme.rs`; also a
//!   `#[test]`).
//! - `fuzz [--seconds N] [target...]`: run the cargo-fuzz targets of `fuzz/`
//!   for a bounded time each (`fuzz.rs`; nightly and cargo-fuzz).
//! - `citus up|down|status`: a local Citus cluster, a coordinator and two
//!   workers under `target/citus/` (`citus.rs`; needs Citus installed).
//! - `bench [scenario]`: build `queen-server` and `queen-load` in release mode
//!   and run the end-to-end load generator, every scenario when none is named
//!   (`bench.rs`).
//!
//! Dependencies are kept to the standard library on purpose: xtask builds first
//! on a clean machine and must build fast.

mod bench;
mod citus;
mod fuzz;
mod readme;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

const USAGE: &str = "usage: cargo xtask <command>

commands:
  ci      install missing PostgreSQL (as root), then fmt check, clippy -D warnings, all tests
  tidy    hygiene checks (module docs, whitespace, banned attributes, SQL registry)
  readme  run the README's start command as written and check the broker and its
          managed PostgreSQL start and stop (also a test)
  bench   release build, then the end-to-end load generator; no scenario runs all
          of them (`cargo xtask bench help`)
  fuzz    [--seconds N] [target...]: each cargo-fuzz target for N seconds (default 60);
          needs nightly and `cargo install cargo-fuzz`
  citus   up|down|status|test: a local Citus cluster (coordinator and two workers) under
          target/citus/, and the tests against it; needs the citus extension installed
          (`cargo xtask citus help`)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("tidy") => tidy::check(&workspace_root()).map_err(|problems| problems.join("\n")),
        Some("readme") => readme::check(&workspace_root()),
        Some("bench") => bench::run(&args[1..]),
        Some("fuzz") => fuzz::run_all(&args[1..]),
        Some("citus") => citus::run(&args[1..]),
        Some("-h" | "--help" | "help") | None => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => Err(format!("unknown command `{other}`\n\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root: the parent of this crate's directory.
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn ci() -> Result<(), String> {
    let started = Instant::now();
    ensure_postgres()?;
    ensure_chromium()?;
    cargo(&["fmt", "--all", "--check"])?;
    // With the engine's `bench` feature, so its in-crate benches (and the
    // criterion target that needs them) are linted too.
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--features",
        "queen-engine/bench",
        "--",
        "-D",
        "warnings",
    ])?;
    // `on_citus::` checks Citus's shard routing; on plain PostgreSQL it has
    // nothing to check (`cargo xtask citus test` runs it).
    cargo(&["test", "--workspace", "--", "--skip", "on_citus::"])?;
    // The engine embedded without HTTP, as its example shows users doing it.
    cargo(&[
        "run",
        "--quiet",
        "-p",
        "queen-engine",
        "--example",
        "embedded",
    ])?;
    eprintln!("xtask ci: all green in {:.0?}", started.elapsed());
    Ok(())
}

/// The tests run a throwaway PostgreSQL; make sure its server binaries exist.
fn ensure_postgres() -> Result<(), String> {
    if postgres_present() {
        return Ok(());
    }
    if !is_root() {
        return Err(
            "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or under \
             /usr/lib/postgresql/*/bin; install PostgreSQL (apt-get install postgresql)"
                .to_owned(),
        );
    }
    eprintln!("xtask ci: PostgreSQL missing, installing it with apt-get");
    run(Command::new("apt-get").arg("update"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends", "postgresql"])
        .env("DEBIAN_FRONTEND", "noninteractive"))?;
    if postgres_present() {
        Ok(())
    } else {
        Err("PostgreSQL still missing after apt-get install".to_owned())
    }
}

pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// The status page test drives headless Chromium through ChromeDriver
/// (`crates/queen-server/tests/it/page.rs`); install Debian's packages when
/// they are missing and we may.
fn ensure_chromium() -> Result<(), String> {
    let present = || {
        ["/usr/bin/chromium", "/usr/bin/chromedriver"]
            .iter()
            .all(|path| std::path::Path::new(path).is_file())
    };
    if present() {
        return Ok(());
    }
    if !is_root() {
        return Err(
            "chromium and chromedriver not found (the status page test needs them):              apt-get install chromium chromium-driver"
                .to_owned(),
        );
    }
    eprintln!("xtask ci: Chromium missing, installing chromium and chromium-driver with apt-get");
    let install = || {
        run(Command::new("apt-get")
            .args([
                "install",
                "-y",
                "--no-install-recommends",
                "chromium",
                "chromium-driver",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive"))
    };
    if install().is_err() {
        run(Command::new("apt-get").arg("update"))?;
        install()?;
    }
    if present() {
        Ok(())
    } else {
        Err("chromium still missing after apt-get install".to_owned())
    }
}

fn postgres_present() -> bool {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("initdb").is_file()));
    let versioned = std::fs::read_dir("/usr/lib/postgresql").is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|entry| entry.path().join("bin/initdb").is_file())
    });
    on_path || versioned
}

fn cargo(args: &[&str]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.args(args).current_dir(workspace_root());
    run(&mut cmd)
}

pub(crate) fn run(cmd: &mut Command) -> Result<(), String> {
    eprintln!("xtask: running {cmd:?}");
    let status = cmd
        .status()
        .map_err(|error| format!("cannot run {cmd:?}: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}
