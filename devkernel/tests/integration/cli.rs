//! The terminal front end against an in-process kernel: `exec create --watch` and friends,
//! through the `rebuno-dev` binary.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{AgentClient, Run, kernel_with_agent};
use rebuno::wire::ExecutionStatus;
use serde_json::json;

/// `rebuno-dev words... --url=URL`: (exit status, stdout, stderr).
async fn run_cli(url: &str, words: &[&str]) -> (i32, String, String) {
    let url = format!("--url={url}");
    let args: Vec<&str> = words.iter().copied().chain([url.as_str()]).collect();
    common::rebuno_dev(&args).await
}

#[tokio::test]
async fn exec_create_watch_follows_until_completed() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let url = kernel.url();
    // The "agent": completes whatever it is given.
    let finisher = tokio::spawn(async move {
        let delivery = agent.next().await;
        let api = AgentClient::new(&url);
        let target = format!("/v0/executions/{}/complete", delivery.execution_id);
        let lease = Some((delivery.dispatch_id.as_str(), delivery.attempt));
        let (status, _) = api
            .send("POST", &target, lease, r#"{"output":{"ok":true}}"#)
            .await;
        assert_eq!(status, 204);
        (agent, delivery.execution_id)
    });
    let (code, output, _) = run_cli(
        &kernel.url(),
        &["exec", "create", "hello", r#"{"name":"Ada"}"#, "--watch"],
    )
    .await;
    let (mut agent, id) = finisher.await.unwrap();
    assert_eq!(code, 0);
    let lines: Vec<&str> = output.lines().collect();
    assert!(lines[0].starts_with(&id), "{output}");
    assert!(lines[1].contains("execution.created"), "{output}");
    assert!(
        lines.last().unwrap().contains("execution.completed"),
        "{output}"
    );
    assert!(lines.last().unwrap().contains(r#""output":{"ok":true}"#));
    let exec = kernel.execution(&id).unwrap();
    assert_eq!(exec.input, json!({"name": "Ada"}));

    // A cancelled execution exits 1.
    let url = kernel.url();
    let kernel2 = kernel.clone();
    let canceller = tokio::spawn(async move {
        let delivery = agent.next().await;
        kernel2.cancel(&delivery.execution_id).unwrap();
    });
    let (code, output, _) = run_cli(&url, &["exec", "create", "hello", "--watch"]).await;
    canceller.await.unwrap();
    assert_eq!(code, 1);
    assert!(
        output
            .lines()
            .last()
            .unwrap()
            .contains("execution.cancelled")
    );
}

#[tokio::test]
async fn exec_create_watch_shows_live_deltas_of_a_streamed_step() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let driver_kernel = kernel.clone();
    // The "agent": one llm_call step whose answer streams in two deltas, then completes.
    let driver = tokio::spawn(async move {
        let delivery = agent.next().await;
        let id = delivery.execution_id.clone();
        let run = Run {
            id,
            dispatch: delivery.dispatch_id,
            attempt: delivery.attempt,
            api: AgentClient::new(&driver_kernel.url()),
        };
        let decision = run
            .submit(json!({"kind": "llm_call", "target": "gpt-test", "args": {"model": "gpt-test"}, "idempotency": "safe_to_retry"}))
            .await;
        let step = decision["step_id"].as_str().unwrap().to_owned();
        // Give the watcher time to subscribe: deltas are not replayed to late subscribers.
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        for (seq, data) in ["Hel", "lo"].into_iter().enumerate() {
            let body = json!({"seq": seq, "data": data}).to_string();
            let (status, _) = run.post(&format!("/steps/{step}/stream"), &body).await;
            assert_eq!(status, 204);
        }
        // Deltas and the event log travel separately: let the deltas land first.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        run.complete(&step, json!({"result": {"status": 200, "body": "Hello"}}))
            .await;
        let (status, _) = run.post("/complete", r#"{"output":"Hello"}"#).await;
        assert_eq!(status, 204);
    });

    let (code, output, _) = run_cli(&kernel.url(), &["exec", "create", "hello", "--watch"]).await;
    driver.await.unwrap();

    assert_eq!(code, 0);
    let deltas: Vec<&str> = output.lines().filter(|l| l.contains("~  delta")).collect();
    assert_eq!(deltas.len(), 2, "{output}");
    assert!(
        deltas[0].contains("#0") && deltas[0].ends_with("Hel"),
        "{output}"
    );
    assert!(
        deltas[1].contains("#1") && deltas[1].ends_with("lo"),
        "{output}"
    );
}

#[tokio::test]
async fn exec_list_get_events_cancel() {
    let (kernel, _agent) = kernel_with_agent().await;
    let url = kernel.url();
    let (code, created, _) = run_cli(&url, &["exec", "create", "hello", "--session", "s9"]).await;
    assert_eq!(code, 0);
    let id = created.split_whitespace().next().unwrap().to_owned();
    assert!(created.trim_end().ends_with("running"));

    let (_, listed, _) = run_cli(
        &url,
        &["exec", "list", "--agent", "hello", "--status", "running"],
    )
    .await;
    assert!(listed.contains(&id) && listed.contains("hello"), "{listed}");
    let (_, none, _) = run_cli(&url, &["exec", "list", "--status", "failed"]).await;
    assert!(none.is_empty());

    let (_, got, _) = run_cli(&url, &["exec", "get", &id]).await;
    let got: serde_json::Value = serde_json::from_str(&got).unwrap();
    assert_eq!(got["session"], "s9");

    let (code, _, _) = run_cli(&url, &["exec", "cancel", &id]).await;
    assert_eq!(code, 0);
    assert_eq!(
        kernel.execution(&id).unwrap().status,
        ExecutionStatus::Cancelled
    );
    let (_, events, _) = run_cli(&url, &["exec", "events", &id]).await;
    assert!(events.lines().next().unwrap().contains("execution.created"));
    assert!(events.contains("execution.cancelled"));

    // Errors carry the kernel's envelope.
    let (code, _, error) = run_cli(&url, &["exec", "cancel", &id]).await;
    assert_eq!(code, 1);
    assert!(error.contains("409 conflict"), "{error}");
    let (code, _, error) = run_cli(&url, &["exec", "get", "not-a-uuid"]).await;
    assert_eq!(code, 1);
    assert!(error.contains("kernel answered 400 "), "{error}");
    let (code, _, error) = run_cli("http://127.0.0.1:1", &["exec", "list"]).await;
    assert_eq!(code, 1);
    assert!(error.contains("could not reach the kernel"), "{error}");
}

#[tokio::test]
async fn approvals_list_and_decide() {
    let (kernel, mut agent) = kernel_with_agent().await;
    kernel
        .set_policy(
            "hello",
            "rules:\n  - id: gate\n    when: {target: deploy}\n    then: {decision: require_approval, approval_config: {message: ship it}}\n",
        )
        .unwrap();
    let url = kernel.url();
    let (_, created, _) = run_cli(&url, &["exec", "create", "hello"]).await;
    let id = created.split_whitespace().next().unwrap().to_owned();
    let run = common::Run::attach(&kernel, &mut agent, &id).await;
    let blocked = run
        .submit(json!({"kind": "tool_call", "target": "deploy", "args": {}}))
        .await;
    assert_eq!(blocked["decision"], "blocked");
    let approval = blocked["approval_id"].as_str().unwrap().to_owned();

    let (_, listed, _) = run_cli(&url, &["approvals", "list"]).await;
    assert!(
        listed.contains(&approval) && listed.contains("ship it"),
        "{listed}"
    );
    let (code, said, _) = run_cli(
        &url,
        &[
            "approvals",
            "deny",
            &approval,
            "--by",
            "alice",
            "--reason",
            "not today",
        ],
    )
    .await;
    assert_eq!(code, 0);
    assert!(said.contains("denied"));
    let decided = &kernel.steps(&id)[0];
    assert_eq!(decided.status, "denied");
    assert_eq!(decided.error, Some(json!({"reason": "not today"})));
    let (_, denied, _) = run_cli(&url, &["approvals", "list", "--status", "denied"]).await;
    assert!(denied.contains(&approval));
}
