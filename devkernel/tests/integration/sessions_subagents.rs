//! Sessions, `previous`/`state`, idempotency, listing, suspend and subagents.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{AgentClient, client, event_types, kernel_with_agent};
use rebuno::wire::ExecutionStatus;
use rebuno_devkernel::NewExecution;
use serde_json::json;

#[tokio::test]
async fn session_turns_run_one_at_a_time_and_chain_state() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let api = AgentClient::new(&kernel.url());
    let first = kernel
        .create_execution(NewExecution::new("hello", json!(1)).session("chat:1"))
        .await
        .unwrap();
    let second = kernel
        .create_execution(NewExecution::new("hello", json!(2)).session("chat:1"))
        .await
        .unwrap();
    assert_eq!(first.status, ExecutionStatus::Running);
    assert_eq!(second.status, ExecutionStatus::Pending);
    assert_eq!(event_types(&kernel, &second.id), ["execution.created"]);

    let d1 = agent.next().await;
    assert_eq!(d1.execution_id, first.id.to_string());
    let (_, prev) = api
        .send(
            "GET",
            &format!("/v0/executions/{}/previous", first.id),
            None,
            "",
        )
        .await;
    assert_eq!(prev, json!({"state": null}));
    let (status, _) = api
        .send(
            "POST",
            &format!("/v0/executions/{}/complete", first.id),
            Some((&d1.dispatch_id, 1)),
            r#"{"output": {"turn": 1}, "state": {"count": 1}}"#,
        )
        .await;
    assert_eq!(status, 204);

    // The second turn starts with the first as its parent.
    let d2 = agent.next().await;
    assert_eq!(d2.execution_id, second.id.to_string());
    let second_now = kernel.execution(&second.id).unwrap();
    assert_eq!(second_now.status, ExecutionStatus::Running);
    assert_eq!(second_now.parent_execution_id, Some(first.id.clone()));
    let started = kernel
        .events(&second.id)
        .into_iter()
        .find(|e| e.kind == "execution.started")
        .unwrap();
    assert_eq!(started.payload["parent_execution_id"], json!(first.id));
    assert_eq!(started.payload["session"], "chat:1");
    let (_, prev) = api
        .send(
            "GET",
            &format!("/v0/executions/{}/previous", second.id),
            None,
            "",
        )
        .await;
    assert_eq!(prev, json!({"state": {"count": 1}}));

    // Explicit parents must be completed executions of the agent, in a new session.
    let url = format!("{}/v0/executions", kernel.url());
    let body = json!({"agent_id": "hello", "parent_execution_id": second.id}).to_string();
    assert_eq!(client("POST", &url, None, Some(&body)).await.0, 409);
    let body = json!({"agent_id": "hello", "parent_execution_id": first.id, "session": "chat:1"})
        .to_string();
    assert_eq!(client("POST", &url, None, Some(&body)).await.0, 409);
    let body = json!({"agent_id": "hello", "parent_execution_id": first.id, "session": "fork:1"})
        .to_string();
    let (status, forked) = client("POST", &url, None, Some(&body)).await;
    assert_eq!(status, 201);
    assert_eq!(forked["parent_execution_id"], json!(first.id));

    // Idempotency keys return the existing execution.
    let body = r#"{"agent_id": "hello", "input": 1, "idempotency_key": "k1"}"#;
    let (s1, a) = client("POST", &url, None, Some(body)).await;
    let (s2, b) = client("POST", &url, None, Some(body)).await;
    assert_eq!((s1, s2), (201, 201));
    assert_eq!(a["id"], b["id"]);
    assert_eq!(a["idempotency_key"], "k1");

    // Listing: newest first, filters, cursor.
    let (_, page) = client("GET", &format!("{url}?session=chat:1"), None, None).await;
    let ids: Vec<&str> = page["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [second.id.to_string(), first.id.to_string()]);
    assert!(page.get("next_cursor").is_none());
    let (_, page) = client("GET", &format!("{url}?limit=1&agent_id=hello"), None, None).await;
    assert_eq!(page["executions"].as_array().unwrap().len(), 1);
    let cursor = page["next_cursor"].as_str().unwrap();
    let (_, next) = client("GET", &format!("{url}?limit=1&cursor={cursor}"), None, None).await;
    assert!(next["executions"][0]["id"].as_str().unwrap() < cursor);
    let (_, done) = client("GET", &format!("{url}?status=completed"), None, None).await;
    assert_eq!(done["executions"].as_array().unwrap().len(), 1);
    assert_eq!(
        client("GET", &format!("{url}?limit=x"), None, None).await.0,
        400
    );
    assert_eq!(
        client("GET", &format!("{url}?cursor=nope"), None, None)
            .await
            .0,
        400
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn subagent_suspend_settle_resume() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let api = AgentClient::new(&kernel.url());
    let parent = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let d = agent.next().await.dispatch_id;
    let base = format!("/v0/executions/{}", parent.id);
    let submit = r#"{"kind": "tool_call", "target": "delegate", "args": {"q": "x"}, "idempotency": "safe_to_retry", "resources": []}"#;
    let (_, proceed) = api
        .send("POST", &format!("{base}/steps"), Some((&d, 1)), submit)
        .await;
    let step_id = proceed["step_id"].as_str().unwrap().to_owned();

    // Nothing waits yet: suspend is refused.
    let (status, body) = api
        .send("POST", &format!("{base}/suspend"), Some((&d, 1)), "")
        .await;
    assert_eq!((status, body), (200, json!({"suspended": false})));

    let url = format!("{}/v0/executions", kernel.url());
    let spawn = |step: &str| {
        json!({"agent_id": "hello", "input": {"q": "x"}, "spawned_by": {"execution_id": parent.id, "step_id": step}}).to_string()
    };
    let (status, _) = client("POST", &url, None, Some(&spawn("nope"))).await;
    assert_eq!(status, 400);
    let (status, child) = client("POST", &url, None, Some(&spawn(&step_id))).await;
    assert_eq!(status, 201);
    assert_eq!(child["idempotency_key"], step_id.as_str());
    let (_, again) = client("POST", &url, None, Some(&spawn(&step_id))).await;
    assert_eq!(again["id"], child["id"]);
    let child_id = child["id"].as_str().unwrap().to_owned();
    let created = kernel.events(&child_id).into_iter().next().unwrap();
    assert_eq!(created.payload["spawned_by"]["step_id"], step_id.as_str());

    let (_, body) = api
        .send("POST", &format!("{base}/suspend"), Some((&d, 1)), "")
        .await;
    assert_eq!(body, json!({"suspended": true}));
    let blocked = kernel
        .events(&parent.id)
        .into_iter()
        .rev()
        .find(|e| e.kind == "execution.blocked")
        .unwrap();
    assert_eq!(blocked.payload["reason"], "awaiting_steps");
    assert_eq!(
        kernel.execution(&parent.id).unwrap().status,
        ExecutionStatus::Blocked
    );

    // The child runs and completes; the parent step settles and the parent resumes.
    let child_delivery = agent.next().await;
    assert_eq!(child_delivery.execution_id, child_id.to_string());
    let (status, _) = api
        .send(
            "POST",
            &format!("/v0/executions/{child_id}/complete"),
            Some((&child_delivery.dispatch_id, 1)),
            r#"{"output": {"answer": 42}}"#,
        )
        .await;
    assert_eq!(status, 204);
    let resumed = agent.next().await;
    assert_eq!(resumed.execution_id, parent.id.to_string());
    let step = kernel
        .steps(&parent.id)
        .into_iter()
        .find(|s| s.step_id == step_id)
        .unwrap();
    assert_eq!(step.status, "succeeded");
    assert_eq!(step.result, Some(json!({"answer": 42})));
    let (_, replay) = api
        .send(
            "POST",
            &format!("{base}/steps"),
            Some((&resumed.dispatch_id, 1)),
            submit,
        )
        .await;
    assert_eq!(replay["decision"], "replay");
    assert_eq!(replay["result"], json!({"answer": 42}));

    // A live child is cancelled when its parent ends.
    let (_, proceed) = api
        .send(
            "POST",
            &format!("{base}/steps"),
            Some((&resumed.dispatch_id, 1)),
            &submit.replace("\"x\"", "\"y\""),
        )
        .await;
    let second_step = proceed["step_id"].as_str().unwrap();
    let (_, child2) = client("POST", &url, None, Some(&spawn(second_step))).await;
    let child2 = child2["id"].as_str().unwrap().to_owned();
    agent.next().await;
    let (status, _) = api
        .send(
            "POST",
            &format!("{base}/fail"),
            Some((&resumed.dispatch_id, 1)),
            r#"{"error": "agent_error: boom"}"#,
        )
        .await;
    assert_eq!(status, 204);
    let cancelled = kernel
        .wait_terminal(&child2, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(cancelled.status, ExecutionStatus::Cancelled);
    assert_eq!(cancelled.failure_reason, "parent_agent_terminal");
    assert_eq!(
        kernel.execution(&parent.id).unwrap().failure_reason,
        "agent_error: boom"
    );
    kernel.shutdown().await;
}
