//! Policies (deny, require_approval) and approvals (grant, deny, expiry) over HTTP.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{AgentClient, FakeAgent, SECRET, client, event_types, kernel_with_agent};
use rebuno::wire::{ApprovalStatus, ExecutionStatus};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::json;

const BUNDLE: &str = r#"
default_action: allow
rules:
  - id: no-rm
    when: { step_kind: tool_call, target: "rm*" }
    then: { decision: deny, reason: destructive }
  - id: gate-email
    when: { target: send_email, arguments: { to: { regex: "@example\\.com$" } } }
    then:
      decision: require_approval
      approval_config: { approvers: [alice], message: check the recipient }
"#;

fn submit(target: &str, args: serde_json::Value) -> String {
    json!({"kind": "tool_call", "target": target, "args": args, "idempotency": "safe_to_retry", "resources": []})
        .to_string()
}

#[tokio::test]
async fn policy_denies_and_replays_the_denial() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let (status, _) = client(
        "POST",
        &format!("{}/v0/policies/hello", kernel.url()),
        None,
        Some(&json!({"bundle": BUNDLE}).to_string()),
    )
    .await;
    assert_eq!(status, 204);
    let (status, body) = client(
        "POST",
        &format!("{}/v0/policies/hello", kernel.url()),
        None,
        Some(r#"{"bundle": "rules: [{then: {decision: allow}}]"}"#),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("validation_error"))
    );
    let (status, _) = client(
        "POST",
        &format!("{}/v0/policies/ghost", kernel.url()),
        None,
        Some(r#"{"bundle": ""}"#),
    )
    .await;
    assert_eq!(status, 404);
    let (_, agent_json) = client(
        "GET",
        &format!("{}/v0/agents/hello", kernel.url()),
        None,
        None,
    )
    .await;
    assert_eq!(agent_json["policy_bundle"], BUNDLE);

    let exec = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let d = agent.next().await.dispatch_id;
    let api = AgentClient::new(&kernel.url());
    let steps = format!("/v0/executions/{}/steps", exec.id);
    let (_, denied) = api
        .send(
            "POST",
            &steps,
            Some((&d, 1)),
            &submit("rm_rf", json!({"path": "/"})),
        )
        .await;
    assert_eq!(denied["decision"], "denied");
    assert_eq!(denied["reason"], "destructive");
    assert_eq!(denied["rule_id"], "no-rm");
    let step_id = denied["step_id"].as_str().unwrap().to_owned();
    let (_, allowed) = api
        .send("POST", &steps, Some((&d, 1)), &submit("search", json!({})))
        .await;
    assert_eq!(allowed["decision"], "proceed");

    // Re-delivery: the denial replays without consulting policy.
    kernel.set_policy("hello", "default_action: allow").unwrap();
    kernel.redeliver(&exec.id).unwrap();
    agent.next().await;
    let (_, again) = api
        .send(
            "POST",
            &steps,
            Some((&d, 2)),
            &submit("rm_rf", json!({"path": "/"})),
        )
        .await;
    assert_eq!(
        again,
        json!({"decision": "denied", "step_id": step_id, "reason": "destructive", "rule_id": "no-rm"})
    );

    let events = kernel.events(&exec.id);
    let denied_event = events.iter().find(|e| e.kind == "step.denied").unwrap();
    assert_eq!(denied_event.payload["rule_id"], "no-rm");
    assert_eq!(
        denied_event.payload["error"],
        json!({"reason": "destructive", "rule_id": "no-rm"})
    );
    assert_eq!(
        denied_event.payload["policy_hash"].as_str().unwrap().len(),
        64
    );
    let allowed_event = events.iter().find(|e| e.kind == "step.allowed").unwrap();
    assert_eq!(allowed_event.payload["rule_id"], "default");
    assert_eq!(allowed_event.payload["reason"], "default allow");
    kernel.shutdown().await;
}

#[tokio::test]
async fn approval_grant_resumes_with_a_new_dispatch() {
    let mut agent = FakeAgent::start().await;
    let kernel = DevKernel::builder()
        .agent(AgentSpec::new("hello", &agent.url, SECRET).policy_yaml(BUNDLE))
        .start()
        .await
        .unwrap();
    let exec = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let first = agent.next().await;
    let api = AgentClient::new(&kernel.url());
    let steps = format!("/v0/executions/{}/steps", exec.id);
    let email = submit("send_email", json!({"to": "ops@example.com"}));
    let (_, blocked) = api
        .send("POST", &steps, Some((&first.dispatch_id, 1)), &email)
        .await;
    assert_eq!(blocked["decision"], "blocked");
    let approval_id = blocked["approval_id"].as_str().unwrap().to_owned();
    let step_id = blocked["step_id"].as_str().unwrap().to_owned();
    let blocked_exec = kernel
        .wait_until(&exec.id, Duration::from_secs(2), |s| {
            s == ExecutionStatus::Blocked
        })
        .await
        .unwrap();
    assert_eq!(blocked_exec.status, ExecutionStatus::Blocked);

    // The block retired the dispatch: the same attempt is fenced off.
    let (status, body) = api
        .send(
            "POST",
            &steps,
            Some((&first.dispatch_id, 1)),
            &submit("search", json!({})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("lease_superseded"))
    );

    // Client view of approvals.
    let (status, list) = client(
        "GET",
        &format!("{}/v0/approvals?status=pending", kernel.url()),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["approvers"], json!(["alice"]));
    assert_eq!(list[0]["message"], "check the recipient");
    assert_eq!(kernel.approvals().len(), 1);

    // Only a listed approver may decide.
    let grant = format!("{}/v0/approvals/{approval_id}/grant", kernel.url());
    let (status, _) = client(
        "POST",
        &grant,
        None,
        Some(r#"{"rationale": "", "decided_by": "mallory"}"#),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = client(
        "POST",
        &grant,
        None,
        Some(r#"{"rationale": "fine", "decided_by": "alice"}"#),
    )
    .await;
    assert_eq!(status, 204);
    let (status, body) = client(
        "POST",
        &grant,
        None,
        Some(r#"{"rationale": "again", "decided_by": "alice"}"#),
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (409, Some("conflict")));
    let (_, one) = client(
        "GET",
        &format!("{}/v0/approvals/{approval_id}", kernel.url()),
        None,
        None,
    )
    .await;
    assert_eq!(one["status"], "granted");
    assert_eq!(one["decided_by"], "alice");

    // Resumed: a new dispatch, attempt 1; the re-submit runs the approved step.
    let second = agent.next().await;
    assert_ne!(second.dispatch_id, first.dispatch_id);
    assert_eq!(second.attempt, 1);
    let (_, proceed) = api
        .send("POST", &steps, Some((&second.dispatch_id, 1)), &email)
        .await;
    assert_eq!(proceed, json!({"decision": "proceed", "step_id": step_id}));
    let types = event_types(&kernel, &exec.id);
    let tail: Vec<&str> = types
        .iter()
        .map(String::as_str)
        .filter(|t| *t != "dispatch.acked")
        .skip(3)
        .collect();
    assert_eq!(
        tail,
        [
            "step.proposed",
            "step.awaiting_approval",
            "approval.requested",
            "execution.blocked",
            "approval.granted",
            "step.allowed",
            "execution.resumed",
            "dispatch.queued",
            "step.executing",
        ]
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn approval_deny_and_expiry() {
    let mut agent = FakeAgent::start().await;
    let kernel = DevKernel::builder()
        .approval_timeout(Duration::from_millis(200))
        .agent(AgentSpec::new("hello", &agent.url, SECRET).policy_yaml(
            "rules:\n  - id: gate\n    when: { step_kind: tool_call }\n    then: { decision: require_approval }\n",
        ))
        .start()
        .await
        .unwrap();
    let api = AgentClient::new(&kernel.url());

    // Denied by a human: the re-submit is denied with the rationale.
    let exec = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let d = agent.next().await.dispatch_id;
    let steps = format!("/v0/executions/{}/steps", exec.id);
    let body = submit("transfer", json!({"amount": 5}));
    let (_, blocked) = api.send("POST", &steps, Some((&d, 1)), &body).await;
    let approval = blocked["approval_id"].as_str().unwrap().to_owned();
    kernel
        .decide_as(&approval, false, "bob", "too risky")
        .unwrap();
    let d2 = agent.next().await.dispatch_id;
    let (_, denied) = api.send("POST", &steps, Some((&d2, 1)), &body).await;
    assert_eq!(denied["decision"], "denied");
    assert_eq!(denied["reason"], "too risky");
    assert!(kernel.approvals().is_empty());

    // Nobody decides: the sweeper expires it (approval_timeout).
    let exec = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let d = agent.next().await.dispatch_id;
    let steps = format!("/v0/executions/{}/steps", exec.id);
    let (_, blocked) = api.send("POST", &steps, Some((&d, 1)), &body).await;
    assert_eq!(blocked["decision"], "blocked");
    let d2 = agent.next().await.dispatch_id;
    let (_, denied) = api.send("POST", &steps, Some((&d2, 1)), &body).await;
    assert_eq!(denied["reason"], "approval_timeout");
    let expired = kernel
        .events(&exec.id)
        .into_iter()
        .find(|e| e.kind == "approval.expired")
        .unwrap();
    assert_eq!(expired.payload["rationale"], "timeout");
    assert_eq!(expired.payload["status"], ApprovalStatus::Expired.as_str());

    // Cancel while waiting: the approval expires and the step is denied.
    let exec = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let d = agent.next().await.dispatch_id;
    let steps = format!("/v0/executions/{}/steps", exec.id);
    api.send("POST", &steps, Some((&d, 1)), &body).await;
    let (status, _) = client(
        "POST",
        &format!("{}/v0/executions/{}/cancel", kernel.url(), exec.id),
        None,
        None,
    )
    .await;
    assert_eq!(status, 204);
    let (status, body) = client(
        "POST",
        &format!("{}/v0/executions/{}/cancel", kernel.url(), exec.id),
        None,
        None,
    )
    .await;
    assert_eq!(
        (status, body),
        (
            409,
            json!({"code": "conflict", "message": "conflict: execution is already terminal"})
        )
    );
    let types = event_types(&kernel, &exec.id);
    assert!(
        types.ends_with(&[
            "approval.expired".into(),
            "step.denied".into(),
            "execution.cancelled".into()
        ]),
        "{types:?}"
    );
    kernel.shutdown().await;
}
