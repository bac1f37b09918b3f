//! One error type for the whole tool: a message with its context, built by
//! [`Context`] on any `Result` whose error is a `std::error::Error`.

use std::fmt;

/// What went wrong, with every layer of context, `outer: inner: innermost`.
#[derive(Debug)]
pub(crate) struct Error(String);

/// The tool's result type.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with just this message.
    pub(crate) fn msg(message: impl fmt::Display) -> Error {
        Error(message.to_string())
    }

    /// This error with `what` in front of it.
    pub(crate) fn wrap(self, what: impl fmt::Display) -> Error {
        Error(format!("{what}: {}", self.0))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Attach context to a failure.
pub(crate) trait Context<T> {
    /// `what: error: its sources`.
    fn context(self, what: impl fmt::Display) -> Result<T>;

    /// Like [`Context::context`], building the text only on failure.
    fn with_context<D: fmt::Display>(self, what: impl FnOnce() -> D) -> Result<T>;
}

impl<T, E: std::error::Error> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|error| Error(format!("{what}: {}", chain(&error))))
    }

    fn with_context<D: fmt::Display>(self, what: impl FnOnce() -> D) -> Result<T> {
        self.map_err(|error| Error(format!("{}: {}", what(), chain(&error))))
    }
}

/// The error and its sources, skipping a source whose text the outer message
/// already contains (some libraries print their cause themselves).
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
