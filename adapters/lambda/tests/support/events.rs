//! Lambda HTTP events carrying a webhook, in every shape `rebuno_lambda` accepts.

use serde_json::{Map, Value, json};

/// The fixtures, by name.
pub const FIXTURES: [(&str, &str); 4] = [
    ("function_url", include_str!("../data/function_url.json")),
    ("apigw_http", include_str!("../data/apigw_http.json")),
    ("apigw_rest", include_str!("../data/apigw_rest.json")),
    ("alb", include_str!("../data/alb.json")),
];

/// A fixture with `body` and extra headers, and optionally another method.
pub fn from_fixture(template: &str, method: &str, body: &str, headers: &[(&str, &str)]) -> Value {
    let mut event: Value = serde_json::from_str(template).expect("fixture is JSON");
    event["body"] = Value::String(body.to_owned());
    set_method(&mut event, method);
    for (name, value) in headers {
        set_header(&mut event, name, value);
    }
    event
}

fn set_method(event: &mut Value, method: &str) {
    if event.get("httpMethod").is_some() {
        event["httpMethod"] = json!(method);
    }
    if let Some(context) = event.pointer_mut("/requestContext/http/method") {
        *context = json!(method);
    }
    if let Some(context) = event.pointer_mut("/requestContext/httpMethod") {
        *context = json!(method);
    }
}

fn set_header(event: &mut Value, name: &str, value: &str) {
    if let Some(headers) = event.get_mut("headers").and_then(Value::as_object_mut) {
        headers.insert(name.to_owned(), json!(value));
    }
    if let Some(multi) = event
        .get_mut("multiValueHeaders")
        .and_then(Value::as_object_mut)
    {
        multi.insert(name.to_owned(), json!([value]));
    }
}

/// What a Function URL hands Lambda for an HTTP request (payload format 2.0).
pub fn function_url(method: &str, path: &str, headers: &http::HeaderMap, body: &[u8]) -> Value {
    let mut map = Map::new();
    for (name, value) in headers {
        if let Ok(value) = value.to_str() {
            map.insert(name.as_str().to_owned(), json!(value));
        }
    }
    let mut event = from_fixture(FIXTURES[0].1, method, "", &[]);
    event["headers"] = Value::Object(map);
    event["rawPath"] = json!(path);
    event["requestContext"]["http"]["path"] = json!(path);
    event["body"] = json!(String::from_utf8_lossy(body));
    event
}

/// The status code and body of a lambda_http response payload (any of the event shapes).
pub fn response_of(payload: &Value) -> (u16, String) {
    let status = payload["statusCode"]
        .as_u64()
        .and_then(|s| u16::try_from(s).ok())
        .unwrap_or(502);
    let body = payload["body"].as_str().unwrap_or_default().to_owned();
    (status, body)
}
