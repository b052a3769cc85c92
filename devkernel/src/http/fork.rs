//! Fork routes (PROTOCOL.md §2.5): create a fork, list fork points.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use rebuno::client::Scope;

use super::auth::{Caller, scope};
use super::body::Capped;
use super::error::{ApiResult, json, ok};
use super::parse_id;
use crate::kernel::{ForkRequest, Kernel};

/// `POST /v0/executions/{id}/fork`: `201` execution with `restoration`; a `policy_bundle`
/// also needs `policies:write`.
pub(super) async fn fork(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    caller: Caller<scope::ExecutionsWrite>,
    body: Capped,
) -> ApiResult {
    let id = parse_id(&id)?;
    let fork: ForkRequest = body.decode()?;
    if fork.overrides_policy() {
        caller.principal.require(Scope::PoliciesWrite)?;
    }
    let execution = kernel.fork(id, &caller.principal, fork)?;
    Ok(json(StatusCode::CREATED, &execution))
}

/// `GET /v0/executions/{id}/fork-points`.
pub(super) async fn fork_points(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    caller: Caller<scope::ExecutionsRead>,
) -> ApiResult {
    Ok(ok(&kernel.fork_points(parse_id(&id)?, &caller.principal)?))
}
