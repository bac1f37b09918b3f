//! The Queen broker binary: configuration, wiring, managed PostgreSQL, shutdown.
//!
//! Boot order:
//! 1. read the configuration (flags and environment, see `config`);
//! 2. find the database: an external server, or a managed cluster that is
//!    initialised on first start and started now;
//! 3. apply the schema (idempotent, under an advisory lock);
//! 4. create the spool directory (`FILE_BUFFER_DIR`), build the pool and the
//!    engine (which counts what an earlier run left in the spool and drains
//!    it once the maintenance flags are read), read the maintenance flags,
//!    bind the listener, serve.
//!
//! Shutdown order, on SIGINT or SIGTERM:
//! 1. stop accepting connections;
//! 2. wake every long-poll gate: parked pops answer empty at once, new pops
//!    answer empty (`Engine::begin_shutdown`);
//! 3. ask every connection to finish its in-flight request and close, while
//!    push fusion keeps flushing so in-flight pushes still commit (bounded by
//!    `QUEEN_SHUTDOWN_TIMEOUT_SECONDS`);
//! 4. stop fusion after its last flush, the spool's drainer (what it holds
//!    stays on disk and is drained at the next start), the revisit wheel,
//!    the periodic reseeds, the retention loop and the figures fold (its marks
//!    written, its broker row removed), then
//!    close the pool (`Engine::shutdown`);
//! 5. stop the managed PostgreSQL, if this process started it.
//!
//! A second SIGINT or SIGTERM during any of that exits at once, with status
//! 130, without finishing the steps left (in-flight requests are cut, a
//! managed PostgreSQL is left running and reused at the next start).

mod config;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use config::{Config, DatabaseSource, MANAGED_DATABASE};
use queen_pg::cluster::{Cluster, ClusterOptions};
use queen_sql::SqlError;
use tokio::net::TcpListener;

