//! Throwaway PostgreSQL for tests.
//!
//! One cluster per test binary (process), started on first use and torn down by a
//! watchdog process when the test binary exits; one fresh database per test.
//!
//! - [`TestDb::new`] clones `queen_template`, a database with the schema applied
//!   once per binary, so a test starts from a clean, fully migrated database in a
//!   few tens of milliseconds.
//! - [`TestDb::empty`] clones `template0` instead, for tests of the schema applier.
//!
//! A test's database is dropped (`WITH (FORCE)`) when the last clone of its
//! [`TestDb`] goes, so the cluster's disk holds the databases of the tests that
//! are running, not of every test the binary ran: a full `it` run once created
//! 190 databases and 2.5 GB, and a CI machine with little free disk failed every
//! test after the 139th on `CREATE DATABASE`.
//!
//! The cluster runs with `fsync=off` and friends: it is thrown away after the run.
//! PostgreSQL binaries are required; without them every test fails with the
//! one clear error of `queen_pg::cluster::PgBinaries::locate`.
//!
//! With [`CITUS_VAR`] set, the databases are made on that Citus cluster
//! instead, distributed (the [`citus`] module).

mod citus;
pub mod http;

use citus::CitusNodes;
pub use citus::CITUS_VAR;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use queen_pg::cluster::{Cluster, ClusterOptions};
use tokio::sync::OnceCell;

/// The database that holds the applied schema and is cloned for every test.
const TEMPLATE: &str = "queen_template";

/// The group role whose members log in with a password
/// ([`TestDb::create_password_role`]): `pg_hba.conf` checks `+queen_pw`
/// (its members, a superuser only when made one explicitly) by
/// `scram-sha-256`, ahead of the trust rules, from the cluster's start.
pub const PASSWORD_GROUP: &str = "queen_pw";

/// Process-wide cluster state.
enum Shared {
    /// Kept alive for the life of the process; the watchdog stops the server.
    Local(Cluster),
    /// The Citus cluster [`CITUS_VAR`] names.
    Citus(CitusNodes),
}

impl Shared {
    fn connect_config(&self, dbname: &str) -> tokio_postgres::Config {
        match self {
            Shared::Local(cluster) => cluster.connect_config(dbname),
            Shared::Citus(nodes) => nodes.config(0, dbname),
        }
    }

    /// The name of the database the schema is applied to once and cloned.
    fn template(&self) -> String {
        match self {
            Shared::Local(_) => TEMPLATE.to_owned(),
            Shared::Citus(_) => citus_template(),
        }
    }
}

/// The template's name on a Citus cluster, which every test binary shares:
/// this binary's prefix, so the watchdog drops it too.
fn citus_template() -> String {
    format!("{}template", db_prefix())
}

/// Every database name of this test binary starts with this.
fn db_prefix() -> String {
    format!("t_{}_", std::process::id())
}

static SHARED: OnceCell<Shared> = OnceCell::const_new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// A fresh database on the binary's throwaway cluster.
#[derive(Debug, Clone)]
pub struct TestDb {
    name: String,
    config: tokio_postgres::Config,
    /// Drops the database when the last clone goes.
    _guard: Arc<DropDatabase>,
}

/// Drops one test database, on a thread of its own so that `Drop` works inside
/// or outside a runtime.
#[derive(Debug)]
struct DropDatabase {
    name: String,
    /// The `postgres` database of each node that has it.
    admins: Vec<tokio_postgres::Config>,
}

impl Drop for DropDatabase {
    fn drop(&mut self) {
        let statement = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let admins = self.admins.clone();
        // Best effort: the watchdog removes the whole cluster at exit anyway.
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                for admin in &admins {
                    if let Ok(client) = queen_sql::connect::connect_one(admin).await {
                        let _ = client.batch_execute(&statement).await;
                    }
                }
            });
        })
        .join();
    }
}

impl TestDb {
    /// A fresh database with Queen's schema applied.
    pub async fn new() -> TestDb {
        TestDb::create(TEMPLATE).await
    }

