//! JSON shapes of the Rebuno protocol (PROTOCOL.md §2.3, §2.4, §4).
//!
//! Deserialization is lenient: unknown fields are ignored and empty lists may be `null`, so a
//! newer kernel never breaks an older SDK.
//!
//! The records are `#[non_exhaustive]` (a kernel may add fields) and implement [`Default`]: a
//! record built outside this crate, for a test double or by a kernel of its own, is a default
//! value with its fields set.
//!
//! ```
//! let mut execution = rebuno::wire::Execution::default();
//! execution.id = "01890a5d-ac96-774b-bcce-b302099a8057".to_owned();
//! execution.status = rebuno::wire::ExecutionStatus::Completed;
//! assert!(execution.status.is_terminal());
//! ```

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

mod failure;

pub use failure::{FailureReason, FailureToken};

/// The body of a kernel → agent webhook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub(crate) struct WebhookPayload {
    /// The execution to run.
    pub(crate) execution_id: String,
    /// The dispatch (delivery) this webhook belongs to.
    pub(crate) dispatch_id: String,
    /// The delivery attempt, from 1.
    pub(crate) dispatch_attempt: u64,
    /// The lease period; the agent heartbeats well within it.
    pub(crate) lease_timeout_seconds: f64,
}

/// Status of an execution.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ExecutionStatus {
    /// Created, waiting for its session to free.
    Pending,
    /// Dispatched to its agent.
    Running,
    /// Waiting on an approval or on subagents.
    Blocked,
    /// Finished with an output.
    Completed,
    /// Finished with a failure reason.
    Failed,
    /// Cancelled by a client, a deadline or its parent.
    Cancelled,
    /// A status this SDK does not know (and a [`Default`] record's).
    #[default]
    #[serde(other)]
    Unknown,
}

impl ExecutionStatus {
    /// Whether the execution can no longer change.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The status as the kernel spells it (`running`, ...; `unknown` for [`Self::Unknown`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Blocked => "blocked",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Unknown => "unknown",
        }
    }
}

/// The step that spawned a subagent execution.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SpawnedBy {
    /// The parent execution.
    pub execution_id: String,
    /// The parent's tool step.
    pub step_id: String,
}

/// An execution as the kernel reports it.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Execution {
    /// UUIDv7 id.
    pub id: String,
    /// The agent that runs it.
    pub agent_id: String,
    /// Current status.
    pub status: ExecutionStatus,
    /// The input it was created with (`null` when none).
    #[serde(default)]
    pub input: Value,
    /// The output, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Why it failed or was cancelled.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure_reason: String,
    /// Session label, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The previous completed execution of the session, or the explicit parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_execution_id: Option<String>,
    /// The execution this one was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
    /// The event sequence number the fork was taken at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_seq: Option<u64>,
    /// The key that made creation idempotent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Set when this is a subagent execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawned_by: Option<SpawnedBy>,
    /// The end-user subject the execution acts for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_behalf_of: Option<String>,
    /// On a fork response: how each resource was restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restoration: Option<Value>,
    /// Creation time (RFC 3339).
    #[serde(default)]
    pub created_at: String,
    /// Last update time (RFC 3339).
    #[serde(default)]
    pub updated_at: String,
    /// When the kernel cancels it (`deadline_exceeded`) unless it has ended (RFC 3339; only
    /// when the kernel sets execution deadlines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<String>,
}

impl Execution {
    /// This execution's `failure_reason`, parsed (`None` when it records none: it did not
    /// fail and was not cancelled).
    ///
    /// ```
    /// # fn check(execution: &rebuno::wire::Execution) {
    /// use rebuno::wire::FailureToken;
    ///
    /// if let Some(reason) = execution.failure() {
    ///     if reason.token == FailureToken::PolicyDenied {
    ///         eprintln!("denied: {}", reason.detail.unwrap_or("by policy"));
    ///     }
    /// }
    /// # }
    /// ```
    pub fn failure(&self) -> Option<FailureReason<'_>> {
        (!self.failure_reason.is_empty()).then(|| FailureReason::parse(&self.failure_reason))
    }
}

