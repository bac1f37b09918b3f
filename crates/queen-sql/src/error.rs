//! The one error type of `queen-sql`.

/// Everything that can go wrong talking to PostgreSQL.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// A statement or connection failed inside PostgreSQL or the driver.
    #[error("database error")]
    Db(#[from] tokio_postgres::Error),

    /// The connection pool could not hand out a connection.
    #[error("connection pool error")]
    Pool(#[from] deadpool_postgres::PoolError),

    /// The pool itself could not be built from the configuration.
    #[error("invalid pool configuration")]
    PoolBuild(#[from] deadpool_postgres::BuildError),

    /// A procedure answered with rows this crate does not understand: the
    /// binary and the applied SQL disagree.
    #[error("unexpected answer from the database: {what}")]
    Protocol { what: &'static str },

    /// A segment lookup found nothing at that address.
    #[error("no segment of partition {partition_id} covers offset {offset}")]
    SegmentNotFound {
        partition_id: uuid::Uuid,
        offset: i64,
    },

    /// An embedded `sql/` file breaks the rules its apply mode depends on
    /// (a bug in the build, caught by the crate's tests).
    #[error("embedded schema file {file} is malformed: {reason}")]
    SchemaFile {
        file: &'static str,
        reason: &'static str,
    },
}

impl SqlError {
    /// True for a deadlock, a serialization failure, or a foreign-key
    /// violation (a row the statement found was deleted under it, as when a
    /// queue is deleted while a push to it flushes): the same statement may
    /// succeed if run again at once.
    pub fn is_conflict(&self) -> bool {
        match self {
            SqlError::Db(e) => e.code().is_some_and(|c| {
                *c == tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE
                    || *c == tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED
                    || *c == tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION
            }),
            _ => false,
        }
    }

    /// True when retrying later may succeed: serialisation failures,
    /// deadlocks, the server shutting down, refusing or dropping connections,
    /// and the connection itself failing (closed, or an I/O error under the
    /// driver). Everything else is a defect or a broken deployment and must
    /// fail loudly: a driver error with no SQLSTATE and no I/O cause (a type
    /// or column mismatch, an unexpected protocol message) is not transient.
    pub fn is_transient(&self) -> bool {
        use tokio_postgres::error::SqlState;
        match self {
            SqlError::Db(e) => match e.code() {
                Some(code) => {
                    *code == SqlState::T_R_SERIALIZATION_FAILURE
                        || *code == SqlState::T_R_DEADLOCK_DETECTED
                        || *code == SqlState::ADMIN_SHUTDOWN
                        || *code == SqlState::CRASH_SHUTDOWN
                        || *code == SqlState::CANNOT_CONNECT_NOW
                        || *code == SqlState::TOO_MANY_CONNECTIONS
                        // A row this statement referenced was deleted
                        // meanwhile (a partition cleanup or queue delete
                        // racing it): the retry sees the new state.
                        || *code == SqlState::FOREIGN_KEY_VIOLATION
                        // Class 08: connection exceptions.
                        || code.code().starts_with("08")
                }
                None => e.is_closed() || io_cause(e),
            },
            SqlError::Pool(_) => true,
            SqlError::PoolBuild(_)
            | SqlError::SegmentNotFound { .. }
            | SqlError::Protocol { .. }
            | SqlError::SchemaFile { .. } => false,
        }
    }
}

/// Whether an I/O error lies under `error` (the connection broke, or could
/// not be made).
fn io_cause(error: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// Render an error with all its sources, `outer: inner: innermost`, for logs.
/// Messages never repeat their source (style.md convention 4), so this is
/// where the chain is spelled out.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
