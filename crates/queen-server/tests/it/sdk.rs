//! The official Python client against the real binary.
//!
//! `queen-mq` 0.15.0 from PyPI (pinned in `tests/sdk/requirements.txt`) is
//! installed by this test into a virtual environment under the target
//! directory (`target/sdk-venv`), created on first use and reused while the
//! requirements file and the installed version still match. The script
//! `tests/sdk/e2e.py` then drives a freshly booted broker the way the SDK's
//! README shows users doing it: push, consume with a handler, ack, fail into
//! the DLQ, renew a lease, commit a transaction, write traces.
//!
//! Needs `python3` (CPython 3.8 or later with the `venv` module) and, on the
//! first run, access to PyPI.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use queen_testkit::TestDb;

use crate::harness::Broker;

/// The SDK version the script is written against.
const SDK_VERSION: &str = "0.15.0";

/// Creating the environment and installing the SDK (downloads included).
const INSTALL_LIMIT: Duration = Duration::from_secs(600);

/// The whole Python run; each scenario has its own 90 s limit inside.
const SCRIPT_LIMIT: Duration = Duration::from_secs(600);

/// The file recording which requirements the environment was built from.
const STAMP: &str = ".queen-requirements";

pub(crate) fn workspace_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if Path::new(&dir).is_absolute() => PathBuf::from(dir),
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    }
}

