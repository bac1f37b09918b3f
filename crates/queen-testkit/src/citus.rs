//! The test databases on an existing Citus cluster instead of a throwaway
//! PostgreSQL: set [`CITUS_VAR`] to the nodes' loopback addresses,
//! coordinator first (`cargo xtask citus test` does, for the cluster of
//! `cargo xtask citus up`).
//!
//! Every database a test gets exists on each node under the same name, with
//! the `citus` extension, and the coordinator knows the workers: a
//! distributed database. The template is made once per test binary (the
//! schema applied on the coordinator, which distributes it,
//! `sql/schema/020_citus.sql`), then closed to connections (Citus's
//! maintenance daemon would hold one, and a template in use cannot be
//! cloned) and cloned on every node for each test: the clones hold the same
//! shards under the same names, so together they are one distributed
//! database again. The nodes are shared by every test binary, so the names
//! carry the process id, and a watchdog drops them when the binary exits.

/// The environment variable naming the Citus nodes: `host:port` each,
/// comma-separated, coordinator first.
pub const CITUS_VAR: &str = "QUEEN_TEST_CITUS";

/// The nodes of the Citus cluster under test.
#[derive(Debug, Clone)]
pub(crate) struct CitusNodes {
    /// `(host, port)`, coordinator first.
    nodes: Vec<(String, u16)>,
}

impl CitusNodes {
    /// The nodes [`CITUS_VAR`] names, if it is set (a malformed value
    /// panics: a test run asked for Citus and must not fall back).
    pub(crate) fn from_env() -> Option<CitusNodes> {
        let value = std::env::var(CITUS_VAR).ok()?;
        let nodes: Vec<(String, u16)> = value
            .split(',')
            .map(|node| {
                let (host, port) = node
                    .trim()
                    .rsplit_once(':')
                    .unwrap_or_else(|| panic!("{CITUS_VAR}: `{node}` is not host:port"));
                let port = port
                    .parse()
                    .unwrap_or_else(|_| panic!("{CITUS_VAR}: `{node}` has no port number"));
                (host.to_owned(), port)
            })
            .collect();
        assert!(
            nodes.len() >= 2,
            "{CITUS_VAR}: a coordinator and at least one worker, comma-separated"
        );
        Some(CitusNodes { nodes })
    }

    /// Connection settings for database `dbname` on node `index` (0 is the
    /// coordinator): TCP, user `postgres`, and Queen's session defaults, as
    /// the local cluster's.
    pub(crate) fn config(&self, index: usize, dbname: &str) -> tokio_postgres::Config {
        let (host, port) = &self.nodes[index];
        let mut config = tokio_postgres::Config::new();
        config
            .host(host)
            .port(*port)
            .user("postgres")
            .dbname(dbname);
        queen_sql::connect::apply_session_defaults(&mut config);
        config
    }

    pub(crate) fn admins(&self) -> impl Iterator<Item = tokio_postgres::Config> + '_ {
        (0..self.nodes.len()).map(|index| self.config(index, "postgres"))
    }

    /// Run `statement` in the `postgres` database of every node.
    pub(crate) async fn on_every_node(&self, statement: &str) {
        for admin in self.admins() {
            let client = queen_sql::connect::connect_one(&admin)
                .await
                .unwrap_or_else(|error| panic!("connect to a Citus node {admin:?}: {error}"));
            client
                .batch_execute(statement)
                .await
                .unwrap_or_else(|error| panic!("{statement}: {}", queen_sql::error_chain(&error)));
        }
    }

    /// Run `statement` in the coordinator's `postgres` database.
    async fn on_coordinator(&self, statement: &str) {
        queen_sql::connect::connect_one(&self.config(0, "postgres"))
            .await
            .unwrap_or_else(|error| panic!("connect to the Citus coordinator: {error}"))
            .batch_execute(statement)
            .await
            .unwrap_or_else(|error| panic!("{statement}: {}", queen_sql::error_chain(&error)));
    }

    /// Database `name`, created from `template` on every node. From
    /// `template0` it is made distributed here: the extension on each node,
    /// the workers added to the coordinator.
    pub(crate) async fn create(&self, name: &str, template: &str) {
        for admin in self.admins() {
            let client = queen_sql::connect::connect_one(&admin)
                .await
                .unwrap_or_else(|error| panic!("connect to a Citus node: {error}"));
            let statement = format!("CREATE DATABASE {name} TEMPLATE {template}");
            crate::retry_in_use(&client, &statement).await;
        }
        if template != "template0" {
            // A clone has the template's tables, not its database settings:
            // the switch 020_citus.sql set on the template. (A broker's boot
            // sets it again, 002_citus_switch.sql; the tests' brokers apply
            // no schema.)
            self.on_coordinator(&format!("ALTER DATABASE {name} SET queen.citus = 'on'"))
                .await;
            return;
        }
        for index in 0..self.nodes.len() {
            let client = queen_sql::connect::connect_one(&self.config(index, name))
                .await
                .unwrap_or_else(|error| panic!("connect to {name}: {error}"));
            client
                .batch_execute("CREATE EXTENSION citus")
                .await
                .unwrap_or_else(|error| {
                    panic!(
                        "create extension citus in {name}: {}",
                        queen_sql::error_chain(&error)
                    )
                });
        }
        // The workers have the extension now: add them.
        let (host, port) = &self.nodes[0];
        let mut add = format!("SELECT citus_set_coordinator_host('{host}', {port});");
        for (host, port) in &self.nodes[1..] {
            add.push_str(&format!("SELECT citus_add_node('{host}', {port});"));
        }
        queen_sql::connect::connect_one(&self.config(0, name))
            .await
            .unwrap_or_else(|error| panic!("connect to {name}: {error}"))
            .batch_execute(&add)
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "add the Citus workers to {name}: {}",
                    queen_sql::error_chain(&error)
                )
            });
    }

    /// Close database `name` to connections on every node and end the ones
    /// it has (Citus's maintenance daemon), so it can serve as a template.
    pub(crate) async fn close(&self, name: &str) {
        self.on_every_node(&format!(
            "ALTER DATABASE {name} WITH ALLOW_CONNECTIONS false;
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        ))
        .await;
    }

    /// A detached process that waits for this test binary to exit, then
    /// drops its databases (names starting with `prefix`, a plain
    /// identifier) on every node.
    pub(crate) fn spawn_watchdog(&self, prefix: &str) {
        let Ok(psql) = queen_pg::cluster::locate_program(None, "psql") else {
            return;
        };
        let mut drops = String::new();
        for (host, port) in &self.nodes {
            let list = format!(
                "'{psql}' -X -qAt -h {host} -p {port} -U postgres -d postgres -c \
                 \"SELECT datname FROM pg_database WHERE datname ~ '^{prefix}'\"",
                psql = psql.display()
            );
            drops.push_str(&format!(
                "for d in $({list}); do '{psql}' -X -q -h {host} -p {port} -U postgres -d postgres \
                 -c \"DROP DATABASE IF EXISTS $d WITH (FORCE)\"; done; ",
                psql = psql.display()
            ));
        }
        // Best effort, like the drops: a database left behind holds nothing.
        let _ = crate::after_exit(&drops);
    }
}
