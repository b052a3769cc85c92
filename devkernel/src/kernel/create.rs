//! Creating and starting executions (PROTOCOL.md §1.2, §1.6, §1.7).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::{Followups, Kernel, Principal};
use crate::error::KernelError;
use crate::event::{EventBody, Started};
use crate::model::{ExecutionRow, StepStatus, Timestamp};
use crate::store::{ExecCell, ExecState};
use rebuno::wire::{ExecutionStatus, SpawnedBy};

/// What to create: the body of `POST /v0/executions`.
///
/// ```
/// use rebuno_devkernel::NewExecution;
/// let request = NewExecution::new("hello", serde_json::json!({"name": "Ada"}))
///     .session("chat:1")
///     .idempotency_key("order-42");
/// # let _ = request;
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewExecution {
    agent_id: String,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    parent_execution_id: Option<String>,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    spawned_by: Option<ParentStep>,
    #[serde(default)]
    on_behalf_of: Option<String>,
}

impl NewExecution {
    /// An execution of `agent_id` with `input`.
    pub fn new(agent_id: impl Into<String>, input: Value) -> Self {
        Self {
            agent_id: agent_id.into(),
            input: Some(input),
            ..Self::default()
        }
    }

    /// Runs it in a session (one execution of a session runs at a time).
    #[must_use]
    pub fn session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// Continues from a completed execution of the same agent.
    #[must_use]
    pub fn parent_execution_id(mut self, parent: impl Into<String>) -> Self {
        self.parent_execution_id = Some(parent.into());
        self
    }

    /// Returns the existing execution of this agent with the same key instead of a new one.
    #[must_use]
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Creates it as a subagent of a parent's executing step.
    #[must_use]
    pub fn spawned_by(
        mut self,
        execution_id: impl Into<String>,
        step_id: impl Into<String>,
    ) -> Self {
        self.spawned_by = Some(ParentStep {
            execution_id: execution_id.into(),
            step_id: step_id.into(),
        });
        self
    }

    /// Records the end-user subject the execution acts for.
    #[must_use]
    pub fn on_behalf_of(mut self, subject: impl Into<String>) -> Self {
        self.on_behalf_of = Some(subject.into());
        self
    }
}

/// The body's `spawned_by`, as strict as the rest of the body (the Go kernel's decoder refuses
/// unknown fields at any depth); the kernel's rows and events hold [`SpawnedBy`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParentStep {
    execution_id: String,
    step_id: String,
}

impl ParentStep {
    /// As the wire's record.
    fn to_wire(&self) -> SpawnedBy {
        let mut wire = SpawnedBy::default();
        wire.execution_id.clone_from(&self.execution_id);
        wire.step_id.clone_from(&self.step_id);
        wire
    }
}

/// Internal name used by the HTTP layer.
pub(crate) type CreateRequest = NewExecution;

/// Session labels and idempotency keys: non-blank UTF-8, at most 256 bytes, no NUL.
pub(super) fn valid_label(label: &str) -> bool {
    !label.trim().is_empty() && label.len() <= 256 && !label.contains('\0')
}

pub(super) fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

fn parse_uuid(text: &str, what: &str) -> Result<Uuid, KernelError> {
    Uuid::parse_str(text).map_err(|_| KernelError::validation(format!("invalid {what}")))
}

/// A creation request after validation.
struct Plan {
    request: NewExecution,
    session: Option<String>,
    key: Option<String>,
    parent: Option<Uuid>,
    /// The kernel's execution deadline, counted from creation.
    deadline: Option<std::time::Duration>,
}

impl Kernel {
    /// Creates an execution; an idempotent hit returns the existing one.
    pub(crate) fn create_execution(
        &self,
        request: NewExecution,
        principal: &Principal,
    ) -> Result<ExecutionRow, KernelError> {
        let plan = self.plan(request)?;
        let (cell, created) = self.insert_once(&plan, principal)?;
        if let Some(admitted) = created {
            if admitted {
                let followups = self.start_execution(cell.id);
                self.run(followups);
            }
            tracing::info!(execution = %cell.id, agent = %cell.agent_id, "execution created");
        }
        Ok(cell.lock().exec.clone())
    }

    /// Validates a request: the agent, the labels, the form of an explicit parent (which
    /// [`Self::insert_once`] checks once the idempotency key named no execution).
    fn plan(&self, request: NewExecution) -> Result<Plan, KernelError> {
        if self.store().agent(&request.agent_id).is_none() {
            return Err(KernelError::not_found(format!(
                "agent {:?}",
                request.agent_id
            )));
        }
        let session = non_empty(request.session.clone());
        let mut key = non_empty(request.idempotency_key.clone());
        if !session.iter().chain(key.iter()).all(|l| valid_label(l)) {
            return Err(KernelError::validation(
                "invalid session or idempotency_key",
            ));
        }
        let parent = match non_empty(request.parent_execution_id.clone()) {
            Some(text) => Some(parent_uuid(&text)?),
            None => None,
        };
        if let (Some(spawned), None) = (&request.spawned_by, &key) {
            key = Some(spawned.step_id.clone());
        }
        Ok(Plan {
            request,
            session,
            key,
            parent,
            deadline: self.config().execution_deadline,
        })
    }

