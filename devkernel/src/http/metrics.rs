//! `GET /metrics` (no auth).

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::kernel::Kernel;

/// Prometheus text exposition.
pub(super) async fn metrics(State(kernel): State<Kernel>) -> Response {
    let mut response = (StatusCode::OK, kernel.render_metrics()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}
