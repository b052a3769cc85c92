//! Conformance: the Go kernel's `internal/api` tests (routing, authentication, ownership,
//! API keys, the SSE stream) replayed against the dev kernel's HTTP API.
//! `/work/briefs/table-api.md` maps every Go test function here.

use crate::common;

use std::time::Duration;

use common::{AgentClient, FakeAgent, Run, SECRET, client, kernel_with_agent, now_secs};
use rebuno::Secret;
use rebuno::signing::{RequestSignature, sign_webhook};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};

/// A kernel with a bearer token and the fake agent registered as `hello`.
async fn kernel_with_token(token: &str) -> (DevKernel, FakeAgent) {
    let agent = FakeAgent::start().await;
    let kernel = DevKernel::builder()
        .bearer_token(Some(token.to_owned()))
        .agent(AgentSpec::new("hello", &agent.url, SECRET))
        .start()
        .await
        .unwrap();
    (kernel, agent)
}

/// Creates an execution of `hello` through the harness (no client credentials needed) and
/// waits for its delivery.
async fn started(kernel: &DevKernel, agent: &mut FakeAgent) -> Run {
    let exec = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    Run::attach(kernel, agent, &exec.id).await
}

/// A request signed as `hello` with no lease headers (the Go tests' `signAgentRequest` on
/// a route the lease does not concern).
fn signed(method: &str, url: &str, target: &str, body: &str) -> reqwest::RequestBuilder {
    let ts = now_secs().to_string();
    let signature = RequestSignature {
        method,
        target,
        timestamp: &ts,
        dispatch_id: "",
        attempt: "",
    }
    .sign(&Secret::new(SECRET), body.as_bytes());
    reqwest::Client::new()
        .request(method.parse().unwrap(), url)
        .header("Rebuno-Agent-Id", "hello")
        .header("Rebuno-Timestamp", ts)
        .header("Rebuno-Signature", signature)
        .body(body.to_owned())
}

fn read_step(path: &str) -> Value {
    json!({"kind": "tool_call", "target": "read", "args": {"path": path}})
}

// ---------------------------------------------------------------------------------------------
// internal/api/router_test.go

/// Go: TestCreateExecutionViaHTTP (internal/api/router_test.go)
#[tokio::test]
async fn create_execution_answers_201_with_the_execution() {
    let (kernel, _agent) = kernel_with_agent().await;
    let (status, exec) = client(
        "POST",
        &format!("{}/v0/executions", kernel.url()),
        None,
        Some(r#"{"agent_id":"hello","input":{"msg":"hi"}}"#),
    )
    .await;
    assert_eq!(status, 201, "{exec}");
    assert_eq!(exec["agent_id"], "hello");
    kernel.shutdown().await;
}

/// Go: TestAgentSubmitAndCompleteViaHTTP (internal/api/router_test.go)
#[tokio::test]
async fn submit_complete_and_read_back_a_step() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = started(&kernel, &mut agent).await;
    let proceed = run.submit(read_step("/tmp")).await;
    assert_eq!(proceed["decision"], "proceed", "{proceed}");
    let step_id = proceed["step_id"].as_str().unwrap();
    run.complete(step_id, json!({"result": {"ok": true}})).await;
    let (status, step) = run
        .api
        .send(
            "GET",
            &format!("/v0/executions/{}/steps/{step_id}", run.id),
            None,
            "",
        )
        .await;
    assert_eq!(status, 200, "{step}");
    assert_eq!(step["status"], "succeeded");
    kernel.shutdown().await;
}

/// Go: TestListStepsTerminalFilter (internal/api/router_test.go)
#[tokio::test]
async fn list_steps_filters_terminal_ones() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = started(&kernel, &mut agent).await;
    let done = run.submit(read_step("/a")).await;
    let done_id = done["step_id"].as_str().unwrap();
    run.complete(done_id, json!({"result": {"ok": true}})).await;
    run.submit(read_step("/b")).await;
    let list = |query: &'static str| {
        let target = format!("/v0/executions/{}/steps{query}", run.id);
        let api = &run.api;
        async move {
            let (status, steps) = api.send("GET", &target, None, "").await;
            assert_eq!(status, 200, "{steps}");
            steps.as_array().unwrap().clone()
        }
    };
    assert_eq!(list("").await.len(), 2);
    let terminal = list("?status=terminal").await;
    assert_eq!(terminal.len(), 1);
    assert_eq!(terminal[0]["step_id"], done_id);
    assert_eq!(terminal[0]["status"], "succeeded");
    kernel.shutdown().await;
}

