//! Resource routes (PROTOCOL.md §2.6): register, bind, publish checkpoints. HMAC + lease.

use axum::extract::{Path, Request, State};

use super::error::{ApiResult, no_content, ok};
use super::{auth, body};
use crate::kernel::{BindRequest, Captures, Kernel, RegisterRequest};

/// `POST /v0/executions/{id}/resources`: `200` resource view.
pub(super) async fn register(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let auth::Leased { call, id, lease } = auth::leased(&kernel, &id, request).await?;
    let registration: RegisterRequest = body::decode(&call.body)?;
    Ok(ok(&kernel.register_resource(
        id,
        &call.principal,
        lease,
        registration,
    )?))
}

/// `POST /v0/executions/{id}/resources/{key}/binding`: `204`.
pub(super) async fn bind(
    State(kernel): State<Kernel>,
    Path((id, key)): Path<(String, String)>,
    request: Request,
) -> ApiResult {
    let auth::Leased { call, id, lease } = auth::leased(&kernel, &id, request).await?;
    let binding: BindRequest = body::decode(&call.body)?;
    kernel.bind_resource(id, &call.principal, lease, &key, binding)?;
    Ok(no_content())
}

/// `POST /v0/executions/{id}/resources/checkpoints`: `204`.
pub(super) async fn checkpoints(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let auth::Leased { call, id, lease } = auth::leased(&kernel, &id, request).await?;
    let records: Captures = body::decode(&call.body)?;
    kernel.publish_checkpoints(id, &call.principal, lease, records)?;
    Ok(no_content())
}
