//! Subagents: tool calls that run another agent, suspend the parent while they wait, and replay
//! their outcomes when the parent reruns.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rebuno::{HandlerError, define_tool, subagent};
use rebuno_devkernel::{AgentSpec, DevKernel};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::*;

#[derive(Serialize, Deserialize, Clone)]
struct Topic {
    topic: String,
}

/// Serves the child `researcher` (fails on topic "doom") and registers it.
async fn researcher(kernel: &DevKernel) -> Served {
    let agent = agent(kernel, "researcher")
        .handler(|input: Topic| async move {
            if input.topic == "doom" {
                return Err(HandlerError::from("no data on doom"));
            }
            Ok(json!({ "summary": format!("all about {}", input.topic) }))
        })
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("researcher", served.webhook_url(), SECRET))
        .expect("register child");
    served
}

/// Serves the parent `lead`, whose handler researches every topic concurrently.
async fn lead(kernel: &DevKernel, bodies: Arc<AtomicUsize>) -> Served {
    let research = define_tool("research").execute(move |args: Topic| {
        bodies.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<Value, HandlerError>(subagent("researcher", &args).await?) }
    });
    let agent = agent(kernel, "lead")
        .handler_with_state(research, |research, topics: Vec<String>| async move {
            let calls = topics
                .into_iter()
                .map(|topic| research.call(Topic { topic }));
            let results = futures_util::future::try_join_all(calls).await?;
            Ok::<_, HandlerError>(results)
        })
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("lead", served.webhook_url(), SECRET))
        .expect("register parent");
    served
}

#[tokio::test]
async fn concurrent_subagents_suspend_the_parent_and_replay_after_they_settle() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let child = researcher(&kernel).await;
    let bodies = Arc::new(AtomicUsize::new(0));
    let parent = lead(&kernel, Arc::clone(&bodies)).await;

    let done = run(&kernel, "lead", json!(["rust", "wasm"])).await;

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(
        done.output,
        Some(json!([{ "summary": "all about rust" }, { "summary": "all about wasm" }]))
    );
    assert_eq!(
        bodies.load(Ordering::SeqCst),
        2,
        "each tool body ran once; the rerun replayed"
    );
    let events = kernel.events(&done.id);
    let blocked = events
        .iter()
        .find(|e| e.kind == "execution.blocked")
        .expect("the parent suspended");
    assert_eq!(blocked.payload["reason"], "awaiting_steps");
    assert!(events.iter().any(|e| e.kind == "execution.resumed"));
    let client = rebuno::client::Client::builder()
        .base_url(kernel.url())
        .build()
        .expect("client");
    let children = client
        .list()
        .agent_id("researcher")
        .send()
        .await
        .expect("list")
        .executions;
    assert_eq!(children.len(), 2);
    for child in &children {
        assert_eq!(
            child.spawned_by.as_ref().map(|s| s.execution_id.clone()),
            Some(done.id.to_string())
        );
    }
    parent.shutdown().await;
    child.shutdown().await;
}

#[tokio::test]
async fn a_failed_subagent_is_a_tool_error_of_the_parent() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let child = researcher(&kernel).await;
    let parent = lead(&kernel, Arc::new(AtomicUsize::new(0))).await;

    let done = run(&kernel, "lead", json!(["doom"])).await;

    assert_eq!(done.status, ExecutionStatus::Failed);
    assert!(
        done.failure_reason.starts_with("tool_error: research: "),
        "{}",
        done.failure_reason
    );
    assert!(
        done.failure_reason.contains("subagent_failed"),
        "{}",
        done.failure_reason
    );
    parent.shutdown().await;
    child.shutdown().await;
}
