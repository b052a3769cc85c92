//! The recorded form of a provider response, and the responses rebuilt from it.

use bytes::Bytes;
use http::StatusCode;
use serde_json::{Value, json};

use crate::refusal::{REFUSAL_TYPE, Refusal, RefusalKind};

/// `{"status", "headers": {"content-type"}, "body"}` of a provider response.
pub(super) fn record(response: &http::Response<Bytes>) -> Value {
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    json!({
        "status": response.status().as_u16(),
        "headers": { "content-type": content_type },
        "body": String::from_utf8_lossy(response.body()),
    })
}

/// The response a record stands for; a record that is not an envelope is served as JSON 200.
pub(super) fn rebuild(recorded: Value) -> http::Response<Bytes> {
    let status = recorded
        .get("status")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok());
    let body = recorded.get("body").and_then(Value::as_str);
    let (status, content_type, body) = match (status, body) {
        (Some(status), Some(body)) => {
            let content_type = recorded["headers"]["content-type"]
                .as_str()
                .unwrap_or("application/json")
                .to_owned();
            (status, content_type, body.to_owned())
        }
        _ => (200, "application/json".to_owned(), recorded.to_string()),
    };
    response(
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        &content_type,
        body,
    )
}

/// The provider-style error answer for a refusal.
pub(super) fn refusal(refusal: &Refusal) -> http::Response<Bytes> {
    let status = match refusal.kind {
        RefusalKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        RefusalKind::LeaseSuperseded => StatusCode::CONFLICT,
        _ => StatusCode::FORBIDDEN,
    };
    let body = json!({ "error": { "type": REFUSAL_TYPE, "message": refusal.message() } });
    response(status, "application/json", body.to_string())
}

fn response(status: StatusCode, content_type: &str, body: String) -> http::Response<Bytes> {
    let mut response = http::Response::new(Bytes::from(body));
    *response.status_mut() = status;
    if let Ok(value) = http::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    response
}
