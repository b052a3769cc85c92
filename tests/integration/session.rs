//! Sessions: executions of one session run one at a time, and each reads the state the last
//! completed one left.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

use rebuno::{HandlerError, execution, previous};
use rebuno_devkernel::NewExecution;
use serde_json::{Value, json};
use support::*;

#[tokio::test]
async fn each_turn_continues_from_the_state_the_last_one_left() {
    let _trace = trace_init();
    let (kernel, served) = kernel_with("chat", |agent| {
        agent.handler(|message: String| async move {
            let before = previous().await?;
            let mut history: Vec<String> =
                serde_json::from_value(before["history"].clone()).unwrap_or_default();
            history.push(message);
            execution()?.set_state(json!({ "history": history }))?;
            Ok::<_, HandlerError>(
                json!({ "turns": history.len(), "session": execution()?.session() }),
            )
        })
    })
    .await;

    let mut outputs = Vec::new();
    for message in ["hi", "how are you", "bye"] {
        let created = kernel
            .create_execution(NewExecution::new("chat", json!(message)).session("chat:u1"))
            .await
            .expect("create");
        let done = kernel.wait_terminal(&created.id, WAIT).await.expect("ends");
        assert_eq!(
            done.status,
            ExecutionStatus::Completed,
            "{}",
            done.failure_reason
        );
        outputs.push(done.output.unwrap_or(Value::Null));
    }

    assert_eq!(
        outputs,
        [
            json!({"turns": 1, "session": "chat:u1"}),
            json!({"turns": 2, "session": "chat:u1"}),
            json!({"turns": 3, "session": "chat:u1"})
        ]
    );
    let other = kernel
        .create_execution(NewExecution::new("chat", json!("new")))
        .await
        .expect("create");
    let done = kernel.wait_terminal(&other.id, WAIT).await.expect("ends");
    assert_eq!(
        done.output,
        Some(json!({"turns": 1, "session": null})),
        "no session, no previous state"
    );
    served.shutdown().await;
}

#[tokio::test]
async fn executions_of_one_session_wait_their_turn() {
    let _trace = trace_init();
    let (release, released) = tokio::sync::watch::channel(false);
    let (kernel, served) = kernel_with("queue", move |agent| {
        agent.handler_with_state(released, |mut released, n: u32| async move {
            let _ = released.wait_for(|go| *go).await;
            Ok::<_, HandlerError>(n)
        })
    })
    .await;
    let first = kernel
        .create_execution(NewExecution::new("queue", json!(1)).session("s"))
        .await
        .expect("first");
    let second = kernel
        .create_execution(NewExecution::new("queue", json!(2)).session("s"))
        .await
        .expect("second");

    assert_eq!(first.status, ExecutionStatus::Running);
    assert_eq!(
        second.status,
        ExecutionStatus::Pending,
        "the session is busy"
    );
    release.send(true).expect("release");
    let done = kernel
        .wait_terminal(&second.id, WAIT)
        .await
        .expect("second ends");
    assert_eq!(done.output, Some(json!(2)));
    let started = kernel
        .events(&second.id)
        .into_iter()
        .find(|e| e.kind == "execution.started")
        .expect("started later");
    assert_eq!(
        started.payload["parent_execution_id"],
        json!(first.id.to_string())
    );
    served.shutdown().await;
}
