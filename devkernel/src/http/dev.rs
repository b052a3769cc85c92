//! Dev-only routes, under `/v0/dev/`: a prefix the Go kernel's API does not use, so no client
//! of the Go kernel can reach one by mistake.

use axum::extract::{Path, State};

use super::auth::{Caller, scope};
use super::error::{ApiResult, ok};
use super::parse_id;
use crate::kernel::Kernel;

/// `POST /v0/dev/executions/{id}/redeliver` (`rebuno-dev exec redeliver`): the in-flight
/// dispatch is reclaimed as if its lease expired and delivered again; answers the dispatch id
/// and the new attempt. Needs `executions:write`, as cancelling does.
pub(super) async fn redeliver(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    caller: Caller<scope::ExecutionsWrite>,
) -> ApiResult {
    let id = parse_id(&id)?;
    Ok(ok(&kernel.force_redelivery(id, &caller.principal)?))
}
