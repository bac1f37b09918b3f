//! A PostgreSQL cluster that Queen manages itself.
//!
//! The broker uses this when no database is configured (decisions.md §10), and the
//! test kit uses it for one throwaway cluster per test binary.
//! The cluster listens only on a Unix socket inside its data directory
//! (`listen_addresses = ''`), so two clusters on one machine never collide on a port.
//!
//! PostgreSQL refuses to run as root.
//! When the current user is root, every server command runs through
//! `runuser -u postgres --` and the data directory is handed to the `postgres` user.
//!
//! All commands here are blocking (`std::process`); callers on an async runtime run
//! them on a blocking thread or at startup before serving.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::PgError;

/// The superuser name `initdb` creates in a managed cluster.
pub const SUPERUSER: &str = "postgres";

/// The port number of a managed cluster.
/// It only names the socket file (`.s.PGSQL.5432`): nothing listens on TCP.
pub const PORT: u16 = 5432;

/// The account PostgreSQL runs as when Queen itself runs as root.
const SERVICE_USER: &str = "postgres";

/// Where Debian-style packages install versioned server binaries.
const VERSIONED_BIN_GLOB_ROOT: &str = "/usr/lib/postgresql";

/// The Unix socket path limit (`sun_path`) less the file name PostgreSQL appends.
const MAX_SOCKET_DIR_LEN: usize = 107 - ".s.PGSQL.5432".len() - 1;

/// Located PostgreSQL server binaries.
#[derive(Debug, Clone)]
pub struct PgBinaries {
    /// Path of `initdb`.
    pub initdb: PathBuf,
    /// Path of `pg_ctl`.
    pub pg_ctl: PathBuf,
}

impl PgBinaries {
    /// Find `initdb` and `pg_ctl` (where [`locate_program`] looks).
    pub fn locate(bin_dir: Option<&Path>) -> Result<PgBinaries, PgError> {
        let find = |program| {
            find_program(bin_dir, program)
                .map_err(|searched| PgError::BinariesNotFound { program, searched })
        };
        Ok(PgBinaries {
            initdb: find("initdb")?,
            pg_ctl: find("pg_ctl")?,
        })
    }
}

/// Find PostgreSQL program `program` (`pg_dump`, `pg_restore`, ...): only
/// in `bin_dir` when one is given, otherwise on `PATH`, then under
/// `/usr/lib/postgresql/*/bin` (newest major version first).
pub fn locate_program(bin_dir: Option<&Path>, program: &'static str) -> Result<PathBuf, PgError> {
    find_program(bin_dir, program)
        .map_err(|searched| PgError::ProgramNotFound { program, searched })
}

/// [`locate_program`]; the error is where it looked.
fn find_program(bin_dir: Option<&Path>, program: &str) -> Result<PathBuf, String> {
    let (dirs, searched) = match bin_dir {
        Some(dir) => (vec![dir.to_owned()], dir.display().to_string()),
        None => {
            let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
                .map(|path| std::env::split_paths(&path).collect())
                .unwrap_or_default();
            dirs.extend(versioned_bin_dirs());
            (dirs, format!("PATH and {VERSIONED_BIN_GLOB_ROOT}/*/bin"))
        }
    };
    dirs.iter()
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .ok_or(searched)
}

/// `/usr/lib/postgresql/<major>/bin`, newest major first.
fn versioned_bin_dirs() -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(VERSIONED_BIN_GLOB_ROOT) else {
        return Vec::new();
    };
    let mut versions: Vec<(u32, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((major, entry.path().join("bin")))
        })
        .collect();
    versions.sort_by_key(|(major, _)| std::cmp::Reverse(*major));
    versions.into_iter().map(|(_, dir)| dir).collect()
}

/// Where a root-run broker puts its managed cluster when the default data
/// directory lies out of the `postgres` user's reach (see [`default_data_dir`]).
pub const ROOT_FALLBACK_PARENT: &str = "/var/lib/queen";

/// Where the default data directory ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDirChoice {
    /// The directory to use.
    pub path: PathBuf,
    /// Set when `path` is not the requested directory: the directory PostgreSQL
    /// could not reach.
    pub unreachable: Option<PathBuf>,
}

