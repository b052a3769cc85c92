//! Drives the HTTP API end to end with a fake agent: deliver, submit, complete, re-deliver,
//! replay, complete the execution.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{AgentClient, client, event_types, kernel_with_agent};
use rebuno::wire::ExecutionStatus;
use rebuno_devkernel::identity;
use serde_json::json;

const SUBMIT: &str = r#"{"kind": "tool_call", "target": "search", "args": {"query": "rust"}, "idempotency": "safe_to_retry", "resources": []}"#;

#[tokio::test]
async fn deliver_submit_redeliver_replay_complete() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let (status, created) = client(
        "POST",
        &format!("{}/v0/executions", kernel.url()),
        None,
        Some(r#"{"agent_id":"hello","input":{"q":"rust"}}"#),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["status"], "running");
    assert_eq!(created["input"], json!({"q": "rust"}));
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(id.parse::<uuid::Uuid>().unwrap().get_version_num(), 7);

    let first = agent.next().await;
    assert_eq!(first.execution_id, id.to_string());
    assert_eq!(first.attempt, 1);
    assert_eq!(
        first.raw,
        format!(
            r#"{{"execution_id":"{id}","dispatch_id":"{}","dispatch_attempt":1,"lease_timeout_seconds":120}}"#,
            first.dispatch_id
        )
    );
    let d = first.dispatch_id.clone();
    let agent_api = AgentClient::new(&kernel.url());
    let base = format!("/v0/executions/{id}");

    // Signed read without lease headers.
    let (status, exec) = agent_api.send("GET", &base, None, "").await;
    assert_eq!(status, 200);
    assert_eq!(exec["agent_id"], "hello");

    // Submit: proceed with the protocol's step id.
    let hash = identity::args_hash(br#"{"query": "rust"}"#).unwrap();
    let step0 = identity::step_id(&id, "tool_call", "search", &hash, 0);
    let step1 = identity::step_id(&id, "tool_call", "search", &hash, 1);
    let (status, decision) = agent_api
        .send("POST", &format!("{base}/steps"), Some((&d, 1)), SUBMIT)
        .await;
    assert_eq!(status, 200);
    assert_eq!(decision, json!({"decision": "proceed", "step_id": step0}));

    let (status, decision) = agent_api
        .send(
            "POST",
            &format!("{base}/steps/{step0}/complete"),
            Some((&d, 1)),
            r#"{"result": ["r1", "r2"]}"#,
        )
        .await;
    assert_eq!((status, decision), (200, json!({"decision": "recorded"})));

    // Completing again replays the recorded result.
    let (status, decision) = agent_api
        .send(
            "POST",
            &format!("{base}/steps/{step0}/complete"),
            Some((&d, 1)),
            r#"{"result": 1}"#,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(decision["decision"], "replay");
    assert_eq!(decision["result"], json!(["r1", "r2"]));

    let (status, _) = agent_api
        .send("POST", &format!("{base}/heartbeat"), Some((&d, 1)), "")
        .await;
    assert_eq!(status, 204);

    // Crash: re-deliver the same dispatch with attempt 2.
    assert_eq!(kernel.redeliver(&id).unwrap(), 2);
    let second = agent.next().await;
    assert_eq!(
        (second.dispatch_id.as_str(), second.attempt),
        (d.as_str(), 2)
    );

    // The old attempt is fenced off.
    let (status, body) = agent_api
        .send("POST", &format!("{base}/heartbeat"), Some((&d, 1)), "")
        .await;
    assert_eq!(status, 409);
    assert_eq!(
        body,
        json!({"code": "lease_superseded", "message": "dispatch lease superseded"})
    );
    let (status, body) = agent_api
        .send("POST", &format!("{base}/steps"), Some((&d, 1)), SUBMIT)
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("lease_superseded"))
    );

    // Same submit under attempt 2: occurrence 0 again → replay; then occurrence 1 → proceed.
    let (status, decision) = agent_api
        .send("POST", &format!("{base}/steps"), Some((&d, 2)), SUBMIT)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        decision,
        json!({"decision": "replay", "step_id": step0, "result": ["r1", "r2"]})
    );
    let (_, decision) = agent_api
        .send("POST", &format!("{base}/steps"), Some((&d, 2)), SUBMIT)
        .await;
    assert_eq!(decision, json!({"decision": "proceed", "step_id": step1}));
    let (_, decision) = agent_api
        .send(
            "POST",
            &format!("{base}/steps/{step1}/fail"),
            Some((&d, 2)),
            r#"{"error": {"message": "boom"}}"#,
        )
        .await;
    assert_eq!(decision, json!({"decision": "recorded"}));

    // Reads: the step list is ordered by id; status=terminal filter.
    let (status, steps) = agent_api
        .send("GET", &format!("{base}/steps?status=terminal"), None, "")
        .await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = steps
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_id"].as_str().unwrap())
        .collect();
    let mut sorted = vec![step0.as_str(), step1.as_str()];
    sorted.sort_unstable();
    assert_eq!(ids, sorted);
    let (status, step) = agent_api
        .send("GET", &format!("{base}/steps/{step1}"), None, "")
        .await;
    assert_eq!(status, 200);
    assert_eq!(step["status"], "failed");
    assert_eq!(step["error"], json!({"message": "boom"}));
    assert_eq!(step["occurrence"], 1);
    let (status, _) = agent_api
        .send("GET", &format!("{base}/steps/{}", "0".repeat(64)), None, "")
        .await;
    assert_eq!(status, 404);

    // Complete the execution.
    let (status, _) = agent_api
        .send(
            "POST",
            &format!("{base}/complete"),
            Some((&d, 2)),
            r#"{"output": {"answer": "done"}}"#,
        )
        .await;
    assert_eq!(status, 204);
    let done = kernel
        .wait_terminal(&id, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(done.status, ExecutionStatus::Completed);
    assert_eq!(done.output, Some(json!({"answer": "done"})));

    // Late calls: the lease is retired; completion is terminal.
    let (status, body) = agent_api
        .send("POST", &format!("{base}/heartbeat"), Some((&d, 2)), "")
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("lease_superseded"))
    );
    let (status, body) = agent_api
        .send(
            "POST",
            &format!("{base}/complete"),
            Some((&d, 2)),
            r#"{"output": 1}"#,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("execution_terminal"))
    );
    let (status, body) = agent_api
        .send("POST", &format!("{base}/steps"), Some((&d, 2)), SUBMIT)
        .await;
    assert_eq!(
        (status, body),
        (200, json!({"decision": "execution_terminal"}))
    );

    // The event log.
    let types: Vec<String> = event_types(&kernel, &id)
        .into_iter()
        .filter(|t| t != "dispatch.acked")
        .collect();
    assert_eq!(
        types,
        [
            "execution.created",
            "execution.started",
            "dispatch.queued",
            "step.proposed",
            "step.allowed",
            "step.executing",
            "step.succeeded",
            "step.proposed",
            "step.allowed",
            "step.executing",
            "step.failed",
            "execution.completed",
        ]
    );
    let events = kernel.events(&id);
    assert!(
        events
            .iter()
            .enumerate()
            .all(|(i, e)| e.event_seq == i as u64 + 1)
    );
    let allowed = events.iter().find(|e| e.kind == "step.allowed").unwrap();
    assert_eq!(
        allowed.payload,
        json!({"step_id": step0, "step_type": "tool_call", "target": "search", "rule_id": "permissive"})
    );
    let completed = events.last().unwrap();
    assert_eq!(
        completed.payload,
        json!({"execution_id": id, "status": "completed", "output": {"answer": "done"}})
    );
    let acks = events.iter().filter(|e| e.kind == "dispatch.acked").count();
    assert_eq!(acks, 2);
    let steps = kernel.steps(&id);
    assert_eq!(steps.len(), 2);
    let terminal = ["succeeded", "failed", "denied", "cancelled"];
    assert!(steps.iter().all(|s| terminal.contains(&s.status.as_str())));
    assert!(
        steps
            .iter()
            .any(|s| s.status == "succeeded" && s.result == Some(json!(["r1", "r2"])))
    );

    // Client event paging.
    let (status, page) = client(
        "GET",
        &format!("{}{base}/events?after_seq=2&limit=2", kernel.url()),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200);
    let seqs: Vec<u64> = page
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [3, 4]);
    kernel.shutdown().await;
}

