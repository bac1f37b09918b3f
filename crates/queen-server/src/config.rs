//! Every setting of the broker, from flags or environment variables.
//!
//! `queen-server --help` prints this list; README.md documents the same list.
//! A test (`help_lists_every_setting`) checks that each environment variable
//! named here appears in `--help` and in README.md.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::Parser;

/// Queen: a partitioned message broker on PostgreSQL.
///
/// With no database configured, Queen runs its own PostgreSQL cluster in
/// QUEEN_DATA_DIR (initialised on first start, reused after, stopped on shutdown).
#[derive(Debug, Clone, Parser)]
#[command(name = "queen-server", version, about, long_about)]
pub(crate) struct Config {
    /// Address to listen on.
    #[arg(long, env = "HOST", default_value = "0.0.0.0")]
    pub(crate) host: IpAddr,

    /// Port to listen on.
    #[arg(long, env = "PORT", default_value_t = 6632)]
    pub(crate) port: u16,

    /// PostgreSQL connection URL or key=value string
    /// (e.g. postgres://user:pass@host:5432/db). Takes precedence over PG_*.
    #[arg(long, env = "QUEEN_DATABASE_URL")]
    pub(crate) database_url: Option<String>,

    /// A read replica of the database (URL or key=value string): the
    /// read-only admin and statistics views read it, lagging the primary by
    /// the replica's lag; pushes, pops, acks and every write use the primary.
    /// Unset: everything uses the primary.
    #[arg(long, env = "QUEEN_DATABASE_READ_URL")]
    pub(crate) database_read_url: Option<String>,

    /// PostgreSQL host (setting any PG_* variable selects an external server).
    #[arg(long, env = "PG_HOST")]
    pub(crate) pg_host: Option<String>,

    /// PostgreSQL port [default: 5432].
    #[arg(long, env = "PG_PORT")]
    pub(crate) pg_port: Option<u16>,

    /// PostgreSQL database [default: postgres].
    #[arg(long, env = "PG_DB")]
    pub(crate) pg_db: Option<String>,

    /// PostgreSQL user [default: postgres].
    #[arg(long, env = "PG_USER")]
    pub(crate) pg_user: Option<String>,

    /// PostgreSQL password [default: postgres].
    #[arg(long, env = "PG_PASSWORD", hide_env_values = true)]
    pub(crate) pg_password: Option<String>,

    /// Data directory of the managed PostgreSQL cluster, used when no database
    /// is configured [default: ./queen-data; when root and the `postgres` user
    /// cannot reach it, /var/lib/queen/<dir>-<hash> instead].
    #[arg(long, env = "QUEEN_DATA_DIR")]
    pub(crate) data_dir: Option<PathBuf>,

    /// Directory holding PostgreSQL's programs: the managed cluster's
    /// initdb/pg_ctl and the migration's pg_dump/pg_restore. Unset: PATH,
    /// then /usr/lib/postgresql/*/bin (newest first).
    #[arg(long, env = "QUEEN_PG_BIN_DIR")]
    pub(crate) pg_bin_dir: Option<PathBuf>,

    /// Maximum pooled PostgreSQL connections.
    #[arg(long, env = "QUEEN_DB_POOL_SIZE", default_value_t = 32)]
    pub(crate) db_pool_size: usize,

    /// Pooled connections opened and warmed before the broker listens (their
    /// sessions compile Queen's procedures once, in a rolled-back
    /// transaction); 0 turns the warm-up off.
    #[arg(long, env = "QUEEN_DB_POOL_WARM", default_value_t = 8)]
    pub(crate) db_pool_warm: usize,

    /// AES-256-GCM key for queues with encryptionEnabled: 64 hex characters.
    /// Without it, pushes to an encrypted queue fail (never stored as plaintext).
    #[arg(long, env = "QUEEN_ENCRYPTION_KEY", hide_env_values = true)]
    pub(crate) encryption_key: Option<String>,

    /// A file holding the encryption key (64 hex characters, surrounding
    /// whitespace ignored), instead of QUEEN_ENCRYPTION_KEY.
    #[arg(long, env = "QUEEN_ENCRYPTION_KEY_FILE")]
    pub(crate) encryption_key_file: Option<std::path::PathBuf>,

    /// The previous encryption key, during a rotation: payloads it sealed
    /// still open; new payloads are sealed with QUEEN_ENCRYPTION_KEY.
    #[arg(long, env = "QUEEN_ENCRYPTION_KEY_OLD", hide_env_values = true)]
    pub(crate) encryption_key_old: Option<String>,

