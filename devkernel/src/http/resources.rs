//! Resource routes (PROTOCOL.md §2.6): register, bind, publish checkpoints. HMAC + lease.

use axum::extract::{Path, State};

use super::auth::Leased;
use super::error::{ApiResult, no_content, ok};
use crate::kernel::{BindRequest, Captures, Kernel, RegisterRequest};

/// `POST /v0/executions/{id}/resources`: `200` resource view.
pub(super) async fn register(State(kernel): State<Kernel>, call: Leased) -> ApiResult {
    let registration: RegisterRequest = call.decode()?;
    Ok(ok(&kernel.register_resource(
        call.id,
        &call.principal,
        call.lease,
        registration,
    )?))
}

/// `POST /v0/executions/{id}/resources/{key}/binding`: `204`.
pub(super) async fn bind(
    State(kernel): State<Kernel>,
    Path((_, key)): Path<(String, String)>,
    call: Leased,
) -> ApiResult {
    let binding: BindRequest = call.decode()?;
    kernel.bind_resource(call.id, &call.principal, call.lease, &key, binding)?;
    Ok(no_content())
}

/// `POST /v0/executions/{id}/resources/checkpoints`: `204`.
pub(super) async fn checkpoints(State(kernel): State<Kernel>, call: Leased) -> ApiResult {
    let records: Captures = call.decode()?;
    kernel.publish_checkpoints(call.id, &call.principal, call.lease, records)?;
    Ok(no_content())
}
