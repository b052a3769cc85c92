//! Authentication, lease fencing, ownership and request validation over HTTP.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{AgentClient, FakeAgent, SECRET, client, kernel_with_agent, now_secs};
use rebuno::Secret;
use rebuno::signing::RequestSignature;
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::json;

const SUBMIT: &str = r#"{"kind":"tool_call","target":"search","args":{"q":1}}"#;

fn unauthorized() -> serde_json::Value {
    json!({"code": "unauthorized", "message": "unauthorized"})
}

#[tokio::test]
async fn agent_routes_require_a_valid_v1_signature() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let exec = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let d = agent.next().await.dispatch_id;
    let target = format!("/v0/executions/{}/steps", exec.id);
    let url = format!("{}{target}", kernel.url());
    let http = reqwest::Client::new();

    // Missing signature headers.
    let response = http.post(&url).body(SUBMIT).send().await.unwrap();
    assert_eq!(response.status(), 401);
    let text = response.text().await.unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        unauthorized()
    );

    let api = AgentClient::new(&kernel.url());
    // Stale and future timestamps.
    let (status, body) = api
        .send_at("POST", &target, Some((&d, 1)), SUBMIT, now_secs() - 400)
        .await;
    assert_eq!((status, body), (401, unauthorized()));
    let (status, _) = api
        .send_at("POST", &target, Some((&d, 1)), SUBMIT, now_secs() + 400)
        .await;
    assert_eq!(status, 401);
    let (status, _) = api
        .send_at("POST", &target, Some((&d, 1)), SUBMIT, now_secs() - 290)
        .await;
    assert_eq!(status, 200);

    // Wrong secret; unknown agent.
    let mut wrong = AgentClient::new(&kernel.url());
    wrong.secret = Secret::new("not-the-secret");
    assert_eq!(
        wrong.send("POST", &target, Some((&d, 1)), SUBMIT).await.0,
        401
    );
    let mut stranger = AgentClient::new(&kernel.url());
    stranger.agent_id = "nobody".into();
    assert_eq!(
        stranger
            .send("GET", &format!("/v0/executions/{}", exec.id), None, "")
            .await
            .0,
        401
    );

    // Signature over a different body, or a legacy body signature.
    let ts = now_secs().to_string();
    let attempt = "1";
    let sig = RequestSignature {
        method: "POST",
        target: &target,
        timestamp: &ts,
        dispatch_id: &d,
        attempt,
    }
    .sign(&Secret::new(SECRET), b"{}");
    let send = |sig: String| {
        http.post(&url)
            .header("Rebuno-Agent-Id", "hello")
            .header("Rebuno-Timestamp", &ts)
            .header("Rebuno-Dispatch-Id", &d)
            .header("Rebuno-Dispatch-Attempt", attempt)
            .header("Rebuno-Signature", sig)
            .body(SUBMIT)
            .send()
    };
    assert_eq!(send(sig).await.unwrap().status(), 401);
    let legacy = rebuno::signing::sign_webhook(&Secret::new(SECRET), SUBMIT.as_bytes());
    assert_eq!(send(legacy).await.unwrap().status(), 401);

    // A duplicated signed header is refused even with a valid signature.
    let good = RequestSignature {
        method: "POST",
        target: &target,
        timestamp: &ts,
        dispatch_id: &d,
        attempt,
    }
    .sign(&Secret::new(SECRET), SUBMIT.as_bytes());
    let response = http
        .post(&url)
        .header("Rebuno-Agent-Id", "hello")
        .header("Rebuno-Timestamp", &ts)
        .header("Rebuno-Dispatch-Id", &d)
        .header("Rebuno-Dispatch-Attempt", attempt)
        .header("Rebuno-Dispatch-Attempt", attempt)
        .header("Rebuno-Signature", &good)
        .body(SUBMIT)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);

    // The query string is part of the signed target.
    let (status, _) = api
        .send("GET", &format!("{target}?status=terminal"), None, "")
        .await;
    assert_eq!(status, 200);
    kernel.shutdown().await;
}