/// What the kernel decided about a submitted step.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Decision {
    /// Run the effect now.
    Proceed,
    /// Already recorded: use `result` or `error`.
    Replay,
    /// Refused by policy.
    Denied,
    /// Waiting on an approval, or parked by a rate limit.
    Blocked,
    /// Refused by a rate limit.
    RateLimited,
    /// The execution is blocked; new steps wait.
    ExecutionBlocked,
    /// The execution is terminal.
    ExecutionTerminal,
    /// A step outcome was recorded.
    Recorded,
    /// A decision this SDK does not know (and a [`Default`] record's).
    #[default]
    #[serde(other)]
    Unknown,
}

impl Decision {
    /// The decision as the kernel spells it (`proceed`, ...; `unknown` for [`Self::Unknown`]).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Proceed => "proceed",
            Self::Replay => "replay",
            Self::Denied => "denied",
            Self::Blocked => "blocked",
            Self::RateLimited => "rate_limited",
            Self::ExecutionBlocked => "execution_blocked",
            Self::ExecutionTerminal => "execution_terminal",
            Self::Recorded => "recorded",
            Self::Unknown => "unknown",
        }
    }
}

/// A resource a live step touches, with whether a checkpoint is due after it.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResourceGeneration {
    /// The resource key.
    pub key: String,
    /// Its generation after this step started.
    pub generation: u64,
    /// Whether the SDK should capture a checkpoint after the body.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub due: bool,
}

/// The kernel's answer to a step submit, complete or fail.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StepDecision {
    /// The decision.
    pub decision: Decision,
    /// The step, when one was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// The recorded result of a replayed step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The recorded error of a replayed step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// The approval a blocked step waits on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// Why a step was denied, rate limited or parked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The policy rule behind a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
    /// Resources this live step touches.
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resources: Vec<ResourceGeneration>,
}

/// A recorded step.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StepRecord {
    /// 64-hex step id.
    pub step_id: String,
    /// The execution it belongs to.
    pub execution_id: String,
    /// `tool_call`, `llm_call` or `local`.
    pub kind: String,
    /// Tool id, model id or step name.
    pub target: String,
    /// Status (`succeeded`, `failed`, `executing`, ...).
    pub status: String,
    /// The args the step was submitted with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// Lowercase hex SHA-256 of the canonical JSON of the args.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub args_hash: String,
    /// How many earlier submissions of the same kind, target and args the delivery attempt
    /// that recorded it had made.
    #[serde(default)]
    pub occurrence: u32,
    /// `safe_to_retry` or `at_most_once` (empty from kernels that do not say).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub idempotency: String,
    /// The recorded result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The recorded error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// When the step started executing (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When its outcome was recorded (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// Input tokens an LLM step reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_input: Option<u64>,
    /// Output tokens an LLM step reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_output: Option<u64>,
    /// Keys of the resources the step affects.
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resources: Vec<String>,
}

/// The kernel's error envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ErrorEnvelope {
    /// Machine-readable code.
    #[serde(default)]
    pub code: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
}

fn null_as_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

/// The human-readable text of a recorded step error: its `message`, else its `reason`, else the
/// JSON itself; a subagent's own `failure_reason` is appended.
pub(crate) fn error_message(error: &Value) -> String {
    let text = |key: &str| {
        error
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let head = text("message")
        .or_else(|| text("reason"))
        .map_or_else(|| error.to_string(), str::to_owned);
    match text("failure_reason") {
        Some(cause) => format!("{head}: {cause}"),
        None => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_parse_leniently() {
        let replay: StepDecision = serde_json::from_str(
            r#"{"decision":"replay","step_id":"s","result":{"ok":true},"resources":null,"extra":1}"#,
        )
        .unwrap();
        assert_eq!(replay.decision, Decision::Replay);
        assert_eq!(replay.result, Some(serde_json::json!({"ok": true})));
        let future: StepDecision = serde_json::from_str(r#"{"decision":"teleport"}"#).unwrap();
        assert_eq!(future.decision, Decision::Unknown);
    }

    #[test]
    fn error_messages_prefer_message_then_reason() {
        let indeterminate =
            serde_json::json!({"reason": "indeterminate", "message": "outcome unknown"});
        assert_eq!(error_message(&indeterminate), "outcome unknown");
        assert_eq!(
            error_message(&serde_json::json!({"reason": "approval_timeout"})),
            "approval_timeout"
        );
        assert_eq!(error_message(&serde_json::json!(["x"])), "[\"x\"]");
        let child = serde_json::json!({"reason": "subagent_failed", "execution_id": "c", "failure_reason": "agent_error: boom"});
        assert_eq!(error_message(&child), "subagent_failed: agent_error: boom");
    }
}

/// One entry of an execution's event log.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Event {
    /// The execution.
    pub execution_id: String,
    /// 1-based position in the log.
    pub event_seq: u64,
    /// Event type, e.g. `step.succeeded`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Type-specific payload.
    #[serde(default)]
    pub payload: Value,
    /// When it was appended (RFC 3339).
    #[serde(default)]
    pub occurred_at: String,
}

/// A page of executions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ExecutionPage {
    /// Newest first.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub executions: Vec<Execution>,
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Where an [`Approval`] stands.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalStatus {
    /// Waiting for a decision.
    Pending,
    /// Granted: the step runs when the execution resumes.
    Granted,
    /// Denied: the step's call returns the denial.
    Denied,
    /// Nobody decided before its timeout.
    Expired,
    /// A status this SDK does not know (and a [`Default`] record's).
    #[default]
    #[serde(other)]
    Unknown,
}

impl ApprovalStatus {
    /// The status as the kernel spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Granted => "granted",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Unknown => "unknown",
        }
    }
}

