//! `ExecutionContext::suspension`: a "framework" that catches the SDK's control flow and returns
//! normally still lets the handler see that the run is suspending, and why; the execution then
//! ends as the suspension says (blocked, cancelled), never completed with the swallowed value;
//! and a resource driver hears how each dispatch ended (`ResourceDriver::release`).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rebuno::resource::DispatchEnd;
use rebuno::{HandlerError, Suspension, Tool, define_tool};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};
use support::*;

const POLICY: &str = "default_action: allow\nrules:\n  - id: ask-first\n    when: { target: deploy }\n    then: { decision: require_approval }\n  - id: llm-ask-first\n    when: { step_kind: llm_call }\n    then: { decision: require_approval }\n";

/// A framework that runs a tool and hands its failure to the model as text, as agent
/// frameworks do: the control flow inside the error is lost to the caller.
async fn framework(tool: &Tool<Value, String>) -> String {
    match tool.call(json!({ "to": "prod" })).await {
        Ok(answer) => answer,
        Err(error) => format!("the tool failed: {error}"),
    }
}

/// What each delivery's handler saw after the framework returned, and a signal when a handler
/// starts.
#[derive(Clone, Default)]
struct Seen {
    suspensions: Arc<Mutex<Vec<Option<Suspension>>>>,
    started: Arc<tokio::sync::Notify>,
}

/// Serves agent `deployer` under [`POLICY`]: it says it started, waits for `go`, runs the
/// framework, notes `suspension()` and returns the framework's answer.
async fn deployer(
    kernel: &DevKernel,
    seen: &Seen,
    go: tokio::sync::watch::Receiver<bool>,
) -> Served {
    let deploy = define_tool("deploy")
        .execute(|_: Value| async { Ok::<_, HandlerError>("deployed".to_owned()) });
    let state = (deploy, seen.clone(), go);
    let agent = agent(kernel, "deployer")
        .handler_with_state(state, |(deploy, seen, mut go), _: Value| async move {
            seen.started.notify_one();
            let _ = go.wait_for(|go| *go).await;
            let answer = framework(&deploy).await;
            let suspension = rebuno::execution()?.suspension();
            seen.suspensions.lock().unwrap().push(suspension);
            Ok::<_, HandlerError>(json!({ "framework": answer }))
        })
        .build()
        .unwrap();
    let served = serve(agent).await;
    let spec = AgentSpec::new("deployer", served.webhook_url(), SECRET).policy_yaml(POLICY);
    kernel.register_agent(spec).unwrap();
    served
}

async fn seen_after(seen: &Seen, count: usize) -> Vec<Option<Suspension>> {
    for _ in 0..2000 {
        if seen.suspensions.lock().unwrap().len() >= count {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    seen.suspensions.lock().unwrap().clone()
}

#[tokio::test]
async fn a_swallowed_approval_block_is_seen_and_the_execution_stays_blocked() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let seen = Seen::default();
    let (_go, going) = tokio::sync::watch::channel(true);
    let served = deployer(&kernel, &seen, going).await;

    let created = kernel
        .create_execution(NewExecution::new("deployer", json!({})))
        .await
        .unwrap();
    let blocked = kernel
        .wait_until(&created.id, WAIT, |s| s == ExecutionStatus::Blocked)
        .await
        .expect("the swallowed block still blocked the execution");
    assert_eq!(seen_after(&seen, 1).await, [Some(Suspension::Blocked)]);
    assert_eq!(blocked.output, None, "the swallowed value was not recorded");
    let events = types(&kernel.events(&created.id));
    assert!(
        !events.iter().any(|t| t == "execution.completed"),
        "{events:?}"
    );

    let approval = kernel.approvals().pop().expect("an approval waits");
    kernel.grant(&approval.id).unwrap();
    let done = kernel.wait_terminal(&created.id, WAIT).await.unwrap();

    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    assert_eq!(done.output, Some(json!({ "framework": "deployed" })));
    assert_eq!(
        seen_after(&seen, 2).await,
        [Some(Suspension::Blocked), None],
        "the delivery after the grant goes on"
    );
    served.shutdown().await;
}

#[tokio::test]
async fn a_swallowed_termination_is_seen_and_the_execution_stays_cancelled() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let seen = Seen::default();
    let (go, going) = tokio::sync::watch::channel(false);
    let served = deployer(&kernel, &seen, going).await;
    let created = kernel
        .create_execution(NewExecution::new("deployer", json!({})))
        .await
        .unwrap();
    tokio::time::timeout(WAIT, seen.started.notified())
        .await
        .expect("the handler started");

    let client = rebuno::client::Client::builder()
        .base_url(kernel.url())
        .build()
        .unwrap();
    client.cancel(&created.id).await.unwrap();
    go.send(true).unwrap();

    assert_eq!(seen_after(&seen, 1).await, [Some(Suspension::Terminated)]);
    served.shutdown().await;
    let done = client.get(&created.id).await.unwrap();
    assert_eq!(done.status, ExecutionStatus::Cancelled);
    assert_eq!(done.output, None);
}