/// Boot failures: each one ends the process with a one-line reason.
#[derive(Debug, thiserror::Error)]
enum ServerError {
    #[error(transparent)]
    Sql(#[from] SqlError),
    #[error(transparent)]
    ManagedPg(#[from] queen_pg::PgError),
    #[error("cannot listen on {addr}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot bind the mesh's UDP port {addr} (QUEEN_SYNC_PORT)")]
    SyncBind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot install signal handlers")]
    Signals(#[source] std::io::Error),
    #[error("invalid configuration")]
    Engine(#[from] queen_engine::EngineError),
    #[error("cannot use the spool directory {dir} (FILE_BUFFER_DIR)")]
    SpoolDir {
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("managed PostgreSQL task failed")]
    Join(#[from] tokio::task::JoinError),
    #[error("{0}")]
    Key(String),
    #[error("cannot read the encryption key file {path} (QUEEN_ENCRYPTION_KEY_FILE)")]
    KeyFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot serve the dashboard folder {dir} (QUEEN_WEBAPP_DIR)")]
    Webapp {
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn main() -> ExitCode {
    let config = Config::parse();
    init_tracing(&config.log, &config.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("queen-server: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{}", queen_sql::error_chain(&error));
            eprintln!("queen-server: {}", queen_sql::error_chain(&error));
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> Result<(), ServerError> {
    let mut signals = Signals::install()?.watch();
    // Settings are checked before anything touches PostgreSQL.
    let engine_config = engine_config(&config)?;
    let auth = auth(&config)?;
    if let Some(auth) = &auth {
        // The JWKS keys, while the database comes up; a JWKS server that is
        // down only logs a warning (tokens then fetch it when they need it).
        let auth = Arc::clone(auth);
        tokio::spawn(async move { auth.warm().await });
    }
    let webapp = config
        .webapp_dir
        .as_deref()
        .map(|dir| {
            queen_http::Webapp::open(dir).map_err(|source| ServerError::Webapp {
                dir: dir.to_owned(),
                source,
            })
        })
        .transpose()?;

    let (db_config, mut cluster) = match config.database_source()? {
        DatabaseSource::External(db_config) => {
            tracing::info!("using the configured PostgreSQL server");
            (*db_config, None)
        }
        DatabaseSource::Managed { data_dir, chosen } => {
            let bin_dir = config.pg_bin_dir.clone();
            let cluster =
                tokio::task::spawn_blocking(move || start_managed(data_dir, chosen, bin_dir))
                    .await??;
            tracing::info!(
                data_dir = %cluster.data_dir().display(),
                "managed PostgreSQL is running"
            );
            let db_config = cluster.connect_config(MANAGED_DATABASE);
            create_managed_database(&cluster).await?;
            (db_config, Some(cluster))
        }
    };

    let served = serve(
        &config,
        engine_config,
        (webapp, auth),
        db_config,
        &mut signals,
    )
    .await;

    if let Some(cluster) = cluster.as_mut() {
        tracing::info!("stopping managed PostgreSQL");
        let stopped = tokio::task::block_in_place(|| cluster.stop());
        if let Err(error) = stopped {
            tracing::error!(error = %queen_sql::error_chain(&error), "could not stop managed PostgreSQL");
        }
    }
    served
}

/// Apply the schema, build the engine, and serve until a signal arrives.
async fn serve(
    config: &Config,
    engine_config: queen_engine::EngineConfig,
    (webapp, auth): (Option<queen_http::Webapp>, Option<Arc<queen_http::Auth>>),
    db_config: tokio_postgres::Config,
    signals: &mut ShutdownRequested,
) -> Result<(), ServerError> {
    let Some(database) = apply_schema_with_retry(&db_config, signals).await? else {
        tracing::info!("shutdown requested before the database was reachable");
        return Ok(());
    };
    // The spool directory now, so one the broker cannot write stops the boot
    // with its reason.
    if let Some(spool) = &engine_config.spool {
        std::fs::create_dir_all(&spool.dir).map_err(|source| ServerError::SpoolDir {
            dir: spool.dir.clone(),
            source,
        })?;
    }
    let spool_dir = engine_config.spool.as_ref().map(|spool| spool.dir.clone());
    let mut engine_config = engine_config;
    if let Some(spool) = engine_config.spool.as_mut() {
        spool.database = Some(database);
    }
    engine_config.mesh = mesh_config(config, &db_config)?;
    engine_config.migration = Some(queen_engine::MigrationConfig {
        source: db_config.clone(),
        bin_dir: config.pg_bin_dir.clone(),
    });
    engine_config.read_pool = read_pool(config)?;
    let pool = queen_sql::connect::pool(db_config, config.db_pool_size)?;
    let engine = queen_engine::Engine::new(pool, engine_config);
    // The engine logged why (another broker holds the directory, or it is
    // not writable): a broker configured with a spool does not run without.
    if let (Some(dir), None) = (spool_dir, engine.observe().spool_stats()) {
        engine.shutdown().await;
        return Err(ServerError::SpoolDir {
            dir,
            source: std::io::Error::other("the spool could not be opened (see the log above)"),
        });
    }
    if config.db_pool_warm > 0 {
        engine.warm_up(config.db_pool_warm).await;
    }
    // Maintenance mode is cluster-wide: follow it from the first request.
    if let Err(error) = engine.cluster_state().refresh().await {
        tracing::warn!(error = %queen_sql::error_chain(&error), "cannot read the maintenance flags");
    }

    let addr = std::net::SocketAddr::new(config.host, config.port);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })?;
    tracing::info!(%addr, "queen is listening");

    let options = queen_http::ServeOptions {
        drain_timeout: Duration::from_secs(config.shutdown_timeout_seconds),
        max_connections: config.max_connections,
        max_body_bytes_in_flight: config.max_body_mb_in_flight.saturating_mul(1 << 20),
        body_timeout: Duration::from_millis(config.body_timeout_ms),
        defaults: queen_http::WireDefaults {
            pop_batch: config.default_batch_size,
            pop_timeout: Duration::from_millis(config.default_timeout),
            subscription_mode: config.default_subscription_mode.clone(),
        },
        webapp,
        auth,
        aggregate_queue_metrics: config.metrics_aggregate_queues,
    };
    queen_http::serve(listener, Arc::clone(&engine), options, signals.recv()).await;
    tracing::info!("closing the connection pool");
    engine.shutdown().await;
    Ok(())
}

fn engine_config(config: &Config) -> Result<queen_engine::EngineConfig, ServerError> {
    let encryption_key = encryption_key(config)?;
    Ok(queen_engine::EngineConfig {
        server_name: format!("queen-{}", hostname()),
        encryption_key,
        zstd_level: config.zstd_level,
        push_flushers: config.push_flushers,
        dedup_cache_bytes: config.dedup_cache_mb.saturating_mul(1 << 20),
        hotlist: config.hotlist,
        hotlist_reseed: Duration::from_millis(config.hotlist_reseed_ms),
        pop_wait: queen_engine::PopWait {
            initial: Duration::from_millis(config.pop_wait_initial_interval_ms),
            threshold: config.pop_wait_backoff_threshold,
            multiplier: config.pop_wait_backoff_multiplier,
            max: Duration::from_millis(config.pop_wait_max_interval_ms),
        },
        limiter: queen_engine::LimiterConfig::default(),
        figures_interval: (config.figures_fold_ms > 0)
            .then(|| Duration::from_millis(config.figures_fold_ms)),
        retention_interval: (config.retention_interval > 0)
            .then(|| Duration::from_millis(config.retention_interval)),
        eviction_interval: (config.eviction_interval > 0)
            .then(|| Duration::from_millis(config.eviction_interval)),
        partition_idle: (config.partition_idle_seconds > 0)
            .then(|| Duration::from_secs(config.partition_idle_seconds)),
        spool: spool_config(config),
        maintenance_refresh: Duration::from_millis(config.maintenance_refresh_ms.max(1)),
        stats_interval: (config.stats_interval_ms > 0)
            .then(|| Duration::from_millis(config.stats_interval_ms)),
        stats_retention: Duration::from_secs(config.stats_retention_days.saturating_mul(86_400)),
        hostname: hostname(),
        port: config.port,
        // Set by `serve`, which knows the database.
        mesh: None,
        migration: None,
        read_pool: None,
    })
}

/// Connections of the read replica's pool at most: the admin and
/// statistics views it serves are few and short.
const READ_POOL_SIZE: usize = 8;

/// The read replica's pool (`QUEEN_DATABASE_READ_URL`), if one is set. It
/// connects lazily: a replica that is down fails the views it serves, not
/// the boot.
fn read_pool(config: &Config) -> Result<Option<deadpool_postgres::Pool>, ServerError> {
    let Some(url) = config
        .database_read_url
        .as_deref()
        .filter(|url| !url.is_empty())
    else {
        return Ok(None);
    };
    let read_config = queen_sql::connect::config_from_url(url)?;
    tracing::info!("admin and statistics views read the replica (QUEEN_DATABASE_READ_URL)");
    Ok(Some(queen_sql::connect::pool(read_config, READ_POOL_SIZE)?))
}

/// The mesh: UDP to `QUEEN_PEERS` (with `QUEEN_SYNC_SECRET`, on
/// `QUEEN_SYNC_PORT`, bound here so a port in use stops the boot), else
/// `LISTEN`/`NOTIFY` on the broker's database unless `QUEEN_MESH_NOTIFY=0`.
fn mesh_config(
    config: &Config,
    db_config: &tokio_postgres::Config,
) -> Result<Option<queen_engine::MeshConfig>, ServerError> {
    let peers: Vec<String> = config
        .peers
        .split(',')
        .map(str::trim)
        .filter(|peer| !peer.is_empty())
        .map(str::to_owned)
        .collect();
    let transport = if peers.is_empty() {
        if !config.mesh_notify {
            return Ok(None);
        }
        queen_engine::MeshTransport::Notify(Box::new(db_config.clone()))
    } else {
        let secret = config
            .sync_secret
            .clone()
            .filter(|secret| !secret.is_empty())
            .ok_or_else(|| {
                ServerError::Key(
                    "QUEEN_PEERS needs QUEEN_SYNC_SECRET (the same on every broker)".to_owned(),
                )
            })?;
        if let Some(peer) = peers.iter().find(|peer| {
            peer.rsplit_once(':')
                .is_none_or(|(_, port)| port.parse::<u16>().is_err())
        }) {
            return Err(ServerError::Key(format!(
                "QUEEN_PEERS entry {peer:?} is not host:port"
            )));
        }
        let addr = std::net::SocketAddr::from(([0, 0, 0, 0], config.sync_port));
        let socket = std::net::UdpSocket::bind(addr)
            .map_err(|source| ServerError::SyncBind { addr, source })?;
        queen_engine::MeshTransport::Udp {
            socket: Arc::new(socket),
            peers,
            secret: secret.into_bytes(),
        }
    };
    Ok(Some(queen_engine::MeshConfig {
        transport,
        drop_inbound: false,
    }))
}

/// The at-rest key: from `QUEEN_ENCRYPTION_KEY` or the file
/// `QUEEN_ENCRYPTION_KEY_FILE` names (not both), with
/// `QUEEN_ENCRYPTION_KEY_OLD` as the previous key it still opens payloads
/// with. A malformed key stops the boot naming its variable (never its value).
fn encryption_key(config: &Config) -> Result<Option<queen_engine::EncryptionKey>, ServerError> {
    let parse = |text: &str, var: &str| {
        text.parse::<queen_engine::EncryptionKey>().map_err(|_| {
            ServerError::Key(format!(
                "{var} must be 64 hexadecimal characters (32 bytes)"
            ))
        })
    };
    let key = match (&config.encryption_key, &config.encryption_key_file) {
        (Some(_), Some(_)) => {
            return Err(ServerError::Key(
                "set QUEEN_ENCRYPTION_KEY or QUEEN_ENCRYPTION_KEY_FILE, not both".to_owned(),
            ))
        }
        (Some(text), None) => Some(parse(text, "QUEEN_ENCRYPTION_KEY")?),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|source| ServerError::KeyFile {
                path: path.clone(),
                source,
            })?;
            Some(parse(&text, "the content of QUEEN_ENCRYPTION_KEY_FILE")?)
        }
        (None, None) => None,
    };
    let old = config
        .encryption_key_old
        .as_deref()
        .map(|text| parse(text, "QUEEN_ENCRYPTION_KEY_OLD"))
        .transpose()?;
    match (key, old) {
        (None, Some(_)) => Err(ServerError::Key(
            "QUEEN_ENCRYPTION_KEY_OLD needs the new key in QUEEN_ENCRYPTION_KEY or \
             QUEEN_ENCRYPTION_KEY_FILE"
                .to_owned(),
        )),
        (Some(key), Some(old)) => Ok(Some(key.with_previous(old))),
        (key, None) => Ok(key),
    }
}

/// The JWT verifier, when `JWT_ENABLED`; a setting it cannot use stops the
/// boot naming it.
fn auth(config: &Config) -> Result<Option<Arc<queen_http::Auth>>, ServerError> {
    if !config.jwt_enabled {
        return Ok(None);
    }
    let algorithm = config
        .jwt_algorithm
        .parse::<queen_http::JwtAlgorithm>()
        .map_err(ServerError::Key)?;
    let optional = |value: &Option<String>| value.clone().filter(|text| !text.is_empty());
    let auth = queen_http::Auth::new(queen_http::AuthConfig {
        algorithm,
        secret: optional(&config.jwt_secret),
        public_key: optional(&config.jwt_public_key),
        jwks: optional(&config.jwt_jwks_url).map(|url| queen_http::JwksConfig {
            url,
            timeout: Duration::from_millis(config.jwt_jwks_timeout_ms),
            cache_ttl: Duration::from_secs(config.jwt_jwks_cache_ttl_secs),
            refresh_min: Duration::from_secs(config.jwt_jwks_refresh_min_secs),
        }),
        issuer: optional(&config.jwt_issuer),
        audience: optional(&config.jwt_audience),
        clock_skew: Duration::from_secs(config.jwt_clock_skew),
        skip_paths: config
            .jwt_skip_paths
            .split(',')
            .map(str::trim)
            .filter(|path| !path.is_empty())
            .map(str::to_owned)
            .collect(),
        role_claim: config.jwt_roles_claim.clone(),
        roles_claim: config.jwt_roles_array_claim.clone(),
        role_names: [
            config.jwt_role_admin.clone(),
            config.jwt_role_read_write.clone(),
            config.jwt_role_read_only.clone(),
        ],
        tenant_claim: config.jwt_tenant_claim.clone(),
    })
    .map_err(ServerError::Key)?;
    Ok(Some(Arc::new(auth)))
}

/// The spool's settings (`serve` creates its directory).
fn spool_config(config: &Config) -> Option<queen_engine::SpoolConfig> {
    let (dir, adopt) = config.spool_dirs();
    (config.spool_max_mb > 0).then(|| queen_engine::SpoolConfig {
        dir,
        adopt,
        max_bytes: config.spool_max_mb.saturating_mul(1 << 20),
        push_timeout: Duration::from_millis(config.spool_push_timeout_ms),
        // Set by `serve`, which knows the database.
        database: None,
    })
}

/// Apply the schema, retrying while the database is unreachable (it may still be
/// starting); answers the database's id (`queen.database_identity`). Returns
/// `None` if a shutdown signal arrives first.
async fn apply_schema_with_retry(
    db_config: &tokio_postgres::Config,
    signals: &mut ShutdownRequested,
) -> Result<Option<uuid::Uuid>, ServerError> {
    let mut delay = Duration::from_millis(500);
    loop {
        let attempt = async {
            let client = queen_sql::connect::connect_one(db_config).await?;
            queen_sql::apply_schema(&client).await?;
            queen_sql::system::database_id(&client).await
        };
        match attempt.await {
            Ok(id) => {
                tracing::info!(database = %id, "schema applied");
                return Ok(Some(id));
            }
            Err(error) if error.is_transient() => {
                tracing::warn!(
                    error = %queen_sql::error_chain(&error),
                    retry_in_ms = delay.as_millis(),
                    "database not reachable yet"
                );
            }
            Err(error) => return Err(error.into()),
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = signals.recv() => return Ok(None),
        }
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}

/// Initialise (first start) and start the managed cluster. Blocking.
///
/// A default data directory (`chosen` false) that the `postgres` user cannot
/// reach when root is replaced by one under `/var/lib/queen`, and the log says
/// so; a chosen one is used as given.
fn start_managed(
    data_dir: std::path::PathBuf,
    chosen: bool,
    bin_dir: Option<std::path::PathBuf>,
) -> Result<Cluster, queen_pg::PgError> {
    let data_dir = if chosen {
        data_dir
    } else {
        let choice = queen_pg::cluster::default_data_dir(&data_dir)?;
        if let Some(unreachable) = &choice.unreachable {
            tracing::warn!(
                unreachable = %unreachable.display(),
                data_dir = %choice.path.display(),
                "running as root and the postgres user cannot reach the default data \
                 directory, so the managed PostgreSQL lives in data_dir instead \
                 (set QUEEN_DATA_DIR to choose another)"
            );
        }
        choice.path
    };
    let mut options = ClusterOptions::durable(data_dir);
    options.bin_dir = bin_dir;
    let mut cluster = Cluster::init_or_reuse(options)?;
    cluster.start()?;
    Ok(cluster)
}

/// Create the broker's database in a managed cluster unless it exists.
async fn create_managed_database(cluster: &Cluster) -> Result<(), SqlError> {
    let admin = queen_sql::connect::connect_one(&cluster.connect_config("postgres")).await?;
    queen_sql::connect::create_database_if_missing(&admin, MANAGED_DATABASE).await
}

/// SIGINT and SIGTERM, as one stream of shutdown requests.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Signals, ServerError> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt()).map_err(ServerError::Signals)?,
            terminate: signal(SignalKind::terminate()).map_err(ServerError::Signals)?,
        })
    }

    /// The next SIGINT or SIGTERM.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }

    /// Watch for signals on a task of their own: the first asks for
    /// shutdown, the second exits the process at once.
    fn watch(mut self) -> ShutdownRequested {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let first = self.next().await;
            tracing::info!("{first}: shutting down (a second signal exits at once)");
            let _ = tx.send(true);
            let second = self.next().await;
            tracing::warn!("{second} again: exiting now, without finishing the shutdown");
            std::process::exit(SECOND_SIGNAL_EXIT);
        });
        ShutdownRequested(rx)
    }
}

/// The exit status after a second shutdown signal.
const SECOND_SIGNAL_EXIT: i32 = 130;

/// Resolves once the first shutdown signal arrived.
struct ShutdownRequested(tokio::sync::watch::Receiver<bool>);

impl ShutdownRequested {
    async fn recv(&mut self) {
        // The sender lives as long as the process: an error cannot happen,
        // and would only mean "no more signals".
        let _ = self.0.wait_for(|requested| *requested).await;
    }
}

/// Log to stderr: human-readable lines, or one JSON object per line
/// (`QUEEN_LOG_FORMAT=json`) for a log shipper.
fn init_tracing(filter: &str, format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().flatten_event(true).init();
    } else {
        builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
}

fn hostname() -> String {
    queen_engine::hostname()
}