/// Resolve the broker's *default* data directory (`requested`, usually
/// `./queen-data`, which the operator did not choose).
///
/// When not root, or when the `postgres` user can reach the directory that
/// would hold it, that is the answer. A root user in a home directory such as
/// `/root/project` is not so lucky: `/root` is mode 0700, and PostgreSQL runs as
/// `postgres`. Then the cluster goes to
/// `/var/lib/queen/<name>-<hash of the requested path>`, one per requested
/// location, so two checkouts never share a cluster and a restart from the same
/// place finds its cluster again. The permissions of directories the caller did
/// not create are never changed: `/var/lib/queen` is set to 0755 only when this
/// function creates it. A data directory the operator chose (`QUEEN_DATA_DIR`)
/// is never redirected; [`Cluster::init_or_reuse`] refuses it with a reason.
pub fn default_data_dir(requested: &Path) -> Result<DataDirChoice, PgError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| PgError::Io { path, source }
    };
    let absolute = std::path::absolute(requested).map_err(io(requested))?;
    let as_requested = DataDirChoice {
        path: requested.to_owned(),
        unreachable: None,
    };
    if !nix::unistd::Uid::effective().is_root() {
        return Ok(as_requested);
    }
    // The nearest directory that exists is the one PostgreSQL must traverse.
    let existing = absolute
        .ancestors()
        .skip(1)
        .find(|dir| dir.is_dir())
        .unwrap_or_else(|| Path::new("/"));
    if service_user_passes("-x", existing) {
        return Ok(as_requested);
    }
    let parent = Path::new(ROOT_FALLBACK_PARENT);
    if !parent.exists() {
        fs::create_dir_all(parent).map_err(io(parent))?;
        // Ours, so ours to open: PostgreSQL must traverse it whatever the umask.
        fs::set_permissions(parent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(io(parent))?;
    }
    if !service_user_passes("-x", parent) {
        return Err(PgError::DataDir {
            path: absolute,
            reason: format!(
                "the `{SERVICE_USER}` user can reach neither it nor {ROOT_FALLBACK_PARENT}; \
                 set QUEEN_DATA_DIR to a directory that user can reach"
            ),
        });
    }
    Ok(DataDirChoice {
        path: parent.join(fallback_name(existing, &absolute)),
        unreachable: Some(absolute),
    })
}

/// `<last component of the holding directory>-<8 hex digits of the path's hash>`.
fn fallback_name(holder: &Path, absolute: &Path) -> String {
    let label: String = holder
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(32)
        .collect();
    let hash = blake3::hash(absolute.as_os_str().as_encoded_bytes());
    let short = hex::encode(&hash.as_bytes()[..4]);
    if label.is_empty() {
        short
    } else {
        format!("{label}-{short}")
    }
}

/// A command for PostgreSQL server binary `program` (`pg_ctl`, `initdb`,
/// ...), run as the `postgres` user through `runuser` when this process is
/// root (the server binaries refuse root), with stdin closed: for an
/// instance this crate does not manage, such as a test's Citus worker.
pub fn service_command(program: &Path) -> Command {
    command_as(run_as(), program)
}

/// The user the server binaries run as: the service user when this process
/// is root, else this process's own (`None`).
fn run_as() -> Option<&'static str> {
    nix::unistd::Uid::effective()
        .is_root()
        .then_some(SERVICE_USER)
}

/// `program` run as `user` through `runuser` when given, stdin closed.
fn command_as(user: Option<&str>, program: &Path) -> Command {
    let mut cmd = match user {
        Some(user) => {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", user, "--"]).arg(program);
            cmd
        }
        None => Command::new(program),
    };
    cmd.stdin(Stdio::null());
    cmd
}

/// True when `test <flag> <path>` succeeds as the service user.
fn service_user_passes(flag: &str, path: &Path) -> bool {
    Command::new("runuser")
        .args(["-u", SERVICE_USER, "--", "test", flag])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// How a managed cluster is created and started.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The data directory; created (and initialised) if it holds no cluster yet.
    pub data_dir: PathBuf,
    /// Durable clusters keep PostgreSQL's crash-safety settings.
    /// Throwaway test clusters turn off `fsync`, `synchronous_commit` and
    /// `full_page_writes`: a crash loses the cluster, which a test does not mind.
    pub durable: bool,
    /// `max_connections` of the server.
    pub max_connections: u32,
    /// Look for the server binaries only here (see [`PgBinaries::locate`]).
    pub bin_dir: Option<PathBuf>,
    /// Extra server settings, `name=value` each, passed as `-c` at start
    /// (benchmarks compare settings this way).
    pub settings: Vec<String>,
}

impl ClusterOptions {
    /// Options for a durable cluster in `data_dir`.
    pub fn durable(data_dir: impl Into<PathBuf>) -> ClusterOptions {
        ClusterOptions {
            data_dir: data_dir.into(),
            durable: true,
            max_connections: 200,
            bin_dir: None,
            settings: Vec::new(),
        }
    }

    /// Options for a throwaway cluster in `data_dir` (no fsync).
    pub fn throwaway(data_dir: impl Into<PathBuf>) -> ClusterOptions {
        ClusterOptions {
            data_dir: data_dir.into(),
            durable: false,
            max_connections: 300,
            bin_dir: None,
            settings: Vec::new(),
        }
    }
}

