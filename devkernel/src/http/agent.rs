//! Agent routes: HMAC-signed, lease-fenced mutations and dual-auth reads.

use axum::extract::{Path, RawQuery, State};

use super::auth::{Leased, Reader, Signed};
use super::error::{ApiResult, no_content, ok};
use super::parse_id;
use crate::error::KernelError;
use crate::kernel::{
    CompleteRequest, FailRequest, Kernel, OutcomeRequest, Principal, SubmitRequest,
};

/// `PUT /v0/agents/{id}/metadata`: the agent publishes its description and schemas.
pub(super) async fn set_metadata(
    State(kernel): State<Kernel>,
    Path(agent_id): Path<String>,
    call: Signed,
) -> ApiResult {
    if call.principal != Principal::Agent(agent_id.clone()) {
        return Err(KernelError::Forbidden.into());
    }
    kernel.set_metadata(&agent_id, call.decode()?)?;
    Ok(no_content())
}

/// `GET /v0/executions/{id}/previous` (dual auth).
pub(super) async fn previous(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    reader: Reader,
) -> ApiResult {
    let state = kernel.previous(parse_id(&id)?, &reader.principal)?;
    Ok(ok(&serde_json::json!({ "state": state })))
}

/// `GET /v0/executions/{id}/steps` (dual auth; `?status=terminal`).
pub(super) async fn list_steps(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    reader: Reader,
) -> ApiResult {
    let terminal = query.is_some_and(|q| q.split('&').any(|kv| kv == "status=terminal"));
    Ok(ok(&kernel.steps(
        parse_id(&id)?,
        &reader.principal,
        terminal,
    )?))
}

/// `GET /v0/executions/{id}/steps/{step_id}` (dual auth).
pub(super) async fn get_step(
    State(kernel): State<Kernel>,
    Path((id, step_id)): Path<(String, String)>,
    reader: Reader,
) -> ApiResult {
    Ok(ok(&kernel.step(
        parse_id(&id)?,
        &reader.principal,
        &step_id,
    )?))
}

/// `POST /v0/executions/{id}/steps`: submit a step.
pub(super) async fn submit(State(kernel): State<Kernel>, call: Leased) -> ApiResult {
    let submit: SubmitRequest = call.decode()?;
    Ok(ok(&kernel.submit_step(
        call.id,
        &call.principal,
        call.lease,
        submit,
    )?))
}

/// Settles step `step_id`: `result` only on complete, `error` only on fail.
fn outcome(kernel: &Kernel, step_id: &str, call: &Leased, failed: bool) -> ApiResult {
    let outcome: OutcomeRequest = call.decode()?;
    let wrong_field = if failed {
        outcome.result.is_some()
    } else {
        outcome.error.is_some()
    };
    if wrong_field {
        return Err(KernelError::validation("").into());
    }
    Ok(ok(&kernel.settle_step(
        call.id,
        &call.principal,
        call.lease,
        step_id,
        outcome,
        failed,
    )?))
}

/// `POST /v0/executions/{id}/steps/{step_id}/complete`.
pub(super) async fn complete_step(
    State(kernel): State<Kernel>,
    Path((_, step_id)): Path<(String, String)>,
    call: Leased,
) -> ApiResult {
    outcome(&kernel, &step_id, &call, false)
}

/// `POST /v0/executions/{id}/steps/{step_id}/fail`.
pub(super) async fn fail_step(
    State(kernel): State<Kernel>,
    Path((_, step_id)): Path<(String, String)>,
    call: Leased,
) -> ApiResult {
    outcome(&kernel, &step_id, &call, true)
}

/// `POST /v0/executions/{id}/heartbeat`: renew the lease.
pub(super) async fn heartbeat(State(kernel): State<Kernel>, call: Leased) -> ApiResult {
    kernel.heartbeat(call.id, &call.principal, call.lease)?;
    Ok(no_content())
}

/// `POST /v0/executions/{id}/complete`.
pub(super) async fn complete(State(kernel): State<Kernel>, call: Leased) -> ApiResult {
    let done: CompleteRequest = call.decode()?;
    kernel.complete_execution(call.id, &call.principal, call.lease, done)?;
    Ok(no_content())
}

/// `POST /v0/executions/{id}/fail`.
pub(super) async fn fail(State(kernel): State<Kernel>, call: Leased) -> ApiResult {
    let failed: FailRequest = call.decode()?;
    kernel.fail_execution(call.id, &call.principal, call.lease, failed)?;
    Ok(no_content())
}

/// `POST /v0/executions/{id}/suspend`: `{"suspended": bool}`.
pub(super) async fn suspend(State(kernel): State<Kernel>, call: Leased) -> ApiResult {
    let suspended = kernel.suspend(call.id, &call.principal, call.lease)?;
    Ok(ok(&serde_json::json!({ "suspended": suspended })))
}