/// Go: TestStepsReachableViaBearerAuth (internal/api/router_test.go)
#[tokio::test]
async fn steps_are_readable_with_the_bearer_token() {
    let (kernel, mut agent) = kernel_with_token("tok").await;
    let run = started(&kernel, &mut agent).await;
    let step = run.submit(read_step("/tmp")).await;
    let step_id = step["step_id"].as_str().unwrap();
    let base = format!("{}/v0/executions/{}/steps", kernel.url(), run.id);
    let (status, list) = client("GET", &base, Some("tok"), None).await;
    assert_eq!(status, 200, "{list}");
    let (status, one) = client("GET", &format!("{base}/{step_id}"), Some("tok"), None).await;
    assert_eq!(status, 200, "{one}");
    kernel.shutdown().await;
}

/// Go: TestAgentHMACRejectsBadSignature (internal/api/router_test.go)
#[tokio::test]
async fn a_bad_agent_signature_is_401() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = started(&kernel, &mut agent).await;
    let response = reqwest::Client::new()
        .post(format!("{}/v0/executions/{}/steps", kernel.url(), run.id))
        .header("Rebuno-Agent-Id", "hello")
        .header("Rebuno-Signature", "sha256=badbadbad")
        .body(read_step("/tmp").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    kernel.shutdown().await;
}

/// Go: TestBearerAuth (internal/api/router_test.go)
#[tokio::test]
async fn client_routes_need_the_bearer_token() {
    let (kernel, _agent) = kernel_with_token("tok").await;
    let url = format!("{}/v0/approvals", kernel.url());
    assert_eq!(client("GET", &url, None, None).await.0, 401);
    assert_eq!(client("GET", &url, Some("tok"), None).await.0, 200);
    kernel.shutdown().await;
}

/// Go: TestAdminLoadPolicyBundle (internal/api/router_test.go)
#[tokio::test]
async fn a_loaded_policy_bundle_decides_steps() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = started(&kernel, &mut agent).await;
    let bundle = "\nrules:\n  - id: allow-prod\n    when:\n      target: read\n      arguments:\n        env:\n          regex: \"^prod-.*\"\n    then:\n      decision: allow\ndefault_action: deny\n";
    let (status, body) = client(
        "POST",
        &format!("{}/v0/policies/hello", kernel.url()),
        None,
        Some(&json!({ "bundle": bundle }).to_string()),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    let staging = run
        .submit(json!({"kind": "tool_call", "target": "read", "args": {"env": "staging-123"}}))
        .await;
    assert_eq!(staging["decision"], "denied", "{staging}");
    let prod = run
        .submit(json!({"kind": "tool_call", "target": "read", "args": {"env": "prod-123"}}))
        .await;
    assert_eq!(prod["decision"], "proceed", "{prod}");
    kernel.shutdown().await;
}

/// Go: TestSupersededLeaseIsRejectedWith409 (internal/api/router_test.go)
///
/// The dispatch is delivered again (here by the harness's redelivery, in Go by a reclaim of a
/// stalled lease): the earlier attempt is `409 lease_superseded`, the live one is served.
#[tokio::test]
async fn a_superseded_attempt_is_409_lease_superseded() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let stale = started(&kernel, &mut agent).await;
    kernel.redeliver(&stale.id).unwrap();
    let live = Run::attach(&kernel, &mut agent, &stale.id).await;
    assert_eq!(live.dispatch, stale.dispatch);
    assert!(live.attempt > stale.attempt);
    let body = read_step("/tmp").to_string();
    let (status, error) = stale.post("/steps", &body).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (409, Some("lease_superseded")),
        "{error}"
    );
    let (status, decision) = live.post("/steps", &body).await;
    assert_eq!(status, 200, "{decision}");
    kernel.shutdown().await;
}