    /// A fresh database with no schema at all.
    pub async fn empty() -> TestDb {
        TestDb::create("template0").await
    }

    /// The database name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Connection settings for this database (Unix socket, superuser, UTC).
    pub fn config(&self) -> tokio_postgres::Config {
        self.config.clone()
    }

    /// The connection settings as a libpq key=value string, for `QUEEN_DATABASE_URL`.
    pub fn url(&self) -> String {
        libpq_url(&self.config)
    }

    /// A new connection to this database, driven on a spawned task.
    pub async fn client(&self) -> tokio_postgres::Client {
        queen_sql::connect::connect_one(&self.config)
            .await
            .expect("connect to test database")
    }

    /// A pool of at most `max_size` connections to this database.
    pub fn pool(&self, max_size: usize) -> deadpool_postgres::Pool {
        queen_sql::connect::pool(self.config.clone(), max_size).expect("build test pool")
    }

    /// Create login role `role` (a superuser) with `password`, which the
    /// cluster checks: the role is made a member of [`PASSWORD_GROUP`],
    /// whose `scram-sha-256` rule `pg_hba.conf` has had since the cluster
    /// started, first (every other role connects by trust). Nothing is
    /// rewritten or reloaded, so tests may call this at once. For tests of
    /// a wrong password; `role` must be a plain identifier not used by
    /// another test of the binary, `password` plain text.
    pub async fn create_password_role(&self, role: &str, password: &str) {
        self.client()
            .await
            .batch_execute(&format!(
                "CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}' IN ROLE {PASSWORD_GROUP}"
            ))
            .await
            .unwrap_or_else(|error| panic!("create role {role}: {error}"));
    }

    async fn create(template: &str) -> TestDb {
        let shared = SHARED.get_or_init(start_shared).await;
        let template = if template == TEMPLATE {
            shared.template()
        } else {
            template.to_owned()
        };
        let name = format!("{}{}", db_prefix(), NEXT_DB.fetch_add(1, Ordering::Relaxed));
        let admins = match shared {
            Shared::Local(cluster) => {
                let admin = queen_sql::connect::connect_one(&cluster.connect_config("postgres"))
                    .await
                    .expect("connect to test cluster");
                retry_in_use(
                    &admin,
                    &format!("CREATE DATABASE {name} TEMPLATE {template}"),
                )
                .await;
                vec![cluster.connect_config("postgres")]
            }
            Shared::Citus(nodes) => {
                nodes.create(&name, &template).await;
                nodes.admins().collect()
            }
        };
        TestDb {
            config: shared.connect_config(&name),
            _guard: Arc::new(DropDatabase {
                name: name.clone(),
                admins,
            }),
            name,
        }
    }
}

/// Run `statement` (a `CREATE DATABASE ... TEMPLATE`) on `admin`.
/// CREATE DATABASE refuses a template that another session is connected to
/// (SQLSTATE 55006); nothing stays connected to ours, but retry briefly in
/// case a session is still closing.
async fn retry_in_use(admin: &tokio_postgres::Client, statement: &str) {
    let mut attempts = 0;
    loop {
        match admin.batch_execute(statement).await {
            Ok(()) => return,
            Err(error)
                if attempts < 50
                    && error.code() == Some(&tokio_postgres::error::SqlState::OBJECT_IN_USE) =>
            {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("{statement}: {}", queen_sql::error_chain(&error)),
        }
    }
}

async fn start_shared() -> Shared {
    if let Some(nodes) = CitusNodes::from_env() {
        return start_citus(nodes).await;
    }
    let dir = test_cluster_dir();
    let cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = Cluster::init_or_reuse(ClusterOptions::throwaway(&dir))
            .unwrap_or_else(|error| panic!("test PostgreSQL: {}", queen_sql::error_chain(&error)));
        require_passwords_of_group(&cluster);
        cluster
            .start()
            .unwrap_or_else(|error| panic!("test PostgreSQL: {}", queen_sql::error_chain(&error)));
        spawn_watchdog(&cluster, &dir);
        cluster
    })
    .await
    .expect("cluster start task");

    let admin = queen_sql::connect::connect_one(&cluster.connect_config("postgres"))
        .await
        .expect("connect to test cluster");
    admin
        .batch_execute(&format!("CREATE ROLE {PASSWORD_GROUP} NOLOGIN"))
        .await
        .expect("create the password group");
    admin
        .batch_execute(&format!("CREATE DATABASE {TEMPLATE}"))
        .await
        .expect("create template database");
    apply_template_schema(&cluster.connect_config(TEMPLATE)).await;
    // The template session must be gone before the first clone.
    admin
        .batch_execute(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{TEMPLATE}' \
             AND pid <> pg_backend_pid()"
        ))
        .await
        .expect("close template sessions");
    Shared::Local(cluster)
}

