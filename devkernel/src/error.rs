//! Kernel errors and their wire mapping (PROTOCOL.md §4.1).

use http::StatusCode;

/// An error from a kernel operation, mapped to an HTTP status and a `code`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// `404 not_found`.
    #[error("not found: {0}")]
    NotFound(String),
    /// `409 conflict`.
    #[error("conflict: {0}")]
    Conflict(String),
    /// `400 validation_error`.
    #[error("validation error{}", detail(.0))]
    Validation(String),
    /// `401 unauthorized`.
    #[error("unauthorized")]
    Unauthorized,
    /// `403 forbidden`.
    #[error("forbidden")]
    Forbidden,
    /// `409 execution_terminal`.
    #[error("execution is terminal")]
    ExecutionTerminal,
    /// `409 lease_superseded`.
    #[error("dispatch lease superseded")]
    LeaseSuperseded,
    /// `500 internal_error`.
    #[error("internal error: {0}")]
    Internal(String),
}

fn detail(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

impl KernelError {
    /// A `not_found` error about `what`.
    pub(crate) fn not_found(what: impl Into<String>) -> Self {
        Self::NotFound(what.into())
    }

    /// A `validation_error` with a detail message.
    pub(crate) fn validation(what: impl Into<String>) -> Self {
        Self::Validation(what.into())
    }

    /// A `conflict` with a detail message.
    pub(crate) fn conflict(what: impl Into<String>) -> Self {
        Self::Conflict(what.into())
    }

    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) | Self::ExecutionTerminal | Self::LeaseSuperseded => {
                StatusCode::CONFLICT
            }
            Self::Validation(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The envelope `code`, e.g. `lease_superseded`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "not_found",
            Self::Conflict(_) => "conflict",
            Self::Validation(_) => "validation_error",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::ExecutionTerminal => "execution_terminal",
            Self::LeaseSuperseded => "lease_superseded",
            Self::Internal(_) => "internal_error",
        }
    }
}

/// `text` cut after `max` characters, with an ellipsis.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}
