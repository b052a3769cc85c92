//! Policy decisions reach the handler as the seeds describe: a denied tool returns a string, a
//! denied step fails, an approval blocks and resumes, a cancelled execution stops the handler.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rebuno::client::Client;
use rebuno::{ErrorKind, HandlerError, define_tool, step};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::*;

const POLICY: &str = r#"
default_action: allow
rules:
  - id: no-shell
    when: { target: shell }
    then: { decision: deny, reason: "shell is off limits" }
  - id: no-dice
    when: { step_kind: local, target: roll_dice }
    then: { decision: deny, reason: no_gambling }
  - id: mail-needs-a-human
    when: { target: send_email }
    then: { decision: require_approval }
  - id: ping-once-a-minute
    when: { target: ping }
    then: { decision: allow, rate_limit: { max_calls: 1, window: 1m, per_what: execution } }
"#;

#[derive(Serialize, Deserialize)]
struct Command {
    cmd: String,
}

/// Serves `agent_id`, its handler set by `configure`, under [`POLICY`].
async fn start(
    agent_id: &str,
    configure: impl FnOnce(rebuno::AgentBuilder) -> rebuno::AgentBuilder,
) -> (DevKernel, Served, Client) {
    let kernel = DevKernel::start().await.expect("kernel");
    let agent = configure(agent(&kernel, agent_id))
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new(agent_id, served.webhook_url(), SECRET).policy_yaml(POLICY))
        .expect("register");
    let client = Client::builder()
        .base_url(kernel.url())
        .build()
        .expect("client");
    (kernel, served, client)
}

#[tokio::test]
async fn a_denied_tool_returns_the_refusal_as_its_result() {
    let _trace = trace_init();
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ran);
    let (kernel, served, _) = start("ops", move |agent| {
        let shell = define_tool("shell").execute(move |args: Command| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, HandlerError>(args.cmd) }
        });
        agent.handler_with_state(shell, |shell, _: Value| async move {
            let as_llm_sees_it = shell.call_json(json!({ "cmd": "rm -rf /" })).await?;
            let typed = shell.call(Command { cmd: "ls".into() }).await.unwrap_err();
            assert_eq!(
                (typed.kind(), typed.reason(), typed.rule_id()),
                (
                    ErrorKind::Policy,
                    Some("shell is off limits"),
                    Some("no-shell")
                )
            );
            Ok::<_, HandlerError>(as_llm_sees_it)
        })
    })
    .await;

    let done = run(&kernel, "ops", json!({})).await;

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(
        done.output,
        Some(json!("shell not allowed. reason: shell is off limits"))
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    let denied: Vec<_> = kernel
        .events(&done.id)
        .into_iter()
        .filter(|e| e.kind == "step.denied")
        .collect();
    assert_eq!(denied.len(), 2);
    assert_eq!(denied[0].payload["rule_id"], "no-shell");
    served.shutdown().await;
}

#[tokio::test]
async fn a_denied_step_fails_the_execution_with_its_reason() {
    let _trace = trace_init();
    let (kernel, served, _) = start("gambler", |agent| {
        agent.handler(|_: Value| async {
            let roll: u32 = step("roll_dice", || async { Ok::<_, HandlerError>(4) }).await?;
            Ok::<_, HandlerError>(roll)
        })
    })
    .await;

    let done = run(&kernel, "gambler", json!({})).await;

    assert_eq!(done.status, ExecutionStatus::Failed);
    assert_eq!(done.failure_reason, "no_gambling");
    served.shutdown().await;
}

#[tokio::test]
async fn an_approval_blocks_the_execution_until_a_client_grants_it() {
    let _trace = trace_init();
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&sent);
    let (kernel, served, client) = start("mailer", move |agent| {
        let send = define_tool("send_email")
            .idempotency(rebuno::Idempotency::AtMostOnce)
            .execute(move |args: Command| {
                counter.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, HandlerError>(format!("sent {}", args.cmd)) }
            });
        agent.handler_with_state(send, |send, _: Value| async move {
            Ok::<_, HandlerError>(
                send.call(Command {
                    cmd: "report".into(),
                })
                .await?,
            )
        })
    })
    .await;

    let created = kernel
        .create_execution(NewExecution::new("mailer", json!({})))
        .await
        .expect("create");
    let blocked = kernel
        .wait_until(&created.id, WAIT, |s| s == ExecutionStatus::Blocked)
        .await
        .expect("execution blocks on the approval");
    assert_eq!(blocked.status, ExecutionStatus::Blocked);
    assert_eq!(
        sent.load(Ordering::SeqCst),
        0,
        "nothing runs before the grant"
    );

    let pending = client.approvals().send().await.expect("list approvals");
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].execution_id, created.id.to_string());
    client
        .grant(&pending[0].id)
        .by("alice")
        .rationale("looks fine")
        .send()
        .await
        .expect("grant");
    let done = kernel.wait_terminal(&created.id, WAIT).await.expect("ends");

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(done.output, Some(json!("sent report")));
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    let types = types(&kernel.events(&created.id));
    for expected in [
        "step.awaiting_approval",
        "approval.requested",
        "execution.blocked",
        "approval.granted",
        "execution.resumed",
    ] {
        assert!(
            types.iter().any(|t| t == expected),
            "missing {expected} in {types:?}"
        );
    }
    let acks = types.iter().filter(|t| *t == "dispatch.acked").count();
    assert_eq!(acks, 2, "the grant re-dispatches the execution");
    served.shutdown().await;
}