    /// Require a JWT on every route above public (wire-api.md §0.5).
    #[arg(long, env = "JWT_ENABLED", default_value_t = false)]
    pub(crate) jwt_enabled: bool,

    /// With JWT_ENABLED, what a /metrics/prometheus scrape without a token
    /// gets of the per-queue series: 0, none; 1, each family summed over
    /// every queue, without queue, tenant or group labels. A token sees
    /// its tenant's queues (an admin token every queue's).
    #[arg(long, env = "QUEEN_METRICS_AGGREGATE_QUEUES", default_value = "0", value_parser = parse_flag, action = clap::ArgAction::Set)]
    pub(crate) metrics_aggregate_queues: bool,

    /// Token algorithms: auto, HS256, RS256 or EdDSA.
    #[arg(long, env = "JWT_ALGORITHM", default_value = "auto")]
    pub(crate) jwt_algorithm: String,

    /// HS256 secret.
    #[arg(long, env = "JWT_SECRET", hide_env_values = true)]
    pub(crate) jwt_secret: Option<String>,

    /// RS256 or EdDSA public key, PEM (\n escapes allowed).
    #[arg(long, env = "JWT_PUBLIC_KEY")]
    pub(crate) jwt_public_key: Option<String>,

    /// URL (http or https) of a JWKS document: RS256 and EdDSA tokens are
    /// verified with its key of the id their `kid` names. Unreachable at
    /// boot, the broker starts anyway and fetches it when a token needs it.
    #[arg(long, env = "JWT_JWKS_URL")]
    pub(crate) jwt_jwks_url: Option<String>,

    /// Milliseconds one JWKS fetch may take, connect to last byte.
    #[arg(long, env = "JWT_JWKS_TIMEOUT_MS", default_value_t = 5000)]
    pub(crate) jwt_jwks_timeout_ms: u64,

    /// Seconds fetched JWKS keys are used before the document is fetched
    /// again (in the background; a failed fetch keeps the cached keys).
    #[arg(long, env = "JWT_JWKS_CACHE_TTL_SECS", default_value_t = 3600)]
    pub(crate) jwt_jwks_cache_ttl_secs: u64,

    /// Least seconds between two JWKS fetches: a token whose kid is not
    /// cached fetches the document again only this long after the last
    /// fetch, so tokens with made-up key ids cannot make the broker fetch.
    #[arg(long, env = "JWT_JWKS_REFRESH_MIN_SECS", default_value_t = 30)]
    pub(crate) jwt_jwks_refresh_min_secs: u64,

    /// Required token issuer (iss); unset: not checked.
    #[arg(long, env = "JWT_ISSUER")]
    pub(crate) jwt_issuer: Option<String>,

    /// Required token audience (aud); unset: not checked.
    #[arg(long, env = "JWT_AUDIENCE")]
    pub(crate) jwt_audience: Option<String>,

    /// Seconds of clock skew allowed on exp and nbf.
    #[arg(long, env = "JWT_CLOCK_SKEW", default_value_t = 30)]
    pub(crate) jwt_clock_skew: u64,

