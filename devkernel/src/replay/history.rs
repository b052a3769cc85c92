//! A recorded execution: what the kernel knows of it, in the shape every kernel serves.

use rebuno::client::Client;
use rebuno::wire::{Event, Execution, StepRecord};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ReplayError;

/// One execution as a kernel recorded it: the execution, its steps (with their args, results
/// and errors) and its event log. The checker answers a handler's kernel calls from it.
///
/// Its JSON form is `{"execution": …, "steps": […], "events": […]}` with each part exactly as
/// `GET /v0/executions/{id}`, `…/steps` and `…/events` return it (and, for a session's later
/// turn, `"previous"` as `…/previous` returns it), so a history can come from
/// the dev kernel, a Go kernel or a file:
///
/// * [`DevKernel::history`](crate::DevKernel::history) in a test;
/// * [`History::fetch`] from any kernel through [`rebuno::client::Client`];
/// * `rebuno-dev exec export ID > history.json` on the command line, then
///   [`History::from_json`].
///
/// ```
/// let history = rebuno_devkernel::replay::History::from_json(r#"{
///     "execution": {"id": "0192f1a0-0000-7000-8000-000000000000", "agent_id": "hello",
///                   "status": "completed", "input": "Ada", "output": "hello, Ada"},
///     "steps": [], "events": []
/// }"#)?;
/// assert_eq!(history.execution().agent_id, "hello");
/// # Ok::<(), rebuno_devkernel::replay::ReplayError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct History {
    execution: Execution,
    #[serde(default)]
    steps: Vec<StepRecord>,
    #[serde(default)]
    events: Vec<Event>,
    /// The `/previous` answer of a session's execution (`{"state": …}`), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous: Option<Value>,
}

impl History {
    /// A history from its parts; the steps are put in the order they were first proposed
    /// (kernels list them by id).
    pub fn new(execution: Execution, steps: Vec<StepRecord>, events: Vec<Event>) -> Self {
        let mut history = Self {
            execution,
            steps,
            events,
            previous: None,
        };
        history.order_steps();
        history
    }

    /// Reads a history from its JSON form (see the type's docs).
    pub fn from_json(json: &str) -> Result<Self, ReplayError> {
        let mut history: Self = serde_json::from_str(json).map_err(ReplayError::History)?;
        history.order_steps();
        Ok(history)
    }

    /// Its JSON form, for a file a later build replays.
    pub fn to_json(&self) -> String {
        // A History holds JSON values and strings only: serializing it cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Fetches execution `execution_id`'s history from a kernel: the execution, its steps,
    /// every page of its event log, and for a session's later turn the previous state its
    /// handler reads.
    pub async fn fetch(client: &Client, execution_id: &str) -> rebuno::Result<Self> {
        let execution = client.get(execution_id).await?;
        let steps = client.steps(execution_id).send().await?;
        let events = client.all_events(execution_id).await?;
        let has_parent = execution.parent_execution_id.is_some();
        let history = Self::new(execution, steps, events);
        if !has_parent {
            return Ok(history);
        }
        let state = client.previous(execution_id).await?;
        Ok(history.with_previous(serde_json::json!({ "state": state })))
    }

    /// With the session's previous state, as `GET /v0/executions/{id}/previous` answered it
    /// (`{"state": …}`): a handler that calls [`rebuno::previous`] reads it.
    #[must_use]
    pub fn with_previous(mut self, previous: Value) -> Self {
        self.previous = Some(previous);
        self
    }

    /// The execution.
    pub fn execution(&self) -> &Execution {
        &self.execution
    }

    /// The recorded steps, in the order they were first proposed.
    pub fn steps(&self) -> &[StepRecord] {
        &self.steps
    }

    /// The event log.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    pub(super) fn previous(&self) -> Option<&Value> {
        self.previous.as_ref()
    }

    /// The approval a step awaiting one waits on, from the `approval.requested` event.
    pub(super) fn approval_of(&self, step_id: &str) -> Option<String> {
        self.events
            .iter()
            .filter(|e| e.kind == "approval.requested")
            .find(|e| e.payload.get("step_id").and_then(Value::as_str) == Some(step_id))
            .and_then(|e| e.payload.get("approval_id").and_then(Value::as_str))
            .map(str::to_owned)
    }

    /// Sorts the steps by the first event that names them; steps no event names (a fork's
    /// copies, a log cut short) keep their relative order, after the others.
    fn order_steps(&mut self) {
        let first_seen = |step_id: &str| {
            self.events
                .iter()
                .find(|e| e.payload.get("step_id").and_then(Value::as_str) == Some(step_id))
                .map_or(u64::MAX, |e| e.event_seq)
        };
        let mut keyed: Vec<(u64, StepRecord)> = std::mem::take(&mut self.steps)
            .into_iter()
            .map(|step| (first_seen(&step.step_id), step))
            .collect();
        keyed.sort_by_key(|(seq, _)| *seq);
        self.steps = keyed.into_iter().map(|(_, step)| step).collect();
    }
}