/// A managed cluster: initialised on disk, possibly running.
#[derive(Debug)]
pub struct Cluster {
    binaries: PgBinaries,
    options: ClusterOptions,
    /// `Some("postgres")` when commands must run through `runuser`.
    run_as: Option<&'static str>,
    /// True when this value started the server, and so must stop it.
    started_here: bool,
}

impl Cluster {
    /// Make sure `options.data_dir` holds a cluster: `initdb` on first use, reuse after.
    pub fn init_or_reuse(options: ClusterOptions) -> Result<Cluster, PgError> {
        let binaries = PgBinaries::locate(options.bin_dir.as_deref())?;
        let run_as = run_as();
        fs::create_dir_all(&options.data_dir).map_err(|source| PgError::Io {
            path: options.data_dir.clone(),
            source,
        })?;
        let data_dir = fs::canonicalize(&options.data_dir).map_err(|source| PgError::Io {
            path: options.data_dir.clone(),
            source,
        })?;
        if data_dir.as_os_str().len() > MAX_SOCKET_DIR_LEN {
            return Err(PgError::DataDir {
                path: data_dir,
                reason: format!(
                    "the path is longer than {MAX_SOCKET_DIR_LEN} bytes, too long for the Unix \
                     socket PostgreSQL creates inside it; choose a shorter QUEEN_DATA_DIR"
                ),
            });
        }
        let cluster = Cluster {
            binaries,
            options: ClusterOptions {
                data_dir,
                ..options
            },
            run_as,
            started_here: false,
        };
        cluster.hand_over_data_dir()?;
        if !cluster.data_dir().join("PG_VERSION").is_file() {
            cluster.initdb()?;
        }
        Ok(cluster)
    }

    /// The (canonical) data directory.
    pub fn data_dir(&self) -> &Path {
        &self.options.data_dir
    }

