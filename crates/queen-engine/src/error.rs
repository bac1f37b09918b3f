//! The one error type of `queen-engine`.

use queen_sql::SqlError;

/// Everything an engine operation can fail with.
/// `queen-http` maps each variant to a status in one place (`queen_http::error`).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// PostgreSQL failed or could not be reached.
    #[error("storage error")]
    Sql(#[from] SqlError),
}

impl EngineError {
    /// True when the same request may succeed if retried later.
    pub fn is_transient(&self) -> bool {
        match self {
            EngineError::Sql(error) => error.is_transient(),
        }
    }
}