    /// Inserts the execution unless its idempotency key already names one (returned before
    /// an explicit parent is checked, so a repeated continuation finds its first execution).
    /// For a new one, says whether it was admitted to its session (always, without one). The
    /// lookup, the insert and the admission run under the idempotency lock, so executions join
    /// their session in creation order; starting them (a followup) runs after it.
    fn insert_once(
        &self,
        plan: &Plan,
        principal: &Principal,
    ) -> Result<(Arc<ExecCell>, Option<bool>), KernelError> {
        let store = self.store();
        let agent = &plan.request.agent_id;
        store.with_idempotency(|index| {
            if let Some(key) = &plan.key
                && let Some(existing) = index.get(&(agent.clone(), key.clone()))
                && let Some(cell) = store.execution(*existing)
            {
                return Ok((cell, None));
            }
            if let Some(parent) = &plan.parent {
                self.check_parent(parent, agent, plan.session.as_deref())?;
            }
            let id = Uuid::now_v7();
            if let Some(spawned) = &plan.request.spawned_by {
                self.link_child(spawned, id, plan.session.as_deref(), principal)?;
            }
            let exec = new_execution(plan, id, self.clock().timestamp());
            let cell = Arc::new(ExecCell::new(ExecState::create(
                exec,
                self.recorder().clone(),
            )));
            store.insert_execution(cell.clone());
            if let Some(key) = &plan.key {
                index.insert((agent.clone(), key.clone()), id);
            }
            let admitted = plan
                .session
                .as_deref()
                .is_none_or(|name| self.sessions().admit(name, id));
            Ok((cell, Some(admitted)))
        })
    }

    /// Validates an explicit `parent_execution_id`: a completed execution of the same agent,
    /// and a session that is still new.
    fn check_parent(
        &self,
        parent: &Uuid,
        agent_id: &str,
        session: Option<&str>,
    ) -> Result<(), KernelError> {
        let cell = self
            .store()
            .execution(*parent)
            .ok_or_else(|| KernelError::conflict("parent execution not found"))?;
        let state = cell.lock();
        if state.exec.agent_id != agent_id || state.exec.status != ExecutionStatus::Completed {
            return Err(KernelError::conflict(
                "parent must be a completed execution of the same agent",
            ));
        }
        if let Some(name) = session
            && self.sessions().exists(name)
        {
            return Err(KernelError::conflict(format!(
                "session {name:?} already has executions"
            )));
        }
        Ok(())
    }

    /// Checks a subagent's parent step and records the child on the parent (§1.6).
    fn link_child(
        &self,
        spawned: &ParentStep,
        child: Uuid,
        child_session: Option<&str>,
        principal: &Principal,
    ) -> Result<(), KernelError> {
        let parent_id = parse_uuid(&spawned.execution_id, "spawned_by.execution_id")?;
        let cell = self.cell(parent_id, principal)?;
        let mut parent = cell.lock();
        if parent.exec.status.is_terminal() {
            return Err(KernelError::conflict("parent execution is terminal"));
        }
        if child_session.is_some() && child_session == parent.exec.session.as_deref() {
            return Err(KernelError::validation(
                "a subagent cannot share its parent's session",
            ));
        }
        let step = parent.steps.get(&spawned.step_id).ok_or_else(|| {
            KernelError::validation("spawned_by names no step of the parent execution")
        })?;
        if step.status != StepStatus::Executing {
            return Err(KernelError::conflict("spawned_by step is not executing"));
        }
        parent.children.insert(spawned.step_id.clone(), child);
        Ok(())
    }

    /// Starts a pending execution: `execution.started` and a first dispatch.
    pub(crate) fn start_execution(&self, id: Uuid) -> Followups {
        let mut followups = Followups::default();
        let Some(cell) = self.store().execution(id) else {
            return followups;
        };
        let (session, explicit_parent, forked) = {
            let state = cell.lock();
            (
                state.exec.session.clone(),
                state.exec.parent_execution_id,
                state.exec.forked_from.is_some(),
            )
        };
        let head = match (&session, explicit_parent) {
            (Some(name), None) => self.session_head(name, &cell.agent_id, id),
            (_, parent) => parent,
        };
        let inherited = match (head, session.as_deref()) {
            (Some(parent), Some(name)) if !forked => self.inheritable_resources(parent, name),
            _ => Vec::new(),
        };
        let mut state = cell.lock();
        if state.exec.status != ExecutionStatus::Pending {
            return followups;
        }
        let deadline_at = state.exec.deadline_at;
        state.record(EventBody::ExecutionStarted(Started {
            execution_id: id,
            status: ExecutionStatus::Running,
            session,
            parent_execution_id: head,
            deadline_at,
        }));
        super::resources::inherit(&mut state, inherited);
        let dispatch = state.enqueue_dispatch(self.clock().now());
        followups.deliver.push((id, dispatch));
        drop(state);
        cell.publish();
        followups
    }

    /// The agent's most recently created completed execution in `session` (not `except`).
    fn session_head(&self, session: &str, agent_id: &str, except: Uuid) -> Option<Uuid> {
        self.sessions()
            .members(session)
            .into_iter()
            .rev()
            .filter(|id| *id != except)
            .filter_map(|id| self.store().execution(id))
            .find(|cell| {
                cell.agent_id == agent_id && cell.lock().exec.status == ExecutionStatus::Completed
            })
            .map(|cell| cell.id)
    }
}

/// The projection of a new, pending execution.
fn new_execution(plan: &Plan, id: Uuid, created: Timestamp) -> ExecutionRow {
    let request = &plan.request;
    let input = request.input.clone().unwrap_or(Value::Null);
    ExecutionRow {
        session: plan.session.clone(),
        parent_execution_id: plan.parent,
        idempotency_key: plan.key.clone(),
        spawned_by: request.spawned_by.as_ref().map(ParentStep::to_wire),
        on_behalf_of: non_empty(request.on_behalf_of.clone()),
        deadline_at: plan.deadline.map(|after| created.plus(after)),
        ..ExecutionRow::pending(id, request.agent_id.clone(), input, created)
    }
}

fn parent_uuid(text: &str) -> Result<Uuid, KernelError> {
    parse_uuid(text, "parent_execution_id")
}