#[tokio::test]
async fn a_provider_sdk_that_turns_a_blocked_llm_call_into_its_own_error_cannot_hide_it() {
    let _trace = trace_init();
    let seen = Seen::default();
    let noted = seen.clone();
    let (kernel, served) = kernel_with_policy("chatter", move |agent| {
        agent.handler_with_state(noted, |seen, _: Value| async move {
            let mut provider =
                tower_layer::Layer::layer(&rebuno::llm::DurableLlmLayer::new(), Canned);
            let request = http::Request::post("http://llm/v1/chat/completions")
                .body(Bytes::from_static(br#"{"model":"m","messages":[]}"#))?;
            // The provider SDK's view: an HTTP 403, which it reports as its own error.
            let answer = tower_service::Service::call(&mut provider, request).await?;
            let status = answer.status().as_u16();
            let suspension = rebuno::execution()?.suspension();
            seen.suspensions.lock().unwrap().push(suspension);
            Ok::<_, HandlerError>(json!({ "provider_status": status }))
        })
    })
    .await;

    let created = kernel
        .create_execution(NewExecution::new("chatter", json!({})))
        .await
        .unwrap();
    let blocked = kernel
        .wait_until(&created.id, WAIT, |s| s == ExecutionStatus::Blocked)
        .await
        .expect("blocked on the approval");

    assert_eq!(seen_after(&seen, 1).await, [Some(Suspension::Blocked)]);
    assert_eq!(blocked.output, None);
    served.shutdown().await;
}

/// [`kernel_with`] under [`POLICY`].
async fn kernel_with_policy(
    agent_id: &str,
    configure: impl FnOnce(rebuno::AgentBuilder) -> rebuno::AgentBuilder,
) -> (DevKernel, Served) {
    let kernel = DevKernel::start().await.unwrap();
    let built = configure(agent(&kernel, agent_id)).build().unwrap();
    let served = serve(built).await;
    let spec = AgentSpec::new(agent_id, served.webhook_url(), SECRET).policy_yaml(POLICY);
    kernel.register_agent(spec).unwrap();
    (kernel, served)
}

/// Serves `keeper` under [`POLICY`]: writes a line to its notebook resource, then deploys
/// (which asks for an approval first).
async fn keeper(kernel: &DevKernel, shelf: support::notebook::Shelf) -> Served {
    let agent = agent(kernel, "keeper")
        .handler_with_state(shelf, |shelf, _: Value| async move {
            let notebook = rebuno::resource::resource(
                "notebook",
                shelf,
                rebuno::resource::Checkpoints::never(),
            )
            .await?;
            let note = define_tool("note")
                .resources(["notebook"])
                .execute(move |_: Value| {
                    let notebook = notebook.clone();
                    async move {
                        notebook
                            .0
                            .lock()
                            .unwrap()
                            .push("before the deploy".to_owned());
                        Ok::<_, HandlerError>("noted".to_owned())
                    }
                });
            note.call(json!({})).await?;
            let deploy = define_tool("deploy")
                .execute(|_: Value| async { Ok::<_, HandlerError>("deployed".to_owned()) });
            Ok::<_, HandlerError>(json!({ "deploy": deploy.call(json!({ "to": "prod" })).await? }))
        })
        .build()
        .unwrap();
    let served = serve(agent).await;
    let spec = AgentSpec::new("keeper", served.webhook_url(), SECRET).policy_yaml(POLICY);
    kernel.register_agent(spec).unwrap();
    served
}

#[tokio::test]
async fn each_dispatch_tells_the_resource_driver_how_it_ended_once() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let shelf = support::notebook::Shelf::default();
    let served = keeper(&kernel, shelf.clone()).await;

    let created = kernel
        .create_execution(NewExecution::new("keeper", json!({})))
        .await
        .unwrap();
    kernel
        .wait_until(&created.id, WAIT, |s| s == ExecutionStatus::Blocked)
        .await
        .expect("blocked on the approval");
    // The dispatch ends after the block is recorded: wait for its release call.
    for _ in 0..500 {
        if !shelf.released.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let before = vec!["before the deploy".to_owned()];
    let blocked = DispatchEnd::Suspended(Suspension::Blocked);
    assert_eq!(*shelf.released.lock().unwrap(), [(before.clone(), blocked)]);

    let approval = kernel.approvals().pop().expect("an approval waits");
    kernel.grant(&approval.id).unwrap();
    let done = kernel.wait_terminal(&created.id, WAIT).await.unwrap();
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    assert_eq!(
        shelf.opened.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the next delivery reopens the binding"
    );
    // The release comes after the kernel recorded the completion.
    for _ in 0..500 {
        if shelf.released.lock().unwrap().len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        *shelf.released.lock().unwrap(),
        [(before.clone(), blocked), (before, DispatchEnd::Completed)],
        "the completed dispatch releases once, after the outcome"
    );
    served.shutdown().await;
}
