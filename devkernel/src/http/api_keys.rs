//! API key routes (PROTOCOL.md §2.7), all under scope `api_keys:manage`.

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use rebuno::client::ApiKey;
use serde::Serialize;

use super::auth::{Caller, scope};
use super::body::Strict;
use super::error::{ApiResult, json, no_content, ok};
use super::parse_id;
use crate::kernel::{CreateKeyRequest, Kernel};

/// The answer of create and rotate: the key, then its token (the SDK's `IssuedApiKey` holds
/// it as a `Secret`, which never serializes).
#[derive(Serialize)]
struct Issued {
    #[serde(flatten)]
    key: ApiKey,
    token: String,
}

/// Tokens must not be cached by intermediaries.
fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `POST /v0/api-keys`: `201 {id, name, scopes, created_at, token}`.
pub(super) async fn create(
    State(kernel): State<Kernel>,
    _: Caller<scope::ApiKeysManage>,
    Strict(create): Strict<CreateKeyRequest>,
) -> ApiResult {
    let (key, token) = kernel.create_api_key(create)?;
    Ok(no_store(json(StatusCode::CREATED, &Issued { key, token })))
}

/// `GET /v0/api-keys`.
pub(super) async fn list(
    State(kernel): State<Kernel>,
    _: Caller<scope::ApiKeysManage>,
) -> ApiResult {
    Ok(ok(&kernel.api_keys()))
}

/// `POST /v0/api-keys/{id}/rotate`: a new token for the same key.
pub(super) async fn rotate(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    _: Caller<scope::ApiKeysManage>,
) -> ApiResult {
    let (key, token) = kernel.rotate_api_key(parse_id(&id)?)?;
    Ok(no_store(ok(&Issued { key, token })))
}

/// `DELETE /v0/api-keys/{id}`: revoke (repeatable).
pub(super) async fn revoke(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    _: Caller<scope::ApiKeysManage>,
) -> ApiResult {
    kernel.revoke_api_key(parse_id(&id)?)?;
    Ok(no_content())
}
