//! Reading executions and the agent's execution-level mutations (heartbeat, complete, fail),
//! plus client cancel.

use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::{Kernel, Principal};
use crate::error::KernelError;
use crate::event::{Completed, EventBody, Recorded, StatusChanged};
use crate::model::{ExecutionRow, LogEntry};
use crate::store::Lease;
use rebuno::wire::ExecutionStatus;

/// Default and largest page of `GET /v0/executions`.
const LIST_DEFAULT: usize = 50;
const LIST_MAX: usize = 200;
/// Default and largest page of `GET /v0/executions/{id}/events`.
const EVENTS_DEFAULT: usize = 100;
const EVENTS_MAX: usize = 1000;

/// `POST /v0/executions/{id}/complete` body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CompleteRequest {
    #[serde(default, deserialize_with = "crate::model::present")]
    pub(crate) output: Option<Value>,
    #[serde(default)]
    pub(crate) state: Option<Value>,
}

/// `POST /v0/executions/{id}/fail` body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FailRequest {
    #[serde(default)]
    pub(crate) error: String,
}

/// Filters of `GET /v0/executions`.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListQuery {
    pub(crate) agent_id: Option<String>,
    pub(crate) status: Option<String>,
    pub(crate) session: Option<String>,
    pub(crate) cursor: Option<Uuid>,
    pub(crate) limit: Option<usize>,
}

/// One page of executions, newest first.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct ListPage {
    pub(crate) executions: Vec<ExecutionRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) next_cursor: Option<Uuid>,
}

impl Kernel {
    /// An execution snapshot.
    pub(crate) fn execution(
        &self,
        id: Uuid,
        principal: &Principal,
    ) -> Result<ExecutionRow, KernelError> {
        Ok(self.cell(id, principal)?.lock().exec.clone())
    }

    /// Lists executions newest first.
    pub(crate) fn list_executions(&self, query: &ListQuery) -> ListPage {
        let limit = query
            .limit
            .filter(|l| *l > 0)
            .unwrap_or(LIST_DEFAULT)
            .min(LIST_MAX);
        let mut executions = Vec::new();
        let mut more = false;
        for cell in self.store().executions_desc() {
            if query.cursor.is_some_and(|cursor| cell.id >= cursor) {
                continue;
            }
            if query.agent_id.as_ref().is_some_and(|a| *a != cell.agent_id) {
                continue;
            }
            let exec = cell.lock().exec.clone();
            if query
                .status
                .as_deref()
                .is_some_and(|s| s != exec.status.as_str())
                || query
                    .session
                    .as_ref()
                    .is_some_and(|s| Some(s) != exec.session.as_ref())
            {
                continue;
            }
            if executions.len() == limit {
                more = true;
                break;
            }
            executions.push(exec);
        }
        let next_cursor = if more {
            executions.last().map(|e| e.id)
        } else {
            None
        };
        ListPage {
            executions,
            next_cursor,
        }
    }

    /// Events after `after_seq`, at most `limit`.
    pub(crate) fn events(
        &self,
        id: Uuid,
        after_seq: u64,
        limit: Option<usize>,
    ) -> Result<Vec<LogEntry>, KernelError> {
        let limit = limit
            .filter(|l| *l > 0)
            .unwrap_or(EVENTS_DEFAULT)
            .min(EVENTS_MAX);
        let cell = self.cell(id, &Principal::Admin)?;
        let state = cell.lock();
        let start = usize::try_from(after_seq)
            .unwrap_or(usize::MAX)
            .min(state.events.len());
        Ok(state.events[start..]
            .iter()
            .take(limit)
            .map(Recorded::to_wire)
            .collect())
    }

    /// The whole log of an execution (empty if unknown).
    pub(crate) fn all_events(&self, id: Uuid) -> Vec<LogEntry> {
        self.store()
            .execution(id)
            .map(|cell| cell.lock().events.iter().map(Recorded::to_wire).collect())
            .unwrap_or_default()
    }

    /// `{"state": ...}` of `GET /previous`: the parent's state, else its output, else null.
    pub(crate) fn previous(&self, id: Uuid, principal: &Principal) -> Result<Value, KernelError> {
        let parent = self.cell(id, principal)?.lock().exec.parent_execution_id;
        let Some(parent) = parent.and_then(|p| self.store().execution(p)) else {
            return Ok(Value::Null);
        };
        let state = parent.lock();
        Ok(state
            .state
            .clone()
            .or_else(|| state.exec.output.clone())
            .unwrap_or(Value::Null))
    }

    /// Renews the lease.
    pub(crate) fn heartbeat(
        &self,
        id: Uuid,
        principal: &Principal,
        lease: Lease,
    ) -> Result<(), KernelError> {
        let cell = self.cell(id, principal)?;
        cell.lock().renew_lease(lease)
    }

    /// The agent completes its execution.
    pub(crate) fn complete_execution(
        &self,
        id: Uuid,
        principal: &Principal,
        lease: Lease,
        request: CompleteRequest,
    ) -> Result<(), KernelError> {
        let cell = self.cell(id, principal)?;
        let followups = {
            let mut state = cell.lock();
            if state.exec.status.is_terminal() {
                return Err(KernelError::ExecutionTerminal);
            }
            state.renew_lease(lease)?;
            let completed = Completed {
                execution_id: id,
                status: ExecutionStatus::Completed,
                output: request.output,
                state: request.state.filter(|v| !v.is_null()),
            };
            self.finish(&mut state, EventBody::ExecutionCompleted(completed))
        };
        cell.publish();
        self.run(followups);
        Ok(())
    }

    /// The agent fails its execution with a reason.
    pub(crate) fn fail_execution(
        &self,
        id: Uuid,
        principal: &Principal,
        lease: Lease,
        request: FailRequest,
    ) -> Result<(), KernelError> {
        let cell = self.cell(id, principal)?;
        let followups = {
            let mut state = cell.lock();
            if state.exec.status.is_terminal() {
                return Err(KernelError::ExecutionTerminal);
            }
            state.renew_lease(lease)?;
            self.fail_locked(&mut state, &request.error)
        };
        cell.publish();
        self.run(followups);
        Ok(())
    }

    /// A client cancels an execution.
    pub(crate) fn cancel(&self, id: Uuid, principal: &Principal) -> Result<(), KernelError> {
        let cell = self.cell(id, principal)?;
        let followups = {
            let mut state = cell.lock();
            if state.exec.status.is_terminal() {
                return Err(KernelError::conflict("execution is already terminal"));
            }
            self.cancel_locked(&mut state, "client_cancelled")
        };
        cell.publish();
        self.run(followups);
        Ok(())
    }
}

impl Kernel {
    /// The agent parks its dispatch while steps wait (§1.6): `true` when something waits
    /// (the execution is then `blocked` with reason `awaiting_steps` and its dispatches
    /// retired), `false` when nothing does (only the lease is renewed).
    pub(crate) fn suspend(
        &self,
        id: Uuid,
        principal: &Principal,
        lease: Lease,
    ) -> Result<bool, KernelError> {
        let cell = self.cell(id, principal)?;
        let suspended = {
            let mut state = cell.lock();
            if state.exec.status.is_terminal() {
                return Err(KernelError::ExecutionTerminal);
            }
            state.renew_lease(lease)?;
            if !super::terminal::awaiting_steps(&state) {
                return Ok(false);
            }
            state.record(EventBody::ExecutionBlocked(StatusChanged {
                execution_id: id,
                status: ExecutionStatus::Blocked,
                reason: Some("awaiting_steps".to_owned()),
            }));
            state.retire_dispatches();
            true
        };
        cell.publish();
        Ok(suspended)
    }
}
