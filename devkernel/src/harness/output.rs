//! [`ExecutionExt::output_as`]: an execution's output, typed, for an assertion; and
//! [`OutputError`], why there is none.

use rebuno::wire::{Execution, ExecutionStatus};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::truncate;

/// What a test asks of an [`Execution`] the harness returned.
///
/// ```no_run
/// # fn demo(done: rebuno::wire::Execution) -> Result<(), rebuno_devkernel::OutputError> {
/// use rebuno_devkernel::ExecutionExt;
/// #[derive(serde::Deserialize)]
/// struct Sum { total: u32 }
/// assert_eq!(done.output_as::<Sum>()?.total, 3);
/// # Ok(()) }
/// ```
pub trait ExecutionExt {
    /// The output of a completed execution decoded as `T`, for a typed assertion.
    ///
    /// # Errors
    ///
    /// [`OutputError::NotCompleted`] with its status and failure reason when the execution
    /// did not complete (a failed one says why it failed); [`OutputError::Decode`] when the
    /// output is not a `T` (a completed execution without output decodes as `null`).
    fn output_as<T: DeserializeOwned>(&self) -> Result<T, OutputError>;
}

impl ExecutionExt for Execution {
    fn output_as<T: DeserializeOwned>(&self) -> Result<T, OutputError> {
        if self.status != ExecutionStatus::Completed {
            return Err(OutputError::NotCompleted {
                id: self.id.clone(),
                agent_id: self.agent_id.clone(),
                status: self.status,
                failure_reason: self.failure_reason.clone(),
            });
        }
        let output = self.output.as_ref().unwrap_or(&Value::Null);
        T::deserialize(output).map_err(|source| OutputError::Decode {
            id: self.id.clone(),
            type_name: std::any::type_name::<T>(),
            output: truncate(&output.to_string(), 200),
            source,
        })
    }
}

/// Why [`ExecutionExt::output_as`] has no `T` to give: the execution did not complete (its
/// failure reason says why), or its output is not a `T`.
///
/// Its `Debug` is its message, so `unwrap()` and a test's `?` print the cause.
///
/// ```
/// use rebuno::wire::Execution;
/// use rebuno_devkernel::ExecutionExt;
/// let failed: Execution = serde_json::from_value(serde_json::json!({
///     "id": "0192f1a0-0000-7000-8000-000000000000", "agent_id": "triage",
///     "status": "failed", "failure_reason": "agent_error: the CRM is unreachable",
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
        id: String,
        /// Its agent.
        agent_id: String,
        /// Its status (`failed`, `cancelled`, or not ended yet).
        status: ExecutionStatus,
        /// Why it failed or was cancelled.
        failure_reason: String,
    },
    /// The output does not decode as the type asked for.
    #[error("the output of execution {id} is not a {type_name}: {source}; the output is {output}")]
    Decode {
        /// The execution.
        id: String,
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
pub(super) fn state(status: ExecutionStatus, failure_reason: &str) -> String {
    match (status, failure_reason) {
        (ExecutionStatus::Failed | ExecutionStatus::Cancelled, reason) if !reason.is_empty() => {
            format!("{}: {reason}", status.as_str())
        }
        (status, _) => status.as_str().to_owned(),
    }
}
