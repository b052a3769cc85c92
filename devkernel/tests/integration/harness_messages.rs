//! What the harness says when a test goes wrong: a wait on an execution that already ended
//! returns at once with how it ended, a timeout says where the execution stands, a failed
//! execution's output names its failure, and a typo in an id is named.

use std::time::{Duration, Instant};

use rebuno::wire::ExecutionStatus;
use rebuno::{Agent, HandlerError, define_tool};
use rebuno_devkernel::{
    AgentSpec, DevKernel, DevKernelError, EventKind, ExecutionExt, NewExecution,
};
use serde_json::{Value, json};

/// An agent whose handler fails with a reason a test can look for.
fn broken() -> rebuno::AgentBuilder {
    Agent::builder("broken").handler(|_: Value| async move {
        Err::<Value, _>(HandlerError::from("the CRM is unreachable"))
    })
}

const GATED: &str =
    "rules:\n  - {id: gate, when: {target: deploy}, then: {decision: require_approval}}\n";

/// An agent that blocks on an approval for `deploy`.
async fn blocked(kernel: &DevKernel) -> (rebuno_devkernel::ServedAgent, String) {
    let deploy =
        define_tool("deploy").execute(|env: String| async move { Ok::<_, HandlerError>(env) });
    let served = kernel
        .serve(Agent::builder("deployer").handler(move |env: String| {
            let deploy = deploy.clone();
            async move { Ok::<_, HandlerError>(deploy.call(env).await?) }
        }))
        .await
        .unwrap();
    kernel.set_policy("deployer", GATED).unwrap();
    let created = kernel
        .create_execution(NewExecution::new("deployer", json!("prod")))
        .await
        .unwrap();
    kernel
        .wait_until(&created.id, Duration::from_secs(10), |s| {
            s == ExecutionStatus::Blocked
        })
        .await
        .unwrap();
    (served, created.id)
}

#[tokio::test]
async fn a_wait_on_a_failed_execution_returns_at_once_with_its_reason() {
    let kernel = DevKernel::start().await.unwrap();
    let served = kernel.serve(broken()).await.unwrap();
    let done = kernel.run("broken", json!({})).await.unwrap();
    assert_eq!(done.status, ExecutionStatus::Failed);

    let started = Instant::now();
    let error = kernel
        .wait_until(&done.id, Duration::from_secs(10), |s| {
            s == ExecutionStatus::Blocked
        })
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited the timeout"
    );
    let text = error.to_string();
    assert!(text.contains("failed"), "{text}");
    assert!(text.contains("the CRM is unreachable"), "{text}");
    assert!(text.contains(&done.id), "{text}");
    assert!(
        matches!(&error, DevKernelError::Ended { execution, .. } if execution.status == ExecutionStatus::Failed),
        "{error:?}"
    );

    // The same for an event that will never come.
    let started = Instant::now();
    let error = kernel
        .wait_for_event(
            &done.id,
            EventKind::ApprovalRequested,
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited the timeout"
    );
    let text = error.to_string();
    assert!(text.contains("approval.requested"), "{text}");
    assert!(text.contains("the CRM is unreachable"), "{text}");
    served.shutdown().await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_wait_that_times_out_says_where_the_execution_stands() {
    let kernel = DevKernel::start().await.unwrap();
    let (served, id) = blocked(&kernel).await;

    let error = kernel
        .wait_terminal(&id, Duration::from_millis(100))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("timed out after 100ms"), "{text}");
    assert!(text.contains("blocked"), "{text}");
    assert!(text.contains("approval.requested"), "last events: {text}");
    assert!(matches!(error, DevKernelError::Timeout { .. }), "{error:?}");

    let error = kernel
        .wait_for_event(
            &id,
            EventKind::ExecutionCompleted,
            Duration::from_millis(100),
        )
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("execution.completed"), "{text}");
    assert!(text.contains("blocked"), "{text}");
    // A test returning `Result` prints the error's `Debug`: the same sentence.
    assert_eq!(format!("{error:?}"), text);
    served.shutdown().await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn the_output_of_a_failed_execution_names_its_failure() {
    let kernel = DevKernel::start().await.unwrap();
    let served = kernel.serve(broken()).await.unwrap();
    let done = kernel.run("broken", json!({})).await.unwrap();
    let text = done.output_as::<String>().unwrap_err().to_string();
    assert!(text.contains("failed"), "{text}");
    assert!(text.contains("the CRM is unreachable"), "{text}");
    assert!(!text.contains("invalid type"), "{text}");
    served.shutdown().await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn run_completed_returns_a_completed_execution_or_says_why_not() {
    let kernel = DevKernel::start().await.unwrap();
    let hello = Agent::builder("hello")
        .handler(|name: String| async move { Ok::<_, HandlerError>(format!("hello, {name}")) });
    let served = kernel.serve(hello).await.unwrap();
    let done = kernel.run_completed("hello", json!("Ada")).await.unwrap();
    assert_eq!(done.output_as::<String>().unwrap(), "hello, Ada");
    served.shutdown().await;

    let served = kernel.serve(broken()).await.unwrap();
    let error = kernel.run_completed("broken", json!({})).await.unwrap_err();
    let text = error.to_string();
    assert!(text.contains("failed"), "{text}");
    assert!(text.contains("the CRM is unreachable"), "{text}");
    assert!(text.contains("execution.failed"), "last events: {text}");
    assert!(matches!(error, DevKernelError::Ended { .. }), "{error:?}");
    served.shutdown().await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_typo_in_an_agent_id_is_named_with_the_registered_ones() {
    let kernel = DevKernel::start().await.unwrap();
    kernel
        .register_agent(AgentSpec::new("triage", "http://127.0.0.1:9/webhook", "s"))
        .unwrap();
    let error = kernel.run("triage-bot", json!({})).await.unwrap_err();
    let text = error.to_string();
    assert!(text.contains(r#"agent "triage-bot""#), "{text}");
    assert!(text.contains(r#"registered: "triage""#), "{text}");
    assert!(format!("{error:?}").contains("triage-bot"), "{error:?}");
    let error = kernel
        .run_completed("triage-bot", json!({}))
        .await
        .unwrap_err();
    assert!(error.to_string().contains(r#""triage-bot""#), "{error}");

    for error in [
        kernel
            .set_policy("triage-bot", "default_action: allow")
            .unwrap_err(),
        kernel.rotate_secret("triage-bot", "new").unwrap_err(),
        kernel.retire_previous_secret("triage-bot").unwrap_err(),
    ] {
        let text = error.to_string();
        assert!(text.contains(r#"agent "triage-bot""#), "{text}");
        assert!(text.contains(r#"registered: "triage""#), "{text}");
    }
    let nobody = uuid::Uuid::now_v7().to_string();
    for error in [
        kernel.grant(&nobody).unwrap_err(),
        kernel.cancel(&nobody).unwrap_err(),
        kernel.fork_points(&nobody).unwrap_err(),
    ] {
        let text = error.to_string();
        assert!(text.contains(&nobody), "{text}");
    }
    kernel.shutdown().await;
}

/// Over HTTP too, an unknown agent's 404 names the id (the code stays `not_found`).
#[tokio::test]
async fn creating_for_an_unknown_agent_names_it_over_http() {
    let kernel = DevKernel::start().await.unwrap();
    let (status, body) = crate::common::client(
        "POST",
        &format!("{}/v0/executions", kernel.url()),
        None,
        Some(r#"{"agent_id":"triage-bot","input":{}}"#),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], "not_found", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("\"triage-bot\""),
        "{body}"
    );
    kernel.shutdown().await;
}
