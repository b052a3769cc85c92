//! Agent routes: HMAC-signed, lease-fenced mutations and dual-auth reads.

use axum::extract::{Path, Request, State};

use super::error::{ApiResult, no_content, ok};
use super::{auth, body, parse_id};
use crate::error::KernelError;
use crate::kernel::{
    CompleteRequest, FailRequest, Kernel, OutcomeRequest, Principal, SubmitRequest,
};

/// `PUT /v0/agents/{id}/metadata`: the agent publishes its description and schemas.
pub(super) async fn set_metadata(
    State(kernel): State<Kernel>,
    Path(agent_id): Path<String>,
    request: Request,
) -> ApiResult {
    let call = auth::agent(&kernel, request).await?;
    if call.principal != Principal::Agent(agent_id.clone()) {
        return Err(KernelError::Forbidden.into());
    }
    kernel.set_metadata(&agent_id, body::decode(&call.body)?)?;
    Ok(no_content())
}

/// `GET /v0/executions/{id}/previous` (dual auth).
pub(super) async fn previous(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let call = auth::dual(&kernel, request).await?;
    let state = kernel.previous(parse_id(&id)?, &call.principal)?;
    Ok(ok(&serde_json::json!({ "state": state })))
}

/// `GET /v0/executions/{id}/steps` (dual auth; `?status=terminal`).
pub(super) async fn list_steps(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let terminal = request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "status=terminal"));
    let call = auth::dual(&kernel, request).await?;
    Ok(ok(&kernel.steps(
        parse_id(&id)?,
        &call.principal,
        terminal,
    )?))
}

/// `GET /v0/executions/{id}/steps/{step_id}` (dual auth).
pub(super) async fn get_step(
    State(kernel): State<Kernel>,
    Path((id, step_id)): Path<(String, String)>,
    request: Request,
) -> ApiResult {
    let call = auth::dual(&kernel, request).await?;
    Ok(ok(&kernel.step(
        parse_id(&id)?,
        &call.principal,
        &step_id,
    )?))
}

/// `POST /v0/executions/{id}/steps`: submit a step.
pub(super) async fn submit(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let auth::Leased { call, id, lease } = auth::leased(&kernel, &id, request).await?;
    let submit: SubmitRequest = body::decode(&call.body)?;
    Ok(ok(&kernel.submit_step(
        id,
        &call.principal,
        lease,
        submit,
    )?))
}

async fn outcome(
    kernel: Kernel,
    id: String,
    step_id: String,
    request: Request,
    failed: bool,
) -> ApiResult {
    let auth::Leased { call, id, lease } = auth::leased(&kernel, &id, request).await?;
    let outcome: OutcomeRequest = body::decode(&call.body)?;
    let wrong_field = if failed {
        outcome.result.is_some()
    } else {
        outcome.error.is_some()
    };
    if wrong_field {
        return Err(KernelError::validation("").into());
    }
    Ok(ok(&kernel.settle_step(
        id,
        &call.principal,
        lease,
        &step_id,
        outcome,
        failed,
    )?))
}

/// `POST /v0/executions/{id}/steps/{step_id}/complete`.
pub(super) async fn complete_step(
    State(kernel): State<Kernel>,
    Path((id, step_id)): Path<(String, String)>,
    request: Request,
) -> ApiResult {
    outcome(kernel, id, step_id, request, false).await
}

/// `POST /v0/executions/{id}/steps/{step_id}/fail`.
pub(super) async fn fail_step(
    State(kernel): State<Kernel>,
    Path((id, step_id)): Path<(String, String)>,
    request: Request,
) -> ApiResult {
    outcome(kernel, id, step_id, request, true).await
}

/// `POST /v0/executions/{id}/heartbeat`: renew the lease.
pub(super) async fn heartbeat(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let auth::Leased { call, id, lease } = auth::leased(&kernel, &id, request).await?;
    kernel.heartbeat(id, &call.principal, lease)?;
    Ok(no_content())
}

/// `POST /v0/executions/{id}/complete`.
pub(super) async fn complete(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let auth::Leased { call, id, lease } = auth::leased(&kernel, &id, request).await?;
    let done: CompleteRequest = body::decode(&call.body)?;
    kernel.complete_execution(id, &call.principal, lease, done)?;
    Ok(no_content())
}

/// `POST /v0/executions/{id}/fail`.
pub(super) async fn fail(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let auth::Leased { call, id, lease } = auth::leased(&kernel, &id, request).await?;
    let failed: FailRequest = body::decode(&call.body)?;
    kernel.fail_execution(id, &call.principal, lease, failed)?;
    Ok(no_content())
}

/// `POST /v0/executions/{id}/suspend`: `{"suspended": bool}`.
pub(super) async fn suspend(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let auth::Leased { call, id, lease } = auth::leased(&kernel, &id, request).await?;
    let suspended = kernel.suspend(id, &call.principal, lease)?;
    Ok(ok(&serde_json::json!({ "suspended": suspended })))
}
