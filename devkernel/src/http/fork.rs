//! Fork routes (PROTOCOL.md §2.5): create a fork, list fork points.

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;

use super::error::{ApiResult, json, ok};
use super::{auth, body, parse_id};
use crate::kernel::{ForkRequest, Kernel, Scope};

/// `POST /v0/executions/{id}/fork`: `201` execution with `restoration`; a `policy_bundle`
/// also needs `policies:write`.
pub(super) async fn fork(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let call = auth::client(&kernel, request, Scope::ExecutionsWrite).await?;
    let id = parse_id(&id)?;
    let fork: ForkRequest = body::decode(&call.body)?;
    if fork.overrides_policy() {
        call.principal.require(Scope::PoliciesWrite)?;
    }
    let execution = kernel.fork(id, &call.principal, fork)?;
    Ok(json(StatusCode::CREATED, &execution))
}

/// `GET /v0/executions/{id}/fork-points`.
pub(super) async fn fork_points(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let call = auth::client(&kernel, request, Scope::ExecutionsRead).await?;
    Ok(ok(&kernel.fork_points(parse_id(&id)?, &call.principal)?))
}
