//! Executions: creating, reading, cancelling, re-delivering and forking them.

use rebuno::wire::{Event, Execution, ForkPoints, ResourceView, StepRecord};

use super::error::unknown;
use super::{DevKernel, DevKernelError, known, uuid, wire};
use crate::EventKind;
use crate::kernel::{ForkRequest, NewExecution, Principal};
use crate::replay::History;

impl DevKernel {
    /// Creates an execution, like `POST /v0/executions`; delivery starts at once.
    ///
    /// # Errors
    ///
    /// The same errors the HTTP route maps (unknown agent, invalid session, ...).
    pub async fn create_execution(
        &self,
        request: NewExecution,
    ) -> Result<Execution, DevKernelError> {
        Ok(wire::execution(
            self.kernel.create_execution(request, &Principal::Admin)?,
        ))
    }

    /// An execution snapshot (`None` if unknown).
    pub fn execution(&self, id: &str) -> Option<Execution> {
        let execution = self.kernel.execution(uuid(id)?, &Principal::Admin).ok()?;
        Some(wire::execution(execution))
    }

    /// The whole event log of an execution (empty if unknown).
    pub fn events(&self, id: &str) -> Vec<Event> {
        let entries = uuid(id).map(|id| self.kernel.all_events(id));
        entries.into_iter().flatten().map(wire::event).collect()
    }

    /// The kinds of an execution's events, in log order, for assertions on what happened.
    ///
    /// ```no_run
    /// # fn demo(kernel: rebuno_devkernel::DevKernel, id: &str) {
    /// use rebuno_devkernel::EventKind;
    /// let kinds = kernel.event_kinds(id);
    /// assert_eq!(kinds.iter().filter(|k| **k == EventKind::StepSucceeded).count(), 2);
    /// // `dispatch.acked` may be recorded after the end: the agent acknowledges at once.
    /// let last = kinds.iter().rev().find(|k| **k != EventKind::DispatchAcked);
    /// assert_eq!(last, Some(&EventKind::ExecutionCompleted));
    /// # }
    /// ```
    pub fn event_kinds(&self, id: &str) -> Vec<EventKind> {
        self.events(id)
            .iter()
            .filter_map(|event| event.kind.parse().ok())
            .collect()
    }

    /// The steps of an execution ordered by step id (empty if unknown).
    pub fn steps(&self, id: &str) -> Vec<StepRecord> {
        uuid(id)
            .and_then(|id| self.kernel.steps(id, &Principal::Admin, false).ok())
            .into_iter()
            .flatten()
            .map(wire::step)
            .collect()
    }

    /// An execution's history for [`replay::check`](crate::replay::check): the execution, its
    /// steps and its event log as the HTTP API serves them, and for a session's later turn the
    /// previous state its handler reads with `rebuno::previous()`. `None` if unknown.
    pub fn history(&self, id: &str) -> Option<History> {
        let history = History::new(self.execution(id)?, self.steps(id), self.events(id));
        if history.execution().parent_execution_id.is_none() {
            return Some(history);
        }
        let previous = self.kernel.previous(uuid(id)?, &Principal::Admin).ok()?;
        Some(history.with_previous(serde_json::json!({ "state": previous })))
    }

    /// Test hook: reclaims the execution's in-flight dispatch now, as if its lease had
    /// expired, and delivers the next attempt (same dispatch id, attempt + 1; when every
    /// delivery worker is busy, as soon as one is free). Calls carrying the old attempt get
    /// `409 lease_superseded` from here on. Returns the new attempt.
    ///
    /// # Errors
    ///
    /// [`DevKernelError::NoLiveDispatch`] when nothing is in flight (or attempts are exhausted).
    pub fn redeliver(&self, id: &str) -> Result<u32, DevKernelError> {
        uuid(id)
            .and_then(|uuid| self.kernel.redeliver(uuid, None))
            .ok_or_else(|| DevKernelError::NoLiveDispatch(id.to_owned()))
    }

    /// Cancels an execution, like `POST /v0/executions/{id}/cancel`.
    ///
    /// # Errors
    ///
    /// Unknown execution, or already terminal (`409 conflict`).
    pub fn cancel(&self, id: &str) -> Result<(), DevKernelError> {
        let uuid = known(id)?;
        self.kernel
            .cancel(uuid, &Principal::Admin)
            .map_err(|e| unknown(e, "execution", id))
    }

    /// The registered resources of an execution (empty if unknown).
    pub fn resources(&self, id: &str) -> Vec<ResourceView> {
        uuid(id)
            .and_then(|id| self.kernel.resources(id, &Principal::Admin).ok())
            .unwrap_or_default()
    }

    /// Fork points of an execution, like `GET /v0/executions/{id}/fork-points`.
    ///
    /// # Errors
    ///
    /// Unknown execution.
    pub fn fork_points(&self, id: &str) -> Result<ForkPoints, DevKernelError> {
        let uuid = known(id)?;
        self.kernel
            .fork_points(uuid, &Principal::Admin)
            .map_err(|e| unknown(e, "execution", id))
    }

    /// Forks an execution at `at_seq`, like `POST /v0/executions/{id}/fork` without a
    /// session or policy override. The answer carries `restoration`.
    ///
    /// # Errors
    ///
    /// Unknown execution, or `at_seq` outside `[1, latest_seq]`.
    pub fn fork(&self, id: &str, at_seq: u64) -> Result<Execution, DevKernelError> {
        let uuid = known(id)?;
        let request = ForkRequest {
            at_seq: i64::try_from(at_seq).unwrap_or(i64::MAX),
            ..ForkRequest::default()
        };
        let forked = self
            .kernel
            .fork(uuid, &Principal::Admin, request)
            .map_err(|e| unknown(e, "execution", id))?;
        Ok(wire::execution(forked))
    }
}