/// A human decision a `require_approval` policy rule waits for.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Approval {
    /// UUIDv7 id.
    pub id: String,
    /// The step waiting on it.
    pub step_id: String,
    /// The execution waiting on it.
    pub execution_id: String,
    /// Where the decision stands.
    pub status: ApprovalStatus,
    /// Who may decide (empty: anyone).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub approvers: Vec<String>,
    /// The rule's message to the approver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Who decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    /// When it expires (RFC 3339).
    #[serde(default)]
    pub timeout_at: String,
    /// When it was requested (RFC 3339).
    #[serde(default)]
    pub created_at: String,
}

/// Where an execution can be forked, and which checkpoints cover which events.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ForkPoints {
    /// The newest event sequence number.
    pub latest_seq: u64,
    /// Registered resources, with the seq each was registered at.
    #[serde(default)]
    pub resources: std::collections::BTreeMap<String, u64>,
    /// Captured checkpoints.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub checkpoints: Vec<Checkpoint>,
}

/// A captured checkpoint of a resource.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The resource key.
    pub key: String,
    /// The generation it captured.
    pub generation: u64,
    /// The driver's reference to the captured state.
    pub checkpoint_ref: String,
    /// The first event it covers.
    pub covered_seq: u64,
    /// The first event it no longer covers, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalidated_seq: Option<u64>,
}

/// A registered resource as the kernel reports it.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResourceView {
    /// The resource key.
    pub key: String,
    /// The driver's id.
    pub driver_id: String,
    /// The driver's configuration (`null`: none).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub configuration: Value,
    /// Whether coverage lasts until an affecting step starts.
    #[serde(default)]
    pub coverage_reuse: bool,
    /// Checkpoint interval in affecting steps (0: never).
    #[serde(default)]
    pub every_steps: u64,
    /// Whether to capture on completion.
    #[serde(default)]
    pub on_completion: bool,
    /// The event sequence number of its registration.
    #[serde(default)]
    pub registered_seq: u64,
    /// Bumped by every live step that may change the resource.
    #[serde(default)]
    pub generation: u64,
    /// Settled affecting steps.
    #[serde(default)]
    pub count: u64,
    /// Where the resource is, once bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<Value>,
    /// The checkpoint a fork restores from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_ref: Option<String>,
    /// Whether a checkpoint matches the current generation.
    #[serde(default)]
    pub covered: bool,
}

/// A checkpoint captured for a resource generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Capture {
    /// The resource key.
    pub key: String,
    /// The generation captured.
    pub generation: u64,
    /// The driver's reference.
    pub checkpoint_ref: String,
}

/// A checkpoint that could not be captured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CaptureFailure {
    /// The resource key.
    pub key: String,
    /// The generation that was due.
    pub generation: u64,
    /// Why.
    pub error: String,
}

/// Captures to send with a step outcome or on their own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Captures {
    /// Captured checkpoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub captures: Vec<Capture>,
    /// Failed captures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capture_failures: Vec<CaptureFailure>,
}

impl Captures {
    /// Whether there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.captures.is_empty() && self.capture_failures.is_empty()
    }
}
