//! A re-delivery asked for from outside (`rebuno-dev exec redeliver ID`): what a lease expiry
//! does, now.

use serde::Serialize;
use uuid::Uuid;

use crate::error::KernelError;
use crate::kernel::{Kernel, Principal};
use crate::store::{DispatchStatus, ExecState};

/// The `error` of the `dispatch.reclaimed` a forced re-delivery records (a lease expiry's is
/// `lease_expired`).
pub(crate) const REDELIVERED: &str = "redelivered";

/// The answer of `POST /v0/dev/executions/{id}/redeliver`: the dispatch delivered again and
/// the attempt it is delivered as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Redelivery {
    /// The execution.
    pub(crate) execution_id: Uuid,
    /// The dispatch reclaimed and delivered again (its id does not change).
    pub(crate) dispatch_id: Uuid,
    /// The attempt it is delivered as.
    pub(crate) attempt: u32,
}

impl Kernel {
    /// Reclaims the in-flight dispatch of a running execution as an expired lease is
    /// (`dispatch.reclaimed`, `error: redelivered`) and delivers it again as its next attempt:
    /// the agent's run of the old attempt is superseded and recorded steps replay. Refused
    /// (`409 conflict`, saying why) for an execution that ended, has nothing in flight, or
    /// whose in-flight attempt is its last (a reclaim would fail it `dispatch_exhausted`).
    pub(crate) fn force_redelivery(
        &self,
        id: Uuid,
        principal: &Principal,
    ) -> Result<Redelivery, KernelError> {
        let cell = self.cell(id, principal)?;
        let dispatch_id = in_flight(&cell.lock(), self.config().max_attempts)?;
        let attempt = self.redeliver(id, Some(REDELIVERED)).ok_or_else(|| {
            KernelError::conflict(format!(
                "execution {id} has no delivery in flight any more; nothing was redelivered"
            ))
        })?;
        tracing::info!(execution = %id, dispatch = %dispatch_id, attempt, "redelivered on request");
        Ok(Redelivery {
            execution_id: id,
            dispatch_id,
            attempt,
        })
    }
}

/// The in-flight dispatch a redelivery may take back, or why there is none.
fn in_flight(state: &ExecState, max_attempts: u32) -> Result<Uuid, KernelError> {
    let (id, status) = (state.exec.id, state.exec.status);
    if status.is_terminal() {
        return Err(KernelError::conflict(format!(
            "execution {id} has ended ({}); only a running execution can be redelivered",
            status.as_str()
        )));
    }
    let Some(dispatch) = state
        .dispatches
        .iter()
        .rev()
        .find(|d| d.status == DispatchStatus::InFlight)
    else {
        return Err(KernelError::conflict(format!(
            "execution {id} is {} with no delivery in flight, so there is nothing to \
             redeliver: a blocked execution is delivered when it resumes, a failed delivery \
             is retried on its own",
            status.as_str()
        )));
    };
    if dispatch.attempt >= max_attempts {
        return Err(KernelError::conflict(format!(
            "execution {id} is on attempt {} of {max_attempts}: a redelivery would fail it \
             dispatch_exhausted; serve rebuno-dev with more attempts (--dispatch-max-attempts \
             or REBUNO_DISPATCH_MAX_ATTEMPTS)",
            dispatch.attempt
        )));
    }
    Ok(dispatch.id)
}
