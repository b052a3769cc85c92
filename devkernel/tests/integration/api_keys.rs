//! Scoped API keys and per-route scope checks over HTTP (PROTOCOL.md §2.2, §2.7), and
//! `GET /metrics`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{FakeAgent, SECRET, client};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};

async fn kernel(token: Option<&str>) -> (DevKernel, FakeAgent) {
    let agent = FakeAgent::start().await;
    let kernel = DevKernel::builder()
        .bearer_token(token.map(str::to_owned))
        .agent(AgentSpec::new("hello", &agent.url, SECRET))
        .start()
        .await
        .unwrap();
    (kernel, agent)
}

async fn create_key(kernel: &DevKernel, token: Option<&str>, scopes: &[&str]) -> (u16, Value) {
    let body = json!({"name": " ci ", "scopes": scopes}).to_string();
    client(
        "POST",
        &format!("{}/v0/api-keys", kernel.url()),
        token,
        Some(&body),
    )
    .await
}

fn is_token(token: &str, id: &str) -> bool {
    let Some(secret) = token.strip_prefix(&format!("rbk_{id}.")) else {
        return false;
    };
    secret.len() == 43
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[tokio::test]
async fn keys_are_created_listed_rotated_and_revoked() {
    let (kernel, _agent) = kernel(Some("boot")).await;
    let url = kernel.url();
    assert_eq!(create_key(&kernel, None, &["executions:read"]).await.0, 401);

    let response = reqwest::Client::new()
        .post(format!("{url}/v0/api-keys"))
        .header("Authorization", "Bearer boot")
        .body(r#"{"name":"ci","scopes":["executions:write","executions:read","executions:read"]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["cache-control"], "no-store");
    let issued: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    let id = issued["id"].as_str().unwrap().to_owned();
    let token = issued["token"].as_str().unwrap().to_owned();
    assert!(is_token(&token, &id), "{token}");
    assert_eq!(
        issued["scopes"],
        json!(["executions:read", "executions:write"])
    );
    assert_eq!(issued["name"], "ci");

    let (status, list) = client("GET", &format!("{url}/v0/api-keys"), Some("boot"), None).await;
    assert_eq!(status, 200);
    assert_eq!(list[0]["id"], json!(id));
    assert!(list[0].get("token").is_none());
    assert!(list[0].get("revoked_at").is_none());

    // The key works for its scopes only.
    let (status, _) = client("GET", &format!("{url}/v0/executions"), Some(&token), None).await;
    assert_eq!(status, 200);
    let (status, body) = client("GET", &format!("{url}/v0/approvals"), Some(&token), None).await;
    assert_eq!((status, body["code"].clone()), (403, json!("forbidden")));
    assert_eq!(
        client("GET", &format!("{url}/v0/api-keys"), Some(&token), None)
            .await
            .0,
        403
    );

    // Rotation replaces the token.
    let (status, rotated) = client(
        "POST",
        &format!("{url}/v0/api-keys/{id}/rotate"),
        Some("boot"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(rotated["id"], json!(id));
    let fresh = rotated["token"].as_str().unwrap();
    assert_ne!(fresh, token);
    assert_eq!(
        client("GET", &format!("{url}/v0/executions"), Some(&token), None)
            .await
            .0,
        401
    );
    assert_eq!(
        client("GET", &format!("{url}/v0/executions"), Some(fresh), None)
            .await
            .0,
        200
    );

    // Revocation is repeatable; a revoked key neither works nor rotates.
    for _ in 0..2 {
        let (status, _) = client(
            "DELETE",
            &format!("{url}/v0/api-keys/{id}"),
            Some("boot"),
            None,
        )
        .await;
        assert_eq!(status, 204);
    }
    assert_eq!(
        client("GET", &format!("{url}/v0/executions"), Some(fresh), None)
            .await
            .0,
        401
    );
    let (status, _) = client(
        "POST",
        &format!("{url}/v0/api-keys/{id}/rotate"),
        Some("boot"),
        None,
    )
    .await;
    assert_eq!(status, 409);
    let (_, list) = client("GET", &format!("{url}/v0/api-keys"), Some("boot"), None).await;
    assert!(list[0]["revoked_at"].is_string());
    let unknown = uuid::Uuid::now_v7();
    let (status, _) = client(
        "POST",
        &format!("{url}/v0/api-keys/{unknown}/rotate"),
        Some("boot"),
        None,
    )
    .await;
    assert_eq!(status, 404);

    // Validation.
    assert_eq!(create_key(&kernel, Some("boot"), &[]).await.0, 400);
    assert_eq!(create_key(&kernel, Some("boot"), &["root"]).await.0, 400);
    let (status, _) = client(
        "POST",
        &format!("{url}/v0/api-keys"),
        Some("boot"),
        Some(r#"{"name":"","scopes":["agents:read"]}"#),
    )
    .await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn every_route_checks_its_scope() {
    let (kernel, mut agent) = kernel(Some("boot")).await;
    let url = kernel.url();
    let exec = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let _ = agent.next().await;
    let id = exec.id;
    let routes: Vec<(&str, String, Option<&str>, &str)> = vec![
        (
            "POST",
            format!("{url}/v0/executions"),
            Some(r#"{"agent_id":"hello"}"#),
            "executions:write",
        ),
        (
            "GET",
            format!("{url}/v0/executions"),
            None,
            "executions:read",
        ),
        (
            "GET",
            format!("{url}/v0/executions/{id}"),
            None,
            "executions:read",
        ),
        (
            "GET",
            format!("{url}/v0/executions/{id}/events"),
            None,
            "executions:read",
        ),
        (
            "GET",
            format!("{url}/v0/executions/{id}/steps"),
            None,
            "executions:read",
        ),
        (
            "GET",
            format!("{url}/v0/executions/{id}/previous"),
            None,
            "executions:read",
        ),
        (
            "GET",
            format!("{url}/v0/executions/{id}/fork-points"),
            None,
            "executions:read",
        ),
        (
            "POST",
            format!("{url}/v0/executions/{id}/fork"),
            Some(r#"{"at_seq":1}"#),
            "executions:write",
        ),
        ("GET", format!("{url}/v0/agents"), None, "agents:read"),
        ("GET", format!("{url}/v0/agents/hello"), None, "agents:read"),
        (
            "POST",
            format!("{url}/v0/policies/hello"),
            Some(r#"{"bundle":"default_action: allow"}"#),
            "policies:write",
        ),
        ("GET", format!("{url}/v0/approvals"), None, "approvals:read"),
        (
            "POST",
            format!("{url}/v0/executions/{id}/cancel"),
            None,
            "executions:write",
        ),
    ];
    let everything_else = |wanted: &str| -> Vec<&str> {
        [
            "executions:read",
            "executions:write",
            "approvals:read",
            "approvals:write",
            "agents:read",
            "agents:write",
            "policies:write",
            "api_keys:manage",
        ]
        .into_iter()
        .filter(|s| *s != wanted)
        .collect()
    };
    for (method, route, body, scope) in routes {
        let (_, wrong) = create_key(&kernel, Some("boot"), &everything_else(scope)).await;
        let (status, _) = client(method, &route, wrong["token"].as_str(), body).await;
        assert_eq!(status, 403, "{method} {route} without {scope}");
        let (_, right) = create_key(&kernel, Some("boot"), &[scope]).await;
        let (status, answer) = client(method, &route, right["token"].as_str(), body).await;
        assert!(
            status < 300,
            "{method} {route} with {scope}: {status} {answer}"
        );
    }

    // A policy override on a fork also needs policies:write.
    let fork = json!({"at_seq": 1, "policy_bundle": "default_action: allow"}).to_string();
    let route = format!("{url}/v0/executions/{id}/fork");
    let (_, write) = create_key(&kernel, Some("boot"), &["executions:write"]).await;
    assert_eq!(
        client("POST", &route, write["token"].as_str(), Some(&fork))
            .await
            .0,
        403
    );
    let (_, both) = create_key(
        &kernel,
        Some("boot"),
        &["executions:write", "policies:write"],
    )
    .await;
    assert_eq!(
        client("POST", &route, both["token"].as_str(), Some(&fork))
            .await
            .0,
        201
    );
}

#[tokio::test]
async fn dev_mode_stays_anonymous_admin_but_checks_supplied_tokens() {
    let (kernel, _agent) = kernel(None).await;
    let url = kernel.url();
    let (status, issued) = create_key(&kernel, None, &["agents:read"]).await;
    assert_eq!(status, 201);
    let token = issued["token"].as_str().unwrap();
    assert_eq!(
        client("GET", &format!("{url}/v0/agents"), Some(token), None)
            .await
            .0,
        200
    );
    assert_eq!(
        client("GET", &format!("{url}/v0/executions"), Some(token), None)
            .await
            .0,
        403
    );
    assert_eq!(
        client("GET", &format!("{url}/v0/executions"), Some("bogus"), None)
            .await
            .0,
        401
    );
    assert_eq!(
        client("GET", &format!("{url}/v0/executions"), None, None)
            .await
            .0,
        200
    );
    let harness = kernel
        .create_api_key("harness", &["executions:read"])
        .unwrap();
    assert!(harness.starts_with("rbk_"), "{harness}");
    // Its scope, and only its scope: reads of executions pass, reads of agents do not.
    for (path, expected) in [("/v0/executions", 200), ("/v0/agents", 403)] {
        let (status, body) = client("GET", &format!("{url}{path}"), Some(&harness), None).await;
        assert_eq!(status, expected, "{path}: {body}");
    }
}

#[tokio::test]
async fn metrics_expose_prometheus_counters() {
    let (kernel, mut agent) = kernel(None).await;
    let exec = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let run = common::Run::attach(&kernel, &mut agent, &exec.id).await;
    run.submit(json!({"kind": "tool_call", "target": "t", "args": {}}))
        .await;
    kernel.cancel(&exec.id).unwrap();
    let response = reqwest::get(format!("{}/metrics", kernel.url()))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let mut text = response.text().await.unwrap();
    // The ack is counted when the webhook call returns, which may trail the agent.
    for _ in 0..50 {
        if text.contains("outcome=\"acked\"} 1") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        text = reqwest::get(format!("{}/metrics", kernel.url()))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
    }
    for line in [
        "# TYPE rebuno_executions gauge",
        "rebuno_executions{status=\"cancelled\"} 1",
        "rebuno_dispatch_deliveries_total{outcome=\"acked\"} 1",
        "rebuno_dispatch_deliveries_total{outcome=\"failed\"} 0",
        "rebuno_steps_total{decision=\"proceed\"} 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}
