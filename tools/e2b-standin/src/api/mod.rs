//! The REST API (`api.e2b.app`): the spec'd sandbox and snapshot endpoints, and the `/v2`
//! create and connect the Python SDK 2.63.0 calls. Statuses and error bodies follow
//! e2b-dev/infra's handlers (`{"code": <status>, "message": ...}`).

mod sandboxes;
mod snapshots;
mod template_ref;

use http::request::Parts;
use http::{HeaderMap, Method, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::body::{self, Body};
use crate::state::Shared;

/// The API's message for a sandbox that does not exist (Go's `%q` quoting).
pub(crate) fn sandbox_not_found(id: &str) -> String {
    format!("Sandbox {id:?} doesn't exist or you don't have access to it")
}

/// An error in the API's shape.
pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    fail(status, message).into()
}

/// An API error not yet turned into its response (`{"code": <status>, "message": ...}`).
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

/// An [`ApiError`].
pub(crate) fn fail(status: StatusCode, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        message: message.into(),
    }
}

impl From<ApiError> for Response<Body> {
    fn from(e: ApiError) -> Self {
        body::json(
            e.status,
            &json!({ "code": e.status.as_u16(), "message": e.message }),
        )
    }
}

/// Whether a route is the SDK's unpublished `/v2` variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Version {
    V1,
    V2,
}

enum Route<'a> {
    Health,
    List(Version),
    Create(Version),
    Get(&'a str),
    Kill(&'a str),
    Connect(&'a str, Version),
    Pause(&'a str),
    Resume(&'a str),
    Timeout(&'a str),
    Refresh(&'a str),
    Snapshot(&'a str),
    ListSnapshots,
    DeleteTemplate(&'a str),
}

/// Answers one REST API request.
pub(crate) async fn handle(shared: &Shared, parts: &Parts, body: &[u8]) -> Response<Body> {
    let route = match route(&parts.method, parts.uri.path()) {
        Ok(route) => route,
        Err(e) => return e.into(),
    };
    if !matches!(route, Route::Health)
        && let Err(e) = authenticate(shared, &parts.headers)
    {
        return e.into();
    }
    let query = parts.uri.query().unwrap_or("");
    match route {
        Route::Health => body::response(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            "Health check successful",
        ),
        Route::List(version) => sandboxes::list(shared, query, version),
        Route::Create(version) => sandboxes::create(shared, body, version).await,
        Route::Get(id) => sandboxes::get(shared, id),
        Route::Kill(id) => sandboxes::kill(shared, id),
        Route::Connect(id, version) => sandboxes::connect(shared, id, body, version),
        Route::Pause(id) => sandboxes::pause(shared, id, body),
        Route::Resume(id) => sandboxes::resume(shared, id, body),
        Route::Timeout(id) => sandboxes::set_timeout(shared, id, body),
        Route::Refresh(id) => sandboxes::refresh(shared, id, body),
        Route::Snapshot(id) => snapshots::create(shared, id, body).await,
        Route::ListSnapshots => snapshots::list(shared, query),
        Route::DeleteTemplate(id) => snapshots::delete(shared, id),
    }
}

fn route<'a>(method: &Method, path: &'a str) -> Result<Route<'a>, ApiError> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (wanted, route) = match segments.as_slice() {
        ["health"] => (Method::GET, Route::Health),
        ["sandboxes"] if *method == Method::GET => (Method::GET, Route::List(Version::V1)),
        ["v2", "sandboxes"] if *method == Method::GET => (Method::GET, Route::List(Version::V2)),
        ["sandboxes"] => (Method::POST, Route::Create(Version::V1)),
        ["v2", "sandboxes"] => (Method::POST, Route::Create(Version::V2)),
        ["sandboxes", id] if *method == Method::DELETE => (Method::DELETE, Route::Kill(id)),
        ["sandboxes", id] => (Method::GET, Route::Get(id)),
        ["sandboxes", id, "connect"] => (Method::POST, Route::Connect(id, Version::V1)),
        ["v2", "sandboxes", id, "connect"] => (Method::POST, Route::Connect(id, Version::V2)),
        ["sandboxes", id, "pause"] => (Method::POST, Route::Pause(id)),
        ["sandboxes", id, "resume"] => (Method::POST, Route::Resume(id)),
        ["sandboxes", id, "timeout"] => (Method::POST, Route::Timeout(id)),
        ["sandboxes", id, "refreshes"] => (Method::POST, Route::Refresh(id)),
        ["sandboxes", id, "snapshots"] => (Method::POST, Route::Snapshot(id)),
        ["snapshots"] => (Method::GET, Route::ListSnapshots),
        ["templates", id] => (Method::DELETE, Route::DeleteTemplate(id)),
        _ => {
            return Err(fail(
                StatusCode::NOT_FOUND,
                "validation error: no matching operation was found",
            ));
        }
    };
    if *method != wanted {
        return Err(fail(
            StatusCode::METHOD_NOT_ALLOWED,
            "validation error: method not allowed",
        ));
    }
    Ok(route)
}

/// `X-API-Key` as the API checks it, with its 401 messages.
fn authenticate(shared: &Shared, headers: &HeaderMap) -> Result<(), ApiError> {
    let key = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let message = if key.is_empty() {
        "authorization header is missing"
    } else if key == shared.api_key() {
        return Ok(());
    } else if !key.starts_with("e2b_") {
        "authorization header is malformed"
    } else {
        "Invalid API key, please visit https://e2b.dev/docs/api-key for more information.\nCannot get the team for the given API key"
    };
    Err(fail(StatusCode::UNAUTHORIZED, message))
}

/// A JSON request body, with the API's 400 when it is missing (and `required`) or does not
/// match the schema.
pub(crate) fn parse_body<T: DeserializeOwned>(
    body: &[u8],
    schema: &str,
    required: bool,
) -> Result<T, ApiError> {
    const PREFIX: &str =
        "validation error: error in openapi3filter.RequestError: request body has an error";
    let bytes: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        if required {
            return Err(fail(
                StatusCode::BAD_REQUEST,
                format!("{PREFIX}: value is required but missing"),
            ));
        }
        b"{}"
    } else {
        body
    };
    serde_json::from_slice(bytes).map_err(|e| {
        fail(
            StatusCode::BAD_REQUEST,
            format!("{PREFIX}: doesn't match schema #/components/schemas/{schema}: {e}"),
        )
    })
}
