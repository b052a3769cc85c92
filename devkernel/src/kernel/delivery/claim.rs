//! Claiming a due dispatch for its next attempt.

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::{Job, webhook_body};
use crate::event::{DispatchChanged, DispatchState, EventBody};
use crate::kernel::{Followups, Kernel};
use crate::store::{AgentEntry, DispatchStatus, ExecState};

/// What a claim found.
#[derive(Debug)]
pub(crate) enum Claim {
    /// Deliver this attempt now.
    Deliver(Job),
    /// Not due yet.
    Wait(Instant),
    /// Nothing to do (claimed elsewhere, retired, or the execution failed).
    Done,
}

impl Kernel {
    /// Claims a due dispatch: attempt + 1, in flight, occurrence counters cleared. A dispatch
    /// of an ended execution is discarded; one out of attempts fails the execution, naming
    /// what its last attempt met.
    pub(crate) fn claim(&self, execution_id: Uuid, dispatch_id: Uuid) -> Claim {
        let Some(cell) = self.store().execution(execution_id) else {
            return Claim::Done;
        };
        let Some(agent) = self.store().agent(&cell.agent_id) else {
            return Claim::Done;
        };
        let (claim, followups) = {
            let mut state = cell.lock();
            self.claim_locked(&mut state, dispatch_id, &agent)
        };
        cell.publish();
        self.run(followups);
        claim
    }

    fn claim_locked(
        &self,
        state: &mut ExecState,
        dispatch_id: Uuid,
        agent: &AgentEntry,
    ) -> (Claim, Followups) {
        let now = self.clock().now();
        let terminal = state.exec.status.is_terminal();
        let execution_id = state.exec.id;
        let Some(dispatch) = state.dispatch_mut(dispatch_id) else {
            return (Claim::Done, Followups::default());
        };
        if !matches!(
            dispatch.status,
            DispatchStatus::Pending | DispatchStatus::Failed
        ) {
            return (Claim::Done, Followups::default());
        }
        if let Some(at) = super::due(dispatch.status, dispatch.next_attempt_at, now) {
            return (Claim::Wait(at), Followups::default());
        }
        if terminal {
            dispatch.status = DispatchStatus::Exhausted;
            let attempt = dispatch.attempt;
            state.record(EventBody::DispatchDiscarded(DispatchChanged::new(
                dispatch_id,
                execution_id,
                DispatchState::Exhausted,
                attempt,
            )));
            return (Claim::Done, Followups::default());
        }
        if dispatch.attempt >= self.config().max_attempts {
            let last = dispatch.last_outcome.clone();
            return (
                Claim::Done,
                self.fail_after(state, "dispatch_exhausted", last),
            );
        }
        let lease = agent
            .agent
            .lease_timeout_seconds
            .map_or(self.config().default_lease, Duration::from_secs);
        dispatch.attempt += 1;
        dispatch.status = DispatchStatus::InFlight;
        dispatch.lease = lease;
        dispatch.lock_at(now, self.clock().timestamp());
        let attempt = dispatch.attempt;
        state.counters.retain(|key, _| key.0 != dispatch_id);
        let job = Job {
            execution_id,
            dispatch_id,
            attempt,
            url: agent.agent.webhook_url.clone(),
            secret: agent.secret.clone(),
            body: webhook_body(execution_id, dispatch_id, attempt, lease),
        };
        (Claim::Deliver(job), Followups::default())
    }
}