    /// The directory holding the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        self.data_dir()
    }

    /// The server log file.
    pub fn log_file(&self) -> PathBuf {
        self.data_dir().join("postgres.log")
    }

    /// Connection settings for database `dbname` as the managed superuser.
    pub fn connect_config(&self, dbname: &str) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(self.socket_dir())
            .port(PORT)
            .user(SUPERUSER)
            .dbname(dbname);
        queen_sql::connect::apply_session_defaults(&mut config);
        config
    }

    /// True when a postmaster is running on this data directory.
    pub fn is_running(&self) -> bool {
        let mut cmd = self.command(&self.binaries.pg_ctl);
        cmd.arg("status").arg("-D").arg(self.data_dir());
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        cmd.status().is_ok_and(|status| status.success())
    }

    /// Start the server and wait until it accepts connections.
    /// A server already running on this directory is reused and left running on stop.
    pub fn start(&mut self) -> Result<(), PgError> {
        if self.is_running() {
            tracing::info!(data_dir = %self.data_dir().display(), "reusing running PostgreSQL");
            return Ok(());
        }
        let mut settings = vec![
            "-c listen_addresses=''".to_owned(),
            format!(
                "-c unix_socket_directories='{}'",
                self.socket_dir().display()
            ),
            format!("-c port={PORT}"),
            format!("-c max_connections={}", self.options.max_connections),
        ];
        settings.extend(
            self.options
                .settings
                .iter()
                .map(|setting| format!("-c {setting}")),
        );
        if !self.options.durable {
            settings.extend(
                [
                    "fsync=off",
                    "synchronous_commit=off",
                    "full_page_writes=off",
                ]
                .iter()
                .map(|setting| format!("-c {setting}")),
            );
        }
        let mut cmd = self.command(&self.binaries.pg_ctl);
        cmd.arg("start")
            .arg("-w")
            .arg("-t")
            .arg("60")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.log_file())
            .arg("-o")
            .arg(settings.join(" "));
        self.run(cmd, "pg_ctl start")?;
        self.started_here = true;
        Ok(())
    }

    /// Stop the server if this value started it (fast shutdown: sessions are
    /// disconnected, transactions rolled back, then a clean checkpoint).
    pub fn stop(&mut self) -> Result<(), PgError> {
        if !self.started_here {
            return Ok(());
        }
        let mut cmd = self.command(&self.binaries.pg_ctl);
        cmd.arg("stop")
            .arg("-w")
            .arg("-m")
            .arg("fast")
            .arg("-D")
            .arg(self.data_dir());
        self.run(cmd, "pg_ctl stop")?;
        self.started_here = false;
        Ok(())
    }

    /// A shell command line that stops this cluster immediately, for a watchdog
    /// process that outlives the caller (the test kit uses it).
    pub fn stop_command_line(&self) -> String {
        let pg_ctl = shell_quote(self.binaries.pg_ctl.as_os_str());
        let data_dir = shell_quote(self.data_dir().as_os_str());
        let runuser = match self.run_as {
            Some(user) => format!("runuser -u {user} -- "),
            None => String::new(),
        };
        format!("{runuser}{pg_ctl} stop -m immediate -D {data_dir}")
    }

    fn initdb(&self) -> Result<(), PgError> {
        tracing::info!(data_dir = %self.data_dir().display(), "initialising PostgreSQL cluster");
        let mut cmd = self.command(&self.binaries.initdb);
        cmd.arg("-D")
            .arg(self.data_dir())
            .arg("-U")
            .arg(SUPERUSER)
            .arg("-A")
            .arg("trust")
            .arg("-E")
            .arg("UTF8")
            .arg("--locale=C");
        if !self.options.durable {
            cmd.arg("--no-sync");
        }
        self.run(cmd, "initdb")
    }

    /// When root, give the data directory to the service user and check that it
    /// can actually reach it (a parent such as `/root` is often mode 0700).
    fn hand_over_data_dir(&self) -> Result<(), PgError> {
        let Some(user) = self.run_as else {
            return Ok(());
        };
        let account = nix::unistd::User::from_name(user)
            .ok()
            .flatten()
            .ok_or_else(|| PgError::DataDir {
                path: self.data_dir().to_owned(),
                reason: format!(
                    "running as root, PostgreSQL must run as the `{user}` user, which does not \
                     exist; create it or run Queen as an ordinary user"
                ),
            })?;
        nix::unistd::chown(self.data_dir(), Some(account.uid), Some(account.gid)).map_err(
            |errno| PgError::Io {
                path: self.data_dir().to_owned(),
                source: errno.into(),
            },
        )?;
        if !service_user_passes("-w", self.data_dir()) {
            return Err(PgError::DataDir {
                path: self.data_dir().to_owned(),
                reason: format!(
                    "the `{user}` user cannot reach it (a parent directory is not searchable by \
                     that user); set QUEEN_DATA_DIR to a directory such as /var/lib/queen"
                ),
            });
        }
        Ok(())
    }

    /// A command for a server binary, wrapped in `runuser` when root.
    fn command(&self, program: &Path) -> Command {
        command_as(self.run_as, program)
    }

    /// Run a management command, turning failure into [`PgError::Command`] with
    /// its stderr and the tail of the server log.
    fn run(&self, mut cmd: Command, what: &str) -> Result<(), PgError> {
        // Output goes to a file rather than a pipe: the postmaster that `pg_ctl start`
        // spawns would otherwise inherit the pipe and `output()` would never see EOF.
        let capture = tempfile_in_tmp()?;
        let stdout = capture.try_clone().map_err(|source| PgError::Io {
            path: PathBuf::from("/tmp"),
            source,
        })?;
        cmd.stdout(stdout)
            .stderr(capture.try_clone().map_err(|source| PgError::Io {
                path: PathBuf::from("/tmp"),
                source,
            })?);
        let status = cmd.status().map_err(|source| PgError::Io {
            path: PathBuf::from(what),
            source,
        })?;
        if status.success() {
            return Ok(());
        }
        let mut output = read_file_from_start(capture);
        if let Ok(log) = fs::read_to_string(self.log_file()) {
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            output.push_str("\nserver log tail:\n");
            for line in tail.into_iter().rev() {
                output.push_str(line);
                output.push('\n');
            }
        }
        Err(PgError::Command {
            program: what.to_owned(),
            status: status.to_string(),
            stderr: output,
        })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.started_here {
            if let Err(error) = self.stop() {
                tracing::warn!(%error, "could not stop managed PostgreSQL");
            }
        }
    }
}

/// An anonymous temporary file for command output.
fn tempfile_in_tmp() -> Result<fs::File, PgError> {
    let dir = std::env::temp_dir();
    let path = dir.join(format!(
        "queen-cmd-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    ));
    let file = fs::OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|source| PgError::Io {
            path: path.clone(),
            source,
        })?;
    // Unlinked at once: the open handle keeps it readable, and nothing is left behind.
    let _ = fs::remove_file(&path);
    Ok(file)
}

fn read_file_from_start(mut file: fs::File) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = String::new();
    if file.seek(SeekFrom::Start(0)).is_ok() {
        let _ = file.read_to_string(&mut text);
    }
    text
}

/// Single-quote a path for `sh`.
fn shell_quote(value: &std::ffi::OsStr) -> String {
    let text: OsString = value.to_owned();
    format!("'{}'", text.to_string_lossy().replace('\'', "'\\''"))
}
