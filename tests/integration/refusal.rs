//! A refusal that reaches the handler inside another library's error still means what the
//! kernel decided: a denial fails the execution with its reason, a block ends the dispatch.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

use rebuno::HandlerError;
use serde_json::{Value, json};
use support::*;

/// What a provider SDK raises when the durable LLM transport answers with a refusal.
#[derive(Debug)]
struct ProviderError(String);

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "provider returned 403: {}", self.0)
    }
}

impl std::error::Error for ProviderError {}

#[tokio::test]
async fn a_wrapped_denial_fails_the_execution_with_its_reason() {
    let _trace = trace_init();
    let (kernel, served) = kernel_with("llm-user", |agent| {
        agent.handler(|_: Value| async {
            let body = r#"{"error":{"type":"rebuno_refusal","message":"rebuno_refusal: denied reason=no_gpt"}}"#;
            Err::<Value, _>(HandlerError::from(ProviderError(body.into())))
        })
    })
    .await;

    let done = run(&kernel, "llm-user", json!({})).await;

    assert_eq!(done.status, ExecutionStatus::Failed);
    assert_eq!(done.failure_reason, "no_gpt");
    served.shutdown().await;
}

#[tokio::test]
async fn a_wrapped_block_ends_the_dispatch_without_failing() {
    let _trace = trace_init();
    let (kernel, served) = kernel_with("llm-waiter", |agent| {
        agent.handler(|_: Value| async {
            Err::<Value, _>(HandlerError::from(ProviderError(
                "rebuno_refusal: blocked".into(),
            )))
        })
    })
    .await;
    let created = kernel
        .create_execution(rebuno_devkernel::NewExecution::new("llm-waiter", json!({})))
        .await
        .unwrap();
    for _ in 0..100 {
        if kernel
            .events(&created.id)
            .iter()
            .any(|e| e.kind == "dispatch.acked")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    served.shutdown().await; // drains the run

    let after = kernel.execution(&created.id).unwrap();
    assert_eq!(
        after.status,
        ExecutionStatus::Running,
        "a block is not a failure"
    );
    assert!(
        !types(&kernel.events(&created.id))
            .iter()
            .any(|t| t == "execution.failed")
    );
}
