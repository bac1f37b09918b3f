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