#[tokio::test]
async fn at_most_once_orphan_becomes_indeterminate() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let exec = kernel
        .create_execution(rebuno_devkernel::NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let d = agent.next().await.dispatch_id;
    let api = AgentClient::new(&kernel.url());
    let base = format!("/v0/executions/{}", exec.id);
    let body = r#"{"kind":"tool_call","target":"pay","args":{"n":1},"idempotency":"at_most_once"}"#;
    let (_, first) = api
        .send("POST", &format!("{base}/steps"), Some((&d, 1)), body)
        .await;
    assert_eq!(first["decision"], "proceed");
    kernel.redeliver(&exec.id).unwrap();
    agent.next().await;
    let (_, replay) = api
        .send("POST", &format!("{base}/steps"), Some((&d, 2)), body)
        .await;
    assert_eq!(replay["decision"], "replay");
    assert_eq!(replay["error"]["reason"], "indeterminate");
    // A fresh try of the same effect in this attempt is refused.
    let (_, denied) = api
        .send("POST", &format!("{base}/steps"), Some((&d, 2)), body)
        .await;
    assert_eq!(denied["decision"], "denied");
    assert_eq!(denied["rule_id"], "__indeterminate_retry");
    assert_eq!(
        denied["reason"],
        "prior attempt outcome unknown; retry refused"
    );
    // The orphan's late outcome replays the recorded error.
    let step = first["step_id"].as_str().unwrap();
    let (status, late) = api
        .send(
            "POST",
            &format!("{base}/steps/{step}/complete"),
            Some((&d, 1)),
            r#"{"result": 1}"#,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(late["decision"], "replay");
    assert_eq!(late["error"]["reason"], "indeterminate");
    kernel.shutdown().await;
}

#[tokio::test]
async fn failing_webhook_exhausts_dispatch() {
    let agent = common::FakeAgent::start_with(axum::http::StatusCode::INTERNAL_SERVER_ERROR).await;
    let kernel = rebuno_devkernel::DevKernel::builder()
        .max_attempts(3)
        .retry_backoff(Duration::from_millis(10), Duration::from_millis(40))
        .start()
        .await
        .unwrap();
    kernel
        .register_agent(rebuno_devkernel::AgentSpec::new(
            "hello",
            &agent.url,
            common::SECRET,
        ))
        .unwrap();
    let exec = kernel
        .create_execution(rebuno_devkernel::NewExecution::new("hello", json!(null)))
        .await
        .unwrap();
    let done = kernel
        .wait_terminal(&exec.id, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(done.status, ExecutionStatus::Failed);
    assert_eq!(done.failure_reason, "dispatch_exhausted");
    let types = event_types(&kernel, &exec.id);
    assert_eq!(types.iter().filter(|t| *t == "dispatch.failed").count(), 3);
    assert_eq!(types.last().map(String::as_str), Some("execution.failed"));
    kernel.shutdown().await;
}

#[tokio::test]
async fn expired_lease_is_reclaimed_by_the_sweeper() {
    let mut agent = common::FakeAgent::start().await;
    let kernel = rebuno_devkernel::DevKernel::builder()
        .default_lease_timeout(Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    kernel
        .register_agent(rebuno_devkernel::AgentSpec::new(
            "hello",
            &agent.url,
            common::SECRET,
        ))
        .unwrap();
    let exec = kernel
        .create_execution(rebuno_devkernel::NewExecution::new("hello", json!(1)))
        .await
        .unwrap();
    let first = agent.next().await;
    let second = agent.next().await;
    assert_eq!(first.dispatch_id, second.dispatch_id);
    assert_eq!((first.attempt, second.attempt), (1, 2));
    kernel.cancel(&exec.id).unwrap();
    let done = kernel
        .wait_terminal(&exec.id, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(done.failure_reason, "client_cancelled");
    kernel.shutdown().await;
}

#[tokio::test]
async fn concurrent_identical_submits_get_distinct_occurrences() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let exec = kernel
        .create_execution(rebuno_devkernel::NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let d = agent.next().await.dispatch_id;
    let api = std::sync::Arc::new(AgentClient::new(&kernel.url()));
    let target = format!("/v0/executions/{}/steps", exec.id);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (api, target, d) = (api.clone(), target.clone(), d.clone());
        tasks.push(tokio::spawn(async move {
            api.send("POST", &target, Some((&d, 1)), SUBMIT).await.1["step_id"]
                .as_str()
                .unwrap()
                .to_owned()
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    let hash = identity::args_hash(br#"{"query": "rust"}"#).unwrap();
    let mut expected: Vec<String> = (0..8)
        .map(|occ| identity::step_id(&exec.id, "tool_call", "search", &hash, occ))
        .collect();
    ids.sort();
    expected.sort();
    assert_eq!(ids, expected);
    let occurrences: Vec<u32> = kernel
        .steps(&exec.id)
        .iter()
        .map(|s| s.occurrence)
        .collect();
    assert_eq!(occurrences.len(), 8);
    // An oversized body on an HMAC route is a 401.
    let huge = "x".repeat(11 * 1024 * 1024);
    let (status, _) = api.send("POST", &target, Some((&d, 1)), &huge).await;
    assert_eq!(status, 401);
    kernel.shutdown().await;
}
