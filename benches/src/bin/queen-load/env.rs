//! The bench environment: a run directory, a durable throwaway PostgreSQL
//! cluster, and `queen-server` child processes. Every piece is a guard whose
//! `Drop` stops what it started, so an error or a panic leaves nothing running.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use queen_pg::cluster::{Cluster, ClusterOptions};

use crate::client::Conn;
use crate::error::{Context, Error, Result};

/// Environment variables that would make the broker pick another database.
use queen_pg::DATABASE_VARS;

/// How long a broker gets to answer `/health` after it is started.
const HEALTHY_WITHIN: Duration = Duration::from_secs(60);

/// How long a broker gets to exit after SIGTERM.
const EXIT_WITHIN: Duration = Duration::from_secs(60);

/// Settings every scenario shares.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CommonArgs {
    /// The `queen-server` binary to run (a release build, for real numbers).
    #[arg(long, value_name = "PATH")]
    pub(crate) broker: PathBuf,
    /// Where the run directory (cluster, broker logs) is created. The `postgres`
    /// user must be able to reach it when running as root.
    #[arg(long, value_name = "DIR", default_value = "/tmp")]
    pub(crate) work_dir: PathBuf,
    /// Write the JSON report to this file (it is printed to stdout too).
    #[arg(long, value_name = "PATH")]
    pub(crate) json: Option<PathBuf>,
    /// How several brokers on one database tell each other of pushes:
    /// `notify` (PostgreSQL `LISTEN`/`NOTIFY`, the default with no setting)
    /// or `udp` (`QUEEN_PEERS` naming the others on loopback ports).
    #[arg(long, value_enum, default_value_t = MeshMode::Notify)]
    pub(crate) mesh: MeshMode,
    /// Extra environment for the broker, e.g. `--broker-env QUEEN_PUSH_FLUSHERS=8`.
    #[arg(long = "broker-env", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub(crate) broker_env: Vec<(String, String)>,
    /// Keep the run directory (the stopped cluster with every case's database,
    /// and the broker logs) after a successful run. It is always kept after a
    /// failure.
    #[arg(long)]
    pub(crate) keep: bool,
    /// A case is disturbed when other work on the machine (outside the broker,
    /// PostgreSQL and this tool) used more than this many cores during its
    /// window; a disturbed case is run again (see `--retries`).
    #[arg(long, value_name = "CORES", default_value_t = 0.25)]
    pub(crate) max_other_cpu: f64,
    /// Extra attempts for a disturbed case; the least disturbed one is kept.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub(crate) retries: u32,
    /// A PostgreSQL server setting for the bench cluster, passed as `-c` when
    /// it starts; repeatable, e.g. `--pg-setting synchronous_commit=off
    /// --pg-setting max_wal_size=4GB`. The report records each one and the
    /// value the server actually runs with.
    #[arg(long = "pg-setting", value_name = "NAME=VALUE", value_parser = parse_pg_setting)]
    pub(crate) pg_settings: Vec<String>,
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .ok_or_else(|| format!("`{text}` is not KEY=VALUE"))
}

/// A `--pg-setting`: `name=value`, the name a PostgreSQL parameter name, the
/// value free of whitespace, quotes and shell characters (`pg_ctl` hands the
/// options to the server through a shell, and a value needing quotes is not one
/// this tool is for).
fn parse_pg_setting(text: &str) -> Result<String, String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not NAME=VALUE"))?;
    let name_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.');
    if !name_ok {
        return Err(format!(
            "`{name}` is not a PostgreSQL parameter name (lower-case letters, digits, `_`, `.`)"
        ));
    }
    let value_ok = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+' | ':' | '/'));
    if !value_ok {
        return Err(format!(
            "`{value}`: a --pg-setting value is letters, digits and `._-+:/` only"
        ));
    }
    Ok(format!("{name}={value}"))
}

/// The run directory and the cluster in it. Dropping it stops the cluster and
/// removes the directory, unless [`Env::keep_dir`] was called.
/// `--mesh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum MeshMode {
    /// `LISTEN`/`NOTIFY` through the database.
    Notify,
    /// Signed UDP datagrams between the brokers.
    Udp,
}

pub(crate) struct Env {
    cluster: ClusterGuard,
    dir: RunDir,
    /// A session on the `postgres` database: creates and drops the per-case
    /// databases and reads the statistics views. It never connects to a bench
    /// database, so it adds nothing to their counters.
    pub(crate) admin: tokio_postgres::Client,
    /// Databases created so far: names stay unique across the scenarios of a run.
    databases: AtomicUsize,
}

