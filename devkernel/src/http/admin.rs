//! Admin routes: health, agents, policies, approvals.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use rebuno::client::Scope;
use serde::Deserialize;

use super::auth::{Caller, scope};
use super::body::{Capped, Strict};
use super::error::{ApiResult, json, no_content, ok};
use super::parse_id;
use crate::kernel::{AgentRequest, DecideRequest, Kernel, PolicyTestRequest, Resolution};
use rebuno::wire::ApprovalStatus;

/// `GET /v0/health`.
pub(super) async fn health() -> ApiResult {
    Ok(ok(&serde_json::json!({"status": "ok"})))
}

/// `GET /v0/ready`.
pub(super) async fn ready() -> ApiResult {
    Ok(ok(&serde_json::json!({"status": "ready"})))
}

/// `POST /v0/agents`: upsert.
pub(super) async fn upsert_agent(
    State(kernel): State<Kernel>,
    _: Caller<scope::AgentsWrite>,
    Strict(agent): Strict<AgentRequest>,
) -> ApiResult {
    Ok(json(
        StatusCode::CREATED,
        &kernel.upsert_agent(agent, None)?,
    ))
}

/// `GET /v0/agents`.
pub(super) async fn list_agents(
    State(kernel): State<Kernel>,
    _: Caller<scope::AgentsRead>,
) -> ApiResult {
    Ok(ok(&kernel.agents()))
}

/// `GET /v0/agents/{id}`.
pub(super) async fn get_agent(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    _: Caller<scope::AgentsRead>,
) -> ApiResult {
    Ok(ok(&kernel.agent(&id)?))
}

/// `DELETE /v0/agents/{id}`.
pub(super) async fn delete_agent(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    _: Caller<scope::AgentsWrite>,
) -> ApiResult {
    kernel.delete_agent(&id);
    Ok(no_content())
}

/// The body of `POST /v0/policies/{agent_id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PolicyBody {
    /// The policy bundle's YAML text.
    bundle: String,
}

/// `POST /v0/policies/{agent_id}`: compile and store a bundle.
pub(super) async fn set_policy(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    _: Caller<scope::PoliciesWrite>,
    Strict(policy): Strict<PolicyBody>,
) -> ApiResult {
    kernel.set_policy(&id, &policy.bundle)?;
    Ok(no_content())
}

/// The `?status=` filter of `GET /v0/approvals` (`None` means the default, `pending`).
fn approval_status(query: Option<&str>) -> Option<ApprovalStatus> {
    query?
        .split('&')
        .find_map(|kv| match kv.strip_prefix("status=")? {
            "granted" => Some(ApprovalStatus::Granted),
            "denied" => Some(ApprovalStatus::Denied),
            "expired" => Some(ApprovalStatus::Expired),
            _ => None,
        })
}

/// `GET /v0/approvals` (`?status=`, default `pending`).
pub(super) async fn list_approvals(
    State(kernel): State<Kernel>,
    RawQuery(query): RawQuery,
    _: Caller<scope::ApprovalsRead>,
) -> ApiResult {
    Ok(ok(&kernel.approvals(approval_status(query.as_deref()))))
}

/// `GET /v0/approvals/{id}`.
pub(super) async fn get_approval(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    _: Caller<scope::ApprovalsRead>,
) -> ApiResult {
    Ok(ok(&kernel.approval(parse_id(&id)?)?))
}

/// Grants or denies approval `id`; an empty body is a decision without a reason.
fn decide(kernel: &Kernel, id: &str, body: &Capped, resolution: Resolution) -> ApiResult {
    let id = parse_id(id)?;
    let decision: DecideRequest = if body.is_blank() {
        DecideRequest::default()
    } else {
        body.decode()?
    };
    kernel.decide_approval(id, resolution, decision)?;
    Ok(no_content())
}

/// `POST /v0/approvals/{id}/grant`.
pub(super) async fn grant(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    _: Caller<scope::ApprovalsWrite>,
    body: Capped,
) -> ApiResult {
    decide(&kernel, &id, &body, Resolution::Grant)
}

/// `POST /v0/approvals/{id}/deny`.
pub(super) async fn deny(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    _: Caller<scope::ApprovalsWrite>,
    body: Capped,
) -> ApiResult {
    decide(&kernel, &id, &body, Resolution::Deny)
}

/// `POST /v0/policies/{agent_id}/test`: a report of the bundle against cases or recorded
/// steps (scopes `policies:write` and `executions:read`, the second checked once the body
/// is read).
pub(super) async fn test_policy(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    caller: Caller<scope::PoliciesWrite>,
    body: Capped,
) -> ApiResult {
    caller.principal.require(Scope::ExecutionsRead)?;
    let test: PolicyTestRequest = body.decode()?;
    Ok(ok(&kernel.test_policy(&id, test)?))
}
