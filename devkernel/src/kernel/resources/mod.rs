//! Resources and checkpoints (PROTOCOL.md §1.9): registration, binding, published captures.
//!
//! Live step starts bump generations ([`generations`]); captures arrive with step outcomes or
//! on their own route ([`captures`]).

pub(crate) mod captures;
pub(crate) mod generations;
mod inherit;
mod register;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::{Kernel, Principal};
use crate::error::KernelError;
use crate::event::{Bound, EventBody};
use crate::identity;
use crate::store::Lease;
use crate::store::{ExecState, canonical_text};
use rebuno::wire::ResourceView;

pub(crate) use captures::Captures;
pub(crate) use inherit::inherit;
pub(crate) use register::RegisterRequest;

/// `POST .../resources/{key}/binding` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BindRequest {
    #[serde(default)]
    pub(crate) binding: Option<Box<RawValue>>,
}

/// A raw value parsed through its canonical form, or a validation error naming `what`.
pub(crate) fn canonical(raw: &RawValue, what: &str) -> Result<Value, KernelError> {
    let text = identity::canonical_json(raw.get().as_bytes())
        .map_err(|_| KernelError::validation(format!("invalid {what}")))?;
    serde_json::from_str(&text).map_err(|_| KernelError::validation(format!("invalid {what}")))
}

impl Kernel {
    /// Runs `f` on a live execution after the lease fence: `409 execution_terminal` when
    /// the execution ended, `409 lease_superseded` when the lease is not live.
    fn with_live_lease<R>(
        &self,
        id: Uuid,
        principal: &Principal,
        lease: Lease,
        f: impl FnOnce(&mut ExecState) -> Result<R, KernelError>,
    ) -> Result<R, KernelError> {
        let cell = self.cell(id, principal)?;
        let result = {
            let mut state = cell.lock();
            if state.exec.status.is_terminal() {
                return Err(KernelError::ExecutionTerminal);
            }
            state.renew_lease(lease)?;
            f(&mut state)
        };
        cell.publish();
        result
    }

    /// Registers (or re-registers) a resource and returns its view.
    pub(crate) fn register_resource(
        &self,
        id: Uuid,
        principal: &Principal,
        lease: Lease,
        request: RegisterRequest,
    ) -> Result<ResourceView, KernelError> {
        let registration = request.validate()?;
        self.with_live_lease(id, principal, lease, |state| {
            register::apply(state, registration)
        })
    }

    /// Binds a resource to the driver's handle description (`204`; same binding is a no-op).
    pub(crate) fn bind_resource(
        &self,
        id: Uuid,
        principal: &Principal,
        lease: Lease,
        key: &str,
        request: BindRequest,
    ) -> Result<(), KernelError> {
        let raw = request
            .binding
            .ok_or_else(|| KernelError::validation("binding is required"))?;
        let value = canonical(&raw, "binding")?;
        let text = canonical_text(Some(&value));
        self.with_live_lease(id, principal, lease, |state| {
            let resource = state
                .resources
                .get(key)
                .ok_or_else(|| KernelError::not_found("resource"))?;
            match &resource.binding_canonical {
                Some(existing) if *existing == text => return Ok(()),
                Some(_) => {
                    return Err(KernelError::conflict(format!(
                        "resource {key:?} is already bound"
                    )));
                }
                None => {}
            }
            state.record(EventBody::ResourceBound(Bound {
                key: key.to_owned(),
                binding: value.clone(),
            }));
            Ok(())
        })
    }

    /// Records captures published outside a step outcome; `covered_seq` is the latest seq.
    pub(crate) fn publish_checkpoints(
        &self,
        id: Uuid,
        principal: &Principal,
        lease: Lease,
        request: Captures,
    ) -> Result<(), KernelError> {
        self.with_live_lease(id, principal, lease, |state| {
            let covered = state.latest_seq();
            captures::commit(state, request, covered);
            Ok(())
        })
    }

    /// The resource views of an execution (harness).
    pub(crate) fn resources(
        &self,
        id: Uuid,
        principal: &Principal,
    ) -> Result<Vec<ResourceView>, KernelError> {
        let cell = self.cell(id, principal)?;
        let state = cell.lock();
        Ok(state.resources.values().map(|r| r.view()).collect())
    }
}