/// Go: TestAgentResponsesOmitSecret (internal/api/router_test.go)
#[tokio::test]
async fn agent_responses_omit_the_secret() {
    let (kernel, _agent) = kernel_with_agent().await;
    let url = kernel.url();
    let secret = "agent-two-secret";
    let body = json!({"id": "agent-2", "webhook_url": "http://localhost", "secret": secret});
    for (method, path, body, want) in [
        ("POST", "/v0/agents".to_owned(), Some(body.to_string()), 201),
        ("GET", "/v0/agents".to_owned(), None, 200),
        ("GET", "/v0/agents/hello".to_owned(), None, 200),
        ("GET", "/v0/agents/agent-2".to_owned(), None, 200),
    ] {
        let (status, answer) = client(method, &format!("{url}{path}"), None, body.as_deref()).await;
        assert_eq!(status, want, "{method} {path}: {answer}");
        let text = answer.to_string();
        assert!(
            !text.contains(secret) && !text.contains(SECRET),
            "{method} {path} leaked a secret: {text}"
        );
    }
    kernel.shutdown().await;
}

/// Go: TestRegisterAgentReturnsStoredAgent (internal/api/router_test.go)
///
/// Go registers an agent without a `secret` (the field is optional there).
#[tokio::test]
async fn register_agent_returns_the_stored_agent() {
    let (kernel, _agent) = kernel_with_agent().await;
    let (status, agent) = client(
        "POST",
        &format!("{}/v0/agents", kernel.url()),
        None,
        Some(r#"{"id":"agent-2","webhook_url":"http://localhost"}"#),
    )
    .await;
    assert_eq!(status, 201, "{agent}");
    assert_eq!(agent["id"], "agent-2");
    assert!(
        agent["registered_at"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );
    kernel.shutdown().await;
}

/// Go: TestRegisterAgentReturnsStoredAgent (internal/api/router_test.go), with a secret
///
/// The part of the scenario the dev kernel can run: the stored agent comes back with its id
/// and registration time.
#[tokio::test]
async fn register_agent_with_a_secret_returns_the_stored_agent() {
    let (kernel, _agent) = kernel_with_agent().await;
    let (status, agent) = client(
        "POST",
        &format!("{}/v0/agents", kernel.url()),
        None,
        Some(r#"{"id":"agent-2","webhook_url":"http://localhost","secret":"s"}"#),
    )
    .await;
    assert_eq!(status, 201, "{agent}");
    assert_eq!(agent["id"], "agent-2");
    assert!(
        agent["registered_at"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// internal/api/ownership_test.go

/// Go: TestAgentCannotAccessAnotherAgentsExecution (internal/api/ownership_test.go)
///
/// `hello`, correctly signed and carrying the live lease of `other`'s execution, is refused
/// (`403`) on every agent route of that execution, and nothing changes.
#[tokio::test]
async fn an_agent_cannot_touch_another_agents_execution() {
    let (kernel, mut agent) = kernel_with_agent().await;
    kernel
        .register_agent(AgentSpec::new("other", &agent.url, SECRET))
        .unwrap();
    let exec = kernel
        .create_execution(NewExecution::new("other", json!({})))
        .await
        .unwrap();
    let mut owner = Run::attach(&kernel, &mut agent, &exec.id).await;
    owner.api.agent_id = "other".into();
    let step = owner
        .submit(json!({"kind": "tool_call", "target": "read", "args": {}}))
        .await;
    let step_id = step["step_id"].as_str().unwrap().to_owned();
    let baseline = kernel.events(&exec.id).len();

    let intruder = AgentClient::new(&kernel.url());
    let base = format!("/v0/executions/{}", exec.id);
    let lease = Some((owner.dispatch.as_str(), owner.attempt));
    let cases = [
        ("input", "GET", base.clone(), ""),
        ("steps", "GET", format!("{base}/steps"), ""),
        ("step", "GET", format!("{base}/steps/{step_id}"), ""),
        (
            "submit",
            "POST",
            format!("{base}/steps"),
            r#"{"kind":"tool_call","target":"read","args":{}}"#,
        ),
        (
            "complete step",
            "POST",
            format!("{base}/steps/{step_id}/complete"),
            r#"{"result":{}}"#,
        ),
        (
            "fail step",
            "POST",
            format!("{base}/steps/{step_id}/fail"),
            r#"{"error":{}}"#,
        ),
        ("heartbeat", "POST", format!("{base}/heartbeat"), ""),
        (
            "complete execution",
            "POST",
            format!("{base}/complete"),
            r#"{"output":{}}"#,
        ),
        (
            "fail execution",
            "POST",
            format!("{base}/fail"),
            r#"{"error":"failed"}"#,
        ),
        (
            "publish",
            "POST",
            format!("{base}/steps/{step_id}/stream"),
            r#"{"seq":1,"data":"foreign"}"#,
        ),
    ];
    for (name, method, target, body) in cases {
        let (status, answer) = intruder.send(method, &target, lease, body).await;
        assert_eq!(status, 403, "{name}: {answer}");
    }
    assert_eq!(
        kernel.events(&exec.id).len(),
        baseline,
        "refused requests appended events"
    );
    let stored = kernel
        .steps(&exec.id)
        .into_iter()
        .find(|s| s.step_id == step_id)
        .unwrap();
    assert_eq!(
        serde_json::to_value(stored.status).unwrap(),
        json!("executing")
    );
    // The owner's lease is still the live one.
    let (status, _) = owner.post("/heartbeat", "").await;
    assert_eq!(status, 204);
    kernel.shutdown().await;
}

/// Go: TestEventsRequireExistingExecution (internal/api/ownership_test.go)
#[tokio::test]
async fn events_of_an_unknown_execution_are_404() {
    let (kernel, _agent) = kernel_with_agent().await;
    let (status, body) = client(
        "GET",
        &format!(
            "{}/v0/executions/00000000-0000-0000-0000-000000000001/events?limit=10",
            kernel.url()
        ),
        None,
        None,
    )
    .await;
    assert_eq!(status, 404, "{body}");
    kernel.shutdown().await;
}

/// Go: TestStepRoutesRequireMatchingExecution (internal/api/ownership_test.go)
///
/// A step addressed under another execution's URL is `404`, even with a valid lease of its
/// own execution.
#[tokio::test]
async fn step_routes_require_the_steps_own_execution() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let first = started(&kernel, &mut agent).await;
    let second = started(&kernel, &mut agent).await;
    let step = first
        .submit(json!({"kind": "tool_call", "target": "read", "args": {}}))
        .await;
    let step_id = step["step_id"].as_str().unwrap();
    let lease = Some((first.dispatch.as_str(), first.attempt));
    for (method, suffix, body) in [
        ("GET", "", ""),
        ("POST", "/complete", r#"{"result":{}}"#),
        ("POST", "/fail", r#"{"error":{}}"#),
        ("POST", "/stream", r#"{"seq":1,"data":"x"}"#),
    ] {
        let target = format!("/v0/executions/{}/steps/{step_id}{suffix}", second.id);
        let (status, answer) = first.api.send(method, &target, lease, body).await;
        assert_eq!(status, 404, "{method}{suffix}: {answer}");
    }
    kernel.shutdown().await;
}

/// Go: TestStreamSubscriptionRequiresExistingExecutionAndBearer (internal/api/ownership_test.go)
#[tokio::test]
async fn the_stream_needs_the_bearer_and_an_existing_execution() {
    let (kernel, mut agent) = kernel_with_token("admin-token").await;
    let run = started(&kernel, &mut agent).await;
    let target = format!("/v0/executions/{}/stream", run.id);
    let response = signed("GET", &format!("{}{target}", kernel.url()), &target, "")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let (status, _) = client(
        "GET",
        &format!(
            "{}/v0/executions/00000000-0000-0000-0000-000000000001/stream",
            kernel.url()
        ),
        Some("admin-token"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    kernel.shutdown().await;
}

/// Go: TestAdministrativeRoutesRequireBearer (internal/api/ownership_test.go)
///
/// With a bearer token configured, the client and admin routes refuse anonymous callers
/// and agent signatures alike.
#[tokio::test]
async fn administrative_routes_require_the_bearer() {
    let (kernel, _agent) = kernel_with_token("admin-token").await;
    let url = kernel.url();
    for (method, path) in [
        ("POST", "/v0/executions"),
        ("GET", "/v0/executions"),
        ("GET", "/v0/executions/id/events"),
        ("POST", "/v0/executions/id/cancel"),
        ("POST", "/v0/agents"),
        ("GET", "/v0/agents"),
        ("GET", "/v0/agents/hello"),
        ("DELETE", "/v0/agents/hello"),
        ("POST", "/v0/policies/hello"),
        ("POST", "/v0/policies/hello/test"),
        ("GET", "/v0/approvals"),
        ("GET", "/v0/approvals/id"),
        ("POST", "/v0/approvals/id/grant"),
        ("POST", "/v0/approvals/id/deny"),
    ] {
        let (status, body) = client(method, &format!("{url}{path}"), None, None).await;
        assert_eq!(status, 401, "anonymous {method} {path}: {body}");
        let response = signed(method, &format!("{url}{path}"), path, "")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "agent-signed {method} {path}");
    }
    let (status, _) = client(
        "GET",
        &format!("{url}/v0/agents"),
        Some("admin-token"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// internal/api/signature_test.go

/// Go: TestAgentReadSignatureCannotBeReusedForAnotherExecution (internal/api/signature_test.go)
#[tokio::test]
async fn a_read_signature_cannot_be_replayed_elsewhere() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let first = started(&kernel, &mut agent).await;
    let second = started(&kernel, &mut agent).await;
    let url = kernel.url();
    let target = format!("/v0/executions/{}", first.id);
    let ts = now_secs().to_string();
    let signature = RequestSignature {
        method: "GET",
        target: &target,
        timestamp: &ts,
        dispatch_id: "",
        attempt: "",
    }
    .sign(&Secret::new(SECRET), b"");
    let http = reqwest::Client::new();
    let send = |path: String| {
        http.get(format!("{url}{path}"))
            .header("Rebuno-Agent-Id", "hello")
            .header("Rebuno-Timestamp", &ts)
            .header("Rebuno-Signature", &signature)
            .send()
    };
    assert_eq!(send(target.clone()).await.unwrap().status(), 200);
    let elsewhere = format!("/v0/executions/{}", second.id);
    assert_eq!(send(elsewhere).await.unwrap().status(), 401);

    // old timestamp
    let (status, _) = first
        .api
        .send_at("GET", &target, None, "", now_secs() - 600)
        .await;
    assert_eq!(status, 401);
    // legacy body signature
    let response = http
        .get(format!("{url}{target}"))
        .header("Rebuno-Agent-Id", "hello")
        .header("Rebuno-Signature", sign_webhook(&Secret::new(SECRET), b""))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// internal/api/api_key_test.go

async fn key_request(kernel: &DevKernel, method: &str, path: &str, token: &str) -> (u16, Value) {
    let token = (!token.is_empty()).then_some(token);
    client(method, &format!("{}{path}", kernel.url()), token, None).await
}

async fn issue(kernel: &DevKernel, token: Option<&str>, body: &str) -> (u16, Value) {
    client(
        "POST",
        &format!("{}/v0/api-keys", kernel.url()),
        token,
        Some(body),
    )
    .await
}

/// Go: TestAPIKeyLifecycle (internal/api/api_key_test.go)
#[tokio::test]
async fn api_key_lifecycle() {
    let (kernel, _agent) = kernel_with_token("bootstrap").await;
    let response = reqwest::Client::new()
        .post(format!("{}/v0/api-keys", kernel.url()))
        .header("Authorization", "Bearer bootstrap")
        .body(r#"{"name":"reader","scopes":["executions:read"]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["cache-control"], "no-store");
    let issued: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    let id = issued["id"].as_str().unwrap().to_owned();
    let token = issued["token"].as_str().unwrap().to_owned();
    assert!(!token.is_empty());

    assert_eq!(
        key_request(&kernel, "GET", "/v0/executions", &token)
            .await
            .0,
        200
    );
    let (status, _) = issue(
        &kernel,
        Some(&token),
        r#"{"name":"escalated","scopes":["api_keys:manage"]}"#,
    )
    .await;
    assert_eq!(status, 403, "escalation");
    let (status, listing) = key_request(&kernel, "GET", "/v0/api-keys", "bootstrap").await;
    let text = listing.to_string();
    assert_eq!(status, 200);
    assert!(
        !text.contains(&token) && !text.contains("secret_hash") && !text.contains("\"token\""),
        "unsafe listing: {text}"
    );

    let (status, rotated) = key_request(
        &kernel,
        "POST",
        &format!("/v0/api-keys/{id}/rotate"),
        "bootstrap",
    )
    .await;
    assert_eq!(status, 200, "{rotated}");
    let fresh = rotated["token"].as_str().unwrap().to_owned();
    assert_ne!(fresh, token);
    assert_eq!(rotated["id"], json!(id));
    assert_eq!(
        key_request(&kernel, "GET", "/v0/executions", &token)
            .await
            .0,
        401
    );
    assert_eq!(
        key_request(&kernel, "GET", "/v0/executions", &fresh)
            .await
            .0,
        200
    );
    for _ in 0..2 {
        let (status, _) = key_request(
            &kernel,
            "DELETE",
            &format!("/v0/api-keys/{id}"),
            "bootstrap",
        )
        .await;
        assert_eq!(status, 204);
    }
    assert_eq!(
        key_request(&kernel, "GET", "/v0/executions", &fresh)
            .await
            .0,
        401
    );
    let (status, _) = key_request(
        &kernel,
        "POST",
        &format!("/v0/api-keys/{id}/rotate"),
        "bootstrap",
    )
    .await;
    assert_eq!(status, 409, "a revoked key cannot be revived");
    for bad in [
        "BOOTSTRAP".to_owned(),
        "rbk_bad.secret".to_owned(),
        format!("{fresh}x"),
        String::new(),
    ] {
        let (status, _) = key_request(&kernel, "GET", "/v0/executions", &bad).await;
        assert_eq!(status, 401, "credential {bad:?}");
    }
    kernel.shutdown().await;
}

/// Go: TestAPIKeyScopes (internal/api/api_key_test.go)
///
/// A key of one scope reaches exactly the routes of that scope (`403` elsewhere, never
/// `401`/`403`/`5xx` on its own); a client key never stands in for an agent signature; the
/// policy test route needs both `policies:write` and `executions:read`.
#[tokio::test]
async fn api_key_scopes_gate_each_route() {
    let (kernel, _agent) = kernel_with_token("bootstrap").await;
    let scopes = [
        "executions:read",
        "executions:write",
        "agents:read",
        "agents:write",
        "approvals:read",
        "approvals:write",
        "policies:write",
        "api_keys:manage",
    ];
    let routes = [
        ("GET", "/v0/executions", "executions:read"),
        ("GET", "/v0/executions/invalid", "executions:read"),
        ("GET", "/v0/executions/invalid/steps", "executions:read"),
        (
            "GET",
            "/v0/executions/invalid/steps/invalid",
            "executions:read",
        ),
        ("GET", "/v0/executions/invalid/events", "executions:read"),
        ("GET", "/v0/executions/invalid/stream", "executions:read"),
        ("POST", "/v0/executions", "executions:write"),
        ("POST", "/v0/executions/invalid/cancel", "executions:write"),
        ("GET", "/v0/agents", "agents:read"),
        ("GET", "/v0/agents/missing", "agents:read"),
        ("POST", "/v0/agents", "agents:write"),
        ("DELETE", "/v0/agents/missing", "agents:write"),
        ("GET", "/v0/approvals", "approvals:read"),
        ("GET", "/v0/approvals/invalid", "approvals:read"),
        ("POST", "/v0/approvals/invalid/grant", "approvals:write"),
        ("POST", "/v0/approvals/invalid/deny", "approvals:write"),
        ("POST", "/v0/policies/missing", "policies:write"),
        ("GET", "/v0/api-keys", "api_keys:manage"),
        ("POST", "/v0/api-keys", "api_keys:manage"),
        ("DELETE", "/v0/api-keys/missing", "api_keys:manage"),
        ("POST", "/v0/api-keys/missing/rotate", "api_keys:manage"),
    ];
    let mut wrong = Vec::new();
    for scope in scopes {
        let issued = kernel.create_api_key("test", &[scope]).unwrap();
        let token = issued.as_str();
        for (method, path, needs) in routes {
            let (status, body) = key_request(&kernel, method, path, token).await;
            let ok = if scope == needs {
                status != 401 && status != 403 && status < 500
            } else {
                status == 403
            };
            if !ok {
                wrong.push(format!("{scope}: {method} {path} -> {status} {body}"));
            }
        }
        let (status, _) =
            key_request(&kernel, "POST", "/v0/executions/invalid/heartbeat", token).await;
        if status != 401 {
            wrong.push(format!("{scope}: agent route -> {status}"));
        }
        let (status, _) = key_request(&kernel, "POST", "/v0/policies/missing/test", token).await;
        if status != 403 {
            wrong.push(format!("{scope}: policy test with one scope -> {status}"));
        }
    }
    let both = kernel
        .create_api_key("policy-test", &["policies:write", "executions:read"])
        .unwrap();
    let (status, body) =
        key_request(&kernel, "POST", "/v0/policies/missing/test", both.as_str()).await;
    if status != 400 {
        wrong.push(format!("policy test with both scopes -> {status} {body}"));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    kernel.shutdown().await;
}

/// Go: TestAPIKeyValidationAndDevAuthentication (internal/api/api_key_test.go)
#[tokio::test]
async fn api_key_validation_and_dev_authentication() {
    let (kernel, _agent) = kernel_with_agent().await;
    for body in [
        r"{}",
        r#"{"name":"test","scopes":[]}"#,
        r#"{"name":"test","scopes":["*"]}"#,
        r#"{"name":"test","scopes":["executions:read","unknown"]}"#,
    ] {
        assert_eq!(issue(&kernel, None, body).await.0, 400, "{body}");
    }
    assert_eq!(
        key_request(&kernel, "GET", "/v0/executions", "invalid")
            .await
            .0,
        401,
        "dev mode still checks a supplied credential"
    );
    assert_eq!(
        key_request(&kernel, "GET", "/v0/executions", "").await.0,
        200
    );
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// internal/api/stream_test.go

/// Go: TestStreamEndToEnd (internal/api/stream_test.go)
///
/// A delta the agent publishes for a step reaches an open SSE subscriber as a
/// `data: {step_id, seq, data}` frame.
#[tokio::test]
async fn a_published_delta_reaches_the_sse_stream() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = started(&kernel, &mut agent).await;
    let step = run
        .submit(json!({"kind": "llm_call", "target": "m", "args": {}}))
        .await;
    let step_id = step["step_id"].as_str().unwrap().to_owned();
    let mut sse = reqwest::get(format!("{}/v0/executions/{}/stream", kernel.url(), run.id))
        .await
        .unwrap();
    assert_eq!(sse.status(), 200);
    assert!(
        sse.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let (status, body) = run
        .post(
            &format!("/steps/{step_id}/stream"),
            r#"{"seq": 7, "data": "hello world"}"#,
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let mut text = String::new();
    let frame = loop {
        let chunk = tokio::time::timeout(Duration::from_secs(5), sse.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        if let Some(line) = text.lines().find_map(|l| l.strip_prefix("data: ")) {
            break serde_json::from_str::<Value>(line).unwrap();
        }
    };
    assert_eq!(
        frame,
        json!({"step_id": step_id, "seq": 7, "data": "hello world"})
    );
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Pre-redesign internal/api/handler_test.go: scenarios that survive on today's routes.

/// Go: TestCreateExecution_InvalidJSON, TestCreateExecution_NilBody,
/// TestCreateExecution_Success (internal/api/handler_test.go, pre-redesign)
#[tokio::test]
async fn create_execution_decodes_its_body() {
    let (kernel, _agent) = kernel_with_agent().await;
    let url = format!("{}/v0/executions", kernel.url());
    let (status, body) = client("POST", &url, None, Some("{not json")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("validation_error"))
    );
    let (status, body) = client("POST", &url, None, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("validation_error"))
    );
    let (status, body) = client(
        "POST",
        &url,
        None,
        Some(r#"{"agent_id":"hello","input":{"task":"test"}}"#),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    kernel.shutdown().await;
}

/// Go: TestGetEvents_DefaultPagination, TestGetEvents_CustomPagination,
/// TestGetEvents_InvalidAfterSequence (internal/api/handler_test.go, pre-redesign)
///
/// Today's parameter is `after_seq`; Go's handler reads an unparsable value as 0.
#[tokio::test]
async fn events_page_with_defaults_and_lenient_after_seq() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = started(&kernel, &mut agent).await;
    let base = format!("{}/v0/executions/{}/events", kernel.url(), run.id);
    let (status, events) = client("GET", &base, None, None).await;
    assert_eq!(status, 200, "{events}");
    assert!(!events.as_array().unwrap().is_empty());
    let (status, page) = client("GET", &format!("{base}?after_seq=0&limit=5"), None, None).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.as_array().unwrap().len() <= 5);
    let (status, lenient) = client("GET", &format!("{base}?after_seq=abc"), None, None).await;
    assert_eq!(status, 200, "{lenient}");
    assert_eq!(lenient, events);
    kernel.shutdown().await;
}

/// Go: TestListExecutions_ValidStatus, TestListExecutions_EmptyResult
/// (internal/api/handler_test.go, pre-redesign)
///
/// Every execution status is a valid filter, and an empty page still carries its
/// `executions` array.
#[tokio::test]
async fn list_executions_filters_by_any_status() {
    let (kernel, _agent) = kernel_with_agent().await;
    for status in [
        "pending",
        "running",
        "blocked",
        "completed",
        "failed",
        "cancelled",
    ] {
        let (code, page) = client(
            "GET",
            &format!("{}/v0/executions?status={status}", kernel.url()),
            None,
            None,
        )
        .await;
        assert_eq!(code, 200, "{status}: {page}");
        assert_eq!(page["executions"], json!([]), "{status}: {page}");
    }
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Pre-redesign internal/api/middleware_test.go: the bearer check survives on today's routes.

/// Go: TestBearerAuthMiddleware (internal/api/middleware_test.go, pre-redesign)
///
/// Only `Authorization: Bearer <token>` exactly is accepted; every refusal is
/// `401 unauthorized`.
#[tokio::test]
async fn the_bearer_header_must_be_exact() {
    let (kernel, _agent) = kernel_with_token("test-secret-token").await;
    let url = format!("{}/v0/executions", kernel.url());
    let http = reqwest::Client::new();
    for (name, header, want) in [
        ("valid token", Some("Bearer test-secret-token"), 200),
        ("wrong token", Some("Bearer wrong-token"), 401),
        ("missing header", None, 401),
        ("empty bearer", Some("Bearer "), 401),
        ("wrong scheme", Some("Basic dXNlcjpwYXNz"), 401),
        ("token without scheme", Some("test-secret-token"), 401),
        ("bearer lowercase", Some("bearer test-secret-token"), 401),
        ("extra spaces", Some("Bearer  test-secret-token"), 401),
    ] {
        let mut request = http.get(&url);
        if let Some(header) = header {
            request = request.header("Authorization", header);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let body: Value =
            serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null);
        assert_eq!(status, want, "{name}: {body}");
        if want == 401 {
            assert_eq!(body["code"], "unauthorized", "{name}");
        }
    }
    kernel.shutdown().await;
}