#[tokio::test]
async fn lease_headers_and_ownership() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let other_agent = FakeAgent::start().await;
    kernel
        .register_agent(AgentSpec::new("other", &other_agent.url, "other-secret"))
        .unwrap();
    let exec = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let d = agent.next().await.dispatch_id;
    let api = AgentClient::new(&kernel.url());
    let base = format!("/v0/executions/{}", exec.id);

    // Missing lease headers on a mutation.
    let (status, body) = api
        .send("POST", &format!("{base}/steps"), None, SUBMIT)
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["code"], "validation_error");
    assert_eq!(
        body["message"],
        "validation error: bad or missing Rebuno-Dispatch-Id"
    );
    let (status, body) = api
        .send("POST", &format!("{base}/heartbeat"), Some((&d, 0)), "")
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("validation_error"))
    );

    // Wrong attempt, unknown dispatch.
    let (status, body) = api
        .send("POST", &format!("{base}/heartbeat"), Some((&d, 2)), "")
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("lease_superseded"))
    );
    let stranger = uuid::Uuid::now_v7().to_string();
    let (status, _) = api
        .send(
            "POST",
            &format!("{base}/heartbeat"),
            Some((&stranger, 1)),
            "",
        )
        .await;
    assert_eq!(status, 409);

    // Another agent may not touch this execution.
    let mut other = AgentClient::new(&kernel.url());
    other.agent_id = "other".into();
    other.secret = Secret::new("other-secret");
    let (status, body) = other.send("GET", &base, None, "").await;
    assert_eq!(
        (status, body),
        (403, json!({"code": "forbidden", "message": "forbidden"}))
    );
    let (status, _) = other
        .send("POST", &format!("{base}/steps"), Some((&d, 1)), SUBMIT)
        .await;
    assert_eq!(status, 403);
    let (status, _) = other
        .send(
            "PUT",
            "/v0/agents/hello/metadata",
            None,
            r#"{"description": "x", "input_schema": null, "output_schema": null}"#,
        )
        .await;
    assert_eq!(status, 403);

    // Metadata of one's own agent.
    let (status, _) = api
        .send("PUT", "/v0/agents/hello/metadata", None, r#"{"description": "greets", "input_schema": {"type": "object"}, "output_schema": null}"#)
        .await;
    assert_eq!(status, 204);
    let (_, agent_json) = client(
        "GET",
        &format!("{}/v0/agents/hello", kernel.url()),
        None,
        None,
    )
    .await;
    assert_eq!(agent_json["description"], "greets");
    assert!(agent_json.get("secret").is_none());

    // Unknown and malformed ids.
    let missing = format!("/v0/executions/{}", uuid::Uuid::now_v7());
    let (status, body) = api.send("GET", &missing, None, "").await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    let (status, body) = api.send("GET", "/v0/executions/not-a-uuid", None, "").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("validation_error"))
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn malformed_bodies_are_validation_errors() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let exec = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let d = agent.next().await.dispatch_id;
    let api = AgentClient::new(&kernel.url());
    let steps = format!("/v0/executions/{}/steps", exec.id);
    let envelope = json!({"code": "validation_error", "message": "validation error"});
    for body in [
        r#"{"kind":"tool_call","target":"x","args":{},"colour":"red"}"#,
        r#"{"kind":"tool_call","target":"x","args":{"#,
        r#"{"kind":5}"#,
        "",
    ] {
        let (status, reply) = api.send("POST", &steps, Some((&d, 1)), body).await;
        assert_eq!((status, &reply), (400, &envelope), "{body}");
    }
    let url = format!("{}/v0/executions", kernel.url());
    let (status, reply) = client(
        "POST",
        &url,
        None,
        Some(r#"{"agent_id":"hello","bogus":1}"#),
    )
    .await;
    assert_eq!((status, reply), (400, envelope.clone()));
    let (status, reply) = client("POST", &url, None, Some(r#"{"agent_id":"ghost"}"#)).await;
    assert_eq!((status, reply["code"].as_str()), (404, Some("not_found")));
    let (status, _) = client(
        "POST",
        &url,
        None,
        Some(r#"{"agent_id":"hello","session":"   "}"#),
    )
    .await;
    assert_eq!(status, 400);
    // Oversized bodies: 401 on HMAC routes, 400 elsewhere.
    let huge = format!(
        r#"{{"agent_id":"hello","input":"{}"}}"#,
        "x".repeat(11 * 1024 * 1024)
    );
    let (status, _) = client("POST", &url, None, Some(&huge)).await;
    assert_eq!(status, 400);
    // Unknown routes: chi's plain 404.
    let (status, body) = client("GET", &format!("{}/v0/nope", kernel.url()), None, None).await;
    assert_eq!((status, body), (404, json!("404 page not found\n")));
    kernel.shutdown().await;
}

#[tokio::test]
async fn bearer_tokens() {
    // Dev mode: anonymous is fine, a supplied token must still be valid.
    let kernel = DevKernel::start().await.unwrap();
    let agents = format!("{}/v0/agents", kernel.url());
    assert_eq!(client("GET", &agents, None, None).await.0, 200);
    let (status, body) = client("GET", &agents, Some("bogus"), None).await;
    assert_eq!((status, body), (401, unauthorized()));
    kernel.shutdown().await;

    let kernel = DevKernel::builder()
        .bearer_token(Some("s3cret".into()))
        .start()
        .await
        .unwrap();
    let agents = format!("{}/v0/agents", kernel.url());
    assert_eq!(client("GET", &agents, None, None).await.0, 401);
    assert_eq!(client("GET", &agents, Some("S3CRET"), None).await.0, 401);
    assert_eq!(client("GET", &agents, Some("s3cret"), None).await.0, 200);
    let (status, agent) = client(
        "POST",
        &agents,
        Some("s3cret"),
        Some(r#"{"id":"a","webhook_url":"http://127.0.0.1:9/x","secret":"k","lease_timeout_seconds":5}"#),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(agent["id"], "a");
    assert!(
        agent.get("lease_timeout_seconds").is_none(),
        "below 10 s is unset"
    );
    assert!(agent.get("secret").is_none());
    assert_eq!(
        client("GET", &format!("{}/v0/health", kernel.url()), None, None).await,
        (200, json!({"status": "ok"}))
    );
    assert_eq!(
        client("DELETE", &format!("{agents}/a"), Some("s3cret"), None)
            .await
            .0,
        204
    );
    assert_eq!(
        client("GET", &format!("{agents}/a"), Some("s3cret"), None)
            .await
            .0,
        404
    );
    kernel.shutdown().await;
}

/// A rotation signs webhooks with the new secret at once and accepts the agent's requests with
/// either secret until the previous one is retired.
#[tokio::test]
async fn a_rotated_secret_overlaps_the_previous_one_until_it_is_retired() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let exec = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let _first = agent.next().await;
    let target = format!("/v0/executions/{}", exec.id);
    let old = AgentClient::new(&kernel.url());
    let mut new = AgentClient::new(&kernel.url());
    new.secret = Secret::new("rotated-secret");
    assert_eq!(new.send("GET", &target, None, "").await.0, 401, "not yet");

    kernel.rotate_secret("hello", "rotated-secret").unwrap();
    assert_eq!(old.send("GET", &target, None, "").await.0, 200, "previous");
    assert_eq!(new.send("GET", &target, None, "").await.0, 200, "current");

    // Webhooks are signed with the new secret: the fake agent (old secret) refuses the next.
    kernel.redeliver(&exec.id).unwrap();
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        agent.bad_signatures.recv(),
    )
    .await
    .expect("a webhook signed with the new secret")
    .expect("channel open");

    kernel.retire_previous_secret("hello").unwrap();
    assert_eq!(old.send("GET", &target, None, "").await.0, 401, "retired");
    assert_eq!(new.send("GET", &target, None, "").await.0, 200);
    assert!(kernel.rotate_secret("nobody", "x").is_err());
    assert!(kernel.rotate_secret("hello", "").is_err());
    kernel.shutdown().await;
}