/// What a finished (or killed) child printed.
pub(crate) struct Finished {
    pub(crate) status: Option<ExitStatus>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Finished {
    pub(crate) fn ok(&self) -> bool {
        self.status.is_some_and(|status| status.success())
    }

    pub(crate) fn describe(&self) -> String {
        let status = self.status.map_or_else(
            || "killed after its time limit".to_owned(),
            |s| s.to_string(),
        );
        format!(
            "exit: {status}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout, self.stderr
        )
    }
}

/// Run `cmd` to completion, killing it after `limit`.
pub(crate) fn run_limited(cmd: &mut Command, limit: Duration) -> Result<Finished, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| format!("cannot run {cmd:?}: {error}"))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| format!("wait for {cmd:?}: {e}"))?
        {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Ok(Finished {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// The environment's interpreter, for an async test (panics with the reason
/// when the environment cannot be prepared).
pub(crate) async fn python() -> PathBuf {
    tokio::task::spawn_blocking(sdk_python)
        .await
        .expect("venv task")
        .unwrap_or_else(|error| panic!("cannot prepare the Python SDK environment: {error}"))
}

/// The environment's interpreter, creating the environment when needed.
/// Once per process; across processes a file lock lets one build it.
pub(crate) fn sdk_python() -> Result<PathBuf, String> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PYTHON.get_or_init(prepare_venv).clone()
}

fn prepare_venv() -> Result<PathBuf, String> {
    let requirements = workspace_root().join("tests/sdk/requirements.txt");
    let wanted = std::fs::read_to_string(&requirements)
        .map_err(|e| format!("read {}: {e}", requirements.display()))?;
    let target = target_dir();
    std::fs::create_dir_all(&target).map_err(|e| format!("create {}: {e}", target.display()))?;
    let venv = target.join("sdk-venv");
    let python = venv.join("bin/python");

    let lock_path = target.join("sdk-venv.lock");
    let lock_file = std::fs::File::create(&lock_path)
        .map_err(|e| format!("create {}: {e}", lock_path.display()))?;
    let _lock = Flock::lock(lock_file, FlockArg::LockExclusive)
        .map_err(|(_, e)| format!("lock {}: {e}", lock_path.display()))?;

    if venv_ready(&venv, &python, &wanted) {
        return Ok(python);
    }
    let system_python = std::env::var("QUEEN_SDK_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let version = run_limited(
        Command::new(&system_python).arg("--version"),
        Duration::from_secs(30),
    )
    .map_err(|e| {
        format!(
            "the Python SDK test needs CPython >= 3.8 with the venv module as `{system_python}` \
             (set QUEEN_SDK_PYTHON to use another interpreter; on Debian/Ubuntu: \
             apt-get install python3 python3-venv): {e}"
        )
    })?;
    if !version.ok() {
        return Err(format!(
            "`{system_python} --version` failed\n{}",
            version.describe()
        ));
    }
    eprintln!(
        "sdk: creating {} ({}) and installing queen-mq {SDK_VERSION}",
        venv.display(),
        version.stdout.trim()
    );
    if venv.exists() {
        std::fs::remove_dir_all(&venv)
            .map_err(|e| format!("remove stale {}: {e}", venv.display()))?;
    }
    let created = run_limited(
        Command::new(&system_python)
            .arg("-m")
            .arg("venv")
            .arg(&venv),
        INSTALL_LIMIT,
    )?;
    if !created.ok() {
        return Err(format!(
            "`{system_python} -m venv {}` failed (on Debian/Ubuntu: apt-get install python3-venv)\n{}",
            venv.display(),
            created.describe()
        ));
    }
    let installed = run_limited(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg("--requirement")
            .arg(&requirements)
            .env("PIP_NO_INPUT", "1"),
        INSTALL_LIMIT,
    )?;
    if !installed.ok() {
        return Err(format!(
            "pip install -r {} failed\n{}",
            requirements.display(),
            installed.describe()
        ));
    }
    std::fs::write(venv.join(STAMP), &wanted).map_err(|e| format!("write stamp: {e}"))?;
    if venv_ready(&venv, &python, &wanted) {
        Ok(python)
    } else {
        Err(format!(
            "queen-mq {SDK_VERSION} is still not importable from {} after installing it",
            venv.display()
        ))
    }
}

/// Built from the current requirements, and `import queen` gives the pinned version.
fn venv_ready(venv: &Path, python: &Path, wanted: &str) -> bool {
    let stamp = std::fs::read_to_string(venv.join(STAMP)).unwrap_or_default();
    if stamp != wanted || !python.is_file() {
        return false;
    }
    let probe = format!(
        "import queen, importlib.metadata as m, sys; \
         sys.exit(0 if m.version('queen-mq') == '{SDK_VERSION}' else 1)"
    );
    run_limited(
        Command::new(python).args(["-c", &probe]),
        Duration::from_secs(60),
    )
    .is_ok_and(|done| done.ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_pushes_consumes_acks_dead_letters_renews_and_commits() {
    let python = python().await;

    let scratch = tempfile::tempdir().expect("temp dir");
    let db = TestDb::empty().await;
    let url = db.url();
    let broker = Broker::start(scratch.path(), &[("QUEEN_DATABASE_URL", &url)]).await;

    let script = workspace_root().join("tests/sdk/e2e.py");
    let base = broker.client.base().to_owned();
    let no_proxy = match std::env::var("NO_PROXY") {
        Ok(list) if !list.is_empty() => format!("{list},127.0.0.1,localhost"),
        _ => "127.0.0.1,localhost".to_owned(),
    };
    let run = tokio::task::spawn_blocking(move || {
        run_limited(
            Command::new(&python)
                .arg(&script)
                .env("QUEEN_URL", base)
                .env("PYTHONUNBUFFERED", "1")
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env("NO_PROXY", &no_proxy)
                .env("no_proxy", &no_proxy),
            SCRIPT_LIMIT,
        )
    })
    .await
    .expect("script task")
    .unwrap_or_else(|error| panic!("{error}"));

    if !run.ok() {
        let log = broker.log_text();
        let tail: String = log
            .lines()
            .rev()
            .take(200)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        panic!(
            "the Python SDK test failed\n{}\n--- broker log (last 200 lines) ---\n{tail}",
            run.describe()
        );
    }
    println!("{}", run.describe());
    assert!(
        run.stdout.contains("all scenarios passed"),
        "the script exited 0 without running its scenarios\n{}",
        run.describe()
    );
    let (status, log) = broker.terminate();
    assert!(status.success(), "broker exit status {status}:\n{log}");
}

/// The official Python client's `Stream` API (a tumbling-window
/// aggregation with a sink, `tests/sdk/stream_e2e.py`) over 3,000 messages
/// on four partitions, with the broker restarted (SIGTERM, then a new
/// process on the same port and database) while the stream runs: every
/// window's aggregate arrives in the sink exactly once and exactly right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_stream_sdk_aggregates_windows_exactly_across_a_broker_restart() {
    let python = python().await;
    let scratch = tempfile::tempdir().expect("temp dir");
    let db = TestDb::empty().await;
    let url = db.url();
    let vars = [("QUEEN_DATABASE_URL", url.as_str())];
    let broker = Broker::start(scratch.path(), &vars).await;
    let port = broker.port();

    let run = format!("r{}", std::process::id());
    let script = workspace_root().join("tests/sdk/stream_e2e.py");
    let base = broker.client.base().to_owned();
    let no_proxy = match std::env::var("NO_PROXY") {
        Ok(list) if !list.is_empty() => format!("{list},127.0.0.1,localhost"),
        _ => "127.0.0.1,localhost".to_owned(),
    };
    let script_run = run.clone();
    let script_task = tokio::task::spawn_blocking(move || {
        run_limited(
            Command::new(&python)
                .arg(&script)
                .env("QUEEN_URL", base)
                .env("QUEEN_STREAM_RUN", script_run)
                .env("PYTHONUNBUFFERED", "1")
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env("NO_PROXY", &no_proxy)
                .env("no_proxy", &no_proxy),
            SCRIPT_LIMIT,
        )
    });

    // Restart the broker once the sink holds some windows but not all.
    let sql = db.client().await;
    let sink = format!(
        "SELECT coalesce(sum(s.msg_count), 0)::bigint FROM queen.log_segments s \
           JOIN queen.log_partitions p ON p.id = s.partition_id \
           JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'stream-sink-{run}'"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let at_restart = loop {
        let windows: i64 = match sql.query_one(sink.as_str(), &[]).await {
            Ok(row) => row.get(0),
            Err(_) => 0,
        };
        if windows >= 10 {
            break windows;
        }
        assert!(
            std::time::Instant::now() < deadline && !script_task.is_finished(),
            "the stream wrote no window"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        at_restart < 300,
        "the stream had finished before the restart"
    );
    let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");
    let broker = Broker::start_at(port, None, scratch.path(), &vars).await;

    let finished = script_task
        .await
        .expect("script task")
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(
        finished.ok(),
        "the stream e2e failed (restart at {at_restart} windows)\n{}\n--- broker log ---\n{}",
        finished.describe(),
        broker.log_text()
    );
    assert!(
        finished.stdout.contains("all 300 windows exactly right"),
        "{}",
        finished.describe()
    );
    println!(
        "restart at {at_restart} of 300 windows\n{}",
        finished.stdout
    );
    let (status, log) = broker.terminate();
    assert!(status.success(), "broker exit status {status}:\n{log}");
}

/// The official Python client's windows with a grace period and the idle
/// flush (`tests/sdk/stream_windows_e2e.py`): a tumbling and a session
/// window on processing time, closed only by the idle flush, each close
/// exactly once, with the right aggregate, and none before its end plus
/// the grace period (the runner's flush asks `/streams/v1/state/get` for
/// the rows with `ripe_at_or_before`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_stream_sdk_closes_windows_after_their_grace_period() {
    let python = python().await;
    let scratch = tempfile::tempdir().expect("temp dir");
    let db = TestDb::empty().await;
    let url = db.url();
    let broker = Broker::start(scratch.path(), &[("QUEEN_DATABASE_URL", &url)]).await;
    let script = workspace_root().join("tests/sdk/stream_windows_e2e.py");
    let base = broker.client.base().to_owned();
    let no_proxy = match std::env::var("NO_PROXY") {
        Ok(list) if !list.is_empty() => format!("{list},127.0.0.1,localhost"),
        _ => "127.0.0.1,localhost".to_owned(),
    };
    let run = tokio::task::spawn_blocking(move || {
        run_limited(
            Command::new(&python)
                .arg(&script)
                .env("QUEEN_URL", base)
                .env("QUEEN_STREAM_RUN", format!("w{}", std::process::id()))
                .env("PYTHONUNBUFFERED", "1")
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env("NO_PROXY", &no_proxy)
                .env("no_proxy", &no_proxy),
            SCRIPT_LIMIT,
        )
    })
    .await
    .expect("script task")
    .unwrap_or_else(|error| panic!("{error}"));
    assert!(
        run.ok()
            && run
                .stdout
                .contains("closed once, right, after their grace period"),
        "the windows e2e failed\n{}\n--- broker log ---\n{}",
        run.describe(),
        broker.log_text()
    );
    println!("{}", run.stdout);
    let (status, log) = broker.terminate();
    assert!(status.success(), "broker exit status {status}:\n{log}");
}

/// The official Python client with a bearer token against a broker
/// with `JWT_ENABLED` (HS256): read-write works, no token is 401, read-only
/// pushing is 403, another tenant's token sees nothing of the queue, and the
/// token's `sub` is each message's producer (`tests/sdk/auth_e2e.py`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_sends_its_bearer_token() {
    let python = python().await;
    let secret = "sdk-auth-test-secret";
    let token = |role: &str, tenant: &str| {
        let exp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 600;
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
            &serde_json::json!({"sub": format!("sdk-{tenant}"), "role": role, "tenant": tenant,
                                "exp": exp}),
            &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    };
    let scratch = tempfile::tempdir().expect("temp dir");
    let db = TestDb::empty().await;
    let url = db.url();
    let broker = Broker::start(
        scratch.path(),
        &[
            ("QUEEN_DATABASE_URL", &url),
            ("JWT_ENABLED", "true"),
            ("JWT_SECRET", secret),
        ],
    )
    .await;
    let script = workspace_root().join("tests/sdk/auth_e2e.py");
    let base = broker.client.base().to_owned();
    let (rw, ro) = (token("read-write", "acme"), token("read-only", "acme"));
    let other = token("read-write", "globex");
    let run = tokio::task::spawn_blocking(move || {
        run_limited(
            Command::new(&python)
                .arg(&script)
                .env("QUEEN_URL", &base)
                .env("QUEEN_TOKEN_RW", &rw)
                .env("QUEEN_TOKEN_RO", &ro)
                .env("QUEEN_TOKEN_OTHER_TENANT", &other)
                .env("NO_PROXY", "127.0.0.1,localhost"),
            SCRIPT_LIMIT,
        )
    })
    .await
    .expect("script task")
    .unwrap_or_else(|error| panic!("{error}"));
    assert!(
        run.ok() && run.stdout.contains("auth: all scenarios passed"),
        "{}",
        run.describe()
    );
    let (status, log) = broker.terminate();
    assert!(status.success(), "broker exit status {status}:\n{log}");
}
