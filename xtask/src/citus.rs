//! `cargo xtask citus up|down|status`: a local Citus cluster for trying
//! Queen on Citus (issue "Past one PostgreSQL"): one coordinator and two
//! workers, each its own PostgreSQL instance under `target/citus/`, on
//! loopback ports 9700 (coordinator), 9701 and 9702, with the `citus`
//! extension created in a database `queen` on each and the workers added to
//! the coordinator.
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
const USAGE: &str = "usage: cargo xtask citus <up|down|status>

  up      initialise (once) and start a coordinator (port 9700) and two workers
          (9701, 9702) under target/citus/, create the citus extension in the
          database `queen` on each and add the workers to the coordinator;
          needs Citus installed into this PostgreSQL
  down    stop the three nodes (their data stays; rm -rf target/citus removes it)
  status  which nodes are running, and the coordinator's view of its workers
";

/// Entry point: `args` are what follows `citus`.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let root = crate::workspace_root().join("target").join("citus");
    match args.first().map(String::as_str) {
        Some("up") => up(&root),
        Some("down") => down(&root),
        Some("status") => status(&root),
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
    fn an_unknown_command_names_itself() {
        let error = run(&["sideways".to_owned()]).unwrap_err();
        assert!(
            error.contains("unknown citus command `sideways`"),
            "{error}"
        );
    }
}
