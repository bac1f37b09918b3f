//! Boot, managed PostgreSQL, health and shutdown of the real binary.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use queen_pg::cluster::{Cluster, ClusterOptions};
use queen_testkit::TestDb;

use crate::harness::{command, Broker};

/// A temp dir the `postgres` user can traverse (tests may run as root).
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("queen-srv-")
        .tempdir_in("/tmp")
        .expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod temp dir");
    dir
}

async fn managed_client(data_dir: &Path) -> tokio_postgres::Client {
    let cluster = Cluster::init_or_reuse(ClusterOptions::durable(data_dir)).expect("reuse");
    queen_sql::connect::connect_one(&cluster.connect_config("queen"))
        .await
        .expect("connect to managed cluster")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_cluster_is_initialised_then_reused_and_stopped_on_shutdown() {
    let scratch = scratch();
    let data_dir: PathBuf = scratch.path().join("data");
    let data_dir_text = data_dir.display().to_string();
    let vars = [("QUEEN_DATA_DIR", data_dir_text.as_str())];

    let broker = Broker::start(scratch.path(), &vars).await;
    let health = broker.client.get("/health").await;
    assert_eq!(health.status, 200);
    let body = health.json();
    assert_eq!(body["status"], "healthy");
    assert_eq!(body["database"], "connected");
    assert!(data_dir.join("PG_VERSION").is_file(), "initdb did not run");
    let tables: i64 = managed_client(&data_dir)
        .await
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'queen' AND tablename = 'log_segments'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 1, "schema not applied to the managed database");
    managed_client(&data_dir)
        .await
        .batch_execute("CREATE TABLE public.survives_restart (x int); INSERT INTO public.survives_restart VALUES (7)")
        .await
        .unwrap();

    let (status, log) = broker.terminate();
    assert!(status.success(), "exit status {status}:\n{log}");
    assert!(log.contains("initialising PostgreSQL cluster"), "{log}");
    assert!(
        !data_dir.join("postmaster.pid").exists(),
        "managed PostgreSQL still running after shutdown:\n{log}"
    );

    let broker = Broker::start(scratch.path(), &vars).await;
    let kept: i32 = managed_client(&data_dir)
        .await
        .query_one("SELECT x FROM public.survives_restart", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 7, "the second start did not reuse the cluster");
    let (status, log) = broker.terminate();
    assert!(status.success(), "exit status {status}:\n{log}");
    assert!(
        !log.contains("initialising PostgreSQL cluster"),
        "second start ran initdb again:\n{log}"
    );
    assert!(!data_dir.join("postmaster.pid").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_answers_503_while_the_database_is_down() {
    let scratch = scratch();
    let data_dir = scratch.path().join("data");
    let data_dir_text = data_dir.display().to_string();
    let broker = Broker::start(scratch.path(), &[("QUEEN_DATA_DIR", &data_dir_text)]).await;
    assert_eq!(broker.client.get("/health").await.status, 200);

    let cluster = Cluster::init_or_reuse(ClusterOptions::durable(&data_dir)).unwrap();
    let stopped = std::process::Command::new("sh")
        .arg("-c")
        .arg(cluster.stop_command_line())
        .status()
        .unwrap();
    assert!(stopped.success());

    let health = broker.client.get("/health").await;
    assert_eq!(health.status, 503);
    let body = health.json();
    assert_eq!(body["status"], "unhealthy");
    assert_eq!(body["database"], "disconnected");

    let (status, log) = broker.terminate();
    assert!(status.success(), "exit status {status}:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_postgres_binaries_give_one_clear_error() {
    let scratch = scratch();
    let data_dir = scratch.path().join("data").display().to_string();
    let output = command(&[
        ("QUEEN_DATA_DIR", &data_dir),
        ("QUEEN_PG_BIN_DIR", "/nonexistent/postgresql/bin"),
        ("PORT", "0"),
    ])
    .output()
    .expect("run queen-server");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("queen-server:"))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains("PostgreSQL server binaries not found")
            && errors[0].contains("initdb")
            && errors[0].contains("/nonexistent/postgresql/bin")
            && errors[0].contains("QUEEN_DATABASE_URL"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_database_is_used_and_gets_the_schema() {
    let scratch = scratch();
    let db = TestDb::empty().await;
    let url = db.url();
    let unused_data_dir = scratch.path().join("must-not-exist");
    let unused_text = unused_data_dir.display().to_string();
    let broker = Broker::start(
        scratch.path(),
        &[
            ("QUEEN_DATABASE_URL", &url),
            ("QUEEN_DATA_DIR", &unused_text),
        ],
    )
    .await;
    let tables: i64 = db
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'queen'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(tables >= 7, "only {tables} queen tables");
    assert!(
        !unused_data_dir.exists(),
        "a managed cluster was created anyway"
    );
    let (status, _) = broker.terminate();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_booting_at_once_on_one_database_both_come_up() {
    let scratch = scratch();
    let db = TestDb::empty().await;
    let url = db.url();
    let vars = [("QUEEN_DATABASE_URL", url.as_str())];
    let (first, second) = tokio::join!(
        Broker::start(scratch.path(), &vars),
        Broker::start(scratch.path(), &vars)
    );
    for broker in [first, second] {
        assert_eq!(broker.client.get("/health").await.status, 200);
        let (status, log) = broker.terminate();
        assert!(status.success(), "{log}");
    }
}

#[test]
fn help_lists_every_setting_and_the_readme_documents_them() {
    let output = command(&[]).arg("--help").output().expect("run --help");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .expect("read README.md");
    let settings = settings_of_config_rs();
    assert!(settings.len() >= 25, "{settings:?}");
    for var in &settings {
        assert!(
            help.contains(&format!("[env: {var}")),
            "--help lacks {var}:\n{help}"
        );
        assert!(
            readme.contains(&format!("`{var}`")),
            "README.md lacks {var}"
        );
    }
}

/// Every environment variable `config.rs` defines (its `env = "..."`), read
/// from the source itself so a new setting cannot miss a check.
fn settings_of_config_rs() -> Vec<String> {
    let source = include_str!("../../src/config.rs");
    source
        .split("env = \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_one_list_of_database_variables_matches_the_settings() {
    let settings = settings_of_config_rs();
    for var in queen_pg::DATABASE_VARS {
        assert!(
            settings.iter().any(|setting| setting == var),
            "{var} is in DATABASE_VARS but not a setting"
        );
    }
    for setting in &settings {
        let picks_the_database = setting.starts_with("PG_")
            || setting.contains("DATABASE")
            || setting.starts_with("QUEEN_DATA_DIR")
            || setting.starts_with("QUEEN_PG_");
        assert_eq!(
            picks_the_database,
            queen_pg::DATABASE_VARS.contains(&setting.as_str()),
            "{setting}: DATABASE_VARS and the settings disagree"
        );
    }
}

/// Boot with `vars` (and a database): it must fail, saying `message`.
async fn refused_at_boot(vars: &[(&str, &str)], message: &str) {
    let db = TestDb::empty().await;
    let url = db.url();
    let mut all = vec![("QUEEN_DATABASE_URL", url.as_str()), ("PORT", "0")];
    all.extend_from_slice(vars);
    let output = command(&all).output().expect("run queen-server");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(message), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_encryption_key_is_refused_at_boot() {
    refused_at_boot(
        &[("QUEEN_ENCRYPTION_KEY", "not-hex")],
        "QUEEN_ENCRYPTION_KEY must be 64 hexadecimal characters",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_jwks_url_is_refused_at_boot_naming_it() {
    refused_at_boot(
        &[
            ("JWT_ENABLED", "true"),
            ("JWT_JWKS_URL", "jwks.example/keys"),
        ],
        "JWT_JWKS_URL is not a valid URL",
    )
    .await;
}

/// A JWKS server down at boot is a warning, not a failed boot: the broker
/// serves, and a token it cannot find a key for answers 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_server_down_at_boot_does_not_stop_the_broker() {
    use base64::Engine as _;

    let db = TestDb::empty().await;
    let url = db.url();
    let scratch = scratch();
    let jwks_url = format!("http://127.0.0.1:{}/jwks.json", crate::harness::free_port());
    let broker = Broker::start(
        scratch.path(),
        &[
            ("QUEEN_DATABASE_URL", &url),
            ("JWT_ENABLED", "true"),
            ("JWT_JWKS_URL", &jwks_url),
            ("JWT_JWKS_TIMEOUT_MS", "500"),
        ],
    )
    .await;
    // Only the header is read before the key lookup fails.
    let b64 = |json: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json);
    let token = format!(
        "{}.{}.AAAA",
        b64(r#"{"alg":"RS256","kid":"k1"}"#),
        b64(r#"{"sub":"s","role":"admin","exp":4102444800}"#)
    );
    let bearer = format!("Bearer {token}");
    let reply = broker
        .client
        .send_with(
            hyper::Method::GET,
            "/api/v1/dlq",
            bytes::Bytes::new(),
            &[("authorization", &bearer)],
        )
        .await;
    assert_eq!(
        (reply.status.as_u16(), reply.json()),
        (500, serde_json::json!({"error": "JWKS fetch failed"}))
    );
    let (status, log) = broker.terminate();
    assert!(status.success(), "exit status {status}:\n{log}");
    assert!(
        log.contains("JWKS fetch failed") && log.contains(&jwks_url),
        "{log}"
    );
    assert!(!log.contains(&token), "the log shows a token:\n{log}");
}

/// A spool directory the broker cannot create, or one holding pushes
/// spooled for another Queen database, stops the boot with its reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spool_directory_the_broker_cannot_use_stops_the_boot() {
    let db = TestDb::empty().await;
    let url = db.url();
    let output = command(&[
        ("QUEEN_DATABASE_URL", &url),
        ("FILE_BUFFER_DIR", "/proc/queen-cannot-create-this"),
        ("PORT", "0"),
    ])
    .output()
    .expect("run queen-server");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "cannot use the spool directory /proc/queen-cannot-create-this (FILE_BUFFER_DIR)"
        ),
        "{stderr}"
    );

    let scratch = scratch();
    let spool = scratch.path().join("spool");
    std::fs::create_dir(&spool).unwrap();
    std::fs::write(spool.join("spool-00000000000000000001.log"), b"").unwrap();
    let other = "0190a3c4-0000-7000-8000-000000000001";
    std::fs::write(spool.join("DATABASE"), format!("{other}\n")).unwrap();
    let dir = spool.display().to_string();
    let output = command(&[
        ("QUEEN_DATABASE_URL", &url),
        ("FILE_BUFFER_DIR", &dir),
        ("PORT", "0"),
    ])
    .output()
    .expect("run queen-server");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("holds pushes spooled for Queen database {other}"))
            && stderr.contains("a spool is never drained into another database"),
        "{stderr}"
    );
    assert!(spool.join("spool-00000000000000000001.log").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_cannot_share_a_spool_directory() {
    let db = TestDb::empty().await;
    let url = db.url();
    let scratch = scratch();
    let spool = scratch.path().join("spool").display().to_string();
    let vars = [
        ("QUEEN_DATABASE_URL", url.as_str()),
        ("FILE_BUFFER_DIR", spool.as_str()),
    ];
    let first = Broker::start(scratch.path(), &vars).await;
    let output = command(&[
        ("QUEEN_DATABASE_URL", &url),
        ("FILE_BUFFER_DIR", &spool),
        ("PORT", "0"),
    ])
    .output()
    .expect("run queen-server");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is the spool of another running broker")
            && stderr.contains("cannot use the spool directory"),
        "{stderr}"
    );
    let (status, log) = tokio::task::spawn_blocking(move || first.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");
}

/// The spool files directly in `dir` (not in its subdirectories).
fn spool_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|entry| entry.path().is_file())
                .filter_map(|entry| entry.file_name().into_string().ok())
                .filter(|name| {
                    (name.starts_with("spool-")
                        || name.starts_with("failed-")
                        || name == "held.log")
                        && !name.ends_with(".tmp")
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Two brokers in one working directory on the default spool directory,
/// one per port (`./queen-buffers/<PORT>`), both start; an upgraded broker
/// takes over what an earlier version spooled in `./queen-buffers` itself,
/// but never while another running broker holds it; the pushes it held are
/// stored exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_in_one_directory_spool_per_port_and_take_over_the_old_default() {
    let db = TestDb::empty().await;
    let url = db.url();
    let scratch = scratch();
    let cwd = scratch.path().join("work");
    std::fs::create_dir_all(&cwd).unwrap();
    let legacy = cwd.join("queen-buffers");
    // A broker of the earlier version: its default spool was ./queen-buffers.
    let old = Broker::start_in(
        Some(&cwd),
        scratch.path(),
        &[
            ("QUEEN_DATABASE_URL", &url),
            ("FILE_BUFFER_DIR", "./queen-buffers"),
        ],
    )
    .await;
    let on = old
        .client
        .post_json(
            "/api/v1/system/maintenance",
            &serde_json::json!({"enabled": true}),
        )
        .await;
    assert_eq!(on.status, 200);
    let pushed = old
        .client
        .post_json(
            "/api/v1/push",
            &serde_json::json!({"items": [{"queue": "kept", "payload": 1},
                                          {"queue": "kept", "payload": 2},
                                          {"queue": "kept", "payload": 3}]}),
        )
        .await;
    assert_eq!(pushed.status, 201);
    assert!(pushed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .all(|item| item["status"] == "buffered"));
    let spooled = spool_files(&legacy);
    assert!(
        !spooled.is_empty(),
        "the old broker spooled into {legacy:?}"
    );

    // Two brokers on the default, while the old one still runs: both start,
    // each in its own directory, and neither takes the old one's files.
    let defaults = [
        ("QUEEN_DATABASE_URL", url.as_str()),
        ("FILE_BUFFER_DIR", ""),
    ];
    let first = Broker::start_in(Some(&cwd), scratch.path(), &defaults).await;
    let second = Broker::start_in(Some(&cwd), scratch.path(), &defaults).await;
    for broker in [&first, &second] {
        assert!(
            legacy
                .join(broker.port().to_string())
                .join("LOCK")
                .is_file(),
            "{}",
            broker.log_text()
        );
        assert!(
            broker
                .log_text()
                .contains("another running broker holds the spool directory of an earlier version"),
            "{}",
            broker.log_text()
        );
    }
    assert_eq!(spool_files(&legacy), spooled, "left alone while held");

    // Once the old broker is gone, the next start of a default broker moves
    // its spool in and drains it.
    let (status, log) = tokio::task::spawn_blocking(move || old.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");
    let port = first.port();
    let (status, log) = tokio::task::spawn_blocking(move || first.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");
    let first = Broker::start_at(port, Some(&cwd), scratch.path(), &defaults).await;
    assert!(
        first
            .log_text()
            .contains("moved the spool an earlier version left into this broker's spool directory"),
        "{}",
        first.log_text()
    );
    assert!(
        spool_files(&legacy).is_empty(),
        "{:?}",
        spool_files(&legacy)
    );
    let maintenance = first.client.get("/api/v1/system/maintenance").await.json();
    assert_eq!(maintenance["bufferedMessages"], 3, "{maintenance}");
    let off = first
        .client
        .post_json(
            "/api/v1/system/maintenance",
            &serde_json::json!({"enabled": false}),
        )
        .await;
    assert_eq!(off.status, 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let maintenance = first.client.get("/api/v1/system/maintenance").await.json();
        if maintenance["bufferedMessages"] == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not drained: {maintenance}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let popped = first
        .client
        .get("/api/v1/pop/queue/kept?batch=10&autoAck=true")
        .await
        .json();
    let payloads: Vec<&serde_json::Value> = popped["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["data"])
        .collect();
    assert_eq!(
        payloads,
        [
            &serde_json::json!(1),
            &serde_json::json!(2),
            &serde_json::json!(3)
        ]
    );
    // The directory names the database it spools for.
    let id = queen_sql::system::database_id(&db.client().await)
        .await
        .unwrap();
    let recorded = std::fs::read_to_string(legacy.join(port.to_string()).join("DATABASE")).unwrap();
    assert_eq!(recorded.trim(), id.to_string());
    for broker in [first, second] {
        let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
            .await
            .unwrap();
        assert!(status.success(), "{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_parked_pops_at_once_and_exits_cleanly() {
    let scratch = scratch();
    let db = TestDb::empty().await;
    let url = db.url();
    let broker = Broker::start(scratch.path(), &[("QUEEN_DATABASE_URL", &url)]).await;
    let pushed = broker
        .client
        .post_json(
            "/api/v1/push",
            &serde_json::json!({"items": [{"queue": "bye", "payload": 1}]}),
        )
        .await;
    assert_eq!(pushed.status, 201);
    let popped = broker
        .client
        .get("/api/v1/pop/queue/bye?autoAck=true")
        .await;
    assert_eq!(popped.status, 200);
    let client = broker.client.clone();
    let parked = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let reply = client
            .get("/api/v1/pop/queue/bye?wait=true&timeout=30000")
            .await;
        (reply.status, started.elapsed())
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "shutdown waited for the parked pop's timeout"
    );
    let (pop_status, waited) = parked.await.unwrap();
    assert_eq!(pop_status, 204);
    assert!(waited < std::time::Duration::from_secs(10));
}

/// The data directory the broker's log says its managed PostgreSQL runs in.
fn managed_data_dir_from_log(log: &str) -> PathBuf {
    let line = log
        .lines()
        .find(|line| line.contains("managed PostgreSQL is running"))
        .unwrap_or_else(|| panic!("no 'managed PostgreSQL is running' line:\n{log}"));
    let value = line
        .split_whitespace()
        .find_map(|word| word.strip_prefix("data_dir="))
        .unwrap_or_else(|| panic!("no data_dir= in {line:?}"));
    PathBuf::from(value)
}

/// Removes a managed cluster's directory when the test ends, pass or fail.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if self.0.starts_with(queen_pg::cluster::ROOT_FALLBACK_PARENT) {
            if let Ok(cluster) = Cluster::init_or_reuse(ClusterOptions::durable(&self.0)) {
                let _ = std::process::Command::new("sh")
                    .arg("-c")
                    .arg(format!("{} >/dev/null 2>&1", cluster.stop_command_line()))
                    .status();
            }
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Root in a home directory the `postgres` user cannot enter (like `/root`, mode
/// 0700) gets a working broker with its cluster under /var/lib/queen, the same
/// one again on restart, and the home directory's mode untouched. Not root:
/// the default stays where it was asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_in_an_unreachable_home_gets_a_reachable_default_data_dir() {
    let home = tempfile::Builder::new()
        .prefix("queen-home-")
        .tempdir_in("/tmp")
        .expect("temp dir");
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let project = home.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let logs = scratch();

    if !nix::unistd::Uid::effective().is_root() {
        let choice = queen_pg::cluster::default_data_dir(&project.join("queen-data")).unwrap();
        assert_eq!(choice.path, project.join("queen-data"));
        assert_eq!(choice.unreachable, None);
        return;
    }

    let broker = Broker::start_in(Some(&project), logs.path(), &[]).await;
    assert_eq!(broker.client.get("/health").await.status, 200);
    let log = broker.log_text();
    let data_dir = managed_data_dir_from_log(&log);
    let _cleanup = RemoveOnDrop(data_dir.clone());
    assert!(
        data_dir.starts_with("/var/lib/queen") && data_dir.join("PG_VERSION").is_file(),
        "cluster not under /var/lib/queen: {}",
        data_dir.display()
    );
    assert!(
        log.contains("cannot reach the default data directory")
            && log.contains(&format!(
                "unreachable={}",
                project.join("queen-data").display()
            )),
        "the log does not say where the data went:\n{log}"
    );
    let pushed = broker
        .client
        .post_json(
            "/api/v1/push",
            &serde_json::json!({"items": [{"queue": "home", "payload": 1}]}),
        )
        .await;
    assert_eq!(pushed.status, 201);
    let (status, log) = broker.terminate();
    assert!(status.success(), "{log}");
    assert!(!data_dir.join("postmaster.pid").exists(), "{log}");
    assert!(
        !project.join("queen-data").exists(),
        "a data directory was left in the home"
    );
    let mode = std::fs::metadata(home.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o700,
        "the home directory's permissions were loosened"
    );

    // A restart from the same place finds the same cluster and its message.
    let broker = Broker::start_in(Some(&project), logs.path(), &[]).await;
    let log = broker.log_text();
    assert_eq!(managed_data_dir_from_log(&log), data_dir);
    assert!(!log.contains("initialising PostgreSQL cluster"), "{log}");
    let popped = broker
        .client
        .get("/api/v1/pop/queue/home?autoAck=true")
        .await;
    assert_eq!(
        popped.status, 200,
        "the message did not survive the restart"
    );
    let (status, log) = broker.terminate();
    assert!(status.success(), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line_with_a_request_line_and_no_payload() {
    let scratch = scratch();
    let db = TestDb::empty().await;
    let url = db.url();
    let broker = Broker::start(
        scratch.path(),
        &[
            ("QUEEN_DATABASE_URL", &url),
            ("QUEEN_LOG_FORMAT", "json"),
            ("RUST_LOG", "info,queen_http=debug"),
        ],
    )
    .await;
    let secret = "payload-marker-7f3a";
    let pushed = broker
        .client
        .post_json(
            "/api/v1/push",
            &serde_json::json!({"items": [{"queue": "logged", "payload": {"s": secret}}]}),
        )
        .await;
    assert_eq!(pushed.status, 201);
    let (status, log) = tokio::task::spawn_blocking(move || broker.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{log}");
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}"))
        })
        .collect();
    assert!(lines
        .iter()
        .any(|line| line["message"] == "queen is listening"));
    let request = lines
        .iter()
        .find(|line| line["message"] == "request" && line["route"] == "/api/v1/push")
        .unwrap_or_else(|| panic!("no request line for the push:\n{log}"));
    assert_eq!(request["level"], "DEBUG");
    assert_eq!(request["status"], 201);
    assert_eq!(request["method"], "POST");
    assert!(request["elapsed_ms"].is_number());
    assert!(!log.contains(secret), "a payload reached the log");
}