/// The template on the Citus cluster: made distributed on every node, the
/// schema applied (which distributes the tables), closed to connections.
async fn start_citus(nodes: CitusNodes) -> Shared {
    nodes.spawn_watchdog(&db_prefix());
    let template = citus_template();
    nodes
        .on_every_node(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{PASSWORD_GROUP}') \
             THEN CREATE ROLE {PASSWORD_GROUP} NOLOGIN; END IF; END $$"
        ))
        .await;
    nodes.create(&template, "template0").await;
    apply_template_schema(&nodes.config(0, &template)).await;
    nodes.close(&template).await;
    Shared::Citus(nodes)
}

async fn apply_template_schema(config: &tokio_postgres::Config) {
    let template = queen_sql::connect::connect_one(config)
        .await
        .expect("connect to template database");
    queen_sql::apply_schema(&template)
        .await
        .unwrap_or_else(|error| {
            panic!(
                "apply schema to template: {}",
                queen_sql::error_chain(&error)
            )
        });
}

/// Put the rule for [`PASSWORD_GROUP`] first in the cluster's `pg_hba.conf`,
/// before the server starts (written once, here, so no test rewrites the
/// file while another reads it).
fn require_passwords_of_group(cluster: &Cluster) {
    let hba = cluster.data_dir().join("pg_hba.conf");
    let rules = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
    let rule = format!("local all +{PASSWORD_GROUP} scram-sha-256\n");
    if !rules.starts_with(&rule) {
        std::fs::write(&hba, format!("{rule}{rules}")).expect("write pg_hba.conf");
    }
}

/// A fresh directory under the system temp dir, reachable by the `postgres` user
/// when the tests run as root.
fn test_cluster_dir() -> PathBuf {
    let base = std::env::temp_dir();
    base.join(format!(
        "queen-test-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis())
            .unwrap_or_default()
    ))
}

/// Start a detached process that waits for this test binary to exit, then stops
/// the cluster and removes its directory. A `static` is never dropped, so this is
/// what cleans up even when a test panics or the binary is killed.
fn spawn_watchdog(cluster: &Cluster, dir: &std::path::Path) {
    let cleanup = format!(
        "{stop} >/dev/null 2>&1; rm -rf '{dir}'",
        stop = cluster.stop_command_line(),
        dir = dir.display(),
    );
    let status = after_exit(&cleanup).expect("spawn test cluster watchdog");
    assert!(status.success(), "test cluster watchdog did not start");
}

/// Run the shell commands `cleanup` in a detached process once this test
/// binary has exited. The outer shell backgrounds the loop and exits at
/// once, so it can be reaped here and the loop lives on, reparented, after
/// this process is gone.
fn after_exit(cleanup: &str) -> std::io::Result<std::process::ExitStatus> {
    let script = format!(
        "( while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; {cleanup} ) >/dev/null 2>&1 &",
        pid = std::process::id(),
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
}

/// `config` as a libpq key=value string (host, port, user, database), for
/// `QUEEN_DATABASE_URL`.
pub fn libpq_url(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("postgres");
    let dbname = config.get_dbname().unwrap_or("postgres");
    format!("host={host} port={port} user={user} dbname={dbname}")
}
