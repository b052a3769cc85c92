//! Errors from starting or running the Lambda host.

use std::error::Error as StdError;
use std::fmt;

use rebuno::BoxError;

/// Why [`run`](crate::run) stopped. Match on [`Error::kind`]; message text is not stable.
pub struct Error {
    kind: ErrorKind,
    source: Option<BoxError>,
}

/// What went wrong, in broad strokes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The process is not running under Lambda: a required `AWS_LAMBDA_*` variable is missing
    /// or malformed.
    Environment,
    /// Registering or running the internal extension failed.
    Extension,
    /// The Lambda runtime loop failed (the Runtime API went away or refused a call).
    Runtime,
    /// The agent could not be built (a missing `REBUNO_URL` or `REBUNO_AGENT_SECRET`, no
    /// handler, ...): an error of `rebuno`'s `AgentBuilder::build`, converted by `?`.
    Config,
}

/// Lets `main` return `rebuno_lambda::Error` and use `?` on `AgentBuilder::build()`.
impl From<rebuno::Error> for Error {
    fn from(error: rebuno::Error) -> Self {
        Self {
            kind: ErrorKind::Config,
            source: Some(Box::new(error)),
        }
    }
}

impl Error {
    /// The broad cause.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub(crate) fn environment(message: String) -> Self {
        Self {
            kind: ErrorKind::Environment,
            source: Some(message.into()),
        }
    }

    pub(crate) fn extension(source: BoxError) -> Self {
        Self {
            kind: ErrorKind::Extension,
            source: Some(source),
        }
    }

    pub(crate) fn runtime(source: BoxError) -> Self {
        Self {
            kind: ErrorKind::Runtime,
            source: Some(source),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("source", &self.source)
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            ErrorKind::Environment => "not running under AWS Lambda",
            ErrorKind::Extension => "lambda internal extension failed",
            ErrorKind::Runtime => "lambda runtime failed",
            ErrorKind::Config => "the agent could not be built",
        })
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_level_and_source_keeps_the_cause() {
        let error = Error::runtime("connection refused".into());
        assert_eq!(error.kind(), ErrorKind::Runtime);
        assert_eq!(error.to_string(), "lambda runtime failed");
        assert_eq!(error.source().unwrap().to_string(), "connection refused");
    }
}
