//! Live step deltas (PROTOCOL.md §2.5 stream, §2.6 step stream): best effort, not persisted.

use std::sync::Arc;

use serde::Deserialize;
use tokio::sync::broadcast;
use uuid::Uuid;

use super::{Kernel, Principal};
use crate::error::KernelError;
use crate::model::StepStatus;
use crate::store::Lease;

/// Largest accepted delta, in bytes.
const MAX_DELTA: usize = 7000;

/// `POST .../steps/{step_id}/stream` body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeltaRequest {
    #[serde(default)]
    pub(crate) seq: i64,
    #[serde(default)]
    pub(crate) data: String,
}

impl Kernel {
    /// Fans a delta of an executing step out to SSE subscribers.
    pub(crate) fn stream_delta(
        &self,
        id: Uuid,
        principal: &Principal,
        lease: Lease,
        step_id: &str,
        delta: DeltaRequest,
    ) -> Result<(), KernelError> {
        if delta.data.len() > MAX_DELTA {
            return Err(KernelError::validation("delta data exceeds 7000 bytes"));
        }
        let cell = self.cell(id, principal)?;
        {
            let state = cell.lock();
            let step = state
                .steps
                .get(step_id)
                .ok_or_else(|| KernelError::not_found("step"))?;
            state.check_lease(lease)?;
            if step.status != StepStatus::Executing {
                return Err(KernelError::conflict("step is not executing"));
            }
        }
        let frame = serde_json::json!({"step_id": step_id, "seq": delta.seq, "data": delta.data});
        cell.send_delta(Arc::from(frame.to_string()));
        Ok(())
    }

    /// Subscribes to an execution's live deltas (`404` when unknown).
    pub(crate) fn subscribe_deltas(
        &self,
        id: Uuid,
        principal: &Principal,
    ) -> Result<broadcast::Receiver<Arc<str>>, KernelError> {
        Ok(self.cell(id, principal)?.subscribe_deltas())
    }
}