impl Env {
    /// Create the run directory under `work_dir`, initialise and start a
    /// durable cluster in it with the extra server `settings` (`name=value`
    /// each), and connect to it.
    pub(crate) async fn start(work_dir: &Path, settings: &[String]) -> Result<Env> {
        let dir = RunDir::create(work_dir)?;
        let data_dir = dir.path.join("pg");
        let settings = settings.to_vec();
        let cluster = tokio::task::spawn_blocking(move || -> Result<Cluster> {
            let options = ClusterOptions {
                settings,
                ..ClusterOptions::durable(&data_dir)
            };
            let mut cluster = Cluster::init_or_reuse(options)
                .context("initialise the bench PostgreSQL cluster")?;
            cluster
                .start()
                .context("start the bench PostgreSQL cluster")?;
            Ok(cluster)
        })
        .await
        .context("cluster start task")??;
        let cluster = ClusterGuard(cluster);
        let admin = queen_sql::connect::connect_one(&cluster.0.connect_config("postgres"))
            .await
            .context("connect to the bench cluster")?;
        Ok(Env {
            cluster,
            dir,
            admin,
            databases: AtomicUsize::new(0),
        })
    }

    /// Create a fresh database for one case of `scenario`: `<scenario>_<n>`.
    pub(crate) async fn create_database(&self, scenario: &str) -> Result<String> {
        let n = self.databases.fetch_add(1, Ordering::Relaxed);
        let dbname = format!("{scenario}_{n}");
        queen_sql::connect::create_database_if_missing(&self.admin, &dbname)
            .await
            .with_context(|| format!("create database {dbname}"))?;
        Ok(dbname)
    }

    /// Drop a case's database, unless the run keeps everything for inspection.
    pub(crate) async fn drop_database(&self, dbname: &str, keep: bool) -> Result<()> {
        if keep {
            return Ok(());
        }
        self.admin
            .batch_execute(&format!("DROP DATABASE {dbname} WITH (FORCE)"))
            .await
            .with_context(|| format!("drop database {dbname}"))
    }

    /// Start `n` brokers on database `dbname`, one after the other (each
    /// applies the schema at boot; the applier serialises them anyway), each
    /// logging to `broker-<dbname>-<k>.log` in the run directory.
    pub(crate) async fn start_brokers(
        &self,
        common: &CommonArgs,
        dbname: &str,
        n: usize,
    ) -> Result<Vec<Broker>> {
        let mut brokers = Vec::with_capacity(n);
        // With `--mesh udp`, each broker names the others as its peers.
        let sync_ports = (0..n)
            .map(|_| {
                std::net::UdpSocket::bind("127.0.0.1:0")
                    .and_then(|socket| socket.local_addr())
                    .map(|addr| addr.port())
                    .context("pick a UDP port")
            })
            .collect::<Result<Vec<u16>>>()?;
        for k in 0..n {
            let log = self.dir().join(format!("broker-{dbname}-{k}.log"));
            let mut vars = common.broker_env.clone();
            if common.mesh == MeshMode::Udp && n > 1 {
                let peers: Vec<String> = sync_ports
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != k)
                    .map(|(_, port)| format!("127.0.0.1:{port}"))
                    .collect();
                vars.push(("QUEEN_PEERS".to_owned(), peers.join(",")));
                vars.push(("QUEEN_SYNC_PORT".to_owned(), sync_ports[k].to_string()));
                vars.push(("QUEEN_SYNC_SECRET".to_owned(), "queen-load".to_owned()));
            }
            brokers
                .push(Broker::start(&common.broker, &self.database_url(dbname), log, &vars).await?);
        }
        Ok(brokers)
    }

    /// The run directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir.path
    }

    /// Keep the run directory when this value is dropped.
    pub(crate) fn keep_dir(&mut self) {
        self.dir.keep = true;
    }

    /// The postmaster's process id (first line of `postmaster.pid`).
    pub(crate) fn postmaster_pid(&self) -> Result<u32> {
        let path = self.cluster.0.data_dir().join("postmaster.pid");
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
        text.lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .ok_or_else(|| Error::msg(format!("{}: no pid on the first line", path.display())))
    }

    /// Connection settings for database `dbname`.
    pub(crate) fn connect_config(&self, dbname: &str) -> tokio_postgres::Config {
        self.cluster.0.connect_config(dbname)
    }

    /// `QUEEN_DATABASE_URL` for database `dbname`, in libpq key=value form.
    pub(crate) fn database_url(&self, dbname: &str) -> String {
        format!(
            "host={} port=5432 user=postgres dbname={dbname}",
            self.cluster.0.socket_dir().display()
        )
    }
}

/// Stops the cluster when dropped.
struct ClusterGuard(Cluster);

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if let Err(error) = self.0.stop() {
            eprintln!(
                "queen-load: stopping the bench cluster: {}",
                queen_sql::error_chain(&error)
            );
        }
    }
}

/// A fresh directory, removed when dropped unless `keep` is set.
struct RunDir {
    path: PathBuf,
    keep: bool,
}

impl RunDir {
    fn create(work_dir: &Path) -> Result<RunDir> {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis())
            .unwrap_or_default();
        let path = work_dir.join(format!("queen-bench-{}-{millis}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("create {}", path.display()))?;
        // As root, PostgreSQL runs as `postgres`, which must traverse this directory.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("chmod 0755 {}", path.display()))?;
        Ok(RunDir { path, keep: false })
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("queen-load: run directory kept: {}", self.path.display());
        } else if let Err(error) = std::fs::remove_dir_all(&self.path) {
            eprintln!("queen-load: cannot remove {}: {error}", self.path.display());
        }
    }
}

