//! Client routes: create, list, get, events, cancel.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::auth::{Caller, Reader, scope};
use super::body::Strict;
use super::error::{ApiResult, json, no_content, ok};
use super::parse_id;
use crate::error::KernelError;
use crate::kernel::{CreateRequest, Kernel, ListQuery};

/// `POST /v0/executions`.
pub(super) async fn create(
    State(kernel): State<Kernel>,
    caller: Caller<scope::ExecutionsWrite>,
    Strict(create): Strict<CreateRequest>,
) -> ApiResult {
    let execution = kernel.create_execution(create, &caller.principal)?;
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
    Query(params): Query<ListParams>,
    _: Caller<scope::ExecutionsRead>,
) -> ApiResult {
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
    reader: Reader,
) -> ApiResult {
    let id = parse_id(&id)?;
    Ok(ok(&kernel.execution(id, &reader.principal)?))
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
    _: Caller<scope::ExecutionsRead>,
) -> ApiResult {
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
    caller: Caller<scope::ExecutionsWrite>,
) -> ApiResult {
    let id = parse_id(&id)?;
    kernel.cancel(id, &caller.principal)?;
    Ok(no_content())
}
