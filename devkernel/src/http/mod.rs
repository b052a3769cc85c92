//! The `/v0` HTTP API (PROTOCOL.md §2) on axum.

mod admin;
mod agent;
mod api_keys;
mod auth;
mod body;
mod client;
mod dev;
mod error;
mod fork;
mod metrics;
mod resources;
mod stream;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{delete, get, post, put};
use uuid::Uuid;

use crate::error::KernelError;
use crate::kernel::Kernel;

/// Every route of the dev kernel.
pub(crate) fn router(kernel: Kernel) -> Router {
    Router::new()
        .merge(operator_routes())
        .merge(execution_routes())
        .merge(agent_routes())
        .fallback(not_found)
        .with_state(kernel)
}

/// Health, metrics, API keys, agents, policies and approvals.
fn operator_routes() -> Router<Kernel> {
    Router::new()
        .route("/v0/health", get(admin::health))
        .route("/v0/ready", get(admin::ready))
        .route("/metrics", get(metrics::metrics))
        .route("/v0/api-keys", post(api_keys::create).get(api_keys::list))
        .route("/v0/api-keys/{id}", delete(api_keys::revoke))
        .route("/v0/api-keys/{id}/rotate", post(api_keys::rotate))
        .route(
            "/v0/agents",
            post(admin::upsert_agent).get(admin::list_agents),
        )
        .route(
            "/v0/agents/{id}",
            get(admin::get_agent).delete(admin::delete_agent),
        )
        .route("/v0/agents/{id}/metadata", put(agent::set_metadata))
        .route("/v0/policies/{id}", post(admin::set_policy))
        .route("/v0/policies/{id}/test", post(admin::test_policy))
        .route("/v0/approvals", get(admin::list_approvals))
        .route("/v0/approvals/{id}", get(admin::get_approval))
        .route("/v0/approvals/{id}/grant", post(admin::grant))
        .route("/v0/approvals/{id}/deny", post(admin::deny))
}

/// The client's execution routes: create, list, get, events, cancel, forks, the SSE stream,
/// and the dev-only redelivery.
fn execution_routes() -> Router<Kernel> {
    Router::new()
        .route("/v0/executions", post(client::create).get(client::list))
        .route("/v0/executions/{id}", get(client::get))
        .route("/v0/executions/{id}/events", get(client::events))
        .route("/v0/executions/{id}/cancel", post(client::cancel))
        .route("/v0/executions/{id}/fork", post(fork::fork))
        .route("/v0/executions/{id}/fork-points", get(fork::fork_points))
        .route("/v0/executions/{id}/stream", get(stream::subscribe))
        .route("/v0/dev/executions/{id}/redeliver", post(dev::redeliver))
}

/// The agent's routes: steps, the execution's outcome, resources, step deltas.
fn agent_routes() -> Router<Kernel> {
    Router::new()
        .route("/v0/executions/{id}/previous", get(agent::previous))
        .route(
            "/v0/executions/{id}/steps",
            get(agent::list_steps).post(agent::submit),
        )
        .route("/v0/executions/{id}/steps/{step_id}", get(agent::get_step))
        .route(
            "/v0/executions/{id}/steps/{step_id}/complete",
            post(agent::complete_step),
        )
        .route(
            "/v0/executions/{id}/steps/{step_id}/fail",
            post(agent::fail_step),
        )
        .route("/v0/executions/{id}/heartbeat", post(agent::heartbeat))
        .route("/v0/executions/{id}/complete", post(agent::complete))
        .route("/v0/executions/{id}/fail", post(agent::fail))
        .route("/v0/executions/{id}/suspend", post(agent::suspend))
        .route("/v0/executions/{id}/resources", post(resources::register))
        .route(
            "/v0/executions/{id}/resources/checkpoints",
            post(resources::checkpoints),
        )
        .route(
            "/v0/executions/{id}/resources/{key}/binding",
            post(resources::bind),
        )
        .route(
            "/v0/executions/{id}/steps/{step_id}/stream",
            post(stream::publish),
        )
}

/// chi's default 404.
async fn not_found() -> (StatusCode, &'static str) {
    (StatusCode::NOT_FOUND, "404 page not found\n")
}

/// Path ids must be UUIDs (`400 validation_error` otherwise).
fn parse_id(text: &str) -> Result<Uuid, KernelError> {
    Uuid::parse_str(text).map_err(|_| KernelError::validation("invalid id"))
}
