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

/// Why [`Execution::output_as`](crate::Execution::output_as) has no `T` to give: the
/// execution did not complete (its failure reason says why), or its output is not a `T`.
///
/// Its `Debug` is its message, so `unwrap()` and a test's `?` print the cause.
///
/// ```
/// use rebuno_devkernel::{Execution, ExecutionStatus};
/// let failed: Execution = serde_json::from_value(serde_json::json!({
///     "id": "0192f1a0-0000-7000-8000-000000000000", "agent_id": "triage",
///     "status": "failed", "failure_reason": "agent_error: the CRM is unreachable",
///     "input": null, "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:00:00Z"
/// }))?;
/// let error = failed.output_as::<String>().unwrap_err();
/// assert!(error.to_string().ends_with("it failed: agent_error: the CRM is unreachable"));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// The execution has not completed, so it has no output.
    #[error("execution {id} of agent \"{agent_id}\" has no output: it {}", state(*.status, .failure_reason))]
    NotCompleted {
        /// The execution.
        id: uuid::Uuid,
        /// Its agent.
        agent_id: String,
        /// Its status (`failed`, `cancelled`, or not ended yet).
        status: crate::model::ExecutionStatus,
        /// Why it failed or was cancelled.
        failure_reason: String,
    },
    /// The output does not decode as the type asked for.
    #[error("the output of execution {id} is not a {type_name}: {source}; the output is {output}")]
    Decode {
        /// The execution.
        id: uuid::Uuid,
        /// The type asked for.
        type_name: &'static str,
        /// The output as JSON (cut after 200 characters).
        output: String,
        /// What serde said.
        source: serde_json::Error,
    },
}

impl std::fmt::Debug for OutputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// How an execution stands, as the end of a sentence starting with "it" or "it is still":
/// `failed: <reason>`, `cancelled: <reason>`, `running`, ...
pub(crate) fn state(status: crate::model::ExecutionStatus, failure_reason: &str) -> String {
    use crate::model::ExecutionStatus;
    match (status, failure_reason) {
        (ExecutionStatus::Failed | ExecutionStatus::Cancelled, reason) if !reason.is_empty() => {
            format!("{}: {reason}", status.as_str())
        }
        (status, _) => status.as_str().to_owned(),
    }
}

/// `text` cut after `max` characters, with an ellipsis.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}
