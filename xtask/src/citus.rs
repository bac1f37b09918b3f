//! `cargo xtask citus up|down|status|test`: a local Citus cluster for trying
//! Queen on Citus (issue "Past one PostgreSQL"): one coordinator and two
//! workers, each its own PostgreSQL instance under `target/citus/`, on
//! loopback ports 9700 (coordinator), 9701 and 9702, with the `citus`
//! extension created in a database `queen` on each and the workers added to
//! the coordinator. `test` brings it up and runs the integration suite, the
//! official Python client's end-to-end test and the fault test against it
//! (the test kit's Citus mode, `queen_testkit::CITUS_VAR`).
//!
//! The Citus extension must already be installed into the PostgreSQL the
//! cluster runs (`citus.so` in `pg_config --pkglibdir`); `up` says so and
//! stops when it is not. Building it is not this command's business: the
//! repository carries no recipe that builds Citus (see the README's *Queen
//! on Citus*).
//!
//! `up` is idempotent: an initialised node is reused, a running one left
//! running, a worker already added not added again. `down` stops the nodes
//! and keeps their data; `rm -rf target/citus` removes them. As root the
//! PostgreSQL programs run as the `postgres` user (they refuse root), which
//! is handed the directories.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The nodes: name and port; the first is the coordinator.
const NODES: [(&str, u16); 3] = [("coordinator", 9700), ("worker1", 9701), ("worker2", 9702)];

/// The database each node gets, with the extension in it.
const DATABASE: &str = "queen";

/// What `cargo xtask citus help` prints.
const USAGE: &str = "usage: cargo xtask citus <up|down|status|test [FILTER]>

  up      initialise (once) and start a coordinator (port 9700) and two workers
          (9701, 9702) under target/citus/, create the citus extension in the
          database `queen` on each and add the workers to the coordinator;
          needs Citus installed into this PostgreSQL
  down    stop the three nodes (their data stays; rm -rf target/citus removes it)
  status  which nodes are running, and the coordinator's view of its workers
  test    `up`, then against the cluster, each test's database distributed on it:
          tests/it (only the tests FILTER names, when given), the official Python
          client's end-to-end test and the fault test (a worker restarted mid-run);
          ends with a line `N passed, M failed`
";

/// Entry point: `args` are what follows `citus`.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let root = crate::workspace_root().join("target").join("citus");
    match args.first().map(String::as_str) {
        Some("up") => up(&root),
        Some("down") => down(&root),
        Some("status") => status(&root),
        Some("test") => test(&root, args.get(1).map(String::as_str)),
        Some("-h" | "--help" | "help") | None => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown citus command `{other}`\n\n{USAGE}")),
    }
}

/// The PostgreSQL programs' directory, from `pg_config --bindir`.
fn bin_dir() -> Result<PathBuf, String> {
    pg_config("--bindir").map(PathBuf::from)
}

