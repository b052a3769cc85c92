//! Rate limits (refuse and park) and token budgets of policy rules.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{AgentClient, FakeAgent, SECRET};
use rebuno::wire::ExecutionStatus;
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::json;

fn submit(kind: &str, target: &str, n: u32) -> String {
    json!({"kind": kind, "target": target, "args": {"n": n}}).to_string()
}

const BUNDLE: &str = r#"
default_action: allow
rules:
  - id: search-limit
    when: { target: search }
    then: { decision: allow, rate_limit: { max_calls: 2, window: 1m } }
  - id: fetch-park
    when: { target: fetch }
    then: { decision: allow, rate_limit: { max_calls: 1, window: 300ms, max_wait: 5s } }
  - id: llm-budget
    when: { step_kind: llm_call }
    then: { decision: allow, budget: { max_tokens: 10 } }
"#;

#[tokio::test]
async fn rate_limits_refuse_then_park() {
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
    let d = agent.next().await.dispatch_id;
    let api = AgentClient::new(&kernel.url());
    let steps = format!("/v0/executions/{}/steps", exec.id);

    for n in 0..2 {
        let (_, ok) = api
            .send(
                "POST",
                &steps,
                Some((&d, 1)),
                &submit("tool_call", "search", n),
            )
            .await;
        assert_eq!(ok["decision"], "proceed");
    }
    let (_, limited) = api
        .send(
            "POST",
            &steps,
            Some((&d, 1)),
            &submit("tool_call", "search", 9),
        )
        .await;
    assert_eq!(
        limited,
        json!({"decision": "rate_limited", "reason": "rate_limit_exceeded"})
    );
    assert_eq!(
        kernel.steps(&exec.id).len(),
        2,
        "no step row for a rate-limited submit"
    );
    let event = kernel
        .events(&exec.id)
        .into_iter()
        .find(|e| e.kind == "step.rate_limited")
        .unwrap();
    assert_eq!(
        event.payload["error"],
        json!({"reason": "rate_limit_exceeded", "rule_id": "search-limit"})
    );

    // max_wait: the first over-limit call parks the execution on a fresh dispatch.
    let (_, first) = api
        .send(
            "POST",
            &steps,
            Some((&d, 1)),
            &submit("tool_call", "fetch", 1),
        )
        .await;
    assert_eq!(first["decision"], "proceed");
    let (_, parked) = api
        .send(
            "POST",
            &steps,
            Some((&d, 1)),
            &submit("tool_call", "fetch", 2),
        )
        .await;
    assert_eq!(
        parked,
        json!({"decision": "blocked", "reason": "rate_limit_exceeded"})
    );
    assert_eq!(
        kernel.execution(&exec.id).unwrap().status,
        ExecutionStatus::Running
    );
    let (status, _) = api
        .send(
            "POST",
            &format!("/v0/executions/{}/heartbeat", exec.id),
            Some((&d, 1)),
            "",
        )
        .await;
    assert_eq!(status, 409, "the park retired the dispatch");
    let next = agent.next().await;
    assert_ne!(next.dispatch_id, d);
    assert_eq!(next.attempt, 1);
    let (_, resumed) = api
        .send(
            "POST",
            &steps,
            Some((&next.dispatch_id, 1)),
            &submit("tool_call", "fetch", 2),
        )
        .await;
    assert_eq!(resumed["decision"], "proceed");
    // Only one park per execution: the next over-limit call is refused.
    let (_, refused) = api
        .send(
            "POST",
            &steps,
            Some((&next.dispatch_id, 1)),
            &submit("tool_call", "fetch", 3),
        )
        .await;
    assert_eq!(refused["decision"], "rate_limited");
    kernel.shutdown().await;
}

#[tokio::test]
async fn token_budget_denies_once_spent() {
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
    let d = agent.next().await.dispatch_id;
    let api = AgentClient::new(&kernel.url());
    let steps = format!("/v0/executions/{}/steps", exec.id);
    let (_, ok) = api
        .send("POST", &steps, Some((&d, 1)), &submit("llm_call", "gpt", 1))
        .await;
    assert_eq!(ok["decision"], "proceed");
    let step = ok["step_id"].as_str().unwrap();
    let result = json!({"result": {"usage": {"input_tokens": 7, "output_tokens": 5}}}).to_string();
    api.send(
        "POST",
        &format!("{steps}/{step}/complete"),
        Some((&d, 1)),
        &result,
    )
    .await;
    let (_, denied) = api
        .send("POST", &steps, Some((&d, 1)), &submit("llm_call", "gpt", 2))
        .await;
    assert_eq!(denied["decision"], "denied");
    assert_eq!(denied["reason"], "execution_token_budget_exceeded");
    assert_eq!(denied["rule_id"], "llm-budget");
    kernel.shutdown().await;
}
