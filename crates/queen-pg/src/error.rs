//! The one error type of `queen-pg`.

use std::path::PathBuf;

/// Everything that can go wrong managing a PostgreSQL cluster.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The PostgreSQL server binaries (`initdb`, `pg_ctl`) were not found.
    #[error(
        "PostgreSQL server binaries not found (looked for {program} in {searched}); \
         install PostgreSQL (e.g. `apt-get install postgresql`) or point Queen at a server \
         with QUEEN_DATABASE_URL"
    )]
    BinariesNotFound {
        program: &'static str,
        searched: String,
    },

    /// A PostgreSQL client program (`pg_dump`, `pg_restore`) was not found.
    #[error(
        "PostgreSQL program {program} not found (looked in {searched}); install PostgreSQL's \
         client programs (e.g. `apt-get install postgresql-client`) or set QUEEN_PG_BIN_DIR"
    )]
    ProgramNotFound {
        program: &'static str,
        searched: String,
    },

    /// A PostgreSQL management command exited unsuccessfully.
    #[error("`{program}` failed with {status}: {stderr}")]
    Command {
        program: String,
        status: String,
        stderr: String,
    },

    /// Filesystem trouble around a managed cluster's directory.
    #[error("i/o error on {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The managed data directory cannot be used by the account PostgreSQL runs as.
    #[error("data directory {} is unusable: {reason}", path.display())]
    DataDir { path: PathBuf, reason: String },
}
