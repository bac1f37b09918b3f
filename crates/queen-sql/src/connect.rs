//! Connection settings and the connection pool.
//!
//! Every connection Queen opens runs with `timezone=UTC` (timestamps on the wire are
//! UTC with a literal `Z`) and `application_name=queen` (so an operator can find the
//! broker's sessions in `pg_stat_activity`).

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

use crate::SqlError;

/// Session options sent at connect time.
const SESSION_OPTIONS: &str = "-c timezone=UTC";

/// Parse a libpq-style URL or key=value string (`QUEEN_DATABASE_URL`) into settings.
pub fn config_from_url(url: &str) -> Result<tokio_postgres::Config, SqlError> {
    let mut config: tokio_postgres::Config = url.parse()?;
    apply_session_defaults(&mut config);
    Ok(config)
}

/// Settings from the discrete `PG_*` variables, each defaulting as the wire contract
/// lists (`localhost`, `5432`, `postgres`, `postgres`, `postgres`).
pub fn config_from_parts(
    host: &str,
    port: u16,
    dbname: &str,
    user: &str,
    password: &str,
) -> tokio_postgres::Config {
    let mut config = tokio_postgres::Config::new();
    config
        .host(host)
        .port(port)
        .dbname(dbname)
        .user(user)
        .password(password);
    apply_session_defaults(&mut config);
    config
}

/// Add Queen's session options unless the caller set their own.
pub fn apply_session_defaults(config: &mut tokio_postgres::Config) {
    if config.get_application_name().is_none() {
        config.application_name("queen");
    }
    let options = match config.get_options() {
        Some(existing) if existing.contains("timezone") => existing.to_owned(),
        Some(existing) => format!("{existing} {SESSION_OPTIONS}"),
        None => SESSION_OPTIONS.to_owned(),
    };
    config.options(&options);
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(5));
    }
}

/// Build a pool of at most `max_size` connections.
///
/// Recycling is `Fast`: a connection returned to the pool is reused without a
/// round trip; a broken one is noticed by its next statement failing, which the
/// callers treat as transient.
pub fn pool(config: tokio_postgres::Config, max_size: usize) -> Result<Pool, SqlError> {
    let manager = Manager::from_config(
        config,
        tokio_postgres::NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(max_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(10)))
        .create_timeout(Some(Duration::from_secs(5)))
        .build()
        .map_err(SqlError::from)
}

/// Open one connection outside any pool, driving it on a spawned task.
/// Used at boot (schema apply) and by tools.
pub async fn connect_one(
    config: &tokio_postgres::Config,
) -> Result<tokio_postgres::Client, SqlError> {
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "database connection closed");
        }
    });
    Ok(client)
}

/// One trivial round trip: the `/health` database check.
pub async fn ping(client: &impl tokio_postgres::GenericClient) -> Result<(), SqlError> {
    client.execute(PING, &[]).await?;
    Ok(())
}

const PING: &str = "SELECT 1";

/// Create database `name` unless it exists (managed clusters, first start).
pub async fn create_database_if_missing(
    client: &tokio_postgres::Client,
    name: &str,
) -> Result<(), SqlError> {
    let exists = client.query_opt(DATABASE_EXISTS, &[&name]).await?.is_some();
    if exists {
        return Ok(());
    }
    // CREATE DATABASE takes no parameters; quote the identifier instead.
    let quoted = format!("\"{}\"", name.replace('"', "\"\""));
    match client
        .batch_execute(&format!("CREATE DATABASE {quoted}"))
        .await
    {
        Ok(()) => Ok(()),
        // Another broker created it between the check and here.
        Err(error)
            if error.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE) =>
        {
            Ok(())
        }
        Err(error) => Err(error.into()),
    }
}

const DATABASE_EXISTS: &str = "SELECT 1 FROM pg_database WHERE datname = $1";