    /// Paths served without a token, comma-separated (exact, or a prefix for
    /// an entry ending in /).
    #[arg(
        long,
        env = "JWT_SKIP_PATHS",
        default_value = "/health,/metrics,/metrics/prometheus,/"
    )]
    pub(crate) jwt_skip_paths: String,

    /// The claim naming one role.
    #[arg(long, env = "JWT_ROLES_CLAIM", default_value = "role")]
    pub(crate) jwt_roles_claim: String,

    /// The claim holding an array of roles.
    #[arg(long, env = "JWT_ROLES_ARRAY_CLAIM", default_value = "roles")]
    pub(crate) jwt_roles_array_claim: String,

    /// The admin role's name.
    #[arg(long, env = "JWT_ROLE_ADMIN", default_value = "admin")]
    pub(crate) jwt_role_admin: String,

    /// The read-write role's name.
    #[arg(long, env = "JWT_ROLE_READ_WRITE", default_value = "read-write")]
    pub(crate) jwt_role_read_write: String,

    /// The read-only role's name.
    #[arg(long, env = "JWT_ROLE_READ_ONLY", default_value = "read-only")]
    pub(crate) jwt_role_read_only: String,

    /// The claim naming a token's tenant (absent: tenant `default`).
    #[arg(long, env = "JWT_TENANT_CLAIM", default_value = "tenant")]
    pub(crate) jwt_tenant_claim: String,

    /// zstd compression level of new segments.
    #[arg(long, env = "QUEEN_V2_ZSTD_LEVEL", default_value_t = 3)]
    pub(crate) zstd_level: i32,

    /// How many push flush transactions may run at once (each carries many
    /// partitions' segments; segment size is not configurable, it follows load).
    #[arg(long, env = "QUEEN_PUSH_FLUSHERS", default_value_t = 4)]
    pub(crate) push_flushers: usize,

    /// Memory (MiB) for the push dedup cache: the transaction-id hashes of
    /// recent segments, so the duplicate probe in PostgreSQL reads only what
    /// the broker does not hold. It needs about 12 bytes per message inside
    /// a queue's dedupWindowSeconds; past the budget, pushes with client
    /// transaction ids slow down (the broker logs a warning). 0 turns it off.
    #[arg(long, env = "QUEEN_DEDUP_CACHE_MB", default_value_t = 256)]
    pub(crate) dedup_cache_mb: usize,

    /// Pop `batch` when the request leaves it out.
    #[arg(long, env = "DEFAULT_BATCH_SIZE", default_value_t = 200)]
    pub(crate) default_batch_size: usize,

    /// Pop long-poll `timeout` (ms) when the request leaves it out.
    #[arg(long, env = "DEFAULT_TIMEOUT", default_value_t = 30_000)]
    pub(crate) default_timeout: u64,

    /// Subscription mode of named groups when the request leaves it out
    /// (`new` skips the existing backlog; anything else delivers it).
    #[arg(long, env = "DEFAULT_SUBSCRIPTION_MODE", default_value = "")]
    pub(crate) default_subscription_mode: String,

    /// Pick pop candidates from the in-memory hot-list (1) or the SQL scan (0).
    #[arg(long, env = "QUEEN_HOTLIST", default_value = "1", value_parser = parse_flag, action = clap::ArgAction::Set)]
    pub(crate) hotlist: bool,

    /// The other brokers on this database, for the UDP mesh: `host:port`
    /// entries, comma-separated (a name resolving to several addresses is
    /// several peers). Empty: the mesh goes through PostgreSQL
    /// `LISTEN`/`NOTIFY` instead.
    #[arg(long, env = "QUEEN_PEERS", default_value = "")]
    pub(crate) peers: String,

    /// The UDP port the mesh listens on (with `QUEEN_PEERS`).
    #[arg(long, env = "QUEEN_SYNC_PORT", default_value_t = 6633)]
    pub(crate) sync_port: u16,

    /// The secret every mesh datagram is authenticated with (required with
    /// `QUEEN_PEERS`; the same on every broker).
    #[arg(long, env = "QUEEN_SYNC_SECRET")]
    pub(crate) sync_secret: Option<String>,

    /// Without `QUEEN_PEERS`, exchange the mesh's hints through PostgreSQL
    /// `LISTEN`/`NOTIFY` (1) or not at all (0: a lone broker).
    #[arg(long, env = "QUEEN_MESH_NOTIFY", default_value = "1", value_parser = parse_flag, action = clap::ArgAction::Set)]
    pub(crate) mesh_notify: bool,

    /// How often (ms) a hot-list ring is reseeded from SQL: the most a missed
    /// wake-up hint can delay a message.
    #[arg(long, env = "QUEEN_HOTLIST_RESEED_MS", default_value_t = 5000)]
    pub(crate) hotlist_reseed_ms: u64,

    /// Long-poll re-check interval (ms) for the first attempts.
    #[arg(long, env = "POP_WAIT_INITIAL_INTERVAL_MS", default_value_t = 100)]
    pub(crate) pop_wait_initial_interval_ms: u64,

    /// Attempts at the initial interval before backing off.
    #[arg(long, env = "POP_WAIT_BACKOFF_THRESHOLD", default_value_t = 3)]
    pub(crate) pop_wait_backoff_threshold: u32,

    /// Backoff growth: interval = initial × attempt × multiplier.
    #[arg(long, env = "POP_WAIT_BACKOFF_MULTIPLIER", default_value_t = 2)]
    pub(crate) pop_wait_backoff_multiplier: u32,

    /// Longest long-poll re-check interval (ms): what a lost wake-up costs at most.
    #[arg(long, env = "POP_WAIT_MAX_INTERVAL_MS", default_value_t = 1000)]
    pub(crate) pop_wait_max_interval_ms: u64,

    /// Milliseconds between retention passes (0: no retention loop).
    #[arg(long, env = "RETENTION_INTERVAL", default_value_t = 300_000)]
    pub(crate) retention_interval: u64,

    /// Milliseconds between eviction passes (maxWaitTimeSeconds; 0: none).
    #[arg(long, env = "EVICTION_INTERVAL", default_value_t = 60_000)]
    pub(crate) eviction_interval: u64,

    /// Milliseconds between folds of the admin views' kept message figures
    /// (0: none; the views stay exact and slow down with what is unfolded).
    #[arg(long, env = "QUEEN_FIGURES_FOLD_MS", default_value_t = 1000)]
    pub(crate) figures_fold_ms: u64,

    /// Seconds an empty partition must stay idle before retention removes it
    /// (0: never).
    #[arg(long, env = "QUEEN_PARTITION_IDLE_SECONDS", default_value_t = 86_400)]
    pub(crate) partition_idle_seconds: u64,

    /// Directory of the push spool: pushes taken while maintenance mode is on
    /// or PostgreSQL is unreachable wait here (fsync'd) until they are
    /// written to the database; created if missing; one broker per directory,
    /// a second one refuses to start [default: ./queen-buffers/<PORT>, one per
    /// listening port, so brokers on different ports share a working
    /// directory; what an earlier version spooled in ./queen-buffers itself is
    /// moved into it at start].
    #[arg(long, env = "FILE_BUFFER_DIR")]
    pub(crate) file_buffer_dir: Option<PathBuf>,

    /// MiB of undrained pushes the spool holds; past it pushes answer 503
    /// with Retry-After (nothing is lost: the client retries). 0: no spool
    /// (pushes fail while PostgreSQL is unreachable, and answer 503 during
    /// maintenance mode).
    #[arg(long, env = "QUEEN_SPOOL_MAX_MB", default_value_t = 1024)]
    pub(crate) spool_max_mb: u64,

    /// Milliseconds a push may take to commit before it is spooled instead
    /// (PostgreSQL unreachable or stalled).
    #[arg(long, env = "QUEEN_SPOOL_PUSH_TIMEOUT_MS", default_value_t = 5000)]
    pub(crate) spool_push_timeout_ms: u64,

    /// Milliseconds between reads of the cluster-wide maintenance flags: how
    /// soon a change made through another broker applies here.
    #[arg(long, env = "QUEEN_MAINTENANCE_REFRESH_MS", default_value_t = 1000)]
    pub(crate) maintenance_refresh_ms: u64,

    /// Milliseconds between this broker's statistics rows (one statement
    /// each: a row per queue it served and one for itself); 0 writes none.
    #[arg(long, env = "QUEEN_STATS_INTERVAL_MS", default_value_t = 60_000)]
    pub(crate) stats_interval_ms: u64,

    /// Days statistics rows are kept; the retention loop purges older ones.
    #[arg(long, env = "QUEEN_STATS_RETENTION_DAYS", default_value_t = 7)]
    pub(crate) stats_retention_days: u64,

    /// Seconds in-flight requests get to finish on shutdown.
    #[arg(long, env = "QUEEN_SHUTDOWN_TIMEOUT_SECONDS", default_value_t = 30)]
    pub(crate) shutdown_timeout_seconds: u64,

    /// Connections served at once; one more is answered 503 with Retry-After.
    #[arg(long, env = "QUEEN_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub(crate) max_connections: usize,

    /// MiB of request bodies buffered at once across all connections; a body
    /// that does not fit now is answered 503 with Retry-After.
    #[arg(long, env = "QUEEN_MAX_BODY_MB_IN_FLIGHT", default_value_t = 1024)]
    pub(crate) max_body_mb_in_flight: usize,

    /// Milliseconds a whole request body may take to arrive; past it, 408.
    #[arg(long, env = "QUEEN_BODY_TIMEOUT_MS", default_value_t = 30_000)]
    pub(crate) body_timeout_ms: u64,

    /// Log filter (tracing-subscriber EnvFilter syntax, e.g. info,queen_engine=debug).
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub(crate) log: String,

    /// Log line format: text (human-readable) or json (one object per line).
    #[arg(long, env = "QUEEN_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub(crate) log_format: String,

    /// A Queen dashboard build (the folder holding its index.html) to serve
    /// at /; unset, / is the built-in status page.
    #[arg(long, env = "QUEEN_WEBAPP_DIR")]
    pub(crate) webapp_dir: Option<std::path::PathBuf>,
}

