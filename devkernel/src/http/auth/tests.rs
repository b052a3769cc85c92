//! The extractors over HTTP: an agent mutation's checks in order (signature, path id, lease
//! headers, then the verified body), and agent credentials refused on a client-only route.

use std::time::{SystemTime, UNIX_EPOCH};

use rebuno::Secret;
use rebuno::signing::RequestSignature;
use serde_json::{Value, json};

use crate::{AgentSpec, DevKernel};

const SECRET: &str = "dev-secret";

/// A kernel with agent `hello` registered (its webhook is never called).
async fn kernel() -> DevKernel {
    let kernel = DevKernel::start().await.unwrap();
    let spec = AgentSpec::new("hello", "http://127.0.0.1:9/webhook", SECRET);
    kernel.register_agent(spec).unwrap();
    kernel
}

/// Sends `body` to `path`, signed over `signed_body` (the same bytes unless tampering), with
/// an optional lease.
async fn send(
    kernel: &DevKernel,
    path: &str,
    lease: Option<(&str, &str)>,
    signed_body: &str,
    body: &str,
) -> (u16, Value) {
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let (dispatch_id, attempt) = lease.unwrap_or_default();
    let signature = RequestSignature {
        method: "POST",
        target: path,
        timestamp: &ts,
        dispatch_id,
        attempt,
    }
    .sign(&Secret::new(SECRET), signed_body.as_bytes());
    let mut request = reqwest::Client::new()
        .post(format!("{}{path}", kernel.url()))
        .header("Rebuno-Agent-Id", "hello")
        .header("Rebuno-Timestamp", &ts)
        .header("Rebuno-Signature", signature)
        .body(body.to_owned());
    if let Some((dispatch_id, attempt)) = lease {
        request = request
            .header("Rebuno-Dispatch-Id", dispatch_id)
            .header("Rebuno-Dispatch-Attempt", attempt);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.bytes().await.unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn envelope(code: &str, message: &str) -> Value {
    json!({"code": code, "message": message})
}

#[tokio::test]
async fn signature_then_id_then_lease_then_body() {
    let kernel = kernel().await;
    let unauthorized = envelope("unauthorized", "unauthorized");
    let bad_id = "/v0/executions/not-a-uuid/complete";
    // A tampered body fails the signature before the bad id is looked at.
    let reply = send(&kernel, bad_id, None, "{}", r#"{"output":1}"#).await;
    assert_eq!(reply, (401, unauthorized));
    let reply = send(&kernel, bad_id, None, "{}", "{}").await;
    assert_eq!(
        reply,
        (
            400,
            envelope("validation_error", "validation error: invalid id")
        )
    );
    let path = format!("/v0/executions/{}/complete", uuid::Uuid::now_v7());
    let reply = send(&kernel, &path, None, "{", "{").await;
    let missing = "validation error: bad or missing Rebuno-Dispatch-Id";
    assert_eq!(reply, (400, envelope("validation_error", missing)));
    // Lease present: the malformed (but signed) body is next.
    let dispatch = uuid::Uuid::now_v7().to_string();
    let reply = send(&kernel, &path, Some((&dispatch, "1")), "{", "{").await;
    assert_eq!(
        reply,
        (400, envelope("validation_error", "validation error"))
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn agents_cannot_subscribe_even_in_dev_mode() {
    let kernel = kernel().await;
    let url = format!(
        "{}/v0/executions/{}/stream",
        kernel.url(),
        uuid::Uuid::now_v7()
    );
    let response = reqwest::Client::new()
        .get(url)
        .header("Rebuno-Agent-Id", "hello")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    kernel.shutdown().await;
}
