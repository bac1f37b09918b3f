//! Managed PostgreSQL: the server processes Queen runs itself when no
//! database is configured (decisions.md §10), and the throwaway clusters of
//! the test kit and the benches.
//!
//! - `cluster`: locating the binaries, `initdb`, `pg_ctl start/stop`, running
//!   as `postgres` when root, the default data directory.
//!
//! Speaking SQL is `queen-sql`'s; this crate only borrows its session
//! defaults for the connection settings it hands out.

pub mod cluster;
mod error;

pub use error::PgError;

/// The environment variables that choose which PostgreSQL the broker uses
/// (an external server, or the managed cluster's directory and binaries):
/// what a harness clears so a child broker cannot pick another database.
/// The one copy of the list; the server's tests check it against the
/// settings `queen-server` defines.
pub const DATABASE_VARS: &[&str] = &[
    "QUEEN_DATABASE_URL",
    "QUEEN_DATABASE_READ_URL",
    "PG_HOST",
    "PG_PORT",
    "PG_DB",
    "PG_USER",
    "PG_PASSWORD",
    "QUEEN_DATA_DIR",
    "QUEEN_PG_BIN_DIR",
];