fn pg_config(flag: &str) -> Result<String, String> {
    let out = Command::new("pg_config")
        .arg(flag)
        .output()
        .map_err(|e| format!("pg_config {flag}: {e} (is PostgreSQL's pg_config on PATH?)"))?;
    if !out.status.success() {
        return Err(format!("pg_config {flag} failed"));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `Err` naming what is missing unless `citus.so` is installed.
fn citus_installed() -> Result<(), String> {
    let lib = PathBuf::from(pg_config("--pkglibdir")?).join("citus.so");
    if lib.is_file() {
        Ok(())
    } else {
        Err(format!(
            "Citus is not installed into this PostgreSQL ({} is missing): build and install \
             the citus extension for PostgreSQL {} first (README, *Queen on Citus*)",
            lib.display(),
            pg_config("--version").unwrap_or_default()
        ))
    }
}

/// A PostgreSQL program, run as `postgres` when this is root.
fn pg_command(program: &Path) -> Command {
    if crate::is_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

fn data_dir(root: &Path, node: &str) -> PathBuf {
    root.join(node)
}

fn running(bin: &Path, dir: &Path) -> bool {
    dir.join("PG_VERSION").is_file()
        && pg_command(&bin.join("pg_ctl"))
            .arg("status")
            .arg("-D")
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// The settings a node starts with (written once into its
/// `postgresql.conf` by `up`).
fn settings(port: u16, dir: &Path) -> String {
    format!(
        "\n# cargo xtask citus\n\
         port = {port}\n\
         listen_addresses = '127.0.0.1'\n\
         unix_socket_directories = '{}'\n\
         shared_preload_libraries = 'citus'\n\
         max_connections = 300\n\
         max_prepared_transactions = 300\n\
         citus.node_conninfo = 'sslmode=prefer'\n",
        dir.display()
    )
}

/// Run SQL on a node's `database` with psql; its output.
fn psql(bin: &Path, port: u16, database: &str, sql: &str) -> Result<String, String> {
    let out = pg_command(&bin.join("psql"))
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
        .args(["-h", "127.0.0.1", "-U", "postgres"])
        .arg("-p")
        .arg(port.to_string())
        .arg("-d")
        .arg(database)
        .arg("-c")
        .arg(sql)
        .output()
        .map_err(|e| format!("psql: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "psql on port {port}: {}: {}",
            sql,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn up(root: &Path) -> Result<(), String> {
    citus_installed()?;
    let bin = bin_dir()?;
    std::fs::create_dir_all(root).map_err(|e| format!("{}: {e}", root.display()))?;
    for (node, port) in NODES {
        let dir = data_dir(root, node);
        if !dir.join("PG_VERSION").is_file() {
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            if crate::is_root() {
                crate::run(
                    Command::new("chown")
                        .args(["-R", "postgres:postgres"])
                        .arg(root),
                )?;
            }
            crate::run(
                pg_command(&bin.join("initdb"))
                    .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "-D"])
                    .arg(&dir),
            )?;
            let conf = dir.join("postgresql.conf");
            let mut text =
                std::fs::read_to_string(&conf).map_err(|e| format!("{}: {e}", conf.display()))?;
            text.push_str(&settings(port, &dir));
            std::fs::write(&conf, text).map_err(|e| format!("{}: {e}", conf.display()))?;
        }
        if !running(&bin, &dir) {
            crate::run(
                pg_command(&bin.join("pg_ctl"))
                    .args(["start", "-w", "-t", "60", "-D"])
                    .arg(&dir)
                    .arg("-l")
                    .arg(dir.join("log")),
            )?;
        }
        let exists = psql(
            &bin,
            port,
            "postgres",
            &format!("SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'"),
        )?;
        if exists.is_empty() {
            psql(
                &bin,
                port,
                "postgres",
                &format!("CREATE DATABASE {DATABASE}"),
            )?;
        }
        psql(&bin, port, DATABASE, "CREATE EXTENSION IF NOT EXISTS citus")?;
        eprintln!("xtask citus: {node} up on 127.0.0.1:{port}");
    }
    let (_, coordinator) = NODES[0];
    psql(
        &bin,
        coordinator,
        DATABASE,
        &format!("SELECT citus_set_coordinator_host('127.0.0.1', {coordinator})"),
    )?;
    for (node, port) in &NODES[1..] {
        let known = psql(
            &bin,
            coordinator,
            DATABASE,
            &format!(
                "SELECT 1 FROM pg_dist_node WHERE nodename = '127.0.0.1' AND nodeport = {port}"
            ),
        )?;
        if known.is_empty() {
            psql(
                &bin,
                coordinator,
                DATABASE,
                &format!("SELECT citus_add_node('127.0.0.1', {port})"),
            )?;
            eprintln!("xtask citus: {node} added to the coordinator");
        }
    }
    println!("postgres://postgres@127.0.0.1:{coordinator}/{DATABASE}");
    Ok(())
}

fn down(root: &Path) -> Result<(), String> {
    let bin = bin_dir()?;
    for (node, _) in NODES.iter().rev() {
        let dir = data_dir(root, node);
        if running(&bin, &dir) {
            crate::run(
                pg_command(&bin.join("pg_ctl"))
                    .args(["stop", "-w", "-m", "fast", "-D"])
                    .arg(&dir),
            )?;
            eprintln!("xtask citus: {node} stopped");
        }
    }
    Ok(())
}

fn status(root: &Path) -> Result<(), String> {
    let bin = bin_dir()?;
    for (node, port) in NODES {
        let state = if running(&bin, &data_dir(root, node)) {
            "running"
        } else {
            "stopped"
        };
        println!("{node} 127.0.0.1:{port} {state}");
    }
    let (_, coordinator) = NODES[0];
    if running(&bin, &data_dir(root, NODES[0].0)) {
        let nodes = psql(
            &bin,
            coordinator,
            DATABASE,
            "SELECT string_agg(nodename || ':' || nodeport || ' ' || noderole, ', ' ORDER BY nodeport) \
               FROM pg_dist_node",
        )?;
        println!("coordinator's nodes: {nodes}");
    }
    Ok(())
}

/// Tests of the integration suite `citus test` leaves out, and why: each
/// asserts a mechanism of a single PostgreSQL, or is built on one, that a
/// distributed database does not have (the README's *Queen on Citus* says
/// what is not distributed). A name is a substring of the tests' names, as
/// libtest's `--skip` takes it. Everything else must pass.
const NOT_ON_CITUS: &[(&str, &str)] = &[
    (
        "figures::",
        "the kept figures are off on Citus (no triggers on distributed tables): the views scan",
    ),
    (
        "queue_options::max_size_counts_a_consumption_once_its_broker_marked_it",
        "asserts the kept figures' lag (off on Citus: the depth is counted exactly, at once)",
    ),
    (
        "admin::the_status_and_analytics_views_read_the_statistics_rows",
        "asserts the log tables in the coordinator's buffer cache; their shards are on the workers",
    ),
    (
        "partition_ids::a_partition_with_a_drawn_id_keeps_it",
        "drawn partition ids: a distributed database holds derived ids only",
    ),
    (
        "partition_ids::the_citus_switch_routes_every_slot_alone_with_the_same_answers",
        "runs the Citus branches on plain PostgreSQL by turning the switch off and on",
    ),
    (
        "migration::",
        "builds its target on the test kit's local cluster (a Unix socket); a migration off Citus is not examined",
    ),
    (
        "pop_mechanics::ten_thousand_caught_up_partitions_cost_no_scan",
        "counts scans in the coordinator's table statistics; the shards' are on the workers",
    ),
    (
        "wide_queues::a_reseed_reads_what_was_written_and_one_page_not_the_queue",
        "counts reads in the coordinator's table statistics; the shards' are on the workers",
    ),
    (
        "retention::a_step_reads_what_it_deletes_not_the_partition_count",
        "counts reads in the coordinator's table statistics; the shards' are on the workers",
    ),
    (
        "retention::cleanup_",
        "drives the previous version's cleanup step (v1, kept for rolling upgrades), which Citus does not plan",
    ),
];

/// The test runs of `citus test`: package, test binary, name filter. The
/// integration suite's filter is the command's. The fault test restarts a
/// worker where it restarts PostgreSQL elsewhere
/// (`QUEEN_TEST_CITUS_WORKER_DIR`).
fn suites(filter: Option<&str>) -> [(&'static str, &str, &str); 3] {
    [
        ("queen-tests", "it", filter.unwrap_or("")),
        (
            "queen-server",
            "it",
            "sdk::the_official_python_sdk_pushes_consumes_acks_dead_letters_renews_and_commits",
        ),
        (
            "queen-server",
            "it",
            "faults::pushes_pops_and_acks_survive_a_broker_sigkill_and_a_postgres_restart",
        ),
    ]
}

fn test(root: &Path, filter: Option<&str>) -> Result<(), String> {
    up(root)?;
    let nodes: Vec<String> = NODES
        .iter()
        .map(|(_, port)| format!("127.0.0.1:{port}"))
        .collect();
    let worker = data_dir(root, NODES[1].0);
    let mut totals = Counts::default();
    let mut failures = Vec::new();
    for (package, binary, filter) in suites(filter) {
        let failed_before = totals.failed;
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args([
            "test",
            "-p",
            package,
            "--test",
            binary,
            "--",
            "--test-threads=2",
        ])
        .env("QUEEN_TEST_CITUS", nodes.join(","))
        .env("QUEEN_TEST_CITUS_WORKER_DIR", &worker)
        .stdout(std::process::Stdio::piped());
        if !filter.is_empty() {
            cmd.arg(filter);
        }
        if package == "queen-tests" {
            for (name, _) in NOT_ON_CITUS {
                cmd.args(["--skip", name]);
            }
        }
        eprintln!("xtask citus test: {package} --test {binary} {filter}");
        let mut child = cmd.spawn().map_err(|e| format!("cargo test: {e}"))?;
        let stdout = child.stdout.take().ok_or("cargo test: no stdout")?;
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let line = line.map_err(|e| format!("cargo test output: {e}"))?;
            println!("{line}");
            if let Some(counts) = Counts::parse(&line) {
                totals.passed += counts.passed;
                totals.failed += counts.failed;
            }
            if let Some(name) = line.strip_suffix(" ... FAILED") {
                failures.push(name.trim_start_matches("test ").to_owned());
            }
        }
        let status = child.wait().map_err(|e| format!("cargo test: {e}"))?;
        if !status.success() && totals.failed == failed_before {
            // Failed with no failed test of its own (a build error).
            return Err(format!(
                "{package} --test {binary}: cargo test failed with {status}"
            ));
        }
    }
    println!(
        "left out as PostgreSQL-only ({} names, xtask/src/citus.rs):",
        NOT_ON_CITUS.len()
    );
    for (name, why) in NOT_ON_CITUS {
        println!("  {name}: {why}");
    }
    for name in &failures {
        println!("failed: {name}");
    }
    println!("{} passed, {} failed", totals.passed, totals.failed);
    if totals.failed == 0 {
        Ok(())
    } else {
        Err(format!("{} tests failed on Citus", totals.failed))
    }
}

/// Passed and failed tests, from libtest's `test result:` lines.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    passed: u64,
    failed: u64,
}

impl Counts {
    /// `test result: ok. 23 passed; 1 failed; 0 ignored; ...` counted.
    fn parse(line: &str) -> Option<Counts> {
        let rest = line.strip_prefix("test result: ")?;
        let number = |label: &str| {
            rest.split(';').find_map(|part| {
                part.trim()
                    .trim_start_matches("ok. ")
                    .trim_start_matches("FAILED. ")
                    .strip_suffix(label)
                    .and_then(|n| n.trim().parse().ok())
            })
        };
        Some(Counts {
            passed: number(" passed")?,
            failed: number(" failed")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_preloads_citus_on_its_own_loopback_port() {
        let text = settings(9701, Path::new("/x/worker1"));
        assert!(text.contains("port = 9701\n"), "{text}");
        assert!(
            text.contains("shared_preload_libraries = 'citus'"),
            "{text}"
        );
        assert!(text.contains("listen_addresses = '127.0.0.1'"), "{text}");
        assert!(
            text.contains("unix_socket_directories = '/x/worker1'"),
            "{text}"
        );
        let ports: Vec<u16> = NODES.iter().map(|(_, port)| *port).collect();
        assert_eq!(ports, [9700, 9701, 9702]);
    }

    #[test]
    fn test_results_are_counted_from_libtest_lines() {
        assert_eq!(
            Counts::parse(
                "test result: FAILED. 23 passed; 1 failed; 0 ignored; 0 measured; 273 filtered out; finished in 51.92s"
            ),
            Some(Counts { passed: 23, failed: 1 })
        );
        assert_eq!(
            Counts::parse("test result: ok. 8 passed; 0 failed; 2 ignored; 0 measured"),
            Some(Counts {
                passed: 8,
                failed: 0
            })
        );
        assert_eq!(Counts::parse("running 8 tests"), None);
    }

    #[test]
    fn an_unknown_command_names_itself() {
        let error = run(&["sideways".to_owned()]).unwrap_err();
        assert!(
            error.contains("unknown citus command `sideways`"),
            "{error}"
        );
    }
}