#[tokio::test]
async fn a_denied_approval_returns_the_rationale_to_the_tool_caller() {
    let _trace = trace_init();
    let (kernel, served, client) = start("mailer", |agent| {
        let send = define_tool("send_email")
            .execute(|args: Command| async move { Ok::<_, HandlerError>(args.cmd) });
        agent.handler_with_state(send, |send, _: Value| async move {
            Ok::<_, HandlerError>(send.call_json(json!({ "cmd": "spam" })).await?)
        })
    })
    .await;

    let created = kernel
        .create_execution(NewExecution::new("mailer", json!({})))
        .await
        .expect("create");
    kernel
        .wait_until(&created.id, WAIT, |s| s == ExecutionStatus::Blocked)
        .await
        .expect("blocks");
    let pending = client.approvals().send().await.expect("approvals");
    client
        .deny(&pending[0].id)
        .by("bob")
        .rationale("not today")
        .send()
        .await
        .expect("deny");
    let done = kernel.wait_terminal(&created.id, WAIT).await.expect("ends");

    assert_eq!(
        done.output,
        Some(json!("send_email not allowed. reason: not today"))
    );
    served.shutdown().await;
}

#[tokio::test]
async fn a_cancelled_execution_stops_its_handler_without_failing_it() {
    let _trace = trace_init();
    let (release, released) = tokio::sync::watch::channel(false);
    let steps_after_cancel = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&steps_after_cancel);
    let (kernel, served, client) = start("patient", move |agent| {
        agent.handler_with_state(
            (released, counter),
            |(mut released, counter), _: Value| async move {
                let _ = released.wait_for(|go| *go).await;
                let outcome = step("after", || async { Ok::<_, HandlerError>(1) }).await;
                if outcome.is_ok() {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                let _swallowed = outcome; // a handler that swallows the control flow still stops
                Ok::<_, HandlerError>("finished anyway")
            },
        )
    })
    .await;

    let created = kernel
        .create_execution(NewExecution::new("patient", json!({})))
        .await
        .expect("create");
    kernel
        .wait_until(&created.id, WAIT, |_| true)
        .await
        .expect("exists");
    client.cancel(&created.id).await.expect("cancel");
    release.send(true).expect("release");
    served.shutdown().await;

    let done = client.get(&created.id).await.expect("get");
    assert_eq!(done.status, rebuno::wire::ExecutionStatus::Cancelled);
    assert_eq!(done.failure_reason, "client_cancelled");
    assert_eq!(steps_after_cancel.load(Ordering::SeqCst), 0);
    let types = types(&kernel.events(&created.id));
    assert!(
        !types
            .iter()
            .any(|t| t == "execution.completed" || t == "execution.failed"),
        "{types:?}"
    );
}

#[tokio::test]
async fn a_rate_limited_call_fails_the_execution_with_the_limit_reason() {
    let _trace = trace_init();
    let (kernel, served, _) = start("pinger", |agent| {
        let ping = define_tool("ping")
            .execute(|_: Value| async { Ok::<_, HandlerError>("pong".to_owned()) });
        agent.handler_with_state(ping, |ping, _: Value| async move {
            ping.call(json!({ "n": 1 })).await?;
            let refused = ping.call(json!({ "n": 2 })).await.unwrap_err();
            assert_eq!(
                (refused.kind(), refused.reason()),
                (ErrorKind::RateLimited, Some("rate_limit_exceeded"))
            );
            Err::<Value, HandlerError>(refused.into())
        })
    })
    .await;

    let done = run(&kernel, "pinger", json!({})).await;

    assert_eq!(done.status, ExecutionStatus::Failed);
    assert_eq!(done.failure_reason, "rate_limit_exceeded");
    assert!(
        types(&kernel.events(&done.id))
            .iter()
            .any(|t| t == "step.rate_limited")
    );
    served.shutdown().await;
}
