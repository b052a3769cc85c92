//! Client routes: create, list, get, events, cancel.

use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::error::{ApiResult, json, no_content, ok};
use super::{auth, body, parse_id};
use crate::error::KernelError;
use crate::kernel::{CreateRequest, Kernel, ListQuery, Scope};

/// `POST /v0/executions`.
pub(super) async fn create(State(kernel): State<Kernel>, request: Request) -> ApiResult {
    let call = auth::client(&kernel, request, Scope::ExecutionsWrite).await?;
    let create: CreateRequest = body::decode(&call.body)?;
    let execution = kernel.create_execution(create, &call.principal)?;
    Ok(json(StatusCode::CREATED, &execution))
}

#[derive(Debug, Deserialize)]
pub(super) struct ListParams {
    agent_id: Option<String>,
    status: Option<String>,
    session: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
}

/// `GET /v0/executions`.
pub(super) async fn list(
    State(kernel): State<Kernel>,
    params: Query<ListParams>,
    request: Request,
) -> ApiResult {
    auth::client(&kernel, request, Scope::ExecutionsRead).await?;
    let Query(params) = params;
    let cursor = match params.cursor.filter(|c| !c.is_empty()) {
        Some(c) => Some(parse_id(&c)?),
        None => None,
    };
    let limit = match params.limit.filter(|l| !l.is_empty()) {
        Some(l) => Some(
            l.parse::<usize>()
                .map_err(|_| KernelError::validation("invalid limit"))?,
        ),
        None => None,
    };
    let query = ListQuery {
        agent_id: params.agent_id.filter(|a| !a.is_empty()),
        status: params.status.filter(|s| !s.is_empty()),
        session: params.session.filter(|s| !s.is_empty()),
        cursor,
        limit,
    };
    Ok(ok(&kernel.list_executions(&query)))
}

/// `GET /v0/executions/{id}` (dual auth).
pub(super) async fn get(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let call = auth::dual(&kernel, request).await?;
    let id = parse_id(&id)?;
    Ok(ok(&kernel.execution(id, &call.principal)?))
}

#[derive(Debug, Deserialize)]
pub(super) struct EventParams {
    after_seq: Option<String>,
    limit: Option<String>,
}

/// `GET /v0/executions/{id}/events`.
pub(super) async fn events(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    params: Query<EventParams>,
    request: Request,
) -> ApiResult {
    auth::client(&kernel, request, Scope::ExecutionsRead).await?;
    let id = parse_id(&id)?;
    let after = params
        .after_seq
        .as_deref()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let limit = params.limit.as_deref().and_then(|s| s.parse::<i64>().ok());
    let limit = limit.and_then(|l| usize::try_from(l).ok());
    Ok(ok(&kernel.events(id, after, limit)?))
}

/// `POST /v0/executions/{id}/cancel`.
pub(super) async fn cancel(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    request: Request,
) -> ApiResult {
    let call = auth::client(&kernel, request, Scope::ExecutionsWrite).await?;
    let id = parse_id(&id)?;
    kernel.cancel(id, &call.principal)?;
    Ok(no_content())
}
