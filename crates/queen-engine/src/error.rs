//! The one error type of `queen-engine`.

use queen_sql::SqlError;

/// Everything an engine operation can fail with.
/// `queen-http` maps each variant to a status in one place (`queen_http::error`).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// PostgreSQL failed or could not be reached.
    #[error("storage error")]
    Sql(#[from] SqlError),

    /// One failure answered to several waiters (a flush carries many requests).
    #[error(transparent)]
    Shared(std::sync::Arc<EngineError>),

    /// A queue has `encryptionEnabled` but this broker has no key: the push
    /// (or pop) fails rather than store plaintext; a broker with the key can
    /// serve it.
    #[error(
        "queue {queue} requires encryption but QUEEN_ENCRYPTION_KEY is not set on this broker"
    )]
    EncryptionKeyMissing { queue: String },

    /// A streams cycle was refused (no such query, an ack that does not
    /// apply): nothing of it was written. The contract answers it 200 with
    /// `success: false`.
    #[error("{0}")]
    CycleRefused(String),

    /// A configure asks for `encryptionEnabled` on a broker without a key:
    /// refused before any I/O, so no queue exists that this broker would then
    /// fail every push to.
    #[error(
        "queue {queue} cannot enable encryption: QUEEN_ENCRYPTION_KEY is not set on this broker"
    )]
    EncryptionKeyRequired { queue: String },

    /// `QUEEN_ENCRYPTION_KEY` is not 64 hexadecimal characters.
    #[error("QUEEN_ENCRYPTION_KEY must be 64 hexadecimal characters (32 bytes)")]
    InvalidKey,

    /// AES-GCM refused to seal a payload.
    #[error("could not encrypt a payload")]
    Seal,

    /// A sealed payload did not open: wrong key or tampered bytes.
    #[error("could not decrypt a payload (wrong QUEEN_ENCRYPTION_KEY or corrupt data)")]
    Unseal,

    /// The spool holds its limit of undrained pushes (`QUEEN_SPOOL_MAX_MB`):
    /// nothing of this push was written; retry later.
    #[error("the push spool is full (QUEEN_SPOOL_MAX_MB); retry later")]
    SpoolFull,

    /// The spool file could not be written: nothing of this push was
    /// acknowledged.
    #[error("File buffer write failed")]
    SpoolWrite(#[source] std::io::Error),

    /// Push maintenance mode is on and this broker has no spool to hold the
    /// push.
    #[error("maintenance mode is on and this broker has no spool (FILE_BUFFER_DIR)")]
    NoSpool,

    /// The queue has `maxSize` and this push would take its depth past it:
    /// nothing of the push was written.
    #[error("queue {queue} is full: this push would take its depth past its maxSize")]
    QueueFull { queue: String },

    /// A segment could not be encoded or decoded.
    #[error("segment encoding error")]
    Frame(#[from] queen_frame::FrameError),

    /// More messages for one partition in one request than a segment can count.
    #[error("too many messages for one partition in one request")]
    BatchTooLarge,

    /// The engine is shutting down and dropped the request.
    #[error("the broker is shutting down")]
    ShuttingDown,

    /// A push flush ended without settling every message (it kept being refused).
    #[error("push could not be completed; retry it")]
    PushUnresolved,

    /// An operation of a transaction failed; everything was rolled back.
    #[error("{message}")]
    TransactionFailed { index: usize, message: String },

    /// A broken internal expectation; a bug, reported instead of panicking.
    #[error("internal error: {0}")]
    Internal(&'static str),

    /// This engine was built without a migration source
    /// (`EngineConfig::migration`).
    #[error("this broker cannot migrate: it was started without a migration source")]
    MigrationUnavailable,

    /// A migration request this broker cannot carry out (named), checked
    /// before anything runs.
    #[error("{0}")]
    MigrationRefused(String),

    /// A migration is running on this broker: another cannot start, and
    /// its state cannot be reset.
    #[error("a migration is in progress")]
    MigrationInProgress,

    /// Another session (another broker's copy) holds the target's
    /// migration lock.
    #[error(
        "another migration to this target is running: another session (another broker's \
         copy) holds the target's migration lock"
    )]
    MigrationTargetBusy,

    /// A queue configuration breaks one of the engine's rules (checked before
    /// any I/O, so nothing was written). Displays as, for example,
    /// `queue must be at most 255 bytes`.
    #[error("{field} {rule}")]
    InvalidConfiguration {
        /// The offending field: `queue`, `namespace`, `task`, `tenant`, or a
        /// `QueueSettings` field name such as `lease_time`.
        field: &'static str,
        /// The rule it breaks, phrased to follow the field name.
        rule: &'static str,
    },
}

impl EngineError {
    /// True when the database could not be reached or could not finish the
    /// work (a transient database error): a push failing so is spooled.
    pub fn is_unreachable(&self) -> bool {
        match self {
            EngineError::Sql(error) => error.is_transient(),
            EngineError::Shared(error) => error.is_unreachable(),
            _ => false,
        }
    }

    /// True when the same request may succeed if retried later.
    pub fn is_transient(&self) -> bool {
        match self {
            EngineError::Sql(error) => error.is_transient(),
            EngineError::Shared(error) => error.is_transient(),
            EngineError::ShuttingDown
            | EngineError::PushUnresolved
            | EngineError::SpoolFull
            | EngineError::NoSpool
            | EngineError::QueueFull { .. } => true,
            EngineError::EncryptionKeyMissing { .. }
            | EngineError::EncryptionKeyRequired { .. }
            | EngineError::InvalidKey
            | EngineError::Seal
            | EngineError::Unseal
            | EngineError::Frame(_)
            | EngineError::BatchTooLarge
            | EngineError::TransactionFailed { .. }
            | EngineError::Internal(_)
            | EngineError::CycleRefused(_)
            | EngineError::SpoolWrite(_)
            | EngineError::MigrationUnavailable
            | EngineError::MigrationRefused(_)
            | EngineError::MigrationInProgress
            | EngineError::MigrationTargetBusy => false,
            EngineError::InvalidConfiguration { .. } => false,
        }
    }
}
