//! The kernel's rows as the SDK's [`rebuno::wire`] types, field by field (ids and times as the
//! strings the HTTP API serves).

use rebuno::client::AgentRecord;
use rebuno::wire::{Approval, Event, Execution, StepRecord};
use serde_json::Value;

use crate::model::{AgentRow, ApprovalRow, ExecutionRow, LogEntry, StepRow};

/// An execution's row as the wire's execution.
pub(super) fn execution(row: ExecutionRow) -> Execution {
    let mut wire = Execution::default();
    wire.id = row.id.to_string();
    wire.agent_id = row.agent_id;
    wire.status = row.status;
    wire.input = row.input;
    wire.output = row.output;
    wire.failure_reason = row.failure_reason;
    wire.session = row.session;
    wire.parent_execution_id = row.parent_execution_id.map(|id| id.to_string());
    wire.forked_from = row.forked_from.map(|id| id.to_string());
    wire.fork_seq = row.fork_seq;
    wire.idempotency_key = row.idempotency_key;
    wire.spawned_by = row.spawned_by;
    wire.on_behalf_of = row.on_behalf_of;
    wire.restoration = row
        .restoration
        .and_then(|how| serde_json::to_value(how).ok());
    wire.created_at = row.created_at.to_string();
    wire.updated_at = row.updated_at.to_string();
    wire.deadline_at = row.deadline_at.map(|at| at.to_string());
    wire
}

/// A step's row as the wire's step.
pub(super) fn step(row: StepRow) -> StepRecord {
    let mut wire = StepRecord::default();
    wire.step_id = row.step_id;
    wire.execution_id = row.execution_id.to_string();
    wire.kind = row.kind;
    wire.target = row.target;
    wire.status = row.status.as_str().to_owned();
    wire.args = row.args;
    wire.args_hash = row.args_hash;
    wire.occurrence = row.occurrence;
    wire.idempotency = row.idempotency;
    wire.result = row.result;
    wire.error = row.error;
    wire.started_at = row.started_at.map(|at| at.to_string());
    wire.completed_at = row.completed_at.map(|at| at.to_string());
    wire.usage_input = row.usage_input;
    wire.usage_output = row.usage_output;
    wire.resources = row.resources;
    wire
}

/// A log entry as the wire's event.
pub(super) fn event(entry: LogEntry) -> Event {
    let mut wire = Event::default();
    wire.execution_id = entry.execution_id.to_string();
    wire.event_seq = entry.event_seq;
    wire.kind = entry.kind;
    wire.payload = entry.payload;
    wire.occurred_at = entry.occurred_at.to_string();
    wire
}

/// An approval's row as the wire's approval (approvers `null` is the empty list: anyone).
pub(super) fn approval(row: ApprovalRow) -> Approval {
    let mut wire = Approval::default();
    wire.id = row.id.to_string();
    wire.step_id = row.step_id;
    wire.execution_id = row.execution_id.to_string();
    wire.status = row.status;
    wire.approvers = match row.approvers {
        Value::Array(names) => names
            .into_iter()
            .filter_map(|name| name.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    wire.message = row.message;
    wire.decided_by = row.decided_by;
    wire.rationale = row.rationale;
    wire.timeout_at = row.timeout_at.to_string();
    wire.created_at = row.created_at.to_string();
    wire
}

/// An agent's row as the client's agent record (no secret: the row has none).
pub(super) fn agent(row: AgentRow) -> AgentRecord {
    let mut wire = AgentRecord::default();
    (wire.id, wire.webhook_url) = (row.id, row.webhook_url);
    wire.policy_bundle = row.policy_bundle;
    wire.lease_timeout_seconds = row.lease_timeout_seconds;
    wire.description = row.description;
    (wire.input_schema, wire.output_schema) = (row.input_schema, row.output_schema);
    wire.registered_at = row.registered_at.to_string();
    wire
}