/// A running `queen-server` child. Dropping it kills the process.
pub(crate) struct Broker {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Broker {
    /// Start `binary` on a free port against `database_url`, logging to `log`,
    /// and wait until `GET /health` answers 200.
    pub(crate) async fn start(
        binary: &Path,
        database_url: &str,
        log: PathBuf,
        extra_env: &[(String, String)],
    ) -> Result<Broker> {
        let port = free_port()?;
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let mut cmd = Command::new(binary);
        for var in DATABASE_VARS {
            cmd.env_remove(var);
        }
        // The push spool next to the broker's log, one directory per broker.
        let spool = log.with_extension("spool");
        cmd.env("QUEEN_DATABASE_URL", database_url)
            .env("HOST", "127.0.0.1")
            .env("PORT", port.to_string())
            .env("FILE_BUFFER_DIR", &spool)
            .env("RUST_LOG", "warn");
        for (key, value) in extra_env {
            cmd.env(key, value);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        let child = cmd
            .spawn()
            .with_context(|| format!("start {}", binary.display()))?;
        let mut broker = Broker {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log,
        };
        broker.wait_healthy().await?;
        Ok(broker)
    }

    /// The address the broker listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The broker's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn wait_healthy(&mut self) -> Result<()> {
        let deadline = Instant::now() + HEALTHY_WITHIN;
        loop {
            if let Some(status) = self.child.try_wait().context("wait for queen-server")? {
                return Err(Error::msg(format!(
                    "queen-server exited during start ({status}); its log ends with:\n{}",
                    self.log_tail()
                )));
            }
            if let Ok(mut conn) = Conn::connect(self.addr).await {
                if let Ok(reply) = conn.get("/health").await {
                    if reply.status == hyper::StatusCode::OK {
                        return Ok(());
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(Error::msg(format!(
                    "queen-server not healthy within {HEALTHY_WITHIN:?}; its log ends with:\n{}",
                    self.log_tail()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Fail if the broker has exited.
    pub(crate) fn check_alive(&mut self) -> Result<()> {
        match self.child.try_wait().context("wait for queen-server")? {
            None => Ok(()),
            Some(status) => Err(Error::msg(format!(
                "queen-server exited ({status}); its log ends with:\n{}",
                self.log_tail()
            ))),
        }
    }

    /// SIGTERM, then wait for a clean exit. Its PostgreSQL sessions end with it,
    /// which flushes their pending statistics.
    pub(crate) async fn stop(mut self) -> Result<()> {
        let pid = i32::try_from(self.child.id())
            .map(nix::unistd::Pid::from_raw)
            .context("queen-server pid")?;
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)
            .context("send SIGTERM to queen-server")?;
        let deadline = Instant::now() + EXIT_WITHIN;
        loop {
            if let Some(status) = self.child.try_wait().context("wait for queen-server")? {
                if status.success() {
                    return Ok(());
                }
                return Err(Error::msg(format!(
                    "queen-server exited with {status} on SIGTERM; its log ends with:\n{}",
                    self.log_tail()
                )));
            }
            if Instant::now() > deadline {
                return Err(Error::msg(format!(
                    "queen-server still running {EXIT_WITHIN:?} after SIGTERM"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The last lines of the broker's log.
    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Process ids of `brokers`, for [`crate::measure::cpu::sample`].
pub(crate) fn pids(brokers: &[Broker]) -> Vec<u32> {
    brokers.iter().map(Broker::pid).collect()
}

/// Fail if any broker has exited.
pub(crate) fn check_alive(brokers: &mut [Broker]) -> Result<()> {
    brokers.iter_mut().try_for_each(Broker::check_alive)
}

/// Stop every broker (SIGTERM, clean exit); the first failure is returned
/// after all were asked to stop.
pub(crate) async fn stop_all(brokers: Vec<Broker>) -> Result<()> {
    let mut failure = None;
    for broker in brokers {
        if let Err(error) = broker.stop().await {
            failure.get_or_insert(error);
        }
    }
    failure.map_or(Ok(()), Err)
}

/// A port nothing listens on right now.
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("bind a free port")?;
    Ok(listener.local_addr().context("local address")?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_settings_are_name_equals_value() {
        assert_eq!(
            parse_pg_setting("synchronous_commit=off").as_deref(),
            Ok("synchronous_commit=off")
        );
        assert_eq!(
            parse_pg_setting("max_wal_size=4GB").as_deref(),
            Ok("max_wal_size=4GB")
        );
        assert!(parse_pg_setting("checkpoint_timeout=15min").is_ok());
        assert!(parse_pg_setting("synchronous_commit").is_err());
        assert!(parse_pg_setting("=on").is_err());
        assert!(parse_pg_setting("fsync=").is_err());
        assert!(parse_pg_setting("Shared_Buffers=1GB").is_err());
        assert!(parse_pg_setting("work_mem=4MB -c fsync=off").is_err());
        assert!(parse_pg_setting("search_path='a'").is_err());
        assert!(parse_pg_setting("work_mem=1$(id)").is_err());
    }
}
