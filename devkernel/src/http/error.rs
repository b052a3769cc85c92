//! The JSON error envelope `{"code", "message"}` and JSON responses.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::error::KernelError;

/// A kernel error rendered as the protocol's envelope.
#[derive(Debug)]
pub(crate) struct ApiError(pub(crate) KernelError);

impl From<KernelError> for ApiError {
    fn from(error: KernelError) -> Self {
        Self(error)
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    code: &'a str,
    message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let envelope = Envelope {
            code: self.0.code(),
            message: self.0.to_string(),
        };
        json(self.0.status(), &envelope)
    }
}

/// A JSON response with `Content-Type: application/json; charset=utf-8`.
pub(crate) fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => {
            let mut response = (status, body).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json; charset=utf-8"),
            );
            response
        }
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// `200` JSON.
pub(crate) fn ok<T: Serialize>(value: &T) -> Response {
    json(StatusCode::OK, value)
}

/// `204 No Content`.
pub(crate) fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// Handler result.
pub(crate) type ApiResult = Result<Response, ApiError>;
