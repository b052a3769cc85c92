//! Admin routes: health, agents, policies, approvals.

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::error::{ApiResult, json, no_content, ok};
use super::{auth, body, parse_id};
use crate::kernel::{AgentRequest, DecideRequest, Kernel, PolicyTestRequest, Resolution, Scope};
use crate::model::ApprovalStatus;

/// `GET /v0/health`.
pub(super) async fn health() -> ApiResult {
    Ok(ok(&serde_json::json!({"status": "ok"})))
}

/// `GET /v0/ready`.
pub(super) async fn ready() -> ApiResult {
    Ok(ok(&serde_json::json!({"status": "ready"})))
}

/// `POST /v0/agents`: upsert.
pub(super) async fn upsert_agent(State(kernel): State<Kernel>, request: Request) -> ApiResult {
    let call = auth::client(&kernel, request, Scope::AgentsWrite).await?;
    let agent: AgentRequest = body::decode(&call.body)?;
    Ok(json(
        StatusCode::CREATED,
        &kernel.upsert_agent(agent, None)?,
    ))
}

/// `GET /v0/agents`.
pub(super) async fn list_agents(State(kernel): State<Kernel>, request: Request) -> ApiResult {
    auth::client(&kernel, request, Scope::AgentsRead).await?;
    Ok(ok(&kernel.agents()))
}

/// `GET /v0/agents/{id}`.
pub(super) async fn get_agent(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    auth::client(&kernel, request, Scope::AgentsRead).await?;
    Ok(ok(&kernel.agent(&id)?))
}

/// `DELETE /v0/agents/{id}`.
pub(super) async fn delete_agent(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    auth::client(&kernel, request, Scope::AgentsWrite).await?;
    kernel.delete_agent(&id);
    Ok(no_content())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyBody {
    bundle: String,
}

/// `POST /v0/policies/{agent_id}`: compile and store a bundle.
pub(super) async fn set_policy(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let call = auth::client(&kernel, request, Scope::PoliciesWrite).await?;
    let policy: PolicyBody = body::decode(&call.body)?;
    kernel.set_policy(&id, &policy.bundle)?;
    Ok(no_content())
}

/// `GET /v0/approvals` (`?status=`, default `pending`).
pub(super) async fn list_approvals(State(kernel): State<Kernel>, request: Request) -> ApiResult {
    let status = request.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|kv| match kv.strip_prefix("status=")? {
                "granted" => Some(ApprovalStatus::Granted),
                "denied" => Some(ApprovalStatus::Denied),
                "expired" => Some(ApprovalStatus::Expired),
                _ => None,
            })
    });
    auth::client(&kernel, request, Scope::ApprovalsRead).await?;
    Ok(ok(&kernel.approvals(status)))
}

/// `GET /v0/approvals/{id}`.
pub(super) async fn get_approval(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    auth::client(&kernel, request, Scope::ApprovalsRead).await?;
    Ok(ok(&kernel.approval(parse_id(&id)?)?))
}

async fn decide(kernel: Kernel, id: String, request: Request, resolution: Resolution) -> ApiResult {
    let call = auth::client(&kernel, request, Scope::ApprovalsWrite).await?;
    let id = parse_id(&id)?;
    let decision: DecideRequest = if call.body.iter().all(u8::is_ascii_whitespace) {
        DecideRequest::default()
    } else {
        body::decode(&call.body)?
    };
    kernel.decide_approval(id, resolution, decision)?;
    Ok(no_content())
}

/// `POST /v0/approvals/{id}/grant`.
pub(super) async fn grant(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    decide(kernel, id, request, Resolution::Grant).await
}

/// `POST /v0/approvals/{id}/deny`.
pub(super) async fn deny(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    decide(kernel, id, request, Resolution::Deny).await
}

/// `POST /v0/policies/{agent_id}/test`: a report of the bundle against cases or recorded
/// steps (scopes `policies:write` and `executions:read`).
pub(super) async fn test_policy(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let call = auth::client(&kernel, request, Scope::PoliciesWrite).await?;
    call.principal.require(Scope::ExecutionsRead)?;
    let test: PolicyTestRequest = body::decode(&call.body)?;
    Ok(ok(&kernel.test_policy(&id, test)?))
}