/// `1`/`true`/`on`/`yes` or `0`/`false`/`off`/`no`.
fn parse_flag(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        other => Err(format!("expected 1 or 0, got {other:?}")),
    }
}

/// Where the broker's database comes from.
#[derive(Debug, Clone)]
pub(crate) enum DatabaseSource {
    /// An external server the operator configured.
    External(Box<tokio_postgres::Config>),
    /// A cluster the broker manages in this data directory.
    Managed {
        data_dir: PathBuf,
        /// False when `data_dir` is the default rather than `QUEEN_DATA_DIR`:
        /// only a default may be moved somewhere PostgreSQL can reach.
        chosen: bool,
    },
}

/// The managed cluster's data directory when `QUEEN_DATA_DIR` is not set.
pub(crate) const DEFAULT_DATA_DIR: &str = "./queen-data";

/// The name of the database the broker creates inside a managed cluster.
pub(crate) const MANAGED_DATABASE: &str = "queen";

impl Config {
    /// Decide where the database comes from: the URL, else any PG_* variable,
    /// else a managed cluster.
    pub(crate) fn database_source(&self) -> Result<DatabaseSource, queen_sql::SqlError> {
        if let Some(url) = &self.database_url {
            let config = queen_sql::connect::config_from_url(url)?;
            return Ok(DatabaseSource::External(Box::new(config)));
        }
        let any_part = self.pg_host.is_some()
            || self.pg_port.is_some()
            || self.pg_db.is_some()
            || self.pg_user.is_some()
            || self.pg_password.is_some();
        if any_part {
            let config = queen_sql::connect::config_from_parts(
                self.pg_host.as_deref().unwrap_or("localhost"),
                self.pg_port.unwrap_or(5432),
                self.pg_db.as_deref().unwrap_or("postgres"),
                self.pg_user.as_deref().unwrap_or("postgres"),
                self.pg_password.as_deref().unwrap_or("postgres"),
            );
            return Ok(DatabaseSource::External(Box::new(config)));
        }
        Ok(DatabaseSource::Managed {
            data_dir: self
                .data_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)),
            chosen: self.data_dir.is_some(),
        })
    }
}

