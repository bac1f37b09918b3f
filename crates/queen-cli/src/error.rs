//! `CliError`, the tool's one error type, and the exit code of each kind.
//!
//! The codes are the reference CLI's (`queenctl`), plus one for `lag`:
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success |
//! | 1 | usage or input: a bad flag, a malformed NDJSON line, a bad config file |
//! | 2 | the broker: unreachable, an error answer, an answer the tool cannot read |
//! | 3 | authentication: the broker answered 401 or 403 |
//! | 4 | nothing to do: empty input to `push`, no dead letter to `dlq retry` |
//! | 5 | `lag --min-seconds N`: some consumer group lags N seconds or more |

use std::path::PathBuf;

/// What went wrong, worded for an operator (lowercase; a `#[source]` is
/// printed after the message, never repeated in it).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// A flag, an argument or a value the tool refuses before any request.
    #[error("{0}")]
    Usage(String),
    /// The config file cannot be read, parsed or written.
    #[error("config file {}: {problem}", path.display())]
    Config { path: PathBuf, problem: String },
    /// A line of NDJSON input is not usable.
    #[error("line {line}: {problem}")]
    Input { line: u64, problem: String },
    /// Reading input or writing output failed.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// No connection, a timeout, a broken transfer.
    #[error("cannot reach the broker at {url}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The broker refused the token (401) or its role (403).
    #[error("{what}: the broker answered {status}: {message}")]
    Auth {
        what: String,
        status: u16,
        message: String,
    },
    /// The broker answered an error status or a body-level `error`.
    #[error("{what}: the broker answered {status}: {message}")]
    Broker {
        what: String,
        status: u16,
        message: String,
    },
    /// The broker answered 2xx but refused in the body (`"success": false`
    /// with an `error`, or a failed push item).
    #[error("{what}: the broker refused: {message}")]
    Refused { what: String, message: String },
    /// The broker answered something this tool cannot read.
    #[error("{what}: unexpected answer from the broker ({problem})")]
    Answer { what: String, problem: String },
    /// Success with nothing done.
    #[error("{0}")]
    Nothing(String),
    /// `lag --min-seconds`: some cursors lag at least that long.
    #[error("{cursors} partition cursor(s) lag {min_seconds} s or more")]
    Lagging { cursors: usize, min_seconds: u64 },
}

impl CliError {
    /// The process exit code of this error (the table in the module doc).
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_)
            | CliError::Config { .. }
            | CliError::Input { .. }
            | CliError::Io { .. } => 1,
            CliError::Unreachable { .. }
            | CliError::Broker { .. }
            | CliError::Refused { .. }
            | CliError::Answer { .. } => 2,
            CliError::Auth { .. } => 3,
            CliError::Nothing(_) => 4,
            CliError::Lagging { .. } => 5,
        }
    }

    /// Wrap an I/O error with what was being done.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CliError {
        let what = what.into();
        move |source| CliError::Io { what, source }
    }
}

/// The error and its chain of sources, `: `-separated, for stderr.
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // reqwest repeats the URL in its message; keep the chain short.
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