/// The parent of the default spool directories, and the spool directory
/// itself before the default became one per port.
pub(crate) const DEFAULT_SPOOL_ROOT: &str = "./queen-buffers";

impl Config {
    /// The spool directory (`FILE_BUFFER_DIR`, else one per port under
    /// [`DEFAULT_SPOOL_ROOT`]) and, for the default, the directory whose
    /// spool files an earlier version left to be moved into it.
    pub(crate) fn spool_dirs(&self) -> (PathBuf, Option<PathBuf>) {
        match &self.file_buffer_dir {
            Some(dir) => (dir.clone(), None),
            None => {
                let root = PathBuf::from(DEFAULT_SPOOL_ROOT);
                (root.join(self.port.to_string()), Some(root))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// The `JWT_SKIP_PATHS` default `--help` and the README print is the
    /// route table's public paths (`queen_http::public_paths`).
    #[test]
    fn the_skip_paths_default_is_the_route_tables_public_paths() {
        let command = super::Config::command();
        let arg = command
            .get_arguments()
            .find(|arg| arg.get_id() == "jwt_skip_paths")
            .expect("the JWT_SKIP_PATHS argument");
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|value| value.to_string_lossy().into_owned())
            .collect();
        assert_eq!(default, [queen_http::public_paths().join(",")]);
    }

    /// The default spool directory is one per port, adopting the old one;
    /// a chosen one is used as given.
    #[test]
    fn the_default_spool_directory_is_per_port() {
        use clap::Parser;
        let config = super::Config::try_parse_from(["queen-server", "--port", "7001"]).unwrap();
        assert_eq!(
            config.spool_dirs(),
            (
                std::path::PathBuf::from("./queen-buffers/7001"),
                Some(std::path::PathBuf::from("./queen-buffers"))
            )
        );
        let chosen =
            super::Config::try_parse_from(["queen-server", "--file-buffer-dir", "/srv/spool"])
                .unwrap();
        assert_eq!(
            chosen.spool_dirs(),
            (std::path::PathBuf::from("/srv/spool"), None)
        );
    }
}
